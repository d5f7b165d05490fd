//! Submissions: one that cannot be taken is answered, and nothing is created.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::records::Submission;
use weir_core::sim::exec::block_on;

/// Issue 11 item 9: a submission whose function name does not parse was dead-lettered and
/// its caller never heard. It is answered `unknown-function`, and nothing is created.
#[test]
fn a_submission_with_an_unparsable_function_name_is_answered() {
    use weir_core::records::DlqReason;

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::UnparsableFfqn {
            submission: Submission {
                execution_id: id.clone(),
                ffqn: weir_core::records::unparsable_ffqn(),
                params: json!([]),
                parent: None,
                scheduled_at: None,
                correlation_id: Some("mine".into()),
                metadata: Default::default(),
                deadline: None,
                concurrency: None,
                tenant: None,
            },
            error: "invalid function name `not a name`".into(),
        }),
        timestamp: None,
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    assert!(appended(&batch.effects).is_empty(), "{:?}", batch.effects);
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
            && matches!(&f.result, ExecutionResult::ExecutionError(e)
                if e.kind == ExecutionErrorKind::UnknownFunction && e.reason.contains("not a name"))),
        "{answers:?}"
    );
    assert!(batch.effects.iter().any(|e| matches!(
        e,
        Effect::DeadLetter {
            reason: DlqReason::UnknownFfqn,
            ..
        }
    )));
}
