//! Join set creation: generated, named, one-off (direct call and sleep), misuse.

use std::time::Duration;

use serde_json::json;

use super::harness::{exec_id, f, kinds, scenario};
use crate::model::{ChildKind, HistoryEvent, JoinSetId, JoinSetIdError, JoinSetKind, ScheduleAt};
use crate::replay::{CreateJoinSetError, ReplayError, UsageError};

#[test]
fn generated_join_sets_are_numbered_by_creation() {
    let out = scenario(|run| {
        let a = run.create_join_set()?;
        let named = run.create_named("orders")?.unwrap();
        let b = run.create_join_set()?;
        assert_eq!(a.to_string(), "g:1");
        assert_eq!(named.to_string(), "n:orders");
        // Every creation advances the counter, named ones included.
        assert_eq!(b.to_string(), "g:3");
        run.finish_ok()
    });
    assert_eq!(
        out.history,
        ["g:1", "n:orders", "g:3"]
            .map(|js| HistoryEvent::JoinSetCreate {
                join_set_id: js.parse().unwrap()
            })
            .to_vec()
    );
}

#[test]
fn named_join_set_reuse_is_a_conflict_and_bad_names_are_rejected() {
    let out = scenario(|run| {
        let js = run.create_named("batch-1")?.unwrap();
        assert_eq!(js.kind(), JoinSetKind::Named);
        assert_eq!(
            run.create_named("batch-1")?,
            Err(CreateJoinSetError::Conflict(js.clone()))
        );
        assert!(matches!(
            run.create_named("a.b")?,
            Err(CreateJoinSetError::InvalidName(
                JoinSetIdError::InvalidChar { ch: '.', .. }
            ))
        ));
        assert_eq!(
            run.create_named("")?,
            Err(CreateJoinSetError::InvalidName(JoinSetIdError::EmptyName))
        );
        assert!(matches!(
            run.create_named(&"x".repeat(65))?,
            Err(CreateJoinSetError::InvalidName(
                JoinSetIdError::NameTooLong { .. }
            ))
        ));
        // Failed creations record nothing and consume no counter.
        assert_eq!(run.create_join_set()?.to_string(), "g:2");
        run.finish_ok()
    });
    assert_eq!(kinds(&out.history), ["JoinSetCreate", "JoinSetCreate"]);
}

#[test]
fn direct_call_uses_a_one_off_join_set() {
    let out = scenario(|run| {
        run.create_join_set()?;
        let result = run.call("charge", json!([42]), ChildKind::Activity)?;
        assert_eq!(
            result,
            crate::model::ExecutionResult::Ok(json!({"fn": "charge", "params": [42]}))
        );
        run.finish_ok()
    });
    let js: JoinSetId = "o:2-charge".parse().unwrap();
    let child = exec_id().child(&js, 1);
    assert_eq!(
        child.to_string(),
        format!("E_{}.o:2-charge_1", super::harness::ULID)
    );
    assert_eq!(
        out.history[1..],
        [
            HistoryEvent::JoinSetCreate {
                join_set_id: js.clone()
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: js.clone(),
                request: crate::model::JoinSetRequest::ChildExecutionRequest {
                    child_execution_id: child,
                    target_ffqn: f("charge"),
                    params: json!([42]),
                    child_kind: ChildKind::Activity,
                },
            },
            HistoryEvent::JoinNext {
                join_set_id: js,
                closing: false,
                requested_ffqn: Some(f("charge")),
            },
        ]
    );
}

#[test]
fn sleep_uses_a_one_off_join_set() {
    let out = scenario(|run| {
        run.sleep(ScheduleAt::In(Duration::from_secs(5)))?.unwrap();
        run.finish_ok()
    });
    assert_eq!(
        kinds(&out.history),
        ["JoinSetCreate", "JoinSetRequest(DelayRequest)", "JoinNext"]
    );
    let HistoryEvent::JoinSetRequest {
        join_set_id,
        request: crate::model::JoinSetRequest::DelayRequest { delay_id, .. },
    } = &out.history[1]
    else {
        panic!("{:?}", out.history[1]);
    };
    assert_eq!(join_set_id.to_string(), "o:1-sleep");
    assert_eq!(
        delay_id.to_string(),
        format!("Delay_{}.o:1-sleep_1", super::harness::ULID)
    );
}

#[test]
fn one_off_label_is_cut_to_the_name_limit() {
    let long = format!("a{}", "b".repeat(80));
    let out = scenario(|run| run.call(&long, json!([]), ChildKind::Activity));
    let HistoryEvent::JoinSetCreate { join_set_id } = &out.history[0] else {
        panic!()
    };
    assert_eq!(
        join_set_id.name().len(),
        crate::model::join_set::MAX_NAME_LEN
    );
    assert!(join_set_id.name().starts_with("1-abbb"));
}

#[test]
fn unknown_and_closed_join_sets_are_host_errors() {
    let out = scenario(|run| {
        let bogus = JoinSetId::named("never-created").unwrap();
        assert_eq!(
            run.engine
                .submit(&bogus, &f("x"), &json!([]), ChildKind::Activity),
            Err(ReplayError::Usage(UsageError::UnknownJoinSet(
                bogus.clone()
            )))
        );
        let js = run.create_join_set()?;
        run.close(&js)?;
        assert_eq!(
            run.engine.submit_delay(&js, ScheduleAt::Now),
            Err(ReplayError::Usage(UsageError::JoinSetClosed(js.clone())))
        );
        assert_eq!(
            run.engine.join_next(&js),
            Err(ReplayError::Usage(UsageError::JoinSetClosed(js.clone())))
        );
        run.finish_ok()
    });
    assert_eq!(kinds(&out.history), ["JoinSetCreate"]);
}
