//! The activity workers' effects (`super::activity`): attempts started and aborted, pauses,
//! resumes, seeks, and commits in two steps (produce; send the offsets and commit — refused
//! for a zombie, whose answers are then aborted); and their processes' lives: exits, kills,
//! freezes.

use chrono::Duration;

use super::activity::{Running, SimSource, Started, attempt_result, topic_of};
use super::cluster::{Payload, Producer, SimTime, Topic};
use super::process::Status;
use super::workflows::activity_result;
use super::world::{PendingAnswer, World, encode};
use crate::activity::{Commit, Effect, Input, Outgoing, answer};
use crate::dlq;
use crate::model::{ExecutionId, Response};
use crate::wire;

impl World {
    /// Executes the core's effects; `record`: they answer a record (a cancellation's abort).
    pub(super) fn act_execute(&mut self, pid: u64, effects: Vec<Effect<SimSource>>, record: bool) {
        let now = self.now;
        for effect in effects {
            match effect {
                Effect::Seek { partition, offset } => {
                    let key = (topic_of(&partition.topic), partition.partition);
                    self.act_procs_mut(pid)
                        .positions
                        .insert(key, offset.unwrap_or(0));
                }
                Effect::Start(start) => {
                    let latency = if self.rng.chance(200) {
                        self.rng.range(3_000, 12_000)
                    } else {
                        self.rng.range(0, 1_500)
                    } as i64;
                    let child = start.request.execution_id.clone();
                    // An activity with a deadline (its parent's) answers at its first attempt,
                    // within its bound: a failure that leaves no time for a retry would end
                    // the parent before its deadline, which the workflows' expected results
                    // do not allow (that rule is the core's unit tests').
                    let (result, latency) = match (start.request.deadline, start.timeout) {
                        (Some(_), bound) => {
                            let bound = bound.map_or(latency, |b| b.as_millis() as i64);
                            (activity_result(&start.request.params), latency.min(bound))
                        }
                        // A broken activity (`Faults::exhausted_pauses`) fails until its switch is
                        // flipped, with a reason unique in the run (its parent's pause carries it).
                        (None, _) if self.act.exhausted.fails(&child) => (
                            super::exhausted::switch_off(
                                &child,
                                start.attempt,
                                pid,
                                now - self.start,
                            ),
                            latency,
                        ),
                        (None, _) => (
                            attempt_result(&child, start.attempt, &start.request.params),
                            latency,
                        ),
                    };
                    let seq = self.act.log.next();
                    self.act.log.started.push(Started {
                        seq,
                        at: now,
                        pid,
                        child: child.clone(),
                        attempt: start.attempt,
                    });
                    self.act.counts.attempts += 1;
                    self.act_procs_mut(pid).running.insert(
                        start.id,
                        Running::Attempt {
                            due: now + Duration::milliseconds(latency),
                            child,
                            attempt: start.attempt,
                            result,
                        },
                    );
                }
                Effect::CheckService {
                    id,
                    partition,
                    offset,
                    ..
                } => {
                    if self.route_told_paused(pid, &partition.topic) {
                        self.routes.log.external_while_paused += 1;
                    }
                    let latency = self.rng.range(0, 300) as i64;
                    self.act_procs_mut(pid).running.insert(
                        id,
                        Running::Check {
                            due: now + Duration::milliseconds(latency),
                            partition: partition.partition,
                            offset,
                        },
                    );
                }
                Effect::Abort { id } => {
                    if self.act_procs_mut(pid).running.remove(&id).is_some() && record {
                        self.act.counts.cancel_aborts += 1;
                    }
                }
                Effect::Pause { partition } => {
                    let key = (topic_of(&partition.topic), partition.partition);
                    self.act_procs_mut(pid).paused.insert(key);
                    self.act.counts.pauses += 1;
                }
                Effect::Resume { partition, from } => {
                    let key = (topic_of(&partition.topic), partition.partition);
                    let p = self.act_procs_mut(pid);
                    p.paused.remove(&key);
                    if let Some(from) = from {
                        p.positions.insert(key, from);
                    }
                }
                Effect::Commit(commit) => self.act_begin_commit(pid, commit),
            }
        }
    }

    /// Produces the commit's records with the idempotent producer, outside any transaction:
    /// each is visible once acknowledged, at once here. Its progress (the offsets) is
    /// committed at the next step: a crash, a freeze or a refused commit in between leaves
    /// the answers on the topic and their requests unfinished, to be answered again by the
    /// next owner (a duplicate the parent drops).
    pub(super) fn act_begin_commit(&mut self, pid: u64, commit: Commit<SimSource>) {
        for record in &commit.records {
            self.act_produce(pid, record);
        }
        let p = self.act_procs_mut(pid);
        p.at = "commit: produced, offsets not committed";
        p.producing = Some(commit);
    }

    pub(super) fn act_produce(&mut self, pid: u64, record: &Outgoing<SimSource>) {
        let now = self.now;
        let producer = Producer::ActivityWorker { pid };
        match record {
            Outgoing::Answer {
                parent,
                ffqn,
                response,
                source,
            } => {
                if source.topic == Topic::External
                    && self.route_told_paused(pid, Topic::External.name())
                {
                    self.routes.log.external_while_paused += 1;
                }
                // Routed by the wire table and held to the answers' size gate, as the Kafka
                // activity worker routes and gates it.
                let address = wire::answer(parent);
                let topic = Topic::of_destination(&address.destination);
                let wire::Key::Exactly(key) = address.key else {
                    unreachable!("an answer is keyed by its parent")
                };
                let partition = self.cluster.partition_for(topic, &key);
                let mut payload = Payload::Response(response.clone());
                let mut bytes = encode(&payload);
                if let Some(replaced) =
                    answer::too_large(response, ffqn, bytes.len(), answer::MAX_ANSWER_BYTES)
                {
                    payload = Payload::Response(replaced);
                    bytes = encode(&payload);
                }
                self.cluster.append(
                    topic,
                    partition,
                    Some(key),
                    address.kind,
                    payload,
                    bytes,
                    producer,
                    None,
                    now,
                );
                if let Some(child) = record.answered() {
                    let seq = self.act.log.next();
                    self.act.log.produced.push((seq, pid, child.clone()));
                }
            }
            Outgoing::Pause {
                request, activity, ..
            } => {
                // Routed by the wire table, as the Kafka activity worker routes it.
                let address = wire::pause(&request.execution_id);
                let topic = Topic::of_destination(&address.destination);
                let wire::Key::Exactly(key) = address.key else {
                    unreachable!("a pause is keyed by its execution")
                };
                let partition = self.cluster.partition_for(topic, &key);
                let payload = Payload::Pause(request.clone());
                let bytes = encode(&payload);
                self.cluster.append(
                    topic,
                    partition,
                    Some(key),
                    address.kind,
                    payload,
                    bytes,
                    producer,
                    None,
                    now,
                );
                let seq = self.act.log.next();
                self.act.log.parks.push(super::activity::Park {
                    seq,
                    at: now,
                    pid,
                    child: activity.clone(),
                    parent: request.execution_id.clone(),
                });
            }
            Outgoing::DeadLetter {
                source,
                reason,
                error,
            } => {
                let copy = dlq::copy(
                    dlq::Original {
                        topic: source.topic.name(),
                        partition: source.partition,
                        offset: source.offset,
                        timestamp_millis: Some(source.timestamp.timestamp_millis()),
                        key: source.key.as_deref().map(str::as_bytes),
                        value: Some(&source.bytes),
                    },
                    [],
                    *reason,
                    error.clone(),
                    now,
                );
                let payload = Payload::Dlq(Box::new(copy.envelope));
                let bytes = encode(&payload);
                let key = source.key.clone().unwrap_or_default();
                self.cluster.append(
                    Topic::Dlq,
                    0,
                    Some(key),
                    None,
                    payload,
                    bytes,
                    producer,
                    None,
                    now,
                );
            }
        }
    }

    /// Commits the progress of the commit whose records were produced (or, refused, takes
    /// over again: its answers stay on the topic as duplicates of the next owner's).
    pub(super) fn act_end_commit(&mut self, pid: u64) {
        let now = self.now;
        let p = self.act_procs_mut(pid);
        let Some(commit) = p.producing.take() else {
            return;
        };
        let (member, generation, name) = (p.member, p.generation, p.name());
        let offsets: Vec<(Topic, i32, i64, String)> = commit
            .progress
            .iter()
            .map(|(k, p)| (topic_of(&k.topic), k.partition, p.frontier, p.metadata()))
            .collect();
        let committed = if offsets.is_empty() {
            Ok(())
        } else {
            self.cluster
                .commit_route_offsets(&offsets, member, generation)
        };
        match committed {
            Err(e) => {
                self.act.counts.refused_commits += 1;
                self.event(format!(
                    "{name}: activity offsets refused ({} records already produced): {e:?}",
                    commit.records.len()
                ));
                self.act_procs_mut(pid).revoke(now);
            }
            Ok(()) => {
                self.stats.commits += 1;
                let answered: Vec<(ExecutionId, Response, ExecutionId)> = commit
                    .records
                    .iter()
                    .filter_map(|r| match r {
                        Outgoing::Answer {
                            parent, response, ..
                        } => Some((r.answered()?.clone(), response.clone(), parent.clone())),
                        Outgoing::DeadLetter { .. } | Outgoing::Pause { .. } => None,
                    })
                    .collect();
                for (key, progress) in &commit.progress {
                    let topic = topic_of(&key.topic);
                    let log = self.cluster.log(topic, key.partition);
                    let parked: Vec<ExecutionId> = progress
                        .open
                        .iter()
                        .filter(|(_, mark)| mark.parked)
                        .filter_map(|(offset, _)| {
                            match &log.get(usize::try_from(*offset).ok()?)?.payload {
                                Some(Payload::Activity(request)) => {
                                    Some(request.execution_id.clone())
                                }
                                _ => None,
                            }
                        })
                        .collect();
                    let seq = self.act.log.next();
                    self.act
                        .log
                        .progress_parked
                        .push((seq, topic, key.partition, parked));
                }
                for r in &commit.records {
                    if let Outgoing::Pause { activity, .. } = r {
                        let seq = self.act.log.next();
                        self.act
                            .log
                            .parks_committed
                            .push((seq, pid, activity.clone()));
                    }
                }
                for (child, response, parent) in answered {
                    *self
                        .act
                        .log
                        .progress_committed
                        .entry(child.clone())
                        .or_default() += 1;
                    let seq = self.act.log.next();
                    self.act
                        .log
                        .committed
                        .entry(child.clone())
                        .or_insert((seq, now));
                    // What a load generator re-sends (`Sim::steady_load`).
                    if let Response::ChildExecutionFinished { result, .. } = response {
                        let partition = self
                            .cluster
                            .partition_for(Topic::Responses, &parent.to_string());
                        self.activities
                            .sent
                            .entry(partition)
                            .or_default()
                            .push(PendingAnswer {
                                due: now,
                                parent,
                                child,
                                result,
                            });
                    }
                }
                self.event(format!(
                    "{name}: activity commit: {} records, offsets {offsets:?}",
                    commit.records.len()
                ));
                let p = self.act_procs_mut(pid);
                p.core.handle(Input::Committed, now);
                p.at = "poll";
            }
        }
    }

    /// Asked to stop: commits what is finished (interrupting what runs), then leaves.
    pub(super) fn act_leave(&mut self, pid: u64) {
        let now = self.now;
        let p = self.act_procs_mut(pid);
        let effects = p.core.handle(Input::Flush { interrupt: true }, now);
        self.act_execute(pid, effects, false);
        if self
            .act
            .procs
            .get(&pid)
            .is_some_and(|p| p.producing.is_some())
        {
            self.act_end_commit(pid);
        }
        let name = self.act_procs(pid).name();
        self.event(format!("{name}: leaves after shutdown"));
        self.act_bury(pid, false);
    }

    /// The process is gone: killed (its member stays until its session expires, an open
    /// transaction hangs until the transaction timeout) or exited (it left the group); answers it produced stay.
    pub fn act_bury(&mut self, pid: u64, killed: bool) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(p) = self.act.procs.get_mut(&pid) else {
            return;
        };
        if p.status == Status::Dead {
            return;
        }
        p.status = Status::Dead;
        if killed {
            self.act.counts.lost_in_flight += p
                .running
                .values()
                .filter(|r| matches!(r, Running::Attempt { .. }))
                .count() as u64;
        } else {
            // Its answers are on the topic already; the progress is not committed.
            p.producing = None;
        }
        let Some(member) = p.member else {
            return;
        };
        let group = &mut self.cluster.activity_group;
        if killed {
            group.stop_heartbeats(Some(member), now, session);
        } else {
            group.remove(member, now);
        }
    }

    /// SIGSTOP for `ms`: its member expires after the session timeout.
    pub fn act_freeze(&mut self, pid: u64, ms: i64) {
        let now = self.now;
        let session = self.ms(self.config.session_timeout_ms);
        let Some(p) = self.act.procs.get_mut(&pid) else {
            return;
        };
        if p.status != Status::Running {
            return;
        }
        p.status = Status::Frozen {
            until: now + Duration::milliseconds(ms),
        };
        self.stats.freezes += 1;
        let (name, at, member) = (p.name(), p.at, p.member);
        self.cluster
            .activity_group
            .stop_heartbeats(member, now, session);
        self.event(format!("{name}: frozen for {ms} ms at `{at}`"));
    }

    /// Frozen activity workers whose time came go on.
    pub fn act_resume_due(&mut self) {
        let now = self.now;
        let due: Vec<u64> = self
            .act
            .procs
            .values()
            .filter(|p| matches!(p.status, Status::Frozen { until } if until <= now))
            .map(|p| p.pid)
            .collect();
        for pid in due {
            self.act_resume(pid);
        }
    }

    pub fn act_resume(&mut self, pid: u64) {
        let Some(p) = self.act.procs.get_mut(&pid) else {
            return;
        };
        if !matches!(p.status, Status::Frozen { .. }) {
            return;
        }
        p.status = Status::Running;
        let (name, member) = (p.name(), p.member);
        let note = if self.cluster.activity_group.resume_heartbeats(member) {
            "still a member"
        } else {
            "no longer a member — a zombie"
        };
        self.event(format!("{name}: resumes, {note}"));
    }

    /// The next instant a frozen activity worker resumes.
    pub fn act_next_resume(&self) -> Option<SimTime> {
        self.act
            .procs
            .values()
            .filter_map(|p| match p.status {
                Status::Frozen { until } => Some(until),
                _ => None,
            })
            .min()
    }

    /// The route partitions with committed records at or past the activity workers'
    /// committed offset (nothing there when every request is finished and committed).
    pub fn unfinished_routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for topic in Topic::ROUTES {
            for p in 0..self.cluster.partitions(topic) {
                let committed = self
                    .cluster
                    .route_committed
                    .get(&(topic, p))
                    .map_or(0, |(o, _)| *o);
                let (unread, _) = self.cluster.read_committed(topic, p, committed, usize::MAX);
                if let Some(first) = unread.first() {
                    out.push(format!(
                        "{}/{p}: the activity workers committed {committed}, {} readable records from offset {}",
                        topic.name(),
                        unread.len(),
                        first.offset
                    ));
                }
            }
        }
        out
    }
}
