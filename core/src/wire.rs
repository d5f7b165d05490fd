//! The wire-address table: where every record Weir writes goes, and what a record read from a
//! topic is. One table, both ways, for every writer and reader of the log:
//!
//! - **Writing**: [`address`] takes an [`Effect`] of the partition processor to its
//!   [`Address`] — the topic (by its [`TopicRole`], or the route of an activity's function),
//!   the key, the [`RecordKind`] and the other headers. The Kafka encoder
//!   (`weir::kafka::encode`), the simulation's Kafka model (`sim::world`) and the in-memory
//!   bus (`weir::wasm::memory`) all route by it; what each of them adds is the value's
//!   encoding (and, in the encoder, the trace context and a DLQ copy's envelope).
//! - **Reading**: [`record_type`] takes a record's topic role and its kind (the header
//!   [`KIND_HEADER`], read by [`RecordKind::of_header`]) to the type of its value. The
//!   workflow worker, the state-topic readers and the simulation decide what a record is by
//!   that one match.
//!
//! Invariants, each held by a test below:
//! - what is written is read back as what it is: for every effect,
//!   `record_type(address.role(), address.kind)` is the type of the effect's value;
//! - a topic's own record type carries no kind; every other type on it carries exactly one,
//!   and one kind never means two types on one topic;
//! - a record is keyed for the partition of its reader: an execution's records by its id, an
//!   answer by the execution it answers, a stub write by the stub's parent, a schedule's by
//!   `schedule:<name>`, a correlation key's by the key (an id it remembers on the key's
//!   partition, [`Key::Within`]), a dead letter by its original's key;
//! - [`address`] matches every [`Effect`] variant without a wildcard, so a new effect does
//!   not compile until it is routed here.
//!
//! Pure: no I/O, no clock (a retry's not-before instant comes with its effect).

use std::fmt;

use serde::Deserialize;

use crate::driver::InputTopic;
use crate::model::{ExecutionId, Ffqn};
use crate::processor::Effect;
use crate::state_key::StateKey;

/// The largest record Weir's producers send (librdkafka's `message.max.bytes`, set explicitly
/// to its default; within the broker's default `max.message.bytes`, 1 048 588). Every record
/// Weir makes is kept within it where it is made: input records are refused above
/// `--max-record-bytes` (which must leave room for the envelope of what they become), and a DLQ
/// copy keeps what fits of its original ([`crate::dlq`]).
pub const MAX_PRODUCED_RECORD_BYTES: usize = 1_000_000;

/// The header that tells a record of another type from the topic's own ([`RecordKind`]).
pub const KIND_HEADER: &str = "weir.kind";
/// On a later attempt of an activity (`attempt > 1`): do not run it before this instant
/// (epoch milliseconds, as decimal text). A workflow worker writes it when an inline attempt
/// failed and is retried by the activity workers ([`crate::inline`]).
pub const NOT_BEFORE_HEADER: &str = "weir.not-before";
/// On a stub write ([`RecordKind::StubWrite`]): the id of the writer's request (its
/// `stub-write` child).
pub const STUB_REQUEST_HEADER: &str = "weir.stub.request";
/// On a stub write ([`RecordKind::StubWrite`]): the stub's function.
pub const STUB_FUNCTION_HEADER: &str = "weir.stub.function";

/// What a topic is used for; each role except [`TopicRole::Activity`] names exactly one topic
/// of a deployment (`topology/topics.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopicRole {
    Submissions,
    Responses,
    /// Events sent into running executions (`Event`, keyed by the target execution).
    Events,
    History,
    Results,
    Dlq,
    /// Requests of the activities of one route (`weir.activity.<route>`).
    Activity,
    /// The schedules' states (`ScheduleState`, keyed `schedule:<name>`) and the correlation
    /// keys' (`CorrelationState`): compacted, and co-partitioned, since an owner restores
    /// them from its own partition.
    State,
    /// Fleet controls (`RoutePause`, keyed `route:<name>`; [`crate::control`]): compacted,
    /// one partition, read whole by every worker.
    Control,
    /// Answers to queries (`QueryAnswer`, keyed by the execution; [`crate::query`]), read by
    /// whoever asked (`weir query`, the API, any Kafka client).
    Answers,
}

impl TopicRole {
    /// Every role.
    pub const ALL: [TopicRole; 10] = [
        TopicRole::Submissions,
        TopicRole::Responses,
        TopicRole::Events,
        TopicRole::History,
        TopicRole::Results,
        TopicRole::Dlq,
        TopicRole::Activity,
        TopicRole::State,
        TopicRole::Control,
        TopicRole::Answers,
    ];

    /// The roles a topology must define exactly once.
    pub const REQUIRED: [TopicRole; 9] = [
        TopicRole::Submissions,
        TopicRole::Responses,
        TopicRole::Events,
        TopicRole::History,
        TopicRole::Results,
        TopicRole::Dlq,
        TopicRole::State,
        TopicRole::Control,
        TopicRole::Answers,
    ];

    /// The role as `topics.toml` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TopicRole::Submissions => "submissions",
            TopicRole::Responses => "responses",
            TopicRole::Events => "events",
            TopicRole::History => "history",
            TopicRole::Results => "results",
            TopicRole::Dlq => "dlq",
            TopicRole::Activity => "activity",
            TopicRole::State => "state",
            TopicRole::Control => "control",
            TopicRole::Answers => "answers",
        }
    }
}

impl fmt::Display for TopicRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<InputTopic> for TopicRole {
    fn from(topic: InputTopic) -> Self {
        match topic {
            InputTopic::Submissions => TopicRole::Submissions,
            InputTopic::Responses => TopicRole::Responses,
            InputTopic::Events => TopicRole::Events,
        }
    }
}

/// The value of [`KIND_HEADER`]: a record that is not of its topic's own type says which it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// An `ActivityCancel` on an activity route's topic.
    Cancel,
    /// A retry notice on an activity route's topic: an `ActivityCancel` record read as an
    /// [`crate::records::ActivityRetry`] (its parent resumed).
    RetryActivity,
    /// An `UpgradeRequest` on `weir.responses`.
    Upgrade,
    /// A `CancelRequest`: on `weir.submissions` (a parent cancelling its child, after the
    /// child's submission) or on `weir.responses` (`weir cancel`).
    CancelExecution,
    /// A `ScheduleCommand` on `weir.responses` (keyed `schedule:<name>`).
    Schedule,
    /// A `CorrelationCommand` on `weir.responses`, a `CorrelationState` on `weir.state`; each
    /// keyed by the correlation key.
    Correlation,
    /// A workflow's write of another execution's stub on `weir.responses`: a `Response`
    /// (`ChildExecutionFinished` of the stub) keyed by the stub's parent, with
    /// [`STUB_REQUEST_HEADER`] and [`STUB_FUNCTION_HEADER`].
    StubWrite,
    /// A `RememberedEvent` on `weir.state`: an event id a correlation key forwarded, keyed
    /// [`StateKey::Remembered`] on the key's partition.
    Remembered,
    /// A `PauseRequest` on `weir.responses` (`weir pause`, `weir resume`).
    PauseExecution,
    /// A `ResetRequest` on `weir.responses` (`weir reset`).
    ResetExecution,
    /// A `ResetStart` on `weir.submissions`: the start of an execution made by a reset.
    ResetStart,
    /// A `SlotCommand` on `weir.responses` (keyed by the slot, or by the execution it
    /// answers), a `SlotState` on `weir.state` (keyed by the slot); [`crate::concurrency`].
    Concurrency,
    /// A `BatchCommand` on `weir.responses`, a `BatchState` on `weir.state`; each keyed
    /// `weir:batch:<id>` ([`crate::batch`]).
    Batch,
    /// A `BatchOutcomes` on `weir.state`: one turn's outcomes of a batch, keyed
    /// `weir:batch:<id>:<turn>` on the batch's partition.
    BatchOutcomes,
    /// A `QueryRequest` on `weir.responses`, keyed by its execution ([`crate::query`]).
    Query,
}

impl RecordKind {
    /// Every kind.
    pub const ALL: [RecordKind; 15] = [
        RecordKind::Cancel,
        RecordKind::RetryActivity,
        RecordKind::Upgrade,
        RecordKind::CancelExecution,
        RecordKind::Schedule,
        RecordKind::Correlation,
        RecordKind::StubWrite,
        RecordKind::Remembered,
        RecordKind::PauseExecution,
        RecordKind::ResetExecution,
        RecordKind::ResetStart,
        RecordKind::Concurrency,
        RecordKind::Batch,
        RecordKind::BatchOutcomes,
        RecordKind::Query,
    ];

    /// The header's value for this kind.
    pub const fn header_value(self) -> &'static [u8] {
        match self {
            RecordKind::Cancel => b"cancel",
            RecordKind::RetryActivity => b"retry-activity",
            RecordKind::Upgrade => b"upgrade",
            RecordKind::CancelExecution => b"cancel-execution",
            RecordKind::Schedule => b"schedule",
            RecordKind::Correlation => b"correlation",
            RecordKind::StubWrite => b"stub-write",
            RecordKind::Remembered => b"remembered",
            RecordKind::PauseExecution => b"pause-execution",
            RecordKind::ResetExecution => b"reset-execution",
            RecordKind::ResetStart => b"reset-start",
            RecordKind::Concurrency => b"concurrency",
            RecordKind::Batch => b"batch",
            RecordKind::BatchOutcomes => b"batch-outcomes",
            RecordKind::Query => b"query",
        }
    }

    /// The kind a record's [`KIND_HEADER`] value names (`None`: the record has no such
    /// header, so it is of its topic's own type).
    pub fn of_header(value: Option<&[u8]>) -> Result<Option<RecordKind>, KindError> {
        let Some(value) = value else {
            return Ok(None);
        };
        RecordKind::ALL
            .into_iter()
            .find(|kind| kind.header_value() == value)
            .map(Some)
            .ok_or_else(|| KindError::Unknown {
                value: String::from_utf8_lossy(value).into_owned(),
            })
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.header_value()))
    }
}

/// The type of a record's value (its Avro record; `schemas/avro/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordType {
    Submission,
    CancelRequest,
    UpgradeRequest,
    PauseRequest,
    ResetRequest,
    ResetStart,
    Response,
    /// A `Response` written as another execution's stub value (with its stub headers).
    StubWrite,
    ScheduleCommand,
    CorrelationCommand,
    SlotCommand,
    BatchCommand,
    /// An event: an `InboundEvent` for an execution or a `KeyedEvent` for a correlation key,
    /// one union on `weir.events`, told apart by its target.
    Event,
    HistoryRecord,
    ExecutionFinished,
    DlqEnvelope,
    ScheduleState,
    CorrelationState,
    RememberedEvent,
    SlotState,
    BatchState,
    BatchOutcomes,
    ActivityRequest,
    ActivityCancel,
    /// A retry notice ([`crate::records::ActivityRetry`]), written as an `ActivityCancel`.
    ActivityRetry,
    /// A paused route on `weir.control` ([`crate::control::RoutePause`]; a tombstone when
    /// resumed).
    RoutePause,
    /// A query of an execution on `weir.responses` ([`crate::query`]).
    QueryRequest,
    /// The answer to a query, on `weir.answers`.
    QueryAnswer,
}

/// Why a record's kind cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("header `{KIND_HEADER}` = `{value}` names no kind of record Weir knows")]
    Unknown { value: String },
    #[error(
        "a record of kind `{kind}` (header `{KIND_HEADER}`) does not belong on the {role} topic"
    )]
    OffTopic { role: TopicRole, kind: RecordKind },
}

/// What a record on a topic of `role` with `kind` holds: the reading half of the table.
pub fn record_type(role: TopicRole, kind: Option<RecordKind>) -> Result<RecordType, KindError> {
    use RecordKind as K;
    use RecordType as T;
    use TopicRole as R;
    Ok(match (role, kind) {
        (R::Submissions, None) => T::Submission,
        (R::Submissions, Some(K::CancelExecution)) => T::CancelRequest,
        (R::Submissions, Some(K::ResetStart)) => T::ResetStart,
        (R::Responses, None) => T::Response,
        (R::Responses, Some(K::CancelExecution)) => T::CancelRequest,
        (R::Responses, Some(K::Upgrade)) => T::UpgradeRequest,
        (R::Responses, Some(K::PauseExecution)) => T::PauseRequest,
        (R::Responses, Some(K::ResetExecution)) => T::ResetRequest,
        (R::Responses, Some(K::Schedule)) => T::ScheduleCommand,
        (R::Responses, Some(K::Correlation)) => T::CorrelationCommand,
        (R::Responses, Some(K::StubWrite)) => T::StubWrite,
        (R::Responses, Some(K::Concurrency)) => T::SlotCommand,
        (R::Responses, Some(K::Batch)) => T::BatchCommand,
        (R::Responses, Some(K::Query)) => T::QueryRequest,
        (R::Events, None) => T::Event,
        (R::History, None) => T::HistoryRecord,
        (R::Results, None) => T::ExecutionFinished,
        (R::Dlq, None) => T::DlqEnvelope,
        (R::State, None) => T::ScheduleState,
        (R::State, Some(K::Correlation)) => T::CorrelationState,
        (R::State, Some(K::Remembered)) => T::RememberedEvent,
        (R::State, Some(K::Concurrency)) => T::SlotState,
        (R::State, Some(K::Batch)) => T::BatchState,
        (R::State, Some(K::BatchOutcomes)) => T::BatchOutcomes,
        (R::Activity, None) => T::ActivityRequest,
        (R::Activity, Some(K::Cancel)) => T::ActivityCancel,
        (R::Activity, Some(K::RetryActivity)) => T::ActivityRetry,
        (R::Control, None) => T::RoutePause,
        (R::Answers, None) => T::QueryAnswer,
        (role, Some(kind)) => return Err(KindError::OffTopic { role, kind }),
    })
}

/// What a record of the state topic of `record` type holds (`None`: not a state).
pub fn state_of(record: RecordType) -> Option<crate::records::StateOf> {
    use crate::records::StateOf;
    match record {
        RecordType::ScheduleState => Some(StateOf::Schedule),
        RecordType::CorrelationState => Some(StateOf::Correlation),
        RecordType::RememberedEvent => Some(StateOf::Remembered),
        RecordType::SlotState => Some(StateOf::Slot),
        RecordType::BatchState => Some(StateOf::Batch),
        _ => None,
    }
}

/// The topic a record goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// The one topic of this role (never [`TopicRole::Activity`]).
    Topic(TopicRole),
    /// The request topic of the route that serves this function's interface
    /// ([`TopicRole::Activity`]; `topology/routes.toml`).
    Route(Ffqn),
}

impl Destination {
    pub fn role(&self) -> TopicRole {
        match self {
            Destination::Topic(role) => *role,
            Destination::Route(_) => TopicRole::Activity,
        }
    }
}

/// A record's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// This key.
    Exactly(String),
    /// The key of the batch's input at this index (a dead letter keeps its original's key,
    /// none as empty).
    OfInput(usize),
    /// `key`, on the partition of `partition_of` rather than its own (a record that must be
    /// read with another key's: an id a correlation key remembers, with the key's state).
    Within { key: String, partition_of: String },
}

impl Key {
    /// The key of the record, for a key that does not name an input.
    pub fn exact(&self) -> Option<&str> {
        match self {
            Key::Exactly(key) | Key::Within { key, .. } => Some(key),
            Key::OfInput(_) => None,
        }
    }

    /// The key whose partition the record goes to (its own, unless [`Key::Within`]); `None`
    /// for an input's key.
    pub fn partitioned_by(&self) -> Option<&str> {
        match self {
            Key::Exactly(key) => Some(key),
            Key::Within { partition_of, .. } => Some(partition_of),
            Key::OfInput(_) => None,
        }
    }
}

/// Where a record goes and what it carries besides its value: the writing half of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub destination: Destination,
    pub key: Key,
    /// Its [`KIND_HEADER`], when its value is not of its topic's own type.
    pub kind: Option<RecordKind>,
    /// The headers it carries besides [`KIND_HEADER`].
    pub headers: Vec<(&'static str, Vec<u8>)>,
}

impl Address {
    pub fn role(&self) -> TopicRole {
        self.destination.role()
    }

    /// Every header of the record: [`KIND_HEADER`] (when it has a kind) first.
    pub fn all_headers(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        self.kind
            .map(|kind| (KIND_HEADER, kind.header_value()))
            .into_iter()
            .chain(
                self.headers
                    .iter()
                    .map(|(name, value)| (*name, value.as_slice())),
            )
    }

    fn to(role: TopicRole, key: impl ToString) -> Self {
        Address {
            destination: Destination::Topic(role),
            key: Key::Exactly(key.to_string()),
            kind: None,
            headers: Vec::new(),
        }
    }

    fn of_kind(mut self, kind: RecordKind) -> Self {
        self.kind = Some(kind);
        self
    }
}

/// Why an effect has no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("a stub write of {target}, which is nobody's child (the processor answers those)")]
    StubWithoutParent { target: ExecutionId },
}

/// Who serves an activity route, as far as what is written to its topic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteService {
    /// Served by a service outside Weir (not by Weir's activity workers).
    pub external: bool,
    /// An external service that asks to hear of cancellations (`cancel_notices`).
    pub cancel_notices: bool,
}

impl RouteService {
    /// Whether a cancelled activity of the route is written to its topic: a route Weir
    /// serves hears of it; an external one only if it asks (a service written before reads
    /// requests only). Either way the parent ignores a late answer.
    pub fn hears_cancellations(self) -> bool {
        !self.external || self.cancel_notices
    }

    /// Whether the record at `address`, on a route served so, is written at all. A retry
    /// notice goes only to a route Weir serves (only its activity worker parks a request).
    pub fn takes(self, address: &Address) -> bool {
        match address.kind {
            Some(RecordKind::Cancel) => self.hears_cancellations(),
            Some(RecordKind::RetryActivity) => !self.external,
            _ => true,
        }
    }
}

/// The address of an activity worker's answer to `parent` (the activity core's
/// `Outgoing::Answer`): on `weir.responses`, keyed by the parent, as a workflow worker's
/// [`Effect::Respond`] is, so that it lands on the partition of its owner.
pub fn answer(parent: &ExecutionId) -> Address {
    Address::to(TopicRole::Responses, parent)
}

/// The address of an activity worker's pause of the parent of a request it parked (the
/// activity core's `Outgoing::Pause`): on `weir.responses`, keyed by the parent, of kind
/// `pause-execution`, as `weir pause` writes it.
pub fn pause(parent: &ExecutionId) -> Address {
    Address::to(TopicRole::Responses, parent).of_kind(RecordKind::PauseExecution)
}

/// The address of the record `effect` writes; `None` for an effect that writes no record (a
/// timer change: the store keeps timers).
pub fn address(effect: &Effect) -> Result<Option<Address>, AddressError> {
    use TopicRole as R;
    let address = match effect {
        Effect::Append { execution_id, .. } => Address::to(R::History, execution_id),
        Effect::Submit(submission) => Address::to(R::Submissions, &submission.execution_id),
        Effect::RequestActivity(request) => Address {
            destination: Destination::Route(request.ffqn.clone()),
            key: Key::Exactly(request.execution_id.to_string()),
            kind: None,
            headers: Vec::new(),
        },
        Effect::RetryActivity {
            request,
            not_before,
        } => Address {
            destination: Destination::Route(request.ffqn.clone()),
            key: Key::Exactly(request.execution_id.to_string()),
            kind: None,
            headers: vec![(
                NOT_BEFORE_HEADER,
                not_before.timestamp_millis().to_string().into_bytes(),
            )],
        },
        Effect::Respond { to, .. } => answer(to),
        Effect::PublishResult(finished) => Address::to(R::Results, &finished.execution_id),
        Effect::AnswerQuery(answer) => Address::to(R::Answers, &answer.execution_id),
        Effect::PutTimer(_) | Effect::DeleteTimer(_) => return Ok(None),
        // Keyed by the activity: on its request's partition, after it.
        Effect::CancelActivity { child, ffqn, .. } => Address {
            destination: Destination::Route(ffqn.clone()),
            key: Key::Exactly(child.to_string()),
            kind: Some(RecordKind::Cancel),
            headers: Vec::new(),
        },
        Effect::RetryParkedActivity { child, ffqn, .. } => Address {
            destination: Destination::Route(ffqn.clone()),
            key: Key::Exactly(child.to_string()),
            kind: Some(RecordKind::RetryActivity),
            headers: Vec::new(),
        },
        // On the submissions topic, after the child's own submission (same key, same
        // partition, a later offset): a child cannot see its cancellation before it exists.
        Effect::CancelExecution(request) => {
            Address::to(R::Submissions, &request.execution_id).of_kind(RecordKind::CancelExecution)
        }
        // Keyed by the new execution: on its partition, where its owner creates it.
        Effect::StartReset(start) => Address::to(R::Submissions, &start.submission.execution_id)
            .of_kind(RecordKind::ResetStart),
        // Back to the execution reset, which reads its history once this batch is stored.
        Effect::ResendReset(request) => {
            Address::to(R::Responses, &request.execution_id).of_kind(RecordKind::ResetExecution)
        }
        Effect::PutSchedule { name, .. } => Address::to(R::State, StateKey::schedule(name)),
        Effect::PutBatch(state) => {
            Address::to(R::State, StateKey::Batch(state.id.clone())).of_kind(RecordKind::Batch)
        }
        // One record a turn, on the batch's partition: read with the batch's state.
        Effect::PutBatchOutcomes { id, turn, .. } => {
            let batch = StateKey::Batch(id.clone()).to_string();
            Address {
                destination: Destination::Topic(R::State),
                key: Key::Within {
                    key: format!("{batch}:{turn}"),
                    partition_of: batch,
                },
                kind: Some(RecordKind::BatchOutcomes),
                headers: Vec::new(),
            }
        }
        // The records `weir pause` / `weir cancel` send, on the execution's partition.
        Effect::BatchRequest(crate::batch::BatchRequest::Pause(r)) => {
            Address::to(R::Responses, &r.execution_id).of_kind(RecordKind::PauseExecution)
        }
        Effect::BatchRequest(crate::batch::BatchRequest::Cancel(r)) => {
            Address::to(R::Responses, &r.execution_id).of_kind(RecordKind::CancelExecution)
        }
        Effect::BatchRequest(crate::batch::BatchRequest::Reset(r)) => {
            Address::to(R::Responses, &r.execution_id).of_kind(RecordKind::ResetExecution)
        }
        Effect::ScheduleCommand(command) => {
            Address::to(R::Responses, StateKey::schedule(&command.name))
                .of_kind(RecordKind::Schedule)
        }
        Effect::Correlation(command) => {
            Address::to(R::Responses, &command.key).of_kind(RecordKind::Correlation)
        }
        // The kind tells a key's state from a schedule's, and rides on its tombstone too.
        Effect::PutCorrelation { key, .. } => {
            Address::to(R::State, key).of_kind(RecordKind::Correlation)
        }
        // Keyed by the key and the id, on the key's partition: read with the key's state.
        Effect::PutRemembered { key, event_id, .. } => Address {
            destination: Destination::Topic(R::State),
            key: Key::Within {
                key: StateKey::Remembered {
                    key: key.clone(),
                    event_id: event_id.clone(),
                }
                .to_string(),
                partition_of: key.clone(),
            },
            kind: Some(RecordKind::Remembered),
            headers: Vec::new(),
        },
        // To a slot, keyed by it; to an execution (a grant), keyed by the execution.
        Effect::Slot(command) => {
            Address::to(R::Responses, command.key()).of_kind(RecordKind::Concurrency)
        }
        Effect::PutSlot { key, .. } => Address::to(R::State, key).of_kind(RecordKind::Concurrency),
        // For the holder, keyed by it (`correlation_key` set).
        Effect::ForwardEvent(event) => Address::to(R::Events, &event.target),
        // Back to its key from a finished holder (`returned_by` set), keyed by the key.
        Effect::ReturnEvent(event) => Address::to(R::Events, &event.key),
        // For the owner of the stub's parent, which takes it by the stub rules.
        Effect::WriteStub(write) => {
            let parent = write
                .target
                .parent()
                .ok_or_else(|| AddressError::StubWithoutParent {
                    target: write.target.clone(),
                })?;
            let mut address = Address::to(R::Responses, parent).of_kind(RecordKind::StubWrite);
            address.headers = vec![
                (STUB_REQUEST_HEADER, write.request.to_string().into_bytes()),
                (STUB_FUNCTION_HEADER, write.ffqn.to_string().into_bytes()),
            ];
            address
        }
        Effect::DeadLetter { input, .. } => Address {
            destination: Destination::Topic(R::Dlq),
            key: Key::OfInput(*input),
            kind: None,
            headers: Vec::new(),
        },
        Effect::DeadLetterState(state) => Address {
            destination: Destination::Topic(R::Dlq),
            key: Key::Exactly(state.key_text()),
            kind: None,
            headers: Vec::new(),
        },
    };
    Ok(Some(address))
}

/// One effect of each variant, for the tests that hold every router to [`address`] (here,
/// in the simulation and in the worker's encoder).
#[cfg(any(test, feature = "test-util"))]
pub mod examples {
    use chrono::{DateTime, Utc};
    use serde_json::json;

    use crate::concurrency::{Slot, SlotAction, SlotCommand, SlotState};
    use crate::correlation::{CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent};
    use crate::model::{ExecutionId, ExecutionResult, Ffqn, Response};
    use crate::processor::{CorruptState, Effect, StubWrite};
    use crate::records::{
        ActivityRequest, CancelRequest, DlqReason, ExecutionFinished, HistoryEntry, InboundEvent,
        ReceivedEvent, ResetOf, ResetRequest, ResetStart, ResetThen, Submission,
    };
    use crate::rows::{TimerKind, TimerRow};
    use crate::schedule::{ScheduleAction, ScheduleCommand};

    /// How many variants [`Effect`] has; [`variant`] numbers them.
    pub const EFFECT_VARIANTS: usize = 29;

    /// The number of `effect`'s variant, below [`EFFECT_VARIANTS`] (no wildcard: a new
    /// variant does not compile until it is numbered, and then the examples must have it).
    pub fn variant(effect: &Effect) -> usize {
        match effect {
            Effect::Append { .. } => 0,
            Effect::Submit(_) => 1,
            Effect::RequestActivity(_) => 2,
            Effect::RetryActivity { .. } => 3,
            Effect::Respond { .. } => 4,
            Effect::PublishResult(_) => 5,
            Effect::PutTimer(_) => 6,
            Effect::DeleteTimer(_) => 7,
            Effect::CancelActivity { .. } => 8,
            Effect::CancelExecution(_) => 9,
            Effect::PutSchedule { .. } => 10,
            Effect::ScheduleCommand(_) => 11,
            Effect::Correlation(_) => 12,
            Effect::PutCorrelation { .. } => 13,
            Effect::ForwardEvent(_) => 14,
            Effect::ReturnEvent(_) => 15,
            Effect::WriteStub(_) => 16,
            Effect::DeadLetter { .. } => 17,
            Effect::DeadLetterState(_) => 18,
            Effect::PutRemembered { .. } => 19,
            Effect::StartReset(_) => 20,
            Effect::ResendReset(_) => 21,
            Effect::Slot(_) => 22,
            Effect::PutSlot { .. } => 23,
            Effect::PutBatch(_) => 24,
            Effect::PutBatchOutcomes { .. } => 25,
            Effect::BatchRequest(_) => 26,
            Effect::RetryParkedActivity { .. } => 27,
            Effect::AnswerQuery(_) => 28,
        }
    }

    fn id(text: &str) -> ExecutionId {
        text.parse().expect("an execution id")
    }

    fn ffqn(text: &str) -> Ffqn {
        text.parse().expect("a function name")
    }

    /// A parent, its activity child and its stub child.
    pub const PARENT: &str = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    pub const ACTIVITY: &str = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV.g:1_1";
    pub const STUB: &str = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV.g:2_1";
    /// The execution that writes the stub, and its `stub-write` request.
    pub const WRITER: &str = "E_01BX5ZZKBKACTAV9WEVGEMMVRZ";
    pub const WRITE_REQUEST: &str = "E_01BX5ZZKBKACTAV9WEVGEMMVRZ.g:1_1";
    /// The activity's function (its interface must have a route).
    pub const ACTIVITY_FFQN: &str = "weir-examples:compute/math.fibo";
    pub const CORRELATION_KEY: &str = "payment:order-42";
    pub const SCHEDULE: &str = "nightly";
    /// The execution a reset of [`PARENT`] starts, and a child of it.
    pub const RESET_TO: &str = "E_01CX5ZZKBKACTAV9WEVGEMMVRZ";
    pub const RESET_CHILD: &str = "E_01CX5ZZKBKACTAV9WEVGEMMVRZ.g:1_1";
    /// A concurrency key.
    pub const CONCURRENCY_KEY: &str = "customer-42";

    /// At least one effect of every variant (two of `PutCorrelation` and of `PutRemembered`:
    /// a record and a tombstone), each with values the codecs accept, at `at`.
    pub fn one_of_each(at: DateTime<Utc>) -> Vec<Effect> {
        let parent = id(PARENT);
        let activity = id(ACTIVITY);
        let request = ActivityRequest {
            execution_id: activity.clone(),
            parent_execution_id: parent.clone(),
            ffqn: ffqn(ACTIVITY_FFQN),
            params: json!([10]),
            attempt: 1,
            timeout_millis: None,
            deadline: None,
        };
        let result = ExecutionResult::Ok(json!(55));
        let event = ReceivedEvent {
            event_id: "e-1".into(),
            name: "paid".into(),
            payload: json!({"amount": 1250}),
        };
        vec![
            Effect::Append {
                execution_id: parent.clone(),
                seq: 3,
                entry: HistoryEntry::Finished {
                    result: result.clone(),
                    finished_at: at,
                },
                at,
            },
            Effect::Submit(Submission {
                execution_id: id(WRITER),
                ffqn: ffqn("weir-examples:workflows/workflow.fibo"),
                params: json!([10]),
                parent: None,
                scheduled_at: None,
                correlation_id: None,
                metadata: Default::default(),
                deadline: None,
                concurrency: Some(crate::concurrency::ConcurrencyKey {
                    key: CONCURRENCY_KEY.into(),
                    limit: Some(3),
                }),
                tenant: Some("acme".into()),
            }),
            Effect::RequestActivity(request.clone()),
            Effect::RetryActivity {
                request: ActivityRequest {
                    attempt: 2,
                    ..request
                },
                not_before: at,
            },
            Effect::Respond {
                to: parent.clone(),
                response: Response::ChildExecutionFinished {
                    child_execution_id: activity.clone(),
                    result: result.clone(),
                    ran: Some(crate::model::Ran {
                        started_at: at - chrono::Duration::milliseconds(1_250),
                        finished_at: at,
                    }),
                },
            },
            Effect::PublishResult(ExecutionFinished {
                execution_id: parent.clone(),
                ffqn: ffqn("weir-examples:workflows/workflow.fibo"),
                result: result.clone(),
                finished_at: at,
                correlation_id: None,
            }),
            Effect::PutTimer(TimerRow {
                kafka_partition: 0,
                due_at: at,
                timer_id: "delay".into(),
                execution_id: parent.clone(),
                kind: TimerKind::Delay,
            }),
            Effect::DeleteTimer(crate::rows::TimerKey {
                kafka_partition: 0,
                due_at: at,
                timer_id: "delay".into(),
            }),
            Effect::CancelActivity {
                parent: parent.clone(),
                child: activity.clone(),
                ffqn: ffqn(ACTIVITY_FFQN),
            },
            Effect::RetryParkedActivity {
                parent: parent.clone(),
                child: activity.clone(),
                ffqn: ffqn(ACTIVITY_FFQN),
            },
            Effect::AnswerQuery(crate::query::QueryAnswer {
                query_id: "q-1".into(),
                execution_id: parent.clone(),
                outcome: Ok(json!({"done": 3})),
                version: 7,
                answered_at: at,
            }),
            Effect::CancelExecution(CancelRequest {
                execution_id: activity.clone(),
                reason: "its parent was cancelled".into(),
                terminate: false,
                requested_at: at,
                waited_until: None,
            }),
            Effect::PutSchedule {
                name: SCHEDULE.into(),
                state: None,
            },
            Effect::ScheduleCommand(ScheduleCommand {
                name: SCHEDULE.into(),
                command_id: "c-1".into(),
                action: ScheduleAction::RunFinished(parent.clone()),
                sent_at: at,
            }),
            Effect::Correlation(CorrelationCommand {
                key: CORRELATION_KEY.into(),
                execution_id: parent.clone(),
                action: CorrelationAction::Register,
                sent_at: at,
            }),
            Effect::PutCorrelation {
                key: CORRELATION_KEY.into(),
                state: Some(CorrelationState {
                    key: CORRELATION_KEY.into(),
                    holders: vec![parent.clone()],
                    buffered: Vec::new(),
                    waits_until: None,
                    cancel: None,
                }),
            },
            Effect::PutCorrelation {
                key: CORRELATION_KEY.into(),
                state: None,
            },
            Effect::PutRemembered {
                key: CORRELATION_KEY.into(),
                event_id: "ev-1".into(),
                at: Some(at),
            },
            Effect::PutRemembered {
                key: CORRELATION_KEY.into(),
                event_id: "ev-1".into(),
                at: None,
            },
            Effect::ForwardEvent(InboundEvent {
                event: event.clone(),
                target: parent.clone(),
                sent_at: at,
                correlation_key: Some(CORRELATION_KEY.into()),
                waited_until: None,
            }),
            Effect::ReturnEvent(KeyedEvent {
                event,
                key: CORRELATION_KEY.into(),
                sent_at: at,
                returned_by: Some(parent.clone()),
            }),
            Effect::WriteStub(StubWrite {
                request: id(WRITE_REQUEST),
                target: id(STUB),
                ffqn: ffqn("weir-examples:approval/approval.decide"),
                result,
            }),
            Effect::DeadLetter {
                input: 0,
                reason: DlqReason::Undecodable,
                error: "not Avro".into(),
            },
            Effect::DeadLetterState(Box::new(CorruptState {
                partition: 0,
                offset: 7,
                timestamp_millis: Some(at.timestamp_millis()),
                of: crate::processor::StateOf::Correlation,
                key: Some(CORRELATION_KEY.as_bytes().to_vec()),
                value: b"\xC3\x01not a state".to_vec(),
                headers: vec![("weir.kind".into(), Some(b"correlation".to_vec()))],
                error: "the body does not decode".into(),
            })),
            Effect::StartReset(ResetStart {
                submission: Submission {
                    execution_id: id(RESET_TO),
                    ffqn: ffqn("weir-examples:workflows/workflow.fibo"),
                    params: json!([10]),
                    parent: None,
                    scheduled_at: None,
                    correlation_id: None,
                    metadata: [("team".to_owned(), "shop".to_owned())].into(),
                    deadline: None,
                    concurrency: None,
                    tenant: None,
                },
                reset_of: ResetOf {
                    execution_id: parent.clone(),
                    seq: 1,
                },
                entries: vec![HistoryEntry::ResponseAppended(Response::child_finished(
                    id(RESET_CHILD),
                    ExecutionResult::Ok(json!(55)),
                ))],
            }),
            Effect::ResendReset(ResetRequest {
                execution_id: parent.clone(),
                to: crate::records::ResetPoint::Seq(1),
                new_execution_id: id(RESET_TO),
                then: ResetThen::Cancel,
                reason: "a bad deploy".into(),
                requested_at: at,
            }),
            // An acquisition for the slot; a grant for the execution.
            Effect::Slot(SlotCommand {
                slot: Slot::Key(CONCURRENCY_KEY.into()),
                execution_id: id(WRITER),
                action: SlotAction::Acquire { limit: 2 },
                sent_at: at,
            }),
            Effect::Slot(SlotCommand {
                slot: Slot::Function(ffqn("weir-examples:workflows/workflow.fibo")),
                execution_id: id(WRITER),
                action: SlotAction::Grant,
                sent_at: at,
            }),
            Effect::PutSlot {
                key: Slot::Key(CONCURRENCY_KEY.into()).wire_key(),
                state: Some(SlotState {
                    slot: Slot::Key(CONCURRENCY_KEY.into()),
                    limit: 2,
                    holders: vec![id(WRITER)],
                    waiting: vec![id(RESET_TO)],
                    updated_at: at,
                }),
            },
            Effect::PutSlot {
                key: Slot::Key(CONCURRENCY_KEY.into()).wire_key(),
                state: None,
            },
            Effect::PutBatch(Box::new(batch_state(at))),
            Effect::PutBatchOutcomes {
                id: BATCH.into(),
                turn: 1,
                outcomes: vec![crate::batch::ExecutionOutcome {
                    execution_id: parent.clone(),
                    outcome: crate::batch::Outcome::Acted,
                }],
            },
            Effect::BatchRequest(crate::batch::request(
                BATCH,
                &batch_state(at).spec,
                &parent,
                at,
            )),
        ]
    }

    /// A batch operation's id.
    pub const BATCH: &str = "pause-fibo";

    /// A running batch that paused one execution of a function.
    pub fn batch_state(at: DateTime<Utc>) -> crate::batch::BatchState {
        use crate::batch::{
            BatchAction, BatchCounts, BatchFilter, BatchSpec, BatchState, BatchStatus,
        };
        BatchState {
            id: BATCH.into(),
            spec: BatchSpec {
                filter: BatchFilter {
                    by: crate::rows::ListBy::Function(
                        "weir-examples:workflows/workflow.fibo".into(),
                    ),
                    state: Some(crate::rows::ExecutionState::Running),
                    outcome: None,
                    created_from: None,
                    created_until: Some(at),
                },
                action: BatchAction::Pause,
                per_second: 10.0,
                reset: crate::batch::BatchReset::default(),
                reason: "a bad deploy".into(),
            },
            status: BatchStatus::Running,
            started_at: at,
            ended_at: None,
            cursor: Some(crate::rows::ListCursor {
                created_at: at,
                execution_id: id(PARENT),
            }),
            counts: BatchCounts {
                acted: 1,
                finished: 0,
                already: 0,
                children: 0,
            },
            tat: Some(at),
            turns: 1,
            updated_at: at,
        }
    }
}

#[cfg(test)]
mod tests;
