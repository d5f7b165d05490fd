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
use super::invariant::Invariant;
use super::sent::{KeyedSend, SimSchedule, Submitted};
use super::workflows::{ORDER_EVENT, Workflow, order_key, parse_params, run_fresh};
use super::world::World;

/// An invariant that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
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

/// The committed history, per execution, in log order.
fn committed_histories(w: &World) -> BTreeMap<ExecutionId, Vec<Logged<'_>>> {
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
    logs
}

/// Every invariant, at the end of a run; `settled`: it ended quiescent (if not, that is a
/// violation of its own: something is stuck).
pub fn check(
    w: &World,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    poison: &[(i32, i64)],
    stray_events: &[(String, ExecutionId)],
    schedules: &[SimSchedule],
    keyed: &[KeyedSend],
    settled: bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut add = |invariant: Invariant, detail: String| {
        out.push(Violation { invariant, detail });
    };

    for a in &w.anomalies {
        add(Invariant::SeamContract, a.clone());
    }

    let logs = committed_histories(w);

    // Upgrades: an execution moves to a build only as a request asked, at the history length
    // the request was checked against (`weir upgrade`'s rule; a stale one is a conflict).
    let upgrades: Vec<&crate::records::UpgradeRequest> = w
        .cluster
        .committed_records(Topic::Responses)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Upgrade(u)) => Some(u),
            _ => None,
        })
        .collect();
    for (id, entries) in &logs {
        for e in entries {
            if let HistoryEntry::Upgraded { to, .. } = &e.record.entry
                && !upgrades.iter().any(|u| {
                    u.execution_id == *id && u.component == *to && u.expected_seq == e.record.seq
                })
            {
                add(
                    Invariant::Upgrade,
                    format!(
                        "{id}: Upgraded({to}) at seq {}, which no upgrade request asked for",
                        e.record.seq
                    ),
                );
            }
        }
    }

    for (id, entries) in &logs {
        let home = w.cluster.partition_for(Topic::History, &id.to_string());
        if let Some(e) = entries.iter().find(|e| e.partition != home) {
            add(
                Invariant::HistoryPartition,
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
                Invariant::HistorySeqs,
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
                    Invariant::LogVsStore,
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
                        Invariant::LogVsStore,
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
                        Invariant::LogVsStore,
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
                    Invariant::LogVsStore,
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
                Invariant::ExecutionRow,
                format!("{id}: no execution row ({count} history entries)"),
            ),
            Some(row) => {
                let state_ok = (row.state == ExecutionState::Finished) == finished.is_some();
                let result_ok = finished.is_none_or(|r| {
                    row.result.as_deref() == serde_json::to_string(r).ok().as_deref()
                });
                if !state_ok || row.history_version != count || !result_ok {
                    add(
                        Invariant::ExecutionRow,
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
                        Invariant::Deadline,
                        format!(
                            "{id}: finished at +{}ms with {result}; its deadline is +{}ms",
                            (at - w.start).num_milliseconds(),
                            (deadline - w.start).num_milliseconds()
                        ),
                    )
                }
                (None, Some((result, _))) if past_deadline(result) => add(
                    Invariant::Deadline,
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
                    Invariant::Deadline,
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
                    Invariant::Delays,
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
                Invariant::Unfinished,
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
                            Invariant::Replay,
                            format!(
                                "{id}: replaying the committed history adds {} events",
                                effects.events.len()
                            ),
                        );
                    }
                    if result != *recorded {
                        add(
                            Invariant::Replay,
                            format!(
                                "{id}: replay finishes with {result}, the history with {recorded}"
                            ),
                        );
                    }
                }
                Ok((RunStep::Parked { blocked_on, .. }, _)) => add(
                    Invariant::Replay,
                    format!(
                        "{id}: replaying the committed history parks on {blocked_on}, yet it finished with {recorded}"
                    ),
                ),
                Err(e) => add(
                    Invariant::Replay,
                    format!("{id}: replaying the committed history fails: {e}"),
                ),
            }
        }
    }
    for id in w.store.executions.keys() {
        if !logs.contains_key(id) {
            add(
                Invariant::LogVsStore,
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
                Invariant::FinishedOnce,
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
                    Invariant::FinishedOnce,
                    format!(
                        "{id} ({}{}) has no result on weir.results; {history}",
                        s.ffqn.function(),
                        s.params
                    ),
                );
            }
            many if many.len() > s.times as usize => add(
                Invariant::FinishedOnce,
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
                            // The payload of an event sent to its key, or -1 (its timeout),
                            // or -2 (it does not wait).
                            Some(Workflow::Order) => match (result, s.params.as_array()) {
                                (ExecutionResult::Ok(v), Some(p)) if p.len() == 3 => {
                                    let (n, ms) = (p[0].as_i64(), p[1].as_i64().unwrap_or(0));
                                    let key = n.map(order_key);
                                    v.as_i64().is_some_and(|v| {
                                        (v == -1 && ms > 0)
                                            || (v == -2 && ms < 0)
                                            || (ms >= 0
                                                && keyed.iter().any(|k| {
                                                    Some(&k.key) == key.as_ref() && k.payload == v
                                                }))
                                    })
                                }
                                _ => false,
                            },
                            // The external service's answer, or -1 (timed out first).
                            Some(Workflow::Watched) => {
                                **result == s.expected
                                    || **result == ExecutionResult::Ok(serde_json::json!(-1))
                            }
                            // What their stubs got and the order of the writes say:
                            // `check_stubs` (`stub-value`, `stub-answer`).
                            Some(Workflow::Stubbed | Workflow::StubRace | Workflow::StubWriter) => {
                                true
                            }
                            _ => **result == s.expected,
                        };
                    if !fits {
                        let expected = match Workflow::of(&s.ffqn) {
                            Some(Workflow::Order) => {
                                "the payload of an event sent to its key, -1 (timeout) or -2 (no wait)"
                                    .to_owned()
                            }
                            Some(Workflow::Approval) => {
                                "the payload of an event sent to it, or -1 (timeout)".to_owned()
                            }
                            _ => s.expected.to_string(),
                        };
                        add(
                            Invariant::Result,
                            format!(
                                "{id} ({}{}): finished with {result}, expected {expected}",
                                s.ffqn.function(),
                                s.params,
                            ),
                        );
                    }
                }
            }
        }
    }
    // The executions schedule ticks started (checked in `check_schedules`).
    let ticks: BTreeSet<ExecutionId> = w
        .cluster
        .committed_records(Topic::Submissions)
        .filter_map(|(_, r)| match (r.producer, &r.payload) {
            (Producer::Worker { .. }, Some(Payload::Submission(s)))
                if s.metadata.contains_key(crate::schedule::METADATA_SCHEDULE) =>
            {
                Some(s.execution_id.clone())
            }
            _ => None,
        })
        .collect();
    for id in results.keys() {
        if !submitted.contains_key(id) && !ticks.contains(id) {
            add(
                Invariant::FinishedOnce,
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
    for topic in Topic::ROUTES {
        for (_, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(a)) = &r.payload {
                *requests.entry(a.execution_id.to_string()).or_default() += 1;
            }
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
            add(
                Invariant::OutputOnce,
                format!("{what} {id} committed {n} times"),
            );
        }
    }
    for ((topic, p, offset), n) in dead.iter().filter(|(_, n)| **n > 1) {
        add(
            Invariant::OutputOnce,
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
                Invariant::Dlq,
                format!("poison record submissions/{p}@{offset} dead-lettered {n} times"),
            );
        }
    }

    let keyed_ids: BTreeSet<&str> = keyed.iter().map(|k| k.event_id.as_str()).collect();
    check_events(
        &mut add,
        w,
        &logs,
        submitted,
        stray_events,
        &keyed_ids,
        &dead,
    );
    check_schedules(&mut add, w, &logs, &results, schedules, settled);
    check_correlation(&mut add, w, &logs, keyed, settled);
    check_stubs(&mut add, w, &logs, settled);
    if w.faults.activity_workers {
        super::check_activity::check_activity(&mut add, w, settled);
    }

    {
        for stuck in unconsumed_inputs(w) {
            add(Invariant::StuckPartition, stuck);
        }
        for t in w.cluster.txns.values() {
            add(
                Invariant::OpenTransactions,
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
                Invariant::TimersLeft,
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
            Invariant::Unsettled,
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
/// event record on the events topic is in its target's history or dead-lettered. (The
/// events of correlation keys, `keyed_ids`, and those their keys forwarded are
/// `check_correlation`'s.)
fn check_events(
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
            if keyed_ids.contains(event_id.as_str()) {
                continue;
            }
            match sent.iter().find(|(sent_id, _)| sent_id == event_id) {
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

/// How close to the time its end was applied an active schedule must have ticked.
const SCHEDULE_SLACK_MS: i64 = 5_000;

/// A committed record of `weir.state` of one schedule: when it was written, and the state
/// (`None`: a tombstone).
type StateRecord<'a> = (SimTime, Option<&'a crate::schedule::ScheduleState>);

/// What one generation of a schedule (from its create to its delete) committed.
#[derive(Default)]
struct Generation {
    /// The ticks its committed states say started an execution.
    started: BTreeSet<SimTime>,
    /// While it was paused: (paused at, resumed at).
    paused: Vec<(SimTime, Option<SimTime>)>,
}

/// The ticks of `cron` from `from` to `to`, both included (at most `limit`).
fn ticks_between(
    cron: &crate::schedule::Cron,
    from: Option<SimTime>,
    to: SimTime,
    limit: usize,
) -> Vec<SimTime> {
    let mut out = Vec::new();
    let mut tick = from;
    while let Some(t) = tick.filter(|t| *t <= to) {
        if out.len() >= limit {
            break;
        }
        out.push(t);
        tick = cron.next_after(t);
    }
    out
}

/// How the committed state `cur` follows the committed state `prev` of the same generation:
/// by the ticks due at its time ([`crate::schedule::fire`]: `Some` of what they did), or by a
/// pause, a resume or a finished run applied at its time (`None`); `Err` if by nothing.
fn explain(
    prev: &crate::schedule::ScheduleState,
    cur: &crate::schedule::ScheduleState,
) -> Result<Option<crate::schedule::Fired>, String> {
    use crate::schedule::{Applied, ScheduleAction, ScheduleCommand, apply, fire};
    let at = cur.updated_at;
    if at < prev.updated_at {
        return Err(format!(
            "written at {at}, before the state it follows ({})",
            prev.updated_at
        ));
    }
    if cur.last_tick != prev.last_tick {
        return match fire(prev, at) {
            Some(fired) if fired.state == *cur => Ok(Some(fired)),
            Some(fired) => Err(format!(
                "the ticks due at {at} make {:?}, not what is committed",
                fired.state
            )),
            None => Err(format!("its last tick moved, but no tick was due at {at}")),
        };
    }
    let mut actions = vec![ScheduleAction::Pause, ScheduleAction::Resume];
    actions.extend(
        prev.running
            .iter()
            .cloned()
            .map(ScheduleAction::RunFinished),
    );
    for action in actions {
        let command = ScheduleCommand {
            name: prev.name.clone(),
            command_id: String::new(),
            action,
            sent_at: at,
        };
        if apply(Some(prev), &command, at) == Applied::Put(Box::new(cur.clone())) {
            return Ok(None);
        }
    }
    Err(format!(
        "no tick, pause, resume or finished run at {at} explains it"
    ))
}

/// Schedules (`Faults::schedules`), from the committed records only: the states on
/// `weir.state` (each schedule's committed history, a chain from its create to its delete),
/// the submissions its ticks made, the histories and results of their executions.
/// - `schedule-state`: every committed state follows the one before by a tick step, a pause,
///   a resume or a finished run at its own time (a new owner went on from the last committed
///   state, nothing was lost or taken twice); a generation begins with its create (the
///   generations are the client's creates after deletes, a create of the same spec again
///   changes nothing) and ends with its delete; the end the client asked for was applied.
/// - `schedule-ticks`: every tick submission carries the id of its tick
///   ([`crate::schedule::tick_execution_id`]) and is committed once; the submissions are
///   exactly the ticks the committed states started; for `allow` the ticks a step took are
///   every tick from the state's next one to its new last one (counted: started + skipped +
///   missed), missed exactly if owed longer than the catch-up window, none while paused.
/// - `schedule-runs` (once the run settled): each tick's execution has one history that
///   starts with its `Created`, one result on `weir.results` (its workflow's, or `cancelled`
///   if `cancel-previous` may have cancelled it), and one `RunFinished` sent to its schedule;
///   no schedule command is dead-lettered.
/// - `schedule-liveness`: once the faults stopped, an active schedule had ticked up to a few
///   seconds before its end (delete or pause) was applied: its partition was not stuck.
fn check_schedules(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    results: &BTreeMap<ExecutionId, Vec<ExecutionResult>>,
    schedules: &[SimSchedule],
    settled: bool,
) {
    use crate::schedule::{
        MAX_MISSED_COUNTED, METADATA_SCHEDULE, METADATA_TICK, Overlap, ScheduleAction, Status,
        tick_execution_id,
    };

    // Tick submissions, by schedule; finished runs told to schedules, by execution.
    let mut submissions: BTreeMap<&str, Vec<&crate::records::Submission>> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Submissions) {
        if let (Producer::Worker { .. }, Some(Payload::Submission(s))) = (r.producer, &r.payload)
            && let Some(name) = s.metadata.get(METADATA_SCHEDULE)
        {
            submissions.entry(name.as_str()).or_default().push(s);
        }
    }
    let mut finished_told: BTreeMap<&ExecutionId, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        if let Some(Payload::ScheduleCommand(c)) = &r.payload
            && let ScheduleAction::RunFinished(id) = &c.action
        {
            if !matches!(r.producer, Producer::Worker { .. }) {
                add(
                    Invariant::ScheduleRuns,
                    format!("a RunFinished of {id} not written by a worker"),
                );
            }
            *finished_told.entry(id).or_default() += 1;
        }
    }
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload
            && e.key
                .as_deref()
                .and_then(|k| std::str::from_utf8(k).ok())
                .is_some_and(|k| {
                    matches!(
                        crate::state_key::StateKey::parse(k),
                        Ok(crate::state_key::StateKey::Schedule(_))
                    )
                })
        {
            add(
                Invariant::ScheduleRuns,
                format!(
                    "a schedule command at {}/{}@{} was dead-lettered ({:?}): {}",
                    e.original_topic, e.original_partition, e.original_offset, e.reason, e.error
                ),
            );
        }
    }
    // The states, by key, in log order (a key's records are all on its partition).
    let mut states: BTreeMap<&str, Vec<StateRecord<'_>>> = BTreeMap::new();
    for (partition, r) in w.cluster.committed_records(Topic::State) {
        if matches!(&r.payload, Some(Payload::Correlation(_))) {
            continue; // `check_correlation`'s
        }
        let (Some(key), Some(Payload::Schedule(state))) = (&r.key, &r.payload) else {
            add(
                Invariant::ScheduleState,
                format!(
                    "weir.state/{partition}@{}: not a schedule's state",
                    r.offset
                ),
            );
            continue;
        };
        let home = w.cluster.partition_for(Topic::State, key);
        if home != partition {
            add(
                Invariant::ScheduleState,
                format!(
                    "the state of `{key}` on weir.state/{partition}@{} (murmur2 says {home})",
                    r.offset
                ),
            );
        }
        states
            .entry(key.as_str())
            .or_default()
            .push((r.timestamp, state.as_ref()));
    }
    for name in submissions.keys() {
        if !schedules.iter().any(|s| s.name == *name) {
            add(
                Invariant::ScheduleTicks,
                format!("tick submissions of `{name}`, a schedule nobody created"),
            );
        }
    }

    for sched in schedules {
        let name = sched.name.as_str();
        let key = crate::state_key::StateKey::schedule(name).to_string();
        let cron = match sched.spec.compile(name) {
            Ok(cron) => cron,
            Err(e) => {
                add(Invariant::ScheduleState, format!("`{name}`: {e}"));
                continue;
            }
        };
        let records = states
            .get(key.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        // The generations: the records between tombstones.
        let mut segments: Vec<(Vec<&crate::schedule::ScheduleState>, Option<SimTime>)> = Vec::new();
        let mut open = false;
        for (at, state) in records {
            match state {
                Some(state) => {
                    if !open {
                        segments.push((Vec::new(), None));
                        open = true;
                    }
                    segments.last_mut().expect("a segment").0.push(state);
                }
                None if open => {
                    segments.last_mut().expect("a segment").1 = Some(*at);
                    open = false;
                }
                // A delete of nothing changes nothing: no tombstone.
                None => add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: a tombstone at +{}ms with nothing to delete",
                        (*at - w.start).num_milliseconds()
                    ),
                ),
            }
        }
        if segments.len() > sched.generations.len()
            || (settled && segments.len() != sched.generations.len())
        {
            add(
                Invariant::ScheduleState,
                format!(
                    "`{name}`: {} generations committed, {} created",
                    segments.len(),
                    sched.generations.len()
                ),
            );
        }
        let mut generations: BTreeMap<&str, Generation> = BTreeMap::new();
        for ((chain, deleted_at), generation) in segments.iter().zip(&sched.generations) {
            let first = chain[0];
            let fresh = first.generation == *generation
                && first.status == Status::Active
                && first.last_tick.is_none()
                && first.running.is_empty()
                && (first.started, first.skipped, first.missed) == (0, 0, 0)
                && first.next_tick == cron.next_after(first.updated_at);
            if !fresh {
                add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: generation {generation} begins with {first:?}, not its create"
                    ),
                );
            }
            let g = generations.entry(generation.as_str()).or_default();
            for state in chain {
                if state.name != name || state.spec != sched.spec || state.generation != *generation
                {
                    add(
                        Invariant::ScheduleState,
                        format!("`{name}`: generation {generation} holds {state:?}"),
                    );
                }
            }
            for pair in chain.windows(2) {
                let (prev, cur) = (pair[0], pair[1]);
                let fired = match explain(prev, cur) {
                    Ok(fired) => fired,
                    Err(why) => {
                        add(
                            Invariant::ScheduleState,
                            format!("`{name}`: the state {cur:?} after {prev:?}: {why}"),
                        );
                        continue;
                    }
                };
                match (prev.status, cur.status) {
                    (Status::Active, Status::Paused) => g.paused.push((cur.updated_at, None)),
                    (Status::Paused, Status::Active) => {
                        if let Some(last) = g.paused.last_mut() {
                            last.1 = Some(cur.updated_at);
                        }
                    }
                    _ => {}
                }
                let Some(fired) = fired else {
                    continue;
                };
                // The ticks the step took: every tick from the next one to the new last.
                let Some(last) = cur.last_tick else {
                    continue;
                };
                let taken = ticks_between(&cron, prev.next_tick, last, 100_000);
                let counted = (cur.started - prev.started)
                    + (cur.skipped - prev.skipped)
                    + (cur.missed - prev.missed);
                if cur.missed - prev.missed < MAX_MISSED_COUNTED && taken.len() as u64 != counted {
                    add(
                        Invariant::ScheduleTicks,
                        format!(
                            "`{name}`: a step at {} took {} ticks ({:?} ..= {last}), but counts {counted}",
                            cur.updated_at,
                            taken.len(),
                            prev.next_tick
                        ),
                    );
                }
                let mut started: Vec<SimTime> = Vec::new();
                for s in &fired.starts {
                    match s.metadata.get(METADATA_TICK).and_then(|t| {
                        chrono::DateTime::parse_from_rfc3339(t)
                            .ok()
                            .map(|t| t.with_timezone(&chrono::Utc))
                    }) {
                        Some(t) => started.push(t),
                        None => add(
                            Invariant::ScheduleTicks,
                            format!("`{name}`: a tick's submission without its tick: {s:?}"),
                        ),
                    }
                }
                if sched.spec.overlap == Overlap::Allow {
                    // Missed exactly when owed longer than the window; every other started.
                    let window_start = cur.updated_at - sched.spec.catchup_window;
                    let (missed, owed): (Vec<SimTime>, Vec<SimTime>) =
                        taken.iter().partition(|t| **t < window_start);
                    if cur.missed - prev.missed < MAX_MISSED_COUNTED
                        && (missed.len() as u64 != cur.missed - prev.missed
                            || owed != started
                            || cur.skipped != prev.skipped)
                    {
                        add(
                            Invariant::ScheduleTicks,
                            format!(
                                "`{name}`: a step at {} with a window of {} s: {} ticks missed and {:?} owed, but it missed {} and started {started:?}",
                                cur.updated_at,
                                sched.spec.catchup_window.num_seconds(),
                                missed.len(),
                                owed,
                                cur.missed - prev.missed
                            ),
                        );
                    }
                }
                g.started.extend(started);
            }
            // A tick after the delete would be of a schedule that is gone.
            if let (Some(deleted_at), Some(last)) =
                (deleted_at, chain.last().and_then(|s| s.last_tick))
                && last > *deleted_at
            {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: generation {generation} ticked at {last}, after its delete at {deleted_at}"
                    ),
                );
            }
        }

        // The submissions: one per started tick, with the tick's id, none other.
        let mut seen: BTreeMap<(&str, SimTime), usize> = BTreeMap::new();
        for s in submissions.get(name).map(Vec::as_slice).unwrap_or_default() {
            let id = &s.execution_id;
            let Some(tick) = s.metadata.get(METADATA_TICK).and_then(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.with_timezone(&chrono::Utc))
            }) else {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: the tick submission {id} names no tick: {:?}",
                        s.metadata
                    ),
                );
                continue;
            };
            let Some(generation) = sched
                .generations
                .iter()
                .find(|g| tick_execution_id(name, g, tick) == *id)
            else {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: the submission of tick {tick} is {id}, not the tick's id of any generation ({:?})",
                        sched.generations
                    ),
                );
                continue;
            };
            if s.ffqn != sched.spec.ffqn || s.params != sched.spec.params || s.parent.is_some() {
                add(
                    Invariant::ScheduleTicks,
                    format!("`{name}`: the submission of tick {tick} is {s:?}"),
                );
            }
            *seen.entry((generation.as_str(), tick)).or_default() += 1;
            let g = generations.get(generation.as_str());
            if !g.is_some_and(|g| g.started.contains(&tick)) {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: {id} was submitted for tick {tick} of generation {generation}, which no committed state started"
                    ),
                );
            }
            if let Some(g) = g
                && let Some((from, to)) = g
                    .paused
                    .iter()
                    .find(|(from, to)| tick > *from && to.is_none_or(|to| tick <= to))
            {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: tick {tick} started {id}, though paused from {from} to {to:?}"
                    ),
                );
            }
        }
        for ((generation, tick), n) in &seen {
            if *n > 1 {
                add(
                    Invariant::ScheduleTicks,
                    format!("`{name}`: tick {tick} of generation {generation} submitted {n} times"),
                );
            }
        }
        for (generation, g) in &generations {
            for tick in &g.started {
                if !seen.contains_key(&(*generation, *tick)) {
                    add(
                        Invariant::ScheduleTicks,
                        format!(
                            "`{name}`: tick {tick} of generation {generation} started, but no submission of it is committed"
                        ),
                    );
                }
            }
        }

        // The runs of the ticks.
        let cancellable = sched.spec.overlap == Overlap::CancelPrevious;
        let expected = Workflow::of(&sched.spec.ffqn).and_then(|wf| {
            parse_params(wf, &sched.spec.params)
                .ok()
                .map(|p| wf.expected(&p))
        });
        if settled {
            for s in submissions.get(name).map(Vec::as_slice).unwrap_or_default() {
                let id = &s.execution_id;
                let mut first: BTreeMap<u64, &HistoryEntry> = BTreeMap::new();
                for e in logs.get(id).map(Vec::as_slice).unwrap_or_default() {
                    first.entry(e.record.seq).or_insert(&e.record.entry);
                }
                let created: Vec<&HistoryEntry> = first
                    .values()
                    .copied()
                    .filter(|e| matches!(e, HistoryEntry::Created(_)))
                    .collect();
                let starts_created = matches!(first.get(&0), Some(HistoryEntry::Created(c))
                    if c.metadata.get(METADATA_SCHEDULE) == s.metadata.get(METADATA_SCHEDULE)
                        && c.metadata.get(METADATA_TICK) == s.metadata.get(METADATA_TICK));
                if !starts_created || created.len() != 1 {
                    add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} has {} history entries, {} Created, the first {:?}",
                            first.len(),
                            created.len(),
                            first.get(&0).map(|e| describe(e))
                        ),
                    );
                    continue;
                }
                let finished = first
                    .values()
                    .any(|e| matches!(e, HistoryEntry::Finished { .. }));
                let answers = results.get(id).map(Vec::as_slice).unwrap_or_default();
                let fits = |r: &ExecutionResult| {
                    Some(r) == expected.as_ref()
                        || (cancellable
                            && matches!(r, ExecutionResult::ExecutionError(e)
                                if e.kind == ExecutionErrorKind::Cancelled))
                };
                match answers {
                    [one] if finished && fits(one) => {}
                    _ => add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} (finished: {finished}) has results {answers:?}; expected one {expected:?}"
                        ),
                    ),
                }
                let told = finished_told.get(id).copied().unwrap_or(0);
                if told != usize::from(finished) {
                    add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} told its schedule it finished {told} times"
                        ),
                    );
                }
            }
        }

        // The end the client asked for was applied, and the schedule kept up until then.
        let (Some(end), true) = (sched.end, settled) else {
            continue;
        };
        let Some((chain, deleted_at)) = segments.last() else {
            continue;
        };
        let last = chain.last().copied();
        let before_end = if end.deleted {
            match deleted_at {
                None => {
                    add(
                        Invariant::ScheduleState,
                        format!(
                            "`{name}`: deleted at +{}ms, yet its last committed state is {last:?}",
                            (end.sent_at - w.start).num_milliseconds()
                        ),
                    );
                    continue;
                }
                Some(at) => last.map(|s| (s, *at)),
            }
        } else {
            if deleted_at.is_some() || last.is_none_or(|s| s.status != Status::Paused) {
                add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: paused at +{}ms, yet its last committed state is {last:?} (deleted: {deleted_at:?})",
                        (end.sent_at - w.start).num_milliseconds()
                    ),
                );
                continue;
            }
            // The last pause is the end's.
            chain
                .windows(2)
                .rev()
                .find(|p| p[0].status == Status::Active && p[1].status == Status::Paused)
                .map(|p| (p[0], p[1].updated_at))
        };
        if end.was_paused {
            continue;
        }
        if let Some((state, applied)) = before_end
            && state.status == Status::Active
            && state
                .next_tick
                .is_some_and(|t| t <= applied - chrono::Duration::milliseconds(SCHEDULE_SLACK_MS))
        {
            add(
                Invariant::ScheduleLiveness,
                format!(
                    "`{name}`: its end was applied at +{}ms, but it had ticked only up to {:?} (next tick +{}ms): its partition fell behind after the faults stopped",
                    (applied - w.start).num_milliseconds(),
                    state.last_tick.map(|t| (t - w.start).num_milliseconds()),
                    state
                        .next_tick
                        .map_or(0, |t| (t - w.start).num_milliseconds())
                ),
            );
        }
    }
}

// ---- correlation keys ----

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

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
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
fn check_correlation(
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

// ---- stubs ----

/// What the stub rules make of one write of a stub's value, given the writes its owner took
/// before it (in `weir.responses` order: every write of a stub is keyed by its parent, so
/// they are all on one partition, read by its owner in offset order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubExpect {
    /// The first value that fits: journalled (a writer hears `ok`).
    Taken,
    /// The value the stub holds already: nothing (a writer hears `ok`).
    Again,
    /// Another value than the one held: a writer hears `conflict`; from outside, DLQ
    /// `conflict`.
    Conflict,
    /// From outside, a value that does not fit, while the stub has none: DLQ `refused`.
    Refused,
    /// From outside, a value that does not fit, and the stub holds a cancellation that came at
    /// a moment the log does not order against the write: `refused` or `conflict`.
    RefusedOrConflict,
    /// A writer naming no stub request of its function (a top-level id, a child of nobody,
    /// an activity, a stub through another function): `not-found`, nothing written.
    NotFound,
}

/// One write of a stub's value as the committed log has it: a client's `Response` or a
/// worker's `StubWrite` record on `weir.responses`, or a writer's request answered at once
/// (its target is no child: no record).
#[derive(Debug, Clone)]
pub struct StubWriteSeen {
    pub target: String,
    pub result: ExecutionResult,
    /// Where it is on `weir.responses` (`None`: answered at once).
    pub at: Option<(i32, i64)>,
    /// The writer's request (`None`: from outside).
    pub request: Option<ExecutionId>,
    /// The function it writes through (a writer's).
    pub ffqn: Option<crate::model::Ffqn>,
    pub expect: StubExpect,
    /// A writer's answer on `weir.responses` (every copy), or an outside write's DLQ copies'
    /// reasons.
    pub answers: Vec<ExecutionResult>,
    pub dead: Vec<crate::records::DlqReason>,
}

/// A stub request in its parent's committed history.
#[derive(Debug, Clone)]
pub struct StubSeen {
    pub parent: ExecutionId,
    pub ffqn: crate::model::Ffqn,
    /// The values journalled for it (the first record of each seq), in order.
    pub values: Vec<ExecutionResult>,
    pub parent_result: Option<ExecutionResult>,
    /// The parent was cancelled or passed its deadline (its result is not its program's).
    pub parent_stopped: bool,
    pub parent_workflow: Option<Workflow>,
}

/// The stubs of a run and every write of them, from the committed log, with what the rules
/// expect of each write given the order their owner took them in.
#[derive(Debug, Default)]
pub struct StubModel {
    pub stubs: BTreeMap<ExecutionId, StubSeen>,
    pub writes: Vec<StubWriteSeen>,
    /// The `stub-writer` executions: id → (its requests, journalled answers, its result, it
    /// was cancelled or timed out).
    pub writers: BTreeMap<ExecutionId, WriterSeen>,
}

#[derive(Debug, Default, Clone)]
pub struct WriterSeen {
    /// Its `StubWrite` requests: (request id, target, value, function).
    pub requests: Vec<(ExecutionId, String, ExecutionResult, crate::model::Ffqn)>,
    /// The answers journalled for them: request id → result.
    pub journalled: BTreeMap<ExecutionId, ExecutionResult>,
    pub result: Option<ExecutionResult>,
    pub stopped: bool,
}

fn is_cancellation(r: &ExecutionResult) -> bool {
    matches!(r, ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Cancelled)
}

/// Reads the model of a run's stubs off the committed log; see [`StubExpect`].
pub fn stub_model(w: &World) -> StubModel {
    let logs = committed_histories(w);
    stub_model_of(w, &logs)
}

fn stub_model_of(w: &World, logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>) -> StubModel {
    use crate::model::ChildKind;
    use crate::runner::WorkflowRunner;
    let mut model = StubModel::default();
    for (id, entries) in logs {
        let mut first: BTreeMap<u64, &HistoryEntry> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(&e.record.entry);
        }
        let workflow = match first.get(&0) {
            Some(HistoryEntry::Created(c)) => Workflow::of(&c.ffqn),
            _ => None,
        };
        let result = first.values().find_map(|e| match e {
            HistoryEntry::Finished { result, .. } => Some(result.clone()),
            _ => None,
        });
        let stopped = first.values().any(|e| match e {
            HistoryEntry::CancelRequested { .. } => true,
            HistoryEntry::Finished { result, .. } => past_deadline(result),
            _ => false,
        });
        let mut writer = WriterSeen {
            result: result.clone(),
            stopped,
            ..WriterSeen::default()
        };
        let mut own: BTreeMap<ExecutionId, StubSeen> = BTreeMap::new();
        for entry in first.values() {
            match entry {
                HistoryEntry::Event {
                    event:
                        HistoryEvent::JoinSetRequest {
                            request:
                                JoinSetRequest::ChildExecutionRequest {
                                    child_execution_id,
                                    target_ffqn,
                                    params,
                                    child_kind,
                                },
                            ..
                        },
                    ..
                } => match child_kind {
                    ChildKind::Stub => {
                        own.insert(
                            child_execution_id.clone(),
                            StubSeen {
                                parent: id.clone(),
                                ffqn: target_ffqn.clone(),
                                values: Vec::new(),
                                parent_result: result.clone(),
                                parent_stopped: stopped,
                                parent_workflow: workflow,
                            },
                        );
                    }
                    ChildKind::StubWrite => {
                        let target = params
                            .get(0)
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        let value = params
                            .get(1)
                            .and_then(|v| serde_json::from_value(v.clone()).ok())
                            .unwrap_or(ExecutionResult::Err(serde_json::Value::Null));
                        writer.requests.push((
                            child_execution_id.clone(),
                            target,
                            value,
                            target_ffqn.clone(),
                        ));
                    }
                    _ => {}
                },
                HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                }) => {
                    if let Some(stub) = own.get_mut(child_execution_id) {
                        stub.values.push(result.clone());
                    }
                    if writer
                        .requests
                        .iter()
                        .any(|(r, ..)| r == child_execution_id)
                    {
                        writer
                            .journalled
                            .entry(child_execution_id.clone())
                            .or_insert_with(|| result.clone());
                    }
                }
                _ => {}
            }
        }
        model.stubs.extend(own);
        if workflow == Some(Workflow::StubWriter) {
            model.writers.insert(id.clone(), writer);
        }
    }

    // The writes on weir.responses, in offset order per partition; the answers to writers.
    let requests: BTreeMap<&ExecutionId, ()> = model
        .writers
        .values()
        .flat_map(|wr| wr.requests.iter().map(|(r, ..)| (r, ())))
        .collect();
    let mut answers: BTreeMap<ExecutionId, Vec<ExecutionResult>> = BTreeMap::new();
    let mut writes: Vec<StubWriteSeen> = Vec::new();
    let mut recorded: BTreeSet<ExecutionId> = BTreeSet::new();
    for (partition, r) in w.cluster.committed_records(Topic::Responses) {
        let seen = |target: String, result: &ExecutionResult| StubWriteSeen {
            target,
            result: result.clone(),
            at: Some((partition, r.offset)),
            request: None,
            ffqn: None,
            expect: StubExpect::NotFound,
            answers: Vec::new(),
            dead: Vec::new(),
        };
        match (r.producer, &r.payload) {
            (
                Producer::Client,
                Some(Payload::Response(Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                })),
            ) => writes.push(seen(child_execution_id.to_string(), result)),
            (Producer::Worker { .. }, Some(Payload::StubWrite(sw))) => {
                recorded.insert(sw.request.clone());
                writes.push(StubWriteSeen {
                    request: Some(sw.request.clone()),
                    ffqn: Some(sw.ffqn.clone()),
                    ..seen(sw.target.to_string(), &sw.result)
                });
            }
            (
                Producer::Worker { .. },
                Some(Payload::Response(Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                })),
            ) if requests.contains_key(child_execution_id) => answers
                .entry(child_execution_id.clone())
                .or_default()
                .push(result.clone()),
            _ => {}
        }
    }
    // Requests answered at once: no record (their target is no child).
    for wr in model.writers.values() {
        for (request, target, value, ffqn) in &wr.requests {
            if !recorded.contains(request) {
                writes.push(StubWriteSeen {
                    target: target.clone(),
                    result: value.clone(),
                    at: None,
                    request: Some(request.clone()),
                    ffqn: Some(ffqn.clone()),
                    expect: StubExpect::NotFound,
                    answers: Vec::new(),
                    dead: Vec::new(),
                });
            }
        }
    }
    let mut reasons: BTreeMap<(i32, i64), Vec<crate::records::DlqReason>> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload
            && e.original_topic == Topic::Responses.name()
        {
            reasons
                .entry((e.original_partition, e.original_offset))
                .or_default()
                .push(e.reason);
        }
    }
    for write in &mut writes {
        if let Some(request) = &write.request {
            write.answers = answers.get(request).cloned().unwrap_or_default();
        }
        if let Some(at) = write.at {
            write.dead = reasons.get(&at).cloned().unwrap_or_default();
        }
    }

    // The rules, in the owner's order: per stub, the first value that fits is taken (unless
    // the stub holds a cancellation: then it came first), the same one again is nothing,
    // another is a conflict; a writer through another function finds no stub request.
    let mut held: BTreeMap<String, Option<ExecutionResult>> = model
        .stubs
        .iter()
        .map(|(stub, s)| {
            let cancelled = s.values.first().filter(|v| is_cancellation(v)).cloned();
            (stub.to_string(), cancelled)
        })
        .collect();
    for write in &mut writes {
        let stub = write.target.parse::<ExecutionId>().ok();
        let Some(s) = stub.as_ref().and_then(|id| model.stubs.get(id)) else {
            write.expect = StubExpect::NotFound;
            continue;
        };
        if write.ffqn.as_ref().is_some_and(|f| *f != s.ffqn) {
            write.expect = StubExpect::NotFound;
            continue;
        }
        let fits = super::workflows::SimRunner
            .check_answer(&s.ffqn, &write.result)
            .is_ok();
        let cancelled = s.values.first().is_some_and(is_cancellation);
        let slot = held
            .get_mut(write.target.as_str())
            .expect("every stub has a slot");
        write.expect = match slot {
            None if fits => {
                *slot = Some(write.result.clone());
                StubExpect::Taken
            }
            // (The simulation's writers write only numbers.)
            None if write.request.is_some() => StubExpect::NotFound,
            None => StubExpect::Refused,
            Some(h) if *h == write.result => StubExpect::Again,
            Some(_) if cancelled && !fits => StubExpect::RefusedOrConflict,
            Some(_) => StubExpect::Conflict,
        };
    }
    model.writes = writes;
    model
}

impl StubWriteSeen {
    fn describe(&self) -> String {
        let how = match (&self.request, self.at) {
            (None, Some((p, o))) => format!("from outside at responses/{p}@{o}"),
            (Some(r), Some((p, o))) => format!("by {r} at responses/{p}@{o}"),
            (Some(r), None) => format!("by {r} (answered at once)"),
            (None, None) => "from nowhere".to_owned(),
        };
        let through = match &self.ffqn {
            Some(f) if *f != super::workflows::double_ffqn() => format!(" through {f}"),
            _ => String::new(),
        };
        format!(
            "the write of {} = {}{through} {how}",
            self.target, self.result
        )
    }
}

/// Stubs (`Faults::stub_writes`), from the committed log ([`stub_model`]: the writes of each
/// stub in the order its owner took them, and what the rules make of each):
/// - `stub-once`: a stub has at most one value in its parent's history, and one once its
///   parent finished; a writer's request has one `StubWrite` record (none if its target is
///   no child) and at most one answer; an outside write is dead-lettered at most once.
/// - `stub-value`: the value a stub holds is the first write's that fits (or a cancellation,
///   which then came before every write); a `stubbed` parent finished with its stub's value,
///   a `stub-race` with it or -1 (its delay came first; always -1 if its stub was cancelled).
/// - `stub-answer`: each writer's request is answered what the rules say (the first write
///   that fits and the same value again `ok`, another value `conflict`, no stub request of
///   its function `not-found`); the writer journalled that answer and finished with it; an
///   outside write is dead-lettered exactly when the rules say (`conflict`, `refused`).
/// - `stub-lost` (settled): a write that fits a waiting stub was taken; every writer's
///   request was answered, every outside conflict or misfit dead-lettered.
/// - `stub-liveness` (settled): every stub's parent and every writer finished.
fn check_stubs(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    settled: bool,
) {
    use crate::records::DlqReason;
    use serde_json::json;
    let model = stub_model_of(w, logs);
    let ok = ExecutionResult::Ok(serde_json::Value::Null);
    let conflict = ExecutionResult::Err(json!("conflict"));
    let not_found = ExecutionResult::Err(json!("not-found"));

    for (stub, s) in &model.stubs {
        let parent = &s.parent;
        if s.values.len() > 1 {
            add(
                Invariant::StubOnce,
                format!(
                    "stub {stub} of {parent}: {} values journalled: {}",
                    s.values.len(),
                    list(&s.values)
                ),
            );
        }
        let key = stub.to_string();
        let taken = model
            .writes
            .iter()
            .find(|w| w.target == key && w.expect == StubExpect::Taken);
        match (s.values.first(), taken) {
            (Some(v), _) if is_cancellation(v) => {}
            (Some(v), Some(t)) if *v == t.result => {}
            (Some(v), Some(t)) => add(
                Invariant::StubValue,
                format!(
                    "stub {stub} of {parent} holds {v}, but the first write that fits is {}",
                    t.describe()
                ),
            ),
            (Some(v), None) => add(
                Invariant::StubValue,
                format!("stub {stub} of {parent} holds {v}, which no write brought"),
            ),
            (None, Some(t)) if settled => add(
                Invariant::StubLost,
                format!(
                    "stub {stub} of {parent} holds no value, though {} fits and came while it waited",
                    t.describe()
                ),
            ),
            (None, _) => {
                if let Some(result) = &s.parent_result {
                    add(
                        Invariant::StubOnce,
                        format!("{parent} finished ({result}) with its stub {stub} unanswered"),
                    );
                }
            }
        }
        match (&s.parent_result, s.parent_stopped) {
            (Some(result), false) => {
                let v = s.values.first();
                let timed_out = ExecutionResult::Ok(json!(-1));
                let fits = match s.parent_workflow {
                    Some(Workflow::Stubbed) => v == Some(result),
                    Some(Workflow::StubRace) => match v {
                        Some(v) if is_cancellation(v) => *result == timed_out,
                        v => *result == timed_out || v == Some(result),
                    },
                    _ => true,
                };
                if !fits {
                    add(
                        Invariant::StubValue,
                        format!(
                            "{parent} ({}) finished with {result}; its stub {stub} holds {}",
                            s.parent_workflow.map_or("?", Workflow::name),
                            v.map_or_else(|| "nothing".to_owned(), ToString::to_string)
                        ),
                    );
                }
            }
            (None, _) if settled => add(
                Invariant::StubLiveness,
                format!(
                    "{parent} has not finished at the end; its stub {stub} holds {}",
                    list(&s.values)
                ),
            ),
            _ => {}
        }
    }

    let mut per_request: BTreeMap<&ExecutionId, usize> = BTreeMap::new();
    for write in &model.writes {
        let what = write.describe();
        let expect = write.expect;
        let Some(request) = &write.request else {
            // From outside: dead-lettered exactly when the rules say.
            let fits = |r: &DlqReason| match expect {
                StubExpect::Conflict => *r == DlqReason::Conflict,
                StubExpect::Refused => *r == DlqReason::Refused,
                StubExpect::RefusedOrConflict => {
                    matches!(r, DlqReason::Refused | DlqReason::Conflict)
                }
                _ => false,
            };
            let owed = matches!(
                expect,
                StubExpect::Conflict | StubExpect::Refused | StubExpect::RefusedOrConflict
            );
            match write.dead.as_slice() {
                [] if owed && settled => add(
                    Invariant::StubLost,
                    format!("{what} is not dead-lettered; the rules say {expect:?}"),
                ),
                [] => {}
                [one] if fits(one) => {}
                [one] => add(
                    Invariant::StubAnswer,
                    format!("{what} is dead-lettered {one:?}; the rules say {expect:?}"),
                ),
                many => add(
                    Invariant::StubOnce,
                    format!("{what} is dead-lettered {} times", many.len()),
                ),
            }
            continue;
        };
        *per_request.entry(request).or_default() += 1;
        let child = write
            .target
            .parse::<ExecutionId>()
            .is_ok_and(|t| t.parent().is_some());
        if write.at.is_none() && child {
            add(
                Invariant::StubLost,
                format!("{what}: its target is a child, yet no StubWrite record is committed"),
            );
        }
        if !write.dead.is_empty() {
            add(
                Invariant::StubLost,
                format!(
                    "{what} is dead-lettered ({:?}): its writer is never answered",
                    write.dead
                ),
            );
        }
        let expected = match expect {
            StubExpect::Taken | StubExpect::Again => &ok,
            StubExpect::Conflict => &conflict,
            _ => &not_found,
        };
        match write.answers.as_slice() {
            [] if settled && write.dead.is_empty() => {
                add(Invariant::StubLost, format!("{what} is never answered"))
            }
            [] => {}
            [one] if one == expected => {}
            [one] => add(
                Invariant::StubAnswer,
                format!("{what} is answered {one}; the rules say {expected} ({expect:?})"),
            ),
            many => add(
                Invariant::StubOnce,
                format!("{what} is answered {} times: {}", many.len(), list(many)),
            ),
        }
    }
    for (request, n) in per_request {
        if n > 1 {
            add(
                Invariant::StubOnce,
                format!("the write of request {request}: {n} StubWrite records committed"),
            );
        }
    }

    for (id, wr) in &model.writers {
        for (request, ..) in &wr.requests {
            let answer = model
                .writes
                .iter()
                .find(|w| w.request.as_ref() == Some(request))
                .and_then(|w| w.answers.first());
            if let (Some(j), Some(a)) = (wr.journalled.get(request), answer)
                && j != a
                && !is_cancellation(j)
            {
                add(
                    Invariant::StubAnswer,
                    format!("{id} journalled {j} for its request {request}, answered {a}"),
                );
            }
        }
        let journalled = wr.requests.first().and_then(|(r, ..)| wr.journalled.get(r));
        match (&wr.result, wr.stopped) {
            (Some(result), false) if journalled != Some(result) => add(
                Invariant::StubAnswer,
                format!(
                    "the writer {id} finished with {result}; its write was answered {}",
                    journalled.map_or_else(|| "nothing".to_owned(), ToString::to_string)
                ),
            ),
            (None, _) if settled => add(
                Invariant::StubLiveness,
                format!(
                    "the writer {id} has not finished at the end (its write answered {journalled:?})"
                ),
            ),
            _ => {}
        }
    }
}

/// What the upgrades of a run did: requests sent, and `Upgraded` entries journalled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpgradeCounts {
    pub sent: u64,
    pub taken: u64,
}

impl UpgradeCounts {
    pub fn of(w: &World) -> Self {
        let sent = w
            .cluster
            .committed_records(Topic::Responses)
            .filter(|(_, r)| matches!(r.payload, Some(Payload::Upgrade(_))))
            .count() as u64;
        let taken = w
            .cluster
            .committed_records(Topic::History)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::History(h)) if matches!(h.entry, HistoryEntry::Upgraded { .. }))
            })
            .count() as u64;
        UpgradeCounts { sent, taken }
    }
}

impl std::ops::AddAssign for UpgradeCounts {
    fn add_assign(&mut self, other: Self) {
        self.sent += other.sent;
        self.taken += other.taken;
    }
}
