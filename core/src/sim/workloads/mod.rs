//! The workloads of a random run: what the seeded steps do, one module per feature, each an
//! `impl Sim` block the scheduler's dispatch ([`Sim::random_step`]) and its phases call
//! into, and the step-by-step API the scripted scenarios use. Every random choice is drawn
//! from the run's one [`Rng`](crate::sim::Rng), in the order the steps make them.
//!
//! - [`submissions`]: clients submitting executions (again, scheduled, with deadlines),
//!   and the poison ones: undecodable, misrouted, conflicting, of unknown functions.
//! - [`events`]: events sent to executions (some before their submission, some to nobody).
//! - [`correlation`]: events sent to correlation keys, and the end-of-run answers to `order`s.
//! - [`schedules`]: schedules created, paused, resumed, recreated, caught up and ended.
//! - [`stubs`]: stub values written from outside and by `stub-writer`s.
//! - [`cancels`], [`upgrades`]: cancel and upgrade requests for submitted executions.
//! - [`batches`]: batch operations pausing every execution of a function, then resuming.
//! - [`pauses`]: pause and resume requests for submitted executions, all resumed at the end.
//! - [`queries`]: queries of submitted executions, some malformed or impossible.
//! - [`routes`]: activity routes paused and resumed on `weir.control`, all resumed at the end.
//! - [`resets`]: new executions from executions' histories, each of which must finish.
//! - [`activity_workers`]: the activity workers' processes and their faults.
//! - [`exhausted`]: the operator of retries that end in `paused`: switches flipped, parents
//!   resumed.
//! - [`triggers`]: the trigger's source writer, and the trigger workers' faults.
//! - [`corrupt_state`]: records of `weir.state` that do not decode.
//! - [`faults`]: kills, freezes, removals, store outages, long idles and steady load.
//!
//! Here: the helpers several of them share.

mod activity_workers;
mod batches;
mod cancels;
mod correlation;
mod corrupt_state;
mod events;
mod exhausted;
mod fairness;
mod faults;
mod pauses;
mod queries;
mod resets;
mod routes;
mod schedules;
mod stubs;
mod submissions;
mod triggers;
mod upgrades;

use ulid::Ulid;

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::workflows::Workflow;

impl Sim {
    pub(in crate::sim) fn new_id(&mut self) -> ExecutionId {
        let ms = self.now().timestamp_millis() as u64;
        let random =
            u128::from(self.rng.next_u64()) << 16 | u128::from(self.rng.next_u64() & 0xffff);
        ExecutionId::top_level(Ulid::from_parts(ms, random))
    }

    /// Submitted executions that are not `stub-writer`s: the run's workload, which
    /// [`SimConfig::executions`](crate::sim::SimConfig::executions) bounds.
    pub(in crate::sim) fn workload(&self) -> usize {
        self.submitted
            .values()
            .filter(|s| Workflow::of(&s.ffqn) != Some(Workflow::StubWriter))
            .count()
    }

    /// Executions of `workflow` without a result on `weir.results` yet.
    pub(in crate::sim) fn unanswered(&self, workflow: Workflow) -> Vec<ExecutionId> {
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
}
