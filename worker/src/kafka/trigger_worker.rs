//! The trigger worker: reads the topics of `triggers.toml` (topics of other systems, never
//! written by Weir) in its own consumer group and turns every record into what its trigger
//! says ([`crate::trigger`]): a `Submission` on `weir.submissions`, an `InboundEvent` on
//! `weir.events`, or — a record that does not map — a copy on `weir.dlq` with why. Each batch
//! is one Kafka transaction holding those records and the source offsets
//! (`send_offsets_to_transaction`), so a record is taken once; and since what a record
//! becomes carries an id derived from it, a record read again (a crash after the commit of a
//! batch the broker had not acknowledged, a reset of the group's offsets) makes the same
//! submission, which the workflow worker takes once.

use std::collections::BTreeMap;
use std::sync::Arc;

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{info, warn};

use super::dlq;
use super::group::{MemberContext, collect_batch, leave, rewind_to_committed};
use super::transaction::{OutgoingRecord, TransactionError};
use super::workflow_worker::{WorkerConfig, WorkerError};
use crate::codec::{AvroRecord, Codec, DlqReason};
use crate::metrics::Metrics;
use crate::topology::{TopicRole, Topology};
use crate::trigger::{MapError, Mapped, SourceRecord, Trigger};

/// The most records one transaction takes.
const MAX_BATCH: usize = 500;

pub struct TriggerWorker {
    config: WorkerConfig,
    topology: Arc<Topology>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    /// The deployment's namespace: identities are derived within it.
    namespace: String,
    /// By topic.
    triggers: BTreeMap<String, Trigger>,
}

impl TriggerWorker {
    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
        namespace: String,
        triggers: Vec<Trigger>,
    ) -> Self {
        TriggerWorker {
            config,
            topology,
            codec,
            metrics,
            namespace,
            triggers: triggers.into_iter().map(|t| (t.topic.clone(), t)).collect(),
        }
    }

    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        if self.triggers.is_empty() {
            return Ok(());
        }
        let topics: Vec<String> = self.triggers.keys().cloned().collect();
        let member = self.config.join_group(&topics, None).await?;
        let member = super::workflow_worker::GroupMember {
            transactor: member.transactor.clone().with_failpoint_prefix("trigger-"),
            ..member
        };
        info!(instance = %self.config.instance_id, ?topics, "trigger worker started");
        let (mut generation, _) = member.tracker.snapshot();
        loop {
            if *shutdown.borrow() {
                break;
            }
            if member.consumer.context().should_leave() {
                leave(&member.consumer).await;
                break;
            }
            let records =
                collect_batch(&member.consumer, std::time::Duration::ZERO, MAX_BATCH).await;
            let (now_generation, _) = member.tracker.snapshot();
            if now_generation != generation {
                // The batch spans a rebalance: nothing of it is committed; read again from the
                // committed offsets of what is assigned now.
                generation = now_generation;
                self.rewind(&member.consumer)?;
                continue;
            }
            if records.is_empty() {
                continue;
            }
            let outgoing = self.outgoing(&records)?;
            let offsets = next_offsets(&records).map_err(|e| self.consumer_error(e))?;
            let Some(group_metadata) = member.consumer.group_metadata() else {
                self.rewind(&member.consumer)?;
                continue;
            };
            match member
                .transactor
                .commit(&outgoing, offsets, group_metadata)
                .await
            {
                Ok(_) => {
                    self.metrics.trigger_records.add(records.len() as u64);
                    tracing::debug!(records = records.len(), "trigger batch committed");
                }
                Err(
                    e @ (TransactionError::Rebalanced { .. } | TransactionError::Aborted { .. }),
                ) => {
                    warn!(error = %e, "trigger batch aborted: read again");
                    self.rewind(&member.consumer)?;
                }
                Err(e) => return Err(WorkerError::Transaction(Box::new(e))),
            }
        }
        info!("trigger worker stopped");
        Ok(())
    }

    fn rewind<C: rdkafka::consumer::ConsumerContext>(
        &self,
        consumer: &rdkafka::consumer::StreamConsumer<C>,
    ) -> Result<(), WorkerError> {
        rewind_to_committed(consumer)
            .map(|_| ())
            .map_err(|e| self.consumer_error(e))
    }

    fn consumer_error(&self, source: rdkafka::error::KafkaError) -> WorkerError {
        WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        }
    }

    /// What `records` become, in order.
    fn outgoing(&self, records: &[OwnedMessage]) -> Result<Vec<OutgoingRecord>, WorkerError> {
        let now = chrono::Utc::now();
        let mut out = Vec::with_capacity(records.len());
        for message in records {
            let Some(trigger) = self.triggers.get(message.topic()) else {
                continue;
            };
            let headers: Vec<(String, Option<Vec<u8>>)> = message
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            let source = SourceRecord {
                topic: message.topic(),
                partition: message.partition(),
                offset: message.offset(),
                key: message.key(),
                value: message.payload(),
                headers: &headers,
            };
            match trigger.map(&self.namespace, &source, now) {
                Ok(Mapped::Submission(submission)) => out.push(self.encode(
                    TopicRole::Submissions,
                    submission.execution_id.to_string(),
                    &submission,
                )?),
                Ok(Mapped::Event(event)) => {
                    out.push(self.encode(TopicRole::Events, event.target.to_string(), &event)?)
                }
                Err(error) => {
                    let reason = match error {
                        MapError::NotJson { .. } => DlqReason::Undecodable,
                        MapError::Missing { .. } | MapError::Invalid { .. } => {
                            DlqReason::InvalidParams
                        }
                    };
                    out.push(dlq::dead_letter(
                        &self.topology,
                        &self.codec,
                        &self.metrics,
                        message,
                        reason,
                        error.to_string(),
                    ));
                }
            }
        }
        Ok(out)
    }

    fn encode<R: AvroRecord>(
        &self,
        role: TopicRole,
        key: String,
        record: &R,
    ) -> Result<OutgoingRecord, WorkerError> {
        let topic = self.topology.topic(role).name.clone();
        let value = self
            .codec
            .encode(&topic, record)
            .map_err(|source| WorkerError::Encode {
                topic: topic.clone(),
                source: Box::new(source),
            })?;
        Ok(OutgoingRecord {
            topic,
            key,
            value,
            headers: Vec::new(),
        })
    }
}

/// The next offset to read of every partition in `records`.
fn next_offsets(records: &[OwnedMessage]) -> rdkafka::error::KafkaResult<TopicPartitionList> {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for m in records {
        let at = next
            .entry((m.topic().to_owned(), m.partition()))
            .or_default();
        *at = (*at).max(m.offset() + 1);
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        list.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
    }
    Ok(list)
}
