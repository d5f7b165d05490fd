//! An execution's history: [`HistoryRecord`] (`history_record.avsc`), with its entries, the
//! workflow's events and a reset execution's link ([`ResetOf`](super::records::ResetOf)), and
//! [`ExecutionFinished`] (`execution_finished.avsc`).

use std::time::Duration;

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_branch, bad_symbol, branch, child_kind, enum_value, instant, json,
    optional, parent, read_bool, read_branch, read_child_kind, read_correlation_key, read_instant,
    read_int, read_long, read_optional, read_params, read_parent, read_parsed, read_received_event,
    read_result, read_string, read_string_map, read_symbol, read_u64_bits, received_event, record,
    result, string, string_map, u64_bits,
};
use super::error::FieldError;
use super::records::{Created, ExecutionFinished, HistoryEntry, HistoryRecord};
use super::response::{read_response, response};
use crate::model::{HistoryEvent, JoinSetRequest, PersistValue, ScheduleAt, StubOutcome, Version};

impl AvroRecord for HistoryRecord {
    const NAME: &'static str = "HistoryRecord";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let entry = match &self.entry {
            HistoryEntry::Created(c) => branch(
                0,
                record(vec![
                    ("ffqn", string(&c.ffqn)),
                    ("params", json(&c.params)),
                    ("parent", optional(c.parent.as_ref(), parent)),
                    ("scheduled_at", optional(c.scheduled_at.as_ref(), instant)),
                    (
                        "correlation_id",
                        optional(c.correlation_id.as_ref(), string),
                    ),
                    ("metadata", string_map(&c.metadata)),
                    ("created_at", instant(&c.created_at)),
                    ("submitted_at", optional(c.submitted_at.as_ref(), instant)),
                    ("component", optional(c.component.as_ref(), string)),
                    ("deadline", optional(c.deadline.as_ref(), instant)),
                    ("reset_of", optional(c.reset_of.as_ref(), reset_of)),
                    ("slots", super::concurrency::claims(&c.slots)),
                ]),
            ),
            HistoryEntry::Event { version, event } => branch(
                1,
                record(vec![
                    ("version", u64_bits(version.0)),
                    (
                        "event",
                        history_event(event).map_err(|e| e.within("entry.Event.event"))?,
                    ),
                ]),
            ),
            HistoryEntry::ResponseAppended(r) => branch(2, record(vec![("response", response(r))])),
            HistoryEntry::Finished {
                result: res,
                finished_at,
            } => branch(
                3,
                record(vec![
                    ("result", result(res)),
                    ("finished_at", instant(finished_at)),
                ]),
            ),
            HistoryEntry::Upgraded { from, to } => branch(
                4,
                record(vec![
                    ("from", optional(from.as_ref(), string)),
                    ("to", string(to)),
                ]),
            ),
            HistoryEntry::EventReceived(event) => branch(5, received_event(event)),
            HistoryEntry::CancelRequested { reason } => {
                branch(6, record(vec![("reason", string(reason))]))
            }
            HistoryEntry::Paused { reason } => branch(7, record(vec![("reason", string(reason))])),
            HistoryEntry::Resumed { reason } => branch(8, record(vec![("reason", string(reason))])),
            HistoryEntry::Reset {
                new_execution_id,
                to_seq,
                reason,
            } => branch(
                9,
                record(vec![
                    ("new_execution_id", string(new_execution_id)),
                    ("to_seq", u64_bits(*to_seq)),
                    ("reason", string(reason)),
                ]),
            ),
            HistoryEntry::SlotGranted { slot } => branch(10, record(vec![("slot", string(slot))])),
        };
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("seq", u64_bits(self.seq)),
            ("entry", entry),
            ("at", optional(self.at.as_ref(), instant)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let execution_id = f.get("execution_id", read_parsed)?;
        let seq = f.get("seq", read_u64_bits)?;
        let entry = f.get("entry", |v| {
            let (i, v) = read_branch(v)?;
            let mut e = Fields::of(v)?;
            match i {
                0 => Ok(HistoryEntry::Created(Created {
                    ffqn: e.get("ffqn", read_parsed)?,
                    params: e.get("params", read_params)?,
                    parent: e.get("parent", |v| read_optional(v, read_parent))?,
                    scheduled_at: e.get("scheduled_at", |v| read_optional(v, read_instant))?,
                    correlation_id: e.get("correlation_id", |v| read_optional(v, read_string))?,
                    metadata: e.get("metadata", read_string_map)?,
                    created_at: e.get("created_at", read_instant)?,
                    submitted_at: e.get("submitted_at", |v| read_optional(v, read_instant))?,
                    component: e.get("component", |v| read_optional(v, read_string))?,
                    deadline: e.get("deadline", |v| read_optional(v, read_instant))?,
                    reset_of: e.get("reset_of", |v| read_optional(v, read_reset_of))?,
                    slots: e.get("slots", super::concurrency::read_claims)?,
                })),
                1 => Ok(HistoryEntry::Event {
                    version: Version(e.get("version", read_u64_bits)?),
                    event: e.get("event", read_history_event)?,
                }),
                2 => Ok(HistoryEntry::ResponseAppended(
                    e.get("response", read_response)?,
                )),
                3 => Ok(HistoryEntry::Finished {
                    result: e.get("result", read_result)?,
                    finished_at: e.get("finished_at", read_instant)?,
                }),
                4 => Ok(HistoryEntry::Upgraded {
                    from: e.get("from", |v| read_optional(v, read_string))?,
                    to: e.get("to", read_string)?,
                }),
                5 => read_received_event(&mut e).map(HistoryEntry::EventReceived),
                6 => Ok(HistoryEntry::CancelRequested {
                    reason: e.get("reason", read_string)?,
                }),
                7 => Ok(HistoryEntry::Paused {
                    reason: e.get("reason", read_string)?,
                }),
                8 => Ok(HistoryEntry::Resumed {
                    reason: e.get("reason", read_string)?,
                }),
                9 => Ok(HistoryEntry::Reset {
                    new_execution_id: e.get("new_execution_id", read_parsed)?,
                    to_seq: e.get("to_seq", read_u64_bits)?,
                    reason: e.get("reason", read_string)?,
                }),
                10 => Ok(HistoryEntry::SlotGranted {
                    slot: e.get("slot", super::concurrency::read_slot_field)?,
                }),
                i => Err(bad_branch(i)),
            }
        })?;
        Ok(HistoryRecord {
            execution_id,
            seq,
            entry,
            at: f.get("at", |v| read_optional(v, read_instant))?,
        })
    }
}

impl AvroRecord for ExecutionFinished {
    const NAME: &'static str = "ExecutionFinished";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("ffqn", string(&self.ffqn)),
            ("result", result(&self.result)),
            ("finished_at", instant(&self.finished_at)),
            (
                "correlation_id",
                optional(self.correlation_id.as_ref(), string),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ExecutionFinished {
            execution_id: f.get("execution_id", read_parsed)?,
            ffqn: f.get("ffqn", read_parsed)?,
            result: f.get("result", read_result)?,
            finished_at: f.get("finished_at", read_instant)?,
            correlation_id: f.get("correlation_id", |v| read_optional(v, read_string))?,
        })
    }
}

/// A `Created.reset_of` (the `ResetOf` record).
fn reset_of(link: &super::records::ResetOf) -> Value {
    record(vec![
        ("execution_id", string(&link.execution_id)),
        ("seq", u64_bits(link.seq)),
    ])
}

fn read_reset_of(v: Value) -> Result<super::records::ResetOf, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(super::records::ResetOf {
        execution_id: f.get("execution_id", read_parsed)?,
        seq: f.get("seq", read_u64_bits)?,
    })
}

fn schedule_at(s: &ScheduleAt) -> Result<Value, FieldError> {
    Ok(match s {
        ScheduleAt::Now => branch(0, record(vec![])),
        ScheduleAt::At(t) => branch(1, record(vec![("at", instant(t))])),
        ScheduleAt::In(d) => {
            let seconds = i64::try_from(d.as_secs()).map_err(|_| {
                FieldError::new(
                    "seconds",
                    format!("duration {d:?} exceeds i64::MAX seconds"),
                )
            })?;
            branch(
                2,
                record(vec![
                    ("seconds", Value::Long(seconds)),
                    ("nanos", Value::Int(d.subsec_nanos() as i32)),
                ]),
            )
        }
    })
}

fn history_event(e: &HistoryEvent) -> Result<Value, FieldError> {
    Ok(match e {
        HistoryEvent::JoinSetCreate { join_set_id } => {
            branch(0, record(vec![("join_set_id", string(join_set_id))]))
        }
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request,
        } => {
            let request = match request {
                JoinSetRequest::ChildExecutionRequest {
                    child_execution_id,
                    target_ffqn,
                    params,
                    child_kind: kind,
                } => branch(
                    0,
                    record(vec![
                        ("child_execution_id", string(child_execution_id)),
                        ("target_ffqn", string(target_ffqn)),
                        ("params", json(params)),
                        ("child_kind", child_kind(*kind)),
                    ]),
                ),
                JoinSetRequest::DelayRequest {
                    delay_id,
                    timeout,
                    expires_at,
                } => branch(
                    1,
                    record(vec![
                        ("delay_id", string(delay_id)),
                        (
                            "timeout",
                            schedule_at(timeout).map_err(|e| e.within("request.timeout"))?,
                        ),
                        ("expires_at", instant(expires_at)),
                    ]),
                ),
                JoinSetRequest::EventRequest {
                    event_request_id,
                    name,
                } => branch(
                    2,
                    record(vec![
                        ("event_request_id", string(event_request_id)),
                        ("name", string(name)),
                    ]),
                ),
            };
            branch(
                1,
                record(vec![
                    ("join_set_id", string(join_set_id)),
                    ("request", request),
                ]),
            )
        }
        HistoryEvent::JoinNext {
            join_set_id,
            closing,
            requested_ffqn,
        } => branch(
            2,
            record(vec![
                ("join_set_id", string(join_set_id)),
                ("closing", Value::Boolean(*closing)),
                ("requested_ffqn", optional(requested_ffqn.as_ref(), string)),
            ]),
        ),
        HistoryEvent::JoinNextTooMany {
            join_set_id,
            requested_ffqn,
        } => branch(
            3,
            record(vec![
                ("join_set_id", string(join_set_id)),
                ("requested_ffqn", optional(requested_ffqn.as_ref(), string)),
            ]),
        ),
        HistoryEvent::Persist { value } => {
            let value = match value {
                PersistValue::RandomU64 {
                    min,
                    max_exclusive,
                    value,
                } => branch(
                    0,
                    record(vec![
                        ("min", u64_bits(*min)),
                        ("max_exclusive", u64_bits(*max_exclusive)),
                        ("value", u64_bits(*value)),
                    ]),
                ),
                PersistValue::RandomString {
                    min_length,
                    max_length_exclusive,
                    value,
                } => branch(
                    1,
                    record(vec![
                        ("min_length", u64_bits(*min_length)),
                        ("max_length_exclusive", u64_bits(*max_length_exclusive)),
                        ("value", string(value)),
                    ]),
                ),
            };
            branch(4, record(vec![("value", value)]))
        }
        HistoryEvent::Schedule {
            execution_id,
            ffqn,
            params,
            intention,
            scheduled_at,
        } => branch(
            5,
            record(vec![
                ("execution_id", string(execution_id)),
                ("ffqn", string(ffqn)),
                ("params", json(params)),
                (
                    "intention",
                    schedule_at(intention).map_err(|e| e.within("intention"))?,
                ),
                ("scheduled_at", instant(scheduled_at)),
            ]),
        ),
        HistoryEvent::Stub {
            target_execution_id,
            result: res,
            outcome,
        } => branch(
            6,
            record(vec![
                ("target_execution_id", string(target_execution_id)),
                ("result", result(res)),
                (
                    "outcome",
                    match outcome {
                        StubOutcome::Ok => enum_value(0, "OK"),
                        StubOutcome::Conflict => enum_value(1, "CONFLICT"),
                    },
                ),
            ]),
        ),
        HistoryEvent::Correlate { key } => branch(7, record(vec![("key", string(key))])),
    })
}

fn read_schedule_at(v: Value) -> Result<ScheduleAt, FieldError> {
    let (i, v) = read_branch(v)?;
    let mut f = Fields::of(v)?;
    match i {
        0 => Ok(ScheduleAt::Now),
        1 => Ok(ScheduleAt::At(f.get("at", read_instant)?)),
        2 => {
            let seconds = f.get("seconds", read_long)?;
            let nanos = f.get("nanos", read_int)?;
            let seconds = u64::try_from(seconds)
                .map_err(|_| FieldError::new("seconds", "negative duration"))?;
            let nanos = u32::try_from(nanos)
                .ok()
                .filter(|n| *n < 1_000_000_000)
                .ok_or_else(|| FieldError::new("nanos", "not in 0..=999999999"))?;
            Ok(ScheduleAt::In(Duration::new(seconds, nanos)))
        }
        i => Err(bad_branch(i)),
    }
}

fn read_requested_ffqn(f: &mut Fields) -> Result<Option<crate::model::Ffqn>, FieldError> {
    f.get("requested_ffqn", |v| read_optional(v, read_parsed))
}

fn read_history_event(v: Value) -> Result<HistoryEvent, FieldError> {
    let (i, v) = read_branch(v)?;
    let mut f = Fields::of(v)?;
    Ok(match i {
        0 => HistoryEvent::JoinSetCreate {
            join_set_id: f.get("join_set_id", read_parsed)?,
        },
        1 => HistoryEvent::JoinSetRequest {
            join_set_id: f.get("join_set_id", read_parsed)?,
            request: f.get("request", |v| {
                let (i, v) = read_branch(v)?;
                let mut r = Fields::of(v)?;
                match i {
                    0 => Ok(JoinSetRequest::ChildExecutionRequest {
                        child_execution_id: r.get("child_execution_id", read_parsed)?,
                        target_ffqn: r.get("target_ffqn", read_parsed)?,
                        params: r.get("params", read_params)?,
                        child_kind: r.get("child_kind", read_child_kind)?,
                    }),
                    1 => Ok(JoinSetRequest::DelayRequest {
                        delay_id: r.get("delay_id", read_parsed)?,
                        timeout: r.get("timeout", read_schedule_at)?,
                        expires_at: r.get("expires_at", read_instant)?,
                    }),
                    2 => Ok(JoinSetRequest::EventRequest {
                        event_request_id: r.get("event_request_id", read_parsed)?,
                        name: r.get("name", read_string)?,
                    }),
                    i => Err(bad_branch(i)),
                }
            })?,
        },
        2 => HistoryEvent::JoinNext {
            join_set_id: f.get("join_set_id", read_parsed)?,
            closing: f.get("closing", read_bool)?,
            requested_ffqn: read_requested_ffqn(&mut f)?,
        },
        3 => HistoryEvent::JoinNextTooMany {
            join_set_id: f.get("join_set_id", read_parsed)?,
            requested_ffqn: read_requested_ffqn(&mut f)?,
        },
        4 => HistoryEvent::Persist {
            value: f.get("value", |v| {
                let (i, v) = read_branch(v)?;
                let mut p = Fields::of(v)?;
                match i {
                    0 => Ok(PersistValue::RandomU64 {
                        min: p.get("min", read_u64_bits)?,
                        max_exclusive: p.get("max_exclusive", read_u64_bits)?,
                        value: p.get("value", read_u64_bits)?,
                    }),
                    1 => Ok(PersistValue::RandomString {
                        min_length: p.get("min_length", read_u64_bits)?,
                        max_length_exclusive: p.get("max_length_exclusive", read_u64_bits)?,
                        value: p.get("value", read_string)?,
                    }),
                    i => Err(bad_branch(i)),
                }
            })?,
        },
        5 => HistoryEvent::Schedule {
            execution_id: f.get("execution_id", read_parsed)?,
            ffqn: f.get("ffqn", read_parsed)?,
            params: f.get("params", read_params)?,
            intention: f.get("intention", read_schedule_at)?,
            scheduled_at: f.get("scheduled_at", read_instant)?,
        },
        6 => HistoryEvent::Stub {
            target_execution_id: f.get("target_execution_id", read_parsed)?,
            result: f.get("result", read_result)?,
            outcome: f.get("outcome", |v| match read_symbol(v)?.as_str() {
                "OK" => Ok(StubOutcome::Ok),
                "CONFLICT" => Ok(StubOutcome::Conflict),
                s => Err(bad_symbol(s)),
            })?,
        },
        7 => HistoryEvent::Correlate {
            key: f.get("key", read_correlation_key)?,
        },
        i => return Err(bad_branch(i)),
    })
}
