//! The operator of retries that end in `paused` (`Faults::exhausted_pauses`): it reads the
//! pauses the activity workers sent on `weir.responses` (a parked activity's parent, the
//! activity named in the reason) and, for each, flips the activity's switch and resumes the
//! parent (one time in five it resumes without flipping it: the activity exhausts a fresh
//! budget and parks again; with `cancels`, one time in ten it cancels or terminates a
//! top-level parent not cancelled already instead). During the fault phase it reads at about one step in ten,
//! each pause only some steps after it came; after it the workers run a while with the
//! activities still broken, the operator reading as they come and activity workers killed
//! now and then ([`Sim::exhausted_after_faults`]); then every switch is flipped and it reads
//! every pause at each round of the quiescent phase ([`Sim::operate_exhausted`]), so that
//! every parked activity's parent is resumed.
//! Drawn from an RNG of its own ([`Sim::exhausted_rng`]).

use crate::model::ExecutionId;
use crate::records::PauseAction;
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::exhausted::named_activity;
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::world::lock;

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn exhausted_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0xe8a0_57ed_0000)
    }

    /// During the fault phase, at about one step in ten: the operator reads the pauses.
    pub(in crate::sim) fn maybe_operate_exhausted(&mut self) {
        if self.exhausted_rng.chance(100) {
            self.operate_exhausted(false);
        }
    }

    /// After the fault phase (where the faults leave the workers little time to run the
    /// activities), for 60–150 rounds the workers run with the broken activities still
    /// broken, the operator reading the pauses as they come, and now and then an activity
    /// worker killed (often inside a commit: its parent's pause produced, its progress lost)
    /// or a workflow worker killed outside a transaction; then every switch is flipped
    /// (attempts started from then on answer) and the operator resumes every parent it has
    /// not resumed.
    pub(in crate::sim) fn exhausted_after_faults(&mut self) {
        self.stop_faults("faults stop; the broken activities stay broken a while");
        let rounds = self.exhausted_rng.range(60, 150);
        for _ in 0..rounds {
            for slot in self.slots() {
                let polls = self.exhausted_rng.range(1, 8) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            self.operate_exhausted(false);
            let act_slots = self.act_slots();
            if !act_slots.is_empty() && self.exhausted_rng.chance(60) {
                let slot = *self.exhausted_rng.pick(&act_slots);
                if self.exhausted_rng.chance(500) {
                    self.act_run_until_committing(slot, 20);
                }
                self.act_crash(slot);
            }
            let slots = self.slots();
            if self.faults.crashes && !slots.is_empty() && self.exhausted_rng.chance(25) {
                let slot = *self.exhausted_rng.pick(&slots);
                if self.run_until_no_transaction(slot, 50) {
                    self.crash(slot);
                }
            }
            let ms = self.exhausted_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
        lock(&self.world).act.exhausted.all_fixed = true;
        self.note("operator: every switch flipped");
        self.operate_exhausted(true);
    }

    /// The operator reads the activity workers' pauses it has not handled; `all`: every one
    /// (else each with a chance of one in two, the rest at a later read).
    pub(in crate::sim) fn operate_exhausted(&mut self, all: bool) {
        let pauses: Vec<((i32, i64), ExecutionId, String)> = {
            let w = lock(&self.world);
            w.cluster
                .committed_records(Topic::Responses)
                .filter(|(p, r)| {
                    r.producer_is_activity_worker()
                        && !w.act.exhausted.handled.contains(&(*p, r.offset))
                })
                .filter_map(|(p, r)| match &r.payload {
                    Some(Payload::Pause(request)) => Some((
                        (p, r.offset),
                        request.execution_id.clone(),
                        request.reason.clone(),
                    )),
                    _ => None,
                })
                .collect()
        };
        for (at, parent, reason) in pauses {
            if !all && self.exhausted_rng.chance(500) {
                continue;
            }
            let activity = named_activity(&reason);
            let r = self.exhausted_rng.below(100);
            // One cancelled already ignores another cancellation: it is resumed instead.
            let top_level = self.submitted.get(&parent).is_some_and(|s| !s.cancelled);
            {
                let mut w = lock(&self.world);
                let ex = &mut w.act.exhausted;
                ex.handled.insert(at);
                ex.counts.read += 1;
            }
            if !all && r < 10 && self.faults.cancels && top_level {
                let terminate = self.exhausted_rng.chance(250);
                {
                    let mut w = lock(&self.world);
                    let ex = &mut w.act.exhausted;
                    ex.counts.cancelled += 1;
                    if let Some(activity) = &activity {
                        ex.fix(activity);
                    }
                }
                self.note(format!(
                    "operator: cancels {parent} (its activity parked: {reason})"
                ));
                self.cancel_paused_so(&parent, terminate);
                continue;
            }
            let fix = all || r >= 30;
            {
                let mut w = lock(&self.world);
                let ex = &mut w.act.exhausted;
                if fix {
                    ex.counts.fixed += 1;
                    if let Some(activity) = &activity {
                        ex.fix(activity);
                    }
                } else {
                    ex.counts.unfixed += 1;
                }
            }
            self.note(format!(
                "operator: {} {activity:?} and resumes {parent}",
                if fix {
                    "flips the switch of"
                } else {
                    "leaves the switch of"
                }
            ));
            self.send_pause(&parent, PauseAction::Resume);
        }
    }
}

impl crate::sim::cluster::Record {
    /// Whether an activity worker process wrote it.
    fn producer_is_activity_worker(&self) -> bool {
        matches!(self.producer, Producer::ActivityWorker { .. })
    }
}
