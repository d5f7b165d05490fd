//! Starts that wait: a scheduled execution whose time came, and a run that cannot start now.
//!
//! A run that cannot start for a reason that passes (a full instance pool, a component a
//! rolling deploy has not brought yet, an incomplete read of its journal) is parked, not
//! finished: its start is tried again after 1 s, doubling to a minute, by a `retry` timer
//! (durable: a new owner of the partition tries it too), and at its next input.

use super::Live;
use super::Processor;
use super::config::ProcessorError;
use super::effect::Batch;
use super::effect::Effect;
use super::run::Start;
use chrono::{DateTime, Utc};

use crate::model::ExecutionId;
use crate::projection;
use crate::rows::ExecutionState;
use crate::runner::RunError;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// Starts a scheduled execution whose time has come (its timer fired, or a deferred start
    /// is due).
    pub(super) async fn start_scheduled(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
    ) -> Result<(), ProcessorError> {
        let startable = |live: &Live<R::Run>| {
            live.view.state == ExecutionState::Scheduled && live.run.is_none()
        };
        if !self.cache.get(id).is_some_and(startable) {
            return Ok(());
        }
        let Some((mut ctx, live)) = self.ctx_of(batch, id) else {
            return Ok(());
        };
        // Its time came; its concurrency slots first.
        if super::concurrency::acquire_next(ctx.batch, &live.view) {
            return Ok(());
        }
        let deferred = ctx.start_run(live, Start::Scheduled).await?;
        self.note_start(id, deferred, batch);
        Ok(())
    }

    /// A deferred start is due (its `retry` timer fired). A running execution was rebuilt
    /// (and its run started, or deferred again) by the rehydration [`Processor::needs`] asked
    /// for; a scheduled one starts now; one that started or finished meanwhile is left.
    pub(super) async fn retry_start(
        &mut self,
        batch: &mut Batch,
        id: ExecutionId,
    ) -> Result<(), ProcessorError> {
        match self
            .cache
            .get(&id)
            .map(|live| (live.view.state, live.run.is_some()))
        {
            Some((ExecutionState::Scheduled, _)) => self.start_scheduled(batch, &id).await,
            Some((ExecutionState::Running, true)) => Ok(()),
            // Rebuilt for this input and deferred again: its next retry is put already.
            Some((ExecutionState::Running, false)) if self.retries.contains_key(&id) => Ok(()),
            // Not rebuilt: this batch appended to it, and the store lacks that until the
            // batch commits. Tried again once it has.
            Some((ExecutionState::Running, false)) => {
                self.retry_at(batch, &id, batch.now);
                Ok(())
            }
            // Paused: it starts nothing until resumed, which tries its start again. Queued:
            // its last slot's grant starts it.
            Some((
                ExecutionState::Paused | ExecutionState::Queued | ExecutionState::Finished,
                _,
            ))
            | None => {
                self.deferred.shift_remove(&id);
                Ok(())
            }
        }
    }

    /// After a start of `id`: forgets a deferral that succeeded, or puts the `retry` timer of
    /// the next try (the timer that fired, if any, is deleted by the driver).
    pub(super) fn note_start(
        &mut self,
        id: &ExecutionId,
        deferred: Option<RunError>,
        batch: &mut Batch,
    ) {
        let Some(error) = deferred else {
            self.deferred.shift_remove(id);
            // Started: a retry still pending has nothing left to do.
            if let Some(due_at) = self.retries.remove(id) {
                let timer = projection::retry_timer(self.partition_of(id), id, due_at);
                batch.effects.push(Effect::DeleteTimer(timer.key()));
            }
            return;
        };
        let reason = error.to_string();
        if let RunError::NoCapacity { .. } = error {
            // What the pool really parks (its instances less the attempts running and the
            // memories a component needs): admission keeps below it from now on.
            let parked = self.parked();
            self.capacity_seen = Some(self.capacity_seen.map_or(parked, |c| c.min(parked)));
            self.make_room(id, batch);
        }
        let attempt = self.deferred.entry(id.clone()).or_insert(0);
        *attempt += 1;
        let delay = start_retry_delay(*attempt);
        tracing::warn!(execution = %id, attempt = *attempt, retry_in = %delay, %reason, "the run cannot start now; it is parked and tried again");
        self.stats.deferred_starts += 1;
        self.retry_at(batch, id, batch.now + delay);
    }

    /// Puts the `retry` timer of `id`: when it fires, the execution is rebuilt from the store
    /// and its run started. One per execution: the one this owner put before, still pending,
    /// is deleted (a timer's key has its due time, so a put at another time is another timer:
    /// every input of a parked execution added one, each firing put the next, and they
    /// multiplied into a loop of retries that kept the partition busy for ever).
    pub(super) fn retry_at(&mut self, batch: &mut Batch, id: &ExecutionId, due_at: DateTime<Utc>) {
        let partition = self.partition_of(id);
        if let Some(pending) = self.retries.insert(id.clone(), due_at)
            && pending != due_at
        {
            let stale = projection::retry_timer(partition, id, pending);
            batch.effects.push(Effect::DeleteTimer(stale.key()));
        }
        let timer = projection::retry_timer(partition, id, due_at);
        batch.effects.push(Effect::PutTimer(timer));
    }

    /// The `retry` timer of `id` due at `due_at` fired (the driver deletes it): no longer
    /// pending.
    pub(super) fn retry_fired(&mut self, id: &ExecutionId, due_at: DateTime<Utc>) {
        if self.retries.get(id) == Some(&due_at) {
            self.retries.remove(id);
        }
    }

    /// Executions parked with a deferred start.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }
}

/// The delay before retrying a deferred start, after `attempt` failed tries: 1 s, doubling,
/// at most a minute.
pub fn start_retry_delay(attempt: u32) -> chrono::Duration {
    let secs = 1i64 << attempt.saturating_sub(1).min(6);
    chrono::Duration::seconds(secs.min(60))
}
