//! An in-memory driver of the partition processor ([`weir_core::processor`]) over
//! [`WasmHost`], without Kafka or a database: what the tests and benchmarks of the host use.
//! It has no rules of its own: every submission, response, event, correlation command and
//! due timer is one [`Processor::step`], exactly as the Kafka worker's loop (`weir_core::driver`) steps it, and
//! the bus only routes the effects in memory, each record read with the key the core's wire
//! table gives it ([`weir_core::wire::address`], as the Kafka encoder and the simulation
//! route them):
//!
//! | effect | here |
//! |---|---|
//! | `Append` | the bus's store: the changelog of each execution, each record with its time (read back by [`Processor::rehydrate`] on the cold path) |
//! | `Submit` | a submission queued (child workflows; scheduled ones wait for their `PutTimer`) |
//! | `RequestActivity` | an activity request queued; the bus plays the activity worker: [`WasmHost::run_activity`] (with its in-process retries, the core's one retry decision) and the answer queued for the parent; a function no component exports is answered `unknown-function` at once (no other worker can turn up here) |
//! | `Respond` | a response queued for its owner |
//! | `PublishResult` | recorded ([`InMemoryBus::published`]) |
//! | `PutTimer` / `DeleteTimer` | the timer list, fired by [`InMemoryBus::fire_next_timer`] |
//! | `DeadLetter` | recorded with the typed record ([`InMemoryBus::dead_letters`]) |
//! | `CancelActivity` | recorded ([`InMemoryBus::cancelled_activities`]) and, as the activity worker does it, an activity not answered yet (its request still queued: the bus runs each activity to its end at once) is dropped and its parent answered with `cancelled` |
//! | `Correlation` | a command queued for the key's owner ([`Record::Correlation`], stepped as `Body::Correlation`) |
//! | `ForwardEvent` | an event queued for the holder ([`Record::Event`], stepped as `Body::Event`) |
//! | `ReturnEvent` | an event queued for its key ([`Record::KeyedEvent`], stepped as `Body::KeyedEvent`) |
//! | `PutCorrelation` | the last state of each key ([`InMemoryBus::correlation`]), what `weir.state` keeps: given back to the processor whenever it forgets everything (cold mode, [`InMemoryBus::evict_all`]), as a new owner's take-over does |
//! | `AnswerQuery` | recorded ([`InMemoryBus::answers`]); queries come in as [`Record::Query`] ([`InMemoryBus::query`]) |
//! | `PutSchedule` / `ScheduleCommand` | refused ([`BusError::Inconsistent`]): schedules tick from the driver's loop, which the bus does not run |
//!
//! Events come in as [`Record::Event`] (for an execution) or [`Record::KeyedEvent`] (for a
//! correlation key), sent with [`InMemoryBus::send`].
//!
//! Each input is a batch of its own: after its step the batch is "committed" and at once
//! "materialised" (`committed(touched, n, now)`, then `evict(n)`), so the store never lags memory.
//! What the Kafka driver does and this bus does not: records are not encoded (their size is
//! given as 0, so the `max-record-bytes` check never fires), and activity retries happen inside
//! [`WasmHost::run_activity`] instead of on the activity topic.
//!
//! It is single-threaded and deterministic: the clock is logical (advanced only by firing
//! timers), top-level ids come from a counter, and inputs are processed FIFO. With
//! [`InMemoryBus::set_hot`]`(false)` the processor forgets everything after each step
//! ([`Processor::clear`]), so every input is processed after a cold rebuild from the stored
//! changelog: running the same scenario both ways must give identical stores and results.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use ulid::Ulid;
use weir_core::correlation::{CorrelationCommand, CorrelationState, KeyedEvent};
use weir_core::processor::{
    Batch, Body, Effect, Input, Processor, ProcessorConfig, ProcessorError, ProcessorStats,
};
use weir_core::records::{
    ActivityRequest, DlqReason, ExecutionFinished, HistoryEntry, HistoryRecord, InboundEvent,
    Submission,
};
use weir_core::rows::{ExecutionState, TimerKey, TimerKind, TimerRow};
use weir_core::wire::{self, Address, AddressError, Key};

use crate::model::{
    ChildKind, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, Response,
};
use crate::store::to_store_precision;

use super::activity::Cancellation;
use super::host::{WasmHost, WasmRunner};
use super::registry::SubmitError;

/// The partitions of the co-partitioned topics the bus pretends to have (as
/// `topology/topics.toml` declares them); they name the timers' partitions.
pub const BUS_PARTITIONS: i32 = 6;

/// One execution as the bus's store keeps it: what its changelog says (workflows, and every
/// execution submitted), or what the activity run gave (activities).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredExecution {
    pub ffqn: Ffqn,
    pub params: Value,
    /// When it was created (for activities: when the bus first saw its request).
    pub created_at: DateTime<Utc>,
    pub parent: Option<ExecutionId>,
    /// `Activity` for an activity the bus ran; else what its submission says (`Workflow` for
    /// a top-level execution).
    pub kind: ChildKind,
    /// The history events of the changelog, in version order.
    pub history: Vec<HistoryEvent>,
    /// Responses in arrival order (the journal replay depends on).
    pub responses: Vec<Response>,
    pub result: Option<ExecutionResult>,
    /// Activity attempts made.
    pub attempts: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Processor(#[from] ProcessorError),
    #[error("the store is inconsistent: {0}")]
    Inconsistent(String),
}

/// A record the bus carries: what would travel on a topic.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// `weir.submissions`, keyed by the submission's execution id.
    Submission(Submission),
    /// `weir.responses`, keyed by `to`.
    Response { to: ExecutionId, response: Response },
    /// An activity topic, keyed by the activity's id.
    ActivityRequest(ActivityRequest),
    /// A `CancelRequest` (`weir.kind = cancel-execution`; on `weir.submissions` from a
    /// parent, on `weir.responses` from outside), keyed by the execution.
    Cancel(crate::codec::CancelRequest),
    /// `weir.events`, keyed by the target execution (sent to it, or forwarded by its key).
    Event(InboundEvent),
    /// `weir.events`, keyed by the correlation key (sent to it, or returned by a finished
    /// holder).
    KeyedEvent(KeyedEvent),
    /// `weir.responses` (`weir.kind = correlation`), keyed by the correlation key.
    Correlation(CorrelationCommand),
    /// `weir.responses` (`weir.kind = stub-write`), keyed by the stub's parent.
    StubWrite(weir_core::processor::StubWrite),
    /// `weir.responses` (`weir.kind = concurrency`), keyed by the slot or the execution.
    Slot(weir_core::concurrency::SlotCommand),
    /// `weir.responses` (`weir.kind = query`), keyed by the execution queried: only clients
    /// write one (no effect does), answered with an `AnswerQuery` ([`InMemoryBus::answers`]).
    Query(weir_core::query::QueryRequest),
}

impl Record {
    /// The effect that writes this record (`None`: only clients write it).
    fn effect(&self) -> Option<Effect> {
        Some(match self.clone() {
            Record::Submission(submission) => Effect::Submit(submission),
            Record::Response { to, response } => Effect::Respond { to, response },
            Record::ActivityRequest(request) => Effect::RequestActivity(request),
            Record::Cancel(request) => Effect::CancelExecution(request),
            Record::Event(event) => Effect::ForwardEvent(event),
            Record::KeyedEvent(event) => Effect::ReturnEvent(event),
            Record::Correlation(command) => Effect::Correlation(command),
            Record::StubWrite(write) => Effect::WriteStub(write),
            Record::Slot(command) => Effect::Slot(command),
            Record::Query(_) => return None,
        })
    }

    /// Its Kafka key, as the wire table ([`weir_core::wire::address`]) routes it (which
    /// partition, so which owner, it is read by).
    pub fn key(&self) -> Result<String, BusError> {
        let Some(effect) = self.effect() else {
            // A query is keyed by its execution (`weir_core::query`).
            return match self {
                Record::Query(request) => Ok(request.execution_id.to_string()),
                other => Err(BusError::Inconsistent(format!(
                    "{other:?} is written by no effect and has no key here"
                ))),
            };
        };
        match wire::address(&effect)? {
            Some(Address {
                key: Key::Exactly(key),
                ..
            }) => Ok(key),
            other => Err(BusError::Inconsistent(format!(
                "{self:?} has no key of its own: {other:?}"
            ))),
        }
    }
}

/// A record that went to the DLQ.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetter {
    pub record: Record,
    pub reason: DlqReason,
    pub error: String,
    pub at: DateTime<Utc>,
}

/// An unawaited activity of a closed join set (`Effect::CancelActivity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelledActivity {
    pub parent: ExecutionId,
    pub child: ExecutionId,
}

/// Counters of what the bus did, for tests and benchmarks; derived from the processor's
/// [`ProcessorStats`] and the bus's own observations of each step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusStats {
    /// Runs started: fresh starts plus rebuilds by replay.
    pub starts: u64,
    /// Of those, rebuilds by replay of a stored changelog (the cold path; the processor's
    /// `replayed`).
    pub cold_starts: u64,
    /// Responses delivered to a run that was parked before its input came (the hot path).
    pub hot_deliveries: u64,
    /// Responses delivered to a run rebuilt for them in the same step (the cold path; the
    /// processor counts these among its `hot_deliveries`).
    pub cold_deliveries: u64,
    /// Inputs stepped through the processor (each one a batch).
    pub batches: u64,
}

/// See the module docs.
pub struct InMemoryBus {
    processor: Processor<WasmRunner>,
    now: DateTime<Utc>,
    next_id: u64,
    hot: bool,
    queue: VecDeque<Record>,
    /// The store: each execution's changelog, with the time each record was written.
    changelog: BTreeMap<ExecutionId, Vec<(HistoryRecord, DateTime<Utc>)>>,
    executions: BTreeMap<ExecutionId, StoredExecution>,
    /// Pending timers, by (due time, id).
    timers: Vec<TimerRow>,
    published: Vec<ExecutionFinished>,
    /// What went to `weir.answers`, in order.
    answers: Vec<weir_core::query::QueryAnswer>,
    /// The number of the last query [`InMemoryBus::query`] sent.
    next_query: u64,
    dead_letters: Vec<DeadLetter>,
    cancelled: Vec<CancelledActivity>,
    /// The last state of each correlation key (`weir.state`; a tombstone removes it).
    correlations: BTreeMap<String, CorrelationState>,
    /// The last state of each concurrency slot (`weir.state`; a tombstone removes it).
    slots: BTreeMap<String, weir_core::concurrency::SlotState>,
    /// The event ids each key remembers forwarding (`weir.state`, a record each).
    remembered: BTreeMap<String, std::collections::BTreeSet<String>>,
    fresh_starts: u64,
    hot_deliveries: u64,
    cold_deliveries: u64,
    batches: u64,
}

impl InMemoryBus {
    /// A bus over `host`, its logical clock starting at `now`, with the worker's default
    /// cache size and record limit.
    pub fn new(host: Arc<WasmHost>, now: DateTime<Utc>) -> Self {
        let config = ProcessorConfig {
            cache_bytes: crate::options::DEFAULT_CACHE_BYTES,
            cache_size: crate::options::DEFAULT_CACHE_SIZE,
            max_record_bytes: crate::options::DEFAULT_MAX_RECORD_BYTES,
            partitions: BUS_PARTITIONS,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        };
        Self::with_config(host, now, config)
    }

    /// A bus whose processor has `config`.
    pub fn with_config(host: Arc<WasmHost>, now: DateTime<Utc>, config: ProcessorConfig) -> Self {
        InMemoryBus {
            processor: Processor::new(WasmRunner(host), config),
            now,
            next_id: 0,
            hot: true,
            queue: VecDeque::new(),
            changelog: BTreeMap::new(),
            executions: BTreeMap::new(),
            timers: Vec::new(),
            published: Vec::new(),
            answers: Vec::new(),
            next_query: 0,
            dead_letters: Vec::new(),
            cancelled: Vec::new(),
            correlations: BTreeMap::new(),
            slots: BTreeMap::new(),
            remembered: BTreeMap::new(),
            fresh_starts: 0,
            hot_deliveries: 0,
            cold_deliveries: 0,
            batches: 0,
        }
    }

    /// Hot (runs stay parked, the default) or cold (the processor forgets everything after
    /// every step, so each input rebuilds its execution from the store by replay).
    pub fn set_hot(&mut self, hot: bool) {
        self.hot = hot;
        if !hot {
            self.forget();
        }
    }

    /// The processor forgets everything, and gets the keyed state back as `weir.state` has
    /// it (what a take-over does).
    fn forget(&mut self) {
        self.processor.clear();
        self.processor
            .restore_correlations(self.correlations.values().cloned());
        self.processor.restore_slots(self.slots.values().cloned());
    }

    pub fn host(&self) -> &Arc<WasmHost> {
        &self.processor.runner().0
    }

    /// The processor the bus drives (its cache, rows and counters).
    pub fn processor(&self) -> &Processor<WasmRunner> {
        &self.processor
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    pub fn stats(&self) -> BusStats {
        let processor = self.processor.stats();
        BusStats {
            starts: self.fresh_starts + processor.replayed,
            cold_starts: processor.replayed,
            hot_deliveries: self.hot_deliveries,
            cold_deliveries: self.cold_deliveries,
            batches: self.batches,
        }
    }

    pub fn processor_stats(&self) -> ProcessorStats {
        self.processor.stats()
    }

    pub fn execution(&self, id: &ExecutionId) -> Option<&StoredExecution> {
        self.executions.get(id)
    }

    pub fn executions(&self) -> &BTreeMap<ExecutionId, StoredExecution> {
        &self.executions
    }

    /// The stored changelog of an execution, with the time each record was written.
    pub fn changelog(&self, id: &ExecutionId) -> Option<&[(HistoryRecord, DateTime<Utc>)]> {
        self.changelog.get(id).map(Vec::as_slice)
    }

    /// Every stored changelog.
    pub fn changelogs(&self) -> &BTreeMap<ExecutionId, Vec<(HistoryRecord, DateTime<Utc>)>> {
        &self.changelog
    }

    pub fn result(&self, id: &ExecutionId) -> Option<&ExecutionResult> {
        self.executions.get(id).and_then(|e| e.result.as_ref())
    }

    /// What went to `weir.results` (top-level executions), in order.
    pub fn published(&self) -> &[ExecutionFinished] {
        &self.published
    }

    /// What went to `weir.answers` (the answers to queries), in order.
    pub fn answers(&self) -> &[weir_core::query::QueryAnswer] {
        &self.answers
    }

    /// Queries `id` with `name(params)` (deadline: an hour from the bus's clock), runs until
    /// idle, and gives the answer, as `weir query` would read it from `weir.answers`.
    pub async fn query(
        &mut self,
        id: &ExecutionId,
        name: &str,
        params: Value,
    ) -> Result<weir_core::query::QueryAnswer, BusError> {
        self.next_query += 1;
        let query_id = format!("q{}", self.next_query);
        self.send(Record::Query(weir_core::query::QueryRequest {
            query_id: query_id.clone(),
            execution_id: id.clone(),
            name: name.to_owned(),
            params,
            requested_at: self.now,
            deadline: self.now + chrono::Duration::hours(1),
        }));
        self.run_until_idle().await?;
        self.answers
            .iter()
            .rev()
            .find(|a| a.query_id == query_id)
            .cloned()
            .ok_or_else(|| BusError::Inconsistent(format!("query {query_id} of {id}: no answer")))
    }

    /// What went to the DLQ, in order.
    pub fn dead_letters(&self) -> &[DeadLetter] {
        &self.dead_letters
    }

    /// The `CancelActivity` effects, in order.
    pub fn cancelled_activities(&self) -> &[CancelledActivity] {
        &self.cancelled
    }

    /// The last state of correlation key `key`, as `weir.state` would have it (`None`: the
    /// key holds no execution, no event and no kept cancellation).
    pub fn correlation(&self, key: &str) -> Option<&CorrelationState> {
        self.correlations.get(key)
    }

    /// The event ids correlation key `key` remembers forwarding, in order of the ids.
    pub fn remembered(&self, key: &str) -> Vec<&str> {
        self.remembered
            .get(key)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }

    /// Every correlation key that holds an execution or an event.
    pub fn correlations(&self) -> &BTreeMap<String, CorrelationState> {
        &self.correlations
    }

    /// Pending timers, earliest first (ties by id).
    pub fn pending_timers(&self) -> &[TimerRow] {
        &self.timers
    }

    /// Drops every parked run and cached execution (as an eviction or a restart would); the
    /// next input of each is processed after a rebuild from the store.
    pub fn evict_all(&mut self) {
        self.forget();
    }

    fn fresh_id(&mut self) -> ExecutionId {
        self.next_id += 1;
        let millis = u64::try_from(self.now.timestamp_millis()).unwrap_or(0);
        ExecutionId::top_level(Ulid::from_parts(millis, u128::from(self.next_id)))
    }

    /// Submits a top-level execution after type-checking its params, as a careful client
    /// would; run it with [`InMemoryBus::run_until_idle`].
    pub fn submit(&mut self, ffqn: &Ffqn, params: Value) -> Result<ExecutionId, BusError> {
        self.host().check_submission(ffqn, &params)?;
        Ok(self.submit_unchecked(ffqn, params))
    }

    /// Submits a top-level execution without any check, as any Kafka client can: the
    /// processor dead-letters what it refuses and finishes it with an error.
    pub fn submit_unchecked(&mut self, ffqn: &Ffqn, params: Value) -> ExecutionId {
        let id = self.fresh_id();
        self.send(Record::Submission(Submission {
            execution_id: id.clone(),
            ffqn: ffqn.clone(),
            params,
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        }));
        id
    }

    /// Queues any record (processed by [`InMemoryBus::run_until_idle`]).
    pub fn send(&mut self, record: Record) {
        self.queue.push_back(record);
    }

    /// Processes records until none is left (timers are left pending).
    pub async fn run_until_idle(&mut self) -> Result<(), BusError> {
        while self.run_next().await? {}
        Ok(())
    }

    /// Processes the next queued record only (the activity worker's part for an activity
    /// request); `false` when none was queued. Lets a test interleave timers with records.
    pub async fn run_next(&mut self) -> Result<bool, BusError> {
        let Some(record) = self.queue.pop_front() else {
            return Ok(false);
        };
        match record {
            Record::ActivityRequest(request) => self.run_activity(request).await,
            record => self.step_record(record).await?,
        }
        Ok(true)
    }

    /// Records queued and not yet processed, in order.
    pub fn queued(&self) -> impl Iterator<Item = &Record> {
        self.queue.iter()
    }

    /// Fires the earliest pending timer (advancing the clock to it, never backwards) and
    /// runs until idle. `false` when there was no timer.
    pub async fn fire_next_timer(&mut self) -> Result<bool, BusError> {
        if self.timers.is_empty() {
            return Ok(false);
        }
        let timer = self.timers.remove(0);
        self.now = self.now.max(timer.due_at);
        let key = timer.key();
        let schedule = (timer.kind == TimerKind::Schedule).then(|| timer.execution_id.clone());
        let mut batch = Batch::new(self.now);
        let input = Input::TimerDue(timer);
        let stats = self.processor.stats();
        self.rehydrate_for(&mut batch, &input).await?;
        let before = schedule.as_ref().and_then(|id| self.state(id));
        self.processor.step(&mut batch, input).await?;
        // A fired timer is deleted by its batch, as the worker's loop does it.
        batch.effects.push(Effect::DeleteTimer(key));
        if let Some(id) = &schedule
            && before == Some(ExecutionState::Scheduled)
            && self.state(id) != Some(ExecutionState::Scheduled)
        {
            self.fresh_starts += 1;
        }
        self.count_deliveries(stats);
        self.commit(batch, None)?;
        self.run_until_idle().await?;
        Ok(true)
    }

    /// Fires timers until none is left.
    pub async fn fire_all_timers(&mut self) -> Result<(), BusError> {
        while self.fire_next_timer().await? {}
        Ok(())
    }

    fn state(&self, id: &ExecutionId) -> Option<ExecutionState> {
        self.processor.view(id).map(|view| view.state)
    }

    /// What the driver does before a step: rebuild from the store the execution the
    /// processor names. (The store is never behind: every batch is materialised at once.)
    async fn rehydrate_for(&mut self, batch: &mut Batch, input: &Input) -> Result<(), BusError> {
        if let Some((id, _)) = self.processor.needs(batch, input) {
            let stored = self.changelog.get(&id).cloned();
            self.processor.rehydrate(batch, &id, stored).await?;
        }
        Ok(())
    }

    /// Counts the delivery of this step (at most one: one input per batch) as hot or cold.
    fn count_deliveries(&mut self, before: ProcessorStats) {
        let after = self.processor.stats();
        let delivered = after.hot_deliveries - before.hot_deliveries;
        if after.replayed > before.replayed {
            self.cold_deliveries += delivered;
        } else {
            self.hot_deliveries += delivered;
        }
    }

    /// One record for the processor (a submission, a response, an event, a command), as one
    /// batch, read with its Kafka key on that key's partition.
    async fn step_record(&mut self, record: Record) -> Result<(), BusError> {
        let body = match &record {
            Record::Submission(s) => Body::Submission(s.clone()),
            Record::Response { response, .. } => Body::Response(response.clone()),
            Record::Cancel(request) => Body::Cancel(request.clone()),
            Record::Event(event) => Body::Event(event.clone()),
            Record::KeyedEvent(event) => Body::KeyedEvent(event.clone()),
            Record::Correlation(command) => Body::Correlation(command.clone()),
            Record::StubWrite(write) => Body::StubWrite(write.clone()),
            Record::Slot(command) => Body::Slot(command.clone()),
            Record::Query(request) => Body::Query(request.clone()),
            Record::ActivityRequest(_) => {
                return Err(BusError::Inconsistent(
                    "an activity request is not an input of the processor".into(),
                ));
            }
        };
        let key = record.key()?;
        let input = Input::Record {
            index: 0,
            partition: self.processor.partition_of_key(&key),
            key: Some(key),
            size: 0,
            body: Ok(body),
            timestamp: None,
        };
        let mut batch = Batch::new(self.now);
        let stats = self.processor.stats();
        self.rehydrate_for(&mut batch, &input).await?;
        let submitted = match &record {
            Record::Submission(s) if self.state(&s.execution_id).is_none() => {
                Some(s.execution_id.clone())
            }
            _ => None,
        };
        self.processor.step(&mut batch, input).await?;
        if let Some(id) = submitted
            && self
                .state(&id)
                .is_some_and(|state| state != ExecutionState::Scheduled)
            && !batch
                .effects
                .iter()
                .any(|e| matches!(e, Effect::DeadLetter { .. }))
        {
            self.fresh_starts += 1;
        }
        self.count_deliveries(stats);
        self.commit(batch, Some(record))
    }

    /// Routes the effects of a batch (whose one input was `record`), then commits and
    /// materialises it.
    fn commit(&mut self, batch: Batch, record: Option<Record>) -> Result<(), BusError> {
        let Batch {
            now,
            effects,
            touched,
            ..
        } = batch;
        for effect in effects {
            match effect {
                // Stored at the time it happened, as the materialiser stores it.
                Effect::Append {
                    execution_id,
                    seq,
                    entry,
                    at,
                } => self.append(execution_id, seq, entry, to_store_precision(at))?,
                Effect::Submit(submission) => self.queue.push_back(Record::Submission(submission)),
                // The bus runs every activity with its in-process retries: it never spills one.
                Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
                    self.executions
                        .entry(request.execution_id.clone())
                        .or_insert_with(|| StoredExecution {
                            ffqn: request.ffqn.clone(),
                            params: request.params.clone(),
                            created_at: self.now,
                            parent: Some(request.parent_execution_id.clone()),
                            kind: ChildKind::Activity,
                            history: Vec::new(),
                            responses: Vec::new(),
                            result: None,
                            attempts: 0,
                        });
                    self.queue.push_back(Record::ActivityRequest(request));
                }
                Effect::Respond { to, response } => {
                    self.queue.push_back(Record::Response { to, response })
                }
                Effect::CancelExecution(request) => self.queue.push_back(Record::Cancel(request)),
                Effect::Correlation(command) => self.queue.push_back(Record::Correlation(command)),
                Effect::Slot(command) => self.queue.push_back(Record::Slot(command)),
                Effect::PutSlot { key, state } => match state {
                    Some(state) => {
                        self.slots.insert(key, state);
                    }
                    None => {
                        self.slots.remove(&key);
                    }
                },
                Effect::WriteStub(write) => self.queue.push_back(Record::StubWrite(write)),
                Effect::ForwardEvent(event) => self.queue.push_back(Record::Event(event)),
                Effect::ReturnEvent(event) => self.queue.push_back(Record::KeyedEvent(event)),
                Effect::PutRemembered { key, event_id, at } => {
                    let ids = self.remembered.entry(key.clone()).or_default();
                    if at.is_some() {
                        ids.insert(event_id);
                    } else {
                        ids.remove(&event_id);
                        if ids.is_empty() {
                            self.remembered.remove(&key);
                        }
                    }
                }
                Effect::PutCorrelation { key, state } => match state {
                    Some(state) => {
                        self.correlations.insert(key, state);
                    }
                    None => {
                        self.correlations.remove(&key);
                    }
                },
                Effect::PublishResult(finished) => self.published.push(finished),
                Effect::AnswerQuery(answer) => self.answers.push(answer),
                Effect::PutTimer(timer) => {
                    let key = timer.key();
                    self.timers.retain(|t| t.key() != key);
                    let at = self.timers.partition_point(|t| {
                        (t.due_at, &t.timer_id) <= (timer.due_at, &timer.timer_id)
                    });
                    self.timers.insert(at, timer);
                }
                Effect::DeleteTimer(key) => self.delete_timer(&key),
                Effect::CancelActivity { parent, child, .. } => {
                    self.cancel_activity(&parent, &child);
                    self.cancelled.push(CancelledActivity { parent, child })
                }
                // The bus runs each activity to its end at once (a pausing policy answers as
                // the in-process host does): nothing is ever parked here.
                Effect::RetryParkedActivity { .. } => {}
                // Schedules live on `weir.state` and are fired by the driver's loop, which this
                // bus does not run: nothing here makes them.
                Effect::PutSchedule { name, .. } => {
                    return Err(BusError::Inconsistent(format!(
                        "schedule `{name}`: the in-memory bus does not run schedules"
                    )));
                }
                Effect::ScheduleCommand(command) => {
                    return Err(BusError::Inconsistent(format!(
                        "schedule `{}`: the in-memory bus does not run schedules",
                        command.name
                    )));
                }
                // Batch operations live on `weir.state` and turn in the driver's loop, which
                // this bus does not run.
                Effect::PutBatch(_) | Effect::PutBatchOutcomes { .. } | Effect::BatchRequest(_) => {
                    return Err(BusError::Inconsistent(
                        "the in-memory bus does not run batch operations".into(),
                    ));
                }
                // A reset comes from a `ResetRequest` (`weir reset`), which nothing sends this
                // bus.
                Effect::StartReset(start) => {
                    return Err(BusError::Inconsistent(format!(
                        "reset of {} to {}: the in-memory bus does not run resets",
                        start.reset_of.execution_id, start.submission.execution_id
                    )));
                }
                Effect::ResendReset(request) => {
                    return Err(BusError::Inconsistent(format!(
                        "reset of {} to {}: the in-memory bus does not run resets",
                        request.execution_id, request.new_execution_id
                    )));
                }
                // Keyed state is read from `weir.state` at a take-over, which this bus has not.
                Effect::DeadLetterState(state) => {
                    return Err(BusError::Inconsistent(format!(
                        "corrupt state `{}`: the in-memory bus reads no `weir.state`",
                        state.key_text()
                    )));
                }
                Effect::DeadLetter { reason, error, .. } => {
                    let Some(record) = record.clone() else {
                        return Err(BusError::Inconsistent(format!(
                            "a dead letter without an input record: {error}"
                        )));
                    };
                    self.dead_letters.push(DeadLetter {
                        record,
                        reason,
                        error,
                        at: now,
                    });
                }
            }
        }
        self.batches += 1;
        // Committed as job `batches`, and materialised at once: nothing stays pinned.
        self.processor
            .committed(touched.iter(), self.batches, self.now);
        self.processor.evict(self.batches);
        if !self.hot {
            self.forget();
        }
        Ok(())
    }

    fn delete_timer(&mut self, key: &TimerKey) {
        self.timers.retain(|t| t.key() != *key);
    }

    /// Stores a changelog entry and what it says about the execution.
    fn append(
        &mut self,
        id: ExecutionId,
        seq: u64,
        entry: HistoryEntry,
        recorded_at: DateTime<Utc>,
    ) -> Result<(), BusError> {
        let changelog = self.changelog.entry(id.clone()).or_default();
        if seq != changelog.len() as u64 {
            return Err(BusError::Inconsistent(format!(
                "{id}: history version {seq} appended after {} records",
                changelog.len()
            )));
        }
        match &entry {
            HistoryEntry::Created(created) => {
                let execution = StoredExecution {
                    ffqn: created.ffqn.clone(),
                    params: created.params.clone(),
                    created_at: created.created_at,
                    parent: created.parent.as_ref().map(|p| p.execution_id.clone()),
                    kind: created
                        .parent
                        .as_ref()
                        .map_or(ChildKind::Workflow, |p| p.child_kind),
                    history: Vec::new(),
                    responses: Vec::new(),
                    result: None,
                    attempts: 0,
                };
                if self.executions.insert(id.clone(), execution).is_some() {
                    return Err(BusError::Inconsistent(format!("{id} created twice")));
                }
            }
            HistoryEntry::Event { event, .. } => self.stored(&id)?.history.push(event.clone()),
            HistoryEntry::ResponseAppended(response) => {
                self.stored(&id)?.responses.push(response.clone())
            }
            HistoryEntry::Finished { result, .. } => {
                self.stored(&id)?.result = Some(result.clone())
            }
            // The bus runs every execution on its host's registry: builds are not its concern.
            HistoryEntry::Upgraded { .. } => {}
            // Kept in the changelog only (the processor's view holds the buffer).
            HistoryEntry::EventReceived(_)
            | HistoryEntry::CancelRequested { .. }
            | HistoryEntry::Paused { .. }
            | HistoryEntry::Resumed { .. }
            | HistoryEntry::Reset { .. }
            | HistoryEntry::SlotGranted { .. } => {}
        }
        self.changelog.entry(id.clone()).or_default().push((
            HistoryRecord {
                execution_id: id,
                seq,
                entry,
                at: Some(recorded_at),
            },
            recorded_at,
        ));
        Ok(())
    }

    fn stored(&mut self, id: &ExecutionId) -> Result<&mut StoredExecution, BusError> {
        self.executions
            .get_mut(id)
            .ok_or_else(|| BusError::Inconsistent(format!("an entry for {id} before Created")))
    }

    /// The activity worker's part for a cancellation: a request still queued is dropped and
    /// its parent answered `cancelled` (the worker's answer for an attempt that had not
    /// started); an activity answered already is left alone.
    fn cancel_activity(&mut self, parent: &ExecutionId, child: &ExecutionId) {
        let queued = self.queue.iter().position(
            |r| matches!(r, Record::ActivityRequest(request) if request.execution_id == *child),
        );
        let Some(index) = queued else {
            return;
        };
        self.queue.remove(index);
        let result = ExecutionResult::error(
            ExecutionErrorKind::Cancelled,
            format!(
                "cancelled by its parent {parent} (its join set was closed): attempt 1 had not started"
            ),
        );
        if let Some(e) = self.executions.get_mut(child) {
            e.result = Some(result.clone());
        }
        self.queue.push_back(Record::Response {
            to: parent.clone(),
            response: Response::ChildExecutionFinished {
                child_execution_id: child.clone(),
                result,
                ran: None,
            },
        });
    }

    /// The activity worker's part: runs the attempts and answers the parent. An activity no
    /// component exports is answered `unknown-function` at once: the Kafka worker waits for a
    /// worker that runs it first (a rolling deploy), and here there is none to wait for.
    async fn run_activity(&mut self, request: ActivityRequest) {
        let outcome = self
            .host()
            .run_activity(&request.ffqn, &request.params, Cancellation::never())
            .await;
        let (result, attempts) = match outcome {
            Ok(outcome) => (outcome.result, outcome.attempts),
            Err(e) => (
                ExecutionResult::error(
                    ExecutionErrorKind::UnknownFunction,
                    format!("no activity worker runs {}: {e}", request.ffqn),
                ),
                0,
            ),
        };
        if let Some(e) = self.executions.get_mut(&request.execution_id) {
            e.attempts = attempts;
            e.result = Some(result.clone());
        }
        self.queue.push_back(Record::Response {
            to: request.parent_execution_id.clone(),
            response: Response::ChildExecutionFinished {
                child_execution_id: request.execution_id.clone(),
                result,
                ran: None,
            },
        });
    }
}
