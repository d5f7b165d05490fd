//! Issue 13 item 1 on the real stack: events sent into running executions, with the example
//! `approval-event` (a wait for `approved` raced against a timeout; `collect`, which sleeps and
//! then takes `item` events one by one).
//!
//! - the event first: the wait takes it, the timeout is cancelled;
//! - the timeout first: the wait is cancelled; an event sent after the finish goes to the DLQ;
//! - events before the wait (during the sleep) are kept, and the same event id twice is taken
//!   once; one of them comes from a Java program that knows Weir only by
//!   `schemas/avro/event.avsc`;
//! - an event sent before its execution's submission (from the Java client) is kept under the
//!   execution's id, shown by `weir correlation list`, and journalled first when the
//!   submission comes; the wait takes it;
//! - an event for an execution whose submission never comes goes to the DLQ once the worker's
//!   early-event wait (5 s here) has passed.
//!
//! The rules themselves are the processor's table tests (`core/tests/processor.rs`).

use std::process::Output;
use std::time::Duration;

use serde_json::json;
use weir::codec::{DlqEnvelope, DlqReason, HistoryEntry, HistoryRecord};
use weir::model::{
    DelayOutcome, EventOutcome, ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest,
    Response,
};
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{delivered_events, wait_for};

const AWAIT_APPROVAL: &str = "weir-examples:workflows/approval-event.await-approval";
const COLLECT: &str = "weir-examples:workflows/approval-event.collect";
/// How long the collector sleeps before it waits for its events: the window in which the test
/// sends them (a JVM starts for one of them). 10 s was too short beside two other test
/// binaries and the simulation on 2 cores (the events came after the wait opened).
const COLLECTOR_SLEEP_MS: u64 = 60_000;
const TIMEOUT: Duration = Duration::from_secs(120);

fn send_with_cli(
    deployment: &Deployment,
    id: &ExecutionId,
    name: &str,
    payload: &str,
    event_id: &str,
) -> Output {
    let id = id.to_string();
    deployment
        .command()
        .args(["send-event", &id, name, payload, "--event-id", event_id])
        .output()
        .expect("run weir send-event")
}

fn sent(output: Output) -> String {
    assert!(
        output.status.success(),
        "weir send-event failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The stored history of `id` once `ready` holds for it.
async fn history_when(
    deployment: &Deployment,
    id: &ExecutionId,
    what: &str,
    ready: impl Fn(&[HistoryRecord]) -> bool,
) -> Vec<HistoryRecord> {
    let store = deployment.store().await;
    wait_for(what, TIMEOUT, || async {
        let history = deployment.store_history(&store, id).await;
        ready(&history).then_some(history)
    })
    .await
}

fn waits_for_an_event(history: &[HistoryRecord]) -> bool {
    history.iter().any(|r| {
        matches!(
            &r.entry,
            HistoryEntry::Event {
                event: HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::EventRequest { .. },
                    ..
                },
                ..
            }
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn events_reach_running_executions_once_and_the_rest_is_dead_lettered() {
    let deployment = Deployment::new("events");
    let _worker = deployment.start_worker("w", &["--early-event-wait-secs", "5"]);
    let producer = deployment.producer();

    // Before its submission: the event is kept under the execution's id until it comes.
    let early = ExecutionId::top_level(ulid::Ulid::new());
    deployment.send_event_with_java(&early.to_string(), "approved", r#""bea""#, "order-3-early");
    let kept = deployment
        .correlation_listed_until(
            &early.to_string(),
            "the event kept for its execution",
            |e| e["buffered"].as_array().is_some_and(|b| b.len() == 1),
        )
        .await;
    assert_eq!(kept["buffered"][0]["event_id"], "order-3-early", "{kept}");
    assert!(kept["waits_until"].is_string(), "{kept}");
    deployment
        .submit_as(&producer, &early, AWAIT_APPROVAL, json!(["order-3", 600]))
        .await;

    let approved = deployment
        .submit(&producer, AWAIT_APPROVAL, json!(["order-1", 600]))
        .await;
    let timed_out = deployment
        .submit(&producer, AWAIT_APPROVAL, json!(["order-2", 1]))
        .await;
    let collector = deployment
        .submit(&producer, COLLECT, json!([2, COLLECTOR_SLEEP_MS]))
        .await;

    // The event first: sent once the wait is in the history; the timeout is cancelled.
    history_when(
        &deployment,
        &approved,
        "the approval's wait",
        waits_for_an_event,
    )
    .await;
    assert_eq!(
        sent(send_with_cli(
            &deployment,
            &approved,
            "approved",
            r#""ann""#,
            "order-1-ok"
        )),
        "order-1-ok"
    );

    // Before the wait: `collect` sleeps first (COLLECTOR_SLEEP_MS). The same event id twice
    // (once from the Java client, once from the CLI) is taken once.
    history_when(&deployment, &collector, "the collector's sleep", |h| {
        h.len() >= 3
    })
    .await;
    deployment.send_event_with_java(&collector.to_string(), "item", "1", "item-1");
    sent(send_with_cli(
        &deployment,
        &collector,
        "item",
        "1",
        "item-1",
    ));
    sent(send_with_cli(
        &deployment,
        &collector,
        "item",
        "2",
        "item-2",
    ));
    // Both kept while it sleeps: no wait of theirs is open yet. (Were this to time out, the
    // sends took longer than the collector's sleep: its window is what the test measures.)
    history_when(
        &deployment,
        &collector,
        "both items kept while the collector sleeps",
        |h| {
            let kept = h
                .iter()
                .filter(|r| matches!(&r.entry, HistoryEntry::EventReceived(_)))
                .count();
            kept == 2 && !waits_for_an_event(h)
        },
    )
    .await;

    let results = deployment.results(
        &[
            approved.clone(),
            timed_out.clone(),
            collector.clone(),
            early.clone(),
        ],
        TIMEOUT,
    );
    assert_eq!(results[&early], ExecutionResult::Ok(json!("bea")));
    assert_eq!(results[&approved], ExecutionResult::Ok(json!("ann")));
    assert_eq!(
        results[&timed_out],
        ExecutionResult::Err(json!("order order-2: no approval within 1 s"))
    );
    assert_eq!(results[&collector], ExecutionResult::Ok(json!(["1", "2"])));

    let store = deployment.store().await;
    let history = deployment.finished_history(&store, &approved).await;
    assert_eq!(delivered_events(&history), ["order-1-ok"]);
    assert!(
        history.iter().any(|r| matches!(
            &r.entry,
            HistoryEntry::ResponseAppended(Response::DelayFinished {
                outcome: DelayOutcome::Cancelled,
                ..
            })
        )),
        "the timeout was cancelled: {history:#?}"
    );
    let history = deployment.finished_history(&store, &early).await;
    assert!(
        matches!(&history[1].entry, HistoryEntry::EventReceived(e) if e.event_id == "order-3-early"),
        "the early event is journalled right after Created: {history:#?}"
    );
    assert_eq!(delivered_events(&history), ["order-3-early"]);
    // Taken in the transaction that created the execution: gone from `weir.state` before the
    // result was published.
    assert_eq!(
        deployment.correlation_listed(&early.to_string()),
        None,
        "the kept event is forgotten once taken"
    );
    let history = deployment.finished_history(&store, &timed_out).await;
    assert!(
        history.iter().any(|r| matches!(
            &r.entry,
            HistoryEntry::ResponseAppended(Response::EventDelivered {
                outcome: EventOutcome::Cancelled,
                ..
            })
        )),
        "the wait was cancelled: {history:#?}"
    );
    let history = deployment.finished_history(&store, &collector).await;
    let kept: Vec<&str> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::EventReceived(e) => Some(e.event_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        kept,
        ["item-1", "item-2"],
        "kept before any wait, the duplicate dropped"
    );
    assert_eq!(delivered_events(&history), ["item-1", "item-2"]);

    // After the finish, and for an execution that does not exist: the DLQ, with why.
    sent(send_with_cli(
        &deployment,
        &timed_out,
        "approved",
        r#""late""#,
        "order-2-late",
    ));
    let unknown = ExecutionId::top_level(ulid::Ulid::new());
    sent(send_with_cli(
        &deployment,
        &unknown,
        "approved",
        "1",
        "nobody",
    ));
    let dlq = deployment.read_topic::<DlqEnvelope>(
        &deployment.topic(TopicRole::Dlq),
        TIMEOUT,
        "two dead-lettered events",
        |records| records.len() >= 2,
    );
    let late = dlq
        .iter()
        .map(|(_, e)| e)
        .find(|e| e.key.as_deref() == Some(timed_out.to_string().as_bytes()))
        .expect("the late event is dead-lettered");
    assert_eq!(late.reason, DlqReason::Refused);
    assert!(late.error.contains("has finished"), "{}", late.error);
    assert_eq!(late.original_topic, deployment.topic(TopicRole::Events));
    let lost = dlq
        .iter()
        .map(|(_, e)| e)
        .find(|e| e.key.as_deref() == Some(unknown.to_string().as_bytes()))
        .expect("the event for nobody is dead-lettered");
    assert_eq!(lost.reason, DlqReason::Other);
    assert!(
        lost.error.contains("does not exist") && lost.error.contains("waited for its submission"),
        "{}",
        lost.error
    );
    assert_eq!(lost.original_topic, deployment.topic(TopicRole::Events));

    // The CLI refuses what breaks the rules before anything is sent.
    let bad = send_with_cli(&deployment, &approved, "not a name", "1", "x");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("event name"));
}
