//! [`ActivityCore`]: the activity worker's state machine over its owned partitions. See the
//! module docs of [`super`] for what it promises; the driver feeds it [`Input`]s with the
//! instant they are handled at and executes its [`Effect`]s in order.
//!
//! Invariants kept here:
//! - `running` is the number of jobs in [`Phase::Running`] (at most the concurrency, but for
//!   what runs when a take-over restores more).
//! - Records to produce (`out`) are emitted only in an [`Effect::Commit`], with the progress
//!   of every partition that moved; a commit is not emitted while one is in flight.
//! - A job leaves `open` exactly when its answer, dead letter or cancellation is decided,
//!   and its record counts as finished from then on (the next progress no longer lists it).
//! - An attempt of a rate-limited topic is started only with a token taken from its topic's
//!   bucket at that instant (`buckets`, one per topic of [`CoreConfig::rate_limits`], kept for
//!   the core's life: a take-over gives no new tokens). `rate_waits` holds, for each topic
//!   whose ready attempts the last start left waiting for a token, when the next one comes;
//!   [`ActivityCore::next_wake`] includes it.
//! - A [`Phase::Parked`] job starts nothing and waits for nothing: it leaves that phase only
//!   by a retry notice of its activity ([`Body::Retry`]: [`Phase::Ready`] at attempt 1) or
//!   leaves `open` by its cancellation. Its parent's [`PauseRequest`] is in `out` from the
//!   moment it parked, so it goes out in the commit whose progress first marks it parked.

use std::collections::{BTreeMap, BTreeSet};
use std::mem;

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn};

use super::external::{self, Checked, Due};
use super::partition::{Admit, Job, JobKind, Partition, Phase};
use super::progress::{MAX_PARKED, Mark, Progress};
use super::rate::TokenBucket;
use super::{
    ActivitySettingsError, AttemptId, Body, Commit, Committed, CoreConfig, Counters, Effect,
    Gauges, Input, Outgoing, Record, RoutePartition, Serve, ServiceCheck, Start,
};
use crate::model::{ExecutionErrorKind, ExecutionResult, Ran, Response};
use crate::records::{
    ActivityCancel, ActivityRequest, ActivityRetry, DlqReason, ParkedActivity, PauseAction,
    PauseRequest,
};
use crate::retry::{self, Decision};

/// The activity worker's rules over the partitions it owns; `S` is what the driver keeps of
/// each record (see [`Record::source`]).
#[derive(Debug)]
pub struct ActivityCore<S> {
    config: CoreConfig,
    partitions: BTreeMap<RoutePartition, Partition<S>>,
    /// Records to produce with the next commit.
    out: Vec<Outgoing<S>>,
    /// Input records finished since the last commit.
    finished: u64,
    /// Since when something waits to be committed.
    dirty_since: Option<DateTime<Utc>>,
    /// The (offset, metadata) of each partition in the commit in flight.
    in_flight: Option<Vec<(RoutePartition, (i64, String))>>,
    /// Arrival order of the requests.
    seq: u64,
    next_attempt: u64,
    running: usize,
    counters: Counters,
    /// The request topics of the paused routes ([`Input::TopicsPaused`]).
    paused_topics: BTreeSet<String>,
    /// The bucket of each rate-limited topic.
    buckets: BTreeMap<String, TokenBucket>,
    /// For each topic whose ready attempts the last start left waiting for a token: when the
    /// next token comes.
    rate_waits: BTreeMap<String, DateTime<Utc>>,
    /// How many ready attempts the last start left waiting for a token.
    rate_held: usize,
}

/// A request just read, and what it is.
struct Arrival<S> {
    partition: RoutePartition,
    offset: i64,
    written_at: DateTime<Utc>,
    source: S,
    request: ActivityRequest,
    serve: Serve,
    not_before: Option<DateTime<Utc>>,
    mark: Option<Mark>,
}

impl<S: Clone> ActivityCore<S> {
    pub fn new(config: CoreConfig) -> Result<Self, ActivitySettingsError> {
        config.validate()?;
        let mut buckets = BTreeMap::new();
        for (topic, limit) in &config.rate_limits {
            let bucket = TokenBucket::new(limit).map_err(|error| ActivitySettingsError::Rate {
                topic: topic.clone(),
                limit: *limit,
                error,
            })?;
            buckets.insert(topic.clone(), bucket);
        }
        Ok(ActivityCore {
            config,
            partitions: BTreeMap::new(),
            out: Vec::new(),
            finished: 0,
            dirty_since: None,
            in_flight: None,
            seq: 0,
            next_attempt: 0,
            running: 0,
            counters: Counters::default(),
            paused_topics: BTreeSet::new(),
            buckets,
            rate_waits: BTreeMap::new(),
            rate_held: 0,
        })
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Handles one input at `now`; the effects to execute, in order.
    pub fn handle(&mut self, input: Input<S>, now: DateTime<Utc>) -> Vec<Effect<S>> {
        let mut fx = Vec::new();
        match input {
            Input::Assigned(assigned) => {
                self.revoke(&mut fx);
                self.assign(assigned, &mut fx);
                // A paused route's partitions are not fetched from the take-over on.
                self.flow_control(&mut fx);
            }
            Input::Revoked => self.revoke(&mut fx),
            Input::Record(record) => self.on_record(record, now, &mut fx),
            Input::AttemptFinished { id, result, jitter } => {
                self.on_attempt(id, result, jitter, now);
            }
            Input::ServiceChecked { id, check } => self.on_check(id, check, now),
            Input::Tick => self.tick(now, &mut fx),
            Input::Committed => self.on_committed(),
            Input::Flush { interrupt } => self.flush(interrupt, &mut fx),
            Input::TopicsPaused(topics) => {
                if topics != self.paused_topics {
                    info!(?topics, "paused routes changed");
                    self.paused_topics = topics;
                    self.flow_control(&mut fx);
                    self.start_ready(now, &mut fx);
                }
            }
        }
        fx
    }

    /// The next instant something waits for (a retry's backoff, a grace, a deadline, the
    /// commit of what is finished, the next token of a rate limit an attempt waits for);
    /// `None`: nothing.
    pub fn next_wake(&self) -> Option<DateTime<Utc>> {
        let commit = self
            .dirty_since
            .map(|since| external::after(since, self.config.commit_interval));
        let waiting = self
            .partitions
            .values()
            .flat_map(|ps| ps.open.values())
            .filter_map(|job| match job.phase {
                Phase::Waiting { until } => Some(until),
                _ => None,
            });
        let tokens = self.rate_waits.values().copied();
        commit.into_iter().chain(waiting).chain(tokens).min()
    }

    /// Whether something finished waits to be committed.
    pub fn dirty(&self) -> bool {
        self.dirty_since.is_some()
    }

    /// The partitions owned.
    pub fn owned(&self) -> impl Iterator<Item = &RoutePartition> {
        self.partitions.keys()
    }

    /// The counters since the last call.
    pub fn take_counters(&mut self) -> Counters {
        mem::take(&mut self.counters)
    }

    pub fn gauges(&self) -> Gauges {
        let jobs = self.partitions.values().flat_map(|ps| ps.open.values());
        Gauges {
            running: self.running,
            waiting: jobs
                .filter(|job| matches!(job.phase, Phase::Waiting { .. }))
                .count(),
            paused: self.partitions.values().filter(|ps| ps.paused).count(),
            parked: self
                .partitions
                .values()
                .flat_map(|ps| ps.open.values())
                .filter(|job| job.phase == Phase::Parked)
                .count(),
            rate_held: self.rate_held,
        }
    }

    /// The activity ids of the parked requests of `partition` (for the simulation's checks
    /// and the tests).
    pub fn parked(&self, partition: &RoutePartition) -> Vec<crate::model::ExecutionId> {
        self.partitions
            .get(partition)
            .map(|ps| {
                ps.open
                    .values()
                    .filter(|job| job.phase == Phase::Parked)
                    .map(|job| job.request.execution_id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The unfinished requests of `partition`: offset, activity id, the attempt it is at,
    /// and whether that attempt runs (for the simulation's checks and the tests).
    pub fn unfinished(
        &self,
        partition: &RoutePartition,
    ) -> Vec<(i64, crate::model::ExecutionId, u32, bool)> {
        self.partitions
            .get(partition)
            .map(|ps| {
                ps.open
                    .iter()
                    .map(|(offset, job)| {
                        let running = job.running().is_some();
                        (
                            *offset,
                            job.request.execution_id.clone(),
                            job.attempt,
                            running,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    // ---- ownership ----

    /// Aborts what runs, resumes what is paused, forgets everything.
    fn revoke(&mut self, fx: &mut Vec<Effect<S>>) {
        for (key, ps) in &self.partitions {
            fx.extend(
                ps.open
                    .values()
                    .filter_map(Job::running)
                    .map(|id| Effect::Abort { id }),
            );
            if ps.paused {
                fx.push(Effect::Resume {
                    partition: key.clone(),
                    from: None,
                });
            }
        }
        self.partitions.clear();
        self.out.clear();
        self.finished = 0;
        self.dirty_since = None;
        self.in_flight = None;
        self.running = 0;
        self.rate_waits.clear();
        self.rate_held = 0;
    }

    /// Resumes each assigned partition from its committed progress.
    fn assign(
        &mut self,
        assigned: Vec<(RoutePartition, Option<Committed>)>,
        fx: &mut Vec<Effect<S>>,
    ) {
        for (key, committed) in assigned {
            let mut ps = Partition::default();
            let offset = committed.map(|c| {
                match Progress::parse(&key.topic, key.partition, c.offset, &c.metadata) {
                    Ok(progress) => ps.restored = progress,
                    Err(error) => {
                        warn!(%error, "ignoring the progress: every request from the committed offset on runs again");
                    }
                }
                ps.committed = Some((c.offset, c.metadata));
                c.offset
            });
            if let Some(restored) = &ps.restored {
                info!(partition = %key, frontier = restored.frontier, unfinished = restored.open.len(), "activity partition taken over");
            }
            fx.push(Effect::Seek {
                partition: key.clone(),
                offset,
            });
            self.partitions.insert(key, ps);
        }
    }

    // ---- records ----

    /// Takes one record: finished at once (a cancellation, a record for the DLQ, one the
    /// committed progress says is finished), or a new unfinished request.
    fn on_record(&mut self, record: Record<S>, now: DateTime<Utc>, fx: &mut Vec<Effect<S>>) {
        let ps = self.partitions.entry(record.partition.clone()).or_default();
        let Admit::Take(mark) = ps.admit(record.offset) else {
            return;
        };
        match record.body {
            Body::Undecodable { reason, error } => {
                self.finish_dead(record.source, reason, error, now);
            }
            Body::Cancel(cancel) => {
                self.finished += 1;
                self.touch(now);
                self.on_cancel(&record.partition, &cancel, now, fx);
            }
            Body::Retry(notice) => {
                self.finished += 1;
                self.touch(now);
                self.on_retry(&record.partition, &notice);
            }
            Body::Request {
                request,
                serve,
                not_before,
            } => self.take_request(Arrival {
                partition: record.partition,
                offset: record.offset,
                written_at: record.written_at.unwrap_or(now),
                source: record.source,
                request,
                serve,
                not_before,
                mark,
            }),
        }
    }

    /// A new unfinished request: ready, or waiting (a retry's backoff, a worker that runs
    /// its function, an external deadline).
    fn take_request(&mut self, a: Arrival<S>) {
        let attempt = a
            .mark
            .as_ref()
            .and_then(|m| m.attempt)
            .unwrap_or(a.request.attempt)
            .max(1);
        let not_before = match &a.mark {
            Some(m) => m.not_before,
            None => a.not_before,
        };
        let grace = self.config.settings.unknown_grace;
        let (kind, deadline, phase) = match a.serve {
            Serve::External {
                service_group,
                timeout,
            } => {
                let deadline = external::deadline(&a.request, a.written_at, timeout, grace);
                let kind = JobKind::External { service_group };
                (kind, Some(deadline), Phase::Waiting { until: deadline })
            }
            Serve::Wasm(policy) => {
                let parked = a.mark.as_ref().is_some_and(|m| m.parked);
                let phase = match not_before {
                    _ if parked => Phase::Parked,
                    Some(until) => Phase::Waiting { until },
                    None => Phase::Ready,
                };
                (JobKind::Wasm(policy), a.request.deadline, phase)
            }
            Serve::Unknown => {
                let give_up = external::after(a.written_at, grace);
                warn!(
                    execution = %a.request.execution_id, ffqn = %a.request.ffqn,
                    partition = %a.partition, offset = a.offset, until = %give_up,
                    "no component of this worker exports the requested function: waiting for a worker that does"
                );
                self.counters.unknown_requests += 1;
                let phase = Phase::Waiting { until: give_up };
                (JobKind::Unknown, a.request.deadline, phase)
            }
        };
        self.seq += 1;
        let job = Job {
            seq: self.seq,
            source: a.source,
            request: a.request,
            kind,
            attempt,
            not_before,
            deadline,
            written_at: a.written_at,
            phase,
            rate_delayed: false,
        };
        if let Some(ps) = self.partitions.get_mut(&a.partition) {
            ps.open.insert(a.offset, job);
        }
    }

    /// A cancellation read on `key`: the unfinished request of that activity (on this
    /// partition: it was written before the cancellation, with the same key) is stopped and
    /// answered `cancelled`.
    fn on_cancel(
        &mut self,
        key: &RoutePartition,
        cancel: &ActivityCancel,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect<S>>,
    ) {
        let Some(ps) = self.partitions.get_mut(key) else {
            return;
        };
        let Some(job) = ps
            .find(&cancel.execution_id)
            .and_then(|offset| ps.open.remove(&offset))
        else {
            debug!(execution = %cancel.execution_id, partition = %key, "cancellation of an activity not in flight here (answered, or on another route)");
            return;
        };
        let what = match &job.phase {
            Phase::Running { id, started } => {
                fx.push(Effect::Abort { id: *id });
                self.running = self.running.saturating_sub(1);
                let ran = (now - *started).to_std().unwrap_or_default();
                format!("attempt {} was interrupted after {ran:?}", job.attempt)
            }
            Phase::Ready => format!("attempt {} had not started", job.attempt),
            Phase::Parked => format!(
                "it was parked after its attempts were exhausted (attempt {})",
                job.attempt
            ),
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
        self.counters.cancelled += 1;
        self.finished += 1;
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
        self.answer(job, result, now);
    }

    /// A retry notice read on `key` (its parent resumed): the parked request of that
    /// activity takes a fresh budget of attempts; any other (running, waiting, answered, on
    /// another route) ignores it.
    fn on_retry(&mut self, key: &RoutePartition, notice: &ActivityRetry) {
        let Some(job) = self.partitions.get_mut(key).and_then(|ps| {
            ps.find(&notice.execution_id)
                .and_then(|offset| ps.open.get_mut(&offset))
        }) else {
            debug!(execution = %notice.execution_id, partition = %key, "retry notice of an activity not in flight here (answered, or on another route)");
            return;
        };
        if job.phase != Phase::Parked {
            debug!(execution = %notice.execution_id, partition = %key, "retry notice of an activity that is not parked: ignored");
            return;
        }
        info!(execution = %notice.execution_id, parent = %notice.parent_execution_id, parked_at_attempt = job.attempt, "parked activity resumed by its parent: a fresh budget of attempts");
        job.attempt = 1;
        job.not_before = None;
        job.phase = Phase::Ready;
        self.counters.unparked += 1;
    }

    // ---- attempts ----

    /// The partition and offset of the job whose attempt (or check) `id` runs.
    fn locate(&self, id: AttemptId) -> Option<(RoutePartition, i64)> {
        self.partitions
            .iter()
            .find_map(|(key, ps)| ps.running(id).map(|offset| (key.clone(), offset)))
    }

    fn take(&mut self, key: &RoutePartition, offset: i64) -> Option<Job<S>> {
        self.partitions.get_mut(key)?.open.remove(&offset)
    }

    /// An attempt ended: answer, or schedule the retry (durable with the next commit).
    fn on_attempt(
        &mut self,
        id: AttemptId,
        result: ExecutionResult,
        jitter: f64,
        now: DateTime<Utc>,
    ) {
        // Not running (cancelled meanwhile, or of an earlier ownership): ignored.
        let Some((key, offset)) = self.locate(id) else {
            return;
        };
        let parked_here = self.partitions.get(&key).map_or(0, Partition::parked);
        let Some(job) = self
            .partitions
            .get_mut(&key)
            .and_then(|ps| ps.open.get_mut(&offset))
        else {
            return;
        };
        let JobKind::Wasm(policy) = &job.kind else {
            warn!(%id, partition = %key, offset, "an attempt result for a request that runs none: ignored");
            return;
        };
        let last = result.to_string();
        let decision = match retry::decide(policy, job.attempt, result, now, job.deadline, jitter) {
            Decision::Park { answer, .. } if parked_here >= MAX_PARKED => {
                warn!(execution = %job.request.execution_id, partition = %key, parked = parked_here, "activity attempts exhausted, but its partition parks {MAX_PARKED} requests already: answered");
                self.counters.park_refused += 1;
                Decision::Answer(answer)
            }
            decision => decision,
        };
        self.running = self.running.saturating_sub(1);
        match decision {
            Decision::Answer(result) => {
                if let Some(job) = self.take(&key, offset) {
                    self.finished += 1;
                    self.answer(job, result, now);
                }
            }
            Decision::Park { attempts, answer } => {
                let request = PauseRequest {
                    execution_id: job.request.parent_execution_id.clone(),
                    action: PauseAction::Pause,
                    reason: parked_reason(&job.request, attempts, &answer, &last),
                    requested_at: now,
                    parked: Some(ParkedActivity {
                        execution_id: job.request.execution_id.clone(),
                        ffqn: job.request.ffqn.clone(),
                    }),
                };
                warn!(execution = %job.request.execution_id, parent = %request.execution_id, attempts, %last, "activity attempts exhausted: parked, its parent asked to pause");
                job.not_before = None;
                job.phase = Phase::Parked;
                self.counters.parked += 1;
                self.out.push(Outgoing::Pause {
                    request,
                    activity: job.request.execution_id.clone(),
                    source: job.source.clone(),
                });
                self.touch(now);
            }
            Decision::Retry {
                attempt,
                backoff,
                not_before,
            } => {
                info!(execution = %job.request.execution_id, next_attempt = attempt, ?backoff, %last, "activity attempt failed; retry scheduled");
                job.attempt = attempt;
                job.not_before = Some(not_before);
                job.phase = Phase::Waiting { until: not_before };
                self.counters.retries_scheduled += 1;
                self.touch(now);
            }
        }
    }

    /// The check of an external request's service ended.
    fn on_check(&mut self, id: AttemptId, check: ServiceCheck, now: DateTime<Utc>) {
        let Some((key, offset)) = self.locate(id) else {
            return;
        };
        let Some(job) = self
            .partitions
            .get_mut(&key)
            .and_then(|ps| ps.open.get_mut(&offset))
        else {
            return;
        };
        if !matches!(job.kind, JobKind::External { .. }) {
            warn!(%id, partition = %key, offset, "a service check for a request that is not external: ignored");
            return;
        }
        self.running = self.running.saturating_sub(1);
        let deadline = job.deadline.unwrap_or(now);
        match external::checked(check, now, deadline) {
            Checked::Again(at) => job.phase = Phase::Waiting { until: at },
            Checked::Finished => {
                debug!(execution = %job.request.execution_id, "the external service answered in time");
                self.take(&key, offset);
                self.finished += 1;
                self.touch(now);
            }
            Checked::TimedOut => {
                if let Some(job) = self.take(&key, offset) {
                    self.finished += 1;
                    self.timed_out_external(job, now);
                }
            }
        }
    }

    // ---- time ----

    /// Fires what is due, starts what is ready, pauses or resumes partitions, and commits
    /// what waited long enough.
    fn tick(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect<S>>) {
        self.fire_due(now);
        self.start_ready(now, fx);
        self.flow_control(fx);
        let config = &self.config;
        let due = self.in_flight.is_none()
            && self.dirty_since.is_some_and(|since| {
                now >= external::after(since, config.commit_interval)
                    || self.out.len() >= config.max_batch
            });
        if due {
            self.commit(fx);
        }
    }

    /// Moves what waited long enough: a retry whose backoff is over becomes ready; an unknown
    /// function past its grace and an external request past its deadline are answered (or
    /// checked first, for a service whose group is known).
    fn fire_due(&mut self, now: DateTime<Utc>) {
        let mut answer = Vec::new();
        for (key, ps) in &mut self.partitions {
            for (offset, job) in &mut ps.open {
                let Phase::Waiting { until } = job.phase else {
                    continue;
                };
                if until > now {
                    continue;
                }
                match &job.kind {
                    JobKind::Wasm(_) => job.phase = Phase::Ready,
                    JobKind::Unknown => answer.push((key.clone(), *offset)),
                    JobKind::External { service_group } => {
                        match external::due(service_group.as_deref()) {
                            Due::Check => job.phase = Phase::Ready,
                            Due::TimedOut => answer.push((key.clone(), *offset)),
                        }
                    }
                }
            }
        }
        for (key, offset) in answer {
            let Some(job) = self.take(&key, offset) else {
                continue;
            };
            self.finished += 1;
            if matches!(job.kind, JobKind::External { .. }) {
                self.timed_out_external(job, now);
                continue;
            }
            self.counters.unknown_answered += 1;
            let reason = format!(
                "no activity worker ran {} within {:?} of the request ({}): no registered component exports it",
                job.request.ffqn,
                self.config.settings.unknown_grace,
                job.written_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
            warn!(execution = %job.request.execution_id, %reason, "answering an unknown activity");
            let result = ExecutionResult::error(ExecutionErrorKind::UnknownFunction, reason);
            self.answer(job, result, now);
        }
    }

    /// Starts ready jobs, oldest first, while attempt slots are free; none of a paused route
    /// (its external checks still run: they answer deadlines, they run nothing), and none of
    /// a rate-limited topic whose bucket has no token (`start` leaves it ready and notes when
    /// the next token comes). Jobs waiting for a slot wait for no token.
    fn start_ready(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect<S>>) {
        self.rate_waits.clear();
        self.rate_held = 0;
        let concurrency = self.config.settings.concurrency;
        if self.running >= concurrency {
            return;
        }
        let paused = &self.paused_topics;
        let mut ready: Vec<(u64, RoutePartition, i64)> = self
            .partitions
            .iter()
            .flat_map(|(key, ps)| {
                let held = paused.contains(&key.topic);
                ps.open
                    .iter()
                    .filter(|(_, job)| job.phase == Phase::Ready)
                    .filter(move |(_, job)| !(held && matches!(job.kind, JobKind::Wasm(_))))
                    .map(move |(offset, job)| (job.seq, key.clone(), *offset))
            })
            .collect();
        ready.sort();
        for (_, key, offset) in ready {
            if self.running >= concurrency {
                break;
            }
            self.start(key, offset, now, fx);
        }
    }

    /// Starts the ready job at `offset` of `key`: its next attempt (with a token of its
    /// topic's rate limit, if it has one: else it stays ready), or the check of its external
    /// service (or answers it `timed-out` if its deadline passed before it could start).
    fn start(
        &mut self,
        key: RoutePartition,
        offset: i64,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect<S>>,
    ) {
        let id = AttemptId(self.next_attempt);
        let Some(job) = self
            .partitions
            .get_mut(&key)
            .and_then(|ps| ps.open.get_mut(&offset))
        else {
            return;
        };
        match &job.kind {
            JobKind::Wasm(_) => {
                // The attempt ends by the deadline at the latest.
                let timeout = job.request.attempt_bound(now);
                if timeout.is_some_and(|t| t.is_zero()) {
                    let reason = format!(
                        "the activity's deadline passed before attempt {} could start",
                        job.attempt
                    );
                    if let Some(job) = self.take(&key, offset) {
                        self.finished += 1;
                        let result = ExecutionResult::error(ExecutionErrorKind::TimedOut, reason);
                        self.answer(job, result, now);
                    }
                    return;
                }
                if let Some(bucket) = self.buckets.get_mut(&key.topic)
                    && !bucket.take(now)
                {
                    if let Some(at) = bucket.next_token() {
                        self.rate_waits.insert(key.topic.clone(), at);
                    }
                    self.rate_held += 1;
                    if !job.rate_delayed {
                        job.rate_delayed = true;
                        *self
                            .counters
                            .rate_limited
                            .entry(key.topic.clone())
                            .or_default() += 1;
                        debug!(execution = %job.request.execution_id, partition = %key, offset, attempt = job.attempt, "activity attempt waits for a token of its route's rate limit");
                    }
                    return;
                }
                job.rate_delayed = false;
                self.counters.attempts += 1;
                fx.push(Effect::Start(Start {
                    id,
                    partition: key.clone(),
                    offset,
                    attempt: job.attempt,
                    request: job.request.clone(),
                    timeout,
                    source: job.source.clone(),
                }));
            }
            JobKind::External {
                service_group: Some(group),
            } => fx.push(Effect::CheckService {
                id,
                partition: key.clone(),
                offset,
                group: group.clone(),
            }),
            JobKind::Unknown
            | JobKind::External {
                service_group: None,
            } => return,
        }
        job.phase = Phase::Running { id, started: now };
        self.next_attempt += 1;
        self.running += 1;
    }

    /// Pauses a partition whose window is full or whose route is paused, resumes it (from the
    /// record after the last one taken) when neither holds.
    fn flow_control(&mut self, fx: &mut Vec<Effect<S>>) {
        let window = self.config.settings.partition_window;
        for (key, ps) in &mut self.partitions {
            // Parked requests do not count: the retry notices behind them must be read.
            let full =
                ps.open.len() - ps.parked() >= window || self.paused_topics.contains(&key.topic);
            if full == ps.paused {
                continue;
            }
            if full {
                debug!(partition = %key, unfinished = ps.open.len(), "activity partition paused: its window is full or its route is paused");
                fx.push(Effect::Pause {
                    partition: key.clone(),
                });
            } else {
                debug!(partition = %key, "activity partition resumed");
                fx.push(Effect::Resume {
                    partition: key.clone(),
                    from: ps.next,
                });
            }
            ps.paused = full;
        }
    }

    // ---- commits ----

    /// What is finished since the last commit, and the progress of every partition whose
    /// progress moved, as one [`Effect::Commit`] (none if nothing moved).
    fn commit(&mut self, fx: &mut Vec<Effect<S>>) {
        let mut progress = Vec::new();
        let mut moved = Vec::new();
        for (key, ps) in &self.partitions {
            let Some(p) = ps.progress() else {
                continue;
            };
            let committed = (p.frontier, p.metadata());
            if ps.committed.as_ref() == Some(&committed) {
                continue;
            }
            moved.push((key.clone(), committed));
            progress.push((key.clone(), p));
        }
        self.dirty_since = None;
        if moved.is_empty() && self.out.is_empty() {
            return;
        }
        self.in_flight = Some(moved);
        fx.push(Effect::Commit(Commit {
            records: mem::take(&mut self.out),
            progress,
            finished: mem::take(&mut self.finished),
        }));
    }

    fn on_committed(&mut self) {
        for (key, committed) in self.in_flight.take().unwrap_or_default() {
            if let Some(ps) = self.partitions.get_mut(&key) {
                ps.committed = Some(committed);
            }
        }
    }

    fn flush(&mut self, interrupt: bool, fx: &mut Vec<Effect<S>>) {
        if interrupt {
            for job in self
                .partitions
                .values_mut()
                .flat_map(|ps| ps.open.values_mut())
            {
                if let Some(id) = job.running() {
                    fx.push(Effect::Abort { id });
                    job.phase = Phase::Ready;
                }
            }
            self.running = 0;
        }
        if self.dirty_since.is_some() && self.in_flight.is_none() {
            self.commit(fx);
        }
    }

    // ---- outcomes ----

    fn touch(&mut self, now: DateTime<Utc>) {
        self.dirty_since.get_or_insert(now);
    }

    /// The record is finished with a DLQ copy.
    fn finish_dead(&mut self, source: S, reason: DlqReason, error: String, now: DateTime<Utc>) {
        self.finished += 1;
        self.touch(now);
        self.out.push(Outgoing::DeadLetter {
            source,
            reason,
            error,
        });
    }

    /// The job is finished with its answer to the parent.
    fn answer(&mut self, job: Job<S>, result: ExecutionResult, now: DateTime<Utc>) {
        self.touch(now);
        self.out.push(Outgoing::Answer {
            parent: job.request.parent_execution_id,
            ffqn: job.request.ffqn,
            response: Response::ChildExecutionFinished {
                child_execution_id: job.request.execution_id,
                result,
                // The attempt that answered, if one ran (a cancel or a deadline may end a
                // job that never started).
                ran: match job.phase {
                    Phase::Running { started, .. } => Some(Ran {
                        started_at: started,
                        finished_at: now,
                    }),
                    _ => None,
                },
            },
            source: job.source,
        });
    }

    fn timed_out_external(&mut self, job: Job<S>, now: DateTime<Utc>) {
        self.counters.deadlines_enforced += 1;
        let result = external::timed_out(&job.request.ffqn, job.deadline);
        info!(execution = %job.request.execution_id, %result, "external activity timed out");
        self.answer(job, result, now);
    }
}

/// Why a parked activity's parent is paused (its `Paused` entry's reason): the activity, its
/// function, the attempts made and the last error, and what to do.
fn parked_reason(
    request: &ActivityRequest,
    attempts: u32,
    answer: &ExecutionResult,
    last: &str,
) -> String {
    let what = match answer {
        ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::RetriesExhausted => {
            last.to_owned()
        }
        other => other.to_string(),
    };
    format!(
        "activity {} ({}) exhausted its {attempts} attempt{} (on_exhausted = \"pause\"); the last \
         one: {what}. Fix the cause and resume: the activity then gets a fresh budget of attempts",
        request.execution_id,
        request.ffqn,
        if attempts == 1 { "" } else { "s" },
    )
}
