"""`fanout` in Python: fan-out / fan-in over the `compute` activity with the generated
extension functions (`fibonacci_submit`, `fibonacci_await_next`, `fibonacci_get`), and a race
of a child against a delay with `join_next` and an explicit `close` -- examples/workflows/fanout
(Rust), call for call."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.fanout import (
    FanoutResult,
    RaceOutcome,
    RaceOutcome_Child,
    RaceOutcome_Deadline,
)
from wit_world.imports.host import JoinSet, log
from wit_world.imports.types import (
    AwaitNextError_AllProcessed,
    DelayOutcome_Cancelled,
    Duration_Milliseconds,
    ExecutionId,
    JoinSetCreateError_Conflict,
    LogLevel,
    Response_ChildFinished,
    Response_DelayFinished,
    ScheduleAt_In,
)
from wit_world.imports.weir_examples_compute_ext_math import (
    fibonacci_await_next,
    fibonacci_get,
    fibonacci_submit,
)


def get_fibonacci(id: ExecutionId) -> int:
    value = fibonacci_get(id)
    if isinstance(value, Err):
        raise Err(f"child {id.id} failed: {value.value}")
    return value.value


class Fanout(exports.Fanout):
    def fibonacci_sum(self, ns: bytes) -> FanoutResult:
        join_set = JoinSet.create_named("fibonacci")
        try:
            JoinSet.create_named("fibonacci")
            named_conflict = False
        except Err as e:
            named_conflict = isinstance(e.value, JoinSetCreateError_Conflict)
        log(LogLevel.INFO, f"submitting {len(ns)} children into {join_set.id()}")

        ids = [fibonacci_submit(join_set, n) for n in ns]

        total = 0
        arrival_order = []
        for _ in ids:
            id, value = fibonacci_await_next(join_set)
            if isinstance(value, Err):
                raise Err(f"child {id.id} failed: {value.value}")
            total += value.value
            if total >= 2**64:
                raise Err("the sum does not fit a u64")
            arrival_order.append(id.id)
        try:
            fibonacci_await_next(join_set)
            extra_await_all_processed = False
        except Err as e:
            extra_await_all_processed = isinstance(e.value, AwaitNextError_AllProcessed)

        # Read the values back in input order (the responses above came in arrival order).
        values = [get_fibonacci(id) for id in ids]
        return FanoutResult(values, total, arrival_order, named_conflict, extra_await_all_processed)

    def race(self, n: int, deadline_ms: int) -> RaceOutcome:
        join_set = JoinSet.create()
        child = fibonacci_submit(join_set, n)
        delay = join_set.submit_delay(ScheduleAt_In(Duration_Milliseconds(deadline_ms)))
        log(LogLevel.INFO, f"race in {join_set.id()}: child {child.id} vs delay {delay.id}")

        response = join_set.join_next()
        if isinstance(response, Response_ChildFinished):
            outcome: RaceOutcome = RaceOutcome_Child(get_fibonacci(response.value.id))
        elif isinstance(response, Response_DelayFinished):
            finished = response.value.outcome
            if isinstance(finished, DelayOutcome_Cancelled):
                raise Err(f"delay {response.value.id.id} was cancelled")
            at = finished.value
            outcome = RaceOutcome_Deadline(at.seconds * 1000 + at.nanoseconds // 1_000_000)
        else:
            raise Err(f"unexpected response {response}")
        # Cancels whichever request is still pending.
        JoinSet.close(join_set)
        return outcome


