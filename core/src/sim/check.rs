//! The invariants of a run, checked against what a `read_committed` reader of the log sees
//! and what the store holds once the run has settled.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    DelayId, ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest,
    Response,
};
use crate::records::{HistoryEntry, HistoryRecord};
use crate::replay::Execution;
use crate::rows::ExecutionState;
use crate::runner::RunStep;

use super::cluster::{Payload, Producer, SimTime, Topic};
use super::scheduler::Submitted;
use super::workflows::{Workflow, run_fresh};
use super::world::World;

/// An invariant that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Its name: `finished-once`, `result`, `output-once`, `history-seqs`, `log-vs-store`,
    /// `execution-row`, `delays`, `replay`, `dlq`, `stuck-partition`, `open-transactions`,
    /// `timers-left`, `unfinished`, `seam-contract`, `history-partition`, `events`,
    /// `deadline`.
    pub invariant: &'static str,
    pub detail: String,
}

/// Whether `result` is a time-out by the execution's deadline (not an activity's own).
fn past_deadline(result: &ExecutionResult) -> bool {
    matches!(result, ExecutionResult::ExecutionError(e)
        if e.kind == ExecutionErrorKind::TimedOut && e.reason.contains("by its deadline"))
}

/// Input partitions with committed records beyond the group's committed offset.
pub fn unconsumed_inputs(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for topic in super::world::INPUTS {
        let t = Topic::of_input(topic);
        for p in 0..w.cluster.partitions(t) {
            let committed = w.cluster.committed_offset(topic, p);
            let (unread, _) = w.cluster.read_committed(t, p, committed, usize::MAX);
            if let Some(first) = unread.first() {
                out.push(format!(
                    "{}/{p}: committed offset {committed}, {} readable records from offset {}",
                    t.name(),
                    unread.len(),
                    first.offset
                ));
            }
        }
    }
    out
}

struct Logged<'a> {
    partition: i32,
    offset: i64,
    record: &'a HistoryRecord,
    bytes: &'a [u8],
    timestamp: SimTime,
}

fn describe(entry: &HistoryEntry) -> String {
    match entry {
        HistoryEntry::Created(c) => format!("Created({})", c.ffqn.function()),
        HistoryEntry::Event { version, event } => format!("Event v{version} {}", event.kind_name()),
        HistoryEntry::ResponseAppended(r) => {
            format!("Response({})", crate::projection::response_id(r))
        }
        HistoryEntry::Finished { result, .. } => format!("Finished({result})"),
        HistoryEntry::Upgraded { to, .. } => format!("Upgraded({to})"),
        HistoryEntry::EventReceived(e) => format!("EventReceived({})", e.event_id),
        HistoryEntry::CancelRequested { reason } => format!("CancelRequested({reason})"),
    }
}

fn delays_requested(entries: &[&Logged<'_>]) -> Vec<DelayId> {
    entries
        .iter()
        .filter_map(|e| match &e.record.entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::DelayRequest { delay_id, .. },
                        ..
                    },
                ..
            } => Some(delay_id.clone()),
            _ => None,
        })
        .collect()
}

/// Every invariant, at the end of a run; `settled`: it ended quiescent (if not, that is a
/// violation of its own: something is stuck).
pub fn check(
    w: &World,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    poison: &[(i32, i64)],
    stray_events: &[(String, ExecutionId)],
    settled: bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut add = |invariant: &'static str, detail: String| {
        out.push(Violation { invariant, detail });
    };

    for a in &w.anomalies {
        add("seam-contract", a.clone());
    }

    // The committed history, per execution, in log order.
    let mut logs: BTreeMap<ExecutionId, Vec<Logged<'_>>> = BTreeMap::new();
    for (partition, r) in w.cluster.committed_records(Topic::History) {
        if let Some(Payload::History(record)) = &r.payload {
            logs.entry(record.execution_id.clone())
                .or_default()
                .push(Logged {
                    partition,
                    offset: r.offset,
                    record,
                    bytes: &r.bytes,
                    timestamp: r.timestamp,
                });
        }
    }

    for (id, entries) in &logs {
        let home = w.cluster.partition_for(Topic::History, &id.to_string());
        if let Some(e) = entries.iter().find(|e| e.partition != home) {
            add(
                "history-partition",
                format!(
                    "{id}: seq {} on history/{} (murmur2 says {home})",
                    e.record.seq, e.partition
                ),
            );
        }
        // Contiguous seqs from 0, each once.
        let seqs: Vec<u64> = entries.iter().map(|e| e.record.seq).collect();
        let contiguous = seqs.iter().enumerate().all(|(i, s)| *s == i as u64);
        if !contiguous {
            let listing: Vec<String> = entries
                .iter()
                .map(|e| {
                    format!(
                        "{}@{}:{}",
                        e.record.seq,
                        e.offset,
                        describe(&e.record.entry)
                    )
                })
                .collect();
            add(
                "history-seqs",
                format!(
                    "{id}: seqs in log order are not 0,1,2,…: [{}]",
                    listing.join(", ")
                ),
            );
        }
        // First occurrence of each seq (what a reader folding the log takes).
        let mut first: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(e);
        }
        let firsts: Vec<&Logged<'_>> = first.values().copied().collect();

        // The store's history equals the log's.
        let rows: BTreeMap<i64, &crate::rows::HistoryRow> = w
            .store
            .history
            .range((id.clone(), i64::MIN)..=(id.clone(), i64::MAX))
            .map(|((_, seq), row)| (*seq, row))
            .collect();
        for e in &firsts {
            match rows.get(&(e.record.seq as i64)) {
                None => add(
                    "log-vs-store",
                    format!(
                        "{id}: seq {} ({}) is in the log at history/{}@{} but not in the store",
                        e.record.seq,
                        describe(&e.record.entry),
                        e.partition,
                        e.offset
                    ),
                ),
                Some(row) if row.record != e.bytes => {
                    let stored = w
                        .codec
                        .decode(&row.record)
                        .map_or_else(|| "undecodable".to_owned(), |r| describe(&r.entry));
                    add(
                        "log-vs-store",
                        format!(
                            "{id}: seq {}: the log has {} (offset {}), the store has {} (offset {})",
                            e.record.seq,
                            describe(&e.record.entry),
                            e.offset,
                            stored,
                            row.kafka_offset
                        ),
                    )
                }
                Some(row) if row.kafka_offset != e.offset || row.kafka_partition != e.partition => {
                    add(
                        "log-vs-store",
                        format!(
                            "{id}: seq {}: logged at history/{}@{}, the store says {}@{}",
                            e.record.seq,
                            e.partition,
                            e.offset,
                            row.kafka_partition,
                            row.kafka_offset
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        for seq in rows.keys() {
            if !first.contains_key(&(*seq as u64)) {
                add(
                    "log-vs-store",
                    format!("{id}: the store has history seq {seq}, the log does not"),
                );
            }
        }

        // The execution row agrees with the history.
        let finished = firsts.iter().find_map(|e| match &e.record.entry {
            HistoryEntry::Finished { result, .. } => Some(result),
            _ => None,
        });
        let count = first.len() as i64;
        match w.store.executions.get(id) {
            None => add(
                "execution-row",
                format!("{id}: no execution row ({count} history entries)"),
            ),
            Some(row) => {
                let state_ok = (row.state == ExecutionState::Finished) == finished.is_some();
                let result_ok = finished.is_none_or(|r| {
                    row.result.as_deref() == serde_json::to_string(r).ok().as_deref()
                });
                if !state_ok || row.history_version != count || !result_ok {
                    add(
                        "execution-row",
                        format!(
                            "{id}: the row says {} at history version {} (result {:?}); the history has {count} entries, last {}",
                            row.state,
                            row.history_version,
                            row.result,
                            firsts
                                .last()
                                .map_or_else(String::new, |e| describe(&e.record.entry)),
                        ),
                    );
                }
            }
        }

        // Deadlines: an execution times out at its deadline, not before, and nothing else
        // ends it at or after it; a child never has a later deadline than its parent.
        if let Some(HistoryEntry::Created(created)) = firsts.first().map(|e| &e.record.entry) {
            let ended = firsts.iter().find_map(|e| match &e.record.entry {
                HistoryEntry::Finished {
                    result,
                    finished_at,
                } => Some((result, *finished_at)),
                _ => None,
            });
            match (created.deadline, ended) {
                (Some(deadline), Some((result, at)))
                    if past_deadline(result) != (at >= deadline) =>
                {
                    add(
                        "deadline",
                        format!(
                            "{id}: finished at +{}ms with {result}; its deadline is +{}ms",
                            (at - w.start).num_milliseconds(),
                            (deadline - w.start).num_milliseconds()
                        ),
                    )
                }
                (None, Some((result, _))) if past_deadline(result) => add(
                    "deadline",
                    format!("{id}: timed out by a deadline it does not have: {result}"),
                ),
                _ => {}
            }
            let parent_deadline = created.parent.as_ref().and_then(|p| {
                match logs.get(&p.execution_id)?.first().map(|e| &e.record.entry) {
                    Some(HistoryEntry::Created(c)) => c.deadline,
                    _ => None,
                }
            });
            if let Some(parent) = parent_deadline
                && created.deadline.is_none_or(|d| d > parent)
            {
                add(
                    "deadline",
                    format!(
                        "{id}: deadline {:?}, later than its parent's {parent}",
                        created.deadline
                    ),
                );
            }
        }

        // Every delay fired exactly once.
        let fired: Vec<String> = entries
            .iter()
            .filter_map(|e| match &e.record.entry {
                HistoryEntry::ResponseAppended(Response::DelayFinished { delay_id, .. }) => {
                    Some(delay_id.to_string())
                }
                _ => None,
            })
            .collect();
        for delay in delays_requested(&firsts) {
            let n = fired.iter().filter(|d| **d == delay.to_string()).count();
            if n != 1 {
                let due = firsts.iter().find_map(|e| match &e.record.entry {
                    HistoryEntry::Event {
                        event:
                            HistoryEvent::JoinSetRequest {
                                request:
                                    JoinSetRequest::DelayRequest {
                                        delay_id,
                                        expires_at,
                                        ..
                                    },
                                ..
                            },
                        ..
                    } if *delay_id == delay => Some(*expires_at),
                    _ => None,
                });
                add(
                    "delays",
                    format!(
                        "{delay}: fired {n} times (due {})",
                        due.map_or_else(String::new, |d| format!(
                            "+{}ms",
                            (d - w.start).num_milliseconds()
                        ))
                    ),
                );
            }
        }

        if finished.is_none() {
            let last = entries.last().expect("non-empty");
            add(
                "unfinished",
                format!(
                    "{id}: {} history entries, the last {} at +{}ms; the store row says {}",
                    entries.len(),
                    describe(&last.record.entry),
                    (last.timestamp - w.start).num_milliseconds(),
                    w.store.executions.get(id).map_or_else(
                        || "nothing".to_owned(),
                        |r| format!("{} v{}", r.state, r.history_version)
                    )
                ),
            );
        }

        // A fresh replay of the committed history agrees with it (hot and cold paths
        // recorded the same thing).
        // (A cancelled execution's result is not what its run returned: that is in the
        // error's detail; a timed-out one's run did not return at all.)
        let cancelled = firsts.iter().any(|e| match &e.record.entry {
            HistoryEntry::CancelRequested { .. } => true,
            HistoryEntry::Finished { result, .. } => past_deadline(result),
            _ => false,
        });
        if let (Some(recorded), Some(HistoryEntry::Created(created))) =
            (finished, firsts.first().map(|e| &e.record.entry))
            && !cancelled
            && let Some(workflow) = Workflow::of(&created.ffqn)
        {
            let mut events = Vec::new();
            let mut responses = Vec::new();
            for e in &firsts {
                match &e.record.entry {
                    HistoryEntry::Event { event, .. } => events.push(event.clone()),
                    HistoryEntry::ResponseAppended(r) => responses.push(r.clone()),
                    _ => {}
                }
            }
            let execution = Execution {
                id: id.clone(),
                ffqn: created.ffqn.clone(),
                params: created.params.clone(),
                component: created.component.clone(),
                trace: None,
            };
            match run_fresh(&execution, workflow, events, responses, w.now) {
                Ok((RunStep::Finished { result, effects }, _)) => {
                    if !effects.events.is_empty() {
                        add(
                            "replay",
                            format!(
                                "{id}: replaying the committed history adds {} events",
                                effects.events.len()
                            ),
                        );
                    }
                    if result != *recorded {
                        add(
                            "replay",
                            format!(
                                "{id}: replay finishes with {result}, the history with {recorded}"
                            ),
                        );
                    }
                }
                Ok((RunStep::Parked { blocked_on, .. }, _)) => add(
                    "replay",
                    format!(
                        "{id}: replaying the committed history parks on {blocked_on}, yet it finished with {recorded}"
                    ),
                ),
                Err(e) => add(
                    "replay",
                    format!("{id}: replaying the committed history fails: {e}"),
                ),
            }
        }
    }
    for id in w.store.executions.keys() {
        if !logs.contains_key(id) {
            add(
                "log-vs-store",
                format!("{id}: an execution row, but no history in the log"),
            );
        }
    }

    // Results: each submitted execution finishes once (its history has one `Finished`,
    // checked above) and is answered on weir.results at least once and at most once per
    // submission of it (a resubmission of a finished execution publishes its result again),
    // always with the expected value; each conflicting submission is answered once with a
    // `conflict` error.
    let mut results: BTreeMap<ExecutionId, Vec<ExecutionResult>> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Results) {
        if let Some(Payload::Result(f)) = &r.payload {
            results
                .entry(f.execution_id.clone())
                .or_default()
                .push(f.result.clone());
        }
    }
    let is_conflict = |r: &ExecutionResult| matches!(r, ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Conflict);
    for (id, s) in submitted {
        let all = results.get(id).map(Vec::as_slice).unwrap_or_default();
        let conflicts = all.iter().filter(|r| is_conflict(r)).count();
        let answers: Vec<&ExecutionResult> = all.iter().filter(|r| !is_conflict(r)).collect();
        if conflicts != s.conflicts as usize {
            add(
                "finished-once",
                format!(
                    "{id}: {conflicts} conflict answers on weir.results for {} conflicting submissions",
                    s.conflicts
                ),
            );
        }
        match answers.as_slice() {
            [] => {
                let history = logs.get(id).map_or_else(
                    || "no history".to_owned(),
                    |e| {
                        format!(
                            "{} history entries, the last {}",
                            e.len(),
                            describe(&e[e.len() - 1].record.entry)
                        )
                    },
                );
                add(
                    "finished-once",
                    format!(
                        "{id} ({}{}) has no result on weir.results; {history}",
                        s.ffqn.function(),
                        s.params
                    ),
                );
            }
            many if many.len() > s.times as usize => add(
                "finished-once",
                format!(
                    "{id}: {} results on weir.results for {} submissions: {}",
                    many.len(),
                    s.times,
                    many.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" / ")
                ),
            ),
            many => {
                for result in many {
                    let was_cancelled = s.cancelled
                        && matches!(result, ExecutionResult::ExecutionError(e)
                            if e.kind == ExecutionErrorKind::Cancelled);
                    let timed_out = s.deadline.is_some() && past_deadline(result);
                    let fits = was_cancelled
                        || timed_out
                        || match Workflow::of(&s.ffqn) {
                            // The payload of an event sent to it, or its timeout's -1.
                            Some(Workflow::Approval) => match result {
                                ExecutionResult::Ok(v) => v.as_i64().is_some_and(|v| {
                                    (v == -1 && s.params != serde_json::json!([0]))
                                        || s.events.iter().any(|(_, p)| *p == v)
                                }),
                                _ => false,
                            },
                            _ => **result == s.expected,
                        };
                    if !fits {
                        add(
                            "result",
                            format!(
                                "{id} ({}{}): finished with {result}, expected {}",
                                s.ffqn.function(),
                                s.params,
                                s.expected
                            ),
                        );
                    }
                }
            }
        }
    }
    for id in results.keys() {
        if !submitted.contains_key(id) {
            add(
                "finished-once",
                format!("{id}: a result for an execution nobody submitted"),
            );
        }
    }

    // Outputs, once each.
    let mut children: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Submissions) {
        if let (Producer::Worker { .. }, Some(Payload::Submission(s))) = (r.producer, &r.payload) {
            *children.entry(s.execution_id.to_string()).or_default() += 1;
        }
    }
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Activity) {
        if let Some(Payload::Activity(a)) = &r.payload {
            *requests.entry(a.execution_id.to_string()).or_default() += 1;
        }
    }
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        if let (Producer::Worker { .. }, Some(Payload::Response(resp))) = (r.producer, &r.payload) {
            *answers
                .entry(crate::projection::response_id(resp))
                .or_default() += 1;
        }
    }
    let mut dead: BTreeMap<(String, i32, i64), usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload {
            *dead
                .entry((
                    e.original_topic.clone(),
                    e.original_partition,
                    e.original_offset,
                ))
                .or_default() += 1;
        }
    }
    for (what, counts) in [
        ("child submission", &children),
        ("activity request", &requests),
        ("answer to a parent", &answers),
    ] {
        for (id, n) in counts.iter().filter(|(_, n)| **n > 1) {
            add("output-once", format!("{what} {id} committed {n} times"));
        }
    }
    for ((topic, p, offset), n) in dead.iter().filter(|(_, n)| **n > 1) {
        add(
            "output-once",
            format!("DLQ copy of {topic}/{p}@{offset} committed {n} times"),
        );
    }
    let poison: BTreeSet<&(i32, i64)> = poison.iter().collect();
    for (p, offset) in &poison {
        let n = dead
            .get(&(Topic::Submissions.name().to_owned(), *p, *offset))
            .copied()
            .unwrap_or(0);
        if n != 1 {
            add(
                "dlq",
                format!("poison record submissions/{p}@{offset} dead-lettered {n} times"),
            );
        }
    }

    check_events(&mut add, w, &logs, submitted, stray_events, &dead);

    {
        for stuck in unconsumed_inputs(w) {
            add("stuck-partition", stuck);
        }
        for t in w.cluster.txns.values() {
            add(
                "open-transactions",
                format!(
                    "txn {} of {} open since +{}ms",
                    t.number,
                    t.transactional_id,
                    (t.started_at - w.start).num_milliseconds()
                ),
            );
        }
        for timer in w.store.timers.values() {
            add(
                "timers-left",
                format!(
                    "timer {} of {} due +{}ms still in the store",
                    timer.timer_id,
                    timer.execution_id,
                    (timer.due_at - w.start).num_milliseconds()
                ),
            );
        }
    }
    if !settled {
        add(
            "unsettled",
            format!(
                "the run did not settle within its budget; unconsumed: {:?}; open txns: {}; store timers: {}",
                unconsumed_inputs(w),
                w.cluster.txns.len(),
                w.store.timers.len()
            ),
        );
    }
    out
}

/// Events: an execution keeps (`EventReceived`) and takes (`EventDelivered`) each event id
/// at most once, only ids sent to it and with the payload sent; and none is lost: every
/// event record on the events topic is in its target's history or dead-lettered.
fn check_events(
    add: &mut impl FnMut(&'static str, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    stray_events: &[(String, ExecutionId)],
    dead: &BTreeMap<(String, i32, i64), usize>,
) {
    use crate::model::EventOutcome;
    let mut seen: BTreeMap<&ExecutionId, BTreeSet<&str>> = BTreeMap::new();
    for (id, entries) in logs {
        let mut first: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(e);
        }
        let sent: &[(String, i64)] = submitted.get(id).map_or(&[], |s| s.events.as_slice());
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
            match sent.iter().find(|(sent_id, _)| sent_id == event_id) {
                None => add(
                    "events",
                    format!(
                        "{id}: history seq {} holds event {event_id}, never sent to it",
                        e.record.seq
                    ),
                ),
                Some((_, p)) if payload.as_i64() != Some(*p) => add(
                    "events",
                    format!("{id}: event {event_id} holds {payload}, {p} was sent"),
                ),
                Some(_) => {}
            }
        }
        for (what, counts) in [("kept", &kept), ("taken", &taken)] {
            for (event_id, n) in counts.iter().filter(|(_, n)| **n > 1) {
                add("events", format!("{id}: event {event_id} {what} {n} times"));
            }
        }
    }
    let stray: BTreeSet<(&str, &ExecutionId)> = stray_events
        .iter()
        .map(|(e, id)| (e.as_str(), id))
        .collect();
    for (partition, r) in w.cluster.committed_records(Topic::Events) {
        let Some(Payload::Event(event)) = &r.payload else {
            continue;
        };
        let in_history = seen
            .get(&event.target)
            .is_some_and(|ids| ids.contains(event.event.event_id.as_str()));
        let dead_lettered =
            dead.contains_key(&(Topic::Events.name().to_owned(), partition, r.offset));
        if !in_history && !dead_lettered {
            let known = submitted.contains_key(&event.target)
                || stray.contains(&(event.event.event_id.as_str(), &event.target));
            add(
                "events",
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
