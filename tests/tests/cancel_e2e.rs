//! Issue 13 item 5 on the real stack: `weir cancel` and `--terminate`, with the example
//! `cancellable` (a child workflow and a slow activity awaited in one join set, then a
//! compensation).
//!
//! - Cancelled: the cancellation is journalled; the running activity attempt is interrupted
//!   (the activity worker says so) and answered `cancelled`; the child workflow is cancelled
//!   in turn and finishes `cancelled`; the compensation runs after the cancellation; the
//!   execution finishes `cancelled`, what it returned in the detail.
//! - Terminated: it finishes at once, and no compensation runs.
//! - The HTTP API refuses to cancel what has finished (409) or does not exist (404).
//!
//! The rules are the processor's table test
//! (`a_cancelled_execution_cancels_what_it_waits_for_and_finishes_cancelled`).

use std::process::Output;
use std::time::Duration;

use serde_json::json;
use weir::codec::{HistoryEntry, HistoryRecord};
use weir::model::{ChildKind, ExecutionErrorKind, ExecutionId, ExecutionResult, Response};
use weir::store::Store;
use weir_e2e::deployment::Deployment;
use weir_e2e::{child_requests, wait_for};

const CANCELLABLE: &str = "weir-examples:workflows/cancellable.run";
const FIBONACCI: &str = "weir-examples:compute/math.fibonacci";
const TIMEOUT: Duration = Duration::from_secs(120);
const READ: &str = "cancel-read-token-0123456789";
const ADMIN: &str = "cancel-admin-token-0123456789";

fn cancel(deployment: &Deployment, id: &ExecutionId, extra: &[&str]) -> Output {
    let id = id.to_string();
    let output = deployment
        .command()
        .args(["cancel", &id, "--reason", "order withdrawn"])
        .args(extra)
        .output()
        .expect("run weir cancel");
    assert!(
        output.status.success(),
        "weir cancel failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn cancel_seq(history: &[HistoryRecord]) -> Option<u64> {
    history.iter().find_map(|r| match &r.entry {
        HistoryEntry::CancelRequested { reason } if reason == "order withdrawn" => Some(r.seq),
        _ => None,
    })
}

fn cancelled(result: &ExecutionResult) -> &weir::model::ExecutionError {
    match result {
        ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Cancelled => e,
        other => panic!("expected a cancelled result, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_execution_stops_its_children_and_compensates() {
    let deployment = Deployment::new("cancel");
    let worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let store = deployment.store().await;
    let waiting = |id: ExecutionId| {
        let store = &store;
        let deployment = &deployment;
        async move {
            wait_for("both requests in the history", TIMEOUT, || async {
                let history = deployment.store_history(store, &id).await;
                (child_requests(&history).len() == 2).then_some(history)
            })
            .await
        }
    };

    let id = deployment
        .submit(&producer, CANCELLABLE, json!([600_000]))
        .await;
    let terminated = deployment
        .submit(&producer, CANCELLABLE, json!([600_000]))
        .await;
    let before = waiting(id.clone()).await;
    waiting(terminated.clone()).await;
    let (_, child, _, kind) = child_requests(&before)
        .into_iter()
        .find(|(_, _, _, kind)| *kind == ChildKind::Workflow)
        .expect("the child workflow");
    assert_eq!(kind, ChildKind::Workflow);
    // The slow activity's attempt is running before the cancellation.
    let (_, activity, _, _) = child_requests(&before)
        .into_iter()
        .find(|(_, _, _, kind)| *kind == ChildKind::Activity)
        .expect("the slow activity");

    cancel(&deployment, &id, &[]);
    cancel(&deployment, &terminated, &["--terminate"]);
    let results = deployment.results(&[id.clone(), terminated.clone()], TIMEOUT);

    // Cancelled: finished `cancelled`, after its compensation.
    let error = cancelled(&results[&id]);
    assert!(error.reason.contains("order withdrawn"), "{error:?}");
    let detail = error.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("compensated with fibonacci(10) = 55"),
        "{error:?}"
    );
    let history = wait_for("its whole history in the store", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
            .then_some(history)
    })
    .await;
    let at = cancel_seq(&history).expect("the cancellation is journalled");
    let compensation = child_requests(&history)
        .into_iter()
        .find(|(_, _, ffqn, _)| ffqn == FIBONACCI)
        .expect("the compensation was requested");
    assert!(
        compensation.0 > at,
        "the compensation comes after the cancellation"
    );
    let activity_answer = history.iter().find_map(|r| match &r.entry {
        HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ..
        }) if *child_execution_id == activity => Some((r.seq, result.clone())),
        _ => None,
    });
    let (answered_at, answer) = activity_answer.expect("the activity's answer");
    assert!(answered_at > at);
    cancelled(&answer);
    // The attempt was interrupted where it ran.
    worker.wait_for_log("activity cancelled", TIMEOUT);
    // The child workflow was cancelled in turn.
    let child_row = wait_for("the child's row finished", TIMEOUT, || async {
        store
            .execution(&child)
            .await
            .expect("read")
            .filter(|r| r.state.as_str() == "finished")
    })
    .await;
    let child_result: ExecutionResult =
        serde_json::from_str(child_row.result.as_deref().expect("a result")).expect("json");
    let child_error = cancelled(&child_result);
    assert!(child_error.reason.contains("parent"), "{child_error:?}");

    // Terminated: at once, no compensation.
    let error = cancelled(&results[&terminated]);
    assert!(error.reason.contains("terminated"), "{error:?}");
    let history = deployment.store_history(&store, &terminated).await;
    assert!(
        !child_requests(&history)
            .iter()
            .any(|(_, _, ffqn, _)| ffqn == FIBONACCI),
        "a terminated execution compensates nothing"
    );

    // The API: nothing to cancel once finished; nobody to cancel.
    let server = deployment.serve_api(READ, ADMIN);
    let client = weir_e2e::http_client();
    let post = |id: String| {
        client
            .post(format!("{}/v1/executions/{id}/cancel", server.base))
            .bearer_auth(ADMIN)
            .json(&json!({"reason": "again"}))
            .send()
    };
    assert_eq!(
        post(id.to_string()).await.expect("post").status().as_u16(),
        409
    );
    let nobody = ExecutionId::top_level(ulid::Ulid::new()).to_string();
    assert_eq!(post(nobody).await.expect("post").status().as_u16(), 404);
}
