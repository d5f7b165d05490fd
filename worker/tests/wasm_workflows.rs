//! Workflow examples end to end through the wasmtime host and the in-memory bus: results,
//! histories, replay from the recorded history, hot vs cold path, nondeterminism.

mod wasm_common;

use serde_json::{Value, json};
use wasm_common::*;
use weir::model::{ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent};
use weir::replay::Execution;
use weir::wasm::memory::InMemoryBus;
use weir::wasm::{RunStep, WasmHost};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";

fn order(customer: &str, address: &str) -> Value {
    json!([{"id": "o1", "customer": customer, "sku": "widget", "quantity": 2, "address": address}])
}

fn kinds(history: &[HistoryEvent]) -> Vec<String> {
    history.iter().map(|e| e.to_string()).collect()
}

/// Replays an execution from its recorded history and journalled responses on `host` and
/// returns the step (must finish).
async fn replay(host: &WasmHost, bus: &InMemoryBus, id: &ExecutionId) -> RunStep {
    let e = bus.execution(id).unwrap();
    let execution = Execution {
        id: id.clone(),
        ffqn: e.ffqn.clone(),
        params: e.params.clone(),
    };
    let (_run, step) = host
        .start_workflow(execution, e.history.clone(), e.responses.clone(), bus.now())
        .await
        .unwrap();
    step
}

/// A replay of a finished execution gives the same result and records nothing new.
async fn assert_replays_identically(host: &WasmHost, bus: &InMemoryBus, id: &ExecutionId) {
    let step = replay(host, bus, id).await;
    let RunStep::Finished { result, effects } = step else {
        panic!("replay of {id} did not finish: {step:?}");
    };
    assert_eq!(Some(&result), bus.result(id), "replayed result of {id}");
    assert!(effects.events.is_empty(), "replay recorded new events: {:?}", effects.events);
}

#[tokio::test]
async fn order_saga_success_with_history_and_replay() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus.submit(&ffqn(CHECKOUT), order("alice", "1 Main St")).unwrap();
    bus.run_until_idle().await.unwrap();
    assert_eq!(
        bus.result(&id),
        Some(&ExecutionResult::Ok(json!({
            "order-id": "o1", "amount-cents": 500, "reservation-id": "R-o1-widget",
            "payment-id": "P-o1", "tracking-number": "T-o1"
        })))
    );
    let history = &bus.execution(&id).unwrap().history;
    // Four direct calls: one-off join set, child request, join-next each.
    assert_eq!(history.len(), 12, "{:#?}", kinds(history));
    let text = kinds(history).join("\n");
    for f in ["o:1-price", "o:2-reserve", "o:3-charge", "o:4-ship"] {
        assert!(text.contains(&format!("JoinSetCreate({f})")), "{text}");
    }
    assert!(text.contains(r#"weir-examples:shop/payment.charge ["o1","alice",500] Activity"#), "{text}");
    assert_replays_identically(&host, &bus, &id).await;
}

#[tokio::test]
async fn order_saga_compensates_a_declined_charge_and_a_failed_shipment() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let declined = bus.submit(&ffqn(CHECKOUT), order("declined-bob", "1 Main St")).unwrap();
    let unshippable = bus.submit(&ffqn(CHECKOUT), order("carol", "  ")).unwrap();
    bus.run_until_idle().await.unwrap();

    let Some(ExecutionResult::Err(e)) = bus.result(&declined) else {
        panic!("{:?}", bus.result(&declined));
    };
    assert!(e["payment-failed"].as_str().unwrap().contains("declined"), "{e}");
    let text = kinds(&bus.execution(&declined).unwrap().history).join("\n");
    assert!(text.contains("inventory.release [\"R-o1-widget\"]"), "{text}");
    assert!(!text.contains("shipping.ship"), "{text}");

    let Some(ExecutionResult::Err(e)) = bus.result(&unshippable) else {
        panic!("{:?}", bus.result(&unshippable));
    };
    assert!(e.get("shipping-failed").is_some(), "{e}");
    let text = kinds(&bus.execution(&unshippable).unwrap().history).join("\n");
    let refund = text.find("payment.refund").expect("refund");
    let release = text.find("inventory.release").expect("release");
    assert!(refund < release, "refund before release: {text}");

    assert_replays_identically(&host, &bus, &declined).await;
    assert_replays_identically(&host, &bus, &unshippable).await;
}

#[tokio::test]
async fn order_swapped_replayed_against_order_history_is_nondeterministic() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus.submit(&ffqn(CHECKOUT), order("alice", "1 Main St")).unwrap();
    bus.run_until_idle().await.unwrap();

    // The same deployment with `order` replaced by the build that swaps two calls.
    let swapped = host_with(|t| t.replace("path = \"order.wasm\"", "path = \"order-swapped.wasm\""))
        .unwrap();
    let step = replay(&swapped, &bus, &id).await;
    let RunStep::Finished {
        result: ExecutionResult::ExecutionError(e),
        effects,
    } = step
    else {
        panic!("expected a nondeterminism error, got {step:?}");
    };
    assert_eq!(e.kind, ExecutionErrorKind::NondeterminismDetected, "{e}");
    assert!(e.reason.contains("history version 0"), "names the version: {e}");
    assert!(e.reason.contains("o:1-price") && e.reason.contains("reserve"), "{e}");
    assert!(effects.events.is_empty());
}

#[tokio::test]
async fn params_are_type_checked_at_submission() {
    let host = host();
    let mut bus = InMemoryBus::new(host, t0());
    let bad = json!([{"id": "o1", "customer": "a", "sku": "widget", "quantity": "two", "address": "x"}]);
    let err = bus.submit(&ffqn(CHECKOUT), bad).unwrap_err().to_string();
    assert!(err.contains("parameter `order`"), "{err}");
    assert!(err.contains("record { id: string"), "{err}");
    assert!(err.contains(".quantity") && err.contains("u32"), "{err}");
    let err = bus.submit(&ffqn(CHECKOUT), json!([])).unwrap_err().to_string();
    assert!(err.contains("takes 1 parameter"), "{err}");
}

#[tokio::test]
async fn unsatisfied_and_wasi_imports_fail_at_load_naming_the_import() {
    // Without `compute`, order's imports of compute/shop interfaces are unsatisfied.
    let err = host_with(|t| {
        let start = t.find("[[component]]\nname = \"compute\"").unwrap();
        let end = start + 1 + t[start + 1..].find("[[component]]").unwrap();
        format!("{}{}", &t[..start], &t[end..])
    })
        .err()
        .expect("load must fail")
        .to_string();
    assert!(err.contains("imports `weir-examples:"), "{err}");
    assert!(err.contains("no registered component exports"), "{err}");
    // A component with WASI imports cannot be a workflow.
    let err = host_with(|t| {
        t.replace(
            "name = \"http-get\"\nkind = \"activity\"\npath = \"http-get.wasm\"\nroute = \"http\"",
            "name = \"http-get\"\nkind = \"workflow\"\npath = \"http-get.wasm\"",
        )
    })
    .err()
    .expect("load must fail")
    .to_string();
    assert!(err.contains("imports `wasi:") && err.contains("no WASI"), "{err}");
}
