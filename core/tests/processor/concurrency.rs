//! Concurrency slots (issue 35 item 4): keys given at submission, functions' limits; both
//! sides of the exchange driven through one processor of one partition (each command the
//! processor sends is stepped back in as the log would bring it).

use crate::fixtures::*;
use serde_json::json;
use weir_core::concurrency::{ConcurrencyKey, Slot, SlotAction, SlotCommand};
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Body, Effect, Input, Processor};
use weir_core::records::{DlqReason, HistoryEntry, Submission};
use weir_core::rows::ExecutionState;
use weir_core::sim::Workflow;

fn keyed(id: &ExecutionId, key: &str, limit: Option<u32>) -> Input {
    let submission = Submission {
        concurrency: Some(ConcurrencyKey {
            key: key.into(),
            limit,
        }),
        ..Submission::top_level(
            id,
            Workflow::Seq.ffqn(),
            json!([1, 5]),
            Default::default(),
            None,
        )
    };
    input_of(id, Body::Submission(submission))
}

/// The slot commands of `effects`.
fn slot_commands(effects: &[Effect]) -> Vec<SlotCommand> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Slot(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// Steps `input`, then each slot command its effects hold back into the processor, as the
/// log brings it (keyed by the slot, or by the execution), and what those make, until none
/// is left: every effect, in order.
fn run<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    input: Input,
) -> Vec<Effect> {
    let effects = step(processor, input);
    let mut all = Vec::new();
    let mut pending = slot_commands(&effects);
    all.extend(effects);
    while !pending.is_empty() {
        let command = pending.remove(0);
        let input = Input::Record {
            index: 0,
            partition: 0,
            key: Some(command.key()),
            size: 100,
            body: Ok(Body::Slot(command)),
            timestamp: None,
        };
        let effects = step(processor, input);
        pending.extend(slot_commands(&effects));
        all.extend(effects);
    }
    all
}

fn started(effects: &[Effect], id: &ExecutionId) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::RequestActivity(r) if r.parent_execution_id == *id))
}

fn finish_seq(
    processor: &mut Processor<impl weir_core::runner::WorkflowRunner>,
    effects: &[Effect],
) -> Vec<Effect> {
    let request = effects
        .iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.clone()),
            _ => None,
        })
        .expect("an activity request");
    let answer = answer(
        &request.parent_execution_id,
        &request.execution_id,
        ExecutionResult::Ok(json!(6)),
    );
    run(processor, answer)
}

/// One at a time per key: the second waits `queued` (no code runs) until the first
/// finishes, then starts; the slot is forgotten once both are done.
#[test]
fn a_key_runs_one_at_a_time_and_the_next_starts_when_the_first_finishes() {
    let mut processor = processor(1 << 20);
    let (a, b) = (
        ExecutionId::top_level(ulid::Ulid::new()),
        ExecutionId::top_level(ulid::Ulid::new()),
    );
    let first = run(&mut processor, keyed(&a, "customer-42", None));
    assert!(started(&first, &a), "the first holds the slot and runs");
    assert!(appended(&first).iter().any(|(_, e)| matches!(e, HistoryEntry::SlotGranted { slot } if *slot == Slot::Key("customer-42".into()))));
    let second = run(&mut processor, keyed(&b, "customer-42", None));
    assert!(!started(&second, &b), "the second waits");
    assert_eq!(processor.view(&b).expect("b").state, ExecutionState::Queued);
    let slot = processor.slots().next().expect("the slot is held");
    assert_eq!(
        (slot.holders.clone(), slot.waiting.clone()),
        (vec![a.clone()], vec![b.clone()])
    );

    let done = finish_seq(&mut processor, &first);
    assert_eq!(published(&done), Some(ExecutionResult::Ok(json!(6))));
    let release = slot_commands(&done);
    assert!(
        release
            .iter()
            .any(|c| c.execution_id == a && c.action == SlotAction::Release),
        "the finish releases its place: {release:?}"
    );
    assert!(
        started(&done, &b),
        "the next one starts as the first finishes"
    );
    assert_eq!(
        processor.view(&b).expect("b").state,
        ExecutionState::Running
    );
    let finished = finish_seq(&mut processor, &done);
    assert_eq!(published(&finished), Some(ExecutionResult::Ok(json!(6))));
    assert_eq!(processor.slots().count(), 0, "an idle slot is forgotten");
}

/// A limit of 2 lets two run; the third waits for either.
#[test]
fn a_key_with_a_limit_of_two_runs_two() {
    let mut processor = processor(1 << 20);
    let ids: Vec<ExecutionId> = (0..3)
        .map(|_| ExecutionId::top_level(ulid::Ulid::new()))
        .collect();
    let runs: Vec<Vec<Effect>> = ids
        .iter()
        .map(|id| run(&mut processor, keyed(id, "k", Some(2))))
        .collect();
    assert!(started(&runs[0], &ids[0]) && started(&runs[1], &ids[1]));
    assert!(!started(&runs[2], &ids[2]));
    let done = finish_seq(&mut processor, &runs[1]);
    assert!(
        started(&done, &ids[2]),
        "the third starts when the second finishes"
    );
}

/// A queued execution cancelled finishes at once and leaves the queue; a grant that still
/// comes for it changes nothing.
#[test]
fn a_queued_execution_cancelled_finishes_at_once_and_leaves_the_queue() {
    let mut processor = processor(1 << 20);
    let (a, b) = (
        ExecutionId::top_level(ulid::Ulid::new()),
        ExecutionId::top_level(ulid::Ulid::new()),
    );
    run(&mut processor, keyed(&a, "k", None));
    run(&mut processor, keyed(&b, "k", None));
    let cancelled_effects = run(&mut processor, cancel_input(&b, false));
    assert!(cancelled(published(&cancelled_effects)));
    let slot = processor.slots().next().expect("held by a");
    assert_eq!(
        (slot.holders.clone(), slot.waiting.len()),
        (vec![a.clone()], 0)
    );
    let late = SlotCommand {
        slot: Slot::Key("k".into()),
        execution_id: b.clone(),
        action: SlotAction::Grant,
        sent_at: now(),
    };
    let effects = step(&mut processor, input_of(&b, Body::Slot(late)));
    assert!(
        effects.is_empty(),
        "a finished execution ignores a grant: {effects:?}"
    );
}

/// A function limited to one (`max_running = 1`): its executions run one at a time,
/// whatever their keys.
#[test]
fn a_function_limit_runs_its_executions_one_at_a_time() {
    let mut processor = processor_of(TunedRunner::limited(1), 1 << 20);
    let (a, b) = (
        ExecutionId::top_level(ulid::Ulid::new()),
        ExecutionId::top_level(ulid::Ulid::new()),
    );
    let first = run(
        &mut processor,
        submission_input(&a, Workflow::Seq, json!([1, 5])),
    );
    let second = run(
        &mut processor,
        submission_input(&b, Workflow::Seq, json!([1, 5])),
    );
    assert!(started(&first, &a) && !started(&second, &b));
    let view = processor.view(&b).expect("b");
    assert_eq!(view.state, ExecutionState::Queued);
    assert_eq!(
        view.created.slots[0].slot,
        Slot::Function(Workflow::Seq.ffqn())
    );
    let done = finish_seq(&mut processor, &first);
    assert!(started(&done, &b));
}

/// A key and a function limit: the key's slot first, then the function's; it starts once
/// it holds both.
#[test]
fn an_execution_takes_its_keys_slot_then_its_functions() {
    let mut processor = processor_of(TunedRunner::limited(5), 1 << 20);
    let a = ExecutionId::top_level(ulid::Ulid::new());
    let effects = run(&mut processor, keyed(&a, "k", None));
    let granted: Vec<Slot> = appended(&effects)
        .into_iter()
        .filter_map(|(_, e)| match e {
            HistoryEntry::SlotGranted { slot } => Some(slot),
            _ => None,
        })
        .collect();
    assert_eq!(
        granted,
        vec![Slot::Key("k".into()), Slot::Function(Workflow::Seq.ffqn())]
    );
    assert!(started(&effects, &a));
}

/// Bad input: a key that is not a key, a limit of zero: nothing is created, the record is
/// dead-lettered and the caller hears `invalid-params` with why.
#[test]
fn a_bad_key_or_limit_creates_nothing_and_is_answered() {
    for (key, limit, why) in [
        ("has space", None, "printable ASCII without spaces"),
        ("k", Some(0), "limit 0 of key `k`"),
        ("k", Some(5000), "limit 5000 of key `k`"),
    ] {
        let mut processor = processor(1 << 20);
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let effects = step(&mut processor, keyed(&id, key, limit));
        assert!(appended(&effects).is_empty(), "{key}: nothing created");
        let letters = dead_letters(&effects);
        assert!(
            matches!(&letters[..], [(DlqReason::InvalidParams, e)] if e.contains(why)),
            "{key} {limit:?}: {letters:?}"
        );
        assert!(matches!(
            published(&effects),
            Some(ExecutionResult::ExecutionError(e)) if e.kind == ExecutionErrorKind::InvalidParams
        ));
    }
}

/// A slot's answer for an execution that claims no such slot is refused and changes
/// nothing; one for an execution that does not exist is dead-lettered.
#[test]
fn a_grant_for_a_slot_not_claimed_or_an_unknown_execution_is_dead_lettered() {
    let mut processor = processor(1 << 20);
    let a = ExecutionId::top_level(ulid::Ulid::new());
    run(&mut processor, keyed(&a, "k", None));
    for (target, reason) in [
        (a.clone(), DlqReason::Refused),
        (ExecutionId::top_level(ulid::Ulid::new()), DlqReason::Other),
    ] {
        let grant = SlotCommand {
            slot: Slot::Key("other".into()),
            execution_id: target.clone(),
            action: SlotAction::Grant,
            sent_at: now(),
        };
        let effects = step(&mut processor, input_of(&target, Body::Slot(grant)));
        let letters = dead_letters(&effects);
        assert!(
            matches!(&letters[..], [(r, _)] if *r == reason),
            "{letters:?}"
        );
        assert!(appended(&effects).is_empty());
    }
}
