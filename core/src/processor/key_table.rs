//! The correlation keys of the owned partitions and the ids they remember, each with an index
//! of when it has something to expire ([`CorrelationState::expires_at`],
//! [`Remembered::expires_at`]).
//!
//! Issue 33 F10: the loop asked every key whether it had an id to forget at every turn, and a
//! batch scanned every key for it: at 100,000 live keys each turn of an idle worker cost a
//! walk over all of them. With the indexes, the loop's question is one look at the earliest
//! entry and a batch touches only the keys that are due (`docs/benchmarks.md`, correlation
//! keys). The remembered ids are held apart from the states, so that a rule clones a key's
//! state without its memory and a forward adds one id.
//!
//! Invariants: `due` holds exactly one entry `(expires_at, key)` for each held state that has
//! an `expires_at`, and nothing else; `forgets` holds exactly one entry `(expires_at, key)` for
//! each key that remembers an id, and nothing else.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::correlation::{CorrelationState, Forwarded, Remembered};

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct KeyTable {
    states: BTreeMap<String, CorrelationState>,
    due: BTreeSet<(DateTime<Utc>, String)>,
    remembered: BTreeMap<String, Remembered>,
    forgets: BTreeSet<(DateTime<Utc>, String)>,
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
        self.remembered.clear();
        self.forgets.clear();
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &CorrelationState> {
        self.states.values()
    }

    /// The ids `key` forwarded, if it remembers any.
    pub(super) fn remembered(&self, key: &str) -> Option<&Remembered> {
        self.remembered.get(key)
    }

    /// Every remembered id, by key.
    pub(super) fn all_remembered(&self) -> impl Iterator<Item = (&str, &Remembered)> {
        self.remembered.iter().map(|(k, r)| (k.as_str(), r))
    }

    /// Remembers `forwarded` for `key` ([`Remembered::remember`]): whether it is new, and the
    /// oldest ids forgotten for it.
    pub(super) fn remember(&mut self, key: &str, forwarded: Forwarded) -> (bool, Vec<Forwarded>) {
        self.with_remembered(key, |r| r.remember(forwarded))
    }

    /// Forgets the ids due at `now`, by key.
    pub(super) fn forget_due(&mut self, now: DateTime<Utc>) -> Vec<(String, Forwarded)> {
        let keys: Vec<String> = self
            .forgets
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, key)| key.clone())
            .collect();
        let mut forgotten = Vec::new();
        for key in keys {
            let ids = self.with_remembered(&key, |r| r.expire(now));
            forgotten.extend(ids.into_iter().map(|f| (key.clone(), f)));
        }
        forgotten
    }

    /// Changes `key`'s ids with `change`, keeping the index (a key left with none is dropped).
    fn with_remembered<T>(&mut self, key: &str, change: impl FnOnce(&mut Remembered) -> T) -> T {
        let remembered = self.remembered.entry(key.to_owned()).or_default();
        let before = remembered.expires_at();
        let out = change(remembered);
        let after = remembered.expires_at();
        if remembered.is_empty() {
            self.remembered.remove(key);
        }
        if before != after {
            if let Some(at) = before {
                self.forgets.remove(&(at, key.to_owned()));
            }
            if let Some(at) = after {
                self.forgets.insert((at, key.to_owned()));
            }
        }
        out
    }

    /// Whether a key has something to expire at `now`: a wait that ends, an id to forget.
    pub(super) fn due(&self, now: DateTime<Utc>) -> bool {
        self.due.first().is_some_and(|(at, _)| *at <= now)
            || self.forgets.first().is_some_and(|(at, _)| *at <= now)
    }

    /// The keys whose state has something to expire at `now`, earliest first.
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
    use crate::correlation;
    use crate::model::ExecutionId;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("valid time")
    }

    /// The events kept for an execution that does not exist yet, waiting until `when` plus
    /// the wait.
    fn waiting(key: &str, when: DateTime<Utc>) -> CorrelationState {
        let id: ExecutionId = key.parse().expect("an id");
        let correlation::Received::Changed(kept) = correlation::hold_early(
            None,
            &id,
            crate::records::ReceivedEvent {
                event_id: "ev".to_owned(),
                name: "paid".to_owned(),
                payload: serde_json::json!(1),
            },
            when,
            when,
            correlation::EARLY_EVENT_WAIT,
        ) else {
            panic!("an early event is kept");
        };
        kept.state.expect("a state")
    }

    fn id(n: u64) -> String {
        ExecutionId::top_level(ulid::Ulid::from_parts(n, 1)).to_string()
    }

    /// The index follows every insert, replacement and removal: only the keys due are
    /// named, earliest first, and a key forgotten or replaced by a state with nothing to
    /// expire is no longer due.
    #[test]
    fn only_the_keys_due_are_named() {
        let (early, late) = (id(1), id(2));
        let mut table = KeyTable::default();
        table.insert(waiting(&late, at(100)));
        table.insert(waiting(&early, at(0)));
        let due = |table: &KeyTable, key: &str| {
            table
                .get(key)
                .and_then(CorrelationState::expires_at)
                .expect("due")
        };
        let (early_due, late_due) = (due(&table, &early), due(&table, &late));
        assert!(!table.due(early_due - chrono::Duration::seconds(1)));
        assert_eq!(table.due_keys(early_due), std::slice::from_ref(&early));
        assert_eq!(table.due_keys(late_due), [early.clone(), late.clone()]);
        table.insert(waiting(&early, at(200)));
        assert_eq!(
            table.due_keys(late_due),
            std::slice::from_ref(&late),
            "replaced: due later"
        );
        table.remove(&late);
        assert!(!table.due(late_due), "removed: not due");
        table.clear();
        assert!(table.due_keys(at(10_000_000)).is_empty());
    }

    /// Remembered ids are forgotten by their own index: only the ids due, key by key, and a
    /// key left with none is dropped.
    #[test]
    fn remembered_ids_are_forgotten_when_due() {
        let mut table = KeyTable::default();
        let forwarded = |id: &str, secs| Forwarded {
            event_id: id.to_owned(),
            at: at(secs),
        };
        assert!(table.remember("a", forwarded("a-1", 0)).0);
        assert!(table.remember("a", forwarded("a-2", 50)).0);
        assert!(table.remember("b", forwarded("b-1", 10)).0);
        assert!(!table.remember("b", forwarded("b-1", 20)).0, "once");
        let window = correlation::DEDUP_WINDOW;
        assert!(!table.due(at(0) + window - chrono::Duration::seconds(1)));
        assert!(table.due(at(0) + window));
        let first = table.forget_due(at(10) + window);
        let names: Vec<(&str, &str)> = first
            .iter()
            .map(|(k, f)| (k.as_str(), f.event_id.as_str()))
            .collect();
        assert_eq!(names, [("a", "a-1"), ("b", "b-1")]);
        assert!(table.remembered("b").is_none(), "b remembers nothing");
        assert!(table.remembered("a").is_some_and(|r| r.contains("a-2")));
        assert!(!table.due(at(49) + window));
        assert_eq!(table.forget_due(at(50) + window).len(), 1);
        assert!(!table.due(at(10_000_000)));
    }
}
