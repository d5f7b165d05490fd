//! The simulated consumer side of a worker process: polls, rewinds, reads of the history
//! and of the keyed state, admission ([`World`]'s methods the seams call).

use super::*;

impl World {
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
                    consumer.polled.clear();
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
                        let index = consumer.next_handle;
                        consumer.next_handle += 1;
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
                                timestamp: Some(record.timestamp),
                            },
                        });
                        consumer.polled.insert(
                            index,
                            PolledCopy {
                                topic: Topic::of_input(topic),
                                partition,
                                offset: record.offset,
                                key: record.key.clone(),
                                bytes: record.bytes.clone(),
                                timestamp: record.timestamp,
                            },
                        );
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

    /// A committed batch of `pid` consumed the records of these handles: they are forgotten.
    pub fn consumed(&mut self, pid: u64, handles: &[usize]) {
        let consumer = &mut self.proc(pid).consumer;
        for handle in handles {
            consumer.polled.remove(handle);
        }
    }

    /// Positions `pid`'s owned partitions at their committed offsets, fetched as stable:
    /// `None` while an open transaction holds offsets for one of them.
    pub fn rewind(&mut self, pid: u64) -> Option<Vec<Position>> {
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
        let out: Vec<Position> = owned
            .iter()
            .flat_map(|&p| INPUTS.map(|t| (t, p)))
            .map(|(t, p)| self.cluster.committed_position(t, p))
            .collect();
        let consumer = &mut self.proc(pid).consumer;
        consumer.positions = out
            .iter()
            .map(|p| ((p.topic, p.partition), p.offset))
            .collect();
        consumer.polled.clear();
        consumer.rewinds += 1;
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
            Batch(Option<crate::batch::BatchState>),
            Correlation(Option<crate::correlation::CorrelationState>),
            Remembered(Option<crate::correlation::RememberedEvent>),
            Slot(Option<crate::concurrency::SlotState>),
            Corrupt(crate::processor::CorruptState),
        }
        let mut last = std::collections::BTreeMap::new();
        for r in records {
            let Some(key) = &r.key else { continue };
            let state = match (wire::record_type(TopicRole::State, r.kind), &r.payload) {
                (Ok(RecordType::ScheduleState), Some(Payload::Schedule(state))) => {
                    Last::Schedule(state.clone())
                }
                (Ok(RecordType::BatchState), Some(Payload::Batch(state))) => {
                    Last::Batch(state.clone())
                }
                (Ok(RecordType::CorrelationState), Some(Payload::Correlation(state))) => {
                    Last::Correlation(state.clone())
                }
                (Ok(RecordType::RememberedEvent), Some(Payload::Remembered(id))) => {
                    Last::Remembered(id.clone())
                }
                (Ok(RecordType::SlotState), Some(Payload::Slot(slot))) => Last::Slot(slot.clone()),
                (Ok(record), Some(Payload::Garbage(why))) => match wire::state_of(record) {
                    Some(of) => Last::Corrupt(crate::processor::CorruptState {
                        partition,
                        offset: r.offset,
                        timestamp_millis: Some(r.timestamp.timestamp_millis()),
                        of,
                        key: Some(key.as_bytes().to_vec()),
                        value: r.bytes.clone(),
                        headers: Vec::new(),
                        error: why.clone(),
                    }),
                    None => continue,
                },
                _ => continue,
            };
            last.insert(key.clone(), state);
        }
        let mut state = crate::driver::KeyedState::default();
        for record in last.into_values() {
            match record {
                Last::Schedule(s) => state.schedules.extend(s),
                Last::Batch(b) => state.batches.extend(b),
                Last::Correlation(c) => state.correlations.extend(c),
                Last::Remembered(r) => state.remembered.extend(r),
                Last::Slot(s) => state.slots.extend(s),
                Last::Corrupt(c) => {
                    self.stats.corrupt_states_read += 1;
                    state.corrupt.push(c);
                }
            }
        }
        Some(state)
    }
}
