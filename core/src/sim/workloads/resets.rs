//! Resets of executions (`Faults::resets`; `weir reset`): a client reads an execution's
//! committed history, as `weir reset` reads the store, and asks for a new execution from it
//! up to a point: mostly one where it waits for nothing (the one rule,
//! [`crate::reset::cut`], says which), sometimes one where it waits (refused), one past its
//! history or an id nobody submitted (refused); sometimes the same request twice (one new
//! execution). Mostly the old execution goes on; sometimes the request cancels or
//! terminates it. A reset the rule allows makes a new execution that must finish, once,
//! with what its workflow computes from its params: the checks hold it to that as to any
//! submission. When the faults stop, clients reset some finished executions too (what a
//! reset is most for). Drawn from an RNG of its own ([`Sim::reset_rng`]): the fault phase's
//! other draws are the same with or without the class.

use chrono::{DateTime, Utc};

use crate::model::ExecutionId;
use crate::records::{HistoryRecord, ResetPoint, ResetRequest, ResetThen};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::sent::{ResetSend, Submitted};
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn reset_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x5e5e_7000_0bad)
    }

    /// During the fault phase, at about one step in twelve: a reset.
    pub(in crate::sim) fn maybe_reset_request(&mut self) {
        if self.reset_rng.chance(80) {
            self.random_reset();
        }
    }

    /// After the fault phase (where the faults may have left little committed): for 10–40
    /// rounds the workers run without faults while clients go on resetting executions,
    /// finished ones more and more.
    pub(in crate::sim) fn resets_after_faults(&mut self) {
        self.stop_faults("faults stop; clients go on resetting executions");
        let rounds = self.reset_rng.range(10, 40);
        for _ in 0..rounds {
            for slot in self.slots() {
                let polls = self.reset_rng.range(1, 8) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            if self.reset_rng.chance(250) {
                self.random_reset();
            }
            let ms = self.reset_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
    }

    /// A reset request, chosen as the module docs say.
    fn random_reset(&mut self) {
        // Only workflows whose result is their params' (not an event's, not a stub's);
        // executions made by a reset among them.
        let candidates: Vec<ExecutionId> = self
            .submitted
            .iter()
            .filter(|(_, s)| Workflow::of(&s.ffqn).is_some_and(|w| Workflow::ALL.contains(&w)))
            .map(|(id, _)| id.clone())
            .collect();
        let r = self.reset_rng.below(100);
        if r < 4 {
            // An id nobody submitted.
            let ms = self.now().timestamp_millis() as u64;
            let id = ExecutionId::top_level(ulid::Ulid::from_parts(
                ms,
                u128::from(self.reset_rng.next_u64()),
            ));
            self.send_reset(&id, ResetPoint::Seq(0), ResetThen::Keep);
            return;
        }
        if candidates.is_empty() {
            return;
        }
        let id = self.reset_rng.pick(&candidates).clone();
        let history = self.committed_history(&id);
        if history.is_empty() {
            // Not created yet as far as a reader can tell: its owner may have created it by
            // the time it reads the request, or not. A client that reads nothing sends
            // nothing.
            return;
        }
        let new = self.reset_id();
        let points = crate::reset::points(&id, &history);
        let last = history.len() as u64 - 1;
        let to = match r {
            // Anywhere in its history: perhaps where it waits (refused).
            4..20 => ResetPoint::Seq(self.reset_rng.below(last + 1)),
            // Past any history (just past what the client read could be there by the time
            // its owner reads it).
            20..24 => ResetPoint::Seq(u64::MAX - self.reset_rng.below(3)),
            // Wherever its owner finds the latest point (a batch reset's request).
            24..40 => ResetPoint::Latest,
            _ => ResetPoint::Seq(*self.reset_rng.pick(&points)),
        };
        let then = match self.reset_rng.below(10) {
            0 => ResetThen::Cancel,
            1 => ResetThen::Terminate,
            _ => ResetThen::Keep,
        };
        let sent = self.send_reset_as(&id, to, new, then, &history);
        if self.reset_rng.chance(100) {
            // The client did not hear and sends it again: one new execution.
            let again = self.reset_sends[sent].clone();
            self.send_reset_as(&id, to, again.new_execution_id, then, &history);
        }
    }

    /// Whether `id` is the new execution of a reset a client asked for.
    pub(in crate::sim) fn made_by_reset(&self, id: &ExecutionId) -> bool {
        self.reset_sends.iter().any(|r| r.new_execution_id == *id)
    }

    fn reset_id(&mut self) -> ExecutionId {
        let ms = self.now().timestamp_millis() as u64;
        ExecutionId::top_level(ulid::Ulid::from_parts(
            ms,
            u128::from(self.reset_rng.next_u64()),
        ))
    }

    /// The committed history of `id`, in seq order, each seq once, as a reader of the store
    /// would have it.
    pub(in crate::sim) fn committed_history(
        &self,
        id: &ExecutionId,
    ) -> Vec<(HistoryRecord, DateTime<Utc>)> {
        let world = lock(&self.world);
        let mut history: Vec<(HistoryRecord, DateTime<Utc>)> = Vec::new();
        for (_, r) in world.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(h)) = &r.payload
                && h.execution_id == *id
                && h.seq == history.len() as u64
            {
                history.push((h.clone(), h.at.unwrap_or(r.timestamp)));
            }
        }
        history
    }

    /// A client resets `id` to `to` into a new execution, having read nothing of it.
    fn send_reset(&mut self, id: &ExecutionId, to: ResetPoint, then: ResetThen) {
        let new = self.reset_id();
        self.send_reset_as(id, to, new, then, &[]);
    }

    /// A client resets `id` to `to` into `new` (`weir.responses`, keyed by `id`, kind
    /// `reset-execution`), having read `history` of it; returns its place in
    /// [`Sim::reset_sends`]. A reset the rule allows is a submission the run must finish.
    fn send_reset_as(
        &mut self,
        id: &ExecutionId,
        to: ResetPoint,
        new: ExecutionId,
        then: ResetThen,
        history: &[(HistoryRecord, DateTime<Utc>)],
    ) -> usize {
        let now = self.now();
        let reason = format!("sim reset {}", self.reset_sends.len() + 1);
        let request = ResetRequest {
            execution_id: id.clone(),
            to,
            new_execution_id: new.clone(),
            then,
            reason: reason.clone(),
            requested_at: now,
        };
        let at = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::ResetExecution),
            Payload::Reset(request),
        );
        // The latest point is its owner's to find, on a history that may have grown since;
        // a top-level history always has one (seq 0 at least).
        let allowed = !history.is_empty()
            && match to {
                ResetPoint::Seq(to_seq) => crate::reset::cut(id, history, to_seq, &new).is_ok(),
                ResetPoint::Latest => !crate::reset::points(id, history).is_empty(),
            };
        expect_reset(
            &mut self.submitted,
            &mut self.reset_sends,
            ResetSend {
                execution_id: id.clone(),
                new_execution_id: new.clone(),
                to,
                then,
                allowed,
                at,
                sent_at: now,
            },
        );
        self.note(format!(
            "reset {id} to {to} into {new} ({reason}; {then:?}; {}) -> responses/{}@{}",
            if allowed { "allowed" } else { "refused" },
            at.0,
            at.1
        ));
        self.reset_sends.len() - 1
    }
}

/// Keeps a reset request (a client's, or a batch's: [`Sim::with_batch_resets`]) among
/// `sends`: one the rule allows makes its new execution (once per new id), which must finish
/// with the old one's value, so it joins `submitted`.
pub(in crate::sim) fn expect_reset(
    submitted: &mut indexmap::IndexMap<ExecutionId, Submitted>,
    sends: &mut Vec<ResetSend>,
    send: ResetSend,
) {
    let first = !sends
        .iter()
        .any(|r| r.new_execution_id == send.new_execution_id);
    if send.allowed && first {
        let old = submitted.get_mut(&send.execution_id).map(|s| {
            if send.then != ResetThen::Keep {
                s.cancelled = true;
            }
            (
                s.ffqn.clone(),
                s.params.clone(),
                s.expected.clone(),
                s.events.clone(),
            )
        });
        // The events sent to the old execution: those in the kept entries are the new one's
        // too.
        if let Some((ffqn, params, expected, events)) = old {
            submitted.insert(
                send.new_execution_id.clone(),
                Submitted {
                    ffqn,
                    params,
                    scheduled_at: None,
                    expected,
                    times: 1,
                    conflicts: 0,
                    events,
                    cancelled: false,
                    early_cancel: None,
                    deadline: None,
                },
            );
        }
    }
    sends.push(send);
}
