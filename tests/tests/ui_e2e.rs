//! Issue 14 item 5 on the real stack: the web UI of `weir serve`, driven in a real headless
//! Chromium (Debian's `chromium`, through Debian's `chromedriver` and the `fantoccini`
//! WebDriver client; nothing is downloaded).
//! - Without a token the UI says what is missing; with one it works.
//! - The order saga is submitted from the UI's form; the UI follows it to its page, which
//!   shows it finished `ok` with its params, result, children and the history as a timeline:
//!   one row per changelog record the API returns, each activity request with its duration.
//! - The list finds the execution under its function, and its link opens it.
//! - A running execution's page updates itself: a sleeper is shown running with its delay
//!   open, then finished with the delay answered, without a reload.
//! - An event is sent from an execution's page (issue 13 item 1): an approval waiting for it
//!   takes it and finishes, and the page shows the wait answered.
//! - An execution is cancelled from its page (issue 13 item 5): a sleeper finishes
//!   `cancelled`, its delay answered.
//! - The buttons fit the state (issue 37 item 6): Cancel and Terminate are displayed on a
//!   running execution's page and not on a finished one's (what the browser shows, not only the
//!   `hidden` attribute: a class's `display` used to override it).
//! - Live without polling (issue 37 item 5): an approval's page, open while it waits, shows it
//!   finished when its event is sent through the API, and the page made no request for the
//!   execution or its history meanwhile: the update came through the execution's stream, read
//!   once to its end.
//! - Pause and resume (issue 35 item 1): a sleeper paused from its page is shown paused, with
//!   the buttons that fit (Resume, Cancel, Terminate; not Pause); its delay comes due while it
//!   is paused and is journalled without running it; resumed from the page, it finishes. Through
//!   the API: an approval paused and resumed by `POST /v1/executions/{id}/pause|resume` takes
//!   the event sent while it was paused once resumed; what changes nothing is 200, a finished
//!   execution 409 `finished`, an unknown one 404.
//! - Paused routes: the Routes view lists every activity route (its topic, interfaces, who
//!   serves it, running or paused) with Pause or Resume for those Weir serves and no button
//!   for an external one. The compute route paused from it, with a reason, is shown paused
//!   with that reason (as `GET /v1/routes` says), the worker holds it, and an activity it
//!   routes waits; resumed from it, it is shown running and the activity runs after the
//!   resume. Through the API: an interface or a bare topic names the route, 409 `external`
//!   for the tax route, 404 for an unknown name or action, 400 for a bad body, 403 with a
//!   read token (which the view shows).

use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use rdkafka::consumer::Consumer;
use serde_json::{Value, json};
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{Killed, free_port, unique_name, wait_for, wait_until};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const AWAIT_APPROVAL: &str = "weir-examples:workflows/approval-event.await-approval";
const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
const COMPUTE: &str = "weir-examples:compute/math";
const TAX: &str = "weir-examples:tax/rates";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const READ: &str = "ui-read-token-0123456789";
const ADMIN: &str = "ui-admin-token-0123456789";
const PAGE_TIMEOUT: Duration = Duration::from_secs(120);

/// Chromedriver on a free port, and a headless Chromium session through it. The flags keep
/// Chromium off the network (this machine's is closed) and out of the sandbox (tests run as
/// root).
async fn browser(profile: &std::path::Path) -> (Killed, Client) {
    browser_with(profile, &[]).await
}

/// [`browser`] with more Chromium flags.
async fn browser_with(profile: &std::path::Path, flags: &[&str]) -> (Killed, Client) {
    for program in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            std::path::Path::new(program).exists(),
            "{program} is missing: tests/run.sh installs Debian's chromium and chromium-driver"
        );
    }
    let port = free_port();
    let driver = std::process::Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Killed(driver);
    wait_until("chromedriver to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let mut args: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,2400",
    ]
    .into_iter()
    .chain(flags.iter().copied())
    .map(str::to_owned)
    .collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({"binary": CHROMIUM, "args": args}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("a Chromium session through chromedriver: {e}"));
    (driver, client)
}

/// Evaluates `script` (a function body that returns JSON-able data) in the page.
async fn read(client: &Client, script: &str) -> Value {
    client
        .execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
}

/// Polls the page with `script` until `done` holds for what it returns.
async fn wait_page(
    client: &Client,
    what: &str,
    script: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, PAGE_TIMEOUT, || async {
        let value = read(client, script).await;
        done(&value).then_some(value)
    })
    .await
}

/// Clicks the element `css` finds, again if a live refresh replaced it in between.
async fn click(client: &Client, css: &str) {
    wait_for(&format!("a click on {css}"), PAGE_TIMEOUT, || async {
        match client.find(Locator::Css(css)).await {
            Ok(element) => element.click().await.ok(),
            Err(_) => None,
        }
    })
    .await
}

async fn type_into(client: &Client, css: &str, text: &str) {
    let element = client
        .wait()
        .at_most(PAGE_TIMEOUT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    element.clear().await.expect("clear");
    element.send_keys(text).await.expect("type");
}

/// What the execution page shows, read in one go (a live refresh may replace it any time).
const EXECUTION_PAGE: &str = r##"
    const badge = document.querySelector("#state .badge");
    return {
      id: (document.querySelector("#execution-id") || {}).textContent,
      state: badge && badge.dataset.state,
      outcome: badge && badge.dataset.outcome,
      params: (document.querySelector("#params") || {}).textContent,
      result: (document.querySelector("#result") || {}).textContent,
      children: [...document.querySelectorAll("#children li[data-id]")].map((li) => li.dataset.id),
      took_ms: (document.querySelector("#took") || { dataset: {} }).dataset.ms,
      history: [...document.querySelectorAll("#history tbody tr")].map((tr) => ({
        seq: Number(tr.dataset.seq),
        kind: tr.dataset.kind,
        at: tr.dataset.at,
        what: tr.querySelector(".what").textContent,
        detail: tr.querySelector(".detail").textContent,
        took: tr.querySelector(".took").textContent,
        took_ms: tr.querySelector(".took").dataset.ms,
        ran: !!tr.querySelector(".bar.ran"),
        open: !!tr.querySelector(".bar.open"),
        closed: !!tr.querySelector(".bar.closed"),
        reset_here: !!tr.querySelector("button.reset-here"),
        link: (tr.querySelector(".what .execution-link") || {}).textContent,
      })),
    };
"##;

async fn api_history(base: &str, id: &str) -> Vec<Value> {
    let history: Value = weir_e2e::http_client()
        .get(format!("{base}/v1/executions/{id}/history"))
        .bearer_auth(READ)
        .send()
        .await
        .expect("history")
        .json()
        .await
        .expect("history json");
    history["entries"].as_array().expect("entries").clone()
}

/// Submits `ffqn(params)` through the API (admin token); the new execution's id.
async fn submit_through_api(base: &str, ffqn: &str, params: Value) -> String {
    let answer: Value = weir_e2e::http_client()
        .post(format!("{base}/v1/executions"))
        .bearer_auth(ADMIN)
        .json(&json!({"ffqn": ffqn, "params": params}))
        .send()
        .await
        .expect("submit")
        .json()
        .await
        .expect("json");
    answer["execution_id"].as_str().expect("id").to_owned()
}

fn rows_of<'a>(page: &'a Value, kind: &str) -> Vec<&'a Value> {
    page["history"]
        .as_array()
        .expect("history rows")
        .iter()
        .filter(|row| row["kind"] == kind)
        .collect()
}

/// Whether the browser displays the element `css` finds (computed visibility, WebDriver's
/// "displayedness"), read again if a render replaced it in between.
async fn displayed(client: &Client, css: &str) -> bool {
    wait_for(
        &format!("whether {css} is displayed"),
        PAGE_TIMEOUT,
        || async {
            client
                .find(Locator::Css(css))
                .await
                .ok()?
                .is_displayed()
                .await
                .ok()
        },
    )
    .await
}

/// Whether the browser displays Cancel and Terminate.
async fn stop_buttons_displayed(client: &Client) -> (bool, bool) {
    (
        displayed(client, "#stop #cancel").await,
        displayed(client, "#stop #terminate").await,
    )
}

/// Whether the browser displays Pause and Resume.
async fn pause_buttons_displayed(client: &Client) -> (bool, bool) {
    (
        displayed(client, "#stop #pause").await,
        displayed(client, "#stop #resume").await,
    )
}

/// `POST /v1/executions/{id}/{action}` with `token` and `body` (`None`: an empty body, still
/// JSON as every write must be): the status and the answer's JSON (`null` if none).
async fn post_action(
    base: &str,
    token: &str,
    id: &str,
    action: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let request = weir_e2e::http_client()
        .post(format!("{base}/v1/executions/{id}/{action}"))
        .bearer_auth(token);
    let request = match body {
        Some(body) => request.json(&body),
        None => request.header("Content-Type", "application/json"),
    };
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{action} {id}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The execution as `GET /v1/executions/{id}` returns it; `None` while the store does not
/// have it.
async fn api_execution(base: &str, id: &str) -> Option<Value> {
    let response = weir_e2e::http_client()
        .get(format!("{base}/v1/executions/{id}"))
        .bearer_auth(READ)
        .send()
        .await
        .expect("get the execution");
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "get {id}");
    Some(response.json().await.expect("execution json"))
}

/// Waits until the store shows `id` in `state`; the execution then.
async fn wait_state(base: &str, id: &str, state: &str) -> Value {
    wait_for(
        &format!("{id} {state} in the store"),
        PAGE_TIMEOUT,
        || async {
            api_execution(base, id)
                .await
                .filter(|execution| execution["state"] == state)
        },
    )
    .await
}

/// The kinds of the entries of a history the API returned, in order.
fn kinds(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["entry"]["kind"].as_str().expect("a kind"))
        .collect()
}

/// The page's requests (resource timing) whose path is `path` exactly.
async fn requests_to(client: &Client, path: &str) -> u64 {
    let script = format!(
        r##"return performance.getEntriesByType("resource")
              .filter((e) => new URL(e.name).pathname === "{path}").length;"##
    );
    read(client, &script).await.as_u64().expect("a count")
}

/// Sends `approved` to `id` through the API (admin token).
async fn approve_through_api(base: &str, id: &str, event_id: &str) {
    let response = weir_e2e::http_client()
        .post(format!("{base}/v1/executions/{id}/events"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "approved", "payload": "api-approver", "event_id": event_id}))
        .send()
        .await
        .expect("send the event");
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ui_submits_the_order_saga_finds_it_and_shows_its_history() {
    let deployment = Deployment::new("ui");
    let _worker = deployment.start_worker("w", &[]);
    let server = deployment.serve_api(READ, ADMIN);
    let profile = std::env::temp_dir().join(unique_name("weir-ui-chromium"));
    let (_driver, client) = browser(&profile).await;
    let ui = format!("{}/", server.base);

    // `/` leads to the UI, which asks for a token.
    client.goto(&ui).await.expect("open the UI");
    let url = client.current_url().await.expect("url");
    assert_eq!(url.path(), "/ui/", "{url}");
    wait_page(
        &client,
        "the UI to ask for a token",
        r##"return document.querySelector("#notice").textContent;"##,
        |notice| notice.as_str().is_some_and(|n| n.contains("enter a token")),
    )
    .await;
    type_into(&client, "#token", ADMIN).await;
    click(&client, "#token-save").await;

    // Submit the saga from the form; the UI goes to its page.
    click(&client, "a[href='#/submit']").await;
    type_into(&client, "#submit-function", CHECKOUT).await;
    let order = json!([{ "id": "ui-1", "customer": "alice", "sku": "widget", "quantity": 2,
                         "address": "1 Main St" }]);
    type_into(&client, "#submit-params", &order.to_string()).await;
    click(&client, "#submit button[type=submit]").await;
    let page = wait_page(
        &client,
        "the saga's page to show it finished",
        EXECUTION_PAGE,
        |page| page["state"] == "finished",
    )
    .await;
    let id = page["id"].as_str().expect("an execution id").to_owned();
    assert_eq!(page["outcome"], "ok", "{page}");
    let params: Value =
        serde_json::from_str(page["params"].as_str().expect("params")).expect("json");
    assert_eq!(params, order);
    let result: Value =
        serde_json::from_str(page["result"].as_str().expect("result")).expect("json");
    assert!(result.get("ok").is_some(), "{result}");

    // The history shown is the history the API holds, record for record, as a timeline.
    let entries = api_history(&server.base, &id).await;
    let shown: Vec<u64> = page["history"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["seq"].as_u64().expect("seq"))
        .collect();
    let held: Vec<u64> = entries
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(shown, held, "{page}");
    assert_eq!(rows_of(&page, "created").len(), 1, "{page}");
    assert_eq!(
        page["history"][shown.len() - 1]["kind"],
        "finished",
        "{page}"
    );
    let requests = rows_of(&page, "request");
    let steps: Vec<&str> = requests
        .iter()
        .map(|row| row["what"].as_str().expect("what"))
        .collect();
    for activity in [
        "weir-examples:compute/math.price",
        "weir-examples:shop/inventory.reserve",
        "weir-examples:shop/payment.charge",
        "weir-examples:shop/shipping.ship",
    ] {
        assert!(
            steps.iter().any(|step| step.contains(activity)),
            "{activity} in {steps:?}"
        );
    }
    for request in &requests {
        assert_eq!(request["closed"], true, "answered: {request}");
        assert!(
            request["took"].as_str().is_some_and(|t| t.ends_with('s')),
            "a duration: {request}"
        );
    }
    assert_eq!(
        rows_of(&page, "child-finished").len(),
        requests.len(),
        "{page}"
    );
    // True durations (issue 37 item 4): the rows happened in order; each activity ran for a
    // time that is not zero, drawn inside its request's bar; together they took no more than
    // the saga did from its submission.
    let at_ms = |row: &Value| {
        chrono::DateTime::parse_from_rfc3339(row["at"].as_str().expect("at"))
            .expect("an RFC 3339 time")
            .timestamp_micros()
    };
    let times: Vec<i64> = page["history"]
        .as_array()
        .expect("rows")
        .iter()
        .map(at_ms)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order: {page}");
    assert!(
        times.last() > times.first(),
        "the saga's rows are not all at one instant: {page}"
    );
    let ms = |v: &Value| -> f64 {
        v.as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| v.as_f64())
            .unwrap_or_else(|| panic!("a duration in ms: {v}"))
    };
    let ran: Vec<f64> = rows_of(&page, "child-finished")
        .iter()
        .map(|row| ms(&row["took_ms"]))
        .collect();
    assert!(
        ran.iter().all(|&ms| ms > 0.0),
        "each step ran a while: {ran:?} {page}"
    );
    for request in &requests {
        assert_eq!(
            request["ran"], true,
            "when it ran, inside the bar: {request}"
        );
    }
    let end_to_end = ms(&page["took_ms"]);
    assert!(
        ran.iter().sum::<f64>() <= end_to_end,
        "the steps ({ran:?} ms) took no more than the saga ({end_to_end} ms)"
    );
    assert_eq!(
        page["children"].as_array().expect("children").len(),
        requests.len(),
        "{page}"
    );

    // A finished execution has nothing to stop: the buttons are not displayed.
    assert_eq!(
        stop_buttons_displayed(&client).await,
        (false, false),
        "Cancel and Terminate on a finished execution's page"
    );

    // For a person reading a failure (or the docs): what the page looked like.
    let shot = client.screenshot().await.expect("screenshot");
    std::fs::write(deployment.logs().join("ui-execution.png"), shot).expect("save screenshot");

    // The list finds it under its function, and its link opens it again.
    client
        .goto(&format!("{ui}#/?function={CHECKOUT}"))
        .await
        .expect("open the list");
    let row = format!("#executions tbody tr[data-id='{id}']");
    let outcome = wait_page(
        &client,
        "the list to show the saga",
        &format!(r##"const row = document.querySelector("{row}"); return row && row.querySelector(".badge").dataset.outcome;"##),
        |outcome| !outcome.is_null(),
    )
    .await;
    assert_eq!(outcome, "ok");
    click(&client, &format!("{row} a.execution-link")).await;
    wait_page(&client, "the saga's page again", EXECUTION_PAGE, |page| {
        page["id"] == id.as_str() && page["state"] == "finished"
    })
    .await;

    // Live: a sleeper's page shows it running with its delay open, then finished, unreloaded.
    let sleeper = submit_through_api(&server.base, SLEEP_FOR, json!([8_000])).await;
    client
        .goto(&format!("{ui}#/executions/{sleeper}"))
        .await
        .expect("open the sleeper");
    let running = wait_page(
        &client,
        "the sleeper shown running",
        EXECUTION_PAGE,
        |page| page["state"] == "running" && !rows_of(page, "delay").is_empty(),
    )
    .await;
    assert_eq!(rows_of(&running, "delay")[0]["open"], true, "{running}");
    let finished = wait_page(
        &client,
        "the sleeper shown finished",
        EXECUTION_PAGE,
        |page| page["state"] == "finished",
    )
    .await;
    assert_eq!(finished["id"], sleeper.as_str());
    assert_eq!(rows_of(&finished, "delay")[0]["closed"], true, "{finished}");
    assert_eq!(rows_of(&finished, "delay-finished").len(), 1, "{finished}");

    // An event sent from the page: an approval waiting for `approved` takes it and finishes;
    // the form is gone once it has.
    let approval = submit_through_api(&server.base, AWAIT_APPROVAL, json!(["ui-order", 600])).await;
    client
        .goto(&format!("{ui}#/executions/{approval}"))
        .await
        .expect("open the approval");
    let waiting = wait_page(
        &client,
        "the approval waiting for its event",
        EXECUTION_PAGE,
        |page| page["state"] == "running" && !rows_of(page, "event-wait").is_empty(),
    )
    .await;
    assert_eq!(
        rows_of(&waiting, "event-wait")[0]["open"],
        true,
        "{waiting}"
    );
    // A running execution can be stopped: the buttons are displayed.
    assert_eq!(
        stop_buttons_displayed(&client).await,
        (true, true),
        "Cancel and Terminate on a running execution's page"
    );
    type_into(&client, "#event-name", "approved").await;
    type_into(&client, "#event-payload", r#""ui-approver""#).await;
    type_into(&client, "#event-id", "ui-order-approved").await;
    click(&client, "#send-event button[type=submit]").await;
    let approved = wait_page(&client, "the approval finished", EXECUTION_PAGE, |page| {
        page["state"] == "finished"
    })
    .await;
    assert_eq!(approved["outcome"], "ok", "{approved}");
    assert!(
        approved["result"]
            .as_str()
            .expect("result")
            .contains("ui-approver"),
        "{approved}"
    );
    let taken = rows_of(&approved, "event-delivered");
    assert_eq!(taken.len(), 1, "{approved}");
    assert!(
        taken[0]["what"]
            .as_str()
            .expect("what")
            .contains("ui-order-approved"),
        "{approved}"
    );
    assert_eq!(
        rows_of(&approved, "event-wait")[0]["closed"],
        true,
        "{approved}"
    );
    let form_hidden = read(
        &client,
        "return document.querySelector('#send-event').hidden;",
    )
    .await;
    assert_eq!(form_hidden, true);

    // Live without polling: an approval's page open while it waits; its event sent through
    // the API, not the page. The page shows it finished, and asked nothing about it but its
    // stream: no request for the execution or its history, before or after the update.
    let watched = submit_through_api(&server.base, AWAIT_APPROVAL, json!(["ui-live", 600])).await;
    // The page stays the same document across views: count its requests from here on.
    read(&client, "performance.clearResourceTimings(); return true;").await;
    client
        .goto(&format!("{ui}#/executions/{watched}"))
        .await
        .expect("open the watched approval");
    wait_page(
        &client,
        "the watched approval waiting for its event",
        EXECUTION_PAGE,
        |page| page["state"] == "running" && !rows_of(page, "event-wait").is_empty(),
    )
    .await;
    let execution_path = format!("/v1/executions/{watched}");
    let history_path = format!("{execution_path}/history");
    let stream_path = format!("{execution_path}/stream");
    let before = (
        requests_to(&client, &execution_path).await,
        requests_to(&client, &history_path).await,
    );
    approve_through_api(&server.base, &watched, "ui-live-approved").await;
    let updated = wait_page(
        &client,
        "the watched approval shown finished",
        EXECUTION_PAGE,
        |page| page["state"] == "finished",
    )
    .await;
    assert_eq!(updated["id"], watched.as_str());
    assert_eq!(updated["outcome"], "ok", "{updated}");
    assert!(
        updated["result"]
            .as_str()
            .is_some_and(|r| r.contains("api-approver")),
        "{updated}"
    );
    assert_eq!(rows_of(&updated, "event-delivered").len(), 1, "{updated}");
    let after = (
        requests_to(&client, &execution_path).await,
        requests_to(&client, &history_path).await,
    );
    assert_eq!(
        before,
        (0, 0),
        "the page read the execution only through its stream"
    );
    assert_eq!(
        after, before,
        "the page polled the execution or its history"
    );
    // The stream ends after the result; resource timing lists a request once it has ended.
    let streams = wait_page(
        &client,
        "the stream's request ended",
        &format!(
            r##"return performance.getEntriesByType("resource")
                  .filter((e) => new URL(e.name).pathname === "{stream_path}").length;"##
        ),
        |count| count.as_u64() >= Some(1),
    )
    .await;
    assert_eq!(
        streams, 1,
        "one stream, read to its end without a reconnect"
    );
    assert_eq!(
        stop_buttons_displayed(&client).await,
        (false, false),
        "the buttons gone once it finished"
    );

    // Cancelled from the page (issue 13 item 5): a sleeper finishes `cancelled`, and its
    // page shows the cancellation in the history.
    let long_sleeper = submit_through_api(&server.base, SLEEP_FOR, json!([600_000])).await;
    client
        .goto(&format!("{ui}#/executions/{long_sleeper}"))
        .await
        .expect("open the long sleeper");
    wait_page(
        &client,
        "the long sleeper running",
        EXECUTION_PAGE,
        |page| page["state"] == "running" && !rows_of(page, "delay").is_empty(),
    )
    .await;
    click(&client, "#stop #cancel").await;
    client
        .accept_alert()
        .await
        .expect("confirm the cancellation");
    let stopped = wait_page(
        &client,
        "the long sleeper cancelled",
        EXECUTION_PAGE,
        |page| page["state"] == "finished",
    )
    .await;
    assert_eq!(stopped["outcome"], "cancelled", "{stopped}");
    assert_eq!(rows_of(&stopped, "cancel-requested").len(), 1, "{stopped}");
    assert_eq!(rows_of(&stopped, "delay")[0]["closed"], true, "{stopped}");

    client.close().await.expect("close the browser");
    let _ = std::fs::remove_dir_all(&profile);
}

/// Serves `page` (HTML) on a free port of this machine, for any path, until the process ends:
/// a site of another origin than the API's.
fn serve_page(page: String) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the page's server");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

/// Issue 33 F8: with `--api-insecure-no-auth`, a page of another origin that the operator
/// visits cannot make the API write — the requests a page may send to another origin without
/// asking (a text or form body, or none) are refused before any handler — and a page that
/// points a name of its own at the API's address cannot read it through that name. Before,
/// each of these was served (the submission produced, the listing read).
#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_another_origin_can_neither_write_nor_read_through_a_rebound_name() {
    let deployment = Deployment::new("ui_csrf");
    let server = deployment.serve_api_with(&["--api-insecure-no-auth".as_ref()]);
    let api = &server.base;
    let page = format!(
        r#"<!doctype html><title>loading</title><script>
        const body = JSON.stringify({{ffqn: "{CHECKOUT}", params: [], idempotency_key: "csrf"}});
        Promise.allSettled([
          fetch("{api}/v1/executions", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body}}),
          fetch("{api}/v1/executions", {{method: "POST", mode: "no-cors", body: new URLSearchParams({{body}})}}),
          fetch("{api}/v1/executions/E_01JGFJK2G71ZA7HQ0NVK62TRFT/cancel", {{method: "POST", mode: "no-cors"}}),
        ]).then(() => {{ document.title = "sent"; }});
        </script>"#
    );
    let other_origin = serve_page(page);
    let profile = std::env::temp_dir().join(unique_name("weir-ui-csrf-chromium"));
    let (_driver, client) = browser_with(
        &profile,
        &["--host-resolver-rules=MAP rebound.test 127.0.0.1"],
    )
    .await;
    client
        .goto(&format!("http://127.0.0.1:{other_origin}/"))
        .await
        .expect("open the other origin's page");
    wait_page(
        &client,
        "the page's requests sent",
        "return document.title;",
        |t| t == "sent",
    )
    .await;
    // The API refused all three (each logged), so none reached a handler.
    wait_until(
        "three refusals in the API's log",
        Duration::from_secs(60),
        || {
            let log = std::fs::read_to_string(&server.log).ok()?;
            (log.matches("unsupported_media_type").count() >= 3).then_some(())
        },
    );
    // And nothing was produced: after a submission of the API's own kind is acknowledged,
    // the submissions topic holds that one record alone (the API acknowledges only what
    // Kafka has, and the page's requests were answered before it).
    let answer = weir_e2e::http_client()
        .post(format!("{api}/v1/executions"))
        .json(&json!({"ffqn": CHECKOUT, "params": [], "idempotency_key": "legit"}))
        .send()
        .await
        .expect("submit");
    assert_eq!(answer.status(), 202);
    let submissions = deployment.topology.topic(TopicRole::Submissions);
    let consumer = weir_e2e::deployment::committed_reader(&submissions.name);
    let records: i64 = (0..submissions.partitions)
        .map(|partition| {
            let (low, high) = consumer
                .fetch_watermarks(&submissions.name, partition, Duration::from_secs(30))
                .expect("watermarks");
            high - low
        })
        .sum();
    assert_eq!(records, 1, "submissions on {}", submissions.name);
    // Through a name the page's owner controls, resolved to the API's address (DNS
    // rebinding), the API answers nothing but the refusal.
    client
        .goto(&format!("http://rebound.test:{}/v1/functions", server.port))
        .await
        .expect("open the API through the rebound name");
    let text = read(&client, "return document.body.innerText;").await;
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("forbidden_host"), "{text}");
    // Through its address it does answer (the same request, allowed).
    client
        .goto(&format!("{api}/v1/functions"))
        .await
        .expect("open the API");
    let text = read(&client, "return document.body.innerText;").await;
    assert!(
        text.as_str().unwrap_or_default().contains("functions"),
        "{text}"
    );
    client.close().await.expect("close the browser");
    let _ = std::fs::remove_dir_all(&profile);
}

/// Issue 35 item 1: an execution paused and resumed, from its page and through the API.
#[tokio::test(flavor = "multi_thread")]
async fn the_ui_and_the_api_pause_and_resume_an_execution() {
    let deployment = Deployment::new("ui_pause");
    let _worker = deployment.start_worker("w", &[]);
    let server = deployment.serve_api(READ, ADMIN);
    let base = server.base.as_str();
    let profile = std::env::temp_dir().join(unique_name("weir-ui-pause-chromium"));
    let (_driver, client) = browser(&profile).await;
    let ui = format!("{base}/ui/");
    client.goto(&ui).await.expect("open the UI");
    type_into(&client, "#token", ADMIN).await;
    click(&client, "#token-save").await;

    // From the page: a sleeper (its delay long enough to be paused before it comes due) shows
    // Pause, not Resume, while it runs.
    let sleeper = submit_through_api(base, SLEEP_FOR, json!([20_000])).await;
    client
        .goto(&format!("{ui}#/executions/{sleeper}"))
        .await
        .expect("open the sleeper");
    wait_page(
        &client,
        "the sleeper running, its delay open",
        EXECUTION_PAGE,
        |page| page["state"] == "running" && !rows_of(page, "delay").is_empty(),
    )
    .await;
    assert_eq!(
        pause_buttons_displayed(&client).await,
        (true, false),
        "Pause and not Resume on a running execution's page"
    );
    click(&client, "#stop #pause").await;
    client.accept_alert().await.expect("confirm the pause");
    let paused = wait_page(
        &client,
        "the sleeper shown paused",
        EXECUTION_PAGE,
        |page| page["state"] == "paused" && !rows_of(page, "paused").is_empty(),
    )
    .await;
    let paused_rows = rows_of(&paused, "paused");
    assert_eq!(paused_rows.len(), 1, "{paused}");
    assert_eq!(
        paused_rows[0]["detail"], "paused from the web UI",
        "{paused}"
    );
    assert!(rows_of(&paused, "finished").is_empty(), "{paused}");
    // Paused: Resume, not Pause; Cancel and Terminate still (a cancellation resumes it).
    assert_eq!(
        pause_buttons_displayed(&client).await,
        (false, true),
        "Resume and not Pause on a paused execution's page"
    );
    assert_eq!(
        stop_buttons_displayed(&client).await,
        (true, true),
        "Cancel and Terminate on a paused execution's page"
    );
    // The API says so too: the execution, its history, and the list filtered by state.
    assert_eq!(
        api_execution(base, &sleeper).await.expect("in the store")["state"],
        "paused"
    );
    let entries = api_history(base, &sleeper).await;
    let entry = entries
        .iter()
        .find(|e| e["entry"]["kind"] == "paused")
        .unwrap_or_else(|| panic!("a paused entry: {entries:?}"));
    assert_eq!(
        entry["entry"]["reason"], "paused from the web UI",
        "{entry}"
    );
    wait_for("the sleeper listed paused", PAGE_TIMEOUT, || async {
        let list: Value = weir_e2e::http_client()
            .get(format!(
                "{base}/v1/executions?function={SLEEP_FOR}&state=paused"
            ))
            .bearer_auth(READ)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        list["executions"]
            .as_array()?
            .iter()
            .any(|e| e["execution_id"] == sleeper.as_str() && e["state"] == "paused")
            .then_some(())
    })
    .await;
    // Its delay comes due while it is paused: the answer is journalled, and it runs nothing
    // with it (it stays paused, unfinished).
    let due = wait_page(
        &client,
        "the sleeper's delay answered while it is paused (or the sleeper finished)",
        EXECUTION_PAGE,
        |page| !rows_of(page, "delay-finished").is_empty() || page["state"] == "finished",
    )
    .await;
    assert_eq!(due["state"], "paused", "journalled, not run: {due}");
    assert!(rows_of(&due, "finished").is_empty(), "{due}");
    let seq = |page: &Value, kind: &str| rows_of(page, kind)[0]["seq"].as_u64().expect("seq");
    assert!(seq(&due, "paused") < seq(&due, "delay-finished"), "{due}");
    // Resumed from the page: it takes the answer and finishes.
    click(&client, "#stop #resume").await;
    client.accept_alert().await.expect("confirm the resume");
    let resumed = wait_page(
        &client,
        "the sleeper resumed and finished",
        EXECUTION_PAGE,
        |page| page["state"] == "finished",
    )
    .await;
    assert_eq!(resumed["outcome"], "ok", "{resumed}");
    let resumed_rows = rows_of(&resumed, "resumed");
    assert_eq!(resumed_rows.len(), 1, "{resumed}");
    assert_eq!(
        resumed_rows[0]["detail"], "resumed from the web UI",
        "{resumed}"
    );
    assert!(
        seq(&resumed, "delay-finished") < seq(&resumed, "resumed"),
        "{resumed}"
    );
    assert!(
        seq(&resumed, "resumed") < seq(&resumed, "finished"),
        "{resumed}"
    );
    assert_eq!(
        (
            pause_buttons_displayed(&client).await,
            stop_buttons_displayed(&client).await
        ),
        ((false, false), (false, false)),
        "no button on a finished execution's page"
    );

    // Through the API: an approval, waiting for its event.
    let approval = submit_through_api(base, AWAIT_APPROVAL, json!(["ui-pause", 600])).await;
    wait_for(
        "the approval waiting for its event",
        PAGE_TIMEOUT,
        || async {
            let running = api_execution(base, &approval).await?["state"] == "running";
            let waits = api_history(base, &approval)
                .await
                .iter()
                .any(|e| e["entry"]["event"]["request"]["type"] == "event_request");
            (running && waits).then_some(())
        },
    )
    .await;
    // Refused before anything is sent: a read token, a body with a field it does not know.
    let (status, answer) = post_action(base, READ, &approval, "pause", None).await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) =
        post_action(base, ADMIN, &approval, "pause", Some(json!({"why": "x"}))).await;
    assert_eq!(status, 400, "{answer}");
    // Resuming one that is not paused changes nothing: 200, nothing sent.
    let (status, answer) = post_action(base, ADMIN, &approval, "resume", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "running", "{answer}");
    // Paused with an empty body: 202, then the store shows it paused, with its entry.
    let (status, answer) = post_action(base, ADMIN, &approval, "pause", None).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["execution_id"], approval.as_str(), "{answer}");
    wait_state(base, &approval, "paused").await;
    let entries = api_history(base, &approval).await;
    let paused_at = entries
        .iter()
        .find(|e| e["entry"]["kind"] == "paused")
        .unwrap_or_else(|| panic!("a paused entry: {entries:?}"));
    assert_eq!(
        paused_at["entry"]["reason"], "paused through the HTTP API",
        "{paused_at}"
    );
    let paused_seq = paused_at["seq"].as_u64().expect("seq");
    // Paused already: 200, nothing sent.
    let (status, answer) = post_action(base, ADMIN, &approval, "pause", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "paused", "{answer}");
    // An event sent while it is paused is journalled, and it stays paused.
    approve_through_api(base, &approval, "ui-pause-approved").await;
    let entries = wait_for(
        "the event journalled while paused",
        PAGE_TIMEOUT,
        || async {
            let entries = api_history(base, &approval).await;
            entries
                .iter()
                .any(|e| e["seq"].as_u64() > Some(paused_seq))
                .then_some(entries)
        },
    )
    .await;
    assert!(!kinds(&entries).contains(&"finished"), "{entries:?}");
    assert_eq!(
        api_execution(base, &approval).await.expect("in the store")["state"],
        "paused"
    );
    // Resumed: 202; it takes the event and finishes ok.
    let (status, answer) = post_action(
        base,
        ADMIN,
        &approval,
        "resume",
        Some(json!({"reason": "resumed by the test"})),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let finished = wait_state(base, &approval, "finished").await;
    assert!(
        finished["result"]["ok"]
            .to_string()
            .contains("api-approver"),
        "{finished}"
    );
    let entries = api_history(base, &approval).await;
    let kinds = kinds(&entries);
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("{kind} in {kinds:?}"))
    };
    assert!(
        at("paused") < at("resumed") && at("resumed") < at("finished"),
        "{kinds:?}"
    );
    assert_eq!(
        entries[at("resumed")]["entry"]["reason"],
        "resumed by the test",
        "{entries:?}"
    );

    // A finished execution can be neither paused nor resumed: 409 `finished`; an unknown one
    // is 404.
    for action in ["pause", "resume"] {
        let (status, answer) = post_action(base, ADMIN, &approval, action, None).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (409, &json!("finished")),
            "{action}: {answer}"
        );
        let (status, answer) =
            post_action(base, ADMIN, "E_01ARZ3NDEKTSV4RRFFQ69G5FAV", action, None).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (404, &json!("not_found")),
            "{action}: {answer}"
        );
    }

    client.close().await.expect("close the browser");
    let _ = std::fs::remove_dir_all(&profile);
}

/// What the Routes view shows, one object per row, read in one go.
const ROUTES_PAGE: &str = r##"
    return [...document.querySelectorAll("#routes tbody tr")].map((tr) => ({
      topic: tr.dataset.topic,
      state: tr.dataset.state,
      external: tr.dataset.external === "true",
      badge: (tr.querySelector(".state .badge") || { dataset: {} }).dataset.state || null,
      interfaces: [...tr.querySelectorAll(".interfaces .ffqn")].map((d) => d.textContent),
      served: tr.querySelector(".served").textContent,
      reason: (tr.querySelector(".state .reason") || {}).textContent || null,
      since: (tr.querySelector(".state .since") || { dataset: {} }).dataset.at || null,
      buttons: [...tr.querySelectorAll("button")].map((b) => b.textContent),
    }));
"##;

/// The row of the Routes view for `topic` (`Null` if none).
fn route_row<'a>(page: &'a Value, topic: &str) -> &'a Value {
    page.as_array()
        .and_then(|rows| rows.iter().find(|row| row["topic"] == topic))
        .unwrap_or(&Value::Null)
}

/// `GET /v1/routes` with `token`: the status and the answer's JSON.
async fn api_routes(base: &str, token: &str) -> (u16, Value) {
    let response = weir_e2e::http_client()
        .get(format!("{base}/v1/routes"))
        .bearer_auth(token)
        .send()
        .await
        .expect("list the routes");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The route whose topic is `topic`, as `GET /v1/routes` lists it.
async fn api_route(base: &str, topic: &str) -> Value {
    let (status, answer) = api_routes(base, READ).await;
    assert_eq!(status, 200, "{answer}");
    answer["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .find(|r| r["topic"] == topic)
        .unwrap_or_else(|| panic!("{topic} in {answer}"))
        .clone()
}

/// `POST /v1/routes/{name}/{action}` (`name` as it goes in the path) with `token` and `body`
/// (`None`: an empty body, JSON as every write): the status and the answer's JSON.
async fn post_route(
    base: &str,
    token: &str,
    name: &str,
    action: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let request = weir_e2e::http_client()
        .post(format!("{base}/v1/routes/{name}/{action}"))
        .bearer_auth(token);
    let request = match body {
        Some(body) => request.json(&body),
        None => request.header("Content-Type", "application/json"),
    };
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{action} {name}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until the worker's activity core holds `held` partitions of paused routes (more
/// than none for `true`, none for `false`).
fn wait_held(worker: &weir_e2e::deployment::WorkerProcess, held: bool) {
    wait_until(
        &format!("the worker to hold paused partitions: {held}"),
        PAGE_TIMEOUT,
        || {
            let count = worker
                .metrics()?
                .get("weir_activity_partitions_paused")
                .copied()?;
            ((count > 0.0) == held).then_some(())
        },
    );
}

/// Paused routes in the web UI and the API.
#[tokio::test(flavor = "multi_thread")]
async fn the_ui_and_the_api_pause_and_resume_a_route() {
    let deployment = Deployment::new("ui_routes");
    let worker = deployment.start_worker("w", &[]);
    let server = deployment.serve_api(READ, ADMIN);
    let base = server.base.as_str();
    let compute = deployment
        .topology
        .route(COMPUTE)
        .expect("the compute route")
        .topic
        .clone();
    let tax = deployment
        .topology
        .route(TAX)
        .expect("the tax route")
        .topic
        .clone();
    let profile = std::env::temp_dir().join(unique_name("weir-ui-routes-chromium"));
    let (_driver, client) = browser(&profile).await;
    client
        .goto(&format!("{base}/ui/"))
        .await
        .expect("open the UI");
    type_into(&client, "#token", ADMIN).await;
    click(&client, "#token-save").await;

    // The view lists what the API lists, in its order, each route running.
    click(&client, "a[href='#/routes']").await;
    let (status, listed) = api_routes(base, READ).await;
    assert_eq!(status, 200, "{listed}");
    let listed = listed["routes"].as_array().expect("routes").clone();
    let page = wait_page(&client, "the routes listed", ROUTES_PAGE, |page| {
        page.as_array()
            .is_some_and(|rows| rows.len() == listed.len())
    })
    .await;
    let topics = |rows: &[Value]| -> Vec<String> {
        rows.iter()
            .map(|r| r["topic"].as_str().expect("topic").to_owned())
            .collect()
    };
    assert_eq!(
        topics(page.as_array().expect("rows")),
        topics(&listed),
        "{page}"
    );
    for (row, route) in page.as_array().expect("rows").iter().zip(&listed) {
        assert_eq!(row["interfaces"], route["interfaces"], "{row} {route}");
        assert_eq!(row["external"], route["external"], "{row} {route}");
        assert_eq!(route["paused"], Value::Null, "{route}");
        assert_eq!(
            (&row["state"], &row["badge"]),
            (&json!("running"), &json!("running")),
            "{row}"
        );
    }
    let row = route_row(&page, &compute);
    assert_eq!(row["interfaces"], json!([COMPUTE]), "{row}");
    assert_eq!(row["served"], "Weir", "{row}");
    assert_eq!(row["buttons"], json!(["Pause"]), "{row}");
    let row = route_row(&page, &tax);
    assert_eq!(row["external"], true, "{row}");
    assert_eq!(row["interfaces"], json!([TAX]), "{row}");
    assert_eq!(row["served"], "a service outside Weir", "{row}");
    assert_eq!(
        row["buttons"],
        json!([]),
        "no button for an external route: {row}"
    );
    let shop = deployment
        .topology
        .route("weir-examples:shop/payment")
        .expect("the shop route")
        .topic
        .clone();
    assert_eq!(
        route_row(&page, &shop)["interfaces"]
            .as_array()
            .map(Vec::len),
        Some(3),
        "the shop topic's three interfaces: {page}"
    );

    // Paused from the view, with a reason: shown paused with it and since when, as the API
    // lists it; the worker holds the route's partitions.
    let reason = "the math service is down (ui test)";
    let before = chrono::Utc::now();
    click(
        &client,
        &format!("#routes tr[data-topic='{compute}'] button.route-pause"),
    )
    .await;
    client
        .send_alert_text(reason)
        .await
        .expect("type the reason");
    client.accept_alert().await.expect("confirm the pause");
    let page = wait_page(
        &client,
        "the compute route shown paused",
        ROUTES_PAGE,
        |page| route_row(page, &compute)["state"] == "paused",
    )
    .await;
    let row = route_row(&page, &compute);
    assert_eq!(row["badge"], "paused", "{row}");
    assert_eq!(row["reason"], reason, "{row}");
    assert_eq!(row["buttons"], json!(["Resume"]), "{row}");
    let route = api_route(base, &compute).await;
    assert_eq!(route["paused"]["reason"], reason, "{route}");
    let paused_at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a time")).expect("RFC 3339")
    };
    assert_eq!(
        paused_at(&row["since"]),
        paused_at(&route["paused"]["paused_at"]),
        "{row} {route}"
    );
    assert!(paused_at(&row["since"]) >= before, "{row}");
    // The view says so once the server showed it.
    wait_page(
        &client,
        "the pause confirmed",
        r##"return document.querySelector("#notice").textContent;"##,
        |notice| {
            notice
                .as_str()
                .is_some_and(|n| n.contains(&format!("{compute} paused")))
        },
    )
    .await;
    let shot = client.screenshot().await.expect("screenshot");
    std::fs::write(deployment.logs().join("ui-routes-paused.png"), shot).expect("save screenshot");
    // The other routes run on.
    let others = page
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["topic"] != compute.as_str() && r["state"] != "running")
        .count();
    assert_eq!(others, 0, "{page}");
    wait_held(&worker, true);

    // An activity of the paused route is requested and not answered.
    let id = submit_through_api(base, STEPS, json!([10, 2])).await;
    let entries = wait_for("the first activity requested", PAGE_TIMEOUT, || async {
        // Not in the store until a worker took it and the materialiser wrote it: 404 so far.
        api_execution(base, &id).await?;
        let entries = api_history(base, &id).await;
        entries
            .iter()
            .any(|e| e["entry"]["event"]["request"]["type"] == "child_execution_request")
            .then_some(entries)
    })
    .await;
    assert!(
        !kinds(&entries).contains(&"response"),
        "nothing answered while the route is paused: {entries:?}"
    );

    // Resumed from the view: shown running, as the API lists it; the worker holds nothing,
    // and the activity runs after the resume.
    let resumed_at = chrono::Utc::now();
    click(
        &client,
        &format!("#routes tr[data-topic='{compute}'] button.route-resume"),
    )
    .await;
    client.accept_alert().await.expect("confirm the resume");
    let page = wait_page(
        &client,
        "the compute route shown running",
        ROUTES_PAGE,
        |page| route_row(page, &compute)["state"] == "running",
    )
    .await;
    let row = route_row(&page, &compute);
    assert_eq!(
        (&row["reason"], &row["since"], &row["buttons"]),
        (&Value::Null, &Value::Null, &json!(["Pause"])),
        "{row}"
    );
    assert_eq!(api_route(base, &compute).await["paused"], Value::Null);
    wait_held(&worker, false);
    let finished = wait_state(base, &id, "finished").await;
    assert!(finished["result"].get("ok").is_some(), "{finished}");
    let entries = api_history(base, &id).await;
    let ran: Vec<&Value> = entries
        .iter()
        .filter(|e| e["entry"]["response"]["type"] == "child_execution_finished")
        .map(|e| &e["entry"]["response"]["ran"]["started_at"])
        .collect();
    assert!(!ran.is_empty(), "{entries:?}");
    for started in ran {
        let started = paused_at(started);
        assert!(
            started >= resumed_at,
            "an attempt started at {started} before the resume at {resumed_at}"
        );
    }

    // Through the API. An interface (its `/` encoded) names the route; an empty body is fine.
    let (status, answer) =
        post_route(base, ADMIN, "weir-examples:compute%2Fmath", "pause", None).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer, json!({"topic": compute, "paused": true}));
    let route = api_route(base, &compute).await;
    assert_eq!(
        route["paused"]["reason"], "paused through the HTTP API",
        "{route}"
    );
    // The view shows what another client did once it reads the routes again.
    click(&client, "#routes-reload").await;
    wait_page(&client, "the API's pause shown", ROUTES_PAGE, |page| {
        route_row(page, &compute)["reason"] == "paused through the HTTP API"
    })
    .await;
    // The topic without the deployment's namespace names it too.
    let (status, answer) = post_route(
        base,
        ADMIN,
        "weir.activity.compute",
        "resume",
        Some(json!({"reason": "back"})),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer, json!({"topic": compute, "paused": false}));
    assert_eq!(api_route(base, &compute).await["paused"], Value::Null);
    // Refused: a route served outside Weir (by interface or topic), a name of no route, an
    // action of none, a body with a field it does not know, a read token.
    for name in ["weir-examples:tax%2Frates", tax.as_str()] {
        for action in ["pause", "resume"] {
            let (status, answer) = post_route(base, ADMIN, name, action, None).await;
            assert_eq!(
                (status, &answer["error"]["code"]),
                (409, &json!("external")),
                "{action} {name}: {answer}"
            );
        }
    }
    let (status, answer) = post_route(base, ADMIN, "no-such%3Aroute%2Fx", "pause", None).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("not_found")),
        "{answer}"
    );
    let (status, answer) = post_route(base, ADMIN, &compute, "halt", None).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("not_found")),
        "{answer}"
    );
    let (status, answer) =
        post_route(base, ADMIN, &compute, "pause", Some(json!({"why": "x"}))).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!("bad_request")),
        "{answer}"
    );
    for action in ["pause", "resume"] {
        let (status, answer) = post_route(base, READ, &compute, action, None).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (403, &json!("forbidden")),
            "{action}: {answer}"
        );
    }
    assert_eq!(api_route(base, &tax).await["paused"], Value::Null);
    assert_eq!(api_route(base, &compute).await["paused"], Value::Null);

    // With a read token the view lists the routes, and a pause from it is refused with why.
    type_into(&client, "#token", READ).await;
    click(&client, "#token-save").await;
    click(
        &client,
        &format!("#routes tr[data-topic='{compute}'] button.route-pause"),
    )
    .await;
    client.accept_alert().await.expect("confirm the pause");
    wait_page(
        &client,
        "the refusal shown",
        r##"const n = document.querySelector("#notice"); return n.className + " " + n.textContent;"##,
        |notice| notice.as_str().is_some_and(|n| n.starts_with("error") && n.contains("admin token")),
    )
    .await;
    assert_eq!(api_route(base, &compute).await["paused"], Value::Null);

    let shot = client.screenshot().await.expect("screenshot");
    std::fs::write(deployment.logs().join("ui-routes.png"), shot).expect("save screenshot");
    client.close().await.expect("close the browser");
    let _ = std::fs::remove_dir_all(&profile);
}

/// A finished execution reset from its history in the UI: the rows the server allows carry
/// Reset here (the delay's answer does, its request does not); one click (with `keep`) sends
/// the reset and opens the new execution, which finishes and says whose reset it is; the old
/// page shows the link to it.
#[tokio::test(flavor = "multi_thread")]
async fn the_ui_resets_an_execution_from_a_history_row() {
    let deployment = Deployment::new("ui_reset");
    let _worker = deployment.start_worker("w", &[]);
    let server = deployment.serve_api(READ, ADMIN);
    let base = server.base.as_str();
    let profile = std::env::temp_dir().join(unique_name("weir-ui-reset-chromium"));
    let (_driver, client) = browser(&profile).await;
    let ui = format!("{base}/ui/");
    client.goto(&ui).await.expect("open the UI");
    type_into(&client, "#token", ADMIN).await;
    click(&client, "#token-save").await;

    let sleeper = submit_through_api(base, SLEEP_FOR, json!([200])).await;
    client
        .goto(&format!("{ui}#/executions/{sleeper}"))
        .await
        .expect("open the sleeper");
    let page = wait_page(
        &client,
        "the sleeper finished, its points shown",
        EXECUTION_PAGE,
        |page| {
            page["state"] == "finished"
                && page["history"]
                    .as_array()
                    .is_some_and(|rows| rows.iter().any(|r| r["reset_here"] == true))
        },
    )
    .await;
    let answered = rows_of(&page, "delay-finished");
    assert_eq!(answered.len(), 1, "{page}");
    assert_eq!(answered[0]["reset_here"], true, "{page}");
    assert!(
        rows_of(&page, "finished")
            .iter()
            .chain(rows_of(&page, "delay").iter())
            .all(|r| r["reset_here"] == false),
        "no reset at the finish, nor where it waits for its delay: {page}"
    );
    let seq = answered[0]["seq"].as_u64().expect("a seq");
    click(
        &client,
        &format!("#history tr[data-seq='{seq}'] button.reset-here"),
    )
    .await;
    client.accept_alert().await.expect("keep the old execution");
    let new = wait_page(
        &client,
        "the new execution finished",
        EXECUTION_PAGE,
        |page| page["id"].as_str().is_some_and(|id| id != sleeper) && page["state"] == "finished",
    )
    .await;
    let created = rows_of(&new, "created");
    assert_eq!(created.len(), 1, "{new}");
    assert!(
        created[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("reset of {sleeper} at seq {seq}"))),
        "{new}"
    );
    assert_eq!(created[0]["link"], sleeper.as_str(), "{new}");
    assert_eq!(new["outcome"], "ok", "{new}");
    let new_id = new["id"].as_str().expect("its id").to_owned();

    client
        .goto(&format!("{ui}#/executions/{sleeper}"))
        .await
        .expect("open the old one again");
    let old = wait_page(
        &client,
        "the old page shows the link",
        EXECUTION_PAGE,
        |page| !rows_of(page, "reset").is_empty(),
    )
    .await;
    let link = rows_of(&old, "reset");
    assert_eq!(link[0]["link"], new_id.as_str(), "{old}");
    assert_eq!(link[0]["detail"], "reset from the web UI", "{old}");
}
