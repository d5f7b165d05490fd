//! The workflow worker's loop, written once against its seams: the [`Log`] (Kafka in
//! production, the simulated log in tests), the store it reads ([`StoreRead`]) and the
//! background writer of committed batches ([`Materialise`]). Whatever runs it, the order of
//! things is this file's:
//!
//! 1. **Take-over** on every change of the partitions owned: wait until every committed batch
//!    is in the store, forget what memory holds, take the new group generation (the stamp of
//!    every store write from now on: see [`WriteStamp`]), rewind the log to the committed
//!    offsets (which waits for the previous owner's transaction), catch the store up with
//!    `weir.history` of each owned partition (through the [projection](crate::projection)),
//!    restore the partitions' schedules from `weir.state`, load the timers due within the
//!    horizon, and write the checkpoints and watermarks it starts from.
//! 2. **A batch**: the records of one poll, the timers due now and the schedule ticks due
//!    now, each stepped through the [processor](crate::processor) (rehydrating from the store
//!    what it names first); then one transaction with every effect and the input offsets.
//! 3. **After the commit**: the batch's history rows (with the offsets they landed at),
//!    execution rows, timer changes, checkpoints and watermarks go to the materialiser; the
//!    touched executions stay pinned until they are in the store.
//!
//! 4. **Admission**: before each poll, new submissions are read only while fewer executions
//!    are in flight than [`DriverConfig::admit_below`] — those with a deferred start, and
//!    running ones stepped within [`DriverConfig::admission_idle`]; otherwise the log stops
//!    reading the submissions partitions ([`Log::admit`]) and they wait in Kafka, while
//!    responses and timers go on. Running executions idle longer do not count (a parent
//!    waiting for its children must not keep them out), so admission never stops for good; a
//!    deferred start counts until it runs (it waits for room, not for an answer).
//!    The limit is the configured one, or lower once the pool has had no room for a run
//!    ([`Processor::capacity_seen`]: what it really parks, [`admission_limit`] of it).
//!    Without it, more executions in flight than the instance pool holds dropped each other's
//!    runs for room and rebuilt them, and nothing finished (a livelock, `docs/benchmarks.md`).
//!
//! A batch the log refuses to commit because the group moved on is dropped and the inputs are
//! read again after a take-over — of the membership the log reports *after* the refusal (the
//! next `Polled::Rebalanced`, or a newer generation; at most [`DriverConfig::rejoin_wait`]
//! later, the one it reports): until then the worker writes nothing, since the partitions it
//! had may be another member's already. Any other failure stops the loop (the process
//! restarts).
//!
//! The hot path — an execution cached in memory, its inputs and due timers — reads nothing
//! from the store, and the loop does not wait for the materialiser on its account: a store
//! outage holds back the materialiser (whose queue takes the batches meanwhile) and whatever
//! must read the store (a cold rebuild, a new submission's existence check, a take-over, an
//! urgent timer refill: see [`TimerIndex`]), not the batches of cached executions.

use std::collections::BTreeSet;
use std::future::Future;

use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use tracing::Instrument;

use crate::correlation::CorrelationState;
use crate::inline::{self, InlineActivities, InlineOutcome, NoInline};
use crate::model::ExecutionId;
use crate::processor::{Batch, Effect, Input, Processor, ProcessorError, ProcessorStats};
use crate::projection::{self, ExecutionView, entry_kind, rebuild};
use crate::records::{HistoryEntry, HistoryRecord};
use crate::rows::{
    Checkpoint, ExecutionState, HistoryRow, MaterialiseJob, TimerChanges, TimerId, TimerRow,
    TimerWatermark, WriteStamp,
};
use crate::runner::WorkflowRunner;
use crate::schedule::ScheduleState;
use crate::stamp_order::StampOrder;
use crate::timers::{Refill, TimerIndex};

/// Any error of a seam.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An input topic of the workflow worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InputTopic {
    Submissions,
    Responses,
    Events,
}

/// A record of one poll, with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct PolledRecord {
    pub topic: InputTopic,
    pub partition: i32,
    pub offset: i64,
    /// Its [`Input::Record`], whose `index` is the record's position in the poll.
    pub input: Input,
}

/// What a poll of the log returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    /// Records of the current membership (possibly none: the poll timed out).
    Records(Vec<PolledRecord>),
    /// The owned partitions changed (or the poll spanned a change): take over.
    Rebalanced {
        generation: u64,
        owned: BTreeSet<i32>,
    },
    /// Stop: nothing more is committed.
    Shutdown,
}

/// A committed history record as read back from `weir.history`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEntry {
    pub offset: i64,
    pub record: HistoryRecord,
    /// The record's bytes, exactly as committed.
    pub bytes: Vec<u8>,
    pub timestamp: DateTime<Utc>,
}

/// Where an `Append` effect's record landed, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub partition: i32,
    pub offset: i64,
    pub bytes: Vec<u8>,
}

/// Input partitions with an offset: the next to read, or to commit.
pub type Positions = Vec<(InputTopic, i32, i64)>;

/// One transaction to commit.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    pub effects: &'a [Effect],
    /// Every owned input partition's next offset to read, those the batch read records of
    /// and the others alike: so that every batch, even one made only of due timers, carries
    /// the group generation and is fenced once the partitions moved to another member.
    pub offsets: &'a [(InputTopic, i32, i64)],
    /// The trace context of each effect's record, by index ([`Processor::trace_of`]): the
    /// log carries it with the record (Kafka: the `traceparent` header).
    pub traces: &'a [Option<crate::trace::TraceParent>],
}

/// Why a commit failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Nothing of the batch is visible, refused because the group moved on (a stale
    /// generation, an unknown member): the partitions may be another member's already. Take
    /// over the membership the log reports next, and read the inputs again.
    #[error("batch refused, the consumer group moved on: {0}")]
    Refused(BoxError),
    /// Nothing of the batch is visible (aborted for another reason): take over and read the
    /// inputs again.
    #[error("batch aborted: {0}")]
    Retry(BoxError),
    /// This worker must stop (fenced, or the producer failed fatally).
    #[error(transparent)]
    Fatal(BoxError),
}

/// The log of record: input topics read in a consumer group, one transactional producer,
/// and `weir.history`.
pub trait Log: Send {
    /// The next records (at most `max`), or a change of membership, or shutdown.
    fn poll(&mut self, max: usize) -> impl Future<Output = Result<Polled, BoxError>> + Send;

    /// The membership now: (generation, owned partitions).
    fn membership(&self) -> (u64, BTreeSet<i32>);

    /// The clock of this worker: every batch's `now`.
    fn now(&self) -> DateTime<Utc>;

    /// Positions every owned input partition at its committed offset, fetched as stable:
    /// this waits until a previous owner's open transaction on them is resolved. Returns the
    /// positions (0 where nothing is committed yet).
    fn rewind(&mut self) -> impl Future<Output = Result<Positions, BoxError>> + Send;

    /// The committed records of `partition` of `weir.history` from `from` to its last stable
    /// offset.
    fn read_history(
        &mut self,
        partition: i32,
        from: i64,
    ) -> impl Future<Output = Result<Vec<LoggedEntry>, BoxError>> + Send;

    /// The keyed state of `partitions` as `weir.state` has it (schedules, correlation keys):
    /// the last record of each key, read from the beginning to the last stable offset (so
    /// after the previous owner's transaction is resolved, as [`Log::read_history`]),
    /// tombstones dropped.
    fn read_keyed_state(
        &mut self,
        partitions: &BTreeSet<i32>,
    ) -> impl Future<Output = Result<KeyedState, BoxError>> + Send;

    /// One transaction of `commit`'s effects and offsets. Returns where each
    /// [`Effect::Append`] landed, in order.
    fn commit(
        &mut self,
        commit: Commit<'_>,
    ) -> impl Future<Output = Result<Vec<Landed>, CommitError>> + Send;

    /// The name of the history topic (checkpoints are per topic and partition).
    fn history_topic(&self) -> &str;

    /// Admission: stops reading the owned submissions partitions (`open` false: their records
    /// wait in the log, responses are still read), or reads them again (`open` true), each
    /// from its position in `from` (the next offset to read). A new assignment reads them.
    fn admit(
        &mut self,
        open: bool,
        from: &[(i32, i64)],
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// What the loop reports after each batch and take-over (for metrics).
    fn observe(&mut self, _report: &Report) {}
}

/// The keyed state of some partitions (`weir.state`): what the processor keeps in memory
/// for keys that are not executions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyedState {
    pub schedules: Vec<ScheduleState>,
    pub correlations: Vec<CorrelationState>,
}

/// An execution's changelog as the store has it: each record with the time it was recorded.
pub type StoredHistory = Vec<(HistoryRecord, DateTime<Utc>)>;

/// Why an execution's changelog could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The store answered, but what it holds for this execution cannot be read (a row that
    /// does not decode): that execution cannot go on, the others can.
    #[error("the stored history of {execution} is unreadable: {reason}")]
    Unreadable {
        execution: ExecutionId,
        reason: String,
    },
    /// The store did not answer (after the adapter's own retries).
    #[error(transparent)]
    Store(BoxError),
}

/// What the store gives the loop.
pub trait StoreRead: Send + Sync {
    /// The decoded changelog of an execution with each record's time (`None` if unknown).
    fn load(
        &self,
        id: &ExecutionId,
    ) -> impl Future<Output = Result<Option<StoredHistory>, LoadError>> + Send;

    /// The next offset of `topic`/`partition` to materialise.
    fn checkpoint(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = Result<Option<i64>, BoxError>> + Send;

    fn watermark(
        &self,
        partition: i32,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, BoxError>> + Send;

    /// Timers of `partition` with `from <= due_at < until`, by due time.
    fn timers_between(
        &self,
        partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<TimerRow>, BoxError>> + Send;
}

/// The writer of committed batches into the store; jobs are numbered from 1 in order.
pub trait Materialise: Send {
    fn submit(&mut self, job: MaterialiseJob)
    -> impl Future<Output = Result<u64, BoxError>> + Send;
    /// The number of the last job in the store.
    fn materialised(&self) -> u64;
    fn wait_for(&mut self, job: u64) -> impl Future<Output = Result<(), BoxError>> + Send;
    fn flush(&mut self) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// The failure of an earlier job, if any.
    fn health(&self) -> Result<(), BoxError>;
}

/// What the loop reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub owned: usize,
    pub cached: usize,
    pub parked: usize,
    pub stats: ProcessorStats,
    /// Of the last batch: input records and timers, records out.
    pub inputs: usize,
    pub effects: usize,
    /// Batches dropped and read again since the start.
    pub retried: u64,
    /// Since the start: activity requests answered inline, and inline requests sent to
    /// their topics instead (not run, interrupted, or retried there).
    pub inline_answered: u64,
    pub inline_spilled: u64,
    /// Whether new submissions are read (`false`: paused by admission).
    pub admitting: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("log: {0}")]
    Log(BoxError),
    #[error("commit: {0}")]
    Commit(BoxError),
    #[error("store: {0}")]
    Store(BoxError),
    #[error("materialiser: {0}")]
    Materialise(BoxError),
    #[error("catch-up of history partition {partition}: {reason}")]
    Catchup { partition: i32, reason: String },
    #[error(transparent)]
    Processor(#[from] ProcessorError),
}

/// Settings of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverConfig {
    /// Rounds of inline activities per batch at most ([`crate::inline`]): a round runs every
    /// inline request the batch has so far; what the last round's answers request goes to the
    /// topics.
    pub max_inline_rounds: usize,
    /// Records (and due timers) per batch at most.
    pub max_batch: usize,
    /// Written into checkpoints and watermarks (for operators).
    pub instance_id: String,
    /// Timers due within this are held in memory.
    pub timer_horizon: std::time::Duration,
    /// After a batch refused because the group moved on, how long to wait (by the log's
    /// clock) for the log to report the new membership before taking the one it reports
    /// over anyway (a refusal without a membership change must not stop the worker).
    pub rejoin_wait: std::time::Duration,
    /// Admission (see the module docs): submissions are read while fewer executions in
    /// flight than this were stepped within `admission_idle` ([`usize::MAX`]: always).
    pub admit_below: usize,
    pub admission_idle: std::time::Duration,
}

/// Admission's limit for a pool that parks `capacity` runs: one batch of new starts must
/// still fit (so that runs in flight are not dropped for them), and never below half of it;
/// at least one.
pub fn admission_limit(capacity: usize, max_batch: usize) -> usize {
    capacity.saturating_sub(max_batch).max(capacity / 2).max(1)
}

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

/// The loop; see the module docs.
pub struct Driver<R: WorkflowRunner, L: Log, S: StoreRead, M: Materialise, I = NoInline> {
    pub processor: Processor<R>,
    inline: I,
    timers: TimerIndex,
    log: L,
    store: S,
    materialiser: M,
    config: DriverConfig,
    owned: BTreeSet<i32>,
    /// The group generation of the membership taken over: the order of this worker's store
    /// writes ([`WriteStamp::owner`]).
    generation: u64,
    /// The next offset of every owned input partition.
    positions: IndexMap<(InputTopic, i32), i64>,
    /// Running executions this owner's catch-up read whose start it has not tried yet (see
    /// [`Driver::take_over`]): the history offset of each one's first record read, which no
    /// checkpoint passes until its reminder has fired in a committed batch.
    reminded: IndexMap<ExecutionId, (i32, i64)>,
    /// The stamps of this owner's jobs (see [`StampOrder`]).
    stamp_order: StampOrder,
    /// Whether the log reads the submissions partitions (admission, see the module docs).
    admitting: bool,
    retried: u64,
    inline_answered: u64,
    inline_spilled: u64,
    /// The number of the last job submitted to the materialiser.
    last_job: u64,
    /// The last job with a timer change the timer index does not hold (a timer put beyond
    /// the loaded window, or removed from it): a refill must not read the store before the
    /// store has it.
    unloaded_timers_job: u64,
    /// Set when a batch was refused because the group moved on: nothing is written until
    /// the log reports the membership after it.
    refused: Option<Refused>,
}

/// A batch refused for the generation `generation` at `at` (the log's clock).
#[derive(Debug, Clone, Copy)]
struct Refused {
    generation: u64,
    at: DateTime<Utc>,
}

impl<R, L, S, M> Driver<R, L, S, M, NoInline>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
{
    /// A loop that sends every activity request to its topic.
    pub fn new(
        processor: Processor<R>,
        log: L,
        store: S,
        materialiser: M,
        config: DriverConfig,
    ) -> Self {
        Driver::with_inline(processor, log, store, materialiser, config, NoInline)
    }
}

impl<R, L, S, M, I> Driver<R, L, S, M, I>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
    I: InlineActivities,
{
    /// A loop that runs the activities `inline` runs itself ([`crate::inline`]).
    pub fn with_inline(
        processor: Processor<R>,
        log: L,
        store: S,
        materialiser: M,
        config: DriverConfig,
        inline: I,
    ) -> Self {
        Driver {
            processor,
            inline,
            timers: TimerIndex::new(config.timer_horizon),
            log,
            store,
            materialiser,
            config,
            owned: BTreeSet::new(),
            generation: 0,
            positions: IndexMap::new(),
            reminded: IndexMap::new(),
            stamp_order: StampOrder::default(),
            admitting: true,
            retried: 0,
            inline_answered: 0,
            inline_spilled: 0,
            last_job: 0,
            unloaded_timers_job: 0,
            refused: None,
        }
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn owned(&self) -> &BTreeSet<i32> {
        &self.owned
    }

    /// Runs until the log says shutdown; then waits for the store to hold every batch.
    pub async fn run(&mut self) -> Result<(), DriverError> {
        while self.turn().await? {}
        self.materialiser
            .flush()
            .await
            .map_err(DriverError::Materialise)
    }

    /// One turn of the loop: a poll, and a batch or a take-over. `false` on shutdown.
    pub async fn turn(&mut self) -> Result<bool, DriverError> {
        self.materialiser
            .health()
            .map_err(DriverError::Materialise)?;
        self.admission().await?;
        let polled = self
            .log
            .poll(self.config.max_batch)
            .await
            .map_err(DriverError::Log)?;
        let records = match polled {
            Polled::Shutdown => return Ok(false),
            Polled::Rebalanced { generation, owned } => {
                self.refused = None;
                self.take_over(generation, owned).await?;
                return Ok(true);
            }
            Polled::Records(records) => records,
        };
        if let Some(refused) = self.refused {
            // A batch was refused because the group moved on, and the log has not said what
            // this worker owns now: its old assignment may be another member's, so nothing is
            // written for it. The records are dropped (the take-over rewinds).
            let (generation, owned) = self.log.membership();
            let waited = self.log.now() - refused.at;
            let patience = chrono::Duration::from_std(self.config.rejoin_wait)
                .unwrap_or(chrono::Duration::MAX);
            if generation <= refused.generation {
                if waited < patience {
                    return Ok(true);
                }
                tracing::warn!(
                    generation,
                    waited_ms = waited.num_milliseconds(),
                    "no new membership after a refused batch; taking the reported one over"
                );
            }
            self.refused = None;
            self.take_over(generation, owned).await?;
            return Ok(true);
        }
        let now = self.log.now();
        // Every turn, loaded or idle: the horizon moves with the clock, and a timer beyond it
        // when it was written must be read before it is due.
        self.refill_timers(now).await?;
        let timers = self.timers.take_due(now, self.config.max_batch);
        if records.is_empty()
            && timers.is_empty()
            && !self.processor.schedule_due(now)
            && !self.processor.correlation_due(now)
        {
            self.write_idle_watermarks(now).await?;
            return Ok(true);
        }
        let span = tracing::info_span!("batch", records = records.len(), timers = timers.len());
        self.process_and_commit(records, timers, now)
            .instrument(span)
            .await?;
        Ok(true)
    }

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
        self.positions = positions
            .into_iter()
            .filter(|(_, partition, _)| owned.contains(partition))
            .map(|(topic, partition, offset)| ((topic, partition), offset))
            .collect();
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
            if !state.schedules.is_empty() || !state.correlations.is_empty() {
                tracing::info!(
                    schedules = state.schedules.len(),
                    correlation_keys = state.correlations.len(),
                    "keyed state restored"
                );
            }
            self.processor.restore_schedules(state.schedules);
            self.processor.restore_correlations(state.correlations);
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

    /// Opens or closes the submissions partitions (see the module docs, admission).
    async fn admission(&mut self) -> Result<(), DriverError> {
        let limit = match self.processor.capacity_seen() {
            Some(capacity) => self
                .config
                .admit_below
                .min(admission_limit(capacity, self.config.max_batch)),
            None => self.config.admit_below,
        };
        let now = self.log.now();
        let admit = limit == usize::MAX || {
            let since = chrono::Duration::from_std(self.config.admission_idle)
                .ok()
                .and_then(|idle| now.checked_sub_signed(idle))
                .unwrap_or(DateTime::<Utc>::MIN_UTC);
            self.processor.recently_stepped(since) < limit
        };
        // While paused, the instant moves with every turn (early events, issue 33 F7).
        self.processor.submissions_read(self.admitting, now);
        if admit == self.admitting {
            return Ok(());
        }
        let from: Vec<(i32, i64)> = self
            .positions
            .iter()
            .filter(|((topic, _), _)| *topic == InputTopic::Submissions)
            .map(|(&(_, partition), &offset)| (partition, offset))
            .collect();
        self.log
            .admit(admit, &from)
            .await
            .map_err(DriverError::Log)?;
        if admit {
            tracing::info!(
                "submissions read again: executions in flight are below the admission limit"
            );
        } else {
            tracing::info!(
                limit,
                "submissions paused: as many executions in flight as the admission limit"
            );
        }
        self.admitting = admit;
        self.report(0, 0);
        Ok(())
    }

    /// Reads the timers of owned partitions due within the horizon.
    ///
    /// While the materialiser is behind (the store may be away), a refill that is not urgent
    /// is postponed: the hot path must not wait for the store (see [`TimerIndex`]). An urgent
    /// one waits until the store has every timer change the index does not hold: a read
    /// before would skip a timer for good (the index counts the range as loaded).
    async fn refill_timers(&mut self, now: DateTime<Utc>) -> Result<(), DriverError> {
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

    async fn process_and_commit(
        &mut self,
        records: Vec<PolledRecord>,
        timers: Vec<TimerRow>,
        now: DateTime<Utc>,
    ) -> Result<(), DriverError> {
        let mut batch = Batch::new(now);
        let inputs = records.len() + timers.len();
        for record in records {
            self.positions
                .insert((record.topic, record.partition), record.offset + 1);
            self.process(&mut batch, record.input).await?;
        }
        for timer in &timers {
            // The fired timer is deleted before what its input does: a step may put the same
            // timer again (a `retry` due now: same partition, time and id), and a delete after
            // it would take the new one too, in memory and in the store.
            let consumed_at = batch.effects.len();
            if self
                .process(&mut batch, Input::TimerDue(timer.clone()))
                .await?
            {
                let delete = Effect::DeleteTimer(timer.key());
                batch.effects.insert(consumed_at, delete);
            }
        }
        self.processor.fire_schedules(&mut batch);
        self.processor.expire_correlations(&mut batch);
        self.run_inline(&mut batch).await?;
        let offsets: Positions = self
            .positions
            .iter()
            .map(|(&(topic, partition), &offset)| (topic, partition, offset))
            .collect();
        let traces: Vec<_> = batch
            .effects
            .iter()
            .map(|effect| self.processor.trace_of(effect))
            .collect();
        let commit = Commit {
            effects: &batch.effects,
            offsets: &offsets,
            traces: &traces,
        };
        let landed = match self.log.commit(commit).await {
            Ok(landed) => landed,
            Err(CommitError::Retry(e)) => {
                tracing::warn!(error = %e, "batch aborted; reprocessing from the committed offsets");
                self.retried += 1;
                let (generation, owned) = self.log.membership();
                return self.take_over(generation, owned).await;
            }
            Err(CommitError::Refused(e)) => {
                tracing::warn!(error = %e, "batch refused; waiting for the new membership, then reprocessing from the committed offsets");
                self.retried += 1;
                // The log may still report the assignment the group just took away (librdkafka
                // has not noticed yet): wait for the next one (see `turn`).
                self.refused = Some(Refused {
                    generation: self.generation,
                    at: self.log.now(),
                });
                self.report(0, 0);
                return Ok(());
            }
            Err(CommitError::Fatal(e)) => return Err(DriverError::Commit(e)),
        };
        // A reminder that fired in a committed batch has had its start tried (or its
        // execution was left as unreadable): no checkpoint waits for it any longer.
        for timer in &timers {
            if let Ok(TimerId::Retry(id)) = timer.id() {
                self.reminded.shift_remove(&id);
            }
        }
        self.materialise(batch, landed, now).await?;
        self.report(inputs, 0);
        Ok(())
    }

    /// Answers the batch's inline activity requests in the batch ([`crate::inline`]): rounds
    /// of attempts while the answers request more, at most `max_inline_rounds`; every
    /// request not answered goes to its topic in this same transaction.
    async fn run_inline(&mut self, batch: &mut Batch) -> Result<(), DriverError> {
        let mut from = 0;
        for _ in 0..self.config.max_inline_rounds {
            let requests = inline::take_requests(batch, from, &self.inline);
            if requests.is_empty() {
                break;
            }
            let traces: Vec<_> = requests
                .iter()
                .map(|r| {
                    Some(
                        self.processor
                            .activity_trace(&r.parent_execution_id, &r.execution_id),
                    )
                })
                .collect();
            let outcomes = self.inline.run(&requests, &traces, batch.now).await;
            // What this round's answers make comes after `from`: the next round's requests.
            from = batch.effects.len();
            let mut spilled = Vec::new();
            for (index, request) in requests.into_iter().enumerate() {
                // The seam owes one outcome per request; a missing one is sent to the topic.
                let outcome = outcomes.get(index).unwrap_or(&InlineOutcome::Spill);
                match outcome {
                    InlineOutcome::Answered(result) => {
                        self.inline_answered += 1;
                        self.processor
                            .answer_inline(batch, &request, result.clone())
                            .await?;
                    }
                    other => spilled.extend(inline::spill(request, other)),
                }
            }
            // Spilled requests are not run again by a later round.
            batch.effects.splice(from..from, spilled.iter().cloned());
            from += spilled.len();
            self.inline_spilled += spilled.len() as u64;
        }
        Ok(())
    }

    /// Steps one input, rehydrating the execution it names first. An execution whose stored
    /// history cannot be read or rebuilt is left alone (its input dead-lettered, its timer
    /// kept): one bad execution must not stop the partition. `false` if not stepped.
    async fn process(&mut self, batch: &mut Batch, input: Input) -> Result<bool, DriverError> {
        if let Some((id, pinned_until)) = self.processor.needs(batch, &input) {
            // Rebuilt from the store: it must hold every batch that touched the execution.
            self.materialiser
                .wait_for(pinned_until)
                .await
                .map_err(DriverError::Materialise)?;
            let unreadable = match self.store.load(&id).await {
                Ok(stored) => match self.processor.rehydrate(batch, &id, stored).await {
                    Ok(()) => None,
                    Err(ProcessorError::Projection(e)) => Some(e.to_string()),
                },
                Err(LoadError::Unreadable { reason, .. }) => Some(reason),
                Err(LoadError::Store(e)) => return Err(DriverError::Store(e)),
            };
            if let Some(reason) = unreadable {
                self.processor.unreadable(batch, &id, &input, reason);
                return Ok(false);
            }
        }
        self.processor.step(batch, input).await?;
        Ok(true)
    }

    /// After a commit; see the module docs.
    async fn materialise(
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
                        recorded_at: now,
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
    fn add_watermarks(
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

    fn watermark(
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
    async fn write_idle_watermarks(&mut self, now: DateTime<Utc>) -> Result<(), DriverError> {
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

    fn checkpoint(
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
    async fn submit(&mut self, mut job: MaterialiseJob) -> Result<u64, DriverError> {
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
    fn stamp(&self, now: DateTime<Utc>) -> WriteStamp {
        WriteStamp::owner(self.generation, now)
    }

    fn report(&mut self, inputs: usize, effects: usize) {
        let report = Report {
            owned: self.owned.len(),
            cached: self.processor.len(),
            parked: self.processor.parked(),
            stats: self.processor.stats(),
            inputs,
            effects,
            retried: self.retried,
            inline_answered: self.inline_answered,
            inline_spilled: self.inline_spilled,
            admitting: self.admitting,
        };
        self.log.observe(&report);
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
                recorded_at: timestamp,
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
