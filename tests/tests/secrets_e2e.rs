//! Issue 15 item 4 on the real stack: an activity's secret, given to a worker with `--secret`,
//! reaches the activity (it authenticates to a local server with it) and appears in nothing
//! Weir writes. The `leaky` activity quotes its token in its result, its error, its stderr and
//! the URI of a request Weir denies; the test then reads back every record of every topic of
//! the deployment (values, keys and headers, aborted transactions included), every row of every
//! table of its keyspace, the worker's log and its metrics, and looks for the token's bytes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;
use weir::model::ExecutionResult;
use weir_e2e::deployment::Deployment;
use weir_e2e::{kafka_config, unique_name};

/// A local HTTP server that answers 200 to anything and keeps each request's head.
fn serve() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            seen.lock()
                .expect("lock")
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (port, heads)
}

/// Every record of `topic` (read_uncommitted: aborted batches too) as its key, value and
/// headers' bytes.
fn every_record(topic: &str) -> Vec<Vec<u8>> {
    let mut config = kafka_config().client();
    config
        .set("group.id", unique_name("grep"))
        .set("isolation.level", "read_uncommitted")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "10");
    let consumer: BaseConsumer = config.create().expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len();
    let mut list = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        list.add_partition_offset(topic, p.id(), Offset::Beginning)
            .expect("offset");
    }
    consumer.assign(&list).expect("assign");
    let mut ended = std::collections::HashSet::new();
    let mut records = Vec::new();
    weir_e2e::wait_until(
        &format!("the end of {topic}"),
        Duration::from_secs(60),
        || {
            while let Some(polled) = consumer.poll(Duration::from_millis(100)) {
                match polled {
                    Ok(m) => {
                        ended.remove(&m.partition());
                        let mut bytes = m.key().unwrap_or_default().to_vec();
                        bytes.extend_from_slice(m.payload().unwrap_or_default());
                        if let Some(headers) = m.headers() {
                            for h in headers.iter() {
                                bytes.extend_from_slice(h.key.as_bytes());
                                bytes.extend_from_slice(h.value.unwrap_or_default());
                            }
                        }
                        records.push(bytes);
                    }
                    Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                        ended.insert(p);
                    }
                    Err(e) => panic!("consume {topic}: {e}"),
                }
            }
            (ended.len() == partitions).then_some(())
        },
    );
    records
}

/// The bytes of a CQL value: text and blobs as they are, collections flattened, anything
/// else in its debug form.
fn cql_bytes(value: &scylla::value::CqlValue, out: &mut Vec<u8>) {
    use scylla::value::CqlValue;
    match value {
        CqlValue::Text(s) | CqlValue::Ascii(s) => out.extend_from_slice(s.as_bytes()),
        CqlValue::Blob(b) => out.extend_from_slice(b),
        CqlValue::List(items) | CqlValue::Set(items) | CqlValue::Vector(items) => {
            items.iter().for_each(|v| cql_bytes(v, out))
        }
        CqlValue::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            cql_bytes(k, out);
            cql_bytes(v, out);
        }),
        CqlValue::Tuple(items) => items.iter().flatten().for_each(|v| cql_bytes(v, out)),
        CqlValue::UserDefinedType { fields, .. } => fields
            .iter()
            .filter_map(|(_, v)| v.as_ref())
            .for_each(|v| cql_bytes(v, out)),
        other => out.extend_from_slice(format!("{other:?}").as_bytes()),
    }
}

/// Every row of every table of `keyspace`, one byte string a row.
async fn every_row(keyspace: &str) -> Vec<(String, Vec<u8>)> {
    let session = weir::store::connect(&weir_e2e::cql_config(keyspace))
        .await
        .expect("connect");
    let tables: Vec<(String,)> = session
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await
        .expect("tables")
        .into_rows_result()
        .expect("rows")
        .rows::<(String,)>()
        .expect("typed")
        .collect::<Result<_, _>>()
        .expect("table names");
    assert!(
        tables.len() >= 3,
        "the keyspace has Weir's tables: {tables:?}"
    );
    let mut rows = Vec::new();
    for (table,) in tables {
        let result = session
            .query_unpaged(format!("SELECT * FROM {keyspace}.{table}"), ())
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows");
        for row in result.rows::<scylla::value::Row>().expect("rows") {
            let row = row.expect("row");
            let mut bytes = Vec::new();
            for value in row.columns.iter().flatten() {
                cql_bytes(value, &mut bytes);
            }
            rows.push((table.clone(), bytes));
        }
    }
    rows
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn scrape(port: u16) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nconnection: close\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_reaches_its_activity_and_nothing_weir_writes() {
    let deployment = Deployment::new("secrets");
    let token = format!("tok-{}", ulid::Ulid::new());
    let token_file = deployment.logs().join("api-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("token file");
    let components = deployment.components_with("secrets", |text| {
        text.replace(
            "path = \"leaky.wasm\"\n",
            "path = \"leaky.wasm\"\nsecrets = [\"API_TOKEN\"]\n",
        )
    });
    assert!(
        std::fs::read_to_string(&components)
            .expect("components")
            .contains("secrets = [\"API_TOKEN\"]"),
        "the edit found the leaky entry"
    );
    let secret = format!("API_TOKEN=file:{}", token_file.display());
    let worker = deployment.start_worker_with_env(
        "w",
        &["--secret", &secret],
        &[("WEIR_COMPONENTS", components.to_str().expect("utf-8"))],
    );
    let (port, heads) = serve();
    let closed = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let producer = deployment.producer();
    let call = "weir-examples:workflows/api-call.call";
    let ok = deployment
        .submit(
            &producer,
            call,
            json!([format!("http://127.0.0.1:{port}/api")]),
        )
        .await;
    let failing = deployment
        .submit(
            &producer,
            call,
            json!([format!("http://127.0.0.1:{closed}/")]),
        )
        .await;
    let results = deployment.results(&[ok.clone(), failing.clone()], Duration::from_secs(120));

    // The activity had its token: it authenticated with it, and said so (redacted).
    let heads = heads.lock().expect("lock").clone();
    assert!(
        heads.iter().any(|h| h
            .to_lowercase()
            .contains(&format!("authorization: bearer {}", token.to_lowercase()))),
        "the server saw the token: {heads:?}"
    );
    match &results[&ok] {
        ExecutionResult::Ok(value) => assert!(
            value
                .to_string()
                .contains("token [secret API_TOKEN] got status 200"),
            "{value}"
        ),
        other => panic!("{other:?}"),
    }
    match &results[&failing] {
        ExecutionResult::Err(value) => {
            assert!(value.to_string().contains("[secret API_TOKEN]"), "{value}")
        }
        other => panic!("{other:?}"),
    }
    // Every channel the guest used was taken: its stderr line and the denied request were
    // logged (redacted), and the denial counted.
    worker.wait_for_log("calling http://127.0.0.1", Duration::from_secs(30));
    assert!(worker.log_contains("with token [secret API_TOKEN]"));
    assert!(worker.log_contains("token=[secret API_TOKEN]"));
    let metrics = scrape(worker.metrics_port);
    assert!(metrics.contains("weir_egress_denied_total"), "{metrics}");

    // Nothing Weir wrote holds the token.
    let needle = token.as_bytes();
    let mut records = 0;
    for topic in &deployment.topology.topics {
        for record in every_record(&topic.name) {
            records += 1;
            assert!(
                !contains(&record, needle),
                "the token is on {}: {}",
                topic.name,
                String::from_utf8_lossy(&record)
            );
        }
    }
    assert!(records >= 6, "the run wrote records: {records}");
    let rows = every_row(&deployment.keyspace).await;
    assert!(!rows.is_empty());
    for (table, row) in &rows {
        assert!(
            !contains(row, needle),
            "the token is in {table}: {}",
            String::from_utf8_lossy(row)
        );
    }
    // The history in the store does hold the redacted answers (so the rows were read).
    assert!(
        rows.iter()
            .any(|(_, row)| contains(row, b"[secret API_TOKEN]")),
        "the store holds the redacted result"
    );
    let log = std::fs::read(&worker.log).expect("log");
    assert!(!contains(&log, needle), "the token is in the worker's log");
    // Nor any part of it (issue 33 F13): the long stderr line cut across the token logged it
    // in two halves, and the percent-encoded URI as `tok%2D<id>`.
    let id = token.strip_prefix("tok-").expect("token").as_bytes();
    assert!(
        !contains(&log, id),
        "a part of the token is in the worker's log"
    );
    assert!(worker.log_contains("[secret API_TOKEN] ends a long line"));
    assert!(worker.log_contains("enc=[secret API_TOKEN]"));
    assert!(!metrics.contains(&token), "the token is in the metrics");
}
