//! The driver's three seams over the simulated world: [`SimLog`] (a worker's consumer and
//! transactional producer), [`SimStore`] (its reads of the store) and [`SimMaterialiser`]
//! (its background writer). Each call is an await point (it returns `Pending` once, so the
//! scheduler may run anything else — or crash or freeze this process — before it takes
//! effect), and some calls wait for the rest of the world: `rewind` for an open transaction
//! holding offsets, `wait_for`/`flush` for the writer, `submit` for room in its queue.

use std::collections::BTreeSet;
use std::future::Future;

use chrono::{DateTime, Utc};

use crate::driver::{
    BoxError, Commit, CommitError, Landed, LoadError, Log, LoggedEntry, Materialise, Polled,
    Positions, StoreRead,
};
use crate::inline::{InlineActivities, InlineOutcome};
use crate::model::ExecutionId;
use crate::model::{ExecutionResult, Ffqn};
use crate::records::ActivityRequest;
use crate::records::HistoryRecord;
use crate::rows::{MaterialiseJob, TimerRow};

use super::cluster::Topic;
use super::exec::{wait_until, yield_now};
use super::store::retry_delay;
use super::workflows::{activity_result, double_ffqn};
use super::world::{Shared, lock};

fn boxed(e: String) -> BoxError {
    e.into()
}

/// A worker process's view of the cluster.
pub struct SimLog {
    pub(crate) world: Shared,
    pub(crate) pid: u64,
}

impl Log for SimLog {
    fn poll(&mut self, max: usize) -> impl Future<Output = Result<Polled, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, "poll");
            yield_now().await;
            let polled = {
                let mut w = lock(&world);
                // It follows `weir.control` too (`Faults::route_pauses`; `routes.rs`).
                w.follow_view(pid);
                w.poll(pid, max)
            };
            if matches!(&polled, Polled::Records(r) if r.is_empty()) {
                // A poll with nothing to return times out.
                lock(&world).set_at(pid, "poll: timed out");
                yield_now().await;
            }
            Ok(polled)
        }
    }

    fn membership(&self) -> (u64, BTreeSet<i32>) {
        let world = lock(&self.world);
        let consumer = &world.procs[&self.pid].consumer;
        (consumer.generation, consumer.owned.clone())
    }

    fn now(&self) -> DateTime<Utc> {
        lock(&self.world).now
    }

    fn rewind(&mut self) -> impl Future<Output = Result<Positions, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, "rewind");
            yield_now().await;
            Ok(wait_until(|| lock(&world).rewind(pid)).await)
        }
    }

    fn read_history(
        &mut self,
        partition: i32,
        from: i64,
    ) -> impl Future<Output = Result<Vec<LoggedEntry>, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, "read-history");
            yield_now().await;
            Ok(wait_until(|| lock(&world).read_history(pid, partition, from)).await)
        }
    }

    fn read_keyed_state(
        &mut self,
        partitions: &std::collections::BTreeSet<i32>,
    ) -> impl Future<Output = Result<crate::driver::KeyedState, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        let partitions = partitions.clone();
        async move {
            let mut all = crate::driver::KeyedState::default();
            for partition in partitions {
                lock(&world).set_at(pid, "read-keyed-state");
                yield_now().await;
                let state = wait_until(|| lock(&world).read_keyed_state(pid, partition)).await;
                // Every part (a part added later does not compile until it is merged).
                let crate::driver::KeyedState {
                    schedules,
                    batches,
                    batch_outcomes,
                    correlations,
                    remembered,
                    unrecorded,
                    corrupt,
                    slots,
                } = state;
                all.schedules.extend(schedules);
                all.batches.extend(batches);
                all.batch_outcomes.extend(batch_outcomes);
                all.correlations.extend(correlations);
                all.remembered.extend(remembered);
                all.unrecorded.extend(unrecorded);
                all.corrupt.extend(corrupt);
                all.slots.extend(slots);
            }
            Ok(all)
        }
    }

    fn commit(
        &mut self,
        commit: Commit<'_>,
    ) -> impl Future<Output = Result<Vec<Landed>, CommitError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        let effects = commit.effects.to_vec();
        let offsets = commit.offsets.to_vec();
        let consumed = commit.consumed.to_vec();
        async move {
            lock(&world).set_at(pid, "commit: before producing");
            yield_now().await;
            let (txn, landed) = lock(&world).commit_begin(pid, &effects)?;
            lock(&world).set_at(pid, "commit: produced, offsets not sent");
            yield_now().await;
            lock(&world).commit_offsets(pid, txn, &offsets)?;
            lock(&world).set_at(pid, "commit: offsets sent, not committed");
            yield_now().await;
            lock(&world).commit_end(pid, txn)?;
            lock(&world).consumed(pid, &consumed);
            lock(&world).set_at(pid, "commit: done");
            Ok(landed)
        }
    }

    fn history_topic(&self) -> &str {
        Topic::History.name()
    }

    fn admit(
        &mut self,
        open: bool,
        from: &[(i32, i64)],
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        let from = from.to_vec();
        async move {
            lock(&world).set_at(pid, "admit");
            yield_now().await;
            lock(&world).admit(pid, open, &from);
            Ok(())
        }
    }
}

/// A worker process's reads of the store.
pub struct SimStore {
    pub(crate) world: Shared,
    pub(crate) pid: u64,
}

impl SimStore {
    fn read<T: Send>(
        &self,
        at: &'static str,
        read: impl FnOnce(&super::world::World) -> Result<T, String> + Send,
    ) -> impl Future<Output = Result<T, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, at);
            yield_now().await;
            // As production's adapter: a failing read is tried again after a growing delay,
            // until the patience is spent (a store outage is ridden out).
            let mut read = Some(read);
            let mut failures = 0;
            let mut failing_since = None;
            let mut next_try = None;
            wait_until(|| {
                let mut w = lock(&world);
                if next_try.is_some_and(|t| w.now < t) {
                    return None;
                }
                match w.store_read(pid) {
                    Ok(()) => Some(
                        read.take()
                            .map_or_else(|| Err("read twice".to_owned()), |read| read(&w)),
                    ),
                    Err(e) => {
                        failures += 1;
                        let now = w.now;
                        let since = *failing_since.get_or_insert(now);
                        let delay = retry_delay(failures);
                        let patience = chrono::Duration::milliseconds(w.config.store_patience_ms);
                        if now + delay - since > patience {
                            return Some(Err(e));
                        }
                        next_try = Some(now + delay);
                        None
                    }
                }
            })
            .await
            .map_err(boxed)
        }
    }
}

impl StoreRead for SimStore {
    fn load(
        &self,
        id: &ExecutionId,
    ) -> impl Future<Output = Result<Option<Vec<(HistoryRecord, DateTime<Utc>)>>, LoadError>> + Send
    {
        let id = id.clone();
        let read = self.read("store: load", {
            let id = id.clone();
            move |w| Ok(w.store.load(&id, &w.codec))
        });
        async move {
            match read.await {
                Ok(Ok(stored)) => Ok(stored),
                Ok(Err(reason)) => Err(LoadError::Unreadable {
                    execution: id,
                    reason,
                }),
                Err(e) => Err(LoadError::Store(e)),
            }
        }
    }

    fn checkpoint(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = Result<Option<i64>, BoxError>> + Send {
        let topic = topic.to_owned();
        self.read("store: checkpoint", move |w| {
            Ok(w.store
                .checkpoints
                .get(&(topic, partition))
                .map(|c| c.materialised_offset))
        })
    }

    fn watermark(
        &self,
        partition: i32,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, BoxError>> + Send {
        self.read("store: watermark", move |w| {
            Ok(w.store.watermarks.get(&partition).map(|m| m.fired_before))
        })
    }

    fn timers_between(
        &self,
        partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<TimerRow>, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        let read = self.read("store: timers", move |w| {
            w.store.timers_between(partition, from, until)
        });
        async move {
            let timers = match read.await {
                Ok(timers) => timers,
                Err(e) => {
                    let e = e.to_string();
                    if e.contains("the watermark is lost") {
                        let mut w = lock(&world);
                        let name = w.procs[&pid].name();
                        w.finding(
                            "item-6-watermark-too-old",
                            format!(
                                "{name}: {e} (its worker stops; every owner after it does the same)"
                            ),
                        );
                    }
                    return Err(boxed(e));
                }
            };
            lock(&world).timer_scan(pid, partition, from);
            Ok(timers)
        }
    }

    fn list(
        &self,
        query: &crate::rows::ListQuery,
    ) -> impl Future<Output = Result<crate::rows::ListPage, BoxError>> + Send {
        let query = query.clone();
        self.read("store: list", move |w| Ok(w.store.list(&query)))
    }
}

/// A worker process's background writer: jobs wait in the process's queue until the
/// scheduler lets the writer run.
pub struct SimMaterialiser {
    pub(crate) world: Shared,
    pub(crate) pid: u64,
}

impl SimMaterialiser {
    fn wait_done(
        &self,
        at: &'static str,
        job: Option<u64>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, at);
            yield_now().await;
            // `None`: everything submitted so far.
            let target = job.unwrap_or_else(|| lock(&world).procs[&pid].mat.submitted);
            wait_until(|| {
                let w = lock(&world);
                let mat = &w.procs[&pid].mat;
                if let Some(e) = &mat.failed {
                    return Some(Err(boxed(e.clone())));
                }
                (mat.done >= target).then_some(Ok(()))
            })
            .await
        }
    }
}

impl Materialise for SimMaterialiser {
    fn submit(
        &mut self,
        job: MaterialiseJob,
    ) -> impl Future<Output = Result<u64, BoxError>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        async move {
            lock(&world).set_at(pid, "materialiser: submit");
            yield_now().await;
            let mut job = Some(job);
            wait_until(|| {
                let mut w = lock(&world);
                let now = w.now;
                let limit = w.config.materialise_queue.max(1);
                let mat = &mut w.procs.get_mut(&pid).expect("a process").mat;
                if let Some(e) = &mat.failed {
                    return Some(Err(boxed(e.clone())));
                }
                if mat.queue.len() >= limit {
                    return None;
                }
                mat.submitted += 1;
                let number = mat.submitted;
                let job = job.take().expect("submitted once");
                mat.queue.push_back((number, job.clone()));
                mat.queued_at.push_back(now);
                w.job_submitted(pid, &job);
                Some(Ok(number))
            })
            .await
        }
    }

    fn materialised(&self) -> u64 {
        lock(&self.world).procs[&self.pid].mat.done
    }

    fn wait_for(&mut self, job: u64) -> impl Future<Output = Result<(), BoxError>> + Send {
        self.wait_done("materialiser: wait_for", Some(job))
    }

    fn flush(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send {
        self.wait_done("materialiser: flush", None)
    }

    fn health(&self) -> Result<(), BoxError> {
        match &lock(&self.world).procs[&self.pid].mat.failed {
            Some(e) => Err(boxed(e.clone())),
            None => Ok(()),
        }
    }
}

/// A worker process's inline activities (`Faults::inline`): the simulated activity's answer,
/// or, as the seed decides per request, a failed attempt retried on the topic or one not run.
/// Each round is an await point, where the process may crash with attempts done but nothing
/// committed.
pub struct SimInline {
    pub(crate) world: Shared,
    pub(crate) pid: u64,
}

impl InlineActivities for SimInline {
    /// `double`, unless its route is rate-limited (`Faults::rate_limits`; production's
    /// `WasmInline`: an inline attempt would escape the limit) or its process read it paused
    /// (production's `PausedRoutes`): the request goes to its topic, where the route's
    /// activity workers hold it.
    fn runs(&self, ffqn: &Ffqn) -> bool {
        if *ffqn != double_ffqn() {
            return false;
        }
        let mut w = lock(&self.world);
        if w.act.rates.limits_topic(Topic::Activity.name()) {
            w.act.rates.inline_held += 1;
            return false;
        }
        if w.route_read_paused(self.pid, Topic::Activity.name()) {
            w.routes.log.inline_held += 1;
            return false;
        }
        // A pausing policy is never inline (the registry makes it so in production).
        !w.act.exhausted.on
    }

    fn run(
        &mut self,
        requests: &[ActivityRequest],
        _: &[Option<crate::trace::TraceParent>],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Vec<InlineOutcome>> + Send {
        let (world, pid) = (self.world.clone(), self.pid);
        let requests = requests.to_vec();
        async move {
            let started_at = {
                let mut w = lock(&world);
                w.set_at(pid, "inline: attempts running");
                for request in &requests {
                    let seq = w.act.log.next();
                    let at = w.now;
                    w.routes.log.inline.push(crate::sim::routes::InlineRun {
                        seq,
                        at,
                        pid,
                        child: request.execution_id.clone(),
                        topic: Topic::Activity.name(),
                    });
                }
                w.now
            };
            yield_now().await;
            let mut w = lock(&world);
            requests
                .iter()
                .map(|request| {
                    let roll = w.rng.range(0, 100);
                    if roll < 10 {
                        w.stats.inline_spilled += 1;
                        InlineOutcome::Spill
                    } else if roll < 20 {
                        w.stats.inline_retried += 1;
                        let backoff = w.rng.range(0, 2_000) as i64;
                        InlineOutcome::Retry {
                            attempt: request.attempt + 1,
                            not_before: now + chrono::Duration::milliseconds(backoff),
                        }
                    } else {
                        w.stats.inline_answered += 1;
                        let result: ExecutionResult = activity_result(&request.params);
                        // The attempts ran while the scheduler let time pass.
                        let ran = crate::model::Ran {
                            started_at,
                            finished_at: w.now,
                        };
                        InlineOutcome::Answered { result, ran }
                    }
                })
                .collect()
        }
    }
}
