//! Issue 13 item 4 on the real stack: a stub activity's value written from outside, with
//! Obelisk's answers. The example `approval.manual-approval` submits the stub `request` and
//! waits for someone to write it.
//!
//! - `weir stub` writes it (`ok`); the same value again is `ok`; another is a `conflict`
//!   (exit code 6); an id that is no stub request is `not-found`.
//! - A value that does not fit the stub's result type is refused (the DLQ says why) and a
//!   fitting one can still be written.
//! - A plain `Response` record from any client with another value is dead-lettered
//!   `conflict`: the stub keeps its value.
//! - The HTTP API answers the same: 200, 409, 404, 202.
//!
//! The rules themselves are the processor's table test
//! (`a_stub_written_from_outside_follows_obelisks_rules`).

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use weir::codec::{DlqEnvelope, DlqReason, HistoryEntry};
use weir::model::{ChildKind, ExecutionId, ExecutionResult, Response};
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{child_requests, wait_for};

const MANUAL_APPROVAL: &str = "weir-examples:workflows/approval.manual-approval";
const TIMEOUT: Duration = Duration::from_secs(120);
const READ: &str = "stubs-read-token-0123456789";
const ADMIN: &str = "stubs-admin-token-0123456789";

fn stub(deployment: &Deployment, child: &str, value: &str, timeout: &str) -> Output {
    deployment
        .command()
        .args(["stub", child, value, "--timeout", timeout])
        .output()
        .expect("run weir stub")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The stub request the approval `id` made, once the store has it.
async fn stub_request(deployment: &Deployment, id: &ExecutionId) -> ExecutionId {
    let store = deployment.store().await;
    wait_for("the approval's stub request", TIMEOUT, || async {
        let history = deployment.store_history(&store, id).await;
        child_requests(&history)
            .into_iter()
            .find(|(_, _, _, kind)| *kind == ChildKind::Stub)
            .map(|(_, child, _, _)| child)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn stubs_written_from_outside_are_taken_once_and_conflicts_are_refused() {
    let deployment = Deployment::new("stubs");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let approved = deployment
        .submit(&producer, MANUAL_APPROVAL, json!(["order-1", 50_000]))
        .await;
    let rejected = deployment
        .submit(&producer, MANUAL_APPROVAL, json!(["order-2", 90_000]))
        .await;
    let by_api = deployment
        .submit(&producer, MANUAL_APPROVAL, json!(["order-3", 70_000]))
        .await;
    let first = stub_request(&deployment, &approved).await.to_string();
    let second = stub_request(&deployment, &rejected).await.to_string();
    let third = stub_request(&deployment, &by_api).await.to_string();

    // Written; the same value again is ok; another is a conflict.
    let written = stub(&deployment, &first, r#"{"ok": "ann"}"#, "60");
    assert!(written.status.success(), "{}", text(&written));
    let again = stub(&deployment, &first, r#"{"ok": "ann"}"#, "60");
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("already"), "{}", text(&again));
    let other = stub(&deployment, &first, r#"{"ok": "bob"}"#, "60");
    assert_eq!(other.status.code(), Some(6), "{}", text(&other));
    assert!(text(&other).contains("conflict"), "{}", text(&other));
    // Not a stub request of anyone.
    let nobody = format!("{approved}.g:9_1");
    let missing = stub(&deployment, &nobody, r#"{"ok": "ann"}"#, "60");
    assert!(!missing.status.success());
    assert!(text(&missing).contains("not-found"), "{}", text(&missing));

    // A value of the wrong type is refused (nothing is written); a fitting one is taken.
    let misfit = stub(&deployment, &second, r#"{"ok": 5}"#, "5");
    assert!(!misfit.status.success(), "{}", text(&misfit));
    assert!(text(&misfit).contains("weir.dlq"), "{}", text(&misfit));
    let fits = stub(&deployment, &second, r#"{"err": "over budget"}"#, "60");
    assert!(fits.status.success(), "{}", text(&fits));

    // The HTTP API: written (202), then the same (200), another (409), none (404).
    let server = deployment.serve_api(READ, ADMIN);
    let client = weir_e2e::http_client();
    let post = |id: &str, body: Value| {
        client
            .post(format!("{}/v1/executions/{id}/stub", server.base))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    let sent = post(&third, json!({"result": {"ok": "cy"}}))
        .await
        .expect("post");
    assert_eq!(sent.status().as_u16(), 202);
    let results = deployment.results(
        &[approved.clone(), rejected.clone(), by_api.clone()],
        TIMEOUT,
    );
    assert_eq!(
        results[&approved],
        ExecutionResult::Ok(json!("approved by ann"))
    );
    assert_eq!(
        results[&rejected],
        ExecutionResult::Err(json!("rejected: over budget"))
    );
    assert_eq!(
        results[&by_api],
        ExecutionResult::Ok(json!("approved by cy"))
    );
    let store = deployment.store().await;
    wait_for("the API's stub in the store", TIMEOUT, || async {
        let history = deployment.store_history(&store, &by_api).await;
        history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
            .then_some(())
    })
    .await;
    let same = post(&third, json!({"result": {"ok": "cy"}}))
        .await
        .expect("post");
    assert_eq!(same.status().as_u16(), 200);
    let clash = post(&third, json!({"result": {"ok": "dee"}}))
        .await
        .expect("post");
    assert_eq!(clash.status().as_u16(), 409);
    let none = post(&nobody, json!({"result": {"ok": "x"}}))
        .await
        .expect("post");
    assert_eq!(none.status().as_u16(), 404);

    // A plain record from any client with another value: dead-lettered, the stub keeps its.
    let topic = deployment.topic(TopicRole::Responses);
    let codec = weir::codec::Codec::single_object();
    let forged = Response::ChildExecutionFinished {
        child_execution_id: first.parse().expect("id"),
        result: ExecutionResult::Ok(json!("mallory")),
        ran: None,
    };
    let bytes = codec.encode(&topic, &forged).expect("encode");
    deployment
        .produce_raw(&producer, &topic, &approved.to_string(), &bytes)
        .await;
    let dlq = deployment.read_topic::<DlqEnvelope>(
        &deployment.topic(TopicRole::Dlq),
        TIMEOUT,
        "the misfit and the forged value dead-lettered",
        |records| records.len() >= 2,
    );
    let reasons: Vec<(DlqReason, &str)> = dlq
        .iter()
        .map(|(_, e)| (e.reason, e.error.as_str()))
        .collect();
    assert!(
        reasons
            .iter()
            .any(|(r, e)| *r == DlqReason::Refused && e.contains(&second)),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(r, e)| *r == DlqReason::Conflict && e.contains("mallory")),
        "{reasons:?}"
    );
    let history = deployment.store_history(&store, &approved).await;
    let values: Vec<&ExecutionResult> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { result, .. }) => {
                Some(result)
            }
            _ => None,
        })
        .collect();
    assert_eq!(values, [&ExecutionResult::Ok(json!("ann"))]);
}

const APPROVE_OTHER: &str = "weir-examples:workflows/approval.approve-other";

/// Issue 13 item 4, the rest: a workflow (`approval.approve-other`) writes the stub of
/// another execution's request, with Obelisk's answers returned to it: `ok` (the other
/// execution takes the value, on whatever partition it lives), `ok` for the same value
/// again, `conflict` for another, `not-found` for an id that is no stub request (of an
/// execution that does not exist; a top-level execution).
#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_writes_the_stub_of_another_execution() {
    let deployment = Deployment::new("stubs_other");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let waiting = deployment
        .submit(&producer, MANUAL_APPROVAL, json!(["order-9", 50_000]))
        .await;
    let request = stub_request(&deployment, &waiting).await.to_string();

    let write = async |approver: &str, target: String| {
        let id = deployment
            .submit(&producer, APPROVE_OTHER, json!([target, approver]))
            .await;
        let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
        results[&id].clone()
    };
    assert_eq!(
        write("ann", request.clone()).await,
        ExecutionResult::Ok(json!("ok"))
    );
    let results = deployment.results(std::slice::from_ref(&waiting), TIMEOUT);
    assert_eq!(
        results[&waiting],
        ExecutionResult::Ok(json!("approved by ann"))
    );
    assert_eq!(
        write("ann", request.clone()).await,
        ExecutionResult::Ok(json!("ok")),
        "the same value again"
    );
    assert_eq!(
        write("bob", request.clone()).await,
        ExecutionResult::Ok(json!("conflict"))
    );
    let nobody = format!("{}.g:1_1", ExecutionId::top_level(ulid::Ulid::new()));
    assert_eq!(
        write("ann", nobody).await,
        ExecutionResult::Ok(json!("not-found"))
    );
    assert_eq!(
        write("ann", waiting.to_string()).await,
        ExecutionResult::Ok(json!("not-found")),
        "a top-level execution is nobody's stub"
    );

    // The stub holds the first value.
    let store = deployment.store().await;
    let history = deployment.store_history(&store, &waiting).await;
    let answers: Vec<&ExecutionResult> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            }) if child_execution_id.to_string() == request => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(answers, [&ExecutionResult::Ok(json!("ann"))]);
}
