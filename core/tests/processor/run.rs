//! A run's steps: a step whose values no record can carry, and a join set closed with work
//! still in it.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::records::HistoryEntry;
use weir_core::sim::Workflow;
use weir_core::sim::exec::block_on;

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

/// Issue 11 item 13: closing a join set cancelled its unawaited activities and delays without
/// a trace in the execution's history (a finished parent ignored the late `cancelled` answer,
/// so nothing said what was cancelled), a cancelled delay's timer stayed in the store and fired
/// later, and the cancellation went to every route's topic. Now the execution journals each
/// cancellation itself — `cancelled` for an activity, `DelayFinished{cancelled}` for a delay,
/// whose timer goes with it — the cancel names the activity's function, a late answer is a
/// duplicate, and a rebuild from the journal replays to the same place.
#[test]
fn closing_a_join_set_journals_what_it_cancelled_and_a_rebuild_replays_it() {
    use weir_core::model::{DelayOutcome, Response};

    let mut processor = processor(1 << 20);
    let effects = submit(&mut processor, Workflow::Abandon, json!([2, 5_000, 7]));
    let activities: Vec<ExecutionId> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{effects:?}");
    let cancels: Vec<(&ExecutionId, &weir_core::model::Ffqn)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelActivity { child, ffqn, .. } => Some((child, ffqn)),
            _ => None,
        })
        .collect();
    let double = weir_core::sim::workflows::double_ffqn();
    assert_eq!(
        cancels,
        activities.iter().map(|a| (a, &double)).collect::<Vec<_>>()
    );
    let journal = appended(&effects);
    let cancelled: Vec<&ExecutionId> = journal
        .iter()
        .filter_map(|(_, entry)| match entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result: ExecutionResult::ExecutionError(e),
                ..
            }) if e.kind == ExecutionErrorKind::Cancelled => Some(child_execution_id),
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, activities.iter().collect::<Vec<_>>());
    let delay = journal.iter().find_map(|(_, entry)| match entry {
        HistoryEntry::ResponseAppended(Response::DelayFinished {
            delay_id,
            outcome: DelayOutcome::Cancelled,
        }) => Some(delay_id.to_string()),
        _ => None,
    });
    let delay = delay.expect("the delay's cancellation is journalled");
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::DeleteTimer(key) if key.timer_id == delay)),
        "the cancelled delay's timer is deleted: {effects:?}"
    );

    // The child workflow answers: the join set is closed, the last activity is requested.
    let id = match &journal[0] {
        (0, HistoryEntry::Created(_)) => match &effects[0] {
            Effect::Append { execution_id, .. } => execution_id.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let child = effects
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.execution_id.clone()),
            _ => None,
        })
        .expect("the child workflow is submitted");
    let answer = |child: &ExecutionId, value: i64| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result: ExecutionResult::Ok(json!(value)),
            ran: None,
        })),
        timestamp: None,
    };
    let answered = step(&mut processor, answer(&child, 14));
    assert!(
        answered
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{answered:?}"
    );
    let mut history = stored(&id, &effects, now());
    history.extend(stored(&id, &answered, now()));

    // A late answer of a cancelled activity is a duplicate: nothing is journalled.
    let late = step(&mut processor, answer(&activities[0], 14));
    assert!(appended(&late).is_empty(), "{late:?}");

    // A rebuild from the journal (another worker, or the evicted run) replays to the same
    // place: nothing new is appended, nothing is requested again.
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert!(batch.effects.is_empty(), "{:?}", batch.effects);
    assert_eq!(rebuilt.row(&id), processor.row(&id));
}
