//! The partition processor: the rules by which a workflow worker turns its inputs into
//! effects. They live in this module's files, and only here.
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
//! Every changelog entry the processor appends goes through [`ExecutionView::apply`]
//! ([`ctx::StepCtx::append`]), so the state it keeps, the execution rows and the timers it
//! writes are the projection's, exactly as catch-up and rehydration derive them.
//!
//! Invariants a reader may trust (checked by `debug_assert!`s where they are kept):
//! - an execution's changelog seqs are contiguous from 0: each entry is appended at the
//!   view's `next_seq`, and the view moves past it;
//! - at most one run per execution: a run starts only where none is parked;
//! - an execution a batch touched that the store does not hold yet is never evicted nor
//!   rebuilt from the store ([`cache`]).
//!
//! The rules, one module per concern (the design: `docs/design/partition-processor.md`):
//! - [`admit`]: oversize, undecodable and misrouted records, deadlines first;
//! - [`submit`]: submissions create executions;
//! - [`deliver`]: responses and due delays reach the run;
//! - [`run`]: starting and rebuilding runs, and taking their steps ([`outputs`]: what a
//!   step's outputs become; [`finish`]: an execution's end; [`size`]: values too large
//!   for a record);
//! - [`cancel`]: cancellation, termination and deadlines;
//! - [`events`]: events, early events and correlation keys;
//! - [`schedules`]: schedules and their ticks;
//! - [`concurrency`]: concurrency slots (keys, functions' limits), both sides;
//! - [`batches`]: batch operations and their turns;
//! - [`corrupt_state`]: keyed state that does not decode, dropped to the DLQ;
//! - [`stubs`]: stub values from outside and from other workflows;
//! - [`upgrades`]: moving an execution to another build;
//! - [`pause`]: pausing and resuming an execution;
//! - [`query`]: queries, answered without changing anything;
//! - [`reset`]: a new execution from an execution's history up to a point;
//! - [`starts`]: scheduled starts and deferred starts that are retried;
//! - [`cache`]: the execution cache (weights, eviction, room for a run);
//! - [`trace`]: the trace context of each record.

mod admit;
mod batches;
mod cache;
mod cancel;
mod concurrency;
mod config;
mod corrupt_state;
mod ctx;
mod deliver;
mod effect;
mod events;
mod finish;
mod input;
mod key_table;
mod outputs;
mod pause;
mod query;
mod reset;
mod run;
mod schedules;
mod size;
mod starts;
mod stubs;
mod submit;
mod trace;
mod upgrades;

pub use crate::records::{CorruptState, StateOf};
pub use cache::view_bytes;
pub use config::{ProcessorConfig, ProcessorError, ProcessorStats};
pub use effect::{Batch, Effect};
pub use input::{Body, Input, StubWrite, Undecodable};
pub use size::ENVELOPE_ALLOWANCE;
pub use starts::start_retry_delay;
pub use stubs::{StubWriteOutcome, stub_write_answer};

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use indexmap::{IndexMap, IndexSet};

use crate::cache::Policy;
use crate::model::ExecutionId;
use crate::projection;
use crate::projection::ExecutionView;
use crate::records::{DlqReason, HistoryRecord};
use crate::rows::{ExecutionRow, ExecutionState};
use crate::runner::WorkflowRunner;
use crate::schedule::ScheduleState;

use self::admit::{Record, input_owner, is_duplicate};
use self::run::Start;
use self::submit::Flaw;

impl<R: WorkflowRunner> Processor<R> {
    pub fn new(runner: R, config: ProcessorConfig) -> Self {
        Processor {
            runner,
            config,
            cache: IndexMap::new(),
            stats: ProcessorStats::default(),
            deferred: IndexMap::new(),
            retries: HashMap::new(),
            capacity_seen: None,
            materialised: 0,
            policy: Policy::new(config.cache_bytes),
            accessed: IndexSet::new(),
            schedules: BTreeMap::new(),
            batches: BTreeMap::new(),
            correlations: key_table::KeyTable::default(),
            slots: BTreeMap::new(),
            submissions_unread_at: None,
            take_over_effects: Vec::new(),
            provided: None,
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
    pub fn needs(&self, batch: &Batch, input: &Input) -> Option<(ExecutionId, u64)> {
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
            // What this batch appended is not in the store: a rebuild from the store would
            // lose it and append at the same seqs again. The view in memory is the one to
            // take the input; a start the batch deferred is tried again after its commit.
            Some(_) if batch.touched.contains(&id) => None,
            Some(live) if live.view.state == ExecutionState::Running && live.run.is_none() => {
                Some((id, live.pinned_until))
            }
            Some(_) => None,
        }
    }

    /// A stored history the rule of `input` reads, besides the rebuild [`Processor::needs`]
    /// asks for, with the materialiser's batch number that must be in the store first: the
    /// history of the execution a reset request cuts ([`reset`]). `None` when the batch being
    /// built changed that execution (the store cannot hold what the batch appended; the rule
    /// sends the request back). Read it, and give it with [`Processor::provide`].
    pub fn reads(&self, batch: &Batch, input: &Input) -> Option<(ExecutionId, u64)> {
        let Input::Record {
            partition,
            key,
            body: Ok(body @ Body::Reset(request)),
            ..
        } = input
        else {
            return None;
        };
        let id = &request.execution_id;
        if self.misrouted(*partition, key.as_deref(), body).is_some() || batch.touched.contains(id)
        {
            return None;
        }
        Some((id.clone(), self.cache.get(id).map_or(0, |l| l.pinned_until)))
    }

    /// The history [`Processor::reads`] asked for (`None`: the store has none), for the next
    /// [`Processor::step`].
    pub fn provide(
        &mut self,
        id: ExecutionId,
        stored: Option<Vec<(HistoryRecord, DateTime<Utc>)>>,
    ) {
        self.provided = Some((id, stored));
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
        // One past its deadline is not run again: the input that asked for it finds it
        // timed out ([`Processor::step`] enforces the deadline first). A rebuild may take
        // steps (responses journalled while its start was deferred): none past the deadline.
        let running = rebuilt.view.state == ExecutionState::Running
            && rebuilt.view.created.deadline.is_none_or(|d| d > batch.now);
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
        let stepped = self.step_input(batch, input).await;
        // What was read for this input is not for another.
        self.provided = None;
        stepped
    }

    async fn step_input(&mut self, batch: &mut Batch, input: Input) -> Result<(), ProcessorError> {
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
                timestamp,
            } => {
                let record = Record {
                    index,
                    partition,
                    key: key.as_deref(),
                    size,
                };
                match self.admit(batch, record, body).await? {
                    Some(body) => {
                        self.dispatch(batch, index, key.as_deref(), body, timestamp)
                            .await
                    }
                    None => Ok(()),
                }
            }
        }
    }

    /// Takes an admitted record's body (sent at `sent_at`, its Kafka timestamp) to the rules
    /// of its kind.
    async fn dispatch(
        &mut self,
        batch: &mut Batch,
        index: usize,
        key: Option<&str>,
        body: Body,
        sent_at: Option<DateTime<Utc>>,
    ) -> Result<(), ProcessorError> {
        match body {
            Body::Submission(submission) => {
                self.submit(batch, index, submission, None, sent_at).await
            }
            Body::UnparsableParams { submission, error } => {
                let flaw = Some(Flaw::Params(error));
                self.submit(batch, index, submission, flaw, sent_at).await
            }
            Body::UnparsableFfqn { submission, error } => {
                let flaw = Some(Flaw::Ffqn(error));
                self.submit(batch, index, submission, flaw, sent_at).await
            }
            Body::Response(response) => self.answer(batch, index, key, response, None).await,
            Body::MalformedAnswer { response, error } => {
                let copy = (DlqReason::Undecodable, error);
                self.answer(batch, index, key, response, Some(copy)).await
            }
            Body::Upgrade(request) => self.upgrade(batch, index, request),
            Body::Pause(request) => self.pause(batch, index, request),
            Body::Reset(request) => self.reset(batch, index, request).await,
            Body::ResetStart(start) => {
                let (submission, seed) = reset::Seed::of(start);
                self.submit_seeded(batch, index, submission, seed, sent_at)
                    .await
            }
            Body::Event(event) => self.receive_event(batch, index, event).await,
            Body::Cancel(request) => self.cancel(batch, index, request).await,
            Body::Schedule(command) => {
                self.schedule_command(batch, index, command);
                Ok(())
            }
            Body::Batch(command) => {
                self.batch_command(batch, index, command);
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
            Body::Slot(command) => self.slot_command(batch, index, command).await,
            Body::Query(request) => self.query(batch, request).await,
        }
    }

    /// Whether the first batch after a take-over has effects to write first (the driver makes
    /// a batch for them).
    pub fn take_over_effects_due(&self) -> bool {
        !self.take_over_effects.is_empty()
    }

    /// Writes what the take-over left for the first batch; call before the batch's inputs (an
    /// input may write one of these keys afresh, and must land after).
    pub fn take_over_effects(&mut self, batch: &mut Batch) {
        batch.effects.append(&mut self.take_over_effects);
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
    /// When the `retry` timer this owner put for an execution is due, while it is pending:
    /// the next put deletes it, so an execution has one (see [`Processor::retry_at`]).
    retries: HashMap<ExecutionId, DateTime<Utc>>,
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
    /// The batches of the owned partitions, by id (restored at take-over with the schedules).
    batches: BTreeMap<String, crate::batch::BatchState>,
    /// The correlation keys of the owned partitions that hold an execution or events
    /// (restored at take-over with the schedules).
    correlations: key_table::KeyTable,
    /// The concurrency slots of the owned partitions that hold or queue executions, by wire
    /// key (restored at take-over with the schedules; [`concurrency`]).
    slots: BTreeMap<String, crate::concurrency::SlotState>,
    /// The last instant at which this owner was not reading the submissions partitions
    /// (paused by admission, or not owning them yet): see [`Processor::submissions_read`].
    submissions_unread_at: Option<DateTime<Utc>>,
    /// What the first batch after a take-over writes before its inputs' effects
    /// ([`Processor::take_over_effects`]): corrupt keyed state dropped ([`corrupt_state`]),
    /// remembered ids moved out of their keys' records ([`Processor::restore_remembered`]).
    take_over_effects: Vec<Effect>,
    /// The history [`Processor::reads`] asked for and the driver read, until the step that
    /// takes it.
    provided: Option<(ExecutionId, Option<reset::Stored>)>,
}
