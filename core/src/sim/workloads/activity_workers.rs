//! The activity workers (`Faults::activity_workers`): their slots, each running one process
//! of the real activity core at a time (restarted after it dies), their turns, their faults
//! (kills with attempts in flight or inside a commit, freezes into zombies, removals), and the
//! seeded step that picks one of these, mostly on a worker with work in hand.

use chrono::Duration;

use crate::sim::process::Status;
use crate::sim::scheduler::{Sim, Slot};
use crate::sim::world::lock;

impl Sim {
    /// A new activity worker slot, with a process started in it.
    pub fn add_activity_worker(&mut self) -> u32 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.act_slots.insert(slot, Slot::default());
        let pid = self.start_activity_process(slot);
        self.note(format!("add activity worker a{slot} (p{pid})"));
        slot
    }

    pub(in crate::sim) fn start_activity_process(&mut self, slot: u32) -> u64 {
        let pid = self.next_pid;
        self.next_pid += 1;
        lock(&self.world).act_spawn(pid, slot);
        let s = self.act_slots.get_mut(&slot).expect("a slot");
        s.pid = Some(pid);
        s.restart_at = None;
        pid
    }

    pub fn act_slots(&self) -> Vec<u32> {
        self.act_slots.keys().copied().collect()
    }

    pub fn act_pid(&self, slot: u32) -> Option<u64> {
        self.act_slots.get(&slot).and_then(|s| s.pid)
    }

    /// Runs `steps` turns of `slot`'s activity worker (fewer if it is not running); restarts
    /// it later if it exited.
    pub fn act_run(&mut self, slot: u32, steps: usize) {
        let Some(pid) = self.act_pid(slot) else {
            return;
        };
        for _ in 0..steps {
            let status = {
                let mut w = lock(&self.world);
                w.act_step(pid);
                w.act.procs.get(&pid).map_or(Status::Dead, |p| p.status)
            };
            match status {
                Status::Running => {}
                Status::Frozen { .. } => return,
                Status::Dead => {
                    self.act_vacate(slot);
                    return;
                }
            }
        }
    }

    /// Runs every activity worker `steps` turns.
    pub fn act_all(&mut self, steps: usize) {
        for slot in self.act_slots() {
            self.act_run(slot, steps);
        }
    }

    /// Runs `slot`'s activity worker until `at` holds of it (at most `max` turns); true if
    /// it does.
    pub fn act_run_until(
        &mut self,
        slot: u32,
        max: usize,
        at: impl Fn(&crate::sim::activity::ActProc) -> bool,
    ) -> bool {
        for _ in 0..max {
            let holds = self
                .act_pid(slot)
                .is_some_and(|pid| self.world().act.procs.get(&pid).is_some_and(&at));
            if holds {
                return true;
            }
            self.act_run(slot, 1);
            // Attempts and commit intervals take time.
            let ms = self.rng.range(10, 300) as i64;
            self.advance(ms);
        }
        false
    }

    /// Runs `slot`'s activity worker until it has produced a commit's records and not
    /// committed its offsets yet (at most `max` turns).
    pub fn act_run_until_committing(&mut self, slot: u32, max: usize) -> bool {
        self.act_run_until(slot, max, |p| p.producing.is_some())
    }

    /// Runs `slot`'s activity worker until it has attempts in flight (at most `max` turns).
    pub fn act_run_until_attempting(&mut self, slot: u32, max: usize) -> bool {
        self.act_run_until(slot, max, |p| !p.running.is_empty())
    }

    fn act_vacate(&mut self, slot: u32) {
        let delay = self.rng.range(500, 3_000) as i64;
        let now = self.now();
        let Some(s) = self.act_slots.get_mut(&slot) else {
            return;
        };
        s.pid = None;
        if s.removing {
            self.act_slots.remove(&slot);
        } else {
            s.restart_at = Some(now + Duration::milliseconds(delay));
        }
    }

    /// kill -9 of `slot`'s activity worker, wherever it stands (attempts in flight are lost,
    /// answers produced without their offsets are duplicates of the next owner's).
    pub fn act_crash(&mut self, slot: u32) {
        let Some(pid) = self.act_pid(slot) else {
            return;
        };
        let (name, at, running, produced) = {
            let w = self.world();
            let p = &w.act.procs[&pid];
            (
                p.name(),
                p.at,
                p.running.len(),
                p.producing.as_ref().map_or(0, |c| c.records.len()),
            )
        };
        self.note(format!(
            "kill -9 {name} at `{at}` ({running} attempts in flight, {produced} records produced without their offsets)"
        ));
        self.world().stats.crashes += 1;
        lock(&self.world).act_bury(pid, true);
        self.act_vacate(slot);
    }

    pub fn act_freeze(&mut self, slot: u32, ms: i64) {
        if let Some(pid) = self.act_pid(slot) {
            self.note(format!("freeze a{slot} for {ms} ms"));
            lock(&self.world).act_freeze(pid, ms);
        }
    }

    /// Asks `slot`'s activity worker to shut down (it commits what is finished and leaves).
    pub fn act_remove(&mut self, slot: u32) {
        let Some(s) = self.act_slots.get_mut(&slot) else {
            return;
        };
        s.removing = true;
        match s.pid {
            Some(pid) => {
                self.note(format!(
                    "remove activity worker a{slot} (shutdown requested)"
                ));
                if let Some(p) = lock(&self.world).act.procs.get_mut(&pid) {
                    p.shutdown = true;
                }
            }
            None => {
                self.act_slots.remove(&slot);
            }
        }
    }

    /// One step of the activity workers' faults (`Faults::activity_workers`).
    pub(in crate::sim) fn random_activity_step(&mut self, action: &str) {
        // A fault mostly hits a worker with work in hand (attempts running or retries
        // waiting): most of a run's workers are idle most of the time.
        let busy: Vec<u32> = {
            let w = self.world();
            self.act_slots
                .iter()
                .filter(|(_, s)| {
                    s.pid
                        .and_then(|pid| w.act.procs.get(&pid))
                        .is_some_and(|p| {
                            let g = p.core.gauges();
                            g.running + g.waiting > 0 || p.producing.is_some()
                        })
                })
                .map(|(slot, _)| *slot)
                .collect()
        };
        let slots = if busy.is_empty() || action == "act-run" || self.rng.chance(250) {
            self.act_slots()
        } else {
            busy
        };
        let slot = (!slots.is_empty()).then(|| *self.rng.pick(&slots));
        let session = self.config.session_timeout_ms;
        match (action, slot) {
            ("act-run", Some(slot)) => {
                let steps = self.rng.range(1, 12) as usize;
                self.act_run(slot, steps);
            }
            ("act-crash", Some(slot)) => {
                // Mostly with attempts in flight; sometimes inside a commit (it hangs).
                // (Where it has nothing in hand, mostly not: a kill costs the group a session
                // timeout.)
                let turns = self.rng.range(1, 30) as usize;
                let there = if self.rng.chance(250) {
                    self.act_run_until_committing(slot, turns)
                } else {
                    self.act_run_until_attempting(slot, turns)
                };
                if there || self.rng.chance(200) {
                    self.act_crash(slot);
                }
            }
            ("act-zombie", Some(slot)) => {
                // Mostly inside a commit: its answers are produced, its offsets not sent.
                let turns = self.rng.range(1, 30) as usize;
                let there = if self.rng.chance(750) {
                    self.act_run_until_committing(slot, turns)
                } else {
                    self.act_run_until_attempting(slot, turns)
                };
                if !there && !self.rng.chance(200) {
                    return;
                }
                let txn = self.config.transaction_timeout_ms;
                let ms = if self.rng.chance(750) {
                    self.rng.range((session + 500) as u64, (txn - 2_000) as u64)
                } else {
                    self.rng.range((txn - 2_000) as u64, (txn + 10_000) as u64)
                } as i64;
                self.act_freeze(slot, ms);
            }
            ("act-add", _) => {
                self.add_activity_worker();
            }
            ("act-remove", Some(slot)) => self.act_remove(slot),
            _ => {}
        }
    }
}
