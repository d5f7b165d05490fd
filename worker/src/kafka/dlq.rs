//! The dead-letter queue: an input record that cannot be processed is copied byte for byte to
//! `weir.dlq`, with the reason in headers, inside the transaction that commits its offset, so
//! that a poison record never blocks its partition and nothing is lost.
//!
//! `weir_dlq_records_total` counts dead letters whose transaction *committed*: the
//! transactional producer counts them after the commit ([`is_dead_letter`]), so a batch that
//! aborts and runs again counts its dead letters once.

use chrono::Utc;
use rdkafka::message::{Headers, Message, OwnedMessage};
use tracing::{error, warn};

use super::transaction::OutgoingRecord;
use crate::codec::{Codec, DlqEnvelope, DlqHeader, DlqReason, EncodeError, dlq_headers};
use crate::metrics::Metrics;
use crate::topology::{TopicRole, Topology};

/// A DLQ envelope that cannot be encoded (with a schema registry: its schema is not
/// registered for the DLQ topic; `weir worker` registers every schema at start-up).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the DLQ copy of {topic}/{partition} offset {offset} for `{dlq}`: {source}")]
pub struct DeadLetterError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub dlq: String,
    pub source: EncodeError,
}

/// Whether `record` is a dead letter (every one carries the reason header).
pub fn is_dead_letter(record: &OutgoingRecord) -> bool {
    record.headers.iter().any(|(k, _)| k == dlq_headers::REASON)
}

/// The DLQ record for `message`, or a typed error when its envelope cannot be encoded.
pub fn try_dead_letter(
    topology: &Topology,
    codec: &Codec,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> Result<OutgoingRecord, DeadLetterError> {
    warn!(
        topic = message.topic(),
        partition = message.partition(),
        offset = message.offset(),
        ?reason,
        %error,
        "record sent to the DLQ"
    );
    let (dlq, envelope) = envelope(topology, message, reason, error);
    let value = codec
        .encode(&dlq, &envelope)
        .map_err(|source| DeadLetterError {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            dlq: dlq.clone(),
            source,
        })?;
    Ok(record(dlq, message, &envelope, value))
}

/// The DLQ record for `message`, for callers that cannot fail: when the envelope cannot be
/// encoded in the codec's wire format, it is written in Avro single-object encoding (which
/// every reader accepts, and which needs no registry), and the failure is logged at ERROR.
/// `_metrics` is not touched: dead letters are counted once committed.
pub fn dead_letter(
    topology: &Topology,
    codec: &Codec,
    _metrics: &Metrics,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> OutgoingRecord {
    match try_dead_letter(topology, codec, message, reason, error.clone()) {
        Ok(record) => record,
        Err(e) => {
            error!(error = %e, "DLQ copy written in single-object encoding instead");
            let (dlq, envelope) = self::envelope(topology, message, reason, error);
            // Single-object encoding needs no registry: only a value the schema cannot hold
            // fails it, and the envelope's fields all fit their schema.
            let value = Codec::encode_single_object(&dlq, &envelope).unwrap_or_else(|e| {
                error!(error = %e, "DLQ envelope unencodable: the original value is copied as is");
                message.payload().map(<[u8]>::to_vec).unwrap_or_default()
            });
            record(dlq, message, &envelope, value)
        }
    }
}

fn envelope(
    topology: &Topology,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> (String, DlqEnvelope) {
    let envelope = DlqEnvelope {
        original_topic: message.topic().to_owned(),
        original_partition: message.partition(),
        original_offset: message.offset(),
        original_timestamp_millis: message.timestamp().to_millis(),
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec),
        original_headers: message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| DlqHeader {
                        key: h.key.to_owned(),
                        value: h.value.map(<[u8]>::to_vec),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        reason,
        error,
        failed_at: Utc::now(),
    };
    (topology.topic(TopicRole::Dlq).name.clone(), envelope)
}

fn record(
    dlq: String,
    message: &OwnedMessage,
    envelope: &DlqEnvelope,
    value: Vec<u8>,
) -> OutgoingRecord {
    OutgoingRecord {
        topic: dlq,
        key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
        value,
        headers: envelope
            .kafka_headers()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    }
}
