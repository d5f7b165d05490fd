//! Comparison of a host call with the recorded event at the cursor, by reference (replay must
//! not clone parameters or results to compare them). Each function checks the event kind
//! first, then the fields in the order of [`Mismatch`]'s variants, and names the first that
//! differs.

use serde_json::Value;

use crate::model::{
    DelayId, EventRequestId, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, JoinSetId,
    JoinSetRequest, PersistValue, ScheduleAt,
};

use super::error::Mismatch;

fn same(differs: bool, mismatch: Mismatch) -> Result<(), Mismatch> {
    if differs { Err(mismatch) } else { Ok(()) }
}

/// `expected` recognises the join set the call creates (without building its id).
pub(crate) fn join_set_create(
    recorded: &HistoryEvent,
    expected: impl FnOnce(&JoinSetId) -> bool,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinSetCreate { join_set_id } => {
            same(!expected(join_set_id), Mismatch::JoinSet)
        }
        _ => Err(Mismatch::Kind),
    }
}

/// The child expected is request `index` of `js` of execution `parent` (compared by structure,
/// so that replay need not build the id).
pub(crate) fn child_request(
    recorded: &HistoryEvent,
    parent: &ExecutionId,
    js: &JoinSetId,
    index: u64,
    ffqn: &Ffqn,
    params: &Value,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request:
                JoinSetRequest::ChildExecutionRequest {
                    child_execution_id,
                    target_ffqn,
                    params: recorded_params,
                    // The child's kind comes from the component registry, not from the
                    // workflow's code: the recorded kind wins (see `Replay::submit`).
                    child_kind: _,
                },
        } => {
            same(join_set_id != js, Mismatch::JoinSet)?;
            let is_expected = child_execution_id.is_child_of(parent)
                && child_execution_id
                    .step()
                    .is_some_and(|s| s.index == index && s.join_set_id == *js);
            same(!is_expected, Mismatch::ChildId)?;
            same(target_ffqn != ffqn, Mismatch::Ffqn)?;
            same(recorded_params != params, Mismatch::Params)
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn delay_request(
    recorded: &HistoryEvent,
    js: &JoinSetId,
    delay: &DelayId,
    timeout: &ScheduleAt,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request:
                JoinSetRequest::DelayRequest {
                    delay_id,
                    timeout: recorded_timeout,
                    ..
                },
        } => {
            same(join_set_id != js, Mismatch::JoinSet)?;
            same(delay_id != delay, Mismatch::DelayId)?;
            same(recorded_timeout != timeout, Mismatch::DelayTimeout)
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn event_request(
    recorded: &HistoryEvent,
    js: &JoinSetId,
    request: &EventRequestId,
    name: &str,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request:
                JoinSetRequest::EventRequest {
                    event_request_id,
                    name: recorded_name,
                },
        } => {
            same(join_set_id != js, Mismatch::JoinSet)?;
            same(event_request_id != request, Mismatch::EventRequestId)?;
            same(recorded_name != name, Mismatch::EventName)
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn join_next(
    recorded: &HistoryEvent,
    js: &JoinSetId,
    closing: bool,
    requested: Option<&Ffqn>,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinNext {
            join_set_id,
            closing: recorded_closing,
            requested_ffqn,
        } => {
            same(join_set_id != js, Mismatch::JoinSet)?;
            same(*recorded_closing != closing, Mismatch::Closing)?;
            same(
                requested_ffqn.as_ref() != requested,
                Mismatch::RequestedFfqn,
            )
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn join_next_too_many(
    recorded: &HistoryEvent,
    js: &JoinSetId,
    requested: Option<&Ffqn>,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::JoinNextTooMany {
            join_set_id,
            requested_ffqn,
        } => {
            same(join_set_id != js, Mismatch::JoinSet)?;
            same(
                requested_ffqn.as_ref() != requested,
                Mismatch::RequestedFfqn,
            )
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn random_u64(recorded: &HistoryEvent, min: u64, max: u64) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::Persist {
            value:
                PersistValue::RandomU64 {
                    min: rmin,
                    max_exclusive,
                    value,
                },
        } => same(
            (*rmin, *max_exclusive) != (min, max) || !(min..max).contains(value),
            Mismatch::RandomValue,
        ),
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn random_string(recorded: &HistoryEvent, min: u64, max: u64) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::Persist {
            value:
                PersistValue::RandomString {
                    min_length,
                    max_length_exclusive,
                    value,
                },
        } => same(
            (*min_length, *max_length_exclusive) != (min, max)
                || !(min..max).contains(&(value.chars().count() as u64)),
            Mismatch::RandomValue,
        ),
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn schedule(
    recorded: &HistoryEvent,
    ffqn: &Ffqn,
    params: &Value,
    intention: &ScheduleAt,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::Schedule {
            ffqn: rffqn,
            params: rparams,
            intention: rintention,
            ..
        } => {
            same(rffqn != ffqn, Mismatch::Ffqn)?;
            same(rparams != params, Mismatch::Params)?;
            same(rintention != intention, Mismatch::ScheduleIntention)
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn stub(
    recorded: &HistoryEvent,
    target: &ExecutionId,
    result: &ExecutionResult,
) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::Stub {
            target_execution_id,
            result: rresult,
            ..
        } => {
            same(target_execution_id != target, Mismatch::ChildId)?;
            same(rresult != result, Mismatch::StubValue)
        }
        _ => Err(Mismatch::Kind),
    }
}

pub(crate) fn correlate(recorded: &HistoryEvent, key: &str) -> Result<(), Mismatch> {
    match recorded {
        HistoryEvent::Correlate { key: rkey } => same(rkey != key, Mismatch::CorrelationKey),
        _ => Err(Mismatch::Kind),
    }
}
