//! Operating `weir worker` on the real stack (issue 11 items 8, 12, 18, 19, 20): records
//! compressed with every Kafka codec; a batch the consumer cannot fetch; a worker killed with
//! -9 and restarted with its instance id; SIGTERM; the DLQ counter when a batch aborts; and a
//! worker writing the Confluent wire format through a schema registry.
//!
//! Timings are printed, and asserted only against generous bounds (well under the session
//! timeout they are about).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::BaseConsumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, Producer};
use serde_json::{Value, json};
use weir::codec::{Codec, DlqEnvelope, ExecutionFinished, HttpRegistry, RecordPosition};
use weir::kafka::partitioner::partition_for_key;
use weir::model::{ExecutionId, ExecutionResult};
use weir::topology::TopicRole;
use weir_e2e::deployment::{Deployment, WorkerProcess, committed_reader};
use weir_e2e::faults::cluster::strip_ansi;
use weir_e2e::registry::TestRegistry;
use weir_e2e::{kafka_config, wait_until, weir_cache};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const RESULTS_TIMEOUT: Duration = Duration::from_secs(180);

fn order(id: &str) -> Value {
    json!([{ "id": id, "customer": "alice", "sku": "widget", "quantity": 2, "address": "1 Main St" }])
}

fn tracking_number(result: &ExecutionResult) -> String {
    match result {
        ExecutionResult::Ok(value) => value["tracking-number"]
            .as_str()
            .unwrap_or_else(|| panic!("no tracking number in {value}"))
            .to_owned(),
        other => panic!("expected ok, got {other}"),
    }
}

fn metric(worker: &WorkerProcess, name: &str) -> Option<f64> {
    worker.metrics()?.get(name).copied()
}

/// Waits for the process to exit; its status.
fn wait_exit(worker: &mut WorkerProcess, timeout: Duration) -> ExitStatus {
    wait_until(&format!("{} to exit", worker.name), timeout, || {
        worker.child.try_wait().expect("try_wait")
    })
}

/// Item 8: records compressed by another client with any of Kafka's codecs are read.
#[tokio::test(flavor = "multi_thread")]
async fn submissions_compressed_with_every_codec_run_to_completion() {
    let deployment = Deployment::new("codecs");
    let _worker = deployment.start_worker("w", &[]);
    let mut expected = HashMap::new();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let producer: FutureProducer = kafka_config()
            .producer()
            .set("compression.type", codec)
            .set("linger.ms", "50")
            .create()
            .expect("producer");
        for i in 0..5 {
            let order_id = format!("{codec}-{i}");
            let id = deployment
                .submit(&producer, CHECKOUT, order(&order_id))
                .await;
            expected.insert(id, format!("T-{order_id}"));
        }
    }
    let ids: Vec<ExecutionId> = expected.keys().cloned().collect();
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (id, tracking) in &expected {
        assert_eq!(&tracking_number(&results[id]), tracking, "{id}");
    }
}

/// The stack's data directory (tests/run.sh exports `WEIR_STACK_DIR`).
fn stack_dir() -> PathBuf {
    std::env::var_os("WEIR_STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| weir_cache().join("stack"))
}

/// Overwrites the start of the compressed records of the first zstd batch of a segment file
/// (the zstd frame's magic number) with zeros: a batch no client can decompress. The broker
/// serves the file as it is. Returns the batch's base offset and record count.
fn corrupt_first_zstd_batch(segment: &std::path::Path) -> (i64, i32) {
    use std::os::unix::fs::FileExt;
    let bytes = std::fs::read(segment).expect("read the segment");
    let mut at = 0usize;
    while at + 61 <= bytes.len() {
        let base_offset = i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        let attributes = i16::from_be_bytes(bytes[at + 21..at + 23].try_into().expect("2 bytes"));
        let count = i32::from_be_bytes(bytes[at + 57..at + 61].try_into().expect("4 bytes"));
        if attributes & 0x7 == 4 {
            assert_eq!(
                &bytes[at + 61..at + 65],
                &[0x28, 0xB5, 0x2F, 0xFD],
                "a zstd frame"
            );
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(segment)
                .expect("open the segment for writing");
            file.write_all_at(&[0, 0, 0, 0], (at + 61) as u64)
                .expect("corrupt the batch");
            file.sync_all().expect("sync");
            return (base_offset, count);
        }
        at += 12 + length as usize;
    }
    panic!("no zstd batch in {}", segment.display())
}

/// An id of a top-level execution whose submission lands on `partition`.
fn id_on(partition: i32, partitions: i32) -> ExecutionId {
    loop {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        if partition_for_key(id.to_string().as_bytes(), partitions) == partition {
            return id;
        }
    }
}

/// Item 8: a batch the consumer cannot fetch (here: corrupt zstd data) is skipped, loudly and
/// counted, instead of being fetched again forever; the records behind it are processed.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_that_cannot_be_fetched_is_skipped_and_counted() {
    let deployment = Deployment::new("unfetchable");
    let submissions = deployment.topic(TopicRole::Submissions);
    let partitions = deployment.topology.topic(TopicRole::Submissions).partitions;
    let partition = 1;
    let zstd: FutureProducer = kafka_config()
        .producer()
        .set("compression.type", "zstd")
        .set("linger.ms", "200")
        .create()
        .expect("producer");
    let mut doomed = Vec::new();
    let mut sends = Vec::new();
    for i in 0..3 {
        let id = id_on(partition, partitions);
        let submission = weir::codec::Submission {
            execution_id: id.clone(),
            ffqn: CHECKOUT.parse().expect("ffqn"),
            params: order(&format!("doomed-{i}")),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        };
        let value = deployment
            .codec
            .encode(&submissions, &submission)
            .expect("encode");
        let key = id.to_string();
        doomed.push(id);
        let (zstd, submissions) = (&zstd, &submissions);
        sends.push(async move {
            let record = rdkafka::producer::FutureRecord::to(submissions)
                .key(&key)
                .payload(&value);
            zstd.send(record, Duration::from_secs(30)).await.map(|_| ())
        });
    }
    // Sent together: one batch of three.
    for result in futures::future::join_all(sends).await {
        result.expect("produce");
    }
    zstd.flush(Duration::from_secs(30)).expect("flush");
    let segment = stack_dir()
        .join("kafka/data")
        .join(format!(
            "{}-{partition}",
            deployment.topic(TopicRole::Submissions)
        ))
        .join("00000000000000000000.log");
    let (base, count) = corrupt_first_zstd_batch(&segment);
    assert_eq!(
        (base, count),
        (0, 3),
        "one batch of the three doomed submissions"
    );
    // A good submission behind the bad batch, on the same partition.
    let plain = deployment.producer();
    let good = id_on(partition, partitions);
    let submission = weir::codec::Submission {
        execution_id: good.clone(),
        ffqn: CHECKOUT.parse().expect("ffqn"),
        params: order("behind"),
        parent: None,
        scheduled_at: None,
        correlation_id: None,
        metadata: Default::default(),
        deadline: None,
        concurrency: None,
        tenant: None,
    };
    let value = deployment
        .codec
        .encode(&deployment.topic(TopicRole::Submissions), &submission)
        .expect("encode");
    deployment
        .produce_raw(
            &plain,
            &deployment.topic(TopicRole::Submissions),
            &good.to_string(),
            &value,
        )
        .await;

    let worker = deployment.start_worker("w", &[]);
    let results = deployment.results(std::slice::from_ref(&good), RESULTS_TIMEOUT);
    assert_eq!(tracking_number(&results[&good]), "T-behind");
    worker.wait_for_log("SKIPPED", Duration::from_secs(30));
    let skipped = wait_until("the skip to be counted", Duration::from_secs(30), || {
        metric(&worker, "weir_unfetchable_offsets_skipped_total").filter(|n| *n > 0.0)
    });
    assert_eq!(skipped, 3.0, "the three offsets of the bad batch");
    let log = strip_ansi(&std::fs::read_to_string(&worker.log).expect("log"));
    let line = log
        .lines()
        .find(|l| l.contains("SKIPPED"))
        .expect("the skip's log line");
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains(&format!("partition={partition}"))
            && line.contains("from=0")
            && line.contains("to=3"),
        "{line}"
    );
}

/// When the result of each of `ids` was produced (its record's timestamp, set by the worker
/// when it produced it, inside its transaction), as read from weir.results.
fn result_times(
    deployment: &Deployment,
    ids: &[ExecutionId],
    timeout: Duration,
) -> HashMap<ExecutionId, SystemTime> {
    let topic = deployment.topic(TopicRole::Results);
    let consumer: BaseConsumer = committed_reader(&topic);
    let wanted: std::collections::HashSet<String> = ids.iter().map(ToString::to_string).collect();
    let mut seen: HashMap<ExecutionId, SystemTime> = HashMap::new();
    wait_until("every result", timeout, || {
        while let Some(message) = consumer.poll(Duration::from_millis(20)) {
            let message = message.expect("consume");
            let position = RecordPosition::at(&topic, message.partition(), message.offset());
            let finished: ExecutionFinished = deployment
                .codec
                .decode(message.payload().unwrap_or_default(), &position)
                .expect("decodable result");
            let millis = message.timestamp().to_millis().expect("a timestamp") as u64;
            if wanted.contains(&finished.execution_id.to_string()) {
                seen.entry(finished.execution_id)
                    .or_insert(UNIX_EPOCH + Duration::from_millis(millis));
            }
        }
        (seen.len() == wanted.len()).then_some(())
    });
    seen
}

/// Item 18: a worker with a stable `--instance-id`, killed with -9 and restarted with the same
/// id, gets its partitions back (static membership) and fences its predecessor's open
/// transaction (same transactional id) at once: in-flight work resumes well under the default
/// session timeout (45 s) and transaction timeout (30 s) it would otherwise wait for.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_restarted_with_its_instance_id_resumes_at_once() {
    let first = restart_after_kill(&["--instance-id", "a"]).await;
    assert!(
        first < Duration::from_secs(25),
        "in-flight work resumed {first:?} after the kill: static membership and the stable \
         transactional id should not wait for the 45 s session or the 30 s transaction timeout"
    );
}

/// The same without an instance id (a new, dynamic identity per run, as before item 18): the
/// restarted worker waits for the dead member's session (45 s). Ignored: it takes a minute;
/// it documents the figure (`cargo test -p weir-e2e --test operations -- --ignored`).
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn a_worker_restarted_without_an_instance_id_waits_for_the_session() {
    let first = restart_after_kill(&[]).await;
    assert!(first > Duration::from_secs(25), "{first:?}");
}

/// Kills a lone worker with -9 while 100 orders are in flight, submits 20 more, restarts it
/// with the same `args`, checks every order finishes once, and returns how long after the
/// kill the first result was produced (by the restarted worker).
async fn restart_after_kill(args: &[&str]) -> Duration {
    let deployment = Deployment::new("restart_static");
    let a = deployment.spawn_worker("a", args, &[]);
    let producer = deployment.producer();
    let mut ids = Vec::new();
    for i in 0..100 {
        ids.push(
            deployment
                .submit(&producer, CHECKOUT, order(&format!("r{i}")))
                .await,
        );
    }
    deployment.results(&ids[..3], RESULTS_TIMEOUT);
    let mut a = a;
    a.signal("KILL");
    let killed = SystemTime::now();
    wait_exit(&mut a, Duration::from_secs(10));
    // Work that nobody can have done before the restart.
    for i in 100..120 {
        ids.push(
            deployment
                .submit(&producer, CHECKOUT, order(&format!("r{i}")))
                .await,
        );
    }
    let a2 = deployment.spawn_worker("a-restarted", args, &[]);
    let times = result_times(&deployment, &ids, RESULTS_TIMEOUT);
    // Produced after the kill: by the restarted worker.
    let after: Vec<Duration> = times
        .values()
        .filter_map(|t| t.duration_since(killed).ok())
        .collect();
    let first = after.iter().min().copied().expect("results after the kill");
    let last = after.iter().max().copied().expect("results after the kill");
    println!(
        "restart ({args:?}): first result {:.1} s after kill -9, all {} in-flight done after {:.1} s",
        first.as_secs_f64(),
        after.len(),
        last.as_secs_f64()
    );
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(tracking_number(&results[id]), format!("T-r{i}"));
    }
    assert!(
        a2.log_contains("partitions assigned"),
        "the restarted worker owns partitions"
    );
    if first >= Duration::from_secs(25) {
        // Seen once in CI (first result 31.9 s after the kill, the restarted worker idle for
        // 24.5 s after its take-over): say which transactions the coordinator ended and how,
        // so that the next occurrence names its cause.
        print_transaction_coordinator_lines(&deployment.namespace);
    }
    first
}

/// The broker's transaction-coordinator log lines about `namespace`'s transactional ids.
fn transaction_coordinator_lines(namespace: &str) -> Vec<String> {
    let log = stack_dir().join("kafka").join("server.log");
    match std::fs::read_to_string(&log) {
        Ok(text) => text
            .lines()
            .filter(|line| line.contains(namespace) && line.contains("ransaction"))
            .map(str::to_owned)
            .collect(),
        Err(e) => vec![format!("cannot read {}: {e}", log.display())],
    }
}

fn print_transaction_coordinator_lines(namespace: &str) {
    for line in transaction_coordinator_lines(namespace) {
        println!("broker: {line}");
    }
}

/// Only the members that commit in transactions register a transactional id: the workflow
/// worker's (and the trigger worker's), not the activity worker's, whose answers are
/// produced idempotently and whose progress its consumer commits (issue 38). An unused
/// transactional producer cost each worker a producer, a connection and an id on the
/// coordinator. Read from the broker's own log (the transaction coordinator logs each
/// registration).
#[tokio::test(flavor = "multi_thread")]
async fn only_transactional_members_register_a_transactional_id() {
    let deployment = Deployment::new("txn_ids");
    let worker = deployment.spawn_worker("w", &["--instance-id", "w"], &[]);
    worker.wait_for_log("activity worker started", Duration::from_secs(60));
    let producer = deployment.producer();
    let id = deployment.submit(&producer, CHECKOUT, order("t1")).await;
    deployment.results(&[id], RESULTS_TIMEOUT);
    let namespace = &deployment.namespace;
    let registered = |group: &str| {
        let id = format!("{namespace}.weir.{group}-w ");
        transaction_coordinator_lines(namespace)
            .iter()
            .any(|line| line.contains("Initialized transactionalId") && line.contains(&id))
    };
    assert!(
        registered("workflow-workers"),
        "the workflow worker's transactional id is registered: {:#?}",
        transaction_coordinator_lines(namespace)
    );
    assert!(
        !registered("activity-workers"),
        "the activity worker registers no transactional id: {:#?}",
        transaction_coordinator_lines(namespace)
    );
}

/// Item 19: SIGTERM (docker stop, Kubernetes) stops a worker gracefully: it leaves its groups,
/// so its partitions move to the other worker at once instead of after the session timeout,
/// and it exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_a_worker_that_leaves_its_partitions_to_the_other_at_once() {
    let deployment = Deployment::new("sigterm");
    let partitions = deployment.topology.topic(TopicRole::Submissions).partitions as f64;
    // Both with stable ids (static members, which do not leave a group when they close) and
    // the default 45 s session.
    let mut a = deployment.spawn_worker("a", &["--instance-id", "a"], &[]);
    let b = deployment.spawn_worker("b", &["--instance-id", "b"], &[]);
    wait_until(
        "both workers to own partitions",
        Duration::from_secs(60),
        || {
            let (pa, pb) = (
                metric(&a, "weir_partitions_owned")?,
                metric(&b, "weir_partitions_owned")?,
            );
            (pa > 0.0 && pb > 0.0 && pa + pb == partitions).then_some(())
        },
    );
    let producer = deployment.producer();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            deployment
                .submit(&producer, CHECKOUT, order(&format!("t{i}")))
                .await,
        );
    }
    deployment.results(&ids[..2], RESULTS_TIMEOUT);
    a.signal("TERM");
    let signalled = Instant::now();
    let status = wait_exit(&mut a, Duration::from_secs(30));
    let exited = signalled.elapsed();
    assert!(status.success(), "the worker exits 0 on SIGTERM: {status}");
    wait_until("b to own every partition", Duration::from_secs(40), || {
        (metric(&b, "weir_partitions_owned")? == partitions).then_some(())
    });
    let moved = signalled.elapsed();
    println!(
        "SIGTERM: worker exited 0 after {:.1} s, its partitions were b's after {:.1} s (session timeout 45 s)",
        exited.as_secs_f64(),
        moved.as_secs_f64()
    );
    assert!(
        moved < Duration::from_secs(20),
        "partitions moved after {moved:?}: the stopped worker did not leave its group"
    );
    assert!(
        a.log_contains("left the consumer group"),
        "{}",
        a.log.display()
    );
    for i in 20..30 {
        ids.push(
            deployment
                .submit(&producer, CHECKOUT, order(&format!("t{i}")))
                .await,
        );
    }
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(tracking_number(&results[id]), format!("T-t{i}"));
    }
}

/// Item 20: the DLQ counter counts dead letters whose transaction committed, not attempts: the
/// batch holding a poison record aborts once (failpoint) and runs again, and the poison record
/// is counted once. Also: the end of a partition, which every catch-up reads to, is not logged
/// as an error.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_is_counted_once_when_its_batch_aborts_and_runs_again() {
    let deployment = Deployment::new("dlq_count");
    let producer = deployment.producer();
    let submissions = deployment.topic(TopicRole::Submissions);
    let key = ExecutionId::top_level(ulid::Ulid::new()).to_string();
    deployment
        .produce_raw(&producer, &submissions, &key, b"not avro at all")
        .await;
    let worker = deployment.start_worker_with_env(
        "w",
        &["--workflows-only"],
        &[("WEIR_FAILPOINTS", "before-commit=fail-once(0)")],
    );
    let dlq = deployment.topic(TopicRole::Dlq);
    let dead = deployment.read_topic::<DlqEnvelope>(
        &dlq,
        Duration::from_secs(60),
        "the DLQ record",
        |r| !r.is_empty(),
    );
    assert_eq!(dead.len(), 1, "one committed dead letter");
    worker.wait_for_log("failpoint before-commit reached", Duration::from_secs(10));
    let aborted = wait_until(
        "the aborted batch to be counted",
        Duration::from_secs(10),
        || metric(&worker, "weir_batches_aborted_total{worker=\"workflow\"}").filter(|n| *n >= 1.0),
    );
    let counted = wait_until("the DLQ counter", Duration::from_secs(10), || {
        metric(&worker, "weir_dlq_records_total").filter(|n| *n > 0.0)
    });
    assert_eq!(
        counted, 1.0,
        "the dead letter is counted once although its batch ran twice ({aborted} aborted)"
    );
    // A valid execution after it runs (the partition moved on), and nothing in the log says
    // that the end of a partition was an error.
    let id = deployment.submit(&producer, CHECKOUT, order("after")).await;
    let worker_all = deployment.start_worker("activities", &["--activities-only"]);
    let results = deployment.results(std::slice::from_ref(&id), RESULTS_TIMEOUT);
    assert_eq!(tracking_number(&results[&id]), "T-after");
    let log = std::fs::read_to_string(&worker.log).expect("log");
    assert!(log.contains("partitions assigned"), "{log}");
    let eof: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Partition EOF") || l.contains("PartitionEOF"))
        .collect();
    assert!(eof.is_empty(), "the end of a partition logged: {eof:#?}");
    drop(worker_all);
}

/// Item 12: a worker with `--schema-registry` registers Weir's schemas at start-up and writes
/// the Confluent wire format everywhere, DLQ included (which panicked before).
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_with_a_schema_registry_writes_the_confluent_wire_format() {
    let registry = TestRegistry::start();
    let mut deployment = Deployment::new("registry");
    let codec = Codec::new(Some(std::sync::Arc::new(
        HttpRegistry::new(&registry.url).expect("registry client"),
    )));
    codec
        .register_topology(&deployment.topology)
        .await
        .expect("register");
    deployment.codec = codec;
    let _worker = deployment.start_worker("w", &["--schema-registry", &registry.url]);
    let producer = deployment.producer();
    let submissions = deployment.topic(TopicRole::Submissions);
    deployment
        .produce_raw(&producer, &submissions, "E_garbage", b"not avro at all")
        .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            deployment
                .submit(&producer, CHECKOUT, order(&format!("g{i}")))
                .await,
        );
    }
    let results = deployment.results(&ids, RESULTS_TIMEOUT);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(tracking_number(&results[id]), format!("T-g{i}"));
    }
    // Every record the worker wrote is in the Confluent framing (`00` + schema id).
    for role in [TopicRole::Results, TopicRole::History, TopicRole::Dlq] {
        let topic = deployment.topic(role);
        let consumer = committed_reader(&topic);
        let first = wait_until(
            &format!("a record on {topic}"),
            Duration::from_secs(60),
            || {
                let message = consumer.poll(Duration::from_millis(200))?.ok()?;
                Some(message.payload().unwrap_or_default().to_vec())
            },
        );
        assert_eq!(first.first(), Some(&0x00), "{topic}: {first:02x?}");
    }
    let dead = deployment.read_topic::<DlqEnvelope>(
        &deployment.topic(TopicRole::Dlq),
        Duration::from_secs(60),
        "the DLQ record",
        |r| !r.is_empty(),
    );
    assert_eq!(
        dead[0].1.value.as_deref(),
        Some(b"not avro at all".as_slice())
    );
    let subjects = registry.subjects();
    for role in [
        TopicRole::Submissions,
        TopicRole::Responses,
        TopicRole::History,
        TopicRole::Results,
        TopicRole::Dlq,
    ] {
        let subject = format!("{}-value", deployment.topic(role));
        assert!(subjects.contains_key(&subject), "{subject}: {subjects:?}");
    }
    for route in &deployment.topology.routes {
        let subject = format!("{}-value", route.topic);
        assert!(subjects.contains_key(&subject), "{subject}: {subjects:?}");
    }
}

/// Issue 33 F6: while the schema registry does not answer, a record whose writer schema the
/// worker has not fetched yet waits in its partition and is read again after a backoff; once
/// the registry is back, it runs. (It was dead-lettered at the first refusal, and its caller
/// waited forever: the registry then saw one request during the outage, never a second.)
#[tokio::test(flavor = "multi_thread")]
async fn a_schema_registry_outage_holds_a_record_instead_of_dead_lettering_it() {
    let registry = TestRegistry::start();
    let mut deployment = Deployment::new("registry_outage");
    let codec = Codec::new(Some(std::sync::Arc::new(
        HttpRegistry::new(&registry.url).expect("registry client"),
    )));
    codec
        .register_topology(&deployment.topology)
        .await
        .expect("register");
    deployment.codec = codec;
    let _worker = deployment.start_worker("w", &["--schema-registry", &registry.url]);
    let producer = deployment.producer();
    // The worker is up and has the schemas it registered.
    let before = deployment
        .submit(&producer, CHECKOUT, order("before"))
        .await;
    deployment.results(std::slice::from_ref(&before), RESULTS_TIMEOUT);
    // A submission written under a schema id the worker has never fetched, sent during an
    // outage.
    let submissions = deployment.topic(TopicRole::Submissions);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let submission = weir::codec::Submission::top_level(
        &id,
        CHECKOUT.parse().expect("ffqn"),
        order("during"),
        Default::default(),
        None,
    );
    let mut value = deployment
        .codec
        .encode(&submissions, &submission)
        .expect("encode");
    assert_eq!(value[0], 0, "the Confluent framing");
    let known = u32::from_be_bytes(value[1..5].try_into().expect("schema id"));
    let variant = registry.register_variant(&format!("{submissions}-value"), known);
    value[1..5].copy_from_slice(&variant.to_be_bytes());
    registry.set_down(true);
    deployment
        .produce_raw(&producer, &submissions, &id.to_string(), &value)
        .await;
    wait_until(
        "the worker to ask the registry again during the outage",
        Duration::from_secs(60),
        || (registry.refused() >= 3).then_some(()),
    );
    registry.set_down(false);
    let results = deployment.results(std::slice::from_ref(&id), RESULTS_TIMEOUT);
    assert_eq!(tracking_number(&results[&id]), "T-during");
}

/// Item 19: `docker stop` sends the image's stop signal; the worker handles SIGTERM. And the
/// image builds every workspace member (the core crate included).
#[test]
fn the_image_stops_workers_with_sigterm() {
    let dockerfile = std::fs::read_to_string(weir_e2e::repo_root().join("docker/Dockerfile"))
        .expect("Dockerfile");
    assert!(
        dockerfile.lines().any(|l| l.trim() == "STOPSIGNAL SIGTERM"),
        "docker/Dockerfile sets STOPSIGNAL SIGTERM"
    );
    for member in ["core", "worker", "tests"] {
        assert!(
            dockerfile.contains(&format!("COPY {member} {member}")),
            "the build stage copies the workspace member {member}/"
        );
    }
}

/// Item 18, the other side of a stable identity: two live workers must not share an instance
/// id. The one whose static membership is taken over (fenced) exits with an error naming the
/// id, instead of idling as a member that no longer is one.
///
/// It exits at its [`MAX_UNEXPLAINED_FENCINGS`]th fencing (`worker/src/kafka/recovery.rs`):
/// the two fence each other in turn, with the restart backoffs between. How soon the broker
/// tells a member it was fenced varies: in a CI run that timed out after 60 s, `b` heard it
/// 3–4 s after `a` rejoined, but `a` 16.8 s and 20.3 s after `b` did, so that its third fencing
/// was due about 70 s after `b` started. The wait allows three such rounds.
///
/// [`MAX_UNEXPLAINED_FENCINGS`]: weir::kafka::recovery::MAX_UNEXPLAINED_FENCINGS
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_instance_id_is_taken_by_another_exits_with_an_error() {
    let deployment = Deployment::new("dup_id");
    let mut a = deployment.spawn_worker("a", &["--instance-id", "dup", "--workflows-only"], &[]);
    a.wait_for_log("partitions assigned", Duration::from_secs(60));
    let _b = deployment.spawn_worker("b", &["--instance-id", "dup", "--workflows-only"], &[]);
    let status = wait_exit(&mut a, Duration::from_secs(180));
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(&a.log).expect("log");
    assert!(
        log.contains("instance id `dup`") || log.contains("was fenced"),
        "{}",
        a.log.display()
    );
}
