//! Issue 35 item 5 on the real stack: queries (`weir query`, `POST
//! /v1/executions/{id}/queries/{name}`).
//!
//! `approval-event.collect(3, 0)` takes three `item` events and keeps what it took so far in its
//! state (`set-state`); its query `collected` reads it, and `peek-random` tries a side effect.
//! A query reads the running execution as its history has it and changes nothing: the
//! history has as many entries after a refused side effect as before, and its version (the
//! answer's `version`) is the same. An unknown query, an unknown execution and a finished
//! execution are answered with why (exit code 4, and the API's statuses); every query is
//! answered once on `weir.answers`.
//!
//! The rules are the processor's tests (`core/tests/processor/`) and the simulation's class
//! `queries`.

use std::collections::HashMap;
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use weir::model::{ExecutionId, ExecutionResult};
use weir::query::QueryAnswer;
use weir::topology::TopicRole;
use weir_e2e::cli::{succeeded, weir};
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_for;

const COLLECT: &str = "weir-examples:workflows/approval-event.collect";
const TIMEOUT: Duration = Duration::from_secs(120);

/// `weir query ID NAME [PARAMS]`.
fn query(deployment: &Deployment, id: &str, name: &str, params: Option<&str>) -> Output {
    let mut args = vec!["query", id, name];
    args.extend(params);
    weir(deployment, &args)
}

/// The value a query answered (exit code 0, JSON on stdout), if it did.
fn value(output: &Output) -> Option<Value> {
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

/// An answer that is an error: exit code 4 and `<kind>: <message>` on stderr; the kind.
fn error_kind(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(4),
        "an error answer exits 4: {}{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
        .split_once(':')
        .map(|(kind, _)| kind.trim().to_owned())
        .unwrap_or_else(|| panic!("`<kind>: <message>` on stderr: {stderr}"))
}

fn send_item(deployment: &Deployment, id: &ExecutionId, n: u32) {
    let text = id.to_string();
    let payload = n.to_string();
    let event_id = format!("item-{n}");
    succeeded(&weir(
        deployment,
        &[
            "send-event",
            &text,
            "item",
            &payload,
            "--event-id",
            &event_id,
        ],
    ));
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client.post(url).bearer_auth(token);
    request = match body {
        Some(body) => request.json(&body),
        None => request.header("Content-Type", "application/json"),
    };
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("send: {e:?}"));
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_reads_a_running_execution_and_changes_nothing() {
    let deployment = Deployment::new("query");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let store = deployment.store().await;
    let id = deployment.submit(&producer, COLLECT, json!([3, 0])).await;
    let text = id.to_string();

    // The first item: the query shows it once the execution took it.
    send_item(&deployment, &id, 1);
    wait_for("`collected` to show the first item", TIMEOUT, || async {
        let output = query(&deployment, &text, "collected", None);
        (value(&output) == Some(json!(["1"]))).then_some(())
    })
    .await;

    // The same through the API (an admin's, as the other controls of an execution).
    let (read, admin) = (
        "read-token-0123456789abcdef",
        "admin-token-0123456789abcdef",
    );
    let server = deployment.serve_api(read, admin);
    let client = weir_e2e::http()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let url = |id: &str, name: &str| format!("{}/v1/executions/{id}/queries/{name}", server.base);
    let (status, answer) = post(&client, &url(&text, "collected"), admin, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["value"], json!(["1"]), "{answer}");
    let version = answer["version"].as_u64().expect("a version");
    let (status, refused) = post(&client, &url(&text, "collected"), read, None).await;
    assert_eq!(status, 403, "a read token may not query: {refused}");
    // The store has the history the answer reflects (the materialiser may lag the owner).
    let before = wait_for("the store to hold the queried history", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        (history.len() as u64 == version).then_some(history)
    })
    .await;

    // A side effect is refused, and nothing is recorded.
    let peeked = query(&deployment, &text, "peek-random", None);
    assert_eq!(error_kind(&peeked), "side-effect");
    let (status, answer) = post(
        &client,
        &url(&text, "peek-random"),
        admin,
        Some(json!({"params": [], "deadline_ms": 20_000})),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("side-effect")),
        "{answer}"
    );
    let (status, answer) = post(&client, &url(&text, "collected"), admin, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["value"], json!(["1"]), "{answer}");
    assert_eq!(
        answer["version"].as_u64(),
        Some(version),
        "the version after the refused side effect: {answer}"
    );
    let after = deployment.store_history(&store, &id).await;
    assert_eq!(
        after.len(),
        before.len(),
        "a query appends nothing: {after:?}"
    );

    // A name the component does not declare, an execution that does not exist, params that
    // are not an array (refused before anything is sent).
    let unknown = query(&deployment, &text, "no-such-query", None);
    assert_eq!(error_kind(&unknown), "unknown-query");
    let (status, answer) = post(&client, &url(&text, "no-such-query"), admin, None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("unknown-query")),
        "{answer}"
    );
    let nobody = ExecutionId::top_level(ulid::Ulid::new()).to_string();
    let missing = query(&deployment, &nobody, "collected", None);
    assert_eq!(error_kind(&missing), "unknown-execution");
    let malformed = query(&deployment, &text, "collected", Some(r#"{"a": 1}"#));
    assert_eq!(malformed.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&malformed.stderr).contains("array"),
        "{}",
        String::from_utf8_lossy(&malformed.stderr)
    );

    // The other two items: it finishes with all three, and a query then answers `finished`.
    send_item(&deployment, &id, 2);
    send_item(&deployment, &id, 3);
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert_eq!(results[&id], ExecutionResult::Ok(json!(["1", "2", "3"])));
    let finished = query(&deployment, &text, "collected", None);
    assert_eq!(error_kind(&finished), "finished");
    let (status, answer) = post(&client, &url(&text, "collected"), admin, None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("finished")),
        "{answer}"
    );

    // Every query of the execution was answered once on weir.answers, keyed by it.
    let answers =
        deployment.read_to_end::<QueryAnswer>(&deployment.topic(TopicRole::Answers), TIMEOUT);
    let mut by_query: HashMap<String, usize> = HashMap::new();
    for (key, answer) in &answers {
        assert_eq!(key, &answer.execution_id.to_string(), "{answer:?}");
        if answer.execution_id == id {
            *by_query.entry(answer.query_id.clone()).or_default() += 1;
        }
    }
    // The nine asked by name here, and those of the wait for the first value.
    assert!(by_query.len() >= 9, "{by_query:?}");
    let twice: Vec<_> = by_query.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "answered more than once: {twice:?}");
}
