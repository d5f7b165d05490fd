//! Issue 14 item 6 (retention) on the real stack: a worker started with `--retention 10s`
//! lets a finished execution expire from the store (row and history), while one still
//! sleeping stays whole however long it waits. The store's own check of the TTLs is the
//! conformance suite (`finished_executions_expire`); this one checks the worker's flag
//! reaches the store.

use std::time::Duration;

use serde_json::json;
use weir::store::Store;
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_for;

const GREET: &str = "weir-examples:workflows/hello.greet";
const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_execution_expires_after_the_retention_and_a_waiting_one_stays() {
    let deployment = Deployment::new("retention");
    let _worker = deployment.start_worker("w", &["--retention", "10s"]);
    let producer = deployment.producer();
    let sleeper = deployment
        .submit(&producer, SLEEP_FOR, json!([600_000]))
        .await;
    let greeted = deployment.submit(&producer, GREET, json!(["ttl"])).await;
    let results = deployment.results(std::slice::from_ref(&greeted), Duration::from_secs(120));
    assert!(results[&greeted].is_ok(), "{:?}", results[&greeted]);

    let store = deployment.store().await;
    // In the store once materialised...
    wait_for(
        "the finished execution in the store",
        Duration::from_secs(60),
        || async { store.execution(&greeted).await.expect("read").map(|_| ()) },
    )
    .await;
    // ... and gone, row and history, once its retention has passed.
    wait_for(
        "the finished execution to expire",
        Duration::from_secs(60),
        || async {
            let row = store.execution(&greeted).await.expect("read");
            let history = store.history(&greeted).await.expect("read");
            (row.is_none() && history.is_empty()).then_some(())
        },
    )
    .await;
    // The sleeper, older than the retention by now, is whole.
    let row = store
        .execution(&sleeper)
        .await
        .expect("read")
        .expect("the sleeper's row");
    assert_eq!(row.state.as_str(), "running", "{row:?}");
    let history = store.history(&sleeper).await.expect("read");
    assert!(history.len() >= 3, "its history: {} rows", history.len());
}
