//! Queries (issue 35 item 5) through the wasmtime host and the in-memory bus, with the
//! example `approval-event`: its `collect` keeps the payloads it has taken (`set-state`), its
//! query `collected` reads them (`get-state`), its query `peek-random` tries a side effect.

mod wasm_common;

use serde_json::{Value, json};
use wasm_common::*;
use weir::model::{ExecutionId, ExecutionResult};
use weir::wasm::memory::{BusError, InMemoryBus, Record};
use weir_core::query::{QueryAnswer, QueryErrorKind};

const COLLECT: &str = "weir-examples:workflows/approval-event.collect";

fn item(bus: &InMemoryBus, id: &ExecutionId, event_id: &str, payload: Value) -> Record {
    Record::Event(weir_core::records::InboundEvent {
        event: weir::codec::ReceivedEvent {
            event_id: event_id.into(),
            name: "item".into(),
            payload,
        },
        target: id.clone(),
        sent_at: bus.now(),
        correlation_key: None,
        waited_until: None,
    })
}

fn value(answer: &QueryAnswer) -> &Value {
    match &answer.outcome {
        Ok(value) => value,
        Err(e) => panic!("query {} of {}: {e}", answer.query_id, answer.execution_id),
    }
}

fn error_kind(answer: &QueryAnswer) -> QueryErrorKind {
    match &answer.outcome {
        Ok(value) => panic!("query {} answered {value}", answer.query_id),
        Err(e) => e.kind,
    }
}

/// A parked `collect` answers `collected` with the payloads taken so far, hot (its run
/// parked in memory) and after its run is dropped and rebuilt by replay; the answer's version
/// is the history's length; the query changes nothing, and the execution goes on.
#[tokio::test]
async fn a_parked_run_answers_its_query_from_the_values_it_set_hot_and_after_a_rebuild() {
    let host = host();
    for hot in [true, false] {
        let mut bus = InMemoryBus::new(host.clone(), t0());
        bus.set_hot(hot);
        let id = bus.submit(&ffqn(COLLECT), json!([3, 0])).unwrap();
        bus.run_until_idle().await.unwrap();
        // Set once at the start, before any event.
        let answer = bus.query(&id, "collected", json!([])).await.unwrap();
        assert_eq!(value(&answer), &json!([]), "hot: {hot}");

        bus.send(item(&bus, &id, "ev-1", json!({"n": 1})));
        bus.send(item(&bus, &id, "ev-2", json!("two")));
        bus.run_until_idle().await.unwrap();
        let history = bus.execution(&id).unwrap().history.clone();
        let answer = bus.query(&id, "collected", json!([])).await.unwrap();
        assert_eq!(
            value(&answer),
            &json!([r#"{"n":1}"#, r#""two""#]),
            "hot: {hot}"
        );
        // The changelog's length: the history, the creation and the journalled responses.
        let changelog = bus.changelog(&id).unwrap().len() as u64;
        assert_eq!(answer.version, changelog, "hot: {hot}");

        // Dropped and rebuilt by replay: the replay sets the same values again.
        bus.evict_all();
        let again = bus.query(&id, "collected", json!([])).await.unwrap();
        assert_eq!(value(&again), value(&answer), "rebuilt, hot: {hot}");
        assert_eq!(again.version, answer.version, "hot: {hot}");
        assert_eq!(bus.execution(&id).unwrap().history, history, "hot: {hot}");
        assert_eq!(bus.result(&id), None, "still running, hot: {hot}");

        bus.send(item(&bus, &id, "ev-3", json!(3)));
        bus.run_until_idle().await.unwrap();
        assert_eq!(
            bus.result(&id),
            Some(&ExecutionResult::Ok(json!([r#"{"n":1}"#, r#""two""#, "3"]))),
            "hot: {hot}"
        );
        // Finished: its result is its answer.
        let answer = bus.query(&id, "collected", json!([])).await.unwrap();
        assert_eq!(error_kind(&answer), QueryErrorKind::Finished, "hot: {hot}");
        assert!(bus.dead_letters().is_empty(), "{:?}", bus.dead_letters());
    }
}

/// A query that calls the host for a side effect (`random-u64`) is answered `side-effect`,
/// naming the call, and the run's history is unchanged; an undeclared name is
/// `unknown-query`, params that do not fit are `invalid-params`. The run goes on unharmed.
#[tokio::test]
async fn a_query_with_a_side_effect_an_unknown_name_or_bad_params_is_refused_and_changes_nothing() {
    let host = host();
    let mut bus = InMemoryBus::new(host, t0());
    let id = bus.submit(&ffqn(COLLECT), json!([2, 0])).unwrap();
    bus.run_until_idle().await.unwrap();
    bus.send(item(&bus, &id, "ev-1", json!("a")));
    bus.run_until_idle().await.unwrap();
    let history = bus.execution(&id).unwrap().history.clone();
    let responses = bus.execution(&id).unwrap().responses.clone();

    let answer = bus.query(&id, "peek-random", json!([])).await.unwrap();
    let Err(error) = &answer.outcome else {
        panic!("peek-random answered {:?}", answer.outcome);
    };
    assert_eq!(error.kind, QueryErrorKind::SideEffect, "{error}");
    assert!(error.message.contains("random-u64"), "{error}");
    assert!(error.message.contains(&id.to_string()), "{error}");

    let answer = bus.query(&id, "await-approval", json!([])).await.unwrap();
    assert_eq!(error_kind(&answer), QueryErrorKind::UnknownQuery);
    let answer = bus.query(&id, "no-such-query", json!([])).await.unwrap();
    assert_eq!(error_kind(&answer), QueryErrorKind::UnknownQuery);
    let answer = bus.query(&id, "collected", json!([1])).await.unwrap();
    assert_eq!(error_kind(&answer), QueryErrorKind::InvalidParams);

    let stored = bus.execution(&id).unwrap();
    assert_eq!(stored.history, history, "no query recorded anything");
    assert_eq!(stored.responses, responses);
    // The parked run still answers, and finishes as if no query had come.
    let answer = bus.query(&id, "collected", json!([])).await.unwrap();
    assert_eq!(value(&answer), &json!([r#""a""#]));
    bus.send(item(&bus, &id, "ev-2", json!("b")));
    bus.run_until_idle().await.unwrap();
    assert_eq!(
        bus.result(&id),
        Some(&ExecutionResult::Ok(json!([r#""a""#, r#""b""#])))
    );
    assert!(bus.dead_letters().is_empty(), "{:?}", bus.dead_letters());
}

/// Query functions are not workflows: submitting one is refused as an unknown function.
#[tokio::test]
async fn a_query_function_cannot_be_submitted() {
    let mut bus = InMemoryBus::new(host(), t0());
    let refused = bus.submit(
        &ffqn("weir-examples:workflows/approval-event.collected"),
        json!([]),
    );
    assert!(
        matches!(
            refused,
            Err(BusError::Submit(weir::wasm::SubmitError::UnknownFunction(
                _
            )))
        ),
        "{refused:?}"
    );
}

/// A declared query the component does not export is a load error naming it; queries are a
/// workflow's.
#[test]
fn a_declared_query_that_is_not_exported_is_a_load_error() {
    let declared = "queries = [\"collected\", \"peek-random\"]";
    let error = host_with(|t| {
        assert!(t.contains(declared), "components.toml declares the queries");
        t.replace(
            declared,
            "queries = [\"collected\", \"peek-random\", \"tally\"]",
        )
    })
    .err()
    .expect("refused");
    let text = error.to_string();
    assert!(
        text.contains("approval-event") && text.contains("`tally`"),
        "{text}"
    );

    let text = "[[component]]\nname = \"x\"\nkind = \"activity\"\nroute = \"r\"\npath = \"x.wasm\"\nqueries = [\"status\"]\n";
    let error = weir::wasm::ComponentsFile::parse(text, &components_toml())
        .unwrap()
        .resolve(&examples_dir())
        .expect_err("refused");
    assert!(error.to_string().contains("workflow's"), "{error}");
}

/// The TypeScript and Python builds of `approval-event` keep and answer the same state as the
/// Rust one, and their `peek-random` is refused alike.
#[tokio::test(flavor = "multi_thread")]
async fn queries_answer_the_same_in_typescript_and_python() {
    let builds = [
        ("rust", host()),
        (
            "typescript",
            host_with_build("approval-event", "approval-event-ts.wasm"),
        ),
        (
            "python",
            host_with_build("approval-event", "approval-event-py.wasm"),
        ),
    ];
    for (language, host) in builds {
        let mut bus = InMemoryBus::new(host, t0());
        let id = bus.submit(&ffqn(COLLECT), json!([2, 0])).unwrap();
        bus.run_until_idle().await.unwrap();
        bus.send(item(&bus, &id, "ev-1", json!({"n": 1})));
        bus.run_until_idle().await.unwrap();
        let answer = bus.query(&id, "collected", json!([])).await.unwrap();
        assert_eq!(value(&answer), &json!([r#"{"n":1}"#]), "{language}");
        let answer = bus.query(&id, "peek-random", json!([])).await.unwrap();
        assert_eq!(
            error_kind(&answer),
            QueryErrorKind::SideEffect,
            "{language}: {:?}",
            answer.outcome
        );
        bus.send(item(&bus, &id, "ev-2", json!(2)));
        bus.run_until_idle().await.unwrap();
        assert_eq!(
            bus.result(&id),
            Some(&ExecutionResult::Ok(json!([r#"{"n":1}"#, "2"]))),
            "{language}"
        );
    }
}
