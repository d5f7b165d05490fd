//! The seeded scheduler: the [`Sim`] (one simulated deployment: worker slots, clients, the
//! activity service, the clock, the faults), the clock, the phases of a run, and the random
//! run. [`Sim`] is the step-by-step API the scripted scenarios use; [`run_seed`] is the random
//! run: a fault phase of seeded steps ([`Sim::random_step`] draws each from the weights of
//! [`Mix`] and dispatches it), then a quiescent phase (faults stop, every worker runs until
//! nothing is left to do), then the invariants.
//!
//! What the steps do is elsewhere: the workflow workers' slots in `workers.rs` (each runs one
//! process at a time — a real [`Driver`](crate::driver::Driver) with the simulated seams —
//! and restarts it after it dies), the clients and the faults in `workloads/`, one module per
//! feature, and the report in `report.rs`.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration};
use indexmap::IndexMap;

use crate::model::ExecutionId;

use super::checks::{Violation, check};
use super::cluster::{SimTime, Topic};
use super::config::{Faults, SimConfig};
use super::exec::ProcFuture;
use super::process::Status;
use super::report::{CorrelationCounts, EventCounts, Report, ScheduleCounts, StubCounts};
use super::rng::Rng;
use super::sent::{KeyedSend, SimSchedule, StubSend, Submitted, TriggerSends};
use super::workflows::Workflow;
use super::world::{Shared, World, lock};

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
pub(super) struct Slot {
    pub(super) pid: Option<u64>,
    pub(super) restart_at: Option<SimTime>,
    /// Asked to shut down; removed when its process exits.
    pub(super) removing: bool,
}

/// One simulated deployment; see the module docs.
pub struct Sim {
    pub(super) world: Shared,
    pub(super) futures: BTreeMap<u64, ProcFuture>,
    pub(super) slots: BTreeMap<u32, Slot>,
    /// The activity workers' slots (`Faults::activity_workers`).
    pub(super) act_slots: BTreeMap<u32, Slot>,
    pub(super) rng: Rng,
    pub seed: u64,
    pub config: SimConfig,
    pub faults: Faults,
    /// The weights of random steps.
    pub mix: Mix,
    pub(super) submitted: IndexMap<ExecutionId, Submitted>,
    /// Where the poison records went (topic submissions): (partition, offset).
    pub(super) poison: Vec<(i32, i64)>,
    /// Corrupt records of `weir.state` (`Faults::corrupt_state`).
    pub(super) corrupt_states: Vec<super::sent::CorruptSent>,
    /// The side RNG of `Faults::corrupt_state` (see `workloads/corrupt_state.rs`).
    pub(super) corrupt_rng: Rng,
    /// The side RNG of `Faults::pause_resume` (see `workloads/pauses.rs`).
    pub(super) pause_rng: Rng,
    /// The pause and resume requests clients sent, in order (`Faults::pause_resume`).
    pub(super) pause_sends: Vec<super::sent::PauseSend>,
    /// The executions a client paused and has not resumed yet: resumed when the faults stop.
    pub(super) paused: indexmap::IndexSet<ExecutionId>,
    /// The side RNG of `Faults::route_pauses` (see `workloads/routes.rs`).
    pub(super) route_rng: Rng,
    /// The side RNG of `Faults::resets` (see `workloads/resets.rs`).
    pub(super) reset_rng: Rng,
    /// The side RNG of `Faults::exhausted_pauses` (see `workloads/exhausted.rs`).
    pub(super) exhausted_rng: Rng,
    /// The reset requests clients sent, in order (`Faults::resets`).
    pub(super) reset_sends: Vec<super::sent::ResetSend>,
    /// The side RNG of `Faults::batches` (see `workloads/batches.rs`).
    pub(super) batch_rng: Rng,
    /// The side RNG of `Faults::fairness` (see `workloads/fairness.rs`).
    pub(super) fair_rng: Rng,
    /// The side RNG of `Faults::queries` (see `workloads/queries.rs`).
    pub(super) query_rng: Rng,
    /// The queries clients sent, in order (`Faults::queries`).
    pub(super) query_sends: Vec<super::sent::QuerySend>,
    /// The tenant of the burst being submitted (`workloads/fairness.rs`).
    pub(super) burst_tenant: Option<String>,
    /// The batch commands clients sent, in order (`Faults::batches`).
    pub(super) batch_sends: Vec<super::sent::BatchSend>,
    /// The routes a client paused on `weir.control` and has not resumed yet: resumed when the
    /// faults stop.
    pub(super) paused_routes: std::collections::BTreeSet<String>,
    /// Events sent to executions nobody submitted: (event id, target).
    pub(super) stray_events: Vec<(String, ExecutionId)>,
    pub(super) next_event: i64,
    /// The schedules clients created (`Faults::schedules`).
    pub(super) schedules: Vec<SimSchedule>,
    /// Events sent to correlation keys, in order (`Faults::correlation`).
    pub(super) keyed_events: Vec<KeyedSend>,
    /// How many keys `order` executions register (`order:0` ..): drawn when the run starts.
    pub(super) order_keys: i64,
    /// The stub writes the scheduler made, in order (`Faults::stub_writes`).
    pub(super) stub_sends: Vec<StubSend>,
    pub(super) next_stub_value: i64,
    /// Violations found when the run first settled, before the events sent to let the
    /// waiting executions finish (the correlation checks of that moment).
    pub(super) early: Vec<Violation>,
    pub(super) next_command: u64,
    /// What the trigger's source writer sent that maps (sent again as its retries), the
    /// executions they start, and the records that must be dead-lettered (`Faults::triggers`).
    pub(super) trig_sends: TriggerSends,
    pub(super) next_slot: u32,
    pub(super) next_pid: u64,
    pub(super) steps: u64,
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
            corrupt_states: Vec::new(),
            corrupt_rng: Sim::corrupt_rng(seed),
            pause_rng: Sim::pause_rng(seed),
            pause_sends: Vec::new(),
            paused: indexmap::IndexSet::new(),
            route_rng: Sim::route_rng(seed),
            reset_rng: Sim::reset_rng(seed),
            exhausted_rng: Sim::exhausted_rng(seed),
            reset_sends: Vec::new(),
            batch_rng: Sim::batch_rng(seed),
            fair_rng: Sim::fair_rng(seed),
            query_rng: Sim::query_rng(seed),
            query_sends: Vec::new(),
            burst_tenant: None,
            batch_sends: Vec::new(),
            paused_routes: std::collections::BTreeSet::new(),
            stray_events: Vec::new(),
            next_event: 0,
            schedules: Vec::new(),
            keyed_events: Vec::new(),
            order_keys: 2,
            stub_sends: Vec::new(),
            next_stub_value: 1_000,
            early: Vec::new(),
            next_command: 0,
            trig_sends: TriggerSends::default(),
            next_slot: 1,
            next_pid: 1,
            steps: 0,
        };
        sim.note(format!("seed {seed}: {:?}; faults {faults}", sim.config));
        lock(&sim.world).routes.rng = Sim::route_follower_rng(seed);
        for _ in 0..workers {
            sim.add_worker();
        }
        if faults.rate_limits {
            // Before the activity workers' configuration, which takes the limits.
            let rates = super::rates::Rates::draw(seed);
            sim.note(format!(
                "rate limit of the activity route: {:?}",
                rates.limit
            ));
            lock(&sim.world).act.rates = rates;
        }
        if faults.activity_workers {
            // A pausing activity is never inline: on the seeds with inline attempts the policy
            // is off, so that a run with every class has both.
            lock(&sim.world).act.exhausted.on =
                faults.exhausted_pauses && !(faults.inline && sim.config.inline_activities);
            lock(&sim.world).act_configure();
            for _ in 0..sim.rng.range(1, 2) {
                sim.add_activity_worker();
            }
        }
        if faults.triggers {
            sim.trig_configure();
        }
        if faults.corrupt_state {
            sim.write_corrupt_states();
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
        w.take_log();
        let line = format!("{:>10} #{:<4} {}", w.clock(), self.steps, text.as_ref());
        w.trace.push(line);
    }

    pub fn trace(&self) -> Vec<String> {
        let mut w = self.world();
        w.take_log();
        w.trace.clone()
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

    pub fn pause_sends(&self) -> &[super::sent::PauseSend] {
        &self.pause_sends
    }

    // ---- the activity service and the clock ----

    /// The activity service reads requests and sends the answers due.
    pub fn activities(&mut self) {
        lock(&self.world).activity_step();
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
                w.take_log();
                w.now = w.now.max(next);
                w.tick();
            }
            self.restarts();
        }
        {
            let mut w = lock(&self.world);
            w.take_log();
            w.now = target;
            w.tick();
        }
        self.restarts();
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
        super::checks::unconsumed_inputs(&w).is_empty() && w.trig_settled()
    }

    /// Stops the faults (resumes frozen processes, ends the outage, keeps a worker) and runs
    /// everything until [`Sim::settled`] holds for a few rounds, or `budget_ms` of sim time
    /// passed without the workflow group's committed input offsets moving (at most
    /// [`MAX_QUIESCE_MS`] in all). True if it settled.
    pub fn quiesce(&mut self, budget_ms: i64) -> bool {
        self.stop_faults("quiescent phase: faults stop");
        let budget = Duration::milliseconds(budget_ms);
        let cap = self.now() + Duration::milliseconds(MAX_QUIESCE_MS);
        let mut deadline = self.now() + budget;
        let mut consumed = self.consumed();
        let mut calm = 0;
        while self.now() < deadline {
            // A backlog worked through slowly (a schedule's catch-up ticks at an admission
            // limit of one) is not a stuck partition: the budget runs from the last progress.
            let now_consumed = self.consumed();
            if now_consumed > consumed {
                consumed = now_consumed;
                deadline = (self.now() + budget).min(cap).max(deadline);
            }
            for _ in 0..3 {
                for slot in self.slots() {
                    self.run(slot, 30);
                }
                self.materialise_all();
                self.activities();
                self.act_all(10);
                self.trig_all(10);
                if self.faults.exhausted_pauses && self.faults.activity_workers {
                    self.operate_exhausted(true);
                }
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

    /// The input records the workflow group has committed, over every input partition.
    fn consumed(&self) -> i64 {
        self.world().cluster.group.committed.values().sum()
    }

    /// Resumes frozen processes, ends the store outage, and keeps a worker.
    pub(super) fn stop_faults(&mut self, note: &str) {
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
        if self.faults.triggers {
            lock(&self.world).trig_resume(true);
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
        let mut submitted = self.with_trigger_submissions();
        let mut resets = self.reset_sends.clone();
        self.with_batch_resets(&mut submitted, &mut resets);
        let pauses = self.pause_sends_with_batches();
        let sent = super::checks::Sent {
            submitted: &submitted,
            poison: &self.poison,
            corrupt_states: &self.corrupt_states,
            stray_events: &self.stray_events,
            schedules: &self.schedules,
            keyed: &self.keyed_events,
            triggered: &self.trig_sends,
            pauses: &pauses,
            resets: &resets,
            batches: &self.batch_sends,
            queries: &self.query_sends,
        };
        out.extend(check(&self.world(), &sent, settled));
        out
    }

    /// The correlation checks of the moment the run first settled (before the events that
    /// let the waiting executions finish); kept for [`Sim::check`].
    pub fn check_correlation_now(&mut self) {
        let found = super::checks::correlation_at_settle(&self.world(), &self.keyed_events);
        self.early.extend(found);
    }

    // ---- the random run ----

    /// One seeded step of the fault phase.
    pub fn random_step(&mut self) {
        let f = self.faults;
        if f.corrupt_state {
            self.maybe_write_corrupt_state();
        }
        if f.pause_resume {
            self.maybe_pause_request();
        }
        if f.route_pauses {
            self.maybe_route_control();
        }
        if f.resets {
            self.maybe_reset_request();
        }
        if f.batches {
            self.maybe_batch_command();
        }
        if f.queries {
            self.maybe_query();
        }
        if f.exhausted_pauses && f.activity_workers {
            self.maybe_operate_exhausted();
        }
        let slots = self.slots();
        let staying = self.slots.values().filter(|s| !s.removing).count();
        // `stub-writer`s are the stub step's, not submissions of the run's workload.
        let new_ok = self.workload() < self.config.executions;
        let m = self.mix;
        let act = f.activity_workers;
        let act_staying = self.act_slots.values().filter(|s| !s.removing).count();
        let trig = f.triggers;
        let trig_workers = self.world().trig.slots.len();
        let actions: [(&str, u64); 34] = [
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
            // The trigger workers, after them for the same reason.
            ("trig-send", if trig && new_ok { 5 } else { 0 }),
            ("trig-run", if trig { 20 } else { 0 }),
            ("trig-crash", if trig { m.crash } else { 0 }),
            ("trig-zombie", if trig && f.zombies { m.zombie } else { 0 }),
            (
                "trig-add",
                if trig && trig_workers < 3 {
                    m.rebalance
                } else {
                    0
                },
            ),
            ("trig-reset", if trig { 1 } else { 0 }),
            // Last, for the same reason.
            ("blackout", if f.blackouts { 1 } else { 0 }),
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
            ("crash", Some(slot)) => self.random_crash(slot),
            ("pause", Some(slot)) => self.random_pause(slot),
            ("zombie", Some(slot)) => self.random_zombie(slot),
            ("add", _) => {
                self.add_worker();
            }
            ("remove", Some(slot)) if staying > 1 => self.remove_worker(slot),
            ("outage", _) => self.random_outage(),
            ("poison", _) => self.random_poison(),
            ("idle", _) => self.random_idle(),
            ("load", _) => {
                let ms = self.rng.range(60_000, 150_000) as i64;
                self.steady_load(ms);
            }
            ("schedule", _) => self.random_schedule_command(),
            ("act-run" | "act-crash" | "act-zombie" | "act-add" | "act-remove", _) => {
                self.random_activity_step(action);
            }
            ("blackout", _) => self.random_blackout(),
            ("trig-send", _) => self.trig_send(),
            ("trig-run", _) => {
                let slots: Vec<u32> = self.world().trig.slots.keys().copied().collect();
                if !slots.is_empty() {
                    let slot = *self.rng.pick(&slots);
                    let turns = self.rng.range(1, 4);
                    for _ in 0..turns {
                        self.trig_run(slot);
                    }
                }
            }
            ("trig-crash" | "trig-zombie" | "trig-add" | "trig-reset", _) => {
                self.trig_fault(action)
            }
            ("keyed", _) => self.random_keyed_event(),
            ("stub", _) => self.random_stub_write(),
            _ => {}
        }
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
        if self.faults.pause_resume {
            // Clients go on pausing and resuming while the executions run, then resume every
            // execution they paused, so that each runs to its end.
            self.pauses_after_faults();
        }
        if self.faults.resets {
            self.resets_after_faults();
        }
        if self.faults.queries {
            self.queries_after_faults();
        }
        if self.faults.batches {
            self.batches_after_faults();
        }
        if self.faults.route_pauses {
            // The client goes on pausing and resuming routes while the executions run, then
            // resumes every route it paused, so that every request held runs.
            self.routes_after_faults();
        }
        if self.faults.exhausted_pauses && self.faults.activity_workers {
            // Every broken activity's switch is flipped; the operator goes on resuming the
            // parents of parked activities through the quiescent phase.
            self.exhausted_after_faults();
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
}

impl Sim {
    /// The report of the run so far: what it did, and the violations `check` found.
    pub fn report(&self, settled: bool, violations: Vec<Violation>) -> Report {
        // Before the world is locked: it reads the committed log itself.
        let pause_sends = self.pause_sends_with_batches();
        let mut w = self.world();
        w.take_log();
        Report {
            seed: self.seed,
            config: self.config.clone(),
            faults: self.faults,
            settled,
            violations,
            trace: w.trace.clone(),
            stats: super::world::Stats {
                corrupt_states_copied: w
                    .cluster
                    .committed_records(Topic::Dlq)
                    .filter(|(_, r)| {
                        matches!(&r.payload, Some(super::cluster::Payload::Dlq(e))
                            if e.original_topic == Topic::State.name())
                    })
                    .count() as u64,
                ..w.stats.clone()
            },
            events: EventCounts::of(&w),
            schedules: ScheduleCounts::of(&w),
            correlation: CorrelationCounts::of(&w),
            stubs: StubCounts::of(&w, &self.stub_sends),
            upgrades: super::checks::UpgradeCounts::of(&w),
            pauses: super::checks::PauseCounts::of(&w, &pause_sends),
            batches: super::checks::BatchCounts::of(&w, &self.batch_sends),
            resets: super::checks::ResetCounts::of(&w, &self.reset_sends),
            concurrency: super::checks::ConcurrencyCounts::of(&w),
            fairness: super::checks::FairnessCounts::of(&w),
            queries: super::checks::QueryCounts::of(&w, &self.query_sends),
            routes: super::checks::RouteCounts::of(&w),
            rates: super::checks::RateCounts::of(&w),
            exhausted: super::checks::ExhaustedCounts::of(&w),
            activity: w.act_counts(),
            triggers: w.trig.counts.clone(),
            executions: self.submitted.len(),
            findings: w.findings.clone(),
        }
    }
}

/// The longest a quiescent phase runs while its deployment keeps consuming its inputs (four
/// hours of sim time): past it, a backlog that never drains is reported.
pub const MAX_QUIESCE_MS: i64 = 4 * 3_600 * 1_000;

/// The random run of `seed` with `faults`.
pub fn run_seed(seed: u64, faults: Faults) -> Report {
    let mut config_rng = Rng::new(seed ^ 0x5eed_c0f1_9000_0000);
    let config = SimConfig {
        inline_activities: seed % 2 == 1,
        ..SimConfig::random(&mut config_rng)
    };
    Sim::new(seed, config, faults).run_random()
}
