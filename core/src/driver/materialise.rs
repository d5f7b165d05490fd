//! After the commit (step 3 of the loop in the [module docs](super)): the batch's rows, timer
//! changes, checkpoints and watermarks as jobs for the materialiser, stamped in order.

use super::*;

impl<R, L, S, M, I> Driver<R, L, S, M, I>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
    I: InlineActivities,
{
    /// After a commit; see the module docs.
    pub(super) async fn materialise(
        &mut self,
        batch: Batch,
        landed: Vec<Landed>,
        now: DateTime<Utc>,
    ) -> Result<(), DriverError> {
        let mut job = MaterialiseJob {
            stamp: self.stamp(now),
            ..MaterialiseJob::default()
        };
        let mut next_offsets: IndexMap<i32, i64> = IndexMap::new();
        let mut landed = landed.into_iter();
        let mut timers = TimerChanges::default();
        for effect in &batch.effects {
            match effect {
                Effect::Append {
                    execution_id,
                    seq,
                    entry,
                    at: happened,
                } => {
                    let Some(at) = landed.next() else {
                        return Err(DriverError::Log(
                            format!("no landed offset for history record {seq} of {execution_id}")
                                .into(),
                        ));
                    };
                    let next = next_offsets.entry(at.partition).or_default();
                    *next = (*next).max(at.offset + 1);
                    job.history.push(HistoryRow {
                        execution_id: execution_id.clone(),
                        seq: *seq as i64,
                        kind: entry_kind(entry),
                        record: at.bytes,
                        kafka_partition: at.partition,
                        kafka_offset: at.offset,
                        // When it happened, as its record says: a rebuild from the topic
                        // writes the same time.
                        recorded_at: *happened,
                    });
                }
                Effect::PutTimer(timer) => timers.put(timer.clone()),
                Effect::DeleteTimer(key) => timers.delete(key.clone()),
                _ => {}
            }
        }
        timers.write_into(&mut job);
        let topic = self.log.history_topic().to_owned();
        let checkpoints: Vec<_> = next_offsets
            .into_iter()
            .map(|(partition, offset)| {
                let held = self
                    .reminded
                    .values()
                    .filter(|(p, _)| *p == partition)
                    .map(|(_, first)| *first)
                    .min();
                (partition, held.map_or(offset, |held| held.min(offset)))
            })
            .collect();
        job.checkpoints = checkpoints
            .into_iter()
            .map(|(partition, offset)| self.checkpoint(&topic, partition, offset, now))
            .collect();
        job.executions = batch
            .touched
            .iter()
            .filter_map(|id| self.processor.row(id))
            .collect();
        let outside_index = self.timers.committed(&batch.effects, &self.owned, now);
        self.add_watermarks(&mut job, now, chrono::Duration::seconds(1));
        let number = self.submit(job).await?;
        if outside_index {
            self.unloaded_timers_job = number;
        }
        self.processor.committed(batch.touched.iter(), number, now);
        self.processor.evict(self.materialiser.materialised());
        Ok(())
    }

    /// Adds to `job` the watermarks that moved by `min_step` since they were last written,
    /// and the timer buckets they passed whole (dropped with them).
    pub(super) fn add_watermarks(
        &mut self,
        job: &mut MaterialiseJob,
        now: DateTime<Utc>,
        min_step: chrono::Duration,
    ) {
        for write in self.timers.watermarks(&self.owned, now, min_step) {
            job.watermarks
                .push(self.watermark(write.partition, write.fired_before, now));
            job.dropped_timer_buckets.extend(write.dropped);
        }
    }

    pub(super) fn watermark(
        &self,
        partition: i32,
        fired_before: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> TimerWatermark {
        TimerWatermark {
            kafka_partition: partition,
            fired_before,
            owner: self.config.instance_id.clone(),
            updated_at: now,
        }
    }

    /// While idle, the watermarks still move with the clock (at most once a minute): a
    /// partition without input for days must not leave a new owner a week of timer buckets
    /// to scan.
    pub(super) async fn write_idle_watermarks(
        &mut self,
        now: DateTime<Utc>,
    ) -> Result<(), DriverError> {
        let mut job = MaterialiseJob {
            stamp: self.stamp(now),
            ..MaterialiseJob::default()
        };
        self.add_watermarks(&mut job, now, chrono::Duration::minutes(1));
        if job.watermarks.is_empty() {
            return Ok(());
        }
        self.submit(job).await?;
        Ok(())
    }

    pub(super) fn checkpoint(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        now: DateTime<Utc>,
    ) -> Checkpoint {
        Checkpoint {
            topic: topic.to_owned(),
            kafka_partition: partition,
            materialised_offset: offset,
            owner: self.config.instance_id.clone(),
            updated_at: now,
        }
    }

    /// Queues a job for the materialiser; returns its number.
    /// Queues `job` for the store, stamped in this owner's order ([`StampOrder`]).
    pub(super) async fn submit(&mut self, mut job: MaterialiseJob) -> Result<u64, DriverError> {
        job.stamp = self.stamp_order.stamp(job.stamp, &job);
        let number = self
            .materialiser
            .submit(job)
            .await
            .map_err(DriverError::Materialise)?;
        self.last_job = number;
        Ok(number)
    }

    /// The stamp of a job made now (before [`StampOrder`] orders it).
    pub(super) fn stamp(&self, now: DateTime<Utc>) -> WriteStamp {
        WriteStamp::owner(self.generation, now)
    }
}
