//! The execution cache of the owned partitions: what it holds, what it weighs, and what is
//! dropped.
//!
//! The cache is bounded by bytes (`cache_bytes`): each cached execution weighs its view
//! ([`view_bytes`]) plus its parked run's [`WorkflowRun::resident_bytes`]; between batches
//! [`Processor::evict`] drops whole executions, as the [cache policy](crate::cache) (a weighted
//! S3-FIFO, which keeps hitting under cyclic access where LRU never does) picks them.
//!
//! Invariant: an execution touched by a batch the store does not hold yet is *pinned* (its
//! `pinned_until` is later than the materialiser's last job): it is never evicted and never
//! rebuilt from the store, which would read a history that is behind memory. A run is dropped
//! for room ([`Processor::make_room`]) only if it can be rebuilt: not pinned, not touched by
//! the batch being built.

use super::Live;
use super::Processor;
use super::effect::Batch;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::projection::ExecutionView;
use crate::rows::ExecutionState;
use crate::runner::WorkflowRun;
use crate::runner::WorkflowRunner;
use chrono::DateTime;
use chrono::Utc;
use serde_json::Value;

impl<R: WorkflowRunner> Processor<R> {
    /// The host had no room for `id`'s run: drops the parked run the cache policy would evict
    /// first among those that can be rebuilt from the store (not `id`, not one this batch
    /// touched, not one pinned by a batch the store lacks), so that its instance is free for
    /// the retry; its view stays. Parked runs hold instances for as long as their executions
    /// wait; without this, a pool full of them would defer every new start until one of them
    /// finished. (The worker sizes its pool from `cache_bytes`, so this is the exception.)
    pub(super) fn make_room(&mut self, id: &ExecutionId, batch: &Batch) {
        let materialised = self.materialised;
        let cache = &self.cache;
        let victim = self.policy.evict_one(|other| {
            other == id
                || batch.touched.contains(other)
                || cache
                    .get(other)
                    .is_none_or(|live| live.run.is_none() || live.pinned_until > materialised)
        });
        let Some((other, _)) = victim else {
            return;
        };
        if let Some(live) = self.cache.get_mut(&other) {
            tracing::info!(execution = %id, evicted = %other, "no room for a run: a parked run is dropped");
            live.run = None;
            self.stats.evicted_for_room += 1;
        }
        // Weighed again (now without its run) at the next eviction.
        self.accessed.insert(other);
    }

    /// After the batch of time `at` that touched `touched` committed as the materialiser's
    /// job `number`: those executions stay pinned until it is in the store.
    pub fn committed<'a>(
        &mut self,
        touched: impl IntoIterator<Item = &'a ExecutionId>,
        number: u64,
        at: DateTime<Utc>,
    ) {
        for id in touched {
            if let Some(live) = self.cache.get_mut(id) {
                live.pinned_until = number;
                live.stepped_at = Some(at);
            }
        }
    }

    /// The fewest parked runs there were when the host had no room for another run: what
    /// its pool really parks (admission keeps below it). `None` until the pool was full.
    pub fn capacity_seen(&self) -> Option<usize> {
        self.capacity_seen
    }

    /// Executions in flight for admission: those whose start is deferred, whatever their age
    /// (they wait for an instance, not for an answer: before, a deferral retried after 16 s,
    /// 32 s, 60 s fell out of the count, admission opened again, the new starts were deferred
    /// too and dropped runs of executions in flight for room, and at 20 000 executions through
    /// the activity topics nothing finished), and running ones, parked in memory or not (a run
    /// dropped for room is still in flight: counting only parked runs let admission open
    /// again as the pool dropped them), that a committed batch stepped at `since` or later.
    /// A running one waiting longer (for a child, a delay, a slow external activity) is not
    /// counted: dropping its run costs one rebuild when it wakes, and counting it would let
    /// waiting parents keep their own children out.
    pub fn recently_stepped(&self, since: DateTime<Utc>) -> usize {
        let running = self
            .cache
            .iter()
            .filter(|(id, live)| {
                live.view.state == ExecutionState::Running
                    && !self.deferred.contains_key(*id)
                    && live.stepped_at.is_some_and(|at| at >= since)
            })
            .count();
        running + self.deferred.len()
    }

    /// Keeps what the cache holds within `cache_bytes` (and at most `cache_size` parked runs):
    /// the executions used since the last call are weighed (their views and parked runs) and
    /// told to the cache policy, which picks the executions to forget, run and view. Executions
    /// pinned by a batch not yet materialised (`materialised` = the materialiser's last job in
    /// the store) are kept whatever the weight: a rebuild would read a store that is behind.
    /// Call it only between batches.
    pub fn evict(&mut self, materialised: u64) {
        self.materialised = materialised;
        for id in std::mem::take(&mut self.accessed) {
            match self.cache.get(&id) {
                Some(live) => self.policy.touch(&id, weight(live)),
                None => self.policy.remove(&id),
            }
        }
        let limit = self.config.cache_size.max(1);
        let mut parked = self.parked();
        while self.policy.weight() > self.policy.capacity() || parked > limit {
            let cache = &self.cache;
            let victim = self.policy.evict_one(|id| {
                cache
                    .get(id)
                    .is_some_and(|live| live.pinned_until > materialised)
            });
            let Some((id, _)) = victim else {
                break; // all pinned
            };
            if let Some(live) = self.cache.swap_remove(&id) {
                debug_assert!(
                    live.pinned_until <= materialised,
                    "{id}: evicted while batch {} is not in the store",
                    live.pinned_until
                );
                if live.run.is_some() {
                    parked -= 1;
                }
            }
        }
    }

    /// The bytes the cache policy counts for the cached executions (at the last
    /// [`Processor::evict`]).
    pub fn held_bytes(&self) -> u64 {
        self.policy.weight()
    }

    /// Forgets everything (after an aborted transaction or a rebalance: runs in memory may
    /// have moved past what is committed).
    pub fn clear(&mut self) {
        self.schedules.clear();
        self.batches.clear();
        self.correlations.clear();
        self.slots.clear();
        self.take_over_effects.clear();
        self.cache.clear();
        self.deferred.clear();
        self.retries.clear();
        self.policy.clear();
        self.accessed.clear();
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    pub fn parked(&self) -> usize {
        self.cache.values().filter(|l| l.run.is_some()).count()
    }
}

/// What a cached execution weighs: its view and its parked run, if any.
fn weight<Run: WorkflowRun>(live: &Live<Run>) -> u64 {
    let run = live.run.as_ref().map_or(0, |run| run.resident_bytes());
    (view_bytes(&live.view) + run) as u64
}

/// An estimate of the memory an execution's view holds: the entry itself, its params, result
/// and metadata, and about 64 bytes per journalled response (its id in `responses_seen`,
/// and the pending request it answered).
pub fn view_bytes(view: &ExecutionView) -> usize {
    let created = &view.created;
    let metadata: usize = created
        .metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + 48)
        .sum();
    let result = view.result.as_ref().map_or(0, |r| match r {
        ExecutionResult::Ok(value) => json_bytes(value),
        ExecutionResult::Err(value) => json_bytes(value),
        ExecutionResult::ExecutionError(e) => e.reason.len() + 64,
    });
    std::mem::size_of::<Live<()>>()
        + 64
        + json_bytes(&created.params)
        + metadata
        + result
        + view.responses_seen.len() * 64
        + view.events_seen.len() * 64
        + view.stub_children().count() * 64
        + view
            .correlation_keys
            .iter()
            .map(|k| k.len() + 48)
            .sum::<usize>()
        + view
            .buffered_events()
            .iter()
            .map(|e| e.name.len() + e.event_id.len() + json_bytes(&e.payload) + 64)
            .sum::<usize>()
}

/// An estimate of the heap a JSON value holds (its nodes and text).
fn json_bytes(value: &Value) -> usize {
    const NODE: usize = std::mem::size_of::<Value>();
    NODE + match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(json_bytes).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + 32 + json_bytes(v)).sum(),
        _ => 0,
    }
}
