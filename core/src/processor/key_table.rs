//! The correlation keys of the owned partitions, with an index of when each has something to
//! expire ([`CorrelationState::expires_at`]).
//!
//! Issue 33 F10: the loop asked every key whether it had an id to forget at every turn, and a
//! batch scanned every key for it: at 100,000 live keys each turn of an idle worker cost a
//! walk over all of them. With the index, the loop's question is one look at the earliest
//! entry and a batch touches only the keys that are due (`docs/benchmarks.md`, correlation
//! keys).
//!
//! Invariant: `due` holds exactly one entry `(expires_at, key)` for each held state that has
//! an `expires_at`, and nothing else.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::correlation::CorrelationState;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct KeyTable {
    states: BTreeMap<String, CorrelationState>,
    due: BTreeSet<(DateTime<Utc>, String)>,
}

impl KeyTable {
    pub(super) fn get(&self, key: &str) -> Option<&CorrelationState> {
        self.states.get(key)
    }

    /// Holds `state` (replacing the key's former state).
    pub(super) fn insert(&mut self, state: CorrelationState) {
        self.remove(&state.key);
        if let Some(at) = state.expires_at() {
            self.due.insert((at, state.key.clone()));
        }
        self.states.insert(state.key.clone(), state);
    }

    pub(super) fn remove(&mut self, key: &str) {
        if let Some(old) = self.states.remove(key)
            && let Some(at) = old.expires_at()
        {
            self.due.remove(&(at, old.key));
        }
    }

    pub(super) fn clear(&mut self) {
        self.states.clear();
        self.due.clear();
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &CorrelationState> {
        self.states.values()
    }

    /// Whether a key has something to expire at `now`.
    pub(super) fn due(&self, now: DateTime<Utc>) -> bool {
        self.due.first().is_some_and(|(at, _)| *at <= now)
    }

    /// The keys with something to expire at `now`, earliest first.
    pub(super) fn due_keys(&self, now: DateTime<Utc>) -> Vec<String> {
        self.due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, key)| key.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlation::{self, CorrelationAction, CorrelationCommand};
    use crate::model::ExecutionId;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("valid time")
    }

    /// A key whose execution registers it and then forwards an event: it remembers the id
    /// until the dedup window passes.
    fn remembering(key: &str, when: DateTime<Utc>) -> CorrelationState {
        let holder = ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        let register = CorrelationCommand {
            key: key.to_owned(),
            execution_id: holder,
            action: CorrelationAction::Register,
            sent_at: when,
        };
        let correlation::Applied::Changed(registered) = correlation::apply(None, &register, when)
        else {
            panic!("a first registration changes the key");
        };
        let registered = registered.state.expect("a state");
        let event = correlation::KeyedEvent {
            event: crate::records::ReceivedEvent {
                event_id: format!("ev-{key}"),
                name: "paid".to_owned(),
                payload: serde_json::json!(1),
            },
            key: key.to_owned(),
            sent_at: when,
            returned_by: None,
        };
        let correlation::Received::Changed(forwarded) =
            correlation::receive(Some(&registered), event, when)
        else {
            panic!("an event for a held key is forwarded");
        };
        forwarded.state.expect("a state")
    }

    /// The index follows every insert, replacement and removal: only the keys due are
    /// named, earliest first, and a key forgotten or replaced by a state with nothing to
    /// expire is no longer due.
    #[test]
    fn only_the_keys_due_are_named() {
        let mut table = KeyTable::default();
        table.insert(remembering("late", at(100)));
        table.insert(remembering("early", at(0)));
        let early_due = table
            .get("early")
            .and_then(CorrelationState::expires_at)
            .expect("due");
        let late_due = table
            .get("late")
            .and_then(CorrelationState::expires_at)
            .expect("due");
        assert!(!table.due(early_due - chrono::Duration::seconds(1)));
        assert_eq!(table.due_keys(early_due), ["early"]);
        assert_eq!(table.due_keys(late_due), ["early", "late"]);
        table.insert(remembering("early", at(200)));
        assert_eq!(table.due_keys(late_due), ["late"], "replaced: due later");
        table.remove("late");
        assert!(!table.due(late_due), "removed: not due");
        table.clear();
        assert!(table.due_keys(at(10_000_000)).is_empty());
    }
}
