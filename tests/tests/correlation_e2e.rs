//! Issue 13 item 2 on the real stack: events sent to a correlation key reach the execution
//! that registered it, with the example `approval-event.await-payment` (it registers
//! `payment:<order>` and races the event `paid` against a timeout).
//!
//! - an event sent to the key before any execution registered it waits in the key's state
//!   and reaches the execution that registers it later;
//! - the key's partition and the execution's differ; the event comes from a Java program that
//!   knows Weir only by `schemas/avro/event.avsc`; the same event id sent again is taken once;
//! - a worker killed (`kill -9`) after a registration: its successor restores the key from
//!   `weir.state` and forwards the next event;
//! - two executions registering one key: the first takes the key's events until it
//!   finishes, then the second does;
//! - `weir correlation list` shows what the keys' owners committed: an event buffered before
//!   any registration, a holder with another execution queued, a key nobody holds any more
//!   that remembers the ids it forwarded;
//! - none of these events is dead-lettered; a key that breaks the rules is refused by the CLI.
//!
//! The rules are the table tests of `core/src/correlation.rs` and `core/tests/processor.rs`
//! (module `correlation`); crashes and rebalances are the simulation's (`dst_correlation`).

use std::process::Output;
use std::time::Duration;

use serde_json::json;
use weir::codec::{DlqEnvelope, HistoryEntry, HistoryRecord};
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest};
use weir::partitioner::partition_for_key;
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{delivered_events, wait_for};

const AWAIT_PAYMENT: &str = "weir-examples:workflows/approval-event.await-payment";
const TIMEOUT: Duration = Duration::from_secs(120);
const READ: &str = "correlation-read-token-0123456789";
const ADMIN: &str = "correlation-admin-token-0123456789";
/// Partitions of the co-partitioned topics (`topology/topics.toml`).
const PARTITIONS: i32 = 6;

fn send_with_cli(deployment: &Deployment, target: &str, payload: &str, event_id: &str) -> Output {
    deployment
        .command()
        .args([
            "send-event",
            target,
            "paid",
            payload,
            "--event-id",
            event_id,
        ])
        .output()
        .expect("run weir send-event")
}

fn sent(output: Output) {
    assert!(
        output.status.success(),
        "weir send-event failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The stored history of `id` once it has registered its key and waits for the event.
async fn waiting(deployment: &Deployment, id: &ExecutionId) -> Vec<HistoryRecord> {
    let store = deployment.store().await;
    wait_for("the execution's registration and wait", TIMEOUT, || async {
        let history = deployment.store_history(&store, id).await;
        let correlated = history.iter().any(|r| {
            matches!(
                &r.entry,
                HistoryEntry::Event {
                    event: HistoryEvent::Correlate { .. },
                    ..
                }
            )
        });
        let waits = history.iter().any(|r| {
            matches!(
                &r.entry,
                HistoryEntry::Event {
                    event: HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::EventRequest { .. },
                        ..
                    },
                    ..
                }
            )
        });
        (correlated && waits).then_some(history)
    })
    .await
}

/// An execution id and an order whose key `payment:<order>` sits on another partition.
fn apart(tag: &str) -> (ExecutionId, String) {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let home = partition_for_key(id.to_string().as_bytes(), PARTITIONS);
    let order = (0..)
        .map(|n| format!("{tag}-{n}"))
        .find(|order| partition_for_key(format!("payment:{order}").as_bytes(), PARTITIONS) != home)
        .expect("some order lands elsewhere");
    (id, order)
}

#[tokio::test(flavor = "multi_thread")]
async fn events_sent_to_a_key_reach_the_execution_holding_it_once() {
    let deployment = Deployment::new("correlation");
    let worker = deployment.start_worker("w1", &[]);
    let producer = deployment.producer();

    // Before the registration: the event waits in the key.
    let (early, early_order) = apart("early");
    sent(send_with_cli(
        &deployment,
        &format!("payment:{early_order}"),
        "1",
        "early-1",
    ));
    let entry = deployment
        .correlation_listed_until(
            &format!("payment:{early_order}"),
            "the event buffered in the key",
            |e| e["buffered"].as_array().is_some_and(|b| !b.is_empty()),
        )
        .await;
    assert_eq!(entry["holder"], serde_json::Value::Null, "{entry}");
    assert_eq!(entry["buffered"][0]["event_id"], "early-1", "{entry}");
    assert_eq!(entry["buffered"][0]["name"], "paid", "{entry}");
    deployment
        .submit_as(&producer, &early, AWAIT_PAYMENT, json!([early_order, 600]))
        .await;

    // After it, across partitions, from a Java client; the same event id again.
    let (java, java_order) = apart("java");
    let java_key = format!("payment:{java_order}");
    deployment
        .submit_as(&producer, &java, AWAIT_PAYMENT, json!([java_order, 600]))
        .await;
    waiting(&deployment, &java).await;
    deployment.send_event_with_java(&java_key, "paid", "2", "java-1");
    sent(send_with_cli(&deployment, &java_key, "2", "java-1"));

    let results = deployment.results(&[early.clone(), java.clone()], TIMEOUT);
    assert_eq!(results[&early], ExecutionResult::Ok(json!("1")));
    assert_eq!(results[&java], ExecutionResult::Ok(json!("2")));
    let store = deployment.store().await;
    assert_eq!(
        delivered_events(&deployment.store_history(&store, &early).await),
        ["early-1"]
    );
    assert_eq!(
        delivered_events(&deployment.store_history(&store, &java).await),
        ["java-1"],
        "the same event id twice is taken once"
    );

    // A worker killed after a registration: its successor restores the key.
    let (restored, restored_order) = apart("restored");
    deployment
        .submit_as(
            &producer,
            &restored,
            AWAIT_PAYMENT,
            json!([restored_order, 600]),
        )
        .await;
    waiting(&deployment, &restored).await;
    worker.signal("KILL");
    drop(worker);
    let _worker = deployment.start_worker("w2", &[]);
    sent(send_with_cli(
        &deployment,
        &format!("payment:{restored_order}"),
        "3",
        "restored-1",
    ));

    // Two executions register one key: the first takes its events, then the second.
    let (first, order) = apart("queue");
    let queue_key = format!("payment:{order}");
    deployment
        .submit_as(&producer, &first, AWAIT_PAYMENT, json!([order, 600]))
        .await;
    waiting(&deployment, &first).await;
    let second = deployment
        .submit(&producer, AWAIT_PAYMENT, json!([order, 600]))
        .await;
    waiting(&deployment, &second).await;
    let entry = deployment
        .correlation_listed_until(&queue_key, "the second execution queued", |e| {
            e["queued"].as_array().is_some_and(|q| !q.is_empty())
        })
        .await;
    assert_eq!(entry["holder"], first.to_string(), "{entry}");
    assert_eq!(entry["queued"], json!([second.to_string()]), "{entry}");
    sent(send_with_cli(&deployment, &queue_key, "4", "queue-1"));
    let results = deployment.results(&[restored.clone(), first.clone()], TIMEOUT);
    assert_eq!(results[&restored], ExecutionResult::Ok(json!("3")));
    assert_eq!(results[&first], ExecutionResult::Ok(json!("4")));
    sent(send_with_cli(&deployment, &queue_key, "5", "queue-2"));
    let results = deployment.results(std::slice::from_ref(&second), TIMEOUT);
    assert_eq!(results[&second], ExecutionResult::Ok(json!("5")));
    assert_eq!(
        delivered_events(&deployment.store_history(&store, &second).await),
        ["queue-2"],
        "the second holder got only what came after the first finished"
    );
    // Nobody holds the key now; it remembers the two ids it forwarded.
    let entry = deployment
        .correlation_listed_until(&queue_key, "the key released", |e| e["holder"].is_null())
        .await;
    assert_eq!(entry["queued"], json!([]), "{entry}");
    assert_eq!(entry["remembered"], 2, "{entry}");

    // The API lists the same (read token); a key that breaks the rules is a 400.
    let server = deployment.serve_api(READ, ADMIN);
    let client = weir_e2e::http_client();
    let get = |query: &str| {
        client
            .get(format!("{}/v1/correlations{query}", server.base))
            .bearer_auth(READ)
            .send()
    };
    let listed = get(&format!("?key={queue_key}")).await.expect("get");
    assert_eq!(listed.status().as_u16(), 200);
    let listed: serde_json::Value = listed.json().await.expect("JSON");
    assert_eq!(listed["correlations"], json!([entry]));
    let all: serde_json::Value = get("").await.expect("get").json().await.expect("JSON");
    let keys: Vec<&str> = all["correlations"]
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert!(keys.contains(&queue_key.as_str()), "{all}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted: {keys:?}");
    let bad = get("?key=schedule:nightly").await.expect("get");
    assert_eq!(bad.status().as_u16(), 400);

    // Nothing of it was dead-lettered.
    let dlq = deployment.read_to_end::<DlqEnvelope>(&deployment.topic(TopicRole::Dlq), TIMEOUT);
    assert!(
        dlq.iter()
            .all(|(_, e)| !e.key.as_deref().is_some_and(|k| k.starts_with(b"payment:"))),
        "{dlq:#?}"
    );

    // The CLI refuses a key that breaks the rules before anything is sent.
    let bad = send_with_cli(&deployment, "schedule:nightly", "1", "x");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("correlation key"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Issue 33 F2 on the real stack: a key's buffer holds at most 512 KiB of payloads, so its
/// state (one `weir.state` record) always fits the producer's limit. A 520 kB event is kept;
/// a 500 kB one after it would make the state over 1 000 000 bytes (before the bound, 1 MiB
/// of payloads, it was taken, its batch aborted and the partition retried it forever): it is
/// dead-lettered `refused` instead, its copy produced whole, and a small event after it is
/// kept: the partition goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_buffer_at_its_byte_bound_refuses_the_next_event_and_its_partition_goes_on() {
    use weir::codec::EventRecord;
    use weir::codec::records::ReceivedEvent;
    use weir::correlation::KeyedEvent;

    let deployment = Deployment::new("state_size");
    let _worker = deployment.start_worker("w1", &[]);
    let key = "size:order-1";
    let topic = deployment.topic(TopicRole::Events);
    let producer = deployment.producer();
    let send = async |event_id: &str, bytes: usize| {
        let record = EventRecord::Keyed(KeyedEvent {
            event: ReceivedEvent {
                event_id: event_id.to_owned(),
                name: "paid".to_owned(),
                payload: json!("x".repeat(bytes)),
            },
            key: key.to_owned(),
            sent_at: chrono::Utc::now(),
            returned_by: None,
        });
        let value = deployment.codec.encode(&topic, &record).expect("encodes");
        deployment.produce_raw(&producer, &topic, key, &value).await;
    };
    send("big-1", 520_000).await;
    send("big-2", 500_000).await;
    send("small-3", 10).await;
    let kept = deployment
        .correlation_listed_until(key, "the first and the last event kept", |entry| {
            entry["buffered"].as_array().is_some_and(|b| b.len() == 2)
        })
        .await;
    let ids: Vec<&str> = kept["buffered"]
        .as_array()
        .expect("buffered")
        .iter()
        .filter_map(|e| e["event_id"].as_str())
        .collect();
    assert_eq!(ids, ["big-1", "small-3"], "{kept}");
    let refused = deployment.dead_letters_from(&topic, TIMEOUT);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0].reason, weir::codec::records::DlqReason::Refused);
    assert!(
        refused[0].value.as_ref().is_some_and(|v| v.len() > 500_000),
        "the copy is whole"
    );
    assert!(refused[0].error.contains("bytes"), "{}", refused[0].error);
}

/// The records of `topic` now, raw: (partition, offset, key, value; `None`: a tombstone).
fn raw_records(topic: &str) -> Vec<(i32, i64, String, Option<Vec<u8>>)> {
    use rdkafka::Message;
    use rdkafka::consumer::Consumer;
    let consumer = weir_e2e::deployment::reader(topic, true);
    let partitions = consumer.assignment().map(|a| a.count()).unwrap_or_default();
    let mut at_end = std::collections::HashSet::new();
    let mut records = Vec::new();
    weir_e2e::wait_until(&format!("the end of {topic}"), TIMEOUT, || {
        while let Some(polled) = consumer.poll(Duration::from_millis(100)) {
            match polled {
                Ok(m) => {
                    at_end.remove(&m.partition());
                    records.push((
                        m.partition(),
                        m.offset(),
                        String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                        m.payload().map(<[u8]>::to_vec),
                    ));
                }
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    at_end.insert(p);
                }
                Err(e) => eprintln!("consume {topic}: {e} (reading on)"),
            }
        }
        (at_end.len() == partitions).then_some(())
    });
    records
}

/// A key's state on `weir.state` that does not decode at all (corrupt bytes under the key's
/// kind) is copied to the DLQ once by the owner that takes its partition over, and its key is
/// tombstoned after it; a state in a writer schema this worker does not know (a newer Weir's
/// fingerprint) is neither copied nor forgotten: it stays for the worker that can read it.
/// Before, both were logged and left out, the corrupt one for every later owner to skip again.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_key_state_is_dead_lettered_once_and_forgotten_and_a_newer_one_is_kept() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    use weir::wire::{KIND_HEADER, RecordKind};

    let deployment = Deployment::new("corruptstate");
    let state = deployment.topic(TopicRole::State);
    let producer = deployment.producer();
    let kind = || {
        OwnedHeaders::new().insert(Header {
            key: KIND_HEADER,
            value: Some(RecordKind::Correlation.header_value()),
        })
    };
    let good = weir::correlation::CorrelationState {
        key: "newer-key".into(),
        holders: vec![ExecutionId::top_level(ulid::Ulid::new())],
        buffered: Vec::new(),
        waits_until: None,
        cancel: None,
    };
    let encoded = deployment
        .codec
        .encode(&state, &weir::codec::StoredCorrelation::of(good))
        .expect("encodes");
    assert_eq!(&encoded[..2], b"\xC3\x01", "single-object encoding");
    // Corrupt: the header of a key's state (a schema this worker knows), then bytes that do
    // not read as it.
    let mut garbage = encoded[..10].to_vec();
    garbage.extend_from_slice(&[0xFF; 3]);
    // A newer writer schema: a fingerprint this worker does not know.
    let mut newer = encoded.clone();
    newer[2..10].copy_from_slice(&[0xAB; 8]);
    for (key, value) in [("corrupt-key", &garbage), ("newer-key", &newer)] {
        producer
            .send(
                FutureRecord::to(&state)
                    .key(key)
                    .payload(value)
                    .headers(kind()),
                Duration::from_secs(30),
            )
            .await
            .expect("produce");
    }
    let partition = partition_for_key(b"corrupt-key", PARTITIONS);
    let _worker = deployment.start_worker("w", &[]);
    let dead = wait_for("the corrupt state's DLQ copy", TIMEOUT, || async {
        let dead = deployment.dead_letters_from(&state, Duration::from_secs(30));
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    let copy = &dead[0];
    assert_eq!(
        copy.reason,
        weir::codec::DlqReason::Undecodable,
        "{}",
        copy.error
    );
    assert_eq!(copy.key.as_deref(), Some(&b"corrupt-key"[..]));
    assert_eq!(copy.original_partition, partition);
    assert_eq!(copy.value.as_deref(), Some(garbage.as_slice()));
    let records = raw_records(&state);
    let of = |key: &str| -> Vec<Option<Vec<u8>>> {
        records
            .iter()
            .filter(|(_, _, k, _)| k == key)
            .map(|(_, _, _, v)| v.clone())
            .collect()
    };
    assert_eq!(
        of("corrupt-key"),
        vec![Some(garbage.clone()), None],
        "the corrupt state, then its tombstone"
    );
    assert_eq!(of("newer-key"), vec![Some(newer.clone())], "left in place");
    // A second owner of the partition finds the tombstone: no second copy.
    drop(_worker);
    let _second = deployment.start_worker("w2", &[]);
    let key = "after-restart";
    sent(send_with_cli(&deployment, key, "{}", "ev-after"));
    wait_for("the second owner's write of a key", TIMEOUT, || async {
        raw_records(&state)
            .iter()
            .any(|(_, _, k, _)| k == key)
            .then_some(())
    })
    .await;
    let dead = deployment.dead_letters_from(&state, Duration::from_secs(30));
    assert_eq!(dead.len(), 1, "copied once: {dead:?}");
}
