//! `approval-event`: waits for events sent from outside (`weir send-event`, the HTTP API, or
//! any Kafka client writing an `InboundEvent` to `weir.events`).
//!
//! - `await-approval` races a wait for the event `approved` against a delay (a timeout) in one
//!   join set, then closes the join set, which cancels whichever lost.
//! - `collect` sleeps, then takes `count` events named `item` one after another with the
//!   blocking `await-event`, and returns their payloads in the order they were taken: events
//!   sent during the sleep wait for it.
//! - `await-payment` registers the correlation key `payment:<order-id>` and races the event
//!   `paid` sent to that key against a timeout: the sender knows the order, not the
//!   execution.
//! - `collected` and `peek-random` are query functions (declared in `components.toml`
//!   `queries`): `collect` keeps the payloads it has taken in its state `collected`
//!   (`set-state`), which `collected` reads (`get-state`) while the execution runs;
//!   `peek-random` tries a side effect, which a query may not have.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/approval-event",
    generate_all,
});

use exports::weir_examples::workflows::approval_event::Guest;
use weir::workflow::host::{
    await_event, correlate, get_state, log, random_u64, set_state, sleep, JoinSet,
};
use weir::workflow::types::{Duration, EventOutcome, LogLevel, Response, ScheduleAt};

struct ApprovalEvent;

impl Guest for ApprovalEvent {
    fn await_approval(order_id: String, timeout_secs: u64) -> Result<String, String> {
        let join_set = JoinSet::create();
        let wait = join_set.submit_event("approved");
        let timeout = join_set.submit_delay(ScheduleAt::In(Duration::Seconds(timeout_secs)));
        log(
            LogLevel::Info,
            &format!("order {order_id}: waiting for `approved` ({}) or {} s ({})", wait.id, timeout_secs, timeout.id),
        );
        let outcome = match join_set.join_next() {
            Ok(Response::EventFinished(finished)) => match finished.outcome {
                EventOutcome::Received(event) => Ok(approver_of(&event.payload)),
                EventOutcome::Cancelled => Err(format!("the wait {} was cancelled", finished.id.id)),
            },
            Ok(Response::DelayFinished(_)) => Err(format!("order {order_id}: no approval within {timeout_secs} s")),
            Ok(Response::ChildFinished(child)) => Err(format!("unexpected child {}", child.id.id)),
            Err(e) => Err(format!("join-next failed: {e:?}")),
        };
        // Cancels whichever request is still pending.
        JoinSet::close(join_set);
        outcome
    }

    fn collect(count: u32, after_ms: u64) -> Result<Vec<String>, String> {
        if after_ms > 0 {
            sleep(ScheduleAt::In(Duration::Milliseconds(after_ms)));
        }
        let mut taken = Vec::new();
        set_state("collected", &json_strings(&taken));
        for _ in 0..count {
            taken.push(await_event("item").payload);
            set_state("collected", &json_strings(&taken));
        }
        Ok(taken)
    }

    fn collected() -> Vec<String> {
        get_state("collected").map(|text| parse_json_strings(&text)).unwrap_or_default()
    }

    fn peek_random() -> u64 {
        random_u64(0, 10)
    }

    fn await_payment(order_id: String, timeout_secs: u64) -> Result<String, String> {
        let key = format!("payment:{order_id}");
        correlate(&key);
        let join_set = JoinSet::create();
        join_set.submit_event("paid");
        join_set.submit_delay(ScheduleAt::In(Duration::Seconds(timeout_secs)));
        log(LogLevel::Info, &format!("waiting for `paid` on {key} or {timeout_secs} s"));
        let outcome = match join_set.join_next() {
            Ok(Response::EventFinished(finished)) => match finished.outcome {
                EventOutcome::Received(event) => Ok(event.payload),
                EventOutcome::Cancelled => Err(format!("the wait {} was cancelled", finished.id.id)),
            },
            Ok(Response::DelayFinished(_)) => Err(format!("{key}: no payment within {timeout_secs} s")),
            Ok(Response::ChildFinished(child)) => Err(format!("unexpected child {}", child.id.id)),
            Err(e) => Err(format!("join-next failed: {e:?}")),
        };
        JoinSet::close(join_set);
        outcome
    }
}

/// `items` as a JSON array of strings.
fn json_strings(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

/// The strings of a JSON array of strings written by [`json_strings`].
fn parse_json_strings(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut item = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            item.push(c);
                        }
                    }
                    Some('n') => item.push('\n'),
                    Some('t') => item.push('\t'),
                    Some('r') => item.push('\r'),
                    Some(other) => item.push(other),
                    None => break,
                },
                c => item.push(c),
            }
        }
        items.push(item);
    }
    items
}

/// The approver named by the payload: a JSON string (`"ann"`) or an object with `approver`
/// (`{"approver": "ann"}`); any other payload is returned as its JSON text.
fn approver_of(payload: &str) -> String {
    let trimmed = payload.trim();
    if let Some(inner) = trimmed.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        return inner.to_owned();
    }
    if let Some(rest) = trimmed.split("\"approver\"").nth(1) {
        let value = rest.trim_start().trim_start_matches(':').trim_start();
        if let Some(inner) = value.strip_prefix('"').and_then(|s| s.split('"').next()) {
            return inner.to_owned();
        }
    }
    trimmed.to_owned()
}

export!(ApprovalEvent);
