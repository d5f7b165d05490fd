//! Concurrency slots (`Faults::concurrency`, [`crate::concurrency`]), read from what a
//! `read_committed` reader sees:
//!
//! - **no code before the slots**: an execution that claims slots (`Created::slots`) has no
//!   `Event` entry (a step of its code) before a `SlotGranted` of every one, and a
//!   `SlotGranted` only of a slot it claims, once each;
//! - **the limit**: every committed state of a slot holds at most its limit;
//! - **in order**: between two committed states of a slot, the executions newly granted are
//!   the first of the earlier state's waiting ones (or ones that came since, once none
//!   waited before them);
//! - **a place freed only by a finish**: an execution that leaves a slot's holders or
//!   waiting list has a committed `Finished`;
//! - **grants are the slot's**: every `SlotGranted` of an execution names a slot whose
//!   committed states held it.
//!
//! Liveness (every queued execution starts and finishes) is the results' check: each
//! execution must finish with its value.

use std::collections::{BTreeMap, BTreeSet};

use super::{Logged, describe};
use crate::concurrency::{Slot, SlotState};
use crate::model::ExecutionId;
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

pub(super) fn check_concurrency(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
) {
    let mut finished: BTreeSet<&ExecutionId> = BTreeSet::new();
    let mut held: BTreeSet<(&ExecutionId, Slot)> = BTreeSet::new();
    for (id, log) in logs {
        let Some(HistoryEntry::Created(created)) = log.first().map(|e| &e.record.entry) else {
            continue;
        };
        let mut granted: Vec<&Slot> = Vec::new();
        for e in log {
            let seq = e.record.seq;
            match &e.record.entry {
                HistoryEntry::SlotGranted { slot } => {
                    if !created.slots.iter().any(|c| c.slot == *slot) || granted.contains(&slot) {
                        add(
                            Invariant::Concurrency,
                            format!(
                                "{id}: {} at seq {seq}: its claims are {:?}, granted so far {granted:?}",
                                describe(&e.record.entry),
                                created.slots
                            ),
                        );
                    }
                    granted.push(slot);
                    held.insert((id, slot.clone()));
                }
                // A reset's execution holds copies of the old one's steps: they are not its
                // code running.
                HistoryEntry::Event { .. }
                    if granted.len() < created.slots.len() && created.reset_of.is_none() =>
                {
                    add(
                        Invariant::Concurrency,
                        format!(
                            "{id}: {} at seq {seq}, holding {granted:?} of its slots {:?}",
                            describe(&e.record.entry),
                            created.slots
                        ),
                    );
                }
                HistoryEntry::Finished { .. } => {
                    finished.insert(id);
                }
                _ => {}
            }
        }
    }

    // Each slot's committed states, in log order.
    let mut states: BTreeMap<String, Vec<(i64, Option<&SlotState>)>> = BTreeMap::new();
    for (partition, r) in w.cluster.committed_records(Topic::State) {
        let (Some(key), Some(Payload::Slot(state))) = (&r.key, &r.payload) else {
            continue;
        };
        let home = w.cluster.partition_for(Topic::State, key);
        if home != partition || state.as_ref().is_some_and(|s| s.slot.wire_key() != *key) {
            add(
                Invariant::Concurrency,
                format!(
                    "the state of `{key}` at weir.state/{partition}@{} (murmur2 says {home}): {state:?}",
                    r.offset
                ),
            );
        }
        states
            .entry(key.clone())
            .or_default()
            .push((r.offset, state.as_ref()));
    }
    let mut ever_held: BTreeSet<(&ExecutionId, &Slot)> = BTreeSet::new();
    for (key, history) in &states {
        let mut before: Option<&SlotState> = None;
        for (offset, state) in history {
            let at = format!("`{key}` at weir.state@{offset}");
            if let Some(s) = state {
                if s.holders.len() > s.limit as usize {
                    add(
                        Invariant::Concurrency,
                        format!(
                            "{at}: {} hold it, above its limit {}: {:?}",
                            s.holders.len(),
                            s.limit,
                            s.holders
                        ),
                    );
                }
                ever_held.extend(s.holders.iter().map(|h| (h, &s.slot)));
            }
            let empty = Vec::new();
            let (was_holding, was_waiting) =
                before.map_or((&empty, &empty), |b| (&b.holders, &b.waiting));
            let (holding, waiting) = state.map_or((&empty, &empty), |s| (&s.holders, &s.waiting));
            // Freed places: only by a finish.
            for gone in was_holding
                .iter()
                .chain(was_waiting.iter())
                .filter(|g| !holding.contains(g) && !waiting.contains(g))
            {
                if !finished.contains(gone) {
                    add(
                        Invariant::Concurrency,
                        format!("{at}: {gone} left the slot with no committed Finished"),
                    );
                }
            }
            // New holders: the first of those that waited, in order.
            let still_waiting: Vec<&ExecutionId> = was_waiting
                .iter()
                .filter(|w| holding.contains(w) || waiting.contains(w))
                .collect();
            let newly: Vec<&ExecutionId> = holding
                .iter()
                .filter(|h| !was_holding.contains(h))
                .collect();
            for new in &newly {
                if let Some(pos) = still_waiting.iter().position(|w| w == new) {
                    let skipped: Vec<&&ExecutionId> = still_waiting[..pos]
                        .iter()
                        .filter(|w| !holding.contains(w))
                        .collect();
                    if !skipped.is_empty() {
                        add(
                            Invariant::Concurrency,
                            format!(
                                "{at}: {new} granted before {skipped:?}, which waited before it"
                            ),
                        );
                    }
                } else if still_waiting.iter().any(|w| !holding.contains(w)) {
                    add(
                        Invariant::Concurrency,
                        format!(
                            "{at}: {new} granted at once while {:?} waited",
                            still_waiting
                        ),
                    );
                }
            }
            before = *state;
        }
    }
    for (id, slot) in &held {
        if !ever_held.contains(&(*id, slot)) {
            add(
                Invariant::Concurrency,
                format!("{id}: granted {slot}, which no committed state of the slot holds it in"),
            );
        }
    }
}

/// What the concurrency slots of a run did, for the class's test to check that the runs
/// exercise them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConcurrencyCounts {
    /// `SlotGranted` entries committed.
    pub granted: u64,
    /// Executions a committed slot state held waiting.
    pub queued: u64,
    /// The most executions waiting on one slot in one committed state.
    pub longest_queue: u64,
}

impl std::ops::AddAssign for ConcurrencyCounts {
    fn add_assign(&mut self, o: Self) {
        self.granted += o.granted;
        self.queued += o.queued;
        self.longest_queue = self.longest_queue.max(o.longest_queue);
    }
}

impl ConcurrencyCounts {
    pub(in crate::sim) fn of(w: &World) -> ConcurrencyCounts {
        let mut counts = ConcurrencyCounts::default();
        let mut queued: BTreeSet<&ExecutionId> = BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::State) {
            if let Some(Payload::Slot(Some(state))) = &r.payload {
                queued.extend(state.waiting.iter());
                counts.longest_queue = counts.longest_queue.max(state.waiting.len() as u64);
            }
        }
        for (_, r) in w.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(record)) = &r.payload
                && matches!(record.entry, HistoryEntry::SlotGranted { .. })
            {
                counts.granted += 1;
            }
        }
        counts.queued = queued.len() as u64;
        counts
    }
}
