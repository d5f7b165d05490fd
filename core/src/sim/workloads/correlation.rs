//! Correlation keys (`Faults::correlation`): events sent to the keys `order` executions
//! register (or to a key nobody registers), some sent again within the deduplication window
//! (`Faults::correlation_duplicates`); and, once the run settled, one event per key an
//! unanswered `order` waits on, round after round, so that every holder can finish.

use serde_json::json;

use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::sent::KeyedSend;
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
    /// A client sends the event `paid` with `payload` and `event_id` to correlation key `key`
    /// (`weir.events`, keyed by the key).
    pub fn send_keyed_event(&mut self, key: &str, event_id: String, payload: i64) {
        let sent_at = self.now();
        let event = crate::correlation::KeyedEvent {
            event: crate::records::ReceivedEvent {
                event_id: event_id.clone(),
                name: crate::sim::workflows::ORDER_EVENT.to_owned(),
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
    pub(in crate::sim) fn random_keyed_event(&mut self) {
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
            crate::sim::workflows::order_key(r.below(self.order_keys as u64) as i64)
        };
        let twice = r.chance(100) && duplicates;
        let (id, payload) = self.new_keyed_event();
        self.send_keyed_event(&key, id.clone(), payload);
        if twice {
            self.send_keyed_event(&key, id, payload);
        }
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
                    Some(crate::sim::workflows::order_key(params))
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
}
