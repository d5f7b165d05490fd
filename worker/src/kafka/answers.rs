//! How the activity worker commits (issue 38; `docs/design/activities.md#answers-before-progress`):
//! the commit's answers and dead letters are produced by the idempotent producer, outside any
//! transaction, and acknowledged; then the progress of their partitions (the frontier as the
//! offset, the unfinished requests in its metadata) is committed by the consumer, which the
//! group refuses from a member of an earlier generation.
//!
//! Invariant: no progress is committed before every answer of its requests is acknowledged
//! (durable). A failure between the two — a crash, a zombie's refused offsets, a broker error
//! — leaves answers on `weir.responses` whose requests the next owner runs and answers again:
//! duplicates, which the parent drops (it journals one answer per child). Exactly once holds
//! where it is promised, in the parent's history; the topic carries answers at least once.
//!
//! Why: a step through an activity topic paid two Kafka transactions in series, the workflow
//! worker's and this one's, and a transaction round (produce, `AddOffsetsToTxn`,
//! `TxnOffsetCommit`, `EndTxn`, the markers, a read_committed fetch) was most of its latency
//! and of the broker's CPU (`docs/benchmarks.md#activities-through-topics-issue-38`).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::KafkaConfig;
use super::dlq::dead_letter_reason;
use super::outgoing::{Landed, OutgoingRecord};
use super::producer::Served;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("cannot create the activity worker's producer: {0}")]
    Create(KafkaError),
    /// Not acknowledged: nothing of the commit's progress was committed; its requests run
    /// again.
    #[error("a record for `{topic}` was not acknowledged: {source}")]
    Produce { topic: String, source: KafkaError },
    /// The answers are on their topics, the progress is not committed (a rebalance moved the
    /// group on, the coordinator did not answer): the requests run again, their answers are
    /// duplicates the parents drop.
    #[error(
        "the progress of {partitions} was not committed (its {answers} records were produced): {source}"
    )]
    Offsets {
        partitions: String,
        answers: usize,
        source: KafkaError,
    },
}

impl AnswerError {
    /// Whether the producer cannot go on (librdkafka's fatal error of an idempotent producer,
    /// e.g. a sequence gap it cannot repair): the worker creates a new one.
    pub fn is_fatal(&self, answers: &Answers) -> bool {
        matches!(self, AnswerError::Produce { .. })
            && answers.producer.producer().client().fatal_error().is_some()
    }
}

/// The activity worker's idempotent producer and its commit.
pub struct Answers {
    producer: Served,
    metrics: Arc<Metrics>,
}

impl Answers {
    /// A record not acknowledged within `timeout` fails its commit (as a transaction not
    /// committed within it did before), so that a broker away does not hold the worker's
    /// loop longer than that.
    pub fn new(
        config: &KafkaConfig,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, AnswerError> {
        let millis = timeout.as_millis().max(1).to_string();
        let producer = Served::create(config.producer().set("message.timeout.ms", millis))
            .map_err(AnswerError::Create)?;
        Ok(Answers { producer, metrics })
    }

    /// Produces `records` and waits until each is acknowledged, then commits `offsets` (with
    /// their metadata) for `consumer`'s group. Returns where each record landed, in order.
    pub async fn commit<C: ConsumerContext + 'static>(
        &self,
        consumer: &StreamConsumer<C>,
        records: &[OutgoingRecord],
        offsets: TopicPartitionList,
    ) -> Result<Vec<Landed>, AnswerError> {
        let produce = |record: &OutgoingRecord, source| AnswerError::Produce {
            topic: record.topic.clone(),
            source,
        };
        let mut deliveries = Vec::with_capacity(records.len());
        for record in records {
            deliveries.push(
                self.producer
                    .send_record(record)
                    .map_err(|e| produce(record, e))?,
            );
        }
        let mut landed = Vec::with_capacity(records.len());
        for (record, delivery) in records.iter().zip(deliveries) {
            match delivery.await {
                Ok(Ok(at)) => landed.push(at),
                Ok(Err(e)) => return Err(produce(record, e)),
                Err(_canceled) => return Err(produce(record, KafkaError::Canceled)),
            }
        }
        // Every record is durable; a dead letter counts now (a later duplicate counts again).
        for reason in records.iter().filter_map(dead_letter_reason) {
            self.metrics.dead_letter(reason);
        }
        // Answers acknowledged, progress not committed: a process that stops here leaves
        // duplicates for the next owner to produce (a test's `fail-once` aborts the commit).
        let failed = crate::failpoints::failpoint("activity-before-offsets").await;
        let committed = if failed {
            Err(KafkaError::Canceled)
        } else if offsets.count() == 0 {
            Ok(())
        } else {
            // The commit waits for the coordinator's answer (a round trip, after the answers
            // are out: it delays the next turn, not the answers). A blocking call, off the
            // async scheduling: the worker runs on tokio's multi-threaded runtime.
            tokio::task::block_in_place(|| consumer.commit(&offsets, CommitMode::Sync))
        };
        committed.map_err(|source| AnswerError::Offsets {
            partitions: describe(&offsets),
            answers: records.len(),
            source,
        })?;
        Ok(landed)
    }
}

/// `topic/partition@offset` of each element.
fn describe(offsets: &TopicPartitionList) -> String {
    offsets
        .elements()
        .iter()
        .map(|e| format!("{}/{}@{:?}", e.topic(), e.partition(), e.offset()))
        .collect::<Vec<_>>()
        .join(", ")
}
