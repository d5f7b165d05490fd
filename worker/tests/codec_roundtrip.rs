//! Every record type and every history event / response / result variant survives both wire
//! formats: Avro single-object encoding and the Confluent wire format (in-memory registry).

mod codec_samples;

use std::fmt::Debug;
use std::sync::Arc;

use chrono::DateTime;
use codec_samples::*;
use proptest::prelude::*;
use weir::codec::{
    AvroRecord, Codec, ExecutionFinished, HistoryEntry, HistoryRecord, InMemoryRegistry,
    InboundEvent, RecordPosition, SchemaRegistry, Submission, WireFormat, dlq_headers,
};
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
fn cancel_requests_round_trip() {
    both("weir.responses", &cancel_requests());
}

#[test]
fn events_round_trip() {
    both("weir.events", &inbound_events());
}

/// An event that breaks the rules (its name, its id, its payload) is refused by the decoder:
/// it never reaches an execution, and the DLQ says why.
#[test]
fn events_that_break_the_rules_do_not_decode() {
    let position = RecordPosition::at("weir.events", 0, 7);
    let codec = Codec::single_object();
    for (field, bad) in [
        ("name", "with space"),
        ("event_id", ""),
        ("payload", "{not json"),
        ("target", "E_bad"),
    ] {
        let mut value = inbound_events().remove(0).to_avro().unwrap();
        if let apache_avro::types::Value::Record(fields) = &mut value {
            for (name, v) in fields.iter_mut() {
                if name == field {
                    *v = apache_avro::types::Value::String(bad.into());
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
        let err = codec.decode::<InboundEvent>(&bytes, &position).unwrap_err();
        assert!(err.to_string().contains(field), "{field}: {err}");
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
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), 6 + 10, "{kinds:?}");
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
