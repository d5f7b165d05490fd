//! The activity worker on the real stack (issue 11, items 13 to 17): attempts that do not wait
//! for each other nor cost the consumer its membership, answers committed exactly once with
//! the progress in the committed offsets, durable retries across a restart, the core's one
//! retry decision, cancellation of a running attempt and of a waiting retry, a function the
//! worker does not run (a rolling deploy), and the deadline of an external activity.
//!
//! Requests are mostly written by the test itself (as a workflow worker writes them) to the
//! `slow` route, on a partition of its choosing, and their answers read from `weir.responses`;
//! the workers run `--activities-only` then, so nothing consumes the answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use tokio::sync::watch;
use weir::codec::{ActivityCancel, ActivityRequest, HistoryEntry, RecordPosition};
use weir::kafka::activity_worker::{ActivitySettings, ActivityWorker};
use weir::kafka::member::WorkerConfig;
use weir::kafka::partitioner::partition_for_key;
use weir::metrics::Metrics;
use weir::model::{ExecutionErrorKind, ExecutionId, ExecutionResult, JoinSetId, Response};
use weir::topology::TopicRole;
use weir::wasm::{EngineConfig, WasmHost};
use weir::wire::{KIND_HEADER, RecordKind};
use weir_e2e::deployment::{Deployment, WorkerProcess, committed_reader, components_dir};
use weir_e2e::{kafka_config, repo_root, wait_for, wait_until};

const SLOW: &str = "weir-examples:slow/sleeper";
const ACTIVITY_GROUP: &str = "weir.activity-workers";
const TIMEOUT: Duration = Duration::from_secs(120);

fn slow_route(deployment: &Deployment) -> (String, i32) {
    let topic = deployment
        .topology
        .route(SLOW)
        .expect("a route for the slow activity")
        .topic
        .clone();
    let partitions = deployment
        .topology
        .topics
        .iter()
        .find(|t| t.name == topic)
        .expect("the route's topic")
        .partitions;
    (topic, partitions)
}

/// A request of `function` of the slow activity for a parent of its own, keyed so that it lands
/// on `partition` of the route's topic.
fn request_on(partition: i32, partitions: i32, function: &str, params: Value) -> ActivityRequest {
    let js = JoinSetId::one_off(1, function).expect("a join set id");
    loop {
        let parent = ExecutionId::top_level(ulid::Ulid::new());
        let child = parent.child(&js, 1);
        if partition_for_key(child.to_string().as_bytes(), partitions) == partition {
            return ActivityRequest {
                execution_id: child,
                parent_execution_id: parent,
                ffqn: format!("{SLOW}.{function}").parse().expect("ffqn"),
                params,
                attempt: 1,
                timeout_millis: None,
                deadline: None,
            };
        }
    }
}

async fn send(
    deployment: &Deployment,
    producer: &FutureProducer,
    topic: &str,
    key: &ExecutionId,
    value: Vec<u8>,
    headers: Option<OwnedHeaders>,
) {
    let key = key.to_string();
    let mut record = FutureRecord::to(topic).key(&key).payload(&value);
    if let Some(headers) = headers {
        record = record.headers(headers);
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)
        .unwrap_or_else(|e| panic!("produce to {topic} for {}: {e}", deployment.namespace));
}

async fn send_request(
    deployment: &Deployment,
    producer: &FutureProducer,
    topic: &str,
    request: &ActivityRequest,
) {
    let value = deployment.codec.encode(topic, request).expect("encode");
    send(
        deployment,
        producer,
        topic,
        &request.execution_id,
        value,
        None,
    )
    .await;
}

/// What a workflow worker writes when the parent closes the join set.
async fn send_cancel(
    deployment: &Deployment,
    producer: &FutureProducer,
    topic: &str,
    request: &ActivityRequest,
) {
    let cancel = ActivityCancel {
        execution_id: request.execution_id.clone(),
        parent_execution_id: request.parent_execution_id.clone(),
        cancelled_at: Utc::now(),
    };
    let value = deployment.codec.encode(topic, &cancel).expect("encode");
    let headers = OwnedHeaders::new().insert(Header {
        key: KIND_HEADER,
        value: Some(RecordKind::Cancel.header_value()),
    });
    send(
        deployment,
        producer,
        topic,
        &request.execution_id,
        value,
        Some(headers),
    )
    .await;
}

/// Every answer on `weir.responses` to one of `children`, with when it was read, until each
/// has one (and for `settle` longer, to catch a second one); panics after `timeout`.
fn answers(
    deployment: &Deployment,
    children: &[&ExecutionId],
    timeout: Duration,
    settle: Duration,
) -> HashMap<ExecutionId, Vec<(Instant, ExecutionResult)>> {
    let topic = deployment.topic(TopicRole::Responses);
    let consumer = committed_reader(&topic);
    let mut answers: HashMap<ExecutionId, Vec<(Instant, ExecutionResult)>> = HashMap::new();
    let mut all_since: Option<Instant> = None;
    wait_until("the answers", timeout, || {
        while let Some(message) = consumer.poll(Duration::from_millis(50)) {
            let message = message.expect("consume");
            let position = RecordPosition::at(&topic, message.partition(), message.offset());
            let response: Response = deployment
                .codec
                .decode(message.payload().unwrap_or_default(), &position)
                .expect("a response");
            if let Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            } = response
                && children.contains(&&child_execution_id)
            {
                answers
                    .entry(child_execution_id)
                    .or_default()
                    .push((Instant::now(), result));
            }
        }
        if answers.len() == children.len() {
            let since = *all_since.get_or_insert_with(Instant::now);
            return (since.elapsed() >= settle).then_some(());
        }
        None
    });
    answers
}

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

/// Nothing was ever written to the DLQ (its one partition has no offset yet).
fn assert_dlq_empty(deployment: &Deployment) {
    use rdkafka::consumer::Consumer;
    let dlq = deployment.topic(TopicRole::Dlq);
    let consumer: rdkafka::consumer::BaseConsumer =
        kafka_config().client().create().expect("consumer");
    let (low, high) = consumer
        .fetch_watermarks(&dlq, 0, Duration::from_secs(30))
        .expect("the DLQ's watermarks");
    assert_eq!((low, high), (0, 0), "records went to {dlq}");
}

fn error_of(result: &ExecutionResult) -> &weir::model::ExecutionError {
    match result {
        ExecutionResult::ExecutionError(e) => e,
        other => panic!("expected an execution error, got {other}"),
    }
}

/// Item 16: a 5 s attempt and a 100 ms one in the same partition, read in one batch: the fast
/// one is answered while the slow one runs (before this worker, both answers committed
/// together, after 5 s).
#[tokio::test(flavor = "multi_thread")]
async fn a_fast_activity_is_answered_while_a_slow_one_of_its_partition_runs() {
    let deployment = Deployment::new("act_fast");
    let (topic, partitions) = slow_route(&deployment);
    let slow = request_on(2, partitions, "sleep", json!([5_000]));
    let fast = request_on(2, partitions, "sleep", json!([100]));
    let producer = deployment.producer();
    // Written before the worker starts: its first fetch reads both, slow first.
    send_request(&deployment, &producer, &topic, &slow).await;
    send_request(&deployment, &producer, &topic, &fast).await;
    let worker = deployment.start_worker("w", &["--activities-only"]);
    let started = Instant::now();
    let answers = answers(
        &deployment,
        &[&slow.execution_id, &fast.execution_id],
        TIMEOUT,
        Duration::from_secs(1),
    );
    let (fast_at, fast_result) = &answers[&fast.execution_id][0];
    let (slow_at, slow_result) = &answers[&slow.execution_id][0];
    eprintln!(
        "fast (100 ms) answered {:?} after the worker started, slow (5 s) {:?}; {:?} apart",
        fast_at.duration_since(started),
        slow_at.duration_since(started),
        slow_at.duration_since(*fast_at)
    );
    assert_eq!(fast_result, &ExecutionResult::Ok(json!(100)));
    assert_eq!(slow_result, &ExecutionResult::Ok(json!(5_000)));
    assert!(fast_at < slow_at, "the fast answer waited for the slow one");
    for (child, answers) in &answers {
        assert_eq!(answers.len(), 1, "{child} answered {} times", answers.len());
    }
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 2.0);
}

/// Item 16: an attempt of 12 s with `max.poll.interval.ms` at 7 s completes, commits its
/// answer and its progress once, and is never run again (before, the consumer left its group
/// while the attempt ran, the commit was refused, and the attempt ran again, forever).
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_longer_than_the_poll_interval_commits_once() {
    let deployment = Deployment::new("act_poll");
    let (topic, partitions) = slow_route(&deployment);
    let worker = deployment.start_worker(
        "w",
        &[
            "--activities-only",
            "--kafka-property",
            "max.poll.interval.ms=7000",
        ],
    );
    let long = request_on(1, partitions, "sleep", json!([12_000]));
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &long).await;
    let sent = Instant::now();
    let answers = answers(
        &deployment,
        &[&long.execution_id],
        TIMEOUT,
        Duration::from_secs(2),
    );
    let found = &answers[&long.execution_id];
    eprintln!(
        "a 12 s attempt (max.poll.interval.ms = 7000) answered after {:?}",
        found[0].0.duration_since(sent)
    );
    assert_eq!(found.len(), 1, "answered {} times", found.len());
    assert_eq!(found[0].1, ExecutionResult::Ok(json!(12_000)));
    // Its progress is committed past it: nobody runs it again.
    let (offset, metadata) = wait_for("the progress past the request", TIMEOUT, || async {
        deployment
            .committed(ACTIVITY_GROUP, &topic, 1)
            .filter(|(offset, _)| *offset > 0)
    })
    .await;
    eprintln!("committed progress of {topic}/1: offset {offset}, metadata `{metadata}`");
    assert_eq!(metadata, "wa1;n=0;o=", "nothing unfinished");
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 1.0);
    assert!(!worker.log_contains("maximum poll interval"));
}

/// Items 14 and 16: a retry is durable in the committed progress. Attempt 1 traps; its retry
/// (attempt 2, due 8 s later) is committed; the worker is killed; another one takes the
/// partition over, runs attempt 2 once it is due (not attempt 1 again), and, that one trapping
/// too, answers `retries-exhausted` with the last reason (before, the raw `trap`).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_survives_a_restart_and_gives_up_with_retries_exhausted() {
    let deployment = Deployment::new("act_retry");
    let (topic, partitions) = slow_route(&deployment);
    let components = deployment.components_with("retry", |text| {
        text.replace(
            "route = \"slow\"\nlimits = { timeout_ms = 60_000 }",
            "route = \"slow\"\nlimits = { timeout_ms = 60_000 }\nretries = { max_attempts = 2, backoff_base_ms = 8000, backoff_max_ms = 8000, jitter = 0.0 }",
        )
    });
    let components = components.to_string_lossy().into_owned();
    let env = [("WEIR_COMPONENTS", components.as_str())];
    let first = deployment.start_worker_with_env("first", &["--activities-only"], &env);
    let crash = request_on(3, partitions, "crash", json!([0]));
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &crash).await;
    let (_, metadata) = wait_for("the retry in the committed progress", TIMEOUT, || async {
        deployment
            .committed(ACTIVITY_GROUP, &topic, 3)
            .filter(|(_, metadata)| metadata.contains(":2@"))
    })
    .await;
    let due_ms: i64 = metadata
        .rsplit('@')
        .next()
        .and_then(|ms| ms.parse().ok())
        .expect("a not-before instant");
    eprintln!("committed progress with the retry: `{metadata}`");
    assert_eq!(metric(&first, "weir_activity_attempts_total"), 1.0);
    first.signal("KILL");
    let second = deployment.start_worker_with_env("second", &["--activities-only"], &env);
    let answers = answers(
        &deployment,
        &[&crash.execution_id],
        TIMEOUT,
        Duration::from_secs(1),
    );
    let found = &answers[&crash.execution_id];
    assert_eq!(found.len(), 1);
    let e = error_of(&found[0].1);
    assert_eq!(e.kind, ExecutionErrorKind::RetriesExhausted, "{e}");
    assert!(
        e.reason
            .starts_with("2 attempts failed; the last one: trap: "),
        "{e}"
    );
    assert!(e.reason.contains("wasm `unreachable`"), "{e}");
    assert!(
        Utc::now().timestamp_millis() >= due_ms,
        "attempt 2 ran before its backoff ended"
    );
    assert_eq!(
        metric(&second, "weir_activity_attempts_total"),
        1.0,
        "the new owner ran attempt 2 only"
    );
}

/// Item 13: a retry waiting for its backoff is dropped by a cancellation, and the parent is
/// answered `cancelled` at once (before, the retry ran when due and its answer was ignored).
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_retry_is_dropped_when_its_activity_is_cancelled() {
    let deployment = Deployment::new("act_cancel_retry");
    let (topic, partitions) = slow_route(&deployment);
    let components = deployment.components_with("backoff", |text| {
        text.replace(
            "route = \"slow\"\nlimits = { timeout_ms = 60_000 }",
            "route = \"slow\"\nlimits = { timeout_ms = 60_000 }\nretries = { backoff_base_ms = 60000, backoff_max_ms = 60000, jitter = 0.0 }",
        )
    });
    let components = components.to_string_lossy().into_owned();
    let worker = deployment.start_worker_with_env(
        "w",
        &["--activities-only"],
        &[("WEIR_COMPONENTS", components.as_str())],
    );
    let failing = request_on(0, partitions, "fail", json!([0]));
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &failing).await;
    wait_metric(&worker, "weir_activity_retries_scheduled_total", 1.0).await;
    let due = Utc::now() + chrono::Duration::seconds(55);
    send_cancel(&deployment, &producer, &topic, &failing).await;
    let answers = answers(
        &deployment,
        &[&failing.execution_id],
        TIMEOUT,
        Duration::from_secs(1),
    );
    assert!(Utc::now() < due, "the cancellation waited for the backoff");
    let found = &answers[&failing.execution_id];
    assert_eq!(found.len(), 1);
    let e = error_of(&found[0].1);
    assert_eq!(e.kind, ExecutionErrorKind::Cancelled, "{e}");
    assert!(e.reason.contains("waiting for its backoff"), "{e}");
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 1.0);
    assert_eq!(metric(&worker, "weir_activity_cancelled_total"), 1.0);
}

/// Item 13 end to end: `patience.race` of a 60 s activity against a 3 s deadline. The delay
/// wins, closing the join set cancels the activity: the parent journals it `cancelled`, the
/// workflow worker writes the cancellation to the activity's route, and the activity worker
/// interrupts the running attempt (before, the activity ran its 60 s and answered `ok` to a
/// finished parent).
#[tokio::test(flavor = "multi_thread")]
async fn a_running_activity_is_interrupted_when_its_join_set_is_closed() {
    const RACE: &str = "weir-examples:workflows/patience.race";
    let deployment = Deployment::new("act_cancel_run");
    let worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let race = deployment
        .submit(&producer, RACE, json!([60_000, 3_000, 5_000]))
        .await;
    let results = deployment.results(std::slice::from_ref(&race), TIMEOUT);
    assert_eq!(results[&race], ExecutionResult::Ok(json!("deadline")));
    let store = deployment.store().await;
    let history = wait_for("the race's history in the store", TIMEOUT, || async {
        let history = deployment.store_history(&store, &race).await;
        history
            .iter()
            .any(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
            .then_some(history)
    })
    .await;
    let cancelled = history.iter().find_map(|r| match &r.entry {
        HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            result: ExecutionResult::ExecutionError(e),
            ..
        }) => Some(e.clone()),
        _ => None,
    });
    let cancelled = cancelled.unwrap_or_else(|| panic!("no cancelled answer in {history:#?}"));
    eprintln!("the race's history records: {cancelled}");
    assert_eq!(cancelled.kind, ExecutionErrorKind::Cancelled, "{cancelled}");
    assert!(
        cancelled.reason.contains("join set was closed"),
        "{cancelled}"
    );
    // Panics if the attempt is not interrupted within the timeout.
    wait_for("the attempt interrupted", TIMEOUT, || async {
        (metric(&worker, "weir_activity_cancelled_total") == 1.0).then_some(())
    })
    .await;
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 1.0);
}

/// Components without the `slow` activity (and the workflows that import it: `patience`,
/// `cancellable`, `bounded`): an activity worker of the deploy before `slow` existed. A new
/// example importing `slow` must be added here, or the old worker refuses to start.
fn without_slow(text: String) -> String {
    // And the workflows that import it (they would not load).
    text.split("[[component]]")
        .filter(|block| {
            !["slow", "patience", "cancellable", "bounded"]
                .iter()
                .any(|name| block.contains(&format!("name = \"{name}\"")))
        })
        .collect::<Vec<_>>()
        .join("[[component]]")
}

/// Item 15, a rolling deploy: a request for a function the only activity worker does not run
/// waits for a worker that does (before: dead-lettered, its parent never answered). A new
/// worker joins, the old one leaves, the new one takes the partition over and answers.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_activity_waits_for_a_worker_that_runs_it() {
    let deployment = Deployment::new("act_unknown");
    let (topic, partitions) = slow_route(&deployment);
    let old_components = deployment.components_with("old", without_slow);
    let old_components = old_components.to_string_lossy().into_owned();
    let old = deployment.start_worker_with_env(
        "old",
        &["--activities-only"],
        &[("WEIR_COMPONENTS", old_components.as_str())],
    );
    let request = request_on(4, partitions, "sleep", json!([100]));
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &request).await;
    wait_metric(&old, "weir_activity_unknown_requests_total", 1.0).await;
    let new = deployment.start_worker("new", &["--activities-only"]);
    old.signal("INT");
    let answers = answers(
        &deployment,
        &[&request.execution_id],
        TIMEOUT,
        Duration::from_secs(1),
    );
    let found = &answers[&request.execution_id];
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1, ExecutionResult::Ok(json!(100)));
    assert_eq!(metric(&new, "weir_activity_attempts_total"), 1.0);
    assert_dlq_empty(&deployment);
}

/// Item 15: with no worker that runs it, a request for an unknown function is answered
/// `unknown-function` once its grace has passed (3 s here; an activity worker run in-process,
/// as the grace has no flag yet).
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_activity_is_answered_after_its_grace() {
    let deployment = Deployment::new("act_grace");
    let (topic, partitions) = slow_route(&deployment);
    let host = Arc::new(
        WasmHost::from_file(
            EngineConfig {
                max_instances: 16,
                ..EngineConfig::default()
            },
            &repo_root().join("topology/components.toml"),
            &components_dir(),
            &Default::default(),
        )
        .expect("the host"),
    );
    let config = WorkerConfig::new(
        kafka_config(),
        format!("{}.{ACTIVITY_GROUP}", deployment.namespace),
        "in-process",
    );
    let worker = ActivityWorker::new(
        config,
        Arc::new(deployment.topology.clone()),
        host,
        Arc::new(weir::codec::Codec::single_object()),
        Arc::new(Metrics::default()),
    )
    .with_settings(ActivitySettings {
        unknown_grace: Duration::from_secs(3),
        ..weir::kafka::activity_worker::default_settings()
    })
    .expect("valid settings");
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn(worker.run(stopped));
    let mut request = request_on(5, partitions, "nap", json!([]));
    request.ffqn = format!("{SLOW}.nap").parse().expect("ffqn");
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &request).await;
    let sent = Instant::now();
    let answers = tokio::task::block_in_place(|| {
        answers(
            &deployment,
            &[&request.execution_id],
            TIMEOUT,
            Duration::from_millis(500),
        )
    });
    let found = &answers[&request.execution_id];
    eprintln!(
        "an unknown function answered {:?} after its request (grace 3 s)",
        found[0].0.duration_since(sent)
    );
    assert_eq!(found.len(), 1);
    let e = error_of(&found[0].1);
    assert_eq!(e.kind, ExecutionErrorKind::UnknownFunction, "{e}");
    assert!(e.reason.contains(&format!("{SLOW}.nap")), "{e}");
    let _ = stop.send(true);
    running
        .await
        .expect("the worker task")
        .expect("the worker stops cleanly");
    assert_dlq_empty(&deployment);
}

/// Item 15, external activities: Weir enforces a request's deadline. With no service running,
/// the parent is answered `timed-out` at the deadline; with the service running (its consumer
/// group named by the route), the service's answer is the only one.
#[tokio::test(flavor = "multi_thread")]
async fn an_external_activity_past_its_deadline_is_answered_timed_out() {
    const TAX: &str = "weir-examples:tax/rates";
    let deployment = Deployment::new("act_external");
    let route = deployment
        .topology
        .route(TAX)
        .expect("the tax route")
        .clone();
    assert!(route.external && route.service_group.is_some());
    let worker = deployment.start_worker("w", &["--activities-only"]);
    let producer = deployment.producer();
    let quote = |deadline_secs: i64| {
        let parent = ExecutionId::top_level(ulid::Ulid::new());
        ActivityRequest {
            execution_id: parent.child(&JoinSetId::one_off(1, "quote").expect("id"), 1),
            parent_execution_id: parent,
            ffqn: format!("{TAX}.quote").parse().expect("ffqn"),
            params: json!(["DE", 1000]),
            attempt: 1,
            timeout_millis: None,
            deadline: Some(Utc::now() + chrono::Duration::seconds(deadline_secs)),
        }
    };
    let unserved = quote(3);
    send_request(&deployment, &producer, &route.topic, &unserved).await;
    let sent = Instant::now();
    let found = answers(
        &deployment,
        &[&unserved.execution_id],
        TIMEOUT,
        Duration::from_millis(500),
    );
    let found = &found[&unserved.execution_id];
    eprintln!(
        "an unserved external request (deadline 3 s) answered after {:?}",
        found[0].0.duration_since(sent)
    );
    assert_eq!(found.len(), 1);
    let e = error_of(&found[0].1);
    assert_eq!(e.kind, ExecutionErrorKind::TimedOut, "{e}");
    assert!(e.reason.contains("did not answer by the deadline"), "{e}");
    assert_eq!(
        metric(&worker, "weir_activity_deadlines_enforced_total"),
        1.0
    );

    // Served: the service answers; at the deadline its group has committed past the
    // request, so Weir says nothing more.
    let service = deployment.start_external_tax_service();
    service.wait_ready(TIMEOUT);
    let served = quote(20);
    send_request(&deployment, &producer, &route.topic, &served).await;
    let found = answers(
        &deployment,
        &[&served.execution_id],
        TIMEOUT,
        Duration::ZERO,
    );
    assert!(
        matches!(found[&served.execution_id][0].1, ExecutionResult::Ok(_)),
        "{}",
        found[&served.execution_id][0].1
    );
    worker.wait_for_log("the external service answered in time", TIMEOUT);
    let found = answers(
        &deployment,
        &[&served.execution_id],
        TIMEOUT,
        Duration::from_secs(1),
    );
    assert_eq!(found[&served.execution_id].len(), 1, "{found:?}");
    let parent = served.parent_execution_id.to_string();
    assert!(
        service.answered().iter().any(|l| l.contains(&parent)),
        "{:?}",
        service.answered()
    );
    assert_eq!(
        metric(&worker, "weir_activity_deadlines_enforced_total"),
        1.0
    );
}

/// Issue 38, answers before progress: the activity worker's first commit produces its answer
/// and then fails before the progress is committed (failpoint `activity-before-offsets`,
/// `fail-once`). The worker takes its partitions over from the committed progress, which
/// does not mark the request finished, runs it again and answers again: the answer is on
/// `weir.responses` twice, and the progress is committed past the request once.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_whose_progress_was_not_committed_is_answered_again() {
    let deployment = Deployment::new("act_dup");
    let (topic, partitions) = slow_route(&deployment);
    let worker = deployment.start_worker_with_env(
        "w",
        &["--activities-only"],
        &[("WEIR_FAILPOINTS", "activity-before-offsets=fail-once(0)")],
    );
    let request = request_on(0, partitions, "sleep", json!([10]));
    let producer = deployment.producer();
    send_request(&deployment, &producer, &topic, &request).await;
    let answers = answers(
        &deployment,
        &[&request.execution_id],
        TIMEOUT,
        Duration::from_secs(3),
    );
    worker.wait_for_log("failpoint activity-before-offsets reached", TIMEOUT);
    let found = &answers[&request.execution_id];
    assert_eq!(found.len(), 2, "answered {} times: {found:?}", found.len());
    for (_, result) in found {
        assert_eq!(result, &ExecutionResult::Ok(json!(10)));
    }
    let (offset, metadata) = wait_for("the progress past the request", TIMEOUT, || async {
        deployment
            .committed(ACTIVITY_GROUP, &topic, 0)
            .filter(|(offset, _)| *offset > 0)
    })
    .await;
    assert_eq!((offset, metadata.as_str()), (1, "wa1;n=0;o="));
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 2.0);
}

/// Starts a worker of `deployment` with activities through their topics and the failpoints
/// `spec` (`name=action,…`), runs one order saga to its result (which must be `Ok`) and waits
/// until every failpoint of `spec` was reached: the worker, to look at its log.
async fn one_saga_through_failpoints(deployment: &Deployment, spec: &str) -> WorkerProcess {
    const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
    let worker = deployment.start_worker_with_env(
        "w",
        &["--inline-activities", "off"],
        &[("WEIR_FAILPOINTS", spec)],
    );
    let producer = deployment.producer();
    let order = json!([{"id": deployment.namespace, "customer": "c", "sku": "widget",
        "quantity": 1, "address": "1 Main St"}]);
    let id = deployment.submit(&producer, CHECKOUT, order).await;
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert!(
        matches!(&results[&id], ExecutionResult::Ok(_)),
        "{id}: {:?}",
        results[&id]
    );
    for point in spec.split(',').filter_map(|entry| entry.split('=').next()) {
        worker.wait_for_log(&format!("failpoint {} reached", point.trim()), TIMEOUT);
    }
    worker
}

/// A take-over that meets a coordinator that moved (seen in `broker_restart`: after the broker
/// came back, the activity worker's commit was refused with `NOT_COORDINATOR`, and the
/// take-over that followed met the same error fetching the committed progress, which stopped
/// the process). Here each worker's first fetch of committed offsets fails that way
/// (failpoints `workflow-fetch-committed`, `activity-fetch-committed`, `fail-once`) and the
/// activity worker's first commit fails after its answers are out (`activity-before-offsets`),
/// so that its take-over follows a failed commit as it did there. Both fetch again: the
/// worker lives on and the saga finishes once.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_fetches_the_committed_offsets_again_when_the_coordinator_moved() {
    let deployment = Deployment::new("act_coordinator");
    let mut worker = one_saga_through_failpoints(
        &deployment,
        "workflow-fetch-committed=fail-once(0),activity-fetch-committed=fail-once(0),\
         activity-before-offsets=fail-once(0)",
    )
    .await;
    let log = std::fs::read_to_string(&worker.log).expect("the worker's log");
    let retried = log
        .lines()
        .filter(|l| l.contains("fetching the committed offsets") && l.contains("trying again"))
        .count();
    assert!(
        retried >= 2,
        "{retried} fetches tried again; see {}",
        worker.log.display()
    );
    assert!(
        worker.child.try_wait().expect("try_wait").is_none(),
        "the worker exited; see {}",
        worker.log.display()
    );
}

/// A take-over whose consumer is fenced while it fetches the committed offsets (a static
/// member's own rejoin after a broker was away longer than the session; here librdkafka's
/// fatal state, fabricated by the failpoints `workflow-fetch-committed-fenced` and
/// `activity-fetch-committed-fenced` at each worker's first take-over). Each worker rebuilds
/// its member and takes over again: the process lives on and the saga finishes once. Before,
/// the workflow and trigger workers returned the fetch's error and the process stopped.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_fenced_while_it_fetches_rebuilds_the_member_instead_of_stopping() {
    let deployment = Deployment::new("act_fenced_fetch");
    let mut worker = one_saga_through_failpoints(
        &deployment,
        "workflow-fetch-committed-fenced=fail-once(0),activity-fetch-committed-fenced=fail-once(0)",
    )
    .await;
    let log = std::fs::read_to_string(&worker.log).expect("the worker's log");
    let cut_short = log.matches("take-over cut short").count();
    let rebuilt = log.matches("Kafka clients rebuilt").count();
    assert!(
        cut_short >= 2 && rebuilt >= 2,
        "{cut_short} take-overs cut short, {rebuilt} members rebuilt; see {}",
        worker.log.display()
    );
    assert!(
        worker.child.try_wait().expect("try_wait").is_none(),
        "the worker exited; see {}",
        worker.log.display()
    );
}

/// Issue 38 on the parent's side: workflows whose activities go through their topics
/// (`--inline-activities off`), the activity worker's first commit failing after its answers
/// are out (as above). Every saga finishes with its result, and each parent's history
/// journals exactly one answer per activity although one was answered twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_parent_journals_one_answer_of_an_activity_answered_twice() {
    const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
    let deployment = Deployment::new("act_dup_parent");
    let worker = deployment.start_worker_with_env(
        "w",
        &["--inline-activities", "off"],
        &[("WEIR_FAILPOINTS", "activity-before-offsets=fail-once(0)")],
    );
    let producer = deployment.producer();
    let mut ids = Vec::new();
    for n in 0..3 {
        let order = json!([{"id": format!("dup-{n}"), "customer": "c", "sku": "widget",
            "quantity": 1, "address": "1 Main St"}]);
        ids.push(deployment.submit(&producer, CHECKOUT, order).await);
    }
    let results = deployment.results(&ids, TIMEOUT);
    for id in &ids {
        assert!(
            matches!(&results[id], ExecutionResult::Ok(_)),
            "{id}: {:?}",
            results[id]
        );
    }
    worker.wait_for_log("failpoint activity-before-offsets reached", TIMEOUT);
    // Every answer on the topic, per child: the one that failed to commit its progress is
    // there twice.
    let topic = deployment.topic(TopicRole::Responses);
    let mut on_topic: HashMap<ExecutionId, usize> = HashMap::new();
    for (_, response) in deployment.read_to_end::<Response>(&topic, TIMEOUT) {
        if let Response::ChildExecutionFinished {
            child_execution_id, ..
        } = response
        {
            *on_topic.entry(child_execution_id).or_default() += 1;
        }
    }
    assert!(
        on_topic.values().any(|n| *n > 1),
        "no answer was produced twice: {on_topic:?}"
    );
    let histories = deployment.kafka_histories();
    for id in &ids {
        let mut journalled: HashMap<ExecutionId, usize> = HashMap::new();
        for record in &histories[id] {
            if let HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                ..
            }) = &record.entry
            {
                *journalled.entry(child_execution_id.clone()).or_default() += 1;
            }
        }
        assert_eq!(
            journalled.len(),
            4,
            "{id}: the saga's four activities: {journalled:?}"
        );
        for (child, n) in &journalled {
            assert_eq!(*n, 1, "{id}: {child} journalled {n} times");
        }
    }
}

/// A rate-limited route (issue 35 item 4: `rate = { per_second, burst }` in routes.toml):
/// four executions of `steps` ask for eight `compute` attempts, mostly at once; the worker
/// starts them no faster than its bucket allows — between any two starts `i < j`, at least
/// `(j - i - burst) / per_second` (the attempts' own `ran.started_at`, by the worker's
/// clock) — none inline, and counts the attempts it held.
#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limited_route_starts_its_attempts_no_faster_than_its_limit() {
    const PER_SECOND: f64 = 2.0;
    const BURST: usize = 1;
    let deployment = Deployment::new("rate");
    let topology = deployment.topology_with("rate", |text| {
        let route = "interface = \"weir-examples:compute/math\"\ntopic = \"weir.activity.compute\"";
        let limited = text.replace(
            route,
            &format!("{route}\nrate = {{ per_second = {PER_SECOND}, burst = {BURST} }}"),
        );
        assert_ne!(
            limited, text,
            "routes.toml routes compute/math to weir.activity.compute"
        );
        limited
    });
    let topology = topology.to_str().expect("a UTF-8 path").to_owned();
    let worker = deployment.start_worker_with_env("w", &[], &[("WEIR_TOPOLOGY", &topology)]);
    let producer = deployment.producer();
    let store = deployment.store().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            deployment
                .submit(
                    &producer,
                    "weir-examples:workflows/steps.fibonacci-chain",
                    json!([10, 2]),
                )
                .await,
        );
    }
    let results = deployment.results(&ids, TIMEOUT);
    for id in &ids {
        assert!(
            matches!(&results[id], ExecutionResult::Ok(_)),
            "{id}: {:?}",
            results[id]
        );
    }
    let mut starts = Vec::new();
    for id in &ids {
        for record in deployment.finished_history(&store, id).await {
            if let HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                ran, ..
            }) = &record.entry
            {
                starts.push(ran.expect("an attempt says when it ran").started_at);
            }
        }
    }
    assert_eq!(starts.len(), 8, "{starts:?}");
    starts.sort();
    for i in 0..starts.len() {
        for j in i + 1..starts.len() {
            let allowed = (j - i).saturating_sub(BURST) as f64 / PER_SECOND;
            let gap = (starts[j] - starts[i])
                .num_microseconds()
                .unwrap_or(i64::MAX) as f64
                / 1e6;
            // The clock's precision in the record (microseconds) is the only slack.
            assert!(
                gap + 1e-3 >= allowed,
                "starts {i} and {j} are {gap} s apart; the limit allows no less than {allowed} s: {starts:?}"
            );
        }
    }
    let held = worker
        .metrics()
        .and_then(|m| {
            m.iter()
                .find(|(name, _)| {
                    name.starts_with("weir_activity_rate_limited_total") && name.contains("compute")
                })
                .map(|(_, v)| *v)
        })
        .unwrap_or_default();
    assert!(held > 0.0, "the worker held attempts for tokens: {held}");
}
