//! Conversions between the model / record types and Avro [`Value`]s of the current schemas.
//!
//! Encoding builds values by field name; decoding reads values already resolved to the current
//! (reader) schema, so union branch indexes are those of the current schema files.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::time::Duration;

use apache_avro::types::Value;
use chrono::{DateTime, Utc};

use super::error::FieldError;
use super::records::{
    ActivityCancel, ActivityRequest, CancelRequest, Created, DlqEnvelope, DlqHeader, DlqReason,
    ExecutionFinished, HistoryEntry, HistoryRecord, InboundEvent, ParentRef, PauseAction,
    PauseRequest, ReceivedEvent, Submission, UpgradeRequest,
};
use super::schemas::{RecordSchema, current_named};
use crate::model::ExecutionId;
use crate::model::{
    ChildKind, DelayOutcome, EventOutcome, ExecutionError, ExecutionErrorKind, ExecutionResult,
    HistoryEvent, JoinSetRequest, PersistValue, Ran, Response, ScheduleAt, StubOutcome, Version,
};
use crate::model::{check_event_id, check_event_name};
use weir_core::correlation::{
    BufferedEvent, CorrelationAction, CorrelationCommand, CorrelationState, Forwarded, KeyedEvent,
    RememberedEvent,
};
use weir_core::schedule::{
    Overlap, ScheduleAction, ScheduleCommand, ScheduleSpec, ScheduleState, Status,
};
use weir_core::state_key::{StateKey, check_correlation_key};

/// A type that is one record of a topic, with its schema in `schemas/avro/`.
pub trait AvroRecord: Sized {
    /// The record's name in its schema, e.g. `Submission`.
    const NAME: &'static str;

    /// The current schema this type is written with and read into.
    fn schema() -> &'static RecordSchema {
        current_named(Self::NAME)
    }

    /// The schema registry subject of this record on `topic`: `<topic>-value`
    /// (TopicNameStrategy), for the one record type each topic carries.
    fn subject(topic: &str) -> String {
        super::registry::value_subject(topic)
    }

    /// The Avro value of `self`, in the shape of [`Self::schema`].
    fn to_avro(&self) -> Result<Value, FieldError>;

    /// Reads a value that conforms to (has been resolved to) [`Self::schema`].
    fn from_avro(value: Value) -> Result<Self, FieldError>;
}

// ---------------------------------------------------------------------------------------------
// Building values

pub(super) fn record(fields: Vec<(&str, Value)>) -> Value {
    Value::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

pub(super) fn string(s: impl ToString) -> Value {
    Value::String(s.to_string())
}

pub(super) fn json(v: &serde_json::Value) -> Value {
    Value::String(v.to_string())
}

/// A `["null", X]` union.
pub(super) fn optional<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    match v {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(v) => Value::Union(1, Box::new(f(v))),
    }
}

pub(super) fn branch(index: u32, v: Value) -> Value {
    Value::Union(index, Box::new(v))
}

pub(super) fn enum_value(index: u32, symbol: &str) -> Value {
    Value::Enum(index, symbol.to_string())
}

/// `u64`s are stored as the `long` with the same bits.
pub(super) fn u64_bits(v: u64) -> Value {
    Value::Long(v as i64)
}

pub(super) fn instant(t: &DateTime<Utc>) -> Value {
    record(vec![
        ("micros", Value::TimestampMicros(t.timestamp_micros())),
        (
            "nanos",
            Value::Int((t.timestamp_subsec_nanos() % 1000) as i32),
        ),
    ])
}

fn ran(r: &Ran) -> Value {
    record(vec![
        ("started_at", instant(&r.started_at)),
        ("finished_at", instant(&r.finished_at)),
    ])
}

fn read_ran(v: Value) -> Result<Ran, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(Ran {
        started_at: f.get("started_at", read_instant)?,
        finished_at: f.get("finished_at", read_instant)?,
    })
}

pub(super) fn string_map(m: &BTreeMap<String, String>) -> Value {
    Value::Map(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<HashMap<_, _>>(),
    )
}

fn child_kind(k: ChildKind) -> Value {
    match k {
        ChildKind::Workflow => enum_value(0, "WORKFLOW"),
        ChildKind::Activity => enum_value(1, "ACTIVITY"),
        ChildKind::Stub => enum_value(2, "STUB"),
        ChildKind::StubWrite => enum_value(3, "STUB_WRITE"),
    }
}

fn parent(p: &ParentRef) -> Value {
    record(vec![
        ("execution_id", string(&p.execution_id)),
        ("join_set_id", string(&p.join_set_id)),
        ("child_kind", child_kind(p.child_kind)),
    ])
}

const ERROR_KINDS: [(ExecutionErrorKind, &str); 13] = [
    (ExecutionErrorKind::TimedOut, "TIMED_OUT"),
    (
        ExecutionErrorKind::NondeterminismDetected,
        "NONDETERMINISM_DETECTED",
    ),
    (ExecutionErrorKind::Cancelled, "CANCELLED"),
    (ExecutionErrorKind::Trap, "TRAP"),
    (ExecutionErrorKind::OutOfFuel, "OUT_OF_FUEL"),
    (ExecutionErrorKind::OutOfMemory, "OUT_OF_MEMORY"),
    (
        ExecutionErrorKind::UnhandledChildExecutionError,
        "UNHANDLED_CHILD_EXECUTION_ERROR",
    ),
    (ExecutionErrorKind::InvalidParams, "INVALID_PARAMS"),
    (ExecutionErrorKind::RetriesExhausted, "RETRIES_EXHAUSTED"),
    (ExecutionErrorKind::UnknownFunction, "UNKNOWN_FUNCTION"),
    (ExecutionErrorKind::Conflict, "CONFLICT"),
    (ExecutionErrorKind::ValueTooLarge, "VALUE_TOO_LARGE"),
    (ExecutionErrorKind::InvalidResponse, "INVALID_RESPONSE"),
];

fn result(r: &ExecutionResult) -> Value {
    let outcome = match r {
        ExecutionResult::Ok(v) => branch(0, record(vec![("value", json(v))])),
        ExecutionResult::Err(v) => branch(1, record(vec![("value", json(v))])),
        ExecutionResult::ExecutionError(e) => {
            let (index, symbol) = ERROR_KINDS
                .iter()
                .enumerate()
                .find(|(_, (k, _))| *k == e.kind)
                .map(|(i, (_, s))| (i as u32, *s))
                .expect("every ExecutionErrorKind has a symbol");
            branch(
                2,
                record(vec![
                    ("kind", enum_value(index, symbol)),
                    ("reason", string(&e.reason)),
                    ("detail", optional(e.detail.as_ref(), string)),
                ]),
            )
        }
    };
    record(vec![("outcome", outcome)])
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

fn response(r: &Response) -> Value {
    let body = match r {
        Response::ChildExecutionFinished {
            child_execution_id,
            result: res,
            ran: r,
        } => branch(
            0,
            record(vec![
                ("child_execution_id", string(child_execution_id)),
                ("result", result(res)),
                ("ran", optional(r.as_ref(), ran)),
            ]),
        ),
        Response::DelayFinished { delay_id, outcome } => branch(
            1,
            record(vec![
                ("delay_id", string(delay_id)),
                (
                    "outcome",
                    match outcome {
                        DelayOutcome::Ok => enum_value(0, "OK"),
                        DelayOutcome::Cancelled => enum_value(1, "CANCELLED"),
                    },
                ),
            ]),
        ),
        // Only in history (`weir.responses` never carries one).
        Response::EventDelivered {
            event_request_id,
            outcome,
        } => branch(
            2,
            record(vec![
                ("event_request_id", string(event_request_id)),
                (
                    "event",
                    match outcome {
                        EventOutcome::Received { event_id, payload } => branch(
                            1,
                            record(vec![
                                ("event_id", string(event_id)),
                                ("payload", json(payload)),
                            ]),
                        ),
                        EventOutcome::Cancelled => branch(0, Value::Null),
                    },
                ),
            ]),
        ),
    };
    record(vec![("response", body)])
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

// ---------------------------------------------------------------------------------------------
// Reading values

/// The fields of a record value, taken out by name.
pub(super) struct Fields {
    fields: Vec<(String, Value)>,
}

impl Fields {
    pub(super) fn of(v: Value) -> Result<Fields, FieldError> {
        match v {
            Value::Record(fields) => Ok(Fields { fields }),
            other => Err(FieldError::new(
                "",
                format!("expected a record, got {other:?}"),
            )),
        }
    }

    fn take(&mut self, name: &str) -> Result<Value, FieldError> {
        self.fields
            .iter_mut()
            .find(|(k, _)| k == name)
            .map(|(_, v)| std::mem::replace(v, Value::Null))
            .ok_or_else(|| FieldError::new(name, "missing"))
    }

    /// Takes field `name` and converts it with `f`, naming the field in errors.
    pub(super) fn get<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(Value) -> Result<T, FieldError>,
    ) -> Result<T, FieldError> {
        f(self.take(name)?).map_err(|e| e.within(name))
    }
}

pub(super) fn unexpected(what: &str, got: &Value) -> FieldError {
    let shown = prefix(&format!("{got:?}"), 80);
    FieldError::new("", format!("expected {what}, got {shown}"))
}

pub(super) fn read_string(v: Value) -> Result<String, FieldError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(unexpected("a string", &other)),
    }
}

pub(super) fn read_parsed<T: FromStr>(v: Value) -> Result<T, FieldError>
where
    T::Err: std::fmt::Display,
{
    let s = read_string(v)?;
    s.parse::<T>()
        .map_err(|e| FieldError::new("", e.to_string()))
}

fn read_json(v: Value) -> Result<serde_json::Value, FieldError> {
    let s = read_string(v)?;
    serde_json::from_str(&s).map_err(|e| FieldError::new("", format!("not JSON text: {e}")))
}

pub(super) fn read_params(v: Value) -> Result<serde_json::Value, FieldError> {
    let params = read_json(v)?;
    if params.is_array() {
        Ok(params)
    } else {
        Err(FieldError::new("", "params must be a JSON array"))
    }
}

fn read_long(v: Value) -> Result<i64, FieldError> {
    match v {
        Value::Long(n) => Ok(n),
        Value::Int(n) => Ok(n.into()),
        other => Err(unexpected("a long", &other)),
    }
}

fn read_int(v: Value) -> Result<i32, FieldError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected("an int", &other)),
    }
}

pub(super) fn read_u64_bits(v: Value) -> Result<u64, FieldError> {
    read_long(v).map(|n| n as u64)
}

fn read_bool(v: Value) -> Result<bool, FieldError> {
    match v {
        Value::Boolean(b) => Ok(b),
        other => Err(unexpected("a boolean", &other)),
    }
}

pub(super) fn read_bytes(v: Value) -> Result<Vec<u8>, FieldError> {
    match v {
        Value::Bytes(b) => Ok(b),
        other => Err(unexpected("bytes", &other)),
    }
}

pub(super) fn read_optional<T>(
    v: Value,
    f: impl FnOnce(Value) -> Result<T, FieldError>,
) -> Result<Option<T>, FieldError> {
    match v {
        Value::Union(_, inner) if *inner == Value::Null => Ok(None),
        Value::Null => Ok(None),
        Value::Union(_, inner) => f(*inner).map(Some),
        other => Err(unexpected("an optional value", &other)),
    }
}

/// A union value: its branch index (in the current schema) and the value.
fn read_branch(v: Value) -> Result<(u32, Value), FieldError> {
    match v {
        Value::Union(i, inner) => Ok((i, *inner)),
        other => Err(unexpected("a union", &other)),
    }
}

pub(super) fn read_symbol(v: Value) -> Result<String, FieldError> {
    match v {
        Value::Enum(_, s) => Ok(s),
        other => Err(unexpected("an enum symbol", &other)),
    }
}

fn bad_branch(i: u32) -> FieldError {
    FieldError::new("", format!("union branch {i} does not exist"))
}

pub(super) fn bad_symbol(s: &str) -> FieldError {
    FieldError::new("", format!("unknown symbol `{s}`"))
}

pub(super) fn read_instant(v: Value) -> Result<DateTime<Utc>, FieldError> {
    let mut f = Fields::of(v)?;
    let micros = f.get("micros", |v| match v {
        Value::TimestampMicros(n) | Value::Long(n) => Ok(n),
        other => Err(unexpected("timestamp-micros", &other)),
    })?;
    let nanos = f.get("nanos", read_int)?;
    if !(0..1000).contains(&nanos) {
        return Err(FieldError::new(
            "nanos",
            format!("{nanos} is not in 0..=999"),
        ));
    }
    DateTime::from_timestamp_micros(micros)
        .and_then(|t| t.checked_add_signed(chrono::TimeDelta::nanoseconds(nanos.into())))
        .ok_or_else(|| FieldError::new("micros", format!("{micros} µs is out of range")))
}

pub(super) fn read_string_map(v: Value) -> Result<BTreeMap<String, String>, FieldError> {
    match v {
        Value::Map(m) => m
            .into_iter()
            .map(|(k, v)| read_string(v).map(|v| (k, v)))
            .collect(),
        other => Err(unexpected("a map", &other)),
    }
}

fn read_child_kind(v: Value) -> Result<ChildKind, FieldError> {
    match read_symbol(v)?.as_str() {
        "WORKFLOW" => Ok(ChildKind::Workflow),
        "ACTIVITY" => Ok(ChildKind::Activity),
        "STUB" => Ok(ChildKind::Stub),
        "STUB_WRITE" => Ok(ChildKind::StubWrite),
        s => Err(bad_symbol(s)),
    }
}

fn read_parent(v: Value) -> Result<ParentRef, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(ParentRef {
        execution_id: f.get("execution_id", read_parsed)?,
        join_set_id: f.get("join_set_id", read_parsed)?,
        child_kind: f.get("child_kind", read_child_kind)?,
    })
}

fn read_result(v: Value) -> Result<ExecutionResult, FieldError> {
    read_result_with(v, read_json)
}

/// A result whose `ok` / `err` value (JSON text) is read by `value`.
fn read_result_with(
    v: Value,
    mut value: impl FnMut(Value) -> Result<serde_json::Value, FieldError>,
) -> Result<ExecutionResult, FieldError> {
    let mut f = Fields::of(v)?;
    f.get("outcome", |v| {
        let (i, v) = read_branch(v)?;
        let mut b = Fields::of(v)?;
        match i {
            0 => Ok(ExecutionResult::Ok(b.get("value", &mut value)?)),
            1 => Ok(ExecutionResult::Err(b.get("value", &mut value)?)),
            2 => {
                let kind = b.get("kind", |v| {
                    let s = read_symbol(v)?;
                    ERROR_KINDS
                        .iter()
                        .find(|(_, sym)| *sym == s)
                        .map(|(k, _)| *k)
                        .ok_or_else(|| bad_symbol(&s))
                })?;
                Ok(ExecutionResult::ExecutionError(ExecutionError {
                    kind,
                    reason: b.get("reason", read_string)?,
                    detail: b.get("detail", |v| read_optional(v, read_string))?,
                }))
            }
            i => Err(bad_branch(i)),
        }
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

fn read_response(v: Value) -> Result<Response, FieldError> {
    read_response_with(v, read_json)
}

/// A response whose result value (JSON text), if it has one, is read by `value`.
fn read_response_with(
    v: Value,
    value: impl FnMut(Value) -> Result<serde_json::Value, FieldError>,
) -> Result<Response, FieldError> {
    let mut f = Fields::of(v)?;
    f.get("response", |v| {
        let (i, v) = read_branch(v)?;
        let mut b = Fields::of(v)?;
        match i {
            0 => Ok(Response::ChildExecutionFinished {
                child_execution_id: b.get("child_execution_id", read_parsed)?,
                result: b.get("result", |v| read_result_with(v, value))?,
                ran: b.get("ran", |v| read_optional(v, read_ran))?,
            }),
            1 => Ok(Response::DelayFinished {
                delay_id: b.get("delay_id", read_parsed)?,
                outcome: b.get("outcome", |v| match read_symbol(v)?.as_str() {
                    "OK" => Ok(DelayOutcome::Ok),
                    "CANCELLED" => Ok(DelayOutcome::Cancelled),
                    s => Err(bad_symbol(s)),
                })?,
            }),
            2 => Ok(Response::EventDelivered {
                event_request_id: b.get("event_request_id", read_parsed)?,
                outcome: b.get("event", |v| {
                    Ok(match read_optional(v, Fields::of)? {
                        None => EventOutcome::Cancelled,
                        Some(mut e) => EventOutcome::Received {
                            event_id: e.get("event_id", read_string)?,
                            payload: e.get("payload", read_json)?,
                        },
                    })
                })?,
            }),
            i => Err(bad_branch(i)),
        }
    })
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

// ---------------------------------------------------------------------------------------------
// The records

impl AvroRecord for Submission {
    const NAME: &'static str = "Submission";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("ffqn", string(&self.ffqn)),
            ("params", json(&self.params)),
            ("parent", optional(self.parent.as_ref(), parent)),
            (
                "scheduled_at",
                optional(self.scheduled_at.as_ref(), instant),
            ),
            (
                "correlation_id",
                optional(self.correlation_id.as_ref(), string),
            ),
            ("metadata", string_map(&self.metadata)),
            ("deadline", optional(self.deadline.as_ref(), instant)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(Submission {
            execution_id: f.get("execution_id", read_parsed)?,
            ffqn: f.get("ffqn", read_parsed)?,
            params: f.get("params", read_params)?,
            parent: f.get("parent", |v| read_optional(v, read_parent))?,
            scheduled_at: f.get("scheduled_at", |v| read_optional(v, read_instant))?,
            correlation_id: f.get("correlation_id", |v| read_optional(v, read_string))?,
            metadata: f.get("metadata", read_string_map)?,
            deadline: f.get("deadline", |v| read_optional(v, read_instant))?,
        })
    }
}

/// A `Submission` as the workflow worker reads it: every field as [`Submission`] reads them,
/// except that params which are not a JSON array do not fail the record; they are kept as
/// their text (a JSON string) with the reason, so that the execution can still be created
/// and finished with `invalid-params` for its caller to hear (issue 11 item 9). Likewise a
/// function name that does not parse: `ffqn` is then
/// [`unparsable_ffqn`](weir_core::records::unparsable_ffqn) and `ffqn_error`
/// says why, so that the caller hears `unknown-function`.
#[derive(Clone, Debug, PartialEq)]
pub struct SubmissionInput {
    pub submission: Submission,
    pub params_error: Option<String>,
    pub ffqn_error: Option<String>,
}

/// A `Response` as the workflow worker reads it: a child's answer whose value is not JSON
/// text does not fail the record, because its child id is readable: it becomes that child's
/// `invalid-response` error, and `value_error` says why (issue 11 item 15).
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseInput {
    pub response: Response,
    pub value_error: Option<String>,
}

impl AvroRecord for ResponseInput {
    const NAME: &'static str = "Response";

    fn to_avro(&self) -> Result<Value, FieldError> {
        self.response.to_avro()
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut value_error = None;
        let response = read_response_with(value, |v| {
            let text = read_string(v)?;
            Ok(serde_json::from_str(&text).unwrap_or_else(|e| {
                value_error = Some(format!(
                    "the value is not JSON text ({e}): `{}`",
                    prefix(&text, 200)
                ));
                serde_json::Value::Null
            }))
        })?;
        let response = match (response, &value_error) {
            (
                Response::ChildExecutionFinished {
                    child_execution_id,
                    ran,
                    ..
                },
                Some(error),
            ) => Response::ChildExecutionFinished {
                result: ExecutionResult::ExecutionError(ExecutionError {
                    kind: ExecutionErrorKind::InvalidResponse,
                    reason: format!("the answer for {child_execution_id} was not taken: {error}"),
                    detail: None,
                }),
                child_execution_id,
                ran,
            },
            (response, _) => response,
        };
        Ok(ResponseInput {
            response,
            value_error,
        })
    }
}

/// At most `max` bytes of `text`, cut at a character boundary, with `…` if cut.
fn prefix(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

impl AvroRecord for SubmissionInput {
    const NAME: &'static str = "Submission";

    fn to_avro(&self) -> Result<Value, FieldError> {
        self.submission.to_avro()
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let execution_id = f.get("execution_id", read_parsed)?;
        let name = f.get("ffqn", read_string)?;
        let (ffqn, ffqn_error) = match name.parse() {
            Ok(ffqn) => (ffqn, None),
            Err(e) => (weir_core::records::unparsable_ffqn(), Some(format!("{e}"))),
        };
        let text = f.get("params", read_string)?;
        let (params, params_error) = match read_params(Value::String(text.clone())) {
            Ok(params) => (params, None),
            Err(e) => (serde_json::Value::String(text), Some(e.to_string())),
        };
        Ok(SubmissionInput {
            submission: Submission {
                execution_id,
                ffqn,
                params,
                parent: f.get("parent", |v| read_optional(v, read_parent))?,
                scheduled_at: f.get("scheduled_at", |v| read_optional(v, read_instant))?,
                correlation_id: f.get("correlation_id", |v| read_optional(v, read_string))?,
                metadata: f.get("metadata", read_string_map)?,
                deadline: f.get("deadline", |v| read_optional(v, read_instant))?,
            },
            params_error,
            ffqn_error,
        })
    }
}

impl AvroRecord for Response {
    const NAME: &'static str = "Response";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(response(self))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        read_response(value)
    }
}

impl AvroRecord for ActivityRequest {
    const NAME: &'static str = "ActivityRequest";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let attempt = i32::try_from(self.attempt)
            .map_err(|_| FieldError::new("attempt", "exceeds i32::MAX"))?;
        let timeout = self
            .timeout_millis
            .map(i64::try_from)
            .transpose()
            .map_err(|_| FieldError::new("timeout_millis", "exceeds i64::MAX"))?;
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("parent_execution_id", string(&self.parent_execution_id)),
            ("ffqn", string(&self.ffqn)),
            ("params", json(&self.params)),
            ("attempt", Value::Int(attempt)),
            ("timeout_millis", optional(timeout, Value::Long)),
            ("deadline", optional(self.deadline.as_ref(), instant)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ActivityRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            parent_execution_id: f.get("parent_execution_id", read_parsed)?,
            ffqn: f.get("ffqn", read_parsed)?,
            params: f.get("params", read_params)?,
            attempt: f.get("attempt", |v| {
                u32::try_from(read_int(v)?).map_err(|_| FieldError::new("", "negative attempt"))
            })?,
            timeout_millis: f.get("timeout_millis", |v| {
                read_optional(v, |v| {
                    u64::try_from(read_long(v)?)
                        .map_err(|_| FieldError::new("", "negative timeout"))
                })
            })?,
            deadline: f.get("deadline", |v| read_optional(v, read_instant))?,
        })
    }
}

impl AvroRecord for UpgradeRequest {
    const NAME: &'static str = "UpgradeRequest";

    /// `<topic>-dev.weir.v1.UpgradeRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("component", string(&self.component)),
            ("expected_seq", u64_bits(self.expected_seq)),
            ("requested_at", instant(&self.requested_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(UpgradeRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            component: f.get("component", read_string)?,
            expected_seq: f.get("expected_seq", read_u64_bits)?,
            requested_at: f.get("requested_at", read_instant)?,
        })
    }
}

impl AvroRecord for PauseRequest {
    const NAME: &'static str = "PauseRequest";

    /// `<topic>-dev.weir.v1.PauseRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let action = match self.action {
            PauseAction::Pause => enum_value(0, "PAUSE"),
            PauseAction::Resume => enum_value(1, "RESUME"),
        };
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("action", action),
            ("reason", string(&self.reason)),
            ("requested_at", instant(&self.requested_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(PauseRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            action: f.get("action", |v| match read_symbol(v)?.as_str() {
                "PAUSE" => Ok(PauseAction::Pause),
                "RESUME" => Ok(PauseAction::Resume),
                other => Err(bad_symbol(other)),
            })?,
            reason: f.get("reason", read_string)?,
            requested_at: f.get("requested_at", read_instant)?,
        })
    }
}

impl AvroRecord for weir_core::control::RoutePause {
    const NAME: &'static str = "RoutePause";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("route", string(&self.route)),
            ("reason", string(&self.reason)),
            ("paused_at", instant(&self.paused_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(weir_core::control::RoutePause {
            route: f.get("route", read_string)?,
            reason: f.get("reason", read_string)?,
            paused_at: f.get("paused_at", read_instant)?,
        })
    }
}

fn received_event(event: &ReceivedEvent) -> Value {
    record(vec![
        ("event_id", string(&event.event_id)),
        ("name", string(&event.name)),
        ("payload", json(&event.payload)),
    ])
}

/// An event's id, name and payload, each checked: an event that breaks the rules never
/// reaches an execution (it is dead-lettered as undecodable, with why).
fn read_received_event(f: &mut Fields) -> Result<ReceivedEvent, FieldError> {
    let event_id = f.get("event_id", |v| {
        let id = read_string(v)?;
        check_event_id(&id).map_err(|e| FieldError::new("", e.to_string()))?;
        Ok(id)
    })?;
    let name = f.get("name", |v| {
        let name = read_string(v)?;
        check_event_name(&name).map_err(|e| FieldError::new("", e.to_string()))?;
        Ok(name)
    })?;
    Ok(ReceivedEvent {
        event_id,
        name,
        payload: f.get("payload", read_json)?,
    })
}

/// The value of an `InboundEvent` record (`weir.events`) for `target`, an execution id or a
/// correlation key.
fn event_value(
    event: &ReceivedEvent,
    target: &str,
    sent_at: &DateTime<Utc>,
    correlation_key: Option<&String>,
    returned_by: Option<&ExecutionId>,
    waited_until: Option<&DateTime<Utc>>,
) -> Value {
    let Value::Record(mut fields) = received_event(event) else {
        unreachable!("record() builds a record")
    };
    fields.insert(1, ("target".to_owned(), string(target)));
    fields.extend([
        ("sent_at".to_owned(), instant(sent_at)),
        (
            "correlation_key".to_owned(),
            optional(correlation_key, string),
        ),
        ("returned_by".to_owned(), optional(returned_by, string)),
        ("waited_until".to_owned(), optional(waited_until, instant)),
    ]);
    Value::Record(fields)
}

/// The key of a `CorrelationState`: a correlation key, or the id of an execution that does
/// not exist yet, for which events are kept ([`correlation::hold_early`]).
fn read_state_key(v: Value) -> Result<String, FieldError> {
    let key = read_string(v)?;
    StateKey::for_events(&key).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(key)
}

fn read_correlation_key(v: Value) -> Result<String, FieldError> {
    let key = read_string(v)?;
    check_correlation_key(&key).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(key)
}

/// A record of `weir.events` (`InboundEvent`), told apart by its target: an execution id
/// (`E_…`) makes an event for that execution, anything else an event for a correlation key,
/// which must pass [`check_correlation_key`] (else the record does not decode, and the DLQ
/// says why).
#[derive(Clone, Debug, PartialEq)]
pub enum EventRecord {
    /// For an execution (sent to it, or forwarded to it by a key: `correlation_key` set).
    Execution(InboundEvent),
    /// For a correlation key (sent to it, or sent back by a finished holder: `returned_by`).
    Keyed(KeyedEvent),
}

impl EventRecord {
    /// The target: the Kafka key of the record.
    pub fn target(&self) -> String {
        match self {
            EventRecord::Execution(e) => e.target.to_string(),
            EventRecord::Keyed(e) => e.key.clone(),
        }
    }

    pub fn event(&self) -> &ReceivedEvent {
        match self {
            EventRecord::Execution(e) => &e.event,
            EventRecord::Keyed(e) => &e.event,
        }
    }
}

impl AvroRecord for EventRecord {
    const NAME: &'static str = "InboundEvent";

    fn to_avro(&self) -> Result<Value, FieldError> {
        match self {
            EventRecord::Execution(e) => e.to_avro(),
            EventRecord::Keyed(e) => e.to_avro(),
        }
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let target = f.get("target", read_string)?;
        let event = read_received_event(&mut f)?;
        let sent_at = f.get("sent_at", read_instant)?;
        let correlation_key = f.get("correlation_key", |v| {
            read_optional(v, read_correlation_key)
        })?;
        let returned_by: Option<ExecutionId> =
            f.get("returned_by", |v| read_optional(v, read_parsed))?;
        let waited_until = f.get("waited_until", |v| read_optional(v, read_instant))?;
        let read =
            StateKey::for_events(&target).map_err(|e| FieldError::new("target", e.to_string()))?;
        if let StateKey::Execution(target) = read {
            if let Some(by) = returned_by {
                return Err(FieldError::new(
                    "returned_by",
                    format!(
                        "{by}: only an event for a correlation key is returned, and the target \
                         is the execution {target}"
                    ),
                ));
            }
            return Ok(EventRecord::Execution(InboundEvent {
                event,
                target,
                sent_at,
                correlation_key,
                waited_until,
            }));
        }
        if let Some(at) = waited_until {
            return Err(FieldError::new(
                "waited_until",
                format!(
                    "{at}: only an event kept for an execution waits for its submission, and \
                     the target is the correlation key `{target}`"
                ),
            ));
        }
        if let Some(key) = correlation_key {
            return Err(FieldError::new(
                "correlation_key",
                format!(
                    "`{key}`: only an event forwarded to an execution names its key, and the \
                     target is the correlation key `{target}`"
                ),
            ));
        }
        Ok(EventRecord::Keyed(KeyedEvent {
            event,
            key: target,
            sent_at,
            returned_by,
        }))
    }
}

impl AvroRecord for InboundEvent {
    const NAME: &'static str = "InboundEvent";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(event_value(
            &self.event,
            &self.target.to_string(),
            &self.sent_at,
            self.correlation_key.as_ref(),
            None,
            self.waited_until.as_ref(),
        ))
    }

    /// An event for an execution; one for a correlation key is an error (read those as an
    /// [`EventRecord`]).
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match EventRecord::from_avro(value)? {
            EventRecord::Execution(e) => Ok(e),
            EventRecord::Keyed(e) => Err(FieldError::new(
                "target",
                format!("`{}` is a correlation key, not an execution id", e.key),
            )),
        }
    }
}

/// An event for a correlation key: an `InboundEvent` whose target is the key.
impl AvroRecord for KeyedEvent {
    const NAME: &'static str = "InboundEvent";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(event_value(
            &self.event,
            &self.key,
            &self.sent_at,
            None,
            self.returned_by.as_ref(),
            None,
        ))
    }

    /// An event for a correlation key; one for an execution is an error (read those as an
    /// [`EventRecord`]).
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match EventRecord::from_avro(value)? {
            EventRecord::Keyed(e) => Ok(e),
            EventRecord::Execution(e) => Err(FieldError::new(
                "target",
                format!("`{}` is an execution id, not a correlation key", e.target),
            )),
        }
    }
}

impl AvroRecord for CancelRequest {
    const NAME: &'static str = "CancelRequest";

    /// `<topic>-dev.weir.v1.CancelRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("reason", string(&self.reason)),
            ("terminate", Value::Boolean(self.terminate)),
            ("requested_at", instant(&self.requested_at)),
            (
                "waited_until",
                optional(self.waited_until.as_ref(), instant),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(CancelRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            reason: f.get("reason", read_string)?,
            terminate: f.get("terminate", read_boolean)?,
            requested_at: f.get("requested_at", read_instant)?,
            waited_until: f.get("waited_until", |v| read_optional(v, read_instant))?,
        })
    }
}

fn read_boolean(v: Value) -> Result<bool, FieldError> {
    match v {
        Value::Boolean(b) => Ok(b),
        other => Err(unexpected("a boolean", &other)),
    }
}

impl AvroRecord for ActivityCancel {
    const NAME: &'static str = "ActivityCancel";

    /// `<topic>-dev.weir.v1.ActivityCancel` (TopicRecordNameStrategy): a route's topic carries
    /// `ActivityRequest`s under `<topic>-value`, and a second record type under that subject
    /// would fail the registry's compatibility check.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("parent_execution_id", string(&self.parent_execution_id)),
            ("cancelled_at", instant(&self.cancelled_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ActivityCancel {
            execution_id: f.get("execution_id", read_parsed)?,
            parent_execution_id: f.get("parent_execution_id", read_parsed)?,
            cancelled_at: f.get("cancelled_at", read_instant)?,
        })
    }
}

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

impl AvroRecord for DlqEnvelope {
    const NAME: &'static str = "DlqEnvelope";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let reason_index = DlqReason::ALL
            .iter()
            .position(|r| *r == self.reason)
            .expect("every reason is in ALL") as u32;
        Ok(record(vec![
            ("original_topic", string(&self.original_topic)),
            ("original_partition", Value::Int(self.original_partition)),
            ("original_offset", Value::Long(self.original_offset)),
            (
                "original_timestamp_millis",
                optional(self.original_timestamp_millis, Value::Long),
            ),
            ("key", optional(self.key.clone(), Value::Bytes)),
            ("value", optional(self.value.clone(), Value::Bytes)),
            (
                "original_headers",
                Value::Array(
                    self.original_headers
                        .iter()
                        .map(|h| {
                            record(vec![
                                ("key", string(&h.key)),
                                ("value", optional(h.value.clone(), Value::Bytes)),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("reason", enum_value(reason_index, self.reason.symbol())),
            ("error", string(&self.error)),
            ("failed_at", instant(&self.failed_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(DlqEnvelope {
            original_topic: f.get("original_topic", read_string)?,
            original_partition: f.get("original_partition", read_int)?,
            original_offset: f.get("original_offset", read_long)?,
            original_timestamp_millis: f
                .get("original_timestamp_millis", |v| read_optional(v, read_long))?,
            key: f.get("key", |v| read_optional(v, read_bytes))?,
            value: f.get("value", |v| read_optional(v, read_bytes))?,
            original_headers: f.get("original_headers", |v| match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|h| {
                        let mut h = Fields::of(h)?;
                        Ok(DlqHeader {
                            key: h.get("key", read_string)?,
                            value: h.get("value", |v| read_optional(v, read_bytes))?,
                        })
                    })
                    .collect(),
                other => Err(unexpected("an array", &other)),
            })?,
            reason: f.get("reason", |v| {
                let s = read_symbol(v)?;
                DlqReason::from_symbol(&s).ok_or_else(|| bad_symbol(&s))
            })?,
            error: f.get("error", read_string)?,
            failed_at: f.get("failed_at", read_instant)?,
        })
    }
}

fn schedule_spec(spec: &ScheduleSpec) -> Value {
    let overlap = match spec.overlap {
        Overlap::Skip => enum_value(0, "SKIP"),
        Overlap::Allow => enum_value(1, "ALLOW"),
        Overlap::CancelPrevious => enum_value(2, "CANCEL_PREVIOUS"),
    };
    record(vec![
        ("cron", string(&spec.cron)),
        ("timezone", string(&spec.timezone)),
        ("function", string(&spec.ffqn)),
        ("params", json(&spec.params)),
        ("overlap", overlap),
        (
            "catchup_window_millis",
            Value::Long(spec.catchup_window.num_milliseconds()),
        ),
    ])
}

fn read_schedule_spec(v: Value) -> Result<ScheduleSpec, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(ScheduleSpec {
        cron: f.get("cron", read_string)?,
        timezone: f.get("timezone", read_string)?,
        ffqn: f.get("function", read_parsed)?,
        params: f.get("params", read_params)?,
        overlap: f.get("overlap", |v| match read_symbol(v)?.as_str() {
            "SKIP" => Ok(Overlap::Skip),
            "ALLOW" => Ok(Overlap::Allow),
            "CANCEL_PREVIOUS" => Ok(Overlap::CancelPrevious),
            other => Err(bad_symbol(other)),
        })?,
        catchup_window: f.get("catchup_window_millis", |v| {
            let millis = read_long(v)?;
            if millis < 0 {
                return Err(FieldError::new("", "negative window"));
            }
            Ok(chrono::Duration::milliseconds(millis))
        })?,
    })
}

fn read_schedule_name(v: Value) -> Result<String, FieldError> {
    let name = read_string(v)?;
    weir_core::schedule::check_name(&name).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(name)
}

impl AvroRecord for ScheduleCommand {
    const NAME: &'static str = "ScheduleCommand";

    /// `<topic>-dev.weir.v1.ScheduleCommand` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let (action, spec, execution) = match &self.action {
            ScheduleAction::Create(spec) => (enum_value(0, "CREATE"), Some(spec), None),
            ScheduleAction::Pause => (enum_value(1, "PAUSE"), None, None),
            ScheduleAction::Resume => (enum_value(2, "RESUME"), None, None),
            ScheduleAction::Delete => (enum_value(3, "DELETE"), None, None),
            ScheduleAction::RunFinished(id) => (enum_value(4, "RUN_FINISHED"), None, Some(id)),
        };
        Ok(record(vec![
            ("name", string(&self.name)),
            ("command_id", string(&self.command_id)),
            ("action", action),
            ("spec", optional(spec, schedule_spec)),
            ("execution_id", optional(execution, string)),
            ("sent_at", instant(&self.sent_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let name = f.get("name", read_schedule_name)?;
        let command_id = f.get("command_id", read_string)?;
        let action = f.get("action", read_symbol)?;
        let spec = f.get("spec", |v| read_optional(v, read_schedule_spec))?;
        let execution: Option<crate::model::ExecutionId> =
            f.get("execution_id", |v| read_optional(v, read_parsed))?;
        let action = match (action.as_str(), spec, execution) {
            ("CREATE", Some(spec), _) => ScheduleAction::Create(spec),
            ("CREATE", None, _) => return Err(FieldError::new("spec", "missing for CREATE")),
            ("PAUSE", ..) => ScheduleAction::Pause,
            ("RESUME", ..) => ScheduleAction::Resume,
            ("DELETE", ..) => ScheduleAction::Delete,
            ("RUN_FINISHED", _, Some(id)) => ScheduleAction::RunFinished(id),
            ("RUN_FINISHED", _, None) => {
                return Err(FieldError::new("execution_id", "missing for RUN_FINISHED"));
            }
            (other, ..) => return Err(bad_symbol(other).within("action")),
        };
        Ok(ScheduleCommand {
            name,
            command_id,
            action,
            sent_at: f.get("sent_at", read_instant)?,
        })
    }
}

impl AvroRecord for ScheduleState {
    const NAME: &'static str = "ScheduleState";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let status = match self.status {
            Status::Active => enum_value(0, "ACTIVE"),
            Status::Paused => enum_value(1, "PAUSED"),
        };
        Ok(record(vec![
            ("name", string(&self.name)),
            ("generation", string(&self.generation)),
            ("spec", schedule_spec(&self.spec)),
            ("status", status),
            ("last_tick", optional(self.last_tick.as_ref(), instant)),
            ("next_tick", optional(self.next_tick.as_ref(), instant)),
            (
                "running",
                Value::Array(self.running.iter().map(string).collect()),
            ),
            ("started", u64_bits(self.started)),
            ("skipped", u64_bits(self.skipped)),
            ("missed", u64_bits(self.missed)),
            ("updated_at", instant(&self.updated_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ScheduleState {
            name: f.get("name", read_schedule_name)?,
            generation: f.get("generation", read_string)?,
            spec: f.get("spec", read_schedule_spec)?,
            status: f.get("status", |v| match read_symbol(v)?.as_str() {
                "ACTIVE" => Ok(Status::Active),
                "PAUSED" => Ok(Status::Paused),
                other => Err(bad_symbol(other)),
            })?,
            last_tick: f.get("last_tick", |v| read_optional(v, read_instant))?,
            next_tick: f.get("next_tick", |v| read_optional(v, read_instant))?,
            running: f.get("running", |v| match v {
                Value::Array(items) => items.into_iter().map(read_parsed).collect(),
                other => Err(unexpected("an array", &other)),
            })?,
            started: f.get("started", read_u64_bits)?,
            skipped: f.get("skipped", read_u64_bits)?,
            missed: f.get("missed", read_u64_bits)?,
            updated_at: f.get("updated_at", read_instant)?,
        })
    }
}

impl AvroRecord for CorrelationCommand {
    const NAME: &'static str = "CorrelationCommand";

    /// `<topic>-dev.weir.v1.CorrelationCommand` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let action = match self.action {
            CorrelationAction::Register => enum_value(0, "REGISTER"),
            CorrelationAction::Unregister => enum_value(1, "UNREGISTER"),
        };
        Ok(record(vec![
            ("key", string(&self.key)),
            ("execution_id", string(&self.execution_id)),
            ("action", action),
            ("sent_at", instant(&self.sent_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(CorrelationCommand {
            key: f.get("key", read_correlation_key)?,
            execution_id: f.get("execution_id", read_parsed)?,
            action: f.get("action", |v| match read_symbol(v)?.as_str() {
                "REGISTER" => Ok(CorrelationAction::Register),
                "UNREGISTER" => Ok(CorrelationAction::Unregister),
                other => Err(bad_symbol(other)),
            })?,
            sent_at: f.get("sent_at", read_instant)?,
        })
    }
}

/// A key's state as a record of `weir.state` holds it: with the ids the key remembers, in a
/// record an earlier Weir wrote (this one writes none there: each is a [`RememberedEvent`] of
/// its own, and a new owner moves the old ones out).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCorrelation {
    pub state: CorrelationState,
    pub forwarded: Vec<Forwarded>,
}

impl StoredCorrelation {
    /// `state` as this Weir writes it.
    pub fn of(state: CorrelationState) -> Self {
        StoredCorrelation {
            state,
            forwarded: Vec::new(),
        }
    }
}

impl AvroRecord for RememberedEvent {
    const NAME: &'static str = "RememberedEvent";

    /// `<topic>-dev.weir.v1.RememberedEvent` (TopicRecordNameStrategy): the state topic
    /// carries `ScheduleState`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("key", string(&self.key)),
            ("event_id", string(&self.forwarded.event_id)),
            ("at", instant(&self.forwarded.at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let key = f.get("key", read_string)?;
        check_correlation_key(&key).map_err(|e| FieldError::new("key", e.to_string()))?;
        Ok(RememberedEvent {
            key,
            forwarded: Forwarded {
                event_id: f.get("event_id", read_string)?,
                at: f.get("at", read_instant)?,
            },
        })
    }
}

impl AvroRecord for StoredCorrelation {
    const NAME: &'static str = "CorrelationState";

    /// `<topic>-dev.weir.v1.CorrelationState` (TopicRecordNameStrategy): the state topic
    /// carries `ScheduleState`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let StoredCorrelation { state, forwarded } = self;
        let buffered = state
            .buffered
            .iter()
            .map(|b| {
                let Value::Record(mut fields) = received_event(&b.event) else {
                    unreachable!("record() builds a record")
                };
                fields.push(("sent_at".to_owned(), instant(&b.sent_at)));
                Value::Record(fields)
            })
            .collect();
        Ok(record(vec![
            ("key", string(&state.key)),
            (
                "holders",
                Value::Array(state.holders.iter().map(string).collect()),
            ),
            ("buffered", Value::Array(buffered)),
            (
                "forwarded",
                Value::Array(
                    forwarded
                        .iter()
                        .map(|f| {
                            record(vec![
                                ("event_id", string(&f.event_id)),
                                ("at", instant(&f.at)),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("waits_until", optional(state.waits_until.as_ref(), instant)),
            (
                "cancel",
                optional(state.cancel.as_ref(), |c| {
                    record(vec![
                        ("reason", string(&c.reason)),
                        ("terminate", Value::Boolean(c.terminate)),
                        ("requested_at", instant(&c.requested_at)),
                    ])
                }),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let key = f.get("key", read_state_key)?;
        // A kept cancellation is of the execution whose id is the key.
        let cancel = f.get("cancel", |v| {
            read_optional(v, |v| {
                let mut c = Fields::of(v)?;
                Ok(Box::new(CancelRequest {
                    execution_id: read_parsed(Value::String(key.clone()))?,
                    reason: c.get("reason", read_string)?,
                    terminate: c.get("terminate", read_boolean)?,
                    requested_at: c.get("requested_at", read_instant)?,
                    waited_until: None,
                }))
            })
        })?;
        let forwarded = f.get("forwarded", |v| match v {
            Value::Array(items) => items
                .into_iter()
                .map(|item| {
                    let mut r = Fields::of(item)?;
                    Ok(Forwarded {
                        event_id: r.get("event_id", read_string)?,
                        at: r.get("at", read_instant)?,
                    })
                })
                .collect(),
            other => Err(unexpected("an array", &other)),
        })?;
        let state = CorrelationState {
            cancel,
            key,
            holders: f.get("holders", |v| match v {
                Value::Array(items) => items.into_iter().map(read_parsed).collect(),
                other => Err(unexpected("an array", &other)),
            })?,
            buffered: f.get("buffered", |v| match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|item| {
                        let mut b = Fields::of(item)?;
                        Ok(BufferedEvent {
                            event: read_received_event(&mut b)?,
                            sent_at: b.get("sent_at", read_instant)?,
                        })
                    })
                    .collect(),
                other => Err(unexpected("an array", &other)),
            })?,
            waits_until: f.get("waits_until", |v| read_optional(v, read_instant))?,
        };
        Ok(StoredCorrelation { state, forwarded })
    }
}

/// A `Created.reset_of` (the `ResetOf` record).
pub(super) fn reset_of(link: &super::records::ResetOf) -> Value {
    record(vec![
        ("execution_id", string(&link.execution_id)),
        ("seq", u64_bits(link.seq)),
    ])
}

pub(super) fn read_reset_of(v: Value) -> Result<super::records::ResetOf, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(super::records::ResetOf {
        execution_id: f.get("execution_id", read_parsed)?,
        seq: f.get("seq", read_u64_bits)?,
    })
}
