//! The activity worker: consumes the request topics of the activity routes, runs each request
//! of a WASM activity as attempts of its component, and answers the parent (on
//! `weir.responses`, keyed by the parent's id) exactly once (`docs/design/activities.md`).
//!
//! **This file is the rdkafka/tokio loop only.** Every decision — what a record is to its
//! partition, when an attempt starts, retries and their not-before instants, cancellations,
//! the unknown-function grace, external deadlines, flow control, what a commit carries and
//! the offset metadata — is [`weir_core::activity::ActivityCore`]'s, the same code the
//! deterministic simulation runs. The loop polls the consumer, decodes records, feeds them,
//! the finished tasks and a tick to the core with the instant of its turn (the one place it
//! reads the clock), and executes the core's effects: attempts spawned on the [`WasmHost`]
//! (and aborted), checks of external services' consumer groups, pauses and resumes, seeks, and
//! commits — the answers and dead letters produced by the idempotent producer and
//! acknowledged, then the progress of every partition (its frontier as the committed offset,
//! the unfinished requests in the offset's metadata) committed by the consumer
//! ([`super::answers`]).
//!
//! **Nothing waits for anything else.** Attempts run concurrently, up to
//! [`ActivitySettings::concurrency`], as tasks of their own, while the loop keeps polling the
//! consumer (so an attempt longer than `max.poll.interval.ms` never costs the membership) and
//! reading further records (a slow attempt holds back nobody). Each answer is committed as soon
//! as it is ready (with the others that finish within `--commit-interval-ms`).
//!
//! So a request answered out of order is never run again after a crash or a rebalance once
//! its progress committed: the next owner seeks to the frontier and skips what the metadata
//! does not list. Its answer was acknowledged before that progress was committed; one
//! produced by a commit whose progress was lost is answered again (a duplicate the parent
//! drops): exactly once in the parent's history.
//! Retries are durable in that same metadata; a request that arrives as a later attempt
//! (`attempt > 1` with a [`NOT_BEFORE_HEADER`]) runs at that attempt, not before that
//! instant. A cancellation ([`ActivityCancel`], kind [`wire::RecordKind::Cancel`] in its [`wire::KIND_HEADER`])
//! interrupts a running attempt (its task is aborted: wasmtime stops the guest at its next
//! await point) and answers `cancelled`. A request whose attempts are exhausted under
//! `on_exhausted = "pause"` is parked: its parent's `PauseRequest` goes out with the commit
//! that marks it parked, and a retry notice (the same record of kind
//! [`wire::RecordKind::RetryActivity`], its parent's resume) gives it a fresh budget. External routes are watched until their deadline:
//! the loop reads the service group's committed offset when the core asks
//! ([`Effect::CheckService`]). A partition with [`ActivitySettings::partition_window`]
//! unfinished requests is paused until one finishes; the consumer is polled all along.
//! The topology's rate limits ([`Topology::rate_limits`]) go to the core, which starts an
//! attempt of a rate-limited topic only with a token of this process's bucket of it
//! (`weir_activity_rate_limited_total{topic}` counts the attempts it delayed); the loop sleeps
//! until the core's next wake, which names when the next token comes.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{debug, info, warn};
use weir_core::activity::{
    ActivityCore, Body, Commit, Committed, CoreConfig, Effect, Input, Outgoing, Record,
    RoutePartition, Serve,
};
pub use weir_core::activity::{
    ActivitySettings, ActivitySettingsError, MAX_PARTITION_WINDOW, Mark, MetadataError, Progress,
};

use weir_core::activity::answer;
use weir_core::control::Controls;
use weir_core::wire::{self, NOT_BEFORE_HEADER, RecordType};

use super::activity_tasks::{Source, Tasks};
use super::answers::Answers;
use super::dlq::dead_letter;
use super::group::{MemberContext, RebalanceTracker};
use super::headers;
use super::member::{GroupMember, NoTransactions, WorkerConfig, WorkerError};
use super::outgoing::OutgoingRecord;
use super::recovery::{Failure, Recovery};
use super::registry_hold::RegistryHold;
use crate::codec::{
    ActivityCancel, ActivityRequest, Codec, DecodeError, DlqReason, RecordPosition,
};
use crate::metrics::Metrics;
use crate::model::Response;
use crate::options;
use crate::topology::{TopicRole, Topology};
use crate::wasm::{RetryPolicy, WasmHost};
use weir_core::records::ActivityRetry;

/// The loop turns at least this often while nothing happens (it polls the consumer meanwhile,
/// which is what keeps the member in its group).
const TICK: Duration = Duration::from_millis(200);

/// The activity worker's group member: it commits through its consumer, not in transactions.
type Member = GroupMember<NoTransactions>;

/// The settings of `weir worker` when none are given.
pub fn default_settings() -> ActivitySettings {
    ActivitySettings {
        concurrency: options::DEFAULT_ACTIVITY_CONCURRENCY,
        partition_window: options::DEFAULT_ACTIVITY_PARTITION_WINDOW,
        unknown_grace: Duration::from_secs(options::DEFAULT_UNKNOWN_ACTIVITY_GRACE_SECS),
    }
}

pub struct ActivityWorker {
    config: WorkerConfig,
    core: ActivityCore<Source>,
    topology: Arc<Topology>,
    host: Arc<WasmHost>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    /// The producer of the answers (created when the worker runs).
    answers: Option<Answers>,
    /// The fleet controls the process follows (`weir.control`): paused routes.
    controls: Option<watch::Receiver<Controls>>,
    /// The paused routes' topics the core was last told of.
    paused_told: std::collections::BTreeSet<String>,
}

impl ActivityWorker {
    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        host: Arc<WasmHost>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
    ) -> Self {
        // The topology's rate limits were validated when it was loaded, by the rule the core
        // checks (`RateLimit::validate`).
        let core = ActivityCore::new(core_config(&config, default_settings(), &topology))
            .expect("the default activity settings are valid (tested), and so are the topology's rate limits");
        for topic in topology.rate_limits().keys() {
            metrics.activity_rate_limited.register(topic);
        }
        ActivityWorker {
            config,
            core,
            topology,
            host,
            codec,
            metrics,
            answers: None,
            controls: None,
            paused_told: Default::default(),
        }
    }

    /// Follows the fleet controls (`weir.control`, [`super::control::follow`]): no attempt of
    /// a paused route starts, and its partitions are not fetched, until it is resumed.
    pub fn with_controls(mut self, controls: watch::Receiver<Controls>) -> Self {
        self.controls = Some(controls);
        self
    }

    /// The paused routes' topics, when they differ from what the core was last told.
    fn paused_topics(&mut self) -> Option<Input<Source>> {
        let topics = self.controls.as_ref()?.borrow().paused_route_names();
        if topics == self.paused_told {
            return None;
        }
        self.paused_told = topics.clone();
        Some(Input::TopicsPaused(topics))
    }

    /// Other settings than the defaults.
    pub fn with_settings(
        mut self,
        settings: ActivitySettings,
    ) -> Result<Self, ActivitySettingsError> {
        self.core = ActivityCore::new(core_config(&self.config, settings, &self.topology))?;
        Ok(self)
    }

    /// The request topics this worker consumes: those of the routes it serves and of the
    /// external routes it watches.
    pub fn topics(&self) -> Vec<String> {
        self.topology.route_topics()
    }

    fn consumer_error(&self, source: rdkafka::error::KafkaError) -> WorkerError {
        WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        }
    }

    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let topics = self.topics();
        if topics.is_empty() {
            info!("no activity routes to serve");
            return Ok(());
        }
        self.answers = Some(self.new_answers()?);
        // Answers go through `answers` (idempotent), progress through the consumer: the member
        // has no transactional producer.
        let Some(mut member): Option<Member> = self
            .config
            .join_group_at_start(&topics, None, &mut shutdown)
            .await?
        else {
            return Ok(());
        };
        let mut recovery = Recovery::new(self.config.static_membership);
        info!(instance = %self.config.instance_id, ?topics, settings = ?self.core.config().settings, rate_limits = ?self.core.config().rate_limits, "activity worker started");
        let (mut tasks, mut done_rx) = Tasks::new();
        // The instant of the last turn (`None` before the first).
        let mut last: Option<DateTime<Utc>> = None;
        let (mut generation, _) = member.tracker.snapshot();
        // Partitions whose records wait for the schema registry, and until when nothing is
        // read (see `registry_hold`).
        let mut hold = RegistryHold::default();
        let mut held_until: Option<Instant> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if member.consumer.context().should_leave() {
                // On SIGTERM / SIGINT: what is finished is committed, then the member leaves its
                // group, so that its partitions move at once (a static member does not leave
                // by closing).
                if let Some(now) = last
                    && let Err(e) = self.flush(&member, &mut tasks, false, now).await
                {
                    warn!(error = %e, "the last activity commit before leaving failed; the next owner runs those attempts again");
                }
                super::group::leave(&member.consumer).await;
                break;
            }
            let mut wait = match (self.core.next_wake(), last) {
                (Some(at), Some(now)) => (at - now).to_std().unwrap_or_default().min(TICK),
                _ => TICK,
            };
            let reading = match held_until {
                Some(until) if Instant::now() < until => {
                    wait = wait.min(until - Instant::now());
                    false
                }
                _ => true,
            };
            let mut inputs = Vec::new();
            let mut polled_any = false;
            let controls_changed = async {
                match self.controls.as_mut() {
                    Some(controls) => {
                        if controls.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                () = controls_changed => {}
                Some(done) = done_rx.recv() => inputs.push(tasks.finished(done, &self.metrics)),
                () = tokio::time::sleep(wait) => {}
                polled = tokio::time::timeout(TICK, member.consumer.recv()), if reading => match polled {
                    Ok(Ok(message)) => {
                        polled_any = true;
                        self.take(message.detach(), &mut hold, &mut inputs).await;
                    }
                    Ok(Err(error)) => warn!(%error, "activity consumer error"),
                    Err(_idle) => {}
                },
            }
            // Group commit: whatever else is ready now — finished attempts, fetched records —
            // joins the turn, so that answers that finished while the last one committed
            // commit together, and a lone answer commits at once.
            while let Ok(done) = done_rx.try_recv() {
                inputs.push(tasks.finished(done, &self.metrics));
            }
            for _ in 0..self.config.max_batch_records {
                if !reading {
                    break;
                }
                match member.consumer.recv().now_or_never() {
                    Some(Ok(message)) => {
                        polled_any = true;
                        self.take(message.detach(), &mut hold, &mut inputs).await;
                    }
                    Some(Err(error)) => {
                        warn!(%error, "activity consumer error");
                        break;
                    }
                    None => break,
                }
            }
            if polled_any {
                let held = hold
                    .finish_poll(&member.consumer)
                    .map_err(|e| self.consumer_error(e))?;
                self.metrics.registry_holds.add(held as u64);
                held_until = hold
                    .wait()
                    .filter(|_| held > 0)
                    .map(|wait| Instant::now() + wait);
            }
            super::lag::sample(&member.consumer, &self.metrics.activity_batches.progress);
            // The one clock reading: every input of this turn is handled at this instant.
            let now = Utc::now();
            last = Some(now);
            if let Some((code, reason)) = member.consumer.client().fatal_error() {
                // E.g. FENCED_INSTANCE_ID, after a broker was away longer than the session.
                let cause = WorkerError::ConsumerFatal {
                    group: self.config.group_id.clone(),
                    instance_id: self.config.instance_id.clone(),
                    code,
                    reason,
                };
                let failure = Failure::of_consumer(code);
                let restarted = self
                    .restart(
                        &mut member,
                        &topics,
                        &mut recovery,
                        &mut shutdown,
                        &mut tasks,
                        failure,
                        cause.to_string(),
                        now,
                    )
                    .await?;
                match restarted {
                    Some(new_generation) => generation = new_generation,
                    None => break,
                }
                continue;
            }
            let (now_generation, _) = member.tracker.snapshot();
            if now_generation != generation {
                generation = now_generation;
                self.take_over_unless_fenced(&member, &mut tasks, now)
                    .await?;
                continue;
            }
            inputs.extend(self.paused_topics());
            match self.turn(&member, &mut tasks, inputs, now).await {
                Ok(()) => {}
                Err(WorkerError::Answers(e)) => {
                    warn!(error = %e, "activity commit failed; taking the partitions over again (answers already produced are duplicates their parents drop)");
                    self.metrics.activity_batches.aborted.inc();
                    if self.answers.as_ref().is_some_and(|a| e.is_fatal(a)) {
                        warn!("the activity worker's producer failed fatally; creating a new one");
                        self.answers = Some(self.new_answers()?);
                    }
                    self.take_over_unless_fenced(&member, &mut tasks, now)
                        .await?;
                }
                Err(e) => return Err(e),
            }
            self.update_metrics();
        }
        // What is finished is committed; running attempts are interrupted and run again by the
        // next owner (at-least-once).
        if let Some(now) = last
            && let Err(error) = self.flush(&member, &mut tasks, true, now).await
        {
            warn!(%error, "the last activity commit failed; the next owner runs those requests again");
        }
        tasks.abort_all();
        member.consumer.unsubscribe();
        Ok(())
    }

    /// Feeds the turn's inputs and a tick to the core, executing its effects as they come.
    async fn turn(
        &mut self,
        member: &Member,
        tasks: &mut Tasks,
        inputs: Vec<Input<Source>>,
        now: DateTime<Utc>,
    ) -> Result<(), WorkerError> {
        for input in inputs.into_iter().chain([Input::Tick]) {
            let effects = self.core.handle(input, now);
            self.execute(member, tasks, effects, now).await?;
        }
        Ok(())
    }

    /// Commits what is finished now (and, with `interrupt`, aborts what runs first).
    async fn flush(
        &mut self,
        member: &Member,
        tasks: &mut Tasks,
        interrupt: bool,
        now: DateTime<Utc>,
    ) -> Result<(), WorkerError> {
        let effects = self.core.handle(Input::Flush { interrupt }, now);
        self.execute(member, tasks, effects, now).await
    }

    /// Rebuilds the member's clients after `failure` (see [`super::recovery`]) and drops
    /// everything in flight (nothing is assigned to the new member yet; its assignment comes as
    /// a rebalance). The new member's rebalance counter; `None` when the process is stopping.
    #[allow(clippy::too_many_arguments)]
    async fn restart(
        &mut self,
        member: &mut Member,
        topics: &[String],
        recovery: &mut Recovery,
        shutdown: &mut watch::Receiver<bool>,
        tasks: &mut Tasks,
        failure: Failure,
        cause: String,
        now: DateTime<Utc>,
    ) -> Result<Option<u64>, WorkerError> {
        let restarted = self
            .config
            .restart_member(
                member,
                topics,
                None,
                recovery,
                failure,
                cause,
                &self.metrics.activity_batches.client_restarts,
                shutdown,
            )
            .await?;
        if !restarted {
            return Ok(None);
        }
        self.take_over(member, tasks, now).await?;
        let (generation, _) = member.tracker.snapshot();
        Ok(Some(generation))
    }

    /// [`Self::take_over`], except that one cut short by the consumer failing fatally (fenced
    /// while it fetched the committed progress, after a broker was away longer than the
    /// session) is left to the loop's next turn, which rebuilds the member and takes over
    /// then. Until then the core owns nothing, so nothing is answered or committed.
    async fn take_over_unless_fenced(
        &mut self,
        member: &Member,
        tasks: &mut Tasks,
        now: DateTime<Utc>,
    ) -> Result<(), WorkerError> {
        let taken = self.take_over(member, tasks, now).await;
        super::group::unless_fenced(&member.consumer, taken).map(|_| ())
    }

    /// Drops everything in flight and resumes from the committed progress of every assigned
    /// partition (after a rebalance, or a commit that failed).
    async fn take_over(
        &mut self,
        member: &Member,
        tasks: &mut Tasks,
        now: DateTime<Utc>,
    ) -> Result<(), WorkerError> {
        let effects = self.core.handle(Input::Revoked, now);
        self.execute(member, tasks, effects, now).await?;
        tasks.abort_all();
        let consumer = &member.consumer;
        let take_over_error = |source| WorkerError::TakeOver {
            group: self.config.group_id.clone(),
            source,
        };
        let assignment = consumer.assignment().map_err(take_over_error)?;
        if assignment.count() == 0 {
            return Ok(());
        }
        let committed =
            super::group::fetch_committed(consumer, &assignment, "activity-fetch-committed")
                .await
                .map_err(take_over_error)?;
        let assigned: Vec<(RoutePartition, Option<Committed>)> = committed
            .elements()
            .iter()
            .map(|element| {
                let partition = RoutePartition::new(element.topic(), element.partition());
                let committed = match element.offset() {
                    Offset::Offset(offset) => Some(Committed {
                        offset,
                        metadata: super::group::committed_metadata(element),
                    }),
                    _ => None,
                };
                (partition, committed)
            })
            .collect();
        // A list obtained from the consumer must be gone before the consumer is dropped.
        drop(committed);
        let effects = self.core.handle(Input::Assigned(assigned), now);
        self.execute(member, tasks, effects, now).await
    }

    /// Takes a polled record into the turn's `inputs`, unless it is behind a record `hold`
    /// holds, or its writer schema cannot be fetched now (then it is held itself).
    async fn take(
        &self,
        message: OwnedMessage,
        hold: &mut RegistryHold,
        inputs: &mut Vec<Input<Source>>,
    ) {
        if hold.is_held(&message) {
            return;
        }
        match self.body(&message).await {
            Ok(body) => inputs.push(Self::input(message, body)),
            Err(error) => {
                warn!(%error, "activity record held in its partition: the schema registry did not answer; read again after a backoff");
                hold.hold(&message);
            }
        }
    }

    /// What a record is: a request (and how this worker serves it), a cancellation, or
    /// something for the DLQ.
    fn input(message: OwnedMessage, body: Body) -> Input<Source> {
        let partition = RoutePartition::new(message.topic(), message.partition());
        let offset = message.offset();
        let written_at = message
            .timestamp()
            .to_millis()
            .and_then(DateTime::from_timestamp_millis);
        Input::Record(Record {
            partition,
            offset,
            written_at,
            source: Arc::new(message),
            body,
        })
    }

    /// The body of `message`; `Err` only when the schema registry did not answer for its
    /// writer schema (a transient error: the record is held, never dead-lettered).
    async fn body(&self, message: &OwnedMessage) -> Result<Body, DecodeError> {
        let position = RecordPosition::at(message.topic(), message.partition(), message.offset());
        let payload = message.payload().unwrap_or_default();
        if payload.len() > self.config.max_record_bytes {
            let error = format!(
                "{} bytes exceed the limit of {}",
                payload.len(),
                self.config.max_record_bytes
            );
            return Ok(Body::Undecodable {
                reason: DlqReason::Oversize,
                error,
            });
        }
        let read = match headers::record_type(message, TopicRole::Activity) {
            Ok(read) => read,
            Err(e) => {
                return Ok(Body::Undecodable {
                    reason: DlqReason::Undecodable,
                    error: format!("{position}: {e}"),
                });
            }
        };
        let undecodable = |e: DecodeError| {
            if e.is_transient() {
                Err(e)
            } else {
                Ok(Body::Undecodable {
                    reason: e.dlq_reason(),
                    error: e.to_string(),
                })
            }
        };
        // A retry notice is an `ActivityCancel` record of kind `retry-activity`.
        if matches!(read, RecordType::ActivityCancel | RecordType::ActivityRetry) {
            return match self
                .codec
                .decode_fetching::<ActivityCancel>(payload, &position)
                .await
            {
                Ok(cancel) if read == RecordType::ActivityRetry => Ok(Body::Retry(ActivityRetry {
                    execution_id: cancel.execution_id,
                    parent_execution_id: cancel.parent_execution_id,
                    resumed_at: cancel.cancelled_at,
                })),
                Ok(cancel) => Ok(Body::Cancel(cancel)),
                Err(e) => undecodable(e),
            };
        }
        match self
            .codec
            .decode_fetching::<ActivityRequest>(payload, &position)
            .await
        {
            Ok(request) => Ok(Body::Request {
                serve: self.serve(message.topic(), &request),
                not_before: header_not_before(message),
                request,
            }),
            Err(e) => undecodable(e),
        }
    }

    /// How this worker serves `request` (read on `topic`): its topology and its components.
    fn serve(&self, topic: &str, request: &ActivityRequest) -> Serve {
        let external = self
            .topology
            .routes
            .iter()
            .find(|r| r.external && r.topic == topic);
        if let Some(route) = external {
            let registry = self.host.registry();
            let timeout = registry
                .function(&request.ffqn)
                .and_then(|f| registry.component(&f.component))
                .map(|c| c.spec.limits.timeout);
            return Serve::External {
                service_group: route.service_group.clone(),
                timeout,
            };
        }
        match self.host.activity_settings(&request.ffqn) {
            Some((policy, _)) => {
                let policy: &RetryPolicy = policy;
                Serve::Wasm(policy.clone())
            }
            None => Serve::Unknown,
        }
    }

    /// Executes the core's effects in order.
    async fn execute(
        &mut self,
        member: &Member,
        tasks: &mut Tasks,
        effects: Vec<Effect<Source>>,
        now: DateTime<Utc>,
    ) -> Result<(), WorkerError> {
        let consumer = &member.consumer;
        let mut seek = TopicPartitionList::new();
        for effect in effects {
            match effect {
                Effect::Seek { partition, offset } => {
                    let offset = offset.map_or(Offset::Beginning, Offset::Offset);
                    seek.add_partition_offset(&partition.topic, partition.partition, offset)
                        .map_err(|e| self.consumer_error(e))?;
                }
                Effect::Start(start) => tasks.start(&self.host, start),
                Effect::CheckService {
                    id,
                    partition,
                    offset,
                    group,
                } => tasks.check(&self.config.kafka, id, partition, offset, group),
                Effect::Abort { id } => tasks.abort(id),
                Effect::Pause { partition } => {
                    consumer
                        .pause(&single(&partition))
                        .map_err(|e| self.consumer_error(e))?;
                    debug!(%partition, "activity partition paused: its window is full");
                }
                Effect::Resume { partition, from } => {
                    self.resume(consumer, &partition, from)?;
                }
                Effect::Commit(commit) => {
                    self.commit(member, commit).await?;
                    let after = self.core.handle(Input::Committed, now);
                    debug_assert!(after.is_empty(), "a commit's report has no effects");
                }
            }
        }
        if seek.count() > 0 {
            consumer
                .seek_partitions(seek, Duration::from_secs(30))
                .map_err(|e| self.consumer_error(e))?;
        }
        Ok(())
    }

    /// Resumes `partition` from `from`; without `from` (a partition paused before a
    /// take-over) it may not be assigned any more, which is fine.
    fn resume(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        partition: &RoutePartition,
        from: Option<i64>,
    ) -> Result<(), WorkerError> {
        let Some(from) = from else {
            if let Err(error) = consumer.resume(&single(partition)) {
                debug!(%partition, %error, "cannot resume a paused partition");
            }
            return Ok(());
        };
        consumer
            .resume(&single(partition))
            .map_err(|e| self.consumer_error(e))?;
        let mut seek = TopicPartitionList::new();
        seek.add_partition_offset(&partition.topic, partition.partition, Offset::Offset(from))
            .map_err(|e| self.consumer_error(e))?;
        consumer
            .seek_partitions(seek, Duration::from_secs(30))
            .map_err(|e| self.consumer_error(e))?;
        debug!(%partition, from, "activity partition resumed");
        Ok(())
    }

    fn new_answers(&self) -> Result<Answers, WorkerError> {
        Answers::new(
            &self.config.kafka,
            self.config.transaction_timeout,
            Arc::clone(&self.metrics),
        )
        .map_err(|e| WorkerError::Answers(Box::new(e)))
    }

    /// Produces the commit's records, then commits its progress once they are acknowledged
    /// ([`Answers::commit`]).
    async fn commit(&self, member: &Member, commit: Commit<Source>) -> Result<(), WorkerError> {
        let started = Instant::now();
        let mut list = TopicPartitionList::new();
        for (partition, progress) in &commit.progress {
            list.add_partition_offset(
                &partition.topic,
                partition.partition,
                Offset::Offset(progress.frontier),
            )
            .map_err(|e| self.consumer_error(e))?;
            if let Some(mut element) = list.find_partition(&partition.topic, partition.partition) {
                element.set_metadata(progress.metadata());
            }
        }
        let records: Vec<OutgoingRecord> =
            commit.records.iter().map(|r| self.outgoing(r)).collect();
        let answers = self
            .answers
            .as_ref()
            .expect("the answers' producer is created before the worker takes records");
        answers
            .commit(&member.consumer, &records, list)
            .await
            .map_err(|e| WorkerError::Answers(Box::new(e)))?;
        let batches = &self.metrics.activity_batches;
        batches.committed.inc();
        batches.records_in.add(commit.finished);
        batches.records_out.add(records.len() as u64);
        batches.seconds.observe(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// The record to produce for one of the core's outgoing records.
    fn outgoing(&self, record: &Outgoing<Source>) -> OutgoingRecord {
        let dead = |source: &Source, reason, error| {
            dead_letter(
                &self.topology,
                &self.codec,
                &self.metrics,
                source,
                reason,
                error,
            )
        };
        match record {
            Outgoing::DeadLetter {
                source,
                reason,
                error,
            } => dead(source, *reason, error.clone()),
            Outgoing::Pause {
                request, source, ..
            } => {
                // Routed by the wire table, as the simulation routes it.
                let address = wire::pause(&request.execution_id);
                let topic = self.topology.topic(address.role()).name.clone();
                let wire::Key::Exactly(key) = address.key.clone() else {
                    unreachable!("a pause is keyed by its execution")
                };
                // In the single-object encoding, as `weir pause` writes it (every reader of
                // the responses topic reads it with or without a registry).
                match Codec::single_object().encode(&topic, request) {
                    Ok(value) => OutgoingRecord {
                        partition: None,
                        topic,
                        key,
                        value: Some(value),
                        headers: address
                            .all_headers()
                            .map(|(name, value)| (name.to_owned(), value.to_vec()))
                            .chain(
                                super::trace_headers::traceparent(source)
                                    .map(|trace| super::trace_headers::header_of(&trace)),
                            )
                            .collect(),
                    },
                    Err(e) => dead(source, DlqReason::Other, e.to_string()),
                }
            }
            Outgoing::Answer {
                parent,
                ffqn,
                response,
                source,
            } => {
                // Routed by the wire table, as the simulation routes it.
                let address = wire::answer(parent);
                let topic = self.topology.topic(address.role()).name.clone();
                let wire::Key::Exactly(key) = address.key else {
                    unreachable!("an answer is keyed by its parent")
                };
                match self.encode_answer(&topic, ffqn, response) {
                    Ok(value) => OutgoingRecord {
                        partition: None,
                        topic,
                        key,
                        value: Some(value),
                        // The answer continues the request's trace (the activity's span).
                        headers: super::trace_headers::traceparent(source)
                            .map(|trace| super::trace_headers::header_of(&trace))
                            .into_iter()
                            .collect(),
                    },
                    Err(e) => dead(source, DlqReason::Other, e.to_string()),
                }
            }
        }
    }

    /// The encoded answer; one no producer could send (and whose transaction would fail
    /// forever, issue 11 item 7) is replaced by a `value-too-large` error saying why.
    fn encode_answer(
        &self,
        topic: &str,
        ffqn: &crate::model::Ffqn,
        response: &Response,
    ) -> Result<Vec<u8>, crate::codec::EncodeError> {
        let value = self.codec.encode(topic, response)?;
        match answer::too_large(response, ffqn, value.len(), answer::MAX_ANSWER_BYTES) {
            None => Ok(value),
            Some(replaced) => {
                warn!(?replaced, "activity result too large");
                self.codec.encode(topic, &replaced)
            }
        }
    }

    fn update_metrics(&mut self) {
        let c = self.core.take_counters();
        let m = &self.metrics;
        m.activity_attempts.add(c.attempts);
        m.activity_retries_scheduled.add(c.retries_scheduled);
        m.activity_unknown_requests.add(c.unknown_requests);
        m.activity_unknown_answered.add(c.unknown_answered);
        m.activity_cancelled.add(c.cancelled);
        m.activity_deadlines_enforced.add(c.deadlines_enforced);
        m.activity_parked.add(c.parked);
        m.activity_unparked.add(c.unparked);
        for (topic, n) in &c.rate_limited {
            m.activity_rate_limited.add(topic, *n);
        }
        let g = self.core.gauges();
        m.activity_running.set(g.running as i64);
        m.activity_waiting.set(g.waiting as i64);
        m.activity_partitions_paused.set(g.paused as i64);
        m.activity_parked_now.set(g.parked as i64);
        m.activity_rate_held.set(g.rate_held as i64);
    }
}

/// The core's configuration from the worker's, with the topology's rate limits.
fn core_config(
    config: &WorkerConfig,
    settings: ActivitySettings,
    topology: &Topology,
) -> CoreConfig {
    CoreConfig {
        settings,
        commit_interval: config.commit_interval,
        max_batch: config.max_batch_records,
        rate_limits: topology.rate_limits(),
    }
}

fn single(partition: &RoutePartition) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    list.add_partition(&partition.topic, partition.partition);
    list
}

fn header_not_before(message: &OwnedMessage) -> Option<DateTime<Utc>> {
    headers::header(message, NOT_BEFORE_HEADER)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| i64::from_str(v).ok())
        .and_then(DateTime::from_timestamp_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker_config() -> WorkerConfig {
        WorkerConfig::new(
            crate::kafka::config::KafkaConfig::new("localhost:9092"),
            "g",
            "i",
        )
    }

    fn repo_topology() -> Topology {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        Topology::load(&dir).expect("the repository's topology is valid")
    }

    /// The defaults `ActivityWorker::new` builds its core with are valid.
    #[test]
    fn the_default_settings_are_valid() {
        assert_eq!(default_settings().validate(), Ok(()));
        let config = core_config(&worker_config(), default_settings(), &repo_topology());
        assert!(ActivityCore::<Source>::new(config).is_ok());
    }

    /// The topology's rate limits reach the core, by topic (a limit given on one interface of
    /// a topic is the topic's); the core refuses one that is none, naming its topic.
    #[test]
    fn the_topologys_rate_limits_reach_the_core() {
        let mut topology = repo_topology();
        let shop = topology
            .routes
            .iter_mut()
            .find(|r| r.interface == "weir-examples:shop/payment")
            .expect("the shop's payment route");
        shop.rate = Some(crate::topology::RouteRate {
            per_second: 50.0,
            burst: 10,
        });
        let config = core_config(&worker_config(), default_settings(), &topology);
        assert_eq!(
            config.rate_limits,
            std::collections::BTreeMap::from([(
                "weir.activity.shop".to_owned(),
                weir_core::activity::RateLimit {
                    per_second: 50.0,
                    burst: 10
                }
            )])
        );
        assert!(ActivityCore::<Source>::new(config).is_ok());
        if let Some(rate) = &mut topology.routes.iter_mut().find_map(|r| r.rate.as_mut()) {
            rate.per_second = 0.0;
        }
        let refused = ActivityCore::<Source>::new(core_config(
            &worker_config(),
            default_settings(),
            &topology,
        ))
        .expect_err("a rate of 0");
        assert!(
            matches!(&refused, ActivitySettingsError::Rate { topic, .. } if topic == "weir.activity.shop"),
            "{refused:?}"
        );
    }

    #[test]
    fn the_not_before_header_is_read_as_epoch_milliseconds() {
        use rdkafka::message::{Header, OwnedHeaders};
        let headers = OwnedHeaders::new().insert(Header {
            key: NOT_BEFORE_HEADER,
            value: Some("1767225600250"),
        });
        let message = OwnedMessage::new(
            None,
            None,
            "weir.activity.x".to_owned(),
            rdkafka::Timestamp::NotAvailable,
            0,
            0,
            Some(headers),
        );
        assert_eq!(
            header_not_before(&message),
            DateTime::from_timestamp_millis(1_767_225_600_250)
        );
    }
}
