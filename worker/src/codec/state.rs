//! The records of schedules and correlation keys: [`ScheduleCommand`]
//! (`schedule_command.avsc`), [`ScheduleState`] (`schedule_state.avsc`), [`CorrelationCommand`]
//! (`correlation_command.avsc`), [`RememberedEvent`] (`remembered_event.avsc`) and
//! [`StoredCorrelation`] (`correlation_state.avsc`).

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, json, optional, read_bool,
    read_correlation_key, read_instant, read_long, read_optional, read_params, read_parsed,
    read_received_event, read_string, read_symbol, read_u64_bits, received_event, record, string,
    u64_bits, unexpected,
};
use super::error::FieldError;
use super::records::CancelRequest;
use weir_core::correlation::{
    BufferedEvent, CorrelationAction, CorrelationCommand, CorrelationState, Forwarded,
    RememberedEvent,
};
use weir_core::schedule::{
    Overlap, ScheduleAction, ScheduleCommand, ScheduleSpec, ScheduleState, Status,
};
use weir_core::state_key::{StateKey, check_correlation_key};

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
                    terminate: c.get("terminate", read_bool)?,
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

/// The key of a `CorrelationState`: a correlation key, or the id of an execution that does
/// not exist yet, for which events are kept ([`correlation::hold_early`]).
fn read_state_key(v: Value) -> Result<String, FieldError> {
    let key = read_string(v)?;
    StateKey::for_events(&key).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(key)
}
