//! What the processor emits ([`Effect`]) into the batch being built ([`Batch`]). The driver
//! encodes each effect and commits the batch in one Kafka transaction; nothing here is
//! encoded or sent.

use super::input::StubWrite;
use crate::concurrency::SlotCommand;
use crate::concurrency::SlotState;
use crate::correlation::CorrelationCommand;
use crate::correlation::CorrelationState;
use crate::correlation::KeyedEvent;
use crate::model::ExecutionId;
use crate::model::Ffqn;
use crate::model::Response;
use crate::records::ActivityRequest;
use crate::records::CancelRequest;
use crate::records::CorruptState;
use crate::records::DlqReason;
use crate::records::ExecutionFinished;
use crate::records::HistoryEntry;
use crate::records::InboundEvent;
use crate::records::ResetRequest;
use crate::records::ResetStart;
use crate::records::Submission;
use crate::rows::TimerKey;
use crate::rows::TimerRow;
use crate::schedule::ScheduleCommand;
use crate::schedule::ScheduleState;
use chrono::DateTime;
use chrono::Utc;
use indexmap::IndexSet;

/// What the processor emits; the driver encodes and commits it.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The changelog entry at `seq` of an execution (`weir.history`, keyed by its id).
    Append {
        execution_id: ExecutionId,
        seq: u64,
        entry: HistoryEntry,
        /// When it happened ([`Batch::at`] when it was appended).
        at: DateTime<Utc>,
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
    /// A parent resumed while it waits for this activity, calling `ffqn`: a retry notice
    /// ([`crate::records::ActivityRetry`]) on its route's topic, keyed by the activity (after
    /// its request, as a cancellation is). A request parked by `on_exhausted = "pause"` takes
    /// it as a fresh budget of attempts; any other ignores it.
    RetryParkedActivity {
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
    /// An event id a correlation key forwarded at `at` (`None`: forgotten, a tombstone), on
    /// `weir.state` (compacted), a record of its own on the key's partition
    /// ([`crate::correlation::RememberedEvent`]).
    PutRemembered {
        key: String,
        event_id: String,
        at: Option<DateTime<Utc>>,
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
    /// The start of an execution made by a reset (`weir.submissions`, keyed by the new
    /// execution, header `weir.kind = reset-start`): its owner creates it from the entries.
    StartReset(ResetStart),
    /// A reset request sent back to the execution it resets (`weir.responses`, keyed by it,
    /// header `weir.kind = reset-execution`): the batch that took it had changed the
    /// execution, whose history the store does not hold yet; taken again later, it is read
    /// from there ([`super::reset`]).
    ResendReset(ResetRequest),
    /// A command about a concurrency slot (`weir.responses`, header `weir.kind = concurrency`):
    /// for the slot's owner (an acquisition or a release, keyed by the slot) or for an
    /// execution's (a grant or a refusal, keyed by the execution); [`crate::concurrency`].
    Slot(SlotCommand),
    /// The new state of a concurrency slot of an owned partition (`None`: idle, forgotten),
    /// on `weir.state` (compacted), keyed by the slot's wire key.
    PutSlot {
        key: String,
        state: Option<SlotState>,
    },
    /// The new state of a batch operation of an owned partition, on `weir.state`
    /// (compacted), keyed `weir:batch:<id>` ([`crate::batch`]).
    PutBatch(Box<crate::batch::BatchState>),
    /// The outcomes of one turn of a batch, on `weir.state`, keyed `weir:batch:<id>:<turn>`
    /// on the batch's partition (header `weir.kind = batch-outcomes`).
    PutBatchOutcomes {
        id: String,
        turn: u64,
        outcomes: Vec<crate::batch::ExecutionOutcome>,
    },
    /// A batch's request for an execution's owner (`weir.responses`, keyed by the execution,
    /// header `weir.kind = pause-execution` or `cancel-execution`): the record `weir pause`
    /// or `weir cancel` sends.
    BatchRequest(crate::batch::BatchRequest),
    /// The answer to a query (`weir.answers`, keyed by the execution; [`crate::query`]).
    AnswerQuery(crate::query::QueryAnswer),
    /// The input record `input` of the batch goes to the DLQ, byte for byte.
    DeadLetter {
        input: usize,
        reason: DlqReason,
        error: String,
    },
    /// A record of `weir.state` that does not decode goes to the DLQ (`undecodable`), byte
    /// for byte ([`super::corrupt_state`]; its key's tombstone follows it).
    DeadLetterState(Box<CorruptState>),
}

/// The effects of one batch, in order, and the executions it touched.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The batch's time: what the rules decide by (timers, deadlines, expiries).
    pub now: DateTime<Utc>,
    /// When what is appended now happened, for the record ([`Effect::Append`]'s `at`, a
    /// finish's `finished_at`): `now`, except while an inline attempt's answer is delivered,
    /// when it is the attempt's end ([`Processor::answer_inline`](super::Processor::answer_inline)).
    /// Never earlier than `now`; nothing decides by it.
    pub at: DateTime<Utc>,
    pub effects: Vec<Effect>,
    pub touched: IndexSet<ExecutionId>,
}

impl Batch {
    pub fn new(now: DateTime<Utc>) -> Self {
        Batch {
            now,
            at: now,
            effects: Vec::new(),
            touched: IndexSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
    }
}
