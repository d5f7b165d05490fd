//! Input records the engine must refuse, on the real stack (issue 11 items 3, 4, 9, 10, 15):
//! each is dead-lettered with its reason, the caller of a top-level submission hears an error
//! on `weir.results`, a parent given a malformed answer hears it as its child's
//! `invalid-response` error, and nothing else changes — the executions around them finish as
//! before.

use std::collections::BTreeMap;
use std::time::Duration;

use apache_avro::types::Value as Avro;
use rdkafka::producer::FutureRecord;
use serde_json::{Value, json};
use weir::codec::{AvroRecord, DlqEnvelope, DlqReason, ExecutionFinished, FieldError, Submission};
use weir::kafka::partitioner::partition_for_key;
use weir::model::{ExecutionErrorKind, ExecutionId, ExecutionResult, JoinSetId, Response};
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;

const HELLO: &str = "weir-examples:workflows/hello.greet";
const INVOICE: &str = "weir-examples:workflows/checkout.issue-invoice";
const TIMEOUT: Duration = Duration::from_secs(180);

/// A submission whose params field is any text, valid JSON or not: what a client with a bug
/// can send through the Avro schema alone.
struct RawSubmission {
    id: ExecutionId,
    ffqn: &'static str,
    params_text: &'static str,
}

impl AvroRecord for RawSubmission {
    const NAME: &'static str = "Submission";

    fn to_avro(&self) -> Result<Avro, FieldError> {
        Ok(Avro::Record(vec![
            ("execution_id".into(), Avro::String(self.id.to_string())),
            ("ffqn".into(), Avro::String(self.ffqn.into())),
            ("params".into(), Avro::String(self.params_text.into())),
            ("parent".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("scheduled_at".into(), Avro::Union(0, Box::new(Avro::Null))),
            (
                "correlation_id".into(),
                Avro::Union(0, Box::new(Avro::Null)),
            ),
            ("metadata".into(), Avro::Map(Default::default())),
            ("deadline".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("concurrency".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("tenant".into(), Avro::Union(0, Box::new(Avro::Null))),
        ]))
    }

    fn from_avro(_: Avro) -> Result<Self, FieldError> {
        unreachable!("only written")
    }
}

/// A child's answer whose `ok` value is any text, JSON or not: what an external service with
/// a bug can send through the Avro schema alone.
struct RawAnswer {
    child: ExecutionId,
    ok_text: &'static str,
}

impl AvroRecord for RawAnswer {
    const NAME: &'static str = "Response";

    fn to_avro(&self) -> Result<Avro, FieldError> {
        let outcome = Avro::Union(
            0,
            Box::new(Avro::Record(vec![(
                "value".into(),
                Avro::String(self.ok_text.into()),
            )])),
        );
        let finished = Avro::Record(vec![
            (
                "child_execution_id".into(),
                Avro::String(self.child.to_string()),
            ),
            (
                "result".into(),
                Avro::Record(vec![("outcome".into(), outcome)]),
            ),
            ("ran".into(), Avro::Union(0, Box::new(Avro::Null))),
        ]);
        Ok(Avro::Record(vec![(
            "response".into(),
            Avro::Union(0, Box::new(finished)),
        )]))
    }

    fn from_avro(_: Avro) -> Result<Self, FieldError> {
        unreachable!("only written")
    }
}

fn submission(id: &ExecutionId, ffqn: &str, params: Value) -> Submission {
    weir::codec::Submission::top_level(
        id,
        ffqn.parse().expect("ffqn"),
        params,
        Default::default(),
        None,
    )
}

fn error_kind(result: &ExecutionResult) -> Option<ExecutionErrorKind> {
    match result {
        ExecutionResult::ExecutionError(e) => Some(e.kind),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_inputs_are_dead_lettered_and_answered_and_change_nothing_else() {
    let deployment = Deployment::new("refused");
    // The tax service starts late (after the refused answers): its requests get a deadline
    // far beyond its start, which a loaded machine can stretch past the default 30 s (a CI
    // run on a machine at load 17 timed the invoice out before the JVM answered).
    let components = deployment.components_with("patient-tax", |text| {
        text.replace(
            "route = \"tax\"\nexternal = true\n",
            "route = \"tax\"\nexternal = true\nlimits = { timeout_ms = 300000 }\n",
        )
    });
    let components = components.to_str().expect("a UTF-8 path").to_owned();
    let _worker =
        deployment.start_worker_with_env("w", &[], &[("WEIR_COMPONENTS", components.as_str())]);
    let producer = deployment.producer();
    let submissions = deployment.topic(TopicRole::Submissions);
    let responses = deployment.topic(TopicRole::Responses);
    let partitions = deployment.topology.topic(TopicRole::Submissions).partitions;
    let encode = |record: &Submission| {
        deployment
            .codec
            .encode(&submissions, record)
            .expect("encode")
    };
    let send_to = |key: String, partition: Option<i32>, value: Vec<u8>| {
        let producer = producer.clone();
        let topic = submissions.clone();
        async move {
            let mut record = FutureRecord::to(&topic).key(&key).payload(&value);
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            producer
                .send(record, Duration::from_secs(30))
                .await
                .expect("produce");
        }
    };

    // Item 3: on the wrong partition; keyed by another id.
    let misrouted = ExecutionId::top_level(ulid::Ulid::new());
    let right = partition_for_key(misrouted.to_string().as_bytes(), partitions);
    send_to(
        misrouted.to_string(),
        Some((right + 1) % partitions),
        encode(&submission(&misrouted, HELLO, json!(["x"]))),
    )
    .await;
    let mis_keyed = ExecutionId::top_level(ulid::Ulid::new());
    send_to(
        "not-its-id".into(),
        None,
        encode(&submission(&mis_keyed, HELLO, json!(["y"]))),
    )
    .await;
    // Item 4: a child's id as a top-level id; a finished execution submitted again, the same
    // and with other params.
    let parent = ExecutionId::top_level(ulid::Ulid::new());
    let child_shaped = parent.child(&JoinSetId::generated(1).expect("join set"), 1);
    send_to(
        child_shaped.to_string(),
        None,
        encode(&submission(&child_shaped, HELLO, json!(["z"]))),
    )
    .await;
    let hello = deployment.submit(&producer, HELLO, json!(["ada"])).await;
    let first = deployment.results(std::slice::from_ref(&hello), TIMEOUT);
    send_to(
        hello.to_string(),
        None,
        encode(&submission(&hello, HELLO, json!(["ada"]))),
    )
    .await;
    send_to(
        hello.to_string(),
        None,
        encode(&submission(&hello, HELLO, json!(["grace"]))),
    )
    .await;
    // Item 9: params that are not JSON, and JSON that is not an array.
    let not_json = ExecutionId::top_level(ulid::Ulid::new());
    let raw = RawSubmission {
        id: not_json.clone(),
        ffqn: HELLO,
        params_text: "[\"unterminated",
    };
    let bytes = deployment.codec.encode(&submissions, &raw).expect("encode");
    send_to(not_json.to_string(), None, bytes).await;
    let not_array = ExecutionId::top_level(ulid::Ulid::new());
    let raw = RawSubmission {
        id: not_array.clone(),
        ffqn: HELLO,
        params_text: "{\"name\": \"ada\"}",
    };
    let bytes = deployment.codec.encode(&submissions, &raw).expect("encode");
    send_to(not_array.to_string(), None, bytes).await;
    // Item 9: a function name that does not parse.
    let bad_name = ExecutionId::top_level(ulid::Ulid::new());
    let raw = RawSubmission {
        id: bad_name.clone(),
        ffqn: "not a function name",
        params_text: "[]",
    };
    let bytes = deployment.codec.encode(&submissions, &raw).expect("encode");
    send_to(bad_name.to_string(), None, bytes).await;
    // Item 10: a response to a request the execution never made, while it waits for the
    // external tax service (not started yet).
    let invoice = deployment
        .submit(&producer, INVOICE, json!(["widget", 4, "DE"]))
        .await;
    let bogus = Response::ChildExecutionFinished {
        child_execution_id: invoice.child(&JoinSetId::generated(99).expect("join set"), 7),
        result: ExecutionResult::Ok(json!("from a buggy service")),
        ran: None,
    };
    let bytes = deployment.codec.encode(&responses, &bogus).expect("encode");
    deployment
        .produce_raw(&producer, &responses, &invoice.to_string(), &bytes)
        .await;
    // Item 15: the external service answers one invoice's quote with text that is not JSON,
    // another's with JSON of the wrong shape (a `tax-quote` without its numbers).
    let garbled = deployment
        .submit(&producer, INVOICE, json!(["widget", 1, "DE"]))
        .await;
    let misshapen = deployment
        .submit(&producer, INVOICE, json!(["widget", 2, "DE"]))
        .await;
    let tax_topic = deployment
        .topology
        .route("weir-examples:tax/rates")
        .expect("the tax route")
        .topic
        .clone();
    let requests = deployment.read_topic::<weir::codec::ActivityRequest>(
        &tax_topic,
        TIMEOUT,
        "both quote requests",
        |r| {
            [&garbled, &misshapen]
                .iter()
                .all(|id| r.iter().any(|(_, q)| q.parent_execution_id == **id))
        },
    );
    let quote_of = |parent: &ExecutionId| {
        requests
            .iter()
            .find(|(_, q)| q.parent_execution_id == *parent)
            .map(|(_, q)| q.execution_id.clone())
            .expect("a quote request")
    };
    // The requests carry the declaration's deadline: the service knows when it is too late.
    assert!(
        requests
            .iter()
            .all(|(_, q)| q.deadline.is_some() && q.timeout_millis.is_some()),
        "{requests:?}"
    );
    for (parent, text) in [
        (&garbled, "{\"region\": \"DE\", oops"),
        (&misshapen, "{\"region\": \"DE\"}"),
    ] {
        let answer = RawAnswer {
            child: quote_of(parent),
            ok_text: text,
        };
        let bytes = deployment
            .codec
            .encode(&responses, &answer)
            .expect("encode");
        deployment
            .produce_raw(&producer, &responses, &parent.to_string(), &bytes)
            .await;
    }

    let dlq = deployment.topic(TopicRole::Dlq);
    let dead =
        deployment.read_topic::<DlqEnvelope>(&dlq, TIMEOUT, "ten DLQ records", |r| r.len() >= 10);
    let reasons: BTreeMap<String, DlqReason> = dead
        .iter()
        .map(|(key, e)| (format!("{key}@{}", e.original_offset), e.reason))
        .collect();
    let by_key = |key: &str| -> Vec<DlqReason> {
        dead.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, e)| e.reason)
            .collect()
    };
    assert_eq!(
        by_key(&misrouted.to_string()),
        [DlqReason::Misrouted],
        "{reasons:?}"
    );
    assert_eq!(by_key("not-its-id"), [DlqReason::Misrouted], "{reasons:?}");
    assert_eq!(
        by_key(&child_shaped.to_string()),
        [DlqReason::Conflict],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&hello.to_string()),
        [DlqReason::Conflict],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&not_json.to_string()),
        [DlqReason::InvalidParams],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&not_array.to_string()),
        [DlqReason::InvalidParams],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&invoice.to_string()),
        [DlqReason::Refused],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&bad_name.to_string()),
        [DlqReason::UnknownFfqn],
        "{reasons:?}"
    );
    // The malformed answers are kept, byte for byte, and taken as the quote's error.
    assert_eq!(
        by_key(&garbled.to_string()),
        [DlqReason::Undecodable],
        "{reasons:?}"
    );
    assert_eq!(
        by_key(&misshapen.to_string()),
        [DlqReason::Refused],
        "{reasons:?}"
    );

    // The refused response changed nothing: the invoice finishes once the service answers.
    let _tax_service = deployment.start_external_tax_service();
    let results = deployment.read_topic::<ExecutionFinished>(
        &deployment.topic(TopicRole::Results),
        TIMEOUT,
        "every answer",
        |r| {
            [&invoice, &garbled, &misshapen]
                .iter()
                .all(|id| r.iter().any(|(k, _)| *k == id.to_string()))
        },
    );
    let answers = |id: &ExecutionId| -> Vec<&ExecutionResult> {
        results
            .iter()
            .filter(|(k, _)| *k == id.to_string())
            .map(|(_, f)| &f.result)
            .collect()
    };
    let invoice_results = answers(&invoice);
    assert!(
        matches!(invoice_results.as_slice(), [ExecutionResult::Ok(v)] if v["total-cents"] == 1190),
        "{invoice_results:?}"
    );
    // Resubmitted: answered again, identically; the conflicting submission: a conflict error
    // naming the execution.
    let hello_results = answers(&hello);
    let (conflicts, same): (Vec<&ExecutionResult>, Vec<&ExecutionResult>) = hello_results
        .iter()
        .copied()
        .partition(|r| error_kind(r) == Some(ExecutionErrorKind::Conflict));
    assert_eq!(same.len(), 2, "{hello_results:?}");
    assert!(
        same.iter().all(|r| **r == first[&hello]),
        "{hello_results:?}"
    );
    assert_eq!(conflicts.len(), 1, "{hello_results:?}");
    assert!(
        conflicts[0].to_string().contains(&hello.to_string()),
        "{}",
        conflicts[0]
    );
    assert_eq!(
        answers(&child_shaped)
            .iter()
            .map(|r| error_kind(r))
            .collect::<Vec<_>>(),
        [Some(ExecutionErrorKind::Conflict)]
    );
    for id in [&not_json, &not_array] {
        assert_eq!(
            answers(id)
                .iter()
                .map(|r| error_kind(r))
                .collect::<Vec<_>>(),
            [Some(ExecutionErrorKind::InvalidParams)],
            "{id}"
        );
    }
    assert_eq!(
        answers(&bad_name)
            .iter()
            .map(|r| error_kind(r))
            .collect::<Vec<_>>(),
        [Some(ExecutionErrorKind::UnknownFunction)]
    );
    // A malformed answer ends the quote with `invalid-response`, which the invoice (whose
    // error type is a string) returns as its `err`: neither stranded nor trapped. The
    // service's own answer, later, is a duplicate.
    for (id, why) in [(&garbled, "not JSON"), (&misshapen, "does not fit")] {
        let got = answers(id);
        assert!(
            matches!(got.as_slice(), [ExecutionResult::Err(Value::String(e))]
                if e.contains("invalid-response") && e.contains(why)),
            "{id}: {got:?}"
        );
    }
    // Misrouted records never run.
    assert!(answers(&misrouted).is_empty() && answers(&mis_keyed).is_empty());
}

/// Serves one body of `size` bytes to every GET, on a port of its own.
fn serve_large_body(size: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/large", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&vec![b'x'; size]);
        }
    });
    url
}

/// Issue 11 item 7: an activity whose result is too large for any record (here an HTTP body of
/// 1.04 MB) re-ran in a loop, its answer failing every transaction. Its parent is answered
/// with `value-too-large` instead, once.
#[tokio::test(flavor = "multi_thread")]
async fn an_activity_result_too_large_to_send_is_answered_value_too_large() {
    use weir::codec::ActivityRequest;

    let deployment = Deployment::new("bigresult");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    // Under the activity's own 1 MiB cap on a body, over what an answer may carry.
    let url = serve_large_body(1_040_000);
    let route = deployment
        .topology
        .route("weir-examples:http/client")
        .expect("the http route")
        .topic
        .clone();
    let parent = ExecutionId::top_level(ulid::Ulid::new());
    let request = ActivityRequest {
        execution_id: parent.child(&JoinSetId::generated(1).expect("join set"), 1),
        parent_execution_id: parent.clone(),
        ffqn: "weir-examples:http/client.get".parse().expect("ffqn"),
        params: json!([url]),
        attempt: 1,
        timeout_millis: None,
        deadline: None,
    };
    let value = deployment.codec.encode(&route, &request).expect("encode");
    deployment
        .produce_raw(&producer, &route, &request.execution_id.to_string(), &value)
        .await;
    let responses = deployment.topic(TopicRole::Responses);
    let answers = deployment.read_topic::<Response>(&responses, TIMEOUT, "the answer", |r| {
        r.iter().any(|(k, _)| *k == parent.to_string())
    });
    let answers: Vec<&Response> = answers
        .iter()
        .filter(|(k, _)| *k == parent.to_string())
        .map(|(_, r)| r)
        .collect();
    match answers.as_slice() {
        [Response::ChildExecutionFinished { result, .. }] => {
            assert_eq!(
                error_kind(result),
                Some(ExecutionErrorKind::ValueTooLarge),
                "{result}"
            );
            assert!(result.to_string().contains("bytes encoded"), "{result}");
        }
        other => panic!("one answer expected: {other:?}"),
    }
}

/// Issue 33, the size gate per producer (the workflow worker's): a workflow whose result is
/// just over what a record may carry — `hello.greet` of a name at the value limit (its
/// submission fits), the greeting nine bytes of JSON longer — is answered `value-too-large`
/// once instead of failing its batch's transaction for ever, and the partition goes on: an
/// execution submitted after it finishes.
#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_result_just_over_the_limit_is_answered_value_too_large() {
    let deployment = Deployment::new("bigreturn");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let limit = weir::options::DEFAULT_MAX_RECORD_BYTES - weir::options::ENVELOPE_ALLOWANCE;
    let big = deployment
        .submit(&producer, HELLO, json!(["n".repeat(limit)]))
        .await;
    let after = deployment.submit(&producer, HELLO, json!(["ada"])).await;
    let results = deployment.results(&[big.clone(), after.clone()], TIMEOUT);
    let result = &results[&big];
    assert_eq!(
        error_kind(result),
        Some(ExecutionErrorKind::ValueTooLarge),
        "{result}"
    );
    assert!(result.to_string().contains("the result"), "{result}");
    assert_eq!(results[&after], ExecutionResult::Ok(json!("hello, ada")));
    let finished = deployment.read_topic::<ExecutionFinished>(
        &deployment.topic(TopicRole::Results),
        TIMEOUT,
        "the results",
        |r| r.iter().any(|(k, _)| *k == after.to_string()),
    );
    let answers = finished
        .iter()
        .filter(|(k, _)| *k == big.to_string())
        .count();
    assert_eq!(answers, 1, "answered once");
}

/// Issue 33 F4 and the size gate per producer (the DLQ's): an undecodable submission whose
/// key, headers and value together are just within what a record may carry (a 350 kB key, a
/// 100 kB header, a 500 kB value) is dead-lettered once, its copy cut to fit (the key and
/// headers bounded, the original value whole), and the partition goes on: a submission on
/// the same partition after it finishes. A copy that carried the key twice (as its own key and
/// in its envelope) and the headers uncut would be over the limit, and its batch would fail
/// for ever.
#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_record_with_a_huge_key_is_dead_lettered_in_a_copy_that_fits() {
    use rdkafka::message::{Header, OwnedHeaders};

    let deployment = Deployment::new("bigkey");
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let submissions = deployment.topic(TopicRole::Submissions);
    let partitions = deployment.topology.topic(TopicRole::Submissions).partitions;
    let key = "k".repeat(350_000);
    let header = vec![b'h'; 100_000];
    let value = vec![0xff_u8; 500_000];
    let partition = partition_for_key(key.as_bytes(), partitions);
    producer
        .send(
            FutureRecord::to(&submissions)
                .key(&key)
                .payload(&value)
                .headers(OwnedHeaders::new().insert(Header {
                    key: "big",
                    value: Some(&header),
                })),
            Duration::from_secs(30),
        )
        .await
        .expect("the original fits the broker's limit");
    let after = std::iter::repeat_with(|| ExecutionId::top_level(ulid::Ulid::new()))
        .find(|id| partition_for_key(id.to_string().as_bytes(), partitions) == partition)
        .expect("an id on the same partition");
    let encoded = deployment
        .codec
        .encode(&submissions, &submission(&after, HELLO, json!(["ada"])))
        .expect("encode");
    deployment
        .produce_raw(&producer, &submissions, &after.to_string(), &encoded)
        .await;
    let results = deployment.results(std::slice::from_ref(&after), TIMEOUT);
    assert_eq!(results[&after], ExecutionResult::Ok(json!("hello, ada")));

    let dead = deployment.dead_letters_from(&submissions, TIMEOUT);
    assert_eq!(dead.len(), 1, "dead-lettered once: {}", dead.len());
    let copy = &dead[0];
    assert_eq!(copy.reason, DlqReason::Undecodable, "{}", copy.error);
    assert_eq!(copy.original_partition, partition);
    assert_eq!(
        copy.value.as_deref(),
        Some(value.as_slice()),
        "the value is whole"
    );
    let kept_key = copy.key.as_ref().map_or(0, Vec::len);
    assert!(
        kept_key > 0 && kept_key <= weir::kafka::dlq::MAX_DLQ_KEY_BYTES,
        "the key is cut to its bound: {kept_key} bytes"
    );
    let kept_headers: usize = copy
        .original_headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
        .sum();
    assert!(
        kept_headers <= weir::kafka::dlq::MAX_DLQ_HEADER_BYTES,
        "the headers are cut to their bound: {kept_headers} bytes"
    );
}
