//! The records of `weir.events` (`InboundEvent`, `event.avsc`): [`EventRecord`], told apart by
//! its target into an event for an execution ([`InboundEvent`]) or for a correlation key
//! ([`KeyedEvent`]).

use apache_avro::types::Value;
use chrono::{DateTime, Utc};

use super::convert::{
    AvroRecord, Fields, instant, optional, read_correlation_key, read_instant, read_optional,
    read_parsed, read_received_event, read_string, received_event, string,
};
use super::error::FieldError;
use super::records::{InboundEvent, ReceivedEvent};
use crate::model::ExecutionId;
use weir_core::correlation::KeyedEvent;
use weir_core::state_key::StateKey;

/// A record of `weir.events` (`InboundEvent`), told apart by its target: an execution id
/// (`E_…`) makes an event for that execution, anything else an event for a correlation key,
/// which must pass [`check_correlation_key`](weir_core::state_key::check_correlation_key)
/// (else the record does not decode, and the DLQ says why).
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
