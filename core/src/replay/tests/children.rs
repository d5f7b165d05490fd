//! Submitting children and delays, join-next, await-next, get, direct calls.

use std::time::Duration;

use serde_json::json;

use super::harness::{exec_id, f, kinds, scenario};
use crate::model::{
    ChildKind, DelayOutcome, ExecutionErrorKind, ExecutionResult, HistoryEvent, JoinSetId,
    ScheduleAt,
};
use crate::replay::{AllProcessed, AwaitNextError, GetError, Joined, Output};

fn ok(name: &str, params: serde_json::Value) -> ExecutionResult {
    ExecutionResult::Ok(json!({"fn": name, "params": params}))
}

#[test]
fn submit_returns_derived_ids_and_join_next_follows_arrival_order() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        let a = run.submit(&js, "a", json!([1]), ChildKind::Activity)?;
        let b = run.submit(&js, "fail-b", json!([2]), ChildKind::Workflow)?;
        assert_eq!(a, exec_id().child(&js, 1));
        assert_eq!(b, exec_id().child(&js, 2));
        assert_eq!(a.parent(), Some(exec_id()));
        run.arrive_child(&b);
        run.arrive_child(&a);
        assert_eq!(
            run.join_next(&js)?,
            Ok(Joined::Child {
                child_execution_id: b.clone(),
                ffqn: f("fail-b"),
                result: ExecutionResult::Err(json!({"failed": "fail-b"})),
            })
        );
        assert_eq!(
            run.join_next(&js)?,
            Ok(Joined::Child {
                child_execution_id: a.clone(),
                ffqn: f("a"),
                result: ok("a", json!([1])),
            })
        );
        run.finish_ok()
    });
    assert_eq!(
        kinds(&out.history),
        [
            "JoinSetCreate",
            "JoinSetRequest(ChildExecutionRequest)",
            "JoinSetRequest(ChildExecutionRequest)",
            "JoinNext",
            "JoinNext"
        ]
    );
    let submits: Vec<_> = out
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::SubmitChild {
                child_execution_id,
                kind,
                ..
            } => Some((child_execution_id.to_string(), *kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        submits,
        [
            (
                format!("E_{}.g:1_1", super::harness::ULID),
                ChildKind::Activity
            ),
            (
                format!("E_{}.g:1_2", super::harness::ULID),
                ChildKind::Workflow
            )
        ]
    );
}

#[test]
fn join_next_returns_delays_and_child_errors() {
    scenario(|run| {
        let js = run.create_join_set()?;
        let d = run.submit_delay(&js, ScheduleAt::In(Duration::from_secs(30)))?;
        let t = run.submit(&js, "trap-x", json!([]), ChildKind::Activity)?;
        assert_eq!(d, exec_id().delay(&js, 1));
        assert_eq!(
            run.join_next(&js)?,
            Ok(Joined::Delay {
                delay_id: d,
                outcome: DelayOutcome::Ok
            })
        );
        let Ok(Joined::Child {
            child_execution_id,
            result: ExecutionResult::ExecutionError(e),
            ..
        }) = run.join_next(&js)?
        else {
            panic!("expected the trapped child");
        };
        assert_eq!(child_execution_id, t);
        assert_eq!(e.kind, ExecutionErrorKind::Trap);
        run.finish_ok()
    });
}

#[test]
fn join_next_with_nothing_outstanding_is_all_processed() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        assert_eq!(run.join_next(&js)?, Err(AllProcessed));
        run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        assert!(run.join_next(&js)?.is_ok());
        assert_eq!(run.join_next(&js)?, Err(AllProcessed));
        run.finish_ok()
    });
    assert_eq!(
        kinds(&out.history),
        [
            "JoinSetCreate",
            "JoinNextTooMany",
            "JoinSetRequest(ChildExecutionRequest)",
            "JoinNext",
            "JoinNextTooMany"
        ]
    );
    assert_eq!(
        out.history[1],
        HistoryEvent::JoinNextTooMany {
            join_set_id: JoinSetId::generated(1).unwrap(),
            requested_ffqn: None
        }
    );
}

#[test]
fn await_next_returns_the_typed_result_or_a_function_mismatch() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        let a = run.submit(&js, "a", json!([1]), ChildKind::Activity)?;
        let b = run.submit(&js, "b", json!([2]), ChildKind::Activity)?;
        let d = run.submit_delay(&js, ScheduleAt::Now)?;
        run.arrive_child(&a);
        run.arrive_child(&b);
        run.arrive_delay(&d);
        assert_eq!(
            run.await_next(&js, "a")?,
            Ok((a.clone(), ok("a", json!([1]))))
        );
        // The next response is b's: a mismatch, and b's response is consumed.
        assert_eq!(
            run.await_next(&js, "a")?,
            Err(AwaitNextError::FunctionMismatch {
                requested: f("a"),
                actual: Box::new(Joined::Child {
                    child_execution_id: b.clone(),
                    ffqn: f("b"),
                    result: ok("b", json!([2])),
                }),
            })
        );
        assert_eq!(run.get(&b, "b")?, Ok(ok("b", json!([2]))));
        // A delay is a mismatch too.
        assert_eq!(
            run.await_next(&js, "a")?,
            Err(AwaitNextError::FunctionMismatch {
                requested: f("a"),
                actual: Box::new(Joined::Delay {
                    delay_id: d,
                    outcome: DelayOutcome::Ok
                }),
            })
        );
        assert_eq!(run.await_next(&js, "a")?, Err(AwaitNextError::AllProcessed));
        run.finish_ok()
    });
    let js = JoinSetId::generated(1).unwrap();
    assert_eq!(
        out.history[4..],
        [
            HistoryEvent::JoinNext {
                join_set_id: js.clone(),
                closing: false,
                requested_ffqn: Some(f("a"))
            },
            HistoryEvent::JoinNext {
                join_set_id: js.clone(),
                closing: false,
                requested_ffqn: Some(f("a"))
            },
            HistoryEvent::JoinNext {
                join_set_id: js.clone(),
                closing: false,
                requested_ffqn: Some(f("a"))
            },
            HistoryEvent::JoinNextTooMany {
                join_set_id: js,
                requested_ffqn: Some(f("a"))
            },
        ]
    );
}

#[test]
fn get_returns_processed_results_only() {
    scenario(|run| {
        let js = run.create_join_set()?;
        let a = run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        let b = run.submit(&js, "b", json!([]), ChildKind::Activity)?;
        run.arrive_child(&a);
        run.arrive_child(&b);
        // Arrived but not processed by a join-next.
        assert_eq!(run.get(&a, "a")?, Err(GetError::NotFound));
        run.join_next(&js)?.unwrap();
        assert_eq!(run.get(&a, "a")?, Ok(ok("a", json!([]))));
        assert_eq!(
            run.get(&a, "b")?,
            Err(GetError::FunctionMismatch {
                requested: f("b"),
                actual: f("a")
            })
        );
        assert_eq!(run.get(&b, "b")?, Err(GetError::NotFound));
        // Not a child of this execution: a grandchild, the execution itself, a stranger.
        assert_eq!(run.get(&a.child(&js, 1), "a")?, Err(GetError::NotFound));
        assert_eq!(run.get(&exec_id(), "a")?, Err(GetError::NotFound));
        let other: crate::model::ExecutionId =
            "E_01BX5ZZKBKACTAV9WEVGEMMVRZ.g:1_1".parse().unwrap();
        assert_eq!(run.get(&other, "a")?, Err(GetError::NotFound));
        run.join_next(&js)?.unwrap();
        assert_eq!(run.get(&b, "b")?, Ok(ok("b", json!([]))));
        run.finish_ok()
    });
}

#[test]
fn direct_call_returns_the_childs_result() {
    let out = scenario(|run| {
        let r1 = run.call("a", json!(["x"]), ChildKind::Activity)?;
        let r2 = run.call("fail-w", json!([]), ChildKind::Workflow)?;
        Ok((r1, r2))
    });
    assert_eq!(out.value.0, ok("a", json!(["x"])));
    assert_eq!(
        out.value.1,
        ExecutionResult::Err(json!({"failed": "fail-w"}))
    );
    assert_eq!(out.history.len(), 6);
    // Two blocks, each resolved by a rebuild in the cold run.
}

#[test]
fn sleep_returns_the_recorded_expiry() {
    let out = scenario(|run| {
        let t1 = run.sleep(ScheduleAt::In(Duration::from_secs(90)))?;
        let at = super::harness::now() + chrono::TimeDelta::hours(5);
        let t2 = run.sleep(ScheduleAt::At(at))?;
        Ok((t1, t2))
    });
    assert_eq!(
        out.value,
        (
            Ok(super::harness::now() + chrono::TimeDelta::seconds(90)),
            Ok(super::harness::now() + chrono::TimeDelta::hours(5))
        )
    );
}
