//! The activity worker: consumes the request topics of the routes it serves (every route not
//! marked `external`), runs each request as one attempt of a WASM activity, and in one Kafka
//! transaction per batch commits the input offsets with either the answer to the parent (on
//! `weir.responses`, keyed by the parent's id) or the next attempt.
//!
//! Retries are durable: a failed attempt with attempts left is re-published to the same topic
//! with `attempt + 1` and a `weir.not-before` header (epoch milliseconds, the end of its
//! backoff). Whoever consumes it — this worker after a restart, or another one — waits until
//! then, without holding up anything but its own partition: the batch stops at it on that
//! partition, commits the offsets up to it (never past), and the partition is sought back to it
//! and paused until it is due. The other partitions, and the other routes, go on. Records
//! behind it on its partition wait with it (the price of keeping Kafka's offset the only record
//! of what is left to do). Activities are at-least-once: a crash between an attempt and its
//! commit runs the attempt again; the parent still gets exactly one answer, because it ignores
//! duplicates.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::future::join_all;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

use super::dlq::dead_letter;
use super::group::{RebalanceTracker, collect_batch, rewind_to_committed};
use super::transaction::{OutgoingRecord, TransactionError, Transactor};
use super::workflow_worker::{GroupMember, WorkerConfig, WorkerError};
use crate::codec::{ActivityRequest, Codec, DlqReason, RecordPosition};
use crate::metrics::Metrics;
use crate::model::{ExecutionErrorKind, ExecutionResult, Response};
use crate::topology::{TopicRole, Topology};
use crate::wasm::WasmHost;

/// Header of a retried request: do not run it before this instant (epoch milliseconds).
pub const NOT_BEFORE_HEADER: &str = "weir.not-before";

/// A retry due within this is waited for inside its batch; a later one pauses its partition.
const INLINE_WAIT: Duration = Duration::from_millis(50);

/// A partition stopped at a retry that is not due yet: (topic, partition) → (its offset, due).
type Held = BTreeMap<(String, i32), (i64, DateTime<Utc>)>;

pub struct ActivityWorker {
    config: WorkerConfig,
    topology: Arc<Topology>,
    host: Arc<WasmHost>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
}

/// What one request turned into.
enum Outcome {
    Answer(OutgoingRecord),
    Retry(OutgoingRecord),
    DeadLetter(OutgoingRecord),
}

impl ActivityWorker {
    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        host: Arc<WasmHost>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
    ) -> Self {
        ActivityWorker {
            config,
            topology,
            host,
            codec,
            metrics,
        }
    }

    /// The request topics this worker serves.
    pub fn topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self
            .topology
            .routes
            .iter()
            .filter(|r| !r.external)
            .map(|r| r.topic.clone())
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let topics = self.topics();
        if topics.is_empty() {
            info!("no activity routes to serve");
            return Ok(());
        }
        let GroupMember {
            consumer,
            tracker,
            transactor,
        } = self.config.join_group(&topics, None).await?;
        info!(instance = %self.config.instance_id, ?topics, "activity worker started");
        let mut held = Held::new();
        loop {
            if *shutdown.borrow() {
                break;
            }
            self.resume_due(&consumer, &mut held, Utc::now());
            let (generation_before, _) = tracker.snapshot();
            let records = tokio::select! {
                records = collect_batch(&consumer, self.config.commit_interval, self.config.max_batch_records) => records,
                _ = shutdown.changed() => break,
            };
            let (generation, _) = tracker.snapshot();
            if generation != generation_before {
                // A new assignment: whatever is still held is read again from the committed
                // offsets, and held again if still not due.
                self.resume_due(&consumer, &mut held, DateTime::<Utc>::MAX_UTC);
                rewind_to_committed(&consumer).map_err(|source| WorkerError::Consumer {
                    group: self.config.group_id.clone(),
                    source,
                })?;
                continue;
            }
            if records.is_empty() {
                continue;
            }
            let span = info_span!("activity_batch", records = records.len());
            match self
                .process_and_commit(&consumer, &transactor, records)
                .instrument(span)
                .await
            {
                Ok(newly_held) => self.hold(&consumer, &mut held, newly_held)?,
                Err(WorkerError::Transaction(e))
                    if matches!(
                        *e,
                        TransactionError::Aborted { .. } | TransactionError::Rebalanced { .. }
                    ) =>
                {
                    warn!(error = %e, "activity batch aborted; running it again");
                    self.metrics.activity_batches.aborted.inc();
                    rewind_to_committed(&consumer).map_err(|source| WorkerError::Consumer {
                        group: self.config.group_id.clone(),
                        source,
                    })?;
                }
                Err(e) => return Err(e),
            }
        }
        consumer.unsubscribe();
        Ok(())
    }

    /// Seeks each newly held partition back to its retry and pauses it.
    fn hold(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        held: &mut Held,
        newly_held: Held,
    ) -> Result<(), WorkerError> {
        for ((topic, partition), (offset, due)) in newly_held {
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(&topic, partition, Offset::Offset(offset))
                .expect("valid offset");
            consumer
                .seek_partitions(list.clone(), Duration::from_secs(30))
                .and_then(|_| consumer.pause(&list))
                .map_err(|source| WorkerError::Consumer {
                    group: self.config.group_id.clone(),
                    source,
                })?;
            info!(%topic, partition, offset, %due, "partition paused until its retry is due");
            held.insert((topic, partition), (offset, due));
        }
        self.metrics.activity_partitions_held.set(held.len() as i64);
        Ok(())
    }

    /// Resumes the held partitions whose retry is due by `now`.
    fn resume_due(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        held: &mut Held,
        now: DateTime<Utc>,
    ) {
        let due: Vec<(String, i32)> = held
            .iter()
            .filter(|(_, (_, due))| *due <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for (topic, partition) in due {
            held.remove(&(topic.clone(), partition));
            let mut list = TopicPartitionList::new();
            list.add_partition(&topic, partition);
            // Not assigned any more (after a rebalance) is fine: nothing to resume.
            if let Err(error) = consumer.resume(&list) {
                warn!(%topic, partition, %error, "cannot resume a held partition");
            }
        }
        self.metrics.activity_partitions_held.set(held.len() as i64);
    }

    /// Runs the batch's attempts and commits their outcomes; returns the partitions that
    /// stopped at a retry not due yet.
    async fn process_and_commit(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        transactor: &Transactor,
        records: Vec<OwnedMessage>,
    ) -> Result<Held, WorkerError> {
        let started = Instant::now();
        let (records, newly_held) = stop_at_retries_not_due(records, Utc::now() + INLINE_WAIT);
        if records.is_empty() {
            return Ok(newly_held);
        }
        // Attempts of one batch run concurrently; the batch commits when all are done.
        let outcomes = join_all(records.iter().map(|m| self.handle(m))).await;
        let mut offsets = BTreeMap::new();
        for m in &records {
            offsets.insert((m.topic().to_owned(), m.partition()), m.offset() + 1);
        }
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in offsets {
            list.add_partition_offset(&topic, partition, Offset::Offset(offset))
                .expect("valid offset");
        }
        let outgoing: Vec<OutgoingRecord> = outcomes
            .into_iter()
            .map(|o| match o {
                Outcome::Answer(r) | Outcome::Retry(r) | Outcome::DeadLetter(r) => r,
            })
            .collect();
        let group_metadata = consumer
            .group_metadata()
            .ok_or_else(|| WorkerError::Consumer {
                group: self.config.group_id.clone(),
                source: rdkafka::error::KafkaError::NoMessageReceived,
            })?;
        transactor.commit(&outgoing, list, group_metadata).await?;
        self.metrics.activity_batches.committed.inc();
        self.metrics
            .activity_batches
            .records_in
            .add(records.len() as u64);
        self.metrics
            .activity_batches
            .records_out
            .add(outgoing.len() as u64);
        self.metrics
            .activity_batches
            .seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(newly_held)
    }

    async fn handle(&self, message: &OwnedMessage) -> Outcome {
        let position = RecordPosition::at(message.topic(), message.partition(), message.offset());
        let payload = message.payload().unwrap_or_default();
        if payload.len() > self.config.max_record_bytes {
            let error = format!(
                "{} bytes exceed the limit of {}",
                payload.len(),
                self.config.max_record_bytes
            );
            return self.dead_letter(message, DlqReason::Oversize, error);
        }
        let request: ActivityRequest = match self.codec.decode_fetching(payload, &position).await {
            Ok(r) => r,
            Err(e) => return self.dead_letter(message, e.dlq_reason(), e.to_string()),
        };
        let span = info_span!("activity", execution = %request.execution_id, ffqn = %request.ffqn, attempt = request.attempt);
        async {
            if let Some(not_before) = not_before(message) {
                let wait = (not_before - Utc::now()).to_std().unwrap_or_default();
                tokio::time::sleep(wait).await;
            }
            self.metrics.activity_attempts.inc();
            let result = match self
                .host
                .run_activity_attempt(&request.ffqn, &request.params)
                .await
            {
                Ok(result) => result,
                Err(e) => {
                    return self.dead_letter(message, DlqReason::UnknownFfqn, e.to_string());
                }
            };
            let policy = self
                .host
                .registry()
                .function(&request.ffqn)
                .and_then(|f| self.host.registry().component(&f.component))
                .map(|c| c.spec.retries.clone());
            let retryable = match &result {
                ExecutionResult::Ok(_) => false,
                ExecutionResult::Err(_) => policy.as_ref().is_some_and(|p| p.retry_on_err),
                ExecutionResult::ExecutionError(e) => e.kind != ExecutionErrorKind::InvalidParams,
            };
            match policy {
                Some(policy) if retryable && request.attempt < policy.max_attempts => {
                    let next = request.attempt + 1;
                    let backoff = policy.backoff(next, jitter_unit(&request));
                    let not_before =
                        Utc::now() + chrono::Duration::from_std(backoff).unwrap_or_default();
                    info!(
                        next_attempt = next,
                        ?backoff,
                        "activity attempt failed; retry scheduled"
                    );
                    self.metrics.activity_retries_scheduled.inc();
                    let retry = ActivityRequest {
                        attempt: next,
                        ..request.clone()
                    };
                    match self.codec.encode(message.topic(), &retry) {
                        Ok(value) => Outcome::Retry(OutgoingRecord {
                            topic: message.topic().to_owned(),
                            key: request.execution_id.to_string(),
                            value,
                            headers: vec![(
                                NOT_BEFORE_HEADER.to_owned(),
                                not_before.timestamp_millis().to_string().into_bytes(),
                            )],
                        }),
                        Err(e) => self.dead_letter(message, DlqReason::Other, e.to_string()),
                    }
                }
                _ => self.answer(message, &request, result),
            }
        }
        .instrument(span)
        .await
    }

    fn answer(
        &self,
        message: &OwnedMessage,
        request: &ActivityRequest,
        result: ExecutionResult,
    ) -> Outcome {
        let response = Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result,
        };
        let topic = self.topology.topic(TopicRole::Responses).name.clone();
        match self.codec.encode(&topic, &response) {
            Ok(value) => Outcome::Answer(OutgoingRecord {
                topic,
                key: request.parent_execution_id.to_string(),
                value,
                headers: Vec::new(),
            }),
            Err(e) => self.dead_letter(message, DlqReason::Other, e.to_string()),
        }
    }

    fn dead_letter(&self, message: &OwnedMessage, reason: DlqReason, error: String) -> Outcome {
        Outcome::DeadLetter(dead_letter(
            &self.topology,
            &self.codec,
            &self.metrics,
            message,
            reason,
            error,
        ))
    }
}

/// Splits a batch into the records to run now and, per partition, the first retry due after
/// `horizon` (where that partition's part of the batch stops: nothing behind it runs, so the
/// committed offset never passes it). Records of one partition come in offset order.
fn stop_at_retries_not_due(
    records: Vec<OwnedMessage>,
    horizon: DateTime<Utc>,
) -> (Vec<OwnedMessage>, Held) {
    let mut held = Held::new();
    let mut runnable = Vec::with_capacity(records.len());
    for message in records {
        let key = (message.topic().to_owned(), message.partition());
        if held.contains_key(&key) {
            continue;
        }
        match not_before(&message) {
            Some(due) if due > horizon => {
                held.insert(key, (message.offset(), due));
            }
            _ => runnable.push(message),
        }
    }
    (runnable, held)
}

fn not_before(message: &OwnedMessage) -> Option<DateTime<Utc>> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == NOT_BEFORE_HEADER)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| i64::from_str(v).ok())
        .and_then(DateTime::from_timestamp_millis)
}

/// A jitter draw in [0, 1) that differs between activities and attempts (no shared RNG state).
fn jitter_unit(request: &ActivityRequest) -> f64 {
    let seed = request.execution_id.stable_hash()
        ^ u64::from(request.attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mixed =
        (seed ^ (Utc::now().timestamp_subsec_nanos() as u64)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;
    use rdkafka::message::{Header, OwnedHeaders};

    use super::*;

    fn record(partition: i32, offset: i64, not_before: Option<DateTime<Utc>>) -> OwnedMessage {
        let headers = not_before.map(|at| {
            OwnedHeaders::new().insert(Header {
                key: NOT_BEFORE_HEADER,
                value: Some(at.timestamp_millis().to_string().as_bytes()),
            })
        });
        OwnedMessage::new(
            Some(b"request".to_vec()),
            Some(b"key".to_vec()),
            "weir.activities.compute".to_owned(),
            Timestamp::NotAvailable,
            partition,
            offset,
            headers,
        )
    }

    fn positions(records: &[OwnedMessage]) -> Vec<(i32, i64)> {
        records
            .iter()
            .map(|m| (m.partition(), m.offset()))
            .collect()
    }

    #[test]
    fn a_partition_stops_at_its_first_retry_not_due_and_the_others_go_on() {
        let now = Utc::now();
        let later = now + chrono::Duration::seconds(30);
        let soon = now - chrono::Duration::milliseconds(1);
        let batch = vec![
            record(0, 10, None),
            record(1, 20, None),
            record(0, 11, Some(later)),
            record(1, 21, Some(soon)),
            record(0, 12, None),
            record(2, 30, Some(later + chrono::Duration::seconds(1))),
            record(1, 22, None),
            record(0, 13, Some(soon)),
        ];
        let (runnable, held) = stop_at_retries_not_due(batch, now);
        assert_eq!(
            positions(&runnable),
            vec![(0, 10), (1, 20), (1, 21), (1, 22)],
            "partition 0 stops at 11, partition 2 at 30; a retry already due runs"
        );
        let due_ms = |(offset, due): &(i64, DateTime<Utc>)| (*offset, due.timestamp_millis());
        assert_eq!(
            held.iter()
                .map(|((_, partition), stop)| (*partition, due_ms(stop)))
                .collect::<Vec<_>>(),
            vec![
                (0, (11, later.timestamp_millis())),
                (2, (30, later.timestamp_millis() + 1000)),
            ]
        );
    }
}
