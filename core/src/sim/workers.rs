//! The workflow workers' slots: each runs one process at a time, a real
//! [`Driver`] over the simulated seams (log, store, materialiser, inline activities),
//! started, polled to its await points, buried when it exits and left for the supervisor to
//! restart; and its materialiser's turns.

use std::task::Poll;
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::driver::{Driver, DriverConfig, DriverError};
use crate::processor::{Processor, ProcessorConfig};

use super::exec::{ProcFuture, poll_once};
use super::host::SimHost;
use super::process::Status;
use super::scheduler::{Sim, Slot};
use super::seams::{SimInline, SimLog, SimMaterialiser, SimStore};
use super::store::MaterialiserQueue;
use super::world::{Consumer, Proc, lock};

/// The simulated workers' read-ahead of submissions ([`DriverConfig::read_ahead_bytes`]).
const READ_AHEAD_BYTES: usize = 8 * 1024;

impl Sim {
    /// A new worker slot, with a process started in it.
    pub fn add_worker(&mut self) -> u32 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(slot, Slot::default());
        let pid = self.start_process(slot);
        self.note(format!("add worker w{slot} (p{pid})"));
        slot
    }

    pub(super) fn start_process(&mut self, slot: u32) -> u64 {
        let pid = self.next_pid;
        self.next_pid += 1;
        let transactional_id = if self.config.stable_transactional_ids {
            format!("weir.workflow-workers-w{slot}")
        } else {
            format!("weir.workflow-workers-w{slot}-{pid}")
        };
        let instance = format!("w{slot}-p{pid}");
        {
            let mut w = lock(&self.world);
            let now = w.now;
            let epoch = w.cluster.init_producer(&transactional_id, now);
            w.procs.insert(
                pid,
                Proc {
                    pid,
                    slot,
                    instance: instance.clone(),
                    status: Status::Running,
                    transactional_id,
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
        }
        let processor = Processor::new(
            SimHost::new(self.faults.deferrals, self.seed),
            ProcessorConfig {
                cache_bytes: self.config.cache_bytes,
                cache_size: self.config.cache_size,
                max_record_bytes: 1 << 20,
                partitions: self.config.partitions,
                early_event_wait: chrono::Duration::milliseconds(self.config.early_event_wait_ms),
            },
        );
        let log = SimLog {
            world: self.world.clone(),
            pid,
        };
        let store = SimStore {
            world: self.world.clone(),
            pid,
        };
        let materialiser = SimMaterialiser {
            world: self.world.clone(),
            pid,
        };
        let inline = self.faults.inline && self.config.inline_activities;
        let config = DriverConfig {
            max_batch: self.config.max_batch,
            instance_id: instance,
            timer_horizon: StdDuration::from_millis(self.config.timer_horizon_ms),
            rejoin_wait: StdDuration::from_millis(self.config.session_timeout_ms as u64),
            // Drawn only when inline: the runs without it stay what they were.
            max_inline_rounds: if inline {
                1 + self.rng.range(0, 8) as usize
            } else {
                0
            },
            // Not drawn (every seed's draws stay what they were): with the small caches
            // admission closes whenever a run or two are in flight, and opens again as they
            // finish or go idle.
            admit_below: self.config.cache_size,
            admission_idle: StdDuration::from_secs(5),
            // Small, so that reading stops and starts again in every run (the simulated
            // records are some hundred bytes each).
            read_ahead_bytes: READ_AHEAD_BYTES,
        };
        let future: ProcFuture = if inline {
            let inline = SimInline {
                world: self.world.clone(),
                pid,
            };
            let mut driver =
                Driver::with_inline(processor, log, store, materialiser, config, inline);
            Box::pin(async move { driver.run().await })
        } else {
            let mut driver = Driver::new(processor, log, store, materialiser, config);
            Box::pin(async move { driver.run().await })
        };
        self.futures.insert(pid, future);
        let s = self.slots.get_mut(&slot).expect("a slot");
        s.pid = Some(pid);
        s.restart_at = None;
        pid
    }

    /// The process currently in `slot`.
    pub fn pid(&self, slot: u32) -> Option<u64> {
        self.slots.get(&slot).and_then(|s| s.pid)
    }

    pub fn slots(&self) -> Vec<u32> {
        self.slots.keys().copied().collect()
    }

    pub(super) fn status(&self, pid: u64) -> Status {
        self.world()
            .procs
            .get(&pid)
            .map_or(Status::Dead, |p| p.status)
    }

    /// The await point `slot`'s process is parked at.
    pub fn at(&self, slot: u32) -> Option<&'static str> {
        let pid = self.pid(slot)?;
        self.world().procs.get(&pid).map(|p| p.at)
    }

    /// The partitions `slot`'s process owns (as its consumer knows).
    pub fn owned(&self, slot: u32) -> Vec<i32> {
        self.pid(slot)
            .and_then(|pid| {
                self.world()
                    .procs
                    .get(&pid)
                    .map(|p| p.consumer.owned.iter().copied().collect())
            })
            .unwrap_or_default()
    }

    /// Polls `slot`'s process up to `polls` times (fewer if it is not running or exits).
    pub fn run(&mut self, slot: u32, polls: usize) -> usize {
        let Some(pid) = self.pid(slot) else {
            return 0;
        };
        for i in 0..polls {
            if self.status(pid) != Status::Running {
                return i;
            }
            let Some(future) = self.futures.get_mut(&pid) else {
                return i;
            };
            if let Poll::Ready(result) = poll_once(future.as_mut()) {
                self.futures.remove(&pid);
                self.exited(slot, pid, result);
                return i + 1;
            }
        }
        polls
    }

    /// Polls `slot`'s process until it is parked at an await point whose name starts with
    /// `at` (at most `max` polls); true if it got there.
    /// (It polls at least once.)
    pub fn run_until(&mut self, slot: u32, at: &str, max: usize) -> bool {
        for _ in 0..max {
            if self.run(slot, 1) == 0 {
                return false;
            }
            if self.at(slot).is_some_and(|a| a.starts_with(at)) {
                return true;
            }
        }
        false
    }

    /// Polls `slot`'s process until it has committed one more transaction and parks right
    /// after (before the batch reaches its materialiser); true if it did within `max` polls.
    pub fn run_until_committed(&mut self, slot: u32, max: usize) -> bool {
        let commits = |sim: &Sim| {
            sim.pid(slot)
                .and_then(|pid| sim.world().procs.get(&pid).map(|p| p.commits))
                .unwrap_or(0)
        };
        let before = commits(self);
        for _ in 0..max {
            if self.run(slot, 1) == 0 {
                return false;
            }
            if commits(self) > before {
                return true;
            }
        }
        false
    }

    /// Polls `slot`'s process until it has no transaction open (at most `max` polls); true
    /// if it has none.
    pub fn run_until_no_transaction(&mut self, slot: u32, max: usize) -> bool {
        for _ in 0..=max {
            let open = self
                .pid(slot)
                .and_then(|pid| self.world().procs.get(&pid).and_then(|p| p.open_txn));
            if open.is_none() {
                return true;
            }
            if self.run(slot, 1) == 0 {
                return false;
            }
        }
        false
    }

    fn exited(&mut self, slot: u32, pid: u64, result: Result<(), DriverError>) {
        let name = self
            .world()
            .procs
            .get(&pid)
            .map_or_else(|| format!("p{pid}"), Proc::name);
        match &result {
            Ok(()) => self.note(format!("{name} exits after shutdown")),
            Err(e) => {
                self.world().stats.exits += 1;
                self.note(format!("{name} exits with an error: {e}"));
            }
        }
        lock(&self.world).bury(pid, false);
        self.vacate(slot);
    }

    /// The slot's process is gone: restart it after a while (or drop the slot).
    pub(super) fn vacate(&mut self, slot: u32) {
        let delay = self.rng.range(500, 3_000) as i64;
        let now = self.now();
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        s.pid = None;
        if s.removing {
            self.slots.remove(&slot);
        } else {
            s.restart_at = Some(now + Duration::milliseconds(delay));
        }
    }

    /// Lets `slot`'s writer write up to `jobs` queued jobs.
    pub fn materialise(&mut self, slot: u32, jobs: usize) {
        if let Some(pid) = self.pid(slot) {
            lock(&self.world).materialise(pid, jobs);
        }
    }

    /// Lets every writer write everything it can.
    pub fn materialise_all(&mut self) {
        let pids: Vec<u64> = self.slots.values().filter_map(|s| s.pid).collect();
        for pid in pids {
            loop {
                let mut w = lock(&self.world);
                if w.procs[&pid].mat.queue.is_empty() {
                    break;
                }
                let before = w.procs[&pid].mat.done;
                w.materialise(pid, super::store::MERGE_LIMIT);
                if w.procs[&pid].mat.done == before {
                    break;
                }
            }
        }
    }
}
