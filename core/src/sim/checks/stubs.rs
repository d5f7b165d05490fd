//! Stubs (`Faults::stub_writes`): the model of every stub and every write of its value, read
//! off the committed log in the order each owner took them ([`stub_model`], [`StubExpect`]),
//! and the invariants held against it: `stub-once`, `stub-value`, `stub-answer`, `stub-lost`,
//! `stub-liveness` (see [`check_stubs`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest, Response,
};
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::workflows::Workflow;
use crate::sim::world::World;

use super::{Logged, committed_histories, list, past_deadline};

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
                    ..
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
                    ..
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
                    ..
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
        let fits = crate::sim::workflows::SimRunner
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
            Some(f) if *f != crate::sim::workflows::double_ffqn() => format!(" through {f}"),
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
pub(super) fn check_stubs(
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
