//! The key space of Weir's own keyed state (`docs/design/events.md`, `docs/design/schedules.md`):
//! what the key of a record on `weir.state`, of a command on `weir.responses` that is for no
//! execution, or the target of an event on `weir.events` names. Four kinds of key, told
//! apart by their text alone, never overlapping:
//!
//! | key                          | names                                                |
//! |------------------------------|------------------------------------------------------|
//! | `E_…`                        | an execution (events kept for one not created yet)   |
//! | `schedule:<name>`            | a schedule (its state, its commands)                 |
//! | `weir:seen:<key> <event id>` | an event id a correlation key remembers forwarding   |
//! | `weir:slot:<slot>`           | a concurrency slot (`concurrency.rs` reads these)    |
//! | `weir:batch:<id>`            | a batch operation (its state, its commands)          |
//! | anything else                | a correlation key ([`check_correlation_key`])        |
//!
//! Invariants: a correlation key never starts with `E_` nor with a prefix Weir keeps
//! ([`RESERVED_PREFIXES`]), so no key is read as two things; and a key reads back as what it
//! was made as (`StateKey::parse(&key.to_string()) == Ok(key)`).

use std::fmt;

use crate::model::{ExecutionId, ParseIdError};

/// The prefix of a schedule's key.
pub const SCHEDULE_PREFIX: &str = "schedule:";

/// The prefix of an execution id: an event's target or a state's key that starts with it
/// names an execution.
pub const EXECUTION_PREFIX: &str = "E_";

/// The prefix of the key of an event id a correlation key remembers.
pub const REMEMBERED_PREFIX: &str = "weir:seen:";

/// The prefix of a batch operation's key (under `weir:`, which a correlation key may not use).
pub const BATCH_PREFIX: &str = "weir:batch:";

/// Key prefixes Weir keeps for its own keyed state (a correlation key may not start with one).
pub const RESERVED_PREFIXES: [&str; 2] = [SCHEDULE_PREFIX, "weir:"];

/// The longest correlation key, in bytes.
pub const MAX_KEY_LEN: usize = 128;

/// A key of Weir's keyed state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StateKey {
    /// An execution: the events kept for it while it does not exist yet
    /// ([`crate::correlation::hold_early`]).
    Execution(ExecutionId),
    /// A schedule, by its name ([`crate::schedule::check_name`]).
    Schedule(String),
    /// A correlation key ([`check_correlation_key`]).
    Correlation(String),
    /// An event id the correlation key `key` forwarded and remembers
    /// ([`crate::correlation::RememberedEvent`]): `weir:seen:<key> <event id>` (a key has no
    /// spaces, so the first one ends it).
    Remembered { key: String, event_id: String },
    /// A batch operation, by its id ([`crate::batch::check_id`]).
    Batch(String),
}

/// Why a key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "correlation key `{0}` is not 1 to {MAX_KEY_LEN} bytes of printable ASCII without spaces"
    )]
    Syntax(String),
    #[error("correlation key `{0}` starts with `E_`, which marks an execution id")]
    ExecutionId(String),
    #[error("correlation key `{0}` starts with `{1}`, which Weir keeps for its own state")]
    Reserved(String, &'static str),
    #[error("`{0}` starts with `E_` but is not an execution id: {1}")]
    BadExecutionId(String, Box<ParseIdError>),
    #[error("`{0}` is not the key of a schedule: {1}")]
    Schedule(String, Box<crate::schedule::ScheduleError>),
    #[error(
        "`{0}` starts with `{SCHEDULE_PREFIX}`, which Weir keeps for its own state (a schedule's \
         key), where an execution id or a correlation key belongs"
    )]
    NotForEvents(String),
    #[error("`{0}` is not `{REMEMBERED_PREFIX}<correlation key> <event id>`")]
    Remembered(String),
    #[error("`{0}` is not the key of a batch: {1}")]
    Batch(String, String),
}

/// Checks a correlation key: 1 to [`MAX_KEY_LEN`] bytes of printable ASCII (no spaces), not
/// starting with `E_` (an event's target that does is an execution id) nor with a prefix Weir
/// keeps ([`RESERVED_PREFIXES`]), so that a key never names an execution or a schedule.
pub fn check_correlation_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(KeyError::Syntax(key.to_owned()));
    }
    if key.starts_with(EXECUTION_PREFIX) {
        return Err(KeyError::ExecutionId(key.to_owned()));
    }
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| key.starts_with(**p)) {
        return Err(KeyError::Reserved(key.to_owned(), prefix));
    }
    Ok(())
}

impl StateKey {
    /// The key of the schedule `name` (not checked: the schedule's own rules check names).
    pub fn schedule(name: &str) -> StateKey {
        StateKey::Schedule(name.to_owned())
    }

    /// Reads any key of Weir's keyed state.
    pub fn parse(key: &str) -> Result<StateKey, KeyError> {
        if let Some(rest) = key.strip_prefix(REMEMBERED_PREFIX) {
            return match rest.split_once(' ') {
                Some((k, event_id)) if check_correlation_key(k).is_ok() && !event_id.is_empty() => {
                    Ok(StateKey::Remembered {
                        key: k.to_owned(),
                        event_id: event_id.to_owned(),
                    })
                }
                _ => Err(KeyError::Remembered(key.to_owned())),
            };
        }
        if let Some(id) = key.strip_prefix(BATCH_PREFIX) {
            return crate::batch::check_id(id)
                .map(|()| StateKey::Batch(id.to_owned()))
                .map_err(|e| KeyError::Batch(key.to_owned(), e.to_string()));
        }
        if let Some(name) = key.strip_prefix(SCHEDULE_PREFIX) {
            return crate::schedule::check_name(name)
                .map(|()| StateKey::Schedule(name.to_owned()))
                .map_err(|e| KeyError::Schedule(key.to_owned(), Box::new(e)));
        }
        StateKey::for_events(key)
    }

    /// Reads an event's target, or the key of a state kept for events (a correlation key's,
    /// or an execution's early events): an execution id or a correlation key, never a
    /// schedule's key.
    pub fn for_events(key: &str) -> Result<StateKey, KeyError> {
        if key.starts_with(EXECUTION_PREFIX) {
            return key
                .parse()
                .map(StateKey::Execution)
                .map_err(|e| KeyError::BadExecutionId(key.to_owned(), Box::new(e)));
        }
        if key.starts_with(SCHEDULE_PREFIX) {
            return Err(KeyError::NotForEvents(key.to_owned()));
        }
        check_correlation_key(key).map(|()| StateKey::Correlation(key.to_owned()))
    }

    /// The execution this key names, if it names one.
    pub fn execution(&self) -> Option<&ExecutionId> {
        match self {
            StateKey::Execution(id) => Some(id),
            StateKey::Schedule(_)
            | StateKey::Correlation(_)
            | StateKey::Remembered { .. }
            | StateKey::Batch(_) => None,
        }
    }
}

impl fmt::Display for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateKey::Execution(id) => write!(f, "{id}"),
            StateKey::Schedule(name) => write!(f, "{SCHEDULE_PREFIX}{name}"),
            StateKey::Correlation(key) => f.write_str(key),
            StateKey::Remembered { key, event_id } => {
                write!(f, "{REMEMBERED_PREFIX}{key} {event_id}")
            }
            StateKey::Batch(id) => write!(f, "{BATCH_PREFIX}{id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_as_what_it_was_made_as() {
        let id: ExecutionId = "E_01JXYZ0000000000000000000A".parse().unwrap();
        for key in [
            StateKey::Execution(id),
            StateKey::schedule("nightly"),
            StateKey::Correlation("payment:order-42".to_owned()),
            StateKey::Remembered {
                key: "payment:order-42".to_owned(),
                event_id: "ev 1: with spaces".to_owned(),
            },
            StateKey::Batch("pause-all.1".to_owned()),
        ] {
            assert_eq!(StateKey::parse(&key.to_string()), Ok(key));
        }
    }

    #[test]
    fn the_three_spaces_never_overlap() {
        assert!(matches!(
            StateKey::parse("schedule:nightly"),
            Ok(StateKey::Schedule(name)) if name == "nightly"
        ));
        assert!(matches!(
            StateKey::parse("E_01JXYZ0000000000000000000A"),
            Ok(StateKey::Execution(_))
        ));
        assert!(matches!(
            StateKey::parse("order-42"),
            Ok(StateKey::Correlation(_))
        ));
        // A key that looks like one space but is not valid in it is refused, not read as a
        // correlation key.
        assert!(matches!(
            StateKey::parse("E_nope"),
            Err(KeyError::BadExecutionId(..))
        ));
        assert!(matches!(
            StateKey::parse("schedule:"),
            Err(KeyError::Schedule(..))
        ));
        assert!(matches!(
            StateKey::for_events("schedule:nightly"),
            Err(KeyError::NotForEvents(_))
        ));
        for bad in [
            "weir:seen:",
            "weir:seen:k",
            "weir:seen:k ",
            "weir:seen:E_x ev",
        ] {
            assert!(
                matches!(StateKey::parse(bad), Err(KeyError::Remembered(_))),
                "{bad}"
            );
        }
        assert!(StateKey::for_events("weir:seen:k ev").is_err());
        assert!(matches!(
            check_correlation_key("schedule:nightly"),
            Err(KeyError::Reserved(_, SCHEDULE_PREFIX))
        ));
        assert!(matches!(
            check_correlation_key("weir:x"),
            Err(KeyError::Reserved(_, "weir:"))
        ));
        assert!(matches!(
            check_correlation_key("E_01JXYZ"),
            Err(KeyError::ExecutionId(_))
        ));
        for key in ["", "a b", "caf\u{e9}"] {
            assert!(
                matches!(check_correlation_key(key), Err(KeyError::Syntax(_))),
                "{key}"
            );
        }
        assert_eq!(check_correlation_key(&"k".repeat(MAX_KEY_LEN)), Ok(()));
        assert!(matches!(
            check_correlation_key(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::Syntax(_))
        ));
    }
}
