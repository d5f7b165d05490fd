//! What the processor takes: one [`Input`] at a time, a decoded record ([`Body`]) or a due
//! timer.

use chrono::{DateTime, Utc};

use crate::concurrency::SlotCommand;
use crate::correlation::CorrelationCommand;
use crate::correlation::KeyedEvent;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::model::Ffqn;
use crate::model::Response;
use crate::records::CancelRequest;
use crate::records::DlqReason;
use crate::records::InboundEvent;
use crate::records::PauseRequest;
use crate::records::ResetRequest;
use crate::records::ResetStart;
use crate::records::Submission;
use crate::records::UpgradeRequest;
use crate::rows::TimerRow;
use crate::schedule::ScheduleCommand;

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
    /// A request to pause or resume an execution (`weir pause`, `weir resume`).
    Pause(PauseRequest),
    /// A request to start a new execution from an execution's history (`weir reset`).
    Reset(ResetRequest),
    /// The start of an execution made by a reset.
    ResetStart(ResetStart),
    /// A request to stop an execution (`weir cancel`, or its parent's cancellation).
    Cancel(CancelRequest),
    /// A command about a schedule (`weir schedule`, `weir topology apply`, a finished run).
    Schedule(ScheduleCommand),
    /// A command about a batch operation (`weir batch start`, `weir batch cancel`).
    Batch(crate::batch::BatchCommand),
    /// An event sent to a correlation key (`weir.events`, keyed by the key).
    KeyedEvent(KeyedEvent),
    /// An execution registering a correlation key, or finished (`weir.responses`).
    Correlation(CorrelationCommand),
    /// A workflow writing the value of a stub child of an execution of this partition.
    StubWrite(StubWrite),
    /// A concurrency slot's command (`weir.responses`): an execution acquiring or releasing
    /// one of this partition's slots (keyed by the slot), or a slot granting or refusing one
    /// of this partition's executions (keyed by it).
    Slot(SlotCommand),
    /// A query of an execution (`weir query`; [`crate::query`]), answered on `weir.answers`.
    Query(crate::query::QueryRequest),
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
#[allow(
    clippy::large_enum_variant,
    reason = "records are nearly every input: boxing them would cost an allocation each"
)]
pub enum Input {
    /// A record of `weir.submissions` or `weir.responses`; `index` (the log's handle of the
    /// record, [`crate::driver::PolledRecord`]) names it in [`Effect::DeadLetter`].
    Record {
        index: usize,
        partition: i32,
        key: Option<String>,
        size: usize,
        body: Result<Body, Undecodable>,
        /// The record's Kafka timestamp, if it has one: when its producer sent it (or when
        /// the broker appended it, on a topic with `LogAppendTime`). A submission's is the
        /// execution's `submitted_at`.
        timestamp: Option<DateTime<Utc>>,
    },
    /// A due timer of an owned partition.
    TimerDue(TimerRow),
}
