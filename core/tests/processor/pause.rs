//! Pausing and resuming an execution (issue 35 item 1).

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor};
use weir_core::records::{DlqReason, HistoryEntry, PauseAction, PauseRequest};
use weir_core::rows::{ExecutionState, TimerKind, TimerRow};
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

fn pause_input(id: &ExecutionId, action: PauseAction) -> Input {
    input_of(
        id,
        Body::Pause(PauseRequest {
            execution_id: id.clone(),
            action,
            reason: "operator".into(),
            requested_at: now(),
            parked: None,
        }),
    )
}

fn activity_requests(effects: &[Effect]) -> Vec<ExecutionId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect()
}

/// Whether a step ran workflow code: it appended an event of the run, or requested work.
fn ran_code(effects: &[Effect]) -> bool {
    appended(effects)
        .iter()
        .any(|(_, e)| matches!(e, HistoryEntry::Event { .. }))
        || !activity_requests(effects).is_empty()
}

fn timers_put(effects: &[Effect], kind: TimerKind) -> Vec<TimerRow> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PutTimer(t) if t.kind == kind => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// Steps a due timer as the driver does: a rebuild from `history` first if the processor
/// asks for one.
fn fire(
    processor: &mut Processor<SimRunner>,
    id: &ExecutionId,
    timer: TimerRow,
    history: &[(weir_core::records::HistoryRecord, DateTime<Utc>)],
    at: DateTime<Utc>,
) -> Vec<Effect> {
    let due = Input::TimerDue(timer);
    let mut batch = Batch::new(at);
    if processor.needs(&batch, &due).is_some() {
        block_on(processor.rehydrate(&mut batch, id, Some(history.to_vec()))).expect("rebuilt");
    }
    block_on(processor.step(&mut batch, due)).expect("no processor error");
    batch.effects
}

/// A paused execution runs no code: an answer that comes for it is journalled and waits; a
/// second pause changes nothing. Resumed, its run is rebuilt from the history (the answer
/// journalled while it was paused included) by a `retry` timer due at once, and goes on.
#[test]
fn a_paused_execution_journals_what_comes_and_goes_on_when_resumed() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let first = activity_requests(&created);
    assert_eq!(first.len(), 1, "{created:?}");
    let mut history = stored(&id, &created, now());

    let paused = step(&mut processor, pause_input(&id, PauseAction::Pause));
    assert!(
        matches!(appended(&paused).as_slice(), [(_, HistoryEntry::Paused { reason })] if reason == "operator"),
        "{paused:?}"
    );
    assert_eq!(
        processor.row(&id).map(|r| r.state),
        Some(ExecutionState::Paused)
    );
    history.extend(stored(&id, &paused, now()));
    let again = step(&mut processor, pause_input(&id, PauseAction::Pause));
    assert!(
        again.is_empty(),
        "a second pause changes nothing: {again:?}"
    );

    let answered = step(
        &mut processor,
        answer(&id, &first[0], ExecutionResult::Ok(json!(6))),
    );
    assert!(
        matches!(
            appended(&answered).as_slice(),
            [(_, HistoryEntry::ResponseAppended(_))]
        ),
        "the answer is journalled: {answered:?}"
    );
    assert!(
        !ran_code(&answered),
        "no code ran while paused: {answered:?}"
    );
    history.extend(stored(&id, &answered, now()));

    let resumed = step(&mut processor, pause_input(&id, PauseAction::Resume));
    assert!(
        matches!(
            appended(&resumed).as_slice(),
            [(_, HistoryEntry::Resumed { .. })]
        ),
        "{resumed:?}"
    );
    assert!(
        !ran_code(&resumed),
        "the run is rebuilt once the batch is stored"
    );
    assert_eq!(
        processor.row(&id).map(|r| r.state),
        Some(ExecutionState::Running)
    );
    history.extend(stored(&id, &resumed, now()));
    let retry = timers_put(&resumed, TimerKind::Retry);
    assert_eq!(retry.len(), 1, "{resumed:?}");
    assert_eq!(retry[0].due_at, now());

    let rebuilt = fire(&mut processor, &id, retry[0].clone(), &history, now());
    let second = activity_requests(&rebuilt);
    assert_eq!(
        second.len(),
        1,
        "the run goes on with its next step: {rebuilt:?}"
    );
    assert_ne!(second[0], first[0]);
    let finished = step(
        &mut processor,
        answer(&id, &second[0], ExecutionResult::Ok(json!(7))),
    );
    assert!(published(&finished).is_some(), "{finished:?}");
}

/// A rebuild of a paused execution (a new owner, an eviction) starts no run: what comes is
/// journalled only, and its due delay fires into the journal.
#[test]
fn a_paused_execution_rebuilt_from_the_store_starts_no_run() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Sleepy, json!([1, 5_000, 0])),
    );
    let delay = timers_put(&created, TimerKind::Delay);
    assert_eq!(delay.len(), 1, "{created:?}");
    let paused = step(&mut processor, pause_input(&id, PauseAction::Pause));
    let mut history = stored(&id, &created, now());
    history.extend(stored(&id, &paused, now()));

    let mut owner = crate::fixtures::processor(1 << 20);
    let later = now() + chrono::Duration::seconds(6);
    let fired = fire(&mut owner, &id, delay[0].clone(), &history, later);
    assert!(
        matches!(
            appended(&fired).as_slice(),
            [(_, HistoryEntry::ResponseAppended(_))]
        ),
        "the delay is journalled: {fired:?}"
    );
    assert!(!ran_code(&fired), "no code ran: {fired:?}");
    assert_eq!(
        owner.row(&id).map(|r| r.state),
        Some(ExecutionState::Paused)
    );
}

/// Bad input changes nothing: pausing or resuming an execution that does not exist, or one
/// that has finished, is dead-lettered with why; resuming one that is not paused is ignored.
#[test]
fn pausing_what_does_not_exist_or_has_finished_is_refused() {
    let mut processor = processor(1 << 20);
    let unknown = ExecutionId::top_level(ulid::Ulid::new());
    let effects = step(&mut processor, pause_input(&unknown, PauseAction::Pause));
    assert!(
        matches!(dead_letters(&effects).as_slice(), [(DlqReason::Other, e)] if e.contains("does not exist")),
        "{effects:?}"
    );
    assert!(appended(&effects).is_empty());

    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([1, 5])),
    );
    let not_paused = step(&mut processor, pause_input(&id, PauseAction::Resume));
    assert!(not_paused.is_empty(), "{not_paused:?}");
    let child = activity_requests(&created);
    let finished = step(
        &mut processor,
        answer(&id, &child[0], ExecutionResult::Ok(json!(6))),
    );
    assert!(published(&finished).is_some(), "{finished:?}");
    for action in [PauseAction::Pause, PauseAction::Resume] {
        let effects = step(&mut processor, pause_input(&id, action));
        assert!(
            matches!(dead_letters(&effects).as_slice(), [(DlqReason::Refused, e)] if e.contains("has finished")),
            "{effects:?}"
        );
        assert!(appended(&effects).is_empty(), "{effects:?}");
    }
}

/// A cancellation of a paused execution resumes it, so that it can compensate: the
/// cancellations and `Resumed` are journalled and its run is rebuilt; a termination
/// finishes it at once.
#[test]
fn a_cancelled_paused_execution_is_resumed_and_a_terminated_one_finishes() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    step(&mut processor, pause_input(&id, PauseAction::Pause));
    let cancel = step(&mut processor, cancel_input(&id, false));
    let entries = appended(&cancel);
    assert!(
        matches!(
            entries.first(),
            Some((_, HistoryEntry::CancelRequested { .. }))
        ),
        "{entries:?}"
    );
    assert!(
        matches!(entries.last(), Some((_, HistoryEntry::Resumed { reason })) if reason.contains("cancellation")),
        "{entries:?}"
    );
    assert_eq!(timers_put(&cancel, TimerKind::Retry).len(), 1, "{cancel:?}");
    assert!(!ran_code(&cancel), "{cancel:?}");

    let other = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&other, Workflow::Seq, json!([2, 5])),
    );
    step(&mut processor, pause_input(&other, PauseAction::Pause));
    let terminated = step(&mut processor, cancel_input(&other, true));
    assert!(cancelled(published(&terminated)), "{terminated:?}");
}

/// A scheduled execution paused before its start time does not start when its time comes;
/// resumed after it, its schedule timer is put again, due at once, and starts it.
#[test]
fn a_scheduled_execution_paused_past_its_start_starts_when_resumed() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let start_at = now() + chrono::Duration::seconds(10);
    let mut submission = submission_input(&id, Workflow::Seq, json!([1, 5]));
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut submission
    {
        s.scheduled_at = Some(start_at);
    }
    let created = step(&mut processor, submission);
    let schedule = timers_put(&created, TimerKind::Schedule);
    assert_eq!(schedule.len(), 1, "{created:?}");
    step(&mut processor, pause_input(&id, PauseAction::Pause));

    let later = start_at + chrono::Duration::seconds(5);
    let due = step_at(&mut processor, Input::TimerDue(schedule[0].clone()), later);
    assert!(
        !ran_code(&due),
        "a paused execution does not start: {due:?}"
    );

    let resumed = step_at(&mut processor, pause_input(&id, PauseAction::Resume), later);
    let again = timers_put(&resumed, TimerKind::Schedule);
    assert!(
        matches!(again.as_slice(), [t] if t.due_at == later),
        "put again, due now: {resumed:?}"
    );
    let started = step_at(&mut processor, Input::TimerDue(again[0].clone()), later);
    assert_eq!(activity_requests(&started).len(), 1, "{started:?}");
}

/// The retry notices of each `RetryParkedActivity` of `effects`: (parent, activity).
fn retry_notices(effects: &[Effect]) -> Vec<(ExecutionId, ExecutionId)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RetryParkedActivity { parent, child, .. } => {
                Some((parent.clone(), child.clone()))
            }
            _ => None,
        })
        .collect()
}

fn cancelled_activities(effects: &[Effect]) -> Vec<ExecutionId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelActivity { child, .. } => Some(child.clone()),
            _ => None,
        })
        .collect()
}

/// An execution paused by its activity worker (`on_exhausted = "pause"`: its activity is
/// parked): its resume sends a retry notice for each activity it still waits for, which the
/// parked one takes as a fresh budget; nothing is requested again. A cancellation of the
/// paused execution cancels the activity as any other (`CancelActivity`, no notice), and so
/// does a termination.
#[test]
fn a_resume_sends_retry_notices_and_a_cancellation_cancels_the_parked_activity() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let first = activity_requests(&created);
    assert_eq!(first.len(), 1, "{created:?}");
    let paused = step(&mut processor, pause_input(&id, PauseAction::Pause));
    assert!(retry_notices(&paused).is_empty(), "{paused:?}");

    let resumed = step(&mut processor, pause_input(&id, PauseAction::Resume));
    assert_eq!(retry_notices(&resumed), [(id.clone(), first[0].clone())]);
    assert!(activity_requests(&resumed).is_empty(), "{resumed:?}");

    // Parked again and paused: cancelled instead of resumed.
    step(&mut processor, pause_input(&id, PauseAction::Pause));
    let cancel = step(&mut processor, cancel_input(&id, false));
    assert_eq!(cancelled_activities(&cancel), first, "{cancel:?}");
    assert!(retry_notices(&cancel).is_empty(), "{cancel:?}");
    assert!(activity_requests(&cancel).is_empty(), "{cancel:?}");

    let other = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&other, Workflow::Seq, json!([2, 5])),
    );
    let its = activity_requests(&created);
    step(&mut processor, pause_input(&other, PauseAction::Pause));
    let terminated = step(&mut processor, cancel_input(&other, true));
    assert_eq!(cancelled_activities(&terminated), its, "{terminated:?}");
    assert!(retry_notices(&terminated).is_empty(), "{terminated:?}");
    assert!(cancelled(published(&terminated)), "{terminated:?}");
}

/// An execution that finishes while it still waits for an activity (here a fan-out whose
/// first answer is an error its workflow does not handle: it traps with its second activity
/// outstanding) cancels that activity, as a cancellation, a termination or a deadline would
/// (`CancelActivity`). Under `on_exhausted = "pause"` the activity may be parked, and a
/// parked request nobody cancels stays parked for good, holding one of its partition's
/// places (the simulation's seed 104 of `dst_short` with `exhausted_pauses`). An execution
/// that finishes waiting for nothing cancels nothing.
#[test]
fn a_finished_execution_cancels_the_activities_it_still_waits_for() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Fanout, json!([2, 5])),
    );
    let requested = activity_requests(&created);
    assert_eq!(requested.len(), 2, "{created:?}");
    let failed = step(
        &mut processor,
        answer(&id, &requested[0], ExecutionResult::Err(json!("broken"))),
    );
    assert!(
        matches!(published(&failed), Some(ExecutionResult::ExecutionError(e))
            if e.kind == weir_core::model::ExecutionErrorKind::Trap),
        "{failed:?}"
    );
    assert_eq!(
        cancelled_activities(&failed),
        [requested[1].clone()],
        "{failed:?}"
    );
    // Its late answer is ignored, and cancels nothing again.
    let late = step(
        &mut processor,
        answer(&id, &requested[1], ExecutionResult::Ok(json!(13))),
    );
    assert!(cancelled_activities(&late).is_empty(), "{late:?}");

    let (_, _, done) = fanout_to_its_end(&mut processor);
    assert!(cancelled_activities(&done).is_empty(), "{done:?}");
}

/// A `Fanout [2, 5]` run to its end, both activities answered (11 and 13): the execution,
/// its activities, and the effects of the step that finished it (published 24).
fn fanout_to_its_end(
    processor: &mut Processor<SimRunner>,
) -> (ExecutionId, Vec<ExecutionId>, Vec<Effect>) {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        processor,
        submission_input(&id, Workflow::Fanout, json!([2, 5])),
    );
    let its = activity_requests(&created);
    step(
        processor,
        answer(&id, &its[0], ExecutionResult::Ok(json!(11))),
    );
    let done = step(
        processor,
        answer(&id, &its[1], ExecutionResult::Ok(json!(13))),
    );
    assert_eq!(
        published(&done),
        Some(ExecutionResult::Ok(json!(24))),
        "{done:?}"
    );
    (id, its, done)
}

fn parked_pause(id: &ExecutionId, activity: &ExecutionId) -> Input {
    input_of(
        id,
        Body::Pause(PauseRequest {
            execution_id: id.clone(),
            action: PauseAction::Pause,
            reason: "activity retries exhausted".into(),
            requested_at: now(),
            parked: Some(weir_core::records::ParkedActivity {
                execution_id: activity.clone(),
                ffqn: weir_core::sim::workflows::double_ffqn(),
            }),
        }),
    )
}

/// The pause an activity worker asks for when it parks an activity names it: an execution
/// that still waits for it pauses; one that no longer does — it finished, or the activity
/// was answered since — cancels it instead (nothing pauses, nothing is dead-lettered), and
/// so does a request for an execution that does not exist: no park outlives the interest in
/// it (`dst_short` with `exhausted_pauses`, seed 62: a park after its parent's finish stayed
/// for good, its partition's place held).
#[test]
fn a_parked_activity_nobody_waits_for_is_cancelled_instead_of_pausing() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Fanout, json!([2, 5])),
    );
    let requested = activity_requests(&created);
    assert_eq!(requested.len(), 2, "{created:?}");
    // The first answered: a park of it is stale; the second still awaited: it pauses.
    step(
        &mut processor,
        answer(&id, &requested[0], ExecutionResult::Ok(json!(11))),
    );
    let stale = step(&mut processor, parked_pause(&id, &requested[0]));
    assert_eq!(
        cancelled_activities(&stale),
        [requested[0].clone()],
        "{stale:?}"
    );
    assert!(appended(&stale).is_empty(), "no Paused: {stale:?}");
    assert!(dead_letters(&stale).is_empty(), "{stale:?}");
    let paused = step(&mut processor, parked_pause(&id, &requested[1]));
    assert!(
        matches!(
            appended(&paused).as_slice(),
            [(_, HistoryEntry::Paused { .. })]
        ),
        "{paused:?}"
    );
    assert!(cancelled_activities(&paused).is_empty(), "{paused:?}");
    // A finished execution (its answer came from an attempt whose progress was lost, the
    // request then ran again and was parked): the park is cancelled, not refused.
    let (other, its, _) = fanout_to_its_end(&mut processor);
    let late = step(&mut processor, parked_pause(&other, &its[1]));
    assert_eq!(cancelled_activities(&late), [its[1].clone()], "{late:?}");
    assert!(dead_letters(&late).is_empty(), "{late:?}");
    assert!(appended(&late).is_empty(), "{late:?}");
    // An execution nobody knows.
    let nobody = ExecutionId::top_level(ulid::Ulid::new());
    let activity = nobody.child(
        &weir_core::model::JoinSetId::one_off(1, "act").expect("a join set"),
        1,
    );
    let unknown = step(&mut processor, parked_pause(&nobody, &activity));
    assert_eq!(cancelled_activities(&unknown), [activity], "{unknown:?}");
    assert!(dead_letters(&unknown).is_empty(), "{unknown:?}");
}
