//! Issue 35 item 3 on the real stack: `weir batch`.
//!
//! A batch pauses every running execution of a function (`--follow` draws its progress to its
//! end), then another resumes them, and they all finish. A worker killed (`kill -9`) in the
//! middle of a batch: the restarted worker resumes it where its last commit left it, and no
//! execution is acted on twice (each has one pause request on `weir.responses`), none missed.
//! Bad input — an unknown action, a filter that matches nothing, a rate of 0 or less — is
//! refused with why, and nothing is sent.
//!
//! The rules are `weir_core::batch`'s tests and the simulation's class `batches`.

use std::time::Duration;

use rdkafka::Message;
use rdkafka::consumer::Consumer;
use rdkafka::message::Headers;
use serde_json::{Value, json};
use weir::codec::RecordPosition;
use weir::codec::records::{PauseAction, PauseRequest};
use weir::model::{ExecutionId, ExecutionResult};
use weir::store::{ExecutionState, Store};
use weir::topology::TopicRole;
use weir::wire::{KIND_HEADER, RecordKind};
use weir_e2e::cli::{failed, succeeded_with_stderr, weir};
use weir_e2e::deployment::{Deployment, reader};
use weir_e2e::wait_for;

const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const TIMEOUT: Duration = Duration::from_secs(120);

/// `weir batch status ID --json`, once the batch's owner has committed it.
fn status(deployment: &Deployment, id: &str) -> Option<Value> {
    let output = weir(deployment, &["batch", "status", id, "--json"]);
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).expect("JSON"))
}

/// Submits `n` executions sleeping `millis` and waits until the store lists them running.
async fn sleepers(
    deployment: &Deployment,
    store: &impl Store,
    n: usize,
    millis: u64,
) -> Vec<ExecutionId> {
    let producer = deployment.producer();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(
            deployment
                .submit(&producer, SLEEP_FOR, json!([millis]))
                .await,
        );
    }
    in_state(store, &ids, ExecutionState::Running).await;
    ids
}

async fn in_state(store: &impl Store, ids: &[ExecutionId], state: ExecutionState) {
    wait_for(
        &format!("{} executions {}", ids.len(), state.as_str()),
        TIMEOUT,
        || async {
            for id in ids {
                let row = store.execution(id).await.ok()??;
                if row.state != state {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// The pause requests on `weir.responses` whose reason names batch `batch`, by execution.
fn pause_requests(deployment: &Deployment, batch: &str) -> Vec<(ExecutionId, PauseAction)> {
    let topic = deployment.topic(TopicRole::Responses);
    let consumer = reader(&topic, true);
    let partitions = consumer.assignment().map(|a| a.count()).unwrap_or_default();
    let codec = weir::codec::Codec::single_object();
    let mut at_end = std::collections::HashSet::new();
    let mut found = Vec::new();
    let prefix = format!("batch {batch}");
    weir_e2e::wait_until("the end of weir.responses", TIMEOUT, || {
        while let Some(polled) = consumer.poll(Duration::from_millis(100)) {
            let message = match polled {
                Ok(message) => message,
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    at_end.insert(p);
                    continue;
                }
                Err(e) => panic!("consume {topic}: {e}"),
            };
            at_end.remove(&message.partition());
            let pause = message.headers().is_some_and(|h| {
                h.iter().any(|h| {
                    h.key == KIND_HEADER
                        && h.value == Some(RecordKind::PauseExecution.header_value())
                })
            });
            if !pause {
                continue;
            }
            let position = RecordPosition::at(&topic, message.partition(), message.offset());
            let request: PauseRequest = codec
                .decode(message.payload().unwrap_or_default(), &position)
                .expect("a pause request");
            if request.reason.starts_with(&prefix) {
                found.push((request.execution_id, request.action));
            }
        }
        (at_end.len() == partitions).then_some(())
    });
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_pauses_every_execution_of_a_function_and_another_resumes_them() {
    let deployment = Deployment::new("batch");
    let _worker = deployment.start_worker("w", &[]);
    let store = deployment.store().await;
    let ids = sleepers(&deployment, &store, 6, 15_000).await;

    let started = succeeded_with_stderr(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "pause",
            "--function",
            SLEEP_FOR,
            "--state",
            "running",
            "--rate",
            "5",
            "--reason",
            "bad deploy",
            "--id",
            "pause-all",
            "--follow",
        ],
    ));
    assert!(
        started.contains("6/6"),
        "the progress bar ends full: {started}"
    );
    in_state(&store, &ids, ExecutionState::Paused).await;
    let paused = status(&deployment, "pause-all").expect("the batch");
    assert_eq!(paused["status"], "done", "{paused}");
    assert_eq!(paused["acted"], 6, "{paused}");
    assert_eq!(
        paused["outcomes"].as_array().map(Vec::len),
        Some(6),
        "{paused}"
    );

    let resumed = succeeded_with_stderr(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "resume",
            "--function",
            SLEEP_FOR,
            "--state",
            "paused",
            "--rate",
            "10",
            "--id",
            "resume-all",
            "--follow",
        ],
    ));
    assert!(resumed.contains("6/6"), "{resumed}");
    let results = deployment.results(&ids, TIMEOUT);
    for id in &ids {
        assert!(
            matches!(results[id], ExecutionResult::Ok(_)),
            "{:?}",
            results[id]
        );
    }
    let listed = succeeded_with_stderr(&weir(&deployment, &["batch", "list"]));
    assert!(
        listed.contains("pause-all") && listed.contains("resume-all"),
        "{listed}"
    );

    // Bad input: refused with why, nothing sent.
    let unknown = failed(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "reboot",
            "--function",
            SLEEP_FOR,
        ],
    ));
    assert!(unknown.contains("is not a batch action"), "{unknown}");
    let nothing = failed(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "pause",
            "--function",
            SLEEP_FOR,
            "--state",
            "running",
            "--id",
            "nothing",
        ],
    ));
    assert!(
        nothing.contains("no execution matches the filter"),
        "{nothing}"
    );
    for rate in ["0", "-3"] {
        let refused = failed(&weir(
            &deployment,
            &[
                "batch",
                "start",
                "--action",
                "pause",
                "--function",
                SLEEP_FOR,
                "--rate",
                rate,
                "--id",
                "bad-rate",
            ],
        ));
        assert!(refused.contains("it must be more than 0"), "{refused}");
    }
    let none = failed(&weir(&deployment, &["batch", "start", "--action", "pause"]));
    assert!(none.contains("--function"), "{none}");
    assert!(status(&deployment, "nothing").is_none());
    assert!(status(&deployment, "bad-rate").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_resumes_after_a_kill_and_acts_on_each_execution_once() {
    let deployment = Deployment::new("batchkill");
    let worker = deployment.start_worker("w", &[]);
    let store = deployment.store().await;
    let n = 16;
    let ids = sleepers(&deployment, &store, n, 600_000).await;

    // Two a second: the batch takes about 8 s; the worker is killed in its middle.
    succeeded_with_stderr(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "pause",
            "--function",
            SLEEP_FOR,
            "--rate",
            "2",
            "--id",
            "kill",
        ],
    ));
    let before = wait_for("the batch under way", TIMEOUT, || async {
        let s = status(&deployment, "kill")?;
        let acted = s["acted"].as_u64()?;
        (acted >= 4).then_some(acted)
    })
    .await;
    assert!(
        before < n as u64,
        "killed in the middle of the batch ({before} acted)"
    );
    let mut worker = worker;
    worker.signal("KILL");
    let _ = worker.child.wait();
    let _restarted = deployment.start_worker("w", &[]);

    let done = wait_for("the batch done after the restart", TIMEOUT, || async {
        let s = status(&deployment, "kill")?;
        (s["status"] == "done").then_some(s)
    })
    .await;
    assert_eq!(done["acted"], n, "{done}");
    in_state(&store, &ids, ExecutionState::Paused).await;
    // Once each: one request per execution on weir.responses, for every one of them.
    let requests = pause_requests(&deployment, "kill");
    let mut per: std::collections::BTreeMap<String, usize> = Default::default();
    for (id, action) in &requests {
        assert_eq!(*action, PauseAction::Pause);
        *per.entry(id.to_string()).or_default() += 1;
    }
    assert_eq!(per.len(), n, "every execution acted on: {per:?}");
    assert!(per.values().all(|c| *c == 1), "none twice: {per:?}");
    let outcomes: Vec<&Value> = done["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .collect();
    assert_eq!(outcomes.len(), n, "{done}");
}

/// A reset batch (`--action reset`, to the latest point of each history by default) over
/// finished executions: each gets a new execution, linked to it, whose id the batch derives
/// from its own and the old one's, and which finishes with the same result; reset options
/// with another action, or a point that is neither `latest` nor a seq, are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_reset_batch_starts_a_new_execution_from_each_history() {
    let deployment = Deployment::new("batchreset");
    let _worker = deployment.start_worker("w", &[]);
    let store = deployment.store().await;
    let producer = deployment.producer();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(deployment.submit(&producer, SLEEP_FOR, json!([50])).await);
    }
    let first = deployment.results(&ids, TIMEOUT);
    in_state(&store, &ids, ExecutionState::Finished).await;

    let started = succeeded_with_stderr(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "reset",
            "--function",
            SLEEP_FOR,
            "--state",
            "finished",
            "--then",
            "keep",
            "--rate",
            "20",
            "--id",
            "reset-all",
            "--follow",
        ],
    ));
    assert!(started.contains("4/4"), "{started}");
    let news: Vec<ExecutionId> = ids
        .iter()
        .map(|id| weir::batch::reset_id("reset-all", id))
        .collect();
    let again = deployment.results(&news, TIMEOUT);
    for (old, new) in ids.iter().zip(&news) {
        assert_eq!(again[new], first[old], "{new}, reset from {old}");
        let history = deployment.finished_history(&store, new).await;
        let weir::codec::records::HistoryEntry::Created(created) = &history[0].entry else {
            panic!("{:?}", history[0]);
        };
        let of = created.reset_of.as_ref().expect("created by a reset");
        assert_eq!(&of.execution_id, old);
        assert!(of.seq > 0, "the latest point keeps its steps: {of:?}");
    }
    let done = status(&deployment, "reset-all").expect("the batch");
    assert_eq!(
        (done["status"].as_str(), done["acted"].as_u64()),
        (Some("done"), Some(4)),
        "{done}"
    );
    assert_eq!(done["reset"]["to"], "latest", "{done}");

    let not_a_reset = failed(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "pause",
            "--function",
            SLEEP_FOR,
            "--reset-to",
            "3",
        ],
    ));
    assert!(not_a_reset.contains("for a reset batch"), "{not_a_reset}");
    let bad_point = failed(&weir(
        &deployment,
        &[
            "batch",
            "start",
            "--action",
            "reset",
            "--function",
            SLEEP_FOR,
            "--reset-to",
            "soon",
        ],
    ));
    assert!(bad_point.contains("not `soon`"), "{bad_point}");
}

const READ: &str = "batch-e2e-reader-token";
const ADMIN: &str = "batch-e2e-admin-token";

/// Batches through the HTTP API (what the web UI's Batches view reads and sends): a pause
/// batch started by `POST /v1/batches` runs to its end and `GET /v1/batches/{id}` shows its
/// counts and per-execution outcomes, `GET /v1/batches` lists it; a resume batch frees them;
/// bad input is a 400 with why (an unknown action, a rate of 0, reset options on a pause, a
/// filter that selects nothing), a read token cannot start one, and an unknown batch is a 404.
#[tokio::test(flavor = "multi_thread")]
async fn batches_through_the_http_api() {
    let deployment = Deployment::new("batchapi");
    let _worker = deployment.start_worker("w", &[]);
    let store = deployment.store().await;
    let ids = sleepers(&deployment, &store, 3, 15_000).await;
    let api = deployment.serve_api(READ, ADMIN);
    let client = weir_e2e::http_client();
    let base = format!("{}/v1", api.base);
    let start = |token: &'static str, body: Value| {
        client
            .post(format!("{base}/batches"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let get = |path: String| {
        client
            .get(format!("{base}/{path}"))
            .bearer_auth(READ)
            .send()
    };

    for (body, why) in [
        (
            json!({"action": "reboot", "function": SLEEP_FOR}),
            "is not a batch action",
        ),
        (
            json!({"action": "pause", "function": SLEEP_FOR, "rate": 0}),
            "more than 0",
        ),
        (
            json!({"action": "pause", "function": SLEEP_FOR, "reset_to": "latest"}),
            "for a reset batch",
        ),
        (
            json!({"action": "pause", "function": SLEEP_FOR, "state": "paused"}),
            "no execution matches",
        ),
    ] {
        let refused = start(ADMIN, body.clone()).await.expect("POST");
        assert_eq!(refused.status(), 400, "{body}");
        let text = refused.text().await.expect("a body");
        assert!(text.contains(why), "{body}: {text}");
    }
    let forbidden = start(READ, json!({"action": "pause", "function": SLEEP_FOR}))
        .await
        .expect("POST");
    assert_eq!(forbidden.status(), 403);
    let unknown = get("batches/nobody".into()).await.expect("GET");
    assert_eq!(unknown.status(), 404);

    let accepted = start(
        ADMIN,
        json!({"action": "pause", "function": SLEEP_FOR, "state": "running", "rate": 10, "id": "api-pause"}),
    )
    .await
    .expect("POST");
    assert_eq!(accepted.status(), 202);
    let body: Value = accepted.json().await.expect("JSON");
    assert_eq!(
        (body["id"].as_str(), body["total"].as_u64()),
        (Some("api-pause"), Some(3)),
        "{body}"
    );
    let done = weir_e2e::wait_for("the pause batch done", TIMEOUT, || async {
        let shown: Value = get("batches/api-pause".into())
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (shown["status"] == "done").then_some(shown)
    })
    .await;
    assert_eq!(done["acted"], 3, "{done}");
    let outcomes = done["outcomes"].as_array().expect("outcomes");
    assert_eq!(outcomes.len(), 3, "{done}");
    in_state(&store, &ids, ExecutionState::Paused).await;
    let listed: Value = get("batches".into())
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert!(listed.to_string().contains("api-pause"), "{listed}");

    // A batch counts what the list shows (`executions_by_function`, written apart from the
    // execution rows `in_state` reads): a resume started before the list shows them paused
    // selects nothing (400). Wait for the list, as an operator would see it.
    wait_for("the paused executions listed", TIMEOUT, || async {
        let paused: Value = get(format!("executions?function={SLEEP_FOR}&state=paused"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let listed: Vec<&str> = paused["executions"]
            .as_array()?
            .iter()
            .filter_map(|e| e["execution_id"].as_str())
            .collect();
        ids.iter()
            .all(|id| listed.contains(&id.to_string().as_str()))
            .then_some(())
    })
    .await;
    let resumed = start(
        ADMIN,
        json!({"action": "resume", "function": SLEEP_FOR, "state": "paused", "rate": 10, "id": "api-resume"}),
    )
    .await
    .expect("POST");
    assert_eq!(resumed.status(), 202);
    let results = deployment.results(&ids, TIMEOUT);
    assert!(
        ids.iter()
            .all(|id| matches!(results[id], ExecutionResult::Ok(_))),
        "{results:?}"
    );
}
