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
//!   name takes it (the projection's buffer, at most [`MAX_BUFFERED_EVENTS`](correlation::MAX_BUFFERED_EVENTS) events and
//!   [`MAX_BUFFERED_EVENT_BYTES`](correlation::MAX_BUFFERED_EVENT_BYTES) of payloads per execution; beyond, dead-lettered
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

mod admit;
mod cache;
mod cancel;
mod config;
mod ctx;
mod deliver;
mod effect;
mod events;
mod finish;
mod input;
mod outputs;
mod run;
mod schedules;
mod size;
mod starts;
mod stubs;
mod submit;
mod trace;
mod upgrades;

pub use cache::view_bytes;
pub use config::{ProcessorConfig, ProcessorError, ProcessorStats};
pub use effect::{Batch, Effect};
pub use input::{Body, Input, StubWrite, Undecodable};
pub use starts::start_retry_delay;
pub use stubs::{StubWriteOutcome, stub_write_answer};

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use indexmap::{IndexMap, IndexSet};

use crate::cache::Policy;
use crate::correlation::CorrelationState;
use crate::model::{ExecutionErrorKind, ExecutionId, Response};
use crate::projection;
use crate::projection::ExecutionView;
use crate::records::{DlqReason, HistoryRecord};
use crate::rows::{ExecutionRow, ExecutionState};
use crate::runner::WorkflowRunner;
use crate::schedule::ScheduleState;

use self::admit::{input_owner, is_duplicate, response_owner};
use self::ctx::error_result;
use self::run::Start;
use self::size::ENVELOPE_ALLOWANCE;
use self::submit::{Flaw, answer_refused};

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
            let start = Start::Rebuild(rebuilt.events, rebuilt.responses);
            let deferred = self.ctx(batch).start_run(&mut live, start).await?;
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

    /// The partition that owns `key` (the partitioner's rule).
    pub fn partition_of_key(&self, key: &str) -> i32 {
        crate::partitioner::partition_for_key(key.as_bytes(), self.config.partitions)
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

    /// The store row of a cached execution (after a batch touched it).
    pub fn row(&self, id: &ExecutionId) -> Option<ExecutionRow> {
        self.cache.get(id).map(|live| live.view.row())
    }

    /// The view of a cached execution.
    pub fn view(&self, id: &ExecutionId) -> Option<&ExecutionView> {
        self.cache.get(id).map(|live| &live.view)
    }
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
