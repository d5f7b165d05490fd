//! Cancellations (`Faults::cancels`): a client cancels or terminates a submitted execution,
//! chosen at random, with a request on `weir.responses`.

use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::world::lock;

impl Sim {
    /// A client cancels (or terminates) a random submitted execution.
    pub(in crate::sim) fn random_cancel(&mut self) {
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
}
