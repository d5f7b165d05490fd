//! Responses: what arrives from outside for an execution's join sets, in arrival order.
//! The arrival order is replay input: the engine consumes a join set's responses in it.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::ids::{DelayId, EventRequestId, ExecutionId, Step};
use super::inbound::EventOutcome;
use super::join_set::JoinSetId;
use super::result::ExecutionResult;

/// How a delay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelayOutcome {
    /// The delay expired.
    Ok,
    /// The delay was cancelled before it expired (its join set was closed).
    Cancelled,
}

/// When the work a [`Response::ChildExecutionFinished`] answers ran: the activity attempt that
/// answered (from its start to its answer), or a child workflow from its creation to its
/// finish. Told by whoever ran it (the workflow worker for an inline attempt, the activity
/// worker, the child's owner); journalled with the response, so a rebuilt history shows the
/// same times. Nothing replay decides depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ran {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl Ran {
    /// How long it ran (zero if the clocks that told the ends disagree).
    pub fn duration(&self) -> chrono::Duration {
        (self.finished_at - self.started_at).max(chrono::Duration::zero())
    }
}

/// A response to a request of one of the execution's join sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    ChildExecutionFinished {
        child_execution_id: ExecutionId,
        result: ExecutionResult,
        /// When it ran, if the answerer told (an external activity may not; a timeout or a
        /// cancellation Weir answers itself did not run).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ran: Option<Ran>,
    },
    DelayFinished {
        delay_id: DelayId,
        outcome: DelayOutcome,
    },
    /// An event for an event request: never on `weir.responses`; the processor journals it
    /// when it matches an event sent to the execution with a wait for it (or cancels the
    /// wait).
    EventDelivered {
        event_request_id: EventRequestId,
        outcome: EventOutcome,
    },
}

impl Response {
    /// The join set and index of the request this answers, or `None` for a child id that is
    /// top-level (which cannot be a response to anything).
    pub fn step(&self) -> Option<&Step> {
        match self {
            Response::ChildExecutionFinished {
                child_execution_id, ..
            } => child_execution_id.step(),
            Response::DelayFinished { delay_id, .. } => Some(delay_id.step()),
            Response::EventDelivered {
                event_request_id, ..
            } => Some(event_request_id.step()),
        }
    }

    pub fn join_set_id(&self) -> Option<&JoinSetId> {
        self.step().map(|s| &s.join_set_id)
    }

    /// The time this response tells of itself: when the child or attempt that answered
    /// finished, if the answerer said. A delay's time is its request's recorded expiry, which
    /// the response does not carry.
    pub fn told_time(&self) -> Option<DateTime<Utc>> {
        match self {
            Response::ChildExecutionFinished { ran, .. } => ran.map(|r| r.finished_at),
            Response::DelayFinished { .. } | Response::EventDelivered { .. } => None,
        }
    }

    /// The answer of child `child_execution_id` with `result`, without saying when it ran.
    pub fn child_finished(child_execution_id: ExecutionId, result: ExecutionResult) -> Response {
        Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ran: None,
        }
    }

    /// Whether this response answers a request of `execution_id`; no allocation.
    pub fn is_for(&self, execution_id: &ExecutionId) -> bool {
        match self {
            Response::ChildExecutionFinished {
                child_execution_id, ..
            } => child_execution_id.is_child_of(execution_id),
            Response::DelayFinished { delay_id, .. } => delay_id.execution_id() == execution_id,
            Response::EventDelivered {
                event_request_id, ..
            } => event_request_id.execution_id() == execution_id,
        }
    }
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            } => write!(f, "ChildExecutionFinished({child_execution_id}, {result})"),
            Response::DelayFinished { delay_id, outcome } => {
                write!(f, "DelayFinished({delay_id}, {outcome:?})")
            }
            Response::EventDelivered {
                event_request_id,
                outcome,
            } => write!(f, "EventDelivered({event_request_id}, {outcome})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn step_and_owner_come_from_the_ids() {
        let parent: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().unwrap();
        let js = JoinSetId::generated(1).unwrap();
        let child = Response::ChildExecutionFinished {
            child_execution_id: parent.child(&js, 2),
            result: ExecutionResult::Ok(json!(1)),
            ran: None,
        };
        assert_eq!(child.join_set_id(), Some(&js));
        assert_eq!(child.step().unwrap().index, 2);
        assert!(child.is_for(&parent));
        assert!(!child.is_for(&parent.child(&js, 2)));
        let delay = Response::DelayFinished {
            delay_id: parent.delay(&js, 3),
            outcome: DelayOutcome::Cancelled,
        };
        assert!(delay.is_for(&parent));
        assert_eq!(delay.step().unwrap().index, 3);
        let orphan = Response::ChildExecutionFinished {
            child_execution_id: parent.clone(),
            result: ExecutionResult::Ok(json!(1)),
            ran: None,
        };
        assert_eq!(orphan.step(), None);
        assert!(!orphan.is_for(&parent));

        for r in [child, delay] {
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(serde_json::from_value::<Response>(v).unwrap(), r);
        }
    }
}
