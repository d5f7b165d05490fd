"""`approval` in Python: the stub activity `approval.request`, written by the workflow itself
with the generated `request_stub` (the same value again is accepted, another is a conflict)
or by someone outside, and awaited with `request_await_next` -- examples/workflows/approval
(Rust), call for call."""

from typing import Tuple, Union

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.exports.approval import ApprovalReport
from wit_world.imports.host import JoinSet, log
from wit_world.imports.types import ExecutionId, LogLevel, StubError_Conflict, StubError_NotFound
from wit_world.imports.weir_examples_approval_ext_approval import (
    request_await_next,
    request_submit,
)
from wit_world.imports.weir_examples_approval_stub_approval import request_stub

# Orders up to this amount are approved automatically.
AUTO_APPROVE_LIMIT_CENTS = 10_000

Decision = Union[Ok[str], Err[str]]


def stub(request: ExecutionId, value: Decision) -> str:
    """Writes `value` as the stub's result: `ok`, `conflict` or `not-found`."""
    try:
        request_stub(request, value)
        return "ok"
    except Err as e:
        if isinstance(e.value, StubError_Conflict):
            return "conflict"
        if isinstance(e.value, StubError_NotFound):
            return "not-found"
        raise


def await_next(join_set: JoinSet) -> Tuple[ExecutionId, Decision]:
    try:
        return request_await_next(join_set)
    except Err as e:
        raise Err(f"request-await-next failed: {e.value}")


class Approval(exports.Approval):
    def auto_approve(self, order_id: str, amount_cents: int) -> ApprovalReport:
        join_set = JoinSet.create()
        request = request_submit(join_set, order_id, amount_cents)
        if amount_cents <= AUTO_APPROVE_LIMIT_CENTS:
            decision: Decision = Ok("auto-approver")
        else:
            decision = Err(
                f"{amount_cents} cents is over the auto-approval limit of {AUTO_APPROVE_LIMIT_CENTS}"
            )
        log(LogLevel.INFO, f"stubbing {request.id} with {decision}")
        written = stub(request, decision)
        if written != "ok":
            raise Err(f"request-stub({request.id}) failed: {written}")
        same_value_again_ok = stub(request, decision) == "ok"
        different: Decision = (
            Err("changed my mind") if isinstance(decision, Ok) else Ok("someone else")
        )
        different_value_conflict = stub(request, different) == "conflict"

        id, result = await_next(join_set)
        if id.id != request.id:
            raise Err(f"awaited {request.id} but got {id.id}")
        if isinstance(result, Ok):
            text = f"approved by {result.value}"
        else:
            text = f"rejected: {result.value}"
        return ApprovalReport(request.id, text, same_value_again_ok, different_value_conflict)

    def manual_approval(self, order_id: str, amount_cents: int) -> str:
        join_set = JoinSet.create()
        request = request_submit(join_set, order_id, amount_cents)
        log(LogLevel.INFO, f"order {order_id}: waiting for {request.id} to be written")
        _, result = await_next(join_set)
        if isinstance(result, Err):
            raise Err(f"rejected: {result.value}")
        return f"approved by {result.value}"

    def approve_other(self, request_id: str, approver: str) -> str:
        request = ExecutionId(request_id)
        outcome = stub(request, Ok(approver))
        log(LogLevel.INFO, f"stub {request.id} = ok({approver}): {outcome}")
        return outcome
