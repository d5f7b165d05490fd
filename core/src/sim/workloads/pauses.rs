//! Pauses and resumes of executions (`Faults::pause_resume`; `weir pause`, `weir resume`): a
//! client pauses a submitted execution (mostly a running one; sometimes a running child
//! workflow, which its parent waits for) with a request on `weir.responses`, and resumes it
//! later; sometimes it pauses one paused already (ignored), one that finished (refused) or
//! that its owner may not have created yet, resumes one that is not paused (ignored), pauses
//! an id nobody submitted (dead-lettered), or (with `Faults::cancels`) cancels or terminates
//! one it paused. Where the faults leave little running (kills and zombies at the rate of
//! `found_with`: the workers hardly commit), few pauses find a running execution, so when the
//! faults stop, clients go on for a while as the executions run, a worker killed now and then
//! ([`Sim::pauses_after_faults`]); then they resume every execution they paused
//! ([`Sim::resume_paused`]), so that the run can settle with everything finished. Drawn from
//! an RNG of its own ([`Sim::pause_rng`]): the fault phase's other draws are the same with or
//! without the class.

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::{HistoryEntry, PauseAction, PauseRequest};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::sent::{PauseSeen, PauseSend};
use crate::sim::world::lock;

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn pause_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x9a05_e5ee_d000)
    }

    /// During the fault phase, at about one step in fourteen: a pause or a resume.
    pub(in crate::sim) fn maybe_pause_request(&mut self) {
        if self.pause_rng.chance(70) {
            self.random_pause_request();
        }
    }

    /// After the fault phase: for 10–60 rounds (a few seconds to a minute of sim time) the
    /// workers run without faults but a kill now and then (outside a transaction: its
    /// partitions are taken over), while clients go on pausing and resuming executions; then
    /// they resume every execution they paused.
    pub(in crate::sim) fn pauses_after_faults(&mut self) {
        self.stop_faults("faults stop; clients go on pausing and resuming executions");
        let rounds = self.pause_rng.range(10, 60);
        for _ in 0..rounds {
            for slot in self.slots() {
                let polls = self.pause_rng.range(1, 8) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            if self.pause_rng.chance(300) {
                self.random_pause_request();
            }
            let slots = self.slots();
            if self.faults.crashes && !slots.is_empty() && self.pause_rng.chance(25) {
                let slot = *self.pause_rng.pick(&slots);
                if self.run_until_no_transaction(slot, 50) {
                    self.crash(slot);
                }
            }
            let ms = self.pause_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
        self.resume_paused();
    }

    /// A pause or a resume, chosen as the module docs say.
    fn random_pause_request(&mut self) {
        let seen = self.seen_by_clients();
        let seen_of = |id: &ExecutionId| seen.get(id).copied().unwrap_or(PauseSeen::Nothing);
        let submitted: Vec<ExecutionId> = self.submitted.keys().cloned().collect();
        let running: Vec<ExecutionId> = submitted
            .iter()
            .filter(|id| seen_of(id) == PauseSeen::Running && !self.paused.contains(*id))
            .cloned()
            .collect();
        // Child workflows: their parents wait for them while they are paused.
        let children: Vec<ExecutionId> = seen
            .iter()
            .filter(|(id, s)| {
                **s == PauseSeen::Running && id.parent().is_some() && !self.paused.contains(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let paused: Vec<ExecutionId> = self.paused.iter().cloned().collect();
        // A child cancelled would answer its parent `cancelled`: not what the parent computes.
        let cancellable: Vec<ExecutionId> = paused
            .iter()
            .filter(|id| self.submitted.contains_key(*id))
            .cloned()
            .collect();
        let r = self.pause_rng.below(100);
        let (id, action) = match r {
            // An id nobody submitted: dead-lettered.
            0..4 => {
                let ms = self.now().timestamp_millis() as u64;
                let id = ExecutionId::top_level(ulid::Ulid::from_parts(
                    ms,
                    u128::from(self.pause_rng.next_u64()),
                ));
                (Some(id), PauseAction::Pause)
            }
            // Any submitted one: perhaps finished (refused), or not created yet.
            4..10 => (self.pick_of(&submitted), PauseAction::Pause),
            // A resume of one that is not paused (ignored), or finished (refused).
            10..13 => (self.pick_of(&running), PauseAction::Resume),
            13..16 => (self.pick_of(&submitted), PauseAction::Resume),
            // A pause of one paused already (ignored).
            16..22 => (self.pick_of(&paused), PauseAction::Pause),
            // With `cancels`: a cancellation (or a termination) of a paused one, which resumes
            // it to compensate (or finishes it).
            22..27 if self.faults.cancels => {
                if let Some(id) = self.pick_of(&cancellable) {
                    self.cancel_paused(&id);
                }
                return;
            }
            _ if !paused.is_empty() && self.pause_rng.chance(400) => {
                (self.pick_of(&paused), PauseAction::Resume)
            }
            _ if !children.is_empty() && self.pause_rng.chance(350) => {
                (self.pick_of(&children), PauseAction::Pause)
            }
            _ => (self.pick_of(&running), PauseAction::Pause),
        };
        if let Some(id) = id {
            self.send_pause(&id, action);
        }
    }

    fn pick_of(&mut self, ids: &[ExecutionId]) -> Option<ExecutionId> {
        (!ids.is_empty()).then(|| self.pause_rng.pick(ids).clone())
    }

    /// What clients have read of each execution in the committed history.
    fn seen_by_clients(&self) -> BTreeMap<ExecutionId, PauseSeen> {
        let world = lock(&self.world);
        let mut seen = BTreeMap::new();
        for (_, r) in world.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(h)) = &r.payload {
                let s = seen
                    .entry(h.execution_id.clone())
                    .or_insert(PauseSeen::Running);
                if matches!(h.entry, HistoryEntry::Finished { .. }) {
                    *s = PauseSeen::Finished;
                }
            }
        }
        seen
    }

    /// A client pauses or resumes `id` (`weir.responses`, keyed by the execution, kind
    /// `pause-execution`), with a reason unique in the run; an execution it pauses is resumed
    /// when the faults stop, unless resumed before.
    pub fn send_pause(&mut self, id: &ExecutionId, action: PauseAction) -> (i32, i64) {
        let seen = self
            .seen_by_clients()
            .get(id)
            .copied()
            .unwrap_or(PauseSeen::Nothing);
        let verb = match action {
            PauseAction::Pause => "pause",
            PauseAction::Resume => "resume",
        };
        let reason = format!("sim {verb} {}", self.pause_sends.len() + 1);
        let now = self.now();
        let request = PauseRequest {
            execution_id: id.clone(),
            action,
            reason: reason.clone(),
            requested_at: now,
            parked: None,
        };
        let at = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::PauseExecution),
            Payload::Pause(request),
        );
        let stray = !self.submitted.contains_key(id) && seen == PauseSeen::Nothing;
        match action {
            PauseAction::Pause if !stray => {
                self.paused.insert(id.clone());
            }
            PauseAction::Pause => {}
            PauseAction::Resume => {
                self.paused.shift_remove(id);
            }
        }
        self.pause_sends.push(PauseSend {
            execution_id: id.clone(),
            action,
            reason: reason.clone(),
            at,
            seen,
            stray,
            sent_at: now,
            parked: None,
        });
        self.note(format!(
            "{verb} {id} ({reason}; seen {}{}) -> responses/{}@{}",
            match seen {
                PauseSeen::Nothing => "nothing",
                PauseSeen::Running => "running",
                PauseSeen::Finished => "finished",
            },
            if stray { ", never submitted" } else { "" },
            at.0,
            at.1
        ));
        at
    }

    /// A client cancels (one time in four terminates) an execution it paused.
    fn cancel_paused(&mut self, id: &ExecutionId) {
        let terminate = self.pause_rng.chance(250);
        self.cancel_paused_so(id, terminate);
    }

    /// A client cancels (`terminate`: terminates) a paused execution.
    pub(in crate::sim) fn cancel_paused_so(&mut self, id: &ExecutionId, terminate: bool) {
        let request = crate::records::CancelRequest {
            execution_id: id.clone(),
            reason: "sim, paused".to_owned(),
            terminate,
            requested_at: self.now(),
            waited_until: None,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::CancelExecution),
            Payload::Cancel(request),
        );
        if let Some(s) = self.submitted.get_mut(id) {
            s.cancelled = true;
        }
        self.note(format!(
            "{} paused {id} -> responses/{partition}@{offset}",
            if terminate { "terminate" } else { "cancel" }
        ));
    }

    /// The faults stop: a client resumes every execution it paused and has not resumed.
    pub fn resume_paused(&mut self) {
        let paused: Vec<ExecutionId> = self.paused.iter().cloned().collect();
        for id in paused {
            self.send_pause(&id, PauseAction::Resume);
        }
    }
}
