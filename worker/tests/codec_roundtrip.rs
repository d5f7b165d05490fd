//! Every record type and every history event / response / result variant survives both wire
//! formats: Avro single-object encoding and the Confluent wire format (in-memory registry).

mod codec_samples;

use std::fmt::Debug;
use std::sync::Arc;

use apache_avro::types::Value;
use chrono::DateTime;
use codec_samples::*;
use proptest::prelude::*;
use weir::codec::{
    AvroRecord, Codec, EncodeError, EventRecord, ExecutionFinished, HistoryEntry, HistoryRecord,
    InMemoryRegistry, InboundEvent, RecordPosition, ResetStart, SchemaRegistry, Submission,
    WireFormat, dlq_headers,
};
use weir::correlation::KeyedEvent;
use weir::model::{HistoryEvent, PersistValue, Version};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn round_trip_single_object<R: AvroRecord + PartialEq + Debug>(topic: &str, records: &[R]) {
    let codec = Codec::single_object();
    assert_eq!(codec.wire_format(), WireFormat::SingleObject);
    for record in records {
        let bytes = codec.encode(topic, record).unwrap();
        assert_eq!(&bytes[..2], &[0xC3, 0x01]);
        assert_eq!(&bytes[2..10], &R::schema().fingerprint.to_le_bytes());
        let decoded: R = codec
            .decode(&bytes, &RecordPosition::at(topic, 3, 99))
            .unwrap();
        assert_eq!(&decoded, record);
    }
}

async fn round_trip_confluent<R: AvroRecord + PartialEq + Debug>(topic: &str, records: &[R]) {
    let registry: Arc<dyn SchemaRegistry> = Arc::new(InMemoryRegistry::new());
    let writer = Codec::new(Some(registry.clone()));
    assert_eq!(writer.wire_format(), WireFormat::Confluent);
    let id = writer.register::<R>(topic).await.unwrap().unwrap();
    // A second codec (another worker) knows nothing yet and fetches the schema by id.
    let reader = Codec::new(Some(registry));
    for record in records {
        let bytes = writer.encode(topic, record).unwrap();
        assert_eq!(bytes[0], 0);
        assert_eq!(&bytes[1..5], &id.to_be_bytes());
        let position = RecordPosition::at(topic, 0, 1);
        assert_eq!(&writer.decode::<R>(&bytes, &position).unwrap(), record);
        assert_eq!(
            &reader
                .decode_fetching::<R>(&bytes, &position)
                .await
                .unwrap(),
            record
        );
        // Single-object bytes are accepted by a registry-configured codec too.
        let so = Codec::encode_single_object(topic, record).unwrap();
        assert_eq!(&reader.decode::<R>(&so, &position).unwrap(), record);
    }
}

fn both<R: AvroRecord + PartialEq + Debug>(topic: &str, records: &[R]) {
    assert!(!records.is_empty());
    round_trip_single_object(topic, records);
    block_on(round_trip_confluent(topic, records));
}

#[test]
fn submissions_round_trip() {
    both("weir.submissions", &submissions());
}

#[test]
fn responses_round_trip_every_variant_and_result() {
    both("weir.responses", &responses());
}

#[test]
fn activity_requests_round_trip() {
    both("weir.activity.compute", &activity_requests());
}

#[test]
fn upgrade_requests_round_trip() {
    both("weir.responses", &upgrade_requests());
}

#[test]
fn pause_requests_round_trip() {
    both("weir.responses", &pause_requests());
}

#[test]
fn query_records_round_trip() {
    both("weir.responses", &query_requests());
    both("weir.answers", &query_answers());
}

#[test]
fn batch_records_round_trip() {
    both("weir.responses", &batch_commands());
    both("weir.state", &batch_states());
    both("weir.state", &batch_outcomes());
}

#[test]
fn reset_requests_round_trip() {
    both("weir.responses", &reset_requests());
}

#[test]
fn reset_starts_round_trip() {
    let starts = reset_starts();
    assert!(starts.iter().any(|s| s.entries.is_empty()));
    assert!(starts.iter().any(|s| s.entries.len() > 20));
    both("weir.submissions", &starts);
}

/// A reset's start carries the new execution's history as the single-object records
/// `weir.history` holds: each one reads as a `HistoryRecord` of the new execution, seq 1,
/// 2, … in order, with `history_record.avsc` and nothing else.
#[test]
fn a_reset_start_carries_history_records_any_client_reads() {
    let codec = Codec::single_object();
    let position = RecordPosition::topic("weir.history");
    for start in reset_starts() {
        let bytes = codec.encode("weir.submissions", &start).unwrap();
        let schema = &ResetStart::schema().schema;
        let Value::Record(fields) = weir::codec::read_body(schema, &bytes[10..]).unwrap() else {
            panic!("not a record")
        };
        let Some((_, Value::Array(items))) = fields.into_iter().find(|(name, _)| name == "history")
        else {
            panic!("no history")
        };
        assert_eq!(items.len(), start.entries.len());
        for (i, (item, entry)) in items.into_iter().zip(&start.entries).enumerate() {
            let Value::Bytes(item) = item else {
                panic!("not bytes: {item:?}")
            };
            assert_eq!(&item[..2], &[0xC3, 0x01]);
            assert_eq!(
                &item[2..10],
                &HistoryRecord::schema().fingerprint.to_le_bytes()
            );
            let record: HistoryRecord = codec.decode(&item, &position).unwrap();
            assert_eq!(
                record,
                HistoryRecord {
                    execution_id: start.submission.execution_id.clone(),
                    seq: i as u64 + 1,
                    entry: entry.clone(),
                    at: None,
                }
            );
        }
    }
}

/// A reset's start is a top-level submission: one with a parent, a schedule, a correlation
/// id or a deadline does not encode (rather than lose them).
#[test]
fn a_reset_start_with_more_than_a_top_level_submission_does_not_encode() {
    let codec = Codec::single_object();
    let child = submissions().remove(1);
    /// Sets one field of a submission from the child's.
    type Set = fn(&mut Submission, &Submission);
    let cases: [(&str, Set); 4] = [
        ("parent", |s, c| s.parent = c.parent.clone()),
        ("scheduled_at", |s, c| s.scheduled_at = c.scheduled_at),
        ("correlation_id", |s, c| {
            s.correlation_id = c.correlation_id.clone()
        }),
        ("deadline", |s, c| s.deadline = c.deadline),
    ];
    for (field, set) in cases {
        let mut start = reset_starts().remove(1);
        set(&mut start.submission, &child);
        match codec.encode("weir.submissions", &start) {
            Err(EncodeError::Value { record, source, .. }) => {
                assert_eq!(record, "ResetStart");
                assert_eq!(source.path, format!("submission.{field}"), "{source}");
            }
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn cancel_requests_round_trip() {
    both("weir.responses", &cancel_requests());
}

#[test]
fn events_round_trip() {
    both("weir.events", &inbound_events());
}

#[test]
fn events_for_correlation_keys_round_trip() {
    both("weir.events", &keyed_events());
}

/// What the workflow worker reads from `weir.events`: the target tells an event for an
/// execution from one for a correlation key, each read back as it was written (by
/// `InboundEvent` or `KeyedEvent`, the same Avro record).
#[test]
fn event_records_round_trip_both_kinds() {
    both("weir.events", &event_records());
    let codec = Codec::single_object();
    let position = RecordPosition::at("weir.events", 0, 7);
    for event in inbound_events() {
        let bytes = codec.encode("weir.events", &event).unwrap();
        assert_eq!(
            codec.decode::<EventRecord>(&bytes, &position).unwrap(),
            EventRecord::Execution(event)
        );
        let err = codec.decode::<KeyedEvent>(&bytes, &position).unwrap_err();
        assert!(err.to_string().contains("not a correlation key"), "{err}");
    }
    for event in keyed_events() {
        let bytes = codec.encode("weir.events", &event).unwrap();
        assert_eq!(
            codec.decode::<EventRecord>(&bytes, &position).unwrap(),
            EventRecord::Keyed(event)
        );
        let err = codec.decode::<InboundEvent>(&bytes, &position).unwrap_err();
        assert!(err.to_string().contains("is a correlation key"), "{err}");
    }
}

#[test]
fn correlation_commands_round_trip() {
    both("weir.responses", &correlation_commands());
}

#[test]
fn correlation_states_round_trip() {
    both("weir.state", &correlation_states());
}

#[test]
fn remembered_events_round_trip() {
    both("weir.state", &remembered_events());
}

/// `value` (an `InboundEvent`'s) with `field` set to `bad`, framed in single-object encoding.
fn event_bytes(
    mut value: apache_avro::types::Value,
    field: &str,
    bad: apache_avro::types::Value,
) -> Vec<u8> {
    if let apache_avro::types::Value::Record(fields) = &mut value {
        for (name, v) in fields.iter_mut() {
            if name == field {
                *v = bad.clone();
            }
        }
    }
    let schema = InboundEvent::schema();
    let mut bytes = weir::codec::SINGLE_OBJECT_MAGIC.to_vec();
    bytes.extend_from_slice(&schema.fingerprint.to_le_bytes());
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema.schema)
        .build()
        .unwrap()
        .write_value_ref(&mut bytes, &value)
        .unwrap();
    bytes
}

/// An event that breaks the rules (its name, its id, its payload, its target) is refused by
/// the decoder: it never reaches an execution or a key, and the DLQ says why.
#[test]
fn events_that_break_the_rules_do_not_decode() {
    use apache_avro::types::Value;
    let position = RecordPosition::at("weir.events", 0, 7);
    let codec = Codec::single_object();
    let some = |s: &str| Value::Union(1, Box::new(Value::String(s.into())));
    let for_execution = || inbound_events().remove(0).to_avro().unwrap();
    let for_key = || keyed_events().remove(0).to_avro().unwrap();
    for (value, field, bad, why) in [
        (
            for_execution(),
            "name",
            Value::String("with space".into()),
            "name",
        ),
        (
            for_execution(),
            "event_id",
            Value::String("".into()),
            "event_id",
        ),
        (
            for_execution(),
            "payload",
            Value::String("{not json".into()),
            "payload",
        ),
        (
            for_execution(),
            "target",
            Value::String("E_bad".into()),
            "target",
        ),
        (
            for_key(),
            "name",
            Value::String("with space".into()),
            "name",
        ),
        (
            for_key(),
            "target",
            Value::String("with space".into()),
            "field `target`: correlation key `with space` is not 1 to 128 bytes",
        ),
        (
            for_key(),
            "target",
            Value::String("weir:x".into()),
            "which Weir keeps for its own state",
        ),
        (for_key(), "target", Value::String("".into()), "target"),
        // Only Weir sets these, each on its kind of event.
        (
            for_key(),
            "correlation_key",
            some("payment:order-42"),
            "only an event forwarded to an execution names its key",
        ),
        (
            for_execution(),
            "returned_by",
            some(&root().to_string()),
            "only an event for a correlation key is returned",
        ),
        (
            for_execution(),
            "correlation_key",
            some("bad key"),
            "correlation_key",
        ),
        (for_key(), "returned_by", some("E_bad"), "returned_by"),
    ] {
        let bytes = event_bytes(value, field, bad);
        let err = codec.decode::<EventRecord>(&bytes, &position).unwrap_err();
        assert!(err.to_string().contains(why), "{field}: {err}");
        assert_eq!(
            err.dlq_reason(),
            weir::codec::DlqReason::Undecodable,
            "{err}"
        );
    }
}

#[test]
fn activity_cancels_round_trip() {
    both("weir.activity.compute", &activity_cancels());
}

#[test]
fn history_records_round_trip_every_entry_and_event() {
    let records = history_records();
    // Every event variant and every entry kind is among the samples.
    let mut kinds: Vec<&str> = records
        .iter()
        .map(|r| match &r.entry {
            HistoryEntry::Created(_) => "Created",
            HistoryEntry::Event { event, .. } => event.kind_name(),
            HistoryEntry::ResponseAppended(_) => "ResponseAppended",
            HistoryEntry::Finished { .. } => "Finished",
            HistoryEntry::Upgraded { .. } => "Upgraded",
            HistoryEntry::EventReceived(_) => "EventReceived",
            HistoryEntry::CancelRequested { .. } => "CancelRequested",
            HistoryEntry::Paused { .. } => "Paused",
            HistoryEntry::Resumed { .. } => "Resumed",
            HistoryEntry::Reset { .. } => "Reset",
            HistoryEntry::SlotGranted { .. } => "SlotGranted",
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), 10 + 11, "{kinds:?}");
    assert!(records.iter().any(|r| matches!(
        &r.entry,
        HistoryEntry::Created(c) if c.reset_of.is_some()
    )));
    assert!(records.iter().any(|r| matches!(
        &r.entry,
        HistoryEntry::Created(c) if c.slots.len() == 2
    )));
    both("weir.history", &records);
}

#[test]
fn execution_finished_round_trip_every_result() {
    both("weir.results", &execution_finished());
}

#[test]
fn dlq_envelopes_round_trip_every_reason() {
    both("weir.dlq", &dlq_envelopes());
}

#[test]
fn dlq_headers_carry_the_reason() {
    let mut envelope = dlq_envelopes().remove(1);
    envelope.error = "é".repeat(dlq_headers::MAX_ERROR_HEADER_BYTES);
    let headers = envelope.kafka_headers();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
            .unwrap()
    };
    assert_eq!(get(dlq_headers::REASON), "unknown-schema");
    assert_eq!(get(dlq_headers::ORIGINAL_TOPIC), "weir.submissions");
    assert_eq!(get(dlq_headers::ORIGINAL_PARTITION), "1");
    assert_eq!(get(dlq_headers::ORIGINAL_OFFSET), "1000001");
    // Cut on a character boundary, within the limit.
    let error = get(dlq_headers::ERROR);
    assert!(error.len() <= dlq_headers::MAX_ERROR_HEADER_BYTES);
    assert!(error.chars().all(|c| c == 'é'));
}

#[test]
fn encode_with_a_registry_needs_registration_first() {
    let codec = Codec::new(Some(Arc::new(InMemoryRegistry::new())));
    let err = codec
        .encode("weir.submissions", &submissions()[0])
        .unwrap_err();
    assert!(err.to_string().contains("weir.submissions-value"), "{err}");
    let bytes = block_on(codec.encode_registering("weir.submissions", &submissions()[0])).unwrap();
    assert_eq!(bytes[0], 0);
    // Registering is idempotent and per topic: the same schema gets the same id everywhere.
    let a = block_on(codec.register::<Submission>("weir.submissions")).unwrap();
    let b = block_on(codec.register::<Submission>("other.submissions")).unwrap();
    assert_eq!(a, b);
}

#[test]
fn single_object_needs_no_registration_and_register_is_a_no_op() {
    let codec = Codec::single_object();
    assert_eq!(
        block_on(codec.register::<Submission>("weir.submissions")).unwrap(),
        None
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_values_round_trip(
        secs in -50_000_000_000i64..50_000_000_000,
        nanos in 0u32..1_000_000_000,
        draws in proptest::collection::vec(any::<u64>(), 3),
        text in ".*",
        number in any::<i64>(),
        version in any::<u64>(),
        correlation in proptest::option::of("[a-z0-9-]{0,20}"),
    ) {
        let at = DateTime::from_timestamp(secs, nanos).unwrap();
        let mut submission = submissions().remove(1);
        submission.params = serde_json::json!([text.clone(), number, {"k": [text.clone()]}]);
        submission.scheduled_at = Some(at);
        submission.correlation_id = correlation.clone();
        submission.metadata.insert(text.clone(), text.clone());
        let history = HistoryRecord {
            at: Some(at),
            execution_id: root(),
            seq: version,
            entry: HistoryEntry::Event {
                version: Version(version),
                event: HistoryEvent::Persist {
                    value: PersistValue::RandomU64 {
                        min: draws[0],
                        max_exclusive: draws[1],
                        value: draws[2],
                    },
                },
            },
        };
        let finished = ExecutionFinished {
            execution_id: root(),
            ffqn: ffqn(),
            result: weir::model::ExecutionResult::Err(serde_json::json!(text)),
            finished_at: at,
            correlation_id: correlation,
        };
        let codec = Codec::single_object();
        let pos = RecordPosition::topic("t");
        let bytes = codec.encode("t", &submission).unwrap();
        prop_assert_eq!(codec.decode::<Submission>(&bytes, &pos).unwrap(), submission);
        let bytes = codec.encode("t", &history).unwrap();
        prop_assert_eq!(codec.decode::<HistoryRecord>(&bytes, &pos).unwrap(), history);
        let bytes = codec.encode("t", &finished).unwrap();
        prop_assert_eq!(codec.decode::<ExecutionFinished>(&bytes, &pos).unwrap(), finished);
    }
}

fn schedule_spec(overlap: weir_core::schedule::Overlap) -> weir_core::schedule::ScheduleSpec {
    weir_core::schedule::ScheduleSpec {
        cron: "0 30 9 * * Mon-Fri".to_owned(),
        timezone: "Europe/Prague".to_owned(),
        ffqn: "app:report/jobs.nightly".parse().unwrap(),
        params: serde_json::json!(["eu", {"depth": 3}]),
        overlap,
        catchup_window: chrono::Duration::seconds(90),
    }
}

#[test]
fn schedule_commands_round_trip_every_action() {
    use weir_core::schedule::{Overlap, ScheduleAction, ScheduleCommand};
    let at = DateTime::from_timestamp(1_790_000_000, 123_456_789).unwrap();
    let actions = Overlap::ALL
        .into_iter()
        .map(|o| ScheduleAction::Create(schedule_spec(o)))
        .chain([
            ScheduleAction::Pause,
            ScheduleAction::Resume,
            ScheduleAction::Delete,
            ScheduleAction::RunFinished("E_01J9ZQ3N4QX8V6Y2K7M5T0B1CD".parse().unwrap()),
        ]);
    let commands: Vec<ScheduleCommand> = actions
        .map(|action| ScheduleCommand {
            name: "nightly-report".to_owned(),
            command_id: "01J9ZQ3N4QX8V6Y2K7M5T0B1CE".to_owned(),
            action,
            sent_at: at,
        })
        .collect();
    both("weir.responses", &commands);
}

#[test]
fn schedule_states_round_trip() {
    use weir_core::schedule::{Overlap, ScheduleState, Status};
    let at = DateTime::from_timestamp(1_790_000_000, 123_456_789).unwrap();
    let states: Vec<ScheduleState> = [Status::Active, Status::Paused]
        .into_iter()
        .map(|status| ScheduleState {
            name: "nightly-report".to_owned(),
            generation: "01J9ZQ3N4QX8V6Y2K7M5T0B1CE".to_owned(),
            spec: schedule_spec(Overlap::CancelPrevious),
            status,
            last_tick: (status == Status::Active).then_some(at),
            next_tick: Some(at + chrono::Duration::days(1)),
            running: vec!["E_01J9ZQ3N4QX8V6Y2K7M5T0B1CD".parse().unwrap()],
            started: 7,
            skipped: 2,
            missed: 1,
            updated_at: at,
        })
        .collect();
    both("weir.state", &states);
}
