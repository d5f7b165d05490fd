//! Structured concurrency: closing join sets on return and explicitly.

use std::time::Duration;

use serde_json::json;

use super::harness::{kinds, scenario};
use crate::model::{ChildKind, ExecutionResult, HistoryEvent, ScheduleAt};
use crate::replay::Output;

fn cancels(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::CancelChild {
                child_execution_id, ..
            } => Some(child_execution_id.to_string()),
            Output::CancelDelay { delay_id } => Some(delay_id.to_string()),
            _ => None,
        })
        .collect()
}

fn closing_join_nexts(history: &[HistoryEvent]) -> Vec<String> {
    history
        .iter()
        .filter_map(|e| match e {
            HistoryEvent::JoinNext {
                join_set_id,
                closing: true,
                requested_ffqn: None,
            } => Some(join_set_id.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn return_cancels_activities_and_delays_and_awaits_workflows() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        let a = run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        let w = run.submit(&js, "w", json!([]), ChildKind::Workflow)?;
        let d = run.submit_delay(&js, ScheduleAt::In(Duration::from_secs(3600)))?;
        let s = run.submit(&js, "s", json!([]), ChildKind::Stub)?;
        let r = run.finish(ExecutionResult::Ok(json!(1)))?;
        Ok((r, a, w, d, s))
    });
    let (result, a, _w, d, s) = &out.value;
    assert_eq!(*result, ExecutionResult::Ok(json!(1)));
    assert_eq!(
        cancels(&out.outputs),
        [a.to_string(), d.to_string(), s.to_string()]
    );
    // The world answers the cancelled activity first (oldest), so closing takes it on the way
    // to the workflow's response: two closing join-nexts.
    assert_eq!(closing_join_nexts(&out.history), ["g:1", "g:1"]);
    assert_eq!(
        out.outputs.last(),
        Some(&Output::Finished {
            result: ExecutionResult::Ok(json!(1))
        })
    );
}

#[test]
fn join_sets_are_closed_in_reverse_creation_order() {
    let out = scenario(|run| {
        let js1 = run.create_join_set()?;
        let js2 = run.create_named("second")?.unwrap();
        let js3 = run.create_join_set()?;
        run.submit(&js1, "w1", json!([]), ChildKind::Workflow)?;
        run.submit(&js2, "w2", json!([]), ChildKind::Workflow)?;
        run.submit(&js3, "w3", json!([]), ChildKind::Workflow)?;
        let c = run.submit(&js3, "c", json!([]), ChildKind::Activity)?;
        run.join_next(&js2)?.unwrap();
        run.finish_ok()?;
        Ok(c)
    });
    // js2 has nothing unawaited; js3 is closed before js1.
    let order = closing_join_nexts(&out.history);
    assert_eq!(order.first().map(String::as_str), Some("g:3"));
    assert_eq!(order.last().map(String::as_str), Some("g:1"));
    assert!(!order.iter().any(|js| js == "n:second"));
    assert_eq!(cancels(&out.outputs), [out.value.to_string()]);
}

#[test]
fn explicit_close_cancels_and_awaits_one_join_set() {
    let out = scenario(|run| {
        let keep = run.create_join_set()?;
        let js = run.create_join_set()?;
        let kept = run.submit(&keep, "k", json!([]), ChildKind::Activity)?;
        let a = run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        let w = run.submit(&js, "w", json!([]), ChildKind::Workflow)?;
        run.arrive_child(&w);
        run.close(&js)?;
        // The workflow's result stays available after closing.
        assert!(run.get(&w, "w")?.is_ok());
        run.join_next(&keep)?.unwrap();
        run.finish_ok()?;
        Ok((kept, a))
    });
    let (_, a) = &out.value;
    assert_eq!(cancels(&out.outputs), [a.to_string()]);
    assert_eq!(closing_join_nexts(&out.history), ["g:2"]);
    assert_eq!(
        kinds(&out.history)[5..],
        ["JoinNext", "JoinNext"],
        "one closing join-next for g:2, one join-next for g:1"
    );
}

#[test]
fn closing_with_nothing_unawaited_records_and_emits_nothing() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        run.join_next(&js)?.unwrap();
        run.close(&js)?;
        let empty = run.create_join_set()?;
        run.close(&empty)?;
        run.finish_ok()
    });
    assert_eq!(out.history.len(), 4);
    assert!(cancels(&out.outputs).is_empty());
}

#[test]
fn responses_that_already_arrived_are_not_cancelled() {
    let out = scenario(|run| {
        let js = run.create_join_set()?;
        let a = run.submit(&js, "a", json!([]), ChildKind::Activity)?;
        let b = run.submit(&js, "b", json!([]), ChildKind::Activity)?;
        run.arrive_child(&a);
        run.finish_ok()?;
        Ok(b)
    });
    assert_eq!(cancels(&out.outputs), [out.value.to_string()]);
    // Activities are not awaited: no closing join-next at all.
    assert!(closing_join_nexts(&out.history).is_empty());
}

#[test]
fn one_off_join_sets_of_finished_calls_need_no_closing() {
    let out = scenario(|run| {
        run.call("a", json!([]), ChildKind::Workflow)?;
        run.sleep(ScheduleAt::Now)?.unwrap();
        run.finish_ok()
    });
    assert!(closing_join_nexts(&out.history).is_empty());
    assert!(cancels(&out.outputs).is_empty());
}
