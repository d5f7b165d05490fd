//! Conversions between the model / record types and Avro [`Value`]s of the current schemas.
//!
//! Encoding builds values by field name; decoding reads values already resolved to the current
//! (reader) schema, so union branch indexes are those of the current schema files.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use apache_avro::types::Value;
use chrono::{DateTime, Utc};

use super::error::FieldError;
use super::records::{ParentRef, ReceivedEvent};
use super::schemas::{RecordSchema, current_named};
use crate::model::{
    ChildKind, ExecutionError, ExecutionErrorKind, ExecutionResult, check_event_id,
    check_event_name,
};
use weir_core::state_key::check_correlation_key;

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

pub(super) fn string_map(m: &BTreeMap<String, String>) -> Value {
    Value::Map(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<HashMap<_, _>>(),
    )
}

pub(super) fn child_kind(k: ChildKind) -> Value {
    match k {
        ChildKind::Workflow => enum_value(0, "WORKFLOW"),
        ChildKind::Activity => enum_value(1, "ACTIVITY"),
        ChildKind::Stub => enum_value(2, "STUB"),
        ChildKind::StubWrite => enum_value(3, "STUB_WRITE"),
    }
}

pub(super) fn parent(p: &ParentRef) -> Value {
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

pub(super) fn result(r: &ExecutionResult) -> Value {
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

pub(super) fn read_json(v: Value) -> Result<serde_json::Value, FieldError> {
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

pub(super) fn read_long(v: Value) -> Result<i64, FieldError> {
    match v {
        Value::Long(n) => Ok(n),
        Value::Int(n) => Ok(n.into()),
        other => Err(unexpected("a long", &other)),
    }
}

pub(super) fn read_int(v: Value) -> Result<i32, FieldError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected("an int", &other)),
    }
}

pub(super) fn read_u64_bits(v: Value) -> Result<u64, FieldError> {
    read_long(v).map(|n| n as u64)
}

pub(super) fn read_bool(v: Value) -> Result<bool, FieldError> {
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
pub(super) fn read_branch(v: Value) -> Result<(u32, Value), FieldError> {
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

pub(super) fn bad_branch(i: u32) -> FieldError {
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

pub(super) fn read_child_kind(v: Value) -> Result<ChildKind, FieldError> {
    match read_symbol(v)?.as_str() {
        "WORKFLOW" => Ok(ChildKind::Workflow),
        "ACTIVITY" => Ok(ChildKind::Activity),
        "STUB" => Ok(ChildKind::Stub),
        "STUB_WRITE" => Ok(ChildKind::StubWrite),
        s => Err(bad_symbol(s)),
    }
}

pub(super) fn read_parent(v: Value) -> Result<ParentRef, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(ParentRef {
        execution_id: f.get("execution_id", read_parsed)?,
        join_set_id: f.get("join_set_id", read_parsed)?,
        child_kind: f.get("child_kind", read_child_kind)?,
    })
}

pub(super) fn read_result(v: Value) -> Result<ExecutionResult, FieldError> {
    read_result_with(v, read_json)
}

/// A result whose `ok` / `err` value (JSON text) is read by `value`.
pub(super) fn read_result_with(
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

/// At most `max` bytes of `text`, cut at a character boundary, with `…` if cut.
pub(super) fn prefix(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

pub(super) fn received_event(event: &ReceivedEvent) -> Value {
    record(vec![
        ("event_id", string(&event.event_id)),
        ("name", string(&event.name)),
        ("payload", json(&event.payload)),
    ])
}

/// An event's id, name and payload, each checked: an event that breaks the rules never
/// reaches an execution (it is dead-lettered as undecodable, with why).
pub(super) fn read_received_event(f: &mut Fields) -> Result<ReceivedEvent, FieldError> {
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

pub(super) fn read_correlation_key(v: Value) -> Result<String, FieldError> {
    let key = read_string(v)?;
    check_correlation_key(&key).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(key)
}
