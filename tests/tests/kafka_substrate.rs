//! The Kafka features Weir's design rests on, proven against the real broker of the local stack:
//! transactions that commit consumer offsets (EOS v2), read_committed isolation from aborted
//! transactions, Java-compatible murmur2 partitioning, and consumer-group rebalancing.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use rdkafka::{Offset, TopicPartitionList};
use weir::kafka::partitioner::partition_for_key;
use weir_e2e::{create_topics, kafka_config, unique_name, wait_until};

const TIMEOUT: Duration = Duration::from_secs(60);

fn produce_plain(topic: &str, records: &[(String, String)]) {
    let producer: BaseProducer = kafka_config().producer().create().expect("producer");
    for (key, value) in records {
        producer
            .send(BaseRecord::to(topic).key(key).payload(value))
            .expect("enqueue");
    }
    producer.flush(TIMEOUT).expect("flush");
}

/// Reads `topic` from the beginning until `done` says the values seen so far are complete.
fn read_all(
    topic: &str,
    isolation: &str,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let mut config = kafka_config().consumer(&unique_name("reader"));
    config.set("isolation.level", isolation);
    let consumer: BaseConsumer = config.create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut values = Vec::new();
    wait_until(what, TIMEOUT, || {
        while let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("consume");
            let payload = message.payload().expect("payload");
            values.push(String::from_utf8(payload.to_vec()).expect("utf-8"));
        }
        done(&values).then_some(())
    });
    values
}

fn committed_offset(group: &str, topic: &str) -> Offset {
    let consumer: BaseConsumer = kafka_config().consumer(group).create().expect("consumer");
    let mut partitions = TopicPartitionList::new();
    partitions.add_partition(topic, 0);
    let committed = consumer
        .committed_offsets(partitions, TIMEOUT)
        .expect("committed offsets");
    let offset = committed.elements()[0].offset();
    drop(committed);
    offset
}

#[test]
fn transactions_commit_outputs_with_input_offsets_and_hide_aborted_records() {
    let input = unique_name("eos_in");
    let output = unique_name("eos_out");
    let group = unique_name("eos_group");
    create_topics(&[(&input, 1), (&output, 1)]);
    let inputs: Vec<(String, String)> = (0..10)
        .map(|i| (format!("k{i}"), format!("in-{i}")))
        .collect();
    produce_plain(&input, &inputs);

    let consumer: BaseConsumer = kafka_config().consumer(&group).create().expect("consumer");
    consumer.subscribe(&[&input]).expect("subscribe");
    // A ThreadedProducer serves delivery reports in its own thread, which abort_transaction
    // needs in order to drain the aborted records.
    let producer: ThreadedProducer<DefaultProducerContext> = kafka_config()
        .transactional_producer(&unique_name("eos_txn"))
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init transactions");

    // Consume the ten inputs (the group join happens inside poll).
    let mut consumed = Vec::new();
    wait_until("ten input records", TIMEOUT, || {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("consume");
            consumed.push((
                String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
                message.offset(),
            ));
        }
        (consumed.len() == 10).then_some(())
    });
    let next_offset = consumed.last().map(|(_, o)| o + 1).expect("ten records");

    let offsets = |offset: i64| {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&input, 0, Offset::Offset(offset))
            .expect("offset");
        list
    };
    // Transaction 1: outputs and input offsets commit together.
    producer.begin_transaction().expect("begin");
    for (value, _) in &consumed {
        producer
            .send(
                BaseRecord::to(&output)
                    .key("k")
                    .payload(&format!("out-{value}")),
            )
            .expect("enqueue");
    }
    let metadata = consumer.group_metadata().expect("group metadata");
    producer
        .send_offsets_to_transaction(&offsets(next_offset), &metadata, TIMEOUT)
        .expect("send offsets");
    producer.commit_transaction(TIMEOUT).expect("commit");

    // Transaction 2 is aborted: neither its records nor its offsets may become visible.
    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        producer
            .send(
                BaseRecord::to(&output)
                    .key("k")
                    .payload(&format!("aborted-{i}")),
            )
            .expect("enqueue");
    }
    let metadata = consumer.group_metadata().expect("group metadata");
    producer
        .send_offsets_to_transaction(&offsets(next_offset + 100), &metadata, TIMEOUT)
        .expect("send offsets");
    // Written before the abort: an abort purges what librdkafka has not sent yet, and the
    // check below that the aborted records are in the log (and only hidden) would then
    // depend on timing.
    producer.flush(TIMEOUT).expect("flush the aborted records");
    producer.abort_transaction(TIMEOUT).expect("abort");

    // Transaction 3 commits after the aborted one, so a reader must skip over aborted data.
    producer.begin_transaction().expect("begin");
    producer
        .send(BaseRecord::to(&output).key("k").payload("after-abort"))
        .expect("enqueue");
    producer.commit_transaction(TIMEOUT).expect("commit");
    drop(consumer);

    let committed = read_all(&output, "read_committed", "committed outputs", |v| {
        v.iter().any(|s| s == "after-abort")
    });
    assert_eq!(committed.len(), 11, "{committed:?}");
    assert!(
        committed.iter().all(|v| !v.starts_with("aborted")),
        "{committed:?}"
    );
    assert_eq!(committed[0], "out-in-0");
    assert_eq!(committed[9], "out-in-9");

    // The aborted records were really written: a read_uncommitted reader sees them.
    let uncommitted = read_all(&output, "read_uncommitted", "all outputs", |v| {
        v.iter().any(|s| s == "after-abort")
    });
    assert_eq!(
        uncommitted
            .iter()
            .filter(|v| v.starts_with("aborted"))
            .count(),
        5,
        "{uncommitted:?}"
    );

    assert_eq!(
        committed_offset(&group, &input),
        Offset::Offset(next_offset)
    );
}

/// Partitions computed by the Java client's own `Utils.murmur2` (Kafka's jars from the stack).
fn java_partitions(keys: &[String], partitions: i32) -> Vec<i32> {
    let classpath = format!("{}/kafka-lib/*", weir_e2e::weir_cache().display());
    let mut child = weir_e2e::java_program(&classpath, "JavaPartitioner.java")
        .arg(partitions.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the Java partitioner (Java 17 and the stack's Kafka jars)");
    let mut stdin = child.stdin.take().expect("stdin");
    for key in keys {
        writeln!(stdin, "{key}").expect("write key");
    }
    drop(stdin);
    let output = child.wait_with_output().expect("java output");
    assert!(output.status.success(), "Java partitioner failed");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| l.parse().expect("a partition number"))
        .collect()
}

#[test]
fn murmur2_partitioning_agrees_with_the_java_client_and_librdkafka() {
    let topic = unique_name("murmur");
    let partitions = 6;
    create_topics(&[(&topic, partitions)]);
    let mut keys: Vec<String> = (0..300)
        .map(|i| format!("E_01JDZQ3V8T4K2M9X7B5N6P{i:04}.g:{}_{}", i % 7, i % 3))
        .collect();
    keys.extend(["a", "ab", "abc", "abcd", "€uro-ключ-鍵"].map(str::to_owned));

    // What librdkafka does with Weir's producer settings, from the delivery reports.
    let producer: rdkafka::producer::FutureProducer =
        kafka_config().producer().create().expect("producer");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let librdkafka: Vec<i32> = runtime.block_on(async {
        let mut partitions = Vec::new();
        for key in &keys {
            let record = rdkafka::producer::FutureRecord::to(&topic)
                .key(key)
                .payload("x");
            let delivery = producer.send(record, TIMEOUT).await.expect("delivered");
            partitions.push(delivery.partition);
        }
        partitions
    });
    let ours: Vec<i32> = keys
        .iter()
        .map(|k| partition_for_key(k.as_bytes(), partitions))
        .collect();
    let java = java_partitions(&keys, partitions);

    assert_eq!(ours, java, "Weir's murmur2 vs the Java client");
    assert_eq!(
        librdkafka, java,
        "librdkafka murmur2_random vs the Java client"
    );
    let used: BTreeSet<i32> = ours.iter().copied().collect();
    assert_eq!(
        used.len(),
        partitions as usize,
        "keys spread over every partition"
    );
}

fn assigned(consumer: &BaseConsumer) -> BTreeSet<i32> {
    let list = consumer.assignment().expect("assignment");
    list.elements().iter().map(|e| e.partition()).collect()
}

#[test]
fn a_consumer_group_rebalances_partitions_between_members() {
    let topic = unique_name("rebalance");
    let group = unique_name("rebalance_group");
    create_topics(&[(&topic, 4)]);
    let all: BTreeSet<i32> = (0..4).collect();
    let member = || -> BaseConsumer {
        let mut config = kafka_config().consumer(&group);
        config.set("session.timeout.ms", "6000");
        let consumer: BaseConsumer = config.create().expect("consumer");
        consumer.subscribe(&[&topic]).expect("subscribe");
        consumer
    };

    let first = member();
    wait_until("the only member to own all partitions", TIMEOUT, || {
        first.poll(Duration::from_millis(100));
        (assigned(&first) == all).then_some(())
    });
    // The group's generation (what orders the store writes of partition owners) is readable
    // from librdkafka, and grows with every rebalance, whichever member causes it.
    use weir::kafka::group::group_generation;
    let joined = group_generation(&first).expect("the generation of the first assignment");

    let second = member();
    let split: HashMap<&str, BTreeSet<i32>> =
        wait_until("both members to share the partitions", TIMEOUT, || {
            first.poll(Duration::from_millis(50));
            second.poll(Duration::from_millis(50));
            let (a, b) = (assigned(&first), assigned(&second));
            let disjoint = a.is_disjoint(&b);
            let union: BTreeSet<i32> = a.union(&b).copied().collect();
            (disjoint && union == all && !a.is_empty() && !b.is_empty())
                .then(|| HashMap::from([("first", a), ("second", b)]))
        });
    assert_eq!(split["first"].len() + split["second"].len(), 4);
    let shared = group_generation(&first).expect("generation");
    assert!(shared > joined, "{shared} after {joined}");
    assert_eq!(
        group_generation(&second),
        Some(shared),
        "one generation for the group"
    );

    // A member that leaves hands its partitions back.
    second.unsubscribe();
    drop(second);
    wait_until(
        "the remaining member to own all partitions again",
        TIMEOUT,
        || {
            first.poll(Duration::from_millis(100));
            (assigned(&first) == all).then_some(())
        },
    );
    let alone = group_generation(&first).expect("generation");
    assert!(alone > shared, "{alone} after {shared}");
}

/// Catch-up reads a history partition to its end once no transaction is open on it. A worker
/// killed inside a commit leaves its transaction open (until the transaction timeout), which
/// holds the last stable offset back; a later owner's committed batch lies beyond it. A read
/// that stopped at the LSO would miss that batch, and the checkpoint would move past it. The
/// reader must wait, and report an open transaction that outlives its patience by name.
#[test]
fn history_catch_up_waits_for_a_hanging_transaction_and_reads_what_lies_beyond_it() {
    use weir::codec::records::HistoryEntry;
    use weir::codec::{Codec, HistoryRecord};
    use weir::kafka::history_reader::{self, HistoryReadError};
    use weir::model::{ExecutionId, ExecutionResult};

    let topic = unique_name("history_hang");
    create_topics(&[(&topic, 1)]);
    let codec = Codec::new(None);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let record = |seq: u64| {
        let record = HistoryRecord {
            execution_id: id.clone(),
            seq,
            entry: HistoryEntry::Finished {
                result: ExecutionResult::Ok(serde_json::json!(seq)),
                finished_at: chrono::Utc::now(),
            },
            at: Some(chrono::Utc::now()),
        };
        codec.encode(&topic, &record).expect("encode")
    };
    let producer = |name: &str| -> ThreadedProducer<DefaultProducerContext> {
        let producer: ThreadedProducer<DefaultProducerContext> = kafka_config()
            .transactional_producer(&unique_name(name))
            .create()
            .expect("transactional producer");
        producer.init_transactions(TIMEOUT).expect("init");
        producer
    };
    let send = |producer: &ThreadedProducer<DefaultProducerContext>, seq: u64| {
        producer
            .send(
                BaseRecord::to(&topic)
                    .key(&id.to_string())
                    .payload(&record(seq)),
            )
            .expect("enqueue");
        producer.flush(TIMEOUT).expect("flush");
    };
    // Committed before the hang: seq 0. The dead owner's open transaction: seq 1. A later
    // owner's committed batch, beyond it: seq 2.
    let earlier = producer("hist_earlier");
    earlier.begin_transaction().expect("begin");
    send(&earlier, 0);
    earlier.commit_transaction(TIMEOUT).expect("commit");
    let dead = producer("hist_dead");
    dead.begin_transaction().expect("begin");
    send(&dead, 1);
    let later = producer("hist_later");
    later.begin_transaction().expect("begin");
    send(&later, 2);
    later.commit_transaction(TIMEOUT).expect("commit");

    let read = |settle: Duration| {
        history_reader::read(
            &kafka_config(),
            &codec,
            &unique_name("catchup"),
            &topic,
            0,
            0,
            settle,
        )
    };
    // While the transaction is open: a named error, not a short read.
    match read(Duration::from_secs(2)) {
        Err(HistoryReadError::OpenTransaction { lso, high, .. }) => {
            assert_eq!(lso, 2, "the LSO is the open transaction's first offset");
            assert!(
                high > 3,
                "the high watermark is past the later batch: {high}"
            );
        }
        other => panic!("expected an open-transaction error, got {other:?}"),
    }
    // Once it is resolved (here: aborted, as the broker does at the timeout), everything
    // committed is read, the later owner's batch included.
    let reader = std::thread::scope(|scope| {
        // The reader may begin before or after the abort: either way it must read both.
        let reader = scope.spawn(|| read(Duration::from_secs(60)));
        dead.abort_transaction(TIMEOUT).expect("abort");
        reader.join().expect("reader thread")
    });
    let seqs: Vec<u64> = reader
        .expect("read after the abort")
        .iter()
        .map(|e| e.record.seq)
        .collect();
    assert_eq!(
        seqs,
        vec![0, 2],
        "committed records on both sides of the aborted one"
    );
}
