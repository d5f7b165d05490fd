// `approval` in TypeScript: the stub activity `approval.request`, written by the workflow
// itself with the generated `requestStub` (the same value again is accepted, another is a
// conflict) or by someone outside, and awaited with `requestAwaitNext` —
// examples/workflows/approval (Rust), call for call.
import { JoinSet, log } from "weir:workflow/host@0.1.0";
import type { ExecutionId } from "weir:workflow/types@0.1.0";
import { requestAwaitNext, requestSubmit } from "weir-examples:approval-ext/approval";
import { requestStub } from "weir-examples:approval-stub/approval";
import type * as Approval from "weir-examples:workflows/approval";

/** Orders up to this amount are approved automatically. */
const AUTO_APPROVE_LIMIT_CENTS = 10_000n;

type Decision = { tag: "ok"; val: string } | { tag: "err"; val: string };

/** The `err` value of a failed host or import call (jco throws it in `payload`). */
function errOf(thrown: unknown): { tag: string } {
  return (thrown as { payload: { tag: string } }).payload;
}

/** Writes `value` as the stub's result: `ok`, or the stub error's tag. */
function stub(request: ExecutionId, value: Decision): "ok" | string {
  try {
    requestStub(request, value);
    return "ok";
  } catch (thrown) {
    return errOf(thrown).tag;
  }
}

/** The next response of the join set: the request's id and its result. */
function awaitNext(joinSet: JoinSet): [ExecutionId, Decision] {
  try {
    return requestAwaitNext(joinSet);
  } catch (thrown) {
    throw `request-await-next failed: ${errOf(thrown).tag}`;
  }
}

export const approval: typeof Approval = {
  autoApprove(orderId, amountCents) {
    const joinSet = JoinSet.create();
    const request = requestSubmit(joinSet, orderId, amountCents);
    const decision: Decision =
      amountCents <= AUTO_APPROVE_LIMIT_CENTS
        ? { tag: "ok", val: "auto-approver" }
        : {
            tag: "err",
            val: `${amountCents} cents is over the auto-approval limit of ${AUTO_APPROVE_LIMIT_CENTS}`,
          };
    log("info", `stubbing ${request.id} with ${JSON.stringify(decision)}`);
    const written = stub(request, decision);
    if (written !== "ok") {
      throw `request-stub(${request.id}) failed: ${written}`;
    }
    const sameValueAgainOk = stub(request, decision) === "ok";
    const different: Decision =
      decision.tag === "ok"
        ? { tag: "err", val: "changed my mind" }
        : { tag: "ok", val: "someone else" };
    const differentValueConflict = stub(request, different) === "conflict";

    const [id, result] = awaitNext(joinSet);
    if (id.id !== request.id) {
      throw `awaited ${request.id} but got ${id.id}`;
    }
    return {
      requestId: request.id,
      decision: result.tag === "ok" ? `approved by ${result.val}` : `rejected: ${result.val}`,
      sameValueAgainOk,
      differentValueConflict,
    };
  },

  manualApproval(orderId, amountCents) {
    const joinSet = JoinSet.create();
    const request = requestSubmit(joinSet, orderId, amountCents);
    log("info", `order ${orderId}: waiting for ${request.id} to be written`);
    const [, result] = awaitNext(joinSet);
    if (result.tag === "err") {
      throw `rejected: ${result.val}`;
    }
    return `approved by ${result.val}`;
  },

  approveOther(requestId, approver) {
    const request = { id: requestId };
    const outcome = stub(request, { tag: "ok", val: approver });
    log("info", `stub ${request.id} = ok(${approver}): ${outcome}`);
    return outcome;
  },
};
