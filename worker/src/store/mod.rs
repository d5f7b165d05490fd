//! The CQL store (ScyllaDB in production, Apache Cassandra locally): the materialised history,
//! execution state, timers and checkpoints behind one [`Store`] trait, with the real
//! [`CqlStore`], an `InMemoryStore` for fast tests, and one `conformance` suite that both
//! must pass (those two with the `test-util` feature only, never in the binary). Also the
//! schema of `schemas/cql/` and its drift check, and what a listing asks ([`list`]).

#[cfg(any(test, feature = "test-util"))]
pub mod conformance;
pub mod cql;
pub mod list;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
pub mod patience;
/// The rows live in the core (the projection derives them); re-exported here.
pub use weir_core::rows;
pub mod schema;
pub mod session;

use std::future::Future;

use chrono::{DateTime, Utc};

pub use cql::CqlStore;
#[cfg(any(test, feature = "test-util"))]
pub use memory::InMemoryStore;
pub use rows::{
    Checkpoint, DroppedTimerBucket, EntryKind, ExecutionRow, ExecutionState, HistoryRow,
    MAX_TIMER_BUCKETS_PER_SCAN, MaterialiseJob, TIMER_BUCKET_SECONDS, TimerKey, TimerKind,
    TimerRow, TimerWatermark, WriteStamp, timer_bucket, to_store_precision,
};
pub use session::{ConnectFailure, CqlConfig, CqlLogin, CqlTls, StoreError, connect};

use crate::model::ids::ExecutionId;

/// A workflow component build, kept under its content digest so that executions pinned to
/// it replay on it on any worker (see `component_builds` in `schemas/cql/tables.cql`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentBuild {
    /// `sha256:<hex>` of `bytes` ([`crate::wasm::engine::component_digest`]).
    pub digest: String,
    /// The registry name it was deployed under (for messages and `weir deploy`).
    pub name: String,
    pub bytes: Vec<u8>,
    pub registered_at: DateTime<Utc>,
}

/// How long the store keeps a finished execution after it finished: its execution row, its
/// list rows and its whole history. Rows carry a CQL TTL, so they expire on their own (no
/// sweeper, no scan); an unfinished execution never expires, however old.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention(Option<chrono::TimeDelta>);

impl Retention {
    /// Keep everything (the default).
    pub const FOREVER: Retention = Retention(None);

    /// Cassandra's largest TTL, 20 years, in seconds.
    pub const MAX_SECS: i64 = 630_720_000;

    /// Keep finished executions for `period` (1 s to 20 years), or `None` if out of range.
    pub fn after(period: chrono::TimeDelta) -> Option<Self> {
        (period.num_seconds() >= 1 && period.num_seconds() <= Self::MAX_SECS)
            .then_some(Retention(Some(period)))
    }

    pub fn period(&self) -> Option<chrono::TimeDelta> {
        self.0
    }

    /// The TTL in seconds (CQL's `USING TTL`; 0 is none) of the rows of the execution `row`
    /// describes, written at `now`: none while it runs; once finished, what is left of the
    /// retention since it finished, so rows written at different times (a re-materialised
    /// batch, the history rewritten at the finish) expire together. At least 1 s: a late
    /// rewrite of an execution already past its retention expires at once rather than never.
    pub fn ttl_secs(&self, row: &ExecutionRow, now: DateTime<Utc>) -> i32 {
        let (Some(period), Some(finished_at)) = (self.0, row.finished_at) else {
            return 0;
        };
        if row.state != rows::ExecutionState::Finished {
            return 0;
        }
        let left = (finished_at + period - now).num_seconds();
        i32::try_from(left.clamp(1, Self::MAX_SECS)).unwrap_or(i32::MAX)
    }
}

/// The size of one stored chunk of a [`ComponentBuild`]: well inside every CQL request and
/// frame limit, whatever the size of the component.
pub const COMPONENT_CHUNK_BYTES: usize = 1 << 20;

/// Persistence of everything a worker materialises. Every write is an idempotent upsert, so
/// re-materialising after a crash (from the last checkpoint) is harmless. No lightweight
/// transactions: each call is one round trip per CQL partition touched.
///
/// Writes are ordered, not last-to-arrive-wins: execution rows by their history version, and
/// timers, checkpoints and watermarks by the [`WriteStamp`] passed in (the writer's group
/// generation and time), so a former owner's late write never replaces a newer one. The
/// store keeps, per row, the write of the greatest stamp (a delete wins a tie).
pub trait Store: Send + Sync {
    /// Upserts changelog records (keyed by execution id and seq).
    fn append_history(
        &self,
        rows: &[HistoryRow],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The whole changelog of an execution, in seq order (empty if unknown).
    fn history(
        &self,
        execution_id: &ExecutionId,
    ) -> impl Future<Output = Result<Vec<HistoryRow>, StoreError>> + Send;

    /// The changelog records of an execution with `seq > after_seq`, in seq order, at most
    /// `limit` of them (what a live view has not seen yet: `crate::api::stream`).
    fn history_after(
        &self,
        execution_id: &ExecutionId,
        after_seq: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<HistoryRow>, StoreError>> + Send {
        async move {
            let mut rows = self.history(execution_id).await?;
            rows.retain(|row| row.seq > after_seq);
            rows.truncate(limit);
            Ok(rows)
        }
    }

    /// Upserts an execution row, unless the store has the row at a later history version
    /// (writes are ordered by history version, not by arrival).
    fn put_execution(
        &self,
        row: &ExecutionRow,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn execution(
        &self,
        execution_id: &ExecutionId,
    ) -> impl Future<Output = Result<Option<ExecutionRow>, StoreError>> + Send;

    /// A page of the executions `query` asks for, newest first, from tables (or indexes)
    /// kept for that read, never a scan of every execution: the executions of one function
    /// (day by day, back to `created_from`, by default [`rows::DEFAULT_LIST_LOOKBACK_DAYS`])
    /// or the children of one execution. Which rows match is [`rows::ListQuery::matches`].
    fn list_executions(
        &self,
        query: &rows::ListQuery,
    ) -> impl Future<Output = Result<rows::ListPage, StoreError>> + Send;

    /// Every function that has had an execution, sorted: what a user picks a list from. The
    /// catalogue is not subject to [`Retention`].
    fn functions(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    fn put_timers(
        &self,
        timers: &[TimerRow],
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes a timer (fired or cancelled); removing an unknown timer is not an error.
    fn delete_timer(
        &self,
        kafka_partition: i32,
        due_at: DateTime<Utc>,
        timer_id: &str,
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes every timer of a bucket written at or before `stamp`, and every such write
    /// that arrives later (a bucket the partition's watermark passed whole; see
    /// [`DroppedTimerBucket`]).
    fn drop_timer_bucket(
        &self,
        dropped: DroppedTimerBucket,
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Timers of a partition with `from <= due_at < until`, ordered by due time then id.
    fn timers_between(
        &self,
        kafka_partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<TimerRow>, StoreError>> + Send;

    fn checkpoint(
        &self,
        topic: &str,
        kafka_partition: i32,
    ) -> impl Future<Output = Result<Option<Checkpoint>, StoreError>> + Send;

    fn put_checkpoint(
        &self,
        checkpoint: &Checkpoint,
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The timer watermark of a partition, if one was written.
    fn timer_watermark(
        &self,
        kafka_partition: i32,
    ) -> impl Future<Output = Result<Option<TimerWatermark>, StoreError>> + Send;

    fn put_timer_watermark(
        &self,
        watermark: &TimerWatermark,
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores a component build under its digest (idempotent: a digest names one content).
    fn put_component_build(
        &self,
        build: &ComponentBuild,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The build stored under `digest`, if a whole one is (a write cut short is not one).
    fn component_build(
        &self,
        digest: &str,
    ) -> impl Future<Output = Result<Option<ComponentBuild>, StoreError>> + Send;

    /// Whether a whole build is stored under `digest`, without reading it.
    fn has_component_build(
        &self,
        digest: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes what committed batches changed about some executions: their new changelog rows
    /// ([`Store::append_history`]) and their execution rows ([`Store::put_execution`]). A
    /// backend that can send an execution's rows and its execution row in one request (they
    /// share a partition key) does so: this is the materialiser's hot path, and a request
    /// costs the database more than a row.
    fn materialise(
        &self,
        history: &[HistoryRow],
        executions: &[ExecutionRow],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            self.append_history(history).await?;
            futures::future::try_join_all(executions.iter().map(|row| self.put_execution(row)))
                .await?;
            Ok(())
        }
    }

    /// Upserts several checkpoints (in as few requests as the backend allows).
    fn put_checkpoints(
        &self,
        checkpoints: &[Checkpoint],
        stamp: WriteStamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            futures::future::try_join_all(
                checkpoints.iter().map(|c| self.put_checkpoint(c, stamp)),
            )
            .await?;
            Ok(())
        }
    }
}

/// The buckets `timers_between(from, until)` must read, refusing absurd ranges.
pub(crate) fn buckets_between(
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<std::ops::RangeInclusive<i64>, StoreError> {
    let (first, last) = (timer_bucket(from), timer_bucket(until));
    if last - first > MAX_TIMER_BUCKETS_PER_SCAN {
        return Err(StoreError::TimerRange {
            from,
            until,
            max_buckets: MAX_TIMER_BUCKETS_PER_SCAN,
        });
    }
    Ok(first..=last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn retention_ttls_count_from_the_finish() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let row = |finished: Option<i64>| ExecutionRow {
            execution_id: "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("id"),
            ffqn: "a:b/c.d".to_owned(),
            parent_id: None,
            params: "[]".to_owned(),
            state: if finished.is_some() {
                rows::ExecutionState::Finished
            } else {
                rows::ExecutionState::Running
            },
            result: finished.map(|_| r#"{"ok":1}"#.to_owned()),
            history_version: 3,
            kafka_partition: 0,
            created_at: now - TimeDelta::days(400),
            updated_at: now,
            finished_at: finished.map(|ago| now - TimeDelta::seconds(ago)),
        };
        let day = Retention::after(TimeDelta::days(1)).expect("a day");
        // (retention, seconds since the finish or running, TTL)
        let table = [
            (Retention::FOREVER, Some(0), 0),
            (Retention::FOREVER, None, 0),
            (day, None, 0),
            (day, Some(0), 86_400),
            (day, Some(3_600), 82_800),
            (day, Some(86_399), 1),
            (day, Some(86_400), 1),
            (day, Some(10 * 86_400), 1),
        ];
        for (retention, finished, ttl) in table {
            assert_eq!(
                retention.ttl_secs(&row(finished), now),
                ttl,
                "{retention:?} finished {finished:?} s ago"
            );
        }
        assert_eq!(Retention::after(TimeDelta::zero()), None);
        assert_eq!(
            Retention::after(TimeDelta::seconds(Retention::MAX_SECS + 1)),
            None
        );
        assert!(Retention::after(TimeDelta::seconds(Retention::MAX_SECS)).is_some());
    }
}
