//! The seeded scheduler: worker slots (each runs one process at a time — a real
//! [`Driver`] with the simulated seams — and restarts it after it dies), clients, the
//! activity service, the clock, and the faults. [`Sim`] is the step-by-step API the
//! scripted scenarios use; [`run_seed`] is the random run: a fault phase of seeded steps,
//! then a quiescent phase (faults stop, every worker runs until nothing is left to do), then
//! the invariants.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::task::Poll;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration};
use indexmap::IndexMap;
use serde_json::{Value, json};
use ulid::Ulid;

use crate::driver::{Driver, DriverConfig, DriverError};
use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn};
use crate::processor::{Processor, ProcessorConfig};
use crate::records::Submission;
use crate::schedule::{Overlap, ScheduleAction, ScheduleCommand, ScheduleSpec};

use super::check::{Violation, check};
use super::cluster::{Payload, SimTime, Topic};
use super::config::{Faults, SimConfig};
use super::exec::{ProcFuture, poll_once};
use super::host::SimHost;
use super::process::Status;
use super::rng::Rng;
use super::seams::{SimInline, SimLog, SimMaterialiser, SimStore};
use super::sent::{KeyedSend, ScheduleEnd, SimSchedule, StubSend, Submitted};
use super::store::MaterialiserQueue;
use super::workflows::{Workflow, unknown_ffqn};
use super::world::{Consumer, Proc, Shared, Stats, World, lock};

/// A stub request committed to `weir.history`, as the scheduler finds it.
#[derive(Debug, Clone)]
struct SeenStub {
    stub: ExecutionId,
    parent: ExecutionId,
    /// A value for it is committed.
    valued: bool,
    /// Its parent's `Finished` is committed.
    parent_finished: bool,
}

/// The weights of a run's steps, drawn per seed ("swarm testing": a run heavy in one kind of
/// fault finds what an even mix dilutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub materialise: u64,
    pub crash: u64,
    pub zombie: u64,
    pub rebalance: u64,
    pub outage: u64,
}

impl Mix {
    pub fn even() -> Self {
        Mix {
            materialise: 12,
            crash: 2,
            zombie: 2,
            rebalance: 1,
            outage: 1,
        }
    }

    pub fn random(rng: &mut Rng) -> Self {
        Mix {
            materialise: *rng.pick(&[3, 12, 30]),
            crash: *rng.pick(&[1, 2, 6]),
            zombie: *rng.pick(&[1, 2, 6]),
            rebalance: *rng.pick(&[1, 3]),
            outage: *rng.pick(&[1, 3]),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Slot {
    pid: Option<u64>,
    restart_at: Option<SimTime>,
    /// Asked to shut down; removed when its process exits.
    removing: bool,
}

/// One simulated deployment; see the module docs.
pub struct Sim {
    world: Shared,
    futures: BTreeMap<u64, ProcFuture>,
    slots: BTreeMap<u32, Slot>,
    /// The activity workers' slots (`Faults::activity_workers`).
    act_slots: BTreeMap<u32, Slot>,
    rng: Rng,
    pub seed: u64,
    pub config: SimConfig,
    pub faults: Faults,
    /// The weights of random steps.
    pub mix: Mix,
    submitted: IndexMap<ExecutionId, Submitted>,
    /// Where the poison records went (topic submissions): (partition, offset).
    poison: Vec<(i32, i64)>,
    /// Events sent to executions nobody submitted: (event id, target).
    stray_events: Vec<(String, ExecutionId)>,
    next_event: i64,
    /// The schedules clients created (`Faults::schedules`).
    schedules: Vec<SimSchedule>,
    /// Events sent to correlation keys, in order (`Faults::correlation`).
    keyed_events: Vec<KeyedSend>,
    /// How many keys `order` executions register (`order:0` ..): drawn when the run starts.
    order_keys: i64,
    /// The stub writes the scheduler made, in order (`Faults::stub_writes`).
    stub_sends: Vec<StubSend>,
    next_stub_value: i64,
    /// Violations found when the run first settled, before the events sent to let the
    /// waiting executions finish (the correlation checks of that moment).
    early: Vec<Violation>,
    next_command: u64,
    next_slot: u32,
    next_pid: u64,
    steps: u64,
}

/// The instant every run starts at.
pub fn epoch() -> SimTime {
    DateTime::from_timestamp(1_735_689_600, 0).expect("a valid time")
}

impl Sim {
    /// A deployment with `config.workers` worker slots, nothing submitted yet.
    pub fn new(seed: u64, config: SimConfig, faults: Faults) -> Self {
        let mut rng = Rng::new(seed);
        let world_rng = rng.fork();
        let world = World::new(config.clone(), faults, world_rng, epoch());
        let workers = config.workers;
        let mut sim = Sim {
            world: std::sync::Arc::new(std::sync::Mutex::new(world)),
            futures: BTreeMap::new(),
            slots: BTreeMap::new(),
            act_slots: BTreeMap::new(),
            rng,
            seed,
            config,
            faults,
            mix: Mix::even(),
            submitted: IndexMap::new(),
            poison: Vec::new(),
            stray_events: Vec::new(),
            next_event: 0,
            schedules: Vec::new(),
            keyed_events: Vec::new(),
            order_keys: 2,
            stub_sends: Vec::new(),
            next_stub_value: 1_000,
            early: Vec::new(),
            next_command: 0,
            next_slot: 1,
            next_pid: 1,
            steps: 0,
        };
        sim.note(format!("seed {seed}: {:?}; faults {faults}", sim.config));
        for _ in 0..workers {
            sim.add_worker();
        }
        if faults.activity_workers {
            lock(&sim.world).act_configure();
            for _ in 0..sim.rng.range(1, 2) {
                sim.add_activity_worker();
            }
        }
        sim
    }

    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.world)
    }

    pub fn now(&self) -> SimTime {
        self.world().now
    }

    /// A scheduler line of the trace.
    pub fn note(&mut self, text: impl AsRef<str>) {
        self.steps += 1;
        let mut w = lock(&self.world);
        let line = format!("{:>10} #{:<4} {}", w.clock(), self.steps, text.as_ref());
        w.trace.push(line);
    }

    pub fn trace(&self) -> Vec<String> {
        self.world().trace.clone()
    }

    pub fn submitted(&self) -> &IndexMap<ExecutionId, Submitted> {
        &self.submitted
    }

    pub fn schedules(&self) -> &[SimSchedule] {
        &self.schedules
    }

    pub fn keyed_events(&self) -> &[KeyedSend] {
        &self.keyed_events
    }

    pub fn stub_sends(&self) -> &[StubSend] {
        &self.stub_sends
    }

    // ---- workers ----

    /// A new worker slot, with a process started in it.
    pub fn add_worker(&mut self) -> u32 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(slot, Slot::default());
        let pid = self.start_process(slot);
        self.note(format!("add worker w{slot} (p{pid})"));
        slot
    }

    fn start_process(&mut self, slot: u32) -> u64 {
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

    fn status(&self, pid: u64) -> Status {
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
    fn vacate(&mut self, slot: u32) {
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

    // ---- activity workers ----

    /// A new activity worker slot, with a process started in it.
    pub fn add_activity_worker(&mut self) -> u32 {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.act_slots.insert(slot, Slot::default());
        let pid = self.start_activity_process(slot);
        self.note(format!("add activity worker a{slot} (p{pid})"));
        slot
    }

    fn start_activity_process(&mut self, slot: u32) -> u64 {
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
        at: impl Fn(&super::activity::ActProc) -> bool,
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

    /// Runs `slot`'s activity worker until it has a transaction open (at most `max` turns).
    pub fn act_run_until_committing(&mut self, slot: u32, max: usize) -> bool {
        self.act_run_until(slot, max, |p| p.open_txn.is_some())
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
    /// an open transaction hangs).
    pub fn act_crash(&mut self, slot: u32) {
        let Some(pid) = self.act_pid(slot) else {
            return;
        };
        let (name, at, running, txn) = {
            let w = self.world();
            let p = &w.act.procs[&pid];
            (
                p.name(),
                p.at,
                p.running.len(),
                p.open_txn.as_ref().map(|t| t.0),
            )
        };
        self.note(format!(
            "kill -9 {name} at `{at}` ({running} attempts in flight, open txn {txn:?})"
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

    /// The activity service reads requests and sends the answers due.
    pub fn activities(&mut self) {
        lock(&self.world).activity_step();
    }

    /// The store is down for `ms`.
    pub fn store_outage(&mut self, ms: i64) {
        self.note(format!("store outage for {ms} ms"));
        let mut w = lock(&self.world);
        w.store.down_until = Some(w.now + Duration::milliseconds(ms));
    }

    /// Moves the clock by `ms`, doing in order whatever falls due on the way (resumes,
    /// session and rebalance timeouts, transaction timeouts, restarts, the store's return).
    pub fn advance(&mut self, ms: i64) {
        let target = self.now() + Duration::milliseconds(ms);
        for _ in 0..100_000 {
            let next = [self.world().next_deadline(), self.next_restart()]
                .into_iter()
                .flatten()
                .min()
                .filter(|t| *t <= target);
            let Some(next) = next else {
                break;
            };
            {
                let mut w = lock(&self.world);
                w.now = w.now.max(next);
                w.tick();
            }
            self.restarts();
        }
        {
            let mut w = lock(&self.world);
            w.now = target;
            w.tick();
        }
        self.restarts();
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

    fn next_restart(&self) -> Option<SimTime> {
        self.slots
            .values()
            .chain(self.act_slots.values())
            .filter(|s| s.pid.is_none() && !s.removing)
            .filter_map(|s| s.restart_at)
            .min()
    }

    fn restarts(&mut self) {
        let now = self.now();
        let due: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                s.pid.is_none() && !s.removing && s.restart_at.is_some_and(|t| t <= now)
            })
            .map(|(slot, _)| *slot)
            .collect();
        for slot in due {
            let pid = self.start_process(slot);
            self.note(format!("supervisor restarts w{slot} as p{pid}"));
        }
        let due: Vec<u32> = self
            .act_slots
            .iter()
            .filter(|(_, s)| {
                s.pid.is_none() && !s.removing && s.restart_at.is_some_and(|t| t <= now)
            })
            .map(|(slot, _)| *slot)
            .collect();
        for slot in due {
            let pid = self.start_activity_process(slot);
            self.note(format!("supervisor restarts a{slot} as p{pid}"));
        }
    }

    // ---- clients ----

    fn new_id(&mut self) -> ExecutionId {
        let ms = self.now().timestamp_millis() as u64;
        let random =
            u128::from(self.rng.next_u64()) << 16 | u128::from(self.rng.next_u64() & 0xffff);
        ExecutionId::top_level(Ulid::from_parts(ms, random))
    }

    /// A client submits a new execution of `workflow`.
    pub fn submit(&mut self, workflow: Workflow, params: &[i64]) -> ExecutionId {
        self.submit_at(workflow, params, None)
    }

    /// A client submits a new execution of `workflow` to start at `at`.
    pub fn submit_at(
        &mut self,
        workflow: Workflow,
        params: &[i64],
        at: Option<SimTime>,
    ) -> ExecutionId {
        self.submit_with_deadline(workflow, params, at, None)
    }

    /// A client submits a new execution of `workflow` to start at `at`, with `deadline`.
    pub fn submit_with_deadline(
        &mut self,
        workflow: Workflow,
        params: &[i64],
        at: Option<SimTime>,
        deadline: Option<SimTime>,
    ) -> ExecutionId {
        let id = self.new_id();
        self.submit_execution(
            id.clone(),
            workflow.ffqn(),
            json!(params),
            (at, deadline),
            workflow.expected(params),
        );
        id
    }

    /// A client submits `id` (again, if it was submitted before: the same submission), to
    /// start at `scheduled_at`, with `deadline`.
    pub fn submit_execution(
        &mut self,
        id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        (scheduled_at, deadline): (Option<SimTime>, Option<SimTime>),
        expected: ExecutionResult,
    ) {
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: ffqn.clone(),
            params: params.clone(),
            parent: None,
            scheduled_at,
            correlation_id: Some(format!("c-{id}")),
            metadata: Default::default(),
            deadline,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            id.to_string(),
            None,
            Payload::Submission(submission),
        );
        let entry = self.submitted.entry(id.clone()).or_insert(Submitted {
            ffqn,
            params,
            scheduled_at,
            expected,
            times: 0,
            conflicts: 0,
            events: Vec::new(),
            cancelled: false,
            deadline,
        });
        entry.times += 1;
        let times = entry.times;
        let text = format!(
            "submit {id} {}{} {}{}{} -> submissions/{partition}@{offset}",
            entry.ffqn.function(),
            entry.params,
            entry
                .scheduled_at
                .map(|t| format!("at +{}ms ", (t - epoch()).num_milliseconds()))
                .unwrap_or_default(),
            entry
                .deadline
                .map(|t| format!("by +{}ms ", (t - epoch()).num_milliseconds()))
                .unwrap_or_default(),
            if times > 1 { "(again)" } else { "" },
        );
        self.note(text);
    }

    /// A client sends the event `approved` with `payload` and `event_id` to `target`
    /// (`weir.events`, keyed by the target).
    pub fn send_event(&mut self, target: &ExecutionId, event_id: String, payload: i64) {
        let event = crate::records::InboundEvent {
            event: crate::records::ReceivedEvent {
                event_id: event_id.clone(),
                name: "approved".to_owned(),
                payload: json!(payload),
            },
            target: target.clone(),
            sent_at: self.now(),
            correlation_key: None,
            waited_until: None,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Events,
            target.to_string(),
            None,
            Payload::Event(event),
        );
        match self.submitted.get_mut(target) {
            Some(s) => s.events.push((event_id.clone(), payload)),
            None => self.stray_events.push((event_id.clone(), target.clone())),
        }
        self.note(format!(
            "event {event_id} = {payload} for {target} -> events/{partition}@{offset}"
        ));
    }

    /// A random event: mostly a new one for an `approval`, some sent again (the same id),
    /// some for another workflow (never taken: buffered until it finishes) or for an
    /// execution nobody submitted (dead-lettered).
    fn random_event(&mut self) {
        let approvals: Vec<ExecutionId> = self
            .submitted
            .iter()
            .filter(|(_, s)| Workflow::of(&s.ffqn) == Some(Workflow::Approval))
            .map(|(id, _)| id.clone())
            .collect();
        let stray = self.rng.chance(50);
        if stray || approvals.is_empty() {
            if !stray {
                return;
            }
            let target = if !self.submitted.is_empty() && self.rng.chance(500) {
                let i = self.rng.below(self.submitted.len() as u64) as usize;
                self.submitted.get_index(i).map(|(id, _)| id.clone())
            } else {
                None
            };
            if target.is_none() && self.rng.chance(400) {
                self.early_approval();
                return;
            }
            let target = target.unwrap_or_else(|| self.new_id());
            self.next_event += 1;
            let n = self.next_event;
            self.send_event(&target, format!("ev-{n}"), n);
            return;
        }
        let target = self.rng.pick(&approvals).clone();
        let earlier = self.submitted[&target].events.clone();
        if !earlier.is_empty() && self.rng.chance(200) {
            let (id, payload) = self.rng.pick(&earlier).clone();
            self.send_event(&target, id, payload);
        } else {
            self.next_event += 1;
            let n = self.next_event;
            self.send_event(&target, format!("ev-{n}"), n);
        }
    }

    /// A client sends an event to an execution it has not submitted yet, then submits it (an
    /// `approval`): the worker may read the two in either order (they are on two topics), and
    /// an event read first is kept for the execution until its submission comes.
    fn early_approval(&mut self) {
        let id = self.new_id();
        self.next_event += 1;
        let n = self.next_event;
        self.send_event(&id, format!("ev-{n}"), n);
        self.stray_events.retain(|(_, target)| *target != id);
        let params = if self.rng.chance(333) {
            vec![0]
        } else {
            vec![self.rng.range(50, 15_000) as i64]
        };
        self.submit_execution(
            id.clone(),
            Workflow::Approval.ffqn(),
            json!(params),
            (None, None),
            Workflow::Approval.expected(&params),
        );
        if let Some(s) = self.submitted.get_mut(&id) {
            s.events.push((format!("ev-{n}"), n));
        }
    }

    /// A client sends the event `paid` with `payload` and `event_id` to correlation key `key`
    /// (`weir.events`, keyed by the key).
    pub fn send_keyed_event(&mut self, key: &str, event_id: String, payload: i64) {
        let sent_at = self.now();
        let event = crate::correlation::KeyedEvent {
            event: crate::records::ReceivedEvent {
                event_id: event_id.clone(),
                name: super::workflows::ORDER_EVENT.to_owned(),
                payload: json!(payload),
            },
            key: key.to_owned(),
            sent_at,
            returned_by: None,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Events,
            key.to_owned(),
            None,
            Payload::KeyedEvent(event),
        );
        let again = self.keyed_events.iter().any(|k| k.event_id == event_id);
        self.keyed_events.push(KeyedSend {
            key: key.to_owned(),
            event_id: event_id.clone(),
            payload,
            sent_at,
        });
        self.note(format!(
            "event {event_id} = {payload} for key `{key}`{} -> events/{partition}@{offset}",
            if again { " (again)" } else { "" }
        ));
    }

    /// A new keyed event's id and payload.
    fn new_keyed_event(&mut self) -> (String, i64) {
        self.next_event += 1;
        let n = self.next_event;
        (format!("kev-{n}"), n)
    }

    /// A random event for a correlation key: mostly a new one for a key of the pool (held,
    /// waited for, or not registered yet), a few for a key nobody registers (buffered for
    /// good); with `Faults::correlation_duplicates` some sent again (the same id: at once, as
    /// a producer's retry would, or later, within the key's deduplication window: a resend
    /// after [`crate::correlation::DEDUP_WINDOW`] is a new event by the rules).
    fn random_keyed_event(&mut self) {
        let duplicates = self.faults.correlation_duplicates;
        let now = self.now();
        let r = &mut self.rng;
        if r.chance(200) && duplicates && !self.keyed_events.is_empty() {
            let i = r.below(self.keyed_events.len() as u64) as usize;
            let k = self.keyed_events[i].clone();
            let first = self
                .keyed_events
                .iter()
                .filter(|e| e.event_id == k.event_id)
                .map(|e| e.sent_at)
                .min()
                .unwrap_or(k.sent_at);
            if now < first + crate::correlation::DEDUP_WINDOW {
                self.send_keyed_event(&k.key, k.event_id, k.payload);
                return;
            }
        }
        let r = &mut self.rng;
        let key = if r.chance(60) {
            "order:unclaimed".to_owned()
        } else {
            super::workflows::order_key(r.below(self.order_keys as u64) as i64)
        };
        let twice = r.chance(100) && duplicates;
        let (id, payload) = self.new_keyed_event();
        self.send_keyed_event(&key, id.clone(), payload);
        if twice {
            self.send_keyed_event(&key, id, payload);
        }
    }

    // ---- stubs (`Faults::stub_writes`) ----

    /// Submitted executions that are not `stub-writer`s: the run's workload, which
    /// [`SimConfig::executions`] bounds.
    fn workload(&self) -> usize {
        self.submitted
            .values()
            .filter(|s| Workflow::of(&s.ffqn) != Some(Workflow::StubWriter))
            .count()
    }

    /// The stub requests committed to `weir.history` so far, in log order: (stub, parent).
    pub fn stub_requests(&self) -> Vec<(ExecutionId, ExecutionId)> {
        let (stubs, _) = self.committed_stubs();
        stubs.into_iter().map(|s| (s.stub, s.parent)).collect()
    }

    /// Whether a `stubbed` or `stub-race` execution was submitted.
    fn stubbing(&self) -> bool {
        self.submitted.values().any(|s| {
            matches!(
                Workflow::of(&s.ffqn),
                Some(Workflow::Stubbed | Workflow::StubRace)
            )
        })
    }

    /// The stub requests committed to `weir.history` so far, in log order, and a few ids of
    /// activity requests (children that are no stubs).
    fn committed_stubs(&self) -> (Vec<SeenStub>, Vec<ExecutionId>) {
        use crate::model::{ChildKind, HistoryEvent, JoinSetRequest, Response};
        use crate::records::HistoryEntry;
        let w = self.world();
        let mut stubs: IndexMap<ExecutionId, SeenStub> = IndexMap::new();
        let mut finished = std::collections::BTreeSet::new();
        let mut activities = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((&record.execution_id, record.seq)) {
                continue;
            }
            match &record.entry {
                HistoryEntry::Event {
                    event:
                        HistoryEvent::JoinSetRequest {
                            request:
                                JoinSetRequest::ChildExecutionRequest {
                                    child_execution_id,
                                    child_kind,
                                    ..
                                },
                            ..
                        },
                    ..
                } => match child_kind {
                    ChildKind::Stub => {
                        stubs.insert(
                            child_execution_id.clone(),
                            SeenStub {
                                stub: child_execution_id.clone(),
                                parent: record.execution_id.clone(),
                                valued: false,
                                parent_finished: false,
                            },
                        );
                    }
                    ChildKind::Activity if activities.len() < 20 => {
                        activities.push(child_execution_id.clone());
                    }
                    _ => {}
                },
                HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                    child_execution_id,
                    ..
                }) => {
                    if let Some(s) = stubs.get_mut(child_execution_id) {
                        s.valued = true;
                    }
                }
                HistoryEntry::Finished { .. } => {
                    finished.insert(record.execution_id.clone());
                }
                _ => {}
            }
        }
        let stubs = stubs
            .into_values()
            .map(|s| SeenStub {
                parent_finished: finished.contains(&s.parent),
                ..s
            })
            .collect();
        (stubs, activities)
    }

    fn new_stub_value(&mut self) -> i64 {
        self.next_stub_value += 1;
        self.next_stub_value
    }

    /// A client writes `result` as the value of stub `stub` from outside: a `Response` on
    /// `weir.responses`, keyed by the stub's parent (what `weir stub` sends).
    pub fn write_stub(&mut self, stub: &ExecutionId, result: ExecutionResult, after_finish: bool) {
        let Some(parent) = stub.parent() else {
            return;
        };
        let response = crate::model::Response::ChildExecutionFinished {
            child_execution_id: stub.clone(),
            result: result.clone(),
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            parent.to_string(),
            None,
            Payload::Response(response),
        );
        let sent_at = self.now();
        self.stub_sends.push(StubSend {
            target: stub.clone(),
            result: result.clone(),
            writer: None,
            wrong_function: false,
            after_finish,
            sent_at,
        });
        self.note(format!(
            "stub {stub} = {result} from outside{} -> responses/{partition}@{offset}",
            if after_finish {
                " (its parent finished)"
            } else {
                ""
            }
        ));
    }

    /// A client submits a `stub-writer` that writes `ok(value)` as the value of `target`
    /// (through another function than `double` if `wrong_function`).
    pub fn submit_stub_writer(
        &mut self,
        target: &ExecutionId,
        value: i64,
        wrong_function: bool,
        after_finish: bool,
    ) -> ExecutionId {
        let id = self.new_id();
        let params = json!([target.to_string(), value, i64::from(wrong_function)]);
        let expected = Workflow::StubWriter.expected(&[]);
        let sent_at = self.now();
        self.stub_sends.push(StubSend {
            target: target.clone(),
            result: ExecutionResult::Ok(json!(value)),
            writer: Some(id.clone()),
            wrong_function,
            after_finish,
            sent_at,
        });
        self.submit_execution(
            id.clone(),
            Workflow::StubWriter.ffqn(),
            params,
            (None, None),
            expected,
        );
        id
    }

    /// A random write of a stub: mostly of a committed stub request (a new value, or one
    /// written for it before: the same value again), by a `stub-writer` or from outside
    /// (some twice at once, a few that do not fit), whether its parent still waits or has
    /// finished; some by writers naming no stub request (`not-found`): a top-level id, a
    /// child of nobody, an activity, a stub through another function
    /// (`Faults::stub_wrong_function`).
    fn random_stub_write(&mut self) {
        let writers = self.submitted.len() - self.workload();
        if writers >= 4 * self.config.executions + 8 {
            return;
        }
        let (stubs, activities) = self.committed_stubs();
        // Before the first stub request, mostly nothing to write.
        let none = if stubs.is_empty() {
            self.rng.chance(40)
        } else {
            self.rng.chance(120)
        };
        if stubs.is_empty() && !none {
            return;
        }
        if none {
            let value = self.new_stub_value();
            let js = crate::model::JoinSetId::generated(1).expect("a join set id");
            let (target, wrong, after) = match self.rng.below(4) {
                0 => (self.new_id(), false, false),
                2 if !activities.is_empty() => (self.rng.pick(&activities).clone(), false, false),
                3 if !stubs.is_empty() && self.faults.stub_wrong_function => {
                    let s = self.rng.pick(&stubs).clone();
                    (s.stub, true, s.parent_finished)
                }
                _ => (self.new_id().child(&js, 1), false, false),
            };
            self.submit_stub_writer(&target, value, wrong, after);
            return;
        }
        // Some of the stubs whose parent finished: the value they hold stays theirs.
        let done: Vec<&SeenStub> = stubs.iter().filter(|s| s.parent_finished).collect();
        let s = if !done.is_empty() && self.rng.chance(150) {
            (*self.rng.pick(&done)).clone()
        } else {
            self.rng.pick(&stubs).clone()
        };
        let earlier: Vec<i64> = self
            .stub_sends
            .iter()
            .filter(|x| x.target == s.stub && !x.wrong_function)
            .filter_map(|x| match &x.result {
                ExecutionResult::Ok(v) => v.as_i64(),
                _ => None,
            })
            .collect();
        let value = if !earlier.is_empty() && self.rng.chance(400) {
            *self.rng.pick(&earlier)
        } else {
            self.new_stub_value()
        };
        if self.rng.chance(350) {
            let result = if self.rng.chance(120) {
                ExecutionResult::Ok(json!(format!("v{value}")))
            } else {
                ExecutionResult::Ok(json!(value))
            };
            // A value that does not fit before one that does, while the stub has none yet
            // (as far as the client knows): refused, then taken.
            if !s.valued && self.rng.chance(300) {
                let misfit = ExecutionResult::Ok(json!(format!("v{value}")));
                self.write_stub(&s.stub, misfit, s.parent_finished);
            }
            self.write_stub(&s.stub, result.clone(), s.parent_finished);
            if self.rng.chance(200) {
                self.write_stub(&s.stub, result, s.parent_finished);
            }
        } else {
            self.submit_stub_writer(&s.stub, value, false, s.parent_finished);
        }
    }

    /// Writes the stub of every `stubbed` execution without a result whose stub holds no
    /// value (by a writer or from outside) and settles again, round after round until none
    /// is left; returns whether the last round settled.
    pub fn answer_stubs(&mut self, budget_ms: i64) -> bool {
        let mut settled = true;
        for _ in 0..3 {
            let waiting: std::collections::BTreeSet<ExecutionId> =
                self.unanswered(Workflow::Stubbed).into_iter().collect();
            if waiting.is_empty() {
                break;
            }
            let (stubs, _) = self.committed_stubs();
            let open: Vec<ExecutionId> = stubs
                .into_iter()
                .filter(|s| !s.valued && waiting.contains(&s.parent))
                .map(|s| s.stub)
                .collect();
            if open.is_empty() {
                break;
            }
            for stub in open {
                let value = self.new_stub_value();
                if self.rng.chance(500) {
                    self.write_stub(&stub, ExecutionResult::Ok(json!(value)), false);
                } else {
                    self.submit_stub_writer(&stub, value, false, false);
                }
            }
            settled = self.quiesce(budget_ms);
            if !settled {
                break;
            }
        }
        settled
    }

    /// A client cancels (or terminates) a random submitted execution.
    fn random_cancel(&mut self) {
        if self.submitted.is_empty() {
            return;
        }
        let i = self.rng.below(self.submitted.len() as u64) as usize;
        let Some(id) = self.submitted.get_index(i).map(|(id, _)| id.clone()) else {
            return;
        };
        let terminate = self.rng.chance(200);
        let request = crate::records::CancelRequest {
            execution_id: id.clone(),
            reason: "sim".to_owned(),
            terminate,
            requested_at: self.now(),
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::CancelExecution),
            Payload::Cancel(request),
        );
        if let Some(s) = self.submitted.get_mut(&id) {
            s.cancelled = true;
        }
        self.note(format!(
            "{} {id} -> responses/{partition}@{offset}",
            if terminate { "terminate" } else { "cancel" }
        ));
    }

    /// A client upgrades a random submitted execution to another build, with the length of
    /// its history it read in the log (committed records: it may be behind, then the owner
    /// refuses it as a conflict).
    fn random_upgrade(&mut self) {
        // Mostly a running execution (as `weir upgrade` is used); sometimes any one.
        let running_only = !self.rng.chance(5);
        let world = lock(&self.world);
        let mut lengths: IndexMap<ExecutionId, (u64, bool)> = IndexMap::new();
        for (_, r) in world.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(h)) = &r.payload {
                let seen = lengths.entry(h.execution_id.clone()).or_default();
                seen.0 += 1;
                seen.1 |= matches!(h.entry, crate::records::HistoryEntry::Finished { .. });
            }
        }
        let now = world.now;
        drop(world);
        let candidates: Vec<(ExecutionId, u64)> = self
            .submitted
            .keys()
            .filter_map(|id| {
                let (len, finished) = lengths.get(id).copied().unwrap_or_default();
                (!running_only || (len > 0 && !finished)).then(|| (id.clone(), len))
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (id, expected_seq) = self.rng.pick(&candidates).clone();
        let build = self.rng.range(2, 5);
        let request = crate::records::UpgradeRequest {
            execution_id: id.clone(),
            component: format!("sim-v{build}"),
            expected_seq,
            requested_at: now,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::Upgrade),
            Payload::Upgrade(request),
        );
        self.note(format!(
            "upgrade {id} to sim-v{build} at seq {expected_seq} -> responses/{partition}@{offset}"
        ));
    }

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
    fn create_random_schedules(&mut self) {
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
    fn random_schedule_command(&mut self) {
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
    fn pause_schedules_for_idle(&mut self) -> Option<Vec<usize>> {
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
    fn end_schedules(&mut self) {
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

    /// Executions of `workflow` without a result on `weir.results` yet.
    fn unanswered(&self, workflow: Workflow) -> Vec<ExecutionId> {
        let w = self.world();
        let answered: std::collections::BTreeSet<&ExecutionId> = w
            .cluster
            .committed_records(Topic::Results)
            .filter_map(|(_, r)| match &r.payload {
                // A conflicting submission of its id is answered too, but it is not the
                // execution's result.
                Some(Payload::Result(f))
                    if !matches!(&f.result, ExecutionResult::ExecutionError(e)
                        if e.kind == ExecutionErrorKind::Conflict) =>
                {
                    Some(&f.execution_id)
                }
                _ => None,
            })
            .collect();
        self.submitted
            .iter()
            .filter(|(id, s)| Workflow::of(&s.ffqn) == Some(workflow) && !answered.contains(id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Submits an already submitted execution again.
    pub fn resubmit(&mut self, id: &ExecutionId) {
        if let Some(s) = self.submitted.get(id).cloned() {
            let times = (s.scheduled_at, s.deadline);
            self.submit_execution(id.clone(), s.ffqn, s.params, times, s.expected);
        }
    }

    /// A submission of a function nobody exports: dead-lettered, finished with
    /// `unknown-function`.
    pub fn submit_unknown(&mut self) -> ExecutionId {
        let id = self.new_id();
        let ffqn = unknown_ffqn();
        let expected = ExecutionResult::ExecutionError(ExecutionError::new(
            ExecutionErrorKind::UnknownFunction,
            format!("no component exports {ffqn}"),
        ));
        self.submit_execution(id.clone(), ffqn, json!([]), (None, None), expected);
        id
    }

    /// An undecodable record on submissions: dead-lettered once.
    pub fn submit_poison(&mut self) {
        let key = format!("poison-{}", self.rng.next_u64() % 1_000_000);
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            key.clone(),
            None,
            Payload::Garbage(format!("{key}: not Avro")),
        );
        self.poison.push((partition, offset));
        self.note(format!(
            "poison record {key} -> submissions/{partition}@{offset}"
        ));
    }

    /// A valid submission on a partition other than its key's (issue 11 item 3): dead-lettered
    /// once, never run.
    pub fn submit_misrouted(&mut self) {
        let id = self.new_id();
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: Workflow::Seq.ffqn(),
            params: json!([1, 0]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
        };
        let mut w = lock(&self.world);
        let partitions = w.cluster.partitions(Topic::Submissions);
        let right = w.cluster.partition_for(Topic::Submissions, &id.to_string());
        // With one partition, the key is what is wrong.
        let (partition, key) = if partitions > 1 {
            ((right + 1) % partitions, id.to_string())
        } else {
            (right, format!("{id}-other"))
        };
        let (partition, offset) = w.client_append_at(
            Topic::Submissions,
            partition,
            key.clone(),
            None,
            Payload::Submission(submission),
        );
        drop(w);
        self.poison.push((partition, offset));
        self.note(format!(
            "misrouted submission of {id} keyed `{key}` -> submissions/{partition}@{offset}"
        ));
    }

    /// A submission of an existing top-level id with other params (issue 11 item 4):
    /// dead-lettered once and answered with a `conflict` error; the execution is untouched.
    pub fn submit_conflicting(&mut self, id: &ExecutionId) {
        let Some(s) = self.submitted.get_mut(id) else {
            return;
        };
        s.conflicts += 1;
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: s.ffqn.clone(),
            params: json!(["other params", s.conflicts]),
            parent: None,
            scheduled_at: None,
            correlation_id: Some(format!("conflict-{id}")),
            metadata: Default::default(),
            deadline: None,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            id.to_string(),
            None,
            Payload::Submission(submission),
        );
        self.poison.push((partition, offset));
        self.note(format!(
            "conflicting submission of {id} -> submissions/{partition}@{offset}"
        ));
    }

    // ---- phases ----

    /// Whether nothing is left to do: no open transaction, no rebalance, every input
    /// consumed, every answer sent, every writer drained, no timer left, every process
    /// running and idle.
    pub fn settled(&self) -> bool {
        let w = self.world();
        if !w.cluster.txns.is_empty() || w.cluster.group.rebalance_since.is_some() {
            return false;
        }
        if !w.store.timers.is_empty() || !w.activities_idle() {
            return false;
        }
        // A dead member keeps its partitions until its session expires.
        let live_members = w.cluster.group.members.values().all(|m| {
            m.expires_at.is_none()
                && w.procs
                    .get(&m.pid)
                    .is_some_and(|p| p.status == Status::Running)
        });
        if !live_members {
            return false;
        }
        for s in self.slots.values() {
            let Some(pid) = s.pid else {
                return false;
            };
            let p = &w.procs[&pid];
            if p.status != Status::Running || !p.idle || !p.mat.queue.is_empty() {
                return false;
            }
            let member_current = p
                .consumer
                .member
                .is_some_and(|m| w.cluster.group.is_current(m, p.consumer.generation));
            if !member_current {
                return false;
            }
        }
        super::check::unconsumed_inputs(&w).is_empty()
    }

    /// Stops the faults (resumes frozen processes, ends the outage, keeps a worker) and runs
    /// everything until [`Sim::settled`] holds for a few rounds, or `budget_ms` of sim time
    /// passed. True if it settled.
    pub fn quiesce(&mut self, budget_ms: i64) -> bool {
        self.stop_faults("quiescent phase: faults stop");
        let deadline = self.now() + Duration::milliseconds(budget_ms);
        let mut calm = 0;
        while self.now() < deadline {
            for _ in 0..3 {
                for slot in self.slots() {
                    self.run(slot, 30);
                }
                self.materialise_all();
                self.activities();
                self.act_all(10);
            }
            if self.settled() {
                calm += 1;
                if calm >= 3 {
                    self.note("settled");
                    return true;
                }
            } else {
                calm = 0;
            }
            self.advance(1_000);
        }
        self.note(format!("did not settle within {budget_ms} ms"));
        false
    }

    /// Resumes frozen processes, ends the store outage, and keeps a worker.
    fn stop_faults(&mut self, note: &str) {
        self.note(note);
        let frozen: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                s.pid
                    .is_some_and(|p| matches!(self.status(p), Status::Frozen { .. }))
            })
            .map(|(slot, _)| *slot)
            .collect();
        for slot in frozen {
            self.resume(slot);
        }
        {
            let mut w = lock(&self.world);
            if w.store.down_until.take().is_some() {
                w.event("store: back");
            }
        }
        if self.slots.values().all(|s| s.removing) {
            self.add_worker();
        }
        if self.faults.activity_workers {
            let frozen: Vec<u64> = self.act_slots.values().filter_map(|s| s.pid).collect();
            for pid in frozen {
                lock(&self.world).act_resume(pid);
            }
            if self.act_slots.values().all(|s| s.removing) {
                self.add_activity_worker();
            }
        }
    }

    /// The invariants, now.
    /// Records committed to `weir.results` so far (top-level executions finished).
    pub fn results(&self) -> usize {
        self.world()
            .cluster
            .committed_records(Topic::Results)
            .count()
    }

    pub fn check(&self, settled: bool) -> Vec<Violation> {
        let mut out = self.early.clone();
        out.extend(check(
            &self.world(),
            &self.submitted,
            &self.poison,
            &self.stray_events,
            &self.schedules,
            &self.keyed_events,
            settled,
        ));
        out
    }

    /// The correlation checks of the moment the run first settled (before the events that
    /// let the waiting executions finish); kept for [`Sim::check`].
    pub fn check_correlation_now(&mut self) {
        let found = super::check::correlation_at_settle(&self.world(), &self.keyed_events);
        self.early.extend(found);
    }

    /// Sends one new event to each key that an `order` without a result registered (each
    /// lets the key's holder finish and the next take the key) and settles again, round
    /// after round until none is left; returns whether the last round settled.
    pub fn answer_orders(&mut self, budget_ms: i64) -> bool {
        let mut settled = true;
        for _ in 0..=self.submitted.len() {
            let mut keys: Vec<String> = self
                .unanswered(Workflow::Order)
                .iter()
                .filter_map(|id| {
                    let params = self.submitted[id].params.get(0)?.as_i64()?;
                    Some(super::workflows::order_key(params))
                })
                .collect();
            keys.sort();
            keys.dedup();
            if keys.is_empty() {
                break;
            }
            for key in keys {
                let (id, payload) = self.new_keyed_event();
                self.send_keyed_event(&key, id, payload);
            }
            settled = self.quiesce(budget_ms);
            if !settled {
                break;
            }
        }
        settled
    }

    // ---- the random run ----

    /// One seeded step of the fault phase.
    pub fn random_step(&mut self) {
        let f = self.faults;
        let slots = self.slots();
        let staying = self.slots.values().filter(|s| !s.removing).count();
        // `stub-writer`s are the stub step's, not submissions of the run's workload.
        let new_ok = self.workload() < self.config.executions;
        let session = self.config.session_timeout_ms;
        let m = self.mix;
        let act = f.activity_workers;
        let act_staying = self.act_slots.values().filter(|s| !s.removing).count();
        let actions: [(&str, u64); 27] = [
            ("submit", if new_ok { 6 } else { 0 }),
            ("event", if f.events { 4 } else { 0 }),
            ("cancel", if f.cancels { 1 } else { 0 }),
            ("run", 40),
            ("materialise", m.materialise),
            ("activities", 8),
            ("tick", 14),
            ("wait", 5),
            ("sleep", 1),
            (
                "crash",
                if f.crashes || f.hanging_txns {
                    m.crash
                } else {
                    0
                },
            ),
            ("pause", if f.pauses { 1 } else { 0 }),
            ("zombie", if f.zombies { m.zombie } else { 0 }),
            (
                "add",
                if f.rebalances && slots.len() < 4 {
                    m.rebalance
                } else {
                    0
                },
            ),
            (
                "remove",
                if f.rebalances && staying > 1 {
                    m.rebalance
                } else {
                    0
                },
            ),
            ("outage", if f.store_outages { m.outage } else { 0 }),
            ("poison", if f.poison && new_ok { 1 } else { 0 }),
            ("idle", if f.long_idle { 1 } else { 0 }),
            ("load", if f.long_timers { 1 } else { 0 }),
            // Last, so that the draws of a run without schedules stay what they were.
            ("schedule", if f.schedules { 1 } else { 0 }),
            // After it, for the same reason.
            ("keyed", if f.correlation { 5 } else { 0 }),
            // Often once there is a stub to write.
            (
                "stub",
                match (f.stub_writes, self.stubbing()) {
                    (false, _) => 0,
                    (true, false) => 1,
                    (true, true) => 10,
                },
            ),
            // Last, so that the draws of a run without upgrades stay what they were.
            ("upgrade", if f.upgrades { 2 } else { 0 }),
            // The activity workers, after it for the same reason.
            ("act-run", if act { 40 } else { 0 }),
            ("act-crash", if act { m.crash } else { 0 }),
            ("act-zombie", if act { m.zombie } else { 0 }),
            (
                "act-add",
                if act && self.act_slots.len() < 4 {
                    m.rebalance
                } else {
                    0
                },
            ),
            (
                "act-remove",
                if act && act_staying > 1 {
                    m.rebalance
                } else {
                    0
                },
            ),
        ];
        let weights: Vec<u64> = actions.iter().map(|(_, w)| *w).collect();
        let action = actions[self.rng.weighted(&weights)].0;
        let slot = if slots.is_empty() {
            None
        } else {
            Some(*self.rng.pick(&slots))
        };
        match (action, slot) {
            ("submit", _) => self.random_submission(),
            ("event", _) => self.random_event(),
            ("cancel", _) => self.random_cancel(),
            ("upgrade", _) => self.random_upgrade(),
            ("run", Some(slot)) => {
                let polls = self.rng.range(1, 12) as usize;
                self.run(slot, polls);
            }
            ("materialise", Some(slot)) => {
                let jobs = self.rng.range(1, 6) as usize;
                self.materialise(slot, jobs);
            }
            ("activities", _) => self.activities(),
            ("tick", _) => {
                let ms = self.rng.range(1, 200) as i64;
                self.advance(ms);
            }
            ("wait", _) => {
                let ms = self.rng.range(200, 3_000) as i64;
                self.note(format!("wait {ms} ms"));
                self.advance(ms);
            }
            ("sleep", _) => {
                let ms = self.rng.range(3_000, 15_000) as i64;
                self.note(format!("wait {ms} ms"));
                self.advance(ms);
            }
            ("crash", Some(slot)) => {
                if self.faults.hanging_txns && self.rng.chance(300) {
                    // Inside a commit: the transaction is left hanging.
                    let polls = self.rng.range(1, 30) as usize;
                    self.run_until(slot, "commit: ", polls);
                } else if !self.faults.hanging_txns && !self.run_until_no_transaction(slot, 50) {
                    return; // frozen inside a transaction: no kill now
                }
                self.crash(slot);
            }
            ("pause", Some(slot)) => {
                let ms = self.rng.range(100, (session - 2_000).max(200) as u64) as i64;
                self.freeze(slot, ms);
            }
            ("zombie", Some(slot)) => {
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
            ("add", _) => {
                self.add_worker();
            }
            ("remove", Some(slot)) if staying > 1 => self.remove_worker(slot),
            ("outage", _) => {
                // Mostly short; some of tens of seconds, ridden out (the hot path goes on)
                // within the patience, or not.
                let ms = if self.rng.chance(250) {
                    self.rng.range(10_000, 45_000)
                } else {
                    self.rng.range(200, 8_000)
                } as i64;
                self.store_outage(ms);
            }
            ("poison", _) => match self.rng.below(4) {
                0 => self.submit_misrouted(),
                1 if !self.submitted.is_empty() => {
                    let i = self.rng.below(self.submitted.len() as u64) as usize;
                    if let Some(id) = self.submitted.get_index(i).map(|(id, _)| id.clone()) {
                        self.submit_conflicting(&id);
                    }
                }
                _ if self.rng.chance(500) => self.submit_poison(),
                _ => {
                    self.submit_unknown();
                }
            },
            ("idle", _) => {
                // Nothing arrives for days: not so with a schedule ticking (and ticking only
                // each hour the workers poll, it would start more executions than a run
                // drains). Their client pauses them for the while; if their owners do not
                // take the pauses soon, the days do not pass.
                let paused = if f.schedules {
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
            ("load", _) => {
                let ms = self.rng.range(60_000, 150_000) as i64;
                self.steady_load(ms);
            }
            ("schedule", _) => self.random_schedule_command(),
            ("act-run" | "act-crash" | "act-zombie" | "act-add" | "act-remove", _) => {
                self.random_activity_step(action);
            }
            ("keyed", _) => self.random_keyed_event(),
            ("stub", _) => self.random_stub_write(),
            _ => {}
        }
    }

    /// One step of the activity workers' faults (`Faults::activity_workers`).
    fn random_activity_step(&mut self, action: &str) {
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
                            g.running + g.waiting > 0 || p.open_txn.is_some()
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
            self.materialise(slot, super::store::MERGE_LIMIT);
        }
    }

    fn random_submission(&mut self) {
        if self.faults.duplicate_submissions && !self.submitted.is_empty() && self.rng.chance(150) {
            let i = self.rng.below(self.submitted.len() as u64) as usize;
            let id = self.submitted.get_index(i).map(|(id, _)| id.clone());
            if let Some(id) = id {
                self.resubmit(&id);
                return;
            }
        }
        let mut choices = vec![
            Workflow::Seq,
            Workflow::Sleepy,
            Workflow::Fanout,
            Workflow::Mixed,
            Workflow::Parent,
            Workflow::Abandon,
        ];
        if self.faults.long_timers {
            choices.push(Workflow::LongSleep);
        }
        if self.faults.events {
            choices.push(Workflow::Approval);
        }
        if self.faults.correlation {
            // Often: several share a key.
            choices.extend([Workflow::Order; 4]);
        }
        if self.faults.activity_workers {
            choices.extend([Workflow::Watched, Workflow::Watched]);
        }
        if self.faults.stub_writes {
            choices.extend([
                Workflow::Stubbed,
                Workflow::Stubbed,
                Workflow::StubRace,
                Workflow::StubRace,
            ]);
        }
        let workflow = *self.rng.pick(&choices);
        let r = &mut self.rng;
        let base = r.range(0, 999) as i64;
        let params: Vec<i64> = match workflow {
            Workflow::Seq | Workflow::Parent => vec![r.range(1, 4) as i64, base],
            Workflow::Fanout => vec![r.range(1, 5) as i64, base],
            Workflow::Sleepy => vec![r.range(1, 3) as i64, r.range(50, 20_000) as i64, base],
            Workflow::Mixed => vec![r.range(1, 4) as i64, r.range(50, 15_000) as i64, base],
            Workflow::LongSleep => vec![r.range(70, 180) as i64],
            Workflow::Watched => vec![base],
            Workflow::Abandon => vec![r.range(0, 3) as i64, r.range(50, 15_000) as i64, base],
            // A third wait with no timeout (`await-event`).
            Workflow::Approval if r.chance(333) => vec![0],
            Workflow::Approval => vec![r.range(50, 15_000) as i64],
            Workflow::Order => {
                let n = r.below(self.order_keys as u64) as i64;
                let ms = match r.weighted(&[3, 1, 5]) {
                    0 => 0,
                    1 => -1,
                    _ => r.range(50, 15_000) as i64,
                };
                vec![n, ms, r.range(0, 2) as i64]
            }
            Workflow::Stubbed => vec![],
            // Often short enough that the delay wins.
            Workflow::StubRace => vec![r.range(500, 30_000) as i64],
            // Never chosen: the stub step submits them.
            Workflow::StubWriter => vec![],
        };
        let at = if self.faults.scheduled && self.rng.chance(150) {
            let ms = self.rng.range(100, 20_000) as i64;
            Some(self.now() + Duration::milliseconds(ms))
        } else {
            None
        };
        // Mostly within the run's span; a few passed before the submission is read.
        let deadline = if self.faults.deadlines && self.rng.chance(300) {
            let ms = self.rng.range(0, 60_000) as i64 - 2_000;
            Some(self.now() + Duration::milliseconds(ms))
        } else {
            None
        };
        self.submit_with_deadline(workflow, &params, at, deadline);
    }

    /// The whole random run: fault phase, quiescent phase, invariants.
    pub fn run_random(mut self) -> Report {
        self.mix = Mix::random(&mut self.rng);
        let mix = self.mix;
        self.note(format!("step weights {mix:?}"));
        if self.faults.schedules {
            self.create_random_schedules();
        }
        if self.faults.correlation {
            // Few keys: executions share them (the holder queue). Some events come before
            // any execution registered their key.
            self.order_keys = self.rng.range(1, 4) as i64;
            for _ in 0..self.rng.range(0, 3) {
                self.random_keyed_event();
            }
        }
        for _ in 0..self.config.steps {
            self.random_step();
            if !self.faults.revoked_writes {
                self.bound_writer_lag(2_000);
            }
        }
        if self.faults.schedules {
            // The faults stop and the schedules' owners catch up (whether they do is checked:
            // the ticks before each end keep up); then the client ends them, or they would
            // tick forever.
            self.catch_up_schedules(20_000, 5 * 60 * 1_000);
            self.end_schedules();
        }
        let mut settled = self.quiesce(15 * 60 * 1_000);
        // An `approval` without a timeout waits until an event reaches it: those sent before
        // it existed went to the DLQ.
        let waiting = self.unanswered(Workflow::Approval);
        if settled && !waiting.is_empty() {
            for id in waiting {
                self.next_event += 1;
                let n = self.next_event;
                self.send_event(&id, format!("ev-{n}"), n);
            }
            settled = self.quiesce(15 * 60 * 1_000);
        }
        if self.faults.stub_writes && settled {
            settled = self.answer_stubs(15 * 60 * 1_000);
        }
        if self.faults.correlation && settled {
            self.check_correlation_now();
            settled = self.answer_orders(15 * 60 * 1_000);
        }
        let violations = self.check(settled);
        self.report(settled, violations)
    }

    pub fn report(&self, settled: bool, violations: Vec<Violation>) -> Report {
        let w = self.world();
        Report {
            seed: self.seed,
            config: self.config.clone(),
            faults: self.faults,
            settled,
            violations,
            trace: w.trace.clone(),
            stats: w.stats.clone(),
            events: EventCounts::of(&w),
            schedules: ScheduleCounts::of(&w),
            correlation: CorrelationCounts::of(&w),
            stubs: StubCounts::of(&w, &self.stub_sends),
            upgrades: super::check::UpgradeCounts::of(&w),
            activity: w.act_counts(),
            executions: self.submitted.len(),
            findings: w.findings.clone(),
        }
    }
}

/// `+=` for a run's tallies, field by field: a test sums them over seeds.
macro_rules! tally_sum {
    ($t:ident { $($field:ident),* $(,)? }) => {
        impl std::ops::AddAssign for $t {
            fn add_assign(&mut self, other: $t) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

tally_sum!(CorrelationCounts {
    sent,
    registered,
    queued,
    forwarded,
    cross_partition,
    returned,
    buffered,
    taken,
    unclaimed,
});
tally_sum!(EventCounts {
    sent,
    kept,
    taken,
    cancelled,
    executions_cancelled,
    with_deadline,
    timed_out,
    held_early,
    waited,
});
tally_sum!(ScheduleCounts {
    started,
    skipped,
    missed,
    paused,
    generations,
    cancelled,
});

tally_sum!(StubCounts {
    stubs,
    written,
    cancelled,
    ok,
    ok_again,
    conflicts,
    not_found,
    outside,
    outside_taken,
    outside_again,
    outside_conflicts,
    outside_refused,
    after_finish,
});

/// What the stubs of a run did, read from the committed log (`check::stub_model`) and the
/// writes the scheduler made: how much of the stub rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StubCounts {
    /// Stub requests committed; those that hold a written value; those that hold a
    /// cancellation (a race's delay came first, the parent was cancelled or timed out).
    pub stubs: u64,
    pub written: u64,
    pub cancelled: u64,
    /// Writers' requests answered `ok` (the first write that fits), `ok` for the value held
    /// already, `conflict`, `not-found`.
    pub ok: u64,
    pub ok_again: u64,
    pub conflicts: u64,
    pub not_found: u64,
    /// Writes from outside; those journalled, those of the value held already (nothing),
    /// those dead-lettered `conflict` and `refused`.
    pub outside: u64,
    pub outside_taken: u64,
    pub outside_again: u64,
    pub outside_conflicts: u64,
    pub outside_refused: u64,
    /// Writes sent once the target's parent had finished (its `Finished` committed).
    pub after_finish: u64,
}

impl StubCounts {
    fn of(w: &World, sends: &[StubSend]) -> Self {
        use super::check::StubExpect;
        use crate::records::DlqReason;
        let model = super::check::stub_model(w);
        let mut counts = StubCounts {
            stubs: model.stubs.len() as u64,
            after_finish: sends.iter().filter(|s| s.after_finish).count() as u64,
            ..StubCounts::default()
        };
        for s in model.stubs.values() {
            match s.values.first() {
                Some(ExecutionResult::ExecutionError(e))
                    if e.kind == ExecutionErrorKind::Cancelled =>
                {
                    counts.cancelled += 1
                }
                Some(_) => counts.written += 1,
                None => {}
            }
        }
        for write in &model.writes {
            if write.request.is_some() {
                match write.answers.first() {
                    Some(ExecutionResult::Ok(_)) if write.expect == StubExpect::Again => {
                        counts.ok_again += 1
                    }
                    Some(ExecutionResult::Ok(_)) => counts.ok += 1,
                    Some(ExecutionResult::Err(v)) if v == "conflict" => counts.conflicts += 1,
                    Some(ExecutionResult::Err(v)) if v == "not-found" => counts.not_found += 1,
                    _ => {}
                }
                continue;
            }
            counts.outside += 1;
            match (write.dead.first(), write.expect) {
                (Some(DlqReason::Conflict), _) => counts.outside_conflicts += 1,
                (Some(DlqReason::Refused), _) => counts.outside_refused += 1,
                (None, StubExpect::Taken) => counts.outside_taken += 1,
                (None, StubExpect::Again) => counts.outside_again += 1,
                _ => {}
            }
        }
        counts
    }
}

/// What the correlation keys of a run did, read from the committed log: how much of the
/// correlation rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CorrelationCounts {
    /// Events clients sent to keys (records; an id sent twice counts twice).
    pub sent: u64,
    /// Registrations (`Register` commands) and those of a key another execution held: they
    /// queued.
    pub registered: u64,
    pub queued: u64,
    /// Events a key forwarded to its holder, and those whose holder is on another partition
    /// than the key.
    pub forwarded: u64,
    pub cross_partition: u64,
    /// Forwarded events that found their holder finished and came back to the key.
    pub returned: u64,
    /// Distinct events that waited in a key's buffer at some point.
    pub buffered: u64,
    /// Events of keys taken by a wait (`EventDelivered` received), and kept by an execution
    /// that finished without taking them.
    pub taken: u64,
    pub unclaimed: u64,
}

impl CorrelationCounts {
    fn of(w: &World) -> Self {
        use crate::model::{EventOutcome, Response};
        use crate::records::HistoryEntry;
        let mut counts = CorrelationCounts::default();
        let partitions = w.cluster.partitions(Topic::History);
        for (partition, r) in w.cluster.committed_records(Topic::Events) {
            match &r.payload {
                Some(Payload::KeyedEvent(e)) if e.returned_by.is_none() => counts.sent += 1,
                Some(Payload::KeyedEvent(_)) => counts.returned += 1,
                Some(Payload::Event(e)) if e.correlation_key.is_some() => {
                    counts.forwarded += 1;
                    let key = e.correlation_key.as_deref().unwrap_or_default();
                    let home = crate::partitioner::partition_for_key(key.as_bytes(), partitions);
                    if home != partition {
                        counts.cross_partition += 1;
                    }
                }
                _ => {}
            }
        }
        let mut held: BTreeMap<&str, usize> = BTreeMap::new();
        let mut buffered = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::State) {
            if let (Some(key), Some(Payload::Correlation(state))) = (&r.key, &r.payload) {
                let holders = state.as_ref().map_or(0, |s| s.holders.len());
                if holders > held.get(key.as_str()).copied().unwrap_or(0) && holders > 1 {
                    counts.queued += 1;
                }
                held.insert(key, holders);
                for b in state.iter().flat_map(|s| &s.buffered) {
                    buffered.insert((key.as_str(), b.event.event_id.as_str()));
                }
            }
        }
        counts.buffered = buffered.len() as u64;
        counts.registered = w
            .cluster
            .committed_records(Topic::Responses)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::CorrelationCommand(c))
                    if c.action == crate::correlation::CorrelationAction::Register)
            })
            .count() as u64;
        let mut seen = std::collections::BTreeSet::new();
        let mut kept: BTreeMap<&ExecutionId, Vec<&str>> = BTreeMap::new();
        let mut taken: std::collections::BTreeSet<(&ExecutionId, &str)> = Default::default();
        let mut finished = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((record.execution_id.clone(), record.seq)) {
                continue;
            }
            let id = &record.execution_id;
            match &record.entry {
                HistoryEntry::EventReceived(e) if e.event_id.starts_with("kev-") => {
                    kept.entry(id).or_default().push(&e.event_id);
                }
                HistoryEntry::ResponseAppended(Response::EventDelivered {
                    outcome: EventOutcome::Received { event_id, .. },
                    ..
                }) if event_id.starts_with("kev-") => {
                    counts.taken += 1;
                    taken.insert((id, event_id.as_str()));
                }
                HistoryEntry::Finished { .. } => {
                    finished.insert(id);
                }
                _ => {}
            }
        }
        counts.unclaimed = kept
            .iter()
            .filter(|(id, _)| finished.contains(*id))
            .flat_map(|(id, events)| events.iter().map(move |e| (*id, *e)))
            .filter(|k| !taken.contains(k))
            .count() as u64;
        counts
    }
}

/// What became of the events of a run, read from the committed log: how much of the event
/// rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Event records on the events topic.
    pub sent: u64,
    /// `EventReceived` entries: events that came before a wait of their name.
    pub kept: u64,
    /// Events taken by a wait (`EventDelivered` received).
    pub taken: u64,
    /// Waits cancelled (their join set closed first: a timeout won; or a cancellation).
    pub cancelled: u64,
    /// Executions asked to stop (`CancelRequested` entries).
    pub executions_cancelled: u64,
    /// Executions with a deadline (their `Created`), and those timed out by it.
    pub with_deadline: u64,
    pub timed_out: u64,
    /// States written for executions that did not exist yet (an event came first).
    pub held_early: u64,
    /// Events sent back after waiting for their execution's submission in vain.
    pub waited: u64,
}

impl EventCounts {
    fn of(w: &World) -> Self {
        use crate::model::{EventOutcome, Response};
        use crate::records::HistoryEntry;
        let mut counts = EventCounts {
            sent: w.cluster.committed_records(Topic::Events).count() as u64,
            waited: w
                .cluster
                .committed_records(Topic::Events)
                .filter(|(_, r)| matches!(&r.payload, Some(Payload::Event(e)) if e.waited_until.is_some()))
                .count() as u64,
            held_early: w
                .cluster
                .committed_records(Topic::State)
                .filter(|(_, r)| {
                    r.key.as_deref().is_some_and(|k| {
                        crate::state_key::StateKey::for_events(k).is_ok_and(|k| k.execution().is_some())
                    })
                        && matches!(&r.payload, Some(Payload::Correlation(Some(_))))
                })
                .count() as u64,
            ..EventCounts::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((record.execution_id.clone(), record.seq)) {
                continue;
            }
            match &record.entry {
                HistoryEntry::EventReceived(_) => counts.kept += 1,
                HistoryEntry::CancelRequested { .. } => counts.executions_cancelled += 1,
                HistoryEntry::Created(c) if c.deadline.is_some() => counts.with_deadline += 1,
                HistoryEntry::Finished {
                    result: crate::model::ExecutionResult::ExecutionError(e),
                    ..
                } if e.kind == crate::model::ExecutionErrorKind::TimedOut => counts.timed_out += 1,
                HistoryEntry::ResponseAppended(Response::EventDelivered { outcome, .. }) => {
                    match outcome {
                        EventOutcome::Received { .. } => counts.taken += 1,
                        EventOutcome::Cancelled => counts.cancelled += 1,
                    }
                }
                _ => {}
            }
        }
        counts
    }
}

/// What the schedules of a run did, read from their committed states on `weir.state`: how
/// much of the schedule rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleCounts {
    /// Ticks started, skipped (overlap `skip`) and missed (beyond the catch-up window), as
    /// the last state of each generation counts them.
    pub started: u64,
    pub skipped: u64,
    pub missed: u64,
    /// Pauses taken (an active state followed by a paused one).
    pub paused: u64,
    /// Generations (a create, or a create after a delete).
    pub generations: u64,
    /// Runs cancelled by a later tick (overlap `cancel-previous`).
    pub cancelled: u64,
}

impl ScheduleCounts {
    fn of(w: &World) -> Self {
        use crate::schedule::{ScheduleState, Status};
        let mut counts = ScheduleCounts::default();
        let mut last: BTreeMap<&str, &ScheduleState> = BTreeMap::new();
        let add = |counts: &mut ScheduleCounts, s: &ScheduleState| {
            counts.started += s.started;
            counts.skipped += s.skipped;
            counts.missed += s.missed;
        };
        for (_, r) in w.cluster.committed_records(Topic::State) {
            let (Some(key), Some(Payload::Schedule(state))) = (&r.key, &r.payload) else {
                continue;
            };
            let previous = last.remove(key.as_str());
            match (previous, state) {
                (Some(p), None) => add(&mut counts, p),
                (None, Some(_)) => counts.generations += 1,
                (Some(p), Some(s)) if p.status == Status::Active && s.status == Status::Paused => {
                    counts.paused += 1;
                }
                _ => {}
            }
            if let Some(s) = state {
                last.insert(key, s);
            }
        }
        for s in last.values() {
            add(&mut counts, s);
        }
        counts.cancelled = w
            .cluster
            .committed_records(Topic::Submissions)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::Cancel(c)) if c.reason.contains("cancel-previous"))
            })
            .count() as u64;
        counts
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub config: SimConfig,
    pub faults: Faults,
    pub settled: bool,
    pub violations: Vec<Violation>,
    pub trace: Vec<String>,
    pub stats: Stats,
    pub events: EventCounts,
    pub schedules: ScheduleCounts,
    pub correlation: CorrelationCounts,
    pub stubs: StubCounts,
    pub upgrades: super::check::UpgradeCounts,
    /// What the activity workers did (`Faults::activity_workers`).
    pub activity: super::activity::ActivityCounts,
    pub executions: usize,
    /// Known holes the run entered: `(tag, first occurrence, count)`.
    pub findings: Vec<(&'static str, String, u64)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The invariants that failed, by name.
    pub fn failed_invariants(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> =
            self.violations.iter().map(|v| v.invariant.name()).collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// How to run exactly this again.
    pub fn reproduce(&self) -> String {
        format!(
            "WEIR_DST_SEED={} WEIR_DST_FAULTS={} cargo test -p weir-core --features test-util --test dst dst_short -- --nocapture",
            self.seed, self.faults
        )
    }

    pub fn summary(&self) -> String {
        let s = &self.stats;
        format!(
            "seed {}: {} executions, {} commits, {} refused (generation), {} fenced, {} txns timed out, \
             {} kills, {} error exits, {} freezes, {} rebalances, {} store errors, {} commits while the store was down, \
             {} duplicate answers; {}",
            self.seed,
            self.executions,
            s.commits,
            s.refused_generation,
            s.fenced,
            s.timed_out_txns,
            s.crashes,
            s.exits,
            s.freezes,
            s.rebalances,
            s.store_errors,
            s.commits_while_store_down,
            s.duplicate_answers,
            if self.passed() {
                "ok".to_owned()
            } else {
                format!(
                    "FAILED: {} (findings: {})",
                    self.failed_invariants().join(", "),
                    self.findings
                        .iter()
                        .map(|(t, _, _)| *t)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )
    }

    /// The full report: violations, then the trace (its last `tail` lines; all with `None`).
    pub fn render(&self, tail: Option<usize>) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.summary());
        let _ = writeln!(out, "config: {:?}", self.config);
        let _ = writeln!(out, "faults: {}", self.faults);
        let _ = writeln!(out, "settled: {}", self.settled);
        let _ = writeln!(out, "reproduce: {}", self.reproduce());
        for v in &self.violations {
            let _ = writeln!(out, "VIOLATION [{}] {}", v.invariant, v.detail);
        }
        for (tag, first, n) in &self.findings {
            let _ = writeln!(out, "FINDING [{tag}] ×{n}, first at {first}");
        }
        let skip = tail.map_or(0, |t| self.trace.len().saturating_sub(t));
        let _ = writeln!(
            out,
            "trace ({} lines{}; `#n` = scheduler step, indented = what the seams did):",
            self.trace.len(),
            if skip > 0 {
                format!(", first {skip} omitted; WEIR_DST_TRACE=full prints all")
            } else {
                String::new()
            }
        );
        for line in &self.trace[skip..] {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}

/// The random run of `seed` with `faults`.
pub fn run_seed(seed: u64, faults: Faults) -> Report {
    let mut config_rng = Rng::new(seed ^ 0x5eed_c0f1_9000_0000);
    let config = SimConfig {
        inline_activities: seed % 2 == 1,
        ..SimConfig::random(&mut config_rng)
    };
    Sim::new(seed, config, faults).run_random()
}
