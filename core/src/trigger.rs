//! Triggers: what a record of another system's topic becomes (`topology/triggers.toml`).
//!
//! A trigger binds a topic Weir never writes to a workflow function (every record starts one
//! execution) or to an event name (every record is an event for the execution, or the
//! correlation key, a field names). This module holds the checked trigger and the mapping
//! from a record (key, value, headers) to the [`Effect`] it produces — routed by the one wire
//! table ([`crate::wire::address`]) — or to why it is dead-lettered. Pure: the trigger worker
//! (`weir::kafka::trigger_worker`) and the simulation (`sim::triggers`) read the records and
//! commit what this decides, with the source offsets, in one transaction.
//!
//! Exactly once rests on identity: a record's execution id (or event id) is derived from the
//! trigger's name and the record's identity — a field of its value, or its topic, partition
//! and offset — so a record read again (after a crash, a rebalance, a reset of the group's
//! offsets) makes the same submission, which the processor takes once.
//! [Design: triggers](../../docs/design/triggers.md).

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::correlation::KeyedEvent;
use crate::model::{ExecutionId, Ffqn};
use crate::processor::Effect;
use crate::records::{DlqReason, InboundEvent, ReceivedEvent, Submission};
use crate::state_key::StateKey;

/// How a trigger topic's values are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// UTF-8 JSON text.
    #[default]
    Json,
    /// Avro in the Confluent wire format (`00`, the writer schema's registry id, the body):
    /// read with the worker's schema registry and mapped as its JSON form (a union is its
    /// value, a record an object).
    Avro,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Avro => "Avro (Confluent wire format)",
        })
    }
}

/// Where a value is taken from in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The record's key, as a JSON string.
    Key,
    /// A header's value, as a JSON string.
    Header(String),
    /// A JSON pointer into the value (`""`: the whole value).
    Value(String),
}

impl Source {
    /// `$key`, `$header.<name>`, or a JSON pointer (`/order/id`, `""`).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "$key" {
            return Ok(Source::Key);
        }
        if let Some(name) = text.strip_prefix("$header.") {
            if name.is_empty() {
                return Err("`$header.` names no header".to_owned());
            }
            return Ok(Source::Header(name.to_owned()));
        }
        if text.is_empty() || text.starts_with('/') {
            return Ok(Source::Value(text.to_owned()));
        }
        Err(format!(
            "`{text}` is neither `$key`, `$header.<name>` nor a JSON pointer (`/field`, `\"\"`)"
        ))
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Key => f.write_str("$key"),
            Source::Header(name) => write!(f, "$header.{name}"),
            Source::Value(pointer) => write!(f, "value `{pointer}`"),
        }
    }
}

/// What every record of a trigger becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Start {
        ffqn: Ffqn,
        params: Vec<Source>,
    },
    Event {
        name: String,
        target: Source,
        payload: Source,
    },
}

/// A trigger, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    pub name: String,
    pub topic: String,
    pub format: Format,
    pub action: Action,
    /// `None`: the record's topic, partition and offset.
    pub identity: Option<Source>,
}

/// A record of a trigger topic, as the mapping sees it.
#[derive(Debug, Clone, Copy)]
pub struct SourceRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(String, Option<Vec<u8>>)],
}

/// What a record becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    Submission(Submission),
    Event(InboundEvent),
    /// An event for the execution holding a correlation key (the target field held a key).
    KeyedEvent(KeyedEvent),
}

/// Why a record does not map (it goes to the DLQ with this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("trigger `{trigger}`: {at}: the value is not {format}: {reason}")]
    Undecodable {
        trigger: String,
        at: String,
        format: Format,
        reason: String,
    },
    #[error("trigger `{trigger}`: {at}: {source_name} is missing")]
    Missing {
        trigger: String,
        at: String,
        source_name: String,
    },
    #[error("trigger `{trigger}`: {at}: {reason}")]
    Invalid {
        trigger: String,
        at: String,
        reason: String,
    },
}

impl Trigger {
    /// What `record` becomes in `namespace`, its time `now` (an event's `sent_at`), its value
    /// read as JSON. (An Avro value is read by the worker, which has the registry, and mapped
    /// with [`Trigger::map_value`].)
    pub fn map(
        &self,
        namespace: &str,
        record: &SourceRecord<'_>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Mapped, MapError> {
        let value = match record.value {
            None => Value::Null,
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|e| self.undecodable(record, Format::Json, e.to_string()))?,
        };
        self.map_value(namespace, record, value, now)
    }

    /// Why `record`'s value cannot be read as `format`.
    pub fn undecodable(
        &self,
        record: &SourceRecord<'_>,
        format: Format,
        reason: String,
    ) -> MapError {
        MapError::Undecodable {
            trigger: self.name.clone(),
            at: position(record),
            format,
            reason,
        }
    }

    /// What `record` becomes, its value read (as JSON) into `value`.
    pub fn map_value(
        &self,
        namespace: &str,
        record: &SourceRecord<'_>,
        value: Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Mapped, MapError> {
        let at = position(record);
        let take = |source: &Source| -> Result<Value, MapError> {
            let found = match source {
                Source::Key => record
                    .key
                    .map(|k| Value::String(String::from_utf8_lossy(k).into_owned())),
                Source::Header(name) => record
                    .headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .and_then(|(_, v)| v.as_deref())
                    .map(|v| Value::String(String::from_utf8_lossy(v).into_owned())),
                Source::Value(pointer) => value.pointer(pointer).cloned(),
            };
            found.ok_or_else(|| MapError::Missing {
                trigger: self.name.clone(),
                at: at.clone(),
                source_name: source.to_string(),
            })
        };
        let identity = match &self.identity {
            None => format!("{}/{}/{}", record.topic, record.partition, record.offset),
            Some(source) => match take(source)? {
                Value::String(s) => s,
                other => other.to_string(),
            },
        };
        let digest = Sha256::digest(
            format!("weir-trigger\0{namespace}\0{}\0{identity}", self.name).as_bytes(),
        );
        match &self.action {
            Action::Start { ffqn, params } => {
                let params: Vec<Value> = params.iter().map(take).collect::<Result<_, _>>()?;
                let id = ExecutionId::from_digest(&digest.into());
                let metadata = [
                    ("weir.trigger".to_owned(), self.name.clone()),
                    ("weir.trigger.source".to_owned(), at.clone()),
                ]
                .into();
                Ok(Mapped::Submission(Submission::top_level(
                    &id,
                    ffqn.clone(),
                    Value::Array(params),
                    metadata,
                    None,
                )))
            }
            Action::Event {
                name,
                target,
                payload,
            } => {
                let target = match take(target)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let invalid = |reason: String| MapError::Invalid {
                    trigger: self.name.clone(),
                    at: at.clone(),
                    reason,
                };
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                let event = ReceivedEvent {
                    event_id: format!("trigger-{hex}"),
                    name: name.clone(),
                    payload: take(payload)?,
                };
                let read = StateKey::for_events(&target).map_err(|e| {
                    invalid(format!(
                        "target `{target}` is neither an execution id (`E_…`) nor a \
                         correlation key: {e}"
                    ))
                })?;
                let StateKey::Execution(target) = read else {
                    return Ok(Mapped::KeyedEvent(KeyedEvent {
                        event,
                        key: target,
                        sent_at: now,
                        returned_by: None,
                    }));
                };
                Ok(Mapped::Event(InboundEvent {
                    event,
                    target,
                    sent_at: now,
                    correlation_key: None,
                    waited_until: None,
                }))
            }
        }
    }
}

fn position(record: &SourceRecord<'_>) -> String {
    format!(
        "{}/{} offset {}",
        record.topic, record.partition, record.offset
    )
}

impl Mapped {
    /// The record it is produced as: a submission (`weir.submissions`, keyed by the
    /// execution), an event for an execution or for a correlation key (`weir.events`, keyed
    /// by the execution or the key) — the same effects, and so the same routing, as the
    /// processor's.
    pub fn effect(self) -> Effect {
        match self {
            Mapped::Submission(submission) => Effect::Submit(submission),
            Mapped::Event(event) => Effect::ForwardEvent(event),
            Mapped::KeyedEvent(event) => Effect::ReturnEvent(event),
        }
    }
}

impl MapError {
    /// The DLQ reason of a record that does not map.
    pub fn dlq_reason(&self) -> DlqReason {
        match self {
            MapError::Undecodable { .. } => DlqReason::Undecodable,
            MapError::Missing { .. } | MapError::Invalid { .. } => DlqReason::InvalidParams,
        }
    }
}

/// The size gate of what a trigger produces (issue 33 F3): a record of `size` bytes for
/// `topic` over `limit` (what a workflow worker takes) is dead-lettered as `oversize` with
/// this message — produced, it would fail the batch's transaction, and the trigger would read
/// the same batch again for ever.
pub fn oversize(size: usize, limit: usize, topic: &str) -> Option<(DlqReason, String)> {
    (size > limit).then(|| {
        (
            DlqReason::Oversize,
            format!(
                "mapped to a record of {size} bytes for `{topic}`, over the limit of {limit} bytes"
            ),
        )
    })
}
