//! Events sent to executions (`events`): each kept and taken at most once, only by the
//! execution it was sent to and with the payload sent, and none lost: each is in its
//! target's history, dead-lettered, or still kept for a target that never came.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionId, Response};
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::Submitted;
use crate::sim::world::World;

use super::Logged;

/// Events: an execution keeps (`EventReceived`) and takes (`EventDelivered`) each event id
/// at most once, only ids sent to it and with the payload sent; and none is lost: every
/// event record on the events topic is in its target's history or dead-lettered. (The
/// events of correlation keys, `keyed_ids`, and those their keys forwarded are
/// `check_correlation`'s.)
pub(super) fn check_events(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    stray_events: &[(String, ExecutionId)],
    keyed_ids: &BTreeSet<&str>,
    dead: &BTreeMap<(String, i32, i64), usize>,
) {
    use crate::model::EventOutcome;
    let mut seen: BTreeMap<&ExecutionId, BTreeSet<&str>> = BTreeMap::new();
    for (id, entries) in logs {
        let mut first: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(e);
        }
        // A reset's new execution starts with its source's history, events and all
        // (`Created::reset_of`): what was sent to the source counts as sent to it.
        let mut sent: Vec<&(String, i64)> = Vec::new();
        let mut of = Some(id);
        while let Some(current) = of {
            sent.extend(submitted.get(current).into_iter().flat_map(|s| &s.events));
            of = logs.get(current).and_then(|entries| {
                entries.iter().find_map(|e| match &e.record.entry {
                    HistoryEntry::Created(created) => {
                        created.reset_of.as_ref().map(|r| &r.execution_id)
                    }
                    _ => None,
                })
            });
        }
        let mut kept: BTreeMap<&str, usize> = BTreeMap::new();
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        for e in first.values() {
            let (event_id, payload, counts) = match &e.record.entry {
                HistoryEntry::EventReceived(event) => (&event.event_id, &event.payload, &mut kept),
                HistoryEntry::ResponseAppended(Response::EventDelivered {
                    outcome: EventOutcome::Received { event_id, payload },
                    ..
                }) => (event_id, payload, &mut taken),
                _ => continue,
            };
            *counts.entry(event_id.as_str()).or_default() += 1;
            seen.entry(id).or_default().insert(event_id.as_str());
            if keyed_ids.contains(event_id.as_str()) {
                continue;
            }
            match sent.iter().find(|s| s.0 == *event_id) {
                None => add(
                    Invariant::Events,
                    format!(
                        "{id}: history seq {} holds event {event_id}, never sent to it",
                        e.record.seq
                    ),
                ),
                Some((_, p)) if payload.as_i64() != Some(*p) => add(
                    Invariant::Events,
                    format!("{id}: event {event_id} holds {payload}, {p} was sent"),
                ),
                Some(_) => {}
            }
        }
        for (what, counts) in [("kept", &kept), ("taken", &taken)] {
            for (event_id, n) in counts.iter().filter(|(_, n)| **n > 1) {
                add(
                    Invariant::Events,
                    format!("{id}: event {event_id} {what} {n} times"),
                );
            }
        }
    }
    let stray: BTreeSet<(&str, &ExecutionId)> = stray_events
        .iter()
        .map(|(e, id)| (e.as_str(), id))
        .collect();
    // An event kept for an execution that did not exist yet: if none came in time, its copy
    // sent back marked (`waited_until`) is what the DLQ gets; one still kept is in the last
    // committed state under its target's id.
    let mut waited_dead: BTreeSet<(&ExecutionId, &str)> = BTreeSet::new();
    for (partition, r) in w.cluster.committed_records(Topic::Events) {
        if let Some(Payload::Event(event)) = &r.payload
            && event.waited_until.is_some()
            && dead.contains_key(&(Topic::Events.name().to_owned(), partition, r.offset))
        {
            waited_dead.insert((&event.target, event.event.event_id.as_str()));
        }
    }
    let mut last_state = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::State) {
        if let (Some(key), Some(Payload::Correlation(state))) = (&r.key, &r.payload) {
            last_state.insert(key.as_str(), state.as_ref());
        }
    }
    let kept_for = |target: &ExecutionId, event_id: &str| {
        last_state
            .get(target.to_string().as_str())
            .copied()
            .flatten()
            .is_some_and(|s| s.buffered.iter().any(|b| b.event.event_id == event_id))
    };
    for (partition, r) in w.cluster.committed_records(Topic::Events) {
        let Some(Payload::Event(event)) = &r.payload else {
            continue;
        };
        if event.correlation_key.is_some() {
            continue;
        }
        let in_history = seen
            .get(&event.target)
            .is_some_and(|ids| ids.contains(event.event.event_id.as_str()));
        let dead_lettered =
            dead.contains_key(&(Topic::Events.name().to_owned(), partition, r.offset))
                || waited_dead.contains(&(&event.target, event.event.event_id.as_str()));
        if !in_history && !dead_lettered && !kept_for(&event.target, &event.event.event_id) {
            let known = submitted.contains_key(&event.target)
                || stray.contains(&(event.event.event_id.as_str(), &event.target));
            add(
                Invariant::Events,
                format!(
                    "event {} for {} at events/{partition}@{} is lost: not in its history, not \
                     dead-lettered{}",
                    event.event.event_id,
                    event.target,
                    r.offset,
                    if known { "" } else { " (and nobody sent it)" }
                ),
            );
        }
    }
}
