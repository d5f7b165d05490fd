//! Issue 14 items 2 and 3: `weir replay` and `weir list` on the real stack. Order sagas run to the end and one
//! execution waits on a long delay; replayed against the deployed builds every one is clean
//! (exit 0); against `order-swapped` (the saga with two calls swapped), each finished order is
//! a mismatch that names the history version and both calls (exit 5), read one by one or as
//! all finished executions of the function. The TypeScript and Python builds of the saga
//! replay the Rust build's histories cleanly.

use std::time::Duration;

use serde_json::{Value, json};
use weir::model::ExecutionId;
use weir::store::Store;
use weir::store::rows::ExecutionState;
use weir_e2e::deployment::{Deployment, components_dir};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";

fn replay(deployment: &Deployment, args: &[&str]) -> (Option<i32>, String, String) {
    let output = deployment
        .command()
        .arg("replay")
        .args(args)
        .output()
        .expect("run weir replay");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn recorded_executions_replay_cleanly_on_their_build_and_a_changed_one_is_caught() {
    let deployment = Deployment::new("replay");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let mut orders = Vec::new();
    for i in 0..2 {
        let params = json!([{ "id": format!("r{i}"), "customer": "alice", "sku": "widget",
            "quantity": 2, "address": "1 Main St" }]);
        orders.push(deployment.submit(&producer, CHECKOUT, params).await);
    }
    let sleeping = deployment
        .submit(&producer, SLEEP_FOR, json!([600_000]))
        .await;
    deployment.results(&orders, Duration::from_secs(120));
    // The store follows the log: wait until it holds each order finished and the sleeper's
    // delay request.
    let store = deployment.store().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut ready = true;
        for id in &orders {
            let row = store.execution(id).await.expect("read");
            ready &= row.is_some_and(|r| r.state == ExecutionState::Finished);
        }
        ready &= store.history(&sleeping).await.expect("read").len() >= 3;
        if ready {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the store did not catch up with the log in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ids: Vec<String> = orders
        .iter()
        .chain([&sleeping])
        .map(ExecutionId::to_string)
        .collect();
    let args: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = replay(&deployment, &args);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for id in &ids[..2] {
        assert!(
            stdout.lines().any(|l| l.starts_with(id.as_str())
                && l.contains("clean")
                && l.contains("recorded result")),
            "{stdout}"
        );
    }
    assert!(
        stdout.lines().any(|l| l.starts_with(ids[2].as_str())
            && l.contains("clean")
            && l.contains("running")),
        "{stdout}"
    );

    // The same histories on the TypeScript and Python builds of the saga (issue 34): a history
    // recorded by the Rust build replays cleanly on either.
    for file in ["order-ts.wasm", "order-py.wasm"] {
        let build = format!("order={}", components_dir().join(file).display());
        let (code, stdout, stderr) = replay(&deployment, &["--build", &build, &ids[0], &ids[1]]);
        assert_eq!(code, Some(0), "{file}: {stdout}{stderr}");
        assert_eq!(
            stdout.lines().filter(|l| l.contains("clean")).count(),
            2,
            "{file}: {stdout}"
        );
    }

    let swapped = components_dir().join("order-swapped.wasm");
    let build = format!("order={}", swapped.display());
    let (code, stdout, stderr) = replay(&deployment, &["--build", &build, &ids[0]]);
    assert_eq!(code, Some(5), "{stdout}{stderr}");
    let line = stdout.lines().next().unwrap_or_default();
    assert!(line.contains("MISMATCH"), "{line}");
    assert!(
        line.contains("history version 0"),
        "names the version: {line}"
    );
    assert!(
        line.contains("o:1-price") && line.contains("reserve"),
        "both sides: {line}"
    );

    // Every finished execution of the function, as JSON.
    let (code, stdout, stderr) = replay(
        &deployment,
        &[
            "--build",
            &build,
            "--function",
            CHECKOUT,
            "--state",
            "finished",
            "--json",
        ],
    );
    assert_eq!(code, Some(5), "{stdout}{stderr}");
    let verdicts: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let mut replayed: Vec<&str> = verdicts
        .iter()
        .map(|v| v["execution_id"].as_str().expect("id"))
        .collect();
    replayed.sort_unstable();
    let mut expected: Vec<&str> = ids[..2].iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(replayed, expected, "{stdout}");
    assert!(
        verdicts.iter().all(|v| v["verdict"] == "mismatch"),
        "{stdout}"
    );
    assert!(
        stderr.contains("replayed 2: 0 clean, 2 mismatched"),
        "{stderr}"
    );
}
