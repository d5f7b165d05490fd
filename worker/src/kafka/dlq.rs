//! The dead-letter queue: an input record that cannot be processed is copied byte for byte to
//! `weir.dlq`, with the reason in headers, inside the transaction that commits its offset, so
//! that a poison record never blocks its partition and nothing is lost.

use chrono::Utc;
use rdkafka::message::{Headers, Message, OwnedMessage};
use tracing::warn;

use super::transaction::OutgoingRecord;
use crate::codec::{Codec, DlqEnvelope, DlqHeader, DlqReason};
use crate::metrics::Metrics;
use crate::topology::{TopicRole, Topology};

/// The DLQ record for `message`.
pub fn dead_letter(
    topology: &Topology,
    codec: &Codec,
    metrics: &Metrics,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> OutgoingRecord {
    warn!(
        topic = message.topic(),
        partition = message.partition(),
        offset = message.offset(),
        ?reason,
        %error,
        "record sent to the DLQ"
    );
    metrics.dlq_records.inc();
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
    let dlq = topology.topic(TopicRole::Dlq).name.clone();
    let value = codec
        .encode(&dlq, &envelope)
        .expect("a DLQ envelope always encodes");
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
