//! Activity examples through the wasmtime host: pure compute, outgoing HTTP against a local
//! server, retries of a flaky activity (the server counts attempts), cancellation, and the
//! compile cache.

mod wasm_common;

use std::time::Duration;

use serde_json::json;
use wasm_common::*;
use weir::model::{ExecutionErrorKind, ExecutionResult};
use weir::wasm::{Cancellation, LoadedFrom, cancellation};

#[tokio::test]
async fn compute_returns_ok_and_err_without_retrying_err() {
    let host = host();
    let fib = ffqn("weir-examples:compute/math.fibonacci");
    let ok = host
        .run_activity(&fib, &json!([10]), Cancellation::never())
        .await
        .unwrap();
    assert_eq!(ok.result, ExecutionResult::Ok(json!(55)));
    let err = host
        .run_activity(&fib, &json!([100]), Cancellation::never())
        .await
        .unwrap();
    assert!(
        matches!(err.result, ExecutionResult::Err(_)),
        "{:?}",
        err.result
    );
    assert_eq!(err.attempts, 1, "compute has retry_on_err = false");
}

/// `http-get` of `url` on `host`, with its retries.
async fn http_get(host: &weir::wasm::WasmHost, url: String) -> weir::wasm::ActivityOutcome {
    host.run_activity(
        &ffqn("weir-examples:http/client.get"),
        &json!([url]),
        Cancellation::never(),
    )
    .await
    .unwrap()
}

/// What `http-get` answers for the test server's `/hello`.
fn hello_answer() -> ExecutionResult {
    ExecutionResult::Ok(json!({"status": 200, "body": "hello from /hello"}))
}

#[tokio::test]
async fn http_get_reaches_a_local_server() {
    let server = TestServer::start();
    let host = host();
    let outcome = http_get(&host, server.url("/hello")).await;
    assert_eq!(outcome.result, hello_answer());
    // A refused connection is the activity's `err`, retried (3 attempts by default).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let outcome = http_get(&host, format!("http://127.0.0.1:{closed}/")).await;
    assert!(
        matches!(outcome.result, ExecutionResult::Err(_)),
        "{:?}",
        outcome.result
    );
    assert_eq!(outcome.attempts, 3);
}

#[tokio::test]
async fn flaky_is_retried_with_backoff_until_it_succeeds() {
    let server = TestServer::start();
    let host = host();
    for (function, path) in [
        ("weir-examples:flaky/flaky.fail-first", "/counter/fail"),
        ("weir-examples:flaky/flaky.trap-first", "/counter/trap"),
    ] {
        let outcome = host
            .run_activity(
                &ffqn(function),
                &json!([server.url(path), 2]),
                Cancellation::never(),
            )
            .await
            .unwrap();
        assert_eq!(outcome.result, ExecutionResult::Ok(json!(3)), "{function}");
        assert_eq!(outcome.attempts, 3, "{function}");
        assert_eq!(server.count(path), 3, "{function}");
    }
    // More failures than attempts (5): the last `err` is the result.
    let outcome = host
        .run_activity(
            &ffqn("weir-examples:flaky/flaky.fail-first"),
            &json!([server.url("/counter/many"), 10]),
            Cancellation::never(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 5);
    assert_eq!(server.count("/counter/many"), 5);
    assert!(
        matches!(outcome.result, ExecutionResult::Err(_)),
        "{:?}",
        outcome.result
    );
    // Traps on every attempt: retries-exhausted naming the trap.
    let outcome = host
        .run_activity(
            &ffqn("weir-examples:flaky/flaky.trap-first"),
            &json!([server.url("/counter/traps"), 10]),
            Cancellation::never(),
        )
        .await
        .unwrap();
    let ExecutionResult::ExecutionError(e) = &outcome.result else {
        panic!("{:?}", outcome.result);
    };
    assert_eq!(e.kind, ExecutionErrorKind::RetriesExhausted, "{e}");
    assert!(
        e.reason.contains("5 attempts") && e.reason.contains("trap"),
        "{e}"
    );
}

#[tokio::test]
async fn a_retrying_activity_can_be_cancelled() {
    let server = TestServer::start();
    // Long backoff so that the cancellation lands while it waits.
    let host = std::sync::Arc::new(
        host_with(|t| {
            t.replace(
                "backoff_base_ms = 10, backoff_max_ms = 200",
                "backoff_base_ms = 60000, backoff_max_ms = 60000",
            )
        })
        .unwrap(),
    );
    let (handle, cancel) = cancellation();
    let url = server.url("/counter/cancel");
    let h = host.clone();
    let run = tokio::spawn(async move {
        h.run_activity(
            &ffqn("weir-examples:flaky/flaky.fail-first"),
            &json!([url, 10]),
            cancel,
        )
        .await
        .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    let ExecutionResult::ExecutionError(e) = &outcome.result else {
        panic!("{:?}", outcome.result);
    };
    assert_eq!(e.kind, ExecutionErrorKind::Cancelled);
    assert_eq!(server.count("/counter/cancel"), 1);
}

#[test]
fn backoff_is_exponential_capped_and_jittered() {
    let p = weir::wasm::RetryPolicy {
        max_attempts: 10,
        backoff_base: Duration::from_millis(100),
        backoff_max: Duration::from_millis(1000),
        jitter: 0.5,
        retry_on_err: true,
        on_exhausted: weir::wasm::OnExhausted::Answer,
    };
    assert_eq!(p.backoff(2, 0.5), Duration::from_millis(100));
    assert_eq!(p.backoff(3, 0.5), Duration::from_millis(200));
    assert_eq!(p.backoff(4, 0.5), Duration::from_millis(400));
    assert_eq!(p.backoff(9, 0.5), Duration::from_millis(1000));
    assert_eq!(p.backoff(2, 0.0), Duration::from_millis(50));
    assert!(p.backoff(2, 0.999) < Duration::from_millis(150));
}

#[test]
fn activity_routes_must_agree_with_the_components_about_external_services() {
    let host = host();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
    let topology = weir::topology::Topology::load(&dir).unwrap();
    host.registry().check_routes(&topology).unwrap();

    // The external `tax` service's route served by Weir's activity worker instead: refused.
    let mut served_by_weir = topology.clone();
    for route in &mut served_by_weir.routes {
        route.external = false;
    }
    let err = host
        .registry()
        .check_routes(&served_by_weir)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`tax-declaration`"), "{err}");
    assert!(err.contains("weir-examples:tax/rates"), "{err}");
    assert!(err.contains("is not"), "{err}");

    // An activity interface without a route: refused, naming it.
    let mut unrouted = topology.clone();
    unrouted
        .routes
        .retain(|r| r.interface != "weir-examples:flaky/flaky");
    let err = host
        .registry()
        .check_routes(&unrouted)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`flaky` exports `weir-examples:flaky/flaky`"),
        "{err}"
    );
    assert!(err.contains("no route"), "{err}");
}

#[test]
fn compiled_components_come_from_the_cache_after_a_restart() {
    let dir = tempdir();
    let config = weir::wasm::EngineConfig {
        cache_dir: Some(dir.clone()),
        ..engine_config()
    };
    let examples = examples_dir();
    let first = weir::wasm::WasmEngine::new(config.clone()).unwrap();
    let (_, from) = first.load(&examples.join("order.wasm")).unwrap();
    assert_eq!(from, LoadedFrom::Compiled);
    // A new engine (as after a restart) with the same settings finds the artifact.
    let second = weir::wasm::WasmEngine::new(config).unwrap();
    let started = std::time::Instant::now();
    let (_, from) = second.load(&examples.join("order.wasm")).unwrap();
    assert_eq!(from, LoadedFrom::Cache);
    eprintln!("load from cache: {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-compiled-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Issue 11 item 17: more attempts at once than the instance pool has slots. An attempt that
/// finds the pool full waits for a slot (and says so) instead of failing with `trap`: with
/// `max_attempts = 1`, a failure would be the answer.
#[tokio::test]
async fn a_full_instance_pool_makes_attempts_wait_never_fail() {
    let dir = examples_dir();
    let text = std::fs::read_to_string(components_toml()).unwrap();
    let text = text.replace(
        "route = \"slow\"\nlimits = { timeout_ms = 60_000 }",
        "route = \"slow\"\nlimits = { timeout_ms = 60_000 }\nretries = { max_attempts = 1 }",
    );
    let file = weir::wasm::ComponentsFile::parse(&text, &components_toml()).unwrap();
    let config = weir::wasm::EngineConfig {
        max_instances: 2,
        ..engine_config()
    };
    let host = std::sync::Arc::new(
        weir::wasm::WasmHost::load(config, file.resolve(&dir).unwrap()).unwrap(),
    );
    let sleep = ffqn("weir-examples:slow/sleeper.sleep");
    let started = std::time::Instant::now();
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let host = host.clone();
            let sleep = sleep.clone();
            tokio::spawn(async move {
                host.run_activity(&sleep, &json!([300]), Cancellation::never())
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut waits = 0;
    for run in runs {
        let outcome = run.await.unwrap();
        assert_eq!(outcome.result, ExecutionResult::Ok(json!(300)));
        assert_eq!(outcome.attempts, 1);
        waits += outcome.pool_waits;
    }
    eprintln!(
        "6 attempts of 300 ms through a pool of 2 instances: {:?}, {waits} waits for a slot",
        started.elapsed()
    );
    assert!(waits > 0, "the pool never was full");
}

/// The attempt of a `slow` activity is interrupted when its future is dropped (the activity
/// worker aborts its task on a cancellation), well before it would have answered.
#[tokio::test]
async fn a_running_attempt_is_interrupted_when_cancelled() {
    let host = host();
    let (handle, cancel) = cancellation();
    let h = host.clone();
    let started = std::time::Instant::now();
    let run = tokio::spawn(async move {
        h.run_activity(
            &ffqn("weir-examples:slow/sleeper.sleep"),
            &json!([60_000]),
            cancel,
        )
        .await
        .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    handle.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the attempt stops")
        .unwrap();
    let ExecutionResult::ExecutionError(e) = &outcome.result else {
        panic!("{:?}", outcome.result);
    };
    assert_eq!(e.kind, ExecutionErrorKind::Cancelled);
    eprintln!("a 60 s attempt cancelled after {:?}", started.elapsed());
}

/// The in-process path gives up with the core's decision: `retries-exhausted` naming the
/// attempts and the last reason, as the Kafka activity worker does.
#[tokio::test]
async fn an_exhausted_activity_answers_retries_exhausted_with_the_last_reason() {
    let host = std::sync::Arc::new(
        host_with(|t| {
            t.replace(
                "route = \"slow\"\nlimits = { timeout_ms = 60_000 }",
                "route = \"slow\"\nlimits = { timeout_ms = 60_000 }\nretries = { max_attempts = 2, backoff_base_ms = 1, backoff_max_ms = 1 }",
            )
        })
        .unwrap(),
    );
    let outcome = host
        .run_activity(
            &ffqn("weir-examples:slow/sleeper.crash"),
            &json!([0]),
            Cancellation::never(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 2);
    let ExecutionResult::ExecutionError(e) = &outcome.result else {
        panic!("{:?}", outcome.result);
    };
    assert_eq!(e.kind, ExecutionErrorKind::RetriesExhausted, "{e}");
    assert!(
        e.reason
            .starts_with("2 attempts failed; the last one: trap:"),
        "{e}"
    );
    // An `err` is the activity's own answer: returned as such once attempts run out.
    let outcome = host
        .run_activity(
            &ffqn("weir-examples:slow/sleeper.fail"),
            &json!([0]),
            Cancellation::never(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 2);
    assert_eq!(
        outcome.result,
        ExecutionResult::Err(json!("failed on purpose after 0 ms"))
    );
}

/// Issue 15 item 3: an activity reaches only the hosts its component allows. With
/// `http-get` allowed one local server's port, a request to it is answered, and one to
/// another local server (a forbidden port) fails inside the guest as `HTTP-request-denied`
/// without leaving the host, and is counted.
#[tokio::test]
async fn an_activity_reaches_only_the_hosts_its_component_allows() {
    let allowed = TestServer::start();
    let forbidden = TestServer::start();
    let (host, egress) = host_with_http_get_allowed_to("http-get.wasm", &allowed);
    let outcome = http_get(&host, allowed.url("/hello")).await;
    assert_eq!(outcome.result, hello_answer());
    assert_eq!(egress.denied(), 0);
    let outcome = http_get(&host, forbidden.url("/hello")).await;
    match &outcome.result {
        ExecutionResult::Err(e) => assert!(
            e.to_string().to_lowercase().contains("denied"),
            "the guest sees why: {e}"
        ),
        other => panic!("a forbidden port was reached: {other:?}"),
    }
    assert_eq!(egress.denied(), u64::from(outcome.attempts));
    assert!(outcome.attempts >= 1);
    assert!(
        weir::wasm::egress::denied_total() >= egress.denied(),
        "weir_egress_denied_total counts them"
    );
}

/// Issue 15 item 4: a secret named by a component reaches that component's guests as an
/// environment variable, and nothing an attempt produces (its ok value, its err value) holds
/// the value: the guest quotes it everywhere, Weir redacts it. The same component without
/// the secret named does not see it, and a named secret the worker was not given refuses the
/// load.
#[tokio::test]
async fn a_secret_reaches_only_its_component_and_is_redacted_from_what_it_produces() {
    use secrecy::SecretString;
    let server = TestServer::start();
    let token = format!("tok-{}", std::process::id());
    let named = |text: String| {
        text.replace(
            "path = \"leaky.wasm\"\n",
            "path = \"leaky.wasm\"\nsecrets = [\"API_TOKEN\"]\n",
        )
    };
    let text = named(std::fs::read_to_string(components_toml()).unwrap());
    let specs = weir::wasm::ComponentsFile::parse(&text, &components_toml())
        .unwrap()
        .resolve(&examples_dir())
        .unwrap();
    let mut secrets = weir::wasm::secrets::Secrets::default();
    secrets
        .insert("API_TOKEN", SecretString::from(token.clone()), "test")
        .unwrap();
    let host =
        weir::wasm::WasmHost::load_with_secrets(engine_config(), specs.clone(), &secrets).unwrap();
    let has = "weir-examples:secrets/leaky.has-token";
    let call = "weir-examples:secrets/leaky.call-with-token";
    assert_eq!(
        run(&host, has, json!([])).await,
        ExecutionResult::Ok(json!(true))
    );
    let answer = run(&host, call, json!([server.url("/api")])).await;
    let ExecutionResult::Ok(serde_json::Value::String(text)) = &answer else {
        panic!("{answer:?}")
    };
    assert!(
        text.contains("token [secret API_TOKEN] got status 200"),
        "{text}"
    );
    assert!(!text.contains(&token), "{text}");
    let requests = server.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r
            .to_lowercase()
            .contains(&format!("authorization: bearer {token}"))),
        "the guest sent its token to the allowed host: {requests:?}"
    );
    // The err path: a refused connection, retried, quoted in the err value.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let failed = run(&host, call, json!([format!("http://127.0.0.1:{closed}/")])).await;
    let ExecutionResult::Err(serde_json::Value::String(text)) = &failed else {
        panic!("{failed:?}")
    };
    assert!(
        text.contains("with token [secret API_TOKEN] failed"),
        "{text}"
    );
    assert!(!text.contains(&token), "{text}");

    // Not named: not seen.
    let plain = wasm_common::host();
    assert_eq!(
        run(&plain, has, json!([])).await,
        ExecutionResult::Ok(json!(false))
    );
    // Named but not given: the load is refused, naming both.
    match weir::wasm::WasmHost::load(engine_config(), specs) {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("leaky") && e.contains("API_TOKEN"), "{e}");
        }
        Ok(_) => panic!("a component whose secret is missing was loaded"),
    }
}

/// The result of one run of `function` on `host`, with its retries.
async fn run(
    host: &weir::wasm::WasmHost,
    function: &str,
    params: serde_json::Value,
) -> ExecutionResult {
    host.run_activity(&ffqn(function), &params, Cancellation::never())
        .await
        .unwrap()
        .result
}

/// `on_exhausted = "pause"` (issue 35 item 1) is for the activities Weir runs, never inline:
/// it makes an activity not inline, and is refused on a workflow, an external activity, a
/// stub, an activity marked `inline = true`, and as a value it does not know.
#[test]
fn on_exhausted_pause_is_refused_where_nothing_can_park() {
    let resolve = |entry: &str| {
        let text = format!("[[component]]\nname = \"x\"\npath = \"x.wasm\"\n{entry}\n");
        weir::wasm::ComponentsFile::parse(&text, &components_toml())
            .unwrap()
            .resolve(&examples_dir())
    };
    let pausing = "retries = { on_exhausted = \"pause\" }";
    let specs = resolve(&format!(
        "kind = \"activity\"\nroute = \"compute\"\n{pausing}"
    ))
    .expect("a pausing activity");
    assert_eq!(
        specs[0].retries.on_exhausted,
        weir::wasm::OnExhausted::Pause
    );
    assert!(!specs[0].inline, "a pausing activity is never inline");
    let answering = resolve("kind = \"activity\"\nroute = \"compute\"").expect("an activity");
    assert_eq!(
        answering[0].retries.on_exhausted,
        weir::wasm::OnExhausted::Answer
    );
    for (entry, needle) in [
        (
            format!("kind = \"workflow\"\n{pausing}"),
            "activity's Weir runs",
        ),
        (
            format!("kind = \"activity\"\nexternal = true\n{pausing}"),
            "external service answers its own",
        ),
        (
            format!("kind = \"activity\"\nstub = true\n{pausing}"),
            "a stub is never run",
        ),
        (
            format!("kind = \"activity\"\nroute = \"compute\"\ninline = true\n{pausing}"),
            "cannot be inline",
        ),
        (
            "kind = \"activity\"\nroute = \"compute\"\nretries = { on_exhausted = \"stop\" }"
                .to_owned(),
            "on_exhausted must be \"answer\" or \"pause\"",
        ),
    ] {
        let error = resolve(&entry).expect_err("refused");
        assert!(error.to_string().contains(needle), "{entry}: {error}");
    }
}
