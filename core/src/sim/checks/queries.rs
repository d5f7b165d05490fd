//! `queries` (`Faults::queries`; the rules: [`crate::query`], `processor/query.rs`): what the
//! answers on `weir.answers` must say of the queries clients sent.
//!
//! - Nothing is answered that was not asked: every answer names a query sent, of its
//!   execution.
//! - Once: at most one committed answer per query id (a query taken by an aborted batch is
//!   answered by the batch that takes it again, never twice); by the settled end, exactly
//!   one. Malformed queries (an empty id) are counted together, each answered
//!   `invalid-request` (or `deadline-exceeded`: the deadline is looked at first).
//! - A query taken past its deadline is answered `deadline-exceeded`, and only such a one.
//! - A value only for `progress`; it counts the `Event` entries of the execution's committed
//!   history below the answer's version (the run's state is the function of its history the
//!   replay makes of it). `effectful` is never answered with a value; `side-effect` and
//!   `unknown-query` only for the names that cause them.
//! - A state error says what the committed history says below its version: `finished` after
//!   a `Finished` entry, `paused` after a `Paused` entry not followed by a `Resumed`.
//! - The answers to one execution's queries have versions in the order the queries were
//!   asked (one partition, read in order; a query changes nothing, so a version never goes
//!   back).

use std::collections::BTreeMap;

use super::Logged;
use crate::model::ExecutionId;
use crate::query::{QueryAnswer, QueryErrorKind};
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::QuerySend;
use crate::sim::world::World;

/// What the queries check saw in a run (`Faults::queries`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryCounts {
    pub sent: usize,
    pub answered: usize,
    /// Answered with a value (`progress` of a running execution).
    pub values: usize,
    /// Of those, values of an execution with events recorded (not a fresh start).
    pub values_with_events: usize,
    pub side_effects: usize,
    pub deadlines_exceeded: usize,
    /// Answered with another error (the execution's state, unknown ones, malformed).
    pub other_errors: usize,
}

impl std::ops::AddAssign for QueryCounts {
    fn add_assign(&mut self, o: Self) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.values += o.values;
        self.values_with_events += o.values_with_events;
        self.side_effects += o.side_effects;
        self.deadlines_exceeded += o.deadlines_exceeded;
        self.other_errors += o.other_errors;
    }
}

impl QueryCounts {
    pub fn of(w: &World, sent: &[QuerySend]) -> QueryCounts {
        let mut counts = QueryCounts {
            sent: sent.len(),
            ..QueryCounts::default()
        };
        for answer in answers(w) {
            counts.answered += 1;
            match &answer.outcome {
                Ok(value) => {
                    counts.values += 1;
                    if value["events"].as_u64().is_some_and(|n| n > 0) {
                        counts.values_with_events += 1;
                    }
                }
                Err(e) if e.kind == QueryErrorKind::SideEffect => counts.side_effects += 1,
                Err(e) if e.kind == QueryErrorKind::DeadlineExceeded => {
                    counts.deadlines_exceeded += 1;
                }
                Err(_) => counts.other_errors += 1,
            }
        }
        counts
    }
}

/// The committed answers, in log order.
fn answers(w: &World) -> impl Iterator<Item = &QueryAnswer> {
    w.cluster
        .committed_records(Topic::Answers)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Answer(a)) => Some(a),
            _ => None,
        })
}

pub(super) fn check_queries(
    add: &mut impl FnMut(Invariant, String),
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    w: &World,
    sent: &[QuerySend],
    settled: bool,
) {
    let by_id: BTreeMap<&str, &QuerySend> = sent
        .iter()
        .filter(|s| !s.request.query_id.is_empty())
        .map(|s| (s.request.query_id.as_str(), s))
        .collect();
    let malformed = sent
        .iter()
        .filter(|s| s.request.query_id.is_empty())
        .count();
    let mut answered: BTreeMap<&str, usize> = BTreeMap::new();
    let mut malformed_answered = 0;
    // Per execution: (the query's offset on weir.responses, the answer's version).
    let mut versions: BTreeMap<&ExecutionId, Vec<(i64, u64, &str)>> = BTreeMap::new();
    for answer in answers(w) {
        let id = &answer.execution_id;
        if answer.query_id.is_empty() {
            malformed_answered += 1;
            // Its deadline is looked at first.
            if !matches!(&answer.outcome, Err(e) if matches!(e.kind, QueryErrorKind::InvalidRequest | QueryErrorKind::DeadlineExceeded))
            {
                add(
                    Invariant::Queries,
                    format!(
                        "a query of {id} with an empty id was answered {:?}, not invalid-request",
                        answer.outcome
                    ),
                );
            }
            continue;
        }
        let Some(send) = by_id.get(answer.query_id.as_str()) else {
            add(
                Invariant::Queries,
                format!(
                    "an answer to query `{}` of {id}, which nobody asked",
                    answer.query_id
                ),
            );
            continue;
        };
        let request = &send.request;
        let q = &request.query_id;
        if request.execution_id != *id {
            add(
                Invariant::Queries,
                format!("query `{q}` of {} answered for {id}", request.execution_id),
            );
            continue;
        }
        *answered.entry(q.as_str()).or_default() += 1;
        let late = request.deadline <= answer.answered_at;
        let kind = answer.outcome.as_ref().err().map(|e| e.kind);
        if late != (kind == Some(QueryErrorKind::DeadlineExceeded)) {
            add(
                Invariant::Queries,
                format!(
                    "query `{q}` of {id}, due by {}, answered at {} with {:?}",
                    request.deadline, answer.answered_at, answer.outcome
                ),
            );
        }
        if kind != Some(QueryErrorKind::DeadlineExceeded) && answer.version > 0 {
            versions
                .entry(id)
                .or_default()
                .push((send.at.1, answer.version, q));
        }
        let below: Vec<&HistoryEntry> = logs
            .get(id)
            .into_iter()
            .flatten()
            .filter(|l| l.record.seq < answer.version)
            .map(|l| &l.record.entry)
            .collect();
        if (below.len() as u64) < answer.version {
            add(
                Invariant::Queries,
                format!(
                    "query `{q}` of {id} answered at version {}, but only {} entries are committed below it",
                    answer.version,
                    below.len()
                ),
            );
        }
        match (&answer.outcome, request.name.as_str()) {
            (Ok(value), "progress") => {
                let events = below
                    .iter()
                    .filter(|e| matches!(e, HistoryEntry::Event { .. }))
                    .count() as u64;
                if value["events"].as_u64() != Some(events) {
                    add(
                        Invariant::Queries,
                        format!(
                            "query `{q}` of {id} answered {value} at version {}, whose history has {events} events",
                            answer.version
                        ),
                    );
                }
            }
            (Ok(value), name) => add(
                Invariant::Queries,
                format!("query `{q}` ({name}) of {id} answered with a value: {value}"),
            ),
            (Err(e), name) => {
                let wrong = match e.kind {
                    QueryErrorKind::SideEffect => name != "effectful",
                    QueryErrorKind::UnknownQuery => name != "undeclared",
                    QueryErrorKind::Finished => !below
                        .iter()
                        .any(|e| matches!(e, HistoryEntry::Finished { .. })),
                    QueryErrorKind::Paused => !matches!(
                        below.iter().rev().find(|e| matches!(
                            e,
                            HistoryEntry::Paused { .. } | HistoryEntry::Resumed { .. }
                        )),
                        Some(HistoryEntry::Paused { .. })
                    ),
                    QueryErrorKind::UnknownExecution => answer.version != 0,
                    QueryErrorKind::InvalidRequest => true,
                    _ => false,
                };
                if wrong {
                    add(
                        Invariant::Queries,
                        format!(
                            "query `{q}` ({name}) of {id} answered {e} at version {}, which its history does not bear out",
                            answer.version
                        ),
                    );
                }
            }
        }
    }
    for (q, n) in &answered {
        if *n > 1 {
            add(
                Invariant::Queries,
                format!("query `{q}` answered {n} times"),
            );
        }
    }
    if malformed_answered > malformed || (settled && malformed_answered != malformed) {
        add(
            Invariant::Queries,
            format!("{malformed} malformed queries sent, {malformed_answered} answered"),
        );
    }
    if settled {
        for (q, send) in &by_id {
            if !answered.contains_key(q) {
                add(
                    Invariant::Queries,
                    format!(
                        "query `{q}` of {} (weir.responses {}/{}) was never answered",
                        send.request.execution_id, send.at.0, send.at.1
                    ),
                );
            }
        }
    }
    for (id, mut asked) in versions {
        asked.sort();
        for pair in asked.windows(2) {
            let ((_, earlier, qa), (_, later, qb)) = (pair[0], pair[1]);
            if later < earlier {
                add(
                    Invariant::Queries,
                    format!(
                        "{id}: query `{qb}`, asked after `{qa}`, answered at version {later}, before {earlier}"
                    ),
                );
            }
        }
    }
}
