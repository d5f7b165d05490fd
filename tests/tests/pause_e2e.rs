//! Issue 35 item 1 on the real stack: `weir pause` and `weir resume`.
//!
//! A `sleepy.sleep-for` execution is paused while its delay runs. The delay comes due while it
//! is paused: its answer is journalled and nothing runs (no result). The worker is killed
//! (`kill -9`) and restarted: the new owner takes the partition over and does not run the
//! paused execution either. Resumed, its run is rebuilt from the history and finishes. Pausing
//! an execution that does not exist, or one that has finished, is refused with why and
//! changes nothing.
//!
//! The rules are the processor's tests (`core/tests/processor/pause.rs`) and the simulation's
//! class `pauses`.

use std::time::{Duration, Instant};

use serde_json::json;
use weir::codec::HistoryEntry;
use weir::model::{ExecutionId, ExecutionResult, Response};
use weir::store::{ExecutionState, Store};
use weir_e2e::cli::{failed, succeeded, weir};
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_for;

const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_execution_runs_nothing_until_resumed_across_a_kill() {
    let deployment = Deployment::new("pause");
    let worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let store = deployment.store().await;
    // Long enough for `weir pause` to reach the owner before the delay comes due on a loaded
    // machine: with 4 s, a CI run whose CLI took 5 s to start found the execution finished
    // (the pause refused) and waited in vain.
    let delay = Duration::from_secs(15);
    let id = deployment
        .submit(&producer, SLEEP_FOR, json!([delay.as_millis() as u64]))
        .await;
    let requested = Instant::now();
    // Its delay is requested (the run is parked on it).
    wait_for("the delay requested", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::Event { .. }))
            .then_some(())
    })
    .await;

    let text = id.to_string();
    let paused = succeeded(&weir(
        &deployment,
        &["pause", &text, "--reason", "the tax service is down"],
    ));
    assert!(paused.contains("paused"), "{paused}");
    let again = succeeded(&weir(&deployment, &["pause", &text]));
    assert!(again.contains("nothing to do"), "{again}");

    // The delay comes due while it is paused: journalled, and nothing more.
    let history = wait_for("the delay's answer journalled", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        history
            .iter()
            .any(|r| {
                matches!(
                    r.entry,
                    HistoryEntry::ResponseAppended(Response::DelayFinished { .. })
                )
            })
            .then_some(history)
    })
    .await;
    assert!(requested.elapsed() >= delay);
    let paused_at = history
        .iter()
        .position(|r| matches!(&r.entry, HistoryEntry::Paused { reason } if reason == "the tax service is down"))
        .expect("Paused journalled");
    assert!(
        history[paused_at..].iter().all(|r| !matches!(
            r.entry,
            HistoryEntry::Event { .. } | HistoryEntry::Finished { .. }
        )),
        "nothing ran while paused: {history:?}"
    );

    // A new owner does not run it either.
    let mut worker = worker;
    worker.signal("KILL");
    let _ = worker.child.wait();
    let restarted = deployment.start_worker("w", &[]);
    weir_e2e::wait_until(
        "the restarted worker to own its partitions",
        TIMEOUT,
        || {
            let owned = restarted.metrics()?.get("weir_partitions_owned").copied()?;
            (owned > 0.0).then_some(())
        },
    );
    let row = store.execution(&id).await.expect("read").expect("stored");
    assert_eq!(row.state, ExecutionState::Paused);
    let history = deployment.store_history(&store, &id).await;
    assert!(
        history[paused_at..].iter().all(|r| !matches!(
            r.entry,
            HistoryEntry::Event { .. } | HistoryEntry::Finished { .. }
        )),
        "nothing ran after the take-over: {history:?}"
    );

    let resumed = succeeded(&weir(&deployment, &["resume", &text]));
    assert!(resumed.contains("resumed"), "{resumed}");
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert!(
        matches!(&results[&id], ExecutionResult::Ok(_)),
        "{:?}",
        results[&id]
    );
    let history = deployment.finished_history(&store, &id).await;
    let kinds: Vec<&str> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::Paused { .. } => Some("paused"),
            HistoryEntry::Resumed { .. } => Some("resumed"),
            HistoryEntry::ResponseAppended(Response::DelayFinished { .. }) => Some("delay"),
            HistoryEntry::Finished { .. } => Some("finished"),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        ["paused", "delay", "resumed", "finished"],
        "{history:?}"
    );

    // Bad input: refused with why, nothing sent.
    let finished = failed(&weir(&deployment, &["pause", &text]));
    assert!(finished.contains("has finished"), "{finished}");
    let unknown = ExecutionId::top_level(ulid::Ulid::new()).to_string();
    let missing = failed(&weir(&deployment, &["resume", &unknown]));
    assert!(missing.contains("no execution"), "{missing}");
    let after = deployment.finished_history(&store, &id).await;
    assert_eq!(
        after.len(),
        history.len(),
        "nothing appended after the finish"
    );
    drop(restarted);
}

const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";

fn route_list(deployment: &Deployment) -> serde_json::Value {
    let listed = succeeded(&weir(deployment, &["route", "list", "--json"]));
    serde_json::from_str(&listed).expect("weir route list --json prints JSON")
}

fn paused_reason(routes: &serde_json::Value, topic_suffix: &str) -> Option<String> {
    routes
        .as_array()?
        .iter()
        .find(|r| {
            r["topic"]
                .as_str()
                .is_some_and(|t| t.ends_with(topic_suffix))
        })
        .and_then(|r| r["paused"]["reason"].as_str().map(str::to_owned))
}

/// `weir route pause`: a paused route runs none of its activities — not inline, not in the
/// activity worker — and its requests wait in Kafka; resumed, they run (each attempt starts
/// after the resume) and the execution finishes. A name that names no route, or a route
/// served outside Weir, is refused with why.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_route_holds_its_requests_until_resumed() {
    let deployment = Deployment::new("route");
    let worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let store = deployment.store().await;

    let paused = succeeded(&weir(
        &deployment,
        &[
            "route",
            "pause",
            "weir-examples:compute/math",
            "--reason",
            "the math service is down",
        ],
    ));
    assert!(paused.contains("paused"), "{paused}");
    assert_eq!(
        paused_reason(&route_list(&deployment), "weir.activity.compute").as_deref(),
        Some("the math service is down")
    );
    weir_e2e::wait_until("the worker to hold the paused route", TIMEOUT, || {
        let held = worker
            .metrics()?
            .get("weir_activity_partitions_paused")
            .copied()?;
        (held > 0.0).then_some(())
    });

    let id = deployment.submit(&producer, STEPS, json!([10, 2])).await;
    // Its first activity is requested (journalled, on its topic) and not answered.
    let history = wait_for("the first activity requested", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        (!weir_e2e::child_requests(&history).is_empty()).then_some(history)
    })
    .await;
    assert!(
        !history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::ResponseAppended(_))),
        "nothing answered while the route is paused: {history:?}"
    );

    let resumed_at = chrono::Utc::now();
    let resumed = succeeded(&weir(
        &deployment,
        &["route", "resume", "weir.activity.compute"],
    ));
    assert!(resumed.contains("resumed"), "{resumed}");
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert!(
        matches!(&results[&id], ExecutionResult::Ok(_)),
        "{:?}",
        results[&id]
    );
    let history = deployment.finished_history(&store, &id).await;
    let ran: Vec<_> = history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { ran, .. }) => {
                Some(*ran)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ran.len(), 2, "{history:?}");
    for ran in ran {
        let ran = ran.expect("an attempt says when it ran");
        assert!(
            ran.started_at >= resumed_at,
            "an attempt started at {} before the resume at {resumed_at}",
            ran.started_at
        );
    }
    assert_eq!(
        paused_reason(&route_list(&deployment), "weir.activity.compute"),
        None
    );

    let unknown = failed(&weir(&deployment, &["route", "pause", "no-such:route/x"]));
    assert!(unknown.contains("no route"), "{unknown}");
    let external = failed(&weir(
        &deployment,
        &["route", "pause", "weir-examples:tax/rates"],
    ));
    assert!(external.contains("outside Weir"), "{external}");
}
