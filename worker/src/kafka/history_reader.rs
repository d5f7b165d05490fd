//! Reads a partition of `weir.history` from an offset to its last stable offset: what a new
//! owner's catch-up of the store needs (the rules of catch-up are the driver's, in
//! `weir_core::driver`). A `read_committed` consumer reports the end of the partition at the
//! last stable offset, so nothing of an open or aborted transaction is read.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use weir_core::driver::LoggedEntry;

use super::KafkaConfig;
use super::group::QuietEof;
use crate::codec::{Codec, HistoryRecord, RecordPosition};

#[derive(Debug, thiserror::Error)]
pub enum HistoryReadError {
    #[error("reading {topic}/{partition}: {source}")]
    Kafka {
        topic: String,
        partition: i32,
        source: KafkaError,
    },
    #[error("{topic}/{partition} offset {offset}: {reason}")]
    Record {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
}

/// The committed records of `topic`/`partition` from `from` to the last stable offset.
pub fn read(
    kafka: &KafkaConfig,
    codec: &Codec,
    owner: &str,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<Vec<LoggedEntry>, HistoryReadError> {
    let kafka_error = |source| HistoryReadError::Kafka {
        topic: topic.to_owned(),
        partition,
        source,
    };
    let mut config = kafka.client();
    config
        .set("group.id", format!("weir-catchup-{owner}"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // The end is what catch-up reads to: a fetch there must not long-poll (librdkafka's
        // default, 500 ms per partition, was most of a take-over's time).
        .set("fetch.wait.max.ms", "10");
    // Its end is what catch-up waits for: not an error to log (issue 11 item 20).
    let consumer: BaseConsumer<QuietEof> =
        config.create_with_context(QuietEof).map_err(kafka_error)?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(kafka_error)?;
    consumer.assign(&assignment).map_err(kafka_error)?;
    let mut entries = Vec::new();
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(kafka_error(e)),
            Some(Ok(message)) => {
                let offset = message.offset();
                let bytes = message.payload().unwrap_or_default().to_vec();
                let position = RecordPosition::at(topic, partition, offset);
                let record: HistoryRecord =
                    codec
                        .decode(&bytes, &position)
                        .map_err(|e| HistoryReadError::Record {
                            topic: topic.to_owned(),
                            partition,
                            offset,
                            reason: e.to_string(),
                        })?;
                let timestamp = message
                    .timestamp()
                    .to_millis()
                    .and_then(DateTime::from_timestamp_millis)
                    .unwrap_or_else(Utc::now);
                entries.push(LoggedEntry {
                    offset,
                    record,
                    bytes,
                    timestamp,
                });
            }
        }
    }
    Ok(entries)
}
