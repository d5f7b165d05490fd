//! The state every part of a simulated run shares — cluster, store, worker processes, the
//! activity service, the clock, the trace — and what the seams do to it. The seams
//! (`seams.rs`) are thin async shells around these methods; the scheduler
//! (`scheduler.rs`, `workers.rs`, `workloads/`) calls the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::Duration;

use crate::dlq;
use crate::driver::{CommitError, InputTopic, Landed, LoggedEntry, Polled, PolledRecord, Position};
use crate::model::{ExecutionId, ExecutionResult, Response};
use crate::processor::{Body, Effect, Input, Undecodable};
use crate::records::{DlqReason, HistoryRecord};
use crate::wire::{self, Key, RecordKind, RecordType, TopicRole};

use super::activity::ActivityWorkers;
use super::cluster::{Cluster, Payload, Producer, Record, SimTime, Topic, TxnRefused};
use super::config::{Faults, SimConfig};
use super::process::Status;
use super::rng::Rng;
use super::store::{Codec, MaterialiserQueue, Store};
use super::workflows::{activity_result, double_ffqn, external_ffqn};
use crate::rows::MaterialiseJob;

pub type Shared = Arc<Mutex<World>>;

/// The world, locked (a panic elsewhere does not make it unreadable for the report).
pub fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|e| e.into_inner())
}

/// A record polled and not yet consumed by a committed batch (what a dead letter copies).
#[derive(Debug, Clone)]
pub struct PolledCopy {
    pub topic: Topic,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub bytes: Vec<u8>,
    pub timestamp: SimTime,
}

/// A process's consumer.
#[derive(Debug, Clone, Default)]
pub struct Consumer {
    pub member: Option<u64>,
    /// The generation of the assignment it holds (its group metadata).
    pub generation: u64,
    pub owned: BTreeSet<i32>,
    pub positions: BTreeMap<(InputTopic, i32), i64>,
    /// The records polled since the last rewind that no committed batch consumed yet, by
    /// handle ([`crate::driver::PolledRecord`]).
    pub polled: BTreeMap<usize, PolledCopy>,
    /// The handle of the next record polled.
    pub next_handle: usize,
    /// Rewinds (take-overs) so far.
    pub rewinds: u64,
    /// Admission closed: the submissions partitions are not fetched (a new assignment
    /// fetches them, as a new Kafka assignment does).
    pub submissions_paused: bool,
}

/// One worker process.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u64,
    pub slot: u32,
    pub instance: String,
    pub status: Status,
    pub transactional_id: String,
    pub epoch: u32,
    pub consumer: Consumer,
    pub mat: MaterialiserQueue,
    /// The await point it is parked at.
    pub at: &'static str,
    /// Its last poll returned nothing.
    pub idle: bool,
    /// Asked to stop: its next poll says shutdown.
    pub shutdown: bool,
    pub open_txn: Option<u64>,
    /// Transactions it committed.
    pub commits: u64,
    /// Its last commit was refused because the group moved on, and no poll has reported a
    /// membership since: it must not write for any partition (issue 11 item 0).
    pub refused: bool,
}

impl Proc {
    pub fn name(&self) -> String {
        format!("w{}/p{}", self.slot, self.pid)
    }
}

/// An answer the activity service will send.
#[derive(Debug, Clone)]
pub struct PendingAnswer {
    pub due: SimTime,
    pub parent: ExecutionId,
    pub child: ExecutionId,
    pub result: ExecutionResult,
}

/// The activity service: reads committed requests, answers each (sometimes twice) after a
/// while, not transactionally.
#[derive(Debug, Clone, Default)]
pub struct ActivityService {
    pub positions: BTreeMap<i32, i64>,
    pub pending: Vec<PendingAnswer>,
    /// Every answer sent, by the responses partition it went to (what a load generator
    /// re-sends).
    pub sent: BTreeMap<i32, Vec<PendingAnswer>>,
}

/// Counters for the report.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub commits: u64,
    /// Corrupt records of keyed state a take-over read (`Faults::corrupt_state`; a record is
    /// read by each take-over of its partition until its tombstone commits).
    pub corrupt_states_read: u64,
    /// DLQ copies of them committed (counted by the report).
    pub corrupt_states_copied: u64,
    pub refused_generation: u64,
    pub fenced: u64,
    pub timed_out_txns: u64,
    pub crashes: u64,
    pub exits: u64,
    pub freezes: u64,
    pub rebalances: u64,
    pub store_errors: u64,
    pub duplicate_answers: u64,
    /// Transactions committed while the store was down (the hot path going on).
    pub commits_while_store_down: u64,
    /// Inline attempts (`Faults::inline`): answered, retried on the topic, sent there as
    /// they were.
    pub inline_answered: u64,
    pub inline_retried: u64,
    pub inline_spilled: u64,
    /// Admission closing and opening a worker's submissions partitions.
    pub admission_pauses: u64,
    pub admission_resumes: u64,
}

pub struct World {
    pub start: SimTime,
    pub now: SimTime,
    pub config: SimConfig,
    pub faults: Faults,
    pub cluster: Cluster,
    pub store: Store,
    pub codec: Codec,
    pub procs: BTreeMap<u64, Proc>,
    pub activities: ActivityService,
    /// The activity workers and the external route's service (`Faults::activity_workers`).
    pub act: ActivityWorkers,
    /// The trigger workers (`Faults::triggers`).
    pub trig: super::triggers::Triggers,
    /// What the workers read of `weir.control` and did with it (`Faults::route_pauses`).
    pub routes: super::routes::Routes,
    pub rng: Rng,
    pub trace: Vec<String>,
    /// Things a seam saw that no correct driver does (checked as an invariant).
    pub anomalies: Vec<String>,
    /// Moments where a known hole was entered (they explain a violation; they are not
    /// violations themselves): `(tag, first occurrence, count)`.
    pub findings: Vec<(&'static str, String, u64)>,
    pub stats: Stats,
}

pub(super) use super::cluster::encode;

impl World {
    pub fn new(config: SimConfig, faults: Faults, rng: Rng, start: SimTime) -> Self {
        World {
            start,
            now: start,
            cluster: Cluster::new(config.partitions, config.activity_partitions),
            config,
            faults,
            store: Store::default(),
            codec: Codec::default(),
            procs: BTreeMap::new(),
            activities: ActivityService::default(),
            act: ActivityWorkers::default(),
            trig: super::triggers::Triggers::default(),
            routes: super::routes::Routes::default(),
            rng,
            trace: Vec::new(),
            anomalies: Vec::new(),
            findings: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// `+12.345s`: sim time since the start.
    pub fn clock(&self) -> String {
        let ms = (self.now - self.start).num_milliseconds();
        format!("+{}.{:03}s", ms / 1000, ms % 1000)
    }

    /// The code's own events logged since the last line (`sim/log.rs`), at this time.
    pub(crate) fn take_log(&mut self) {
        for line in super::log::take() {
            let line = format!("{:>10}       | {line}", self.clock());
            self.trace.push(line);
        }
    }

    /// An event line of the trace.
    pub fn event(&mut self, text: impl AsRef<str>) {
        self.take_log();
        let line = format!("{:>10}     {}", self.clock(), text.as_ref());
        self.trace.push(line);
    }

    /// Notes that a known hole was entered (the first time with its details).
    pub fn finding(&mut self, tag: &'static str, detail: String) {
        self.event(format!("FINDING [{tag}] {detail}"));
        match self.findings.iter_mut().find(|(t, _, _)| *t == tag) {
            Some((_, _, n)) => *n += 1,
            None => self
                .findings
                .push((tag, format!("{} {detail}", self.clock()), 1)),
        }
    }

    /// The process that owns `partition` in the current generation and has taken it over.
    fn current_owner(&self, partition: i32) -> Option<u64> {
        let group = &self.cluster.group;
        let member = group
            .assignment
            .iter()
            .find(|(_, parts)| parts.contains(&partition))
            .map(|(m, _)| *m)?;
        let pid = group.members.get(&member)?.pid;
        let p = self.procs.get(&pid)?;
        (p.consumer.generation == group.generation && p.consumer.owned.contains(&partition))
            .then_some(pid)
    }

    fn proc(&mut self, pid: u64) -> &mut Proc {
        self.procs.get_mut(&pid).expect("a process")
    }

    pub fn set_at(&mut self, pid: u64, at: &'static str) {
        self.proc(pid).at = at;
    }

    pub fn ms(&self, ms: i64) -> Duration {
        Duration::milliseconds(ms)
    }

    // ---- the store ----

    /// A store read by `pid` now: fails while the store is down.
    pub fn store_read(&mut self, pid: u64) -> Result<(), String> {
        match self.store.available(self.now) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stats.store_errors += 1;
                let name = self.procs[&pid].name();
                self.event(format!("{name}: store read failed: {e}"));
                Err(e)
            }
        }
    }

    /// After a timer scan of `partition` from `from`: a scan that starts at the stored
    /// watermark (a take-over's) never reads a timer due before it, so a timer still in the
    /// store behind the watermark is lost.
    pub fn timer_scan(&mut self, pid: u64, partition: i32, from: chrono::DateTime<chrono::Utc>) {
        let at_watermark = self
            .store
            .watermarks
            .get(&partition)
            .is_some_and(|w| w.fired_before == super::store::millis(from));
        if !at_watermark {
            return;
        }
        let behind: Vec<String> = self
            .store
            .timers
            .iter()
            .filter(|t| t.kafka_partition == partition && t.due_at < from)
            .map(|t| {
                format!(
                    "{} due +{}ms",
                    t.timer_id,
                    (t.due_at - self.start).num_milliseconds()
                )
            })
            .collect();
        if !behind.is_empty() {
            let name = self.procs[&pid].name();
            let wm = (from - self.start).num_milliseconds();
            self.finding(
                "item-5-timer-behind-watermark",
                format!(
                    "{name} loads the timers of partition {partition} from its watermark +{wm}ms; \
                     still in the store behind it, never to be loaded: {behind:?}"
                ),
            );
        }
    }

    /// Lets `pid`'s background writer write up to `max` queued jobs (merged) if it may.
    pub fn materialise(&mut self, pid: u64, max: usize) {
        let now = self.now;
        let patience = self.config.store_patience_ms;
        let World { procs, store, .. } = self;
        let Some(proc) = procs.get_mut(&pid) else {
            return;
        };
        if proc.status != Status::Running {
            return;
        }
        let name = proc.name();
        let mut partitions: BTreeSet<i32> = BTreeSet::new();
        let mut execution_rows = Vec::new();
        let result = proc.mat.write(store, now, max, patience, |job| {
            partitions.extend(job.history.iter().map(|r| r.kafka_partition));
            partitions.extend(job.executions.iter().map(|r| r.kafka_partition));
            partitions.extend(job.new_timers.iter().map(|t| t.kafka_partition));
            partitions.extend(job.removed_timers.iter().map(|t| t.kafka_partition));
            partitions.extend(job.checkpoints.iter().map(|c| c.kafka_partition));
            execution_rows.extend(job.executions.iter().map(|r| {
                (
                    r.kafka_partition,
                    format!("{} {} v{}", r.execution_id, r.state, r.history_version),
                )
            }));
        });
        if matches!(result, Some(Ok(_))) {
            let zombie = self.procs[&pid]
                .consumer
                .member
                .is_none_or(|m| !self.cluster.group.members.contains_key(&m));
            if zombie && !partitions.is_empty() {
                self.finding(
                    "item-0-former-owner-writes",
                    format!(
                        "{name} writes rows of partitions {partitions:?} after the group removed it \
                         (a zombie; execution rows {:?}; its timers and checkpoints are plain upserts)",
                        execution_rows.iter().map(|(_, r)| r).collect::<Vec<_>>()
                    ),
                );
            }
            for partition in partitions.iter().copied().filter(|_| !zombie) {
                if let Some(owner) = self.current_owner(partition)
                    && owner != pid
                {
                    let rows: Vec<&String> = execution_rows
                        .iter()
                        .filter(|(p, _)| *p == partition)
                        .map(|(_, r)| r)
                        .collect();
                    self.finding(
                        "item-0-former-owner-writes",
                        format!(
                            "{name} writes rows of partition {partition}, which p{owner} owns and has taken over \
                             (execution rows {rows:?}; its timers and checkpoints are plain upserts)"
                        ),
                    );
                }
            }
        }
        let Some(proc) = self.procs.get_mut(&pid) else {
            return;
        };
        match result {
            None => {}
            Some(Ok((last, count))) => {
                let owned = proc.consumer.owned.clone();
                self.event(format!(
                    "{name}: materialiser wrote jobs up to {last} ({count} merged); owns {owned:?}"
                ));
            }
            Some(Err(e)) => {
                self.stats.store_errors += 1;
                let gave_up = proc.mat.failed.clone();
                self.event(format!("{name}: materialiser write failed: {e}"));
                if let Some(g) = gave_up {
                    self.event(format!("{name}: {g}"));
                }
            }
        }
    }

    // ---- the activity service ----

    /// Reads new committed requests and schedules their answers; sends the answers due.
    /// With `Faults::activity_workers` it is the external route's service instead
    /// ([`World::service_step`]): the activity workers serve the requests.
    pub fn activity_step(&mut self) {
        if self.faults.activity_workers {
            self.service_step();
            return;
        }
        let now = self.now;
        let duplicates = self.faults.duplicate_answers;
        for partition in 0..self.cluster.partitions(Topic::Activity) {
            let from = self
                .activities
                .positions
                .get(&partition)
                .copied()
                .unwrap_or(0);
            let (records, next) =
                self.cluster
                    .read_committed(Topic::Activity, partition, from, usize::MAX);
            let requests: Vec<_> = records
                .into_iter()
                .filter_map(|r| match &r.payload {
                    Some(Payload::Activity(req)) => Some(req.clone()),
                    _ => None,
                })
                .collect();
            self.activities.positions.insert(partition, next);
            for request in requests {
                let result = activity_result(&request.params);
                let latency = self.rng.range(0, 1_500) as i64;
                self.activities.pending.push(PendingAnswer {
                    due: now + Duration::milliseconds(latency),
                    parent: request.parent_execution_id.clone(),
                    child: request.execution_id.clone(),
                    result: result.clone(),
                });
                if duplicates && self.rng.chance(150) {
                    self.stats.duplicate_answers += 1;
                    let later = self.rng.range(0, 4_000) as i64;
                    self.activities.pending.push(PendingAnswer {
                        due: now + Duration::milliseconds(later),
                        parent: request.parent_execution_id,
                        child: request.execution_id,
                        result,
                    });
                }
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.activities.pending)
            .into_iter()
            .partition(|a| a.due <= now);
        self.activities.pending = later;
        for answer in due {
            self.send_answer(answer);
        }
    }

    /// Sends an answer on `weir.responses` (not transactionally).
    pub fn send_answer(&mut self, answer: PendingAnswer) {
        let now = self.now;
        {
            let key = answer.parent.to_string();
            let partition = self.cluster.partition_for(Topic::Responses, &key);
            self.activities
                .sent
                .entry(partition)
                .or_default()
                .push(answer.clone());
            let payload = Payload::Response(Response::child_finished(answer.child, answer.result));
            let bytes = encode(&payload);
            self.cluster.append(
                Topic::Responses,
                partition,
                Some(key),
                None,
                payload,
                bytes,
                Producer::ActivityService,
                None,
                now,
            );
        }
    }

    /// Whether the activity service has read every committed request and sent every answer.
    pub fn activities_idle(&self) -> bool {
        if self.faults.activity_workers {
            return self.service_idle() && self.unfinished_routes().is_empty();
        }
        self.activities.pending.is_empty()
            && (0..self.cluster.partitions(Topic::Activity)).all(|p| {
                let (unread, _) = self.cluster.read_committed(
                    Topic::Activity,
                    p,
                    self.activities.positions.get(&p).copied().unwrap_or(0),
                    1,
                );
                unread.is_empty()
            })
    }

    // ---- clients ----

    /// A record from outside (not transactional): a client's submission or a poison record,
    /// with its `weir.kind` header (`kind`) as the client writes it.
    pub fn client_append(
        &mut self,
        topic: Topic,
        key: String,
        kind: Option<RecordKind>,
        payload: Payload,
    ) -> (i32, i64) {
        let partition = self.cluster.partition_for(topic, &key);
        self.client_append_at(topic, partition, key, kind, payload)
    }

    /// A record a client appends to `partition`, whatever its key says (a producer that does
    /// not partition as Kafka's clients do).
    pub fn client_append_at(
        &mut self,
        topic: Topic,
        partition: i32,
        key: String,
        kind: Option<RecordKind>,
        payload: Payload,
    ) -> (i32, i64) {
        let bytes = encode(&payload);
        let offset = self.cluster.append(
            topic,
            partition,
            Some(key),
            kind,
            payload,
            bytes,
            Producer::Client,
            None,
            self.now,
        );
        (partition, offset)
    }

    // ---- time ----

    /// The next instant at which something happens on its own (a frozen process resumes, a
    /// session or rebalance times out, a transaction times out, the store comes back).
    pub fn next_deadline(&self) -> Option<SimTime> {
        let unfreeze = self
            .procs
            .values()
            .filter_map(|p| match p.status {
                Status::Frozen { until } => Some(until),
                _ => None,
            })
            .min();
        let group = self
            .cluster
            .group
            .next_deadline(self.ms(self.config.rebalance_timeout_ms));
        let txn = self
            .cluster
            .next_transaction_deadline(self.ms(self.config.transaction_timeout_ms));
        let store = self.store.down_until;
        let activity_workers = self
            .cluster
            .activity_group
            .next_deadline(self.ms(self.config.rebalance_timeout_ms));
        let act_unfreeze = self.act_next_resume();
        let triggers = self
            .cluster
            .trigger_group
            .next_deadline(self.ms(self.config.rebalance_timeout_ms));
        let trig_unfreeze = self.trig_next_resume();
        [
            unfreeze,
            group,
            txn,
            store,
            activity_workers,
            act_unfreeze,
            triggers,
            trig_unfreeze,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does what is due at `now`.
    pub fn tick(&mut self) {
        let now = self.now;
        let resumed: Vec<u64> = self
            .procs
            .values()
            .filter(|p| matches!(p.status, Status::Frozen { until } if until <= now))
            .map(|p| p.pid)
            .collect();
        for pid in resumed {
            self.resume(pid);
        }
        let rebalance_timeout = self.ms(self.config.rebalance_timeout_ms);
        let generation = self.cluster.group.generation;
        for e in self.cluster.group.tick(now, rebalance_timeout) {
            self.event(e);
        }
        if self.cluster.group.generation != generation {
            self.stats.rebalances += 1;
            let done = rebalance_done(&self.cluster.group);
            self.event(done);
        }
        self.act_resume_due();
        let generation = self.cluster.activity_group.generation;
        for e in self.cluster.activity_group.tick(now, rebalance_timeout) {
            self.event(format!("activity workers' {e}"));
        }
        if self.cluster.activity_group.generation != generation {
            let done = rebalance_done(&self.cluster.activity_group);
            self.event(format!("activity workers' {done}"));
        }
        self.trig_resume(false);
        for e in self.cluster.trigger_group.tick(now, rebalance_timeout) {
            self.event(format!("trigger workers' {e}"));
        }
        let timeout = self.ms(self.config.transaction_timeout_ms);
        for txn in self.cluster.expire_transactions(now, timeout) {
            self.stats.timed_out_txns += 1;
            let owner = self
                .procs
                .get(&txn.pid)
                .map_or_else(|| format!("p{}", txn.pid), Proc::name);
            self.event(format!(
                "broker: transaction {} of {owner} timed out: aborted ({} records, offsets {:?}); producer fenced",
                txn.number,
                txn.written.len(),
                txn.offsets
            ));
        }
        if self.store.down_until.is_some_and(|t| t <= now) {
            self.store.down_until = None;
            self.event("store: back");
        }
    }

    /// A frozen process goes on (SIGCONT).
    pub fn resume(&mut self, pid: u64) {
        let now = self.now;
        let Some(proc) = self.procs.get_mut(&pid) else {
            return;
        };
        if !matches!(proc.status, Status::Frozen { .. }) {
            return;
        }
        proc.status = Status::Running;
        let name = proc.name();
        let member = proc.consumer.member;
        let queued = proc.mat.queue.len();
        let note = if self.cluster.group.resume_heartbeats(member) {
            "still a member".to_owned()
        } else {
            format!(
                "no longer a member — a zombie ({queued} materialiser jobs queued, txn {:?})",
                self.procs[&pid].open_txn
            )
        };
        let _ = now;
        self.event(format!("{name}: resumes, {note}"));
    }

    /// SIGSTOP for `ms`.
    pub fn freeze(&mut self, pid: u64, ms: i64) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(proc) = self.procs.get_mut(&pid) else {
            return;
        };
        if proc.status != Status::Running {
            return;
        }
        proc.status = Status::Frozen {
            until: now + Duration::milliseconds(ms),
        };
        self.stats.freezes += 1;
        let name = proc.name();
        let at = proc.at;
        let member = proc.consumer.member;
        self.cluster.group.stop_heartbeats(member, now, session);
        self.event(format!("{name}: frozen for {ms} ms at `{at}`"));
    }

    /// The process is gone: killed (its member stays until its session expires) or exited
    /// (its consumer left the group).
    pub fn bury(&mut self, pid: u64, killed: bool) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(proc) = self.procs.get_mut(&pid) else {
            return;
        };
        proc.status = Status::Dead;
        proc.mat.clear();
        let member = proc.consumer.member;
        if let Some(member) = member {
            if killed {
                self.cluster
                    .group
                    .stop_heartbeats(Some(member), now, session);
            } else {
                let generation = self.cluster.group.generation;
                self.cluster.group.remove(member, now);
                if self.cluster.group.generation != generation {
                    self.stats.rebalances += 1;
                    let done = rebalance_done(&self.cluster.group);
                    self.event(done);
                }
            }
        }
    }
}

fn rebalance_done(group: &super::cluster::Group) -> String {
    format!(
        "group: generation {}: assignment {:?}",
        group.generation, group.assignment
    )
}

/// The co-partitioned input topics a workflow worker consumes.
pub const INPUTS: [InputTopic; 3] = [
    InputTopic::Submissions,
    InputTopic::Responses,
    InputTopic::Events,
];

/// What the driver's decoder makes of a record read from `topic`: the type its topic and
/// kind say ([`wire::record_type`], as the worker's decoder reads it), which its value must be.
fn decode(topic: InputTopic, record: &Record) -> Result<Body, Undecodable> {
    let undecodable = |error: String| Undecodable {
        reason: DlqReason::Undecodable,
        error,
    };
    let expected =
        wire::record_type(topic.into(), record.kind).map_err(|e| undecodable(e.to_string()))?;
    match (expected, &record.payload) {
        (_, Some(Payload::Garbage(why))) => Err(undecodable(why.clone())),
        (RecordType::Submission, Some(Payload::Submission(s))) => Ok(Body::Submission(s.clone())),
        (RecordType::Response, Some(Payload::Response(r))) => Ok(Body::Response(r.clone())),
        (RecordType::Event, Some(Payload::Event(e))) => Ok(Body::Event(e.clone())),
        (RecordType::Event, Some(Payload::KeyedEvent(e))) => Ok(Body::KeyedEvent(e.clone())),
        (RecordType::CancelRequest, Some(Payload::Cancel(c))) => Ok(Body::Cancel(c.clone())),
        (RecordType::ScheduleCommand, Some(Payload::ScheduleCommand(c))) => {
            Ok(Body::Schedule(c.clone()))
        }
        (RecordType::CorrelationCommand, Some(Payload::CorrelationCommand(c))) => {
            Ok(Body::Correlation(c.clone()))
        }
        (RecordType::BatchCommand, Some(Payload::BatchCommand(c))) => Ok(Body::Batch(c.clone())),
        (RecordType::StubWrite, Some(Payload::StubWrite(w))) => Ok(Body::StubWrite(w.clone())),
        (RecordType::SlotCommand, Some(Payload::SlotCommand(c))) => Ok(Body::Slot(c.clone())),
        (RecordType::UpgradeRequest, Some(Payload::Upgrade(u))) => Ok(Body::Upgrade(u.clone())),
        (RecordType::PauseRequest, Some(Payload::Pause(p))) => Ok(Body::Pause(p.clone())),
        (RecordType::QueryRequest, Some(Payload::Query(q))) => Ok(Body::Query(q.clone())),
        (RecordType::ResetRequest, Some(Payload::Reset(r))) => Ok(Body::Reset(r.clone())),
        (RecordType::ResetStart, Some(Payload::ResetStart(r))) => Ok(Body::ResetStart(r.clone())),
        (expected, other) => Err(undecodable(format!(
            "not a {expected:?}, as its topic and kind say: {other:?}"
        ))),
    }
}

mod consumer;
mod producer;
mod routes;

pub use routes::controls_now;

#[cfg(test)]
mod tests;
