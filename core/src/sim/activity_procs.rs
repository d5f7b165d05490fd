//! The simulated activity worker processes in the world (`Faults::activity_workers`): their
//! lifecycle (added, removed, killed, frozen), their turns (poll, take over, fetch, feed the
//! core), and the outside service of the external route. Their state is `activity.rs`'s; the
//! effects of their core are executed in `activity_effects.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use super::cluster::{Payload, Topic};
use super::process::Status;
use super::workflows::double_ffqn;
use super::world::World;
use crate::activity::{
    ActivityCore, ActivitySettings, AttemptId, Body, Committed, CoreConfig, Input, Record,
    RoutePartition, Serve, ServiceCheck,
};
use crate::model::{ExecutionId, ExecutionResult};
use crate::records::DlqReason;

use super::activity::{
    ActProc, ActivityCounts, EXTERNAL_TIMEOUT, Running, SERVICE_GROUP, SimSource, Started, key_of,
};

impl World {
    /// The run's counts, with what is computed from the log.
    pub fn act_counts(&self) -> ActivityCounts {
        let log = &self.act.log;
        let mut produced: BTreeMap<&ExecutionId, u64> = BTreeMap::new();
        for (_, _, child) in &log.produced {
            *produced.entry(child).or_default() += 1;
        }
        let retried_elsewhere = log
            .started
            .iter()
            .filter(|s| {
                s.attempt > 1
                    && log
                        .failed
                        .iter()
                        .find(|f| f.child == s.child && f.attempt + 1 == s.attempt)
                        .is_some_and(|f| f.pid != s.pid)
            })
            .count() as u64;
        ActivityCounts {
            produced_twice: produced.values().filter(|n| **n > 1).count() as u64,
            retried_elsewhere,
            ..self.act.counts.clone()
        }
    }

    /// Draws the activity workers' configuration of the run (once).
    pub fn act_configure(&mut self) {
        // A window of one request would serve a partition one request at a time: slower
        // than a schedule ticking every second starts executions.
        let concurrency = self.rng.range(2, 6) as usize;
        let window = self.rng.range(2, 6) as usize;
        let commit_ms = self.rng.range(0, 300);
        let max_batch = self.rng.range(1, 10) as usize;
        self.act.service_group = self.rng.chance(500);
        self.act.config = Some(CoreConfig {
            settings: ActivitySettings {
                concurrency,
                partition_window: window,
                unknown_grace: StdDuration::from_secs(60),
            },
            commit_interval: StdDuration::from_millis(commit_ms),
            max_batch,
            rate_limits: self.act.rates.limits(),
        });
        let line = format!(
            "activity workers: {:?}; service group named: {}",
            self.act.config, self.act.service_group
        );
        self.event(line);
    }

    /// A new activity worker process `pid` in `slot`.
    pub fn act_spawn(&mut self, pid: u64, slot: u32) {
        let config = self.act.config.clone().unwrap_or_else(|| CoreConfig {
            settings: ActivitySettings {
                concurrency: 2,
                partition_window: 3,
                unknown_grace: StdDuration::from_secs(60),
            },
            commit_interval: StdDuration::from_millis(100),
            max_batch: 5,
            rate_limits: self.act.rates.limits(),
        });
        let Ok(core) = ActivityCore::new(config) else {
            self.anomalies
                .push("the drawn activity settings are not valid".to_owned());
            return;
        };
        self.act.procs.insert(
            pid,
            ActProc {
                pid,
                slot,
                status: Status::Running,
                member: None,
                generation: 0,
                owned: BTreeSet::new(),
                taken_over: false,
                positions: BTreeMap::new(),
                paused: BTreeSet::new(),
                core,
                running: BTreeMap::new(),
                producing: None,
                shutdown: false,
                at: "start",
            },
        );
    }

    /// One turn of `pid`'s loop (nothing if it is not running).
    pub fn act_step(&mut self, pid: u64) {
        let now = self.now;
        let Some(p) = self.act.procs.get(&pid) else {
            return;
        };
        if p.status != Status::Running {
            return;
        }
        if p.producing.is_some() {
            self.act_end_commit(pid);
            return;
        }
        if p.shutdown {
            self.act_leave(pid);
            return;
        }
        if !self.act_poll(pid) {
            return;
        }
        if !self.act_procs(pid).taken_over {
            self.act_take_over(pid);
        }
        let mut inputs = self.act_finished(pid);
        inputs.extend(self.act_fetch(pid));
        // The paused routes, when they changed: after the turn's records, as production's
        // loop adds them (`routes.rs`).
        inputs.extend(self.act_controls(pid));
        inputs.push(Input::Tick);
        for input in inputs {
            let record = matches!(input, Input::Record(_));
            if let Input::TopicsPaused(topics) = &input {
                self.route_told(pid, topics);
            }
            let Some(p) = self.act.procs.get_mut(&pid) else {
                return;
            };
            let effects = p.core.handle(input, now);
            self.act_execute(pid, effects, record);
            if self.act_procs(pid).status != Status::Running {
                return;
            }
        }
        self.act_rates(pid);
    }

    /// After a turn of `pid`: what its core's rate limits delayed, and whether attempts that
    /// wait for a token have a wake (`rates.rs`).
    fn act_rates(&mut self, pid: u64) {
        let (now, start) = (self.now, self.start);
        let Some(p) = self.act.procs.get_mut(&pid) else {
            return;
        };
        let counters = p.core.take_counters();
        let held = p.core.gauges().rate_held;
        let wake = p.core.next_wake();
        let name = p.name();
        let rates = &mut self.act.rates;
        rates.delayed += counters.rate_limited.values().sum::<u64>();
        rates.observe_turn(&name, now, start, held, wake);
    }

    pub(super) fn act_procs(&self, pid: u64) -> &ActProc {
        &self.act.procs[&pid]
    }

    pub(super) fn act_procs_mut(&mut self, pid: u64) -> &mut ActProc {
        self.act.procs.get_mut(&pid).expect("an activity process")
    }

    /// The group protocol: joins, rejoins a rebalance (revoking everything), takes the new
    /// generation's assignment. True when the process holds the current generation.
    fn act_poll(&mut self, pid: u64) -> bool {
        let now = self.now;
        let mut events = Vec::new();
        let World {
            act,
            cluster,
            stats,
            ..
        } = self;
        let Some(proc) = act.procs.get_mut(&pid) else {
            return false;
        };
        let name = proc.name();
        let group = &mut cluster.activity_group;
        let member = match proc.member.filter(|m| group.members.contains_key(m)) {
            Some(member) => member,
            None => {
                proc.revoke(now);
                proc.owned.clear();
                let member = group.join(pid, now);
                events.push(format!(
                    "{name}: joins the activity workers' group as member {member}"
                ));
                proc.member = Some(member);
                if group.try_complete() {
                    stats.rebalances += 1;
                }
                member
            }
        };
        if group.rebalance_since.is_some() && !group.members[&member].rejoined {
            if !proc.owned.is_empty() {
                events.push(format!("{name}: rebalance: revokes {:?}", proc.owned));
            }
            proc.revoke(now);
            proc.owned.clear();
            if let Some(m) = group.members.get_mut(&member) {
                m.rejoined = true;
            }
            if group.try_complete() {
                stats.rebalances += 1;
            }
        }
        let stable = group.rebalance_since.is_none();
        if stable && proc.generation != group.generation {
            proc.generation = group.generation;
            proc.owned = group.assignment.get(&member).cloned().unwrap_or_default();
            proc.revoke(now);
            events.push(format!(
                "{name}: assigned {:?} in generation {} of the activity workers' group",
                proc.owned, proc.generation
            ));
        }
        proc.at = if stable { "poll" } else { "poll: rebalancing" };
        for e in events {
            self.event(e);
        }
        stable
    }

    /// Restores the committed progress of every owned partition (its offsets are committed
    /// outside transactions: nothing to wait for).
    fn act_take_over(&mut self, pid: u64) {
        let now = self.now;
        let owned = self.act_procs(pid).owned.clone();
        let assigned: Vec<(RoutePartition, Option<Committed>)> = owned
            .iter()
            .flat_map(|p| Topic::ROUTES.map(|t| (t, *p)))
            .map(|(t, p)| {
                let committed = self
                    .cluster
                    .route_committed
                    .get(&(t, p))
                    .map(|(o, m)| Committed {
                        offset: *o,
                        metadata: m.clone(),
                    });
                (key_of(t, p), committed)
            })
            .collect();
        let restored: Vec<String> = assigned
            .iter()
            .filter_map(|(k, c)| {
                c.as_ref()
                    .map(|c| format!("{k}@{} {}", c.offset, c.metadata))
            })
            .collect();
        let retries = assigned
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .map(|c| c.metadata.matches(':').count() as u64)
            .sum::<u64>();
        self.act.counts.restored_retries += retries;
        self.act.exhausted.counts.restored_parked += assigned
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .map(|c| c.metadata.matches('!').count() as u64)
            .sum::<u64>();
        let p = self.act_procs_mut(pid);
        let effects = p.core.handle(Input::Assigned(assigned), now);
        p.taken_over = true;
        let name = p.name();
        self.act_execute(pid, effects, false);
        self.event(format!("{name}: takes over {owned:?}: {restored:?}"));
    }

    /// The attempts and checks that ended by now, as the core's inputs.
    fn act_finished(&mut self, pid: u64) -> Vec<Input<SimSource>> {
        let now = self.now;
        let p = self.act_procs_mut(pid);
        let due: Vec<AttemptId> = p
            .running
            .iter()
            .filter(|(_, r)| r.due() <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut inputs = Vec::new();
        for id in due {
            let Some(running) = self.act_procs_mut(pid).running.remove(&id) else {
                continue;
            };
            match running {
                Running::Attempt {
                    child,
                    attempt,
                    result,
                    ..
                } => {
                    if !matches!(result, ExecutionResult::Ok(_)) {
                        let seq = self.act.log.next();
                        self.act.log.failed.push(Started {
                            seq,
                            at: now,
                            pid,
                            child,
                            attempt,
                        });
                        self.act.counts.failures += 1;
                    }
                    inputs.push(Input::AttemptFinished {
                        id,
                        result,
                        jitter: 0.5,
                    });
                }
                Running::Check {
                    partition, offset, ..
                } => {
                    let past = self
                        .act
                        .service
                        .committed
                        .get(&partition)
                        .is_some_and(|c| *c > offset);
                    let check = if past {
                        self.act.counts.service_answered += 1;
                        ServiceCheck::Answered
                    } else {
                        self.act.counts.service_not_answered += 1;
                        ServiceCheck::NotAnswered
                    };
                    inputs.push(Input::ServiceChecked { id, check });
                }
            }
        }
        inputs
    }

    /// Fetches committed records of the owned, unpaused partitions from the positions.
    fn act_fetch(&mut self, pid: u64) -> Vec<Input<SimSource>> {
        let p = self.act_procs(pid);
        let mut sources: Vec<(Topic, i32)> = p
            .owned
            .iter()
            .flat_map(|p| Topic::ROUTES.map(|t| (t, *p)))
            .filter(|key| !p.paused.contains(key))
            .collect();
        self.rng.shuffle(&mut sources);
        let want = self.rng.range(1, 6) as usize;
        let mut inputs = Vec::new();
        for (topic, partition) in sources {
            if inputs.len() >= want {
                break;
            }
            let position = self
                .act_procs(pid)
                .positions
                .get(&(topic, partition))
                .copied()
                .unwrap_or(0);
            let (records, next) =
                self.cluster
                    .read_committed(topic, partition, position, want - inputs.len());
            let records: Vec<_> = records.into_iter().cloned().collect();
            for r in records {
                if let Some(Payload::Activity(request)) = &r.payload {
                    let seq = self.act.log.next();
                    self.routes.log.fetched.push(crate::sim::routes::Fetched {
                        seq,
                        pid,
                        child: request.execution_id.clone(),
                        topic,
                    });
                }
                if let Some(Payload::ActivityRetry(notice)) = &r.payload {
                    let seq = self.act.log.next();
                    self.act
                        .log
                        .notices
                        .push((seq, pid, notice.execution_id.clone()));
                }
                let body = self.act_body(topic, partition, r.offset, r.payload.as_ref());
                inputs.push(Input::Record(Record {
                    partition: key_of(topic, partition),
                    offset: r.offset,
                    written_at: Some(r.timestamp),
                    source: SimSource {
                        topic,
                        partition,
                        offset: r.offset,
                        key: r.key.clone(),
                        bytes: r.bytes.clone(),
                        timestamp: r.timestamp,
                    },
                    body,
                }));
            }
            self.act_procs_mut(pid)
                .positions
                .insert((topic, partition), next);
        }
        inputs
    }

    fn act_body(
        &self,
        topic: Topic,
        partition: i32,
        offset: i64,
        payload: Option<&Payload>,
    ) -> Body {
        match payload {
            Some(Payload::Activity(request)) => Body::Request {
                serve: self.act_serve(topic, request),
                not_before: self
                    .act
                    .log
                    .headers
                    .get(&(topic, partition, offset))
                    .copied(),
                request: request.clone(),
            },
            Some(Payload::ActivityCancel(cancel)) => Body::Cancel(cancel.clone()),
            Some(Payload::ActivityRetry(notice)) => Body::Retry(notice.clone()),
            Some(Payload::Garbage(why)) => Body::Undecodable {
                reason: DlqReason::Undecodable,
                error: why.clone(),
            },
            other => Body::Undecodable {
                reason: DlqReason::Undecodable,
                error: format!("not an activity record: {other:?}"),
            },
        }
    }

    /// How an activity worker serves a request: the topology (the external route) and its
    /// components (`double` only).
    fn act_serve(&self, topic: Topic, request: &crate::records::ActivityRequest) -> Serve {
        if topic == Topic::External {
            Serve::External {
                service_group: self.act.service_group.then(|| SERVICE_GROUP.to_owned()),
                timeout: Some(EXTERNAL_TIMEOUT),
            }
        } else if request.ffqn == double_ffqn() {
            Serve::Wasm(self.act.exhausted.policy(super::activity::retry_policy()))
        } else {
            Serve::Unknown
        }
    }
}
