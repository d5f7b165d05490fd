//! Errors of the engine: nondeterminism, inconsistent input, misuse by the host, and rejected
//! responses. Errors the *workflow* handles (conflicts, all-processed, …) are not here: they
//! are ordinary values in [`super::outcome`].

use std::fmt;

use crate::model::{HistoryEvent, JoinSetId, Response, Version};

/// Which part of a host call differed from the recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mismatch {
    /// A different kind of event (e.g. a child request where a join set creation is recorded).
    Kind,
    JoinSet,
    ChildId,
    Ffqn,
    Params,
    DelayId,
    /// The delay's timeout intention (`in 5s` vs `in 6s`, `in` vs `at`).
    DelayTimeout,
    EventRequestId,
    /// The name of the event waited for.
    EventName,
    ScheduleIntention,
    /// The random draw's kind or range differs, or the recorded value is outside the range.
    RandomValue,
    StubValue,
    CorrelationKey,
    /// `<f>-await-next` for another function, or a plain join-next where an await-next ran.
    RequestedFfqn,
    /// A closing join-next (from closing a join set) against a workflow's own, or vice versa.
    Closing,
    /// The function returned while recorded events were still unprocessed (trimmed history).
    UnprocessedHistory,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mismatch::Kind => "event kind",
            Mismatch::JoinSet => "join set",
            Mismatch::ChildId => "child execution id",
            Mismatch::Ffqn => "function",
            Mismatch::Params => "parameters",
            Mismatch::DelayId => "delay id",
            Mismatch::DelayTimeout => "delay timeout",
            Mismatch::EventRequestId => "event request id",
            Mismatch::EventName => "event name",
            Mismatch::ScheduleIntention => "schedule intention",
            Mismatch::RandomValue => "random value",
            Mismatch::StubValue => "stub value",
            Mismatch::CorrelationKey => "correlation key",
            Mismatch::RequestedFfqn => "requested function",
            Mismatch::Closing => "closing flag",
            Mismatch::UnprocessedHistory => "unprocessed history",
        })
    }
}

/// What the workflow did where the history disagreed.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// The event this call would have recorded had it run fresh at that point (values that
    /// only a first run decides, such as a random draw, are the ones it would draw now).
    Event(HistoryEvent),
    /// The function returned.
    Finish,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Event(e) => write!(f, "{e}"),
            Expected::Finish => f.write_str("return from the function"),
        }
    }
}

/// A host call that does not match the recorded history, or a return with history left over.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "nondeterminism detected at history version {version}: {mismatch} differs; \
     the workflow did {expected}, the history has {recorded}"
)]
pub struct Nondeterminism {
    /// Index of the recorded event that did not match.
    pub version: Version,
    pub mismatch: Mismatch,
    pub expected: Expected,
    pub recorded: HistoryEvent,
}

/// Fatal for the current run. After [`ReplayError::Nondeterminism`] the engine has already
/// finished the execution (see [`super::Replay::finished`]); the others leave it untouched.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Nondeterminism(Box<Nondeterminism>),
    /// The history continues after a join-next whose response is not among the responses
    /// given: the response journal was read incompletely. Retry the load; not the workflow's
    /// fault.
    #[error(
        "the join-next of {join_set_id} at history version {version} has no response, \
         yet the history continues after it: responses are missing"
    )]
    MissingResponse {
        version: Version,
        join_set_id: JoinSetId,
    },
    /// The next response of a join set answers no request made (or a request of the other
    /// kind): inconsistent input.
    #[error("response {response} at history version {version} answers no request of its join set")]
    ResponseWithoutRequest {
        version: Version,
        response: Box<Response>,
    },
    #[error(transparent)]
    Usage(#[from] UsageError),
}

impl ReplayError {
    pub fn as_nondeterminism(&self) -> Option<&Nondeterminism> {
        match self {
            ReplayError::Nondeterminism(n) => Some(n),
            _ => None,
        }
    }
}

/// The host used the engine wrongly; a bug in the host, not in the workflow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("the execution has finished")]
    Finished,
    #[error("join set {0} was not created by this execution")]
    UnknownJoinSet(JoinSetId),
    #[error("join set {0} is closed")]
    JoinSetClosed(JoinSetId),
    #[error("the run is blocked in {blocked}; the host must retry that call, not {call}")]
    RetryMismatch { blocked: String, call: String },
    #[error("{0}")]
    InvalidEventName(String),
    #[error("{0}")]
    InvalidCorrelationKey(String),
    #[error("invalid range [{min}, {max_exclusive}) for {what}")]
    InvalidRange {
        what: &'static str,
        min: u64,
        max_exclusive: u64,
    },
}

/// A response the engine refuses; the worker should dead-letter it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DeliveryError {
    #[error("response {0} is not for this execution")]
    NotForThisExecution(Box<Response>),
    #[error("response {0} answers a request of another kind (child, delay or event)")]
    KindMismatch(Box<Response>),
    /// A live run has made every request it will have made when the response could be
    /// for it: one that answers none is bogus (a buggy or malicious sender).
    #[error("response {0} answers no request the execution made")]
    NoSuchRequest(Box<Response>),
}
