//! The trigger worker processes' turns (`Faults::triggers`), on the state of
//! `sim/triggers.rs`: started, killed, frozen, resumed; following their group; producing a
//! batch into a transaction and committing it a turn later; an operator's offsets reset.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;

use super::cluster::{Payload, Producer, SOURCE_PARTITIONS, SimTime, SourceRecord, Topic, encode};
use super::process::Status;
use super::triggers::{Decided, SIM_RECORD_LIMIT, SOURCE_TOPIC, TrigProc, decide};
use super::world::World;
use crate::dlq;

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
        self.cluster
            .trigger_group
            .stop_heartbeats(member, now, session);
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
        self.cluster
            .trigger_group
            .stop_heartbeats(member, now, session);
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
            let note = if self.cluster.trigger_group.resume_heartbeats(member) {
                "still a member"
            } else {
                "no longer a member — a zombie"
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
                Ok(Decided {
                    topic,
                    key,
                    payload,
                    bytes,
                    ..
                }) => {
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
                    let copy = dlq::copy(
                        dlq::Original {
                            topic: SOURCE_TOPIC,
                            partition: *q,
                            offset: record.offset,
                            timestamp_millis: Some(record.timestamp.timestamp_millis()),
                            key: record.key.as_deref().map(str::as_bytes),
                            value: Some(&record.value),
                        },
                        [],
                        reason,
                        error,
                        now,
                    );
                    let payload = Payload::Dlq(Box::new(copy.envelope));
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
