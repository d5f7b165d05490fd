//! `approval`: submits the stub activity `approval.request`, writes its result itself with
//! the generated `request-stub`, checks that writing the same value again is accepted and a
//! different value is a conflict, then awaits the stub's response with `request-await-next`.
//! `manual-approval` leaves the writing to someone outside (`weir stub`) or to another
//! workflow: `approve-other` writes the stub of another execution's request.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/approval",
    generate_all,
});

use exports::weir_examples::workflows::approval::{ApprovalReport, Guest};
use weir::workflow::host::{log, JoinSet};
use weir::workflow::types::{ExecutionId, LogLevel, StubError};
use weir_examples::approval_ext::approval::{request_await_next, request_submit};
use weir_examples::approval_stub::approval::request_stub;

/// Orders up to this amount are approved automatically.
const AUTO_APPROVE_LIMIT_CENTS: u64 = 10_000;

struct Approval;

fn as_strs(value: &Result<String, String>) -> Result<&str, &str> {
    value.as_ref().map(String::as_str).map_err(String::as_str)
}

impl Guest for Approval {
    fn auto_approve(order_id: String, amount_cents: u64) -> Result<ApprovalReport, String> {
        let join_set = JoinSet::create();
        let request = request_submit(&join_set, &order_id, amount_cents);

        let decision: Result<String, String> = if amount_cents <= AUTO_APPROVE_LIMIT_CENTS {
            Ok("auto-approver".to_string())
        } else {
            Err(format!(
                "{amount_cents} cents is over the auto-approval limit of {AUTO_APPROVE_LIMIT_CENTS}"
            ))
        };
        log(LogLevel::Info, &format!("stubbing {} with {decision:?}", request.id));
        request_stub(&request, as_strs(&decision))
            .map_err(|e| format!("request-stub({}) failed: {e:?}", request.id))?;

        let same_value_again_ok = request_stub(&request, as_strs(&decision)).is_ok();
        let different: Result<String, String> = match &decision {
            Ok(_) => Err("changed my mind".to_string()),
            Err(_) => Ok("someone else".to_string()),
        };
        let different_value_conflict =
            matches!(request_stub(&request, as_strs(&different)), Err(StubError::Conflict));

        let (id, result) = request_await_next(&join_set)
            .map_err(|e| format!("request-await-next failed: {e:?}"))?;
        if id.id != request.id {
            return Err(format!("awaited {} but got {}", request.id, id.id));
        }
        let decision = match result {
            Ok(approver) => format!("approved by {approver}"),
            Err(reason) => format!("rejected: {reason}"),
        };
        Ok(ApprovalReport {
            request_id: request.id,
            decision,
            same_value_again_ok,
            different_value_conflict,
        })
    }

    fn manual_approval(order_id: String, amount_cents: u64) -> Result<String, String> {
        let join_set = JoinSet::create();
        let request = request_submit(&join_set, &order_id, amount_cents);
        log(LogLevel::Info, &format!("order {order_id}: waiting for {} to be written", request.id));
        let (_, result) = request_await_next(&join_set)
            .map_err(|e| format!("request-await-next failed: {e:?}"))?;
        match result {
            Ok(approver) => Ok(format!("approved by {approver}")),
            Err(reason) => Err(format!("rejected: {reason}")),
        }
    }

    fn approve_other(request_id: String, approver: String) -> Result<String, String> {
        let request = ExecutionId { id: request_id };
        let outcome = match request_stub(&request, Ok(&approver)) {
            Ok(()) => "ok",
            Err(StubError::Conflict) => "conflict",
            Err(StubError::NotFound) => "not-found",
        };
        log(LogLevel::Info, &format!("stub {} = ok({approver}): {outcome}", request.id));
        Ok(outcome.to_owned())
    }
}

export!(Approval);
