//! The activity worker: consumes the request topics of the activity routes, runs each request
//! of a WASM activity as attempts of its component, and answers the parent (on
//! `weir.responses`, keyed by the parent's id) exactly once (`docs/design/activities.md`).
//!
//! **Nothing waits for anything else.** Attempts run concurrently, up to
//! [`ActivitySettings::concurrency`], as tasks of their own, while the loop keeps polling the
//! consumer (so an attempt longer than `max.poll.interval.ms` never costs the membership) and
//! reading further records (a slow attempt holds back nobody). Each answer is committed as soon
//! as it is ready (with the others that finish within `--commit-interval-ms`), in one Kafka
//! transaction with the request's *progress*:
//!
//! - Kafka's committed offset of a partition is its **frontier**: the first request not
//!   finished yet (everything before it is);
//! - the offset's **metadata** (committed in the same transaction, `send_offsets_to_transaction`)
//!   lists what is *not* finished between the frontier and the last record read — every other
//!   record there is finished — and, per unfinished request, the attempt it is at and when that
//!   attempt may run (a retry waiting for its backoff). See [`Progress`].
//!
//! So a request answered out of order is never run again after a crash or a rebalance: the
//! next owner seeks to the frontier and skips what the metadata does not list. The answer and
//! the record of its request being finished commit together, or neither does: exactly once.
//!
//! **Retries are durable** in that same metadata: a failed attempt with attempts left (the
//! core's one decision, [`weir_core::retry::decide`]) commits its next attempt and its
//! not-before instant, and waits in memory; a restart or another owner resumes it at that
//! attempt and time. Nothing is re-published. A request that arrives as a later attempt
//! (`attempt > 1` with a [`NOT_BEFORE_HEADER`]: an inline attempt of a workflow worker failed,
//! or an earlier version of this worker published its retry) runs at that attempt, not before
//! that instant.
//!
//! **Cancellation.** A workflow worker writes an [`ActivityCancel`] (header
//! [`KIND_HEADER`]` = `[`CANCEL_KIND`]) to every route topic Weir serves, keyed by the
//! activity's id, so it lands on its request's partition after it. When this worker reads it,
//! a running attempt is interrupted (its task is aborted: wasmtime stops the guest at its next
//! await point — a host call, or the fuel yield), a waiting retry is dropped, and the parent is
//! answered with an execution error of kind `cancelled`; an activity answered already (or
//! served on another route) is left alone.
//!
//! **Unknown functions** (a request for a function no component of this worker exports: a
//! rolling deploy) are not dead-lettered: the request waits, unfinished, for a rebalance to
//! give its partition to a worker that runs it, and is answered with `unknown-function` once
//! [`ActivitySettings::unknown_grace`] has passed since the request was written.
//!
//! **External routes** are watched, never served: each request is held until its deadline
//! (its `deadline`, else the request's timestamp plus the `timeout_ms` of the declaration-only
//! component), then — unless the route names the service's consumer group and that group has
//! committed past the request, which means the service answered — the parent is answered with
//! `timed-out`. An answer of the service committed after that may lose to it: the parent keeps
//! the first answer for each child id.
//!
//! **Flow control.** A partition with [`ActivitySettings::partition_window`] unfinished
//! requests is paused until one finishes (the bound keeps memory and the metadata small); the
//! consumer is polled all along.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};
use weir_core::retry::{self, Decision};
use weir_core::wire::{KIND_HEADER, NOT_BEFORE_HEADER, RecordKind};

use super::dlq::dead_letter;
use super::group::{MemberContext, RebalanceTracker};
use super::member::{GroupMember, WorkerConfig, WorkerError};
use super::outgoing::OutgoingRecord;
use super::recovery::{Failure, Recovery};
use super::transaction::{TransactionError, Transactor};
use crate::codec::{ActivityCancel, ActivityRequest, Codec, DlqReason, RecordPosition};
use crate::metrics::Metrics;
use crate::model::{ExecutionErrorKind, ExecutionResult, Response};
use crate::options;
use crate::topology::{Route, TopicRole, Topology};
use crate::wasm::activity::jitter_unit;
use crate::wasm::{AttemptReport, RetryPolicy, WasmHost};

/// [`KIND_HEADER`] of an [`ActivityCancel`]: the wire table's ([`weir_core::wire`]).
const CANCEL_KIND: &[u8] = RecordKind::Cancel.header_value();

/// The loop turns at least this often while nothing happens (it polls the consumer meanwhile,
/// which is what keeps the member in its group).
const TICK: Duration = Duration::from_millis(200);

/// The largest [`ActivitySettings::partition_window`]: the offset metadata of a partition
/// lists its unfinished requests (some 25 bytes each) and must stay within the broker's
/// `offset.metadata.max.bytes` (4096 by default).
pub const MAX_PARTITION_WINDOW: usize = 100;

/// Settings of the activity worker beyond [`WorkerConfig`]; defaults in [`crate::options`].
#[derive(Clone, Debug, PartialEq)]
pub struct ActivitySettings {
    /// Attempts running at once in this worker.
    pub concurrency: usize,
    /// Unfinished requests per partition beyond which the partition is paused.
    pub partition_window: usize,
    /// How long a request for a function this worker does not run waits (from the request's
    /// timestamp) for a worker that does before it is answered with `unknown-function`.
    pub unknown_grace: Duration,
}

impl Default for ActivitySettings {
    fn default() -> Self {
        ActivitySettings {
            concurrency: options::DEFAULT_ACTIVITY_CONCURRENCY,
            partition_window: options::DEFAULT_ACTIVITY_PARTITION_WINDOW,
            unknown_grace: Duration::from_secs(options::DEFAULT_UNKNOWN_ACTIVITY_GRACE_SECS),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ActivitySettingsError {
    #[error("activity concurrency must be at least 1")]
    NoConcurrency,
    #[error("the activity partition window must be 1 to {MAX_PARTITION_WINDOW}, not {0}")]
    Window(usize),
}

impl ActivitySettings {
    pub fn validate(&self) -> Result<(), ActivitySettingsError> {
        if self.concurrency == 0 {
            return Err(ActivitySettingsError::NoConcurrency);
        }
        if self.partition_window == 0 || self.partition_window > MAX_PARTITION_WINDOW {
            return Err(ActivitySettingsError::Window(self.partition_window));
        }
        Ok(())
    }
}

/// The offset metadata could not be read (written by something else, or damaged).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("offset metadata `{text}` of {topic}/{partition} at {offset}: {reason}")]
pub struct MetadataError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub text: String,
    pub reason: String,
}

pub struct ActivityWorker {
    config: WorkerConfig,
    settings: ActivitySettings,
    topology: Arc<Topology>,
    host: Arc<WasmHost>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
}

// ------------------------------------------------------------------------ progress metadata

/// Where a request that is not finished stands, as the offset metadata records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The attempt to run next; `None`: the request's own `attempt`.
    pub attempt: Option<u32>,
    /// Not before this instant (a retry's backoff).
    pub not_before: Option<DateTime<Utc>>,
}

/// The progress of a partition as committed: the frontier (the committed offset) and, in the
/// offset's metadata, `end` (the offset after the last record read) and the unfinished
/// requests in `[frontier, end)`; every other record of that range is finished.
///
/// Text form: `wa1;n=<end − frontier>;o=<entry>,…` with an entry `<offset − frontier>`,
/// optionally `:<attempt>`, optionally `@<not-before, epoch ms>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub frontier: i64,
    pub end: i64,
    pub open: BTreeMap<i64, Mark>,
}

const METADATA_TAG: &str = "wa1";

impl Progress {
    /// The metadata text (the frontier is the committed offset itself).
    pub fn metadata(&self) -> String {
        let entries: Vec<String> = self
            .open
            .iter()
            .map(|(offset, mark)| {
                let mut entry = (offset - self.frontier).to_string();
                if let Some(attempt) = mark.attempt {
                    entry.push_str(&format!(":{attempt}"));
                }
                if let Some(at) = mark.not_before {
                    entry.push_str(&format!("@{}", at.timestamp_millis()));
                }
                entry
            })
            .collect();
        format!(
            "{METADATA_TAG};n={};o={}",
            self.end - self.frontier,
            entries.join(",")
        )
    }

    /// Reads the metadata committed with offset `frontier`; `Ok(None)` for none (nothing was
    /// committed with it, or an earlier version of the worker committed).
    pub fn parse(
        topic: &str,
        partition: i32,
        frontier: i64,
        text: &str,
    ) -> Result<Option<Progress>, MetadataError> {
        if text.is_empty() {
            return Ok(None);
        }
        let fail = |reason: &str| MetadataError {
            topic: topic.to_owned(),
            partition,
            offset: frontier,
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let mut parts = text.split(';');
        if parts.next() != Some(METADATA_TAG) {
            return Err(fail("not written by this version of the activity worker"));
        }
        let span = parts
            .next()
            .and_then(|p| p.strip_prefix("n="))
            .and_then(|n| i64::from_str(n).ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| fail("no `n=<records read>`"))?;
        let entries = parts
            .next()
            .and_then(|p| p.strip_prefix("o="))
            .ok_or_else(|| fail("no `o=<unfinished>`"))?;
        if parts.next().is_some() {
            return Err(fail("trailing fields"));
        }
        let end = frontier
            .checked_add(span)
            .ok_or_else(|| fail("the end overflows"))?;
        let mut open = BTreeMap::new();
        for entry in entries.split(',').filter(|e| !e.is_empty()) {
            let (rest, not_before) = match entry.split_once('@') {
                Some((rest, ms)) => {
                    let at = i64::from_str(ms)
                        .ok()
                        .and_then(DateTime::from_timestamp_millis)
                        .ok_or_else(|| fail("a bad not-before instant"))?;
                    (rest, Some(at))
                }
                None => (entry, None),
            };
            let (delta, attempt) = match rest.split_once(':') {
                Some((delta, attempt)) => {
                    let attempt = u32::from_str(attempt)
                        .ok()
                        .filter(|a| *a >= 1)
                        .ok_or_else(|| fail("a bad attempt"))?;
                    (delta, Some(attempt))
                }
                None => (rest, None),
            };
            let delta = i64::from_str(delta)
                .ok()
                .filter(|d| (0..span).contains(d))
                .ok_or_else(|| fail("an offset outside the range read"))?;
            open.insert(
                frontier + delta,
                Mark {
                    attempt,
                    not_before,
                },
            );
        }
        Ok(Some(Progress {
            frontier,
            end,
            open,
        }))
    }
}

// ------------------------------------------------------------------------------ the state

/// What an unfinished request is.
#[derive(Clone)]
enum JobKind {
    /// A WASM activity this worker runs.
    Wasm(RetryPolicy),
    /// A function no component of this worker exports: waits for a worker that runs it.
    Unknown,
    /// A request on an external route, watched until its deadline.
    External { service_group: Option<String> },
}

/// What an unfinished request is doing.
enum Phase {
    /// Waiting for a free attempt slot.
    Ready,
    /// An attempt (or, for an external request, the check of its service) runs as a task.
    Running {
        started: Instant,
        abort: AbortHandle,
    },
    /// Until this instant: a retry's backoff, a worker that runs the function, an external
    /// answer.
    Waiting { until: DateTime<Utc> },
}

/// One unfinished request.
struct Job {
    /// Arrival order, for fairness between partitions.
    seq: u64,
    message: OwnedMessage,
    request: ActivityRequest,
    /// The request's trace context (its `traceparent` header), read once: its attempts'
    /// spans and its answer continue it.
    trace: Option<weir_core::trace::TraceParent>,
    kind: JobKind,
    /// The attempt to run (or running).
    attempt: u32,
    /// When the waiting retry may run (committed with the progress).
    not_before: Option<DateTime<Utc>>,
    /// The activity's deadline (all attempts), if it has one.
    deadline: Option<DateTime<Utc>>,
    /// When the request was written (its record's timestamp).
    written_at: DateTime<Utc>,
    phase: Phase,
}

impl Job {
    fn mark(&self) -> Mark {
        Mark {
            attempt: (self.attempt != self.request.attempt || self.not_before.is_some())
                .then_some(self.attempt),
            not_before: self.not_before,
        }
    }
}

#[derive(Default)]
struct PartitionState {
    /// The offset after the last record taken.
    next: Option<i64>,
    /// Unfinished requests, by offset.
    open: BTreeMap<i64, Job>,
    /// The progress committed by the previous owner (or this one before a take-over), for the
    /// records not read again yet.
    restored: Option<Progress>,
    /// The (offset, metadata) last committed for this partition. Records before its offset
    /// are finished: one delivered anyway is ignored.
    committed: Option<(i64, String)>,
    paused: bool,
}

impl PartitionState {
    /// The progress to commit, `None` while nothing is known.
    fn progress(&self) -> Option<Progress> {
        let restored_end = self.restored.as_ref().map(|r| r.end);
        let end = match (self.next, restored_end) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b)?,
        };
        let mut open: BTreeMap<i64, Mark> = self
            .open
            .iter()
            .map(|(offset, job)| (*offset, job.mark()))
            .collect();
        if let Some(restored) = &self.restored {
            for (offset, mark) in &restored.open {
                if self.next.is_none_or(|next| *offset >= next) {
                    open.insert(*offset, mark.clone());
                }
            }
        }
        let frontier = open.keys().next().copied().unwrap_or(end);
        Some(Progress {
            frontier,
            end,
            open,
        })
    }
}

/// A finished task: an attempt, or the check of an external service.
struct TaskDone {
    epoch: u64,
    topic: String,
    partition: i32,
    offset: i64,
    outcome: TaskOutcome,
}

enum TaskOutcome {
    Attempt(Box<AttemptReport>),
    /// Whether the external service's group has committed past the request.
    ServiceAnswered(bool),
}

struct State {
    partitions: BTreeMap<(String, i32), PartitionState>,
    /// Records to commit with the next transaction.
    out: Vec<OutgoingRecord>,
    /// Input records finished since the last commit (for the metrics).
    finished: u64,
    /// Since when something waits to be committed.
    dirty_since: Option<Instant>,
    /// Bumped at every take-over: results of the tasks of an earlier one are ignored.
    epoch: u64,
    seq: u64,
    running: usize,
}

impl State {
    fn new() -> Self {
        State {
            partitions: BTreeMap::new(),
            out: Vec::new(),
            finished: 0,
            dirty_since: None,
            epoch: 0,
            seq: 0,
            running: 0,
        }
    }

    fn touch(&mut self) {
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    /// Interrupts every running task and forgets everything (a take-over rebuilds it).
    fn abort_all(&mut self) {
        for ps in self.partitions.values() {
            for job in ps.open.values() {
                if let Phase::Running { abort, .. } = &job.phase {
                    abort.abort();
                }
            }
        }
        self.partitions.clear();
        self.out.clear();
        self.finished = 0;
        self.dirty_since = None;
        self.running = 0;
        self.epoch += 1;
    }
}

// ---------------------------------------------------------------------------- the worker

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
            settings: ActivitySettings::default(),
            topology,
            host,
            codec,
            metrics,
        }
    }

    /// Other settings than the defaults.
    pub fn with_settings(
        mut self,
        settings: ActivitySettings,
    ) -> Result<Self, ActivitySettingsError> {
        settings.validate()?;
        self.settings = settings;
        Ok(self)
    }

    /// The request topics this worker consumes: those of the routes it serves and of the
    /// external routes it watches.
    pub fn topics(&self) -> Vec<String> {
        self.topology.route_topics()
    }

    fn external_route(&self, topic: &str) -> Option<&Route> {
        self.topology
            .routes
            .iter()
            .find(|r| r.external && r.topic == topic)
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let topics = self.topics();
        if topics.is_empty() {
            info!("no activity routes to serve");
            return Ok(());
        }
        let mut member = self.config.join_group(&topics, None).await?;
        let mut recovery = Recovery::new(self.config.static_membership);
        info!(instance = %self.config.instance_id, ?topics, settings = ?self.settings, "activity worker started");
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<TaskDone>();
        let mut services: HashMap<String, Arc<BaseConsumer>> = HashMap::new();
        let mut state = State::new();
        let (mut generation, _) = member.tracker.snapshot();
        loop {
            if *shutdown.borrow() {
                break;
            }
            if member.consumer.context().should_leave() {
                // On SIGTERM / SIGINT: what is finished is committed, then the member leaves its
                // group, so that its partitions move at once (a static member does not leave
                // by closing).
                if state.dirty_since.is_some()
                    && let Err(e) = self
                        .commit(&member.consumer, &member.transactor, &mut state)
                        .await
                {
                    warn!(error = %e, "the last activity commit before leaving failed; the next owner runs those attempts again");
                }
                super::group::leave(&member.consumer).await;
                break;
            }
            let wake = self.next_wake(&state);
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(done) = done_rx.recv() => self.on_task_done(&mut state, done),
                () = tokio::time::sleep_until(wake) => {}
                polled = tokio::time::timeout(TICK, member.consumer.recv()) => match polled {
                    Ok(Ok(message)) => {
                        let message = message.detach();
                        self.on_record(&mut state, message).await;
                    }
                    Ok(Err(error)) => warn!(%error, "activity consumer error"),
                    Err(_idle) => {}
                },
            }
            // Group commit: whatever else is ready now — finished attempts, fetched records —
            // joins the batch, so that answers that finished while the last one committed
            // commit together, and a lone answer commits at once.
            while let Ok(done) = done_rx.try_recv() {
                self.on_task_done(&mut state, done);
            }
            for _ in 0..self.config.max_batch_records {
                match member.consumer.recv().now_or_never() {
                    Some(Ok(message)) => {
                        let message = message.detach();
                        self.on_record(&mut state, message).await;
                    }
                    Some(Err(error)) => {
                        warn!(%error, "activity consumer error");
                        break;
                    }
                    None => break,
                }
            }
            if let Some((code, reason)) = member.consumer.client().fatal_error() {
                // E.g. FENCED_INSTANCE_ID, after a broker was away longer than the session.
                let cause = WorkerError::ConsumerFatal {
                    group: self.config.group_id.clone(),
                    instance_id: self.config.instance_id.clone(),
                    code,
                    reason,
                };
                let restarted = self
                    .restart(
                        &mut member,
                        &topics,
                        &mut recovery,
                        &mut shutdown,
                        &mut state,
                        Failure::of_consumer(code),
                        cause.to_string(),
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
                self.take_over(&member.consumer, &mut state)?;
                continue;
            }
            self.fire_due(&mut state, Utc::now());
            self.start_ready(&mut state, &done_tx, &mut services);
            self.flow_control(&member.consumer, &mut state)?;
            self.update_gauges(&state);
            let due = state.dirty_since.is_some_and(|since| {
                since.elapsed() >= self.config.commit_interval
                    || state.out.len() >= self.config.max_batch_records
            });
            if due {
                match self
                    .commit(&member.consumer, &member.transactor, &mut state)
                    .await
                {
                    Ok(()) => {}
                    Err(WorkerError::Transaction(e))
                        if matches!(
                            *e,
                            TransactionError::Aborted { .. } | TransactionError::Rebalanced { .. }
                        ) =>
                    {
                        warn!(error = %e, "activity commit aborted; taking the partitions over again");
                        self.metrics.activity_batches.aborted.inc();
                        self.take_over(&member.consumer, &mut state)?;
                    }
                    Err(WorkerError::Transaction(e)) => {
                        let Some(failure) = Failure::of_transaction(&e) else {
                            return Err(WorkerError::Transaction(e));
                        };
                        let restarted = self
                            .restart(
                                &mut member,
                                &topics,
                                &mut recovery,
                                &mut shutdown,
                                &mut state,
                                failure,
                                e.to_string(),
                            )
                            .await?;
                        match restarted {
                            Some(new_generation) => generation = new_generation,
                            None => break,
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        // What is finished is committed; running attempts are interrupted and run again by the
        // next owner (at-least-once).
        for ps in state.partitions.values_mut() {
            let running: Vec<i64> = ps
                .open
                .iter()
                .filter(|(_, job)| matches!(job.phase, Phase::Running { .. }))
                .map(|(offset, _)| *offset)
                .collect();
            for offset in running {
                if let Some(job) = ps.open.get_mut(&offset)
                    && let Phase::Running { abort, .. } = &job.phase
                {
                    abort.abort();
                    job.phase = Phase::Ready;
                }
            }
        }
        if state.dirty_since.is_some()
            && let Err(error) = self
                .commit(&member.consumer, &member.transactor, &mut state)
                .await
        {
            warn!(%error, "the last activity commit failed; the next owner runs those requests again");
        }
        member.consumer.unsubscribe();
        Ok(())
    }

    /// Rebuilds the member's clients after `failure` (see [`super::recovery`]) and drops
    /// everything in flight (nothing is assigned to the new member yet; its assignment comes as
    /// a rebalance). The new member's rebalance counter; `None` when the process is stopping.
    #[allow(clippy::too_many_arguments)]
    async fn restart(
        &self,
        member: &mut GroupMember,
        topics: &[String],
        recovery: &mut Recovery,
        shutdown: &mut watch::Receiver<bool>,
        state: &mut State,
        failure: Failure,
        cause: String,
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
        self.take_over(&member.consumer, state)?;
        let (generation, _) = member.tracker.snapshot();
        Ok(Some(generation))
    }

    /// The next instant something waits for (a retry's backoff, a grace, a deadline, the
    /// commit of what is finished), at most a tick away.
    fn next_wake(&self, state: &State) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let mut wake = now + TICK;
        if let Some(since) = state.dirty_since {
            let at = tokio::time::Instant::from_std(since + self.config.commit_interval);
            wake = wake.min(at);
        }
        let utc_now = Utc::now();
        for ps in state.partitions.values() {
            for job in ps.open.values() {
                if let Phase::Waiting { until } = job.phase {
                    let wait = (until - utc_now).to_std().unwrap_or_default();
                    wake = wake.min(now + wait);
                }
            }
        }
        wake
    }

    /// Drops everything in flight and resumes from the committed progress of every assigned
    /// partition (after a rebalance, or a commit that failed).
    fn take_over(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        state: &mut State,
    ) -> Result<(), WorkerError> {
        let consumer_error = |source| WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        };
        let paused: Vec<(String, i32)> = state
            .partitions
            .iter()
            .filter(|(_, ps)| ps.paused)
            .map(|(key, _)| key.clone())
            .collect();
        state.abort_all();
        for (topic, partition) in paused {
            let mut list = TopicPartitionList::new();
            list.add_partition(&topic, partition);
            // Not assigned any more is fine: nothing to resume.
            if let Err(error) = consumer.resume(&list) {
                debug!(%topic, partition, %error, "cannot resume a paused partition");
            }
        }
        let assignment = consumer.assignment().map_err(consumer_error)?;
        if assignment.count() == 0 {
            return Ok(());
        }
        // Fetched as stable (KIP-447): waits until a previous owner's open transaction on
        // these partitions is resolved.
        let committed = consumer
            .committed_offsets(assignment, Duration::from_secs(120))
            .map_err(consumer_error)?;
        let mut seek = TopicPartitionList::new();
        for element in committed.elements() {
            let (topic, partition) = (element.topic().to_owned(), element.partition());
            let mut ps = PartitionState::default();
            let offset = match element.offset() {
                Offset::Offset(offset) => {
                    let text = committed_metadata(&element);
                    match Progress::parse(&topic, partition, offset, &text) {
                        Ok(progress) => ps.restored = progress,
                        Err(error) => {
                            warn!(%error, "ignoring the progress: every request from the committed offset on runs again")
                        }
                    }
                    ps.committed = Some((offset, text));
                    Offset::Offset(offset)
                }
                _ => Offset::Beginning,
            };
            seek.add_partition_offset(&topic, partition, offset)
                .map_err(consumer_error)?;
            if let Some(restored) = &ps.restored {
                info!(%topic, partition, frontier = restored.frontier, unfinished = restored.open.len(), "activity partition taken over");
            }
            state.partitions.insert((topic, partition), ps);
        }
        // A list obtained from the consumer must be gone before the consumer is dropped.
        drop(committed);
        consumer
            .seek_partitions(seek, Duration::from_secs(30))
            .map_err(consumer_error)?;
        Ok(())
    }

    /// Takes one record: finished at once (a cancellation, a record for the DLQ, one the
    /// committed progress says is finished), or a new unfinished request.
    async fn on_record(&self, state: &mut State, message: OwnedMessage) {
        let key = (message.topic().to_owned(), message.partition());
        let offset = message.offset();
        let ps = state.partitions.entry(key.clone()).or_default();
        if ps.next.is_some_and(|next| offset < next)
            || ps
                .committed
                .as_ref()
                .is_some_and(|(frontier, _)| offset < *frontier)
        {
            return; // delivered again (after a pause), or finished before the take-over
        }
        ps.next = Some(offset + 1);
        let mut mark = None;
        if let Some(restored) = &mut ps.restored {
            if offset < restored.end {
                match restored.open.remove(&offset) {
                    Some(m) => mark = Some(m),
                    // Finished before the take-over: its answer is committed.
                    None => return,
                }
            }
            if offset + 1 >= restored.end {
                ps.restored = None;
            }
        }
        let position = RecordPosition::at(message.topic(), message.partition(), offset);
        let payload = message.payload().unwrap_or_default();
        if payload.len() > self.config.max_record_bytes {
            let error = format!(
                "{} bytes exceed the limit of {}",
                payload.len(),
                self.config.max_record_bytes
            );
            self.finish_dead(state, &message, DlqReason::Oversize, error);
            return;
        }
        if is_cancel(&message) {
            match self
                .codec
                .decode_fetching::<ActivityCancel>(payload, &position)
                .await
            {
                Ok(cancel) => {
                    state.finished += 1;
                    state.touch();
                    self.on_cancel(state, &key, &cancel);
                }
                Err(e) => self.finish_dead(state, &message, e.dlq_reason(), e.to_string()),
            }
            return;
        }
        let request: ActivityRequest = match self.codec.decode_fetching(payload, &position).await {
            Ok(r) => r,
            Err(e) => {
                self.finish_dead(state, &message, e.dlq_reason(), e.to_string());
                return;
            }
        };
        let written_at = message
            .timestamp()
            .to_millis()
            .and_then(DateTime::from_timestamp_millis)
            .unwrap_or_else(Utc::now);
        let attempt = mark
            .as_ref()
            .and_then(|m| m.attempt)
            .unwrap_or(request.attempt)
            .max(1);
        let not_before = match &mark {
            Some(m) => m.not_before,
            None => header_not_before(&message),
        };
        let registry = self.host.registry();
        let (kind, deadline, phase) = if let Some(route) = self.external_route(&key.0) {
            // Watched until its deadline: its own, else the declaration's timeout_ms (or the
            // grace of an unknown function) from when it was written.
            let timeout = registry
                .function(&request.ffqn)
                .and_then(|f| registry.component(&f.component))
                .map_or(self.settings.unknown_grace, |c| c.spec.limits.timeout);
            let deadline = request
                .deadline
                .unwrap_or_else(|| written_at + chrono_duration(timeout));
            let kind = JobKind::External {
                service_group: route.service_group.clone(),
            };
            (kind, Some(deadline), Phase::Waiting { until: deadline })
        } else if let Some((policy, _)) = self.host.activity_settings(&request.ffqn) {
            let phase = match not_before {
                Some(until) => Phase::Waiting { until },
                None => Phase::Ready,
            };
            (JobKind::Wasm(policy.clone()), request.deadline, phase)
        } else {
            let give_up = written_at + chrono_duration(self.settings.unknown_grace);
            warn!(
                execution = %request.execution_id, ffqn = %request.ffqn,
                topic = %key.0, partition = key.1, offset,
                until = %give_up,
                "no component of this worker exports the requested function: waiting for a worker that does"
            );
            self.metrics.activity_unknown_requests.inc();
            (
                JobKind::Unknown,
                request.deadline,
                Phase::Waiting { until: give_up },
            )
        };
        state.seq += 1;
        let job = Job {
            seq: state.seq,
            trace: super::trace_headers::traceparent(&message),
            message,
            request,
            kind,
            attempt,
            not_before,
            deadline,
            written_at,
            phase,
        };
        if let Some(ps) = state.partitions.get_mut(&key) {
            ps.open.insert(offset, job);
        }
    }

    /// A cancellation read on `key`: the unfinished request of that activity (on this
    /// partition: it was written before the cancellation, with the same key) is stopped and
    /// answered `cancelled`.
    fn on_cancel(&self, state: &mut State, key: &(String, i32), cancel: &ActivityCancel) {
        let Some(ps) = state.partitions.get_mut(key) else {
            return;
        };
        let Some(offset) = ps
            .open
            .iter()
            .find(|(_, job)| job.request.execution_id == cancel.execution_id)
            .map(|(offset, _)| *offset)
        else {
            debug!(execution = %cancel.execution_id, topic = %key.0, "cancellation of an activity not in flight here (answered, or on another route)");
            return;
        };
        let Some(job) = ps.open.remove(&offset) else {
            return;
        };
        let what = match &job.phase {
            Phase::Running { started, abort } => {
                abort.abort();
                state.running = state.running.saturating_sub(1);
                format!(
                    "attempt {} was interrupted after {:?}",
                    job.attempt,
                    started.elapsed()
                )
            }
            Phase::Ready => format!("attempt {} had not started", job.attempt),
            Phase::Waiting { until } => match job.kind {
                JobKind::Wasm(_) => format!(
                    "attempt {} was waiting for its backoff (due {}): dropped",
                    job.attempt,
                    until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                ),
                JobKind::Unknown => "no worker running the function had taken it".to_owned(),
                JobKind::External { .. } => String::new(),
            },
        };
        self.metrics.activity_cancelled.inc();
        state.finished += 1;
        if matches!(job.kind, JobKind::External { .. }) {
            // Watched only: the parent closed its join set, nothing to say to it.
            return;
        }
        info!(execution = %job.request.execution_id, parent = %cancel.parent_execution_id, %what, "activity cancelled");
        let result = ExecutionResult::error(
            ExecutionErrorKind::Cancelled,
            format!(
                "cancelled by its parent {} (its join set was closed): {what}",
                cancel.parent_execution_id
            ),
        );
        self.finish_answer(state, job, result);
    }

    fn on_task_done(&self, state: &mut State, done: TaskDone) {
        if done.epoch != state.epoch {
            return;
        }
        let key = (done.topic, done.partition);
        let running = state
            .partitions
            .get(&key)
            .and_then(|ps| ps.open.get(&done.offset))
            .is_some_and(|job| matches!(job.phase, Phase::Running { .. }));
        if !running {
            return; // cancelled meanwhile
        }
        state.running = state.running.saturating_sub(1);
        state.touch();
        let take = |state: &mut State| {
            state
                .partitions
                .get_mut(&key)
                .and_then(|ps| ps.open.remove(&done.offset))
        };
        match done.outcome {
            TaskOutcome::ServiceAnswered(answered) => {
                let Some(job) = take(state) else {
                    return;
                };
                state.finished += 1;
                if answered {
                    debug!(execution = %job.request.execution_id, "the external service answered in time");
                } else {
                    self.finish_timed_out_external(state, job);
                }
            }
            TaskOutcome::Attempt(report) => {
                let report = *report;
                self.metrics
                    .wasm_pool_waits
                    .add(u64::from(report.pool_waits));
                let Some(job) = state
                    .partitions
                    .get_mut(&key)
                    .and_then(|ps| ps.open.get_mut(&done.offset))
                else {
                    return;
                };
                let JobKind::Wasm(policy) = &job.kind else {
                    return;
                };
                let last = report.result.clone();
                let decision = retry::decide(
                    policy,
                    job.attempt,
                    report.result,
                    Utc::now(),
                    job.deadline,
                    jitter_unit(&job.request.execution_id, job.attempt),
                );
                match decision {
                    Decision::Answer(result) => {
                        if let Some(job) = take(state) {
                            state.finished += 1;
                            self.finish_answer(state, job, result);
                        }
                    }
                    Decision::Retry {
                        attempt,
                        backoff,
                        not_before,
                    } => {
                        info!(execution = %job.request.execution_id, next_attempt = attempt, ?backoff, %last, "activity attempt failed; retry scheduled");
                        self.metrics.activity_retries_scheduled.inc();
                        job.attempt = attempt;
                        job.not_before = Some(not_before);
                        job.phase = Phase::Waiting { until: not_before };
                    }
                }
            }
        }
    }

    /// Moves what waited long enough: a retry whose backoff is over becomes ready; an unknown
    /// function past its grace and an external request past its deadline are answered (or
    /// checked first, for a service whose group is known).
    fn fire_due(&self, state: &mut State, now: DateTime<Utc>) {
        let mut unknown = Vec::new();
        let mut external = Vec::new();
        for (key, ps) in &mut state.partitions {
            for (offset, job) in &mut ps.open {
                let Phase::Waiting { until } = job.phase else {
                    continue;
                };
                if until > now {
                    continue;
                }
                match &job.kind {
                    JobKind::Wasm(_) => job.phase = Phase::Ready,
                    JobKind::Unknown => unknown.push((key.clone(), *offset)),
                    JobKind::External {
                        service_group: Some(_),
                    } => job.phase = Phase::Ready,
                    JobKind::External {
                        service_group: None,
                    } => external.push((key.clone(), *offset)),
                }
            }
        }
        for (key, offset) in unknown {
            let Some(job) = state
                .partitions
                .get_mut(&key)
                .and_then(|ps| ps.open.remove(&offset))
            else {
                continue;
            };
            state.finished += 1;
            self.metrics.activity_unknown_answered.inc();
            let reason = format!(
                "no activity worker ran {} within {:?} of the request ({}): no registered component exports it",
                job.request.ffqn,
                self.settings.unknown_grace,
                job.written_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
            warn!(execution = %job.request.execution_id, %reason, "answering an unknown activity");
            self.finish_answer(
                state,
                job,
                ExecutionResult::error(ExecutionErrorKind::UnknownFunction, reason),
            );
        }
        for (key, offset) in external {
            let Some(job) = state
                .partitions
                .get_mut(&key)
                .and_then(|ps| ps.open.remove(&offset))
            else {
                continue;
            };
            state.finished += 1;
            self.finish_timed_out_external(state, job);
        }
    }

    /// Starts ready jobs, oldest first, while attempt slots are free.
    fn start_ready(
        &self,
        state: &mut State,
        done_tx: &mpsc::UnboundedSender<TaskDone>,
        services: &mut HashMap<String, Arc<BaseConsumer>>,
    ) {
        if state.running >= self.settings.concurrency {
            return;
        }
        let mut ready: Vec<(u64, (String, i32), i64)> = state
            .partitions
            .iter()
            .flat_map(|(key, ps)| {
                ps.open
                    .iter()
                    .filter(|(_, job)| matches!(job.phase, Phase::Ready))
                    .map(move |(offset, job)| (job.seq, key.clone(), *offset))
            })
            .collect();
        ready.sort();
        let free = self.settings.concurrency - state.running;
        let epoch = state.epoch;
        let now = Utc::now();
        for (_, key, offset) in ready.into_iter().take(free) {
            let Some(job) = state
                .partitions
                .get_mut(&key)
                .and_then(|ps| ps.open.get_mut(&offset))
            else {
                continue;
            };
            let tx = done_tx.clone();
            let (topic, partition) = key.clone();
            let handle = match &job.kind {
                JobKind::Wasm(_) => {
                    // The attempt ends by the deadline at the latest.
                    let timeout = job.request.attempt_bound(now);
                    if timeout.is_some_and(|t| t.is_zero()) {
                        // Past the deadline before it could start.
                        let Some(job) = state
                            .partitions
                            .get_mut(&key)
                            .and_then(|ps| ps.open.remove(&offset))
                        else {
                            continue;
                        };
                        state.finished += 1;
                        state.touch();
                        let result = ExecutionResult::error(
                            ExecutionErrorKind::TimedOut,
                            format!(
                                "the activity's deadline passed before attempt {} could start",
                                job.attempt
                            ),
                        );
                        self.finish_answer(state, job, result);
                        continue;
                    }
                    self.metrics.activity_attempts.inc();
                    let host = Arc::clone(&self.host);
                    let (ffqn, params) = (job.request.ffqn.clone(), job.request.params.clone());
                    let span = tracing::info_span!("activity", execution = %job.request.execution_id, ffqn = %ffqn, attempt = job.attempt);
                    crate::telemetry::set_parent(&span, job.trace);
                    tokio::spawn(tracing::Instrument::instrument(
                        async move {
                            let report =
                                match host.run_activity_attempt(&ffqn, &params, timeout).await {
                                    Ok(report) => report,
                                    // The host's components do not change while it runs.
                                    Err(e) => AttemptReport {
                                        result: ExecutionResult::error(
                                            ExecutionErrorKind::UnknownFunction,
                                            e.to_string(),
                                        ),
                                        pool_waits: 0,
                                        waited: Duration::ZERO,
                                    },
                                };
                            let _ = tx.send(TaskDone {
                                epoch,
                                topic,
                                partition,
                                offset,
                                outcome: TaskOutcome::Attempt(Box::new(report)),
                            });
                        },
                        span,
                    ))
                }
                JobKind::External {
                    service_group: Some(group),
                } => {
                    let service = match services.get(group) {
                        Some(service) => Arc::clone(service),
                        None => match self.config.kafka.consumer(group).create::<BaseConsumer>() {
                            Ok(service) => {
                                let service = Arc::new(service);
                                services.insert(group.clone(), Arc::clone(&service));
                                service
                            }
                            Err(error) => {
                                warn!(%group, %error, "cannot read the external service's offsets");
                                job.phase = Phase::Waiting {
                                    until: now + chrono::Duration::seconds(1),
                                };
                                continue;
                            }
                        },
                    };
                    let group = group.clone();
                    tokio::task::spawn_blocking(move || {
                        let check = std::panic::AssertUnwindSafe(|| {
                            service_committed_past(&service, &topic, partition, offset)
                        });
                        let answered = match std::panic::catch_unwind(check) {
                            Ok(Ok(answered)) => answered,
                            Ok(Err(error)) => {
                                warn!(%group, %topic, partition, offset, %error, "cannot read the external service's committed offset; answering timed-out");
                                false
                            }
                            Err(_panic) => false,
                        };
                        let _ = tx.send(TaskDone {
                            epoch,
                            topic,
                            partition,
                            offset,
                            outcome: TaskOutcome::ServiceAnswered(answered),
                        });
                    })
                }
                JobKind::Unknown
                | JobKind::External {
                    service_group: None,
                } => continue,
            };
            job.phase = Phase::Running {
                started: Instant::now(),
                abort: handle.abort_handle(),
            };
            state.running += 1;
        }
    }

    /// Pauses a partition whose window is full, resumes it (from the record after the last one
    /// taken) when it is not.
    fn flow_control(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        state: &mut State,
    ) -> Result<(), WorkerError> {
        let consumer_error = |source| WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        };
        for ((topic, partition), ps) in &mut state.partitions {
            let full = ps.open.len() >= self.settings.partition_window;
            if full == ps.paused {
                continue;
            }
            let mut list = TopicPartitionList::new();
            list.add_partition(topic, *partition);
            if full {
                consumer.pause(&list).map_err(consumer_error)?;
                debug!(%topic, partition, unfinished = ps.open.len(), "activity partition paused: its window is full");
            } else {
                consumer.resume(&list).map_err(consumer_error)?;
                if let Some(next) = ps.next {
                    let mut seek = TopicPartitionList::new();
                    seek.add_partition_offset(topic, *partition, Offset::Offset(next))
                        .map_err(consumer_error)?;
                    consumer
                        .seek_partitions(seek, Duration::from_secs(30))
                        .map_err(consumer_error)?;
                }
                debug!(%topic, partition, "activity partition resumed");
            }
            ps.paused = full;
        }
        Ok(())
    }

    fn update_gauges(&self, state: &State) {
        let mut waiting = 0;
        let mut paused = 0;
        for ps in state.partitions.values() {
            waiting += ps
                .open
                .values()
                .filter(|job| matches!(job.phase, Phase::Waiting { .. }))
                .count();
            paused += usize::from(ps.paused);
        }
        self.metrics.activity_running.set(state.running as i64);
        self.metrics.activity_waiting.set(waiting as i64);
        self.metrics.activity_partitions_paused.set(paused as i64);
    }

    /// Commits what is finished since the last commit: its records, and the progress of every
    /// partition whose progress moved, in one transaction.
    async fn commit(
        &self,
        consumer: &StreamConsumer<RebalanceTracker>,
        transactor: &Transactor,
        state: &mut State,
    ) -> Result<(), WorkerError> {
        let started = Instant::now();
        let consumer_error = |source| WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        };
        let mut list = TopicPartitionList::new();
        let mut moved = Vec::new();
        for ((topic, partition), ps) in &state.partitions {
            let Some(progress) = ps.progress() else {
                continue;
            };
            let committed = (progress.frontier, progress.metadata());
            if ps.committed.as_ref() == Some(&committed) {
                continue;
            }
            list.add_partition_offset(topic, *partition, Offset::Offset(committed.0))
                .map_err(consumer_error)?;
            if let Some(mut element) = list.find_partition(topic, *partition) {
                element.set_metadata(&committed.1);
            }
            moved.push(((topic.clone(), *partition), committed));
        }
        if moved.is_empty() && state.out.is_empty() {
            state.dirty_since = None;
            return Ok(());
        }
        let group_metadata = consumer
            .group_metadata()
            .ok_or_else(|| consumer_error(rdkafka::error::KafkaError::NoMessageReceived))?;
        transactor.commit(&state.out, list, group_metadata).await?;
        for (key, committed) in moved {
            if let Some(ps) = state.partitions.get_mut(&key) {
                ps.committed = Some(committed);
            }
        }
        let batches = &self.metrics.activity_batches;
        batches.committed.inc();
        batches.records_in.add(state.finished);
        batches.records_out.add(state.out.len() as u64);
        batches.seconds.observe(started.elapsed().as_secs_f64());
        state.out.clear();
        state.finished = 0;
        state.dirty_since = None;
        Ok(())
    }

    /// The record is finished with a DLQ copy.
    fn finish_dead(
        &self,
        state: &mut State,
        message: &OwnedMessage,
        reason: DlqReason,
        error: String,
    ) {
        state.finished += 1;
        state.touch();
        state.out.push(dead_letter(
            &self.topology,
            &self.codec,
            &self.metrics,
            message,
            reason,
            error,
        ));
    }

    /// The job is finished with its answer to the parent.
    fn finish_answer(&self, state: &mut State, job: Job, result: ExecutionResult) {
        state.touch();
        let response = Response::ChildExecutionFinished {
            child_execution_id: job.request.execution_id.clone(),
            result,
        };
        let topic = self.topology.topic(TopicRole::Responses).name.clone();
        let encoded = self.codec.encode(&topic, &response).and_then(|value| {
            if value.len() <= MAX_ANSWER_BYTES {
                return Ok(value);
            }
            // No producer could send it, and its transaction would fail forever (issue 11
            // item 7): the parent hears why instead.
            let reason = format!(
                "the result of activity {} ({}) is {} bytes encoded; an answer carries at \
                 most {MAX_ANSWER_BYTES}",
                job.request.execution_id,
                job.request.ffqn,
                value.len()
            );
            warn!(execution = %job.request.execution_id, %reason, "activity result too large");
            let response = Response::ChildExecutionFinished {
                child_execution_id: job.request.execution_id.clone(),
                result: ExecutionResult::error(ExecutionErrorKind::ValueTooLarge, reason),
            };
            self.codec.encode(&topic, &response)
        });
        match encoded {
            Ok(value) => state.out.push(OutgoingRecord {
                topic,
                key: job.request.parent_execution_id.to_string(),
                value: Some(value),
                // The answer continues the request's trace (the activity's span).
                headers: job
                    .trace
                    .map(|trace| super::trace_headers::header_of(&trace))
                    .into_iter()
                    .collect(),
            }),
            Err(e) => state.out.push(dead_letter(
                &self.topology,
                &self.codec,
                &self.metrics,
                &job.message,
                DlqReason::Other,
                e.to_string(),
            )),
        }
    }

    fn finish_timed_out_external(&self, state: &mut State, job: Job) {
        self.metrics.activity_deadlines_enforced.inc();
        let deadline = job
            .deadline
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        let reason = format!(
            "the external service of {} did not answer by the deadline {deadline}",
            job.request.ffqn
        );
        info!(execution = %job.request.execution_id, %reason, "external activity timed out");
        self.finish_answer(
            state,
            job,
            ExecutionResult::error(ExecutionErrorKind::TimedOut, reason),
        );
    }
}

/// The largest answer an activity sends: what a producer may send, less room for its key
/// and framing.
const MAX_ANSWER_BYTES: usize = super::config::MAX_PRODUCED_RECORD_BYTES - 16 * 1024;

/// The metadata committed with an offset, or empty when it is not text.
fn committed_metadata(
    element: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>,
) -> String {
    // rdkafka panics on metadata that is not UTF-8 (anyone can commit to a group).
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        element.metadata().to_owned()
    }))
    .unwrap_or_default()
}

/// Whether the consumer group of an external service has committed past `offset`.
fn service_committed_past(
    service: &BaseConsumer,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<bool, rdkafka::error::KafkaError> {
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = service.committed_offsets(list, Duration::from_secs(10))?;
    let past = committed
        .find_partition(topic, partition)
        .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o > offset));
    Ok(past)
}

fn is_cancel(message: &OwnedMessage) -> bool {
    is_kind(message, CANCEL_KIND)
}

/// Whether `message` carries [`KIND_HEADER`] `kind`.
pub(crate) fn is_kind<M: Message>(message: &M, kind: &[u8]) -> bool {
    message.headers().is_some_and(|headers| {
        headers
            .iter()
            .any(|h| h.key == KIND_HEADER && h.value == Some(kind))
    })
}

fn header_not_before(message: &OwnedMessage) -> Option<DateTime<Utc>> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == NOT_BEFORE_HEADER)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| i64::from_str(v).ok())
        .and_then(DateTime::from_timestamp_millis)
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    #[test]
    fn progress_round_trips_through_its_metadata() {
        let progress = Progress {
            frontier: 1000,
            end: 1042,
            open: BTreeMap::from([
                (
                    1000,
                    Mark {
                        attempt: Some(3),
                        not_before: Some(t(250)),
                    },
                ),
                (
                    1007,
                    Mark {
                        attempt: None,
                        not_before: None,
                    },
                ),
                (
                    1041,
                    Mark {
                        attempt: Some(2),
                        not_before: None,
                    },
                ),
            ]),
        };
        let text = progress.metadata();
        assert_eq!(text, "wa1;n=42;o=0:3@1767225600250,7,41:2");
        assert_eq!(Progress::parse("t", 0, 1000, &text), Ok(Some(progress)));
        let nothing_open = Progress {
            frontier: 5,
            end: 5,
            open: BTreeMap::new(),
        };
        assert_eq!(nothing_open.metadata(), "wa1;n=0;o=");
        assert_eq!(
            Progress::parse("t", 0, 5, &nothing_open.metadata()),
            Ok(Some(nothing_open))
        );
        assert_eq!(Progress::parse("t", 0, 5, ""), Ok(None));
    }

    #[test]
    fn bad_metadata_is_refused_with_its_position() {
        for text in [
            "something else",
            "wa1;n=-1;o=",
            "wa1;n=3;o=3",
            "wa1;n=3;o=0:0",
            "wa1;n=3;o=0@x",
            "wa1;n=3",
            "wa1;n=3;o=;extra",
        ] {
            let error = Progress::parse("weir.activity.x", 4, 17, text).expect_err(text);
            assert_eq!((error.partition, error.offset), (4, 17), "{text}");
            assert!(
                error.to_string().contains("weir.activity.x/4 at 17"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_largest_window_fits_the_brokers_metadata_limit() {
        let open = (0..MAX_PARTITION_WINDOW as i64)
            .map(|i| {
                (
                    i * 10_000_000,
                    Mark {
                        attempt: Some(u32::MAX),
                        not_before: Some(DateTime::<Utc>::MAX_UTC),
                    },
                )
            })
            .collect();
        let progress = Progress {
            frontier: 0,
            end: i64::MAX / 2,
            open,
        };
        assert!(
            progress.metadata().len() < 4096,
            "{}",
            progress.metadata().len()
        );
    }

    fn job(offset: i64, attempt: u32, not_before: Option<DateTime<Utc>>) -> Job {
        let parent = crate::model::ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        let child = parent.child(
            &crate::model::JoinSetId::one_off(1, "sleep").expect("a join set"),
            1,
        );
        Job {
            seq: offset as u64,
            message: OwnedMessage::new(
                None,
                None,
                "weir.activity.slow".to_owned(),
                rdkafka::Timestamp::NotAvailable,
                0,
                offset,
                None,
            ),
            request: ActivityRequest {
                execution_id: child,
                parent_execution_id: parent,
                ffqn: "weir-examples:slow/sleeper.sleep".parse().expect("ffqn"),
                params: serde_json::json!([1]),
                attempt: 1,
                timeout_millis: None,
                deadline: None,
            },
            trace: None,
            kind: JobKind::Unknown,
            attempt,
            not_before,
            deadline: None,
            written_at: t(0),
            phase: Phase::Ready,
        }
    }

    fn mark(attempt: Option<u32>, not_before: Option<i64>) -> Mark {
        Mark {
            attempt,
            not_before: not_before.map(t),
        }
    }

    /// The frontier is the first unfinished request, read or (restored from the previous
    /// owner's progress) not read again yet; records skipped as finished move nothing.
    #[test]
    fn progress_combines_what_is_read_with_what_was_restored() {
        let mut ps = PartitionState {
            restored: Some(Progress {
                frontier: 10,
                end: 20,
                open: BTreeMap::from([(10, mark(None, None)), (15, mark(Some(2), Some(5)))]),
            }),
            committed: Some((10, "wa1;n=10;o=0,5:2@1767225600005".to_owned())),
            ..PartitionState::default()
        };
        let restored = ps.progress().expect("a progress");
        assert_eq!(restored.frontier, 10);
        assert_eq!(restored.metadata(), "wa1;n=10;o=0,5:2@1767225600005");
        // 10 read again (and still running), 11..14 skipped: nothing moves.
        ps.open.insert(10, job(10, 1, None));
        ps.next = Some(15);
        assert_eq!(
            ps.progress().expect("a progress").metadata(),
            restored.metadata()
        );
        // 10 finishes: the frontier moves to 15, the retry not read yet.
        ps.open.clear();
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (15, "wa1;n=5;o=0:2@1767225600005".to_owned())
        );
        // Everything of the restored range read and finished, and 21 read and waiting for
        // its retry (attempt 3).
        ps.restored = None;
        ps.next = Some(22);
        ps.open.insert(21, job(21, 3, Some(t(9))));
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (21, "wa1;n=1;o=0:3@1767225600009".to_owned())
        );
        ps.open.clear();
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (22, "wa1;n=0;o=".to_owned())
        );
        assert!(
            PartitionState::default().progress().is_none(),
            "nothing read, nothing to say"
        );
    }

    #[test]
    fn settings_are_validated() {
        let ok = ActivitySettings::default();
        assert_eq!(ok.validate(), Ok(()));
        let none = ActivitySettings {
            concurrency: 0,
            ..ok.clone()
        };
        assert_eq!(none.validate(), Err(ActivitySettingsError::NoConcurrency));
        let wide = ActivitySettings {
            partition_window: MAX_PARTITION_WINDOW + 1,
            ..ok
        };
        assert_eq!(
            wide.validate(),
            Err(ActivitySettingsError::Window(MAX_PARTITION_WINDOW + 1))
        );
    }
}
