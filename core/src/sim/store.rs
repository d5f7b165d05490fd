//! The simulated CQL store: the tables of `schemas/cql/tables.cql` as the CQL store writes
//! them — history rows as unconditional upserts; execution rows, timers, checkpoints and
//! watermarks with a write timestamp ([`WriteStamp`]: the history version, or the writer's
//! group generation and time), so an older write never wins; timestamps of millisecond
//! precision — and the per-process background materialiser queue.
//!
//! The store can be down for a while (every read and write fails), and a materialiser's
//! queued jobs are applied when the scheduler lets that process's writer run: possibly long
//! after they were submitted, and — for a process that was frozen — after the process lost
//! its partitions, on top of whatever the new owner wrote meanwhile (as a resumed zombie's
//! writer does).

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Duration, Utc};

use crate::model::ExecutionId;
use crate::records::HistoryRecord;
use crate::rows::{
    Checkpoint, ExecutionRow, HistoryRow, LwwTable, MAX_TIMER_BUCKETS_PER_SCAN, MaterialiseJob,
    TimerRow, TimerTable, TimerWatermark, WriteStamp, timer_bucket,
};

use super::cluster::SimTime;

/// An execution's changelog as the store returns it: each record with its `recorded_at`.
pub type Changelog = Vec<(HistoryRecord, DateTime<Utc>)>;

/// Cut to milliseconds, as a CQL `timestamp` keeps it.
pub use crate::rows::to_store_precision as millis;

/// History records as bytes and back. The bytes are the record's `Debug` text (stable and
/// unique per record); decoding looks the bytes up among everything ever encoded, so a row
/// whose bytes were never produced by the log does not decode.
#[derive(Debug, Default, Clone)]
pub struct Codec {
    known: BTreeMap<Vec<u8>, HistoryRecord>,
}

impl Codec {
    pub fn encode(&mut self, record: &HistoryRecord) -> Vec<u8> {
        let bytes = format!("{record:?}").into_bytes();
        self.known
            .entry(bytes.clone())
            .or_insert_with(|| record.clone());
        bytes
    }

    pub fn decode(&self, bytes: &[u8]) -> Option<&HistoryRecord> {
        self.known.get(bytes)
    }
}

/// The tables.
#[derive(Debug, Default, Clone)]
pub struct Store {
    pub history: BTreeMap<(ExecutionId, i64), HistoryRow>,
    pub executions: LwwTable<ExecutionId, ExecutionRow>,
    /// By (partition, due_at, timer id), as the clustering order of `timers`.
    pub timers: TimerTable,
    /// Timer puts the table kept deleted because a delete of the same stamp was there first:
    /// an owner that put a timer again after deleting it, within one stamp (`lost-timer-put`).
    pub lost_timer_puts: Vec<String>,
    pub checkpoints: LwwTable<(String, i32), Checkpoint>,
    pub watermarks: LwwTable<i32, TimerWatermark>,
    /// Down until then (every call fails).
    pub down_until: Option<SimTime>,
    /// Jobs applied (for the trace).
    pub jobs_applied: u64,
}

impl Store {
    pub fn available(&self, now: SimTime) -> Result<(), String> {
        match self.down_until {
            Some(until) if now < until => Err(format!(
                "store unavailable (outage until {})",
                until.format("%H:%M:%S%.3f")
            )),
            _ => Ok(()),
        }
    }

    /// Writes a job: history rows, execution rows and timers, then checkpoints and
    /// watermarks — upserts and deletes, each ordered by its stamp.
    pub fn apply(&mut self, job: &MaterialiseJob) {
        for row in &job.history {
            let mut row = row.clone();
            row.recorded_at = millis(row.recorded_at);
            self.history
                .insert((row.execution_id.clone(), row.seq), row);
        }
        for row in &job.executions {
            let mut row = row.clone();
            row.created_at = millis(row.created_at);
            row.updated_at = millis(row.updated_at);
            row.finished_at = row.finished_at.map(millis);
            let stamp = WriteStamp::history_version(row.history_version);
            self.executions
                .write(row.execution_id.clone(), stamp, Some(row));
        }
        for timer in &job.new_timers {
            if self.timers.ties_with_a_delete(timer, job.stamp) {
                self.lost_timer_puts.push(format!(
                    "timer {} of {} due {} put with stamp {} after a delete of the same stamp",
                    timer.timer_id, timer.execution_id, timer.due_at, job.stamp.0
                ));
            }
            self.timers.put(timer, job.stamp);
        }
        for key in &job.removed_timers {
            self.timers.delete(key, job.stamp);
        }
        for dropped in &job.dropped_timer_buckets {
            self.timers.drop_bucket(*dropped, job.stamp);
        }
        for checkpoint in &job.checkpoints {
            let key = (checkpoint.topic.clone(), checkpoint.kafka_partition);
            self.checkpoints
                .write(key, job.stamp, Some(checkpoint.clone()));
        }
        for watermark in &job.watermarks {
            let mut watermark = watermark.clone();
            watermark.fired_before = millis(watermark.fired_before);
            self.watermarks
                .write(watermark.kafka_partition, job.stamp, Some(watermark));
        }
        self.jobs_applied += 1;
    }

    /// The changelog of `id` in seq order, decoded, with `recorded_at`.
    /// A page of a list of executions, as the CQL store gives it (the rows it holds now).
    pub fn list(&self, query: &crate::rows::ListQuery) -> crate::rows::ListPage {
        query.page(
            self.executions
                .values()
                .map(crate::rows::ListedExecution::of),
        )
    }

    pub fn load(&self, id: &ExecutionId, codec: &Codec) -> Result<Option<Changelog>, String> {
        let mut out = Vec::new();
        for ((_, seq), row) in self
            .history
            .range((id.clone(), i64::MIN)..=(id.clone(), i64::MAX))
        {
            let record = codec
                .decode(&row.record)
                .ok_or_else(|| format!("history row {seq} of {id} does not decode"))?;
            out.push((record.clone(), row.recorded_at));
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// `timers_between` as the CQL store reads it: bucket by bucket, refusing more than a
    /// week of buckets.
    pub fn timers_between(
        &self,
        partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<TimerRow>, String> {
        let buckets = timer_bucket(until) - timer_bucket(from) + 1;
        if buckets > MAX_TIMER_BUCKETS_PER_SCAN {
            return Err(format!(
                "timers_between of partition {partition} would scan {buckets} buckets \
                 (more than {MAX_TIMER_BUCKETS_PER_SCAN}): the watermark is lost"
            ));
        }
        Ok(self
            .timers
            .between(partition, from, until)
            .cloned()
            .collect())
    }
}

/// One process's background writer of committed batches.
#[derive(Debug, Default, Clone)]
pub struct MaterialiserQueue {
    pub queue: VecDeque<(u64, MaterialiseJob)>,
    /// When each queued job was submitted (by number).
    pub queued_at: VecDeque<SimTime>,
    /// The number of the last job submitted.
    pub submitted: u64,
    /// The number of the last job in the store.
    pub done: u64,
    /// Consecutive failed attempts (the store was down), and when the first of them was.
    pub failures: u32,
    pub failing_since: Option<SimTime>,
    pub next_attempt: Option<SimTime>,
    /// Gave up: the process must stop.
    pub failed: Option<String>,
}

/// Jobs merged into one write at most.
pub const MERGE_LIMIT: usize = 32;

/// The delay before attempt `failures + 1` of a store call that failed `failures` times, as
/// production's patience: from 100 ms, doubling, at most 5 s.
pub fn retry_delay(failures: u32) -> Duration {
    Duration::milliseconds((100i64 << failures.saturating_sub(1).min(10)).min(5_000))
}

impl MaterialiserQueue {
    /// When the oldest queued job was submitted.
    pub fn oldest(&self) -> Option<SimTime> {
        self.queued_at.front().copied()
    }

    pub fn clear(&mut self) {
        self.queue.clear();
        self.queued_at.clear();
    }

    /// One write of up to `max` queued jobs (merged), if the writer may try now; it gives up
    /// once the store has failed for `patience_ms` (production's patience).
    pub fn write(
        &mut self,
        store: &mut Store,
        now: SimTime,
        max: usize,
        patience_ms: i64,
        mut inspect: impl FnMut(&MaterialiseJob),
    ) -> Option<Result<(u64, usize), String>> {
        if self.failed.is_some() || self.queue.is_empty() {
            return None;
        }
        if self.next_attempt.is_some_and(|t| now < t) {
            return None;
        }
        if let Err(e) = store.available(now) {
            self.failures += 1;
            let since = *self.failing_since.get_or_insert(now);
            let delay = retry_delay(self.failures);
            if now + delay - since > Duration::milliseconds(patience_ms) {
                self.failed = Some(format!(
                    "materialiser gave up after {} attempts in {} ms: {e}",
                    self.failures,
                    (now - since).num_milliseconds()
                ));
            } else {
                self.next_attempt = Some(now + delay);
            }
            return Some(Err(e));
        }
        let count = max.clamp(1, MERGE_LIMIT).min(self.queue.len());
        let jobs: Vec<(u64, MaterialiseJob)> = self.queue.drain(..count).collect();
        self.queued_at.drain(..count.min(self.queued_at.len()));
        let last = jobs.last().map_or(self.done, |(n, _)| *n);
        for merged in MaterialiseJob::merge_by_stamp(jobs.into_iter().map(|(_, j)| j).collect()) {
            inspect(&merged);
            store.apply(&merged);
        }
        self.done = last;
        self.failures = 0;
        self.failing_since = None;
        self.next_attempt = None;
        Some(Ok((last, count)))
    }
}
