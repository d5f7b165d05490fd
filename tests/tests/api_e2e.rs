//! Issue 14 item 4 and issue 15 item 5 on the real stack: `weir serve`, the HTTP API.
//! - Tokens are required: a request without one, or with an unknown one, is 401; a read token
//!   cannot submit (403).
//! - An admin token submits, idempotently by key: the same key twice is one execution.
//! - A read token gets the execution, its history and a list of its function.
//! - Errors are JSON with a code and a message.
//! - Events (issue 13 item 1): an admin token sends one; one for a finished execution is
//!   refused at once (409), one that breaks the rules is a 400.
//! - Without tokens, the server refuses to start unless told to serve anyone.
//! - Schedules (issue 13 item 7): created, listed, paused and deleted; a bad spec is a 400.
//! - Live views (issue 37 item 5): the stream of an execution sends every history entry once,
//!   in seq order, then the result, and ends; resuming with `Last-Event-ID` (or `?after=`)
//!   sends exactly the entries after it; a request without a token is refused; an id the store
//!   does not have is `waiting`.
//! - `weir submit --follow` prints each history entry as `weir history` does, then the
//!   result, and exits 0 (4 for a result that is not `ok`); with no workflow worker running
//!   it says so (the workers' consumer group has no members), and keeps following until one
//!   runs.

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use weir_e2e::deployment::Deployment;

const GREET: &str = "weir-examples:workflows/hello.greet";
const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";

async fn call(
    client: &reqwest::Client,
    request: reqwest::RequestBuilder,
    token: Option<&str>,
) -> (u16, Value) {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = client
        .execute(request.build().expect("request"))
        .await
        .unwrap_or_else(|e| panic!("send: {e:?}"));
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_needs_tokens_submits_idempotently_and_reads_what_the_store_holds() {
    let deployment = Deployment::new("api");
    let _worker = deployment.start_worker("w", &[]);
    let (read, admin) = (
        "read-token-0123456789abcdef",
        "admin-token-0123456789abcdef",
    );

    // No tokens and no explicit opt-out: refused at start.
    let refused = deployment
        .command()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run weir serve");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--api-insecure-no-auth"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let server = deployment.serve_api(read, admin);
    let base = format!("{}/v1", server.base);
    let client = weir_e2e::http()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let submit = |body: Value| client.post(format!("{base}/executions")).json(&body);

    let body = json!({"ffqn": GREET, "params": ["api"], "idempotency_key": "order-42"});
    let (status, answer) = call(&client, submit(body.clone()), None).await;
    assert_eq!(
        (status, error_code(&answer)),
        (401, "unauthorized"),
        "{answer}"
    );
    let (status, answer) = call(&client, submit(body.clone()), Some("not-a-token-at-all")).await;
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = call(&client, submit(body.clone()), Some(read)).await;
    assert_eq!(
        (status, error_code(&answer)),
        (403, "forbidden"),
        "{answer}"
    );

    let (status, first) = call(&client, submit(body.clone()), Some(admin)).await;
    assert_eq!(status, 202, "{first}");
    let id = first["execution_id"].as_str().expect("an id").to_owned();
    let (status, again) = call(&client, submit(body), Some(admin)).await;
    assert_eq!(status, 202);
    assert_eq!(
        again["execution_id"],
        id.as_str(),
        "the same key is the same execution"
    );

    let (status, bad) = call(
        &client,
        submit(json!({"ffqn": GREET, "params": "api"})),
        Some(admin),
    )
    .await;
    assert_eq!((status, error_code(&bad)), (400, "bad_request"), "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("array")
    );

    // The execution, once the store has it finished.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let execution = loop {
        let (status, body) = call(
            &client,
            client.get(format!("{base}/executions/{id}")),
            Some(read),
        )
        .await;
        if status == 200 && body["state"] == "finished" {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not finished in the store after 90 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        execution["result"],
        json!({"ok": "hello, api"}),
        "{execution}"
    );
    assert_eq!(execution["params"], json!(["api"]));

    let (status, history) = call(
        &client,
        client.get(format!("{base}/executions/{id}/history")),
        Some(read),
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let kinds: Vec<&str> = history["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["entry"]["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds.first(), Some(&"created"));
    assert_eq!(kinds.last(), Some(&"finished"));

    // The list table is written after the history rows: read it until it has the row.
    let listed: Vec<String> = weir_e2e::wait_for(
        "the finished execution listed",
        Duration::from_secs(120),
        || async {
            let (status, list) = call(
                &client,
                client.get(format!("{base}/executions?function={GREET}&state=finished")),
                Some(read),
            )
            .await;
            assert_eq!(status, 200, "{list}");
            let listed: Vec<String> = list["executions"]
                .as_array()
                .expect("executions")
                .iter()
                .map(|e| e["execution_id"].as_str().expect("id").to_owned())
                .collect();
            (!listed.is_empty()).then_some(listed)
        },
    )
    .await;
    assert_eq!(
        listed,
        vec![id.as_str()],
        "one execution for the key, listed"
    );

    // A deadline: one that has passed, or that is no time at all, is a 400; one ahead is kept
    // in the execution's `Created`.
    for (deadline, needle) in [("2020-01-01T00:00:00Z", "has passed"), ("soon", "RFC 3339")] {
        let body = json!({"ffqn": GREET, "params": ["late"], "deadline": deadline});
        let (status, bad) = call(&client, submit(body), Some(admin)).await;
        assert_eq!((status, error_code(&bad)), (400, "bad_request"), "{bad}");
        let message = bad["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{deadline}: {message}");
    }
    let before = chrono::Utc::now();
    let body = json!({"ffqn": GREET, "params": ["bounded"], "deadline": "1h"});
    let (status, bounded) = call(&client, submit(body), Some(admin)).await;
    assert_eq!(status, 202, "{bounded}");
    let bounded = bounded["execution_id"].as_str().expect("an id").to_owned();
    let created = weir_e2e::wait_for("its history in the store", Duration::from_secs(90), || {
        let url = format!("{base}/executions/{bounded}/history");
        let client = &client;
        async move {
            let (status, history) = call(client, client.get(url), Some(read)).await;
            (status == 200)
                .then(|| history["entries"][0]["entry"].clone())
                .filter(|e| e["kind"] == "created")
        }
    })
    .await;
    let kept: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(created["deadline"].clone()).expect("a deadline");
    let hour = chrono::Duration::hours(1);
    assert!(
        kept >= before + hour && kept <= chrono::Utc::now() + hour,
        "{created}"
    );

    let unknown = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let (status, missing) = call(
        &client,
        client.get(format!("{base}/executions/{unknown}")),
        Some(read),
    )
    .await;
    assert_eq!(
        (status, error_code(&missing)),
        (404, "not_found"),
        "{missing}"
    );
    let (status, nothing) = call(&client, client.get(format!("{base}/nothing")), Some(read)).await;
    assert_eq!(
        (status, error_code(&nothing)),
        (404, "not_found"),
        "{nothing}"
    );

    // Events: refused to a read token and when they break the rules; refused at once for a
    // finished execution (409); accepted otherwise, with the event id.
    let event = |id: &str, body: Value| {
        client
            .post(format!("{base}/executions/{id}/events"))
            .json(&body)
    };
    let good = json!({"name": "approved", "payload": {"by": "ann"}, "event_id": "api-1"});
    let (status, _) = call(&client, event(&id, good.clone()), Some(read)).await;
    assert_eq!(status, 403);
    let (status, answer) = call(&client, event(&id, good.clone()), Some(admin)).await;
    assert_eq!((status, error_code(&answer)), (409, "finished"), "{answer}");
    let bad = json!({"name": "not a name", "payload": 1});
    let (status, answer) = call(&client, event(unknown, bad), Some(admin)).await;
    assert_eq!(
        (status, error_code(&answer)),
        (400, "bad_request"),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("event name"),
        "{answer}"
    );
    let (status, answer) = call(&client, event(unknown, good), Some(admin)).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["event_id"], "api-1", "{answer}");

    // The server's log holds no token.
    let text = std::fs::read_to_string(&server.log).expect("log");
    assert!(
        !text.contains(admin) && !text.contains(read),
        "a token in the log"
    );
}

/// Schedules through the API: a bad spec is a 400 with why, a read token cannot create (403);
/// an admin token creates, the list shows it ticking, pause and delete are taken.
#[tokio::test(flavor = "multi_thread")]
async fn schedules_are_created_listed_paused_and_deleted_through_the_api() {
    let deployment = Deployment::new("api_sched");
    let _worker = deployment.start_worker("w", &[]);
    let (read, admin) = (
        "read-token-0123456789abcdef",
        "admin-token-0123456789abcdef",
    );
    let server = deployment.serve_api(read, admin);
    let base = format!("{}/v1", server.base);
    let client = weir_e2e::http()
        .timeout(Duration::from_secs(40))
        .build()
        .expect("client");
    let spec = json!({"cron": "* * * * * *", "function": GREET, "params": ["api"]});
    let url = format!("{base}/schedules/api-every-second");

    let (status, answer) = call(&client, client.put(&url).json(&spec), Some(read)).await;
    assert_eq!(
        (status, error_code(&answer)),
        (403, "forbidden"),
        "{answer}"
    );
    let bad = json!({"cron": "every second", "function": GREET});
    let (status, answer) = call(&client, client.put(&url).json(&bad), Some(admin)).await;
    assert_eq!(
        (status, error_code(&answer)),
        (400, "bad_request"),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cron expression")),
        "{answer}"
    );
    let (status, answer) = call(&client, client.put(&url).json(&spec), Some(admin)).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["action"], "create");

    let listed = |status: &'static str| {
        let (client, base) = (client.clone(), base.clone());
        move || {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let (code, answer) =
                    call(&client, client.get(format!("{base}/schedules")), Some(read)).await;
                assert_eq!(code, 200, "{answer}");
                answer["schedules"]
                    .as_array()?
                    .iter()
                    .find(|s| s["name"] == "api-every-second")
                    .filter(|s| s["status"] == status && s["started"].as_u64() >= Some(1))
                    .cloned()
            }
        }
    };
    let ticking = weir_e2e::wait_for(
        "the schedule listed and ticking",
        Duration::from_secs(120),
        listed("active"),
    )
    .await;
    assert_eq!(ticking["function"], GREET);

    let post = |url: String| client.post(url).header("content-type", "application/json");
    let (status, answer) = call(&client, post(format!("{url}/pause")), Some(admin)).await;
    assert_eq!(status, 202, "{answer}");
    weir_e2e::wait_for(
        "the pause taken",
        Duration::from_secs(120),
        listed("paused"),
    )
    .await;
    let (status, answer) = call(&client, post(format!("{url}/stop")), Some(admin)).await;
    assert_eq!(
        (status, error_code(&answer)),
        (404, "not_found"),
        "{answer}"
    );

    let (status, answer) = call(&client, client.delete(&url), Some(admin)).await;
    assert_eq!(status, 202, "{answer}");
    weir_e2e::wait_for("the schedule gone", Duration::from_secs(120), || {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let (_, answer) =
                call(&client, client.get(format!("{base}/schedules")), Some(read)).await;
            let all = answer["schedules"].as_array()?.clone();
            (!all.iter().any(|s| s["name"] == "api-every-second")).then_some(())
        }
    })
    .await;
}

/// One server-sent event.
#[derive(Debug, Clone)]
struct SseEvent {
    name: String,
    id: Option<String>,
    data: Value,
}

/// Reads the event stream `request` opens until the server ends it, or until `enough` holds
/// for the events read so far; the HTTP status and the events. Heartbeat comments are skipped.
async fn read_stream(
    request: reqwest::RequestBuilder,
    enough: impl Fn(&[SseEvent]) -> bool,
) -> (u16, Vec<SseEvent>) {
    let mut response = request.send().await.expect("open the stream");
    let status = response.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut events = Vec::new();
    let mut buffer = String::new();
    let (mut name, mut id, mut data) = (String::from("message"), None, Vec::<String>::new());
    while let Some(chunk) = response.chunk().await.expect("a chunk of the stream") {
        buffer.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        while let Some(end) = buffer.find('\n') {
            let line = buffer[..end].trim_end_matches('\r').to_owned();
            buffer.drain(..=end);
            if line.is_empty() {
                if !data.is_empty() {
                    events.push(SseEvent {
                        name: std::mem::replace(&mut name, "message".to_owned()),
                        id: id.take(),
                        data: serde_json::from_str(&data.join("\n")).expect("JSON data"),
                    });
                    data.clear();
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
            let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
            match field {
                "event" => name = value,
                "id" => id = Some(value),
                "data" => data.push(value),
                _ => {}
            }
        }
        if enough(&events) {
            break;
        }
    }
    (status, events)
}

fn history_seqs(events: &[SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.name == "history")
        .map(|e| {
            let seq = e.data["seq"].as_u64().expect("a seq");
            assert_eq!(e.id.as_deref(), Some(seq.to_string().as_str()), "{e:?}");
            seq
        })
        .collect()
}

/// Issue 37 item 5: `GET /v1/executions/{id}/stream`.
#[tokio::test(flavor = "multi_thread")]
async fn the_stream_sends_each_entry_once_in_order_then_the_result_and_resumes_exactly() {
    let deployment = Deployment::new("api_stream");
    let _worker = deployment.start_worker("w", &[]);
    let (read, admin) = (
        "read-token-0123456789abcdef",
        "admin-token-0123456789abcdef",
    );
    let server = deployment.serve_api(read, admin);
    let base = format!("{}/v1", server.base);
    let client = weir_e2e::http()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let stream_url = |id: &str| format!("{base}/executions/{id}/stream");
    let ended = |_: &[SseEvent]| false;

    // Refused without a token or with an unknown one, as every read is.
    let unknown = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let (status, body) = call(&client, client.get(stream_url(unknown)), None).await;
    assert_eq!((status, error_code(&body)), (401, "unauthorized"), "{body}");
    let (status, _) = call(
        &client,
        client.get(stream_url(unknown)),
        Some("not-a-token-at-all"),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = call(
        &client,
        client
            .get(stream_url(unknown))
            .header("last-event-id", "soon"),
        Some(read),
    )
    .await;
    assert_eq!((status, error_code(&body)), (400, "bad_request"), "{body}");

    // An id the store does not have: `waiting` (and the stream stays open).
    let (status, events) = read_stream(
        client.get(stream_url(unknown)).bearer_auth(read),
        |events| !events.is_empty(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(events[0].name, "waiting", "{events:?}");
    assert_eq!(events[0].data["execution_id"], unknown);

    // A sleeper, followed from its submission: every entry once and in order, then the result.
    let (status, answer) = call(
        &client,
        client
            .post(format!("{base}/executions"))
            .json(&json!({"ffqn": SLEEP_FOR, "params": [1500]})),
        Some(admin),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let id = answer["execution_id"].as_str().expect("an id").to_owned();
    let (status, events) = read_stream(client.get(stream_url(&id)).bearer_auth(read), ended).await;
    assert_eq!(status, 200);
    let seqs = history_seqs(&events);
    let count = seqs.len() as u64;
    assert!(
        count >= 6,
        "created, the delay and its answer, finished: {events:?}"
    );
    assert_eq!(seqs, (0..count).collect::<Vec<_>>(), "{events:?}");
    let last = events.last().expect("events");
    assert_eq!(
        last.name, "result",
        "the result ends the stream: {events:?}"
    );
    assert_eq!(last.data["execution_id"], id.as_str());
    assert!(last.data["result"].get("ok").is_some(), "{last:?}");
    let statuses: Vec<&SseEvent> = events.iter().filter(|e| e.name == "status").collect();
    let final_status = &statuses.last().expect("a status").data;
    assert_eq!(final_status["state"], "finished", "{events:?}");
    assert_eq!(final_status["history_version"], count, "{events:?}");
    // What the stream sent is what the history endpoint holds.
    let (status, history) = call(
        &client,
        client.get(format!("{base}/executions/{id}/history")),
        Some(read),
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let streamed: Vec<Value> = events
        .iter()
        .filter(|e| e.name == "history")
        .map(|e| e.data.clone())
        .collect();
    assert_eq!(&Value::Array(streamed), &history["entries"]);

    // Resumed after seq 2: exactly the later entries, then the result; `?after=` alike, and
    // the header wins over it.
    for request in [
        client.get(stream_url(&id)).header("last-event-id", "2"),
        client.get(format!("{}?after=2", stream_url(&id))),
        client
            .get(format!("{}?after=0", stream_url(&id)))
            .header("last-event-id", "2"),
    ] {
        let (status, resumed) = read_stream(request.bearer_auth(read), ended).await;
        assert_eq!(status, 200);
        assert_eq!(
            history_seqs(&resumed),
            (3..count).collect::<Vec<_>>(),
            "{resumed:?}"
        );
        assert_eq!(resumed.last().map(|e| e.name.as_str()), Some("result"));
    }
    // Resumed after the last entry: the status and the result only.
    let (_, resumed) = read_stream(
        client
            .get(stream_url(&id))
            .header("last-event-id", (count - 1).to_string())
            .bearer_auth(read),
        ended,
    )
    .await;
    let names: Vec<&str> = resumed.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, vec!["status", "result"], "{resumed:?}");
}

/// Issue 37 item 5: `weir submit --follow`, first with no workflow worker running.
#[tokio::test(flavor = "multi_thread")]
async fn submit_follow_prints_the_history_and_says_when_no_worker_runs() {
    let deployment = Deployment::new("api_follow");
    let out = deployment.logs().join("follow.out");
    let err = deployment.logs().join("follow.err");
    let child = deployment
        .command()
        .args(["submit", GREET, r#"["follow"]"#, "--follow"])
        .args(["--not-taken-after", "1", "--timeout", "300"])
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("run weir submit --follow");
    let mut child = weir_e2e::Killed(child);
    let group = format!("{}.weir.workflow-workers", deployment.namespace);
    let said = format!("no workflow worker is running (consumer group {group} has no members)");
    weir_e2e::wait_until(
        "--follow to say that no worker runs",
        Duration::from_secs(120),
        || {
            let text = std::fs::read_to_string(&err).ok()?;
            text.contains(&said).then_some(())
        },
    );
    assert!(
        child.0.try_wait().expect("try_wait").is_none(),
        "it keeps following"
    );

    // A worker comes: the execution runs, and --follow prints it to the end.
    let _worker = deployment.start_worker("w", &[]);
    let status = weir_e2e::wait_until("--follow to exit", Duration::from_secs(240), || {
        child.0.try_wait().expect("try_wait")
    });
    let mut stdout = String::new();
    std::fs::File::open(&out)
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "{status}: {stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let id = lines[0];
    assert!(id.starts_with("E_"), "{stdout}");
    // Each entry in the form of `weir history`, then the result.
    let history = deployment
        .command()
        .args(["history", id])
        .output()
        .expect("weir history");
    let history = String::from_utf8_lossy(&history.stdout);
    let expected: Vec<&str> = history.lines().collect();
    assert_eq!(
        expected.len(),
        4,
        "the header, created, finished, and how long it took: {history}"
    );
    assert!(expected[3].starts_with("took "), "{history}");
    assert_eq!(&lines[1..=expected.len()], expected.as_slice(), "{stdout}");
    let result: Value =
        serde_json::from_str(&lines[expected.len() + 1..].join("\n")).expect("the result");
    assert_eq!(result, json!({"ok": "hello, follow"}), "{stdout}");

    // A result that is not `ok`: exit code 4. (The worker runs: nothing to explain.)
    let output = deployment
        .command()
        .args([
            "submit",
            SLEEP_FOR,
            "[600000]",
            "--deadline",
            "1s",
            "--follow",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run weir submit --follow");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(4), "{stdout}");
    assert!(stdout.contains("timed-out"), "{stdout}");
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("no workflow worker"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
