//! The faults of the workflow workers and the store: kill -9, freezes (pauses shorter than a
//! session, zombies longer), removals, store outages, days of idleness and minutes of steady
//! load; the seeded steps that choose where and how long; and the bound on a live writer's
//! lag that holds when `Faults::revoked_writes` is off.

use chrono::Duration;

use crate::schedule::ScheduleAction;
use crate::sim::process::Status;
use crate::sim::scheduler::Sim;
use crate::sim::world::lock;

impl Sim {
    /// kill -9 of `slot`'s process, wherever it stands.
    pub fn crash(&mut self, slot: u32) {
        let Some(pid) = self.pid(slot) else {
            return;
        };
        let (name, at, queued, txn) = {
            let w = self.world();
            let p = &w.procs[&pid];
            (p.name(), p.at, p.mat.queue.len(), p.open_txn)
        };
        self.note(format!(
            "kill -9 {name} at `{at}` ({queued} materialiser jobs lost, open txn {txn:?})"
        ));
        self.world().stats.crashes += 1;
        // Dropping the future drops the driver where it stands.
        drop(self.futures.remove(&pid));
        lock(&self.world).bury(pid, true);
        self.vacate(slot);
    }

    /// SIGSTOP `slot`'s process for `ms` (SIGCONT then).
    pub fn freeze(&mut self, slot: u32, ms: i64) {
        if let Some(pid) = self.pid(slot) {
            self.note(format!("freeze w{slot} for {ms} ms"));
            lock(&self.world).freeze(pid, ms);
        }
    }

    /// SIGCONT now.
    pub fn resume(&mut self, slot: u32) {
        if let Some(pid) = self.pid(slot) {
            self.note(format!("resume w{slot}"));
            lock(&self.world).resume(pid);
        }
    }

    /// Asks `slot`'s process to shut down; the slot goes when it has.
    pub fn remove_worker(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        s.removing = true;
        match s.pid {
            Some(pid) => {
                self.note(format!("remove worker w{slot} (shutdown requested)"));
                if let Some(p) = lock(&self.world).procs.get_mut(&pid) {
                    p.shutdown = true;
                }
            }
            None => {
                self.note(format!("remove worker w{slot} (no process)"));
                self.slots.remove(&slot);
            }
        }
    }

    /// The store is down for `ms`.
    pub fn store_outage(&mut self, ms: i64) {
        self.note(format!("store outage for {ms} ms"));
        let mut w = lock(&self.world);
        w.store.down_until = Some(w.now + Duration::milliseconds(ms));
    }

    /// Nothing arrives for `ms`; the workers keep polling (an idle worker's loop goes on).
    /// Time moves in steps of an hour, each taken only once the group is stable (a live
    /// worker would have rejoined a rebalance within seconds; a jump must not make it miss
    /// the rebalance timeout); after each step every worker has idle turns (it refills its
    /// timers — a scan of an hour — and writes what an idle turn writes).
    pub fn idle(&mut self, ms: i64) {
        self.note(format!(
            "nothing arrives for {} s; the workers keep polling",
            ms / 1_000
        ));
        let end = self.now() + Duration::milliseconds(ms);
        while self.now() < end {
            for _ in 0..60 {
                if self.membership_stable() {
                    break;
                }
                for slot in self.slots() {
                    self.run(slot, 10);
                }
                self.materialise_all();
                self.advance(1_000);
            }
            let step = (end - self.now()).num_milliseconds().min(3_600_000);
            self.advance(step);
            for slot in self.slots() {
                self.run(slot, 6);
            }
            self.materialise_all();
        }
    }

    /// No rebalance and no transaction in progress, and every running member holds the
    /// current generation.
    fn membership_stable(&self) -> bool {
        let w = self.world();
        let group = &w.cluster.group;
        w.cluster.txns.is_empty()
            && group.rebalance_since.is_none()
            && w.procs
                .values()
                .filter(|p| p.status == Status::Running)
                .all(|p| {
                    p.consumer
                        .member
                        .is_some_and(|m| group.is_current(m, p.consumer.generation))
                })
    }

    /// Steady load for `ms`: before each poll of each worker, one more record arrives on one
    /// of the partitions it owns (an activity answer sent again: ignored, but no poll comes
    /// back empty, so no loop ever goes idle). One per poll, not one per owned partition: a
    /// worker with `max_batch` 1 takes one record per poll, and more would pile up a backlog
    /// no quiescent phase drains.
    pub fn steady_load(&mut self, ms: i64) {
        self.note(format!("steady load for {} s", ms / 1_000));
        let end = self.now() + Duration::milliseconds(ms);
        while self.now() < end {
            for slot in self.slots() {
                let owned = self.owned(slot);
                let answers: Vec<_> = {
                    let w = self.world();
                    let sent: Vec<_> = owned
                        .into_iter()
                        .filter_map(|p| w.activities.sent.get(&p).and_then(|a| a.last()).cloned())
                        .collect();
                    drop(w);
                    let pick = (!sent.is_empty()).then(|| self.rng.below(sent.len() as u64));
                    pick.and_then(|i| sent.into_iter().nth(i as usize))
                        .into_iter()
                        .collect()
                };
                {
                    let mut w = lock(&self.world);
                    for answer in answers {
                        w.send_answer(answer);
                    }
                }
                self.run_until(slot, "poll", 80);
            }
            self.materialise_all();
            self.activities();
            if self.faults.activity_workers {
                self.act_all(2);
            }
            let ms = self.rng.range(20, 300) as i64;
            self.advance(ms);
        }
    }

    /// Lets every running process's writer catch up if its oldest job has waited longer
    /// than `ms` while the store is up: a live writer on a healthy store is never far behind
    /// (its linger is 200 ms). Frozen processes are left alone.
    pub fn bound_writer_lag(&mut self, ms: i64) {
        let late: Vec<u32> = {
            let w = self.world();
            if w.store.available(w.now).is_err() {
                return;
            }
            self.slots
                .iter()
                .filter_map(|(slot, s)| {
                    let p = w.procs.get(&s.pid?)?;
                    let late = p.status == Status::Running
                        && p.mat
                            .oldest()
                            .is_some_and(|t| (w.now - t).num_milliseconds() > ms);
                    late.then_some(*slot)
                })
                .collect()
        };
        for slot in late {
            self.materialise(slot, crate::sim::store::MERGE_LIMIT);
        }
    }

    /// The `crash` step: kill -9 of `slot`'s process; with `Faults::hanging_txns` sometimes
    /// inside a commit (its transaction left hanging), without it never inside a transaction.
    pub(in crate::sim) fn random_crash(&mut self, slot: u32) {
        if self.faults.hanging_txns && self.rng.chance(300) {
            // Inside a commit: the transaction is left hanging.
            let polls = self.rng.range(1, 30) as usize;
            self.run_until(slot, "commit: ", polls);
        } else if !self.faults.hanging_txns && !self.run_until_no_transaction(slot, 50) {
            return; // frozen inside a transaction: no kill now
        }
        self.crash(slot);
    }

    /// The `pause` step: `slot`'s process is frozen for less than a session timeout.
    pub(in crate::sim) fn random_pause(&mut self, slot: u32) {
        let session = self.config.session_timeout_ms;
        let ms = self.rng.range(100, (session - 2_000).max(200) as u64) as i64;
        self.freeze(slot, ms);
    }

    /// The `zombie` step: `slot`'s process is frozen, mostly at a point where a zombie does
    /// harm and for long enough to be replaced.
    pub(in crate::sim) fn random_zombie(&mut self, slot: u32) {
        let session = self.config.session_timeout_ms;
        // Mostly where a zombie does most harm: inside a commit, or with jobs queued.
        if self.rng.chance(750) {
            let points = [
                "commit: before producing",
                "commit: produced",
                "commit: offsets sent",
                "materialiser: submit",
                "poll",
            ];
            let at = points[self.rng.weighted(&[2, 2, 3, 2, 1])];
            let polls = self.rng.range(1, 60) as usize;
            self.run_until(slot, at, polls);
        }
        // Mostly inside the window: replaced (past the session timeout), and back
        // before the transaction timeout.
        let txn = self.config.transaction_timeout_ms;
        let ms = if self.rng.chance(750) {
            self.rng.range((session + 500) as u64, (txn - 2_000) as u64)
        } else {
            self.rng.range((txn - 2_000) as u64, (txn + 10_000) as u64)
        } as i64;
        self.freeze(slot, ms);
    }

    /// The `outage` step: the store is down for a while.
    pub(in crate::sim) fn random_outage(&mut self) {
        // Mostly short; some of tens of seconds, ridden out (the hot path goes on)
        // within the patience, or not.
        let ms = if self.rng.chance(250) {
            self.rng.range(10_000, 45_000)
        } else {
            self.rng.range(200, 8_000)
        } as i64;
        self.store_outage(ms);
    }

    /// The `blackout` step (`Faults::blackouts`): every workflow worker process is frozen at
    /// once for one to fifteen minutes, the store down as long half the time; the clock
    /// moves through it (sessions and transactions time out), then everything goes on.
    pub(in crate::sim) fn random_blackout(&mut self) {
        let ms = self.rng.range(60_000, 15 * 60_000) as i64;
        let store_too = self.rng.chance(500);
        self.note(format!(
            "blackout for {ms} ms: every workflow worker frozen{}",
            if store_too { ", the store down" } else { "" }
        ));
        for slot in self.slots() {
            self.freeze(slot, ms);
        }
        if store_too {
            self.store_outage(ms);
        }
        self.advance(ms);
    }

    /// The `idle` step (`Faults::long_idle`): nothing arrives for eight days.
    pub(in crate::sim) fn random_idle(&mut self) {
        // Nothing arrives for days: not so with a schedule ticking (and ticking only
        // each hour the workers poll, it would start more executions than a run
        // drains). Their client pauses them for the while; if their owners do not
        // take the pauses soon, the days do not pass.
        let paused = if self.faults.schedules {
            self.pause_schedules_for_idle()
        } else {
            Some(Vec::new())
        };
        if let Some(paused) = paused {
            self.idle(8 * 24 * 3_600 * 1_000);
            for i in paused {
                let name = self.schedules[i].name.clone();
                self.schedule_command(&name, ScheduleAction::Resume);
            }
        }
    }
}
