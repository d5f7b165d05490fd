//! Schedules (`Faults::schedules`): clients create a run's schedules, then pause, resume,
//! recreate or delete them; pause them for a long idle; let the owners catch up once the
//! faults stop; and end every schedule before the run settles.

use chrono::Duration;
use serde_json::json;

use crate::schedule::{Overlap, ScheduleAction, ScheduleCommand, ScheduleSpec};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::process::Status;
use crate::sim::scheduler::Sim;
use crate::sim::sent::{ScheduleEnd, SimSchedule};
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
    /// A client sends `action` about schedule `name` (`weir.responses`, keyed
    /// `schedule:<name>`, on the partition murmur2 gives the key); returns the command's id.
    pub fn schedule_command(&mut self, name: &str, action: ScheduleAction) -> String {
        self.next_command += 1;
        let command_id = format!("cmd-{}", self.next_command);
        let what = match &action {
            ScheduleAction::Create(spec) => format!(
                "create `{}` {} {}{} ({}, catch-up {} s)",
                spec.cron,
                spec.timezone,
                spec.ffqn.function(),
                spec.params,
                spec.overlap,
                spec.catchup_window.num_seconds()
            ),
            other => other.as_str().to_owned(),
        };
        let command = ScheduleCommand {
            name: name.to_owned(),
            command_id: command_id.clone(),
            action,
            sent_at: self.now(),
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            crate::state_key::StateKey::schedule(name).to_string(),
            Some(crate::wire::RecordKind::Schedule),
            Payload::ScheduleCommand(command),
        );
        self.note(format!(
            "schedule {name}: {what} [{command_id}] -> responses/{partition}@{offset}"
        ));
        command_id
    }

    /// A client creates schedule `spec` as `name`.
    pub fn create_schedule(&mut self, name: &str, spec: ScheduleSpec) {
        let id = self.schedule_command(name, ScheduleAction::Create(spec.clone()));
        match self.schedules.iter_mut().find(|s| s.name == name) {
            Some(s) => s.generations.push(id),
            None => self.schedules.push(SimSchedule {
                name: name.to_owned(),
                spec,
                generations: vec![id],
                paused: false,
                end: None,
            }),
        }
    }

    /// The schedules of a run with `Faults::schedules`: `ticker`, every second (`allow`, a
    /// workflow that finishes at once or after one activity, a catch-up window of a few
    /// seconds: a worker frozen or down longer misses ticks) and, in most runs,
    /// `overlapping`, every two seconds, whose ticks overlap (`skip` or `cancel-previous`, a
    /// workflow that sleeps for a while). Five times slower where a batch takes one or two
    /// records: each tick makes a few records (the submission, the run's answers, its
    /// `RunFinished`), and every second would be more than such workers take.
    pub(in crate::sim) fn create_random_schedules(&mut self) {
        let (often, less, less_ms) = if self.config.max_batch < 5 {
            ("*/5 * * * * *", "*/10 * * * * *", 10_000)
        } else {
            ("* * * * * *", "*/2 * * * * *", 2_000)
        };
        let r = &mut self.rng;
        let window = *r.pick(&[1, 2, 3, 5]);
        let n = *r.pick(&[0, 0, 1]);
        let base = r.range(0, 999) as i64;
        let ticker = ScheduleSpec {
            cron: often.to_owned(),
            timezone: "UTC".to_owned(),
            ffqn: Workflow::Seq.ffqn(),
            params: json!([n, base]),
            overlap: Overlap::Allow,
            catchup_window: Duration::seconds(window),
        };
        let second = r.chance(700).then(|| {
            let overlap = *r.pick(&[Overlap::Skip, Overlap::Skip, Overlap::CancelPrevious]);
            // Some runs last longer than the period: the next tick overlaps them.
            let ms = r.range(300, less_ms * 3 / 2) as i64;
            let window = *r.pick(&[2, 5, 30]);
            ScheduleSpec {
                cron: less.to_owned(),
                timezone: "UTC".to_owned(),
                ffqn: Workflow::Sleepy.ffqn(),
                params: json!([1, ms, base]),
                overlap,
                catchup_window: Duration::seconds(window),
            }
        });
        self.create_schedule("ticker", ticker);
        if let Some(spec) = second {
            self.create_schedule("overlapping", spec);
        }
    }

    /// A client pauses or resumes a schedule, or creates it again: the same spec (nothing
    /// changes), or after deleting it (a new generation).
    pub(in crate::sim) fn random_schedule_command(&mut self) {
        let live: Vec<usize> = (0..self.schedules.len())
            .filter(|&i| self.schedules[i].end.is_none())
            .collect();
        if live.is_empty() {
            return;
        }
        let i = *self.rng.pick(&live);
        let (name, spec, paused) = {
            let s = &self.schedules[i];
            (s.name.clone(), s.spec.clone(), s.paused)
        };
        match self.rng.weighted(&[8, 2, 1]) {
            0 => {
                let action = if paused {
                    ScheduleAction::Resume
                } else {
                    ScheduleAction::Pause
                };
                self.schedule_command(&name, action);
                self.schedules[i].paused = !paused;
            }
            1 => {
                // The same declaration applied again: nothing changes, not even the
                // generation.
                self.schedule_command(&name, ScheduleAction::Create(spec));
            }
            _ => {
                self.schedule_command(&name, ScheduleAction::Delete);
                self.create_schedule(&name, spec);
                self.schedules[i].paused = false;
            }
        }
    }

    /// Pauses the schedules that are active (as their client knows them) and waits a minute
    /// at most for their owners to take the pauses, and any pause their client sent before
    /// (a pause still unread would let its schedule tick on through the days, as the owner
    /// reads it only a few turns an hour); returns the schedules it paused if every pause was
    /// taken, else resumes them. They stay active in the client's view.
    pub(in crate::sim) fn pause_schedules_for_idle(&mut self) -> Option<Vec<usize>> {
        let live: Vec<usize> = (0..self.schedules.len())
            .filter(|&i| self.schedules[i].end.is_none())
            .collect();
        let active: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| !self.schedules[i].paused)
            .collect();
        for &i in &active {
            let name = self.schedules[i].name.clone();
            self.schedule_command(&name, ScheduleAction::Pause);
        }
        for _ in 0..60 {
            let taken = live.iter().all(|&i| {
                let s = &self.schedules[i];
                self.committed_schedule(&s.name).is_some_and(|state| {
                    state.status == crate::schedule::Status::Paused
                        && s.generations.last() == Some(&state.generation)
                })
            });
            if taken {
                return Some(active);
            }
            for slot in self.slots() {
                self.run(slot, 10);
            }
            self.materialise_all();
            self.advance(1_000);
        }
        self.note("the schedules' owners did not take the pauses: no idle");
        for i in active {
            let name = self.schedules[i].name.clone();
            self.schedule_command(&name, ScheduleAction::Resume);
        }
        None
    }

    /// The last committed state of schedule `name` (`None`: none, or deleted).
    fn committed_schedule(&self, name: &str) -> Option<crate::schedule::ScheduleState> {
        let w = self.world();
        let key = crate::state_key::StateKey::schedule(name).to_string();
        let partition = w.cluster.partition_for(Topic::State, &key);
        let (records, _) = w
            .cluster
            .read_committed(Topic::State, partition, 0, usize::MAX);
        records.iter().rev().find_map(|r| match &r.payload {
            Some(Payload::Schedule(state)) if r.key.as_deref() == Some(key.as_str()) => {
                Some(state.clone())
            }
            _ => None,
        })?
    }

    /// Before the run settles, every schedule is deleted or paused: nothing ticks forever.
    pub(in crate::sim) fn end_schedules(&mut self) {
        for i in 0..self.schedules.len() {
            let deleted = self.rng.chance(600);
            let name = self.schedules[i].name.clone();
            let action = if deleted {
                ScheduleAction::Delete
            } else {
                ScheduleAction::Pause
            };
            self.schedule_command(&name, action);
            let sent_at = self.now();
            let s = &mut self.schedules[i];
            s.end = Some(ScheduleEnd {
                deleted,
                was_paused: s.paused,
                sent_at,
            });
            s.paused = true;
        }
    }

    /// Whether every schedule not ended is where its client's commands put it (all taken)
    /// and, unless paused, its committed state owes no tick older than `lag_ms`.
    fn schedules_caught_up(&self, lag_ms: i64) -> bool {
        let now = self.now();
        let since = now - Duration::milliseconds(lag_ms);
        self.schedules.iter().filter(|s| s.end.is_none()).all(|s| {
            let Some(state) = self.committed_schedule(&s.name) else {
                return false;
            };
            let current = s.generations.last() == Some(&state.generation)
                && (state.status == crate::schedule::Status::Paused) == s.paused;
            current && (s.paused || state.next_tick.is_none_or(|t| t > since))
        })
    }

    /// Whether the group is settled: no open transaction, no rebalance, every member alive,
    /// every slot's process running in the current generation (so every partition has a
    /// live owner).
    fn group_settled(&self) -> bool {
        let w = self.world();
        if !w.cluster.txns.is_empty() || w.cluster.group.rebalance_since.is_some() {
            return false;
        }
        let live_members = w.cluster.group.members.values().all(|m| {
            m.expires_at.is_none()
                && w.procs
                    .get(&m.pid)
                    .is_some_and(|p| p.status == Status::Running)
        });
        live_members
            && self.slots.values().all(|s| {
                s.pid.and_then(|pid| w.procs.get(&pid)).is_some_and(|p| {
                    p.status == Status::Running
                        && p.consumer
                            .member
                            .is_some_and(|m| w.cluster.group.is_current(m, p.consumer.generation))
                })
            })
    }

    /// Stops the faults and runs until every schedule is caught up ([`Sim::schedules_caught_up`])
    /// for a few rounds and `ticking_ms` passed (the schedules tick on, no fault), or
    /// `budget_ms` of sim time passed. True if they are.
    pub fn catch_up_schedules(&mut self, ticking_ms: i64, budget_ms: i64) -> bool {
        self.stop_faults("schedules catch up: faults stop");
        let ticked = self.now() + Duration::milliseconds(ticking_ms);
        let deadline = self.now() + Duration::milliseconds(budget_ms);
        let mut calm = 0;
        while self.now() < deadline {
            for _ in 0..3 {
                for slot in self.slots() {
                    self.run(slot, 30);
                }
                self.materialise_all();
                self.activities();
            }
            if self.group_settled() && self.schedules_caught_up(2_500) {
                calm += 1;
                if calm >= 3 && self.now() >= ticked {
                    self.note("schedules caught up");
                    return true;
                }
            } else {
                calm = 0;
            }
            self.advance(1_000);
        }
        self.note(format!("schedules did not catch up within {budget_ms} ms"));
        false
    }
}
