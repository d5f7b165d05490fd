//! The workflow worker: a member of one consumer group over the co-partitioned submissions and
//! responses topics. For each batch of input records it loads the executions involved (parked
//! in memory, or rebuilt from the store by replay), runs them, and commits every output record
//! and the input offsets in one Kafka transaction; then it hands the committed history to the
//! [materialiser](super::materialiser), which writes it into the store while the next batch
//! runs. On assignment it first catches the store up with `weir.history` (see
//! [`super::catchup`]) and loads the partition's due timers.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

use super::KafkaConfig;
use super::catchup::{Catchup, TIMER_WATERMARK_SUFFIX};
use super::dlq::dead_letter;
use super::executions::{
    Batch, BatchError, Executions, Live, Phase, TIMER_DELAY, TIMER_SCHEDULE, response_id,
    schedule_timer_id,
};
use super::group::{RebalanceTracker, collect_batch, rewind_to_committed};
use super::materialiser::{MaterialiseError, MaterialiseJob, Materialiser};
use super::transaction::{TransactionError, Transactor};
use crate::codec::{
    Codec, Created, DecodeError, DlqReason, HistoryEntry, HistoryRecord, RecordPosition, Submission,
};
use crate::metrics::Metrics;
use crate::model::{
    DelayId, DelayOutcome, ExecutionErrorKind, ExecutionId, HistoryEvent, Response,
};
use crate::replay::Execution;
use crate::store::{Checkpoint, Store, StoreError, TimerRow};
use crate::topology::{TopicRole, Topology};
use crate::wasm::{RunStep, WasmHost};

/// How a workflow worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub kafka: KafkaConfig,
    /// Unique per process: part of the transactional id and the checkpoint owner.
    pub instance_id: String,
    pub group_id: String,
    /// A batch is committed after this long, or after `max_batch_records` records.
    pub commit_interval: Duration,
    pub max_batch_records: usize,
    /// How many parked workflow instances to keep in memory.
    pub cache_size: usize,
    /// Input records larger than this go to the DLQ.
    pub max_record_bytes: usize,
    /// The store is written at most once per this (see [`Materialiser::spawn`]).
    pub materialise_linger: Duration,
    /// Timers due within this horizon are held in memory.
    pub timer_horizon: Duration,
    pub transaction_timeout: Duration,
}

/// A worker's place in its consumer group: the subscribed consumer, what its rebalances did,
/// and the transactional producer that commits its batches.
pub(super) struct GroupMember {
    pub consumer: StreamConsumer<RebalanceTracker>,
    pub tracker: RebalanceTracker,
    pub transactor: Transactor,
}

impl WorkerConfig {
    pub fn new(
        kafka: KafkaConfig,
        group_id: impl Into<String>,
        instance_id: impl Into<String>,
    ) -> Self {
        WorkerConfig {
            kafka,
            instance_id: instance_id.into(),
            group_id: group_id.into(),
            commit_interval: Duration::from_millis(20),
            max_batch_records: 500,
            cache_size: 10_000,
            max_record_bytes: 1024 * 1024,
            materialise_linger: Duration::from_millis(200),
            timer_horizon: Duration::from_secs(60),
            transaction_timeout: Duration::from_secs(30),
        }
    }

    /// Subscribes to `topics` in the group (with a partition assignment strategy, if given)
    /// and registers the transactional producer `<group>-<instance>` — namespaced by the
    /// group, so that deployments sharing a cluster never fence each other — which fences any
    /// earlier producer with that id.
    pub(super) async fn join_group(
        &self,
        topics: &[String],
        assignment_strategy: Option<&str>,
    ) -> Result<GroupMember, WorkerError> {
        let consumer_error = |source| WorkerError::Consumer {
            group: self.group_id.clone(),
            source,
        };
        let tracker = RebalanceTracker::default();
        let mut consumer_config = self.kafka.consumer(&self.group_id);
        if let Some(strategy) = assignment_strategy {
            consumer_config.set("partition.assignment.strategy", strategy);
        }
        let consumer: StreamConsumer<RebalanceTracker> = consumer_config
            .create_with_context(tracker.clone())
            .map_err(consumer_error)?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(consumer_error)?;
        let transactor = Transactor::new(
            &self.kafka,
            &format!("{}-{}", self.group_id, self.instance_id),
            self.transaction_timeout,
        )
        .await?;
        Ok(GroupMember {
            consumer,
            tracker,
            transactor,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot create the consumer of group `{group}`: {source}")]
    Consumer {
        group: String,
        source: rdkafka::error::KafkaError,
    },
    #[error(transparent)]
    Transaction(Box<TransactionError>),
    #[error("store: {0}")]
    Store(Box<StoreError>),
    #[error("catch-up of partition {partition}: {reason}")]
    Catchup { partition: i32, reason: String },
    #[error("batch: {0}")]
    Batch(Box<BatchError>),
    #[error(transparent)]
    Materialise(#[from] MaterialiseError),
}

// Boxed: the errors of librdkafka and the CQL driver are large, and these travel through
// every `?` of the hot path.
impl From<TransactionError> for WorkerError {
    fn from(e: TransactionError) -> Self {
        WorkerError::Transaction(Box::new(e))
    }
}

impl From<StoreError> for WorkerError {
    fn from(e: StoreError) -> Self {
        WorkerError::Store(Box::new(e))
    }
}

impl From<BatchError> for WorkerError {
    fn from(e: BatchError) -> Self {
        WorkerError::Batch(Box::new(e))
    }
}

/// An input of a batch.
enum Input {
    Record(OwnedMessage),
    /// A due timer of an owned partition.
    Timer(TimerRow),
}

/// The workflow worker of one process.
pub struct WorkflowWorker<S: Store> {
    config: WorkerConfig,
    topology: Arc<Topology>,
    host: Arc<WasmHost>,
    store: Arc<S>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    executions: Executions,
    /// Due-time ordered timers of owned partitions within the horizon.
    timers: BTreeMap<(DateTime<Utc>, String), TimerRow>,
    /// Per owned partition: timers up to here are loaded into `timers`.
    timers_loaded_until: BTreeMap<i32, DateTime<Utc>>,
    /// Per owned partition: the timer watermark last written to the store.
    watermarks_written: BTreeMap<i32, DateTime<Utc>>,
    owned: BTreeSet<i32>,
    generation: u64,
    /// Writes committed batches to the store in the background.
    materialiser: Materialiser,
}

/// Committed batches that may wait for the store before the worker waits for it.
const MATERIALISE_QUEUE: usize = 64;

impl<S: Store + 'static> WorkflowWorker<S> {
    /// Must be called within a Tokio runtime (it starts the materialiser's task).
    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        host: Arc<WasmHost>,
        store: Arc<S>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let executions = Executions::new(config.cache_size);
        let materialiser = Materialiser::spawn(
            Arc::clone(&store),
            MATERIALISE_QUEUE,
            config.materialise_linger,
        );
        WorkflowWorker {
            config,
            topology,
            host,
            store,
            codec,
            metrics,
            executions,
            timers: BTreeMap::new(),
            timers_loaded_until: BTreeMap::new(),
            watermarks_written: BTreeMap::new(),
            owned: BTreeSet::new(),
            generation: 0,
            materialiser,
        }
    }

    /// Runs until `shutdown` turns true (then commits nothing more and leaves the group).
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let inputs = [
            self.topology.topic(TopicRole::Submissions).name.clone(),
            self.topology.topic(TopicRole::Responses).name.clone(),
        ];
        // `range` gives one member the same partition of every co-partitioned input topic.
        let GroupMember {
            consumer,
            tracker,
            transactor,
        } = self.config.join_group(&inputs, Some("range")).await?;
        info!(instance = %self.config.instance_id, group = %self.config.group_id, "workflow worker started");

        loop {
            if *shutdown.borrow() {
                break;
            }
            self.materialiser.health()?;
            let (generation_before, _) = tracker.snapshot();
            let records = tokio::select! {
                records = collect_batch(&consumer, self.config.commit_interval, self.config.max_batch_records) => records,
                _ = shutdown.changed() => break,
            };
            let (generation, owned) = tracker.snapshot();
            if generation != generation_before || generation != self.generation {
                // The batch spans a rebalance: drop it (nothing of it is committed), take the
                // new partitions over, and read again from the committed offsets.
                self.take_over(&consumer, generation, owned).await?;
                continue;
            }
            let timers = self.due_timers(Utc::now());
            if records.is_empty() && timers.is_empty() {
                self.refill_timers().await?;
                continue;
            }
            let span = info_span!("batch", records = records.len(), timers = timers.len());
            let result = self
                .process_and_commit(&consumer, &transactor, records, timers)
                .instrument(span)
                .await;
            match result {
                Ok(()) => {}
                Err(WorkerError::Transaction(e))
                    if matches!(
                        *e,
                        TransactionError::Aborted { .. } | TransactionError::Rebalanced { .. }
                    ) =>
                {
                    warn!(error = %e, "batch aborted; reprocessing from the committed offsets");
                    self.metrics.workflow_batches.aborted.inc();
                    let (generation, owned) = tracker.snapshot();
                    self.take_over(&consumer, generation, owned).await?;
                }
                Err(e) => return Err(e),
            }
        }
        info!(instance = %self.config.instance_id, "workflow worker stopping");
        self.materialiser.flush().await?;
        consumer.unsubscribe();
        Ok(())
    }

    /// Adopts a new assignment: forgets what in-memory state could be ahead of the committed
    /// one, catches the store up with the history of the owned partitions, loads their timers,
    /// and rewinds the consumer to the committed offsets.
    async fn take_over(
        &mut self,
        consumer: &StreamConsumer<RebalanceTracker>,
        generation: u64,
        owned: BTreeSet<i32>,
    ) -> Result<(), WorkerError> {
        // Catch-up and the cold path read the store: it must hold every committed batch.
        self.materialiser.flush().await?;
        self.executions.clear();
        self.timers.clear();
        self.timers_loaded_until.clear();
        self.watermarks_written.clear();
        let catchup = Catchup::new(
            &self.config.kafka,
            &self.topology,
            &self.codec,
            self.store.as_ref(),
            &self.config.instance_id,
        );
        for &partition in &owned {
            let count = catchup
                .run(partition)
                .await
                .map_err(|e| WorkerError::Catchup {
                    partition,
                    reason: e.to_string(),
                })?;
            if count > 0 {
                info!(
                    partition,
                    records = count,
                    "store caught up with the history"
                );
            }
        }
        self.owned = owned;
        self.generation = generation;
        self.refill_timers().await?;
        rewind_to_committed(consumer).map_err(|source| WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        })?;
        self.metrics.partitions_owned.set(self.owned.len() as i64);
        Ok(())
    }

    /// Loads the timers of owned partitions due within the horizon into memory.
    async fn refill_timers(&mut self) -> Result<(), WorkerError> {
        let until =
            Utc::now() + chrono::Duration::from_std(self.config.timer_horizon).unwrap_or_default();
        let history = &self.topology.topic(TopicRole::History).name;
        for &partition in &self.owned {
            let from = match self.timers_loaded_until.get(&partition) {
                Some(loaded) if *loaded >= until - chrono::Duration::seconds(5) => continue,
                Some(loaded) => *loaded,
                None => {
                    let watermark = self
                        .store
                        .checkpoint(&format!("{history}{TIMER_WATERMARK_SUFFIX}"), partition)
                        .await?;
                    watermark
                        .and_then(|w| DateTime::from_timestamp_millis(w.materialised_offset))
                        .unwrap_or_else(|| Utc::now() - chrono::Duration::days(1))
                }
            };
            for timer in self.store.timers_between(partition, from, until).await? {
                self.timers
                    .insert((timer.due_at, timer.timer_id.clone()), timer);
            }
            self.timers_loaded_until.insert(partition, until);
        }
        Ok(())
    }

    fn due_timers(&mut self, now: DateTime<Utc>) -> Vec<TimerRow> {
        let mut due = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now || due.len() >= self.config.max_batch_records {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    async fn process_and_commit(
        &mut self,
        consumer: &StreamConsumer<RebalanceTracker>,
        transactor: &Transactor,
        records: Vec<OwnedMessage>,
        timers: Vec<TimerRow>,
    ) -> Result<(), WorkerError> {
        let started = Instant::now();
        let now = Utc::now();
        let codec = Arc::clone(&self.codec);
        let topology = Arc::clone(&self.topology);
        let mut batch = Batch::new(&codec, &topology, now);
        let mut offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let input_count = records.len() + timers.len();
        let inputs = records
            .into_iter()
            .map(Input::Record)
            .chain(timers.iter().cloned().map(Input::Timer));
        for input in inputs {
            if let Input::Record(message) = &input {
                let key = (message.topic().to_owned(), message.partition());
                offsets.insert(key, message.offset() + 1);
            }
            self.process(&mut batch, input).await?;
        }
        for timer in &timers {
            batch.removed_timers.push((
                timer.kafka_partition,
                timer.due_at,
                timer.timer_id.clone(),
            ));
        }

        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in &offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .expect("valid offset");
        }
        let group_metadata = consumer
            .group_metadata()
            .ok_or_else(|| WorkerError::Consumer {
                group: self.config.group_id.clone(),
                source: rdkafka::error::KafkaError::NoMessageReceived,
            })?;
        self.metrics
            .workflow_process_seconds
            .observe(started.elapsed().as_secs_f64());
        let committing = Instant::now();
        let landed = transactor
            .commit(&batch.records, list, group_metadata)
            .await?;
        self.metrics
            .workflow_commit_seconds
            .observe(committing.elapsed().as_secs_f64());
        self.metrics.workflow_batches.committed.inc();
        self.metrics
            .workflow_batches
            .records_in
            .add(input_count as u64);
        self.metrics
            .workflow_batches
            .records_out
            .add(batch.records.len() as u64);
        self.materialise(batch, &landed).await?;
        self.metrics
            .workflow_batches
            .seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// After a commit: updates the in-memory timers, hands history rows (with their offsets),
    /// execution rows, timers and checkpoints to the materialiser, pins the touched executions
    /// until they are in the store, and trims the cache.
    async fn materialise(
        &mut self,
        batch: Batch<'_>,
        landed: &[super::transaction::Landed],
    ) -> Result<(), WorkerError> {
        let now = Utc::now();
        let history_topic = self.topology.topic(TopicRole::History).name.clone();
        let checkpoint = |topic: String, partition: i32, offset: i64| Checkpoint {
            topic,
            kafka_partition: partition,
            materialised_offset: offset,
            owner: self.config.instance_id.clone(),
            updated_at: now,
        };
        let mut next_offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let history: Vec<_> = batch
            .history_rows
            .into_iter()
            .map(|(index, mut row)| {
                let at = landed[index];
                row.kafka_partition = at.partition;
                row.kafka_offset = at.offset;
                let next = next_offsets.entry(at.partition).or_default();
                *next = (*next).max(at.offset + 1);
                row
            })
            .collect();
        let mut checkpoints: Vec<Checkpoint> = next_offsets
            .into_iter()
            .map(|(partition, offset)| checkpoint(history_topic.clone(), partition, offset))
            .collect();
        let executions = batch
            .touched
            .iter()
            .filter_map(|id| self.executions.get_mut(id).map(|live| live.row()))
            .collect();

        let horizon =
            now + chrono::Duration::from_std(self.config.timer_horizon).unwrap_or_default();
        for timer in &batch.new_timers {
            if timer.due_at <= horizon && self.owned.contains(&timer.kafka_partition) {
                self.timers
                    .insert((timer.due_at, timer.timer_id.clone()), timer.clone());
            }
        }
        for (_, due_at, id) in &batch.removed_timers {
            self.timers.remove(&(*due_at, id.clone()));
        }
        // Timers before the earliest one still pending have all fired and are deleted. Written
        // when it moved by a second or more: it only bounds a new owner's first scan.
        for &partition in &self.owned {
            let earliest_pending = self
                .timers
                .values()
                .filter(|t| t.kafka_partition == partition)
                .map(|t| t.due_at)
                .min()
                .unwrap_or(now)
                .min(now);
            let written = self.watermarks_written.get(&partition).copied();
            if written.is_some_and(|w| (earliest_pending - w).num_seconds().abs() < 1) {
                continue;
            }
            self.watermarks_written.insert(partition, earliest_pending);
            checkpoints.push(checkpoint(
                format!("{history_topic}{TIMER_WATERMARK_SUFFIX}"),
                partition,
                earliest_pending.timestamp_millis(),
            ));
        }

        let job = MaterialiseJob {
            history,
            executions,
            new_timers: batch.new_timers,
            removed_timers: batch.removed_timers,
            checkpoints,
        };
        let number = self.materialiser.submit(job).await?;
        for id in &batch.touched {
            if let Some(live) = self.executions.get_mut(id) {
                live.pinned_until = number;
            }
        }
        self.executions.evict(self.materialiser.materialised());
        self.metrics
            .executions_cached
            .set(self.executions.len() as i64);
        self.metrics
            .executions_parked
            .set(self.executions.parked() as i64);
        Ok(())
    }

    async fn process(&mut self, batch: &mut Batch<'_>, input: Input) -> Result<(), WorkerError> {
        match input {
            Input::Timer(timer) => self.fire_timer(batch, timer).await,
            Input::Record(message) => {
                let position =
                    RecordPosition::at(message.topic(), message.partition(), message.offset());
                let payload = message.payload().unwrap_or_default();
                if payload.len() > self.config.max_record_bytes {
                    let error = format!(
                        "{} bytes exceed the limit of {}",
                        payload.len(),
                        self.config.max_record_bytes
                    );
                    self.dead_letter(batch, &message, DlqReason::Oversize, error);
                    return Ok(());
                }
                let submissions = &self.topology.topic(TopicRole::Submissions).name;
                if message.topic() == submissions {
                    match self
                        .codec
                        .decode_fetching::<Submission>(payload, &position)
                        .await
                    {
                        Ok(submission) => self.submit(batch, submission, &message).await,
                        Err(e) => {
                            self.undecodable(batch, &message, e);
                            Ok(())
                        }
                    }
                } else {
                    match self
                        .codec
                        .decode_fetching::<Response>(payload, &position)
                        .await
                    {
                        Ok(response) => self.respond(batch, response, &message).await,
                        Err(e) => {
                            self.undecodable(batch, &message, e);
                            Ok(())
                        }
                    }
                }
            }
        }
    }

    fn undecodable(&self, batch: &mut Batch<'_>, message: &OwnedMessage, error: DecodeError) {
        self.dead_letter(batch, message, error.dlq_reason(), error.to_string());
    }

    /// Moves an input record to the DLQ, byte for byte, with the reason in headers.
    fn dead_letter(
        &self,
        batch: &mut Batch<'_>,
        message: &OwnedMessage,
        reason: DlqReason,
        error: String,
    ) {
        batch.raw(dead_letter(
            &self.topology,
            &self.codec,
            &self.metrics,
            message,
            reason,
            error,
        ));
    }

    async fn submit(
        &mut self,
        batch: &mut Batch<'_>,
        submission: Submission,
        message: &OwnedMessage,
    ) -> Result<(), WorkerError> {
        let id = submission.execution_id.clone();
        if self.load(batch, &id).await?.is_some() {
            debug!(execution = %id, "duplicate submission ignored");
            return Ok(());
        }
        let span = info_span!("execution", execution = %id, ffqn = %submission.ffqn);
        let _enter = span.enter();
        let mut live = Live {
            created: Created {
                ffqn: submission.ffqn.clone(),
                params: submission.params.clone(),
                parent: submission.parent.clone(),
                scheduled_at: submission.scheduled_at,
                correlation_id: submission.correlation_id.clone(),
                metadata: submission.metadata.clone(),
                created_at: batch.now,
            },
            id: id.clone(),
            partition: message.partition(),
            next_seq: 0,
            responses_seen: HashSet::new(),
            phase: Phase::Scheduled,
            updated_at: batch.now,
            pinned_until: 0,
        };
        let created = HistoryEntry::Created(live.created.clone());
        batch.history(&mut live, created)?;
        self.metrics.executions_created.inc();
        if let Err(e) = self
            .host
            .check_submission(&submission.ffqn, &submission.params)
        {
            let (reason, kind) = match e {
                crate::wasm::SubmitError::UnknownFunction(_) => {
                    (DlqReason::UnknownFfqn, ExecutionErrorKind::UnknownFunction)
                }
                crate::wasm::SubmitError::Params(_) => {
                    (DlqReason::InvalidParams, ExecutionErrorKind::InvalidParams)
                }
            };
            self.dead_letter(batch, message, reason, e.to_string());
            batch.fail(&mut live, kind, e.to_string())?;
        } else if submission.scheduled_at.is_some_and(|at| at > batch.now) {
            let due_at = submission.scheduled_at.unwrap_or(batch.now);
            batch.new_timers.push(TimerRow {
                kafka_partition: live.partition,
                due_at,
                timer_id: schedule_timer_id(&id),
                execution_id: id.clone(),
                kind: TIMER_SCHEDULE.to_owned(),
                payload: Vec::new(),
            });
        } else {
            start_run(
                &self.host,
                &self.metrics,
                batch,
                &mut live,
                Vec::new(),
                Vec::new(),
            )
            .await?;
        }
        self.executions.insert(live);
        Ok(())
    }

    async fn respond(
        &mut self,
        batch: &mut Batch<'_>,
        response: Response,
        message: &OwnedMessage,
    ) -> Result<(), WorkerError> {
        let Some(owner) = message
            .key()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(|k| ExecutionId::from_str(k).ok())
        else {
            let error = "the key is not an execution id".to_owned();
            self.dead_letter(batch, message, DlqReason::Other, error);
            return Ok(());
        };
        if !response.is_for(&owner) {
            let error = format!("the response does not answer a request of {owner}");
            self.dead_letter(batch, message, DlqReason::Other, error);
            return Ok(());
        }
        self.deliver(batch, &owner, response, Some(message)).await
    }

    async fn deliver(
        &mut self,
        batch: &mut Batch<'_>,
        owner: &ExecutionId,
        response: Response,
        message: Option<&OwnedMessage>,
    ) -> Result<(), WorkerError> {
        if self.load(batch, owner).await?.is_none() {
            match message {
                Some(message) => {
                    let error = format!("execution {owner} does not exist");
                    self.dead_letter(batch, message, DlqReason::Other, error);
                }
                None => warn!(execution = %owner, "timer of an unknown execution dropped"),
            }
            return Ok(());
        }
        let now = batch.now;
        let live = self.executions.get_mut(owner).expect("just loaded");
        let span = info_span!("execution", execution = %owner);
        let _enter = span.enter();
        let id = response_id(&response);
        if live.responses_seen.contains(&id) || matches!(live.phase, Phase::Finished(_)) {
            debug!(response = %id, "response ignored: duplicate or execution finished");
            return Ok(());
        }
        batch.journal_response(live, &response)?;
        let Phase::Running(Some(run)) = &mut live.phase else {
            // A scheduled execution cannot have requests to answer yet.
            warn!(response = %id, "response for an execution that has not started");
            return Ok(());
        };
        match run.deliver(response, now).await {
            Ok(step) => apply_step(&self.metrics, batch, live, step),
            Err(e) => {
                warn!(execution = %owner, error = %e, "response could not be delivered");
                batch.fail(live, ExecutionErrorKind::Trap, e.to_string())?;
                Ok(())
            }
        }
    }

    async fn fire_timer(
        &mut self,
        batch: &mut Batch<'_>,
        timer: TimerRow,
    ) -> Result<(), WorkerError> {
        match timer.kind.as_str() {
            TIMER_DELAY => {
                let Ok(delay_id) = DelayId::from_str(&timer.timer_id) else {
                    warn!(timer = %timer.timer_id, "malformed delay timer dropped");
                    return Ok(());
                };
                let response = Response::DelayFinished {
                    delay_id,
                    outcome: DelayOutcome::Ok,
                };
                self.deliver(batch, &timer.execution_id, response, None)
                    .await
            }
            TIMER_SCHEDULE => {
                if self.load(batch, &timer.execution_id).await?.is_none() {
                    return Ok(());
                }
                let live = self
                    .executions
                    .get_mut(&timer.execution_id)
                    .expect("loaded");
                if !matches!(live.phase, Phase::Scheduled) {
                    return Ok(());
                }
                start_run(
                    &self.host,
                    &self.metrics,
                    batch,
                    live,
                    Vec::new(),
                    Vec::new(),
                )
                .await
            }
            other => {
                warn!(kind = other, timer = %timer.timer_id, "unknown timer kind dropped");
                Ok(())
            }
        }
    }

    /// Makes sure `id` is in the cache with its run parked if it is running: from memory, or
    /// rebuilt from the store by replay. `None` if the execution does not exist.
    async fn load(
        &mut self,
        batch: &mut Batch<'_>,
        id: &ExecutionId,
    ) -> Result<Option<()>, WorkerError> {
        let now = batch.now;
        if let Some(live) = self.executions.get_mut(id) {
            if !matches!(live.phase, Phase::Running(None)) {
                return Ok(Some(()));
            }
            // Rebuilt from the store: it must hold every batch that touched the execution.
            let pinned_until = live.pinned_until;
            self.materialiser.wait_for(pinned_until).await?;
        }
        let rows = self.store.history(id).await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut created = None;
        let mut events = Vec::new();
        let mut responses = Vec::new();
        let mut finished = None;
        let partition = rows[0].kafka_partition;
        for row in &rows {
            let position =
                RecordPosition::at("store.history", row.kafka_partition, row.kafka_offset);
            let record: HistoryRecord =
                self.codec
                    .decode(&row.record, &position)
                    .map_err(|e| StoreError::Corrupt {
                        execution_id: id.to_string(),
                        reason: e.to_string(),
                    })?;
            match record.entry {
                HistoryEntry::Created(c) => created = Some(c),
                HistoryEntry::Event { event, .. } => events.push(event),
                HistoryEntry::ResponseAppended(r) => responses.push(r),
                HistoryEntry::Finished { result, .. } => finished = Some(result),
            }
        }
        let Some(created) = created else {
            return Err(StoreError::Corrupt {
                execution_id: id.to_string(),
                reason: "the history does not start with Created".to_owned(),
            }
            .into());
        };
        self.metrics.executions_replayed.inc();
        let started = !events.is_empty() || !responses.is_empty();
        let mut live = Live {
            responses_seen: responses.iter().map(response_id).collect(),
            id: id.clone(),
            partition,
            next_seq: rows.len() as u64,
            updated_at: now,
            pinned_until: 0,
            phase: match (&finished, started) {
                (Some(result), _) => Phase::Finished(result.clone()),
                (None, _) if created.scheduled_at.is_some_and(|at| at > now) && !started => {
                    Phase::Scheduled
                }
                _ => Phase::Running(None),
            },
            created,
        };
        if let Phase::Running(None) = live.phase {
            // The cold path: replay the recorded events and journalled responses. It yields
            // no new effects unless the code changed under the execution; whatever it yields
            // continues the history and is committed with this batch.
            start_run(
                &self.host,
                &self.metrics,
                batch,
                &mut live,
                events,
                responses,
            )
            .await?;
        }
        self.executions.insert(live);
        Ok(Some(()))
    }
}

/// Starts (or rebuilds, given its recorded history and responses) the run of `live` and adds
/// what it produced to the batch. A run that cannot start finishes the execution with an error.
async fn start_run(
    host: &WasmHost,
    metrics: &Metrics,
    batch: &mut Batch<'_>,
    live: &mut Live,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
) -> Result<(), WorkerError> {
    let execution = Execution {
        id: live.id.clone(),
        ffqn: live.created.ffqn.clone(),
        params: live.created.params.clone(),
    };
    match host
        .start_workflow(execution, history, responses, batch.now)
        .await
    {
        Ok((run, step)) => {
            live.phase = Phase::Running(Some(run));
            apply_step(metrics, batch, live, step)
        }
        Err(e) => {
            warn!(execution = %live.id, error = %e, "execution failed to start");
            batch.fail(live, ExecutionErrorKind::Trap, e.to_string())?;
            Ok(())
        }
    }
}

/// Adds a run's events and outputs to the batch. A finished run's outputs end with
/// `Finished`, which closes the changelog and answers the parent or `weir.results`.
fn apply_step(
    metrics: &Metrics,
    batch: &mut Batch<'_>,
    live: &mut Live,
    step: RunStep,
) -> Result<(), WorkerError> {
    let finished = matches!(step, RunStep::Finished { .. });
    let (RunStep::Parked { effects, .. } | RunStep::Finished { effects, .. }) = step;
    batch.effects(live, effects)?;
    if finished {
        metrics.executions_finished.inc();
    }
    Ok(())
}
