//! The named values of a workflow execution (`set-state` / `get-state` of
//! `weir:workflow/host`; docs/design/wit.md, "State and queries"): what its query functions
//! read. Not recorded: a replay runs the same calls in the same order and sets the same values
//! again, so the values of a parked run are a function of its history.
//!
//! The values live in the run's store data and are shared (an [`Arc`]) with its
//! [`WorkflowRun`](super::WorkflowRun) handle, which copies them into a fresh instance to
//! answer a query (`query.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The longest key, in characters (of `[A-Za-z0-9_.-]`).
pub const MAX_STATE_KEY_LEN: usize = 64;
/// The largest value, in bytes of JSON text.
pub const MAX_STATE_VALUE_BYTES: usize = 64 << 10;
/// The most keys an execution holds.
pub const MAX_STATE_KEYS: usize = 64;

/// Why a `set-state` was refused: it fails the execution like a trap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error(
        "set-state: the key `{0}` is not 1 to {MAX_STATE_KEY_LEN} characters of [A-Za-z0-9_.-]"
    )]
    InvalidKey(String),
    #[error("set-state `{key}`: the value is not JSON text ({reason})")]
    NotJson { key: String, reason: String },
    #[error(
        "set-state `{key}`: the value is {size} bytes; a value is at most {MAX_STATE_VALUE_BYTES}"
    )]
    TooLarge { key: String, size: usize },
    #[error("set-state `{0}`: the execution already holds {MAX_STATE_KEYS} keys")]
    TooManyKeys(String),
}

/// The values of one execution, by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateValues {
    values: BTreeMap<String, String>,
    /// The bytes of every key and value: part of the run's weight in the cache.
    bytes: usize,
}

impl StateValues {
    /// Sets `key` to `value` after checking the rules (the module docs).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), StateError> {
        let valid_key = !key.is_empty()
            && key.len() <= MAX_STATE_KEY_LEN
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !valid_key {
            return Err(StateError::InvalidKey(key.chars().take(80).collect()));
        }
        if value.len() > MAX_STATE_VALUE_BYTES {
            return Err(StateError::TooLarge {
                key: key.to_owned(),
                size: value.len(),
            });
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(value) {
            return Err(StateError::NotJson {
                key: key.to_owned(),
                reason: e.to_string(),
            });
        }
        if let Some(old) = self.values.get_mut(key) {
            self.bytes = self.bytes - old.len() + value.len();
            value.clone_into(old);
            return Ok(());
        }
        if self.values.len() >= MAX_STATE_KEYS {
            return Err(StateError::TooManyKeys(key.to_owned()));
        }
        self.bytes += key.len() + value.len();
        self.values.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    /// The value set last for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The bytes of every key and value.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// The values of a run, shared by its store and its handle.
#[derive(Clone, Debug, Default)]
pub struct SharedState(Arc<Mutex<StateValues>>);

impl SharedState {
    pub fn new(values: StateValues) -> Self {
        SharedState(Arc::new(Mutex::new(values)))
    }

    /// The values; a lock poisoned by a panic elsewhere is used as it is (every write is one
    /// `set`, which leaves the map consistent).
    pub fn lock(&self) -> MutexGuard<'_, StateValues> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the values as they are now.
    pub fn snapshot(&self) -> StateValues {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_1_to_64_characters_of_letters_digits_and_underscore_dot_dash() {
        let mut state = StateValues::default();
        for key in ["a", "collected", "a_b.c-D9", &"k".repeat(MAX_STATE_KEY_LEN)] {
            assert_eq!(state.set(key, "1"), Ok(()), "{key}");
        }
        for key in [
            "",
            "with space",
            "slash/key",
            "é",
            &"k".repeat(MAX_STATE_KEY_LEN + 1),
        ] {
            assert!(
                matches!(state.set(key, "1"), Err(StateError::InvalidKey(_))),
                "{key}"
            );
        }
    }

    #[test]
    fn a_value_is_json_text_of_at_most_64_kib() {
        let mut state = StateValues::default();
        assert_eq!(state.set("v", r#"{"a": [1, "x"]}"#), Ok(()));
        assert_eq!(state.set("v", "\"text\""), Ok(()));
        assert!(matches!(
            state.set("v", "not json"),
            Err(StateError::NotJson { .. })
        ));
        assert!(matches!(
            state.set("v", "[1] [2]"),
            Err(StateError::NotJson { .. })
        ));
        // The largest JSON string that fits, and one byte more.
        let fits = format!("\"{}\"", "x".repeat(MAX_STATE_VALUE_BYTES - 2));
        assert_eq!(state.set("v", &fits), Ok(()));
        let over = format!("\"{}\"", "x".repeat(MAX_STATE_VALUE_BYTES - 1));
        assert_eq!(
            state.set("v", &over),
            Err(StateError::TooLarge {
                key: "v".into(),
                size: MAX_STATE_VALUE_BYTES + 1
            })
        );
        // A refused value leaves the last one.
        assert_eq!(state.get("v"), Some(fits.as_str()));
    }

    #[test]
    fn at_most_64_keys_and_setting_a_key_again_replaces_its_value() {
        let mut state = StateValues::default();
        for i in 0..MAX_STATE_KEYS {
            state.set(&format!("k{i}"), "0").unwrap();
        }
        assert_eq!(
            state.set("one-more", "0"),
            Err(StateError::TooManyKeys("one-more".into()))
        );
        // An existing key can still be set.
        assert_eq!(state.set("k0", "[1,2]"), Ok(()));
        assert_eq!(state.get("k0"), Some("[1,2]"));
        assert_eq!(state.len(), MAX_STATE_KEYS);
        assert_eq!(state.get("one-more"), None);
        let bytes: usize = (0..MAX_STATE_KEYS)
            .map(|i| format!("k{i}").len() + 1)
            .sum::<usize>()
            + 4;
        assert_eq!(state.bytes(), bytes);
    }
}
