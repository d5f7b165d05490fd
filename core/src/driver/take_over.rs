//! Take-over (step 1 of the loop in the [module docs](super)): adopting a new assignment,
//! catching the store up with `weir.history` of each owned partition, restoring the keyed
//! state, and refilling the timers due within the horizon.

use super::*;

/// Rows per catch-up job.
const CATCHUP_FLUSH_EVERY: usize = 500;

/// What a catch-up of one partition read.
struct CaughtUp {
    /// History records read.
    records: usize,
    /// The executions they belong to that are running, with the offset of the first record
    /// of each read (their starts are tried again: see [`Driver::take_over`]).
    running: Vec<(ExecutionId, i64)>,
}

impl<R, L, S, M, I> Driver<R, L, S, M, I>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
    I: InlineActivities,
{
    /// Adopts a new assignment; see the module docs.
    pub async fn take_over(
        &mut self,
        generation: u64,
        owned: BTreeSet<i32>,
    ) -> Result<(), DriverError> {
        // Catch-up and the cold path read the store: it must hold every committed batch.
        self.materialiser
            .flush()
            .await
            .map_err(DriverError::Materialise)?;
        self.processor.clear();
        self.timers.clear();
        self.reminded.clear();
        // From here on this worker's writes outrank every write a former owner still has
        // queued (see `WriteStamp`).
        self.generation = generation;
        // First resolve the previous owner: fetching the committed offsets as stable waits
        // until its open transaction is committed or aborted. Only then is the history's last
        // stable offset past everything it committed, so catch-up misses nothing of it.
        let positions = self.log.rewind().await.map_err(DriverError::Log)?;
        // What was held is read again (a new assignment reads the submissions partitions).
        self.held.clear();
        self.released.clear();
        self.reading = true;
        self.positions = IndexMap::new();
        for position in positions {
            if !owned.contains(&position.partition) {
                continue;
            }
            let Position {
                topic,
                partition,
                offset,
                metadata,
            } = position;
            if topic == InputTopic::Submissions
                && let Err(error) = self.held.resume(partition, offset, &metadata)
            {
                tracing::warn!(partition, %error, "the committed offset's metadata is not ours: ignored (no submission is skipped)");
            }
            self.positions.insert((topic, partition), offset);
        }
        // Before this owner commits anything, the watermark it starts from is written again,
        // stamped with its generation (the catch-up below waits until it is): a former owner
        // still finishing a take-over of its own scans a store that may lack timers this
        // owner's batches make, and its watermark, past them, must not land after.
        let now = self.log.now();
        let mut watermarks = Vec::with_capacity(owned.len());
        for &partition in &owned {
            let fired_before = self
                .store
                .watermark(partition)
                .await
                .map_err(DriverError::Store)?
                .unwrap_or_else(|| TimerIndex::default_start(now));
            watermarks.push(self.watermark(partition, fired_before, now));
        }
        let job = MaterialiseJob {
            stamp: self.stamp(now),
            watermarks,
            ..MaterialiseJob::default()
        };
        self.submit(job).await?;
        let mut running = IndexMap::new();
        for &partition in &owned {
            let caught_up = self.catch_up(partition).await?;
            if caught_up.records > 0 {
                tracing::info!(
                    partition,
                    records = caught_up.records,
                    running = caught_up.running.len(),
                    "store caught up with the history"
                );
            }
            running.extend(
                caught_up
                    .running
                    .into_iter()
                    .map(|(id, offset)| (id, (partition, offset))),
            );
        }
        // The keyed state of the partitions, as committed with the offsets just rewound to
        // (one read of them all: a consumer per partition cost ~0.2 s each).
        if !owned.is_empty() {
            let state = self
                .log
                .read_keyed_state(&owned)
                .await
                .map_err(DriverError::Log)?;
            if !state.schedules.is_empty()
                || !state.batches.is_empty()
                || !state.correlations.is_empty()
                || !state.slots.is_empty()
                || !state.corrupt.is_empty()
            {
                tracing::info!(
                    schedules = state.schedules.len(),
                    batches = state.batches.len(),
                    correlation_keys = state.correlations.len(),
                    concurrency_slots = state.slots.len(),
                    corrupt = state.corrupt.len(),
                    "keyed state restored"
                );
            }
            self.processor.restore_schedules(state.schedules);
            self.processor.restore_batches(state.batches);
            self.processor.restore_correlations(state.correlations);
            self.processor.restore_slots(state.slots);
            self.processor
                .restore_remembered(state.remembered, state.unrecorded);
            self.processor.restore_corrupt_states(state.corrupt);
        }
        self.owned = owned;
        let now = self.log.now();
        // The new owner has read none of its submissions partitions yet.
        self.processor.submissions_read(false, now);
        self.refill_timers(now).await?;
        // A former owner may have committed a deferred start of these executions and died
        // before its `retry` timer reached the store: that timer is in no history record, so
        // nothing derives it. Their starts are tried now, from memory: a reminder is never
        // written (a fenced owner's would outlive it behind the next owner's watermark);
        // instead the catch-up's checkpoint stopped at the first record of each, and no
        // checkpoint passes it until the reminder has fired, so an owner that dies first
        // leaves them to the next one's catch-up. One that runs or waits is left as it is;
        // one that cannot start puts its timer again.
        let reminders = running
            .iter()
            .map(|(id, (partition, _))| projection::retry_timer(*partition, id, now));
        let reminded = self.timers.remind(reminders);
        self.reminded = running;
        if reminded > 0 {
            tracing::info!(
                executions = reminded,
                "starts of the running executions caught up are tried again"
            );
        }
        // The watermarks this owner starts from, stamped with its generation: a former
        // owner's queued watermark (possibly past a timer it never knew of) cannot land after
        // this one.
        let mut job = MaterialiseJob {
            stamp: self.stamp(now),
            ..MaterialiseJob::default()
        };
        self.add_watermarks(&mut job, now, chrono::Duration::zero());
        self.submit(job).await?;
        self.report(0, 0);
        Ok(())
    }

    /// Reads the timers of owned partitions due within the horizon.
    ///
    /// While the materialiser is behind (the store may be away), a refill that is not urgent
    /// is postponed: the hot path must not wait for the store (see [`TimerIndex`]). An urgent
    /// one waits until the store has every timer change the index does not hold: a read
    /// before would skip a timer for good (the index counts the range as loaded).
    pub(super) async fn refill_timers(&mut self, now: DateTime<Utc>) -> Result<(), DriverError> {
        let mut refills = self.timers.refills(&self.owned, now);
        if self.materialiser.materialised() < self.last_job {
            refills.retain(|refill| refill.urgent);
        }
        if refills.is_empty() {
            return Ok(());
        }
        if self.materialiser.materialised() < self.unloaded_timers_job {
            self.materialiser
                .wait_for(self.unloaded_timers_job)
                .await
                .map_err(DriverError::Materialise)?;
        }
        for refill in refills {
            let from = match refill.from {
                Some(from) => from,
                None => self
                    .store
                    .watermark(refill.partition)
                    .await
                    .map_err(DriverError::Store)?
                    .unwrap_or_else(|| TimerIndex::default_start(now)),
            };
            // In windows of a day: a partition idle for long has an old watermark, and one
            // scan of the whole range would be refused by the store (or take very long).
            let mut timers = Vec::new();
            let mut start = from;
            while start < refill.until {
                let end = (start + chrono::Duration::days(1)).min(refill.until);
                timers.extend(
                    self.store
                        .timers_between(refill.partition, start, end)
                        .await
                        .map_err(DriverError::Store)?,
                );
                start = end;
            }
            self.timers.loaded(
                &Refill {
                    from: Some(from),
                    ..refill
                },
                timers,
            );
        }
        Ok(())
    }

    /// Materialises `partition` of the history from its checkpoint to the last stable offset,
    /// through the projection; returns how many records were read. Writing twice what the
    /// store already has is harmless (upserts; the projection ignores seqs it has applied).
    async fn catch_up(&mut self, partition: i32) -> Result<CaughtUp, DriverError> {
        let topic = self.log.history_topic().to_owned();
        let from = self
            .store
            .checkpoint(&topic, partition)
            .await
            .map_err(DriverError::Store)?
            .unwrap_or(0);
        let entries = self
            .log
            .read_history(partition, from)
            .await
            .map_err(DriverError::Log)?;
        let read = entries.len();
        let mut views: IndexMap<ExecutionId, ExecutionView> = IndexMap::new();
        // The offset of the first record read of each execution in `views`.
        let mut first_read: IndexMap<ExecutionId, i64> = IndexMap::new();
        // Executions whose stored history cannot be read: their rows are copied, nothing
        // more.
        let mut unreadable: std::collections::HashSet<ExecutionId> = Default::default();
        let mut job = MaterialiseJob::default();
        let mut timers = TimerChanges::default();
        let catchup_error = |reason: String| DriverError::Catchup { partition, reason };
        for (i, entry) in entries.into_iter().enumerate() {
            let LoggedEntry {
                offset,
                record,
                bytes,
                timestamp,
            } = entry;
            let id = record.execution_id.clone();
            if !views.contains_key(&id) {
                let view = match &record.entry {
                    _ if unreadable.contains(&id) => None,
                    HistoryEntry::Created(created) if record.seq == 0 => {
                        let owner = self.processor.partition_of(&id);
                        let (view, changes) =
                            ExecutionView::new(id.clone(), owner, created.clone(), timestamp);
                        for change in changes {
                            change.add_to(&mut timers);
                        }
                        Some(view)
                    }
                    _ => {
                        let stored = match self.store.load(&id).await {
                            Ok(stored) => stored,
                            Err(LoadError::Unreadable { reason, .. }) => {
                                // Its history rows are still written; its execution row is
                                // not (nothing can rebuild it). The other executions go on.
                                tracing::error!(partition, offset, execution = %id, %reason, "catch-up skips the execution row of an unreadable execution");
                                unreadable.insert(id.clone());
                                None
                            }
                            Err(LoadError::Store(e)) => return Err(DriverError::Store(e)),
                        };
                        match stored {
                            None if unreadable.contains(&id) => None,
                            None => {
                                return Err(catchup_error(format!(
                                    "offset {offset}: history version {} of {id}, which the store does not know",
                                    record.seq
                                )));
                            }
                            Some(stored) => {
                                let owner = self.processor.partition_of(&id);
                                match rebuild(&id, owner, stored) {
                                    Ok(rebuilt) => Some(rebuilt.view),
                                    Err(e) => {
                                        tracing::error!(partition, offset, execution = %id, error = %e, "catch-up skips the execution row of an execution whose stored history breaks the projection");
                                        unreadable.insert(id.clone());
                                        None
                                    }
                                }
                            }
                        }
                    }
                };
                if let Some(view) = view {
                    views.insert(id.clone(), view);
                    first_read.insert(id.clone(), offset);
                }
            }
            if let Some(view) = views.get_mut(&id)
                && record.seq >= 1
            {
                let changes = view
                    .apply(record.seq, &record.entry, timestamp)
                    .map_err(|e| catchup_error(format!("offset {offset}: {e}")))?;
                for change in changes {
                    change.add_to(&mut timers);
                }
            }
            job.history.push(HistoryRow {
                execution_id: id,
                seq: record.seq as i64,
                kind: entry_kind(&record.entry),
                record: bytes,
                kafka_partition: partition,
                kafka_offset: offset,
                // When it happened, as its record says (the live path stores the same), else
                // (a record of an earlier Weir) when it was produced.
                recorded_at: record.at.unwrap_or(timestamp),
            });
            if job.history.len() >= CATCHUP_FLUSH_EVERY || i + 1 == read {
                timers.write_into(&mut job);
                job.executions = views.values().map(ExecutionView::row).collect();
                let now = self.log.now();
                job.stamp = self.stamp(now);
                // Not past the first record of an execution still running (see `take_over`).
                let held = views
                    .values()
                    .filter(|view| view.state == ExecutionState::Running)
                    .filter_map(|view| first_read.get(&view.id).copied())
                    .min();
                let next = held.map_or(offset + 1, |held| held.min(offset + 1));
                job.checkpoints = vec![self.checkpoint(&topic, partition, next, now)];
                self.submit(std::mem::take(&mut job)).await?;
            }
        }
        if read == 0 {
            // Nothing to catch up: the checkpoint is written anyway, stamped with this
            // owner's generation, so that a former owner's queued one cannot land after it.
            let now = self.log.now();
            let job = MaterialiseJob {
                stamp: self.stamp(now),
                checkpoints: vec![self.checkpoint(&topic, partition, from, now)],
                ..MaterialiseJob::default()
            };
            self.submit(job).await?;
        }
        self.materialiser
            .flush()
            .await
            .map_err(DriverError::Materialise)?;
        let running = views
            .into_values()
            .filter(|view| view.state == ExecutionState::Running)
            .filter_map(|view| Some((first_read.get(&view.id).copied()?, view.id)))
            .map(|(offset, id)| (id, offset))
            .collect();
        Ok(CaughtUp {
            records: read,
            running,
        })
    }
}
