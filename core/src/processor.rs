//! The partition processor: the rules by which a workflow worker turns its inputs into
//! effects. This file is where they live, and only here.
//!
//! It owns the execution cache of the partitions its worker holds. [`Processor::step`] takes
//! one typed [`Input`] — a submission, a response for an owner, undecodable bytes, a due timer
//! — and appends typed [`Effect`]s to the [`Batch`] being built: changelog entries, child
//! submissions, activity requests, responses, results, timer changes, dead letters. Nothing is
//! encoded and nothing is sent; time is passed in ([`Batch::now`]). An execution that is not
//! in the cache (or whose parked run was evicted) is rehydrated first: [`Processor::needs`]
//! names it, the driver reads its changelog from the store, and [`Processor::rehydrate`]
//! rebuilds it (by the one [projection](crate::projection) and a replay).
//!
//! The cache is bounded by bytes (`cache_bytes`): each cached execution weighs its view
//! ([`view_bytes`]) plus its parked run's [`WorkflowRun::resident_bytes`]; between batches
//! [`Processor::evict`] drops whole executions, as the [cache policy](crate::cache) (a weighted
//! S3-FIFO, which keeps hitting under cyclic access where LRU never does) picks them, never one
//! pinned by a batch the store does not hold yet.
//!
//! Every changelog entry the processor appends goes through [`ExecutionView::apply`], so the
//! state it keeps, the execution rows and the timers it writes are the projection's, exactly
//! as catch-up and rehydration derive them.
//!
//! Rules, per input:
//! - **Oversize** records (more than `max_record_bytes`) and undecodable ones are dead-lettered.
//!   Whoever waits for an oversize one still hears: a child's answer reaches its parent as a
//!   `value-too-large` error of that child; a new top-level submission is answered
//!   `value-too-large`.
//! - **Misrouted** records are dead-lettered (`misrouted`) before anything reads them: a
//!   submission must be keyed by its execution id, a response by the execution it answers,
//!   and either must sit on the partition murmur2 gives its key. Any other record names an
//!   execution that another worker owns, and acting on it would let two workers act on one
//!   execution.
//! - **Submission**: a top-level submission (no parent) must have a top-level id (`E_<ulid>`),
//!   and a child's id must be a child of its parent; otherwise it is dead-lettered
//!   (`conflict`) and, if top-level, answered on `weir.results` with a `conflict` error. A
//!   known id with the same function and params is idempotent: nothing is appended, and a
//!   top-level execution that has finished publishes its result again (one that has not will
//!   publish it when it does). A known id with another function or other params is a
//!   conflict: dead-lettered, and (top-level) answered with a `conflict` error naming the
//!   existing execution. A function name that does not parse creates nothing: dead-lettered
//!   and answered `unknown-function`. Otherwise `Created` is appended; a function that does not exist,
//!   params that do not type-check or are not JSON at all dead-letter the record and finish
//!   the execution with `unknown-function` / `invalid-params` (so its caller hears); a start
//!   time in the future waits for the schedule timer (put by the projection); else the run
//!   starts.
//! - **Response**: keyed by the execution it answers; a key that is not an execution id, or a
//!   response that answers no request of the key, or one for an execution that does not exist
//!   is dead-lettered. A duplicate (same child or delay id) or one for a finished execution is
//!   ignored. An answer whose value is not JSON (read as the child's `invalid-response`
//!   error), or one for a child calling an external function that does not fit its result
//!   type ([`WorkflowRunner::check_answer`]), is taken as that error and the record copied to
//!   the DLQ. Otherwise it is delivered to the run; a response the run refuses (it answers no
//!   request made, or one of the other kind: what a buggy external service sends) is
//!   dead-lettered (`refused`) and the run goes on as if it never came. An accepted response
//!   is journalled, then the run's new events; a run that fails on it finishes with `trap`.
//! - **Event** (`weir.events`, keyed by its target execution): for an execution that has
//!   finished it is dead-lettered (`refused`, with why); for one that does not exist it is
//!   kept under the execution's id until the submission creates it (journalled right after
//!   `Created`) or `early_event_wait` passes (then it comes back marked `waited_until` and
//!   is dead-lettered `other`, [`correlation::hold_early`]); an event
//!   id the execution has seen is dropped (counted); one whose name has an open wait is
//!   delivered to the oldest such wait as `EventDelivered` (journalled as a response, like
//!   any other); otherwise it is journalled as `EventReceived` and kept until a wait of its
//!   name takes it (the projection's buffer, at most [`MAX_BUFFERED_EVENTS`] events and
//!   [`MAX_BUFFERED_EVENT_BYTES`] of payloads per execution; beyond, dead-lettered
//!   `refused`). After every step of a run, an open wait whose name has a buffered event
//!   takes the oldest one ([`ExecutionView::next_event_match`]), so an event sent before the
//!   workflow waits is not lost. Events still buffered when the execution finishes are
//!   dropped (counted: `events_unclaimed`). An `EventDelivered` on `weir.responses` is
//!   dead-lettered: events come only through `weir.events`, where they are deduplicated.
//! - **A stub's value** arriving as a record (a `ChildExecutionFinished` for a stub child,
//!   from `weir stub` or any client) follows Obelisk's rules: the value the stub holds again is
//!   nothing new (ignored); another value is dead-lettered `conflict` (the stub keeps its
//!   value, even after the execution finished); one that does not fit the stub function's
//!   result type is dead-lettered `refused` (nothing is journalled, so a fitting value can
//!   still be written).
//! - **Cancel** (`CancelRequest`, on `weir.responses` from outside, on `weir.submissions` for
//!   a child): for an unknown execution dead-lettered; for a finished one, or one cancelled
//!   already, nothing. Otherwise `CancelRequested` is appended and everything the execution
//!   waits for is cancelled: activities (with `CancelActivity`) and stubs answered
//!   `cancelled`, delays and event waits answered cancelled, child workflows sent a
//!   `CancelRequest` of their own; the answers are journalled and delivered to the run, which
//!   may compensate. Once cancelled, an execution finishes `cancelled` whatever it returns.
//!   `terminate` (or a still scheduled execution) finishes at once.
//! - **Deadline**: before any input of an execution is taken, an execution past its deadline
//!   (`Created.deadline`: the earlier of its submission's and its component's default) that
//!   has not finished stops waiting as a terminated one does (activities interrupted and
//!   answered `cancelled`, child workflows terminated, delays and event waits cancelled, all
//!   journalled) and finishes `timed-out`; the input then finds it finished. One submitted
//!   past its deadline never runs. A child workflow's submission carries its parent's
//!   deadline, and an activity request's deadline is never later than its parent's.
//! - **Closing a join set** cancels its unawaited activities and delays: the execution
//!   answers each itself (`cancelled`, `DelayFinished{cancelled}`), journalled and delivered
//!   to the run in that order, and an activity's `CancelActivity` names its function. An
//!   unanswered event wait is answered `EventDelivered{cancelled}`.
//! - **Timer due**: a delay becomes a `DelayFinished` response (as above, with no record to
//!   dead-letter); a schedule timer starts its execution if it is still scheduled.
//! - **Schedules** ([`crate::schedule`] holds their rules): a command (`weir.responses`, keyed
//!   `schedule:<name>` on that key's partition, else `misrouted`) is folded into the
//!   schedule's state, a refused one dead-lettered with why (a `create` whose function the
//!   host does not have, or whose params do not fit it, as a submission would be). Each batch
//!   takes the due ticks of the owned schedules: a submission per tick that starts an
//!   execution (its id derived from the schedule and the tick), the cancellations
//!   `cancel-previous` makes, and the new state (`PutSchedule`, on `weir.state`), all in the
//!   batch's transaction. A tick's execution, when it finishes, tells its schedule
//!   (`RUN_FINISHED`), which `skip` waits for.
//! - **A run that cannot start** for a reason that passes (a full instance pool, a component
//!   a rolling deploy has not brought yet, an incomplete read of its journal) is parked, not
//!   finished: its start is tried again after 1 s, doubling to a minute, by a `retry` timer
//!   (durable: a new owner of the partition tries it too), and at its next input.
//! - A run's new events are appended, then its outputs become effects; `Finished` appends
//!   the last entry and answers the parent (`weir.responses`) or `weir.results`.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use indexmap::{IndexMap, IndexSet};
use serde_json::Value;

use crate::cache::Policy;
use crate::correlation::{
    self, CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent, Received,
};
use crate::model::{
    ChildKind, DelayId, DelayOutcome, EventOutcome, ExecutionError, ExecutionErrorKind,
    ExecutionId, ExecutionResult, Ffqn, Response,
};
use crate::projection::{self, ExecutionView, ProjectionError, TimerChange};
use crate::records::{
    ActivityRequest, CancelRequest, Created, DlqReason, ExecutionFinished, HistoryEntry,
    HistoryRecord, InboundEvent, ParentRef, ReceivedEvent, Submission, UpgradeRequest,
};
use crate::replay::{Effects, Execution, Output};
use crate::rows::{ExecutionRow, ExecutionState, TimerKey, TimerKind, TimerRow};
use crate::runner::{Rejection, RequestTerms, RunError, RunStep, WorkflowRun, WorkflowRunner};
use crate::schedule::{self, Applied, ScheduleAction, ScheduleCommand, ScheduleState};

/// What the processor emits; the driver encodes and commits it.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The changelog entry at `seq` of an execution (`weir.history`, keyed by its id).
    Append {
        execution_id: ExecutionId,
        seq: u64,
        entry: HistoryEntry,
    },
    /// A submission (`weir.submissions`, keyed by its id): a child workflow, or a top-level
    /// execution scheduled by a workflow.
    Submit(Submission),
    /// An activity request (its route's topic, keyed by the activity's id).
    RequestActivity(ActivityRequest),
    /// A later attempt of an activity whose earlier one ran inline and failed
    /// ([`crate::inline`]): its route's topic like [`Effect::RequestActivity`], to run no
    /// earlier than `not_before` (its retry's backoff).
    RetryActivity {
        request: ActivityRequest,
        not_before: DateTime<Utc>,
    },
    /// A response for `to` (`weir.responses`, keyed by `to`): a child answering its parent,
    /// or a stub's value answering the execution that wrote it.
    Respond {
        to: ExecutionId,
        response: Response,
    },
    /// A top-level execution's result (`weir.results`).
    PublishResult(ExecutionFinished),
    PutTimer(TimerRow),
    DeleteTimer(TimerKey),
    /// An unawaited activity of a closed join set, calling `ffqn`: a running attempt is
    /// interrupted, a pending retry dropped. The parent has journalled its cancellation
    /// already (a `cancelled` execution error), so an answer that still comes is ignored.
    CancelActivity {
        parent: ExecutionId,
        child: ExecutionId,
        ffqn: Ffqn,
    },
    /// A child workflow of an execution being cancelled is cancelled too: a `CancelRequest`
    /// on `weir.submissions` (header `weir.kind = cancel-execution`), keyed by the child, so
    /// that it lands after the child's own submission.
    CancelExecution(CancelRequest),
    /// The new state of a schedule of an owned partition (`None`: deleted), on `weir.state`
    /// (compacted), keyed `schedule:<name>`: a new owner restores it from there.
    PutSchedule {
        name: String,
        state: Option<ScheduleState>,
    },
    /// A command for a schedule's owner (`weir.responses`, keyed `schedule:<name>`, header
    /// `weir.kind = schedule`): an execution a tick started has finished.
    ScheduleCommand(ScheduleCommand),
    /// A command for a correlation key's owner (`weir.responses`, keyed by the key, header
    /// `weir.kind = correlation`): an execution registers the key, or has finished.
    Correlation(CorrelationCommand),
    /// The new state of a correlation key of an owned partition (`None`: forgotten), on
    /// `weir.state` (compacted), keyed by the key.
    PutCorrelation {
        key: String,
        state: Option<CorrelationState>,
    },
    /// An event sent to a key, forwarded to the execution holding it (`weir.events`, keyed
    /// by the execution).
    ForwardEvent(InboundEvent),
    /// An event a key forwarded to an execution that had finished, sent back to the key
    /// (`weir.events`, keyed by the key).
    ReturnEvent(KeyedEvent),
    /// A workflow writes the value of another execution's stub child: for the owner of the
    /// stub's parent (`weir.responses`, keyed by the parent, header `weir.kind = stub-write`).
    WriteStub(StubWrite),
    /// The input record `input` of the batch goes to the DLQ, byte for byte.
    DeadLetter {
        input: usize,
        reason: DlqReason,
        error: String,
    },
}

/// The body of an input record, as the driver decoded it.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Submission(Submission),
    Response(Response),
    /// A submission whose every field decoded except its params, which are not JSON text (or
    /// not an array): `params` holds that text as a JSON string. It still creates its
    /// execution, which finishes at once with `invalid-params`, so that its caller hears.
    UnparsableParams {
        submission: Submission,
        error: String,
    },
    /// A submission whose function name does not parse (`submission.ffqn` is
    /// [`unparsable_ffqn`](crate::records::unparsable_ffqn)): nothing is created; it is
    /// dead-lettered and answered `unknown-function`, so that its caller hears.
    UnparsableFfqn {
        submission: Submission,
        error: String,
    },
    /// A child's answer whose child id decoded but whose value is not JSON text: `response`
    /// is that child's `invalid-response` error. It is delivered (so that the parent hears)
    /// and the record is copied to the DLQ (`undecodable`, `error`), so nothing is lost.
    MalformedAnswer {
        response: Response,
        error: String,
    },
    /// A request to move an execution to another build (`weir upgrade`).
    Upgrade(UpgradeRequest),
    /// An event sent to an execution (`weir.events`).
    Event(InboundEvent),
    /// A request to stop an execution (`weir cancel`, or its parent's cancellation).
    Cancel(CancelRequest),
    /// A command about a schedule (`weir schedule`, `weir topology apply`, a finished run).
    Schedule(ScheduleCommand),
    /// An event sent to a correlation key (`weir.events`, keyed by the key).
    KeyedEvent(KeyedEvent),
    /// An execution registering a correlation key, or finished (`weir.responses`).
    Correlation(CorrelationCommand),
    /// A workflow writing the value of a stub child of an execution of this partition.
    StubWrite(StubWrite),
}

/// A write of the value of `target`, a stub child of another execution, by the workflow whose
/// request (a [`ChildKind::StubWrite`] child) `request` is; `ffqn` is the stub's function.
#[derive(Debug, Clone, PartialEq)]
pub struct StubWrite {
    pub request: ExecutionId,
    pub target: ExecutionId,
    pub ffqn: Ffqn,
    pub result: ExecutionResult,
}

/// Bytes the driver could not decode.
#[derive(Debug, Clone, PartialEq)]
pub struct Undecodable {
    pub reason: DlqReason,
    pub error: String,
}

/// One input of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A record of `weir.submissions` or `weir.responses`; `index` names it in
    /// [`Effect::DeadLetter`].
    Record {
        index: usize,
        partition: i32,
        key: Option<String>,
        size: usize,
        body: Result<Body, Undecodable>,
    },
    /// A due timer of an owned partition.
    TimerDue(TimerRow),
}

/// The effects of one batch, in order, and the executions it touched.
#[derive(Debug, Clone)]
pub struct Batch {
    pub now: DateTime<Utc>,
    pub effects: Vec<Effect>,
    pub touched: IndexSet<ExecutionId>,
}

impl Batch {
    pub fn new(now: DateTime<Utc>) -> Self {
        Batch {
            now,
            effects: Vec::new(),
            touched: IndexSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessorError {
    /// The changelog of an execution breaks the projection's rules: a bug or a corrupt store.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// Settings of the processor (their defaults live with the worker's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorConfig {
    /// Bytes the cached executions may hold (their views and parked runs, as
    /// [`Processor::evict`] weighs them); beyond, the cache policy evicts.
    pub cache_bytes: u64,
    /// At most this many parked runs (a backstop under the byte budget).
    pub cache_size: usize,
    /// Input records larger than this are dead-lettered.
    pub max_record_bytes: usize,
    /// Partitions of the co-partitioned topics (submissions, responses, history).
    pub partitions: i32,
    /// How long an event for an execution that does not exist waits for its submission
    /// (default [`correlation::EARLY_EVENT_WAIT`]) before it is dead-lettered.
    pub early_event_wait: chrono::Duration,
}

impl ProcessorConfig {
    /// A `cache_size` that caps nothing (only the byte budget bounds the cache).
    pub const UNCAPPED: usize = usize::MAX;
}

/// Counters of what the processor did (cumulative; the driver exports them as metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessorStats {
    pub created: u64,
    pub finished: u64,
    /// Runs rebuilt from the store by replay (the cold path).
    pub replayed: u64,
    /// Responses delivered to a parked run (the hot path).
    pub hot_deliveries: u64,
    pub dead_letters: u64,
    /// Inputs for executions whose stored history cannot be read or rebuilt.
    pub unreadable: u64,
    /// Starts deferred because the host or the store could not run them then (a full instance
    /// pool, a component a rolling deploy has not brought yet, an incomplete read).
    pub deferred_starts: u64,
    /// Parked runs dropped to make room for a run the host had no room for.
    pub evicted_for_room: u64,
    /// Events taken by an execution (delivered to a wait or buffered).
    pub events_received: u64,
    /// Events dropped because their execution had them already (same event id).
    pub events_duplicate: u64,
    /// Events kept for an execution that did not exist yet (its submission still to come).
    pub events_early: u64,
    /// Buffered events no wait took before their execution finished.
    pub events_unclaimed: u64,
    /// Executions cancelled or terminated.
    pub cancelled: u64,
    /// Executions that timed out at their deadline (or were submitted past it).
    pub deadlines_passed: u64,
    /// Schedule ticks that started an execution, were skipped for an overlap, were missed
    /// (owed for longer than the catch-up window).
    pub ticks_started: u64,
    pub ticks_skipped: u64,
    pub ticks_missed: u64,
    /// Events sent to correlation keys: forwarded to the key's holder, or buffered in the
    /// key until one registers.
    pub keyed_events_forwarded: u64,
    pub keyed_events_buffered: u64,
    /// Forwarded events that found their execution finished and went back to their key.
    pub keyed_events_returned: u64,
}

/// At most this many events wait in one execution's buffer.
pub const MAX_BUFFERED_EVENTS: usize = 1_000;

/// At most this many bytes of JSON payloads wait in one execution's buffer.
pub const MAX_BUFFERED_EVENT_BYTES: usize = 1 << 20;

/// The delay before retrying a deferred start, after `attempt` failed tries: 1 s, doubling,
/// at most a minute.
pub fn start_retry_delay(attempt: u32) -> chrono::Duration {
    let secs = 1i64 << attempt.saturating_sub(1).min(6);
    chrono::Duration::seconds(secs.min(60))
}

/// An execution of one of the worker's partitions.
struct Live<Run> {
    view: ExecutionView,
    /// The parked run, if any (`None`: evicted, or not started, or finished).
    run: Option<Run>,
    /// The materialiser's number of the last committed batch that touched this execution:
    /// until that batch is in the store, the store is behind memory and the execution is
    /// pinned (never evicted, never rebuilt from the store).
    pinned_until: u64,
    /// The batch time of the last committed batch that touched this execution: an execution
    /// stepped recently is one whose answers are likely to come soon (admission counts them,
    /// see [`Processor::recently_stepped`]).
    stepped_at: Option<DateTime<Utc>>,
}

/// The partition processor; see the module docs.
pub struct Processor<R: WorkflowRunner> {
    runner: R,
    config: ProcessorConfig,
    cache: IndexMap<ExecutionId, Live<R::Run>>,
    stats: ProcessorStats,
    /// Executions whose run could not start for a reason that passes, with the failed tries
    /// so far (a new owner starts counting again); their `retry` timers try again.
    deferred: IndexMap<ExecutionId, u32>,
    /// The fewest parked runs seen when the host had no room for one more (`NoCapacity`).
    capacity_seen: Option<usize>,
    /// The materialiser's last job in the store, as of the last [`Processor::evict`]: runs
    /// pinned by a later one are never dropped.
    materialised: u64,
    /// Which cached execution goes first when the cache outweighs `cache_bytes`.
    policy: Policy<ExecutionId>,
    /// Executions used since the last [`Processor::evict`], in order, each once (a rebuild
    /// and its delivery are one use): it tells the policy.
    accessed: IndexSet<ExecutionId>,
    /// The schedules of the owned partitions, by name (restored at take-over, see
    /// [`Processor::restore_schedules`]).
    schedules: BTreeMap<String, ScheduleState>,
    /// The correlation keys of the owned partitions that hold an execution or events
    /// (restored at take-over with the schedules).
    correlations: BTreeMap<String, CorrelationState>,
}

impl<R: WorkflowRunner> Processor<R> {
    pub fn new(runner: R, config: ProcessorConfig) -> Self {
        Processor {
            runner,
            config,
            cache: IndexMap::new(),
            stats: ProcessorStats::default(),
            deferred: IndexMap::new(),
            capacity_seen: None,
            materialised: 0,
            policy: Policy::new(config.cache_bytes),
            accessed: IndexSet::new(),
            schedules: BTreeMap::new(),
            correlations: BTreeMap::new(),
        }
    }

    pub fn runner(&self) -> &R {
        &self.runner
    }

    pub fn config(&self) -> &ProcessorConfig {
        &self.config
    }

    pub fn stats(&self) -> ProcessorStats {
        self.stats
    }

    /// The execution `input` is about, if it must be read from the store before
    /// [`Processor::step`]: with the materialiser's batch number that must be in the store
    /// first.
    pub fn needs(&self, input: &Input) -> Option<(ExecutionId, u64)> {
        let id = match input {
            // An oversize response or submission is still answered (see `step`): the
            // execution it names is read first.
            Input::Record {
                partition,
                key,
                body: Ok(body),
                ..
            } => {
                if self.misrouted(*partition, key.as_deref(), body).is_some() {
                    return None;
                }
                input_owner(key.as_deref(), body)?
            }
            Input::Record { body: Err(_), .. } => return None,
            Input::TimerDue(timer) => timer.execution_id.clone(),
        };
        match self.cache.get(&id) {
            None => Some((id, 0)),
            // A duplicate answer is ignored by the view alone: no rebuild for it (an answer
            // sent again must not cost a replay of its execution).
            Some(live) if is_duplicate(&live.view, input) => None,
            Some(live) if live.view.state == ExecutionState::Running && live.run.is_none() => {
                Some((id, live.pinned_until))
            }
            Some(_) => None,
        }
    }

    /// Rebuilds `id` from its stored changelog (`None`: the store has none; the execution
    /// does not exist) and, if it is running, replays it: whatever the replay yields beyond
    /// the recorded history (only when the code changed) continues the history in `batch`.
    pub async fn rehydrate(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
        stored: Option<Vec<(HistoryRecord, DateTime<Utc>)>>,
    ) -> Result<(), ProcessorError> {
        let Some(records) = stored.filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let partition = self.partition_of(id);
        let rebuilt = projection::rebuild(id, partition, records)?;
        let (pinned_until, stepped_at) = self
            .cache
            .get(id)
            .map_or((0, None), |l| (l.pinned_until, l.stepped_at));
        let running = rebuilt.view.state == ExecutionState::Running;
        let mut live = Live {
            view: rebuilt.view,
            run: None,
            pinned_until,
            stepped_at,
        };
        if running {
            self.stats.replayed += 1;
            let deferred = start_run(
                Rules::new(&self.runner, self.value_limit()),
                &mut self.stats,
                batch,
                &mut live,
                Start::Rebuild(rebuilt.events, rebuilt.responses),
            )
            .await?;
            self.note_start(id, deferred, batch);
        }
        self.cache.insert(id.clone(), live);
        self.accessed.insert(id.clone());
        Ok(())
    }

    /// The largest value (params, result) a record the processor makes may carry.
    fn value_limit(&self) -> usize {
        self.config
            .max_record_bytes
            .saturating_sub(ENVELOPE_ALLOWANCE)
    }

    /// The partition that owns `id` (the partitioner's rule, same as the log's).
    pub fn partition_of(&self, id: &ExecutionId) -> i32 {
        self.partition_of_key(&id.to_string())
    }

    /// Why a record read on `partition` with `key` does not belong to this partition's
    /// executions, if it does not.
    fn misrouted(&self, partition: i32, key: Option<&str>, body: &Body) -> Option<String> {
        // A record about one execution (a submission, an upgrade) is keyed by its id.
        let keyed_by = |what: &str, id: &ExecutionId| {
            let text = id.to_string();
            if key == Some(text.as_str()) {
                return Ok(id.clone());
            }
            let shown = key.map_or_else(|| "no key".to_owned(), |k| format!("key `{k}`"));
            Err(format!(
                "{what} of {text} with {shown}: {what} is keyed by its execution id"
            ))
        };
        let owner = match body {
            Body::Submission(s)
            | Body::UnparsableParams { submission: s, .. }
            | Body::UnparsableFfqn { submission: s, .. } => {
                keyed_by("a submission", &s.execution_id)
            }
            // A key that is not an execution id is dead-lettered by `step`.
            Body::Response(_) | Body::MalformedAnswer { .. } => Ok(response_owner(key)?),
            Body::Upgrade(u) => keyed_by("an upgrade", &u.execution_id),
            Body::Event(e) => keyed_by("an event", &e.target),
            Body::StubWrite(w) => match w.target.parent() {
                Some(parent) => keyed_by("a stub write", &parent),
                None => Err(format!("a stub write of {}: not a child", w.target)),
            },
            Body::Cancel(c) => keyed_by("a cancellation", &c.execution_id),
            Body::Schedule(c) => {
                let what = format!("a command for schedule `{}`", c.name);
                return self.misrouted_keyed(partition, key, &schedule::key(&c.name), &what);
            }
            Body::KeyedEvent(e) => {
                let what = format!("an event for correlation key `{}`", e.key);
                return self.misrouted_keyed(partition, key, &e.key, &what);
            }
            Body::Correlation(c) => {
                let what = format!(
                    "a {} of {} for correlation key `{}`",
                    c.action.as_str(),
                    c.execution_id,
                    c.key
                );
                return self.misrouted_keyed(partition, key, &c.key, &what);
            }
        };
        match owner {
            Ok(owner) => self.wrong_partition(partition, &owner),
            Err(error) => Some(error),
        }
    }

    /// Why `what` (a record about keyed state: a schedule, a correlation key) read on
    /// `partition` with `key` is not this partition's, if it is not: it is keyed
    /// `expected_key`, on that key's partition.
    fn misrouted_keyed(
        &self,
        partition: i32,
        key: Option<&str>,
        expected_key: &str,
        what: &str,
    ) -> Option<String> {
        if key != Some(expected_key) {
            let shown = key.map_or_else(|| "no key".to_owned(), |k| format!("key `{k}`"));
            return Some(format!("{what} with {shown}: it is keyed `{expected_key}`"));
        }
        let expected = self.partition_of_key(expected_key);
        (expected != partition).then(|| {
            format!(
                "{what} on partition {partition}: murmur2 of its key gives partition {expected}"
            )
        })
    }

    /// The partition that owns `key` (the partitioner's rule).
    pub fn partition_of_key(&self, key: &str) -> i32 {
        crate::partitioner::partition_for_key(key.as_bytes(), self.config.partitions)
    }

    /// Why a record for `owner` read on `partition` belongs to another partition, if it does.
    fn wrong_partition(&self, partition: i32, owner: &ExecutionId) -> Option<String> {
        let expected = self.partition_of(owner);
        (expected != partition).then(|| {
            format!(
                "a record for {owner} on partition {partition}: murmur2 of its key gives \
                 partition {expected} (the producer does not partition as Kafka's clients do)"
            )
        })
    }

    /// Processes one input; its effects are appended to `batch`. Call [`Processor::needs`]
    /// first and rehydrate what it names.
    pub async fn step(&mut self, batch: &mut Batch, input: Input) -> Result<(), ProcessorError> {
        match input {
            Input::TimerDue(timer) => {
                self.enforce_deadline(batch, &timer.execution_id)?;
                self.fire_timer(batch, timer).await
            }
            Input::Record {
                index,
                partition,
                size,
                body,
                key,
            } => {
                if size > self.config.max_record_bytes {
                    let error = format!(
                        "{size} bytes exceed the limit of {}",
                        self.config.max_record_bytes
                    );
                    self.dead_letter(batch, index, DlqReason::Oversize, error.clone());
                    match body {
                        // A child's answer too large to take (an external service's) still
                        // answers its parent, with why: a parent must not wait forever.
                        Ok(Body::Response(Response::ChildExecutionFinished {
                            child_execution_id,
                            ..
                        })) => {
                            if let Some(owner) = response_owner(key.as_deref())
                                && self.wrong_partition(partition, &owner).is_none()
                                && child_execution_id.is_child_of(&owner)
                            {
                                let response = Response::ChildExecutionFinished {
                                    child_execution_id,
                                    result: error_result(
                                        ExecutionErrorKind::ValueTooLarge,
                                        format!("the answer was not taken: {error}"),
                                    ),
                                };
                                self.enforce_deadline(batch, &owner)?;
                                return self.deliver(batch, &owner, response, None, None).await;
                            }
                        }
                        // A top-level submission too large to take is answered with why,
                        // unless its id is an existing execution's (whose answer comes as it
                        // will).
                        Ok(Body::Submission(submission)) => {
                            let id = &submission.execution_id;
                            if submission.parent.is_none()
                                && id.is_top_level()
                                && key.as_deref() == Some(id.to_string().as_str())
                                && self.wrong_partition(partition, id).is_none()
                                && !self.cache.contains_key(id)
                            {
                                let reason = format!("the submission was not taken: {error}");
                                let result =
                                    error_result(ExecutionErrorKind::ValueTooLarge, reason);
                                answer_refused(batch, &submission, result);
                            }
                        }
                        _ => {}
                    }
                    return Ok(());
                }
                let body = match body {
                    Err(e) => {
                        self.dead_letter(batch, index, e.reason, e.error);
                        return Ok(());
                    }
                    Ok(body) => body,
                };
                if let Some(error) = self.misrouted(partition, key.as_deref(), &body) {
                    self.dead_letter(batch, index, DlqReason::Misrouted, error);
                    return Ok(());
                }
                if let Some(owner) = input_owner(key.as_deref(), &body) {
                    self.enforce_deadline(batch, &owner)?;
                }
                match body {
                    Body::Submission(submission) => {
                        self.submit(batch, index, submission, None).await
                    }
                    Body::UnparsableParams { submission, error } => {
                        self.submit(batch, index, submission, Some(Flaw::Params(error)))
                            .await
                    }
                    Body::UnparsableFfqn { submission, error } => {
                        self.submit(batch, index, submission, Some(Flaw::Ffqn(error)))
                            .await
                    }
                    Body::Response(response) => {
                        self.answer(batch, index, key.as_deref(), response, None)
                            .await
                    }
                    Body::MalformedAnswer { response, error } => {
                        let copy = (DlqReason::Undecodable, error);
                        self.answer(batch, index, key.as_deref(), response, Some(copy))
                            .await
                    }
                    Body::Upgrade(request) => self.upgrade(batch, index, request),
                    Body::Event(event) => self.receive_event(batch, index, event).await,
                    Body::Cancel(request) => self.cancel(batch, index, request).await,
                    Body::Schedule(command) => {
                        self.schedule_command(batch, index, command);
                        Ok(())
                    }
                    Body::KeyedEvent(event) => {
                        self.receive_keyed_event(batch, index, event);
                        Ok(())
                    }
                    Body::Correlation(command) => {
                        self.correlation_command(batch, index, command);
                        Ok(())
                    }
                    Body::StubWrite(write) => self.write_stub(batch, write).await,
                }
            }
        }
    }

    /// `input` names `id`, whose stored history cannot be read or rebuilt (`reason`): a record
    /// is dead-lettered (nothing is lost: the DLQ keeps it byte for byte, for a replay once
    /// the store is repaired); a due timer stays in the store. The execution cannot go on;
    /// the other executions of the partition do.
    pub fn unreadable(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
        input: &Input,
        reason: String,
    ) {
        self.stats.unreadable += 1;
        tracing::error!(execution = %id, %reason, "the stored history of the execution is unreadable; its input is set aside");
        if let Input::Record { index, .. } = input {
            let error = format!("the stored history of {id} is unreadable: {reason}");
            self.dead_letter(batch, *index, DlqReason::Other, error);
        }
    }

    /// Moves an execution to another build, if nothing happened to it since its history was
    /// verified on that build (see [`UpgradeRequest`]); else dead-letters the request with
    /// why. The parked run is dropped: the next input rebuilds it on the new build.
    fn upgrade(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: UpgradeRequest,
    ) -> Result<(), ProcessorError> {
        let id = &request.execution_id;
        let Some(live) = self.cache.get_mut(id) else {
            let error = format!("upgrade of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        self.accessed.insert(id.clone());
        let refusal = if live.view.state == ExecutionState::Finished {
            Some((DlqReason::Refused, "it has finished".to_owned()))
        } else if live.view.next_seq != request.expected_seq {
            Some((
                DlqReason::Conflict,
                format!(
                    "its history has {} records, the build was checked against {}: replay it \
                     on the build again",
                    live.view.next_seq, request.expected_seq
                ),
            ))
        } else {
            None
        };
        if let Some((reason, why)) = refusal {
            let error = format!("upgrade of {id} to {} refused: {why}", request.component);
            tracing::warn!(execution = %id, %error, "upgrade refused");
            self.dead_letter(batch, index, reason, error);
            return Ok(());
        }
        if live.view.component.as_deref() == Some(request.component.as_str()) {
            tracing::debug!(execution = %id, component = %request.component, "upgrade to the build it runs on: nothing to do");
            return Ok(());
        }
        tracing::info!(execution = %id, from = ?live.view.component, to = %request.component, "execution upgraded");
        let entry = HistoryEntry::Upgraded {
            from: live.view.component.clone(),
            to: request.component,
        };
        append(batch, &mut live.view, entry)?;
        live.run = None;
        Ok(())
    }

    /// A request to stop an execution; see the module docs.
    async fn cancel(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: CancelRequest,
    ) -> Result<(), ProcessorError> {
        let id = request.execution_id.clone();
        if !self.cache.contains_key(&id) {
            let error = format!("cancellation of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        }
        let limit = self.value_limit();
        let Processor {
            stats,
            cache,
            runner,
            accessed,
            ..
        } = self;
        let Some(live) = cache.get_mut(&id) else {
            return Ok(());
        };
        accessed.insert(id.clone());
        let reason = if request.reason.is_empty() {
            "cancelled".to_owned()
        } else {
            request.reason.clone()
        };
        if live.view.state == ExecutionState::Finished
            || (live.view.cancel_requested.is_some() && !request.terminate)
        {
            tracing::debug!(execution = %id, "cancellation ignored: finished, or cancelled already");
            return Ok(());
        }
        tracing::info!(execution = %id, %reason, terminate = request.terminate, "execution cancelled");
        stats.cancelled += 1;
        let rules = Rules::new(runner, limit);
        if live.view.cancel_requested.is_none() {
            append(
                batch,
                &mut live.view,
                HistoryEntry::CancelRequested {
                    reason: reason.clone(),
                },
            )?;
        }
        let stop = Stop {
            reason: format!("was cancelled: {reason}"),
            terminate: request.terminate,
        };
        let own = cancel_waits(batch, live, &stop);
        if request.terminate || live.view.state == ExecutionState::Scheduled {
            // Nothing waits for the workflow: what it waited for is journalled cancelled,
            // and it finishes now.
            journal_all(batch, live, own)?;
            let why = if request.terminate {
                format!("terminated: {reason}")
            } else {
                format!("cancelled before it started: {reason}")
            };
            return finish_with(
                stats,
                batch,
                live,
                error_result(ExecutionErrorKind::Cancelled, why),
            );
        }
        if live.run.is_none() {
            // Not running now (its start was deferred): the journal has the cancellations for
            // when it starts.
            journal_all(batch, live, own)?;
            return Ok(());
        }
        deliver_own(rules, stats, batch, live, own).await
    }

    /// An event sent to an execution; see the module docs.
    async fn receive_event(
        &mut self,
        batch: &mut Batch,
        index: usize,
        inbound: InboundEvent,
    ) -> Result<(), ProcessorError> {
        let id = inbound.target;
        let event = inbound.event;
        let what = format!("event {} `{}` for {id}", event.event_id, event.name);
        let finished = match self.cache.get(&id) {
            // Its submission may still be on its way (another topic, read in no fixed order
            // with this one): kept until it comes, or for `early_event_wait`.
            None if inbound.waited_until.is_none() && inbound.correlation_key.is_none() => {
                self.hold_early(batch, index, &id, event, inbound.sent_at);
                return Ok(());
            }
            None => Some((DlqReason::Other, "the execution does not exist")),
            // One it took before it finished is a duplicate, not one to give the next holder.
            Some(live)
                if live.view.state == ExecutionState::Finished
                    && inbound.correlation_key.is_some()
                    && live.view.events_seen.contains(&event.event_id) =>
            {
                tracing::debug!(execution = %id, event = %event.event_id, "event dropped: the execution had it already");
                self.stats.events_duplicate += 1;
                return Ok(());
            }
            Some(live) if live.view.state == ExecutionState::Finished => {
                Some((DlqReason::Refused, "the execution has finished"))
            }
            Some(_) => None,
        };
        if let Some((reason, why)) = finished {
            let why = match inbound.waited_until {
                Some(at) if reason == DlqReason::Other => {
                    format!(
                        "{why} (the event waited for its submission until {})",
                        rfc3339(at)
                    )
                }
                _ => why.to_owned(),
            };
            match inbound.correlation_key {
                // Forwarded by its key before the key heard that the execution finished: it
                // goes back, to the key's next holder or its buffer.
                Some(key) => {
                    tracing::debug!(execution = %id, event = %event.event_id, %key, "event of a correlation key returned: {why}");
                    self.stats.keyed_events_returned += 1;
                    batch.effects.push(Effect::ReturnEvent(KeyedEvent {
                        event,
                        key,
                        sent_at: inbound.sent_at,
                        returned_by: Some(id),
                    }));
                }
                None => self.dead_letter(batch, index, reason, format!("{what}: {why}")),
            }
            return Ok(());
        }
        let Some(live) = self.cache.get_mut(&id) else {
            return Ok(());
        };
        self.accessed.insert(id.clone());
        if live.view.events_seen.contains(&event.event_id) {
            tracing::debug!(execution = %id, event = %event.event_id, "event dropped: the execution has it already");
            self.stats.events_duplicate += 1;
            return Ok(());
        }
        if let Some(request) = live.view.open_event_request(&event.name) {
            let response = Response::EventDelivered {
                event_request_id: request.clone(),
                outcome: EventOutcome::Received {
                    event_id: event.event_id,
                    payload: event.payload,
                },
            };
            self.stats.events_received += 1;
            return self.deliver(batch, &id, response, Some(index), None).await;
        }
        let buffered = live.view.buffered_events();
        let bytes: usize = buffered.iter().map(|e| json_size(&e.payload)).sum();
        if buffered.len() >= MAX_BUFFERED_EVENTS
            || bytes + json_size(&event.payload) > MAX_BUFFERED_EVENT_BYTES
        {
            let error = format!(
                "{what}: the execution holds {} events ({bytes} bytes) no wait has taken; at \
                 most {MAX_BUFFERED_EVENTS} events and {MAX_BUFFERED_EVENT_BYTES} bytes wait",
                buffered.len()
            );
            self.dead_letter(batch, index, DlqReason::Refused, error);
            return Ok(());
        }
        self.stats.events_received += 1;
        append(batch, &mut live.view, HistoryEntry::EventReceived(event))
    }

    /// An event for `id`, an execution that does not exist: kept under its id until its
    /// submission takes it ([`Processor::submit`]) or `early_event_wait` passes
    /// ([`correlation::hold_early`], [`correlation::expire`]).
    fn hold_early(
        &mut self,
        batch: &mut Batch,
        index: usize,
        id: &ExecutionId,
        event: ReceivedEvent,
        sent_at: DateTime<Utc>,
    ) {
        let key = id.to_string();
        let event_id = event.event_id.clone();
        let wait = self.config.early_event_wait;
        match correlation::hold_early(
            self.correlations.get(&key),
            id,
            event,
            sent_at,
            batch.now,
            wait,
        ) {
            Received::Changed(changed) => {
                tracing::debug!(execution = %id, event = %event_id, "event kept: the execution does not exist yet");
                self.stats.events_early += 1;
                self.put_correlation(batch, &key, changed);
            }
            Received::Duplicate => {
                tracing::debug!(execution = %id, event = %event_id, "event dropped: kept for the execution already");
                self.stats.events_duplicate += 1;
            }
            Received::Full(error) => {
                let error = format!("{error} (the execution does not exist yet)");
                self.dead_letter(batch, index, DlqReason::Refused, error);
            }
        }
    }

    /// A command about a schedule of an owned partition; see [`crate::schedule::apply`]. A
    /// `create` whose function the host does not have, or whose params do not fit it, is
    /// refused like a submission would be.
    fn schedule_command(&mut self, batch: &mut Batch, index: usize, command: ScheduleCommand) {
        let name = command.name.clone();
        if let ScheduleAction::Create(spec) = &command.action
            && let Err(rejection) = self.runner.check_submission(&spec.ffqn, &spec.params)
        {
            let (reason, error) = match rejection {
                Rejection::UnknownFunction(e) => (DlqReason::UnknownFfqn, e),
                Rejection::InvalidParams(e) => (DlqReason::InvalidParams, e),
            };
            let error = format!("create of schedule `{name}` refused: {error}");
            tracing::warn!(schedule = %name, %error, "schedule command refused");
            self.dead_letter(batch, index, reason, error);
            return;
        }
        match schedule::apply(self.schedules.get(&name), &command, batch.now) {
            Applied::Unchanged => {
                tracing::debug!(schedule = %name, action = command.action.as_str(), "schedule command changes nothing");
            }
            Applied::Refused(error) => {
                tracing::warn!(schedule = %name, %error, "schedule command refused");
                let reason = match command.action {
                    ScheduleAction::Create(_) => DlqReason::InvalidParams,
                    _ => DlqReason::Other,
                };
                self.dead_letter(batch, index, reason, error);
            }
            Applied::Delete => {
                tracing::info!(schedule = %name, "schedule deleted");
                self.schedules.remove(&name);
                batch
                    .effects
                    .push(Effect::PutSchedule { name, state: None });
            }
            Applied::Put(state) => {
                if !matches!(command.action, ScheduleAction::RunFinished(_)) {
                    tracing::info!(schedule = %name, action = command.action.as_str(), status = state.status.as_str(), next_tick = ?state.next_tick, "schedule changed");
                }
                self.put_schedule(batch, *state);
            }
        }
    }

    fn put_schedule(&mut self, batch: &mut Batch, state: ScheduleState) {
        let name = state.name.clone();
        batch.effects.push(Effect::PutSchedule {
            name: name.clone(),
            state: Some(state.clone()),
        });
        self.schedules.insert(name, state);
    }

    /// A workflow writes the value of a stub child of an execution of this partition, with
    /// the rules of a value written from outside (Obelisk's); the writer is answered `ok`,
    /// `conflict` or `not-found` (a record it sent itself, so nothing is dead-lettered).
    async fn write_stub(
        &mut self,
        batch: &mut Batch,
        write: StubWrite,
    ) -> Result<(), ProcessorError> {
        let StubWrite {
            request,
            target,
            ffqn,
            result,
        } = write;
        let Some(writer) = request.parent() else {
            return Ok(());
        };
        let owner = target.parent();
        let outcome = match owner.as_ref().and_then(|o| self.cache.get(o)) {
            None => StubWriteOutcome::NotFound,
            // A write names the stub's function: through another it is not this stub, held
            // value or not (before the value, and after, the same answer).
            Some(live) if live.view.stub_function(&target) != Some(&ffqn) => {
                StubWriteOutcome::NotFound
            }
            Some(live) => match live.view.stub_child(&target) {
                None => StubWriteOutcome::NotFound,
                Some(Some(held)) if *held == result => StubWriteOutcome::Ok,
                Some(Some(_)) => StubWriteOutcome::Conflict,
                Some(None) => {
                    let fits = live.view.pending_child(&target) == Some(&ffqn)
                        && live.view.state != ExecutionState::Finished
                        && self.runner.check_answer(&ffqn, &result).is_ok();
                    if fits {
                        StubWriteOutcome::Ok
                    } else {
                        StubWriteOutcome::NotFound
                    }
                }
            },
        };
        tracing::info!(execution = %writer, stub = %target, ?outcome, "stub of another execution written");
        if let (StubWriteOutcome::Ok, Some(owner)) = (outcome, &owner)
            && self
                .view(owner)
                .is_some_and(|v| v.stub_child(&target) == Some(None))
        {
            let response = Response::ChildExecutionFinished {
                child_execution_id: target,
                result,
            };
            self.deliver(batch, owner, response, None, None).await?;
        }
        batch.effects.push(Effect::Respond {
            to: writer,
            response: Response::ChildExecutionFinished {
                child_execution_id: request,
                result: stub_write_answer(outcome),
            },
        });
        Ok(())
    }

    /// An event sent to a correlation key of an owned partition; see [`crate::correlation`].
    fn receive_keyed_event(&mut self, batch: &mut Batch, index: usize, event: KeyedEvent) {
        let key = event.key.clone();
        match correlation::receive(self.correlations.get(&key), event, batch.now) {
            Received::Changed(changed) => {
                match changed.forwards.first() {
                    Some(f) => {
                        tracing::debug!(%key, execution = %f.target, event = %f.event.event_id, "event of a correlation key forwarded")
                    }
                    None => {
                        tracing::debug!(%key, "event of a correlation key buffered: no execution holds the key");
                        self.stats.keyed_events_buffered += 1;
                    }
                }
                self.put_correlation(batch, &key, changed);
            }
            Received::Duplicate => {
                tracing::debug!(%key, "event dropped: the key has this event id already");
                self.stats.events_duplicate += 1;
            }
            Received::Full(error) => {
                tracing::warn!(%key, %error, "event of a correlation key refused");
                self.dead_letter(batch, index, DlqReason::Refused, error);
            }
        }
    }

    /// A registration of a correlation key of an owned partition, or the end of one.
    fn correlation_command(
        &mut self,
        batch: &mut Batch,
        index: usize,
        command: CorrelationCommand,
    ) {
        let key = command.key.clone();
        match correlation::apply(self.correlations.get(&key), &command, batch.now) {
            correlation::Applied::Unchanged => {
                tracing::debug!(%key, execution = %command.execution_id, action = command.action.as_str(), "correlation command changes nothing");
            }
            correlation::Applied::Refused(error) => {
                tracing::warn!(%key, %error, "correlation command refused");
                self.dead_letter(batch, index, DlqReason::Refused, error);
            }
            correlation::Applied::Changed(changed) => {
                tracing::info!(%key, execution = %command.execution_id, action = command.action.as_str(), forwarded = changed.forwards.len(), "correlation key changed");
                self.put_correlation(batch, &key, changed);
            }
        }
    }

    /// Writes a key's new state and forwards what the rule forwards, in this batch.
    fn put_correlation(&mut self, batch: &mut Batch, key: &str, changed: correlation::Changed) {
        self.stats.keyed_events_forwarded += changed.forwards.len() as u64;
        batch
            .effects
            .extend(changed.forwards.into_iter().map(Effect::ForwardEvent));
        match &changed.state {
            Some(state) => {
                self.correlations.insert(key.to_owned(), state.clone());
            }
            None => {
                self.correlations.remove(key);
            }
        }
        batch.effects.push(Effect::PutCorrelation {
            key: key.to_owned(),
            state: changed.state,
        });
    }

    /// Whether a correlation key has an event id to forget at `now` (the driver makes a batch
    /// for it).
    pub fn correlation_due(&self, now: DateTime<Utc>) -> bool {
        self.correlations
            .values()
            .any(|c| c.expires_at().is_some_and(|at| at <= now))
    }

    /// Forgets the event ids the keys forwarded longer than
    /// [`correlation::DEDUP_WINDOW`] ago; a key left with nothing is a tombstone.
    pub fn expire_correlations(&mut self, batch: &mut Batch) {
        let expired: Vec<(String, correlation::Changed)> = self
            .correlations
            .values()
            .filter_map(|c| Some((c.key.clone(), correlation::expire(c, batch.now)?)))
            .collect();
        for (key, changed) in expired {
            self.put_correlation(batch, &key, changed);
        }
    }

    /// Adopts the correlation keys of a partition taken over, as `weir.state` has them.
    pub fn restore_correlations(&mut self, states: impl IntoIterator<Item = CorrelationState>) {
        for state in states {
            self.correlations.insert(state.key.clone(), state);
        }
    }

    /// The correlation keys of the owned partitions that hold something.
    pub fn correlations(&self) -> impl Iterator<Item = &CorrelationState> {
        self.correlations.values()
    }

    /// Adopts the schedules of a partition taken over, as `weir.state` has them.
    pub fn restore_schedules(&mut self, states: impl IntoIterator<Item = ScheduleState>) {
        for state in states {
            self.schedules.insert(state.name.clone(), state);
        }
    }

    /// The schedules of the owned partitions.
    pub fn schedules(&self) -> impl Iterator<Item = &ScheduleState> {
        self.schedules.values()
    }

    /// Whether a schedule has a tick due at `now` (the driver makes a batch for it).
    pub fn schedule_due(&self, now: DateTime<Utc>) -> bool {
        self.schedules.values().any(|s| schedule::is_due(s, now))
    }

    /// Takes the due ticks of every schedule ([`crate::schedule::fire`]): a submission per
    /// tick that starts an execution, the cancellations `cancel-previous` makes, and the new
    /// state, all in this batch.
    pub fn fire_schedules(&mut self, batch: &mut Batch) {
        let due: Vec<String> = self
            .schedules
            .values()
            .filter(|s| schedule::is_due(s, batch.now))
            .map(|s| s.name.clone())
            .collect();
        for name in due {
            let Some(fired) = self
                .schedules
                .get(&name)
                .and_then(|state| schedule::fire(state, batch.now))
            else {
                continue;
            };
            self.stats.ticks_started += fired.starts.len() as u64;
            self.stats.ticks_skipped += fired.skipped;
            self.stats.ticks_missed += fired.missed;
            if fired.missed > 0 {
                tracing::warn!(schedule = %name, missed = fired.missed, "schedule ticks missed: owed for longer than the catch-up window");
            }
            for request in fired.cancels {
                tracing::info!(schedule = %name, execution = %request.execution_id, "previous run cancelled (overlap cancel-previous)");
                batch.effects.push(Effect::CancelExecution(request));
            }
            for submission in fired.starts {
                tracing::debug!(schedule = %name, execution = %submission.execution_id, "schedule tick starts an execution");
                batch.effects.push(Effect::Submit(submission));
            }
            self.put_schedule(batch, fired.state);
        }
    }

    fn dead_letter(&mut self, batch: &mut Batch, input: usize, reason: DlqReason, error: String) {
        self.stats.dead_letters += 1;
        batch.effects.push(Effect::DeadLetter {
            input,
            reason,
            error,
        });
    }

    /// A submission (`flaw`: a field that did not parse, and why); see the module docs.
    async fn submit(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: Submission,
        flaw: Option<Flaw>,
    ) -> Result<(), ProcessorError> {
        let id = submission.execution_id.clone();
        if let Some(problem) = id_problem(&submission) {
            self.refuse_submission(batch, index, &submission, problem);
            return Ok(());
        }
        if let Some(live) = self.cache.get(&id) {
            let created = &live.view.created;
            if created.ffqn != submission.ffqn || created.params != submission.params {
                let problem = format!(
                    "execution {id} exists: {} with params {} (this submission: {} with params \
                     {}); an execution id can be used once",
                    created.ffqn, created.params, submission.ffqn, submission.params
                );
                self.refuse_submission(batch, index, &submission, problem);
                return Ok(());
            }
            // Idempotent: the caller hears the result, now if there is one.
            match (&created.parent, &live.view.result, live.view.finished_at) {
                (None, Some(result), Some(finished_at)) => {
                    tracing::debug!(execution = %id, "resubmission of a finished execution: its result is published again");
                    batch.effects.push(Effect::PublishResult(ExecutionFinished {
                        execution_id: id.clone(),
                        ffqn: created.ffqn.clone(),
                        result: result.clone(),
                        finished_at,
                        correlation_id: created.correlation_id.clone(),
                    }));
                }
                _ => tracing::debug!(execution = %id, "duplicate submission ignored"),
            }
            return Ok(());
        }
        // A name that does not parse names no function: nothing to create. The caller hears.
        let unparsable = match flaw {
            Some(Flaw::Ffqn(error)) => {
                let error = format!("the function name of {id} does not parse: {error}");
                tracing::warn!(execution = %id, %error, "submission refused");
                self.dead_letter(batch, index, DlqReason::UnknownFfqn, error.clone());
                let result = error_result(ExecutionErrorKind::UnknownFunction, error);
                match &submission.parent {
                    None => answer_refused(batch, &submission, result),
                    Some(parent) => batch.effects.push(Effect::Respond {
                        to: parent.execution_id.clone(),
                        response: Response::ChildExecutionFinished {
                            child_execution_id: id,
                            result,
                        },
                    }),
                }
                return Ok(());
            }
            Some(Flaw::Params(error)) => Some(error),
            None => None,
        };
        let created = Created {
            ffqn: submission.ffqn.clone(),
            params: submission.params.clone(),
            parent: submission.parent.clone(),
            scheduled_at: submission.scheduled_at,
            correlation_id: submission.correlation_id.clone(),
            metadata: submission.metadata.clone(),
            created_at: batch.now,
            component: self.runner.component_of(&submission.ffqn),
            deadline: effective_deadline(
                submission.deadline,
                self.runner.default_deadline(&submission.ffqn),
                batch.now,
            ),
        };
        let partition = self.partition_of(&id);
        let (view, timers) = ExecutionView::new(id.clone(), partition, created.clone(), batch.now);
        let mut live = Live {
            view,
            run: None,
            pinned_until: 0,
            stepped_at: None,
        };
        batch.effects.push(Effect::Append {
            execution_id: id.clone(),
            seq: 0,
            entry: HistoryEntry::Created(created),
        });
        push_timer_changes(batch, timers);
        batch.touched.insert(id.clone());
        self.stats.created += 1;
        // Events that came before the submission are the execution's first, in the order
        // they came; the run's first step finds them as any buffered event.
        let key = id.to_string();
        if let Some(state) = self.correlations.get(&key) {
            let (early, changed) = correlation::take_early(state);
            // The buffer holds each event id once (`correlation::receive`).
            for kept in early {
                self.stats.events_received += 1;
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::EventReceived(kept.event),
                )?;
            }
            self.put_correlation(batch, &key, changed);
        }
        let checked = match unparsable {
            Some(error) => Err(Rejection::InvalidParams(format!(
                "the params of {id} are not a JSON array: {error}"
            ))),
            None => self
                .runner
                .check_submission(&submission.ffqn, &submission.params),
        };
        match checked {
            Err(rejection) => {
                let (reason, kind, error) = match rejection {
                    Rejection::UnknownFunction(e) => (
                        DlqReason::UnknownFfqn,
                        ExecutionErrorKind::UnknownFunction,
                        e,
                    ),
                    Rejection::InvalidParams(e) => (
                        DlqReason::InvalidParams,
                        ExecutionErrorKind::InvalidParams,
                        e,
                    ),
                };
                self.dead_letter(batch, index, reason, error.clone());
                finish(&mut self.stats, batch, &mut live, error_result(kind, error))?;
            }
            // Past its deadline before it could start: it never runs (timed out below).
            Ok(()) if live.view.created.deadline.is_some_and(|d| d <= batch.now) => {}
            Ok(()) if live.view.state == ExecutionState::Scheduled => {}
            Ok(()) => {
                let deferred = start_run(
                    Rules::new(&self.runner, self.value_limit()),
                    &mut self.stats,
                    batch,
                    &mut live,
                    Start::Fresh,
                )
                .await?;
                self.note_start(&id, deferred, batch);
            }
        }
        self.accessed.insert(id.clone());
        self.cache.insert(id.clone(), live);
        self.enforce_deadline(batch, &id)
    }

    /// Dead-letters a submission that cannot create its execution and, if it is top-level,
    /// answers it on `weir.results` with a `conflict` error (nothing is appended: the id is
    /// another execution's, or not an execution's at all).
    fn refuse_submission(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: &Submission,
        problem: String,
    ) {
        tracing::warn!(execution = %submission.execution_id, %problem, "submission refused");
        self.dead_letter(batch, index, DlqReason::Conflict, problem.clone());
        if submission.parent.is_none() {
            let result = error_result(ExecutionErrorKind::Conflict, problem);
            answer_refused(batch, submission, result);
        }
    }

    /// A response record, keyed by the execution it answers; `copy`: the record also goes to
    /// the DLQ with that reason once the response is journalled (an answer Weir had to
    /// rewrite).
    async fn answer(
        &mut self,
        batch: &mut Batch,
        index: usize,
        key: Option<&str>,
        response: Response,
        copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        let Some(owner) = response_owner(key) else {
            let error = "the key is not an execution id".to_owned();
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        if !response.is_for(&owner) {
            let error = format!("the response does not answer a request of {owner}");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        }
        if let Response::EventDelivered { .. } = response {
            let error = format!(
                "an event delivery for {owner} on the responses topic: events are sent on the \
                 events topic"
            );
            self.dead_letter(batch, index, DlqReason::Refused, error);
            return Ok(());
        }
        self.deliver(batch, &owner, response, Some(index), copy)
            .await
    }

    /// The answer of an activity request that ran inline ([`crate::inline`]): delivered to its
    /// parent as if it had come on `weir.responses` — journalled, then given to the run, in
    /// the batch that journals the request. The parent is in memory with its run: it was
    /// stepped in this batch, and a run the batch touched is never dropped for room.
    pub async fn answer_inline(
        &mut self,
        batch: &mut Batch,
        request: &ActivityRequest,
        result: ExecutionResult,
    ) -> Result<(), ProcessorError> {
        let response = Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result,
        };
        self.deliver(batch, &request.parent_execution_id, response, None, None)
            .await
    }

    /// Delivers `response` to `owner`: from the input record `index` (`None`: a due timer, or
    /// an inline answer);
    /// `copy`: see [`Processor::answer`].
    async fn deliver(
        &mut self,
        batch: &mut Batch,
        owner: &ExecutionId,
        response: Response,
        index: Option<usize>,
        mut copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        if !self.cache.contains_key(owner) {
            match index {
                Some(index) => {
                    let error = format!("execution {owner} does not exist");
                    self.dead_letter(batch, index, DlqReason::Other, error);
                }
                None => tracing::warn!(execution = %owner, "timer of an unknown execution dropped"),
            }
            return Ok(());
        }
        let limit = self.value_limit();
        let Processor {
            stats,
            cache,
            runner,
            accessed,
            ..
        } = self;
        let Some(live) = cache.get_mut(owner) else {
            return Ok(());
        };
        accessed.insert(owner.clone());
        let id = projection::response_id(&response);
        // A stub's value from a record (`weir stub`, any client): the same value again is
        // nothing new, another one is a conflict, one that does not fit the stub's result
        // type is refused; none is journalled, and the stub keeps its value.
        if let (
            Some(index),
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
            },
        ) = (index, &response)
            && let Some(written) = live.view.stub_child(child_execution_id)
        {
            let refusal = match written {
                Some(written) if written == result => {
                    tracing::debug!(execution = %owner, stub = %child_execution_id, "the stub holds this value already");
                    return Ok(());
                }
                Some(written) => Some((
                    DlqReason::Conflict,
                    format!("stub {child_execution_id} holds {written}: {result} is not written"),
                )),
                None => live
                    .view
                    .pending_child(child_execution_id)
                    .and_then(|ffqn| Some((ffqn, runner.check_answer(ffqn, result).err()?)))
                    .map(|(ffqn, why)| {
                        (
                            DlqReason::Refused,
                            format!(
                                "the value for stub {child_execution_id} does not fit the \
                                 result type of {ffqn}: {why}"
                            ),
                        )
                    }),
            };
            if let Some((reason, error)) = refusal {
                tracing::warn!(execution = %owner, %error, "a stub value refused");
                stats.dead_letters += 1;
                batch.effects.push(Effect::DeadLetter {
                    input: index,
                    reason,
                    error,
                });
                return Ok(());
            }
        }
        if live.view.responses_seen.contains(&id) || live.view.state == ExecutionState::Finished {
            tracing::debug!(execution = %owner, response = %id, "response ignored: duplicate or execution finished");
            return Ok(());
        }
        // An answer from outside for a child that calls an external function is checked
        // against that function's result type: one that does not fit becomes the child's
        // `invalid-response` error (instead of a trap of the parent when it reads it).
        let response = match response {
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
            } if index.is_some()
                && copy.is_none()
                && live.view.pending_child_kind(&child_execution_id)
                    != Some(ChildKind::StubWrite) =>
            {
                let misfit = live
                    .view
                    .pending_child(&child_execution_id)
                    .and_then(|ffqn| Some((ffqn, runner.check_answer(ffqn, &result).err()?)));
                let result = match misfit {
                    Some((ffqn, why)) => {
                        let reason = format!(
                            "the answer for {child_execution_id} does not fit the result type \
                             of {ffqn}: {why}"
                        );
                        tracing::warn!(execution = %owner, %reason, "an invalid answer");
                        copy = Some((DlqReason::Refused, reason.clone()));
                        error_result(ExecutionErrorKind::InvalidResponse, reason)
                    }
                    None => result,
                };
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                }
            }
            other => other,
        };
        let copy_to_dlq = |stats: &mut ProcessorStats, batch: &mut Batch, copy| {
            if let (Some(input), Some((reason, error))) = (index, copy) {
                stats.dead_letters += 1;
                batch.effects.push(Effect::DeadLetter {
                    input,
                    reason,
                    error,
                });
            }
        };
        let Some(run) = live.run.as_mut() else {
            // A scheduled execution has no requests to answer yet.
            tracing::warn!(execution = %owner, response = %id, "response for an execution that has not started");
            copy_to_dlq(stats, batch, copy);
            return append(
                batch,
                &mut live.view,
                HistoryEntry::ResponseAppended(response),
            );
        };
        // Delivered first, journalled only if taken: the run checks a response against the
        // requests it made before it runs any code, and leaves itself as it was if it
        // refuses one.
        let delivered = run.deliver(response.clone(), batch.now).await;
        if let Err(RunError::Delivery { source, .. }) = &delivered {
            let error = format!("{owner} refuses the response: {source}");
            tracing::warn!(execution = %owner, response = %id, %error, "response refused");
            match index {
                Some(index) => {
                    stats.dead_letters += 1;
                    batch.effects.push(Effect::DeadLetter {
                        input: index,
                        reason: DlqReason::Refused,
                        error,
                    });
                }
                None => {
                    tracing::warn!(execution = %owner, "a response of no record (a timer's, an inline answer) refused; dropped")
                }
            }
            return Ok(());
        }
        copy_to_dlq(stats, batch, copy);
        append(
            batch,
            &mut live.view,
            HistoryEntry::ResponseAppended(response),
        )?;
        stats.hot_deliveries += 1;
        match delivered {
            Ok(step) => apply_step(Rules::new(runner, limit), stats, batch, live, step).await,
            Err(e) => {
                tracing::warn!(execution = %owner, error = %e, "response could not be delivered");
                live.run = None;
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                finish(stats, batch, live, result)
            }
        }
    }

    async fn fire_timer(
        &mut self,
        batch: &mut Batch,
        timer: TimerRow,
    ) -> Result<(), ProcessorError> {
        match timer.kind {
            TimerKind::Delay => {
                let Ok(delay_id) = DelayId::from_str(&timer.timer_id) else {
                    tracing::warn!(timer = %timer.timer_id, "malformed delay timer dropped");
                    return Ok(());
                };
                let response = Response::DelayFinished {
                    delay_id,
                    outcome: DelayOutcome::Ok,
                };
                self.deliver(batch, &timer.execution_id, response, None, None)
                    .await
            }
            TimerKind::Schedule => self.start_scheduled(batch, &timer.execution_id).await,
            TimerKind::Retry => self.retry_start(batch, timer.execution_id).await,
            // Enforced by `step` before any input of the execution, this one included.
            TimerKind::Deadline => Ok(()),
        }
    }

    /// Before any input of execution `id` is taken: if it has passed its deadline and has not
    /// finished (its deadline timer is due, or an input came first), what it waits for is
    /// cancelled (its child workflows terminated: nobody waits for them any more) and it
    /// finishes `timed-out` without running again; the input then finds it finished. So no
    /// step of an execution runs past its deadline, whichever input comes first.
    fn enforce_deadline(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
    ) -> Result<(), ProcessorError> {
        let Some(live) = self.cache.get_mut(id) else {
            return Ok(());
        };
        let Some(deadline) = live.view.created.deadline else {
            return Ok(());
        };
        if live.view.state == ExecutionState::Finished || deadline > batch.now {
            return Ok(());
        }
        self.accessed.insert(id.clone());
        let result = deadline_result(&live.view, batch.now);
        tracing::info!(execution = %id, deadline = %deadline, "deadline passed: the execution timed out");
        self.stats.deadlines_passed += 1;
        let stop = Stop {
            reason: format!("passed its deadline {}", rfc3339(deadline)),
            terminate: true,
        };
        let own = cancel_waits(batch, live, &stop);
        journal_all(batch, live, own)?;
        finish_with(&mut self.stats, batch, live, result)
    }

    /// Starts a scheduled execution whose time has come (its timer fired, or a deferred start
    /// is due).
    async fn start_scheduled(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
    ) -> Result<(), ProcessorError> {
        let limit = self.value_limit();
        let Some(live) = self.cache.get_mut(id) else {
            return Ok(());
        };
        if live.view.state != ExecutionState::Scheduled || live.run.is_some() {
            return Ok(());
        }
        self.accessed.insert(id.clone());
        let deferred = start_run(
            Rules::new(&self.runner, limit),
            &mut self.stats,
            batch,
            live,
            Start::Scheduled,
        )
        .await?;
        self.note_start(id, deferred, batch);
        Ok(())
    }

    /// A deferred start is due (its `retry` timer fired). A running execution was rebuilt
    /// (and its run started, or deferred again) by the rehydration [`Processor::needs`] asked
    /// for; a scheduled one starts now; one that started or finished meanwhile is left.
    async fn retry_start(
        &mut self,
        batch: &mut Batch,
        id: ExecutionId,
    ) -> Result<(), ProcessorError> {
        match self.cache.get(&id).map(|live| live.view.state) {
            Some(ExecutionState::Scheduled) => self.start_scheduled(batch, &id).await,
            Some(ExecutionState::Running) => Ok(()),
            Some(ExecutionState::Finished) | None => {
                self.deferred.shift_remove(&id);
                Ok(())
            }
        }
    }

    /// After a start of `id`: forgets a deferral that succeeded, or puts the `retry` timer of
    /// the next try (the timer that fired, if any, is deleted by the driver).
    fn note_start(&mut self, id: &ExecutionId, deferred: Option<RunError>, batch: &mut Batch) {
        let Some(error) = deferred else {
            self.deferred.shift_remove(id);
            return;
        };
        let reason = error.to_string();
        if let RunError::NoCapacity { .. } = error {
            // What the pool really parks (its instances less the attempts running and the
            // memories a component needs): admission keeps below it from now on.
            let parked = self.parked();
            self.capacity_seen = Some(self.capacity_seen.map_or(parked, |c| c.min(parked)));
            self.make_room(id, batch);
        }
        let attempt = self.deferred.entry(id.clone()).or_insert(0);
        *attempt += 1;
        let delay = start_retry_delay(*attempt);
        tracing::warn!(execution = %id, attempt = *attempt, retry_in = %delay, %reason, "the run cannot start now; it is parked and tried again");
        self.stats.deferred_starts += 1;
        batch.effects.push(Effect::PutTimer(TimerRow {
            kafka_partition: self.partition_of(id),
            due_at: batch.now + delay,
            timer_id: format!("retry:{id}"),
            execution_id: id.clone(),
            kind: TimerKind::Retry,
            payload: Vec::new(),
        }));
    }

    /// The host had no room for `id`'s run: drops the parked run the cache policy would evict
    /// first among those that can be rebuilt from the store (not `id`, not one this batch
    /// touched, not one pinned by a batch the store lacks), so that its instance is free for
    /// the retry; its view stays. Parked runs hold instances for as long as their executions
    /// wait; without this, a pool full of them would defer every new start until one of them
    /// finished. (The worker sizes its pool from `cache_bytes`, so this is the exception.)
    fn make_room(&mut self, id: &ExecutionId, batch: &Batch) {
        let materialised = self.materialised;
        let cache = &self.cache;
        let victim = self.policy.evict_one(|other| {
            other == id
                || batch.touched.contains(other)
                || cache
                    .get(other)
                    .is_none_or(|live| live.run.is_none() || live.pinned_until > materialised)
        });
        let Some((other, _)) = victim else {
            return;
        };
        if let Some(live) = self.cache.get_mut(&other) {
            tracing::info!(execution = %id, evicted = %other, "no room for a run: a parked run is dropped");
            live.run = None;
            self.stats.evicted_for_room += 1;
        }
        // Weighed again (now without its run) at the next eviction.
        self.accessed.insert(other);
    }

    /// Executions parked with a deferred start.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// The store row of a cached execution (after a batch touched it).
    pub fn row(&self, id: &ExecutionId) -> Option<ExecutionRow> {
        self.cache.get(id).map(|live| live.view.row())
    }

    /// The view of a cached execution.
    pub fn view(&self, id: &ExecutionId) -> Option<&ExecutionView> {
        self.cache.get(id).map(|live| &live.view)
    }

    /// The trace context of the activity `child` of `parent`: the parent's trace, the
    /// activity's own span.
    pub fn activity_trace(
        &self,
        parent: &ExecutionId,
        child: &ExecutionId,
    ) -> crate::trace::TraceParent {
        crate::trace::TraceParent::for_activity(parent, self.metadata_of(parent), child)
    }

    /// The `Created` metadata of a cached execution (none for one not cached: its trace is
    /// then the one derived from its id).
    fn metadata_of(&self, id: &ExecutionId) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.view(id).map_or(&NONE, |view| &view.created.metadata)
    }

    /// The trace context the record of `effect` carries ([`crate::trace`]): that of the
    /// execution it is written for, with that execution's span (an activity's own, for its
    /// request and its cancellation). `None` for effects that are no record of an execution.
    pub fn trace_of(&self, effect: &Effect) -> Option<crate::trace::TraceParent> {
        use crate::trace::TraceParent;
        let metadata = |id: &ExecutionId| self.metadata_of(id);
        let activity =
            |parent: &ExecutionId, child: &ExecutionId| self.activity_trace(parent, child);
        Some(match effect {
            Effect::Append { execution_id, .. } => {
                TraceParent::for_execution(execution_id, metadata(execution_id))
            }
            Effect::Submit(submission) => {
                TraceParent::for_execution(&submission.execution_id, &submission.metadata)
            }
            Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
                activity(&request.parent_execution_id, &request.execution_id)
            }
            Effect::CancelActivity { parent, child, .. } => activity(parent, child),
            Effect::Respond { to, response } => {
                let from = match response {
                    crate::model::Response::ChildExecutionFinished {
                        child_execution_id, ..
                    } if self.view(child_execution_id).is_some() => child_execution_id,
                    _ => to,
                };
                TraceParent::for_execution(from, metadata(from))
            }
            Effect::PublishResult(finished) => {
                TraceParent::for_execution(&finished.execution_id, metadata(&finished.execution_id))
            }
            // In the trace of the parent that was cancelled.
            Effect::CancelExecution(request) => {
                let parent = request
                    .execution_id
                    .parent()
                    .unwrap_or_else(|| request.execution_id.clone());
                TraceParent::for_execution(&parent, metadata(&parent))
            }
            // In the trace of the execution it reaches (known only on its partition).
            Effect::ForwardEvent(event) => {
                TraceParent::for_execution(&event.target, metadata(&event.target))
            }
            Effect::PutTimer(_)
            | Effect::DeleteTimer(_)
            | Effect::DeadLetter { .. }
            | Effect::PutSchedule { .. }
            | Effect::ScheduleCommand(_)
            | Effect::Correlation(_)
            | Effect::PutCorrelation { .. }
            | Effect::ReturnEvent(_) => {
                return None;
            }
            // In the trace of the workflow that writes.
            Effect::WriteStub(write) => {
                let writer = write
                    .request
                    .parent()
                    .unwrap_or_else(|| write.request.clone());
                TraceParent::for_execution(&writer, metadata(&writer))
            }
        })
    }

    /// After the batch of time `at` that touched `touched` committed as the materialiser's
    /// job `number`: those executions stay pinned until it is in the store.
    pub fn committed<'a>(
        &mut self,
        touched: impl IntoIterator<Item = &'a ExecutionId>,
        number: u64,
        at: DateTime<Utc>,
    ) {
        for id in touched {
            if let Some(live) = self.cache.get_mut(id) {
                live.pinned_until = number;
                live.stepped_at = Some(at);
            }
        }
    }

    /// The fewest parked runs there were when the host had no room for another run: what
    /// its pool really parks (admission keeps below it). `None` until the pool was full.
    pub fn capacity_seen(&self) -> Option<usize> {
        self.capacity_seen
    }

    /// Executions in flight for admission: those whose start is deferred, whatever their age
    /// (they wait for an instance, not for an answer: before, a deferral retried after 16 s,
    /// 32 s, 60 s fell out of the count, admission opened again, the new starts were deferred
    /// too and dropped runs of executions in flight for room, and at 20 000 executions through
    /// the activity topics nothing finished), and running ones, parked in memory or not (a run
    /// dropped for room is still in flight: counting only parked runs let admission open
    /// again as the pool dropped them), that a committed batch stepped at `since` or later.
    /// A running one waiting longer (for a child, a delay, a slow external activity) is not
    /// counted: dropping its run costs one rebuild when it wakes, and counting it would let
    /// waiting parents keep their own children out.
    pub fn recently_stepped(&self, since: DateTime<Utc>) -> usize {
        let running = self
            .cache
            .iter()
            .filter(|(id, live)| {
                live.view.state == ExecutionState::Running
                    && !self.deferred.contains_key(*id)
                    && live.stepped_at.is_some_and(|at| at >= since)
            })
            .count();
        running + self.deferred.len()
    }

    /// Keeps what the cache holds within `cache_bytes` (and at most `cache_size` parked runs):
    /// the executions used since the last call are weighed (their views and parked runs) and
    /// told to the cache policy, which picks the executions to forget, run and view. Executions
    /// pinned by a batch not yet materialised (`materialised` = the materialiser's last job in
    /// the store) are kept whatever the weight: a rebuild would read a store that is behind.
    /// Call it only between batches.
    pub fn evict(&mut self, materialised: u64) {
        self.materialised = materialised;
        for id in std::mem::take(&mut self.accessed) {
            match self.cache.get(&id) {
                Some(live) => self.policy.touch(&id, weight(live)),
                None => self.policy.remove(&id),
            }
        }
        let limit = self.config.cache_size.max(1);
        let mut parked = self.parked();
        while self.policy.weight() > self.policy.capacity() || parked > limit {
            let cache = &self.cache;
            let victim = self.policy.evict_one(|id| {
                cache
                    .get(id)
                    .is_some_and(|live| live.pinned_until > materialised)
            });
            let Some((id, _)) = victim else {
                break; // all pinned
            };
            if let Some(live) = self.cache.swap_remove(&id)
                && live.run.is_some()
            {
                parked -= 1;
            }
        }
    }

    /// The bytes the cache policy counts for the cached executions (at the last
    /// [`Processor::evict`]).
    pub fn held_bytes(&self) -> u64 {
        self.policy.weight()
    }

    /// Forgets everything (after an aborted transaction or a rebalance: runs in memory may
    /// have moved past what is committed).
    pub fn clear(&mut self) {
        self.schedules.clear();
        self.correlations.clear();
        self.cache.clear();
        self.deferred.clear();
        self.policy.clear();
        self.accessed.clear();
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    pub fn parked(&self) -> usize {
        self.cache.values().filter(|l| l.run.is_some()).count()
    }
}

/// What a cached execution weighs: its view and its parked run, if any.
fn weight<Run: WorkflowRun>(live: &Live<Run>) -> u64 {
    let run = live.run.as_ref().map_or(0, |run| run.resident_bytes());
    (view_bytes(&live.view) + run) as u64
}

/// An estimate of the memory an execution's view holds: the entry itself, its params, result
/// and metadata, and about 64 bytes per journalled response (its id in `responses_seen`,
/// and the pending request it answered).
pub fn view_bytes(view: &ExecutionView) -> usize {
    let created = &view.created;
    let metadata: usize = created
        .metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + 48)
        .sum();
    let result = view.result.as_ref().map_or(0, |r| match r {
        ExecutionResult::Ok(value) => json_bytes(value),
        ExecutionResult::Err(value) => json_bytes(value),
        ExecutionResult::ExecutionError(e) => e.reason.len() + 64,
    });
    std::mem::size_of::<Live<()>>()
        + 64
        + json_bytes(&created.params)
        + metadata
        + result
        + view.responses_seen.len() * 64
        + view.events_seen.len() * 64
        + view.stub_children().count() * 64
        + view
            .correlation_keys
            .iter()
            .map(|k| k.len() + 48)
            .sum::<usize>()
        + view
            .buffered_events()
            .iter()
            .map(|e| e.name.len() + e.event_id.len() + json_bytes(&e.payload) + 64)
            .sum::<usize>()
}

/// An estimate of the heap a JSON value holds (its nodes and text).
fn json_bytes(value: &Value) -> usize {
    const NODE: usize = std::mem::size_of::<Value>();
    NODE + match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(json_bytes).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + 32 + json_bytes(v)).sum(),
        _ => 0,
    }
}

/// Why `submission`'s id cannot be its execution's, if it cannot: a top-level submission
/// needs a top-level id (or a client could take a future child's id and strand its parent),
/// a child's id must be a child of the parent it names.
fn id_problem(submission: &Submission) -> Option<String> {
    let id = &submission.execution_id;
    match &submission.parent {
        None if !id.is_top_level() => Some(format!(
            "{id} is a child's id (of {}); a top-level execution id is `E_` and a ULID",
            id.parent()
                .map_or_else(|| "?".to_owned(), |p| p.to_string())
        )),
        Some(parent) if !id.is_child_of(&parent.execution_id) => Some(format!(
            "{id} is not a child of its parent {}",
            parent.execution_id
        )),
        _ => None,
    }
}

/// Whether `input` is an answer `view` has journalled already (what `deliver` ignores).
fn is_duplicate(view: &ExecutionView, input: &Input) -> bool {
    match input {
        Input::Record {
            body: Ok(Body::Response(response)),
            ..
        } => view
            .responses_seen
            .contains(&projection::response_id(response)),
        _ => false,
    }
}

/// The owner of a response record: its key, which must be an execution id.
fn response_owner(key: Option<&str>) -> Option<ExecutionId> {
    key.and_then(|k| ExecutionId::from_str(k).ok())
}

/// Answers a top-level submission that created no execution, on `weir.results`, with why.
fn answer_refused(batch: &mut Batch, submission: &Submission, result: ExecutionResult) {
    batch.effects.push(Effect::PublishResult(ExecutionFinished {
        execution_id: submission.execution_id.clone(),
        ffqn: submission.ffqn.clone(),
        result,
        finished_at: batch.now,
        correlation_id: submission.correlation_id.clone(),
    }));
}

fn error_result(kind: ExecutionErrorKind, reason: String) -> ExecutionResult {
    ExecutionResult::ExecutionError(ExecutionError {
        kind,
        reason,
        detail: None,
    })
}

fn push_timer_changes(batch: &mut Batch, changes: Vec<TimerChange>) {
    batch
        .effects
        .extend(changes.into_iter().map(|change| match change {
            TimerChange::Put(timer) => Effect::PutTimer(timer),
            TimerChange::Delete(key) => Effect::DeleteTimer(key),
        }));
}

/// Appends the next changelog entry of `view`: through the projection, then as an effect.
fn append(
    batch: &mut Batch,
    view: &mut ExecutionView,
    entry: HistoryEntry,
) -> Result<(), ProcessorError> {
    let seq = view.next_seq;
    let timers = view.apply(seq, &entry, batch.now)?;
    batch.effects.push(Effect::Append {
        execution_id: view.id.clone(),
        seq,
        entry,
    });
    push_timer_changes(batch, timers);
    batch.touched.insert(view.id.clone());
    Ok(())
}

/// What the rules of a run's step need from the processor: its runner (for the terms of
/// activity requests) and the largest value a record may carry.
struct Rules<'a, R> {
    runner: &'a R,
    value_limit: usize,
}

impl<R> Clone for Rules<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Rules<'_, R> {}

impl<'a, R> Rules<'a, R> {
    fn new(runner: &'a R, value_limit: usize) -> Self {
        Rules {
            runner,
            value_limit,
        }
    }
}

/// A field of a submission that did not parse, and why.
enum Flaw {
    Params(String),
    Ffqn(String),
}

/// How a run starts.
enum Start {
    /// A new execution, just created.
    Fresh,
    /// A scheduled execution whose time came.
    Scheduled,
    /// A rebuild from its recorded history and journalled responses.
    Rebuild(Vec<crate::model::HistoryEvent>, Vec<Response>),
}

/// Starts (or rebuilds) the run of `live` and adds what it produced to the batch. A run that
/// cannot start for a reason that passes ([`RunError::is_retryable`]: a full instance pool,
/// a component a rolling deploy has not brought yet, an incomplete read of the journal) is
/// not finished: it stays parked, and the error is returned so that the start is tried
/// again (before, it finished with `trap`). Any other failure finishes it with `trap`.
async fn start_run<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    start: Start,
) -> Result<Option<RunError>, ProcessorError> {
    let execution = Execution {
        id: live.view.id.clone(),
        ffqn: live.view.created.ffqn.clone(),
        params: live.view.created.params.clone(),
        component: live.view.component.clone(),
        trace: Some(crate::trace::TraceParent::of_execution(
            &live.view.id,
            &live.view.created.metadata,
        )),
    };
    let (rebuilding, history, responses) = match start {
        Start::Fresh => (false, Vec::new(), Vec::new()),
        Start::Scheduled => (true, Vec::new(), Vec::new()),
        Start::Rebuild(history, responses) => (true, history, responses),
    };
    match rules
        .runner
        .start(execution, history, responses, batch.now)
        .await
    {
        Ok((run, step)) => {
            live.run = Some(run);
            apply_step(rules, stats, batch, live, step).await?;
            Ok(None)
        }
        Err(e) if e.is_retryable(rebuilding) => Ok(Some(e)),
        Err(e) => {
            tracing::warn!(execution = %live.view.id, error = %e, "execution failed to start");
            let result = error_result(ExecutionErrorKind::Trap, e.to_string());
            finish(stats, batch, live, result)?;
            Ok(None)
        }
    }
}

/// Adds a run's events and outputs to the batch. A finished run's outputs end with
/// `Finished`, which closes the changelog and answers the parent or `weir.results`.
///
/// A step with a value larger than `limit` (params of a child or a schedule, a stub's or
/// the execution's result) is not taken: no record could carry it, and its batch would fail
/// forever (issue 11 item 7). The execution finishes with `value-too-large` instead, at the
/// history version the step would have started from.
async fn apply_step<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    step: RunStep,
) -> Result<(), ProcessorError> {
    let cancellations = take_step(rules, stats, batch, live, step)?;
    deliver_own(rules, stats, batch, live, cancellations).await
}

/// Delivers responses the execution gives itself (`own`: what closing a join set or a
/// cancellation cancelled, the values it wrote for its own stubs), then every event match,
/// each journalled then delivered; a step they cause is taken and its own responses delivered
/// too.
async fn deliver_own<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    mut cancellations: Vec<Response>,
) -> Result<(), ProcessorError> {
    // What closing a join set cancelled is answered at once, by the execution itself, in
    // the order it was cancelled: journalled, then delivered to the run like any response
    // (a rebuild reads it back in the same place), so that a closing join-next waiting for
    // a workflow child takes it on the way exactly as it would take a late answer.
    //
    // Then every open event wait whose name has a buffered event takes it, the same way (a
    // wait the step opened may find an event that came before it).
    let mut next = 0;
    let mut matching = true;
    while let Some(run) = live.run.as_mut() {
        let response = match cancellations.get(next) {
            Some(response) => {
                next += 1;
                response.clone()
            }
            None => match live.view.next_event_match().filter(|_| matching) {
                Some((request, event)) => Response::EventDelivered {
                    event_request_id: request.clone(),
                    outcome: EventOutcome::Received {
                        event_id: event.event_id.clone(),
                        payload: event.payload.clone(),
                    },
                },
                None => break,
            },
        };
        match run.deliver(response.clone(), batch.now).await {
            Ok(step) => {
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
                cancellations.extend(take_step(rules, stats, batch, live, step)?);
            }
            // The run refused its own cancellation: nothing is journalled, and the late
            // answer of the request (if any) will be taken or refused as it comes.
            Err(RunError::Delivery { source, .. }) => {
                tracing::error!(execution = %live.view.id, error = %source, response = %response, "a run refused a response of its own");
                // The match would be made again and again: the events stay buffered.
                matching = false;
            }
            Err(e) => {
                tracing::warn!(execution = %live.view.id, error = %e, "the run failed on a cancellation");
                live.run = None;
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
                // What it cancelled that the run did not see is journalled too: every
                // cancelled request has its answer in the history.
                let rest = cancellations.split_off(next.min(cancellations.len()));
                journal_all(batch, live, rest)?;
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                return finish(stats, batch, live, result);
            }
        }
    }
    Ok(())
}

/// Adds one step's events and outputs to the batch; returns the responses cancelling what
/// the step cancelled, to deliver to the run while it is parked (a finished run's are
/// journalled before its `Finished`, here).
fn take_step<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    step: RunStep,
) -> Result<Vec<Response>, ProcessorError> {
    let finished = matches!(step, RunStep::Finished { .. });
    if finished {
        live.run = None;
    }
    let Effects { events, outputs } = step.into_effects();
    if let Some(problem) = outputs.iter().find_map(|o| oversized(o, rules.value_limit)) {
        tracing::warn!(execution = %live.view.id, %problem, "a value too large for a record: the execution ends");
        finish(
            stats,
            batch,
            live,
            error_result(ExecutionErrorKind::ValueTooLarge, problem),
        )?;
        return Ok(Vec::new());
    }
    for versioned in events {
        append(
            batch,
            &mut live.view,
            HistoryEntry::Event {
                version: versioned.version,
                event: versioned.event,
            },
        )?;
    }
    let mut cancellations = Vec::new();
    for output in outputs {
        if let Some(response) = output_effect(rules, stats, batch, live, output)? {
            if finished {
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
            } else {
                cancellations.push(response);
            }
        }
    }
    Ok(cancellations)
}

/// Journals `responses` as they are, without a run to deliver them to.
fn journal_all<Run>(
    batch: &mut Batch,
    live: &mut Live<Run>,
    responses: Vec<Response>,
) -> Result<(), ProcessorError> {
    for response in responses {
        append(
            batch,
            &mut live.view,
            HistoryEntry::ResponseAppended(response),
        )?;
    }
    Ok(())
}

/// The effects and the self-answers that cancel everything `live` waits for: its activities
/// and stubs end `cancelled` (an activity's running attempt is interrupted, a pending retry
/// dropped: [`Effect::CancelActivity`]), its delays and event waits are answered cancelled,
/// and its child workflows are cancelled in turn (they answer when they finish).
fn cancel_waits<Run>(batch: &mut Batch, live: &Live<Run>, stop: &Stop) -> Vec<Response> {
    let reason = &stop.reason;
    let id = &live.view.id;
    let waits = live.view.waiting_for();
    let mut own = Vec::new();
    for (child, ffqn, kind) in waits.children {
        match kind {
            ChildKind::Workflow => batch.effects.push(Effect::CancelExecution(CancelRequest {
                execution_id: child,
                reason: format!("its parent {id} {reason}"),
                terminate: stop.terminate,
                requested_at: batch.now,
            })),
            ChildKind::Activity | ChildKind::Stub | ChildKind::StubWrite => {
                if kind == ChildKind::Activity {
                    batch.effects.push(Effect::CancelActivity {
                        parent: id.clone(),
                        child: child.clone(),
                        ffqn,
                    });
                }
                own.push(Response::ChildExecutionFinished {
                    result: error_result(
                        ExecutionErrorKind::Cancelled,
                        format!("{child} was cancelled: {id} {reason}"),
                    ),
                    child_execution_id: child,
                });
            }
        }
    }
    own.extend(
        waits
            .delays
            .into_iter()
            .map(|delay_id| Response::DelayFinished {
                delay_id,
                outcome: DelayOutcome::Cancelled,
            }),
    );
    own.extend(
        waits
            .events
            .into_iter()
            .map(|event_request_id| Response::EventDelivered {
                event_request_id,
                outcome: EventOutcome::Cancelled,
            }),
    );
    own
}

/// The execution an input is for: a submission's own, the key of a response (the execution
/// it answers), an upgrade's, an event's target, a cancellation's.
fn input_owner(key: Option<&str>, body: &Body) -> Option<ExecutionId> {
    Some(match body {
        // A schedule is no execution: nothing to rehydrate.
        Body::Schedule(_) | Body::KeyedEvent(_) | Body::Correlation(_) => return None,
        Body::Submission(s)
        | Body::UnparsableParams { submission: s, .. }
        | Body::UnparsableFfqn { submission: s, .. } => s.execution_id.clone(),
        Body::Response(_) | Body::MalformedAnswer { .. } => response_owner(key)?,
        Body::Upgrade(u) => u.execution_id.clone(),
        Body::Event(e) => e.target.clone(),
        Body::Cancel(c) => c.execution_id.clone(),
        Body::StubWrite(w) => w.target.parent()?,
    })
}

/// Why an execution stops waiting, as [`cancel_waits`] tells its children: `reason` follows
/// the execution's id ("was cancelled: …", "passed its deadline …"); `terminate` child
/// workflows rather than let them compensate.
struct Stop {
    reason: String,
    terminate: bool,
}

/// The deadline a new execution keeps: the earlier of the one its submission asks for and
/// its component's default counted from `now`.
fn effective_deadline(
    asked: Option<DateTime<Utc>>,
    default: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let default = default
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .and_then(|d| now.checked_add_signed(d));
    earlier(asked, default)
}

/// The result of an execution that did not finish by its deadline.
fn deadline_result(view: &ExecutionView, now: DateTime<Utc>) -> ExecutionResult {
    let deadline = view.created.deadline.unwrap_or(now);
    error_result(
        ExecutionErrorKind::TimedOut,
        format!(
            "{} did not finish by its deadline {}",
            view.id,
            rfc3339(deadline)
        ),
    )
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The earlier of two optional instants.
fn earlier(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Room a record needs around the largest value it carries (ids, names, framing).
const ENVELOPE_ALLOWANCE: usize = 16 * 1024;

/// What is wrong with `output`, if a value of it is larger than `limit` bytes of JSON.
fn oversized(output: &Output, limit: usize) -> Option<String> {
    let (what, size) = match output {
        Output::SubmitChild {
            child_execution_id,
            params,
            ..
        } => (
            format!("the params of child {child_execution_id}"),
            json_size(params),
        ),
        Output::Schedule {
            execution_id,
            params,
            ..
        } => (
            format!("the params of scheduled {execution_id}"),
            json_size(params),
        ),
        Output::StubWrite {
            execution_id,
            result,
        } => (
            format!("the stub result of {execution_id}"),
            result_size(result),
        ),
        Output::Finished { result } => ("the result".to_owned(), result_size(result)),
        _ => return None,
    };
    (size > limit)
        .then(|| format!("{what} is {size} bytes of JSON; a record carries at most {limit}"))
}

fn result_size(result: &ExecutionResult) -> usize {
    match result {
        ExecutionResult::Ok(v) | ExecutionResult::Err(v) => json_size(v),
        ExecutionResult::ExecutionError(e) => {
            e.reason.len() + e.detail.as_ref().map_or(0, String::len)
        }
    }
}

/// The length of `value`'s JSON text, without building it.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The effect of one output; a cancellation, or a stub value the workflow writes for its own
/// stub child, returns the response that answers it (the execution answers itself).
fn output_effect<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    output: Output,
) -> Result<Option<Response>, ProcessorError> {
    let id = live.view.id.clone();
    match output {
        Output::SubmitChild {
            child_execution_id,
            ffqn,
            params,
            kind,
        } => {
            let terms = match kind {
                ChildKind::Activity => rules.runner.request_terms(&ffqn),
                _ => RequestTerms::default(),
            };
            let child = Child {
                id: child_execution_id,
                ffqn,
                params,
                kind,
            };
            let parent = Parent {
                id: &id,
                deadline: live.view.created.deadline,
                trace: crate::trace::inherited(&id, &live.view.created.metadata),
            };
            if let Some(effect) = child_effect(parent, child, terms, batch.now) {
                batch.effects.push(effect);
            }
        }
        // The projection puts the timer of the delay's `DelayRequest` event.
        Output::RequestDelay { .. } => {}
        Output::Correlate { key } => batch.effects.push(Effect::Correlation(CorrelationCommand {
            key,
            execution_id: id,
            action: CorrelationAction::Register,
            sent_at: batch.now,
        })),
        Output::Schedule {
            execution_id,
            ffqn,
            params,
            at,
        } => batch.effects.push(Effect::Submit(Submission {
            execution_id,
            ffqn,
            params,
            parent: None,
            scheduled_at: Some(at),
            correlation_id: None,
            // A scheduled execution is its own top-level execution, in its scheduler's trace,
            // not bound by its scheduler's deadline.
            metadata: crate::trace::inherited(&id, &live.view.created.metadata),
            deadline: None,
        })),
        // The stub's value answers this very execution at once, in the batch of the call that
        // wrote it: journalled, then delivered to the run like a cancellation's answer. The
        // call answered `ok` because the stub held nothing; taken now, it is the value the
        // stub holds, and a value from outside read later is a conflict. (Sent through
        // `weir.responses`, as it was, an outside value read in between won, and the
        // workflow had been told `ok` for the value that lost.)
        Output::StubWrite {
            execution_id,
            result,
        } => {
            return Ok(Some(Response::ChildExecutionFinished {
                child_execution_id: execution_id,
                result,
            }));
        }
        // An unawaited activity or stub of a closed join set ends `cancelled`, and a delay
        // `DelayFinished` with outcome `cancelled` (its timer is deleted by the projection):
        // the execution's history says what it cancelled, and a late answer is a duplicate.
        Output::CancelChild {
            child_execution_id,
            ffqn,
            kind,
        } => {
            if kind == ChildKind::Activity {
                batch.effects.push(Effect::CancelActivity {
                    parent: id,
                    child: child_execution_id.clone(),
                    ffqn,
                });
            }
            let reason = format!(
                "{child_execution_id} was cancelled: its join set was closed before it answered"
            );
            return Ok(Some(Response::ChildExecutionFinished {
                child_execution_id,
                result: error_result(ExecutionErrorKind::Cancelled, reason),
            }));
        }
        Output::CancelDelay { delay_id } => {
            return Ok(Some(Response::DelayFinished {
                delay_id,
                outcome: DelayOutcome::Cancelled,
            }));
        }
        Output::CancelEvent { event_request_id } => {
            return Ok(Some(Response::EventDelivered {
                event_request_id,
                outcome: EventOutcome::Cancelled,
            }));
        }
        Output::Finished { result } => finish(stats, batch, live, result)?,
    }
    Ok(None)
}

/// A child a run submitted.
struct Child {
    id: ExecutionId,
    ffqn: Ffqn,
    params: Value,
    kind: ChildKind,
}

/// The execution a child is submitted by, as its child's record carries it.
struct Parent<'a> {
    id: &'a ExecutionId,
    /// The parent's deadline: no child gets a later one.
    deadline: Option<DateTime<Utc>>,
    /// The trace keys a child workflow inherits ([`crate::trace::inherited`]).
    trace: BTreeMap<String, String>,
}

/// The record a child becomes: a submission of a workflow (with its parent's deadline, its
/// metadata the trace keys it inherits), an activity request with the `terms` of its
/// declaration (its deadline counted from `now`, never later than the parent's), nothing
/// for a stub.
fn child_effect(
    Parent {
        id: parent,
        deadline: parent_deadline,
        trace,
    }: Parent<'_>,
    child: Child,
    terms: RequestTerms,
    now: DateTime<Utc>,
) -> Option<Effect> {
    let Child {
        id: child,
        ffqn,
        params,
        kind,
    } = child;
    match kind {
        ChildKind::Workflow => {
            let join_set_id = child.join_set_id()?.clone();
            Some(Effect::Submit(Submission {
                execution_id: child,
                ffqn,
                params,
                parent: Some(ParentRef {
                    execution_id: parent.clone(),
                    join_set_id,
                    child_kind: kind,
                }),
                scheduled_at: None,
                correlation_id: None,
                metadata: trace,
                deadline: parent_deadline,
            }))
        }
        ChildKind::Activity => Some(Effect::RequestActivity(ActivityRequest {
            execution_id: child,
            parent_execution_id: parent.clone(),
            ffqn,
            params,
            attempt: 1,
            timeout_millis: terms
                .attempt_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            deadline: earlier(
                terms
                    .deadline_after
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .and_then(|d| now.checked_add_signed(d)),
                parent_deadline,
            ),
        })),
        // Never executed: the workflow writes its result with `<f>-stub`.
        ChildKind::Stub => None,
        // The stub's owner writes it and answers; a target that is nobody's child (or params
        // this host did not make) is answered `not-found` at once.
        ChildKind::StubWrite => {
            let target = params
                .get(0)
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<ExecutionId>().ok())
                .filter(|t| t.parent().is_some());
            let result = params
                .get(1)
                .and_then(|v| serde_json::from_value::<ExecutionResult>(v.clone()).ok());
            match (target, result) {
                (Some(target), Some(result)) => Some(Effect::WriteStub(StubWrite {
                    request: child,
                    target,
                    ffqn,
                    result,
                })),
                _ => Some(Effect::Respond {
                    to: parent.clone(),
                    response: Response::ChildExecutionFinished {
                        child_execution_id: child,
                        result: stub_write_answer(StubWriteOutcome::NotFound),
                    },
                }),
            }
        }
    }
}

/// What a write of another execution's stub found (its answer to the writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubWriteOutcome {
    /// Written now, or the stub held this value already.
    Ok,
    /// The stub holds another value.
    Conflict,
    /// No execution made such a stub request (of this function), or it no longer waits.
    NotFound,
}

/// The answer of a [`ChildKind::StubWrite`] request: `ok(null)`, `err("conflict")`,
/// `err("not-found")`.
pub fn stub_write_answer(outcome: StubWriteOutcome) -> ExecutionResult {
    match outcome {
        StubWriteOutcome::Ok => ExecutionResult::Ok(Value::Null),
        StubWriteOutcome::Conflict => ExecutionResult::Err(Value::from("conflict")),
        StubWriteOutcome::NotFound => ExecutionResult::Err(Value::from("not-found")),
    }
}

/// Records the end of `live` and tells whoever waits: the parent, or `weir.results`.
fn finish<Run>(
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<Run>,
    result: ExecutionResult,
) -> Result<(), ProcessorError> {
    // Once asked to stop, an execution finishes `cancelled`, whatever the run ended with
    // (that is in the detail).
    let result = match (&live.view.cancel_requested, result) {
        (Some(reason), ended) => {
            let detail = match &ended {
                ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Cancelled => {
                    e.reason.clone()
                }
                other => format!("the workflow finished with {other}"),
            };
            ExecutionResult::ExecutionError(
                ExecutionError::new(
                    ExecutionErrorKind::Cancelled,
                    format!("cancelled: {reason}"),
                )
                .with_detail(detail),
            )
        }
        (None, result) => result,
    };
    finish_with(stats, batch, live, result)
}

/// [`finish`] with `result` as it is.
fn finish_with<Run>(
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<Run>,
    result: ExecutionResult,
) -> Result<(), ProcessorError> {
    live.run = None;
    let unclaimed = live.view.buffered_events().len();
    if unclaimed > 0 {
        tracing::info!(execution = %live.view.id, unclaimed, "the execution finished with events no wait took: dropped");
        stats.events_unclaimed += unclaimed as u64;
    }
    append(
        batch,
        &mut live.view,
        HistoryEntry::Finished {
            result: result.clone(),
            finished_at: batch.now,
        },
    )?;
    stats.finished += 1;
    let created = &live.view.created;
    let effect = match &created.parent {
        Some(parent) => Effect::Respond {
            to: parent.execution_id.clone(),
            response: Response::ChildExecutionFinished {
                child_execution_id: live.view.id.clone(),
                result,
            },
        },
        None => Effect::PublishResult(ExecutionFinished {
            execution_id: live.view.id.clone(),
            ffqn: created.ffqn.clone(),
            result,
            finished_at: batch.now,
            correlation_id: created.correlation_id.clone(),
        }),
    };
    batch.effects.push(effect);
    // The keys it registered take no more events for it.
    for key in &live.view.correlation_keys {
        batch.effects.push(Effect::Correlation(CorrelationCommand {
            key: key.clone(),
            execution_id: live.view.id.clone(),
            action: CorrelationAction::Unregister,
            sent_at: batch.now,
        }));
    }
    // A tick's execution tells its schedule, which may wait for it (overlap `skip`).
    if created.parent.is_none()
        && let Some(name) = created.metadata.get(schedule::METADATA_SCHEDULE)
        && schedule::check_name(name).is_ok()
    {
        batch.effects.push(Effect::ScheduleCommand(ScheduleCommand {
            name: name.clone(),
            command_id: format!("run-finished:{}", live.view.id),
            action: ScheduleAction::RunFinished(live.view.id.clone()),
            sent_at: batch.now,
        }));
    }
    Ok(())
}
