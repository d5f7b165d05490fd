//! Cancellation, termination and deadlines.

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor};
use weir_core::records::HistoryEntry;
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

/// Issue 13 item 5: a cancellation is journalled, cancels everything the execution waits for
/// (activities with a `CancelActivity`, delays, event waits answered cancelled; child
/// workflows cancelled in turn), and the execution finishes `cancelled` whatever it makes of
/// it; a second cancellation and one of a finished execution change nothing; terminate
/// finishes at once; a rebuild replays to the same place.
#[test]
fn a_cancelled_execution_cancels_what_it_waits_for_and_finishes_cancelled() {
    use weir_core::model::Response;

    // A join set with a delay and two activities.
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let mut input = submission_input(&id, Workflow::Mixed, json!([2, 60_000, 5]));
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut input
    {
        s.ffqn = Workflow::Mixed.ffqn();
    }
    let started = step(&mut processor, input);
    let activities: Vec<ExecutionId> = started
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{started:?}");
    let effects = step(&mut processor, cancel_input(&id, false));
    let journal = appended(&effects);
    assert!(
        matches!(&journal[0].1, HistoryEntry::CancelRequested { reason } if reason == "operator"),
        "{journal:?}"
    );
    let interrupted: Vec<&ExecutionId> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelActivity { child, .. } => Some(child),
            _ => None,
        })
        .collect();
    assert_eq!(interrupted, activities.iter().collect::<Vec<_>>());
    // The first cancelled answer fails the workflow (it cannot use it); the delay never
    // fires: its timer goes with the finish.
    assert!(
        journal.iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                result: ExecutionResult::ExecutionError(err), ..
            }) if err.kind == ExecutionErrorKind::Cancelled)),
        "{journal:?}"
    );
    assert!(
        effects.iter().any(|e| matches!(e, Effect::DeleteTimer(_))),
        "{effects:?}"
    );
    assert!(cancelled(published(&effects)), "{effects:?}");
    // Again, and after the finish: nothing.
    assert!(step(&mut processor, cancel_input(&id, false)).is_empty());
    // A rebuild from the journal replays to the same place.
    let mut history = stored(&id, &started, now());
    history.extend(stored(&id, &effects, now()));
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert!(batch.effects.is_empty(), "{:?}", batch.effects);
    assert_eq!(rebuilt.row(&id), processor.row(&id));

    // A parent waiting for a child workflow: the child is cancelled in turn; the parent
    // finishes when the child answers.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Parent, json!([2, 1])),
    );
    let child = started
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.execution_id.clone()),
            _ => None,
        })
        .expect("a child workflow");
    let effects = step(&mut processor, cancel_input(&id, false));
    assert!(
        effects.iter().any(
            |e| matches!(e, Effect::CancelExecution(c) if c.execution_id == child && !c.terminate)
        ),
        "{effects:?}"
    );
    assert_eq!(published(&effects), None, "the parent waits for its child");
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result: ExecutionResult::ExecutionError(weir_core::model::ExecutionError::new(
                ExecutionErrorKind::Cancelled,
                "its parent was cancelled",
            )),
            ran: None,
        })),
        timestamp: None,
    };
    assert!(cancelled(published(&step(&mut processor, answer))));

    // Terminate: at once, whatever it waits for.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let effects = step(&mut processor, cancel_input(&id, true));
    match published(&effects) {
        Some(ExecutionResult::ExecutionError(e)) => {
            assert_eq!(e.kind, ExecutionErrorKind::Cancelled);
            assert!(e.reason.contains("terminated"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }

    // Nobody (yet): kept for its submission, not dead-lettered
    // (`a_cancellation_before_its_submission_is_kept_and_applies_when_it_comes`).
    let nobody = ExecutionId::top_level(ulid::Ulid::new());
    let kept = step(&mut processor, cancel_input(&nobody, false));
    assert!(dead_letters(&kept).is_empty(), "{kept:?}");
    assert!(
        correlation_put(&kept, &nobody.to_string()).is_some(),
        "{kept:?}"
    );
}

/// A runner like the simulation's whose workflows have a default deadline.
struct DefaultDeadline(std::time::Duration);

impl weir_core::runner::WorkflowRunner for DefaultDeadline {
    type Run = <SimRunner as weir_core::runner::WorkflowRunner>::Run;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn default_deadline(&self, _ffqn: &weir_core::model::Ffqn) -> Option<std::time::Duration> {
        Some(self.0)
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        SimRunner.start(execution, history, responses, now).await
    }
}

/// A submission of `workflow` with `params` as a new execution with `deadline`.
fn submission_with_deadline(
    workflow: Workflow,
    params: serde_json::Value,
    deadline: Option<DateTime<Utc>>,
) -> (ExecutionId, Input) {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let mut input = submission_input(&id, workflow, params);
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut input
    {
        s.deadline = deadline;
    }
    (id, input)
}

/// The deadline timer `effects` put, if any.
fn deadline_timer(effects: &[Effect]) -> Option<weir_core::rows::TimerRow> {
    effects.iter().find_map(|e| match e {
        Effect::PutTimer(t) if t.kind == weir_core::rows::TimerKind::Deadline => Some(t.clone()),
        _ => None,
    })
}

/// Whether `result` is the error of an execution timed out at its deadline.
fn timed_out(result: Option<ExecutionResult>) -> bool {
    matches!(result, Some(ExecutionResult::ExecutionError(e))
        if e.kind == ExecutionErrorKind::TimedOut && e.reason.contains("deadline"))
}

/// Issue 13 item 6: a deadline is kept as the earlier of the submission's and the
/// component's default; children never get a later one (a child workflow's submission carries
/// it, an activity's request is bounded by it); at the deadline an execution that has not
/// finished is timed out, what it waits for cancelled (activities interrupted, child
/// workflows terminated, delays answered cancelled, all journalled); a submission already
/// past its deadline never runs; a timer that fires early or after the finish does nothing.
#[test]
fn a_deadline_times_the_execution_out_and_bounds_its_children() {
    use weir_core::model::{DelayOutcome, Response};

    let deadline = now() + chrono::Duration::seconds(10);
    let fire = |processor: &mut Processor<SimRunner>, timer: &weir_core::rows::TimerRow, at| {
        let mut batch = Batch::new(at);
        block_on(processor.step(&mut batch, Input::TimerDue(timer.clone())))
            .expect("no processor error");
        batch.effects
    };

    // A delay and two activities in one join set.
    let mut processor = processor(1 << 20);
    let (id, input) =
        submission_with_deadline(Workflow::Mixed, json!([2, 60_000, 5]), Some(deadline));
    let started = step(&mut processor, input);
    let timer = deadline_timer(&started).expect("a deadline timer");
    assert_eq!(timer.due_at, deadline);
    assert!(
        matches!(&appended(&started)[0].1, HistoryEntry::Created(c) if c.deadline == Some(deadline))
    );
    let activities: Vec<_> = started
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{started:?}");
    assert!(
        activities.iter().all(|r| r.deadline == Some(deadline)),
        "{activities:?}"
    );
    // Early: nothing.
    assert!(
        fire(
            &mut processor,
            &timer,
            deadline - chrono::Duration::seconds(1)
        )
        .is_empty()
    );
    let effects = fire(&mut processor, &timer, deadline);
    assert!(timed_out(published(&effects)), "{effects:?}");
    let interrupted = effects
        .iter()
        .filter(|e| matches!(e, Effect::CancelActivity { .. }))
        .count();
    assert_eq!(interrupted, 2, "{effects:?}");
    let journal = appended(&effects);
    assert!(
        journal.iter().any(|(_, e)| matches!(
            e,
            HistoryEntry::ResponseAppended(Response::DelayFinished {
                outcome: DelayOutcome::Cancelled,
                ..
            })
        )),
        "{journal:?}"
    );
    assert!(
        matches!(journal.last(), Some((_, HistoryEntry::Finished { .. }))),
        "{journal:?}"
    );
    // After the finish: nothing.
    assert!(
        fire(
            &mut processor,
            &timer,
            deadline + chrono::Duration::seconds(1)
        )
        .is_empty()
    );
    // A rebuild from the journal lands in the same place.
    let mut history = stored(&id, &started, now());
    history.extend(stored(&id, &effects, deadline));
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(deadline);
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert_eq!(rebuilt.row(&id), processor.row(&id));

    // A child workflow gets its parent's deadline, and is terminated at it.
    let (_, input) = submission_with_deadline(Workflow::Parent, json!([2, 1]), Some(deadline));
    let started = step(&mut processor, input);
    let child = started
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a child workflow");
    assert_eq!(child.deadline, Some(deadline));
    let timer = deadline_timer(&started).expect("a deadline timer");
    let effects = fire(&mut processor, &timer, deadline);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::CancelExecution(c)
            if c.execution_id == child.execution_id && c.terminate && c.reason.contains("deadline"))),
        "{effects:?}"
    );
    assert!(
        timed_out(published(&effects)),
        "the parent does not wait: {effects:?}"
    );

    // Submitted past its deadline: created and timed out, nothing requested.
    let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), Some(now()));
    let effects = step(&mut processor, input);
    assert!(timed_out(published(&effects)), "{effects:?}");
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
    assert_eq!(
        appended(&effects).len(),
        2,
        "Created, Finished: {effects:?}"
    );

    // An answer that comes after the deadline, before its timer fired: the execution times
    // out first, and the answer finds it finished (no step runs past the deadline).
    let (id, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), Some(deadline));
    let request = step(&mut processor, input)
        .into_iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r),
            _ => None,
        })
        .expect("the activity request");
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(json!(6)),
            ran: None,
        })),
        timestamp: None,
    };
    let mut batch = Batch::new(deadline + chrono::Duration::milliseconds(1));
    block_on(processor.step(&mut batch, answer)).expect("no processor error");
    assert!(timed_out(published(&batch.effects)), "{:?}", batch.effects);
    let journal = appended(&batch.effects);
    assert!(
        journal.iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { result: ExecutionResult::ExecutionError(e), .. })
                if e.kind == ExecutionErrorKind::Cancelled)),
        "the activity is cancelled, its late answer not taken: {journal:?}"
    );
    assert!(
        matches!(journal.last(), Some((_, HistoryEntry::Finished { .. }))),
        "{journal:?}"
    );

    // No deadline: no timer.
    let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), None);
    assert_eq!(deadline_timer(&step(&mut processor, input)), None);

    // The component's default counts from the creation, and the earlier deadline wins.
    let mut defaulted = processor_of(DefaultDeadline(std::time::Duration::from_secs(5)), 1 << 20);
    let table = [
        (None, now() + chrono::Duration::seconds(5)),
        (Some(deadline), now() + chrono::Duration::seconds(5)),
        (
            Some(now() + chrono::Duration::seconds(2)),
            now() + chrono::Duration::seconds(2),
        ),
    ];
    for (asked, kept) in table {
        let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), asked);
        let effects = step(&mut defaulted, input);
        assert_eq!(
            deadline_timer(&effects).map(|t| t.due_at),
            Some(kept),
            "asked {asked:?}"
        );
    }
}

/// Issue 33: a cancellation sent before its execution's submission was read (another topic:
/// Kafka orders them in no way) is kept under the execution's id and applies when the
/// submission comes; without one within `EARLY_CANCEL_WAIT` (the submissions' retention) it
/// goes back marked as having waited, and is dead-lettered then. A terminate is never lost to
/// a cancel kept before it.
#[test]
fn a_cancellation_before_its_submission_is_kept_and_applies_when_it_comes() {
    use weir_core::correlation::EARLY_CANCEL_WAIT;
    use weir_core::records::DlqReason;
    let kept = |effects: &[Effect], id: &ExecutionId| correlation_put(effects, &id.to_string());
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let early = step(&mut processor, cancel_input(&id, false));
    assert!(dead_letters(&early).is_empty(), "{early:?}");
    let state = kept(&early, &id)
        .flatten()
        .expect("the cancellation is kept");
    assert!(state.cancel.as_ref().is_some_and(|c| !c.terminate));
    let terminate = step(&mut processor, cancel_input(&id, true));
    let state = kept(&terminate, &id).flatten().expect("still kept");
    assert!(state.cancel.as_ref().is_some_and(|c| c.terminate));
    let again = step(&mut processor, cancel_input(&id, false));
    assert_eq!(
        kept(&again, &id),
        None,
        "nothing changes, nothing is written"
    );
    let state = processor
        .correlations()
        .find(|s| s.key == id.to_string())
        .expect("still kept");
    assert!(
        state.cancel.as_ref().is_some_and(|c| c.terminate),
        "a terminate stays"
    );
    // The submission creates the execution, which is terminated at once, and forgets the state.
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let journal = appended(&created);
    assert!(
        matches!(&journal[0].1, HistoryEntry::Created(_)),
        "{journal:?}"
    );
    assert!(
        journal
            .iter()
            .any(|(_, e)| matches!(e, HistoryEntry::CancelRequested { .. })),
        "{journal:?}"
    );
    assert!(cancelled(published(&created)), "{created:?}");
    assert_eq!(kept(&created, &id), Some(None), "forgotten");

    // No submission in time: the cancellation goes back marked, then to the DLQ with why.
    let never = ExecutionId::top_level(ulid::Ulid::new());
    step(&mut processor, cancel_input(&never, false));
    let late = now() + EARLY_CANCEL_WAIT;
    assert!(processor.correlation_due(late));
    let mut batch = Batch::new(late);
    processor.expire_correlations(&mut batch);
    let back: Vec<_> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelExecution(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(back.len(), 1, "{:?}", batch.effects);
    assert_eq!(back[0].execution_id, never);
    assert_eq!(back[0].waited_until, Some(late));
    assert_eq!(kept(&batch.effects, &never), Some(None));
    let returned = input_of(&never, Body::Cancel(back[0].clone()));
    let dead = step(&mut processor, returned);
    assert_eq!(dead_letters(&dead)[0].0, DlqReason::Other, "{dead:?}");
    assert!(
        dead_letters(&dead)[0]
            .1
            .contains("waited for its submission"),
        "{dead:?}"
    );
    assert!(kept(&dead, &never).is_none(), "not kept again");
}

/// A cancellation kept for its submission whose wait ran out comes back marked; when its
/// submission was read after that and the execution ran and finished before the marked copy
/// was read, the copy was ignored like any cancellation of a finished execution: a kept
/// cancellation vanished, neither applied nor dead-lettered (`dst_short` seed 105492 of
/// 100000.., `early-cancel`). It is dead-lettered, saying the execution finished without it.
#[test]
fn a_kept_cancellation_that_finds_its_execution_finished_is_dead_lettered() {
    use weir_core::records::DlqReason;
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let finished = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([0, 5])),
    );
    assert!(published(&finished).is_some(), "{finished:?}");
    let marked = |waited_until| {
        input_of(
            &id,
            Body::Cancel(weir_core::records::CancelRequest {
                execution_id: id.clone(),
                reason: "operator".into(),
                terminate: false,
                requested_at: now(),
                waited_until,
            }),
        )
    };
    let copy = step(&mut processor, marked(Some(now())));
    let dead = dead_letters(&copy);
    assert_eq!(dead.len(), 1, "{copy:?}");
    assert_eq!(dead[0].0, DlqReason::Other);
    assert!(dead[0].1.contains("finished"), "{}", dead[0].1);
    assert!(appended(&copy).is_empty(), "{copy:?}");
    // An ordinary cancellation of a finished execution is nothing new: ignored.
    let plain = step(&mut processor, marked(None));
    assert!(
        dead_letters(&plain).is_empty() && plain.is_empty(),
        "{plain:?}"
    );
}
