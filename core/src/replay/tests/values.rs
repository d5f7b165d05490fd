//! Persisted random values, schedules and stubs.

use std::time::Duration;

use serde_json::json;

use super::harness::{exec_id, execution, f, kinds, now, scenario};
use crate::model::{
    ChildKind, ExecutionResult, HistoryEvent, PersistValue, ScheduleAt, StubOutcome,
};
use crate::replay::{Output, Replay, ReplayError, StubError, UsageError};

#[test]
fn random_values_are_persisted_and_replayed() {
    let out = scenario(|run| {
        let mut values = Vec::new();
        for _ in 0..20 {
            values.push(run.random_u64(10, 15)?);
        }
        let big = run.random_u64(0, u64::MAX)?;
        let s1 = run.random_string(3, 9)?;
        let s2 = run.random_string(0, 1)?;
        Ok((values, big, s1, s2))
    });
    let (values, _, s1, s2) = &out.value;
    assert!(values.iter().all(|v| (10..15).contains(v)), "{values:?}");
    assert!(
        values.iter().any(|v| *v != values[0]),
        "draws vary: {values:?}"
    );
    assert!((3..9).contains(&s1.len()) && s1.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(s2, "");
    assert_eq!(
        out.history[21],
        HistoryEvent::Persist {
            value: PersistValue::RandomString {
                min_length: 3,
                max_length_exclusive: 9,
                value: s1.clone()
            }
        }
    );
}

#[test]
fn invalid_random_ranges_are_refused() {
    let mut e = Replay::new(execution(), vec![], vec![], now()).unwrap();
    for (min, max) in [(5, 5), (6, 5)] {
        assert!(matches!(
            e.random_u64(min, max),
            Err(ReplayError::Usage(UsageError::InvalidRange { .. }))
        ));
        assert!(matches!(
            e.random_string(min, max),
            Err(ReplayError::Usage(UsageError::InvalidRange { .. }))
        ));
    }
    assert!(
        e.random_string(0, crate::replay::MAX_RANDOM_STRING_LEN + 2)
            .is_err()
    );
    assert!(
        e.random_string(0, crate::replay::MAX_RANDOM_STRING_LEN + 1)
            .is_ok()
    );
    assert_eq!(e.history().len(), 1);
}

#[test]
fn schedule_generates_top_level_ids_and_records_the_intention() {
    let at = now() + chrono::TimeDelta::days(1);
    let out = scenario(|run| {
        let a = run.schedule("job", json!([1]), ScheduleAt::Now)?;
        let b = run.schedule("job", json!([1]), ScheduleAt::At(at))?;
        let c = run.schedule("job", json!([2]), ScheduleAt::In(Duration::from_secs(60)))?;
        Ok(vec![a, b, c])
    });
    let ids = &out.value;
    assert!(ids.iter().all(|id| id.is_top_level() && *id != exec_id()));
    assert!(ids[0] != ids[1] && ids[1] != ids[2]);
    // The ULID's time is the creation time.
    assert_eq!(
        ids[0].root().timestamp_ms(),
        now().timestamp_millis() as u64
    );
    let scheduled: Vec<_> = out
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Schedule {
                execution_id,
                at,
                params,
                ..
            } => Some((execution_id.clone(), *at, params.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        scheduled,
        [
            (ids[0].clone(), now(), json!([1])),
            (ids[1].clone(), at, json!([1])),
            (
                ids[2].clone(),
                now() + chrono::TimeDelta::seconds(60),
                json!([2])
            )
        ]
    );
    let HistoryEvent::Schedule {
        intention, ffqn, ..
    } = &out.history[2]
    else {
        panic!()
    };
    assert_eq!(*intention, ScheduleAt::In(Duration::from_secs(60)));
    assert_eq!(*ffqn, f("job"));
}

#[test]
fn stub_writes_once_accepts_the_same_value_and_conflicts_on_another() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        let s = run.submit(&js, "approve", json!([]), ChildKind::Stub)?;
        let yes = ExecutionResult::Ok(json!("yes"));
        let no = ExecutionResult::Ok(json!("no"));
        assert_eq!(run.stub(&s, yes.clone())?, Ok(()));
        assert_eq!(run.stub(&s, yes.clone())?, Ok(()));
        assert_eq!(run.stub(&s, no.clone())?, Err(StubError::Conflict));
        let (id, result) = run.await_next(&js, "approve")?.unwrap();
        assert_eq!((id, result), (s.clone(), yes.clone()));
        // Still the same after the response was processed.
        assert_eq!(run.stub(&s, no)?, Err(StubError::Conflict));
        assert_eq!(run.stub(&s, yes)?, Ok(()));
        // Only stub children can be stubbed.
        let a = run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        assert_eq!(
            run.stub(&a, ExecutionResult::Ok(json!(1)))?,
            Err(StubError::NotFound)
        );
        let stranger = exec_id().child(&js, 9);
        assert_eq!(
            run.stub(&stranger, ExecutionResult::Ok(json!(1)))?,
            Err(StubError::NotFound)
        );
        run.join_next(&js)?.unwrap();
        run.finish_ok()
    });
    let stubs: Vec<_> = out
        .history
        .iter()
        .filter_map(|e| match e {
            HistoryEvent::Stub { outcome, .. } => Some(*outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        stubs,
        [
            StubOutcome::Ok,
            StubOutcome::Ok,
            StubOutcome::Conflict,
            StubOutcome::Conflict,
            StubOutcome::Ok
        ]
    );
    let writes = out
        .outputs
        .iter()
        .filter(|o| matches!(o, Output::StubWrite { .. }))
        .count();
    assert_eq!(writes, 1);
    assert_eq!(
        kinds(&out.history)[1],
        "JoinSetRequest(ChildExecutionRequest)"
    );
}

#[test]
fn stub_conflicts_with_a_result_written_by_someone_else() {
    // The stub child's result arrives (written e.g. by an operator) before the workflow
    // stubs it: the outcome depends on arrival, which is why it is recorded.
    scenario(|run| {
        let js = run.create_join_set()?;
        let s = run.submit(&js, "approve", json!([]), ChildKind::Stub)?;
        if run.shared.journal.is_empty() && !run.engine.is_replaying() {
            let external = crate::model::Response::ChildExecutionFinished {
                child_execution_id: s.clone(),
                result: ExecutionResult::Ok(json!("operator")),
                ran: None,
            };
            run.engine.deliver_response(external.clone()).unwrap();
            run.shared.journal.push(super::harness::Arrival {
                at_len: run.engine.history().len(),
                response: external,
                spontaneous: None,
            });
        }
        assert_eq!(
            run.stub(&s, ExecutionResult::Ok(json!("mine")))?,
            Err(StubError::Conflict)
        );
        assert_eq!(
            run.stub(&s, ExecutionResult::Ok(json!("operator")))?,
            Ok(())
        );
        run.finish_ok()
    });
}

#[test]
fn correlate_is_recorded_and_emitted_once_per_call() {
    let out = scenario(|run| {
        run.correlate("payment:order-42")?;
        let js = run.create_join_set()?;
        run.submit(&js, "charge", json!([]), ChildKind::Activity)?;
        run.join_next(&js)?.unwrap();
        run.correlate("shipping:order-42")?;
        run.finish_ok()
    });
    assert_eq!(
        out.history[0],
        HistoryEvent::Correlate {
            key: "payment:order-42".into()
        }
    );
    let keys: Vec<&str> = out
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Correlate { key } => Some(key.as_str()),
            _ => None,
        })
        .collect();
    // Cold restarts replay the first call: it is emitted by the run that recorded it only.
    assert_eq!(keys, ["payment:order-42", "shipping:order-42"]);
}

#[test]
fn an_invalid_correlation_key_is_refused() {
    let mut e = Replay::new(execution(), vec![], vec![], now()).unwrap();
    for key in ["", "has space", "E_01JX", "schedule:x", "weir:x"] {
        assert!(
            matches!(
                e.correlate(key),
                Err(ReplayError::Usage(UsageError::InvalidCorrelationKey(_)))
            ),
            "{key}"
        );
    }
    assert!(e.history().is_empty());
}
