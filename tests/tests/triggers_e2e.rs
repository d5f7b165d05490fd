//! Issue 13 item 3 on the real stack: topics of another system, bound in a triggers file to a
//! workflow function and to an event, written by a plain Kafka client (JSON bytes, no Weir
//! code).
//!
//! - Every record of the orders topic starts one execution of `hello.greet` (its parameter a
//!   field of the value, its identity the `order` field): the same order twice is one
//!   execution; a record that is not JSON and one without the field go to the DLQ, their
//!   bytes kept, with why.
//! - The first worker is killed (-9) inside its first trigger transaction; its successor reads
//!   the records again: each started exactly one execution.
//! - The group's offsets are deleted and every record is read again: no new execution.
//! - Every record of the approvals topic is the event `approved` for the execution its
//!   `execution` field names; the same approval twice is delivered once.
//!
//! The mapping rules are `weir::trigger`'s unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use weir::codec::{DlqEnvelope, DlqReason, ExecutionFinished};
use weir::model::ExecutionResult;
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{create_topics, wait_until};

const GREET: &str = "weir-examples:workflows/hello.greet";
const APPROVAL: &str = "weir-examples:workflows/approval-event.await-approval";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Writes `text` as the deployment's triggers file; its path, for `--triggers`.
fn triggers_file(deployment: &Deployment, text: &str) -> String {
    let path = deployment.logs().join("triggers.toml");
    std::fs::write(&path, text).expect("write the triggers file");
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// The greetings on weir.results, by execution id (a result published again counts once).
fn greetings(deployment: &Deployment) -> BTreeMap<String, String> {
    published(deployment)
        .into_iter()
        .map(|(id, (text, _))| (id, text))
        .collect()
}

/// The greetings on weir.results and how often each was published, by execution id (a
/// submission of a finished execution publishes its result again).
fn published(deployment: &Deployment) -> BTreeMap<String, (String, usize)> {
    let results = deployment.topic(TopicRole::Results);
    deployment
        .read_to_end::<ExecutionFinished>(&results, Duration::from_secs(30))
        .into_iter()
        .filter(|(_, f)| f.ffqn.to_string() == GREET)
        .filter_map(|(id, f)| match f.result {
            ExecutionResult::Ok(serde_json::Value::String(s)) => Some((id, s)),
            _ => None,
        })
        .fold(BTreeMap::new(), |mut all, (id, text)| {
            all.entry(id).or_insert((text, 0)).1 += 1;
            all
        })
}

/// Waits until `group` has committed `ends` (one offset per partition) of `topic`.
fn wait_consumed(deployment: &Deployment, group: &str, topic: &str, ends: &[i64]) {
    wait_until(
        &format!("{group} to commit the end of {topic}"),
        TIMEOUT,
        || {
            ends.iter()
                .enumerate()
                .all(|(p, end)| {
                    *end == 0
                        || deployment
                            .committed(group, topic, p as i32)
                            .is_some_and(|(offset, _)| offset >= *end)
                })
                .then_some(())
        },
    );
}

/// The end offsets of `topic`'s partitions, in partition order.
fn ends(topic: &str) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = weir_e2e::kafka_config()
        .client()
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len() as i32;
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn records_of_existing_topics_start_executions_and_send_events_exactly_once() {
    let deployment = Deployment::new("trigger");
    let orders = format!("{}-shop.orders", deployment.namespace);
    let approvals = format!("{}-shop.approvals", deployment.namespace);
    create_topics(&[(&orders, 3), (&approvals, 2)]);
    let triggers = triggers_file(
        &deployment,
        &format!(
            r#"
[[trigger]]
name = "orders"
topic = "{orders}"
function = "{GREET}"
params = ["/name"]
id = "/order"

[[trigger]]
name = "approvals"
topic = "{approvals}"
event = "approved"
target = "/execution"
payload = "/by"
id = "/approval"
"#
        ),
    );
    // The first worker is killed -9 inside its first trigger transaction (the submissions
    // produced, the offsets sent, nothing committed).
    let worker = deployment.start_worker_with_env(
        "w1",
        &["--triggers", &triggers],
        &[("WEIR_FAILPOINTS", "trigger-before-commit=pause-once(60000)")],
    );
    let producer = deployment.producer();
    let order = |i: usize| json!({"order": format!("o-{i}"), "name": format!("n-{i}")});

    // 30 orders, the first one twice, and two records that do not map.
    for i in 0..30 {
        let value = order(i).to_string();
        deployment
            .produce_raw(&producer, &orders, &format!("k-{i}"), value.as_bytes())
            .await;
    }
    let again = order(0).to_string();
    deployment
        .produce_raw(&producer, &orders, "k-again", again.as_bytes())
        .await;
    deployment
        .produce_raw(&producer, &orders, "k-bad", b"not json {")
        .await;
    deployment
        .produce_raw(&producer, &orders, "k-nameless", br#"{"order": "o-x"}"#)
        .await;
    worker.wait_for_log("failpoint trigger-before-commit reached", TIMEOUT);
    worker.signal("KILL");
    drop(worker);
    let mut worker = deployment.start_worker("w1", &["--triggers", &triggers]);
    let seen = weir_e2e::wait_for("30 greetings", TIMEOUT, || async {
        let seen = greetings(&deployment);
        (seen.len() >= 30).then_some(seen)
    })
    .await;
    assert_eq!(seen.len(), 30, "one execution per order: {seen:?}");
    let texts: BTreeSet<&String> = seen.values().collect();
    assert_eq!(texts.len(), 30, "{seen:?}");
    assert!(texts.contains(&"hello, n-0".to_owned()));
    let dead = deployment.dead_letters_from(&orders, Duration::from_secs(30));
    assert_eq!(dead.len(), 2, "{dead:#?}");
    let bad = dead
        .iter()
        .find(|e| e.key.as_deref() == Some(b"k-bad".as_slice()))
        .expect("the record that is not JSON");
    assert_eq!(bad.reason, DlqReason::Undecodable);
    assert_eq!(bad.value.as_deref(), Some(b"not json {".as_slice()));
    let nameless = dead
        .iter()
        .find(|e| e.key.as_deref() == Some(b"k-nameless".as_slice()))
        .expect("the record without a name");
    assert_eq!(nameless.reason, DlqReason::InvalidParams);
    assert!(nameless.error.contains("/name"), "{}", nameless.error);

    // Everything read again by a group that lost its offsets: no new execution.
    let triggered = "weir.trigger-workers";
    let end = ends(&orders);
    wait_consumed(&deployment, triggered, &orders, &end);
    worker.signal("TERM");
    let _ = worker.child.wait();
    weir_e2e::delete_groups(&[&format!("{}.{triggered}", deployment.namespace)]);
    assert_eq!(deployment.committed(triggered, &orders, 0), None);
    worker = deployment.start_worker("w2", &["--triggers", &triggers]);
    wait_consumed(&deployment, triggered, &orders, &end);
    // Every order submitted again: each finished execution publishes its result again, and
    // none is created anew.
    let again = weir_e2e::wait_for("every greeting published again", TIMEOUT, || async {
        let all = published(&deployment);
        all.values().all(|(_, times)| *times >= 2).then_some(all)
    })
    .await;
    assert_eq!(
        again.len(),
        30,
        "re-read records start nothing new: {again:?}"
    );

    // An approval for a running execution: delivered once, however often it comes.
    let waiting = deployment
        .submit(&producer, APPROVAL, json!(["order-9", 600]))
        .await;
    // Waiting (its wait opens in the step that creates it) before the approvals are sent.
    let store = deployment.store().await;
    weir_e2e::wait_for("the approval execution in the store", TIMEOUT, || async {
        let history = deployment.store_history(&store, &waiting).await;
        (!history.is_empty()).then_some(())
    })
    .await;
    let approval = json!({"approval": "a-1", "execution": waiting.to_string(), "by": "ann"});
    for _ in 0..2 {
        deployment
            .produce_raw(
                &producer,
                &approvals,
                "a-1",
                approval.to_string().as_bytes(),
            )
            .await;
    }
    // (Read without `Deployment::results`, which refuses the greetings published again.)
    let results = deployment.topic(TopicRole::Results);
    let approved = weir_e2e::wait_for("the approval's result", TIMEOUT, || async {
        deployment
            .read_to_end::<ExecutionFinished>(&results, Duration::from_secs(30))
            .into_iter()
            .find(|(id, _)| *id == waiting.to_string())
            .map(|(_, f)| f.result)
    })
    .await;
    assert_eq!(approved, ExecutionResult::Ok(json!("ann")));
    // The second copy of the approval was the same event: dropped, not kept.
    let history = deployment.store_history(&store, &waiting).await;
    assert!(
        !history
            .iter()
            .any(|r| matches!(r.entry, weir::codec::HistoryEntry::EventReceived(_))),
        "{history:#?}"
    );
    drop(worker);
}

/// Avro records in the Confluent wire format, their schema in a registry (not one of
/// Weir's): each starts one execution; one naming a schema the registry does not have and one
/// whose body does not fit its schema go to the DLQ.
#[tokio::test(flavor = "multi_thread")]
async fn avro_records_through_a_schema_registry_start_executions() {
    use apache_avro::types::Value as Avro;
    use weir::codec::SchemaRegistry;

    let registry = weir_e2e::registry::TestRegistry::start();
    let mut deployment = Deployment::new("trigger_avro");
    let codec = weir::codec::Codec::new(Some(std::sync::Arc::new(
        weir::codec::HttpRegistry::new(&registry.url).expect("registry client"),
    )));
    codec
        .register_topology(&deployment.topology)
        .await
        .expect("register");
    deployment.codec = codec;
    let topic = format!("{}-crm.signups", deployment.namespace);
    create_topics(&[(&topic, 2)]);
    let schema_text = r#"{"type": "record", "name": "Signup", "namespace": "com.example.crm",
        "fields": [{"name": "id", "type": "long"},
                   {"name": "person", "type": {"type": "record", "name": "Person",
                       "fields": [{"name": "name", "type": "string"},
                                  {"name": "nickname", "type": ["null", "string"], "default": null}]}}]}"#;
    let client = weir::codec::HttpRegistry::new(&registry.url).expect("registry client");
    let id = client
        .register(&format!("{topic}-value"), schema_text)
        .await
        .expect("register the CRM's schema");
    let schema = apache_avro::Schema::parse_str(schema_text).expect("a schema");
    let frame = |schema_id: u32, body: &[u8]| {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&schema_id.to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    };
    let body = |i: i64, name: &str| {
        let value = Avro::Record(vec![
            ("id".into(), Avro::Long(i)),
            (
                "person".into(),
                Avro::Record(vec![
                    ("name".into(), Avro::String(name.into())),
                    ("nickname".into(), Avro::Union(0, Box::new(Avro::Null))),
                ]),
            ),
        ]);
        let mut out = Vec::new();
        apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
            .build()
            .expect("writer")
            .write_value(&mut out, value)
            .expect("an Avro body");
        out
    };
    let triggers = triggers_file(
        &deployment,
        &format!(
            "[[trigger]]\nname = \"signups\"\ntopic = \"{topic}\"\nformat = \"avro\"\n\
             function = \"{GREET}\"\nparams = [\"/person/name\"]\nid = \"/id\"\n"
        ),
    );
    let _worker = deployment.start_worker(
        "w",
        &["--triggers", &triggers, "--schema-registry", &registry.url],
    );
    let producer = deployment.producer();
    for (i, name) in ["ann", "bob", "cy"].iter().enumerate() {
        let value = frame(id, &body(i as i64, name));
        deployment
            .produce_raw(&producer, &topic, &format!("s-{i}"), &value)
            .await;
    }
    let unknown = frame(id + 1000, &body(9, "nobody"));
    deployment
        .produce_raw(&producer, &topic, "s-unknown", &unknown)
        .await;
    let cut = frame(id, &body(8, "cut")[..3]);
    deployment
        .produce_raw(&producer, &topic, "s-cut", &cut)
        .await;
    let seen = weir_e2e::wait_for("3 greetings", TIMEOUT, || async {
        let seen = greetings(&deployment);
        (seen.len() >= 3).then_some(seen)
    })
    .await;
    let texts: BTreeSet<String> = seen.into_values().collect();
    let want: BTreeSet<String> = ["hello, ann", "hello, bob", "hello, cy"]
        .map(String::from)
        .into();
    assert_eq!(texts, want);
    let dead = deployment.read_topic::<DlqEnvelope>(
        &deployment.topic(TopicRole::Dlq),
        TIMEOUT,
        "the two records that do not read",
        |r| r.iter().filter(|(_, e)| e.original_topic == topic).count() >= 2,
    );
    let dead: Vec<&DlqEnvelope> = dead
        .iter()
        .map(|(_, e)| e)
        .filter(|e| e.original_topic == topic)
        .collect();
    assert_eq!(dead.len(), 2, "{dead:#?}");
    assert!(dead.iter().all(|e| e.reason == DlqReason::Undecodable));
    let errors: Vec<&str> = dead.iter().map(|e| e.error.as_str()).collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("schema {}", id + 1000))),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("does not fit")),
        "{errors:?}"
    );
}

/// A one-partition orders topic of `deployment`, each of whose records starts `hello.greet`
/// with its `name` (identity: its `order`): the topic's name and the triggers file's path.
fn greet_orders(deployment: &Deployment) -> (String, String) {
    let orders = format!("{}-shop.orders", deployment.namespace);
    create_topics(&[(&orders, 1)]);
    let triggers = triggers_file(
        deployment,
        &format!(
            r#"
[[trigger]]
name = "orders"
topic = "{orders}"
function = "{GREET}"
params = ["/name"]
id = "/order"
"#
        ),
    );
    (orders, triggers)
}

/// Issue 33 F3 on the real stack: a record whose mapped submission would be over the
/// producer's limit (a 990 kB field becomes the parameter) is dead-lettered `oversize`, its
/// bytes kept up to the copy's bound; the record after it starts its execution. Before the
/// size gate, producing the submission failed the trigger's transaction and the worker read
/// the same batch again, forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_mapped_over_the_size_limit_is_dead_lettered_and_the_next_one_runs() {
    let deployment = Deployment::new("trigger_size");
    let (orders, triggers) = greet_orders(&deployment);
    let _worker = deployment.start_worker("w1", &["--triggers", &triggers]);
    let producer = deployment.producer();
    let big = json!({"order": "o-big", "name": "x".repeat(990_000)}).to_string();
    deployment
        .produce_raw(&producer, &orders, "k-big", big.as_bytes())
        .await;
    let after = json!({"order": "o-after", "name": "after"}).to_string();
    deployment
        .produce_raw(&producer, &orders, "k-after", after.as_bytes())
        .await;
    weir_e2e::wait_for(
        "the greeting of the record after the big one",
        TIMEOUT,
        || async {
            greetings(&deployment)
                .into_values()
                .any(|text| text.contains("after"))
                .then_some(())
        },
    )
    .await;
    let dead = deployment.dead_letters_from(&orders, Duration::from_secs(30));
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert_eq!(dead[0].reason, DlqReason::Oversize, "{}", dead[0].error);
    assert_eq!(dead[0].key.as_deref(), Some(&b"k-big"[..]));
    assert!(dead[0].value.as_ref().is_some_and(|v| v.len() > 900_000));
    assert_eq!(
        greetings(&deployment).len(),
        1,
        "only the record after it ran"
    );
}

/// The trigger worker's take-over fenced while it fetches the committed offsets (failpoint
/// `trigger-fetch-committed-fenced`: librdkafka's fatal state, as a static member's own rejoin
/// after a long broker outage leaves it): the worker rebuilds its member and takes over again
/// instead of stopping the process, and the record is read and run once.
#[tokio::test(flavor = "multi_thread")]
async fn a_trigger_take_over_fenced_while_it_fetches_rebuilds_the_member() {
    let deployment = Deployment::new("trigger_fenced");
    let (orders, triggers) = greet_orders(&deployment);
    let mut worker = deployment.start_worker_with_env(
        "w1",
        &["--triggers", &triggers],
        &[(
            "WEIR_FAILPOINTS",
            "trigger-fetch-committed-fenced=fail-once(0)",
        )],
    );
    let producer = deployment.producer();
    let order = json!({"order": "o-fenced", "name": "fenced"}).to_string();
    deployment
        .produce_raw(&producer, &orders, "k-fenced", order.as_bytes())
        .await;
    weir_e2e::wait_for("the order's greeting", TIMEOUT, || async {
        greetings(&deployment)
            .into_values()
            .any(|text| text.contains("fenced"))
            .then_some(())
    })
    .await;
    worker.wait_for_log("failpoint trigger-fetch-committed-fenced reached", TIMEOUT);
    let log = std::fs::read_to_string(&worker.log).expect("the worker's log");
    let trigger_group = format!("{}.weir.trigger", deployment.namespace);
    assert!(
        log.lines()
            .any(|l| l.contains("take-over cut short") && l.contains(&trigger_group))
            && log
                .lines()
                .any(|l| l.contains("Kafka clients rebuilt") && l.contains(&trigger_group)),
        "the trigger worker's take-over was cut short and its member rebuilt; see {}",
        worker.log.display()
    );
    assert_eq!(greetings(&deployment).len(), 1, "one execution");
    assert!(
        worker.child.try_wait().expect("try_wait").is_none(),
        "the worker exited; see {}",
        worker.log.display()
    );
}
