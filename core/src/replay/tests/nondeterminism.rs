//! Every kind of mismatch between a workflow's calls and its recorded history, and trimmed
//! history. Each case records a history with one program (fresh) and replays it with another.

use std::time::Duration;

use serde_json::json;

use super::harness::{Mode, Outcome, R, Run, Stop, World, execute, f, replay};
use crate::model::{
    ChildKind, ExecutionErrorKind, ExecutionResult, HistoryEvent, JoinSetRequest, PersistValue,
    ScheduleAt, Version,
};
use crate::replay::{Expected, Mismatch, Nondeterminism, Output, ReplayError};

fn record(program: impl Fn(&mut Run) -> R<()>) -> Outcome<()> {
    execute(Mode::Hot(World::fifo()), Vec::new(), Vec::new(), &program)
        .unwrap_or_else(|(stop, _)| panic!("recording failed: {stop:?}"))
}

/// Replays `recorded` with `program`, expects nondeterminism and checks what every such error
/// must carry: the version, the recorded event at it, the finish it caused.
fn expect_nondeterminism(
    recorded: &Outcome<()>,
    program: impl Fn(&mut Run) -> R<()>,
    version: u64,
    mismatch: Mismatch,
) -> Nondeterminism {
    let (stop, run) = match replay(recorded, &program) {
        Ok(_) => panic!("replay succeeded, expected {mismatch:?} at {version}"),
        Err(e) => e,
    };
    let Stop::Error(ReplayError::Nondeterminism(n)) = stop else {
        panic!("expected nondeterminism, got {stop:?}");
    };
    assert_eq!((n.version, n.mismatch), (Version(version), mismatch), "{n}");
    assert_eq!(n.recorded, recorded.history[version as usize]);
    let message = n.to_string();
    assert!(
        message.contains(&format!("history version {version}")),
        "{message}"
    );
    assert!(message.contains(&n.recorded.to_string()), "{message}");
    assert!(message.contains(&n.expected.to_string()), "{message}");
    // The execution finished with nondeterminism-detected; nothing was recorded.
    let Some(ExecutionResult::ExecutionError(e)) = run.engine.finished() else {
        panic!("not finished: {:?}", run.engine.finished());
    };
    assert_eq!(e.kind, ExecutionErrorKind::NondeterminismDetected);
    assert_eq!(e.reason, message);
    assert!(matches!(
        run.shared.outputs.last(),
        Some(Output::Finished { result }) if result == run.engine.finished().unwrap()
    ));
    assert_eq!(run.engine.history(), &recorded.history[..]);
    *n
}

fn expected_event(n: &Nondeterminism) -> &HistoryEvent {
    match &n.expected {
        Expected::Event(e) => e,
        Expected::Finish => panic!("expected an event"),
    }
}

#[test]
fn event_kind() {
    let rec = record(|run| {
        run.create_join_set()?;
        run.finish_ok().map(drop)
    });
    let n = expect_nondeterminism(
        &rec,
        |run| {
            run.random_u64(0, 1)?;
            run.finish_ok().map(drop)
        },
        0,
        Mismatch::Kind,
    );
    assert!(matches!(expected_event(&n), HistoryEvent::Persist { .. }));
}

#[test]
fn join_set() {
    let program = |second: bool| {
        move |run: &mut Run| {
            let a = run.create_join_set()?;
            let b = run.create_join_set()?;
            let js = if second { b } else { a };
            run.submit(&js, "x", json!([]), ChildKind::Activity)?;
            run.join_next(&js)?.unwrap();
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program(false));
    expect_nondeterminism(&rec, program(true), 2, Mismatch::JoinSet);
    // Also a named join set where a generated one was created.
    expect_nondeterminism(
        &rec,
        |run| {
            run.create_named("x")?.unwrap();
            Ok(())
        },
        0,
        Mismatch::JoinSet,
    );
}

/// A program submitting one child and one delay, awaiting both.
fn child_and_delay(
    name: &'static str,
    params: serde_json::Value,
    secs: u64,
) -> impl Fn(&mut Run) -> R<()> {
    move |run: &mut Run| {
        let js = run.create_join_set()?;
        run.submit(&js, name, params.clone(), ChildKind::Activity)?;
        run.submit_delay(&js, ScheduleAt::In(Duration::from_secs(secs)))?;
        run.join_next(&js)?.unwrap();
        run.join_next(&js)?.unwrap();
        run.finish_ok().map(drop)
    }
}

#[test]
fn child_id() {
    let mut rec = record(child_and_delay("x", json!([1]), 5));
    // A corrupted history: the recorded child has another index.
    let HistoryEvent::JoinSetRequest {
        request:
            JoinSetRequest::ChildExecutionRequest {
                child_execution_id, ..
            },
        join_set_id,
    } = &mut rec.history[1]
    else {
        panic!()
    };
    *child_execution_id = super::harness::exec_id().child(join_set_id, 7);
    let n = expect_nondeterminism(
        &rec,
        child_and_delay("x", json!([1]), 5),
        1,
        Mismatch::ChildId,
    );
    assert!(n.expected.to_string().contains(".g:1_1 "), "{}", n.expected);
}

#[test]
fn ffqn_and_params() {
    let rec = record(child_and_delay("x", json!([1]), 5));
    let n = expect_nondeterminism(&rec, child_and_delay("y", json!([1]), 5), 1, Mismatch::Ffqn);
    let HistoryEvent::JoinSetRequest {
        request: JoinSetRequest::ChildExecutionRequest { target_ffqn, .. },
        ..
    } = expected_event(&n)
    else {
        panic!()
    };
    assert_eq!(*target_ffqn, f("y"));
    expect_nondeterminism(
        &rec,
        child_and_delay("x", json!([2]), 5),
        1,
        Mismatch::Params,
    );
    expect_nondeterminism(
        &rec,
        child_and_delay("x", json!([1, 1]), 5),
        1,
        Mismatch::Params,
    );
}

#[test]
fn delay_id_and_timeout() {
    let rec = record(child_and_delay("x", json!([1]), 5));
    expect_nondeterminism(
        &rec,
        child_and_delay("x", json!([1]), 6),
        2,
        Mismatch::DelayTimeout,
    );
    let mut corrupt = record(child_and_delay("x", json!([1]), 5));
    let HistoryEvent::JoinSetRequest {
        request: JoinSetRequest::DelayRequest { delay_id, .. },
        join_set_id,
    } = &mut corrupt.history[2]
    else {
        panic!()
    };
    *delay_id = super::harness::exec_id().delay(join_set_id, 1);
    expect_nondeterminism(
        &corrupt,
        child_and_delay("x", json!([1]), 5),
        2,
        Mismatch::DelayId,
    );
    // A sleep whose duration changed.
    let sleep = |secs| {
        move |run: &mut Run| {
            run.sleep(ScheduleAt::In(Duration::from_secs(secs)))?
                .unwrap();
            run.finish_ok().map(drop)
        }
    };
    expect_nondeterminism(&record(sleep(1)), sleep(2), 1, Mismatch::DelayTimeout);
}

#[test]
fn schedule_intention() {
    let program = |at: ScheduleAt| {
        move |run: &mut Run| {
            run.schedule("job", json!([]), at)?;
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program(ScheduleAt::In(Duration::from_secs(10))));
    expect_nondeterminism(
        &rec,
        program(ScheduleAt::In(Duration::from_secs(11))),
        0,
        Mismatch::ScheduleIntention,
    );
    expect_nondeterminism(
        &rec,
        program(ScheduleAt::Now),
        0,
        Mismatch::ScheduleIntention,
    );
    let n = expect_nondeterminism(
        &rec,
        program(ScheduleAt::At(
            super::harness::now() + chrono::TimeDelta::seconds(10),
        )),
        0,
        Mismatch::ScheduleIntention,
    );
    assert!(n.to_string().contains("in 10s"), "{n}");
    // The function is compared too.
    expect_nondeterminism(
        &rec,
        |run| {
            run.schedule("other", json!([]), ScheduleAt::In(Duration::from_secs(10)))?;
            Ok(())
        },
        0,
        Mismatch::Ffqn,
    );
}

#[test]
fn random_value() {
    let program = |max| {
        move |run: &mut Run| {
            run.random_u64(0, max)?;
            run.random_string(1, 5)?;
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program(10));
    expect_nondeterminism(&rec, program(11), 0, Mismatch::RandomValue);
    expect_nondeterminism(
        &rec,
        |run| {
            run.random_u64(0, 10)?;
            run.random_string(1, 6)?;
            Ok(())
        },
        1,
        Mismatch::RandomValue,
    );
    // A string where a number was drawn is another kind of event.
    expect_nondeterminism(
        &rec,
        |run| {
            run.random_string(0, 10)?;
            Ok(())
        },
        0,
        Mismatch::Kind,
    );
    // A recorded value outside the range asked for.
    let mut corrupt = record(program(10));
    corrupt.history[0] = HistoryEvent::Persist {
        value: PersistValue::RandomU64 {
            min: 0,
            max_exclusive: 10,
            value: 10,
        },
    };
    expect_nondeterminism(&corrupt, program(10), 0, Mismatch::RandomValue);
}

#[test]
fn stub_value() {
    let program = |value: &'static str| {
        move |run: &mut Run| {
            let js = run.create_join_set()?;
            let s = run.submit(&js, "approve", json!([]), ChildKind::Stub)?;
            run.stub(&s, ExecutionResult::Ok(json!(value)))?.unwrap();
            run.join_next(&js)?.unwrap();
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program("yes"));
    let n = expect_nondeterminism(&rec, program("no"), 2, Mismatch::StubValue);
    assert!(
        matches!(expected_event(&n), HistoryEvent::Stub { result: ExecutionResult::Ok(v), .. } if *v == json!("no"))
    );
}

#[test]
fn requested_function() {
    let program = |awaited: Option<&'static str>| {
        move |run: &mut Run| {
            let js = run.create_join_set()?;
            run.submit(&js, "a", json!([]), ChildKind::Activity)?;
            match awaited {
                Some(name) => drop(run.await_next(&js, name)?),
                None => drop(run.join_next(&js)?),
            }
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program(None));
    expect_nondeterminism(&rec, program(Some("a")), 2, Mismatch::RequestedFfqn);
    let rec = record(program(Some("a")));
    expect_nondeterminism(&rec, program(Some("b")), 2, Mismatch::RequestedFfqn);
    expect_nondeterminism(&rec, program(None), 2, Mismatch::RequestedFfqn);
}

#[test]
fn closing_flag() {
    let program = |await_it: bool| {
        move |run: &mut Run| {
            let js = run.create_join_set()?;
            run.submit(&js, "w", json!([]), ChildKind::Workflow)?;
            if await_it {
                run.join_next(&js)?.unwrap();
            }
            run.finish_ok().map(drop)
        }
    };
    // Recorded: the workflow awaited its child itself; replayed: it returned at once and
    // closing awaits the child.
    let rec = record(program(true));
    let n = expect_nondeterminism(&rec, program(false), 2, Mismatch::Closing);
    assert!(matches!(
        expected_event(&n),
        HistoryEvent::JoinNext { closing: true, .. }
    ));
    // And the other way round.
    let rec = record(program(false));
    expect_nondeterminism(&rec, program(true), 2, Mismatch::Closing);
}

#[test]
fn trimmed_history() {
    let rec = record(|run| {
        run.random_u64(0, 3)?;
        run.create_join_set()?;
        run.finish_ok().map(drop)
    });
    let n = expect_nondeterminism(
        &rec,
        |run| {
            run.random_u64(0, 3)?;
            run.finish_ok().map(drop)
        },
        1,
        Mismatch::UnprocessedHistory,
    );
    assert_eq!(n.expected, Expected::Finish);
    assert!(n.to_string().contains("return from the function"), "{n}");
}

#[test]
fn nondeterminism_cancels_recorded_activities_and_delays() {
    let rec = record(|run| {
        let js = run.create_join_set()?;
        run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        run.submit(&js, "w", json!([]), ChildKind::Workflow)?;
        run.submit_delay(&js, ScheduleAt::Now)?;
        run.join_next(&js)?.unwrap();
        run.finish_ok().map(drop)
    });
    // Build a history that stops before the join-next answered (no responses at all).
    let history = rec.history[..5].to_vec();
    let mut e = crate::replay::Replay::new(
        super::harness::execution(),
        history,
        [],
        super::harness::now(),
    )
    .unwrap();
    let err = e.random_u64(0, 2).unwrap_err();
    assert_eq!(err.as_nondeterminism().unwrap().mismatch, Mismatch::Kind);
    let outputs = e.take_outputs();
    let cancelled: Vec<_> = outputs
        .iter()
        .filter(|o| matches!(o, Output::CancelChild { .. } | Output::CancelDelay { .. }))
        .collect();
    assert_eq!(cancelled.len(), 2, "{outputs:?}");
    assert!(matches!(outputs.last(), Some(Output::Finished { .. })));
}

#[test]
fn correlation_key() {
    let program = |key: &'static str| {
        move |run: &mut Run| {
            run.correlate(key)?;
            run.finish_ok().map(drop)
        }
    };
    let rec = record(program("payment:1"));
    let n = expect_nondeterminism(&rec, program("payment:2"), 0, Mismatch::CorrelationKey);
    assert!(matches!(expected_event(&n), HistoryEvent::Correlate { key } if key == "payment:2"));
}
