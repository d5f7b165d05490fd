//! Cancellations (`Faults::cancels`): a client cancels or terminates a submitted execution,
//! chosen at random, with a request on `weir.responses`; or cancels an execution it has not
//! submitted yet, then submits it (the worker may read the two in either order).

use serde_json::json;

use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
    /// A client cancels (or terminates) a random submitted execution.
    pub(in crate::sim) fn random_cancel(&mut self) {
        if self.submitted.is_empty() || self.rng.chance(250) {
            self.early_cancel();
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
            waited_until: None,
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

    /// A client cancels an execution before it submits it (a `long-sleep`, which no event
    /// ends): the cancellation is kept for the submission and applies when it comes, so the
    /// execution finishes `cancelled`, unless no submission was read in time and the
    /// cancellation was dead-lettered.
    fn early_cancel(&mut self) {
        let id = self.new_id();
        let request = crate::records::CancelRequest {
            execution_id: id.clone(),
            reason: "sim, early".to_owned(),
            terminate: false,
            requested_at: self.now(),
            waited_until: None,
        };
        let at = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::CancelExecution),
            Payload::Cancel(request),
        );
        let secs = self.rng.range(1, 120) as i64;
        self.submit_execution(
            id.clone(),
            Workflow::LongSleep.ffqn(),
            json!([secs]),
            (None, None),
            Workflow::LongSleep.expected(&[secs]),
        );
        if let Some(s) = self.submitted.get_mut(&id) {
            s.cancelled = true;
            s.early_cancel = Some(at);
        }
        self.note(format!(
            "cancel {id} before its submission -> responses/{}@{}",
            at.0, at.1
        ));
    }
}
