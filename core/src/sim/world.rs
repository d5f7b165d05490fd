//! The state every part of a simulated run shares — cluster, store, worker processes, the
//! activity service, the clock, the trace — and what the seams do to it. The seams
//! (`seams.rs`) are thin async shells around these methods; the scheduler
//! (`scheduler.rs`, `workers.rs`, `workloads/`) calls the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::Duration;

use crate::dlq;
use crate::driver::{CommitError, InputTopic, Landed, LoggedEntry, Polled, PolledRecord};
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

/// A record of the last poll (what a dead letter copies).
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
    pub last_poll: Vec<PolledCopy>,
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

    // ---- the consumer ----

    /// One poll of `pid`'s consumer; see `cluster.rs` for the group protocol.
    /// Admission of `pid`'s driver: pauses its submissions partitions, or resumes them from
    /// `from` (the positions its driver holds).
    pub fn admit(&mut self, pid: u64, open: bool, from: &[(i32, i64)]) {
        let name = self.procs[&pid].name();
        let consumer = &mut self.procs.get_mut(&pid).expect("a process").consumer;
        consumer.submissions_paused = !open;
        if open {
            for &(partition, offset) in from {
                if consumer.owned.contains(&partition) {
                    consumer
                        .positions
                        .insert((InputTopic::Submissions, partition), offset);
                }
            }
        }
        if open {
            self.stats.admission_resumes += 1;
        } else {
            self.stats.admission_pauses += 1;
        }
        let what = if open { "resumes" } else { "pauses" };
        self.event(format!(
            "{name}: admission {what} the submissions partitions"
        ));
    }

    pub fn poll(&mut self, pid: u64, max: usize) -> Polled {
        let now = self.now;
        let drain_before_rejoin = !self.faults.revoked_writes;
        let mut events = Vec::new();
        let polled = {
            let World {
                procs,
                cluster,
                rng,
                stats,
                ..
            } = self;
            let proc = procs.get_mut(&pid).expect("a process");
            let name = proc.name();
            'poll: {
                if proc.shutdown {
                    break 'poll Polled::Shutdown;
                }
                let group = &mut cluster.group;
                let consumer = &mut proc.consumer;
                let member = match consumer.member.filter(|m| group.members.contains_key(m)) {
                    Some(member) => member,
                    None => {
                        let lost = std::mem::take(&mut consumer.owned);
                        consumer.positions.clear();
                        let member = group.join(pid, now);
                        events.push(format!(
                            "{name}: joins the group as member {member}{}",
                            consumer
                                .member
                                .map(|m| format!(" (member {m} was removed)"))
                                .unwrap_or_default()
                        ));
                        consumer.member = Some(member);
                        if group.try_complete() {
                            stats.rebalances += 1;
                            events.push(rebalance_done(group));
                        }
                        if !lost.is_empty() {
                            break 'poll Polled::Rebalanced {
                                generation: consumer.generation,
                                owned: BTreeSet::new(),
                            };
                        }
                        member
                    }
                };
                if group.rebalance_since.is_some() && !group.members[&member].rejoined {
                    if !consumer.owned.is_empty() {
                        events.push(format!(
                            "{name}: rebalance in progress: revokes {:?}",
                            consumer.owned
                        ));
                        consumer.owned.clear();
                        consumer.positions.clear();
                        if !drain_before_rejoin {
                            // librdkafka sends JoinGroup as soon as the revoke callback has
                            // returned, while the driver is still taking over (flushing).
                            if let Some(m) = group.members.get_mut(&member) {
                                m.rejoined = true;
                            }
                            if group.try_complete() {
                                stats.rebalances += 1;
                                events.push(rebalance_done(group));
                            }
                        }
                        break 'poll Polled::Rebalanced {
                            generation: consumer.generation,
                            owned: BTreeSet::new(),
                        };
                    }
                    if drain_before_rejoin && !proc.mat.queue.is_empty() {
                        proc.idle = true;
                        break 'poll Polled::Records(Vec::new());
                    }
                    if let Some(m) = group.members.get_mut(&member) {
                        m.rejoined = true;
                    }
                    if group.try_complete() {
                        stats.rebalances += 1;
                        events.push(rebalance_done(group));
                    }
                }
                if group.rebalance_since.is_some() {
                    proc.idle = true;
                    break 'poll Polled::Records(Vec::new());
                }
                if consumer.generation != group.generation {
                    consumer.generation = group.generation;
                    consumer.owned = group.assignment.get(&member).cloned().unwrap_or_default();
                    consumer.positions.clear();
                    consumer.submissions_paused = false;
                    events.push(format!(
                        "{name}: assigned {:?} in generation {}",
                        consumer.owned, consumer.generation
                    ));
                    break 'poll Polled::Rebalanced {
                        generation: consumer.generation,
                        owned: consumer.owned.clone(),
                    };
                }
                // Fetch.
                let mut sources: Vec<(InputTopic, i32)> = consumer
                    .owned
                    .iter()
                    .flat_map(|&p| INPUTS.map(|t| (t, p)))
                    .filter(|(topic, _)| {
                        !(consumer.submissions_paused && *topic == InputTopic::Submissions)
                    })
                    .collect();
                rng.shuffle(&mut sources);
                let want = rng.range(1, max.max(1) as u64) as usize;
                let mut records = Vec::new();
                consumer.last_poll.clear();
                for (topic, partition) in sources {
                    if records.len() >= want {
                        break;
                    }
                    let position = match consumer.positions.get(&(topic, partition)) {
                        Some(p) => *p,
                        None => {
                            // A position is fetched as stable: not while offsets are pending.
                            if cluster
                                .offsets_pending(&BTreeSet::from([partition]))
                                .is_some()
                            {
                                continue;
                            }
                            cluster.committed_offset(topic, partition)
                        }
                    };
                    let take = rng.range(1, (want - records.len()) as u64) as usize;
                    let (read, next) =
                        cluster.read_committed(Topic::of_input(topic), partition, position, take);
                    for record in read {
                        let index = records.len();
                        records.push(PolledRecord {
                            topic,
                            partition,
                            offset: record.offset,
                            input: Input::Record {
                                index,
                                partition,
                                key: record.key.clone(),
                                size: record.bytes.len(),
                                body: decode(topic, record),
                            },
                        });
                        consumer.last_poll.push(PolledCopy {
                            topic: Topic::of_input(topic),
                            partition,
                            offset: record.offset,
                            key: record.key.clone(),
                            bytes: record.bytes.clone(),
                            timestamp: record.timestamp,
                        });
                    }
                    consumer.positions.insert((topic, partition), next);
                }
                proc.idle = records.is_empty();
                Polled::Records(records)
            }
        };
        for e in events {
            self.event(e);
        }
        if matches!(polled, Polled::Rebalanced { .. }) {
            self.proc(pid).refused = false;
        }
        polled
    }

    /// A job `pid` queues for its writer: after a refused commit, before the log reported its
    /// membership again, a job for any partition is an anomaly (the partitions it had may be
    /// another member's; issue 11 item 0, `docs/faults.md` finding 4).
    pub fn job_submitted(&mut self, pid: u64, job: &MaterialiseJob) {
        if !self.procs[&pid].refused {
            return;
        }
        let mut partitions: BTreeSet<i32> = BTreeSet::new();
        partitions.extend(job.history.iter().map(|r| r.kafka_partition));
        partitions.extend(job.executions.iter().map(|r| r.kafka_partition));
        partitions.extend(job.new_timers.iter().map(|t| t.kafka_partition));
        partitions.extend(job.removed_timers.iter().map(|t| t.kafka_partition));
        partitions.extend(job.checkpoints.iter().map(|c| c.kafka_partition));
        partitions.extend(job.watermarks.iter().map(|w| w.kafka_partition));
        if partitions.is_empty() {
            return;
        }
        let name = self.procs[&pid].name();
        let owned = self.procs[&pid].consumer.owned.clone();
        let detail = format!(
            "{name} queues writes for partitions {partitions:?} after its commit was refused, \
             before the log reported its membership again (it believes it owns {owned:?})"
        );
        self.event(format!("{name}: ANOMALY: {detail}"));
        self.anomalies.push(detail);
    }

    /// Positions `pid`'s owned partitions at their committed offsets, fetched as stable:
    /// `None` while an open transaction holds offsets for one of them.
    pub fn rewind(&mut self, pid: u64) -> Option<Vec<(InputTopic, i32, i64)>> {
        let owned = self.procs[&pid].consumer.owned.clone();
        if let Some(txn) = self.cluster.offsets_pending(&owned) {
            let proc = self.proc(pid);
            if proc.at != "rewind: waiting for an open transaction" {
                proc.at = "rewind: waiting for an open transaction";
                let name = proc.name();
                self.event(format!(
                    "{name}: rewind waits: transaction {txn} holds offsets of {owned:?}"
                ));
            }
            return None;
        }
        let positions: BTreeMap<(InputTopic, i32), i64> = owned
            .iter()
            .flat_map(|&p| INPUTS.map(|t| (t, p)))
            .map(|(t, p)| ((t, p), self.cluster.committed_offset(t, p)))
            .collect();
        let out = positions.iter().map(|(&(t, p), &o)| (t, p, o)).collect();
        self.proc(pid).consumer.positions = positions;
        Some(out)
    }

    /// The committed records of history `partition` from `from`, once no transaction is open
    /// on it (`None` until then: an open transaction holds the LSO back, and committed
    /// records may lie beyond it).
    pub fn read_history(
        &mut self,
        pid: u64,
        partition: i32,
        from: i64,
    ) -> Option<Vec<LoggedEntry>> {
        let blocker = self
            .cluster
            .txns
            .values()
            .filter(|t| t.first.contains_key(&(Topic::History, partition)))
            .map(|t| t.number)
            .min();
        if let Some(txn) = blocker {
            let proc = self.proc(pid);
            if proc.at != "read-history: waiting for an open transaction" {
                proc.at = "read-history: waiting for an open transaction";
                let name = proc.name();
                self.event(format!(
                    "{name}: catch-up waits: transaction {txn} is open on history/{partition}"
                ));
            }
            return None;
        }
        let (records, _) = self
            .cluster
            .read_committed(Topic::History, partition, from, usize::MAX);
        records
            .into_iter()
            .filter_map(|r| match &r.payload {
                Some(Payload::History(record)) => Some(LoggedEntry {
                    offset: r.offset,
                    record: record.clone(),
                    bytes: r.bytes.clone(),
                    timestamp: r.timestamp,
                }),
                _ => None,
            })
            .collect::<Vec<_>>()
            .into()
    }

    /// The keyed state of `partition` of `weir.state`: the last committed record of each
    /// key, once no transaction is open on it (`None` until then, as [`World::read_history`]).
    pub fn read_keyed_state(
        &mut self,
        pid: u64,
        partition: i32,
    ) -> Option<crate::driver::KeyedState> {
        let blocked = self
            .cluster
            .txns
            .values()
            .any(|t| t.first.contains_key(&(Topic::State, partition)));
        if blocked {
            let proc = self.proc(pid);
            proc.at = "read-keyed-state: waiting for an open transaction";
            return None;
        }
        let (records, _) = self
            .cluster
            .read_committed(Topic::State, partition, 0, usize::MAX);
        // The last record of each key, as the worker's reader of `weir.state` keeps it: its
        // kind says which state it is; bytes that do not decode are corrupt.
        enum Last {
            Schedule(Option<crate::schedule::ScheduleState>),
            Correlation(Option<crate::correlation::CorrelationState>),
            Remembered(Option<crate::correlation::RememberedEvent>),
            Corrupt(crate::processor::CorruptState),
        }
        let mut last = std::collections::BTreeMap::new();
        for r in records {
            let Some(key) = &r.key else { continue };
            let state = match (wire::record_type(TopicRole::State, r.kind), &r.payload) {
                (Ok(RecordType::ScheduleState), Some(Payload::Schedule(state))) => {
                    Last::Schedule(state.clone())
                }
                (Ok(RecordType::CorrelationState), Some(Payload::Correlation(state))) => {
                    Last::Correlation(state.clone())
                }
                (Ok(RecordType::RememberedEvent), Some(Payload::Remembered(id))) => {
                    Last::Remembered(id.clone())
                }
                (
                    Ok(record @ (RecordType::ScheduleState | RecordType::CorrelationState)),
                    Some(Payload::Garbage(why)),
                ) => Last::Corrupt(crate::processor::CorruptState {
                    partition,
                    offset: r.offset,
                    timestamp_millis: Some(r.timestamp.timestamp_millis()),
                    record,
                    key: Some(key.as_bytes().to_vec()),
                    value: r.bytes.clone(),
                    headers: Vec::new(),
                    error: why.clone(),
                }),
                _ => continue,
            };
            last.insert(key.clone(), state);
        }
        let mut state = crate::driver::KeyedState::default();
        for record in last.into_values() {
            match record {
                Last::Schedule(s) => state.schedules.extend(s),
                Last::Correlation(c) => state.correlations.extend(c),
                Last::Remembered(r) => state.remembered.extend(r),
                Last::Corrupt(c) => {
                    self.stats.corrupt_states_read += 1;
                    state.corrupt.push(c);
                }
            }
        }
        Some(state)
    }

    // ---- the producer ----

    fn refused(&mut self, pid: u64, refused: TxnRefused) -> CommitError {
        let name = self.procs[&pid].name();
        if let Some(txn) = self.proc(pid).open_txn.take() {
            self.cluster.end(txn, false, self.now);
        }
        match refused {
            TxnRefused::Generation(e) => {
                self.stats.refused_generation += 1;
                self.proc(pid).refused = true;
                self.event(format!("{name}: commit refused, transaction aborted: {e}"));
                CommitError::Refused(e.into())
            }
            TxnRefused::Fenced(e) => {
                self.stats.fenced += 1;
                self.event(format!("{name}: commit fenced: {e}"));
                CommitError::Fatal(e.into())
            }
        }
    }

    /// Begins the transaction and produces every record of `effects` into it.
    pub fn commit_begin(
        &mut self,
        pid: u64,
        effects: &[Effect],
    ) -> Result<(u64, Vec<Landed>), CommitError> {
        let now = self.now;
        let (tid, epoch) = {
            let p = &self.procs[&pid];
            (p.transactional_id.clone(), p.epoch)
        };
        let txn = match self.cluster.begin(&tid, epoch, pid, now) {
            Ok(txn) => txn,
            Err(e) => return Err(self.refused(pid, e)),
        };
        self.proc(pid).open_txn = Some(txn);
        let mut landed = Vec::new();
        for effect in effects {
            self.produce(pid, txn, effect, &mut landed);
        }
        Ok((txn, landed))
    }

    /// Produces the record of `effect` (if it writes one) into `txn`, where
    /// [`wire::address`] says, as the worker's encoder does.
    fn produce(&mut self, pid: u64, txn: u64, effect: &Effect, landed: &mut Vec<Landed>) {
        let now = self.now;
        let producer = Producer::Worker { pid };
        let address = match wire::address(effect) {
            Ok(Some(address)) => address,
            Ok(None) => return,
            Err(e) => {
                let name = self.procs[&pid].name();
                self.anomalies
                    .push(format!("{name}: an effect without an address: {e}"));
                return;
            }
        };
        // Who serves a route decides, by the wire table's rule, whether it hears of a
        // cancellation: the activity workers (`Faults::activity_workers`) serve the route of
        // `double`; the simulated activity service is an outside one that asks for nothing;
        // the external route (its own topic, which the activity workers watch) asks.
        if let wire::Destination::Route(ffqn) = &address.destination {
            let workers = self.faults.activity_workers;
            let service = wire::RouteService {
                external: !(workers && *ffqn == double_ffqn()),
                cancel_notices: workers && *ffqn == external_ffqn(),
            };
            if !service.takes(&address) {
                return;
            }
        }
        let topic = match &address.destination {
            wire::Destination::Route(ffqn)
                if self.faults.activity_workers && *ffqn == external_ffqn() =>
            {
                Topic::External
            }
            destination => Topic::of_destination(destination),
        };
        // A retry's backoff, as the table's header says it (the activity workers honour it).
        let not_before = address
            .headers
            .iter()
            .find(|(name, _)| *name == wire::NOT_BEFORE_HEADER)
            .filter(|_| self.faults.activity_workers)
            .and_then(|(_, value)| std::str::from_utf8(value).ok()?.parse::<i64>().ok())
            .and_then(chrono::DateTime::from_timestamp_millis);
        let (key, partitioned_by) = match address.key {
            Key::Exactly(key) => (key.clone(), key),
            Key::Within { key, partition_of } => (key, partition_of),
            Key::OfInput(input) => match self.procs[&pid].consumer.last_poll.get(input) {
                Some(original) => {
                    let key = original.key.clone().unwrap_or_default();
                    (key.clone(), key)
                }
                None => {
                    let name = self.procs[&pid].name();
                    self.anomalies.push(format!(
                        "{name}: DeadLetter names input {input}, which its last poll does not have"
                    ));
                    return;
                }
            },
        };
        // The value, as the simulation keeps it (its "encoding").
        let payload = match effect {
            Effect::Append {
                execution_id,
                seq,
                entry,
            } => Payload::History(HistoryRecord {
                execution_id: execution_id.clone(),
                seq: *seq,
                entry: entry.clone(),
            }),
            Effect::Submit(s) => Payload::Submission(s.clone()),
            // The simulated activity service answers when it chooses: a retry's backoff is
            // not modelled. The activity workers (`Faults::activity_workers`) honour it: the
            // table's not-before header is kept with the record.
            Effect::RequestActivity(r) | Effect::RetryActivity { request: r, .. } => {
                Payload::Activity(r.clone())
            }
            Effect::CancelActivity { parent, child, .. } => {
                Payload::ActivityCancel(crate::records::ActivityCancel {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    cancelled_at: now,
                })
            }
            Effect::Respond { response, .. } => Payload::Response(response.clone()),
            Effect::CancelExecution(request) => Payload::Cancel(request.clone()),
            Effect::PublishResult(f) => Payload::Result(f.clone()),
            Effect::DeadLetter {
                input,
                reason,
                error,
            } => {
                let Some(original) = self.procs[&pid].consumer.last_poll.get(*input).cloned()
                else {
                    return;
                };
                let copy = dlq::copy(
                    dlq::Original {
                        topic: original.topic.name(),
                        partition: original.partition,
                        offset: original.offset,
                        timestamp_millis: Some(original.timestamp.timestamp_millis()),
                        key: original.key.as_deref().map(str::as_bytes),
                        value: Some(&original.bytes),
                    },
                    [],
                    *reason,
                    error.clone(),
                    now,
                );
                Payload::Dlq(Box::new(copy.envelope))
            }
            Effect::DeadLetterState(state) => {
                let copy = dlq::copy(
                    dlq::Original {
                        topic: Topic::State.name(),
                        partition: state.partition,
                        offset: state.offset,
                        timestamp_millis: state.timestamp_millis,
                        key: state.key.as_deref(),
                        value: Some(&state.value),
                    },
                    state
                        .headers
                        .iter()
                        .map(|(name, value)| (name.as_str(), value.as_deref())),
                    DlqReason::Undecodable,
                    state.error.clone(),
                    now,
                );
                Payload::Dlq(Box::new(copy.envelope))
            }
            Effect::PutSchedule { state, .. } => Payload::Schedule(state.clone()),
            Effect::PutCorrelation { state, .. } => Payload::Correlation(state.clone()),
            Effect::PutRemembered { key, event_id, at } => {
                Payload::Remembered(at.map(|at| crate::correlation::RememberedEvent {
                    key: key.clone(),
                    forwarded: crate::correlation::Forwarded {
                        event_id: event_id.clone(),
                        at,
                    },
                }))
            }
            Effect::Correlation(command) => Payload::CorrelationCommand(command.clone()),
            Effect::ForwardEvent(event) => Payload::Event(event.clone()),
            Effect::ReturnEvent(event) => Payload::KeyedEvent(event.clone()),
            Effect::WriteStub(write) => Payload::StubWrite(write.clone()),
            Effect::ScheduleCommand(command) => Payload::ScheduleCommand(command.clone()),
            // Routed above: no record.
            Effect::PutTimer(_) | Effect::DeleteTimer(_) => return,
        };
        let partition = if topic == Topic::Dlq {
            0
        } else {
            self.cluster.partition_for(topic, &partitioned_by)
        };
        let bytes = match &payload {
            Payload::History(record) => self.codec.encode(record),
            payload => encode(payload),
        };
        let offset = self.cluster.append(
            topic,
            partition,
            Some(key),
            address.kind,
            payload,
            bytes.clone(),
            producer,
            Some(txn),
            now,
        );
        if topic == Topic::History {
            landed.push(Landed {
                partition,
                offset,
                bytes,
            });
            return;
        }
        if let Some(not_before) = not_before {
            self.act
                .log
                .headers
                .insert((topic, partition, offset), not_before);
        }
        // What a correlation key does is read from the records (the processor traces it only
        // through `tracing`).
        let what = match effect {
            Effect::Correlation(c) => Some(format!(
                "{} {} for `{}`",
                c.action.as_str(),
                c.execution_id,
                c.key
            )),
            Effect::ForwardEvent(e) => Some(format!(
                "forward {} of `{}` to {}",
                e.event.event_id,
                e.correlation_key.as_deref().unwrap_or_default(),
                e.target
            )),
            Effect::ReturnEvent(e) => Some(format!(
                "return {} of `{}` by {}",
                e.event.event_id,
                e.key,
                e.returned_by
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string)
            )),
            Effect::PutCorrelation { key, state } => Some(format!(
                "state of `{key}`: {}",
                state.as_ref().map_or_else(
                    || "forgotten".to_owned(),
                    |s| format!(
                        "holders {:?}, buffered {:?}",
                        s.holders
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>(),
                        s.buffered
                            .iter()
                            .map(|b| b.event.event_id.as_str())
                            .collect::<Vec<_>>()
                    )
                )
            )),
            _ => None,
        };
        if let Some(what) = what {
            let name = self.procs[&pid].name();
            self.event(format!(
                "{name}: txn {txn}: {what} -> {}/{partition}@{offset}",
                topic.name()
            ));
        }
    }

    /// `send_offsets_to_transaction` (nothing to send: nothing is checked).
    pub fn commit_offsets(
        &mut self,
        pid: u64,
        txn: u64,
        offsets: &[(InputTopic, i32, i64)],
    ) -> Result<(), CommitError> {
        let (tid, epoch, member, generation) = {
            let p = &self.procs[&pid];
            (
                p.transactional_id.clone(),
                p.epoch,
                p.consumer.member,
                p.consumer.generation,
            )
        };
        if let Err(e) = self.cluster.check_open(txn, &tid, epoch) {
            return Err(self.refused(pid, e));
        }
        if offsets.is_empty() {
            return Ok(());
        }
        match self.cluster.send_offsets(txn, offsets, member, generation) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.refused(pid, e)),
        }
    }

    /// `commit_transaction`.
    pub fn commit_end(&mut self, pid: u64, txn: u64) -> Result<(), CommitError> {
        let (tid, epoch, name) = {
            let p = &self.procs[&pid];
            (p.transactional_id.clone(), p.epoch, p.name())
        };
        if let Err(e) = self.cluster.check_open(txn, &tid, epoch) {
            return Err(self.refused(pid, e));
        }
        let Some(done) = self.cluster.end(txn, true, self.now) else {
            return Err(self.refused(
                pid,
                TxnRefused::Fenced(format!("transaction {txn} vanished")),
            ));
        };
        self.proc(pid).open_txn = None;
        self.proc(pid).commits += 1;
        self.stats.commits += 1;
        if self.store.available(self.now).is_err() {
            self.stats.commits_while_store_down += 1;
        }
        let member = self.procs[&pid].consumer.member;
        let current = member.is_some_and(|m| {
            self.cluster
                .group
                .is_current(m, self.procs[&pid].consumer.generation)
        });
        if !current {
            let owned = self.procs[&pid].consumer.owned.clone();
            let (tag, what) = if done.offsets.is_empty() {
                (
                    "item-2-unfenced-commit",
                    "a batch without input offsets (due timers only): nothing checked the generation",
                )
            } else {
                (
                    "item-1-commit-after-reassignment",
                    "its offsets were accepted before the group moved on; the new owner may have caught up already",
                )
            };
            self.finding(
                tag,
                format!(
                    "{name} (owns {owned:?} as of generation {}, the group is at {}) commits txn {txn} with {} records: {what}",
                    self.procs[&pid].consumer.generation,
                    self.cluster.group.generation,
                    done.written.len()
                ),
            );
        }
        self.event(format!(
            "{name}: committed txn {txn}: {} records, offsets {:?}{}",
            done.written.len(),
            done.offsets,
            if current {
                ""
            } else {
                " — by a member the group no longer has in this generation"
            }
        ));
        Ok(())
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
            let payload = Payload::Response(Response::ChildExecutionFinished {
                child_execution_id: answer.child,
                result: answer.result,
            });
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
        (RecordType::StubWrite, Some(Payload::StubWrite(w))) => Ok(Body::StubWrite(w.clone())),
        (RecordType::UpgradeRequest, Some(Payload::Upgrade(u))) => Ok(Body::Upgrade(u.clone())),
        (expected, other) => Err(undecodable(format!(
            "not a {expected:?}, as its topic and kind say: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::cluster::State;
    use crate::wire::examples;

    fn world_with_a_worker(start: SimTime) -> World {
        let mut world = World::new(SimConfig::default(), Faults::none(), Rng::new(1), start);
        let epoch = world.cluster.init_producer("w0", start);
        world.procs.insert(
            1,
            Proc {
                pid: 1,
                slot: 0,
                instance: "w0-p1".into(),
                status: Status::Running,
                transactional_id: "w0".into(),
                epoch,
                consumer: Consumer::default(),
                mat: MaterialiserQueue::default(),
                at: "start",
                idle: false,
                shutdown: false,
                open_txn: None,
                commits: 0,
                refused: false,
            },
        );
        world
    }

    /// The simulation's producer routes every effect by `wire::address` (the worker's
    /// encoder does too: `weir::kafka::encode`'s tests): each record lands on the topic, with
    /// the key and kind, the table gives, and its reader takes it for what it was written
    /// as. Changing the table, or routing here by anything else, fails this.
    #[test]
    fn the_simulated_producer_appends_where_the_wire_table_says() {
        let start = chrono::DateTime::from_timestamp_millis(1_767_225_600_000).expect("a time");
        let mut world = world_with_a_worker(start);
        // The input a dead letter copies.
        world.proc(1).consumer.last_poll.push(PolledCopy {
            topic: Topic::Submissions,
            partition: 0,
            offset: 7,
            key: Some("poison".into()),
            bytes: b"not Avro".to_vec(),
            timestamp: start,
        });
        let effects = examples::one_of_each(start);
        let (txn, landed) = world.commit_begin(1, &effects).expect("a transaction");
        let written: Vec<(Topic, i32, &Record)> = world.cluster.txns[&txn]
            .written
            .iter()
            .map(|&(topic, partition, offset)| {
                (
                    topic,
                    partition,
                    &world.cluster.log(topic, partition)[offset as usize],
                )
            })
            .collect();
        let expected: Vec<(Topic, i32, Option<String>, Option<RecordKind>)> = effects
            .iter()
            .filter_map(|effect| wire::address(effect).expect("an address"))
            // The simulated activity service is not told of cancellations (see `produce`).
            .filter(|address| address.kind != Some(RecordKind::Cancel))
            .map(|address| {
                let (key, partitioned_by) = match &address.key {
                    Key::OfInput(0) => ("poison", "poison"),
                    Key::OfInput(other) => panic!("no input {other}"),
                    key => (
                        key.exact().expect("a key"),
                        key.partitioned_by().expect("a key"),
                    ),
                };
                let topic = Topic::of_destination(&address.destination);
                let partition = if topic == Topic::Dlq {
                    0
                } else {
                    world.cluster.partition_for(topic, partitioned_by)
                };
                (topic, partition, Some(key.to_owned()), address.kind)
            })
            .collect();
        let appended: Vec<(Topic, i32, Option<String>, Option<RecordKind>)> = written
            .iter()
            .map(|(topic, partition, record)| (*topic, *partition, record.key.clone(), record.kind))
            .collect();
        assert_eq!(appended, expected);
        for (topic, partition, record) in &written {
            assert_eq!(record.state, State::Pending(txn));
            if *topic != Topic::Dlq {
                // On its key's partition; an id a correlation key remembers, on the key's.
                let key = record.key.as_deref().expect("a key");
                let home = match crate::state_key::StateKey::parse(key) {
                    Ok(crate::state_key::StateKey::Remembered { key, .. }) => key,
                    _ => key.to_owned(),
                };
                assert_eq!(
                    *partition,
                    world.cluster.partition_for(*topic, &home),
                    "{key}"
                );
            }
            // Every record on an input topic reads back as an input.
            let input = match topic {
                Topic::Submissions => Some(InputTopic::Submissions),
                Topic::Responses => Some(InputTopic::Responses),
                Topic::Events => Some(InputTopic::Events),
                _ => None,
            };
            if let Some(input) = input {
                assert!(decode(input, record).is_ok(), "{record:?}");
            }
        }
        assert_eq!(landed.len(), 1, "the one history record");
        assert!(world.anomalies.is_empty(), "{:?}", world.anomalies);
    }

    /// A record is read as what its topic and kind say, as the worker's decoder reads it: a
    /// command without its kind is not taken for one.
    #[test]
    fn the_simulated_decoder_reads_by_topic_and_kind() {
        let start = chrono::DateTime::from_timestamp_millis(1_767_225_600_000).expect("a time");
        let command = crate::schedule::ScheduleCommand {
            name: "nightly".into(),
            command_id: "c-1".into(),
            action: crate::schedule::ScheduleAction::Pause,
            sent_at: start,
        };
        let record = |kind| Record {
            offset: 0,
            key: Some("schedule:nightly".into()),
            kind,
            payload: Some(Payload::ScheduleCommand(command.clone())),
            bytes: Vec::new(),
            producer: Producer::Client,
            state: State::Committed,
            timestamp: start,
        };
        assert_eq!(
            decode(InputTopic::Responses, &record(Some(RecordKind::Schedule))),
            Ok(Body::Schedule(command.clone()))
        );
        assert!(decode(InputTopic::Responses, &record(None)).is_err());
        assert!(decode(InputTopic::Submissions, &record(Some(RecordKind::Schedule))).is_err());
    }
}
