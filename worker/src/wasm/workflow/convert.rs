//! Values of `weir:workflow/types@0.1.0` ↔ the model's types. The shapes were checked at link
//! time (`shapes.rs`), so a mismatch here is a host bug, reported as [`HostFailure::BadValue`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use wasmtime::component::Val;

use crate::model::{
    DelayId, DelayOutcome, EventOutcome, EventRequestId, ExecutionId, Ffqn, ScheduleAt,
};
use crate::replay::Joined;

use super::HostFailure;

fn bad(what: &str, val: &Val) -> HostFailure {
    HostFailure::BadValue(format!("expected {what}, got {val:?}"))
}

pub(crate) fn id_record(id: String) -> Val {
    Val::Record(vec![("id".into(), Val::String(id))])
}

/// `execution-id` → the id text (unparsed: an id the guest invented is simply not found).
pub(crate) fn id_text(val: &Val) -> Result<&str, HostFailure> {
    match val {
        Val::Record(fields) => match fields.as_slice() {
            [(_, Val::String(s))] => Ok(s),
            _ => Err(bad("a record { id: string }", val)),
        },
        _ => Err(bad("a record { id: string }", val)),
    }
}

pub(crate) fn datetime(t: DateTime<Utc>) -> Val {
    // Times before 1970 cannot come from a schedule resolved against a real clock; clamp.
    let seconds = u64::try_from(t.timestamp()).unwrap_or(0);
    Val::Record(vec![
        ("seconds".into(), Val::U64(seconds)),
        ("nanoseconds".into(), Val::U32(t.timestamp_subsec_nanos())),
    ])
}

fn u64_field(fields: &[(String, Val)], i: usize) -> Option<u64> {
    match fields.get(i) {
        Some((_, Val::U64(n))) => Some(*n),
        Some((_, Val::U32(n))) => Some(u64::from(*n)),
        _ => None,
    }
}

pub(crate) fn schedule_at(val: &Val) -> Result<ScheduleAt, HostFailure> {
    let Val::Variant(case, payload) = val else {
        return Err(bad("schedule-at", val));
    };
    Ok(match (case.as_str(), payload.as_deref()) {
        ("now", None) => ScheduleAt::Now,
        ("at", Some(Val::Record(fields))) => {
            let (Some(s), Some(ns)) = (u64_field(fields, 0), u64_field(fields, 1)) else {
                return Err(bad("datetime", val));
            };
            let at = i64::try_from(s)
                .ok()
                .and_then(|s| DateTime::from_timestamp(s, ns.min(999_999_999) as u32))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            ScheduleAt::At(at)
        }
        ("in", Some(Val::Variant(unit, Some(n)))) => {
            let n = match n.as_ref() {
                Val::U64(n) => *n,
                Val::U32(n) => u64::from(*n),
                other => return Err(bad("a duration amount", other)),
            };
            let secs = |mult: u64| Duration::from_secs(n.saturating_mul(mult));
            ScheduleAt::In(match unit.as_str() {
                "milliseconds" => Duration::from_millis(n),
                "seconds" => secs(1),
                "minutes" => secs(60),
                "hours" => secs(3600),
                "days" => secs(86_400),
                _ => return Err(bad("a duration unit", val)),
            })
        }
        _ => return Err(bad("schedule-at", val)),
    })
}

pub(crate) fn response_id_of_child(id: &ExecutionId) -> Val {
    Val::Variant(
        "execution-id".into(),
        Some(Box::new(id_record(id.to_string()))),
    )
}

fn response_id_of_delay(id: &DelayId) -> Val {
    Val::Variant("delay-id".into(), Some(Box::new(id_record(id.to_string()))))
}

fn response_id_of_event(id: &EventRequestId) -> Val {
    Val::Variant(
        "event-request-id".into(),
        Some(Box::new(id_record(id.to_string()))),
    )
}

/// `received-event` record.
pub(crate) fn received_event(event_id: &str, payload: &serde_json::Value) -> Val {
    Val::Record(vec![
        ("event-id".into(), Val::String(event_id.to_owned())),
        ("payload".into(), Val::String(payload.to_string())),
    ])
}

/// `function-mismatch` record.
pub(crate) fn function_mismatch(specified: &Ffqn, actual: Option<&Ffqn>, actual_id: Val) -> Val {
    Val::Record(vec![
        (
            "specified-function".into(),
            Val::String(specified.to_string()),
        ),
        (
            "actual-function".into(),
            Val::Option(actual.map(|f| Box::new(Val::String(f.to_string())))),
        ),
        ("actual-id".into(), actual_id),
    ])
}

/// The `function-mismatch` payload for a response `joined` taken instead of `specified`.
pub(crate) fn mismatch_of_joined(specified: &Ffqn, joined: &Joined) -> Val {
    match joined {
        Joined::Child {
            child_execution_id,
            ffqn,
            ..
        } => function_mismatch(
            specified,
            Some(ffqn),
            response_id_of_child(child_execution_id),
        ),
        Joined::Delay { delay_id, .. } => {
            function_mismatch(specified, None, response_id_of_delay(delay_id))
        }
        Joined::Event {
            event_request_id, ..
        } => function_mismatch(specified, None, response_id_of_event(event_request_id)),
    }
}

/// `response` of `join-next`. `expiry` is the delay's recorded expiry (for `expired`).
pub(crate) fn response(joined: &Joined, expiry: Option<DateTime<Utc>>) -> Val {
    match joined {
        Joined::Child {
            child_execution_id,
            ffqn,
            result,
        } => Val::Variant(
            "child-finished".into(),
            Some(Box::new(Val::Record(vec![
                ("id".into(), id_record(child_execution_id.to_string())),
                ("function".into(), Val::String(ffqn.to_string())),
                (
                    "outcome".into(),
                    Val::Result(if result.is_ok() { Ok(None) } else { Err(None) }),
                ),
            ]))),
        ),
        Joined::Delay { delay_id, outcome } => {
            let outcome = match outcome {
                DelayOutcome::Ok => Val::Variant(
                    "expired".into(),
                    Some(Box::new(datetime(
                        expiry.unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
                    ))),
                ),
                DelayOutcome::Cancelled => Val::Variant("cancelled".into(), None),
            };
            Val::Variant(
                "delay-finished".into(),
                Some(Box::new(Val::Record(vec![
                    ("id".into(), id_record(delay_id.to_string())),
                    ("outcome".into(), outcome),
                ]))),
            )
        }
        Joined::Event {
            event_request_id,
            name,
            outcome,
        } => {
            let outcome = match outcome {
                EventOutcome::Received { event_id, payload } => Val::Variant(
                    "received".into(),
                    Some(Box::new(received_event(event_id, payload))),
                ),
                EventOutcome::Cancelled => Val::Variant("cancelled".into(), None),
            };
            Val::Variant(
                "event-finished".into(),
                Some(Box::new(Val::Record(vec![
                    ("id".into(), id_record(event_request_id.to_string())),
                    ("name".into(), Val::String(name.clone())),
                    ("outcome".into(), outcome),
                ]))),
            )
        }
    }
}

pub(crate) fn case(name: &str) -> Val {
    Val::Variant(name.into(), None)
}
