//! `weir worker` processes on the real stack: the examples end to end, many concurrent
//! executions, a worker killed with -9, a worker frozen past its session and resumed (fenced),
//! a restart with an empty cache, poison records, and a retry waiting for its backoff. Every
//! test checks the same invariants: one result per execution, and per execution the history
//! committed to `weir.history` equal to the one materialised in the CQL store, with contiguous
//! sequence numbers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::{Value, json};
use weir::codec::{ActivityRequest, DlqEnvelope, DlqReason, HistoryEntry, HistoryRecord};
use weir::kafka::partitioner::partition_for_key;
use weir::model::{ExecutionErrorKind, ExecutionId, ExecutionResult, Response};
use weir::topology::TopicRole;
use weir::wire::{KIND_HEADER, NOT_BEFORE_HEADER, RecordKind};
use weir_e2e::deployment::{Deployment, committed_reader};
use weir_e2e::{wait_for, wait_until};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const FIBONACCI_SUM: &str = "weir-examples:workflows/fanout.fibonacci-sum";
const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const INVOICE: &str = "weir-examples:workflows/checkout.issue-invoice";
const RESULTS_TIMEOUT: Duration = Duration::from_secs(180);

/// Workers whose activity requests all go through their topics (`weir.responses` carries the
/// answers): what the tests of fencing, take-over and retries on that path need.
const TOPIC_PATH: &[&str] = &["--inline-activities", "off"];

fn order(id: &str, customer: &str, address: &str) -> Value {
    json!([{ "id": id, "customer": customer, "sku": "widget", "quantity": 2, "address": address }])
}

/// Submits `count` successful `order.checkout`s (order ids `<prefix>0`, `<prefix>1`, …).
async fn submit_orders(
    deployment: &Deployment,
    producer: &rdkafka::producer::FutureProducer,
    prefix: &str,
    count: usize,
) -> Vec<ExecutionId> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let params = order(&format!("{prefix}{i}"), "alice", "1 Main St");
        ids.push(deployment.submit(producer, CHECKOUT, params).await);
    }
    ids
}

fn fib(n: u64) -> u64 {
    (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0
}

/// For every id: Kafka's committed history equals the store's, seqs are 0..n without gaps or
/// duplicates, Created comes first and Finished last.
async fn assert_histories_consistent(deployment: &Deployment, ids: &[ExecutionId]) {
    let kafka = deployment.kafka_histories();
    let store = deployment.store().await;
    for id in ids {
        let committed = kafka
            .get(id)
            .unwrap_or_else(|| panic!("no history of {id} on Kafka"));
        let seqs: Vec<u64> = committed.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (0..committed.len() as u64).collect::<Vec<_>>(),
            "seqs of {id}"
        );
        assert!(
            matches!(committed[0].entry, HistoryEntry::Created(_)),
            "{id} starts with Created"
        );
        assert!(
            matches!(
                committed.last().map(|r| &r.entry),
                Some(HistoryEntry::Finished { .. })
            ),
            "{id} ends with Finished"
        );
        // The store is written right after each commit: wait for it to catch up.
        let stored: Vec<HistoryRecord> = wait_for(
            &format!("the store to hold the history of {id}"),
            Duration::from_secs(30),
            || async {
                let stored = deployment.store_history(&store, id).await;
                (stored.len() >= committed.len()).then_some(stored)
            },
        )
        .await;
        assert_eq!(&stored, committed, "history of {id}: store vs weir.history");
    }
}

fn ok(result: &ExecutionResult) -> &Value {
    match result {
        ExecutionResult::Ok(v) => v,
        other => panic!("expected ok, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn order_saga_succeeds_and_compensates_on_kafka() {
    let deployment = Deployment::new("order");
    let _worker = deployment.start_worker("w1", &[]);
    let producer = deployment.producer();
    let alice = deployment
        .submit(&producer, CHECKOUT, order("o1", "alice", "1 Main St"))
        .await;
    let declined = deployment
        .submit(
            &producer,
            CHECKOUT,
            order("o2", "declined-bob", "1 Main St"),
        )
        .await;
    let unshippable = deployment
        .submit(&producer, CHECKOUT, order("o3", "carol", "  "))
        .await;
    let ids = [alice.clone(), declined.clone(), unshippable.clone()];
    let results = deployment.results(&ids, RESULTS_TIMEOUT);

    assert_eq!(ok(&results[&alice])["tracking-number"], "T-o1");
    let ExecutionResult::Err(payment) = &results[&declined] else {
        panic!("declined charge: {}", results[&declined])
    };
    assert!(payment.get("payment-failed").is_some(), "{payment}");
    let ExecutionResult::Err(shipping) = &results[&unshippable] else {
        panic!("failed shipment: {}", results[&unshippable])
    };
    assert!(shipping.get("shipping-failed").is_some(), "{shipping}");
    assert_histories_consistent(&deployment, &ids).await;

    // The compensation is in the history: the declined order released its reservation.
    let store = deployment.store().await;
    let history = deployment.store_history(&store, &declined).await;
    let released = history.iter().any(|r| {
        matches!(&r.entry, HistoryEntry::Event { event, .. } if event.to_string().contains("inventory.release"))
    });
    assert!(released, "the declined order's history shows the release");
}

/// sleepy (a delay timer), random-schedule (draws, a scheduled top-level execution, a child
/// workflow called directly), approval (a stub activity) and fanout.race (a delay cancelled).
#[tokio::test(flavor = "multi_thread")]
async fn timers_schedules_child_workflows_and_stubs_on_kafka() {
    let deployment = Deployment::new("examples");
    let _worker = deployment.start_worker("w1", &[]);
    let producer = deployment.producer();
    let submitted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let sleepy = deployment.submit(&producer, SLEEP_FOR, json!([300])).await;
    let draw = deployment
        .submit(
            &producer,
            "weir-examples:workflows/random-schedule.run",
            json!([100, 1000, 10]),
        )
        .await;
    let call_sleepy = deployment
        .submit(
            &producer,
            "weir-examples:workflows/random-schedule.call-sleepy",
            json!([50]),
        )
        .await;
    let approve = "weir-examples:workflows/approval.auto-approve";
    let approved = deployment
        .submit(&producer, approve, json!(["o1", 5000]))
        .await;
    let rejected = deployment
        .submit(&producer, approve, json!(["o2", 50_000]))
        .await;
    let race = deployment
        .submit(
            &producer,
            "weir-examples:workflows/fanout.race",
            json!([10, 60_000]),
        )
        .await;
    let ids = [
        sleepy.clone(),
        draw.clone(),
        call_sleepy.clone(),
        approved.clone(),
        rejected.clone(),
        race.clone(),
    ];
    let results = deployment.results(&ids, RESULTS_TIMEOUT);

    let woke = ok(&results[&sleepy]);
    let expiry = woke["seconds"].as_i64().expect("seconds") * 1000
        + woke["nanoseconds"].as_i64().expect("nanoseconds") / 1_000_000;
    assert!(
        expiry >= submitted_at + 300,
        "slept until {expiry} ms, submitted at {submitted_at} ms"
    );
    let draw_report = ok(&results[&draw]);
    assert!(draw_report["number"].as_u64().expect("number") < 100);
    let scheduled: ExecutionId = draw_report["scheduled-id"]
        .as_str()
        .expect("scheduled-id")
        .parse()
        .expect("an execution id");
    assert!(ok(&results[&call_sleepy])["seconds"].as_i64().is_some());
    for (id, approval) in [(&approved, "approved"), (&rejected, "rejected")] {
        let report = ok(&results[id]);
        assert!(
            report["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with(approval)),
            "{report}"
        );
        assert_eq!(report["same-value-again-ok"], json!(true), "{report}");
        assert_eq!(report["different-value-conflict"], json!(true), "{report}");
    }
    assert_eq!(ok(&results[&race]), &json!({"child": 55}));

    // The execution scheduled by `run` starts a second later, sleeps 10 ms and publishes its
    // own result, being top-level.
    let scheduled_result = deployment.results(std::slice::from_ref(&scheduled), RESULTS_TIMEOUT);
    assert!(
        ok(&scheduled_result[&scheduled])["seconds"]
            .as_i64()
            .is_some()
    );
    let mut all = ids.to_vec();
    all.push(scheduled);
    assert_histories_consistent(&deployment, &all).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_activity_served_by_a_plain_kafka_client_outside_weir() {
    let deployment = Deployment::new("external");
    let _worker = deployment.start_worker("w1", &[]);
    let tax_service = deployment.start_external_tax_service();
    let producer = deployment.producer();
    let submit = |sku: &str, quantity: u32, region: &str| {
        deployment.submit(&producer, INVOICE, json!([sku, quantity, region]))
    };
    let germany = submit("widget", 4, "DE").await;
    let california = submit("gadget", 1, "US-CA").await;
    let unknown_region = submit("widget", 1, "XX").await;
    let unknown_sku = submit("doohickey", 1, "DE").await;
    let ids = [
        germany.clone(),
        california.clone(),
        unknown_region.clone(),
        unknown_sku.clone(),
    ];
    let results = deployment.results(&ids, RESULTS_TIMEOUT);

    // 4 x 250 = 1000 cents at 19 %; 1999 cents at 7.25 % = 144.93 -> 145.
    assert_eq!(
        ok(&results[&germany]),
        &json!({"net-cents": 1000, "tax-region": "DE", "rate-basis-points": 1900,
                "tax-cents": 190, "total-cents": 1190})
    );
    assert_eq!(ok(&results[&california])["total-cents"], 1999 + 145);
    assert_eq!(
        results[&unknown_region],
        ExecutionResult::Err(json!("tax quote failed: no tax rate for region XX"))
    );
    let ExecutionResult::Err(pricing) = &results[&unknown_sku] else {
        panic!("unknown sku: {}", results[&unknown_sku])
    };
    assert!(
        pricing
            .as_str()
            .is_some_and(|e| e.starts_with("pricing failed")),
        "{pricing}"
    );
    assert_histories_consistent(&deployment, &ids).await;

    // The three quotes were answered by the Java program (the unknown SKU never got that
    // far), each once: Weir's own activity worker does not serve an external route.
    let answered = tax_service.answered();
    assert_eq!(answered.len(), 3, "{answered:#?}");
    for id in [&germany, &california, &unknown_region] {
        assert!(
            answered.iter().any(|l| l.contains(&format!(" for {id}: "))),
            "{id} answered by the tax service: {answered:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_concurrent_fan_outs_on_two_workers() {
    let deployment = Deployment::new("fanout");
    let _a = deployment.start_worker("a", &[]);
    let _b = deployment.start_worker("b", &[]);
    let producer = deployment.producer();
    let mut expected = HashMap::new();
    for i in 0..200u64 {
        let ns = [i % 13, (i + 5) % 17, 3];
        let id = deployment
            .submit(&producer, FIBONACCI_SUM, json!([ns]))
            .await;
        expected.insert(id, ns.iter().map(|&n| fib(n)).sum::<u64>());
    }
    let ids: Vec<ExecutionId> = expected.keys().cloned().collect();
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (id, sum) in &expected {
        let value = ok(&results[id]);
        assert_eq!(value["sum"], json!(sum), "{id}: {value}");
        assert_eq!(
            value["values"].as_array().map(Vec::len),
            Some(3),
            "{id}: {value}"
        );
    }
    assert_histories_consistent(&deployment, &ids).await;
}

/// What a crash or a fenced zombie may leave visible to read_committed readers, and what it
/// may not: every activity request, and every response the workflow worker produces (in its
/// transactions), exists once; an activity's answer, produced by the activity worker before
/// its progress is committed (issue 38, `docs/design/activities.md#answers-before-progress`),
/// may exist more than once (each attempt's own answer), and each parent journals one.
fn assert_no_duplicate_outputs(deployment: &Deployment) {
    let mut requests: HashMap<(String, u32), usize> = HashMap::new();
    for topic in deployment.topology.route_topics() {
        let consumer = committed_reader(&topic);
        let position = |m: &rdkafka::message::BorrowedMessage<'_>| {
            weir::codec::RecordPosition::at(&topic, m.partition(), m.offset())
        };
        let mut idle = 0;
        while idle < 10 {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    idle = 0;
                    let cancel = m.headers().is_some_and(|headers| {
                        headers.iter().any(|h| {
                            h.key == KIND_HEADER
                                && h.value == Some(RecordKind::Cancel.header_value())
                        })
                    });
                    if cancel {
                        continue;
                    }
                    let request: ActivityRequest = deployment
                        .codec
                        .decode(m.payload().unwrap_or_default(), &position(&m))
                        .expect("activity request");
                    *requests
                        .entry((request.execution_id.to_string(), request.attempt))
                        .or_default() += 1;
                }
                Some(Err(e)) => panic!("{e}"),
                None => idle += 1,
            }
        }
    }
    let duplicated: Vec<_> = requests.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "duplicate activity requests: {duplicated:?}"
    );

    let activities: HashSet<&str> = requests.keys().map(|(id, _)| id.as_str()).collect();
    let responses_topic = deployment.topic(TopicRole::Responses);
    let consumer = committed_reader(&responses_topic);
    let mut answers: HashMap<String, usize> = HashMap::new();
    let mut idle = 0;
    while idle < 10 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = 0;
                let position =
                    weir::codec::RecordPosition::at(&responses_topic, m.partition(), m.offset());
                let response: Response = deployment
                    .codec
                    .decode(m.payload().unwrap_or_default(), &position)
                    .expect("response");
                *answers
                    .entry(weir::projection::response_id(&response))
                    .or_default() += 1;
            }
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    assert!(!answers.is_empty(), "responses were read");
    let mut repeated = 0;
    for (id, copies) in &answers {
        if *copies == 1 {
            continue;
        }
        assert!(
            activities.contains(id.as_str()),
            "a response the workflow worker produced is visible {copies} times: {id}"
        );
        repeated += 1;
    }
    // Exactly once where it is promised: each parent journals each response once.
    let mut journalled = 0;
    for (parent, history) in deployment.kafka_histories() {
        let mut seen = HashSet::new();
        for record in history {
            if let HistoryEntry::ResponseAppended(response) = &record.entry {
                let id = weir::projection::response_id(response);
                assert!(seen.insert(id.clone()), "{parent} journalled {id} twice");
                journalled += 1;
            }
        }
    }
    assert!(journalled > 0, "responses were journalled");
    eprintln!(
        "{} responses on the topic, {repeated} of them answered more than once; {journalled} journalled, each once",
        answers.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_with_sigkill_is_taken_over() {
    let deployment = Deployment::new("kill9");
    // The topic path: runs parked on answers that come through `weir.responses` (inline
    // activities would finish most orders in one batch; their ownership is the DST's).
    let a = deployment.start_worker("a", TOPIC_PATH);
    let _b = deployment.start_worker("b", TOPIC_PATH);
    let producer = deployment.producer();
    let ids = submit_orders(&deployment, &producer, "k", 40).await;
    // Kill `a` while work is in flight on `a` itself: it owns partitions and holds runs
    // parked on answers (before, the test killed it after three results, when the other
    // orders could be done already, and never checked the killed worker had anything to lose).
    let held = wait_until("`a` to hold work in flight", RESULTS_TIMEOUT, || {
        let metrics = a.metrics()?;
        let owned = *metrics.get("weir_partitions_owned")?;
        let parked = *metrics.get("weir_executions_parked")?;
        (owned >= 1.0 && parked >= 1.0).then_some((owned, parked))
    });
    a.signal("KILL");
    eprintln!(
        "killed `a` with {} partitions and {} parked runs",
        held.0, held.1
    );
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for id in &ids {
        assert!(ok(&results[id])["tracking-number"].is_string(), "{id}");
    }
    assert_histories_consistent(&deployment, &ids).await;
    assert_no_duplicate_outputs(&deployment);
}

/// A worker frozen with a transaction open, past its session (6 s) but inside its
/// transaction timeout (60 s), and resumed once another worker was assigned its partitions:
/// the outcome must not depend on the broker timing the transaction out (before, the test
/// froze it past the timeout and proved nothing of fencing). `at` is where it freezes:
/// - `before-send-offsets`: it sends its offsets with its old generation, the group refuses
///   them, and the batch aborts (fencing);
/// - `before-commit`: its offsets were accepted before the rebalance, so it commits; the new
///   owner's rewind waits for that (KIP-447), and catch-up reads its batch (issue 11 item 1).
///
/// Either way every execution finishes once, with Kafka's and the store's histories equal.
async fn a_zombie_resumed_inside_its_transaction(at: &str, outcome: &str) {
    let deployment = Deployment::new("sigstop");
    let failpoint = format!("{at}=pause-once(3000)");
    let a = deployment.start_worker_with_env(
        "a",
        &[
            "--session-timeout-ms",
            "6000",
            "--transaction-timeout-ms",
            "60000",
            "--inline-activities",
            "off",
        ],
        &[("WEIR_FAILPOINTS", failpoint.as_str())],
    );
    let producer = deployment.producer();
    let mut ids = submit_orders(&deployment, &producer, "s", 10).await;
    a.wait_for_log(&format!("failpoint {at} reached"), Duration::from_secs(60));
    a.signal("STOP");
    let frozen = std::time::Instant::now();
    // `b` gets the workflow partitions once `a`'s session expires.
    let b = deployment.start_worker("b", TOPIC_PATH);
    let submissions = deployment.topic(TopicRole::Submissions);
    wait_until(
        "b to be assigned the submissions partitions",
        Duration::from_secs(60),
        || {
            let log = std::fs::read_to_string(&b.log).ok()?;
            log.lines()
                .any(|l| l.contains("partitions assigned") && l.contains(&submissions))
                .then_some(())
        },
    );
    assert!(
        frozen.elapsed() < Duration::from_secs(50),
        "the zombie is resumed inside its transaction timeout"
    );
    a.signal("CONT");
    if outcome == "refused" {
        wait_until(
            "the zombie's offsets to be refused",
            Duration::from_secs(60),
            || (a.log_contains("batch aborted") || a.log_contains("was fenced")).then_some(()),
        );
    }
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    assert_eq!(results.len(), ids.len());
    // New work after the resumption completes once, whoever owns it now.
    let late = deployment
        .submit(&producer, CHECKOUT, order("late", "alice", "1 Main St"))
        .await;
    ids.push(late.clone());
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    assert!(ok(&results[&late])["tracking-number"].is_string());
    assert_histories_consistent(&deployment, &ids).await;
    assert_no_duplicate_outputs(&deployment);
    drop(b);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_frozen_past_its_session_is_fenced() {
    a_zombie_resumed_inside_its_transaction("before-send-offsets", "refused").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_frozen_after_its_offsets_were_accepted_commits_and_its_successor_waits() {
    a_zombie_resumed_inside_its_transaction("before-commit", "committed").await;
}

/// Admission (`weir_core::driver`): with room for four parked runs and batches of four, the
/// worker leaves new submissions in their partitions while two runs are in flight, and reads
/// them again as runs finish. Parents waiting for a child workflow (whose submission waits
/// behind the others) go idle and stop counting, so their children are admitted: everything
/// finishes, once.
#[tokio::test(flavor = "multi_thread")]
async fn admission_leaves_submissions_waiting_while_runs_in_flight_fill_the_cache() {
    let deployment = Deployment::new("admission");
    let mut args = TOPIC_PATH.to_vec();
    args.extend(["--cache-size", "4", "--max-batch", "4"]);
    let worker = deployment.start_worker("w1", &args);
    let producer = deployment.producer();
    let mut ids = submit_orders(&deployment, &producer, "adm", 16).await;
    let call_sleepy = "weir-examples:workflows/random-schedule.call-sleepy";
    let mut parents = Vec::new();
    for _ in 0..2 {
        parents.push(deployment.submit(&producer, call_sleepy, json!([50])).await);
    }
    ids.extend(parents.iter().cloned());
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for id in &ids {
        assert!(ok(&results[id]).is_object(), "{id}: {:?}", results[id]);
    }
    let metrics = worker.metrics().expect("metrics");
    assert!(
        metrics["weir_admission_pauses_total"] >= 1.0,
        "admission closed at least once: {metrics:?}"
    );
    assert_histories_consistent(&deployment, &ids).await;
    assert_no_duplicate_outputs(&deployment);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_worker_rebuilds_executions_from_the_store() {
    let deployment = Deployment::new("restart");
    let a = deployment.start_worker("a", &[]);
    let producer = deployment.producer();
    let mut ids = Vec::new();
    // Asleep long enough that `a` is killed before any wakes: with 4 s, a loaded CI run took
    // 20 s to see all ten asleep, `a` had finished them all, and `b` had nothing to rebuild.
    for _ in 0..10 {
        ids.push(
            deployment
                .submit(&producer, SLEEP_FOR, json!([30_000]))
                .await,
        );
    }
    // Wait until every execution is asleep, as recorded in the store.
    let store = deployment.store().await;
    for id in &ids {
        wait_for(&format!("{id} to sleep"), Duration::from_secs(60), || async {
            let history = deployment.store_history(&store, id).await;
            history
                .iter()
                .any(|r| matches!(&r.entry, HistoryEntry::Event { event, .. } if event.kind_name() == "JoinNext"))
                .then_some(())
        })
        .await;
    }
    a.signal("KILL");
    drop(a);
    let b = deployment.start_worker("b", &[]);
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for id in &ids {
        assert!(ok(&results[id]).is_object(), "{id}: the recorded expiry");
    }
    let metrics = b.metrics().expect("metrics of b");
    assert!(
        metrics["weir_executions_replayed_total"] >= ids.len() as f64,
        "b rebuilt the sleeping executions from the store: {metrics:?}"
    );
    assert_histories_consistent(&deployment, &ids).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn poison_records_go_to_the_dlq_without_blocking_their_partition() {
    let deployment = Deployment::new("poison");
    // The default limits (issue 11 item 7: with `--max-record-bytes 65536` this test hid
    // that a record near the broker's limit could neither be processed nor dead-lettered).
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    // A client allowed to send what the broker takes (1 MiB), more than Weir accepts.
    let big_producer: rdkafka::producer::FutureProducer = weir_e2e::kafka_config()
        .producer()
        .set("message.max.bytes", "1048576")
        .create()
        .expect("producer");
    let oversize = vec![0xC3; 1_000_400];
    let submissions = deployment.topic(TopicRole::Submissions);
    let responses = deployment.topic(TopicRole::Responses);
    let valid = ExecutionId::top_level(ulid::Ulid::new());
    let key = valid.to_string();
    // All on the valid execution's partition, before it.
    deployment
        .produce_raw(&producer, &submissions, &key, b"not avro at all")
        .await;
    deployment
        .produce_raw(&big_producer, &submissions, &key, &oversize)
        .await;
    deployment
        .produce_raw(&producer, &responses, &key, &[0xC3, 0x01, 1, 2, 3])
        .await;
    let unknown = deployment
        .submit(&producer, "weir-examples:nothing/here.at-all", json!([]))
        .await;
    let submission = weir::codec::Submission {
        execution_id: valid.clone(),
        ffqn: CHECKOUT.parse().expect("ffqn"),
        params: order("p1", "alice", "1 Main St"),
        parent: None,
        scheduled_at: None,
        correlation_id: None,
        metadata: Default::default(),
        deadline: None,
        concurrency: None,
        tenant: None,
    };
    let bytes = deployment
        .codec
        .encode(&submissions, &submission)
        .expect("encode");
    deployment
        .produce_raw(&producer, &submissions, &key, &bytes)
        .await;

    let results = deployment.results(&[valid.clone(), unknown.clone()], RESULTS_TIMEOUT);
    assert_eq!(ok(&results[&valid])["tracking-number"], "T-p1");
    let ExecutionResult::ExecutionError(error) = &results[&unknown] else {
        panic!("unknown function: {}", results[&unknown])
    };
    assert_eq!(error.kind, ExecutionErrorKind::UnknownFunction, "{error}");

    let dlq = deployment.topic(TopicRole::Dlq);
    let dead = deployment.read_topic::<DlqEnvelope>(
        &dlq,
        Duration::from_secs(60),
        "four DLQ records",
        |r| r.len() >= 4,
    );
    let reasons: BTreeMap<String, DlqReason> = dead
        .iter()
        .map(|(_, e)| {
            (
                format!("{}@{}", e.original_topic, e.original_offset),
                e.reason,
            )
        })
        .collect();
    let count = |reason: DlqReason| dead.iter().filter(|(_, e)| e.reason == reason).count();
    assert_eq!(count(DlqReason::Undecodable), 2, "{reasons:?}");
    assert_eq!(count(DlqReason::Oversize), 1, "{reasons:?}");
    assert_eq!(count(DlqReason::UnknownFfqn), 1, "{reasons:?}");
    let garbage = dead
        .iter()
        .find(|(_, e)| e.value.as_deref() == Some(b"not avro at all".as_slice()))
        .expect("the garbage record, byte for byte");
    assert_eq!(garbage.1.key.as_deref(), Some(key.as_bytes()));
    // The oversize record's copy fits what a producer may send: a prefix of it, and it says
    // so (its size and SHA-256 are in the error and the headers).
    let cut = dead
        .iter()
        .find(|(_, e)| e.reason == DlqReason::Oversize)
        .expect("the oversize record's copy");
    let kept = cut.1.value.as_deref().expect("a prefix").len();
    assert!(kept < oversize.len() && kept > 900_000, "{kept} bytes kept");
    assert!(cut.1.error.contains("1000400 bytes"), "{}", cut.1.error);

    // The reason travels in the headers too.
    let consumer = committed_reader(&dlq);
    let headers = wait_until("a DLQ record with headers", Duration::from_secs(30), || {
        let message = consumer.poll(Duration::from_millis(200))?.ok()?;
        let headers = message.headers()?;
        let reason = headers.iter().find(|h| h.key == "weir.dlq.reason")?;
        Some(String::from_utf8_lossy(reason.value?).into_owned())
    });
    assert!(
        ["undecodable", "oversize", "unknown-ffqn"].contains(&headers.as_str()),
        "{headers}"
    );
}

/// A retry waiting for its backoff holds up nothing: requests on every partition of the
/// route, its own included, are answered meanwhile (before issue 11 item 16 its partition was
/// paused at it), and the retry runs once due, not before. The retry here is a record as
/// earlier versions of the activity worker published them (`attempt` 2 and a
/// `weir.not-before` header), which the worker still honours.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_waiting_for_its_backoff_holds_up_nothing() {
    const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
    const BACKOFF: Duration = Duration::from_secs(25);
    let deployment = Deployment::new("backoff");
    let worker = deployment.start_worker("w", TOPIC_PATH);
    let producer = deployment.producer();
    let warm = deployment.submit(&producer, STEPS, json!([5, 1])).await;
    deployment.results(&[warm], RESULTS_TIMEOUT);

    // A second attempt of a fibonacci call, due in 25 s, on partition 0 of the compute route.
    // Its parent does not exist, so its answer ends up in the DLQ, with the time it was
    // refused.
    let route = deployment
        .topology
        .route("weir-examples:compute/math")
        .expect("the compute route")
        .topic
        .clone();
    let partitions = deployment
        .topology
        .topics
        .iter()
        .find(|t| t.name == route)
        .expect("the route's topic")
        .partitions;
    let held = 0;
    let parent = ExecutionId::top_level(ulid::Ulid::new());
    let retry = ActivityRequest {
        execution_id: ExecutionId::top_level(ulid::Ulid::new()),
        parent_execution_id: parent.clone(),
        ffqn: "weir-examples:compute/math.fibonacci"
            .parse()
            .expect("ffqn"),
        params: json!([10]),
        attempt: 2,
        timeout_millis: None,
        deadline: None,
    };
    let due = chrono::Utc::now() + chrono::Duration::from_std(BACKOFF).expect("a duration");
    let value = deployment.codec.encode(&route, &retry).expect("encode");
    let key = retry.execution_id.to_string();
    let not_before = due.timestamp_millis().to_string();
    producer
        .send(
            FutureRecord::to(&route)
                .partition(held)
                .key(&key)
                .payload(&value)
                .headers(OwnedHeaders::new().insert(Header {
                    key: NOT_BEFORE_HEADER,
                    value: Some(not_before.as_bytes()),
                })),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| e)
        .expect("produce the retry");
    wait_for("the retry waiting", Duration::from_secs(30), || async {
        worker
            .metrics()
            .filter(|m| m.get("weir_activity_waiting") == Some(&1.0))
    })
    .await;

    // Twelve executions with one fibonacci call each, their requests spread over the route.
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(deployment.submit(&producer, STEPS, json!([10, 1])).await);
    }
    let wanted: HashSet<ExecutionId> = ids.iter().cloned().collect();
    let requests = deployment.read_topic::<ActivityRequest>(
        &route,
        RESULTS_TIMEOUT,
        "the twelve requests",
        |r| {
            r.iter()
                .filter(|(_, q)| wanted.contains(&q.parent_execution_id))
                .count()
                >= 12
        },
    );
    let behind = requests
        .iter()
        .filter(|(key, q)| {
            wanted.contains(&q.parent_execution_id)
                && partition_for_key(key.as_bytes(), partitions) == held
        })
        .count();
    // All are answered while the retry still waits, those behind it on its partition too.
    let results = deployment.results(&ids, BACKOFF / 2);
    assert!(
        chrono::Utc::now() < due,
        "the executions finished only after the retry was due"
    );
    eprintln!("{behind} of the 12 requests were behind the retry on its partition");
    for id in &ids {
        assert_eq!(ok(&results[id]), &json!(fib(10)), "result of {id}");
    }

    // The retry runs once due (not before).
    let dlq = deployment.topic(TopicRole::Dlq);
    let parent_key = parent.to_string();
    let dead = deployment.read_topic::<DlqEnvelope>(
        &dlq,
        RESULTS_TIMEOUT,
        "the retry's answer, refused for its unknown parent",
        |r| r.iter().any(|(k, _)| *k == parent_key),
    );
    let (_, refused) = dead
        .iter()
        .find(|(k, _)| *k == parent_key)
        .expect("the retry's answer");
    assert!(
        refused.failed_at.timestamp_millis() >= due.timestamp_millis(),
        "the retry ran before its backoff ended: answered by {}, due {due}",
        refused.failed_at
    );
    assert_histories_consistent(&deployment, &ids).await;
    wait_for(
        "nothing waiting once the retry ran",
        Duration::from_secs(30),
        || async {
            worker
                .metrics()
                .filter(|m| m.get("weir_activity_waiting") == Some(&0.0))
        },
    )
    .await;
}
