//! The simulated trigger workers (`Faults::triggers`): another system writes records to its
//! own topic (the source, [`SOURCE_TOPIC`]), and trigger worker processes in their own group
//! turn each into what the trigger says — by [`crate::trigger`], the code the real trigger
//! worker runs — and commit that with the source offsets in one transaction, as
//! `weir::kafka::trigger_worker` does: a batch is produced in one turn and committed in a
//! later one, so a process can be killed or frozen inside its transaction.
//!
//! What a mapped record becomes is an [`Effect`] routed by [`wire::address`] (the routing of
//! every writer), and it passes the trigger's size gate ([`oversize`]) against the
//! simulation's record limit ([`SIM_RECORD_LIMIT`]); a record over it produced anyway is an
//! anomaly, as the real producer would fail the transaction for ever. Faults: kills inside
//! the transaction (the restarted process fences it), zombies (a frozen member removed from
//! the group while its transaction holds offsets: the next owner's stable fetch waits for it),
//! and an operator resetting the group's offsets to the earliest (every record read again:
//! the same submissions, which the workflow workers take once).

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;

use super::cluster::{Payload, Producer, SOURCE_PARTITIONS, SimTime, SourceRecord, Topic};
use super::process::Status;
use super::workflows::Workflow;
use super::world::{World, encode};
use crate::processor::Effect;
use crate::records::{DlqEnvelope, DlqReason};
use crate::trigger::{self, Action, Format, Source, Trigger, oversize};
use crate::wire::{self, Key};

/// The source topic's name.
pub const SOURCE_TOPIC: &str = "shop.orders";

/// The deployment's namespace (identities are derived within it).
const NAMESPACE: &str = "sim";

/// The simulation's stand-in for the producer's record limit (and for what a workflow worker
/// takes): small, so that a record the source's writer pads is over it.
pub const SIM_RECORD_LIMIT: usize = 2_048;

/// The trigger of the run: every source record starts a `seq [n, base]` from its fields; its
/// identity is its `/id` field (`by_field`: the writer's retries are the same record) or its
/// topic, partition and offset.
pub fn sim_trigger(by_field: bool) -> Trigger {
    Trigger {
        name: "orders".to_owned(),
        topic: SOURCE_TOPIC.to_owned(),
        format: Format::Json,
        action: Action::Start {
            ffqn: Workflow::Seq.ffqn(),
            params: vec![
                Source::Value("/n".to_owned()),
                Source::Value("/base".to_owned()),
            ],
        },
        identity: by_field.then(|| Source::Value("/id".to_owned())),
    }
}

/// What the trigger makes of a source record at `partition`/`offset`: the effect to produce,
/// or why the record is dead-lettered (the mapping's or the size gate's reason).
pub fn decide(
    trigger: &Trigger,
    partition: i32,
    record: &SourceRecord,
    now: SimTime,
) -> Result<Effect, (DlqReason, String)> {
    let source = trigger::SourceRecord {
        topic: SOURCE_TOPIC,
        partition,
        offset: record.offset,
        key: record.key.as_deref().map(str::as_bytes),
        value: Some(&record.value),
        headers: &[],
    };
    let mapped = trigger
        .map(NAMESPACE, &source, now)
        .map_err(|e| (e.dlq_reason(), e.to_string()))?;
    let effect = mapped.effect();
    let (topic, key, payload) = routed(&effect);
    let size = key.len() + encode(&payload).len();
    match oversize(size, SIM_RECORD_LIMIT, topic.name()) {
        Some(refused) => Err(refused),
        None => Ok(effect),
    }
}

/// Where `effect` goes by the wire table, and its value as the simulation keeps it.
fn routed(effect: &Effect) -> (Topic, String, Payload) {
    let address = match wire::address(effect) {
        Ok(Some(address)) => address,
        other => unreachable!("a trigger's effect has an address: {other:?}"),
    };
    let Key::Exactly(key) = address.key else {
        unreachable!("a trigger's effect is keyed by its own id")
    };
    let payload = match effect {
        Effect::Submit(s) => Payload::Submission(s.clone()),
        Effect::ForwardEvent(e) => Payload::Event(e.clone()),
        Effect::ReturnEvent(e) => Payload::KeyedEvent(e.clone()),
        other => unreachable!("a trigger produces no {other:?}"),
    };
    (Topic::of_destination(&address.destination), key, payload)
}

/// A trigger worker process.
#[derive(Debug, Clone)]
pub struct TrigProc {
    pub pid: u64,
    pub slot: u32,
    pub status: Status,
    pub member: Option<u64>,
    pub generation: u64,
    pub owned: BTreeSet<i32>,
    /// The next offset to read, per owned partition whose committed offset was fetched.
    pub positions: BTreeMap<i32, i64>,
    /// The transaction of the batch produced and not committed yet.
    pub open: Option<u64>,
    pub transactional_id: String,
    pub epoch: u32,
}

impl TrigProc {
    pub fn name(&self) -> String {
        format!("t{}/p{}", self.slot, self.pid)
    }
}

/// What the trigger workers did in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerCounts {
    /// Records the source's writer sent.
    pub sent: u64,
    pub batches: u64,
    pub aborted: u64,
    pub dead_lettered: u64,
    pub kills: u64,
    pub resets: u64,
}

/// The trigger workers of the world (`Faults::triggers`).
#[derive(Debug, Clone, Default)]
pub struct Triggers {
    pub trigger: Option<Trigger>,
    pub max_batch: usize,
    pub procs: BTreeMap<u64, TrigProc>,
    /// Slot → its live process, or `None` (dead, restarted at its next turn).
    pub slots: BTreeMap<u32, Option<u64>>,
    pub counts: TriggerCounts,
}

impl World {
    /// Starts a trigger worker process in `slot`: its transactional id is the slot's, so its
    /// registration fences the process it replaces (and aborts that one's open transaction).
    pub fn trig_start(&mut self, slot: u32, pid: u64) {
        let transactional_id = format!("weir-trigger-{slot}");
        // The registration aborts the transaction a killed process of the slot left open.
        let left_open: Vec<u64> = self
            .trig
            .procs
            .values_mut()
            .filter(|p| p.slot == slot && p.status == Status::Dead)
            .filter_map(|p| p.open.take())
            .filter(|txn| self.cluster.txns.contains_key(txn))
            .collect();
        let epoch = self.cluster.init_producer(&transactional_id, self.now);
        for txn in left_open {
            self.trig.counts.aborted += 1;
            self.event(format!(
                "t{slot}: trigger txn {txn} of the killed process aborted by the new registration"
            ));
        }
        let proc = TrigProc {
            pid,
            slot,
            status: Status::Running,
            member: None,
            generation: 0,
            owned: BTreeSet::new(),
            positions: BTreeMap::new(),
            open: None,
            transactional_id,
            epoch,
        };
        self.event(format!("{}: starts", proc.name()));
        self.trig.procs.insert(pid, proc);
        self.trig.slots.insert(slot, Some(pid));
    }

    /// `kill -9`: its transaction stays open (the broker aborts it when the restarted
    /// process registers, or at its timeout); its member expires after the session.
    pub fn trig_kill(&mut self, pid: u64) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(p) = self.trig.procs.get_mut(&pid) else {
            return;
        };
        if p.status == Status::Dead {
            return;
        }
        p.status = Status::Dead;
        self.trig.counts.kills += 1;
        let (name, member, open, slot) = (p.name(), p.member, p.open, p.slot);
        self.trig.slots.insert(slot, None);
        if let Some(m) = member.and_then(|m| self.cluster.trigger_group.members.get_mut(&m)) {
            m.expires_at = Some(now + session);
        }
        self.event(format!("kill -9 {name} (open txn {open:?})"));
    }

    /// SIGSTOP for `ms`: its member expires after the session timeout; its open transaction
    /// (offsets sent) stays open until it resumes and commits, or times out.
    pub fn trig_freeze(&mut self, pid: u64, ms: i64) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(p) = self.trig.procs.get_mut(&pid) else {
            return;
        };
        if p.status != Status::Running {
            return;
        }
        p.status = Status::Frozen {
            until: now + Duration::milliseconds(ms),
        };
        self.stats.freezes += 1;
        let (name, member, open) = (p.name(), p.member, p.open);
        if let Some(m) = member.and_then(|m| self.cluster.trigger_group.members.get_mut(&m)) {
            m.expires_at = Some(now + session);
        }
        self.event(format!("{name}: frozen for {ms} ms (open txn {open:?})"));
    }

    /// Frozen trigger workers whose time came (all of them with `all`) go on.
    pub fn trig_resume(&mut self, all: bool) {
        let now = self.now;
        let due: Vec<u64> = self
            .trig
            .procs
            .values()
            .filter(|p| matches!(p.status, Status::Frozen { until } if all || until <= now))
            .map(|p| p.pid)
            .collect();
        for pid in due {
            let Some(p) = self.trig.procs.get_mut(&pid) else {
                continue;
            };
            p.status = Status::Running;
            let (name, member) = (p.name(), p.member);
            let note = match member.and_then(|m| self.cluster.trigger_group.members.get_mut(&m)) {
                Some(m) => {
                    m.expires_at = None;
                    "still a member"
                }
                None => "no longer a member — a zombie",
            };
            self.event(format!("{name}: resumes, {note}"));
        }
    }

    /// The next instant a frozen trigger worker resumes.
    pub fn trig_next_resume(&self) -> Option<SimTime> {
        self.trig
            .procs
            .values()
            .filter_map(|p| match p.status {
                Status::Frozen { until } => Some(until),
                _ => None,
            })
            .min()
    }

    /// One turn of trigger worker `pid`: commits the batch it produced, or joins/follows the
    /// group and produces the next batch into a new transaction. True if it did something.
    pub fn trig_turn(&mut self, pid: u64) -> bool {
        let Some(p) = self.trig.procs.get(&pid) else {
            return false;
        };
        if p.status != Status::Running {
            return false;
        }
        if let Some(txn) = p.open {
            self.trig_commit(pid, txn);
            return true;
        }
        if !self.trig_follow_group(pid) {
            return false;
        }
        self.trig_produce(pid)
    }

    fn trig_commit(&mut self, pid: u64, txn: u64) {
        let now = self.now;
        let p = self.trig.procs.get_mut(&pid).expect("a trigger worker");
        p.open = None;
        let name = p.name();
        match self.cluster.check_open(txn, &p.transactional_id, p.epoch) {
            Ok(()) => {
                self.cluster.end(txn, true, now);
                self.trig.counts.batches += 1;
                self.event(format!("{name}: committed trigger txn {txn}"));
            }
            Err(e) => {
                // Fenced (its transaction timed out, or a process of its slot registered):
                // the real worker rebuilds its clients and reads from the committed offsets.
                p.positions.clear();
                p.epoch = self.cluster.init_producer(&p.transactional_id, now);
                self.trig.counts.aborted += 1;
                self.event(format!(
                    "{name}: trigger txn {txn} refused: {e:?}; clients rebuilt"
                ));
            }
        }
    }

    /// Joins the trigger workers' group, rejoins a rebalance, takes a new assignment (read
    /// from the committed offsets, fetched as stable); true once it can read.
    fn trig_follow_group(&mut self, pid: u64) -> bool {
        let mut events = Vec::new();
        let ready = self.trig_sync(pid, &mut events);
        for e in events {
            self.event(e);
        }
        ready
    }

    fn trig_sync(&mut self, pid: u64, events: &mut Vec<String>) -> bool {
        let now = self.now;
        let World { trig, cluster, .. } = self;
        let p = trig.procs.get_mut(&pid).expect("a trigger worker");
        let name = p.name();
        let group = &mut cluster.trigger_group;
        let member = match p.member.filter(|m| group.members.contains_key(m)) {
            Some(member) => member,
            None => {
                let member = group.join(pid, now);
                p.member = Some(member);
                p.owned.clear();
                p.positions.clear();
                group.try_complete();
                events.push(format!(
                    "{name}: joins the trigger workers' group as member {member}"
                ));
                member
            }
        };
        if group.rebalance_since.is_some() && !group.members[&member].rejoined {
            p.owned.clear();
            p.positions.clear();
            if let Some(m) = group.members.get_mut(&member) {
                m.rejoined = true;
            }
            group.try_complete();
        }
        if group.rebalance_since.is_some() {
            return false;
        }
        if p.generation != group.generation {
            p.generation = group.generation;
            p.owned = group.assignment.get(&member).cloned().unwrap_or_default();
            p.positions.clear();
            events.push(format!(
                "{name}: assigned {:?} of {SOURCE_TOPIC} in generation {}",
                p.owned, p.generation
            ));
        }
        let unfetched: BTreeSet<i32> = p
            .owned
            .iter()
            .copied()
            .filter(|q| !p.positions.contains_key(q))
            .collect();
        if unfetched.is_empty() {
            return true;
        }
        // KIP-447: a stable fetch waits for a transaction holding offsets of them.
        if cluster.source_offsets_pending(&unfetched).is_some() {
            return false;
        }
        for q in unfetched {
            let committed = cluster.source_committed.get(&q).copied().unwrap_or(0);
            p.positions.insert(q, committed);
        }
        true
    }

    /// Reads the next batch of the owned partitions and produces what each record becomes,
    /// with the offsets, into a new transaction (committed at the next turn).
    fn trig_produce(&mut self, pid: u64) -> bool {
        let now = self.now;
        let Some(trigger) = self.trig.trigger.clone() else {
            return false;
        };
        let max = self.trig.max_batch.max(1);
        let p = self.trig.procs.get(&pid).expect("a trigger worker");
        let mut batch: Vec<(i32, SourceRecord)> = Vec::new();
        for (&q, &from) in &p.positions {
            let log = &self.cluster.source[q as usize];
            for record in log.iter().skip(from.max(0) as usize) {
                if batch.len() >= max {
                    break;
                }
                batch.push((q, record.clone()));
            }
        }
        if batch.is_empty() {
            return false;
        }
        let (tid, epoch, member, generation, name) = (
            p.transactional_id.clone(),
            p.epoch,
            p.member,
            p.generation,
            p.name(),
        );
        let txn = match self.cluster.begin(&tid, epoch, pid, now) {
            Ok(txn) => txn,
            Err(e) => {
                let p = self.trig.procs.get_mut(&pid).expect("a trigger worker");
                p.positions.clear();
                p.epoch = self.cluster.init_producer(&tid, now);
                self.event(format!("{name}: begin refused: {e:?}; clients rebuilt"));
                return true;
            }
        };
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let producer = Producer::TriggerWorker { pid };
        for (q, record) in &batch {
            next.insert(*q, record.offset + 1);
            match decide(&trigger, *q, record, now) {
                Ok(effect) => {
                    let (topic, key, payload) = routed(&effect);
                    let bytes = encode(&payload);
                    if key.len() + bytes.len() > SIM_RECORD_LIMIT {
                        self.anomalies.push(format!(
                            "{name}: produced a record of {} bytes for {}, over the producer's limit",
                            key.len() + bytes.len(),
                            topic.name()
                        ));
                    }
                    let partition = self.cluster.partition_for(topic, &key);
                    self.cluster.append(
                        topic,
                        partition,
                        Some(key),
                        None,
                        payload,
                        bytes,
                        producer,
                        Some(txn),
                        now,
                    );
                }
                Err((reason, error)) => {
                    self.trig.counts.dead_lettered += 1;
                    let envelope = DlqEnvelope {
                        original_topic: SOURCE_TOPIC.to_owned(),
                        original_partition: *q,
                        original_offset: record.offset,
                        original_timestamp_millis: Some(record.timestamp.timestamp_millis()),
                        key: record.key.clone().map(String::into_bytes),
                        value: Some(record.value.clone()),
                        original_headers: Vec::new(),
                        reason,
                        error,
                        failed_at: now,
                    };
                    let payload = Payload::Dlq(Box::new(envelope));
                    let bytes = encode(&payload);
                    let key = record.key.clone().unwrap_or_default();
                    self.cluster.append(
                        Topic::Dlq,
                        0,
                        Some(key),
                        None,
                        payload,
                        bytes,
                        producer,
                        Some(txn),
                        now,
                    );
                }
            }
        }
        let offsets: Vec<(i32, i64)> = next.iter().map(|(q, o)| (*q, *o)).collect();
        if let Err(e) = self
            .cluster
            .send_source_offsets(txn, &offsets, member, generation)
        {
            self.cluster.end(txn, false, now);
            self.trig.counts.aborted += 1;
            let p = self.trig.procs.get_mut(&pid).expect("a trigger worker");
            p.positions.clear();
            self.event(format!("{name}: trigger txn {txn} aborted: {e:?}"));
            return true;
        }
        let p = self.trig.procs.get_mut(&pid).expect("a trigger worker");
        p.positions.extend(next);
        p.open = Some(txn);
        self.event(format!(
            "{name}: trigger txn {txn}: {} source records, offsets {offsets:?}",
            batch.len()
        ));
        true
    }

    /// An operator stops every trigger worker (each leaves the group; an open transaction is
    /// aborted) and resets the group's offsets to the earliest: every record is read again.
    pub fn trig_reset_offsets(&mut self) {
        let now = self.now;
        let pids: Vec<u64> = self
            .trig
            .procs
            .values()
            .filter(|p| p.status != Status::Dead)
            .map(|p| p.pid)
            .collect();
        for pid in pids {
            let p = self.trig.procs.get_mut(&pid).expect("a trigger worker");
            p.status = Status::Dead;
            let (member, open, slot) = (p.member, p.open.take(), p.slot);
            if let Some(txn) = open {
                self.cluster.end(txn, false, now);
            }
            if let Some(member) = member {
                self.cluster.trigger_group.remove(member, now);
            }
            self.trig.slots.insert(slot, None);
        }
        // A zombie's transaction would hold the offsets: the reset waits for the group to be
        // empty, and for no transaction to hold its offsets (the tool refuses otherwise).
        for q in 0..SOURCE_PARTITIONS {
            self.cluster.source_committed.insert(q, 0);
        }
        self.trig.counts.resets += 1;
        self.event(format!(
            "operator: trigger workers stopped, offsets of {SOURCE_TOPIC} reset to the earliest"
        ));
    }

    /// Source partitions the trigger group has not committed to their end.
    pub fn trig_unconsumed(&self) -> Vec<String> {
        (0..SOURCE_PARTITIONS)
            .filter_map(|q| {
                let end = self.cluster.source[q as usize].len() as i64;
                let committed = self.cluster.source_committed.get(&q).copied().unwrap_or(0);
                (committed < end).then(|| {
                    format!("{SOURCE_TOPIC}/{q}: the trigger group committed {committed} of {end}")
                })
            })
            .collect()
    }

    /// Whether the trigger workers are done: no open transaction of theirs, the group
    /// stable with every live member current, the source read to its end.
    pub fn trig_settled(&self) -> bool {
        let group = &self.cluster.trigger_group;
        group.rebalance_since.is_none()
            && group.members.values().all(|m| m.expires_at.is_none())
            && self
                .trig
                .procs
                .values()
                .all(|p| p.status == Status::Dead || p.open.is_none())
            && self.trig_unconsumed().is_empty()
    }
}
