//! The simulated Kafka cluster: partitioned topics, transactional producers, `read_committed`
//! visibility up to the last stable offset, committed offsets, and a consumer group with
//! generations. Plain data and rules; the seams in `world.rs` drive it.
//!
//! What is modelled as Kafka does it:
//! - A transactional record is in the log (it has its offset) from the moment it is produced;
//!   a `read_committed` reader sees it only once its transaction commits, and sees nothing at
//!   or beyond a partition's *last stable offset* (the first offset of a still open
//!   transaction on it), committed or not. Commit and abort write a control marker on every
//!   partition of the transaction (offsets have gaps for a consumer).
//! - `TxnOffsetCommit` (`send_offsets_to_transaction`) is validated against the group when it
//!   is sent: an unknown member or an older generation is refused. A transaction that sends no
//!   offsets is never checked against the group.
//! - Re-registering a transactional id bumps its epoch and aborts its open transaction (the
//!   old producer is fenced). The coordinator aborts a transaction open longer than the
//!   transaction timeout and bumps the epoch too (the producer's next call is fenced).
//! - Fetching committed offsets "as stable" (KIP-447) is not possible while an open
//!   transaction holds offsets for the partition.
//! - The group runs the eager protocol: a rebalance starts when a member joins, leaves or
//!   expires; every member must rejoin (from its poll, which first revokes everything it
//!   owns) before the new generation is handed out; a member that does not rejoin within the
//!   rebalance timeout, or does not heartbeat within the session timeout (frozen or dead), is
//!   removed. Assignment is `range` over the co-partitioned input topics.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use crate::driver::{InputTopic, Position};
use crate::model::Response;
use crate::records::{
    ActivityRequest, CancelRequest, DlqEnvelope, ExecutionFinished, HistoryRecord, InboundEvent,
    Submission,
};
use crate::schedule::{ScheduleCommand, ScheduleState};
use crate::wire::{Destination, RecordKind, TopicRole};

mod group;

pub use group::{Group, Member, range_assignment};

pub type SimTime = DateTime<Utc>;

/// A topic of the simulated cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Topic {
    Submissions,
    Responses,
    Events,
    History,
    Results,
    Activity,
    Dlq,
    /// `weir.state`: the schedules' states (compaction is modelled by readers taking the
    /// last record per key).
    State,
    /// An external route's topic (`Faults::activity_workers`): requests the activity workers
    /// watch until their deadline and an outside service answers; as many partitions as
    /// [`Topic::Activity`].
    External,
    /// `weir.control`: fleet controls (paused routes), one partition, read whole.
    Control,
    /// `weir.answers`: answers to queries (`Faults::queries`).
    Answers,
}

impl Topic {
    pub const ALL: [Topic; 11] = [
        Topic::Submissions,
        Topic::Responses,
        Topic::Events,
        Topic::History,
        Topic::Results,
        Topic::Activity,
        Topic::Dlq,
        Topic::State,
        Topic::External,
        Topic::Control,
        Topic::Answers,
    ];

    /// The route topics the activity workers consume.
    pub const ROUTES: [Topic; 2] = [Topic::Activity, Topic::External];

    pub fn name(self) -> &'static str {
        match self {
            Topic::Submissions => "weir.submissions",
            Topic::Responses => "weir.responses",
            Topic::Events => "weir.events",
            Topic::History => "weir.history",
            Topic::Results => "weir.results",
            Topic::Activity => "weir.activity.sim",
            Topic::Dlq => "weir.dlq",
            Topic::State => "weir.state",
            Topic::External => "weir.activity.ext",
            Topic::Control => "weir.control",
            Topic::Answers => "weir.answers",
        }
    }

    pub fn of_input(topic: InputTopic) -> Topic {
        Topic::of_role(topic.into())
    }

    /// The simulated topic of `role` (every activity route's requests share one topic).
    pub fn of_role(role: TopicRole) -> Topic {
        match role {
            TopicRole::Submissions => Topic::Submissions,
            TopicRole::Responses => Topic::Responses,
            TopicRole::Events => Topic::Events,
            TopicRole::History => Topic::History,
            TopicRole::Results => Topic::Results,
            TopicRole::Activity => Topic::Activity,
            TopicRole::Dlq => Topic::Dlq,
            TopicRole::State => Topic::State,
            TopicRole::Control => Topic::Control,
            TopicRole::Answers => Topic::Answers,
        }
    }

    /// The simulated topic a record of [`crate::wire::address`] goes to.
    pub fn of_destination(destination: &Destination) -> Topic {
        Topic::of_role(destination.role())
    }

    /// The role of the topic (the inverse of [`Topic::of_role`]).
    pub fn role(self) -> TopicRole {
        match self {
            Topic::Submissions => TopicRole::Submissions,
            Topic::Responses => TopicRole::Responses,
            Topic::Events => TopicRole::Events,
            Topic::History => TopicRole::History,
            Topic::Results => TopicRole::Results,
            Topic::Activity => TopicRole::Activity,
            Topic::Dlq => TopicRole::Dlq,
            Topic::State => TopicRole::State,
            Topic::External => TopicRole::Activity,
            Topic::Control => TopicRole::Control,
            Topic::Answers => TopicRole::Answers,
        }
    }
}

/// A record's value, decoded (the simulation keeps values as the types they encode).
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Submission(Submission),
    Response(Response),
    Event(InboundEvent),
    Cancel(CancelRequest),
    History(HistoryRecord),
    Activity(ActivityRequest),
    Result(ExecutionFinished),
    Dlq(Box<DlqEnvelope>),
    /// A schedule's state on `weir.state` (`None`: a tombstone).
    Schedule(Option<ScheduleState>),
    /// A command about a schedule, on `weir.responses`.
    ScheduleCommand(ScheduleCommand),
    /// A batch operation's state on `weir.state` (`None`: a tombstone).
    Batch(Option<crate::batch::BatchState>),
    /// One turn's outcomes of a batch operation, on `weir.state`.
    BatchOutcomes(Vec<crate::batch::ExecutionOutcome>),
    /// A command about a batch operation, on `weir.responses`.
    BatchCommand(crate::batch::BatchCommand),
    /// A correlation key's state on `weir.state` (`None`: a tombstone).
    Correlation(Option<crate::correlation::CorrelationState>),
    /// An event id a correlation key remembers, on `weir.state` (`None`: a tombstone).
    Remembered(Option<crate::correlation::RememberedEvent>),
    /// A registration of a correlation key or the end of one, on `weir.responses`.
    CorrelationCommand(crate::correlation::CorrelationCommand),
    /// A concurrency slot's command, on `weir.responses` ([`crate::concurrency`]).
    SlotCommand(crate::concurrency::SlotCommand),
    /// A concurrency slot's state on `weir.state` (`None`: a tombstone).
    Slot(Option<crate::concurrency::SlotState>),
    /// An event sent to a correlation key, on `weir.events`.
    KeyedEvent(crate::correlation::KeyedEvent),
    /// A workflow writing another execution's stub, on `weir.responses`.
    StubWrite(crate::processor::StubWrite),
    /// A request to move an execution to another build (`weir upgrade`), on `weir.responses`.
    Upgrade(crate::records::UpgradeRequest),
    /// A request to pause or resume an execution (`weir pause`, `weir resume`), on
    /// `weir.responses`.
    Pause(crate::records::PauseRequest),
    /// A request to reset an execution (`weir reset`), on `weir.responses`.
    Reset(crate::records::ResetRequest),
    /// The start of an execution made by a reset, on `weir.submissions`.
    ResetStart(crate::records::ResetStart),
    /// A paused route on `weir.control`, keyed `route:<request topic>` (`None`: a tombstone,
    /// resumed; `Faults::route_pauses`).
    RoutePause(Option<crate::control::RoutePause>),
    /// A parent closed the join set of an unawaited activity (`Faults::activity_workers`):
    /// on the activity topic, keyed by the activity, after its request.
    ActivityCancel(crate::records::ActivityCancel),
    /// A parent resumed while it waits for the activity (`Faults::exhausted_pauses`): a retry
    /// notice on the activity topic, keyed by the activity, after its request.
    ActivityRetry(crate::records::ActivityRetry),
    /// A query of an execution (`Faults::queries`), on `weir.responses`.
    Query(crate::query::QueryRequest),
    /// The answer to a query, on `weir.answers`.
    Answer(crate::query::QueryAnswer),
    /// Bytes no codec can read (a poison record).
    Garbage(String),
}

/// Who wrote a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// A client submitting top-level executions (not transactional).
    Client,
    /// The simulated activity service (not transactional).
    ActivityService,
    /// A workflow worker process.
    Worker { pid: u64 },
    /// An activity worker process (`Faults::activity_workers`).
    ActivityWorker { pid: u64 },
    /// A trigger worker process (`Faults::triggers`).
    TriggerWorker { pid: u64 },
}

/// A record of the trigger's source topic (`Faults::triggers`): another system's topic,
/// written by that system (never transactionally), read by the trigger workers' group.
#[derive(Debug, Clone)]
pub struct SourceRecord {
    pub offset: i64,
    pub key: Option<String>,
    pub value: Vec<u8>,
    pub timestamp: SimTime,
}

/// Where a record stands for a `read_committed` reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Committed,
    /// Written by the open transaction with this number.
    Pending(u64),
    Aborted,
    /// A commit or abort marker: takes an offset, never delivered.
    Marker,
}

#[derive(Debug, Clone)]
pub struct Record {
    pub offset: i64,
    pub key: Option<String>,
    /// Its `weir.kind` header ([`crate::wire::KIND_HEADER`]): what its reader takes it for.
    pub kind: Option<RecordKind>,
    /// `None` for markers.
    pub payload: Option<Payload>,
    /// The value's bytes (what the DLQ copies, what history rows keep).
    pub bytes: Vec<u8>,
    pub producer: Producer,
    pub state: State,
    pub timestamp: SimTime,
}

impl Record {
    pub fn visible(&self) -> bool {
        self.state == State::Committed && self.payload.is_some()
    }
}

/// An open transaction.
#[derive(Debug, Clone)]
pub struct Txn {
    pub number: u64,
    pub transactional_id: String,
    pub pid: u64,
    pub started_at: SimTime,
    /// Per partition written: the first offset (what holds the LSO back).
    pub first: BTreeMap<(Topic, i32), i64>,
    /// Every record written, by (topic, partition, offset).
    pub written: Vec<(Topic, i32, i64)>,
    /// Offsets sent with `send_offsets_to_transaction` (held until the end of the
    /// transaction; KIP-447 readers wait for them).
    pub offsets: Vec<Position>,
    /// How far its worker had read each submissions partition when it sent the offsets
    /// (the offset after the last record polled): what the fairness check compares the
    /// creations of the transaction with.
    pub read: BTreeMap<i32, i64>,
    /// The group generation its offsets were sent with.
    pub generation: Option<u64>,
    /// How many times its worker had rewound (taken over) when it sent them: with `pid`,
    /// what the worker held in memory is of that one take-over.
    pub rewinds: u64,
    /// Offsets of the trigger workers' group in the source topic sent with the transaction.
    pub source_offsets: Vec<(i32, i64)>,
}

#[derive(Debug, Clone, Default)]
pub struct ProducerId {
    pub epoch: u32,
    pub open: Option<u64>,
}

/// Why the transaction coordinator refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRefused {
    /// The producer's epoch is old (re-registered or its transaction timed out).
    Fenced(String),
    /// The offsets carry an unknown member or an old generation.
    Generation(String),
}

/// A value's bytes as the simulation writes them (its "encoding"): the value's `Debug` text.
pub(super) fn encode<T: std::fmt::Debug>(value: &T) -> Vec<u8> {
    format!("{value:?}").into_bytes()
}

/// Partitions of the trigger's source topic.
pub const SOURCE_PARTITIONS: i32 = 2;

/// The topics, their records, the transactions and the groups.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub topics: BTreeMap<Topic, Vec<Vec<Record>>>,
    pub txns: BTreeMap<u64, Txn>,
    pub producers: BTreeMap<String, ProducerId>,
    pub group: Group,
    /// The activity workers' group (`Faults::activity_workers`), over the partitions of
    /// the route topics ([`Topic::ROUTES`], co-partitioned).
    pub activity_group: Group,
    /// The activity workers' committed offsets, with their metadata.
    pub route_committed: BTreeMap<(Topic, i32), (i64, String)>,
    /// The trigger's source topic (`Faults::triggers`), by partition.
    pub source: Vec<Vec<SourceRecord>>,
    /// The trigger workers' group, over the source topic's partitions.
    pub trigger_group: Group,
    /// The trigger workers' committed offsets in the source topic.
    pub source_committed: BTreeMap<i32, i64>,
    /// The workflow workers' committed transactions with input offsets, in commit order
    /// (what the fairness check reads).
    pub committed_txns: Vec<Txn>,
    next_txn: u64,
}

impl Cluster {
    pub fn new(partitions: i32, activity_partitions: i32) -> Self {
        let topics = Topic::ALL
            .into_iter()
            .map(|t| {
                let n = match t {
                    Topic::Activity | Topic::External => activity_partitions,
                    Topic::Dlq | Topic::Control => 1,
                    _ => partitions,
                };
                (t, (0..n).map(|_| Vec::new()).collect())
            })
            .collect();
        Cluster {
            topics,
            txns: BTreeMap::new(),
            producers: BTreeMap::new(),
            group: Group::new(partitions),
            activity_group: Group::new(activity_partitions),
            source: (0..SOURCE_PARTITIONS).map(|_| Vec::new()).collect(),
            trigger_group: Group::new(SOURCE_PARTITIONS),
            source_committed: BTreeMap::new(),
            route_committed: BTreeMap::new(),
            committed_txns: Vec::new(),
            next_txn: 1,
        }
    }

    pub fn partitions(&self, topic: Topic) -> i32 {
        self.topics[&topic].len() as i32
    }

    /// The partition of `key` (murmur2, as every Weir producer computes it).
    pub fn partition_for(&self, topic: Topic, key: &str) -> i32 {
        crate::partitioner::partition_for_key(key.as_bytes(), self.partitions(topic))
    }

    pub fn log(&self, topic: Topic, partition: i32) -> &[Record] {
        &self.topics[&topic][partition as usize]
    }

    /// The last stable offset: nothing at or beyond it is readable under `read_committed`.
    pub fn lso(&self, topic: Topic, partition: i32) -> i64 {
        self.txns
            .values()
            .filter_map(|t| t.first.get(&(topic, partition)).copied())
            .min()
            .unwrap_or(self.log(topic, partition).len() as i64)
    }

    /// Records a `read_committed` reader gets from `from` (at most `max`), and the position
    /// after them.
    pub fn read_committed(
        &self,
        topic: Topic,
        partition: i32,
        from: i64,
        max: usize,
    ) -> (Vec<&Record>, i64) {
        let lso = self.lso(topic, partition);
        let log = self.log(topic, partition);
        let mut out = Vec::new();
        let mut position = from.max(0);
        while position < lso && out.len() < max {
            let record = &log[position as usize];
            if record.visible() {
                out.push(record);
            }
            position += 1;
        }
        (out, position)
    }

    /// Every record `read_committed` can see now, of every partition of `topic`.
    pub fn committed_records(&self, topic: Topic) -> impl Iterator<Item = (i32, &Record)> {
        (0..self.partitions(topic)).flat_map(move |p| {
            let lso = self.lso(topic, p);
            self.log(topic, p)
                .iter()
                .take(lso as usize)
                .filter(|r| r.visible())
                .map(move |r| (p, r))
        })
    }

    /// Appends a record (pending in `txn`, if given); returns its offset.
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        topic: Topic,
        partition: i32,
        key: Option<String>,
        kind: Option<RecordKind>,
        payload: Payload,
        bytes: Vec<u8>,
        producer: Producer,
        txn: Option<u64>,
        now: SimTime,
    ) -> i64 {
        let log = &mut self.topics.get_mut(&topic).expect("a topic")[partition as usize];
        let offset = log.len() as i64;
        log.push(Record {
            offset,
            key,
            kind,
            payload: Some(payload),
            bytes,
            producer,
            state: txn.map_or(State::Committed, State::Pending),
            timestamp: now,
        });
        if let Some(number) = txn
            && let Some(t) = self.txns.get_mut(&number)
        {
            t.first.entry((topic, partition)).or_insert(offset);
            t.written.push((topic, partition, offset));
        }
        offset
    }

    /// `init_transactions`: registers `transactional_id`, fencing an earlier producer with
    /// the same id (its open transaction is aborted). Returns the epoch.
    pub fn init_producer(&mut self, transactional_id: &str, now: SimTime) -> u32 {
        let existing = self.producers.get(transactional_id).cloned();
        match existing {
            None => {
                self.producers
                    .insert(transactional_id.to_owned(), ProducerId::default());
                0
            }
            Some(p) => {
                if let Some(open) = p.open {
                    self.end(open, false, now);
                }
                let entry = self
                    .producers
                    .get_mut(transactional_id)
                    .expect("registered");
                entry.epoch += 1;
                entry.epoch
            }
        }
    }

    fn check_epoch(&self, transactional_id: &str, epoch: u32) -> Result<(), TxnRefused> {
        match self.producers.get(transactional_id) {
            Some(p) if p.epoch == epoch => Ok(()),
            _ => Err(TxnRefused::Fenced(format!(
                "PRODUCER_FENCED: {transactional_id} epoch {epoch} is no longer current"
            ))),
        }
    }

    /// Begins a transaction (the first produce of a batch).
    pub fn begin(
        &mut self,
        transactional_id: &str,
        epoch: u32,
        pid: u64,
        now: SimTime,
    ) -> Result<u64, TxnRefused> {
        self.check_epoch(transactional_id, epoch)?;
        let number = self.next_txn;
        self.next_txn += 1;
        self.txns.insert(
            number,
            Txn {
                number,
                transactional_id: transactional_id.to_owned(),
                pid,
                started_at: now,
                first: BTreeMap::new(),
                written: Vec::new(),
                offsets: Vec::new(),
                read: BTreeMap::new(),
                generation: None,
                rewinds: 0,
                source_offsets: Vec::new(),
            },
        );
        if let Some(p) = self.producers.get_mut(transactional_id) {
            p.open = Some(number);
        }
        Ok(number)
    }

    /// Whether transaction `number` is still open for this producer epoch.
    pub fn check_open(
        &self,
        number: u64,
        transactional_id: &str,
        epoch: u32,
    ) -> Result<(), TxnRefused> {
        self.check_epoch(transactional_id, epoch)?;
        if self.txns.contains_key(&number) {
            Ok(())
        } else {
            Err(TxnRefused::Fenced(format!(
                "transaction {number} of {transactional_id} is no longer open (aborted by the coordinator)"
            )))
        }
    }

    /// `send_offsets_to_transaction` with the consumer's group metadata.
    pub fn send_offsets(
        &mut self,
        number: u64,
        offsets: &[Position],
        (read, rewinds): (&BTreeMap<i32, i64>, u64),
        member: Option<u64>,
        generation: u64,
    ) -> Result<(), TxnRefused> {
        let Some(member) = member.filter(|m| self.group.members.contains_key(m)) else {
            return Err(TxnRefused::Generation(format!(
                "UNKNOWN_MEMBER_ID: member {member:?} is not in the group"
            )));
        };
        if generation != self.group.generation {
            return Err(TxnRefused::Generation(format!(
                "ILLEGAL_GENERATION: member {member} sent generation {generation}, the group is at {}",
                self.group.generation
            )));
        }
        if let Some(t) = self.txns.get_mut(&number) {
            t.offsets.extend_from_slice(offsets);
            t.read.extend(read);
            t.generation = Some(generation);
            t.rewinds = rewinds;
        }
        Ok(())
    }

    /// An activity worker's offset commit (outside any transaction, as the consumer commits
    /// it): validated against the activity workers' group and applied at once.
    pub fn commit_route_offsets(
        &mut self,
        offsets: &[(Topic, i32, i64, String)],
        member: Option<u64>,
        generation: u64,
    ) -> Result<(), TxnRefused> {
        let group = &self.activity_group;
        let Some(member) = member.filter(|m| group.members.contains_key(m)) else {
            return Err(TxnRefused::Generation(format!(
                "UNKNOWN_MEMBER_ID: member {member:?} is not in the activity workers' group"
            )));
        };
        if generation != group.generation {
            return Err(TxnRefused::Generation(format!(
                "ILLEGAL_GENERATION: member {member} sent generation {generation}, the activity workers' group is at {}",
                group.generation
            )));
        }
        for (topic, partition, offset, metadata) in offsets {
            self.route_committed
                .insert((*topic, *partition), (*offset, metadata.clone()));
        }
        Ok(())
    }

    /// `send_offsets_to_transaction` of a trigger worker: validated against the trigger
    /// workers' group.
    pub fn send_source_offsets(
        &mut self,
        number: u64,
        offsets: &[(i32, i64)],
        member: Option<u64>,
        generation: u64,
    ) -> Result<(), TxnRefused> {
        let group = &self.trigger_group;
        let Some(member) = member.filter(|m| group.members.contains_key(m)) else {
            return Err(TxnRefused::Generation(format!(
                "UNKNOWN_MEMBER_ID: member {member:?} is not in the trigger workers' group"
            )));
        };
        if generation != group.generation {
            return Err(TxnRefused::Generation(format!(
                "ILLEGAL_GENERATION: member {member} sent generation {generation}, the trigger workers' group is at {}",
                group.generation
            )));
        }
        if let Some(t) = self.txns.get_mut(&number) {
            t.source_offsets.extend_from_slice(offsets);
        }
        Ok(())
    }

    /// Whether an open transaction holds source offsets of the trigger workers' group for
    /// one of `partitions` (a stable fetch of them must wait).
    pub fn source_offsets_pending(&self, partitions: &BTreeSet<i32>) -> Option<u64> {
        self.txns
            .values()
            .find(|t| t.source_offsets.iter().any(|(p, _)| partitions.contains(p)))
            .map(|t| t.number)
    }

    /// Appends a record to the source topic (by its writer, not transactional).
    pub fn append_source(
        &mut self,
        key: Option<String>,
        value: Vec<u8>,
        now: SimTime,
    ) -> (i32, i64) {
        let partition = match &key {
            Some(key) => crate::partitioner::partition_for_key(key.as_bytes(), SOURCE_PARTITIONS),
            None => 0,
        };
        let log = &mut self.source[partition as usize];
        let offset = log.len() as i64;
        log.push(SourceRecord {
            offset,
            key,
            value,
            timestamp: now,
        });
        (partition, offset)
    }

    /// Commits or aborts an open transaction: markers on its partitions, its offsets
    /// committed (on commit). Returns the transaction, if it was open.
    pub fn end(&mut self, number: u64, commit: bool, now: SimTime) -> Option<Txn> {
        let txn = self.txns.remove(&number)?;
        let state = if commit {
            State::Committed
        } else {
            State::Aborted
        };
        for &(topic, partition, offset) in &txn.written {
            let log = &mut self.topics.get_mut(&topic).expect("a topic")[partition as usize];
            log[offset as usize].state = state;
        }
        for &(topic, partition) in txn.first.keys() {
            let log = &mut self.topics.get_mut(&topic).expect("a topic")[partition as usize];
            let offset = log.len() as i64;
            log.push(Record {
                offset,
                key: None,
                kind: None,
                payload: None,
                bytes: Vec::new(),
                producer: Producer::Worker { pid: txn.pid },
                state: State::Marker,
                timestamp: now,
            });
        }
        if commit {
            for position in &txn.offsets {
                let key = (position.topic, position.partition);
                self.group.committed.insert(key, position.offset);
                self.group
                    .committed_metadata
                    .insert(key, position.metadata.clone());
            }
            for &(partition, offset) in &txn.source_offsets {
                self.source_committed.insert(partition, offset);
            }
            if txn.generation.is_some() {
                self.committed_txns.push(txn.clone());
            }
        }
        if let Some(p) = self.producers.get_mut(&txn.transactional_id)
            && p.open == Some(number)
        {
            p.open = None;
        }
        Some(txn)
    }

    /// Aborts the transactions open for `timeout` or longer and bumps their producers'
    /// epochs; returns them.
    pub fn expire_transactions(&mut self, now: SimTime, timeout: Duration) -> Vec<Txn> {
        let expired: Vec<u64> = self
            .txns
            .values()
            .filter(|t| now - t.started_at >= timeout)
            .map(|t| t.number)
            .collect();
        let mut out = Vec::new();
        for number in expired {
            if let Some(txn) = self.end(number, false, now) {
                if let Some(p) = self.producers.get_mut(&txn.transactional_id) {
                    p.epoch += 1;
                }
                out.push(txn);
            }
        }
        out
    }

    pub fn next_transaction_deadline(&self, timeout: Duration) -> Option<SimTime> {
        self.txns.values().map(|t| t.started_at + timeout).min()
    }

    /// Whether an open transaction holds offsets for one of `partitions` of the input topics
    /// (a stable fetch of committed offsets must wait).
    pub fn offsets_pending(&self, partitions: &BTreeSet<i32>) -> Option<u64> {
        self.txns
            .values()
            .find(|t| t.offsets.iter().any(|p| partitions.contains(&p.partition)))
            .map(|t| t.number)
    }

    /// The committed offset of `partition` of `topic` and its metadata.
    pub fn committed_position(&self, topic: InputTopic, partition: i32) -> Position {
        Position {
            topic,
            partition,
            offset: self.committed_offset(topic, partition),
            metadata: self
                .group
                .committed_metadata
                .get(&(topic, partition))
                .cloned()
                .unwrap_or_default(),
        }
    }

    pub fn committed_offset(&self, topic: InputTopic, partition: i32) -> i64 {
        self.group
            .committed
            .get(&(topic, partition))
            .copied()
            .unwrap_or(0)
    }
}
