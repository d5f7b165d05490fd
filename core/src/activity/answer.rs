//! The size gate of an activity's answer: an answer no producer could send (whose commit
//! would fail for ever, issue 11 item 7) is replaced by a `value-too-large` error that says
//! why, so the parent hears and the partition goes on. One rule for the Kafka activity worker
//! and the simulated one, which apply it to the answer as they encode it.

use crate::model::{ExecutionErrorKind, ExecutionResult, Ffqn, Response};
use crate::processor::ENVELOPE_ALLOWANCE;
use crate::wire::MAX_PRODUCED_RECORD_BYTES;

/// The largest encoded answer an activity sends: what a producer may send, less room for its
/// key and framing.
pub const MAX_ANSWER_BYTES: usize = MAX_PRODUCED_RECORD_BYTES - ENVELOPE_ALLOWANCE;

/// What to send instead of `response`, encoded in `encoded` bytes, if that is over `limit`
/// ([`MAX_ANSWER_BYTES`] in production): the same answer with a `value-too-large` error. `None`:
/// `response` fits (or is no activity's result, which carries no value of the activity's).
pub fn too_large(
    response: &Response,
    ffqn: &Ffqn,
    encoded: usize,
    limit: usize,
) -> Option<Response> {
    let Response::ChildExecutionFinished {
        child_execution_id, ..
    } = response
    else {
        return None;
    };
    if encoded <= limit {
        return None;
    }
    let reason = format!(
        "the result of activity {child_execution_id} ({ffqn}) is {encoded} bytes encoded; an \
         answer carries at most {limit}"
    );
    Some(Response::child_finished(
        child_execution_id.clone(),
        ExecutionResult::error(ExecutionErrorKind::ValueTooLarge, reason),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ExecutionId;

    #[test]
    fn an_answer_over_the_limit_becomes_value_too_large_and_one_within_it_is_sent() {
        let child = ExecutionId::top_level(ulid::Ulid::nil());
        let ffqn: Ffqn = "app:p/i.f".parse().expect("ffqn");
        let response = Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result: ExecutionResult::Ok(serde_json::json!("x")),
            ran: None,
        };
        assert_eq!(too_large(&response, &ffqn, 100, 100), None);
        let Some(Response::ChildExecutionFinished {
            child_execution_id,
            result: ExecutionResult::ExecutionError(error),
            ..
        }) = too_large(&response, &ffqn, 101, 100)
        else {
            panic!("replaced by an error");
        };
        assert_eq!(child_execution_id, child);
        assert_eq!(error.kind, ExecutionErrorKind::ValueTooLarge);
        assert!(error.reason.contains("101 bytes"), "{}", error.reason);
    }
}
