//! What the store keeps, as plain rows, and what one committed batch writes into it
//! ([`MaterialiseJob`]). History records are opaque bytes here: their encoding belongs to the
//! codec, so neither the core nor the store depends on the wire format. States and kinds are
//! typed; they become strings only at the CQL boundary ([`ExecutionState::as_str`], …).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use indexmap::IndexMap;

use crate::model::ids::ExecutionId;

/// A string that names none of an enum's values (read from the store).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`")]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
}

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal, { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling in the store.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownName { what: $what, value: other.to_owned() }),
                }
            }
        }
    };
}

named_enum!(
    /// Where an execution stands, as the projection derives it from its history.
    ExecutionState, "execution state", {
        /// Created with a start time in the future; its schedule timer starts it.
        Scheduled => "scheduled",
        /// Waiting for its concurrency slots (a key or its function at its limit): it starts
        /// once it holds them all (`docs/design/concurrency.md`).
        Queued => "queued",
        Running => "running",
        /// Paused (`weir pause`): it runs no code until resumed.
        Paused => "paused",
        Finished => "finished",
    }
);

named_enum!(
    /// The kind of a changelog record.
    EntryKind, "history entry kind", {
        Created => "created",
        Event => "event",
        Response => "response",
        EventReceived => "event-received",
        CancelRequested => "cancel-requested",
        Paused => "paused",
        Resumed => "resumed",
        Reset => "reset",
        SlotGranted => "slot-granted",
        Finished => "finished",
        Upgraded => "upgraded",
    }
);

named_enum!(
    /// What a due timer does.
    TimerKind, "timer kind", {
        /// Answers a delay with `DelayFinished`.
        Delay => "delay",
        /// Starts a scheduled execution.
        Schedule => "schedule",
        /// Tries again to start the run of an execution whose start was deferred (a full
        /// instance pool, a component a rolling deploy has not brought yet): durable, so that
        /// a new owner tries it too.
        Retry => "retry",
        /// Finishes an execution that has not finished by its deadline `timed-out`.
        Deadline => "deadline",
    }
);

/// What a timer is, by kind and the execution or delay it is for: the one rule that makes
/// a stored `timer_id` ([`TimerRow::timer_id`]) and reads it back ([`TimerRow::id`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TimerId {
    /// A workflow's delay, by its id (which names its execution).
    Delay(crate::model::DelayId),
    /// The start of a scheduled execution.
    Schedule(ExecutionId),
    /// The next try of a start that was deferred (or a rebuild that is owed).
    Retry(ExecutionId),
    /// The deadline of an execution.
    Deadline(ExecutionId),
}

impl TimerId {
    pub fn kind(&self) -> TimerKind {
        match self {
            TimerId::Delay(_) => TimerKind::Delay,
            TimerId::Schedule(_) => TimerKind::Schedule,
            TimerId::Retry(_) => TimerKind::Retry,
            TimerId::Deadline(_) => TimerKind::Deadline,
        }
    }

    /// The timer row of this timer for `execution_id`, owned by `partition`, due at `due_at`.
    pub fn row(
        &self,
        partition: i32,
        execution_id: &ExecutionId,
        due_at: DateTime<Utc>,
    ) -> TimerRow {
        TimerRow {
            kafka_partition: partition,
            due_at,
            timer_id: self.to_string(),
            execution_id: execution_id.clone(),
            kind: self.kind(),
        }
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerId::Delay(id) => write!(f, "{id}"),
            TimerId::Schedule(id) => write!(f, "schedule:{id}"),
            TimerId::Retry(id) => write!(f, "{RETRY_PREFIX}{id}"),
            TimerId::Deadline(id) => write!(f, "deadline:{id}"),
        }
    }
}

/// A stored timer whose id does not read as its kind's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timer `{timer_id}` of {execution_id} ({kind}) is not a {kind} timer id: {reason}")]
pub struct TimerIdError {
    pub timer_id: String,
    pub execution_id: ExecutionId,
    pub kind: TimerKind,
    pub reason: String,
}

/// One record of an execution's changelog (`weir.history`), materialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub execution_id: ExecutionId,
    /// Position in the execution's changelog, from 0; the upsert key with `execution_id`.
    pub seq: i64,
    pub kind: EntryKind,
    /// The encoded record, exactly as committed to `weir.history`.
    pub record: Vec<u8>,
    /// Where the record was committed in `weir.history`.
    pub kafka_partition: i32,
    pub kafka_offset: i64,
    pub recorded_at: DateTime<Utc>,
}

/// Where an execution stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    pub execution_id: ExecutionId,
    pub ffqn: String,
    pub parent_id: Option<ExecutionId>,
    /// JSON array of the parameters.
    pub params: String,
    pub state: ExecutionState,
    /// The result as JSON, once finished.
    pub result: Option<String>,
    /// Number of changelog records of this execution (the next seq).
    pub history_version: i64,
    pub kafka_partition: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A delay or a scheduled execution, due at `due_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    /// The partition of the co-partitioned topics that owns the timer's execution.
    pub kafka_partition: i32,
    pub due_at: DateTime<Utc>,
    /// Unique per timer (a delay id, `schedule:<execution id>`, `retry:<execution id>`,
    /// `deadline:<execution id>`).
    pub timer_id: String,
    pub execution_id: ExecutionId,
    pub kind: TimerKind,
}

impl TimerRow {
    /// What this timer is, read from its kind and id.
    pub fn id(&self) -> Result<TimerId, TimerIdError> {
        let fail = |reason: String| TimerIdError {
            timer_id: self.timer_id.clone(),
            execution_id: self.execution_id.clone(),
            kind: self.kind,
            reason,
        };
        let of_execution = |prefix: &str| -> Result<ExecutionId, TimerIdError> {
            let rest = self
                .timer_id
                .strip_prefix(prefix)
                .ok_or_else(|| fail(format!("it does not start with `{prefix}`")))?;
            ExecutionId::from_str(rest).map_err(|e| fail(e.to_string()))
        };
        Ok(match self.kind {
            TimerKind::Delay => TimerId::Delay(
                crate::model::DelayId::from_str(&self.timer_id).map_err(|e| fail(e.to_string()))?,
            ),
            TimerKind::Schedule => TimerId::Schedule(of_execution("schedule:")?),
            TimerKind::Retry => TimerId::Retry(of_execution(RETRY_PREFIX)?),
            TimerKind::Deadline => TimerId::Deadline(of_execution("deadline:")?),
        })
    }

    pub fn key(&self) -> TimerKey {
        TimerKey {
            kafka_partition: self.kafka_partition,
            due_at: self.due_at,
            timer_id: self.timer_id.clone(),
        }
    }
}

/// What identifies a stored timer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub kafka_partition: i32,
    pub due_at: DateTime<Utc>,
    pub timer_id: String,
}

/// Width of a timer bucket: timers of one partition due in the same minute share a CQL
/// partition, so restoring the next hour reads 60 small partitions, not one huge one.
pub const TIMER_BUCKET_SECONDS: i64 = 60;

/// The most buckets one scan of the timer table may read (a week of minutes): a caller
/// asking for more has lost its watermark, which is a bug to report, not a scan to run.
pub const MAX_TIMER_BUCKETS_PER_SCAN: i64 = 7 * 24 * 60;

/// The bucket of a due time.
pub fn timer_bucket(due_at: DateTime<Utc>) -> i64 {
    due_at.timestamp().div_euclid(TIMER_BUCKET_SECONDS)
}

/// CQL timestamps have millisecond precision; every store keeps exactly that much, so that
/// the in-memory stores behave like the real one.
pub fn to_store_precision(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

/// A bucket of a partition's timers that its owner's watermark has passed whole: every
/// timer due in it has fired (and is deleted), so the owner drops the bucket. A write that
/// lands there later with an older stamp — a former owner's queued `retry` timer, written
/// after the new owner loaded its timers from the watermark and so never to be loaded — is
/// shadowed by the drop (CQL: a partition deletion at a later write timestamp); see
/// [`crate::timers::TimerIndex::watermarks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DroppedTimerBucket {
    pub kafka_partition: i32,
    pub bucket: i64,
}

/// The timer table of an in-memory store, as CQL keeps it: rows by (partition, due time,
/// id), each the write of the greatest stamp ([`LwwTable`]), and bucket drops that delete
/// every row of a bucket written at or before their stamp, and shadow such writes arriving
/// after them.
#[derive(Debug, Clone, Default)]
pub struct TimerTable {
    rows: LwwTable<(i32, DateTime<Utc>, String), TimerRow>,
    dropped: std::collections::BTreeMap<DroppedTimerBucket, WriteStamp>,
}

impl TimerTable {
    pub fn put(&mut self, timer: &TimerRow, stamp: WriteStamp) {
        let mut timer = timer.clone();
        timer.due_at = to_store_precision(timer.due_at);
        if self.shadowed(timer.kafka_partition, timer.due_at, stamp) {
            return;
        }
        let key = (timer.kafka_partition, timer.due_at, timer.timer_id.clone());
        self.rows.write(key, stamp, Some(timer));
    }

    /// Whether a put of `timer` stamped `stamp` would be lost to a delete of the same stamp
    /// (a delete wins ties, as in CQL).
    pub fn ties_with_a_delete(&self, timer: &TimerRow, stamp: WriteStamp) -> bool {
        let key = (
            timer.kafka_partition,
            to_store_precision(timer.due_at),
            timer.timer_id.clone(),
        );
        self.rows.cells.get(&key) == Some(&(stamp, None))
    }

    pub fn delete(&mut self, key: &TimerKey, stamp: WriteStamp) {
        let due_at = to_store_precision(key.due_at);
        let row = (key.kafka_partition, due_at, key.timer_id.clone());
        self.rows.write(row, stamp, None);
    }

    pub fn drop_bucket(&mut self, dropped: DroppedTimerBucket, stamp: WriteStamp) {
        let at = self.dropped.entry(dropped).or_insert(stamp);
        *at = (*at).max(stamp);
        let start = DateTime::from_timestamp(dropped.bucket * TIMER_BUCKET_SECONDS, 0);
        let end = DateTime::from_timestamp((dropped.bucket + 1) * TIMER_BUCKET_SECONDS, 0);
        let (Some(start), Some(end)) = (start, end) else {
            return;
        };
        let from = (dropped.kafka_partition, start, String::new());
        let until = (dropped.kafka_partition, end, String::new());
        let stamp = *at;
        self.rows
            .cells
            .retain(|key, (written, _)| !(from <= *key && *key < until && *written <= stamp));
    }

    /// Whether a write stamped `stamp` at `due_at` falls in a bucket dropped at or after it.
    fn shadowed(&self, partition: i32, due_at: DateTime<Utc>, stamp: WriteStamp) -> bool {
        let bucket = DroppedTimerBucket {
            kafka_partition: partition,
            bucket: timer_bucket(due_at),
        };
        self.dropped.get(&bucket).is_some_and(|at| stamp <= *at)
    }

    /// Timers of `partition` with `from <= due_at < until`, by due time then id.
    pub fn between(
        &self,
        partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Iterator<Item = &TimerRow> {
        let (from, until) = (to_store_precision(from), to_store_precision(until));
        self.rows
            .range((partition, from, String::new())..(partition, until, String::new()))
            .map(|(_, t)| t)
    }

    /// Every timer, by partition, due time and id.
    pub fn iter(&self) -> impl Iterator<Item = &TimerRow> {
        self.rows.values()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// How the id of a `retry` timer starts (`retry:<execution id>`).
const RETRY_PREFIX: &str = "retry:";

/// How far one partition of a changelog topic is materialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub topic: String,
    pub kafka_partition: i32,
    /// The next offset to materialise: everything below it is in the store.
    pub materialised_offset: i64,
    /// The worker instance that wrote it (for operators).
    pub owner: String,
    pub updated_at: DateTime<Utc>,
}

/// Per partition: every timer due before `fired_before` has fired (and is deleted); a new
/// owner starts reading the timer table there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerWatermark {
    pub kafka_partition: i32,
    pub fired_before: DateTime<Utc>,
    pub owner: String,
    pub updated_at: DateTime<Utc>,
}

/// The order of a store write: the store keeps, of every row (and every deleted row), the
/// write with the greatest stamp, whatever order the writes arrive in. CQL stores it as the
/// write timestamp (`USING TIMESTAMP`); the in-memory stores keep it beside the row
/// ([`LwwTable`]).
///
/// Why: a worker that lost a partition (a zombie resuming after a freeze, or a live worker
/// whose background writer lags behind a rebalance) can still write what it had queued after
/// the new owner wrote newer rows. Plain upserts let the older write win for good: a fired
/// delay's timer row put back, behind the watermark, never loaded again (issue 11 item 0).
///
/// - Execution rows are stamped with their history version ([`WriteStamp::history_version`]):
///   a row always describes a prefix of the execution's history, and a longer prefix wins.
/// - Timers, checkpoints and timer watermarks are stamped with the consumer group generation
///   in which the job was made, then its time in seconds ([`WriteStamp::owner`]): the group
///   gives a partition to one member per generation and generations only grow, so a new
///   owner's writes outrank everything a former owner queued. (A static member restarted in
///   the same generation writes later in time.) At equal stamps a delete wins, as in CQL.
///
/// Both kinds lie above 2^52, beyond every wall-clock timestamp in microseconds until the
/// year 2112, so rows written by older versions without a stamp never outrank a stamped one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WriteStamp(pub i64);

impl WriteStamp {
    const VERSION_BASE: i64 = 1 << 52;
    const OWNER_BASE: i64 = 1 << 53;
    /// 2020-01-01T00:00:00Z: the seconds field counts from it (32 bits: until 2156).
    const EPOCH_SECS: i64 = 1_577_836_800;
    /// The largest generation that fits beside the seconds.
    pub const MAX_GENERATION: u64 = ((i64::MAX - Self::OWNER_BASE) >> 32) as u64;

    /// The stamp of an execution row at `history_version`.
    pub fn history_version(history_version: i64) -> Self {
        WriteStamp(Self::VERSION_BASE + history_version.max(0))
    }

    /// The stamp of a job made in group `generation` at `at`.
    pub fn owner(generation: u64, at: DateTime<Utc>) -> Self {
        let generation = generation.min(Self::MAX_GENERATION) as i64;
        let secs = (at.timestamp() - Self::EPOCH_SECS).clamp(0, u32::MAX as i64);
        WriteStamp(Self::OWNER_BASE + (generation << 32) + secs)
    }

    /// Whether a write stamped `self` (a delete if `delete`) replaces what a write stamped
    /// `current` left (a delete if `current_deleted`): a later stamp wins; at equal stamps a
    /// delete wins, and of two upserts the one applied last.
    pub fn supersedes(self, delete: bool, current: WriteStamp, current_deleted: bool) -> bool {
        match self.cmp(&current) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => delete || !current_deleted,
        }
    }
}

/// A table of an in-memory store that keeps, per key, the row (or the deletion) of the
/// greatest [`WriteStamp`], as CQL does with write timestamps.
#[derive(Debug, Clone)]
pub struct LwwTable<K: Ord, V> {
    cells: std::collections::BTreeMap<K, (WriteStamp, Option<V>)>,
}

impl<K: Ord, V> Default for LwwTable<K, V> {
    fn default() -> Self {
        LwwTable {
            cells: std::collections::BTreeMap::new(),
        }
    }
}

impl<K: Ord, V> LwwTable<K, V> {
    /// Upserts (`Some`) or deletes (`None`) `key`, unless a later write is there.
    pub fn write(&mut self, key: K, stamp: WriteStamp, value: Option<V>) {
        match self.cells.get_mut(&key) {
            Some(cell) => {
                if stamp.supersedes(value.is_none(), cell.0, cell.1.is_none()) {
                    *cell = (stamp, value);
                }
            }
            None => {
                self.cells.insert(key, (stamp, value));
            }
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.cells.get(key).and_then(|(_, v)| v.as_ref())
    }

    /// The live rows with keys in `range`, in key order.
    pub fn range<R: std::ops::RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = (&K, &V)> {
        self.cells
            .range(range)
            .filter_map(|(k, (_, v))| v.as_ref().map(|v| (k, v)))
    }

    /// The live rows, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.range(..)
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// The timer writes of a job, latest change per timer: a timer put and then deleted is only
/// deleted (sent together, the two would reach the store concurrently, where the delete
/// could lose). The one rule for a live batch, catch-up and [`MaterialiseJob::merge`].
#[derive(Debug, Default, Clone)]
pub struct TimerChanges(IndexMap<TimerKey, Option<TimerRow>>);

impl TimerChanges {
    pub fn put(&mut self, timer: TimerRow) {
        self.0.insert(timer.key(), Some(timer));
    }

    pub fn delete(&mut self, key: TimerKey) {
        self.0.insert(key, None);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds the changes to `job`'s timer writes (taking them out of `self`).
    pub fn write_into(&mut self, job: &mut MaterialiseJob) {
        for (key, timer) in self.0.drain(..) {
            match timer {
                Some(timer) => job.new_timers.push(timer),
                None => job.removed_timers.push(key),
            }
        }
    }
}

/// Everything one committed batch (or a run of catch-up) adds to or removes from the store.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MaterialiseJob {
    /// The order of its timer, checkpoint and watermark writes ([`WriteStamp::owner`]).
    pub stamp: WriteStamp,
    /// Changelog rows with their `weir.history` partition and offset.
    pub history: Vec<HistoryRow>,
    pub executions: Vec<ExecutionRow>,
    pub new_timers: Vec<TimerRow>,
    /// Fired or cancelled timers.
    pub removed_timers: Vec<TimerKey>,
    /// Written last: history checkpoints and timer watermarks.
    pub checkpoints: Vec<Checkpoint>,
    pub watermarks: Vec<TimerWatermark>,
    /// Timer buckets the watermarks passed whole, dropped with this job's stamp.
    pub dropped_timer_buckets: Vec<DroppedTimerBucket>,
}

impl MaterialiseJob {
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
            && self.executions.is_empty()
            && self.new_timers.is_empty()
            && self.removed_timers.is_empty()
            && self.checkpoints.is_empty()
            && self.watermarks.is_empty()
            && self.dropped_timer_buckets.is_empty()
    }

    /// The writes of `jobs` (queued in this order) with as few jobs as their stamps allow:
    /// each run of consecutive jobs of one stamp merged into one ([`MaterialiseJob::merge`]),
    /// the runs in order. Jobs of different stamps are never merged: the merged job would
    /// carry the later stamp for every change, and a timer deleted by the earlier job would
    /// then outrank the same timer put again by a job after the merge, stamped to outrank
    /// only the delete's own stamp ([`crate::stamp_order`]; found by the simulation, seed
    /// 508935).
    pub fn merge_by_stamp(jobs: Vec<MaterialiseJob>) -> Vec<MaterialiseJob> {
        let mut runs: Vec<Vec<MaterialiseJob>> = Vec::new();
        for job in jobs {
            match runs.last_mut() {
                Some(run) if run[0].stamp == job.stamp => run.push(job),
                _ => runs.push(vec![job]),
            }
        }
        runs.into_iter().map(MaterialiseJob::merge).collect()
    }

    /// One job with the effect of `jobs` (of one stamp) applied in order: history rows
    /// accumulate; of an execution row, a timer (written or removed), a checkpoint and a
    /// watermark only the latest state is kept. (Keeping a timer's insert and its later
    /// delete both would also send them to the store concurrently, where the delete could
    /// lose.) A worker's queue never holds jobs of two generations: a take-over flushes it
    /// first.
    pub fn merge(jobs: Vec<MaterialiseJob>) -> MaterialiseJob {
        if jobs.len() == 1 {
            return jobs.into_iter().next().unwrap_or_default();
        }
        let mut history = Vec::new();
        let mut executions: IndexMap<ExecutionId, ExecutionRow> = IndexMap::new();
        let mut timers = TimerChanges::default();
        let mut checkpoints: IndexMap<(String, i32), Checkpoint> = IndexMap::new();
        let mut watermarks: IndexMap<i32, TimerWatermark> = IndexMap::new();
        let mut dropped = std::collections::BTreeSet::new();
        let mut stamp = WriteStamp::default();
        for job in jobs {
            debug_assert!(
                stamp == WriteStamp::default() || stamp == job.stamp,
                "jobs of one stamp are merged ({stamp:?}, {:?})",
                job.stamp
            );
            stamp = stamp.max(job.stamp);
            history.extend(job.history);
            for row in job.executions {
                executions.insert(row.execution_id.clone(), row);
            }
            for timer in job.new_timers {
                timers.put(timer);
            }
            for key in job.removed_timers {
                timers.delete(key);
            }
            for checkpoint in job.checkpoints {
                let key = (checkpoint.topic.clone(), checkpoint.kafka_partition);
                checkpoints.insert(key, checkpoint);
            }
            for watermark in job.watermarks {
                watermarks.insert(watermark.kafka_partition, watermark);
            }
            dropped.extend(job.dropped_timer_buckets);
        }
        let mut merged = MaterialiseJob {
            stamp,
            history,
            executions: executions.into_values().collect(),
            checkpoints: checkpoints.into_values().collect(),
            watermarks: watermarks.into_values().collect(),
            dropped_timer_buckets: dropped.into_iter().collect(),
            ..MaterialiseJob::default()
        };
        timers.write_into(&mut merged);
        merged
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    /// Jobs of one stamp merge into one; a job of another stamp starts another, so a delete
    /// keeps its own job's stamp and a later put of the same timer, stamped after it, wins.
    #[test]
    fn jobs_of_different_stamps_are_never_merged() {
        let id = ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        let due = DateTime::from_timestamp(1_800_000_000, 0).expect("valid time");
        let timer = crate::projection::retry_timer(0, &id, due);
        let at = |secs| WriteStamp::owner(3, due + chrono::Duration::seconds(secs));
        let job = |stamp, put: bool| MaterialiseJob {
            stamp,
            new_timers: if put { vec![timer.clone()] } else { Vec::new() },
            removed_timers: if put { Vec::new() } else { vec![timer.key()] },
            ..MaterialiseJob::default()
        };
        let runs = MaterialiseJob::merge_by_stamp(vec![
            job(at(0), false),
            job(at(0), false),
            job(at(1), false),
            job(at(2), true),
        ]);
        let stamps: Vec<WriteStamp> = runs.iter().map(|j| j.stamp).collect();
        assert_eq!(stamps, [at(0), at(1), at(2)]);
        assert_eq!(
            runs[1].removed_timers,
            [timer.key()],
            "the delete keeps its stamp"
        );
        let mut table = TimerTable::default();
        for run in &runs {
            for t in &run.new_timers {
                table.put(t, run.stamp);
            }
            for k in &run.removed_timers {
                table.delete(k, run.stamp);
            }
        }
        assert_eq!(table.len(), 1, "the put after the deletes stands");
    }
}

// ---------------------------------------------------------------- listing executions

/// How long ago `weir list` looks by default when no `created_from` is given, in days of the
/// store's `executions_by_function` buckets.
pub const DEFAULT_LIST_LOOKBACK_DAYS: i64 = 30;

/// The day bucket (days since the Unix epoch, UTC) of a creation time: the partition of
/// `executions_by_function` the execution is listed in.
pub fn created_day(created_at: DateTime<Utc>) -> i64 {
    created_at.timestamp().div_euclid(86_400)
}

/// Which executions a list reads: those of one function, or the children of one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListBy {
    Function(String),
    Parent(ExecutionId),
}

/// Where a page ended: the next page starts after this execution (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub created_at: DateTime<Utc>,
    pub execution_id: ExecutionId,
}

impl ListCursor {
    /// Whether `e` comes after the cursor in a list's order (newest first): on the next page.
    pub fn precedes(&self, e: &ListedExecution) -> bool {
        e.order_key() < (self.created_at, self.execution_id.to_string())
    }
}

/// A list of executions, newest first (by creation time, then id, both descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub by: ListBy,
    pub state: Option<ExecutionState>,
    /// `ok`, `err` or an execution error kind (`trap`, `timed-out`, …): finished ones only.
    pub outcome: Option<String>,
    /// Created at or after.
    pub created_from: Option<DateTime<Utc>>,
    /// Created before.
    pub created_until: Option<DateTime<Utc>>,
    /// Finished at or after (finished ones only).
    pub finished_from: Option<DateTime<Utc>>,
    /// Finished before (finished ones only).
    pub finished_until: Option<DateTime<Utc>>,
    /// At most this many a page (at least 1).
    pub limit: usize,
    pub after: Option<ListCursor>,
}

/// One execution in a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedExecution {
    pub execution_id: ExecutionId,
    pub ffqn: String,
    pub parent_id: Option<ExecutionId>,
    pub state: ExecutionState,
    /// `ok`, `err` or the execution error's kind, once finished.
    pub outcome: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A page of a list; `next` is where the following page starts, `None` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    pub executions: Vec<ListedExecution>,
    pub next: Option<ListCursor>,
}

/// The outcome of a finished execution, from its `result` column (`{"ok": …}`, `{"err": …}`,
/// `{"execution_error": {"kind": …}}`). The value itself is skipped, not built: the
/// materialiser calls this for every finished row it lists, and a result may be large.
pub fn outcome_of(result_json: &str) -> Option<String> {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Stored {
        Ok(IgnoredAny),
        Err(IgnoredAny),
        ExecutionError(Kind),
    }
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: String,
    }
    Some(match serde_json::from_str::<Stored>(result_json).ok()? {
        Stored::Ok(_) => "ok".to_owned(),
        Stored::Err(_) => "err".to_owned(),
        Stored::ExecutionError(Kind { kind }) => kind,
    })
}

impl ListedExecution {
    /// What a list shows of an execution row.
    pub fn of(row: &ExecutionRow) -> Self {
        ListedExecution {
            execution_id: row.execution_id.clone(),
            ffqn: row.ffqn.clone(),
            parent_id: row.parent_id.clone(),
            state: row.state,
            outcome: row.result.as_deref().and_then(outcome_of),
            created_at: row.created_at,
            finished_at: row.finished_at,
        }
    }

    /// The list's order, descending: creation time, then the id as text (as CQL orders the
    /// `execution_id` clustering column).
    pub fn order_key(&self) -> (DateTime<Utc>, String) {
        (self.created_at, self.execution_id.to_string())
    }
}

impl ListQuery {
    /// The query with the bounds a list of a function always has: created before
    /// `created_until` (default: a day after `now`) and at or after `created_from` (default:
    /// [`DEFAULT_LIST_LOOKBACK_DAYS`] before that). A parent's children are not bounded.
    pub fn bounded(&self, now: DateTime<Utc>) -> ListQuery {
        let mut query = self.clone();
        if let ListBy::Function(_) = query.by {
            let until = query
                .created_until
                .unwrap_or(now + chrono::TimeDelta::days(1));
            query.created_until = Some(until);
            query.created_from = Some(
                query
                    .created_from
                    .unwrap_or(until - chrono::TimeDelta::days(DEFAULT_LIST_LOOKBACK_DAYS)),
            );
        }
        query
    }

    /// Whether `e` belongs in the list (every filter, the cursor included): the one rule every
    /// store applies, whatever it reads its candidates from.
    pub fn matches(&self, e: &ListedExecution) -> bool {
        let by = match &self.by {
            ListBy::Function(ffqn) => e.ffqn == *ffqn,
            ListBy::Parent(parent) => e.parent_id.as_ref() == Some(parent),
        };
        let after = self.after.as_ref().is_none_or(|c| c.precedes(e));
        let finished_in =
            |bound: Option<DateTime<Utc>>, keep: fn(DateTime<Utc>, DateTime<Utc>) -> bool| {
                bound.is_none_or(|b| e.finished_at.is_some_and(|f| keep(f, b)))
            };
        by && after
            && self.state.is_none_or(|s| e.state == s)
            && self
                .outcome
                .as_ref()
                .is_none_or(|o| e.outcome.as_ref() == Some(o))
            && self.created_from.is_none_or(|t| e.created_at >= t)
            && self.created_until.is_none_or(|t| e.created_at < t)
            && finished_in(self.finished_from, |f, b| f >= b)
            && finished_in(self.finished_until, |f, b| f < b)
    }

    /// The page of `candidates` (in any order, a superset of the matches) this query asks for.
    pub fn page(&self, candidates: impl IntoIterator<Item = ListedExecution>) -> ListPage {
        let mut matching: Vec<ListedExecution> =
            candidates.into_iter().filter(|e| self.matches(e)).collect();
        matching.sort_by_key(|e| std::cmp::Reverse(e.order_key()));
        let limit = self.limit.max(1);
        let next = (matching.len() > limit).then(|| {
            let last = &matching[limit - 1];
            ListCursor {
                created_at: last.created_at,
                execution_id: last.execution_id.clone(),
            }
        });
        matching.truncate(limit);
        ListPage {
            executions: matching,
            next,
        }
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::{DateTime, ExecutionId, TimerId, TimerKind, outcome_of};

    #[test]
    fn the_outcome_is_read_from_the_stored_result() {
        assert_eq!(
            outcome_of(r#"{"ok":{"big":[1,2,3]}}"#).as_deref(),
            Some("ok")
        );
        assert_eq!(outcome_of(r#"{"err":"no"}"#).as_deref(), Some("err"));
        assert_eq!(
            outcome_of(r#"{"execution_error":{"kind":"trap","reason":"x","detail":"y"}}"#)
                .as_deref(),
            Some("trap")
        );
        assert_eq!(outcome_of("not json"), None);
        assert_eq!(outcome_of(r#"{"other":1}"#), None);
    }

    /// Every kind of timer reads back as the id it was made from; an id of another kind's
    /// shape is an error naming the timer, not a timer of the wrong kind.
    #[test]
    fn timer_ids_read_back_as_they_were_made() {
        let execution: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("an id");
        let delay: crate::model::DelayId = "Delay_01ARZ3NDEKTSV4RRFFQ69G5FAV.o:1-sleep_1"
            .parse()
            .expect("a delay id");
        let at = DateTime::from_timestamp(1_800_000_000, 0).expect("a time");
        for id in [
            TimerId::Delay(delay),
            TimerId::Schedule(execution.clone()),
            TimerId::Retry(execution.clone()),
            TimerId::Deadline(execution.clone()),
        ] {
            let row = id.row(3, &execution, at);
            assert_eq!(row.kind, id.kind());
            assert_eq!(row.id(), Ok(id));
        }
        let mut wrong = TimerId::Retry(execution.clone()).row(3, &execution, at);
        wrong.kind = TimerKind::Deadline;
        let error = wrong.id().expect_err("a retry id read as a deadline's");
        assert!(error.to_string().contains("retry:E_"), "{error}");
    }
}
