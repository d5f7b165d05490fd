//! Workflows written in TypeScript (componentize-js) and Python (componentize-py) beside
//! Rust, on the same WIT and the same history (issue 34): the same results and histories,
//! a history recorded by one language replays on the others, a build that calls in another
//! order is reported nondeterministic, and what their runtimes read through WASI (clock,
//! random, stdout) is the same hot, cold and replayed.

mod wasm_common;

use std::sync::Arc;

use serde_json::{Value, json};
use wasm_common::*;
use weir::model::{ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent, Response};
use weir::replay::Execution;
use weir::wasm::memory::{InMemoryBus, Record};
use weir::wasm::{RunStep, WasmHost};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const CLOCK_RANDOM: &str = "weir-examples:workflows/clock-random.run";

/// A call of a workflow function, with its JSON params.
type Call = (&'static str, Value);

/// The saga's cases: shipped, charge declined (one compensation), shipment failed (two), and
/// an unknown SKU (nothing to compensate).
fn orders() -> Vec<Call> {
    let order = |id: &str, customer: &str, sku: &str, address: &str| json!([{"id": id, "customer": customer, "sku": sku, "quantity": 2, "address": address}]);
    vec![
        (CHECKOUT, order("o1", "alice", "widget", "1 Main St")),
        (CHECKOUT, order("o2", "declined-bob", "widget", "1 Main St")),
        (CHECKOUT, order("o3", "carol", "gadget", "")),
        (CHECKOUT, order("o4", "dave", "nope", "1 Main St")),
    ]
}

/// The event `paid` sent to correlation key `key`.
fn paid(key: &str) -> Record {
    Record::KeyedEvent(weir::correlation::KeyedEvent {
        event: weir::codec::ReceivedEvent {
            event_id: format!("{key}-1"),
            name: "paid".into(),
            payload: json!({"amount": 700}),
        },
        key: key.into(),
        sent_at: t0(),
        returned_by: None,
    })
}

/// An example built in the three languages, the calls that exercise it, and the events sent
/// once every call has run as far as it can.
struct Example {
    name: &'static str,
    calls: Vec<Call>,
    events: Vec<Record>,
}

fn examples() -> Vec<Example> {
    vec![
        Example {
            name: "order",
            calls: orders(),
            events: vec![],
        },
        Example {
            name: "fanout",
            calls: vec![
                (
                    "weir-examples:workflows/fanout.fibonacci-sum",
                    json!([[5, 6, 7, 90]]),
                ),
                (
                    "weir-examples:workflows/fanout.fibonacci-sum",
                    json!([[94]]),
                ),
                ("weir-examples:workflows/fanout.race", json!([3, 1000])),
            ],
            events: vec![],
        },
        Example {
            name: "approval",
            calls: vec![
                // Approved and rejected by the workflow's own stub write; its second write of
                // the same value is accepted, of another a conflict.
                (
                    "weir-examples:workflows/approval.auto-approve",
                    json!(["o5", 10]),
                ),
                (
                    "weir-examples:workflows/approval.auto-approve",
                    json!(["o6", 20_000]),
                ),
            ],
            events: vec![],
        },
        Example {
            name: "approval-event",
            calls: vec![
                // The event comes: the wait wins. None comes: the timeout wins.
                (
                    "weir-examples:workflows/approval-event.await-payment",
                    json!(["o7", 60]),
                ),
                (
                    "weir-examples:workflows/approval-event.await-approval",
                    json!(["o8", 30]),
                ),
            ],
            events: vec![paid("payment:o7")],
        },
    ]
}

/// What an execution left: its call, id, result, history and journal.
#[derive(Debug, PartialEq)]
struct Run {
    call: Call,
    id: ExecutionId,
    result: Option<ExecutionResult>,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
}

/// Runs `calls` to their end on `host` (hot or cold), sending `events` once they are idle,
/// then firing every timer.
async fn run_all(host: &Arc<WasmHost>, calls: &[Call], events: &[Record], hot: bool) -> Vec<Run> {
    let mut bus = InMemoryBus::new(host.clone(), t0());
    bus.set_hot(hot);
    let ids: Vec<ExecutionId> = calls
        .iter()
        .map(|(function, params)| bus.submit(&ffqn(function), params.clone()).unwrap())
        .collect();
    bus.run_until_idle().await.unwrap();
    for event in events {
        bus.send(event.clone());
    }
    bus.run_until_idle().await.unwrap();
    bus.fire_all_timers().await.unwrap();
    calls
        .iter()
        .zip(ids)
        .map(|(call, id)| {
            let e = bus.execution(&id).unwrap();
            assert_eq!(e.created_at, t0(), "the bus creates at its start");
            Run {
                call: call.clone(),
                id: id.clone(),
                result: e.result.clone(),
                history: e.history.clone(),
                responses: e.responses.clone(),
            }
        })
        .collect()
}

/// Replays a finished execution's history and journal on `host`.
async fn replay_on(host: &WasmHost, run: &Run) -> RunStep {
    let execution = Execution {
        id: run.id.clone(),
        ffqn: ffqn(run.call.0),
        params: run.call.1.clone(),
        created_at: t0(),
        component: None,
        trace: None,
    };
    let (_run, step) = host
        .start_workflow(execution, run.history.clone(), run.responses.clone(), t0())
        .await
        .unwrap();
    step
}

/// The Rust, TypeScript and Python builds of example `name`.
fn builds(name: &str) -> [(&'static str, Arc<WasmHost>); 3] {
    [
        ("rust", host()),
        (
            "typescript",
            host_with_build(name, &format!("{name}-ts.wasm")),
        ),
        ("python", host_with_build(name, &format!("{name}-py.wasm"))),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn each_example_gives_the_same_results_and_histories_in_typescript_and_python() {
    for example in examples() {
        let mut runs = Vec::new();
        for (lang, host) in builds(example.name) {
            runs.push((
                lang,
                run_all(&host, &example.calls, &example.events, true).await,
            ));
        }
        let (_, rust) = &runs[0];
        assert!(
            rust.iter().all(|r| r.result.is_some()),
            "{}: every call finishes: {rust:?}",
            example.name
        );
        for (lang, other) in &runs[1..] {
            for (r, o) in rust.iter().zip(other) {
                assert_eq!(r, o, "{} in {lang}", example.name);
            }
        }
    }
    // The cases are the ones meant: a shipped order and a declined one, a fan-out that sums
    // and one whose child fails, an event that came and one that timed out.
    let rust = |name: &str| {
        let example = examples().into_iter().find(|e| e.name == name).unwrap();
        async move { run_all(&host(), &example.calls, &example.events, true).await }
    };
    let order = rust("order").await;
    assert!(
        matches!(&order[0].result, Some(ExecutionResult::Ok(v)) if v["tracking-number"] == "T-o1"),
        "{:?}",
        order[0].result
    );
    assert!(
        matches!(&order[1].result, Some(ExecutionResult::Err(v)) if v["payment-failed"].is_string()),
        "{:?}",
        order[1].result
    );
    let fanout = rust("fanout").await;
    assert!(
        matches!(&fanout[0].result, Some(ExecutionResult::Ok(v)) if v["sum"] == 2_880_067_194_370_816_146_u64),
        "{:?}",
        fanout[0].result
    );
    assert!(
        matches!(&fanout[1].result, Some(ExecutionResult::Err(_))),
        "{:?}",
        fanout[1].result
    );
    let approval = rust("approval").await;
    assert!(
        matches!(&approval[0].result, Some(ExecutionResult::Ok(v))
            if v["decision"] == "approved by auto-approver"
                && v["same-value-again-ok"] == true
                && v["different-value-conflict"] == true),
        "{:?}",
        approval[0].result
    );
    assert!(
        matches!(&approval[1].result, Some(ExecutionResult::Ok(v))
            if v["decision"].as_str().is_some_and(|d| d.starts_with("rejected: "))),
        "{:?}",
        approval[1].result
    );
    let events = rust("approval-event").await;
    assert_eq!(
        events[0].result,
        Some(ExecutionResult::Ok(json!("{\"amount\":700}")))
    );
    assert!(
        matches!(&events[1].result, Some(ExecutionResult::Err(e)) if e.as_str().is_some_and(|e| e.contains("no approval"))),
        "{:?}",
        events[1].result
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_history_recorded_in_one_language_replays_cleanly_in_the_others() {
    for example in examples() {
        let builds = builds(example.name);
        for (recorder, host) in &builds {
            let recorded = run_all(host, &example.calls, &example.events, true).await;
            for (replayer, other) in &builds {
                for run in &recorded {
                    let step = replay_on(other, run).await;
                    let what = format!("{} {recorder} history on {replayer}", run.call.0);
                    let RunStep::Finished { result, effects } = step else {
                        panic!("{what}: did not finish: {step:?}");
                    };
                    assert_eq!(Some(&result), run.result.as_ref(), "{what}");
                    assert!(
                        effects.events.is_empty(),
                        "{what}: recorded new events: {:?}",
                        effects.events
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_calling_in_another_order_is_nondeterministic_whatever_the_language() {
    let shipped = &orders()[..1];
    let swapped = host_with_build("order", "order-swapped.wasm");
    for (lang, host) in builds("order") {
        let recorded = run_all(&host, shipped, &[], true).await;
        let step = replay_on(&swapped, &recorded[0]).await;
        let RunStep::Finished {
            result: ExecutionResult::ExecutionError(e),
            ..
        } = step
        else {
            panic!("{lang} history on the swapped build: {step:?}");
        };
        assert_eq!(e.kind, ExecutionErrorKind::NondeterminismDetected, "{e}");
        // Both sides named: the recorded call (price) and the one the build made (reserve).
        assert!(
            e.reason.contains("history version 0")
                && e.reason.contains("o:1-price")
                && e.reason.contains("reserve"),
            "{lang}: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_typescript_and_python_runtimes_read_is_the_same_hot_cold_and_replayed() {
    let input = [(CLOCK_RANDOM, json!([3, 60_000]))];
    for (lang, file) in [
        ("typescript", "clock-random-ts.wasm"),
        ("python", "clock-random-py.wasm"),
    ] {
        let host = host_with_build("clock-random", file);
        let hot = run_all(&host, &input, &[], true).await;
        let cold = run_all(&host, &input, &[], false).await;
        assert_eq!(hot, cold, "{lang}: hot and cold differ");
        let Run {
            result, history, ..
        } = &hot[0];
        let Some(ExecutionResult::Ok(readings)) = result else {
            panic!("{lang}: {result:?}");
        };
        let readings = readings.as_array().unwrap();
        assert_eq!(readings.len(), 6, "{lang}: {readings:?}");
        for (round, pair) in readings.chunks(2).enumerate() {
            // The recorded time: creation, moved a minute by each sleep's recorded expiry,
            // the same within a step; the entropy goes on.
            let expected = t0() + chrono::TimeDelta::minutes(round as i64);
            assert_eq!(
                pair[0]["wall-nanos"].as_u64(),
                Some(expected.timestamp_nanos_opt().unwrap() as u64),
                "{lang} round {round}: {}",
                pair[0]
            );
            assert_eq!(pair[0]["wall-nanos"], pair[1]["wall-nanos"], "{lang}");
            assert_ne!(pair[0]["bytes"], pair[1]["bytes"], "{lang}");
        }
        // Reads recorded nothing: the history is the three sleeps'.
        assert_eq!(history.len(), 9, "{lang}: {history:?}");
        let step = replay_on(&host, &hot[0]).await;
        let RunStep::Finished { result, effects } = step else {
            panic!("{lang}: replay did not finish: {step:?}");
        };
        assert_eq!(
            Some(&result),
            hot[0].result.as_ref(),
            "{lang}: replayed result"
        );
        assert!(effects.events.is_empty(), "{lang}: {:?}", effects.events);
    }
}

/// The `http-get` activity in TypeScript (fetch) and Python (wasi:http through componentize-py's
/// poll loop): allowed one local server's port, it answers as the Rust build does; another
/// local server is refused by the host's egress check, which the guest sees as its `err`
/// (StarlingMonkey's fetch() reports it as a `NetworkError`, without the reason).
#[tokio::test(flavor = "multi_thread")]
async fn activities_in_typescript_and_python_reach_only_the_hosts_they_are_allowed() {
    let allowed = TestServer::start();
    let forbidden = TestServer::start();
    let get = |host: Arc<WasmHost>, url: String| async move {
        host.run_activity(
            &ffqn("weir-examples:http/client.get"),
            &json!([url]),
            weir::wasm::Cancellation::never(),
        )
        .await
        .unwrap()
    };
    for (file_name, names_the_reason) in [
        ("http-get.wasm", true),
        ("http-get-ts.wasm", false),
        ("http-get-py.wasm", true),
    ] {
        let (host, egress) = host_with_http_get_allowed_to(file_name, &allowed);
        let host = Arc::new(host);
        let outcome = get(host.clone(), allowed.url("/hello")).await;
        assert_eq!(
            outcome.result,
            ExecutionResult::Ok(json!({"status": 200, "body": "hello from /hello"})),
            "{file_name}"
        );
        assert_eq!(egress.denied(), 0, "{file_name}");
        let outcome = get(host, forbidden.url("/hello")).await;
        match &outcome.result {
            ExecutionResult::Err(e) => assert!(
                e.to_string().to_lowercase().contains("denied") || !names_the_reason,
                "{file_name}: the guest sees why: {e}"
            ),
            other => panic!("{file_name}: a forbidden port was reached: {other:?}"),
        }
        assert_eq!(egress.denied(), u64::from(outcome.attempts), "{file_name}");
    }
}

/// What a Python workflow meets when it reaches for the machine (`sandbox`, Python only):
/// files and sockets refused with an error its code can catch, an empty environment.
#[tokio::test(flavor = "multi_thread")]
async fn a_python_workflow_is_refused_files_and_sockets_and_sees_no_environment() {
    let host = Arc::new(
        host_with(|t| {
            format!("{t}\n[[component]]\nname = \"sandbox\"\nkind = \"workflow\"\npath = \"sandbox-py.wasm\"\n")
        })
        .unwrap_or_else(|e| panic!("loading the host with sandbox-py.wasm failed: {e}")),
    );
    let probe = [("weir-examples:workflows/sandbox.probe", json!([]))];
    let runs = run_all(&host, &probe, &[], true).await;
    let Some(ExecutionResult::Ok(lines)) = &runs[0].result else {
        panic!("{:?}", runs[0].result);
    };
    let lines: Vec<&str> = lines
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    // No directory is preopened: no path exists for it. Sockets are denied.
    for line in &lines[..3] {
        assert!(line.contains(": refused: FileNotFoundError"), "{lines:#?}");
    }
    assert!(
        lines[3].contains(": refused: PermissionError"),
        "{lines:#?}"
    );
    assert_eq!(lines[4], "environment: {}", "{lines:#?}");
}
