//! Records sent to a deployment from outside a worker: a top-level execution's `Submission`
//! on `weir.submissions` (what `weir submit` and the HTTP API send), and an `UpgradeRequest`
//! on `weir.responses` (what `weir replay --upgrade` sends), each keyed by the execution's id.
//! Any Kafka client can send the same with only `schemas/avro/`.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::Value;

use crate::codec::{AvroRecord, Codec, EncodeError, Submission, UpgradeRequest};
use crate::model::{ExecutionId, Ffqn};

/// How long a submission waits for the broker's acknowledgement.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("cannot encode the record for {execution_id}: {source}")]
    Encode {
        execution_id: ExecutionId,
        source: EncodeError,
    },
    #[error("cannot send to {topic} for {execution_id}: {source}")]
    Send {
        execution_id: ExecutionId,
        topic: String,
        source: rdkafka::error::KafkaError,
    },
}

/// Sends the submission of top-level execution `id` of `ffqn` with `params` to `topic` (the
/// deployment's `weir.submissions`) and waits until the broker has it.
pub async fn submit_top_level(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    id: &ExecutionId,
    ffqn: Ffqn,
    params: Value,
    metadata: std::collections::BTreeMap<String, String>,
) -> Result<(), SubmitError> {
    let submission = Submission {
        execution_id: id.clone(),
        ffqn,
        params,
        parent: None,
        scheduled_at: None,
        correlation_id: None,
        metadata,
    };
    send_keyed(producer, codec, topic, id, &submission, None).await
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), marked with the header
/// `weir.kind = upgrade`, and waits until the broker has it.
pub async fn send_upgrade(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &UpgradeRequest,
) -> Result<(), SubmitError> {
    let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
        key: super::activity_worker::KIND_HEADER,
        value: Some(super::activity_worker::UPGRADE_KIND),
    });
    let id = &request.execution_id;
    send_keyed(producer, codec, topic, id, request, Some(headers)).await
}

/// Encodes `record` for `topic`, sends it keyed by `id` (with `headers`), and waits until the
/// broker has it.
async fn send_keyed<R: AvroRecord>(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    id: &ExecutionId,
    record: &R,
    headers: Option<rdkafka::message::OwnedHeaders>,
) -> Result<(), SubmitError> {
    let value = codec
        .encode(topic, record)
        .map_err(|source| SubmitError::Encode {
            execution_id: id.clone(),
            source,
        })?;
    let key = id.to_string();
    let mut message = FutureRecord::to(topic).key(&key).payload(&value);
    if let Some(headers) = headers {
        message = message.headers(headers);
    }
    producer
        .send(message, SEND_TIMEOUT)
        .await
        .map_err(|(source, _)| SubmitError::Send {
            execution_id: id.clone(),
            topic: topic.to_owned(),
            source,
        })?;
    Ok(())
}
