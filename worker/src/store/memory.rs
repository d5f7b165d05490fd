//! An in-memory [`Store`] for fast unit tests of the worker. It keeps what the CQL store keeps,
//! at the same timestamp precision, and passes the same [`super::conformance`] suite.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::rows::{Checkpoint, ExecutionRow, HistoryRow, TimerRow, TimerWatermark};
use super::{Store, StoreError, buckets_between, to_store_precision};
use crate::model::ids::ExecutionId;

#[derive(Default)]
struct Tables {
    history: HashMap<String, BTreeMap<i64, HistoryRow>>,
    executions: HashMap<String, ExecutionRow>,
    /// (partition) → (due_at, timer_id) → timer
    timers: HashMap<i32, BTreeMap<(DateTime<Utc>, String), TimerRow>>,
    checkpoints: HashMap<(String, i32), Checkpoint>,
    watermarks: HashMap<i32, TimerWatermark>,
}

#[derive(Default)]
pub struct InMemoryStore {
    tables: Mutex<Tables>,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
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
        // As the CQL store's write timestamps do: an older history version never wins.
        self.with(|t| {
            let key = row.execution_id.to_string();
            if t.executions
                .get(&key)
                .is_none_or(|existing| existing.history_version <= row.history_version)
            {
                t.executions.insert(key, row);
            }
        });
        Ok(())
    }

    async fn execution(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionRow>, StoreError> {
        Ok(self.with(|t| t.executions.get(&execution_id.to_string()).cloned()))
    }

    async fn put_timers(&self, timers: &[TimerRow]) -> Result<(), StoreError> {
        self.with(|t| {
            for timer in timers {
                let mut timer = timer.clone();
                timer.due_at = to_store_precision(timer.due_at);
                t.timers
                    .entry(timer.kafka_partition)
                    .or_default()
                    .insert((timer.due_at, timer.timer_id.clone()), timer);
            }
        });
        Ok(())
    }

    async fn delete_timer(
        &self,
        kafka_partition: i32,
        due_at: DateTime<Utc>,
        timer_id: &str,
    ) -> Result<(), StoreError> {
        let key = (to_store_precision(due_at), timer_id.to_owned());
        self.with(|t| {
            if let Some(timers) = t.timers.get_mut(&kafka_partition) {
                timers.remove(&key);
            }
        });
        Ok(())
    }

    async fn timers_between(
        &self,
        kafka_partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<TimerRow>, StoreError> {
        buckets_between(from, until)?;
        let (from, until) = (to_store_precision(from), to_store_precision(until));
        Ok(self.with(|t| {
            t.timers
                .get(&kafka_partition)
                .map(|timers| {
                    timers
                        .values()
                        .filter(|timer| from <= timer.due_at && timer.due_at < until)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
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

    async fn put_timer_watermark(&self, watermark: &TimerWatermark) -> Result<(), StoreError> {
        let mut watermark = watermark.clone();
        watermark.fired_before = to_store_precision(watermark.fired_before);
        watermark.updated_at = to_store_precision(watermark.updated_at);
        self.with(|t| t.watermarks.insert(watermark.kafka_partition, watermark));
        Ok(())
    }

    async fn put_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let mut checkpoint = checkpoint.clone();
        checkpoint.updated_at = to_store_precision(checkpoint.updated_at);
        self.with(|t| {
            t.checkpoints.insert(
                (checkpoint.topic.clone(), checkpoint.kafka_partition),
                checkpoint,
            )
        });
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
}
