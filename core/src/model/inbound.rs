//! Events sent into running executions from outside (`weir.events`): the rules for their
//! names and ids, and how a wait for one ends. The routing and buffering rules are the
//! processor's and the projection's; this is only the vocabulary.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest event name.
pub const MAX_EVENT_NAME_LEN: usize = 64;

/// The longest event id (the sender's idempotency key).
pub const MAX_EVENT_ID_LEN: usize = 128;

/// Why an event name or id is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventNameError {
    #[error(
        "event name `{0}` is not 1 to {MAX_EVENT_NAME_LEN} characters of ASCII letters, \
         digits, `_`, `.` and `-`"
    )]
    InvalidName(String),
    #[error("event id `{0}` is not 1 to {MAX_EVENT_ID_LEN} bytes of printable ASCII")]
    InvalidId(String),
}

/// Whether `name` is 1 to `max_len` of `[A-Za-z0-9_.-]`: the rule of the names Weir takes
/// from outside (event names, schedule names).
pub fn is_plain_name(name: &str, max_len: usize) -> bool {
    !name.is_empty()
        && name.len() <= max_len
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Checks an event name: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn check_event_name(name: &str) -> Result<(), EventNameError> {
    if is_plain_name(name, MAX_EVENT_NAME_LEN) {
        Ok(())
    } else {
        Err(EventNameError::InvalidName(name.to_string()))
    }
}

/// Checks an event id: 1 to 128 bytes of printable ASCII (no spaces or control characters:
/// it is shown in messages and used as a key).
pub fn check_event_id(id: &str) -> Result<(), EventNameError> {
    let ok =
        !id.is_empty() && id.len() <= MAX_EVENT_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(EventNameError::InvalidId(id.to_string()))
    }
}

/// How a wait for an event ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventOutcome {
    /// The event `event_id` arrived with `payload` (JSON).
    Received { event_id: String, payload: Value },
    /// The wait was cancelled before an event came (its join set was closed).
    Cancelled,
}

impl fmt::Display for EventOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventOutcome::Received { event_id, payload } => {
                write!(f, "received {event_id} {payload}")
            }
            EventOutcome::Cancelled => f.write_str("cancelled"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids() {
        for ok in ["approved", "payment.received", "a-b_c.9", &"x".repeat(64)] {
            assert_eq!(check_event_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "with space", "ünï", "a/b", &"x".repeat(65)] {
            assert!(check_event_name(bad).is_err(), "{bad}");
        }
        for ok in ["1", "order-42:payment#1", &"y".repeat(128)] {
            assert_eq!(check_event_id(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a b", "tab\there", &"y".repeat(129)] {
            assert!(check_event_id(bad).is_err(), "{bad}");
        }
    }
}
