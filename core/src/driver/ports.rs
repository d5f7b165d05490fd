//! The driver's seams, traits first: the [`Log`] (Kafka in production, the simulated log in
//! tests), the store it reads ([`StoreRead`]) and the background writer of committed batches
//! ([`Materialise`]), with the values that cross them.

use std::collections::BTreeSet;
use std::future::Future;

use chrono::{DateTime, Utc};

use crate::correlation::{CorrelationState, RememberedEvent};
use crate::model::ExecutionId;
use crate::processor::{CorruptState, Effect, Input, ProcessorStats};
use crate::records::HistoryRecord;
use crate::rows::{ListPage, ListQuery, MaterialiseJob, TimerRow};
use crate::schedule::ScheduleState;

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
    /// Its [`Input::Record`], whose `index` is the log's handle of the record: unique until
    /// the next [`Log::rewind`], kept by the log (for a dead letter's copy) until a committed
    /// batch lists it in [`Commit::consumed`].
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

/// An input partition's offset (the next to read, or to commit) and the metadata committed
/// with it: for a submissions partition, the records taken beyond the offset
/// ([`crate::fairness::Taken`]); empty otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub topic: InputTopic,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// Input partitions with an offset.
pub type Positions = Vec<Position>;

/// One transaction to commit.
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    pub effects: &'a [Effect],
    /// Every owned input partition's next offset to read, those the batch read records of
    /// and the others alike: so that every batch, even one made only of due timers, carries
    /// the group generation and is fenced once the partitions moved to another member.
    pub offsets: &'a [Position],
    /// The handles of the input records this batch stepped or skipped ([`PolledRecord`]):
    /// once it is committed the log forgets them.
    pub consumed: &'a [usize],
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
    /// tombstones dropped; a last record that does not decode at all is in
    /// [`KeyedState::corrupt`].
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

    /// Stops reading the owned submissions partitions (`open` false: their records wait in
    /// the log, responses are still read), or reads them again (`open` true), each from its
    /// position in `from` (the next offset to read). A new assignment reads them. The driver
    /// stops reading them while it holds as many as it reads ahead
    /// ([`super::DriverConfig::read_ahead_bytes`]).
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
    /// The batch operations' states ([`crate::batch`]; their turns' outcomes are not read).
    pub batches: Vec<crate::batch::BatchState>,
    /// The batches' turns' outcomes: read for a listing only (a take-over leaves them out).
    pub batch_outcomes: Vec<crate::batch::BatchOutcomes>,
    pub correlations: Vec<CorrelationState>,
    /// The concurrency slots that hold or queue executions.
    pub slots: Vec<crate::concurrency::SlotState>,
    /// The event ids the correlation keys remember (records of their own).
    pub remembered: Vec<RememberedEvent>,
    /// Keys whose own record still held their remembered ids (written before each id was a
    /// record of its own): those ids are in `remembered` too, and the first batch moves them
    /// ([`crate::processor::Processor::restore_remembered`]).
    pub unrecorded: Vec<String>,
    /// Keys whose last record does not decode at all (corrupt bytes: not a writer schema the
    /// reader does not know, which it leaves out and in place): the processor drops them
    /// ([`crate::processor::CorruptState`]).
    pub corrupt: Vec<CorruptState>,
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

    /// A page of a list of executions (the store's `list_executions`): what a batch
    /// operation's turn reads ([`crate::batch::wants`]).
    fn list(&self, query: &ListQuery) -> impl Future<Output = Result<ListPage, BoxError>> + Send;
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
    /// Executions whose start is deferred, waiting for their `retry` timer.
    pub deferred: usize,
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
    /// Whether new executions are started (`false`: closed by admission).
    pub admitting: bool,
    /// Submissions read ahead and held for their turn ([`crate::fairness`]), and their bytes.
    pub held: usize,
    pub held_bytes: usize,
}
