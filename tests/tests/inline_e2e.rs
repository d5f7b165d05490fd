//! Inline activities on the real stack (issue 12, `weir_core::inline`): a workflow worker
//! answers the requests of WASM activities itself, in the transaction that journals them, so
//! a lone execution's consecutive steps commit together and never reach the activity topic;
//! `--inline-activities off` sends every request to its topic; a failed inline attempt's
//! retry goes to the topic as the next attempt, not before its backoff.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use weir::codec::{ActivityRequest, HistoryEntry, HistoryRecord};
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest, Response};
use weir::topology::TopicRole;
use weir::wire::NOT_BEFORE_HEADER;
use weir_e2e::deployment::{Deployment, ReadRecord, WorkerProcess};

const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
const COMPUTE: &str = "weir-examples:compute/math";
const TIMEOUT: Duration = Duration::from_secs(120);

/// The committed history records of `id`, with their offsets, in order.
fn history_of(deployment: &Deployment, id: &ExecutionId) -> Vec<ReadRecord<HistoryRecord>> {
    let topic = deployment.topic(TopicRole::History);
    deployment
        .read_records_to_end::<HistoryRecord>(&topic, TIMEOUT)
        .into_iter()
        .filter(|read| read.record.execution_id == *id)
        .collect()
}

/// The committed requests on the `compute` route's topic made by `parent`.
fn compute_requests(
    deployment: &Deployment,
    parent: &ExecutionId,
) -> Vec<ReadRecord<ActivityRequest>> {
    let topic = deployment
        .topology
        .route(COMPUTE)
        .expect("a route for compute")
        .topic
        .clone();
    deployment
        .read_records_to_end::<ActivityRequest>(&topic, TIMEOUT)
        .into_iter()
        .filter(|read| read.record.parent_execution_id == *parent)
        .collect()
}

/// (activity requests, responses) journalled in `history`.
fn steps_journalled(history: &[ReadRecord<HistoryRecord>]) -> (usize, usize) {
    let requests = history
        .iter()
        .filter(|r| {
            matches!(
                &r.record.entry,
                HistoryEntry::Event {
                    event: HistoryEvent::JoinSetRequest { .. },
                    ..
                }
            )
        })
        .count();
    let responses = history
        .iter()
        .filter(|r| matches!(&r.record.entry, HistoryEntry::ResponseAppended(_)))
        .count();
    (requests, responses)
}

/// The history says when each thing happened (issue 37 item 4): every record has its time, in
/// seq order, from the creation (not before its submission) to the finish (the `Finished`
/// record's own); each activity answer says when its attempt ran, after its request and before
/// it was journalled, for a time that is not zero (each `fibonacci` call runs a WASM
/// instance). Returns the attempts' durations.
fn assert_true_timings(history: &[ReadRecord<HistoryRecord>]) -> Vec<chrono::Duration> {
    let mut previous = None;
    let mut asked = std::collections::BTreeMap::new();
    let mut ran = Vec::new();
    for read in history {
        let record = &read.record;
        let at = record
            .at
            .unwrap_or_else(|| panic!("seq {} says when it happened", record.seq));
        assert!(
            previous.is_none_or(|p| p <= at),
            "seq {} at {at}, before {previous:?}",
            record.seq
        );
        previous = Some(at);
        match &record.entry {
            HistoryEntry::Created(c) => {
                assert_eq!(c.created_at, at);
                let submitted = c.submitted_at.expect("the submission's time");
                assert!(
                    submitted <= c.created_at,
                    "submitted {submitted}, created {}",
                    c.created_at
                );
            }
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request:
                            JoinSetRequest::ChildExecutionRequest {
                                child_execution_id, ..
                            },
                        ..
                    },
                ..
            } => {
                asked.insert(child_execution_id.clone(), at);
            }
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                ran: Some(r),
                ..
            }) => {
                let asked = asked[child_execution_id];
                assert!(
                    asked <= r.started_at && r.started_at < r.finished_at && r.finished_at <= at,
                    "{child_execution_id}: asked at {asked}, ran {r:?}, journalled at {at}"
                );
                ran.push(r.duration());
            }
            HistoryEntry::ResponseAppended(r) => {
                panic!("an answer that does not say when it ran: {r}")
            }
            HistoryEntry::Finished { finished_at, .. } => assert_eq!(*finished_at, at),
            _ => {}
        }
    }
    ran
}

fn metric(worker: &WorkerProcess, name: &str) -> f64 {
    worker
        .metrics()
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0.0)
}

/// By default, a lone `steps.fibonacci-chain(10, 5)` runs its five `fibonacci` calls inline:
/// none reaches the activity topic, and its whole history — `Created`, five requests with
/// their answers, `Finished` — is one transaction (consecutive offsets of one partition: a
/// transaction's commit marker takes an offset, so records of two transactions are never
/// adjacent).
#[tokio::test(flavor = "multi_thread")]
async fn a_lone_executions_inline_steps_commit_together_without_the_activity_topic() {
    let deployment = Deployment::new("inline_on");
    let worker = deployment.start_worker("w1", &[]);
    let producer = deployment.producer();
    let id = deployment.submit(&producer, STEPS, json!([10, 5])).await;
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert_eq!(results[&id], ExecutionResult::Ok(json!(5 * 55)));

    let history = history_of(&deployment, &id);
    assert_eq!(steps_journalled(&history), (5, 5), "{history:#?}");
    let partition = history[0].partition;
    assert!(history.iter().all(|r| r.partition == partition));
    let offsets: Vec<i64> = history.iter().map(|r| r.offset).collect();
    assert!(
        offsets.windows(2).all(|w| w[1] == w[0] + 1),
        "one transaction: offsets {offsets:?}"
    );
    assert!(
        compute_requests(&deployment, &id).is_empty(),
        "no request reached the activity topic"
    );
    assert!(metric(&worker, "weir_inline_activities_answered_total") >= 5.0);
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 0.0);
    // One transaction, yet each step has its own time.
    assert_eq!(assert_true_timings(&history).len(), 5);
}

/// `--inline-activities off`: every request goes through its topic and the activity worker,
/// one transaction per hop.
#[tokio::test(flavor = "multi_thread")]
async fn with_inline_activities_off_every_request_goes_through_its_topic() {
    let deployment = Deployment::new("inline_off");
    let worker = deployment.start_worker("w1", &["--inline-activities", "off"]);
    let producer = deployment.producer();
    let id = deployment.submit(&producer, STEPS, json!([10, 3])).await;
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    assert_eq!(results[&id], ExecutionResult::Ok(json!(3 * 55)));

    let requests = compute_requests(&deployment, &id);
    assert_eq!(requests.len(), 3, "{requests:#?}");
    assert!(requests.iter().all(|r| r.record.attempt == 1));
    let history = history_of(&deployment, &id);
    assert_eq!(steps_journalled(&history), (3, 3));
    let offsets: Vec<i64> = history.iter().map(|r| r.offset).collect();
    assert!(
        offsets.windows(2).any(|w| w[1] > w[0] + 1),
        "several transactions: offsets {offsets:?}"
    );
    assert_eq!(
        metric(&worker, "weir_inline_activities_answered_total"),
        0.0
    );
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 3.0);
    // The activity worker tells when each attempt ran.
    assert_eq!(assert_true_timings(&history).len(), 3);
}

/// A failed inline attempt that its policy retries goes to the activity topic as attempt 2,
/// with its backoff in the `weir.not-before` header; the activity worker runs it then, once.
/// (`compute` made to retry its `err`: `fibonacci(94)` does not fit a u64.)
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_inline_attempt_is_retried_through_the_topic_after_its_backoff() {
    let deployment = Deployment::new("inline_retry");
    let components = deployment.components_with("retry", |text| {
        let before = "route = \"compute\"\n# Pure functions: an `err` is the answer, retrying it would give the same.\nretries = { retry_on_err = false }";
        assert!(text.contains(before), "components.toml changed: {before}");
        text.replace(
            before,
            "route = \"compute\"\nretries = { retry_on_err = true, max_attempts = 2, backoff_base_ms = 2000, backoff_max_ms = 2000, jitter = 0.0 }",
        )
    });
    let components = components.to_string_lossy().into_owned();
    let worker =
        deployment.start_worker_with_env("w1", &[], &[("WEIR_COMPONENTS", components.as_str())]);
    let producer = deployment.producer();
    let submitted_at = Utc::now();
    let id = deployment.submit(&producer, STEPS, json!([94, 1])).await;
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    let answered_at = Utc::now();
    let ExecutionResult::Err(error) = &results[&id] else {
        panic!("fibonacci(94) fails: {}", results[&id]);
    };
    assert!(
        error.to_string().contains("fibonacci(94) failed"),
        "{error}"
    );

    let requests = compute_requests(&deployment, &id);
    assert_eq!(requests.len(), 1, "only the retry reached the topic");
    let retry = &requests[0];
    assert_eq!(retry.record.attempt, 2);
    let not_before: i64 = retry
        .headers
        .iter()
        .find(|(key, _)| key == NOT_BEFORE_HEADER)
        .map(|(_, value)| {
            String::from_utf8_lossy(value)
                .parse()
                .expect("epoch millis")
        })
        .expect("the retry carries its not-before instant");
    assert!(
        not_before >= submitted_at.timestamp_millis() + 2000,
        "the backoff is in the header"
    );
    assert!(
        answered_at.timestamp_millis() >= not_before,
        "attempt 2 did not run before its backoff"
    );
    assert_eq!(metric(&worker, "weir_inline_activities_spilled_total"), 1.0);
    assert_eq!(metric(&worker, "weir_activity_attempts_total"), 1.0);
}
