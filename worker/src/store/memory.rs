//! An in-memory [`Store`] for fast unit tests of the worker. It keeps what the CQL store keeps,
//! at the same timestamp precision, orders writes by the same [`WriteStamp`]s (the core's
//! [`LwwTable`]), and passes the same [`super::conformance`] suite.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::rows::{
    Checkpoint, DroppedTimerBucket, ExecutionRow, HistoryRow, LwwTable, TimerKey, TimerRow,
    TimerTable, TimerWatermark, WriteStamp,
};
use super::{ComponentBuild, Retention, Store, StoreError, buckets_between, to_store_precision};
use crate::model::ids::ExecutionId;

#[derive(Default)]
struct Tables {
    history: HashMap<String, BTreeMap<i64, HistoryRow>>,
    executions: LwwTable<String, ExecutionRow>,
    timers: TimerTable,
    checkpoints: LwwTable<(String, i32), Checkpoint>,
    watermarks: LwwTable<i32, TimerWatermark>,
    builds: HashMap<String, ComponentBuild>,
    /// When a finished execution's rows expire ([`Retention`]), by execution id.
    expires: HashMap<String, DateTime<Utc>>,
}

impl Tables {
    fn expired(&self, execution_id: &str, now: DateTime<Utc>) -> bool {
        self.expires.get(execution_id).is_some_and(|at| *at <= now)
    }
}

#[derive(Default)]
pub struct InMemoryStore {
    tables: Mutex<Tables>,
    retention: Retention,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Finished executions expire after `retention`, as CQL TTLs make them in the real store.
    pub fn with_retention(retention: Retention) -> Self {
        InMemoryStore {
            retention,
            ..Self::default()
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Tables) -> T) -> T {
        // A panic while holding the lock is a bug in this file; the data is still consistent
        // (every write is a single insert), so keep serving rather than poisoning every test.
        let mut tables = self
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut tables)
    }
}

impl Store for InMemoryStore {
    async fn put_component_build(&self, build: &ComponentBuild) -> Result<(), StoreError> {
        let mut build = build.clone();
        build.registered_at = to_store_precision(build.registered_at);
        self.with(|t| t.builds.insert(build.digest.clone(), build));
        Ok(())
    }

    async fn component_build(&self, digest: &str) -> Result<Option<ComponentBuild>, StoreError> {
        Ok(self.with(|t| t.builds.get(digest).cloned()))
    }

    async fn has_component_build(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(self.with(|t| t.builds.contains_key(digest)))
    }

    async fn append_history(&self, rows: &[HistoryRow]) -> Result<(), StoreError> {
        self.with(|t| {
            for row in rows {
                let mut row = row.clone();
                row.recorded_at = to_store_precision(row.recorded_at);
                t.history
                    .entry(row.execution_id.to_string())
                    .or_default()
                    .insert(row.seq, row);
            }
        });
        Ok(())
    }

    async fn history(&self, execution_id: &ExecutionId) -> Result<Vec<HistoryRow>, StoreError> {
        Ok(self.with(|t| {
            if t.expired(&execution_id.to_string(), Utc::now()) {
                return Vec::new();
            }
            t.history
                .get(&execution_id.to_string())
                .map(|rows| rows.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn put_execution(&self, row: &ExecutionRow) -> Result<(), StoreError> {
        let mut row = row.clone();
        row.created_at = to_store_precision(row.created_at);
        row.updated_at = to_store_precision(row.updated_at);
        row.finished_at = row.finished_at.map(to_store_precision);
        let stamp = WriteStamp::history_version(row.history_version);
        let now = Utc::now();
        let ttl = self.retention.ttl_secs(&row, now);
        self.with(|t| {
            let id = row.execution_id.to_string();
            if ttl > 0
                && t.executions
                    .get(&id)
                    .is_none_or(|e| e.history_version <= row.history_version)
            {
                t.expires
                    .insert(id.clone(), now + chrono::TimeDelta::seconds(ttl.into()));
            }
            t.executions.write(id, stamp, Some(row))
        });
        Ok(())
    }

    async fn execution(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionRow>, StoreError> {
        let id = execution_id.to_string();
        Ok(self.with(|t| {
            (!t.expired(&id, Utc::now()))
                .then(|| t.executions.get(&id).cloned())
                .flatten()
        }))
    }

    async fn list_executions(
        &self,
        query: &weir_core::rows::ListQuery,
    ) -> Result<weir_core::rows::ListPage, StoreError> {
        use weir_core::rows::{ListBy, ListedExecution};
        let query = query.bounded(Utc::now());
        // The rows the CQL store would read: the function's (or the parent's), from the
        // cursor on, newest first.
        let mut rows: Vec<ListedExecution> = self.with(|t| {
            let now = Utc::now();
            t.executions
                .values()
                .filter(|e| !t.expired(&e.execution_id.to_string(), now))
                .filter(|e| match &query.by {
                    ListBy::Function(ffqn) => e.ffqn == *ffqn,
                    ListBy::Parent(parent) => e.parent_id.as_ref() == Some(parent),
                })
                .map(ListedExecution::of)
                .filter(|e| query.after.as_ref().is_none_or(|c| c.precedes(e)))
                .collect()
        });
        rows.sort_by_key(|e| std::cmp::Reverse(e.order_key()));
        let mut scan = weir_core::list::ListScan::new(&query);
        for row in rows {
            if !scan.offer(row) {
                break;
            }
        }
        Ok(scan.page())
    }

    async fn functions(&self) -> Result<Vec<String>, StoreError> {
        let functions: std::collections::BTreeSet<String> =
            self.with(|t| t.executions.values().map(|e| e.ffqn.clone()).collect());
        Ok(functions.into_iter().collect())
    }

    async fn put_timers(&self, timers: &[TimerRow], stamp: WriteStamp) -> Result<(), StoreError> {
        self.with(|t| {
            for timer in timers {
                t.timers.put(timer, stamp);
            }
        });
        Ok(())
    }

    async fn delete_timer(
        &self,
        kafka_partition: i32,
        due_at: DateTime<Utc>,
        timer_id: &str,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        let key = TimerKey {
            kafka_partition,
            due_at,
            timer_id: timer_id.to_owned(),
        };
        self.with(|t| t.timers.delete(&key, stamp));
        Ok(())
    }

    async fn drop_timer_bucket(
        &self,
        dropped: DroppedTimerBucket,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        self.with(|t| t.timers.drop_bucket(dropped, stamp));
        Ok(())
    }

    async fn timers_between(
        &self,
        kafka_partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<TimerRow>, StoreError> {
        buckets_between(from, until)?;
        Ok(self.with(|t| {
            t.timers
                .between(kafka_partition, from, until)
                .cloned()
                .collect()
        }))
    }

    async fn checkpoint(
        &self,
        topic: &str,
        kafka_partition: i32,
    ) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self.with(|t| {
            t.checkpoints
                .get(&(topic.to_owned(), kafka_partition))
                .cloned()
        }))
    }

    async fn timer_watermark(
        &self,
        kafka_partition: i32,
    ) -> Result<Option<TimerWatermark>, StoreError> {
        Ok(self.with(|t| t.watermarks.get(&kafka_partition).cloned()))
    }

    async fn put_timer_watermark(
        &self,
        watermark: &TimerWatermark,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        let mut watermark = watermark.clone();
        watermark.fired_before = to_store_precision(watermark.fired_before);
        watermark.updated_at = to_store_precision(watermark.updated_at);
        self.with(|t| {
            t.watermarks
                .write(watermark.kafka_partition, stamp, Some(watermark))
        });
        Ok(())
    }

    async fn put_checkpoint(
        &self,
        checkpoint: &Checkpoint,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        let mut checkpoint = checkpoint.clone();
        checkpoint.updated_at = to_store_precision(checkpoint.updated_at);
        let key = (checkpoint.topic.clone(), checkpoint.kafka_partition);
        self.with(|t| t.checkpoints.write(key, stamp, Some(checkpoint)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_store_conformance_suite() {
        super::super::conformance::run_all(&InMemoryStore::new()).await;
    }

    #[tokio::test]
    async fn finished_executions_expire_after_the_retention() {
        use super::super::conformance::{EXPIRY_CHECK_RETENTION_SECS, finished_executions_expire};
        let retention = Retention::after(chrono::TimeDelta::seconds(EXPIRY_CHECK_RETENTION_SECS))
            .expect("retention");
        finished_executions_expire(&InMemoryStore::with_retention(retention)).await;
    }
}
