//! The dead-letter queue: an input record that cannot be processed is copied to `weir.dlq`,
//! with the reason in headers, inside the transaction that commits its offset, so that a
//! poison record never blocks its partition and nothing is lost. What the copy keeps of its
//! original (everything that fits the producer's limit, and what was cut said) is
//! [`weir_core::dlq`]'s rule, which the simulation applies too; this module adds the value's
//! encoding and the copy's headers.
//!
//! `weir_dlq_records_total` counts dead letters whose transaction *committed* (and
//! `weir_dlq_records_by_reason_total` by their reason header): the transactional producer
//! counts them after the commit ([`dead_letter_reason`]), so a batch that aborts and runs again
//! counts its dead letters once.

use chrono::Utc;
use rdkafka::message::{Headers, Message, OwnedMessage};
use tracing::{error, warn};
use weir_core::dlq::{Copy, Original};
pub use weir_core::dlq::{
    MAX_DLQ_ERROR_BYTES, MAX_DLQ_HEADER_BYTES, MAX_DLQ_KEY_BYTES, MAX_DLQ_VALUE_BYTES,
};

use super::outgoing::OutgoingRecord;
use crate::codec::{Codec, DlqReason, EncodeError, dlq_headers};
use crate::metrics::Metrics;
use crate::topology::{TopicRole, Topology};

/// A DLQ envelope that cannot be encoded (with a schema registry: its schema is not
/// registered for the DLQ topic; `weir worker` registers every schema at start-up).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the DLQ copy of {topic}/{partition} offset {offset} for `{dlq}`: {source}")]
pub struct DeadLetterError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub dlq: String,
    pub source: Box<EncodeError>,
}

/// Whether `record` is a dead letter (every one carries the reason header).
pub fn is_dead_letter(record: &OutgoingRecord) -> bool {
    dead_letter_reason(record).is_some()
}

/// The reason header's value of `record`, if it is a dead letter.
pub fn dead_letter_reason(record: &OutgoingRecord) -> Option<&[u8]> {
    record
        .headers
        .iter()
        .find(|(k, _)| k == dlq_headers::REASON)
        .map(|(_, v)| v.as_slice())
}

/// The DLQ record for `message`, or a typed error when its envelope cannot be encoded.
pub fn try_dead_letter(
    topology: &Topology,
    codec: &Codec,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> Result<OutgoingRecord, DeadLetterError> {
    try_dead_letter_of(
        topology,
        codec,
        original(message),
        headers(message),
        reason,
        error,
    )
}

/// The DLQ record for `original` with its `headers`, or a typed error when its envelope
/// cannot be encoded.
pub fn try_dead_letter_of<'a>(
    topology: &Topology,
    codec: &Codec,
    original: Original<'_>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    reason: DlqReason,
    error: String,
) -> Result<OutgoingRecord, DeadLetterError> {
    warn!(
        topic = original.topic,
        partition = original.partition,
        offset = original.offset,
        ?reason,
        %error,
        "record sent to the DLQ"
    );
    let dlq = topology.topic(TopicRole::Dlq).name.clone();
    let copy = weir_core::dlq::copy(original, headers, reason, error, Utc::now());
    let value = codec
        .encode(&dlq, &copy.envelope)
        .map_err(|source| DeadLetterError {
            topic: original.topic.to_owned(),
            partition: original.partition,
            offset: original.offset,
            dlq: dlq.clone(),
            source: Box::new(source),
        })?;
    Ok(record(dlq, copy, value))
}

/// The DLQ record for `message`, for callers that cannot fail: when the envelope cannot be
/// encoded in the codec's wire format, it is written in Avro single-object encoding (which
/// every reader accepts, and which needs no registry), and the failure is logged at ERROR.
/// `_metrics` is not touched: dead letters are counted once committed.
pub fn dead_letter(
    topology: &Topology,
    codec: &Codec,
    _metrics: &Metrics,
    message: &OwnedMessage,
    reason: DlqReason,
    error: String,
) -> OutgoingRecord {
    match try_dead_letter(topology, codec, message, reason, error.clone()) {
        Ok(record) => record,
        Err(e) => {
            error!(error = %e, "DLQ copy written in single-object encoding instead");
            let dlq = topology.topic(TopicRole::Dlq).name.clone();
            let copy = weir_core::dlq::copy(
                original(message),
                headers(message),
                reason,
                error,
                Utc::now(),
            );
            // Single-object encoding needs no registry: only a value the schema cannot hold
            // fails it, and the envelope's fields all fit their schema.
            let value = Codec::encode_single_object(&dlq, &copy.envelope).unwrap_or_else(|e| {
                error!(error = %e, "DLQ envelope unencodable: the copy's value (the original's, cut to fit) is written as is");
                copy.envelope.value.clone().unwrap_or_default()
            });
            record(dlq, copy, value)
        }
    }
}

/// What a DLQ copy of `message` copies.
fn original(message: &OwnedMessage) -> Original<'_> {
    Original {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        timestamp_millis: message.timestamp().to_millis(),
        key: message.key(),
        value: message.payload(),
    }
}

/// The headers of `message`, names and values, in order.
fn headers(message: &OwnedMessage) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
    message
        .headers()
        .into_iter()
        .flat_map(|headers| headers.iter())
        .map(|h| (h.key, h.value))
}

fn record(dlq: String, copy: Copy, value: Vec<u8>) -> OutgoingRecord {
    let Copy {
        envelope,
        value_cut,
    } = copy;
    let mut headers: Vec<(String, Vec<u8>)> = envelope
        .kafka_headers()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    if let Some(cut) = value_cut {
        headers.push((
            dlq_headers::ORIGINAL_SIZE.to_owned(),
            cut.size.to_string().into_bytes(),
        ));
        headers.push((
            dlq_headers::ORIGINAL_SHA256.to_owned(),
            cut.sha256.into_bytes(),
        ));
    }
    OutgoingRecord {
        partition: None,
        topic: dlq,
        // The key as the envelope keeps it (cut when it is long).
        key: String::from_utf8_lossy(envelope.key.as_deref().unwrap_or_default()).into_owned(),
        value: Some(value),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rdkafka::Timestamp;

    use sha2::{Digest, Sha256};

    use super::super::config::MAX_PRODUCED_RECORD_BYTES;
    use super::*;
    use crate::codec::{DlqEnvelope, InMemoryRegistry, RecordPosition, WireFormat};

    fn topology() -> Topology {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        Topology::load(&root).expect("the repository's topology")
    }

    fn poison() -> OwnedMessage {
        OwnedMessage::new(
            Some(b"not avro".to_vec()),
            Some(b"E_key".to_vec()),
            "weir.submissions".to_owned(),
            Timestamp::CreateTime(1),
            3,
            42,
            None,
        )
    }

    /// Issue 11 item 12: with a registry whose schemas are not registered, the DLQ copy was an
    /// `expect` panic; it is a typed error naming the record, and `dead_letter` falls back to
    /// single-object encoding.
    #[test]
    fn an_unregistered_dlq_schema_is_a_typed_error_not_a_panic() {
        let topology = topology();
        let codec = Codec::new(Some(Arc::new(InMemoryRegistry::new())));
        assert_eq!(codec.wire_format(), WireFormat::Confluent);
        let message = poison();
        let error = try_dead_letter(
            &topology,
            &codec,
            &message,
            DlqReason::Undecodable,
            "bad".into(),
        )
        .expect_err("nothing registered");
        let text = error.to_string();
        assert!(text.contains("weir.submissions/3 offset 42"), "{text}");
        let record = dead_letter(
            &topology,
            &codec,
            &Metrics::default(),
            &message,
            DlqReason::Undecodable,
            "bad".into(),
        );
        assert!(is_dead_letter(&record));
        let position = RecordPosition::at(&record.topic, 0, 0);
        let envelope: DlqEnvelope = codec
            .decode(record.value.as_deref().unwrap_or_default(), &position)
            .expect("readable");
        assert_eq!(envelope.value.as_deref(), Some(b"not avro".as_slice()));
        assert_eq!(envelope.original_offset, 42);
    }

    #[tokio::test]
    async fn once_registered_the_dlq_copy_is_in_the_registrys_framing() {
        let topology = topology();
        let codec = Codec::new(Some(Arc::new(InMemoryRegistry::new())));
        let registered = codec.register_topology(&topology).await.expect("register");
        let subjects: Vec<&str> = registered.iter().map(|(s, _, _)| s.as_str()).collect();
        for role in [
            TopicRole::Submissions,
            TopicRole::Responses,
            TopicRole::Events,
            TopicRole::History,
            TopicRole::Results,
            TopicRole::Dlq,
        ] {
            let subject = format!("{}-value", topology.topic(role).name);
            assert!(
                subjects.contains(&subject.as_str()),
                "{subject}: {subjects:?}"
            );
        }
        let record = try_dead_letter(
            &topology,
            &codec,
            &poison(),
            DlqReason::Undecodable,
            "bad".into(),
        )
        .expect("registered");
        assert_eq!(
            record.value.as_deref().map(|v| v[0]),
            Some(crate::codec::CONFLUENT_MAGIC)
        );
        // A cancellation on a topic Weir's activity workers serve encodes too (it has a
        // subject of its own there).
        let topics = topology.cancellation_topics();
        assert!(!topics.is_empty());
        let parent = crate::model::ExecutionId::top_level(ulid::Ulid::new());
        let join_set = crate::model::JoinSetId::generated(1).expect("join set");
        let cancel = crate::codec::ActivityCancel {
            execution_id: parent.child(&join_set, 1),
            parent_execution_id: parent,
            cancelled_at: Utc::now(),
        };
        for topic in topics {
            let value = codec
                .encode(&topic, &cancel)
                .expect("ActivityCancel registered");
            assert_eq!(value[0], crate::codec::CONFLUENT_MAGIC);
        }
        // What workflow workers write besides each topic's own record type encodes too: a
        // child workflow's cancellation on the submissions topic, a finished run's word to its
        // schedule on the responses topic, a schedule's state on the state topic, and a
        // correlation key's records.
        let at = Utc::now();
        let child_cancel = crate::codec::CancelRequest {
            execution_id: crate::model::ExecutionId::top_level(ulid::Ulid::new()),
            reason: "parent cancelled".into(),
            terminate: false,
            requested_at: at,
            waited_until: None,
        };
        let submissions = &topology.topic(TopicRole::Submissions).name;
        let value = codec
            .encode(submissions, &child_cancel)
            .expect("CancelRequest registered on the submissions topic");
        assert_eq!(value[0], crate::codec::CONFLUENT_MAGIC);
        let finished = weir_core::schedule::ScheduleCommand {
            name: "nightly".into(),
            command_id: "run-finished:x".into(),
            action: weir_core::schedule::ScheduleAction::RunFinished(
                child_cancel.execution_id.clone(),
            ),
            sent_at: at,
        };
        let responses = &topology.topic(TopicRole::Responses).name;
        codec
            .encode(responses, &finished)
            .expect("ScheduleCommand registered on the responses topic");
        let state = crate::kafka::history_reader::tests::schedule("nightly");
        codec
            .encode(&topology.topic(TopicRole::State).name, &state)
            .expect("ScheduleState registered on the state topic");
        // A reset's records: the new execution's start on the submissions topic, the request
        // sent back to the execution reset on the responses topic.
        let new = crate::model::ExecutionId::top_level(ulid::Ulid::new());
        let reset = crate::codec::ResetRequest {
            execution_id: child_cancel.execution_id.clone(),
            to: weir_core::records::ResetPoint::Seq(0),
            new_execution_id: new.clone(),
            then: crate::codec::ResetThen::Keep,
            reason: String::new(),
            requested_at: at,
        };
        codec
            .encode(responses, &reset)
            .expect("ResetRequest registered on the responses topic");
        let start = crate::codec::ResetStart {
            submission: crate::codec::Submission {
                execution_id: new,
                ffqn: "weir-examples:workflows/workflow.fibo"
                    .parse()
                    .expect("an ffqn"),
                params: serde_json::json!([10]),
                parent: None,
                scheduled_at: None,
                correlation_id: None,
                metadata: Default::default(),
                deadline: None,
                concurrency: None,
                tenant: None,
            },
            reset_of: crate::codec::ResetOf {
                execution_id: child_cancel.execution_id.clone(),
                seq: 0,
            },
            entries: Vec::new(),
        };
        let value = codec
            .encode(submissions, &start)
            .expect("ResetStart registered on the submissions topic");
        assert_eq!(value[0], crate::codec::CONFLUENT_MAGIC);
        // A correlation key's records: its commands on the responses topic and its state on
        // the state topic, each under a subject of its own; its events on the events topic,
        // the same record type (`InboundEvent`) whatever the target.
        let state_topic = &topology.topic(TopicRole::State).name;
        for subject in [
            format!("{responses}-dev.weir.v1.CorrelationCommand"),
            format!("{state_topic}-dev.weir.v1.CorrelationState"),
        ] {
            assert!(
                subjects.contains(&subject.as_str()),
                "{subject}: {subjects:?}"
            );
        }
        let key = "payment:order-42".to_owned();
        let command = weir_core::correlation::CorrelationCommand {
            key: key.clone(),
            execution_id: child_cancel.execution_id.clone(),
            action: weir_core::correlation::CorrelationAction::Register,
            sent_at: at,
        };
        codec
            .encode(responses, &command)
            .expect("CorrelationCommand registered on the responses topic");
        let event = crate::codec::ReceivedEvent {
            event_id: "e-1".into(),
            name: "paid".into(),
            payload: serde_json::json!({"amount": 1}),
        };
        let correlation = weir_core::correlation::CorrelationState {
            key: key.clone(),
            holders: Vec::new(),
            buffered: vec![weir_core::correlation::BufferedEvent {
                event: event.clone(),
                sent_at: at,
            }],
            waits_until: None,
            cancel: None,
        };
        codec
            .encode(
                state_topic,
                &crate::codec::StoredCorrelation::of(correlation),
            )
            .expect("CorrelationState registered on the state topic");
        codec
            .encode(
                state_topic,
                &weir_core::correlation::RememberedEvent {
                    key: key.clone(),
                    forwarded: weir_core::correlation::Forwarded {
                        event_id: event.event_id.clone(),
                        at,
                    },
                },
            )
            .expect("RememberedEvent registered on the state topic");
        let events = &topology.topic(TopicRole::Events).name;
        let keyed = weir_core::correlation::KeyedEvent {
            event: event.clone(),
            key: key.clone(),
            sent_at: at,
            returned_by: Some(child_cancel.execution_id.clone()),
        };
        codec
            .encode(events, &keyed)
            .expect("an event for a key encodes on the events topic");
        let forwarded = crate::codec::InboundEvent {
            event,
            target: child_cancel.execution_id.clone(),
            sent_at: at,
            correlation_key: Some(key),
            waited_until: None,
        };
        codec
            .encode(events, &forwarded)
            .expect("a forwarded event encodes on the events topic");
        // Without a registry there is nothing to register.
        assert!(
            Codec::single_object()
                .register_topology(&topology)
                .await
                .expect("no-op")
                .is_empty()
        );
    }

    /// Issue 11 item 7: the DLQ copy of a record too large for any producer (the usual reason
    /// it is dead-lettered) carried the whole value and failed its batch forever. It keeps a
    /// prefix that fits, and says so.
    #[test]
    fn the_copy_of_a_record_too_large_to_send_keeps_a_prefix_and_a_digest() {
        let topology = topology();
        let codec = Codec::new(None);
        let big: Vec<u8> = (0..1_200_000u32).map(|i| (i % 251) as u8).collect();
        let message = OwnedMessage::new(
            Some(big.clone()),
            Some(b"E_key".to_vec()),
            "weir.submissions".to_owned(),
            Timestamp::CreateTime(1),
            3,
            42,
            None,
        );
        let record = try_dead_letter(
            &topology,
            &codec,
            &message,
            DlqReason::Oversize,
            "too big".into(),
        )
        .expect("encodes");
        let size = record.size();
        assert!(size <= MAX_PRODUCED_RECORD_BYTES, "{size} bytes");
        let position = RecordPosition::at(&record.topic, 0, 0);
        let envelope: DlqEnvelope = codec
            .decode(record.value.as_deref().unwrap_or_default(), &position)
            .expect("readable");
        assert_eq!(envelope.value.as_deref(), Some(&big[..MAX_DLQ_VALUE_BYTES]));
        let sha: String = Sha256::digest(&big)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(envelope.error.contains(&sha), "{}", envelope.error);
        assert!(
            envelope.error.contains("1200000 bytes"),
            "{}",
            envelope.error
        );
        let header = |name: &str| {
            record
                .headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            header(dlq_headers::ORIGINAL_SIZE).as_deref(),
            Some("1200000")
        );
        assert_eq!(header(dlq_headers::ORIGINAL_SHA256), Some(sha));
        // A record that fits is copied whole, without those headers.
        let small = try_dead_letter(
            &topology,
            &codec,
            &poison(),
            DlqReason::Undecodable,
            "x".into(),
        )
        .expect("encodes");
        assert!(
            small
                .headers
                .iter()
                .all(|(k, _)| k != dlq_headers::ORIGINAL_SIZE)
        );
    }

    /// Issue 33 F4: a record with a ~350 kB key (a misrouted one, whose error text repeats
    /// the key) and many headers made a copy larger than the producer's limit, and its batch
    /// failed forever. The copy fits, and says what it cut.
    #[test]
    fn the_copy_of_a_record_with_a_huge_key_and_headers_fits() {
        use rdkafka::message::{Header, OwnedHeaders};
        let topology = topology();
        let codec = Codec::new(None);
        let key = vec![b'k'; 350_000];
        let mut headers = OwnedHeaders::new();
        let header_value = vec![b'h'; 1024];
        for _ in 0..100 {
            headers = headers.insert(Header {
                key: "x-original",
                value: Some(header_value.as_slice()),
            });
        }
        let message = OwnedMessage::new(
            Some(vec![7u8; 900_000]),
            Some(key.clone()),
            "weir.responses".to_owned(),
            Timestamp::CreateTime(1),
            3,
            42,
            Some(headers),
        );
        let error = format!(
            "keyed by `{}`, which belongs on another partition",
            String::from_utf8_lossy(&key)
        );
        let record = try_dead_letter(&topology, &codec, &message, DlqReason::Misrouted, error)
            .expect("encodes");
        let size = record.size();
        assert!(size <= MAX_PRODUCED_RECORD_BYTES, "{size} bytes");
        assert_eq!(record.key.len(), MAX_DLQ_KEY_BYTES);
        let position = RecordPosition::at(&record.topic, 0, 0);
        let envelope: DlqEnvelope = codec
            .decode(record.value.as_deref().unwrap_or_default(), &position)
            .expect("readable");
        assert_eq!(envelope.key.as_deref(), Some(&key[..MAX_DLQ_KEY_BYTES]));
        let sha: String = Sha256::digest(&key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(envelope.error.contains(&sha), "{}", envelope.error);
        assert!(envelope.error.contains("350000 bytes"));
        let kept = envelope.original_headers.len();
        assert!(kept > 0 && kept < 100, "{kept} headers kept");
        assert!(
            envelope.error.contains(&format!(
                "leaves out the last {} original headers",
                100 - kept
            )),
            "{}",
            envelope.error
        );
    }
}
