//! Batch operations over Kafka, for clients (`weir batch`, the HTTP API): a command is a
//! `BatchCommand` on `weir.responses`, keyed `weir:batch:<id>`, header `weir.kind = batch`;
//! the states and the turns' outcomes are read back from the compacted `weir.state`, whose
//! records only the owning workflow workers write (the design: `docs/design/batches.md`).

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use weir_core::batch::{BatchCommand, BatchCommandAction, BatchOutcomes, BatchState};
use weir_core::state_key::StateKey;
use weir_core::wire::RecordKind;

use super::KafkaConfig;
use super::history_reader::{self, HistoryReadError, Wanted};
use crate::codec::{Codec, EncodeError};
use crate::topology::{TopicRole, Topology};

/// How long a send may take before it fails.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum BatchClientError {
    #[error("cannot encode the command for batch `{id}`: {source}")]
    Encode {
        id: String,
        source: Box<EncodeError>,
    },
    #[error("cannot send the command for batch `{id}` to {topic}: {source}")]
    Send {
        id: String,
        topic: String,
        source: Box<rdkafka::error::KafkaError>,
    },
    #[error(transparent)]
    Read(Box<HistoryReadError>),
}

/// A command about batch `id`, sent now.
pub fn command(id: &str, action: BatchCommandAction) -> BatchCommand {
    BatchCommand {
        id: id.to_owned(),
        action,
        requested_at: chrono::Utc::now(),
    }
}

/// Sends `command` to the deployment's `weir.responses` and waits until the broker has it.
pub async fn send(
    producer: &FutureProducer,
    codec: &Codec,
    topology: &Topology,
    command: &BatchCommand,
) -> Result<(), BatchClientError> {
    let topic = &topology.topic(TopicRole::Responses).name;
    let id = command.id.clone();
    let value = codec
        .encode(topic, command)
        .map_err(|source| BatchClientError::Encode {
            id: id.clone(),
            source: Box::new(source),
        })?;
    let key = StateKey::Batch(id.clone()).to_string();
    let headers = super::headers::of_kind(RecordKind::Batch);
    let record = FutureRecord::to(topic)
        .key(&key)
        .payload(&value)
        .headers(headers);
    producer
        .send(record, SEND_TIMEOUT)
        .await
        .map_err(|(source, _)| BatchClientError::Send {
            id,
            topic: topic.clone(),
            source: Box::new(source),
        })?;
    Ok(())
}

/// A batch as `weir.state` has it, with the outcomes of its committed turns (in order).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub state: BatchState,
    pub outcomes: Vec<BatchOutcomes>,
}

/// Every batch of the deployment, as the owners committed them, by start time (see
/// [`history_reader::list_keyed_state`]). Blocking.
pub fn list(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &Topology,
) -> Result<Vec<Listed>, BatchClientError> {
    let keyed = history_reader::list_keyed_state(kafka, codec, topology, Wanted::Batches)
        .map_err(|e| BatchClientError::Read(Box::new(e)))?;
    let mut outcomes = keyed.batch_outcomes;
    outcomes.sort_by_key(|o| o.turn);
    let mut listed: Vec<Listed> = keyed
        .batches
        .into_iter()
        .map(|state| Listed {
            outcomes: outcomes
                .iter()
                .filter(|o| o.id == state.id && o.turn <= state.turns)
                .cloned()
                .collect(),
            state,
        })
        .collect();
    listed
        .sort_by(|a, b| (a.state.started_at, &a.state.id).cmp(&(b.state.started_at, &b.state.id)));
    Ok(listed)
}
