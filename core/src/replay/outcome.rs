//! What host calls return to the workflow, and what the engine hands to the worker.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{
    ChildKind, DelayId, DelayOutcome, EventOutcome, EventRequestId, ExecutionId, ExecutionResult,
    Ffqn, HistoryEvent, JoinSetId, JoinSetIdError, Version,
};

/// The outcome of a call that may have to wait for a response.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Progress<T> {
    Ready(T),
    /// No response yet. Park the workflow; after delivering responses (see
    /// [`super::Replay::deliver_response`]) retry exactly the same call.
    Blocked(Blocked),
}

impl<T> Progress<T> {
    pub fn is_blocked(&self) -> bool {
        matches!(self, Progress::Blocked(_))
    }

    pub fn ready(self) -> Option<T> {
        match self {
            Progress::Ready(t) => Some(t),
            Progress::Blocked(_) => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Progress<U> {
        match self {
            Progress::Ready(t) => Progress::Ready(f(t)),
            Progress::Blocked(b) => Progress::Blocked(b),
        }
    }
}

/// What a blocked call waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub join_set_id: JoinSetId,
}

/// A response taken from a join set by join-next.
#[derive(Clone, Debug, PartialEq)]
pub enum Joined {
    Child {
        child_execution_id: ExecutionId,
        ffqn: Ffqn,
        result: ExecutionResult,
    },
    Delay {
        delay_id: DelayId,
        outcome: DelayOutcome,
    },
    Event {
        event_request_id: EventRequestId,
        name: String,
        outcome: EventOutcome,
    },
}

/// Join-next on a join set whose every request has been processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("all requests of the join set have been processed")]
pub struct AllProcessed;

/// Why `<f>-await-next` did not return a result of `f`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AwaitNextError {
    #[error("all requests of the join set have been processed")]
    AllProcessed,
    /// The next response was of another function or a delay. It is consumed nevertheless
    /// (a child's result stays available through `get`).
    #[error("expected a response of {requested}, the next response is {actual:?}")]
    FunctionMismatch {
        requested: Ffqn,
        actual: Box<Joined>,
    },
}

/// Why `<f>-get` returned nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    /// Not a child of this execution, or its response has not been processed by a join-next.
    #[error("no processed child with this id")]
    NotFound,
    #[error("the child runs {actual}, not {requested}")]
    FunctionMismatch { requested: Ffqn, actual: Ffqn },
}

/// Why `<f>-stub` wrote nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StubError {
    /// Not a stub-activity child submitted by this execution.
    #[error("no stub activity child with this id")]
    NotFound,
    /// A different result is already there.
    #[error("a different result is already written")]
    Conflict,
}

/// Why a join set could not be created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateJoinSetError {
    #[error("join set {0} already exists")]
    Conflict(JoinSetId),
    #[error(transparent)]
    InvalidName(#[from] JoinSetIdError),
}

/// `sleep` ended early: its delay was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the delay was cancelled")]
pub struct Cancelled;

/// What a response did when delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for its join set. `wakes`: the run is blocked on that join set, so the blocked
    /// call should be retried now.
    Accepted { wakes: bool },
    /// Already delivered (same child or delay id); ignored.
    Duplicate,
}

/// A new history event and its position.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionedEvent {
    pub version: Version,
    pub event: HistoryEvent,
}

/// Something the worker must do because of the run, emitted once: only for calls that ran
/// fresh (never while replaying recorded history), so outputs committed together with the
/// new events that caused them are never repeated by a later replay.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Start a child (workflow → submissions topic, activity → its route; a stub child is
    /// only registered, its result comes from [`Output::StubWrite`]).
    SubmitChild {
        child_execution_id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        kind: ChildKind,
    },
    /// Arm a timer; when due it becomes a `DelayFinished` response.
    RequestDelay {
        delay_id: DelayId,
        expires_at: DateTime<Utc>,
    },
    /// Start a new top-level execution at `at`.
    Schedule {
        execution_id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        at: DateTime<Utc>,
    },
    /// Write the result of a stub activity child (then answer this execution with it).
    StubWrite {
        execution_id: ExecutionId,
        result: ExecutionResult,
    },
    /// Cancel an unawaited activity (or stub) child of a closed join set: `ffqn` is the
    /// function it calls (its route decides where a running attempt is interrupted).
    CancelChild {
        child_execution_id: ExecutionId,
        ffqn: Ffqn,
        kind: ChildKind,
    },
    /// Cancel an unexpired delay of a closed join set.
    CancelDelay { delay_id: DelayId },
    /// Cancel an unanswered wait for an event of a closed join set (an event that comes
    /// later stays buffered for another wait).
    CancelEvent { event_request_id: EventRequestId },
    /// Register the execution for the events of a correlation key (with the key's owner).
    Correlate { key: String },
    /// The execution finished; record it and notify the parent / `weir.results`.
    Finished { result: ExecutionResult },
}

/// Everything a run produced since the last take: commit it in one transaction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub events: Vec<VersionedEvent>,
    pub outputs: Vec<Output>,
}
