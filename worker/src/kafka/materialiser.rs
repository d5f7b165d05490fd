//! Materialisation of committed batches into the store, off the hot path.
//!
//! Kafka's `weir.history` is the log of record; the store is a materialised view of it, kept so
//! that a cache miss or a new owner can rebuild an execution without reading the log. Writing
//! it between two transactions would put a few CQL round trips on every step's path, so the
//! workflow worker hands each committed batch to one background writer and goes on with the
//! next batch. The writer applies batches strictly in commit order (history rows, execution
//! rows and timers first, then the checkpoints, so a checkpoint never gets ahead of the rows it
//! covers) and retries a failing write before giving up. It writes at most once per linger
//! (200 ms by default), and the jobs that arrived since its last write are merged and written
//! as one per stamp (an execution touched by several costs one request; an execution row,
//! timer or checkpoint is written once, in its latest state; jobs of different stamps stay
//! apart, `MaterialiseJob::merge_by_stamp`): the store lags a little, and takes a
//! fraction of the requests. When it falls behind, it stops lingering and catches up with
//! fewer, larger writes instead of falling further behind.
//!
//! The queue is bounded by jobs and by bytes ([`QueueBound`]; defaults in
//! [`crate::options`]: 16 384 jobs, 128 MiB): large enough that a store outage of ~30 s at a
//! few hundred batches a second does not stop the hot path (cached executions go on
//! committing while their batches wait here), small enough to bound the memory an outage
//! costs: at most the byte bound (plus the job being written) per workflow worker process.
//! When it is full, [`Materialiser::submit`] waits: the store's pace bounds how far memory
//! runs ahead.
//!
//! While a batch is not materialised, the store is behind memory for the executions it touched:
//! those stay pinned in the worker's cache (see `weir_core::processor::Processor::evict`), and
//! anything that must read the store for them waits for [`Materialiser::wait_for`] first.
//! A failure is reported by the next [`Materialiser::submit`] or [`Materialiser::health`]; the
//! worker then stops, and whoever owns the partitions next catches the store up from the log.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span};
use weir_core::driver::BoxError;

use crate::metrics::Metrics;
pub use crate::store::MaterialiseJob;
use crate::store::patience::{Patience, patiently};
use crate::store::{Store, StoreError};

/// At most this many queued jobs are merged into one write.
const MAX_MERGED_JOBS: usize = 32;

/// How much the queue holds at most, behind the write in progress: `jobs` jobs and about
/// `bytes` bytes of rows ([`approx_bytes`]; a single job larger than that is let in alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBound {
    pub jobs: usize,
    pub bytes: usize,
}

impl Default for QueueBound {
    fn default() -> Self {
        QueueBound {
            jobs: crate::options::DEFAULT_MATERIALISE_QUEUE_JOBS,
            bytes: crate::options::DEFAULT_MATERIALISE_QUEUE_BYTES,
        }
    }
}

/// About the memory `job` holds: its rows' variable parts plus a fixed cost per row and per
/// execution id.
pub fn approx_bytes(job: &MaterialiseJob) -> usize {
    const ROW: usize = 96;
    const ID: usize = 64;
    let history: usize = job.history.iter().map(|r| ROW + r.record.len() + ID).sum();
    let executions: usize = job
        .executions
        .iter()
        .map(|r| {
            ROW + ID
                + r.ffqn.len()
                + r.parent_id.as_ref().map_or(0, |_| ID)
                + r.params.len()
                + r.result.as_ref().map_or(0, String::len)
        })
        .sum();
    let timers: usize = job
        .new_timers
        .iter()
        .map(|t| ROW + t.timer_id.len() + ID)
        .sum();
    let removed: usize = job
        .removed_timers
        .iter()
        .map(|t| ROW + t.timer_id.len())
        .sum();
    let checkpoints: usize = job
        .checkpoints
        .iter()
        .map(|c| ROW + c.topic.len() + c.owner.len())
        .sum();
    let watermarks: usize = job.watermarks.iter().map(|w| ROW + w.owner.len()).sum();
    let dropped = job.dropped_timer_buckets.len() * ROW;
    ROW + history + executions + timers + removed + checkpoints + watermarks + dropped
}

/// A queued job with its share of the byte bound (returned once it is written).
type Queued = (u64, MaterialiseJob, OwnedSemaphorePermit);

#[derive(Debug, Clone, thiserror::Error)]
pub enum MaterialiseError {
    /// A job failed for good, or for longer than the worker's patience; nothing after it was
    /// written.
    #[error("materialising batch {batch} into the store failed: {reason}")]
    Failed { batch: u64, reason: String },
    #[error("the materialiser stopped")]
    Stopped,
}

#[derive(Debug, Clone, Default)]
struct Progress {
    /// Jobs `1..=materialised` are in the store.
    materialised: u64,
    failure: Option<MaterialiseError>,
}

/// The handle of the background writer. Jobs are numbered from 1 in submission order.
pub struct Materialiser {
    jobs: mpsc::Sender<Queued>,
    /// The byte bound's permits, and how many there are.
    bytes: Arc<Semaphore>,
    byte_limit: usize,
    progress: watch::Receiver<Progress>,
    /// Tells the writer that someone waits for the store: stop lingering.
    waited_for: Arc<Notify>,
    submitted: u64,
}

impl Materialiser {
    /// Starts the writer; at most `queue` jobs (and the default byte bound) wait behind the
    /// one being written (then [`Materialiser::submit`] waits: the store's pace bounds how far
    /// memory runs ahead). Writes start at most once per `linger`: the jobs that arrive
    /// meanwhile are merged, so an execution touched by several batches costs the store one
    /// request, not one per batch. Whoever waits for the store ([`Materialiser::wait_for`],
    /// [`Materialiser::flush`]) cuts the linger short.
    pub fn spawn<S: Store + 'static>(store: Arc<S>, queue: usize, linger: Duration) -> Self {
        let patience = Patience::new(Duration::from_secs(
            crate::options::DEFAULT_STORE_PATIENCE_SECS,
        ));
        let bound = QueueBound {
            jobs: queue,
            ..QueueBound::default()
        };
        Self::spawn_with(store, bound, linger, patience, Arc::default())
    }

    /// [`Materialiser::spawn`] with a queue of `bound`, riding out store failures within
    /// `patience` (each retry counted in `metrics`).
    pub fn spawn_with<S: Store + 'static>(
        store: Arc<S>,
        bound: QueueBound,
        linger: Duration,
        patience: Patience,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (jobs, mut receiver) = mpsc::channel::<Queued>(bound.jobs.max(1));
        // Permits are counted in u32 per acquisition and bounded by the semaphore's maximum.
        let byte_limit = bound
            .bytes
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        let bytes = Arc::new(Semaphore::new(byte_limit));
        let (report, progress) = watch::channel(Progress::default());
        let waited_for = Arc::new(Notify::new());
        let urgent = Arc::clone(&waited_for);
        tokio::spawn(async move {
            let mut last_write: Option<Instant> = None;
            // The last write merged as many jobs as it may: the store is behind, do not linger.
            let mut behind = false;
            while let Some((first, job, permit)) = receiver.recv().await {
                let rest =
                    last_write.map_or(Duration::ZERO, |at| linger.saturating_sub(at.elapsed()));
                if !behind && !rest.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(rest) => {}
                        _ = urgent.notified() => {}
                    }
                }
                last_write = Some(Instant::now());
                let mut batch = first;
                let mut queued = vec![job];
                // Held until the write is done: the jobs' memory is in use until then.
                let mut permits = vec![permit];
                while queued.len() < MAX_MERGED_JOBS {
                    let Ok((next, job, permit)) = receiver.try_recv() else {
                        break;
                    };
                    batch = next;
                    queued.push(job);
                    permits.push(permit);
                }
                behind = queued.len() == MAX_MERGED_JOBS;
                let mut written = Ok(());
                for job in MaterialiseJob::merge_by_stamp(queued) {
                    let span = info_span!("materialise", first, batch, rows = job.history.len());
                    written = patiently(
                        &patience,
                        &metrics.store_write_retries,
                        "materialise",
                        || write(store.as_ref(), &job),
                    )
                    .instrument(span)
                    .await;
                    if written.is_err() {
                        break;
                    }
                }
                drop(permits);
                match written {
                    Ok(()) => {
                        debug!(batch, "materialised");
                        report.send_modify(|p| p.materialised = batch);
                    }
                    Err(e) => {
                        let failure = MaterialiseError::Failed {
                            batch,
                            reason: e.to_string(),
                        };
                        report.send_modify(|p| p.failure = Some(failure));
                        return;
                    }
                }
            }
        });
        Materialiser {
            jobs,
            bytes,
            byte_limit,
            progress,
            waited_for,
            submitted: 0,
        }
    }

    /// Queues a committed batch; returns its number. Fails if an earlier job failed.
    pub async fn submit(&mut self, job: MaterialiseJob) -> Result<u64, MaterialiseError> {
        self.health()?;
        let batch = self.submitted + 1;
        let cost = approx_bytes(&job).clamp(1, self.byte_limit) as u32;
        let permit = Arc::clone(&self.bytes)
            .acquire_many_owned(cost)
            .await
            .map_err(|_| self.stopped())?;
        self.jobs
            .send((batch, job, permit))
            .await
            .map_err(|_| self.stopped())?;
        self.submitted = batch;
        Ok(batch)
    }

    /// The number of the last job in the store (0 before the first).
    pub fn materialised(&self) -> u64 {
        self.progress.borrow().materialised
    }

    /// The failure of an earlier job, if any.
    pub fn health(&self) -> Result<(), MaterialiseError> {
        match &self.progress.borrow().failure {
            Some(failure) => Err(failure.clone()),
            None => Ok(()),
        }
    }

    /// Waits until job `batch` (and every one before it) is in the store.
    pub async fn wait_for(&mut self, batch: u64) -> Result<(), MaterialiseError> {
        if self.progress.borrow().materialised < batch {
            self.waited_for.notify_one();
        }
        let progress = self
            .progress
            .wait_for(|p| p.materialised >= batch || p.failure.is_some())
            .await
            .map_err(|_| MaterialiseError::Stopped)?
            .clone();
        match progress.failure {
            Some(failure) if progress.materialised < batch => Err(failure),
            _ => Ok(()),
        }
    }

    /// Waits until everything submitted is in the store.
    pub async fn flush(&mut self) -> Result<(), MaterialiseError> {
        self.wait_for(self.submitted).await
    }

    fn stopped(&self) -> MaterialiseError {
        self.health().err().unwrap_or(MaterialiseError::Stopped)
    }
}

/// The driver's seam, for the background writer.
impl weir_core::driver::Materialise for Materialiser {
    async fn submit(&mut self, job: MaterialiseJob) -> Result<u64, BoxError> {
        Ok(Materialiser::submit(self, job).await?)
    }

    fn materialised(&self) -> u64 {
        Materialiser::materialised(self)
    }

    async fn wait_for(&mut self, job: u64) -> Result<(), BoxError> {
        Ok(Materialiser::wait_for(self, job).await?)
    }

    async fn flush(&mut self) -> Result<(), BoxError> {
        Ok(Materialiser::flush(self).await?)
    }

    fn health(&self) -> Result<(), BoxError> {
        Ok(Materialiser::health(self)?)
    }
}

/// One job: rows, execution rows and timers (concurrently: a job never both writes and
/// removes one timer), then the checkpoints. Every write is an idempotent upsert or delete, so
/// a retry may repeat any of them. Catch-up writes what it reads from the log this way too.
pub async fn write<S: Store>(store: &S, job: &MaterialiseJob) -> Result<(), StoreError> {
    let stamp = job.stamp;
    let deletions = futures::future::try_join_all(
        job.removed_timers
            .iter()
            .map(|key| store.delete_timer(key.kafka_partition, key.due_at, &key.timer_id, stamp)),
    );
    let dropped = futures::future::try_join_all(
        job.dropped_timer_buckets
            .iter()
            .map(|dropped| store.drop_timer_bucket(*dropped, stamp)),
    );
    futures::try_join!(
        store.materialise(&job.history, &job.executions),
        store.put_timers(&job.new_timers, stamp),
        deletions,
        dropped
    )?;
    let watermarks = futures::future::try_join_all(
        job.watermarks
            .iter()
            .map(|w| store.put_timer_watermark(w, stamp)),
    );
    futures::try_join!(store.put_checkpoints(&job.checkpoints, stamp), watermarks)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::model::ExecutionId;
    use crate::store::{
        Checkpoint, EntryKind, ExecutionRow, ExecutionState, HistoryRow, InMemoryStore, TimerKey,
        TimerKind, TimerRow, TimerWatermark, WriteStamp,
    };

    fn checkpoint(partition: i32, offset: i64) -> Checkpoint {
        Checkpoint {
            topic: "weir.history".into(),
            kafka_partition: partition,
            materialised_offset: offset,
            owner: "test".into(),
            updated_at: Utc::now(),
        }
    }

    fn history_row(id: &ExecutionId, seq: i64, offset: i64) -> HistoryRow {
        HistoryRow {
            execution_id: id.clone(),
            seq,
            kind: EntryKind::Event,
            record: vec![seq as u8],
            kafka_partition: 0,
            kafka_offset: offset,
            recorded_at: Utc::now(),
        }
    }

    #[tokio::test]
    async fn jobs_are_written_in_order_and_flush_waits_for_all() {
        let store = Arc::new(InMemoryStore::default());
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 4, Duration::ZERO);
        let id = ExecutionId::top_level(ulid::Ulid::new());
        for n in 0..20i64 {
            let job = MaterialiseJob {
                history: vec![history_row(&id, n, 100 + n)],
                checkpoints: vec![checkpoint(0, 101 + n)],
                ..Default::default()
            };
            assert_eq!(materialiser.submit(job).await.unwrap(), n as u64 + 1);
        }
        materialiser.flush().await.unwrap();
        assert_eq!(materialiser.materialised(), 20);
        let rows = store.history(&id).await.unwrap();
        assert_eq!(
            rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (0..20).collect::<Vec<_>>()
        );
        let last = store.checkpoint("weir.history", 0).await.unwrap().unwrap();
        assert_eq!(last.materialised_offset, 120);
    }

    /// The in-memory store, with its checkpoint writes failing `failures` times (then
    /// succeeding), and its `materialise` calls counted and, with a `gate`, each waiting for
    /// a permit.
    #[derive(Default)]
    struct ProbeStore {
        inner: InMemoryStore,
        failures: AtomicU32,
        materialise_calls: AtomicU32,
        gate: Option<tokio::sync::Semaphore>,
    }

    impl Store for ProbeStore {
        async fn put_component_build(
            &self,
            build: &crate::store::ComponentBuild,
        ) -> Result<(), StoreError> {
            self.inner.put_component_build(build).await
        }
        async fn component_build(
            &self,
            digest: &str,
        ) -> Result<Option<crate::store::ComponentBuild>, StoreError> {
            self.inner.component_build(digest).await
        }
        async fn has_component_build(&self, digest: &str) -> Result<bool, StoreError> {
            self.inner.has_component_build(digest).await
        }
        async fn append_history(&self, rows: &[HistoryRow]) -> Result<(), StoreError> {
            self.inner.append_history(rows).await
        }
        async fn history(&self, id: &ExecutionId) -> Result<Vec<HistoryRow>, StoreError> {
            self.inner.history(id).await
        }
        async fn put_execution(&self, row: &ExecutionRow) -> Result<(), StoreError> {
            self.inner.put_execution(row).await
        }
        async fn execution(&self, id: &ExecutionId) -> Result<Option<ExecutionRow>, StoreError> {
            self.inner.execution(id).await
        }
        async fn list_executions(
            &self,
            query: &weir_core::rows::ListQuery,
        ) -> Result<weir_core::rows::ListPage, StoreError> {
            self.inner.list_executions(query).await
        }
        async fn functions(&self) -> Result<Vec<String>, StoreError> {
            self.inner.functions().await
        }
        async fn put_timers(
            &self,
            timers: &[TimerRow],
            stamp: WriteStamp,
        ) -> Result<(), StoreError> {
            self.inner.put_timers(timers, stamp).await
        }
        async fn delete_timer(
            &self,
            partition: i32,
            due_at: DateTime<Utc>,
            id: &str,
            stamp: WriteStamp,
        ) -> Result<(), StoreError> {
            self.inner.delete_timer(partition, due_at, id, stamp).await
        }
        async fn drop_timer_bucket(
            &self,
            dropped: crate::store::DroppedTimerBucket,
            stamp: WriteStamp,
        ) -> Result<(), StoreError> {
            self.inner.drop_timer_bucket(dropped, stamp).await
        }
        async fn timers_between(
            &self,
            partition: i32,
            from: DateTime<Utc>,
            until: DateTime<Utc>,
        ) -> Result<Vec<TimerRow>, StoreError> {
            self.inner.timers_between(partition, from, until).await
        }
        async fn checkpoint(
            &self,
            topic: &str,
            partition: i32,
        ) -> Result<Option<Checkpoint>, StoreError> {
            self.inner.checkpoint(topic, partition).await
        }
        async fn timer_watermark(
            &self,
            partition: i32,
        ) -> Result<Option<TimerWatermark>, StoreError> {
            self.inner.timer_watermark(partition).await
        }
        async fn put_timer_watermark(
            &self,
            w: &TimerWatermark,
            stamp: WriteStamp,
        ) -> Result<(), StoreError> {
            self.inner.put_timer_watermark(w, stamp).await
        }
        async fn put_checkpoint(
            &self,
            checkpoint: &Checkpoint,
            stamp: WriteStamp,
        ) -> Result<(), StoreError> {
            let left = self.failures.load(Ordering::SeqCst);
            if left > 0 {
                self.failures.store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Result {
                    context: "put_checkpoint".into(),
                    reason: "injected failure".into(),
                });
            }
            self.inner.put_checkpoint(checkpoint, stamp).await
        }
        async fn materialise(
            &self,
            history: &[HistoryRow],
            executions: &[ExecutionRow],
        ) -> Result<(), StoreError> {
            self.materialise_calls.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                gate.acquire().await.expect("gate open").forget();
            }
            self.inner.materialise(history, executions).await
        }
    }

    fn flaky(failures: u32) -> Arc<ProbeStore> {
        Arc::new(ProbeStore {
            failures: AtomicU32::new(failures),
            ..ProbeStore::default()
        })
    }

    fn checkpoint_job(offset: i64) -> MaterialiseJob {
        MaterialiseJob {
            checkpoints: vec![checkpoint(0, offset)],
            ..Default::default()
        }
    }

    fn execution_row(id: &ExecutionId, version: i64) -> ExecutionRow {
        ExecutionRow {
            execution_id: id.clone(),
            ffqn: "weir-examples:workflows/steps.fibonacci-chain".into(),
            parent_id: None,
            params: "[30,20]".into(),
            state: ExecutionState::Running,
            result: None,
            history_version: version,
            kafka_partition: 0,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            finished_at: None,
        }
    }

    fn timer(id: &str, due_at: DateTime<Utc>) -> TimerRow {
        TimerRow {
            kafka_partition: 1,
            due_at,
            timer_id: id.into(),
            execution_id: ExecutionId::top_level(ulid::Ulid::new()),
            kind: TimerKind::Delay,
        }
    }

    fn key(id: &str, due_at: DateTime<Utc>) -> TimerKey {
        TimerKey {
            kafka_partition: 1,
            due_at,
            timer_id: id.into(),
        }
    }

    #[test]
    fn merged_jobs_keep_every_history_row_and_the_latest_state_of_everything_else() {
        let a = ExecutionId::top_level(ulid::Ulid::new());
        let b = ExecutionId::top_level(ulid::Ulid::new());
        let due = Utc::now();
        let first = MaterialiseJob {
            history: vec![history_row(&a, 0, 10), history_row(&b, 0, 11)],
            executions: vec![execution_row(&a, 1), execution_row(&b, 1)],
            new_timers: vec![timer("fired-later", due), timer("kept", due)],
            removed_timers: vec![key("re-added", due)],
            checkpoints: vec![checkpoint(0, 12)],
            ..Default::default()
        };
        let second = MaterialiseJob {
            history: vec![history_row(&a, 1, 12)],
            executions: vec![execution_row(&a, 2)],
            new_timers: vec![timer("re-added", due)],
            removed_timers: vec![key("fired-later", due)],
            checkpoints: vec![checkpoint(0, 13), checkpoint(1, 5)],
            ..Default::default()
        };
        let merged = MaterialiseJob::merge(vec![first, second]);
        assert_eq!(
            merged
                .history
                .iter()
                .map(|r| (r.execution_id.clone(), r.seq))
                .collect::<Vec<_>>(),
            vec![(a.clone(), 0), (b.clone(), 0), (a.clone(), 1)]
        );
        assert_eq!(
            merged
                .executions
                .iter()
                .map(|r| (r.execution_id.clone(), r.history_version))
                .collect::<Vec<_>>(),
            vec![(a, 2), (b, 1)]
        );
        let mut written: Vec<_> = merged
            .new_timers
            .iter()
            .map(|t| t.timer_id.as_str())
            .collect();
        written.sort_unstable();
        assert_eq!(written, ["kept", "re-added"]);
        assert_eq!(merged.removed_timers, vec![key("fired-later", due)]);
        assert_eq!(
            merged
                .checkpoints
                .iter()
                .map(|c| (c.kafka_partition, c.materialised_offset))
                .collect::<Vec<_>>(),
            vec![(0, 13), (1, 5)]
        );
    }

    /// The `n`th job of a run of `id`: history row `n` at offset 100 + n, its execution row,
    /// its partition's checkpoint.
    fn numbered_job(id: &ExecutionId, n: i64) -> MaterialiseJob {
        MaterialiseJob {
            history: vec![history_row(id, n, 100 + n)],
            executions: vec![execution_row(id, n + 1)],
            checkpoints: vec![checkpoint(0, 101 + n)],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn jobs_queued_behind_a_slow_write_are_written_as_one() {
        let store = Arc::new(ProbeStore {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..ProbeStore::default()
        });
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 16, Duration::ZERO);
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let job = |n: i64| numbered_job(&id, n);
        materialiser.submit(job(0)).await.unwrap();
        // The writer is inside the first write before the others are queued.
        tokio::time::timeout(Duration::from_secs(10), async {
            while store.materialise_calls.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the first write starts");
        for n in 1..10 {
            materialiser.submit(job(n)).await.unwrap();
        }
        store.gate.as_ref().unwrap().add_permits(10);
        materialiser.flush().await.unwrap();
        assert_eq!(store.materialise_calls.load(Ordering::SeqCst), 2);
        assert_eq!(materialiser.materialised(), 10);
        assert_eq!(store.history(&id).await.unwrap().len(), 10);
        let row = store.execution(&id).await.unwrap().unwrap();
        assert_eq!(row.history_version, 10);
        let last = store.checkpoint("weir.history", 0).await.unwrap().unwrap();
        assert_eq!(last.materialised_offset, 110);
    }

    /// The queue is bounded by bytes as well as by jobs: behind a write that does not end (the
    /// store away), jobs are taken until their bytes reach the bound, then `submit` waits;
    /// it goes on once the write is done. And the default bound holds a store outage of 30 s
    /// at 500 batches a second of a few steps each.
    #[tokio::test]
    async fn the_queue_is_bounded_by_bytes() {
        let store = Arc::new(ProbeStore {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..ProbeStore::default()
        });
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let job = |n: i64| numbered_job(&id, n);
        let size = approx_bytes(&job(0));
        let bound = QueueBound {
            jobs: 1_000,
            bytes: 4 * size,
        };
        let mut materialiser = Materialiser::spawn_with(
            Arc::clone(&store),
            bound,
            Duration::ZERO,
            Patience::new(Duration::from_secs(60)),
            Arc::default(),
        );
        for n in 0..4 {
            materialiser.submit(job(n)).await.unwrap();
        }
        // The writer is inside the first write (which holds its bytes until it is done).
        tokio::time::timeout(Duration::from_secs(10), async {
            while store.materialise_calls.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the first write starts");
        {
            let blocked = materialiser.submit(job(4));
            tokio::pin!(blocked);
            assert!(
                futures::poll!(blocked.as_mut()).is_pending(),
                "a fifth job fits a bound of four"
            );
        }
        store.gate.as_ref().unwrap().add_permits(100);
        materialiser.submit(job(4)).await.unwrap();
        materialiser.flush().await.unwrap();
        assert_eq!(store.history(&id).await.unwrap().len(), 5);

        // A batch of a few steps: four history records of 600 bytes, two execution rows, a
        // timer.
        let typical = MaterialiseJob {
            history: (0..4)
                .map(|n| HistoryRow {
                    record: vec![0; 600],
                    ..history_row(&id, n, n)
                })
                .collect(),
            executions: vec![execution_row(&id, 4), execution_row(&id, 2)],
            new_timers: vec![timer("delay", Utc::now())],
            checkpoints: vec![checkpoint(0, 4)],
            ..Default::default()
        };
        let outage = 30 * 500;
        let default = QueueBound::default();
        assert!(default.jobs >= outage, "{default:?}");
        assert!(
            default.bytes >= outage * approx_bytes(&typical),
            "{default:?}: {} bytes a batch",
            approx_bytes(&typical)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_arriving_within_the_linger_are_written_together() {
        let store = Arc::new(ProbeStore::default());
        let linger = Duration::from_millis(200);
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 16, linger);
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let job = |n: i64| MaterialiseJob {
            history: vec![history_row(&id, n, 100 + n)],
            checkpoints: vec![checkpoint(0, 101 + n)],
            ..Default::default()
        };
        let calls = || store.materialise_calls.load(Ordering::SeqCst);
        // After a quiet time, a job is written at once.
        materialiser.submit(job(0)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!((calls(), materialiser.materialised()), (1, 1));
        for n in 1..6 {
            materialiser.submit(job(n)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(calls(), 1, "still lingering");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!((calls(), materialiser.materialised()), (2, 6));
        assert_eq!(store.history(&id).await.unwrap().len(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_behind_stops_lingering() {
        let store = Arc::new(ProbeStore::default());
        let linger = Duration::from_secs(60);
        let jobs = 2 * MAX_MERGED_JOBS as i64 - 1;
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 2 * MAX_MERGED_JOBS, linger);
        let started = Instant::now();
        materialiser.submit(checkpoint_job(0)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        for n in 1..=jobs {
            materialiser.submit(checkpoint_job(n)).await.unwrap();
        }
        // One linger after the first write; the full merge that follows shows the writer is
        // behind, so the rest is written at once.
        materialiser
            .progress
            .wait_for(|p| p.materialised == jobs as u64 + 1)
            .await
            .unwrap();
        assert_eq!(store.materialise_calls.load(Ordering::SeqCst), 3);
        assert!(
            started.elapsed() < 2 * linger,
            "lingered again while behind: {:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_the_store_cuts_the_linger_short() {
        let store = Arc::new(ProbeStore::default());
        let linger = Duration::from_secs(60);
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 16, linger);
        materialiser.submit(checkpoint_job(1)).await.unwrap();
        materialiser.flush().await.unwrap();
        materialiser.submit(checkpoint_job(2)).await.unwrap();
        let started = Instant::now();
        materialiser.flush().await.unwrap();
        assert!(
            started.elapsed() < linger,
            "flush waited out the linger: {:?}",
            started.elapsed()
        );
        let stored = store.checkpoint("weir.history", 0).await.unwrap().unwrap();
        assert_eq!(stored.materialised_offset, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_retried() {
        let store = flaky(4);
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 4, Duration::ZERO);
        materialiser.submit(checkpoint_job(7)).await.unwrap();
        materialiser.flush().await.unwrap();
        let stored = store.checkpoint("weir.history", 0).await.unwrap().unwrap();
        assert_eq!(stored.materialised_offset, 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lasting_failure_stops_everything_after_it_and_is_reported() {
        let store = flaky(u32::MAX);
        let mut materialiser = Materialiser::spawn(Arc::clone(&store), 4, Duration::ZERO);
        materialiser.submit(checkpoint_job(7)).await.unwrap();
        let err = materialiser.flush().await.unwrap_err();
        assert!(
            matches!(&err, MaterialiseError::Failed { batch: 1, reason } if reason.contains("injected")),
            "{err}"
        );
        assert_eq!(materialiser.materialised(), 0);
        let err = materialiser.submit(checkpoint_job(8)).await.unwrap_err();
        assert!(
            matches!(err, MaterialiseError::Failed { batch: 1, .. }),
            "{err}"
        );
        assert!(materialiser.health().is_err());
    }
}
