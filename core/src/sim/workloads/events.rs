//! Events (`Faults::events`): clients send the event `approved` to executions, mostly new
//! ones to an `approval`, some sent again, some to another workflow, to an execution nobody
//! submitted, or to one submitted only right after its event.

use serde_json::json;

use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
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
    pub(in crate::sim) fn random_event(&mut self) {
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
}
