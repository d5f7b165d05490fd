//! Correlation keys: how an event sent to a key (`payment:order-42`) reaches the execution
//! that registered the key, and the pure rules of a key's state. The partition processor
//! owns the states of its partitions' keys and calls these rules; it adds nothing to them.
//!
//! A key is owned like an execution: by the partition murmur2 gives it, on the co-partitioned
//! topics. Its whole state ([`CorrelationState`]) is one record of the compacted topic
//! `weir.state` under the key, written in the transaction of the input that changed it and
//! read back by a new owner at take-over (as a schedule's is).
//!
//! - A workflow's `correlate(key)` (journalled as `Correlate`) sends the key's owner a
//!   [`CorrelationCommand`] `Register` (on `weir.responses`, keyed by the key); when the
//!   execution finishes, its owner sends `Unregister`.
//! - A key is held by one execution at a time: the first registered, then the next in the
//!   order they registered (a second execution registering a held key waits its turn; no
//!   event ever reaches two executions, no registration is lost).
//! - An event sent to the key (`weir.events`, keyed by the key) is forwarded to the holder
//!   (an `InboundEvent` keyed by the holder's id, in the same transaction as the input's
//!   offset); with no holder it waits in the key's buffer ([`MAX_BUFFERED_EVENTS`],
//!   [`MAX_BUFFERED_EVENT_BYTES`]: the same bounds as an execution's), and the buffer goes to
//!   the next holder when one registers.
//! - Once: the key remembers the ids it forwarded for [`DEDUP_WINDOW`] (at most
//!   [`MAX_REMEMBERED`], [`Remembered`]) and the ids in its buffer; the same id sent again is
//!   dropped, whichever execution holds the key by then (and the holder deduplicates as well).
//!   Each remembered id is a record of its own on `weir.state` ([`RememberedEvent`], keyed
//!   [`crate::state_key::StateKey::Remembered`] on the key's partition), written when the id
//!   is forwarded and tombstoned when it is forgotten: a forward writes one small record, not
//!   the key's whole memory (issue 33 F10; the key's own record holds its holders, buffer and
//!   kept cancellation).
//! - A forwarded event that finds its holder finished (the race with `Unregister`) comes back
//!   to the key ([`KeyedEvent::returned_by`]): the key drops that holder (it takes nothing
//!   more) and forwards the event to the next one, or buffers it.
//! - A key with no holders, no buffer and no kept cancellation is forgotten (a tombstone; its
//!   remembered ids live on, records of their own, until they expire:
//!   [`Remembered::expire`], called by the processor each turn).
//!
//! **Early events.** An event for an execution that does not exist yet (its submission is on
//! another topic and may come later) is kept the same way, in a state whose key is the
//! execution's id (the id's partition is the execution's): [`hold_early`] buffers it until
//! [`CorrelationState::waits_until`]; the submission that creates the execution takes the
//! buffer ([`take_early`]) in its own transaction. If none comes in time, [`expire`] sends
//! the events back to `weir.events` marked as having waited ([`InboundEvent::waited_until`]),
//! and the execution's owner dead-letters them there if it still does not exist.

use std::collections::{HashSet, VecDeque};

use chrono::{DateTime, Duration, Utc};

use crate::model::ExecutionId;
use crate::records::{CancelRequest, InboundEvent, ReceivedEvent};

/// How long an event for an execution that does not exist waits for its submission by
/// default (`ProcessorConfig::early_event_wait`): long enough for a submission sent before
/// the event, or at the same time, to be read however far behind the submissions topic is.
pub const EARLY_EVENT_WAIT: Duration = Duration::minutes(10);

/// How long a cancellation of an execution that does not exist waits for its submission: as
/// long as `weir.submissions` keeps its records by default (`topology/topics.toml`). Unlike an
/// event, which the execution can still take late, a cancellation read after its submission
/// comes too late if the execution has run meanwhile; so it waits as long as a submission
/// could still be read, however far behind the owner is. It is small: one per execution.
pub const EARLY_CANCEL_WAIT: Duration = Duration::days(7);

/// The longest reason of a kept cancellation, in bytes; a longer one is cut (the state,
/// with the most events the other bounds allow, must still fit one record).
pub const MAX_KEPT_CANCEL_REASON: usize = 1024;

/// At most this many events wait in one buffer: a key's, or an execution's (events no wait
/// has taken yet, [`crate::processor`]).
pub const MAX_BUFFERED_EVENTS: usize = 1_000;

/// At most this many bytes of JSON payloads wait in one buffer (a key's, an execution's).
/// A key's state is one `weir.state` record, so this bound, with the most events, holders and
/// remembered ids the other bounds allow (about 350 kB of ids, names and framing), must fit
/// the producer's 1 000 000-byte limit (issue 33 F2: at 1 MiB the fullest state was 1 399 208
/// bytes, its batch aborted and the partition retried it forever; the worker's encoder test
/// `the_fullest_correlation_state_fits_one_record` holds the two together).
pub const MAX_BUFFERED_EVENT_BYTES: usize = 512 * 1024;

/// At most this many executions hold or wait for one key.
pub const MAX_HOLDERS: usize = 100;

/// An event sent to a correlation key. Topic `weir.events`, key: the correlation key; the
/// same Avro record as an event for an execution (`InboundEvent`, whose `target` is the key).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedEvent {
    pub event: ReceivedEvent,
    pub key: String,
    pub sent_at: DateTime<Utc>,
    /// Set when the key forwarded the event to this execution, which had finished and sent
    /// it back.
    pub returned_by: Option<ExecutionId>,
}

/// What a [`CorrelationCommand`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorrelationAction {
    /// The execution wants the key's events (its `correlate(key)`).
    Register,
    /// The execution finished: it takes no more events.
    Unregister,
}

impl CorrelationAction {
    pub fn as_str(self) -> &'static str {
        match self {
            CorrelationAction::Register => "register",
            CorrelationAction::Unregister => "unregister",
        }
    }
}

/// A command for a key's owner. Topic `weir.responses`, key: the correlation key, Kafka
/// header `weir.kind = correlation`.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelationCommand {
    pub key: String,
    pub execution_id: ExecutionId,
    pub action: CorrelationAction,
    pub sent_at: DateTime<Utc>,
}

/// An event waiting in a key's buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferedEvent {
    pub event: ReceivedEvent,
    pub sent_at: DateTime<Utc>,
}

/// An event id the key forwarded to a holder, and when: the same id sent to the key again
/// within [`DEDUP_WINDOW`] is a duplicate, whoever holds the key by then.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    pub event_id: String,
    pub at: DateTime<Utc>,
}

/// A remembered id as `weir.state` has it: a record of its own, keyed
/// [`crate::state_key::StateKey::Remembered`] (`weir:seen:<key> <event id>`, header
/// `weir.kind = remembered`), on the partition of its key; a tombstone forgets it.
#[derive(Debug, Clone, PartialEq)]
pub struct RememberedEvent {
    pub key: String,
    pub forwarded: Forwarded,
}

/// The ids a key forwarded within [`DEDUP_WINDOW`], oldest first, each once; at most
/// [`MAX_REMEMBERED`] (the oldest are forgotten first). Kept apart from the key's state, so
/// that a rule clones and writes only the state, and a forward costs one id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Remembered {
    order: VecDeque<Forwarded>,
    ids: HashSet<String>,
}

impl Remembered {
    pub fn contains(&self, event_id: &str) -> bool {
        self.ids.contains(event_id)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Forwarded> {
        self.order.iter()
    }

    /// Remembers `forwarded` (an id remembered already keeps its first time: `false`, nothing
    /// to write); returns whether it is new, and the oldest ids forgotten for it beyond
    /// [`MAX_REMEMBERED`].
    pub fn remember(&mut self, forwarded: Forwarded) -> (bool, Vec<Forwarded>) {
        if !self.ids.insert(forwarded.event_id.clone()) {
            return (false, Vec::new());
        }
        // Restored ids come in any order; forwards come in time order.
        let at = self
            .order
            .iter()
            .rposition(|f| f.at <= forwarded.at)
            .map_or(0, |i| i + 1);
        self.order.insert(at, forwarded);
        let mut forgotten = Vec::new();
        while self.order.len() > MAX_REMEMBERED {
            forgotten.extend(self.pop());
        }
        (true, forgotten)
    }

    /// When the oldest id is forgotten.
    pub fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.order.front().map(|f| f.at + DEDUP_WINDOW)
    }

    /// Forgets the ids forwarded [`DEDUP_WINDOW`] or longer before `now`; returns them.
    pub fn expire(&mut self, now: DateTime<Utc>) -> Vec<Forwarded> {
        let mut forgotten = Vec::new();
        while self
            .order
            .front()
            .is_some_and(|f| f.at + DEDUP_WINDOW <= now)
        {
            forgotten.extend(self.pop());
        }
        forgotten
    }

    fn pop(&mut self) -> Option<Forwarded> {
        let oldest = self.order.pop_front()?;
        self.ids.remove(&oldest.event_id);
        Some(oldest)
    }
}

/// How long a key remembers the ids it forwarded: as long as `weir.events` keeps its records
/// by default (`topology/topics.toml`), so a record read again or resent within its
/// retention is a duplicate.
pub const DEDUP_WINDOW: Duration = Duration::days(7);

/// At most this many forwarded ids are remembered per key (the oldest are forgotten first,
/// counted in `ProcessorStats::remembered_cut`): a bound on an owner's memory for a key that
/// takes more than 14 events a minute for a week. Each id is a record of its own, so the
/// bound is memory's, not a record's (it was 1,000 while the ids were part of the key's
/// record: issue 33 F10).
pub const MAX_REMEMBERED: usize = 100_000;

/// The state of one key (`weir.state`, keyed by the key).
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelationState {
    pub key: String,
    /// The execution the key's events go to (the first), then those waiting for it, in the
    /// order they registered.
    pub holders: Vec<ExecutionId>,
    /// Events sent while no execution held the key, oldest first (empty while one does).
    pub buffered: Vec<BufferedEvent>,
    /// Set on the buffer of an execution that does not exist yet (the key is its id): when
    /// its events stop waiting for the submission ([`hold_early`], [`expire`]).
    pub waits_until: Option<DateTime<Utc>>,
    /// A cancellation of an execution that does not exist yet (the key is its id), kept for
    /// its submission like its events ([`hold_cancel`]).
    pub cancel: Option<Box<CancelRequest>>,
}

impl CorrelationState {
    /// The state of a key that holds nothing.
    pub fn new(key: &str) -> Self {
        CorrelationState {
            key: key.to_owned(),
            holders: Vec::new(),
            buffered: Vec::new(),
            waits_until: None,
            cancel: None,
        }
    }

    /// The execution the key's events go to now.
    pub fn holder(&self) -> Option<&ExecutionId> {
        self.holders.first()
    }

    /// Bytes of JSON payloads in the buffer.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.iter().map(|b| payload_size(&b.event)).sum()
    }

    /// When [`expire`] has something to do: the events of an execution that does not exist
    /// stop waiting for it (a remembered id's expiry is [`Remembered::expires_at`]).
    pub fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.waits_until
    }

    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.buffered.is_empty() && self.cancel.is_none()
    }

    fn buffers(&self, event_id: &str) -> bool {
        self.buffered.iter().any(|b| b.event.event_id == event_id)
    }
}

/// The event as forwarded by the key `key` to `holder` (keyed by the holder on
/// `weir.events`).
fn forward(
    key: &str,
    holder: &ExecutionId,
    event: ReceivedEvent,
    sent_at: DateTime<Utc>,
) -> InboundEvent {
    InboundEvent {
        event,
        target: holder.clone(),
        sent_at,
        correlation_key: Some(key.to_owned()),
        waited_until: None,
    }
}

fn payload_size(event: &ReceivedEvent) -> usize {
    event.payload.to_string().len()
}

/// A key's state after a rule, and the events to forward in the same transaction (each
/// forward's id is the key's to remember: the events of a correlation key, `correlation_key`
/// set, not an early buffer's sent back to its execution).
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    /// The new state (`None`: forgotten, a tombstone).
    pub state: Option<CorrelationState>,
    pub forwards: Vec<InboundEvent>,
    /// A kept cancellation whose wait ran out, sent back marked
    /// [`CancelRequest::waited_until`] ([`expire`]).
    pub cancel_back: Option<Box<CancelRequest>>,
}

impl Changed {
    fn of(state: CorrelationState, forwards: Vec<InboundEvent>) -> Self {
        Changed {
            state: (!state.is_empty()).then_some(state),
            forwards,
            cancel_back: None,
        }
    }
}

/// What a command does to a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    Changed(Changed),
    /// Nothing changes (a registration the key has, an unregistration it does not).
    Unchanged,
    /// Refused: why (the command goes to the DLQ), and the event that tells the registering
    /// execution ([`refusal`]), sent in the same transaction.
    Refused {
        error: String,
        tell: InboundEvent,
    },
}

/// The name of the event by which a key's owner tells an execution that its `correlate(key)`
/// was refused. Its payload is `{"key": …, "reason": …}`; the workflow awaits it like any
/// event (`await-event`, or a join set beside the events it expects from the key). Event
/// names starting with `weir.` are Weir's own.
pub const REFUSED_EVENT: &str = "weir.correlation-refused";

/// The event telling `command`'s execution that its registration was refused for `reason`.
/// Its id is the same however often the command is processed (a batch retried after an
/// abort), and differs for another key or another registration of the key.
pub fn refusal(command: &CorrelationCommand, reason: &str) -> InboundEvent {
    let key_hash = crate::partitioner::murmur2(command.key.as_bytes()) as u32;
    InboundEvent {
        event: ReceivedEvent {
            event_id: format!(
                "{REFUSED_EVENT}.{key_hash:08x}.{}",
                command.sent_at.timestamp_micros()
            ),
            name: REFUSED_EVENT.to_owned(),
            payload: serde_json::json!({"key": command.key, "reason": reason}),
        },
        target: command.execution_id.clone(),
        sent_at: command.sent_at,
        correlation_key: None,
        waited_until: None,
    }
}

/// Folds `command` into the key's state (`None`: the key holds nothing).
pub fn apply(current: Option<&CorrelationState>, command: &CorrelationCommand) -> Applied {
    let key = &command.key;
    let id = &command.execution_id;
    let mut state = current
        .cloned()
        .unwrap_or_else(|| CorrelationState::new(key));
    match command.action {
        CorrelationAction::Register => {
            if state.holders.contains(id) {
                return Applied::Unchanged;
            }
            if state.holders.len() >= MAX_HOLDERS {
                let error = format!(
                    "registration of {id} for correlation key `{key}`: {MAX_HOLDERS} executions \
                     hold or wait for it already"
                );
                let tell = refusal(
                    command,
                    &format!("{MAX_HOLDERS} executions hold or wait for the key already"),
                );
                return Applied::Refused { error, tell };
            }
            state.holders.push(id.clone());
            let forwards = if state.holders.len() == 1 {
                drain(&mut state)
            } else {
                Vec::new()
            };
            Applied::Changed(Changed::of(state, forwards))
        }
        CorrelationAction::Unregister => {
            if !state.holders.contains(id) {
                return Applied::Unchanged;
            }
            Applied::Changed(drop_holder(state, id))
        }
    }
}

/// `id` takes no more events: removed from the holders; if it held the key, the buffer goes
/// to the next holder (it is empty while a holder exists; kept for a state restored as is).
fn drop_holder(mut state: CorrelationState, id: &ExecutionId) -> Changed {
    state.holders.retain(|h| h != id);
    let forwards = drain(&mut state);
    Changed::of(state, forwards)
}

/// The buffer, forwarded to the holder (nothing without one).
fn drain(state: &mut CorrelationState) -> Vec<InboundEvent> {
    let Some(holder) = state.holder().cloned() else {
        return Vec::new();
    };
    std::mem::take(&mut state.buffered)
        .into_iter()
        .map(|b| forward(&state.key, &holder, b.event, b.sent_at))
        .collect()
}

/// The buffer of an execution
/// that did not come by [`CorrelationState::waits_until`] goes back to `weir.events`, each
/// event marked as having waited ([`InboundEvent::waited_until`]), and its kept cancellation
/// to `weir.submissions` marked the same way ([`CancelRequest::waited_until`]), for its owner
/// to dead-letter unless the execution exists by the time it reads them. `None`: nothing to
/// do; a key left with nothing is a tombstone.
pub fn expire(state: &CorrelationState, now: DateTime<Utc>) -> Option<Changed> {
    if state.expires_at().is_none_or(|at| at > now) {
        return None;
    }
    let mut state = state.clone();
    let mut forwards = Vec::new();
    if let Some(waited_until) = state.waits_until.filter(|at| *at <= now) {
        state.waits_until = None;
        let buffered = std::mem::take(&mut state.buffered);
        match state.key.parse::<ExecutionId>() {
            Ok(target) => forwards.extend(buffered.into_iter().map(|b| InboundEvent {
                event: b.event,
                target: target.clone(),
                sent_at: b.sent_at,
                correlation_key: None,
                waited_until: Some(waited_until),
            })),
            // Only an execution's id gets a wait (`hold_early`); a state read back with
            // another key and a wait keeps its buffer, as any key's.
            Err(_) => state.buffered = buffered,
        }
        let cancel_back = state.cancel.take().map(|cancel| {
            Box::new(CancelRequest {
                waited_until: Some(waited_until),
                ..*cancel
            })
        });
        return Some(Changed {
            cancel_back,
            ..Changed::of(state, forwards)
        });
    }
    Some(Changed::of(state, forwards))
}

/// A cancellation of `request.execution_id`, an execution that does not exist (yet), at
/// `now`: kept in the state under the execution's id (`current`) beside its early events,
/// waiting for the submission at least `wait` from now ([`EARLY_CANCEL_WAIT`]). One kept
/// already stays, unless this one terminates and it did not (a terminate is never lost to a
/// cancel).
pub fn hold_cancel(
    current: Option<&CorrelationState>,
    request: CancelRequest,
    now: DateTime<Utc>,
    wait: Duration,
) -> Changed {
    let key = request.execution_id.to_string();
    let mut state = current
        .cloned()
        .unwrap_or_else(|| CorrelationState::new(&key));
    let mut request = CancelRequest {
        waited_until: None,
        ..request
    };
    if request.reason.len() > MAX_KEPT_CANCEL_REASON {
        let mut cut = MAX_KEPT_CANCEL_REASON - '…'.len_utf8();
        while !request.reason.is_char_boundary(cut) {
            cut -= 1;
        }
        request.reason.truncate(cut);
        request.reason.push('…');
    }
    match &state.cancel {
        Some(held) if held.terminate || !request.terminate => {}
        _ => state.cancel = Some(Box::new(request)),
    }
    state.waits_until = Some(state.waits_until.map_or(now + wait, |w| w.max(now + wait)));
    Changed::of(state, Vec::new())
}

/// An event for `target`, an execution that does not exist (yet), arriving at `now`: kept in
/// the state under the execution's id (`current`), waiting for the submission until `wait`
/// after the first such event came. The same id twice is kept once; the bounds are a key's.
pub fn hold_early(
    current: Option<&CorrelationState>,
    target: &ExecutionId,
    event: ReceivedEvent,
    sent_at: DateTime<Utc>,
    now: DateTime<Utc>,
    wait: Duration,
) -> Received {
    let keyed = KeyedEvent {
        event,
        key: target.to_string(),
        sent_at,
        returned_by: None,
    };
    match receive(current, None, keyed) {
        Received::Changed(mut changed) => {
            if let Some(state) = &mut changed.state {
                state.waits_until.get_or_insert(now + wait);
            }
            Received::Changed(changed)
        }
        other => other,
    }
}

/// What was kept for an execution that did not exist, taken by the submission that creates
/// it: the events, oldest first, and the cancellation if one came.
#[derive(Debug, Clone, PartialEq)]
pub struct Early {
    pub events: Vec<BufferedEvent>,
    pub cancel: Option<CancelRequest>,
}

/// Takes what was kept for an execution that did not exist; its state is forgotten (a
/// tombstone).
pub fn take_early(state: &CorrelationState) -> (Early, Changed) {
    (
        Early {
            events: state.buffered.clone(),
            cancel: state.cancel.as_deref().cloned(),
        },
        Changed {
            state: None,
            forwards: Vec::new(),
            cancel_back: None,
        },
    )
}

/// What an event sent to a key does.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// The key changed: the event forwarded to the holder (its id remembered), or buffered;
    /// a returning holder dropped.
    Changed(Changed),
    /// The key forwarded this event id within [`DEDUP_WINDOW`], or holds it in its buffer.
    Duplicate,
    /// The buffer is full: why (the event goes to the DLQ).
    Full(String),
}

/// An event sent to the key (`current`: its state, `None` if it holds nothing; `remembered`:
/// the ids it forwarded).
pub fn receive(
    current: Option<&CorrelationState>,
    remembered: Option<&Remembered>,
    keyed: KeyedEvent,
) -> Received {
    let KeyedEvent {
        event,
        key,
        sent_at,
        returned_by,
    } = keyed;
    let mut state = current
        .cloned()
        .unwrap_or_else(|| CorrelationState::new(&key));
    match &returned_by {
        // A copy its holder could not take: forwarded again (to the next holder), or kept,
        // unless the buffer has the id already.
        Some(returned_by) => {
            if state.holders.contains(returned_by) {
                let Changed {
                    state: after,
                    forwards,
                    ..
                } = drop_holder(state, returned_by);
                debug_assert!(
                    forwards.is_empty(),
                    "the buffer is empty while a key has a holder"
                );
                state = after.unwrap_or_else(|| CorrelationState::new(&key));
            }
            if state.buffers(&event.event_id) {
                return Received::Duplicate;
            }
        }
        None if state.buffers(&event.event_id)
            || remembered.is_some_and(|r| r.contains(&event.event_id)) =>
        {
            return Received::Duplicate;
        }
        None => {}
    }
    if let Some(holder) = state.holder().cloned() {
        let forwarded = forward(&key, &holder, event, sent_at);
        return Received::Changed(Changed::of(state, vec![forwarded]));
    }
    let bytes = state.buffered_bytes();
    if state.buffered.len() >= MAX_BUFFERED_EVENTS
        || bytes + payload_size(&event) > MAX_BUFFERED_EVENT_BYTES
    {
        return Received::Full(format!(
            "event {} `{}` for correlation key `{key}`: no execution holds the key and its \
             buffer holds {} events ({bytes} bytes); at most {MAX_BUFFERED_EVENTS} events and \
             {MAX_BUFFERED_EVENT_BYTES} bytes wait",
            event.event_id,
            event.name,
            state.buffered.len()
        ));
    }
    state.buffered.push(BufferedEvent { event, sent_at });
    Received::Changed(Changed::of(state, Vec::new()))
}

#[cfg(test)]
mod tests;
