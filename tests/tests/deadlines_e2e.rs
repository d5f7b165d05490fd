//! Issue 13 item 6 on the real stack: deadlines, with the example `bounded` (declared with
//! `deadline_ms = 5000`: a child workflow and a slow activity awaited together) and
//! `cancellable`.
//!
//! - The component's default: `bounded` waiting 10 minutes times out at 5 s from its
//!   creation; its running activity attempt is interrupted and answered `cancelled` (in the
//!   history before the finish); its child workflow carries the parent's deadline (its
//!   `Created`) and is terminated. `bounded` waiting 100 ms finishes `ok` within it.
//! - The submission's own: `weir submit --deadline 2s` of `cancellable` times out at 2 s.
//! - A submission already past its deadline (any client can send one) is timed out without
//!   a step run.
//!
//! The rules are the processor's table test
//! (`a_deadline_times_the_execution_out_and_bounds_its_children`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use weir::codec::{HistoryEntry, HistoryRecord};
use weir::model::{ChildKind, ExecutionErrorKind, ExecutionId, ExecutionResult, Response};
use weir::store::Store;
use weir_e2e::deployment::Deployment;
use weir_e2e::{child_requests, wait_for};

const BOUNDED: &str = "weir-examples:workflows/bounded.run";
const CANCELLABLE: &str = "weir-examples:workflows/cancellable.run";
const TIMEOUT: Duration = Duration::from_secs(120);

fn timed_out(result: &ExecutionResult) -> &weir::model::ExecutionError {
    match result {
        ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::TimedOut => e,
        other => panic!("expected a timed-out result, got {other}"),
    }
}

/// The deadline and the creation time of the execution's `Created`.
fn created(history: &[HistoryRecord]) -> (Option<DateTime<Utc>>, DateTime<Utc>) {
    match history.first().map(|r| &r.entry) {
        Some(HistoryEntry::Created(c)) => (c.deadline, c.created_at),
        other => panic!("the history starts with {other:?}"),
    }
}

fn finished_at(history: &[HistoryRecord]) -> Option<DateTime<Utc>> {
    history.iter().find_map(|r| match &r.entry {
        HistoryEntry::Finished { finished_at, .. } => Some(*finished_at),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn past_its_deadline_an_execution_times_out_and_its_children_stop() {
    let deployment = Deployment::new("deadline");
    let worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let store = deployment.store().await;
    let whole_history = |id: ExecutionId| {
        let store = &store;
        let deployment = &deployment;
        async move {
            wait_for("its whole history in the store", TIMEOUT, || async {
                let history = deployment.store_history(store, &id).await;
                finished_at(&history).is_some().then_some(history)
            })
            .await
        }
    };

    let long = deployment
        .submit(&producer, BOUNDED, json!([600_000]))
        .await;
    let short = deployment.submit(&producer, BOUNDED, json!([100])).await;
    let passed = deployment
        .submit_with_deadline(
            &producer,
            CANCELLABLE,
            json!([600_000]),
            Utc::now() - chrono::Duration::seconds(1),
        )
        .await;
    // The CLI: a deadline 2 s from now (the client's now: an absolute instant).
    let before = Utc::now();
    let output = deployment
        .command()
        .args(["submit", CANCELLABLE, "[600000]", "--deadline", "2s"])
        .output()
        .expect("run weir submit");
    assert!(
        output.status.success(),
        "weir submit failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = Utc::now();
    let asked: ExecutionId = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("weir submit prints the id");
    let results = deployment.results(
        &[long.clone(), short.clone(), passed.clone(), asked.clone()],
        TIMEOUT,
    );

    // Within its deadline: ok.
    assert!(
        matches!(&results[&short], ExecutionResult::Ok(_)),
        "{}",
        results[&short]
    );

    // The component's default, 5 s from the creation.
    let error = timed_out(&results[&long]);
    assert!(error.reason.contains("deadline"), "{error:?}");
    let history = whole_history(long.clone()).await;
    let (deadline, created_at) = created(&history);
    let deadline = deadline.expect("the default deadline is kept");
    assert_eq!(deadline - created_at, chrono::Duration::seconds(5));
    let finished = finished_at(&history).expect("finished");
    assert!(finished >= deadline, "{finished} before {deadline}");
    println!(
        "bounded timed out {} ms after its deadline",
        (finished - deadline).num_milliseconds()
    );
    let requests = child_requests(&history);
    let (_, activity, _, _) = requests
        .iter()
        .find(|(_, _, _, kind)| *kind == ChildKind::Activity)
        .cloned()
        .expect("the slow activity");
    let (_, child, _, _) = requests
        .iter()
        .find(|(_, _, _, kind)| *kind == ChildKind::Workflow)
        .cloned()
        .expect("the child workflow");
    let activity_answer = history.iter().find_map(|r| match &r.entry {
        HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            child_execution_id,
            result: ExecutionResult::ExecutionError(e),
            ..
        }) if *child_execution_id == activity => Some(e.clone()),
        _ => None,
    });
    let activity_error = activity_answer.expect("the activity's cancellation is journalled");
    assert_eq!(activity_error.kind, ExecutionErrorKind::Cancelled);
    assert!(
        activity_error.reason.contains("deadline"),
        "{activity_error:?}"
    );
    worker.wait_for_log("activity cancelled", TIMEOUT);
    // The child had its parent's deadline, and is stopped.
    let child_history = whole_history(child.clone()).await;
    assert_eq!(created(&child_history).0, Some(deadline));
    let child_row = store
        .execution(&child)
        .await
        .expect("read")
        .expect("the child's row");
    let child_result: ExecutionResult =
        serde_json::from_str(child_row.result.as_deref().expect("a result")).expect("json");
    match &child_result {
        // Terminated by its parent, or timed out by its own copy of the deadline: whichever
        // came first; either way it ends by the parent's deadline.
        ExecutionResult::ExecutionError(e)
            if matches!(
                e.kind,
                ExecutionErrorKind::Cancelled | ExecutionErrorKind::TimedOut
            ) && e.reason.contains("deadline") => {}
        other => panic!("the child ended {other}"),
    }

    // The submission's own deadline, 2 s.
    timed_out(&results[&asked]);
    let history = whole_history(asked.clone()).await;
    let deadline = created(&history).0.expect("the asked deadline is kept");
    let two = chrono::Duration::seconds(2);
    assert!(
        before + two <= deadline && deadline <= after + two,
        "{deadline} not 2 s after [{before}, {after}]"
    );
    assert!(finished_at(&history).is_some_and(|f| f >= deadline));

    // Past its deadline when it came: created and timed out, nothing run.
    timed_out(&results[&passed]);
    let history = whole_history(passed.clone()).await;
    assert!(child_requests(&history).is_empty(), "{history:#?}");
    assert_eq!(history.len(), 2, "Created, Finished: {history:#?}");
}
