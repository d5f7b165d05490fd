//! One Kafka transaction per batch (EOS v2, KIP-447): every output record of the batch and the
//! consumer offsets of its inputs commit together or not at all.
//!
//! The consumer group metadata is passed in afresh for every batch: it carries the group
//! generation, which changes at every rebalance, and a transaction sent with a stale generation
//! is fenced by the broker — which is exactly how a zombie that lost its partitions is stopped.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::producer::Producer;

use super::KafkaConfig;
use super::dlq::dead_letter_reason;
use super::outgoing::{Landed, OutgoingRecord};
use super::producer::Served;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum TransactionError {
    #[error("cannot create the transactional producer `{transactional_id}`: {source}")]
    Create {
        transactional_id: String,
        source: KafkaError,
    },
    /// Another instance took over (or the group moved on): this one must stop producing and
    /// rejoin; nothing of the batch became visible.
    #[error("transactional producer `{transactional_id}` was fenced: {source}")]
    Fenced {
        transactional_id: String,
        source: KafkaError,
    },
    /// The group moved on (a rebalance this member missed): the batch was aborted and the
    /// partitions may now belong to another member; rejoin before processing again.
    #[error("the consumer group moved on under `{transactional_id}`; batch aborted: {source}")]
    Rebalanced {
        transactional_id: String,
        source: KafkaError,
    },
    /// The batch was aborted (nothing of it is visible); the inputs must be processed again.
    #[error("transaction of `{transactional_id}` aborted during {step}: {source}")]
    Aborted {
        transactional_id: String,
        step: &'static str,
        source: KafkaError,
    },
    #[error("transactional producer `{transactional_id}` failed fatally during {step}: {source}")]
    Fatal {
        transactional_id: String,
        step: &'static str,
        source: KafkaError,
    },
}

/// A transactional producer that commits batches.
#[derive(Clone)]
pub struct Transactor {
    producer: Served,
    transactional_id: Arc<str>,
    timeout: Duration,
    /// Where committed dead letters are counted (`weir_dlq_records_total`, and by reason).
    metrics: Option<Arc<Metrics>>,
    /// The prefix of this producer's failpoint names (`trigger-` for the trigger worker's,
    /// so that a test can stop one worker's transactions and not the others').
    failpoint_prefix: &'static str,
}

impl Transactor {
    /// Creates the producer and registers its transactional id, fencing any earlier producer
    /// with the same id.
    pub async fn new(
        config: &KafkaConfig,
        transactional_id: &str,
        timeout: Duration,
    ) -> Result<Self, TransactionError> {
        let producer = Served::create(
            config
                .transactional_producer(transactional_id)
                .set("transaction.timeout.ms", timeout.as_millis().to_string()),
        )
        .map_err(|source| TransactionError::Create {
            transactional_id: transactional_id.to_owned(),
            source,
        })?;
        let transactor = Transactor {
            producer,
            transactional_id: transactional_id.into(),
            timeout,
            metrics: None,
            failpoint_prefix: "",
        };
        let producer = Arc::clone(transactor.producer.producer());
        let init = blocking(move || producer.init_transactions(timeout)).await;
        init.map_err(|source| TransactionError::Create {
            transactional_id: transactional_id.to_owned(),
            source,
        })?;
        Ok(transactor)
    }

    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// Names this producer's failpoints `<prefix>before-send-offsets` and
    /// `<prefix>before-commit`.
    pub fn with_failpoint_prefix(mut self, prefix: &'static str) -> Self {
        self.failpoint_prefix = prefix;
        self
    }

    /// Counts the dead letters of every committed batch in `metrics` (and only of committed
    /// ones: an aborted batch is run again and would count them twice).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Produces `records` and commits them with `offsets` (the next offset to read of every
    /// input partition of the batch) for the group of `group_metadata`. Returns where each
    /// record landed, in order. On error the transaction is aborted when it can be.
    pub async fn commit(
        &self,
        records: &[OutgoingRecord],
        offsets: TopicPartitionList,
        group_metadata: ConsumerGroupMetadata,
    ) -> Result<Vec<Landed>, TransactionError> {
        self.producer
            .producer()
            .begin_transaction()
            .map_err(|e| self.classify("begin", e))?;
        match self
            .produce_and_commit(records, offsets, group_metadata)
            .await
        {
            Ok(landed) => {
                if let Some(metrics) = &self.metrics {
                    for reason in records.iter().filter_map(dead_letter_reason) {
                        metrics.dead_letter(reason);
                    }
                }
                Ok(landed)
            }
            Err(
                error @ (TransactionError::Aborted { .. } | TransactionError::Rebalanced { .. }),
            ) => {
                let producer = Arc::clone(self.producer.producer());
                let timeout = self.timeout;
                blocking(move || producer.abort_transaction(timeout))
                    .await
                    .map_err(|e| self.abort_failed(e))?;
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    async fn produce_and_commit(
        &self,
        records: &[OutgoingRecord],
        offsets: TopicPartitionList,
        group_metadata: ConsumerGroupMetadata,
    ) -> Result<Vec<Landed>, TransactionError> {
        let mut deliveries = Vec::with_capacity(records.len());
        for record in records {
            let delivery = self
                .producer
                .send_record(record)
                .map_err(|e| self.classify("produce", e))?;
            deliveries.push(delivery);
        }
        // The offsets travel to the coordinators while the records are being acknowledged:
        // neither waits for the other, and the step's latency pays one of the two round trips
        // instead of both (commit_transaction flushes whatever is still in flight anyway).
        // Outputs are being written, the offsets not sent: a zombie resumed from here sends
        // them with its old generation, which the group refuses (fencing).
        let point = |name: &str| format!("{}{name}", self.failpoint_prefix);
        if crate::failpoints::failpoint(&point("before-send-offsets")).await {
            return Err(TransactionError::Aborted {
                transactional_id: self.transactional_id.to_string(),
                step: "send offsets (failpoint before-send-offsets)",
                source: KafkaError::Canceled,
            });
        }
        let producer = Arc::clone(self.producer.producer());
        let timeout = self.timeout;
        blocking(move || producer.send_offsets_to_transaction(&offsets, &group_metadata, timeout))
            .await
            .map_err(|e| self.classify("send offsets", e))?;
        let mut landed = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(at)) => landed.push(at),
                Ok(Err(e)) => return Err(self.classify("delivery", e)),
                Err(_canceled) => {
                    return Err(self.classify("delivery", KafkaError::Canceled));
                }
            }
        }
        // Outputs are written and the offsets accepted, nothing is committed: a zombie resumed
        // from here still commits (the coordinator checked its generation when it took the
        // offsets), so a new owner must wait for it (its rewind does, KIP-447).
        if crate::failpoints::failpoint(&point("before-commit")).await {
            return Err(TransactionError::Aborted {
                transactional_id: self.transactional_id.to_string(),
                step: "commit (failpoint before-commit)",
                source: KafkaError::Canceled,
            });
        }
        let producer = self.producer.clone();
        blocking(move || producer.commit_transaction(timeout))
            .await
            .map_err(|e| self.classify("commit", e))?;
        Ok(landed)
    }

    /// An abort that failed leaves the producer unusable whatever the error: after a timeout
    /// librdkafka's transaction stays in the aborting state (every later `begin` is refused),
    /// and `INVALID_TXN_STATE` (a restarted broker's coordinator had already resolved the
    /// transaction) is fatal anyway. So it is [`TransactionError::Fatal`] unless it is a
    /// fencing; the worker then replaces the producer (`super::recovery`), whose
    /// `init_transactions` aborts the transaction for good.
    fn abort_failed(&self, source: KafkaError) -> TransactionError {
        match self.classify("abort", source) {
            TransactionError::Aborted {
                transactional_id,
                source,
                ..
            }
            | TransactionError::Rebalanced {
                transactional_id,
                source,
            } => TransactionError::Fatal {
                transactional_id,
                step: "abort",
                source,
            },
            other => other,
        }
    }

    fn classify(&self, step: &'static str, source: KafkaError) -> TransactionError {
        let transactional_id = self.transactional_id.to_string();
        let rd: Option<&RDKafkaError> = match &source {
            KafkaError::Transaction(e) => Some(e),
            _ => None,
        };
        use rdkafka::types::RDKafkaErrorCode as Code;
        let code = source.rdkafka_error_code();
        let producer_fenced = matches!(
            code,
            Some(Code::ProducerFenced | Code::InvalidProducerEpoch | Code::Fenced)
        );
        let group_moved_on = matches!(
            code,
            Some(Code::IllegalGeneration | Code::UnknownMemberId | Code::FencedInstanceId)
        );
        if group_moved_on {
            TransactionError::Rebalanced {
                transactional_id,
                source,
            }
        } else if producer_fenced {
            TransactionError::Fenced {
                transactional_id,
                source,
            }
        } else if rd.is_some_and(RDKafkaError::is_fatal) {
            TransactionError::Fatal {
                transactional_id,
                step,
                source,
            }
        } else {
            // Delivery failures, abortable transaction errors and timeouts: abort and retry.
            TransactionError::Aborted {
                transactional_id,
                step,
                source,
            }
        }
    }
}

/// Runs one of librdkafka's blocking transactional calls off the async worker threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a librdkafka call does not panic")
}
