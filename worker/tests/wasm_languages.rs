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
use weir::wasm::memory::InMemoryBus;
use weir::wasm::{RunStep, WasmHost};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const CLOCK_RANDOM: &str = "weir-examples:workflows/clock-random.run";

/// The saga's cases: shipped, charge declined (one compensation), shipment failed (two), and
/// an unknown SKU (nothing to compensate).
fn orders() -> Vec<Value> {
    let order = |id: &str, customer: &str, sku: &str, address: &str| json!([{"id": id, "customer": customer, "sku": sku, "quantity": 2, "address": address}]);
    vec![
        order("o1", "alice", "widget", "1 Main St"),
        order("o2", "declined-bob", "widget", "1 Main St"),
        order("o3", "carol", "gadget", ""),
        order("o4", "dave", "nope", "1 Main St"),
    ]
}

/// What an execution left: its id, result, history and journal.
#[derive(Debug, PartialEq)]
struct Run {
    id: ExecutionId,
    result: Option<ExecutionResult>,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
}

async fn run_all(host: &Arc<WasmHost>, function: &str, inputs: &[Value], hot: bool) -> Vec<Run> {
    let mut bus = InMemoryBus::new(host.clone(), t0());
    bus.set_hot(hot);
    let ids: Vec<ExecutionId> = inputs
        .iter()
        .map(|params| bus.submit(&ffqn(function), params.clone()).unwrap())
        .collect();
    bus.run_until_idle().await.unwrap();
    bus.fire_all_timers().await.unwrap();
    ids.iter()
        .map(|id| {
            let e = bus.execution(id).unwrap();
            assert_eq!(e.created_at, t0(), "the bus creates at its start");
            Run {
                id: id.clone(),
                result: e.result.clone(),
                history: e.history.clone(),
                responses: e.responses.clone(),
            }
        })
        .collect()
}

/// Replays a finished execution's history and journal on `host`.
async fn replay_on(host: &WasmHost, function: &str, params: &Value, run: &Run) -> RunStep {
    let execution = Execution {
        id: run.id.clone(),
        ffqn: ffqn(function),
        params: params.clone(),
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

fn builds() -> [(&'static str, Arc<WasmHost>); 3] {
    [
        ("rust", host()),
        ("typescript", host_with_build("order", "order-ts.wasm")),
        ("python", host_with_build("order", "order-py.wasm")),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_order_saga_gives_the_same_results_and_histories_in_typescript_and_python() {
    let inputs = orders();
    let mut runs = Vec::new();
    for (lang, host) in builds() {
        runs.push((lang, run_all(&host, CHECKOUT, &inputs, true).await));
    }
    let (_, rust) = &runs[0];
    assert!(
        matches!(&rust[0].result, Some(ExecutionResult::Ok(v)) if v["tracking-number"] == "T-o1"),
        "{:?}",
        rust[0].result
    );
    assert!(
        matches!(&rust[1].result, Some(ExecutionResult::Err(v)) if v["payment-failed"].is_string()),
        "{:?}",
        rust[1].result
    );
    for (lang, other) in &runs[1..] {
        for (case, (r, o)) in rust.iter().zip(other).enumerate() {
            assert_eq!(r, o, "{lang}: case {case}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_history_recorded_in_one_language_replays_cleanly_in_the_others() {
    let inputs = orders();
    let builds = builds();
    for (recorder, host) in &builds {
        let recorded = run_all(host, CHECKOUT, &inputs, true).await;
        for (replayer, other) in &builds {
            for (params, run) in inputs.iter().zip(&recorded) {
                let step = replay_on(other, CHECKOUT, params, run).await;
                let RunStep::Finished { result, effects } = step else {
                    panic!("{recorder} history on {replayer}: did not finish: {step:?}");
                };
                assert_eq!(
                    Some(&result),
                    run.result.as_ref(),
                    "{recorder} on {replayer}"
                );
                assert!(
                    effects.events.is_empty(),
                    "{recorder} history on {replayer} recorded new events: {:?}",
                    effects.events
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_calling_in_another_order_is_nondeterministic_whatever_the_language() {
    let inputs = orders();
    let swapped = host_with_build("order", "order-swapped.wasm");
    for (lang, host) in builds() {
        let recorded = run_all(&host, CHECKOUT, &inputs[..1], true).await;
        let step = replay_on(&swapped, CHECKOUT, &inputs[0], &recorded[0]).await;
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
    let input = [json!([3, 60_000])];
    for (lang, file) in [
        ("typescript", "clock-random-ts.wasm"),
        ("python", "clock-random-py.wasm"),
    ] {
        let host = host_with_build("clock-random", file);
        let hot = run_all(&host, CLOCK_RANDOM, &input, true).await;
        let cold = run_all(&host, CLOCK_RANDOM, &input, false).await;
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
        let step = replay_on(&host, CLOCK_RANDOM, &input[0], &hot[0]).await;
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
