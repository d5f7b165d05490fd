//! Issue 35 item 2 on the real stack: `weir reset`.
//!
//! A `sleepy.sleep-for` execution runs on the first build of `sleepy`, whose result has a bug
//! (the expiry with the clock's noise below the millisecond). The deployment moves to the
//! patched build, and the execution is reset to the point after its delay's answer: the new
//! execution replays the kept entries on the patched build (the same recorded expiry) and
//! finishes with the corrected result, linked to the old one both ways. A reset through the
//! HTTP API does the same. Points the history cannot be cut at, an execution that does not
//! exist and a bad request sent straight to the topic are refused with why and change
//! nothing.
//!
//! The rules are the processor's tests (`core/tests/processor/reset.rs`) and the simulation's
//! class `resets`.

use std::time::Duration;

use serde_json::{Value, json};
use weir::codec::{HistoryEntry, HistoryRecord, ResetThen};
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest, Response};
use weir::topology::TopicRole;
use weir_e2e::cli::{failed, succeeded, weir};
use weir_e2e::deployment::{Deployment, components_dir};
use weir_e2e::http_client;

const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const TIMEOUT: Duration = Duration::from_secs(120);
/// The API's tokens (at least 16 characters).
const READ: &str = "reset-e2e-reader-token";
const ADMIN: &str = "reset-e2e-admin-token";

fn digest_of(file: &str) -> String {
    let bytes = std::fs::read(components_dir().join(file)).expect("a built example");
    weir::wasm::engine::component_digest(&bytes)
}

/// The seq of the first entry `matches` picks.
fn seq_of(history: &[HistoryRecord], matches: impl Fn(&HistoryEntry) -> bool) -> u64 {
    history
        .iter()
        .find(|r| matches(&r.entry))
        .map(|r| r.seq)
        .expect("the entry")
}

/// The expiry a `sleep-for` result holds: (seconds, nanoseconds).
fn expiry(result: &ExecutionResult) -> (i64, i64) {
    let ExecutionResult::Ok(value) = result else {
        panic!("not ok: {result:?}");
    };
    let field = |name: &str| value[name].as_i64().unwrap_or_else(|| panic!("{value}"));
    (field("seconds"), field("nanoseconds"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_on_a_fixed_build_finishes_with_the_corrected_result() {
    let deployment = Deployment::new("reset");
    let patched = digest_of("sleepy-patched.wasm");
    let patched_build = deployment.components_with("patched", |text| {
        let changed = text.replace("path = \"sleepy.wasm\"", "path = \"sleepy-patched.wasm\"");
        assert_ne!(changed, text, "components.toml names sleepy.wasm");
        changed
    });
    let patched_build = patched_build.to_str().expect("a UTF-8 path").to_owned();
    let producer = deployment.producer();
    let store = deployment.store().await;

    // The first build: the execution finishes with its buggy result.
    let mut first = deployment.start_worker("v1", &[]);
    let id = deployment.submit(&producer, SLEEP_FOR, json!([300])).await;
    let results = deployment.results(std::slice::from_ref(&id), TIMEOUT);
    let (seconds, nanoseconds) = expiry(&results[&id]);
    let old = deployment.finished_history(&store, &id).await;
    let answered = seq_of(&old, |e| {
        matches!(
            e,
            HistoryEntry::ResponseAppended(Response::DelayFinished { .. })
        )
    });
    let requested = seq_of(&old, |e| {
        matches!(
            e,
            HistoryEntry::Event {
                event: HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::DelayRequest { .. },
                    ..
                },
                ..
            }
        )
    });
    let text = id.to_string();

    // The points a reset may keep up to: the delay's answer among them, its request not.
    let listed = succeeded(&weir(&deployment, &["reset", &text]));
    let points: Vec<u64> = listed
        .rsplit("up to seq ")
        .next()
        .and_then(|rest| rest.split(" (").next())
        .map(|list| list.split(", ").filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default();
    assert!(points.contains(&answered), "{listed}");
    assert!(!points.contains(&requested), "{listed}");

    // Bad input is refused with why, and changes nothing.
    let waits = failed(&weir(
        &deployment,
        &["reset", &text, "--to-seq", &requested.to_string()],
    ));
    assert!(waits.contains("waits for"), "{waits}");
    let outside = failed(&weir(&deployment, &["reset", &text, "--to-seq", "999"]));
    assert!(outside.contains("outside the history"), "{outside}");
    let unknown = ExecutionId::top_level(ulid::Ulid::new()).to_string();
    let missing = failed(&weir(&deployment, &["reset", &unknown, "--to-seq", "0"]));
    assert!(missing.contains("no execution"), "{missing}");

    // The deployment moves to the patched build.
    first.signal("TERM");
    let status = weir_e2e::wait_until("the first worker to stop", Duration::from_secs(60), || {
        first.child.try_wait().expect("try_wait")
    });
    assert!(status.success(), "the first worker stopped with {status}");
    let _second =
        deployment.start_worker_with_env("patched", &[], &[("WEIR_COMPONENTS", &patched_build)]);

    // Reset to the delay's answer: the new execution finishes with the corrected result.
    let out = succeeded(&weir(
        &deployment,
        &[
            "reset",
            &text,
            "--to-seq",
            &answered.to_string(),
            "--reason",
            "the patched build",
        ],
    ));
    let new: ExecutionId = out
        .trim()
        .rsplit(": ")
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the new execution's id in {out:?}"));
    let results = deployment.results(std::slice::from_ref(&new), TIMEOUT);
    assert_eq!(
        expiry(&results[&new]),
        (seconds, nanoseconds - nanoseconds % 1_000_000),
        "the recorded expiry, to the millisecond: {:?}",
        results[&new]
    );

    // Linked both ways; the new one replayed the kept entries on the patched build.
    let linked = deployment.finished_history(&store, &new).await;
    let HistoryEntry::Created(created) = &linked[0].entry else {
        panic!("{:?}", linked[0]);
    };
    let reset_of = created.reset_of.as_ref().expect("created by a reset");
    assert_eq!((&reset_of.execution_id, reset_of.seq), (&id, answered));
    assert_eq!(created.component.as_deref(), Some(patched.as_str()));
    let expires = |history: &[HistoryRecord]| {
        history.iter().find_map(|r| match &r.entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::DelayRequest { expires_at, .. },
                        ..
                    },
                ..
            } => Some(*expires_at),
            _ => None,
        })
    };
    assert_eq!(
        expires(&linked),
        expires(&old),
        "the kept request, as recorded"
    );
    let old_now = weir_e2e::wait_for("the link in the old history", TIMEOUT, || async {
        let history = deployment.store_history(&store, &id).await;
        history
            .iter()
            .any(|r| {
                matches!(&r.entry, HistoryEntry::Reset { new_execution_id, to_seq, .. }
                if *new_execution_id == new && *to_seq == answered)
            })
            .then_some(history)
    })
    .await;
    assert_eq!(
        old_now.len(),
        old.len() + 1,
        "only the link was appended to the old history (the refused resets changed nothing)"
    );

    // Through the HTTP API: the points, bad input, a reset.
    let api = deployment.serve_api(READ, ADMIN);
    let client = http_client();
    let base = format!("{}/v1", api.base);
    let listed: Value = client
        .get(format!("{base}/executions/{id}/reset-points"))
        .bearer_auth(READ)
        .send()
        .await
        .expect("reset-points")
        .json()
        .await
        .expect("JSON");
    assert!(
        listed["points"]
            .as_array()
            .is_some_and(|p| p.contains(&json!(answered))),
        "{listed}"
    );
    let post = |target: &str, body: Value| {
        client
            .post(format!("{base}/executions/{target}/reset"))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    let refused = post(&text, json!({"to_seq": 999})).await.expect("POST");
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "reset-point", "{body}");
    let unknown_answer = post(&unknown, json!({"to_seq": 0})).await.expect("POST");
    assert_eq!(unknown_answer.status(), 404);
    let bad_then = post(&text, json!({"to_seq": 0, "then": "explode"}))
        .await
        .expect("POST");
    assert_eq!(bad_then.status(), 400);
    let accepted = post(&text, json!({"to_seq": 0, "then": "keep"}))
        .await
        .expect("POST");
    assert_eq!(accepted.status(), 202);
    let body: Value = accepted.json().await.expect("JSON");
    let again: ExecutionId = body["execution_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    // Reset to its creation: it sleeps again, on the patched build, and finishes.
    let results = deployment.results(std::slice::from_ref(&again), TIMEOUT);
    assert_eq!(
        expiry(&results[&again]).1 % 1_000_000,
        0,
        "{:?}",
        results[&again]
    );

    // Any Kafka client may send a reset; one the history cannot take is dead-lettered with why.
    let request = weir::reset::request(
        &id,
        999,
        &weir::reset::new_id(),
        ResetThen::Keep,
        "raw".into(),
    );
    let responses = deployment.topic(TopicRole::Responses);
    weir::kafka::submit::send_reset(
        &producer,
        &weir::codec::Codec::single_object(),
        &responses,
        &request,
    )
    .await
    .expect("sent");
    let dead = weir_e2e::wait_until("the refused reset's dead letter", TIMEOUT, || {
        deployment
            .dead_letters_from(&responses, Duration::from_secs(10))
            .into_iter()
            .find(|d| d.error.contains(&text))
    });
    assert!(dead.error.contains("outside the history"), "{dead:?}");
    assert_eq!(dead.reason, weir::codec::DlqReason::Refused, "{dead:?}");
}
