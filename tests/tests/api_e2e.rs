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

use std::time::Duration;

use serde_json::{Value, json};
use weir_e2e::deployment::Deployment;

const GREET: &str = "weir-examples:workflows/hello.greet";

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
