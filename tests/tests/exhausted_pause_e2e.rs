//! Issue 35 item 1 on the real stack: retries that end in `paused` (`on_exhausted = "pause"`).
//!
//! `api-call.call` calls the `leaky` activity, configured here with two attempts and
//! `on_exhausted = "pause"`, on a URL nobody serves yet: both attempts fail (the switch is
//! off). Its request is parked and the execution paused; `weir status` says why (the activity,
//! its function, its attempts, the last error). Nothing retries while it is paused, across a
//! `kill -9` of the worker: the next one restores the parked request from the committed
//! progress and starts nothing. The URL is then served (the switch is flipped) and the
//! execution resumed (`weir resume`): the activity gets a fresh budget, its first attempt
//! answers, and the execution finishes with that answer; the activity was requested once.
//!
//! The rules are the activity core's tests (`core/src/activity/tests/parking.rs`), the
//! processor's (`core/tests/processor/pause.rs`) and the simulation's class
//! `exhausted_pauses`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use weir::codec::HistoryEntry;
use weir::model::{ChildKind, ExecutionResult};
use weir::store::{ExecutionState, Store};
use weir_e2e::cli::{succeeded, weir};
use weir_e2e::deployment::{Deployment, WorkerProcess};
use weir_e2e::{child_requests, free_port, wait_for};

const CALL: &str = "weir-examples:workflows/api-call.call";
const TIMEOUT: Duration = Duration::from_secs(120);

fn metric(worker: &WorkerProcess, name: &str) -> f64 {
    worker
        .metrics()
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0.0)
}

async fn wait_metric(worker: &WorkerProcess, name: &str, at_least: f64) {
    wait_for(
        &format!("{name} >= {at_least} on {}", worker.name),
        TIMEOUT,
        || async { (metric(worker, name) >= at_least).then_some(()) },
    )
    .await;
}

/// `name` stays at `value` on `worker` for `span`, polled every 100 ms: what must not happen
/// (an attempt of a parked request) is watched for over a span of several backoffs.
fn stays(worker: &WorkerProcess, name: &str, value: f64, span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        assert_eq!(metric(worker, name), value, "{name} on {}", worker.name);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Serves `port` (the switch flipped): every request is answered 200 `ok`, and counted.
fn serve(port: u16) -> Arc<AtomicUsize> {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the switch's port");
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    served
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_activity_pauses_its_workflow_until_resumed_across_a_kill() {
    let deployment = Deployment::new("exhausted");
    let token_file = deployment.logs().join("api-token");
    std::fs::write(&token_file, "tok-exhausted\n").expect("token file");
    let components = deployment.components_with("exhausted", |text| {
        text.replace(
            "path = \"leaky.wasm\"\n",
            "path = \"leaky.wasm\"\nsecrets = [\"API_TOKEN\"]\nretries = { max_attempts = 2, \
             backoff_base_ms = 200, backoff_max_ms = 200, jitter = 0.0, on_exhausted = \"pause\" }\n",
        )
    });
    assert!(
        std::fs::read_to_string(&components)
            .expect("components")
            .contains("on_exhausted = \"pause\""),
        "the edit found the leaky entry"
    );
    let secret = format!("API_TOKEN=file:{}", token_file.display());
    let components = components.to_string_lossy().into_owned();
    let env = [("WEIR_COMPONENTS", components.as_str())];
    let first = deployment.start_worker_with_env("first", &["--secret", &secret], &env);
    let store = deployment.store().await;
    let producer = deployment.producer();
    // Nobody serves this port yet: every attempt fails (the switch is off).
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/api");
    let id = deployment.submit(&producer, CALL, json!([url])).await;

    wait_for("the execution paused", TIMEOUT, || async {
        store
            .execution(&id)
            .await
            .ok()
            .flatten()
            .filter(|row| row.state == ExecutionState::Paused)
            .map(|_| ())
    })
    .await;
    let text = id.to_string();
    let status = succeeded(&weir(&deployment, &["status", &text]));
    eprintln!("{status}");
    assert!(status.contains("state      paused"), "{status}");
    for says in [
        "paused     activity ",
        "(weir-examples:secrets/leaky.call-with-token) exhausted its 2 attempts",
        "on_exhausted = \"pause\"",
        &format!("GET {url}"),
    ] {
        assert!(status.contains(says), "`{says}` in {status}");
    }
    // Parked after two attempts; nothing more while it is paused (ten backoffs).
    wait_metric(&first, "weir_activity_parked", 1.0).await;
    assert_eq!(metric(&first, "weir_activity_attempts_total"), 2.0);
    assert_eq!(metric(&first, "weir_activity_parked_total"), 1.0);
    stays(
        &first,
        "weir_activity_attempts_total",
        2.0,
        Duration::from_secs(2),
    );

    // kill -9: the next worker restores the parked request from the committed progress and
    // starts nothing either.
    first.signal("KILL");
    let second = deployment.start_worker_with_env("second", &["--secret", &secret], &env);
    wait_metric(&second, "weir_activity_parked", 1.0).await;
    stays(
        &second,
        "weir_activity_attempts_total",
        0.0,
        Duration::from_secs(2),
    );
    assert_eq!(
        store.execution(&id).await.expect("read").map(|r| r.state),
        Some(ExecutionState::Paused)
    );

    // The switch is flipped, the execution resumed: a fresh budget, its first attempt answers.
    let served = serve(port);
    let resumed = succeeded(&weir(&deployment, &["resume", &text]));
    assert!(resumed.contains("resume"), "{resumed}");
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    match &results[&id] {
        ExecutionResult::Ok(value) => {
            assert!(value.to_string().contains("got status 200"), "{value}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "one attempt after the resume"
    );
    assert_eq!(metric(&second, "weir_activity_attempts_total"), 1.0);
    assert_eq!(metric(&second, "weir_activity_unparked_total"), 1.0);
    assert_eq!(metric(&second, "weir_activity_parked"), 0.0);

    // One request of the activity; paused by it, resumed by the operator.
    let history = deployment.finished_history(&store, &id).await;
    let activities: Vec<_> = child_requests(&history)
        .into_iter()
        .filter(|(_, _, _, kind)| *kind == ChildKind::Activity)
        .collect();
    assert_eq!(activities.len(), 1, "{activities:?}");
    let pauses: Vec<&str> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::Paused { reason } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert!(
        pauses[0].contains(&activities[0].1.to_string()),
        "{pauses:?}"
    );
    assert!(
        history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::Resumed { .. })),
        "resumed"
    );
}
