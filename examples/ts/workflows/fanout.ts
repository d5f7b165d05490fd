// `fanout` in TypeScript: fan-out / fan-in over the `compute` activity with the generated
// extension functions (`fibonacciSubmit`, `fibonacciAwaitNext`, `fibonacciGet`), and a race of
// a child against a delay with `joinNext` and an explicit `close` — examples/workflows/fanout
// (Rust), call for call.
import { JoinSet, log } from "weir:workflow/host@0.1.0";
import type { ExecutionId } from "weir:workflow/types@0.1.0";
import {
  fibonacciAwaitNext,
  fibonacciGet,
  fibonacciSubmit,
} from "weir-examples:compute-ext/math";
import type * as Fanout from "weir-examples:workflows/fanout";

/** The `err` value of a failed host or import call (jco throws it in `payload`). */
function errOf<E>(thrown: unknown): E {
  return (thrown as { payload: E }).payload;
}

function getFibonacci(id: ExecutionId): bigint {
  const value = fibonacciGet(id);
  if (value.tag === "err") {
    throw `child ${id.id} failed: ${value.val}`;
  }
  return value.val;
}

export const fanout: typeof Fanout = {
  fibonacciSum(ns) {
    const joinSet = JoinSet.createNamed("fibonacci");
    let namedConflict = false;
    try {
      JoinSet.createNamed("fibonacci");
    } catch (thrown) {
      namedConflict = errOf<{ tag: string }>(thrown).tag === "conflict";
    }
    log("info", `submitting ${ns.length} children into ${joinSet.id()}`);

    const ids = Array.from(ns, (n) => fibonacciSubmit(joinSet, n));

    let sum = 0n;
    const arrivalOrder: string[] = [];
    for (let i = 0; i < ids.length; i++) {
      const [id, value] = fibonacciAwaitNext(joinSet);
      if (value.tag === "err") {
        throw `child ${id.id} failed: ${value.val}`;
      }
      sum += value.val;
      if (sum >= 2n ** 64n) {
        throw "the sum does not fit a u64";
      }
      arrivalOrder.push(id.id);
    }
    let extraAwaitAllProcessed = false;
    try {
      fibonacciAwaitNext(joinSet);
    } catch (thrown) {
      extraAwaitAllProcessed = errOf<{ tag: string }>(thrown).tag === "all-processed";
    }

    // Read the values back in input order (the responses above came in arrival order).
    const values = BigUint64Array.from(ids.map(getFibonacci));
    return { values, sum, arrivalOrder, namedConflict, extraAwaitAllProcessed };
  },

  race(n, deadlineMs) {
    const joinSet = JoinSet.create();
    const child = fibonacciSubmit(joinSet, n);
    const delay = joinSet.submitDelay({ tag: "in", val: { tag: "milliseconds", val: deadlineMs } });
    log("info", `race in ${joinSet.id()}: child ${child.id} vs delay ${delay.id}`);

    const response = joinSet.joinNext();
    let outcome: Fanout.RaceOutcome;
    if (response.tag === "child-finished") {
      outcome = { tag: "child", val: getFibonacci(response.val.id) };
    } else if (response.tag === "delay-finished") {
      const finished = response.val.outcome;
      if (finished.tag === "cancelled") {
        throw `delay ${response.val.id.id} was cancelled`;
      }
      const at = finished.val;
      outcome = {
        tag: "deadline",
        val: at.seconds * 1000n + BigInt(Math.floor(at.nanoseconds / 1_000_000)),
      };
    } else {
      throw `unexpected response ${response.tag}`;
    }
    // Cancels whichever request is still pending.
    JoinSet.close(joinSet);
    return outcome;
  },
};
