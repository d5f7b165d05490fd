//! Schedules over Kafka, for clients (`weir schedule`, `weir topology apply`): a command is a
//! `ScheduleCommand` on `weir.responses`, keyed `schedule:<name>`, header
//! `weir.kind = schedule`; the states are read back from the compacted `weir.state`, whose
//! records only the owning workflow workers write (a listing skips the correlation keys'
//! states there, marked `weir.kind = correlation`).

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use weir_core::schedule::{ScheduleAction, ScheduleCommand, ScheduleState};
use weir_core::state_key::StateKey;
use weir_core::wire::RecordKind;

use super::KafkaConfig;
use super::history_reader::{self, HistoryReadError, Wanted};
use crate::codec::{Codec, EncodeError};
use crate::topology::{TopicRole, Topology};

/// How long a send may take before it fails.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ScheduleClientError {
    #[error("cannot encode the {action} of schedule `{name}`: {source}")]
    Encode {
        name: String,
        action: &'static str,
        source: Box<EncodeError>,
    },
    #[error("cannot send the {action} of schedule `{name}` to {topic}: {source}")]
    Send {
        name: String,
        action: &'static str,
        topic: String,
        source: Box<rdkafka::error::KafkaError>,
    },
    #[error(transparent)]
    Read(Box<HistoryReadError>),
}

/// A command about schedule `name`, with a new ULID as its id (a `create`'s becomes the
/// schedule's generation).
pub fn command(name: &str, action: ScheduleAction) -> ScheduleCommand {
    ScheduleCommand {
        name: name.to_owned(),
        command_id: ulid::Ulid::new().to_string(),
        action,
        sent_at: chrono::Utc::now(),
    }
}

/// Sends `command` to the deployment's `weir.responses` and waits until the broker has it.
pub async fn send(
    producer: &FutureProducer,
    codec: &Codec,
    topology: &Topology,
    command: &ScheduleCommand,
) -> Result<(), ScheduleClientError> {
    let topic = &topology.topic(TopicRole::Responses).name;
    let action = command.action.as_str();
    let value = codec
        .encode(topic, command)
        .map_err(|source| ScheduleClientError::Encode {
            name: command.name.clone(),
            action,
            source: Box::new(source),
        })?;
    let key = StateKey::schedule(&command.name).to_string();
    let headers = super::headers::of_kind(RecordKind::Schedule);
    let record = FutureRecord::to(topic)
        .key(&key)
        .payload(&value)
        .headers(headers);
    producer
        .send(record, SEND_TIMEOUT)
        .await
        .map_err(|(source, _)| ScheduleClientError::Send {
            name: command.name.clone(),
            action,
            topic: topic.clone(),
            source: Box::new(source),
        })?;
    Ok(())
}

/// Every schedule of the deployment, as `weir.state` has them (what the owners committed), by
/// name (see [`history_reader::list_keyed_state`]).
pub fn list(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &Topology,
) -> Result<Vec<ScheduleState>, ScheduleClientError> {
    let mut states = history_reader::list_keyed_state(kafka, codec, topology, Wanted::Schedules)
        .map_err(|e| ScheduleClientError::Read(Box::new(e)))?
        .schedules;
    states.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(states)
}
