//! Queries (issue 35 item 5): answered in the batch that takes them, changing nothing.

use crate::fixtures::*;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::query::{QueryAnswer, QueryErrorKind, QueryRequest};
use weir_core::records::PauseAction;
use weir_core::sim::Workflow;
use weir_core::sim::exec::block_on;

fn query_input(id: &ExecutionId, name: &str, deadline: DateTime<Utc>) -> Input {
    input_of(
        id,
        Body::Query(QueryRequest {
            query_id: format!("q-{name}"),
            execution_id: id.clone(),
            name: name.into(),
            params: json!([]),
            requested_at: now(),
            deadline,
        }),
    )
}

/// The one effect of a query's step: its answer.
fn answer_of(effects: Vec<Effect>) -> QueryAnswer {
    match effects.as_slice() {
        [Effect::AnswerQuery(answer)] => answer.clone(),
        other => panic!("a query's step is its answer alone: {other:?}"),
    }
}

fn later() -> DateTime<Utc> {
    now() + Duration::seconds(10)
}

fn kind(answer: &QueryAnswer) -> Option<QueryErrorKind> {
    answer.outcome.as_ref().err().map(|e| e.kind)
}

/// A parked run answers from its state; the step appends nothing, puts no timer and leaves
/// the execution as it was; the answer names the history version it reflects.
#[test]
fn a_running_execution_answers_and_nothing_changes() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let events = appended(&created)
        .iter()
        .filter(|(_, e)| matches!(e, weir_core::records::HistoryEntry::Event { .. }))
        .count();
    let row = processor.row(&id);
    let answer = answer_of(step(&mut processor, query_input(&id, "progress", later())));
    assert_eq!(answer.query_id, "q-progress");
    assert_eq!(answer.execution_id, id);
    assert_eq!(answer.version, appended(&created).len() as u64);
    assert_eq!(
        answer.outcome,
        Ok(json!({"events": events, "responses": 0})),
        "{answer:?}"
    );
    assert_eq!(processor.row(&id), row, "a query changes no row");
    assert_eq!(processor.stats().queries, 1);
}

/// Each error the rule names: past its deadline (without running), malformed, a side effect,
/// undeclared, an execution that does not exist, a paused one, a finished one.
#[test]
fn what_cannot_be_answered_is_answered_with_why() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let version = appended(&created).len() as u64;

    let late = answer_of(step(&mut processor, query_input(&id, "progress", now())));
    assert_eq!(kind(&late), Some(QueryErrorKind::DeadlineExceeded));
    let effectful = answer_of(step(&mut processor, query_input(&id, "effectful", later())));
    assert_eq!(kind(&effectful), Some(QueryErrorKind::SideEffect));
    assert_eq!(effectful.version, version);
    let undeclared = answer_of(step(&mut processor, query_input(&id, "nope", later())));
    assert_eq!(kind(&undeclared), Some(QueryErrorKind::UnknownQuery));

    let malformed = input_of(
        &id,
        Body::Query(QueryRequest {
            query_id: String::new(),
            execution_id: id.clone(),
            name: "progress".into(),
            params: json!([]),
            requested_at: now(),
            deadline: later(),
        }),
    );
    let malformed = answer_of(step(&mut processor, malformed));
    assert_eq!(kind(&malformed), Some(QueryErrorKind::InvalidRequest));

    let nobody = ExecutionId::top_level(ulid::Ulid::new());
    let unknown = answer_of(step(
        &mut processor,
        query_input(&nobody, "progress", later()),
    ));
    assert_eq!(kind(&unknown), Some(QueryErrorKind::UnknownExecution));
    assert_eq!(unknown.version, 0);

    step(
        &mut processor,
        input_of(
            &id,
            Body::Pause(weir_core::records::PauseRequest {
                execution_id: id.clone(),
                action: PauseAction::Pause,
                reason: "operator".into(),
                requested_at: now(),
                parked: None,
            }),
        ),
    );
    let paused = answer_of(step(&mut processor, query_input(&id, "progress", later())));
    assert_eq!(kind(&paused), Some(QueryErrorKind::Paused));

    let hello = ExecutionId::top_level(ulid::Ulid::new());
    let done = step(
        &mut processor,
        submission_input(&hello, Workflow::Seq, json!([0, 7])),
    );
    assert!(
        matches!(published(&done), Some(ExecutionResult::Ok(_))),
        "{done:?}"
    );
    let finished = answer_of(step(
        &mut processor,
        query_input(&hello, "progress", later()),
    ));
    assert_eq!(kind(&finished), Some(QueryErrorKind::Finished));
}

/// An execution whose run is not in memory is rebuilt first (as for any input), and answers
/// what the run it lost would have: its state is a function of its history.
#[test]
fn an_evicted_run_is_rebuilt_and_answers_the_same() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let hot = answer_of(step(&mut processor, query_input(&id, "progress", later())));

    let mut fresh = weir_core::processor::Processor::new(
        weir_core::sim::SimRunner,
        processor_config(1 << 20, 1),
    );
    let query = query_input(&id, "progress", later());
    let mut batch = Batch::new(now());
    assert!(
        fresh.needs(&batch, &query).is_some(),
        "a query of an execution not in memory asks for it"
    );
    block_on(fresh.rehydrate(&mut batch, &id, Some(stored(&id, &created, now()))))
        .expect("rebuilt");
    assert!(batch.effects.is_empty(), "the rebuild took no step");
    block_on(fresh.step(&mut batch, query)).expect("no processor error");
    let cold = answer_of(batch.effects);
    assert_eq!(cold.outcome, hot.outcome);
    assert_eq!(cold.version, hot.version);
}
