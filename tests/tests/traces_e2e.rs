//! Issue 14 item 6 (traces) on the real stack: the W3C trace context in Kafka headers and
//! spans exported over OTLP.
//! - A submission made inside a caller's trace (a `traceparent` header, as any Kafka client's
//!   tracing instrumentation writes it) runs inside it: its history records, every activity
//!   request, every activity's answer and its result carry that trace id.
//! - The worker exports its spans to an OTLP/HTTP collector (here a fake one in the test that
//!   keeps what it is sent): the execution's steps are in the caller's trace, the first one a
//!   child of the caller's span, and so are the activities' attempts.
//! - A submission without one gets a trace of its own, derived from its id, carried the same.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weir::codec::{ActivityRequest, ExecutionFinished, HistoryRecord};
use weir::model::{ExecutionId, Response};
use weir::topology::TopicRole;
use weir_e2e::deployment::{Deployment, ReadRecord};
use weir_e2e::{free_port, wait_for};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const TIMEOUT: Duration = Duration::from_secs(120);

/// An OTLP/HTTP JSON collector on 127.0.0.1: every span it is sent, as JSON.
async fn collector() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = Arc::clone(&spans);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let request: Value = serde_json::from_slice(&body).expect("OTLP JSON");
                let mut kept = kept.lock().expect("lock");
                for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                    for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                        kept.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                    }
                }
                axum::Json(json!({}))
            }
        }),
    );
    let port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the collector");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("collector") });
    (port, spans)
}

fn trace_id_of<R>(record: &ReadRecord<R>) -> Option<String> {
    record
        .headers
        .iter()
        .find(|(key, _)| key == "traceparent")
        .and_then(|(_, value)| std::str::from_utf8(value).ok())
        .and_then(|value| value.split('-').nth(1))
        .map(str::to_owned)
}

fn order(id: &str) -> Value {
    json!([{ "id": id, "customer": "alice", "sku": "widget", "quantity": 2, "address": "1 Main St" }])
}

fn assert_all_in<R: std::fmt::Debug>(records: &[&ReadRecord<R>], trace: &str, what: &str) {
    assert!(!records.is_empty(), "no {what}");
    for record in records {
        assert_eq!(
            trace_id_of(record).as_deref(),
            Some(trace),
            "{what} at offset {}: {:?}",
            record.offset,
            record.headers
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callers_trace_runs_through_every_record_and_span_of_its_execution() {
    let (port, spans) = collector().await;
    let deployment = Deployment::new("traces");
    let endpoint = format!("http://127.0.0.1:{port}");
    let _worker = deployment.start_worker(
        "w",
        &[
            "--inline-activities",
            "off",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/json",
        ],
    );
    let producer = deployment.producer();
    let traced = deployment
        .submit_with_headers(
            &producer,
            CHECKOUT,
            order("t1"),
            &[("traceparent", &format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))],
        )
        .await;
    let untraced = deployment.submit(&producer, CHECKOUT, order("t2")).await;
    let results = deployment.results(&[traced.clone(), untraced.clone()], TIMEOUT);
    assert!(results[&traced].is_ok(), "{:?}", results[&traced]);
    let own_trace: String = untraced
        .root()
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();

    let history = deployment
        .read_records_to_end::<HistoryRecord>(&deployment.topic(TopicRole::History), TIMEOUT);
    let finished = deployment
        .read_records_to_end::<ExecutionFinished>(&deployment.topic(TopicRole::Results), TIMEOUT);
    let answers = deployment
        .read_records_to_end::<Response>(&deployment.topic(TopicRole::Responses), TIMEOUT);
    let mut requests = Vec::new();
    for topic in deployment.topology.route_topics() {
        requests.extend(deployment.read_records_to_end::<ActivityRequest>(&topic, TIMEOUT));
    }
    for (id, trace) in [(&traced, TRACE_ID), (&untraced, own_trace.as_str())] {
        let of = |e: &ExecutionId| e == id;
        assert_all_in(
            &history
                .iter()
                .filter(|r| of(&r.record.execution_id))
                .collect::<Vec<_>>(),
            trace,
            "history record",
        );
        assert_all_in(
            &finished
                .iter()
                .filter(|r| of(&r.record.execution_id))
                .collect::<Vec<_>>(),
            trace,
            "result",
        );
        let asked: Vec<_> = requests
            .iter()
            .filter(|r| of(&r.record.parent_execution_id))
            .collect();
        assert_eq!(asked.len(), 4, "price, reserve, charge, ship of {id}");
        assert_all_in(&asked, trace, "activity request");
        assert_all_in(
            &answers
                .iter()
                .filter(|r| r.key == id.to_string())
                .collect::<Vec<_>>(),
            trace,
            "activity answer",
        );
    }

    // The spans: the steps of the execution and the activities' attempts, in the caller's
    // trace, the first step a child of the caller's span.
    let exported = wait_for("the execution's spans at the collector", TIMEOUT, || {
        let spans = Arc::clone(&spans);
        async move {
            let spans = spans.lock().expect("lock").clone();
            let in_trace: Vec<Value> = spans
                .into_iter()
                .filter(|s| {
                    s["traceId"].as_str().map(str::to_lowercase).as_deref() == Some(TRACE_ID)
                })
                .collect();
            let activities = in_trace.iter().filter(|s| s["name"] == "activity").count();
            (activities >= 4 && in_trace.iter().any(|s| s["name"] == "workflow"))
                .then_some(in_trace)
        }
    })
    .await;
    let first_step = exported
        .iter()
        .find(|s| s["name"] == "workflow")
        .expect("a workflow span");
    assert_eq!(
        first_step["parentSpanId"]
            .as_str()
            .map(str::to_lowercase)
            .as_deref(),
        Some(CALLER_SPAN),
        "{first_step}"
    );
}
