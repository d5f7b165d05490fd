//! The invariants of the activity workers (`Faults::activity_workers`), from what a
//! `read_committed` reader of the log sees and the activity log
//! ([`crate::sim::activity::ActivityLog`]):
//!
//! - `activity-once`: at most one answer per activity is produced by a commit whose progress
//!   then committed (answers are produced outside transactions, before their progress: a
//!   zombie's, or one whose progress a crash or a refused commit lost, is a duplicate on
//!   `weir.responses`, which the parent drops — `activity-journal`).
//! - `activity-lost` (settled): every request of the route Weir serves has a committed
//!   answer of the activity workers (answered, or answered `cancelled`).
//! - `activity-journal` (settled): the parent's history journals exactly one answer for each
//!   activity it requested, whoever answered how often (the external service and the
//!   worker's `timed-out`, a cancellation journalled by the parent itself).
//! - `activity-rerun`: no attempt of an activity starts after the progress that finished it
//!   (with its answer produced before) committed.
//! - `activity-not-before`: attempt `n > 1` starts no earlier than a failure of attempt
//!   `n − 1` plus its backoff, or the not-before header it arrived with.
//! - `activity-stuck` (settled): the activity workers' committed offsets are past every
//!   request of the route topics.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionId, Response};
use crate::records::HistoryEntry;
use crate::sim::activity::retry_policy;
use crate::sim::cluster::{Payload, Producer, SimTime, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

/// A request on a route topic.
struct Request {
    topic: Topic,
    attempt: u32,
    /// Its not-before header (an inline attempt's retry).
    not_before: Option<SimTime>,
}

fn requests(w: &World) -> BTreeMap<ExecutionId, Request> {
    let mut out = BTreeMap::new();
    for topic in Topic::ROUTES {
        for (partition, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(request)) = &r.payload {
                let not_before = w
                    .act
                    .log
                    .headers
                    .get(&(topic, partition, r.offset))
                    .copied();
                out.insert(
                    request.execution_id.clone(),
                    Request {
                        topic,
                        attempt: request.attempt,
                        not_before,
                    },
                );
            }
        }
    }
    out
}

/// The answers the activity workers produced (visible to a `read_committed` reader), per
/// activity.
fn worker_answers(w: &World) -> BTreeMap<ExecutionId, usize> {
    let mut out = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        if let (
            Producer::ActivityWorker { .. },
            Some(Payload::Response(Response::ChildExecutionFinished {
                child_execution_id, ..
            })),
        ) = (r.producer, &r.payload)
        {
            *out.entry(child_execution_id.clone()).or_default() += 1;
        }
    }
    out
}

/// The answers each activity's parent journalled (each history seq counted once).
fn journalled(w: &World) -> BTreeMap<ExecutionId, usize> {
    let mut seen = BTreeSet::new();
    let mut out = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::History) {
        let Some(Payload::History(record)) = &r.payload else {
            continue;
        };
        if !seen.insert((record.execution_id.clone(), record.seq)) {
            continue;
        }
        if let HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            child_execution_id,
            ..
        }) = &record.entry
        {
            *out.entry(child_execution_id.clone()).or_default() += 1;
        }
    }
    out
}

pub(super) fn check_activity(add: &mut impl FnMut(Invariant, String), w: &World, settled: bool) {
    let requests = requests(w);
    let answers = worker_answers(w);
    let log = &w.act.log;
    let ms = |t: SimTime| (t - w.start).num_milliseconds();
    for (child, n) in log.progress_committed.iter().filter(|(_, n)| **n > 1) {
        add(
            Invariant::ActivityOnce,
            format!("{child}: {n} commits answered it and committed their progress"),
        );
    }
    if settled {
        let journal = journalled(w);
        for (child, request) in &requests {
            let answered = answers.get(child).copied().unwrap_or(0);
            if request.topic == Topic::Activity && answered == 0 {
                let attempts: Vec<String> = log
                    .started
                    .iter()
                    .filter(|s| s.child == *child)
                    .map(|s| format!("{} by p{} at +{}ms", s.attempt, s.pid, ms(s.at)))
                    .collect();
                add(
                    Invariant::ActivityLost,
                    format!("{child}: no answer; attempts started: {attempts:?}"),
                );
            }
            let n = journal.get(child).copied().unwrap_or(0);
            if n != 1 {
                add(
                    Invariant::ActivityJournal,
                    format!(
                        "{child} ({}): its parent journalled {n} answers (the workers produced {answered})",
                        request.topic.name()
                    ),
                );
            }
        }
        for stuck in w.unfinished_routes() {
            add(Invariant::ActivityStuck, stuck);
        }
    }
    for s in &log.started {
        if let Some((seq, at)) = log.committed.get(&s.child)
            && s.seq > *seq
        {
            add(
                Invariant::ActivityRerun,
                format!(
                    "{}: attempt {} started by p{} at +{}ms, after its answer committed at +{}ms",
                    s.child,
                    s.attempt,
                    s.pid,
                    ms(s.at),
                    ms(*at)
                ),
            );
        }
    }
    let policy = retry_policy();
    for s in log.started.iter().filter(|s| s.attempt > 1) {
        let backoff = chrono::Duration::from_std(policy.backoff(s.attempt, 0.5))
            .unwrap_or(chrono::Duration::MAX);
        let after_failure = log
            .failed
            .iter()
            .filter(|f| f.child == s.child && f.attempt + 1 == s.attempt)
            .map(|f| f.at + backoff)
            .min();
        let header = requests
            .get(&s.child)
            .filter(|r| r.attempt == s.attempt)
            .and_then(|r| r.not_before);
        let floor = match (after_failure, header) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match floor {
            Some(floor) if s.at >= floor => {}
            Some(floor) => add(
                Invariant::ActivityNotBefore,
                format!(
                    "{}: attempt {} started by p{} at +{}ms, before +{}ms",
                    s.child,
                    s.attempt,
                    s.pid,
                    ms(s.at),
                    ms(floor)
                ),
            ),
            None => add(
                Invariant::ActivityNotBefore,
                format!(
                    "{}: attempt {} started by p{} at +{}ms with no failed attempt {} and no not-before header",
                    s.child,
                    s.attempt,
                    s.pid,
                    ms(s.at),
                    s.attempt - 1
                ),
            ),
        }
    }
}
