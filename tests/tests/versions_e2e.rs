//! Issue 14 item 1: versioned components on the real stack. Executions of `sleepy` start on
//! its first build and sleep; the deployment moves to `sleepy-v2` (which naps first: every
//! history of the first build is nondeterministic on it). The executions in flight finish on
//! the build they are pinned to, fetched from the store, while new ones run the new build.
//! With the old build gone from the store they park (nothing fails), and `weir deploy` of it
//! lets them finish. `weir replay --upgrade` refuses to move an execution onto the changed
//! build (its history does not replay there) and moves it onto `sleepy-patched` (it does),
//! which then runs it to its end.

use std::time::Duration;

use serde_json::json;
use weir::codec::HistoryEntry;
use weir::model::{ExecutionId, HistoryEvent, JoinSetRequest};
use weir::store::{Store, connect};
use weir_e2e::deployment::{Deployment, components_dir};
use weir_e2e::{cql_config, wait_until};

const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";

fn digest_of(file: &str) -> String {
    let bytes = std::fs::read(components_dir().join(file)).expect("a built example");
    weir::wasm::engine::component_digest(&bytes)
}

/// The pinned build and the number of delays requested, from the materialised history.
async fn pinned_and_delays(
    deployment: &Deployment,
    store: &weir::store::CqlStore,
    id: &ExecutionId,
) -> (Option<String>, usize) {
    let history = deployment.store_history(store, id).await;
    let pinned = history.iter().find_map(|r| match &r.entry {
        HistoryEntry::Created(c) => Some(c.component.clone()),
        _ => None,
    });
    let delays = history
        .iter()
        .filter(|r| {
            matches!(
                &r.entry,
                HistoryEntry::Event {
                    event: HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::DelayRequest { .. },
                        ..
                    },
                    ..
                }
            )
        })
        .count();
    (pinned.flatten(), delays)
}

#[tokio::test(flavor = "multi_thread")]
async fn in_flight_executions_finish_on_their_build_while_new_ones_run_the_new_build() {
    let deployment = Deployment::new("versions");
    let (v1, v2) = (digest_of("sleepy.wasm"), digest_of("sleepy-v2.wasm"));
    assert_ne!(v1, v2);
    let second_build = deployment.components_with("v2", |text| {
        let changed = text.replace("path = \"sleepy.wasm\"", "path = \"sleepy-v2.wasm\"");
        assert_ne!(changed, text, "components.toml names sleepy.wasm");
        changed
    });
    let second_build = second_build.to_str().expect("a UTF-8 path").to_owned();
    let patched = digest_of("sleepy-patched.wasm");
    let patched_build = deployment.components_with("patched", |text| {
        text.replace("path = \"sleepy.wasm\"", "path = \"sleepy-patched.wasm\"")
    });
    let patched_build = patched_build.to_str().expect("a UTF-8 path").to_owned();
    let producer = deployment.producer();

    // The first build: two executions sleep 8 s, the store holds their delay requests.
    let mut first = deployment.start_worker("v1", &[]);
    let mut in_flight = Vec::new();
    for _ in 0..2 {
        in_flight.push(
            deployment
                .submit(&producer, SLEEP_FOR, json!([8_000]))
                .await,
        );
    }
    let long = deployment
        .submit(&producer, SLEEP_FOR, json!([40_000]))
        .await;
    let store = deployment.store().await;
    for id in in_flight.iter().chain([&long]) {
        let (pinned, delays) =
            wait_until_async(|| pinned_and_delays(&deployment, &store, id)).await;
        assert_eq!(
            pinned.as_deref(),
            Some(v1.as_str()),
            "{id} is pinned to the first build"
        );
        assert_eq!(delays, 1);
    }
    assert!(
        store.has_component_build(&v1).await.unwrap(),
        "the worker stored its build"
    );
    first.signal("TERM");
    let status = wait_until("the first worker to stop", Duration::from_secs(60), || {
        first.child.try_wait().expect("try_wait")
    });
    assert!(status.success(), "the first worker stopped with {status}");

    // The first build disappears from the store; the second is deployed.
    let session = connect(&cql_config(&deployment.keyspace))
        .await
        .expect("connect");
    session
        .query_unpaged(
            format!(
                "DELETE FROM {}.component_builds WHERE digest = ?",
                deployment.keyspace
            ),
            (v1.as_str(),),
        )
        .await
        .expect("delete the first build");
    assert!(!store.has_component_build(&v1).await.unwrap());
    let second = deployment.start_worker_with_env("v2", &[], &[("WEIR_COMPONENTS", &second_build)]);
    let fresh = deployment.submit(&producer, SLEEP_FOR, json!([100])).await;
    let results = deployment.results(std::slice::from_ref(&fresh), Duration::from_secs(60));
    assert!(results[&fresh].is_ok(), "{:?}", results[&fresh]);
    // The store lags the log: its history of the execution is read once it reaches the end
    // (read right after the result, it once held one of the two naps).
    deployment.finished_history(&store, &fresh).await;
    let (pinned, delays) = pinned_and_delays(&deployment, &store, &fresh).await;
    assert_eq!(
        pinned.as_deref(),
        Some(v2.as_str()),
        "a new execution gets the new build"
    );
    assert_eq!(delays, 2, "the new build naps first");
    // The executions in flight wake up and park: their build is nowhere.
    second.wait_for_log("is not available", Duration::from_secs(60));
    assert!(
        !second.log_contains("nondeterminism"),
        "an execution in flight was replayed on the new build"
    );

    // The long sleeper cannot move onto the changed build: its history does not replay there.
    let upgrade = |components: &str| {
        let output = deployment
            .command()
            .env("WEIR_COMPONENTS", components)
            .args(["replay", "--upgrade", &long.to_string()])
            .output()
            .expect("run weir replay --upgrade");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    };
    let (code, text) = upgrade(&second_build);
    assert_eq!(code, Some(5), "{text}");
    assert!(
        text.contains("MISMATCH") && text.contains("upgrades requested: 0"),
        "{text}"
    );
    // Onto the patched build it moves: its history replays there (only its result and a log line differ).
    let (code, text) = upgrade(&patched_build);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("upgrade to {patched} requested"))
            && text.contains("upgrades journalled: all but 0"),
        "{text}"
    );
    let upgraded = wait_until_async(|| async {
        let history = deployment.store_history(&store, &long).await;
        let found = history.iter().any(|r| {
            matches!(&r.entry, HistoryEntry::Upgraded { from, to }
                if from.as_deref() == Some(v1.as_str()) && *to == patched)
        });
        (None, usize::from(found))
    })
    .await;
    assert_eq!(upgraded.1, 1);

    // Deploying the first build again lets them finish, on it.
    let output = deployment
        .command()
        .arg("deploy")
        .output()
        .expect("run weir deploy");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sleepy ") && l.contains(&v1) && l.ends_with(" stored")),
        "{stdout}"
    );
    let results = deployment.results(&in_flight, Duration::from_secs(120));
    for id in &in_flight {
        assert!(results[id].is_ok(), "{id}: {:?}", results[id]);
        let (pinned, delays) = pinned_and_delays(&deployment, &store, id).await;
        assert_eq!(pinned.as_deref(), Some(v1.as_str()));
        assert_eq!(delays, 1, "{id} ran on the first build to its end");
    }
    assert!(second.log_contains("an older build of a workflow is loaded"));
    // The long sleeper wakes on the patched build and finishes there.
    let results = deployment.results(std::slice::from_ref(&long), Duration::from_secs(120));
    assert!(results[&long].is_ok(), "{:?}", results[&long]);
    second.wait_for_log("(patched build)", Duration::from_secs(30));
    let (pinned, delays) = pinned_and_delays(&deployment, &store, &long).await;
    assert_eq!(
        pinned.as_deref(),
        Some(v1.as_str()),
        "Created keeps the first pin"
    );
    assert_eq!(delays, 1);
}

/// Polls `probe` until the count it returns is at least 1 (a delay request in the store, an
/// entry found).
async fn wait_until_async<F, Fut>(mut probe: F) -> (Option<String>, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (Option<String>, usize)>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = probe().await;
        if found.1 >= 1 {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not found in the store within 60 s: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
