//! Batch operations (`Faults::batches`; `weir batch`): a client starts a batch that pauses
//! every execution of a workflow function at a rate (a `BatchCommand` on `weir.responses`,
//! keyed `weir:batch:<id>`), sometimes sends the same start twice (ignored), a start with a
//! rate of 0 or less (refused), a cancel of a batch it started or of one that does not exist
//! (refused), while the faults go on. When the faults stop ([`Sim::batches_after_faults`]) it
//! waits for every batch to end (a worker killed now and then), starts one batch per function
//! that resumes the paused executions, waits for those, and resumes one by one whatever is
//! still paused (an execution the store showed running when the resume batch listed it), so
//! that the run can settle with everything finished. Last, a batch resets every execution of
//! one function to the latest point of each ([`Sim::reset_batch`]): the new executions, read
//! from the requests it committed, must finish like any reset's. Drawn from an RNG of its own
//! ([`Sim::batch_rng`]).

use crate::batch::{
    BatchAction, BatchCommand, BatchCommandAction, BatchFilter, BatchSpec, BatchState, BatchStatus,
};
use crate::model::ExecutionId;
use crate::records::{HistoryEntry, PauseAction};
use crate::rows::{ExecutionState, ListBy};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::sent::{BatchSend, ResetSend};
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;
use crate::state_key::StateKey;

/// The rates a batch is started with (executions a second).
const RATES: [f64; 5] = [0.5, 1.0, 3.0, 10.0, 40.0];

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn batch_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0xba7c_4e55_0000)
    }

    /// During the fault phase, at about one step in forty: a batch command.
    pub(in crate::sim) fn maybe_batch_command(&mut self) {
        if self.batch_rng.chance(25) {
            self.random_batch_command();
        }
    }

    fn random_batch_command(&mut self) {
        let r = self.batch_rng.below(100);
        let started: Vec<BatchCommand> = self
            .batch_sends
            .iter()
            .filter(|s| !s.refused && matches!(s.command.action, BatchCommandAction::Start(_)))
            .map(|s| s.command.clone())
            .collect();
        match r {
            0..8 => {
                let rate = if self.batch_rng.chance(500) {
                    0.0
                } else {
                    -2.0
                };
                self.start_batch(BatchAction::Pause, rate);
            }
            8..14 => {
                let id = format!("nobody-{}", self.batch_sends.len());
                self.send_batch(&id, BatchCommandAction::Cancel, true);
            }
            // The latest start: the likeliest to be running still.
            14..24 if !started.is_empty() => {
                let id = started[started.len() - 1].id.clone();
                self.send_batch(&id, BatchCommandAction::Cancel, false);
            }
            24..32 if !started.is_empty() => {
                let again = self.batch_rng.pick(&started).clone();
                self.send_batch(&again.id, again.action, false);
            }
            _ => {
                let rate = *self.batch_rng.pick(&RATES);
                self.start_batch(BatchAction::Pause, rate);
            }
        }
    }

    /// A start of a batch of `action` over a function of the submitted workflows.
    fn start_batch(&mut self, action: BatchAction, per_second: f64) {
        let mut functions: Vec<String> = self
            .submitted
            .values()
            .map(|s| s.ffqn.to_string())
            .collect();
        functions.sort();
        functions.dedup();
        if functions.is_empty() {
            return;
        }
        let function = self.batch_rng.pick(&functions).clone();
        self.start_batch_of(&function, action, None, per_second);
    }

    fn start_batch_of(
        &mut self,
        function: &str,
        action: BatchAction,
        state: Option<ExecutionState>,
        per_second: f64,
    ) -> String {
        let id = format!("b{}", self.batch_sends.len() + 1);
        let spec = BatchSpec {
            filter: BatchFilter {
                by: ListBy::Function(function.to_owned()),
                state,
                outcome: None,
                created_from: None,
                created_until: None,
            },
            action,
            per_second,
            reset: crate::batch::BatchReset::default(),
            reason: "sim".to_owned(),
        };
        let refused = crate::batch::check(&id, &spec).is_err();
        self.send_batch(&id, BatchCommandAction::Start(spec), refused);
        id
    }

    fn send_batch(&mut self, id: &str, action: BatchCommandAction, refused: bool) {
        let now = self.now();
        let selected = match &action {
            BatchCommandAction::Start(spec) => {
                let w = lock(&self.world);
                w.store
                    .executions
                    .values()
                    .filter(|r| matches!(&spec.filter.by, ListBy::Function(f) if *f == r.ffqn))
                    .filter(|r| spec.filter.state.is_none_or(|s| s == r.state))
                    .map(|r| (r.execution_id.clone(), r.created_at))
                    .collect()
            }
            BatchCommandAction::Cancel => Vec::new(),
        };
        let command = BatchCommand {
            id: id.to_owned(),
            action,
            requested_at: now,
        };
        let at = lock(&self.world).client_append(
            Topic::Responses,
            StateKey::Batch(id.to_owned()).to_string(),
            Some(crate::wire::RecordKind::Batch),
            Payload::BatchCommand(command.clone()),
        );
        self.note(format!(
            "batch {id}: {:?} ({} selected{}) -> responses/{}@{}",
            match &command.action {
                BatchCommandAction::Start(spec) =>
                    format!("start {} {}/s", spec.action, spec.per_second),
                BatchCommandAction::Cancel => "cancel".to_owned(),
            },
            selected.len(),
            if refused { ", refused" } else { "" },
            at.0,
            at.1
        ));
        self.batch_sends.push(BatchSend {
            command,
            refused,
            selected,
            at,
            sent_at: now,
        });
    }

    /// The batches' states as committed (the last of each).
    pub(in crate::sim) fn committed_batches(&self) -> Vec<BatchState> {
        let w = lock(&self.world);
        let mut last = std::collections::BTreeMap::new();
        for (_, r) in w.cluster.committed_records(Topic::State) {
            if let (Some(key), Some(Payload::Batch(Some(state)))) = (&r.key, &r.payload) {
                last.insert(key.clone(), state.clone());
            }
        }
        last.into_values().collect()
    }

    /// Whether every batch started (not refused) is committed and has ended.
    fn batches_ended(&self) -> bool {
        let states = self.committed_batches();
        self.batch_sends
            .iter()
            .filter(|s| !s.refused && matches!(s.command.action, BatchCommandAction::Start(_)))
            .all(|s| {
                states
                    .iter()
                    .any(|b| b.id == s.command.id && b.status != BatchStatus::Running)
            })
    }

    /// Runs the workers (a kill now and then) until every batch has ended, at most `rounds`
    /// rounds.
    fn run_batches(&mut self, rounds: u32) {
        for _ in 0..rounds {
            if self.batches_ended() {
                return;
            }
            for slot in self.slots() {
                let polls = self.batch_rng.range(1, 8) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            let slots = self.slots();
            if self.faults.crashes && !slots.is_empty() && self.batch_rng.chance(30) {
                let slot = *self.batch_rng.pick(&slots);
                if self.run_until_no_transaction(slot, 50) {
                    self.crash(slot);
                }
            }
            let ms = self.batch_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
    }

    /// Whether the workflow group has committed past every batch request on
    /// `weir.responses`: each was taken by its execution's owner.
    fn batch_requests_taken(&self) -> bool {
        let w = lock(&self.world);
        w.cluster
            .committed_records(Topic::Responses)
            .filter(|(_, r)| match &r.payload {
                Some(Payload::Pause(p)) => p.reason.starts_with("batch "),
                Some(Payload::Reset(p)) => p.reason.starts_with("batch "),
                _ => false,
            })
            .all(|(partition, r)| {
                w.cluster
                    .group
                    .committed
                    .get(&(crate::driver::InputTopic::Responses, partition))
                    .is_some_and(|next| *next > r.offset)
            })
    }

    /// Runs the batches to their end (cancelling those that take too long), then the workers
    /// until every request the batches sent was taken.
    fn finish_batches(&mut self) {
        self.run_batches(400);
        if !self.batches_ended() {
            // Running, or not started yet (its start still behind a backlog of its
            // partition): a cancel comes after the start on the batch's partition, so either
            // ends it.
            let states = self.committed_batches();
            let running: Vec<String> = self
                .batch_sends
                .iter()
                .filter(|s| !s.refused && matches!(s.command.action, BatchCommandAction::Start(_)))
                .map(|s| s.command.id.clone())
                .filter(|id| {
                    !states
                        .iter()
                        .any(|b| b.id == *id && b.status != BatchStatus::Running)
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            for id in running {
                self.send_batch(&id, BatchCommandAction::Cancel, false);
            }
            self.run_batches(4_000);
        }
        for _ in 0..400 {
            if self.batch_requests_taken() {
                break;
            }
            for slot in self.slots() {
                self.run(slot, 4);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.advance(200);
        }
        self.materialise_all();
    }

    /// After the fault phase: see the module docs.
    pub(in crate::sim) fn batches_after_faults(&mut self) {
        self.stop_faults("faults stop; the batches run to their end");
        self.finish_batches();
        let mut functions: Vec<String> = self
            .batch_sends
            .iter()
            .filter_map(|s| match &s.command.action {
                BatchCommandAction::Start(spec) if !s.refused => match &spec.filter.by {
                    ListBy::Function(f) => Some(f.clone()),
                    ListBy::Parent(_) => None,
                },
                _ => None,
            })
            .collect();
        functions.sort();
        functions.dedup();
        for function in functions {
            self.start_batch_of(
                &function,
                BatchAction::Resume,
                Some(ExecutionState::Paused),
                20.0,
            );
        }
        self.finish_batches();
        for id in self.still_paused() {
            self.send_pause(&id, PauseAction::Resume);
        }
        self.reset_batch();
    }

    /// A batch that resets every execution of a function whose result is its params' (one
    /// the resets' checks can follow) to the latest point of each, the old ones left as they
    /// are; its new executions, read from the requests it committed, must each finish once
    /// with the old one's value.
    fn reset_batch(&mut self) {
        // Executions fired by schedules and triggers have expectations of their own, which a
        // reset's new execution would not inherit here: then no reset batch.
        if self.faults.schedules || self.faults.triggers {
            return;
        }
        let mut functions: Vec<String> = self
            .submitted
            .values()
            .filter(|s| Workflow::of(&s.ffqn).is_some_and(|w| Workflow::ALL.contains(&w)))
            .map(|s| s.ffqn.to_string())
            .collect();
        functions.sort();
        functions.dedup();
        if functions.is_empty() {
            return;
        }
        let function = self.batch_rng.pick(&functions).clone();
        self.start_batch_of(&function, BatchAction::Reset, None, 20.0);
        self.finish_batches();
    }

    /// `submitted` and `resets` with the reset requests the batches committed (their reason
    /// is `batch <id>: …`), read when the run is checked: each is a reset to the latest
    /// point, which the rule allows on any top-level execution, so its new execution must
    /// finish once with the old one's value.
    pub(in crate::sim) fn with_batch_resets(
        &self,
        submitted: &mut indexmap::IndexMap<ExecutionId, crate::sim::sent::Submitted>,
        resets: &mut Vec<ResetSend>,
    ) {
        let sends: Vec<ResetSend> = {
            let w = lock(&self.world);
            w.cluster
                .committed_records(Topic::Responses)
                .filter_map(|(partition, r)| match &r.payload {
                    Some(Payload::Reset(q)) if q.reason.starts_with("batch ") => Some(ResetSend {
                        execution_id: q.execution_id.clone(),
                        new_execution_id: q.new_execution_id.clone(),
                        to: q.to,
                        then: q.then,
                        allowed: true,
                        at: (partition, r.offset),
                        sent_at: r.timestamp,
                    }),
                    _ => None,
                })
                .collect()
        };
        for send in sends {
            super::resets::expect_reset(submitted, resets, send);
        }
    }

    /// The executions whose committed history ends paused.
    fn still_paused(&self) -> Vec<ExecutionId> {
        let w = lock(&self.world);
        let mut paused = std::collections::BTreeMap::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(h)) = &r.payload {
                match &h.entry {
                    HistoryEntry::Paused { .. } => {
                        paused.insert(h.execution_id.clone(), true);
                    }
                    HistoryEntry::Resumed { .. } | HistoryEntry::Finished { .. } => {
                        paused.insert(h.execution_id.clone(), false);
                    }
                    _ => {}
                }
            }
        }
        paused
            .into_iter()
            .filter(|(_, p)| *p)
            .map(|(id, _)| id)
            .collect()
    }
}

impl Sim {
    /// The pause and resume requests of the run: the clients' ([`Sim::send_pause`]) and the
    /// batches' (read from the committed `weir.responses`: their reason is `batch <id>: …`),
    /// for the pause checks, which hold a batch's requests to the rules of any request.
    pub(in crate::sim) fn pause_sends_with_batches(&self) -> Vec<crate::sim::sent::PauseSend> {
        let mut sends = self.pause_sends.clone();
        let w = lock(&self.world);
        for (partition, r) in w.cluster.committed_records(Topic::Responses) {
            if let Some(Payload::Pause(p)) = &r.payload
                && p.reason.starts_with("batch ")
            {
                sends.push(crate::sim::sent::PauseSend {
                    execution_id: p.execution_id.clone(),
                    action: p.action,
                    reason: p.reason.clone(),
                    at: (partition, r.offset),
                    // A batch lists executions from the store: created, by what it read.
                    seen: crate::sim::sent::PauseSeen::Running,
                    stray: false,
                    sent_at: r.timestamp,
                    parked: None,
                });
            }
        }
        sends
    }
}
