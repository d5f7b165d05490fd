//! Admission, before any rule reads a record: a record over the size limit is dead-lettered,
//! and what it carried is still answered where someone waits for it.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::records::{HistoryEntry, Submission};
use weir_core::sim::Workflow;
use weir_core::sim::exec::block_on;

/// Issue 11 item 7: a child's answer larger than a record may be (what an external service
/// can send) was dead-lettered and its parent waited forever. It is still dead-lettered, and
/// the parent is answered with `value-too-large` for that child.
#[test]
fn an_oversize_answer_is_dead_lettered_and_its_parent_answered_value_too_large() {
    use weir_core::model::Response;

    let mut processor = processor(1 << 20);
    let request = seq_request(&mut processor);
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(request.parent_execution_id.to_string()),
        size: 2 << 20,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(json!(10)),
            ran: None,
        })),
        timestamp: None,
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, answer)).expect("no processor error");
    assert!(
        batch.effects.iter().any(|e| matches!(
            e,
            Effect::DeadLetter {
                reason: weir_core::records::DlqReason::Oversize,
                ..
            }
        )),
        "{:?}",
        batch.effects
    );
    let journalled: Vec<&ExecutionResult> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append {
                entry:
                    HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                        child_execution_id,
                        result,
                        ..
                    }),
                ..
            } if *child_execution_id == request.execution_id => Some(result),
            _ => None,
        })
        .collect();
    assert!(
        matches!(journalled.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::ValueTooLarge),
        "{journalled:?}"
    );
}

/// Issue 11 items 7 and 9: a top-level submission too large to take was only dead-lettered;
/// its caller never heard. It is answered with `value-too-large`, and nothing is created.
#[test]
fn an_oversize_submission_is_dead_lettered_and_answered() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 2 << 20,
        body: Ok(Body::Submission(Submission {
            execution_id: id.clone(),
            ffqn: Workflow::Seq.ffqn(),
            params: json!([1, 5]),
            parent: None,
            scheduled_at: None,
            correlation_id: Some("mine".into()),
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        })),
        timestamp: None,
    };
    let mut batch = Batch::new(now());
    assert_eq!(processor.needs(&batch, &input), Some((id.clone(), 0)));
    block_on(processor.rehydrate(&mut batch, &id, None)).expect("nothing stored");
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    assert!(
        !batch
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Append { .. })),
        "{:?}",
        batch.effects
    );
    let answers: Vec<_> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishResult(f) => Some(f),
            _ => None,
        })
        .collect();
    assert!(
        matches!(answers.as_slice(), [f] if f.execution_id == id
            && f.correlation_id.as_deref() == Some("mine")
            && matches!(&f.result, ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::ValueTooLarge)),
        "{answers:?}"
    );
}
