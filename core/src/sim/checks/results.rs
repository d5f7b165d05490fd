//! Results (`finished-once`, `result`): each submitted execution is answered on `weir.results`
//! at least once, at most once per submission, with the value its workflow computes (or a
//! cancellation, a time-out, an event's payload, as the workflow allows); each conflicting
//! submission answered once with `conflict`; no result for an execution nobody submitted.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::{KeyedSend, Submitted};
use crate::sim::workflows::{Workflow, order_key};
use crate::sim::world::World;

use super::{Logged, describe, past_deadline};

/// Results: each submitted execution finishes once (its history has one `Finished`,
/// checked in `history`) and is answered on weir.results at least once and at most once per
/// submission of it (a resubmission of a finished execution publishes its result again),
/// always with the expected value; each conflicting submission is answered once with a
/// `conflict` error.
///
/// Returns the results committed, by execution.
pub(super) fn check_results(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    keyed: &[KeyedSend],
) -> BTreeMap<ExecutionId, Vec<ExecutionResult>> {
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
    results
}
