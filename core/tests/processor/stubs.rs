//! Stubs: values written from outside, and by another workflow.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Body, Effect, Input};
use weir_core::records::HistoryEntry;
use weir_core::sim::Workflow;

/// The stub child `effects` journalled (a `ChildExecutionRequest` of kind `Stub`).
fn stub_child(effects: &[Effect]) -> ExecutionId {
    use weir_core::model::{ChildKind, HistoryEvent, JoinSetRequest};
    appended(effects)
        .into_iter()
        .find_map(|(_, entry)| match entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request:
                            JoinSetRequest::ChildExecutionRequest {
                                child_execution_id,
                                child_kind: ChildKind::Stub,
                                ..
                            },
                        ..
                    },
                ..
            } => Some(child_execution_id),
            _ => None,
        })
        .expect("a stub child")
}

/// Issue 13 item 4: a stub's value written from outside (a `ChildExecutionFinished` record
/// for the stub child, as `weir stub` sends): taken once; the same value again is nothing
/// new; another value is dead-lettered `conflict`, also after the finish; a value that does
/// not fit the stub's result type is refused and nothing is journalled, so a fitting one can
/// still be written.
#[test]
fn a_stub_written_from_outside_follows_obelisks_rules() {
    use weir_core::records::DlqReason;

    let mut processor = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    assert!(
        !started
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_) | Effect::Submit(_))),
        "a stub is never run: {started:?}"
    );
    let write = |value: serde_json::Value| answer(&id, &stub, ExecutionResult::Ok(value));
    // Does not fit (not a number): refused, nothing journalled.
    let misfit = step(&mut processor, write(json!("seven")));
    assert!(appended(&misfit).is_empty(), "{misfit:?}");
    assert_eq!(dead_letters(&misfit)[0].0, DlqReason::Refused, "{misfit:?}");
    // Fits: taken, the workflow returns it.
    let taken = step(&mut processor, write(json!(7)));
    assert_eq!(published(&taken), Some(ExecutionResult::Ok(json!(7))));
    // The same value again: nothing; another: a conflict naming both; after the finish too.
    let again = step(&mut processor, write(json!(7)));
    assert!(
        appended(&again).is_empty() && dead_letters(&again).is_empty(),
        "{again:?}"
    );
    let other = step(&mut processor, write(json!(8)));
    assert!(appended(&other).is_empty(), "{other:?}");
    let (reason, error) = &dead_letters(&other)[0];
    assert_eq!(*reason, DlqReason::Conflict);
    assert!(error.contains("holds") && error.contains('8'), "{error}");
}

/// Issue 13 item 4: a workflow writes the value of *another* execution's stub. The owner of
/// the stub's parent applies the rules of a value written from outside and answers the
/// writer's request `ok` (`null`), `conflict` or `not-found`; only a stub request (of that
/// function, still waiting) can be written, never an activity's answer.
#[test]
fn a_workflow_writes_the_stub_of_another_execution() {
    use weir_core::model::{JoinSetId, Response};
    use weir_core::processor::{StubWrite, StubWriteOutcome, stub_write_answer};

    let mut processor = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    let writer = ExecutionId::top_level(ulid::Ulid::new());
    let js = JoinSetId::generated(1).expect("a join set id");
    let mut n = 0;
    let mut write = |target: &ExecutionId, ffqn: weir_core::model::Ffqn, value: i64| {
        n += 1;
        let request = writer.child(&js, n);
        let input = Input::Record {
            index: 0,
            partition: 0,
            key: target.parent().map(|p| p.to_string()),
            size: 100,
            body: Ok(Body::StubWrite(StubWrite {
                request: request.clone(),
                target: target.clone(),
                ffqn,
                result: ExecutionResult::Ok(json!(value)),
            })),
            timestamp: None,
        };
        (request, input)
    };
    let answer = |effects: &[Effect], request: &ExecutionId| {
        effects.iter().find_map(|e| match e {
            Effect::Respond {
                to,
                response:
                    Response::ChildExecutionFinished {
                        child_execution_id,
                        result,
                        ..
                    },
            } if child_execution_id == request => {
                assert_eq!(Some(to), request.parent().as_ref());
                Some(result.clone())
            }
            _ => None,
        })
    };
    let double = weir_core::sim::workflows::double_ffqn();

    // Written: the stub's execution takes it (and finishes with it); the writer hears `ok`.
    let (first, input) = write(&stub, double.clone(), 21);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &first),
        Some(stub_write_answer(StubWriteOutcome::Ok))
    );
    assert!(
        appended(&effects).iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { child_execution_id, .. })
                if *child_execution_id == stub)),
        "{effects:?}"
    );
    assert!(
        published(&effects).is_some(),
        "the stub's workflow finished"
    );
    assert!(dead_letters(&effects).is_empty());
    // The same value again: ok, nothing journalled; another: conflict.
    let (again, input) = write(&stub, double.clone(), 21);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &again),
        Some(stub_write_answer(StubWriteOutcome::Ok))
    );
    assert!(appended(&effects).is_empty(), "{effects:?}");
    let (other, input) = write(&stub, double.clone(), 22);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &other),
        Some(stub_write_answer(StubWriteOutcome::Conflict))
    );
    // Not a stub request of this execution (another function; an execution that does not
    // exist): not-found, and nothing is written.
    let mut waiting = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let stub_of_waiting = stub_child(&step(
        &mut waiting,
        submission_input(&id, Workflow::Stubbed, json!([])),
    ));
    let wrong_function = Workflow::Seq.ffqn();
    for target in [
        stub_of_waiting.clone(),
        ExecutionId::top_level(ulid::Ulid::new()).child(&js, 1),
    ] {
        let (request, input) = write(&target, wrong_function.clone(), 1);
        let effects = step(&mut waiting, input);
        assert_eq!(
            answer(&effects, &request),
            Some(stub_write_answer(StubWriteOutcome::NotFound)),
            "{effects:?}"
        );
        assert!(appended(&effects).is_empty(), "{effects:?}");
    }
}

/// A stub's value written from outside after its execution was terminated while the stub
/// waited: the termination journalled the stub's cancellation, which is the value the stub
/// holds, so every later write is dead-lettered `conflict` naming it (not dropped in
/// silence).
#[test]
fn a_stub_written_after_its_execution_was_terminated_is_a_conflict() {
    use weir_core::records::DlqReason;

    let mut processor = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    let terminated = step(&mut processor, cancel_input(&id, true));
    assert!(cancelled(published(&terminated)), "{terminated:?}");
    let write = |value: i64| answer(&id, &stub, ExecutionResult::Ok(json!(value)));
    for value in [7, 7] {
        let late = step(&mut processor, write(value));
        assert!(appended(&late).is_empty(), "{late:?}");
        let dead = dead_letters(&late);
        assert_eq!(dead.len(), 1, "{late:?}");
        assert_eq!(dead[0].0, DlqReason::Conflict, "{late:?}");
        assert!(
            dead[0].1.contains(&stub.to_string()) && dead[0].1.contains("cancelled"),
            "{}",
            dead[0].1
        );
    }
}

/// Issue 33, a suspected item confirmed: a stub's value written from outside after its
/// execution finished while the stub still waited, with nothing journalled for it (a run
/// that trapped), was ignored in silence, after the API had answered the writer 202. It is
/// dead-lettered `refused`, naming the stub and the finish.
#[test]
fn a_stub_written_after_its_execution_finished_without_it_is_refused() {
    use weir_core::processor::Batch;
    use weir_core::records::{DlqReason, HistoryRecord};
    use weir_core::sim::exec::block_on;

    let mut first = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut first,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    let mut history = stored(&id, &started, now());
    let trapped = HistoryEntry::Finished {
        result: ExecutionResult::error(
            weir_core::model::ExecutionErrorKind::Trap,
            "the workflow trapped".to_owned(),
        ),
        finished_at: now(),
    };
    let seq = history.len() as u64;
    history.push((
        HistoryRecord {
            execution_id: id.clone(),
            seq,
            entry: trapped,
            at: Some(now()),
        },
        now(),
    ));
    // Its next owner reads it from the store.
    let mut owner = processor_of(TunedRunner::EXTERNAL, 1 << 20);
    let write = answer(&id, &stub, ExecutionResult::Ok(json!(7)));
    let mut batch = Batch::new(now());
    let (needed, _) = owner.needs(&batch, &write).expect("not cached: rebuilt");
    block_on(owner.rehydrate(&mut batch, &needed, Some(history))).expect("rebuilt");
    block_on(owner.step(&mut batch, write)).expect("no processor error");
    assert!(appended(&batch.effects).is_empty(), "{:?}", batch.effects);
    let dead = dead_letters(&batch.effects);
    assert_eq!(dead.len(), 1, "{:?}", batch.effects);
    assert_eq!(dead[0].0, DlqReason::Refused);
    assert!(
        dead[0].1.contains(&stub.to_string()) && dead[0].1.contains("finished"),
        "{}",
        dead[0].1
    );
}
