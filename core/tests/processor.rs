//! The partition processor's rules driven directly, with the simulation's scripted workflows:
//! inputs in, effects out, no log and no store.

use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::{HistoryEntry, Submission};
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
}

fn processor(max_record_bytes: usize) -> Processor<SimRunner> {
    Processor::new(
        SimRunner,
        ProcessorConfig {
            cache_size: 16,
            max_record_bytes,
            partitions: 1,
        },
    )
}

/// The effects of submitting `workflow` with `params` to a fresh processor.
fn submit(
    processor: &mut Processor<SimRunner>,
    workflow: Workflow,
    params: serde_json::Value,
) -> Vec<Effect> {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let submission = Submission {
        execution_id: id.clone(),
        ffqn: workflow.ffqn(),
        params,
        parent: None,
        scheduled_at: None,
        correlation_id: None,
        metadata: Default::default(),
    };
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Submission(submission)),
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    batch.effects
}

/// Issue 11 item 7: a value no record can carry (here the params of the first activity, with
/// a record limit that leaves 2 bytes for them) would fail its batch forever. The step that
/// made it is not taken: the execution finishes with `value-too-large` and requests nothing.
#[test]
fn a_value_too_large_for_a_record_ends_the_execution_instead_of_its_batch() {
    // 16 KiB is the room a record needs around its value.
    let mut tight = processor(16 * 1024 + 2);
    let effects = submit(&mut tight, Workflow::Seq, json!([1, 5]));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
    let finished: Vec<&ExecutionResult> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishResult(f) => Some(&f.result),
            _ => None,
        })
        .collect();
    assert!(
        matches!(finished.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::ValueTooLarge && e.reason.contains("the params of child")),
        "{finished:?}"
    );
    // The history is Created, then Finished: none of the refused step's events.
    let entries: Vec<&HistoryEntry> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { entry, .. } => Some(entry),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            entries.as_slice(),
            [HistoryEntry::Created(_), HistoryEntry::Finished { .. }]
        ),
        "{entries:?}"
    );

    // With room for them, the same submission requests its activity.
    let mut roomy = processor(1 << 20);
    let effects = submit(&mut roomy, Workflow::Seq, json!([1, 5]));
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
}
