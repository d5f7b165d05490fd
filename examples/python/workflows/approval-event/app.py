"""`approval-event` in Python: waits for events sent from outside (`weir send-event`, the HTTP
API, or any Kafka client writing to `weir.events`) -- examples/workflows/approval-event (Rust),
call for call."""

import json
from typing import Callable

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.host import (
    JoinSet,
    await_event,
    correlate,
    get_state,
    log,
    random_u64,
    set_state,
    sleep,
)
from wit_world.imports.types import (
    Duration_Milliseconds,
    Duration_Seconds,
    EventOutcome_Cancelled,
    LogLevel,
    ReceivedEvent,
    Response_DelayFinished,
    Response_EventFinished,
    ScheduleAt_In,
)


def event_or_timeout(join_set: JoinSet, timeout: Callable[[], str]) -> ReceivedEvent:
    """The first response of a join set holding one event wait and one timeout."""
    response = join_set.join_next()
    # Cancels whichever request is still pending.
    JoinSet.close(join_set)
    if isinstance(response, Response_EventFinished):
        if isinstance(response.value.outcome, EventOutcome_Cancelled):
            raise Err(f"the wait {response.value.id.id} was cancelled")
        return response.value.outcome.value
    if isinstance(response, Response_DelayFinished):
        raise Err(timeout())
    raise Err(f"unexpected child {response.value.id.id}")


def approver_of(payload: str) -> str:
    """The approver named by the payload: a JSON string or an object with `approver`."""
    try:
        value = json.loads(payload)
    except ValueError:
        return payload.strip()
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "approver" in value:
        return str(value["approver"])
    return payload.strip()


class ApprovalEvent(exports.ApprovalEvent):
    def await_approval(self, order_id: str, timeout_secs: int) -> str:
        join_set = JoinSet.create()
        wait = join_set.submit_event("approved")
        timeout = join_set.submit_delay(ScheduleAt_In(Duration_Seconds(timeout_secs)))
        log(
            LogLevel.INFO,
            f"order {order_id}: waiting for `approved` ({wait.id}) or {timeout_secs} s ({timeout.id})",
        )
        event = event_or_timeout(
            join_set, lambda: f"order {order_id}: no approval within {timeout_secs} s"
        )
        return approver_of(event.payload)

    def collect(self, count: int, after_ms: int) -> list[str]:
        if after_ms > 0:
            sleep(ScheduleAt_In(Duration_Milliseconds(after_ms)))
        taken: list[str] = []
        set_state("collected", json.dumps(taken))
        for _ in range(count):
            taken.append(await_event("item").payload)
            set_state("collected", json.dumps(taken))
        return taken

    # Query functions (components.toml `queries`).
    def collected(self) -> list[str]:
        text = get_state("collected")
        return [] if text is None else list(json.loads(text))

    def peek_random(self) -> int:
        return random_u64(0, 10)

    def await_payment(self, order_id: str, timeout_secs: int) -> str:
        key = f"payment:{order_id}"
        correlate(key)
        join_set = JoinSet.create()
        join_set.submit_event("paid")
        join_set.submit_delay(ScheduleAt_In(Duration_Seconds(timeout_secs)))
        log(LogLevel.INFO, f"waiting for `paid` on {key} or {timeout_secs} s")
        return event_or_timeout(join_set, lambda: f"{key}: no payment within {timeout_secs} s").payload
