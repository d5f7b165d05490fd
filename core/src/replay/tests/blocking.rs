//! Blocking and resuming, driven directly against the engine: what a host sees.

use std::time::Duration;

use serde_json::json;

use super::harness::{exec_id, execution, f, now};
use crate::model::{
    ChildKind, DelayOutcome, ExecutionResult, HistoryEvent, JoinSetId, Response, ScheduleAt,
};
use crate::replay::{
    Blocked, Delivery, DeliveryError, Joined, Output, Progress, Replay, ReplayError, UsageError,
};

fn fresh() -> Replay {
    Replay::new(execution(), Vec::new(), Vec::new(), now()).unwrap()
}

fn finished(child: &crate::model::ExecutionId, v: i64) -> Response {
    Response::ChildExecutionFinished {
        child_execution_id: child.clone(),
        result: ExecutionResult::Ok(json!(v)),
        ran: None,
    }
}

#[test]
fn a_response_delivered_while_blocked_resumes_the_same_call() {
    let mut e = fresh();
    let js1 = e.create_join_set().unwrap();
    let js2 = e.create_join_set().unwrap();
    let a = e
        .submit(&js1, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    let b = e
        .submit(&js2, &f("b"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert_eq!(
        e.join_next(&js1).unwrap(),
        Progress::Blocked(Blocked {
            join_set_id: js1.clone()
        })
    );
    assert_eq!(e.blocked_on(), Some(&js1));
    let len = e.history().len();
    // A response for another join set does not wake the run; the retry stays blocked and
    // records nothing.
    assert_eq!(
        e.deliver_response(finished(&b, 2)),
        Ok(Delivery::Accepted { wakes: false })
    );
    assert!(e.join_next(&js1).unwrap().is_blocked());
    assert_eq!(e.history().len(), len);
    // Other calls are refused while blocked.
    assert!(matches!(
        e.random_u64(0, 10),
        Err(ReplayError::Usage(UsageError::RetryMismatch { .. }))
    ));
    assert!(matches!(
        e.join_next(&js2),
        Err(ReplayError::Usage(UsageError::RetryMismatch { .. }))
    ));
    assert_eq!(
        e.deliver_response(finished(&a, 1)),
        Ok(Delivery::Accepted { wakes: true })
    );
    assert_eq!(
        e.join_next(&js1).unwrap(),
        Progress::Ready(Ok(Joined::Child {
            child_execution_id: a,
            ffqn: f("a"),
            result: ExecutionResult::Ok(json!(1))
        }))
    );
    assert_eq!(e.blocked_on(), None);
    assert_eq!(e.history().len(), len, "the JoinNext was recorded once");
    // b's response, delivered earlier, is waiting in its own join set.
    assert!(matches!(
        e.join_next(&js2).unwrap(),
        Progress::Ready(Ok(Joined::Child { .. }))
    ));
}

#[test]
fn blocked_direct_call_and_sleep_resume_on_retry() {
    let mut e = fresh();
    let params = json!([7]);
    assert!(
        e.call(&f("a"), &params, ChildKind::Workflow)
            .unwrap()
            .is_blocked()
    );
    let events = e.take_new_events();
    assert_eq!(events.len(), 3);
    assert_eq!(events[2].version.0, 2);
    // A retry with other arguments is not a retry.
    assert!(matches!(
        e.call(&f("a"), &json!([8]), ChildKind::Workflow),
        Err(ReplayError::Usage(UsageError::RetryMismatch { .. }))
    ));
    let child = exec_id().child(&"o:1-a".parse().unwrap(), 1);
    e.deliver_response(finished(&child, 5)).unwrap();
    assert_eq!(
        e.call(&f("a"), &params, ChildKind::Workflow).unwrap(),
        Progress::Ready(ExecutionResult::Ok(json!(5)))
    );
    assert!(e.take_new_events().is_empty());
    assert_eq!(e.take_outputs().len(), 1, "the child was submitted once");

    let timeout = ScheduleAt::In(Duration::from_secs(60));
    assert!(e.sleep(timeout).unwrap().is_blocked());
    let delay = exec_id().delay(&"o:2-sleep".parse().unwrap(), 1);
    let outputs = e.take_outputs();
    assert_eq!(
        outputs,
        [Output::RequestDelay {
            delay_id: delay.clone(),
            expires_at: now() + chrono::TimeDelta::seconds(60)
        }]
    );
    e.deliver_response(Response::DelayFinished {
        delay_id: delay,
        outcome: DelayOutcome::Cancelled,
    })
    .unwrap();
    assert_eq!(
        e.sleep(timeout).unwrap(),
        Progress::Ready(Err(crate::replay::Cancelled))
    );
}

#[test]
fn sleep_replayed_later_returns_the_recorded_expiry_not_the_clock() {
    let mut e = fresh();
    let timeout = ScheduleAt::In(Duration::from_secs(10));
    assert!(e.sleep(timeout).unwrap().is_blocked());
    let history = e.history().to_vec();
    let delay = exec_id().delay(&"o:1-sleep".parse().unwrap(), 1);
    let response = Response::DelayFinished {
        delay_id: delay,
        outcome: DelayOutcome::Ok,
    };
    let much_later = now() + chrono::TimeDelta::days(3);
    let mut cold = Replay::new(execution(), history, [response], much_later).unwrap();
    assert_eq!(
        cold.sleep(timeout).unwrap(),
        Progress::Ready(Ok(now() + chrono::TimeDelta::seconds(10)))
    );
    assert!(cold.take_effects().events.is_empty());
}

#[test]
fn responses_are_deduplicated_and_checked() {
    let mut e = fresh();
    let js = e.create_join_set().unwrap();
    let a = e
        .submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    let d = e.submit_delay(&js, ScheduleAt::Now).unwrap();
    assert_eq!(
        e.deliver_response(finished(&a, 1)),
        Ok(Delivery::Accepted { wakes: false })
    );
    assert_eq!(
        e.deliver_response(finished(&a, 99)),
        Ok(Delivery::Duplicate)
    );
    // Another execution's child, a grandchild, the execution itself.
    for id in [
        "E_01BX5ZZKBKACTAV9WEVGEMMVRZ.g:1_1".parse().unwrap(),
        a.child(&js, 1),
        exec_id(),
    ] {
        assert!(matches!(
            e.deliver_response(finished(&id, 1)),
            Err(DeliveryError::NotForThisExecution(_))
        ));
    }
    // A child's response for what is a delay, and a delay's for what is a child.
    let as_child = exec_id().child(&js, d.index());
    assert!(matches!(
        e.deliver_response(finished(&as_child, 1)),
        Err(DeliveryError::KindMismatch(_))
    ));
    assert!(matches!(
        e.deliver_response(Response::DelayFinished {
            delay_id: exec_id().delay(&js, 1),
            outcome: DelayOutcome::Ok
        }),
        Err(DeliveryError::KindMismatch(_))
    ));
    let Progress::Ready(Ok(Joined::Child { result, .. })) = e.join_next(&js).unwrap() else {
        panic!()
    };
    assert_eq!(
        result,
        ExecutionResult::Ok(json!(1)),
        "the first delivery counts"
    );
}

#[test]
fn a_history_continuing_past_an_unanswered_join_next_reports_missing_responses() {
    let mut e = fresh();
    let js = e.create_join_set().unwrap();
    let a = e
        .submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    e.deliver_response(finished(&a, 1)).unwrap();
    let _ = e.join_next(&js).unwrap();
    e.random_u64(0, 5).unwrap();
    // Rebuild without the response.
    let mut cold = Replay::new(execution(), e.history().to_vec(), [], now()).unwrap();
    let js = cold.create_join_set().unwrap();
    cold.submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert_eq!(
        cold.join_next(&js),
        Err(ReplayError::MissingResponse {
            version: crate::model::Version(2),
            join_set_id: js
        })
    );
    assert_eq!(cold.finished(), None, "not the workflow's fault");
}

#[test]
fn a_response_answering_no_request_is_reported_when_taken() {
    // Recorded: create g:1, submit one child, join-next. The journal holds a response for a
    // second child that was never requested, ahead of the real one.
    let js = JoinSetId::generated(1).unwrap();
    let mut e = fresh();
    e.create_join_set().unwrap();
    let a = e
        .submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert!(e.join_next(&js).unwrap().is_blocked());
    let bogus = exec_id().child(&js, 2);
    let mut cold = Replay::new(
        execution(),
        e.history().to_vec(),
        [finished(&bogus, 0), finished(&a, 1)],
        now(),
    )
    .unwrap();
    cold.create_join_set().unwrap();
    cold.submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert!(matches!(
        cold.join_next(&js),
        Err(ReplayError::ResponseWithoutRequest {
            version: crate::model::Version(2),
            ..
        })
    ));
}

#[test]
fn calls_after_finish_are_refused_and_fail_cancels_what_is_outstanding() {
    let mut e = fresh();
    let js = e.create_join_set().unwrap();
    let a = e
        .submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    let w = e
        .submit(&js, &f("w"), &json!([]), ChildKind::Workflow)
        .unwrap();
    let d = e.submit_delay(&js, ScheduleAt::Now).unwrap();
    assert!(e.join_next(&js).unwrap().is_blocked());
    e.take_outputs();
    let error =
        crate::model::ExecutionError::new(crate::model::ExecutionErrorKind::TimedOut, "deadline");
    let result = e.fail(error.clone()).unwrap();
    assert_eq!(result, ExecutionResult::ExecutionError(error));
    assert_eq!(
        e.take_outputs(),
        [
            Output::CancelChild {
                child_execution_id: a,
                ffqn: f("a"),
                kind: ChildKind::Activity,
            },
            Output::CancelDelay { delay_id: d },
            Output::Finished {
                result: result.clone()
            }
        ]
    );
    let _ = w; // child workflows are left to finish
    assert_eq!(e.finished(), Some(&result));
    assert_eq!(
        e.random_u64(0, 1),
        Err(ReplayError::Usage(UsageError::Finished))
    );
    assert_eq!(
        e.finish(ExecutionResult::Ok(json!(1))),
        Err(ReplayError::Usage(UsageError::Finished))
    );
    assert!(matches!(
        e.fail(crate::model::ExecutionError::new(
            crate::model::ExecutionErrorKind::Trap,
            "x"
        )),
        Err(ReplayError::Usage(UsageError::Finished))
    ));
    assert!(matches!(
        e.history().last(),
        Some(HistoryEvent::JoinNext { .. })
    ));
}

#[test]
fn a_response_delivered_before_the_replay_reaches_its_join_set_is_kept() {
    // Recorded: g:1 with children a and b (b answered first), then g:2 with child c, blocked.
    let mut e = fresh();
    let js1 = e.create_join_set().unwrap();
    let a = e
        .submit(&js1, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    let b = e
        .submit(&js1, &f("b"), &json!([]), ChildKind::Activity)
        .unwrap();
    e.deliver_response(finished(&b, 2)).unwrap();
    e.deliver_response(finished(&a, 1)).unwrap();
    let first = e.join_next(&js1).unwrap();
    let second = e.join_next(&js1).unwrap();
    let js2 = e.create_join_set().unwrap();
    let c = e
        .submit(&js2, &f("c"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert!(e.join_next(&js2).unwrap().is_blocked());

    // Rebuilt with the journal; c's response arrives before the replay has even created g:2.
    let journal = [finished(&b, 2), finished(&a, 1)];
    let mut cold = Replay::new(execution(), e.history().to_vec(), journal, now()).unwrap();
    assert_eq!(
        cold.deliver_response(finished(&c, 3)),
        Ok(Delivery::Accepted { wakes: false })
    );
    assert_eq!(
        cold.deliver_response(finished(&a, 1)),
        Ok(Delivery::Duplicate)
    );
    assert_eq!(cold.create_join_set().unwrap(), js1);
    cold.submit(&js1, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    cold.submit(&js1, &f("b"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert_eq!(cold.join_next(&js1).unwrap(), first);
    assert_eq!(cold.join_next(&js1).unwrap(), second);
    assert_eq!(cold.create_join_set().unwrap(), js2);
    cold.submit(&js2, &f("c"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert_eq!(
        cold.join_next(&js2).unwrap(),
        Progress::Ready(Ok(Joined::Child {
            child_execution_id: c,
            ffqn: f("c"),
            result: ExecutionResult::Ok(json!(3))
        }))
    );
    assert!(cold.take_new_events().is_empty());
}

/// Issue 11 item 10: a caught-up run refuses a response that answers no request it made (a
/// child index never requested, a join set never opened) instead of queueing it for a
/// join-next that would then fail the execution; the run is left as it was.
#[test]
fn a_caught_up_run_refuses_a_response_to_a_request_it_never_made() {
    let mut e = fresh();
    let js = e.create_join_set().unwrap();
    let a = e
        .submit(&js, &f("a"), &json!([]), ChildKind::Activity)
        .unwrap();
    assert!(e.join_next(&js).unwrap().is_blocked());
    let never_requested = exec_id().child(&js, 7);
    assert!(matches!(
        e.deliver_response(finished(&never_requested, 1)),
        Err(DeliveryError::NoSuchRequest(_))
    ));
    let unopened = JoinSetId::generated(99).unwrap();
    assert!(matches!(
        e.deliver_response(finished(&exec_id().child(&unopened, 1), 1)),
        Err(DeliveryError::NoSuchRequest(_))
    ));
    // The real answer still wakes the run.
    assert_eq!(
        e.deliver_response(finished(&a, 2)),
        Ok(Delivery::Accepted { wakes: true })
    );
}
