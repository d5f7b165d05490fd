// `approval-event` in TypeScript: waits for events sent from outside (`weir send-event`, the
// HTTP API, or any Kafka client writing to `weir.events`) — examples/workflows/approval-event
// (Rust), call for call.
import {
  JoinSet,
  awaitEvent,
  correlate,
  getState,
  log,
  randomU64,
  setState,
  sleep,
} from "weir:workflow/host@0.1.0";
import type { Response } from "weir:workflow/types@0.1.0";
import type * as ApprovalEvent from "weir-examples:workflows/approval-event";

/** The first response of a join set holding one event wait and one timeout. */
function eventOrTimeout(
  joinSet: JoinSet,
  timeout: (response: Response) => string,
): { payload: string } {
  const response = joinSet.joinNext();
  // Cancels whichever request is still pending.
  JoinSet.close(joinSet);
  switch (response.tag) {
    case "event-finished":
      if (response.val.outcome.tag === "cancelled") {
        throw `the wait ${response.val.id.id} was cancelled`;
      }
      return response.val.outcome.val;
    case "delay-finished":
      throw timeout(response);
    case "child-finished":
      throw `unexpected child ${response.val.id.id}`;
  }
}

/** The approver named by the payload: a JSON string or an object with `approver`. */
function approverOf(payload: string): string {
  try {
    const value: unknown = JSON.parse(payload);
    if (typeof value === "string") return value;
    if (value !== null && typeof value === "object" && "approver" in value) {
      return String((value as { approver: unknown }).approver);
    }
  } catch {
    // Not JSON: returned as it is.
  }
  return payload.trim();
}

export const approvalEvent: typeof ApprovalEvent = {
  awaitApproval(orderId, timeoutSecs) {
    const joinSet = JoinSet.create();
    const wait = joinSet.submitEvent("approved");
    const timeout = joinSet.submitDelay({ tag: "in", val: { tag: "seconds", val: timeoutSecs } });
    log(
      "info",
      `order ${orderId}: waiting for \`approved\` (${wait.id}) or ${timeoutSecs} s (${timeout.id})`,
    );
    const event = eventOrTimeout(
      joinSet,
      () => `order ${orderId}: no approval within ${timeoutSecs} s`,
    );
    return approverOf(event.payload);
  },

  collect(count, afterMs) {
    if (afterMs > 0n) {
      sleep({ tag: "in", val: { tag: "milliseconds", val: afterMs } });
    }
    const taken: string[] = [];
    setState("collected", JSON.stringify(taken));
    for (let i = 0; i < count; i++) {
      taken.push(awaitEvent("item").payload);
      setState("collected", JSON.stringify(taken));
    }
    return taken;
  },

  // Query functions (components.toml `queries`).
  collected() {
    const text = getState("collected");
    return text === undefined ? [] : (JSON.parse(text) as string[]);
  },

  peekRandom() {
    return randomU64(0n, 10n);
  },

  awaitPayment(orderId, timeoutSecs) {
    const key = `payment:${orderId}`;
    correlate(key);
    const joinSet = JoinSet.create();
    joinSet.submitEvent("paid");
    joinSet.submitDelay({ tag: "in", val: { tag: "seconds", val: timeoutSecs } });
    log("info", `waiting for \`paid\` on ${key} or ${timeoutSecs} s`);
    return eventOrTimeout(joinSet, () => `${key}: no payment within ${timeoutSecs} s`).payload;
  },
};
