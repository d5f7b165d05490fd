//! A worker rides out a restart of the Kafka broker without exiting (docs/faults.md, finding
//! 2): with static membership and a session shorter than the broker's absence, librdkafka's
//! own session timeout makes the member rejoin under a new member id and the broker fences the
//! old one (FENCED_INSTANCE_ID, fatal for the consumer), and the transactional producers may
//! fail (INVALID_TXN_STATE on abort, fenced epochs) or abort their batch. The worker must
//! rebuild what failed in process (`weir::kafka::recovery`) or process the aborted batch
//! again, and every execution, submitted before or after the restart, must finish exactly
//! once.
//!
//! A second deployment's worker reads a trigger topic meanwhile: it lives on, and every record
//! before and after the restart starts one execution. (Its trigger worker rebuilds its clients
//! with the same `restart_member` when they fail fatally; its members were not fenced in the
//! runs seen so far, so this does not prove that path.)
//!
//! The test kills the broker of the test stack (`WEIR_STACK_DIR`, exported by tests/run.sh)
//! with -9 and restarts it with `docker/local/stack.sh up`, as the fault run's `broker-kill`
//! does: it is a test binary of its own so that no other test runs while the broker is away.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir::model::{ExecutionId, ExecutionResult};
use weir_e2e::deployment::{Deployment, WorkerProcess};
use weir_e2e::faults::cluster::{Service, Stack};
use weir_e2e::wait_until;

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const GREET: &str = "weir-examples:workflows/hello.greet";
const RESULTS_TIMEOUT: Duration = Duration::from_secs(240);

fn order(id: &str) -> Value {
    json!([{ "id": id, "customer": "alice", "sku": "widget", "quantity": 2, "address": "1 Main St" }])
}

fn restarts(worker: &WorkerProcess) -> f64 {
    worker
        .metrics()
        .map(|m| {
            m.iter()
                .filter(|(name, _)| name.starts_with("weir_kafka_client_restarts_total"))
                .map(|(_, value)| value)
                .sum()
        })
        .unwrap_or(0.0)
}

fn committed(worker: &WorkerProcess) -> f64 {
    worker
        .metrics()
        .and_then(|m| {
            m.get("weir_batches_committed_total{worker=\"workflow\"}")
                .copied()
        })
        .unwrap_or(0.0)
}

fn assert_alive(worker: &mut WorkerProcess, when: &str) {
    if let Some(status) = worker.child.try_wait().expect("try_wait") {
        panic!(
            "the worker exited {when} ({status}); see {}",
            worker.log.display()
        );
    }
}

async fn submit_orders(
    deployment: &Deployment,
    prefix: &str,
    count: usize,
    expected: &mut HashMap<ExecutionId, String>,
) {
    let producer = deployment.producer();
    for i in 0..count {
        let order_id = format!("{prefix}-{i}");
        let id = deployment
            .submit(&producer, CHECKOUT, order(&order_id))
            .await;
        expected.insert(id, format!("T-{order_id}"));
    }
}

/// The tests of this binary stop the one broker: one at a time.
static BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A worker started while the broker is away (its workflow worker's transactional producer
/// cannot be initialised) waits for it, as a worker whose clients failed does, and works once
/// it is back; it used to exit at once (`cannot create the transactional producer …: Timed
/// out`), which broke the run that found it when the trigger worker was still starting.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_started_while_the_broker_is_away_waits_for_it() {
    let _broker = BROKER.lock().await;
    let stack = Stack::from_env(std::env::temp_dir().join("weir-e2e"))
        .expect("the test stack (WEIR_STACK_DIR, set by tests/run.sh)");
    let deployment = Deployment::new("broker_away_start");
    stack.kill9(Service::Kafka).expect("kill -9 the broker");
    let mut worker = deployment.spawn_worker(
        "w",
        &[
            "--instance-id",
            "w",
            "--session-timeout-ms",
            "6000",
            "--transaction-timeout-ms",
            "10000",
        ],
        &[],
    );
    wait_until("the worker to wait for the broker", RESULTS_TIMEOUT, || {
        assert_alive(&mut worker, "while the broker was away at its start");
        worker
            .log_contains("the broker is away; trying again")
            .then_some(())
    });
    stack.up().expect("restart the broker");
    wait_until("the worker to own partitions", RESULTS_TIMEOUT, || {
        worker
            .metrics()
            .and_then(|m| m.get("weir_partitions_owned").copied())
            .filter(|owned| *owned > 0.0)
    });
    let mut expected = HashMap::new();
    submit_orders(&deployment, "late", 3, &mut expected).await;
    let ids: Vec<ExecutionId> = expected.keys().cloned().collect();
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (id, tracking) in &expected {
        match &results[id] {
            ExecutionResult::Ok(value) => assert_eq!(
                value["tracking-number"].as_str(),
                Some(tracking.as_str()),
                "{id}"
            ),
            other => panic!("{id}: expected ok, got {other}"),
        }
    }
    assert_alive(&mut worker, "after the broker came back");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_worker_survives_a_broker_restart_and_finishes_everything_once() {
    let _broker = BROKER.lock().await;
    let stack = Stack::from_env(std::env::temp_dir().join("weir-e2e"))
        .expect("the test stack (WEIR_STACK_DIR, set by tests/run.sh)");
    let deployment = Deployment::new("broker_restart");
    // A session (6 s, the broker's minimum) shorter than the broker's absence (~10-20 s): the member's own
    // session times out, and its rejoin is fenced.
    let mut worker = deployment.spawn_worker(
        "w",
        &[
            "--instance-id",
            "w",
            "--session-timeout-ms",
            "6000",
            "--transaction-timeout-ms",
            "10000",
            // Every step through the activity topics, as when this test was written: the
            // worker then always has transactions in flight when the broker dies (inline, an
            // order is one transaction, and the run may pass without a client failing).
            "--inline-activities",
            "off",
        ],
        &[],
    );
    // The trigger deployment: its own topics, so that its results (a record read again after
    // a client restart republishes its execution's result) stay apart.
    let triggered = Deployment::new("broker_restart_trigger");
    let signups = format!("{}-crm.signups", triggered.namespace);
    weir_e2e::create_topics(&[(&signups, 2)]);
    let triggers = triggered.logs().join("triggers.toml");
    std::fs::write(
        &triggers,
        format!(
            "[[trigger]]\nname = \"signups\"\ntopic = \"{signups}\"\n\
             function = \"{GREET}\"\nparams = [\"/name\"]\nid = \"/id\"\n"
        ),
    )
    .expect("write the triggers file");
    let triggers = triggers.to_str().expect("a UTF-8 path").to_owned();
    let mut trigger_worker = triggered.spawn_worker(
        "t",
        &[
            "--instance-id",
            "t",
            "--session-timeout-ms",
            "6000",
            "--transaction-timeout-ms",
            "10000",
            "--triggers",
            &triggers,
        ],
        &[],
    );
    let signup = |i: usize| json!({"id": i, "name": format!("s-{i}")}).to_string();
    let trigger_producer = triggered.producer();
    for i in 0..5 {
        triggered
            .produce_raw(
                &trigger_producer,
                &signups,
                &i.to_string(),
                signup(i).as_bytes(),
            )
            .await;
    }
    wait_until(
        "the worker to own partitions",
        Duration::from_secs(90),
        || {
            worker
                .metrics()
                .and_then(|m| m.get("weir_partitions_owned").copied())
                .filter(|owned| *owned > 0.0)
        },
    );
    let mut expected = HashMap::new();
    submit_orders(&deployment, "warm", 5, &mut expected).await;
    let warm: Vec<ExecutionId> = expected.keys().cloned().collect();
    deployment.results(&warm, RESULTS_TIMEOUT);

    // Work in flight when the broker dies.
    submit_orders(&deployment, "before", 20, &mut expected).await;
    let before_kill = committed(&worker);
    let killed = Instant::now();
    stack.kill9(Service::Kafka).expect("kill -9 the broker");
    // Restarted at once, as the fault run does: a KRaft broker takes longer than the
    // member's session (6 s) to answer again, so the session times out on the member's side.
    stack.up().expect("restart the broker");
    let away = killed.elapsed();
    eprintln!("broker back after {away:?}");
    assert!(
        away > Duration::from_secs(6),
        "the broker was away {away:?}, not longer than the session: nothing was tested"
    );
    assert_alive(&mut worker, "while the broker restarted");
    assert_alive(&mut trigger_worker, "while the broker restarted");
    let trigger_producer = triggered.producer();
    for i in 5..10 {
        triggered
            .produce_raw(
                &trigger_producer,
                &signups,
                &i.to_string(),
                signup(i).as_bytes(),
            )
            .await;
    }

    submit_orders(&deployment, "after", 20, &mut expected).await;
    // The worker commits again, and is alive all along (a worker that exits fails here at
    // once, instead of when the results do not come).
    wait_until(
        "the worker to commit again after the restart",
        Duration::from_secs(120),
        || {
            assert_alive(&mut worker, "after the broker restart");
            (committed(&worker) > before_kill).then_some(())
        },
    );
    let ids: Vec<ExecutionId> = expected.keys().cloned().collect();
    // `results` asserts one result per execution.
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    eprintln!(
        "every result {:?} after the kill; client restarts: {}",
        killed.elapsed(),
        restarts(&worker)
    );
    for (id, tracking) in &expected {
        match &results[id] {
            ExecutionResult::Ok(value) => assert_eq!(
                value["tracking-number"].as_str(),
                Some(tracking.as_str()),
                "{id}"
            ),
            other => panic!("{id}: expected ok, got {other}"),
        }
    }
    // Exactly once in the log of record: every history seq once, in order.
    let histories = deployment.kafka_histories();
    for id in &ids {
        let history = histories
            .get(id)
            .unwrap_or_else(|| panic!("no history of {id}"));
        let seqs: Vec<u64> = history.iter().map(|r| r.seq).collect();
        let expected_seqs: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(seqs, expected_seqs, "history of {id}");
    }
    assert_alive(&mut worker, "after the broker restart");
    // Every signup, before and after, started one execution, and the trigger worker lived on.
    let results = triggered.topic(weir::topology::TopicRole::Results);
    let greeted = weir_e2e::wait_for("10 greetings", RESULTS_TIMEOUT, || async {
        let greeted: std::collections::BTreeMap<String, ExecutionResult> = triggered
            .read_to_end::<weir::codec::ExecutionFinished>(&results, Duration::from_secs(30))
            .into_iter()
            .filter(|(_, f)| f.ffqn.to_string() == GREET)
            .map(|(id, f)| (id, f.result))
            .collect();
        (greeted.len() >= 10).then_some(greeted)
    })
    .await;
    let texts: std::collections::BTreeSet<String> = greeted
        .values()
        .map(|r| match r {
            ExecutionResult::Ok(Value::String(s)) => s.clone(),
            other => panic!("a greeting ended {other}"),
        })
        .collect();
    assert_eq!(texts.len(), 10, "one execution per signup: {greeted:?}");
    assert_eq!(greeted.len(), 10, "one execution per signup: {greeted:?}");
    assert_alive(&mut trigger_worker, "after the broker restart");
    // The outage was felt and ridden out in process: a client failed fatally and was rebuilt
    // (counted), or the batch in flight was aborted and processed again from the committed
    // offsets. Which one is timing: before issue 38 the activity worker's transactions failed
    // fatally after every restart (its answers are no longer transactional), and the workflow
    // worker's abort fails fatally or succeeds depending on where the broker left its
    // transaction (seen both ways since its producers stopped lingering).
    let aborted = worker
        .metrics()
        .and_then(|m| {
            m.get("weir_batches_aborted_total{worker=\"workflow\"}")
                .copied()
        })
        .unwrap_or(0.0);
    eprintln!(
        "client restarts {}, workflow batches aborted {aborted}",
        restarts(&worker)
    );
    assert!(
        restarts(&worker) >= 1.0 || aborted >= 1.0,
        "neither a client restart nor an aborted batch counted: the outage was not felt; see {}",
        worker.log.display()
    );
    worker.signal("TERM");
    let status = wait_until("the worker to stop", Duration::from_secs(60), || {
        worker.child.try_wait().expect("try_wait")
    });
    assert!(status.success(), "{status}; see {}", worker.log.display());
}
