//! Concurrency slots: at most N executions of a kind running at once, the rest started in the
//! order they asked (`docs/design/concurrency.md`). The pure rules of a slot's state; the
//! partition processor owns the states of its partitions' slots and calls these rules
//! ([`crate::processor`], `concurrency.rs`), adding nothing to them.
//!
//! Two kinds of slot, one mechanism:
//! - a **concurrency key** given at submission ([`Slot::Key`]), shared by every execution
//!   submitted with it, whatever its function, with the limit the submission gives
//!   (default 1: one at a time per key);
//! - a **function's limit** ([`Slot::Function`]), `max_running` in `components.toml`, shared by
//!   every execution of the function across every partition.
//!
//! A slot is owned like a correlation key: by the partition murmur2 gives its wire key
//! ([`Slot::wire_key`], `weir:slot:…`), on the co-partitioned topics. Its whole state
//! ([`SlotState`]: the limit, the executions holding it, those waiting, in order) is one record
//! of the compacted `weir.state`, written in the transaction of the command that changed it
//! and read back by a new owner at take-over.
//!
//! - An execution's owner sends [`SlotAction::Acquire`] (on `weir.responses`, keyed by the
//!   slot) when the execution would start; the slot's owner answers [`SlotAction::Grant`]
//!   (keyed by the execution) at once if fewer than `limit` hold it, else queues it.
//! - When the execution finishes (however: a result, a cancellation, a termination, its
//!   deadline), its owner sends [`SlotAction::Release`] in the transaction of `Finished`; the
//!   slot drops it (holding or waiting) and grants the first waiting ones while there is room.
//! - An execution with two slots (its function's and a key's) takes them one at a time, the
//!   key's first ([`claims`]), so two executions never hold one slot each while waiting for
//!   the other's (no deadlock).
//!
//! Invariants, held by [`apply`] and checked by the simulation's class `concurrency`:
//! at most `limit` executions hold a slot (a limit lowered grants nothing until below it);
//! an execution is granted once per acquisition (an `Acquire` read twice grants nothing new
//! to a waiting one, and grants a holder again, which its owner ignores); waiting executions
//! are granted in the order their `Acquire`s were read; a `Release` for an execution the slot
//! does not know changes nothing; an execution holds its slot until its `Release` (sent only
//! with its `Finished`), so none starts while the slot is full.
//!
//! Bounds: a limit is 1 to [`MAX_LIMIT`]; at most [`MAX_WAITING`] executions wait on one slot
//! (a state record stays far below a Kafka record's size); one more is refused
//! ([`SlotAction::Refuse`]) and its execution finishes with a `conflict` error saying so.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::model::{ExecutionId, Ffqn};

/// The largest limit a slot takes.
pub const MAX_LIMIT: u32 = 1_000;

/// The most executions that wait on one slot.
pub const MAX_WAITING: usize = 10_000;

/// The limit of a concurrency key when its submission gives none: one at a time.
pub const DEFAULT_KEY_LIMIT: u32 = 1;

/// The longest concurrency key, in bytes.
pub const MAX_KEY_LEN: usize = 128;

/// The prefix of a slot's wire key (on `weir.responses` and `weir.state`).
pub const SLOT_PREFIX: &str = "weir:slot:";

/// What a slot limits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// The executions submitted with this concurrency key.
    Key(String),
    /// The executions of this function.
    Function(Ffqn),
}

impl Slot {
    /// The key of its commands and its state: `weir:slot:key:<key>` or
    /// `weir:slot:function:<ffqn>`.
    pub fn wire_key(&self) -> String {
        format!("{SLOT_PREFIX}{self}")
    }

    /// Reads a slot's text (`key:<key>`, `function:<ffqn>`).
    pub fn parse(text: &str) -> Result<Slot, SlotError> {
        if let Some(key) = text.strip_prefix("key:") {
            check_key(key)?;
            return Ok(Slot::Key(key.to_owned()));
        }
        if let Some(ffqn) = text.strip_prefix("function:") {
            return ffqn
                .parse()
                .map(Slot::Function)
                .map_err(|e| SlotError::Slot(text.to_owned(), format!("{e}")));
        }
        Err(SlotError::Slot(
            text.to_owned(),
            "a slot is `key:<concurrency key>` or `function:<function>`".to_owned(),
        ))
    }

    /// Reads a slot's wire key (`weir:slot:…`).
    pub fn of_wire_key(key: &str) -> Result<Slot, SlotError> {
        let text = key.strip_prefix(SLOT_PREFIX).ok_or_else(|| {
            SlotError::Slot(
                key.to_owned(),
                format!("does not start with `{SLOT_PREFIX}`"),
            )
        })?;
        Slot::parse(text)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slot::Key(key) => write!(f, "key:{key}"),
            Slot::Function(ffqn) => write!(f, "function:{ffqn}"),
        }
    }
}

/// A slot an execution must hold to run, with the limit it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim {
    pub slot: Slot,
    pub limit: u32,
}

/// A concurrency key and its limit, as a submission gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyKey {
    pub key: String,
    /// At most this many executions with the key run at once (`None`: [`DEFAULT_KEY_LIMIT`]).
    pub limit: Option<u32>,
}

/// Why a concurrency key, a limit or a slot is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error(
        "concurrency key `{0}` is not 1 to {MAX_KEY_LEN} bytes of printable ASCII without spaces"
    )]
    Key(String),
    #[error("concurrency limit {limit}{of}: a limit is 1 to {MAX_LIMIT}")]
    Limit { limit: i64, of: String },
    #[error("`{0}` is not a slot: {1}")]
    Slot(String, String),
}

/// Checks a concurrency key: 1 to [`MAX_KEY_LEN`] bytes of printable ASCII without spaces
/// (its slot's wire key is namespaced, `weir:slot:key:<key>`, so no prefix is kept from it).
pub fn check_key(key: &str) -> Result<(), SlotError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SlotError::Key(key.to_owned()));
    }
    Ok(())
}

/// Checks a limit (`of`: what it limits, for the message).
pub fn check_limit(limit: i64, of: &str) -> Result<u32, SlotError> {
    u32::try_from(limit)
        .ok()
        .filter(|l| (1..=MAX_LIMIT).contains(l))
        .ok_or_else(|| SlotError::Limit {
            limit,
            of: if of.is_empty() {
                String::new()
            } else {
                format!(" of {of}")
            },
        })
}

/// The slots an execution of a function limited to `function_limit` (if it is), submitted
/// with `key` (if any), holds to run, in the order it takes them: the key's first, then the
/// function's (one order for every execution: no two wait for each other's slot).
pub fn claims(
    ffqn: &Ffqn,
    key: Option<&ConcurrencyKey>,
    function_limit: Option<u32>,
) -> Result<Vec<SlotClaim>, SlotError> {
    let mut claims = Vec::new();
    if let Some(key) = key {
        check_key(&key.key)?;
        let limit = match key.limit {
            Some(limit) => check_limit(i64::from(limit), &format!("key `{}`", key.key))?,
            None => DEFAULT_KEY_LIMIT,
        };
        claims.push(SlotClaim {
            slot: Slot::Key(key.key.clone()),
            limit,
        });
    }
    if let Some(limit) = function_limit {
        claims.push(SlotClaim {
            slot: Slot::Function(ffqn.clone()),
            limit: check_limit(i64::from(limit), &format!("function {ffqn}"))?,
        });
    }
    Ok(claims)
}

/// What an execution's owner and a slot's owner tell each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotAction {
    /// To the slot: the execution would start; grant it a place when there is room.
    Acquire { limit: u32 },
    /// To the slot: the execution finished; its place (held or waited for) is free.
    Release,
    /// To the execution: it holds the slot.
    Grant,
    /// To the execution: the slot refuses it (too many wait); it finishes with why.
    Refuse { reason: String },
}

/// A command about one execution's place in one slot: to the slot (`Acquire`, `Release`,
/// keyed by [`Slot::wire_key`]) or to the execution (`Grant`, `Refuse`, keyed by its id), on
/// `weir.responses` with the kind `concurrency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotCommand {
    pub slot: Slot,
    pub execution_id: ExecutionId,
    pub action: SlotAction,
    pub sent_at: DateTime<Utc>,
}

impl SlotCommand {
    /// Whether it is for the slot's owner (else for the execution's).
    pub fn for_slot(&self) -> bool {
        matches!(
            self.action,
            SlotAction::Acquire { .. } | SlotAction::Release
        )
    }

    /// The key it travels under: the slot's, or the execution's id.
    pub fn key(&self) -> String {
        if self.for_slot() {
            self.slot.wire_key()
        } else {
            self.execution_id.to_string()
        }
    }
}

/// A slot's whole state: one record of `weir.state`, keyed by [`Slot::wire_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub slot: Slot,
    /// The limit of the last `Acquire` read.
    pub limit: u32,
    /// The executions holding it, in the order they were granted.
    pub holders: Vec<ExecutionId>,
    /// The executions waiting, in the order their `Acquire`s were read.
    pub waiting: Vec<ExecutionId>,
    pub updated_at: DateTime<Utc>,
}

impl SlotState {
    fn empty(slot: Slot, limit: u32, at: DateTime<Utc>) -> SlotState {
        SlotState {
            slot,
            limit,
            holders: Vec::new(),
            waiting: Vec::new(),
            updated_at: at,
        }
    }

    /// Whether it holds nothing worth keeping (forgotten: a tombstone).
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiting.is_empty()
    }
}

/// What a command did to a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Whether the state changed (and must be written).
    pub changed: bool,
    /// The state after it (`None`: idle, forgotten).
    pub state: Option<SlotState>,
    /// What the slot tells executions: grants and refusals, in order.
    pub replies: Vec<SlotCommand>,
}

/// Applies `command` (an `Acquire` or a `Release`, read at `now`) to the slot's state; see
/// the module docs. A `Grant` or a `Refuse` is not for a slot: nothing changes.
pub fn apply(state: Option<&SlotState>, command: &SlotCommand, now: DateTime<Utc>) -> Applied {
    let unchanged = |state: Option<&SlotState>| Applied {
        changed: false,
        state: state.cloned(),
        replies: Vec::new(),
    };
    let reply = |id: &ExecutionId, action: SlotAction| SlotCommand {
        slot: command.slot.clone(),
        execution_id: id.clone(),
        action,
        sent_at: now,
    };
    let id = &command.execution_id;
    let mut next = match (state, &command.action) {
        (_, SlotAction::Grant | SlotAction::Refuse { .. }) => return unchanged(state),
        (None, SlotAction::Release) => return unchanged(state),
        (Some(s), SlotAction::Release) => {
            if !s.holders.contains(id) && !s.waiting.contains(id) {
                return unchanged(state);
            }
            let mut s = s.clone();
            s.holders.retain(|h| h != id);
            s.waiting.retain(|w| w != id);
            s
        }
        (state, SlotAction::Acquire { limit }) => {
            if let Some(s) = state
                && s.holders.contains(id)
            {
                // Read again (or sent again by a new owner): it holds it; the grant again
                // is ignored by its owner, which knows it holds it.
                return Applied {
                    replies: vec![reply(id, SlotAction::Grant)],
                    ..unchanged(state)
                };
            }
            if state.is_some_and(|s| s.waiting.contains(id)) {
                return unchanged(state);
            }
            let mut s = state
                .cloned()
                .unwrap_or_else(|| SlotState::empty(command.slot.clone(), *limit, now));
            s.limit = *limit;
            if s.holders.len() >= s.limit as usize && s.waiting.len() >= MAX_WAITING {
                let reason = format!(
                    "{} executions wait on concurrency slot {} already (the most one slot \
                     queues); submit it again later",
                    s.waiting.len(),
                    command.slot
                );
                return Applied {
                    replies: vec![reply(id, SlotAction::Refuse { reason })],
                    ..unchanged(state)
                };
            }
            s.waiting.push(id.clone());
            s
        }
    };
    let mut replies = Vec::new();
    while next.holders.len() < next.limit as usize && !next.waiting.is_empty() {
        let granted = next.waiting.remove(0);
        replies.push(reply(&granted, SlotAction::Grant));
        next.holders.push(granted);
    }
    next.updated_at = now;
    Applied {
        changed: true,
        state: (!next.is_idle()).then_some(next),
        replies,
    }
}

#[cfg(test)]
mod tests;
