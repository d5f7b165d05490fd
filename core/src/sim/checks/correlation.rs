//! Correlation keys (`Faults::correlation`), from the committed records: `correlation-once`,
//! `correlation-delivery`, `correlation-lost`, `correlation-state`, `correlation-liveness`
//! (see [`check_correlation`]); and the checks of the moment a run first settled
//! ([`correlation_at_settle`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionId, HistoryEvent, Response};
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::KeyedSend;
use crate::sim::workflows::ORDER_EVENT;
use crate::sim::world::World;

use super::{Logged, Violation, committed_histories, list};

/// What one execution's committed history (the first record of each seq) says about
/// correlation keys and events.
#[derive(Default)]
struct KeyHistory<'a> {
    /// Its `Correlate` events: (seq, key).
    correlates: Vec<(u64, &'a str)>,
    /// Events kept (`EventReceived`): event id → (seq, name, payload).
    kept: BTreeMap<&'a str, (u64, &'a str, &'a serde_json::Value)>,
    /// Events taken by a wait (`EventDelivered` received): event id → (seq, payload).
    taken: BTreeMap<&'a str, (u64, &'a serde_json::Value)>,
    finished: bool,
}

impl KeyHistory<'_> {
    /// The seq of its `Correlate` of `key`.
    fn registered(&self, key: &str) -> Option<u64> {
        self.correlates
            .iter()
            .find(|(_, k)| *k == key)
            .map(|(s, _)| *s)
    }

    /// Events it keeps that no wait took.
    fn untaken(&self) -> impl Iterator<Item = (&str, &str)> {
        self.kept
            .iter()
            .filter(|(id, _)| !self.taken.contains_key(**id))
            .map(|(id, (_, name, _))| (*id, *name))
    }
}

fn key_histories<'a>(
    logs: &'a BTreeMap<ExecutionId, Vec<Logged<'a>>>,
) -> BTreeMap<&'a ExecutionId, KeyHistory<'a>> {
    use crate::model::EventOutcome;
    let mut out = BTreeMap::new();
    for (id, entries) in logs {
        let mut first: BTreeMap<u64, &HistoryEntry> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(&e.record.entry);
        }
        let mut h = KeyHistory::default();
        for (&seq, entry) in &first {
            match entry {
                HistoryEntry::Event {
                    event: HistoryEvent::Correlate { key },
                    ..
                } => h.correlates.push((seq, key.as_str())),
                HistoryEntry::EventReceived(e) => {
                    h.kept
                        .entry(e.event_id.as_str())
                        .or_insert((seq, e.name.as_str(), &e.payload));
                }
                HistoryEntry::ResponseAppended(Response::EventDelivered {
                    outcome: EventOutcome::Received { event_id, payload },
                    ..
                }) => {
                    h.taken.entry(event_id.as_str()).or_insert((seq, payload));
                }
                HistoryEntry::Finished { .. } => h.finished = true,
                _ => {}
            }
        }
        out.insert(id, h);
    }
    out
}

/// What the log says about the correlation keys, outside the histories.
struct KeyLog<'a> {
    /// The distinct events clients sent to each key, in the order first sent: (id, payload).
    sent: BTreeMap<&'a str, Vec<(&'a str, i64)>>,
    /// The key each event id was sent to.
    event_key: BTreeMap<&'a str, &'a str>,
    /// The committed `Register` commands of each key, in log order (a key's commands are all
    /// on its partition of `weir.responses`).
    registers: BTreeMap<&'a str, Vec<&'a ExecutionId>>,
    /// How many `Unregister` commands of (key, execution) are committed.
    unregisters: BTreeMap<(&'a str, &'a ExecutionId), usize>,
    /// The last committed record of each key on `weir.state` (`None`: a tombstone).
    states: BTreeMap<&'a str, Option<&'a crate::correlation::CorrelationState>>,
    /// Events of keys dead-lettered: (key, event id) → the reasons; and where the
    /// dead-lettered records were (weir.events partition, offset).
    dead: BTreeMap<(&'a str, &'a str), Vec<String>>,
    dead_at: BTreeSet<(i32, i64)>,
    /// Forwarded events that came back: (key, event id, the execution that sent it back).
    returned: BTreeSet<(&'a str, &'a str, &'a ExecutionId)>,
    /// What does not fit the rules of the log itself (checked at the end).
    problems: Vec<(Invariant, String)>,
}

fn key_log<'a>(w: &'a World, keyed: &'a [KeyedSend]) -> KeyLog<'a> {
    use crate::correlation::CorrelationAction;
    let mut log = KeyLog {
        sent: BTreeMap::new(),
        event_key: BTreeMap::new(),
        registers: BTreeMap::new(),
        unregisters: BTreeMap::new(),
        states: BTreeMap::new(),
        dead: BTreeMap::new(),
        dead_at: BTreeSet::new(),
        returned: BTreeSet::new(),
        problems: Vec::new(),
    };
    for k in keyed {
        match log.event_key.insert(&k.event_id, &k.key) {
            Some(other) if other != k.key => log.problems.push((
                Invariant::CorrelationState,
                format!(
                    "the sim sent event {} to keys `{other}` and `{}`",
                    k.event_id, k.key
                ),
            )),
            Some(_) => {}
            None => log
                .sent
                .entry(&k.key)
                .or_default()
                .push((&k.event_id, k.payload)),
        }
    }
    for (partition, r) in w.cluster.committed_records(Topic::Events) {
        if let Some(Payload::KeyedEvent(e)) = &r.payload {
            let home = w.cluster.partition_for(Topic::Events, &e.key);
            if r.key.as_deref() != Some(e.key.as_str()) || home != partition {
                log.problems.push((
                    Invariant::CorrelationState,
                    format!(
                        "event {} of key `{}` at events/{partition}@{} keyed {:?} (murmur2 says partition {home})",
                        e.event.event_id, e.key, r.offset, r.key
                    ),
                ));
            }
            if let Some(by) = &e.returned_by {
                log.returned
                    .insert((e.key.as_str(), e.event.event_id.as_str(), by));
            }
        }
    }
    for (partition, r) in w.cluster.committed_records(Topic::Responses) {
        let Some(Payload::CorrelationCommand(c)) = &r.payload else {
            continue;
        };
        let home = w.cluster.partition_for(Topic::Responses, &c.key);
        if r.key.as_deref() != Some(c.key.as_str()) || home != partition {
            log.problems.push((
                Invariant::CorrelationState,
                format!(
                    "a {} of {} for `{}` at responses/{partition}@{} keyed {:?} (murmur2 says partition {home})",
                    c.action.as_str(),
                    c.execution_id,
                    c.key,
                    r.offset,
                    r.key
                ),
            ));
        }
        match c.action {
            CorrelationAction::Register => log
                .registers
                .entry(&c.key)
                .or_default()
                .push(&c.execution_id),
            CorrelationAction::Unregister => {
                *log.unregisters
                    .entry((&c.key, &c.execution_id))
                    .or_default() += 1;
            }
        }
    }
    for (partition, r) in w.cluster.committed_records(Topic::State) {
        let (Some(key), Some(Payload::Correlation(state))) = (&r.key, &r.payload) else {
            continue;
        };
        let home = w.cluster.partition_for(Topic::State, key);
        if home != partition || state.as_ref().is_some_and(|s| s.key != *key) {
            log.problems.push((
                Invariant::CorrelationState,
                format!(
                    "the state of `{key}` at weir.state/{partition}@{} (murmur2 says {home}): {state:?}",
                    r.offset
                ),
            ));
        }
        log.states.insert(key, state.as_ref());
    }
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        let Some(Payload::Dlq(e)) = &r.payload else {
            continue;
        };
        let topic = if e.original_topic == Topic::Events.name() {
            Topic::Events
        } else if e.original_topic == Topic::Responses.name() {
            Topic::Responses
        } else {
            continue;
        };
        let original = w
            .cluster
            .log(topic, e.original_partition)
            .get(e.original_offset as usize)
            .and_then(|r| r.payload.as_ref());
        let why = format!("{:?}: {}", e.reason, e.error);
        let (key, event_id) = match original {
            Some(Payload::KeyedEvent(k)) => (k.key.as_str(), k.event.event_id.as_str()),
            Some(Payload::Event(ev)) if ev.correlation_key.is_some() => (
                ev.correlation_key.as_deref().unwrap_or_default(),
                ev.event.event_id.as_str(),
            ),
            Some(Payload::CorrelationCommand(c)) => {
                log.problems.push((
                    Invariant::CorrelationState,
                    format!(
                        "the {} of {} for `{}` at responses/{}@{} was dead-lettered ({why})",
                        c.action.as_str(),
                        c.execution_id,
                        c.key,
                        e.original_partition,
                        e.original_offset
                    ),
                ));
                continue;
            }
            _ => continue,
        };
        log.dead.entry((key, event_id)).or_default().push(why);
        log.dead_at
            .insert((e.original_partition, e.original_offset));
    }
    log
}

/// A key's committed state, for a message.
fn show_state(state: Option<&crate::correlation::CorrelationState>) -> String {
    match state {
        None => "none".to_owned(),
        Some(s) => format!(
            "holders {}, buffered {}",
            list(&s.holders),
            list(s.buffered.iter().map(|b| &b.event.event_id))
        ),
    }
}

/// The holders of each key's last committed state, once everything is consumed: exactly the
/// executions that registered it and have not finished, in the order they registered (none
/// lost, none finished — its `Unregister` reached the key —, FIFO); its buffer empty while
/// it has one; each registration and each unregistration committed once.
fn check_holders(
    add: &mut impl FnMut(Invariant, String),
    log: &KeyLog<'_>,
    histories: &BTreeMap<&ExecutionId, KeyHistory<'_>>,
    when: &str,
) {
    let keys: BTreeSet<&str> = log
        .registers
        .keys()
        .chain(log.states.keys())
        .copied()
        .collect();
    let finished = |id: &ExecutionId| histories.get(id).is_some_and(|h| h.finished);
    for key in keys {
        let state = log.states.get(key).copied().flatten();
        let holders: Vec<&ExecutionId> =
            state.map_or_else(Vec::new, |s| s.holders.iter().collect());
        let mut expected: Vec<&ExecutionId> = Vec::new();
        for id in log
            .registers
            .get(key)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if !expected.contains(id) && !finished(id) {
                expected.push(id);
            }
        }
        if holders != expected {
            add(
                Invariant::CorrelationState,
                format!(
                    "`{key}` {when}: its last committed state lists holders {} (of them finished: {}); \
                     the executions that registered it and have not finished, in the order they registered: {}",
                    list(&holders),
                    list(holders.iter().filter(|h| finished(h))),
                    list(&expected)
                ),
            );
        }
        if let Some(s) = state
            && !s.holders.is_empty()
            && !s.buffered.is_empty()
        {
            add(
                Invariant::CorrelationState,
                format!(
                    "`{key}` {when}: held by {}, yet events {} wait in its buffer",
                    list(&s.holders),
                    list(s.buffered.iter().map(|b| &b.event.event_id))
                ),
            );
        }
    }
    for (id, h) in histories {
        for (seq, key) in &h.correlates {
            let n = log
                .registers
                .get(key)
                .map_or(0, |r| r.iter().filter(|r| **r == *id).count());
            if n != 1 {
                add(
                    Invariant::CorrelationState,
                    format!(
                        "{id} registered `{key}` (Correlate at seq {seq}); {n} Register commands of it are committed {when}"
                    ),
                );
            }
            let u = log.unregisters.get(&(*key, *id)).copied().unwrap_or(0);
            if u != usize::from(h.finished) {
                add(
                    Invariant::CorrelationState,
                    format!(
                        "{id} registered `{key}` and {}; {u} Unregister commands of it are committed {when}",
                        if h.finished {
                            "finished"
                        } else {
                            "has not finished"
                        }
                    ),
                );
            }
        }
    }
    for (key, ids) in &log.registers {
        for id in ids {
            if histories
                .get(id)
                .is_none_or(|h| h.registered(key).is_none())
            {
                add(
                    Invariant::CorrelationState,
                    format!(
                        "a Register of {id} for `{key}` is committed; its history has no Correlate of it"
                    ),
                );
            }
        }
    }
}

/// Correlation keys (`Faults::correlation`), from the committed records:
/// - `correlation-once`: an event id sent to a key is taken (`EventDelivered` received) by at
///   most one execution, reaches (kept or taken) at most one, and is not still in the key's
///   buffer once it reached one (ids sent twice included).
/// - `correlation-delivery`: an execution holds an event of a key only if it registered the
///   key (a `Correlate` earlier in its history), with the payload sent; a key forwards only
///   to an execution that registered it.
/// - `correlation-lost` (settled): every event sent to a key reached an execution (taken, or
///   kept untaken: `events_unclaimed`), or is in the key's last committed state, or was
///   dead-lettered; every forwarded record is in its target's history, came back to the key
///   (its target had finished), or was dead-lettered.
/// - `correlation-state` (settled): see `check_holders`; the records are keyed and
///   partitioned by their key.
/// - `correlation-liveness` (settled): after events were sent to every key an unfinished
///   execution registered, each registered execution has finished (the check of the moment
///   the run first settled is [`correlation_at_settle`]).
pub(super) fn check_correlation(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    keyed: &[KeyedSend],
    settled: bool,
) {
    let histories = key_histories(logs);
    let log = key_log(w, keyed);
    for (invariant, detail) in &log.problems {
        add(*invariant, detail.clone());
    }
    // Deliveries: only to a registrant, with the payload sent.
    for (id, h) in &histories {
        let held = h
            .kept
            .iter()
            .map(|(e, (seq, _, payload))| (*e, *seq, *payload, "keeps"))
            .chain(
                h.taken
                    .iter()
                    .map(|(e, (seq, payload))| (*e, *seq, *payload, "took")),
            );
        for (event_id, seq, payload, how) in held {
            let Some(&key) = log.event_key.get(event_id) else {
                continue;
            };
            let sent = log.sent[key]
                .iter()
                .find(|(e, _)| *e == event_id)
                .map(|(_, p)| *p);
            if payload.as_i64() != sent {
                add(
                    Invariant::CorrelationDelivery,
                    format!(
                        "{id}: event {event_id} of key `{key}` holds {payload}, {sent:?} was sent"
                    ),
                );
            }
            match h.registered(key) {
                None => add(
                    Invariant::CorrelationDelivery,
                    format!(
                        "{id} {how} event {event_id} of key `{key}` (seq {seq}), but never registered `{key}` (it registered {})",
                        list(h.correlates.iter().map(|(_, k)| k))
                    ),
                ),
                Some(at) if at > seq => add(
                    Invariant::CorrelationDelivery,
                    format!(
                        "{id} {how} event {event_id} of key `{key}` at seq {seq}, before it registered the key (seq {at})"
                    ),
                ),
                Some(_) => {}
            }
        }
    }
    // Each event of a key: once, and somewhere.
    for (key, events) in &log.sent {
        let state = log.states.get(key).copied().flatten();
        for (event_id, _) in events {
            let takers: Vec<&ExecutionId> = histories
                .iter()
                .filter(|(_, h)| h.taken.contains_key(event_id))
                .map(|(id, _)| *id)
                .collect();
            let keepers: Vec<&ExecutionId> = histories
                .iter()
                .filter(|(_, h)| h.kept.contains_key(event_id) && !h.taken.contains_key(event_id))
                .map(|(id, _)| *id)
                .collect();
            let buffered =
                state.is_some_and(|s| s.buffered.iter().any(|b| b.event.event_id == *event_id));
            let sends = keyed.iter().filter(|k| k.event_id == *event_id).count();
            if takers.len() > 1 {
                add(
                    Invariant::CorrelationOnce,
                    format!(
                        "event {event_id} of key `{key}` (sent {sends} times) was taken by {} executions: {}",
                        takers.len(),
                        list(&takers)
                    ),
                );
            } else if takers.len() + keepers.len() > 1 {
                add(
                    Invariant::CorrelationOnce,
                    format!(
                        "event {event_id} of key `{key}` (sent {sends} times) reached {} executions: taken by {}, kept untaken by {}",
                        takers.len() + keepers.len(),
                        list(&takers),
                        list(&keepers)
                    ),
                );
            }
            if buffered && !(takers.is_empty() && keepers.is_empty()) {
                add(
                    Invariant::CorrelationOnce,
                    format!(
                        "event {event_id} of key `{key}` reached {} and is still in the key's buffer ({})",
                        list(takers.iter().chain(&keepers)),
                        show_state(state)
                    ),
                );
            }
            let dead = log.dead.contains_key(&(*key, *event_id));
            if settled && takers.is_empty() && keepers.is_empty() && !buffered && !dead {
                add(
                    Invariant::CorrelationLost,
                    format!(
                        "event {event_id} sent to key `{key}` ({sends} times) is lost: no execution took or keeps it, \
                         the key's last committed state does not hold it ({}), it was not dead-lettered",
                        show_state(state)
                    ),
                );
            }
        }
    }
    // Each forwarded record: to a registrant, and arrived, came back or dead-lettered.
    for (partition, r) in w.cluster.committed_records(Topic::Events) {
        let Some(Payload::Event(ev)) = &r.payload else {
            continue;
        };
        let Some(key) = ev.correlation_key.as_deref() else {
            continue;
        };
        let event_id = ev.event.event_id.as_str();
        let target = &ev.target;
        let h = histories.get(target);
        if h.is_none_or(|h| h.registered(key).is_none()) {
            add(
                Invariant::CorrelationDelivery,
                format!(
                    "event {event_id} of key `{key}` forwarded to {target} at events/{partition}@{}, which never registered `{key}`",
                    r.offset
                ),
            );
        }
        let arrived =
            h.is_some_and(|h| h.kept.contains_key(event_id) || h.taken.contains_key(event_id));
        if settled
            && !arrived
            && !log.returned.contains(&(key, event_id, target))
            && !log.dead_at.contains(&(partition, r.offset))
        {
            add(
                Invariant::CorrelationLost,
                format!(
                    "event {event_id} of key `{key}` forwarded to {target} at events/{partition}@{}: not in its history, \
                     not sent back to the key, not dead-lettered",
                    r.offset
                ),
            );
        }
    }
    if !settled {
        return;
    }
    check_holders(add, &log, &histories, "at the end");
    for (id, h) in &histories {
        for (_, key) in &h.correlates {
            if !h.finished {
                add(
                    Invariant::CorrelationLiveness,
                    format!(
                        "{id} registered `{key}` and has not finished at the end, though events were sent to the key \
                         until no execution that registered it waited (the key: {})",
                        show_state(log.states.get(key).copied().flatten())
                    ),
                );
            }
        }
    }
}

/// The correlation checks of the moment the run first settled (nothing in flight, every
/// timer fired), before the events sent to let the executions still waiting finish:
/// `check_holders`, and `correlation-liveness`: the holder of a key (which waits: it has not
/// finished) keeps no event it could take, and no event waits in the buffer of a key some
/// unfinished execution registered.
pub fn correlation_at_settle(w: &World, keyed: &[KeyedSend]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut add = |invariant: Invariant, detail: String| {
        out.push(Violation { invariant, detail });
    };
    let logs = committed_histories(w);
    let histories = key_histories(&logs);
    let log = key_log(w, keyed);
    let when = "when the run first settled";
    check_holders(&mut add, &log, &histories, when);
    for (key, state) in &log.states {
        let Some(state) = state else {
            continue;
        };
        if let Some(holder) = state.holders.first()
            && let Some(h) = histories.get(holder)
            && !h.finished
        {
            let untaken: Vec<&str> = h
                .untaken()
                .filter(|(_, name)| *name == ORDER_EVENT)
                .map(|(id, _)| id)
                .collect();
            if !untaken.is_empty() {
                add(
                    Invariant::CorrelationLiveness,
                    format!(
                        "{holder} holds `{key}` and waits {when}, yet keeps events {} no wait took",
                        list(&untaken)
                    ),
                );
            }
        }
        let waiting: Vec<&ExecutionId> = histories
            .iter()
            .filter(|(_, h)| !h.finished && h.registered(key).is_some())
            .map(|(id, _)| *id)
            .collect();
        if !state.buffered.is_empty() && !waiting.is_empty() {
            add(
                Invariant::CorrelationLiveness,
                format!(
                    "events {} wait in the buffer of `{key}` {when}, while {} registered it and wait",
                    list(state.buffered.iter().map(|b| &b.event.event_id)),
                    list(&waiting)
                ),
            );
        }
    }
    out
}
