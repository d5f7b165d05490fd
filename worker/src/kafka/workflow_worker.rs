//! The workflow worker: the Kafka driver of the partition processor. The loop and its rules
//! are the core's (`weir_core::driver` and `weir_core::processor`); this file plugs Kafka, the
//! CQL store and the wasmtime host into its seams:
//!
//! - [`KafkaLog`] is the `Log`: one consumer group member over the co-partitioned submissions,
//!   responses and events topics (`read_committed`, offsets committed only by transactions), the
//!   transactional producer that commits each batch with its input offsets, and the reader of
//!   `weir.history` for catch-up. It decodes what it polls and encodes what it commits.
//! - [`StoreAdapter`] is the `StoreRead`: the store's rows, decoded.
//! - the [materialiser](super::materialiser) is the `Materialise`.
//! - `WasmRunner` (in [`crate::wasm`]) is the `WorkflowRunner`.
//!
//! When the consumer or the transactional producer fails fatally (a broker restart longer than
//! the session does that: see [`super::recovery`]), [`KafkaLog`] rebuilds both in process and
//! reports a rebalance to an empty assignment, so that the driver's take-over forgets
//! everything uncommitted; the new consumer's assignment then comes as the next rebalance.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::consumer::Consumer;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::info;
use weir_core::concurrency::SlotCommand;
use weir_core::correlation::CorrelationCommand;
use weir_core::driver::{
    BoxError, Commit, CommitError, Driver, DriverConfig, InputTopic, KeyedState, Landed, LoadError,
    Log, LoggedEntry, Polled, PolledRecord, Position, Positions, Report, StoreRead,
};
use weir_core::processor::{Body, Input, Processor, ProcessorConfig, Undecodable};
use weir_core::rows::{ListPage, ListQuery};
use weir_core::schedule::ScheduleCommand;
use weir_core::wire::{KIND_HEADER, RecordType, STUB_FUNCTION_HEADER, STUB_REQUEST_HEADER};

use super::encode::{self, EncodeEffectError};
use super::group::{collect_batch, rewind_to_committed};
use super::history_reader;
use super::materialiser::Materialiser;
use super::member::{GroupMember, WorkerConfig, WorkerError};
use super::recovery::{self, Failure, Recovery};
use super::registry_hold::RegistryHold;
use super::transaction::TransactionError;
use crate::codec::{
    CancelRequest, Codec, DecodeError, DecodeErrorKind, EventRecord, HistoryRecord, PauseRequest,
    RecordPosition, ResetRequest, ResetStart, ResponseInput, SubmissionInput, UpgradeRequest,
};
use crate::metrics::Metrics;
use crate::model::{ExecutionId, Response};
use crate::store::patience::{Patience, patiently};
use crate::store::{Store, StoreError, TimerRow};
use crate::topology::{TopicRole, Topology};
use crate::wasm::inline::WasmInline;
use crate::wasm::{WasmHost, WasmRunner};

/// How much longer than the transaction timeout catch-up waits for an open transaction on
/// its history partition: the broker's check for timed-out transactions runs every 10 s by
/// default, and the abort takes a moment.
const TRANSACTION_CLEANUP_MARGIN: Duration = Duration::from_secs(30);

/// The workflow worker of one process.
pub struct WorkflowWorker<S: Store> {
    config: WorkerConfig,
    topology: Arc<Topology>,
    host: Arc<WasmHost>,
    store: Arc<S>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    /// The fleet controls the process follows (`weir.control`): a paused route's requests
    /// are not run inline.
    controls: Option<tokio::sync::watch::Receiver<weir_core::control::Controls>>,
}

impl<S: Store + 'static> WorkflowWorker<S> {
    /// Follows the fleet controls: nothing of a paused route runs inline.
    pub fn with_controls(
        mut self,
        controls: tokio::sync::watch::Receiver<weir_core::control::Controls>,
    ) -> Self {
        self.controls = Some(controls);
        self
    }

    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        host: Arc<WasmHost>,
        store: Arc<S>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut config = config;
        config.metrics = Arc::clone(&metrics);
        WorkflowWorker {
            config,
            topology,
            host,
            store,
            codec,
            metrics,
            controls: None,
        }
    }

    /// Runs until `shutdown` turns true (then commits nothing more and leaves the group).
    /// Must be called within a Tokio runtime (it starts the materialiser's task).
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let inputs = [
            self.topology.topic(TopicRole::Submissions).name.clone(),
            self.topology.topic(TopicRole::Responses).name.clone(),
            self.topology.topic(TopicRole::Events).name.clone(),
        ];
        // `range` gives one member the same partition of every co-partitioned input topic.
        let mut shutdown = shutdown;
        let Some(member) = self
            .config
            .join_group_at_start(&inputs, Some("range"), &mut shutdown)
            .await?
        else {
            return Ok(());
        };
        info!(instance = %self.config.instance_id, group = %self.config.group_id, "workflow worker started");
        let patience = Patience::new(self.config.store_patience);
        let materialiser = Materialiser::spawn_with(
            Arc::clone(&self.store),
            self.config.materialise_queue,
            self.config.materialise_linger,
            patience,
            Arc::clone(&self.metrics),
        );
        let log = KafkaLog {
            member,
            inputs,
            recovery: Recovery::new(self.config.static_membership),
            shutdown,
            config: self.config.clone(),
            topology: Arc::clone(&self.topology),
            codec: Arc::clone(&self.codec),
            metrics: Arc::clone(&self.metrics),
            history_topic: self.topology.topic(TopicRole::History).name.clone(),
            generation: 0,
            polled: encode::Inputs::new(),
            next_handle: 0,
            admitting: true,
            registry_hold: RegistryHold::default(),
            polled_at: Instant::now(),
            group_gen: 0,
            reported: Default::default(),
            inline_reported: (0, 0),
        };
        let store = StoreAdapter {
            store: Arc::clone(&self.store),
            codec: Arc::clone(&self.codec),
            patience,
            metrics: Arc::clone(&self.metrics),
        };
        let processor = Processor::new(
            WasmRunner(Arc::clone(&self.host)),
            ProcessorConfig {
                cache_bytes: self.config.cache_bytes,
                cache_size: self.config.cache_size,
                max_record_bytes: self.config.max_record_bytes,
                partitions: self.topology.topic(TopicRole::Submissions).partitions,
                early_event_wait: chrono::Duration::from_std(self.config.early_event_wait)
                    .unwrap_or(weir_core::correlation::EARLY_EVENT_WAIT),
            },
        );
        let mut driver = Driver::with_inline(
            processor,
            log,
            store,
            materialiser,
            DriverConfig {
                max_batch: self.config.max_batch_records,
                instance_id: self.config.instance_id.clone(),
                timer_horizon: self.config.timer_horizon,
                // Within a session timeout of the refusal, the group has told this member
                // (rebalance callbacks) or expired it.
                rejoin_wait: self.config.session_timeout,
                max_inline_rounds: crate::options::MAX_INLINE_ROUNDS,
                admit_below: crate::options::admission_limit(
                    self.config.cache_size,
                    self.config.max_batch_records,
                ),
                admission_idle: crate::options::ADMISSION_IDLE,
                read_ahead_bytes: crate::options::FAIR_READ_AHEAD_BYTES,
            },
            self.inline(),
        );
        driver.run().await?;
        info!(instance = %self.config.instance_id, "workflow worker stopping");
        driver.log().member.consumer.unsubscribe();
        Ok(())
    }
}

impl<S: Store> WorkflowWorker<S> {
    /// The inline seam: the host's inline components, none of a rate-limited or paused route.
    fn inline(&self) -> WasmInline {
        let inline = WasmInline::new(
            Arc::clone(&self.host),
            self.config.inline.clone(),
            Arc::clone(&self.topology),
        );
        match &self.controls {
            Some(controls) => inline.with_paused_routes(crate::wasm::inline::PausedRoutes {
                controls: controls.clone(),
                topology: Arc::clone(&self.topology),
            }),
            None => inline,
        }
    }
}

/// The store, decoded for the driver.
/// The store as the driver reads it: every call rides out an outage within the worker's
/// patience; a row that does not decode fails its execution only.
pub struct StoreAdapter<S: Store> {
    store: Arc<S>,
    codec: Arc<Codec>,
    patience: Patience,
    metrics: Arc<Metrics>,
}

impl<S: Store> StoreAdapter<S> {
    async fn patiently<T, Fut>(
        &self,
        what: &str,
        call: impl FnMut() -> Fut,
    ) -> Result<T, StoreError>
    where
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        patiently(&self.patience, &self.metrics.store_read_retries, what, call).await
    }
}

impl<S: Store> StoreRead for StoreAdapter<S> {
    async fn load(
        &self,
        id: &ExecutionId,
    ) -> Result<Option<Vec<(HistoryRecord, DateTime<Utc>)>>, LoadError> {
        let unreadable = |reason: String| LoadError::Unreadable {
            execution: id.clone(),
            reason,
        };
        let rows = match self.patiently("load", || self.store.history(id)).await {
            Ok(rows) => rows,
            Err(StoreError::Corrupt { reason, .. }) => return Err(unreadable(reason)),
            Err(e) => return Err(LoadError::Store(Box::new(e))),
        };
        if rows.is_empty() {
            return Ok(None);
        }
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            let position =
                RecordPosition::at("store.history", row.kafka_partition, row.kafka_offset);
            let record: HistoryRecord = self
                .codec
                .decode(&row.record, &position)
                .map_err(|e| unreadable(format!("history version {}: {e}", row.seq)))?;
            records.push((record, row.recorded_at));
        }
        Ok(Some(records))
    }

    async fn checkpoint(&self, topic: &str, partition: i32) -> Result<Option<i64>, BoxError> {
        Ok(self
            .patiently("checkpoint", || self.store.checkpoint(topic, partition))
            .await?
            .map(|c| c.materialised_offset))
    }

    async fn watermark(&self, partition: i32) -> Result<Option<DateTime<Utc>>, BoxError> {
        Ok(self
            .patiently("watermark", || self.store.timer_watermark(partition))
            .await?
            .map(|w| w.fired_before))
    }

    async fn timers_between(
        &self,
        partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<TimerRow>, BoxError> {
        Ok(self
            .patiently("timers", || {
                self.store.timers_between(partition, from, until)
            })
            .await?)
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage, BoxError> {
        Ok(self
            .patiently("list", || self.store.list_executions(query))
            .await?)
    }
}

/// The `Log` on Kafka; see the module docs.
pub struct KafkaLog {
    /// The consumer group member: replaced when one of its clients fails.
    member: GroupMember,
    /// The topics it subscribes to.
    inputs: [String; 3],
    recovery: Recovery,
    shutdown: watch::Receiver<bool>,
    config: WorkerConfig,
    topology: Arc<Topology>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    history_topic: String,
    /// The rebalance counter of the tracker at the last report to the driver.
    generation: u64,
    /// The consumer group's generation read at the last rebalance.
    group_gen: u64,
    /// The records polled since the last rewind that no committed batch consumed yet, by
    /// handle (for their DLQ copies; a submission may be held for its turn for some batches,
    /// `weir_core::fairness`).
    polled: encode::Inputs,
    /// The handle of the next record polled.
    next_handle: usize,
    /// Whether admission was open at the last report (its closings are counted).
    admitting: bool,
    /// Partitions whose records wait for the schema registry (see `registry_hold`).
    registry_hold: RegistryHold,
    polled_at: Instant,
    /// The processor's counters as last exported (they are cumulative; metrics get deltas).
    reported: weir_core::processor::ProcessorStats,
    /// The driver's inline counts (answered, spilled) last added to the metrics.
    inline_reported: (u64, u64),
}

impl KafkaLog {
    /// The consumer group's generation (Kafka's): the driver stamps the store writes of this
    /// membership with it. Without it (librdkafka's group metadata in another format) the
    /// worker stops rather than write unordered.
    fn group_generation(&self) -> Result<u64, BoxError> {
        super::group::group_generation(&self.member.consumer)
            .map(|g| g as u64)
            .ok_or_else(|| {
                format!(
                    "cannot read the generation of consumer group `{}` from librdkafka's group \
                     metadata: store writes could not be ordered",
                    self.config.group_id
                )
                .into()
            })
    }

    /// `message` as the processor's input; `Err` when the schema registry did not answer for
    /// its writer schema (the record is held, see `registry_hold`).
    async fn decode(
        &self,
        message: &OwnedMessage,
        index: usize,
    ) -> Result<PolledRecord, DecodeError> {
        let position = RecordPosition::at(message.topic(), message.partition(), message.offset());
        let payload = message.payload().unwrap_or_default();
        let topic = self.input_topic(message.topic());
        // What it is, by its topic and kind: one match of the wire table.
        let body = match super::headers::record_type(message, topic.into()) {
            Ok(record) => self.decode_as(record, message, payload, &position).await,
            Err(e) => Err(DecodeError {
                record: "record",
                position: position.clone(),
                kind: Box::new(DecodeErrorKind::Header {
                    header: KIND_HEADER,
                    message: e.to_string(),
                }),
            }),
        };
        let body = match body {
            Err(e) if e.is_transient() => return Err(e),
            body => body,
        };
        Ok(PolledRecord {
            topic,
            partition: message.partition(),
            offset: message.offset(),
            input: Input::Record {
                index,
                partition: message.partition(),
                key: message
                    .key()
                    .and_then(|k| std::str::from_utf8(k).ok())
                    .map(str::to_owned),
                size: payload.len(),
                body: body.map_err(|e| Undecodable {
                    reason: e.dlq_reason(),
                    error: e.to_string(),
                }),
                timestamp: message
                    .timestamp()
                    .to_millis()
                    .and_then(DateTime::from_timestamp_millis),
            },
        })
    }

    /// The value of `message` as a `record`, the body the processor takes.
    async fn decode_as(
        &self,
        record: RecordType,
        message: &OwnedMessage,
        payload: &[u8],
        position: &RecordPosition,
    ) -> Result<Body, DecodeError> {
        let codec = &self.codec;
        match record {
            RecordType::Submission => codec
                .decode_fetching::<SubmissionInput>(payload, position)
                .await
                .map(|input| match (input.ffqn_error, input.params_error) {
                    (Some(error), _) => Body::UnparsableFfqn {
                        submission: input.submission,
                        error,
                    },
                    (None, Some(error)) => Body::UnparsableParams {
                        submission: input.submission,
                        error,
                    },
                    (None, None) => {
                        let mut submission = input.submission;
                        super::trace_headers::adopt(&mut submission, message);
                        Body::Submission(submission)
                    }
                }),
            // A cancellation: on weir.responses from outside, on weir.submissions for a child.
            RecordType::CancelRequest => codec
                .decode_fetching::<CancelRequest>(payload, position)
                .await
                .map(Body::Cancel),
            RecordType::UpgradeRequest => codec
                .decode_fetching::<UpgradeRequest>(payload, position)
                .await
                .map(Body::Upgrade),
            RecordType::PauseRequest => codec
                .decode_fetching::<PauseRequest>(payload, position)
                .await
                .map(Body::Pause),
            RecordType::QueryRequest => codec
                .decode_fetching::<weir_core::query::QueryRequest>(payload, position)
                .await
                .map(Body::Query),
            RecordType::ResetRequest => codec
                .decode_fetching::<ResetRequest>(payload, position)
                .await
                .map(Body::Reset),
            RecordType::ResetStart => codec
                .decode_fetching::<ResetStart>(payload, position)
                .await
                .map(Body::ResetStart),
            RecordType::Response => codec
                .decode_fetching::<ResponseInput>(payload, position)
                .await
                .map(|input| match input.value_error {
                    None => Body::Response(input.response),
                    Some(error) => Body::MalformedAnswer {
                        response: input.response,
                        error,
                    },
                }),
            RecordType::StubWrite => codec
                .decode_fetching::<ResponseInput>(payload, position)
                .await
                .and_then(|input| stub_write(message, input, position)),
            RecordType::ScheduleCommand => codec
                .decode_fetching::<ScheduleCommand>(payload, position)
                .await
                .map(Body::Schedule),
            RecordType::CorrelationCommand => codec
                .decode_fetching::<CorrelationCommand>(payload, position)
                .await
                .map(Body::Correlation),
            RecordType::SlotCommand => codec
                .decode_fetching::<SlotCommand>(payload, position)
                .await
                .map(Body::Slot),
            RecordType::BatchCommand => codec
                .decode_fetching::<weir_core::batch::BatchCommand>(payload, position)
                .await
                .map(Body::Batch),
            // Its target tells an event for an execution from one for a correlation key.
            RecordType::Event => codec
                .decode_fetching::<EventRecord>(payload, position)
                .await
                .map(|event| match event {
                    EventRecord::Execution(event) => Body::Event(event),
                    EventRecord::Keyed(event) => Body::KeyedEvent(event),
                }),
            // Not on an input topic (the table puts none there).
            RecordType::HistoryRecord
            | RecordType::ExecutionFinished
            | RecordType::DlqEnvelope
            | RecordType::ScheduleState
            | RecordType::CorrelationState
            | RecordType::RememberedEvent
            | RecordType::SlotState
            | RecordType::BatchState
            | RecordType::BatchOutcomes
            | RecordType::ActivityRequest
            | RecordType::ActivityCancel
            | RecordType::ActivityRetry
            | RecordType::RoutePause
            | RecordType::QueryAnswer => Err(DecodeError {
                record: "record",
                position: position.clone(),
                kind: Box::new(DecodeErrorKind::Header {
                    header: KIND_HEADER,
                    message: format!("a {record:?} is no input of the workflow worker"),
                }),
            }),
        }
    }

    /// The input topic named `name` (what the consumer subscribed to).
    fn input_topic(&self, name: &str) -> InputTopic {
        [InputTopic::Submissions, InputTopic::Events]
            .into_iter()
            .find(|&topic| self.topic_name(topic) == name)
            .unwrap_or(InputTopic::Responses)
    }

    fn topic_name(&self, topic: InputTopic) -> &str {
        &self.topology.topic(topic.into()).name
    }

    /// Rebuilds the member's clients after `failure` (see [`super::recovery`]); `Ok(false)`
    /// when the process is stopping instead.
    async fn restart(&mut self, failure: Failure, cause: String) -> Result<bool, WorkerError> {
        let restarted = self
            .config
            .restart_member(
                &mut self.member,
                &self.inputs,
                Some("range"),
                &mut self.recovery,
                failure,
                cause,
                &self.metrics.workflow_batches.client_restarts,
                &mut self.shutdown,
            )
            .await?;
        if restarted {
            // The new member's tracker counts from zero; its first assignment is a rebalance.
            let (generation, _) = self.member.tracker.snapshot();
            self.generation = generation;
            self.polled.clear();
        }
        Ok(restarted)
    }

    fn consumer_error(&self, source: rdkafka::error::KafkaError) -> BoxError {
        Box::new(WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        })
    }
}

impl Log for KafkaLog {
    async fn poll(&mut self, max: usize) -> Result<Polled, BoxError> {
        if *self.shutdown.borrow() {
            return Ok(Polled::Shutdown);
        }
        if let Some(wait) = self.registry_hold.wait() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.changed() => return Ok(Polled::Shutdown),
            }
        }
        let (before, _) = self.member.tracker.snapshot();
        let records = tokio::select! {
            records = collect_batch(&self.member.consumer, self.config.commit_interval, max) => records,
            _ = self.shutdown.changed() => return Ok(Polled::Shutdown),
        };
        super::lag::sample(
            &self.member.consumer,
            &self.metrics.workflow_batches.progress,
        );
        if let Some((code, reason)) = self.member.consumer.client().fatal_error() {
            // E.g. FENCED_INSTANCE_ID, after a broker was away longer than the session.
            let cause = WorkerError::ConsumerFatal {
                group: self.config.group_id.clone(),
                instance_id: self.config.instance_id.clone(),
                code,
                reason,
            };
            if !self
                .restart(Failure::of_consumer(code), cause.to_string())
                .await?
            {
                return Ok(Polled::Shutdown);
            }
            // Nothing is owned until the new member is assigned: the take-over forgets what
            // the old one had uncommitted. The generation is the last one read: the new
            // member's is not known before it joined, and generations only grow.
            return Ok(Polled::Rebalanced {
                generation: self.group_gen,
                owned: BTreeSet::new(),
            });
        }
        let (generation, owned) = self.member.tracker.snapshot();
        if generation != before || generation != self.generation {
            // The batch spans a rebalance: drop it (nothing of it is committed); the driver
            // takes the new partitions over and reads again from the committed offsets.
            self.generation = generation;
            self.group_gen = self.group_generation()?;
            return Ok(Polled::Rebalanced {
                generation: self.group_gen,
                owned,
            });
        }
        self.polled_at = Instant::now();
        let mut polled = Vec::with_capacity(records.len());
        for message in records {
            if self.registry_hold.is_held(&message) {
                continue;
            }
            let handle = self.next_handle;
            match self.decode(&message, handle).await {
                Ok(record) => {
                    polled.push(record);
                    self.polled.insert(handle, message);
                    self.next_handle += 1;
                }
                Err(error) => {
                    tracing::warn!(%error, "record held in its partition: the schema registry did not answer; read again after a backoff");
                    self.registry_hold.hold(&message);
                }
            }
        }
        let held = self
            .registry_hold
            .finish_poll(&self.member.consumer)
            .map_err(|e| self.consumer_error(e))?;
        self.metrics.registry_holds.add(held as u64);
        Ok(Polled::Records(polled))
    }

    fn membership(&self) -> (u64, BTreeSet<i32>) {
        let (_, owned) = self.member.tracker.snapshot();
        // The generation read at the last rebalance, or a newer one (generations only grow).
        let generation = self.group_generation().unwrap_or(0).max(self.group_gen);
        (generation, owned)
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn rewind(&mut self) -> Result<Positions, BoxError> {
        let started = Instant::now();
        let rewound = rewind_to_committed(&self.member.consumer, "workflow-fetch-committed")
            .await
            .map_err(|source| {
                Box::new(WorkerError::TakeOver {
                    group: self.config.group_id.clone(),
                    source,
                })
            });
        // Cut short by the consumer failing fatally: no positions; the next poll rebuilds the
        // member and reports it as a rebalance to nothing, then to what the new one is given.
        let committed =
            super::group::unless_fenced(&self.member.consumer, rewound)?.unwrap_or_default();
        // Everything is read again from here.
        self.polled.clear();
        tracing::debug!(took = ?started.elapsed(), partitions = committed.len(), "rewound to the committed offsets (fetched as stable)");
        let submissions = self.topic_name(InputTopic::Submissions).to_owned();
        let events = self.topic_name(InputTopic::Events).to_owned();
        Ok(committed
            .into_iter()
            .map(|committed| Position {
                topic: if committed.topic == submissions {
                    InputTopic::Submissions
                } else if committed.topic == events {
                    InputTopic::Events
                } else {
                    InputTopic::Responses
                },
                partition: committed.partition,
                offset: committed.offset,
                metadata: committed.metadata,
            })
            .collect())
    }

    async fn read_history(
        &mut self,
        partition: i32,
        from: i64,
    ) -> Result<Vec<LoggedEntry>, BoxError> {
        let (kafka, codec, owner, topic) = (
            &self.config.kafka,
            &self.codec,
            &self.config.instance_id,
            &self.history_topic,
        );
        // A dead worker's open transaction is aborted by the broker at its timeout, checked
        // every `transaction.abort.timed.out.transaction.cleanup.interval.ms` (10 s by
        // default); waiting longer than both means something else is wrong.
        let settle = self.config.transaction_timeout + TRANSACTION_CLEANUP_MARGIN;
        // librdkafka blocks in poll; keep the runtime's other tasks going meanwhile.
        let started = Instant::now();
        let entries = tokio::task::block_in_place(|| {
            history_reader::read(kafka, codec, owner, topic, partition, from, settle)
        })?;
        tracing::debug!(partition, from, entries = entries.len(), took = ?started.elapsed(), "history read for catch-up");
        Ok(entries)
    }

    async fn read_keyed_state(
        &mut self,
        partitions: &BTreeSet<i32>,
    ) -> Result<KeyedState, BoxError> {
        let topic = self.topology.topic(TopicRole::State).name.clone();
        let settle = self.config.transaction_timeout + TRANSACTION_CLEANUP_MARGIN;
        let started = Instant::now();
        let (kafka, codec, owner) = (&self.config.kafka, &self.codec, &self.config.instance_id);
        let partitions: Vec<i32> = partitions.iter().copied().collect();
        let state = tokio::task::block_in_place(|| {
            history_reader::read_keyed_state(
                kafka,
                codec,
                owner,
                &topic,
                &partitions,
                settle,
                history_reader::Settle::Wait,
                history_reader::Wanted::All,
            )
        })?;
        tracing::debug!(?partitions, schedules = state.schedules.len(), correlation_keys = state.correlations.len(), took = ?started.elapsed(), "keyed state read for take-over");
        Ok(state)
    }

    async fn commit(&mut self, commit: Commit<'_>) -> Result<Vec<Landed>, CommitError> {
        let mut history = Vec::new();
        let records = encode::records(
            &self.codec,
            &self.topology,
            &self.polled,
            commit.effects,
            commit.traces,
            &mut history,
        )
        .map_err(|e: EncodeEffectError| CommitError::Fatal(Box::new(e)))?;
        let mut list = TopicPartitionList::new();
        for position in commit.offsets {
            let name = self.topic_name(position.topic).to_owned();
            list.add_partition_offset(&name, position.partition, Offset::Offset(position.offset))
                .map_err(|e| CommitError::Fatal(self.consumer_error(e)))?;
            if !position.metadata.is_empty()
                && let Some(mut element) = list.find_partition(&name, position.partition)
            {
                element.set_metadata(position.metadata.clone());
            }
        }
        let group_metadata = self.member.consumer.group_metadata().ok_or_else(|| {
            CommitError::Fatal(self.consumer_error(rdkafka::error::KafkaError::NoMessageReceived))
        })?;
        self.metrics
            .workflow_process_seconds
            .observe(self.polled_at.elapsed().as_secs_f64());
        let committing = Instant::now();
        let landed = match self
            .member
            .transactor
            .commit(&records, list, group_metadata)
            .await
        {
            Ok(landed) => landed,
            Err(e @ TransactionError::Rebalanced { .. }) => {
                self.metrics.workflow_batches.aborted.inc();
                return Err(CommitError::Refused(Box::new(e)));
            }
            Err(e @ TransactionError::Aborted { .. }) => {
                self.metrics.workflow_batches.aborted.inc();
                return Err(CommitError::Retry(Box::new(e)));
            }
            Err(e) => {
                let Some(failure) = recovery::Failure::of_transaction(&e) else {
                    return Err(CommitError::Fatal(Box::new(e)));
                };
                // Nothing of the batch is visible (its transaction is aborted by the new
                // producer's registration at the latest): take over again with new clients.
                return match self.restart(failure, e.to_string()).await {
                    Ok(true) => {
                        self.metrics.workflow_batches.aborted.inc();
                        Err(CommitError::Retry(Box::new(e)))
                    }
                    Ok(false) => Err(CommitError::Fatal(Box::new(e))),
                    Err(stop) => Err(CommitError::Fatal(Box::new(stop))),
                };
            }
        };
        self.metrics
            .workflow_commit_seconds
            .observe(committing.elapsed().as_secs_f64());
        self.metrics.workflow_batches.committed.inc();
        for handle in commit.consumed {
            self.polled.remove(handle);
        }
        self.metrics
            .workflow_batches
            .records_out
            .add(records.len() as u64);
        let mut records = records;
        Ok(history
            .into_iter()
            .map(|index| Landed {
                partition: landed[index].partition,
                offset: landed[index].offset,
                bytes: records[index].value.take().unwrap_or_default(),
            })
            .collect())
    }

    fn history_topic(&self) -> &str {
        &self.history_topic
    }

    async fn admit(&mut self, open: bool, from: &[(i32, i64)]) -> Result<(), BoxError> {
        let topic = self.topic_name(InputTopic::Submissions).to_owned();
        let mut list = TopicPartitionList::new();
        for &(partition, offset) in from {
            list.add_partition_offset(&topic, partition, Offset::Offset(offset))
                .map_err(|e| self.consumer_error(e))?;
        }
        if list.count() == 0 {
            return Ok(());
        }
        let consumer = &self.member.consumer;
        if open {
            consumer.resume(&list).map_err(|e| self.consumer_error(e))?;
            // librdkafka drops what it had fetched of a paused partition: go on from the
            // record after the last one the driver took.
            consumer
                .seek_partitions(list, Duration::from_secs(30))
                .map_err(|e| self.consumer_error(e))?;
        } else {
            consumer.pause(&list).map_err(|e| self.consumer_error(e))?;
        }
        Ok(())
    }

    fn observe(&mut self, report: &Report) {
        let m = &self.metrics;
        m.partitions_owned.set(report.owned as i64);
        m.executions_cached.set(report.cached as i64);
        m.executions_parked.set(report.parked as i64);
        m.executions_start_deferred.set(report.deferred as i64);
        m.submissions_paused.set(i64::from(!report.admitting));
        if self.admitting && !report.admitting {
            m.admission_pauses.inc();
        }
        self.admitting = report.admitting;
        m.submissions_held.set(report.held as i64);
        m.submissions_held_bytes.set(report.held_bytes as i64);
        m.workflow_batches.records_in.add(report.inputs as u64);
        if report.inputs > 0 {
            m.workflow_batches
                .seconds
                .observe(self.polled_at.elapsed().as_secs_f64());
        }
        // Each counter moves by what its processor statistic grew since the last report.
        let (now, last) = (report.stats, self.reported);
        type Of = fn(&weir_core::processor::ProcessorStats) -> u64;
        let deltas: [(&crate::metrics::Counter, Of); 21] = [
            (&m.executions_created, |s| s.created),
            (&m.executions_finished, |s| s.finished),
            (&m.executions_replayed, |s| s.replayed),
            (&m.execution_starts_deferred, |s| s.deferred_starts),
            (&m.executions_evicted_for_room, |s| s.evicted_for_room),
            (&m.schedule_ticks_started, |s| s.ticks_started),
            (&m.schedule_ticks_skipped, |s| s.ticks_skipped),
            (&m.schedule_ticks_missed, |s| s.ticks_missed),
            (&m.keyed_events_forwarded, |s| s.keyed_events_forwarded),
            (&m.keyed_events_buffered, |s| s.keyed_events_buffered),
            (&m.events_early, |s| s.events_early),
            (&m.cancels_early, |s| s.cancels_early),
            (&m.executions_paused, |s| s.paused),
            (&m.executions_resumed, |s| s.resumed),
            (&m.executions_reset, |s| s.resets),
            (&m.slots_granted, |s| s.slots_granted),
            (&m.slots_refused, |s| s.slots_refused),
            (&m.batch_requests, |s| s.batch_requests),
            (&m.keyed_events_returned, |s| s.keyed_events_returned),
            (&m.state_corrupt_dropped, |s| s.corrupt_states_dropped),
            (&m.correlation_ids_cut, |s| s.remembered_cut),
        ];
        for (counter, of) in deltas {
            counter.add(of(&now).saturating_sub(of(&last)));
        }
        self.reported = now;
        m.inline_activities_answered.add(
            report
                .inline_answered
                .saturating_sub(self.inline_reported.0),
        );
        m.inline_activities_spilled
            .add(report.inline_spilled.saturating_sub(self.inline_reported.1));
        self.inline_reported = (report.inline_answered, report.inline_spilled);
    }
}

/// A workflow's write of another execution's stub: the `Response` of the stub with the
/// writer's request and the stub's function in headers ([`RecordKind::StubWrite`]).
fn stub_write<M: Message>(
    message: &M,
    input: ResponseInput,
    position: &RecordPosition,
) -> Result<Body, DecodeError> {
    let refused = |header: &'static str, message: String| DecodeError {
        record: "Response",
        position: position.clone(),
        kind: Box::new(DecodeErrorKind::Header { header, message }),
    };
    let header = |name: &'static str| -> Result<String, DecodeError> {
        super::headers::header(message, name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .ok_or_else(|| refused(name, "missing on a stub write".to_owned()))
    };
    let request: ExecutionId = header(STUB_REQUEST_HEADER)?
        .parse()
        .map_err(|e| refused(STUB_REQUEST_HEADER, format!("not an execution id: {e}")))?;
    let ffqn: weir_core::model::Ffqn = header(STUB_FUNCTION_HEADER)?
        .parse()
        .map_err(|e| refused(STUB_FUNCTION_HEADER, format!("not a function name: {e}")))?;
    match (input.response, input.value_error) {
        (
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            },
            None,
        ) if request.parent().is_some() => Ok(Body::StubWrite(weir_core::processor::StubWrite {
            request,
            target: child_execution_id,
            ffqn,
            result,
        })),
        (_, Some(error)) => Err(refused(STUB_REQUEST_HEADER, format!("the value: {error}"))),
        _ => Err(refused(
            STUB_REQUEST_HEADER,
            "a stub write is a child's result, written by a workflow's request".to_owned(),
        )),
    }
}
