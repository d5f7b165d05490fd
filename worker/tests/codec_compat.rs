//! Backward compatibility: the current schemas read records written with every previous version
//! kept under `schemas/avro/history/`, in both wire formats; apache-avro's schema compatibility
//! check passes for every (previous, current) pair; the files on disk are the ones embedded.

mod codec_samples;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use codec_samples::*;
use weir::codec::schemas::{self, RecordSchema};
use weir::codec::{
    AvroRecord, Codec, Created, DlqEnvelope, DlqReason, EventRecord, ExecutionFinished,
    HistoryEntry, HistoryRecord, InMemoryRegistry, InboundEvent, RecordPosition, SchemaRegistry,
    StoredCorrelation, Submission, value_subject,
};
use weir::correlation::{CorrelationState, KeyedEvent};
use weir::model::Response;

fn avro_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/avro")
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn files_under(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir() {
            files_under(&entry.path(), &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".avsc") {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

#[test]
fn the_embedded_schemas_are_the_files_on_disk() {
    let mut on_disk = BTreeSet::new();
    files_under(&avro_dir(), "", &mut on_disk);
    let embedded: BTreeSet<String> = schemas::current()
        .iter()
        .chain(schemas::previous())
        .map(|s| s.file.to_string())
        .collect();
    assert_eq!(
        on_disk, embedded,
        "every .avsc under schemas/avro must be listed in codec/schemas.rs"
    );
    for s in schemas::current().iter().chain(schemas::previous()) {
        let text = std::fs::read_to_string(avro_dir().join(s.file)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json.to_string(), s.text, "{}", s.file);
        match &s.schema {
            Schema::Record(r) => {
                assert_eq!(r.name.name(), s.name, "{}", s.file);
                assert_eq!(
                    r.name.namespace(),
                    Some(weir::codec::NAMESPACE),
                    "{}",
                    s.file
                );
            }
            other => panic!("{} is not a record: {other:?}", s.file),
        }
    }
}

/// Collects every named type definition (record, enum, fixed) of a schema file's JSON.
fn named_types(json: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
    match json {
        serde_json::Value::Object(map) => {
            if let (Some(serde_json::Value::String(name)), Some(serde_json::Value::String(ty))) =
                (map.get("name"), map.get("type"))
                && ["record", "enum", "fixed"].contains(&ty.as_str())
            {
                out.insert(name.clone(), json.clone());
            }
            for v in map.values() {
                named_types(v, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| named_types(v, out)),
        _ => {}
    }
}

/// `json` with every reference to a named type of `defs` replaced by its definition, and
/// without `doc` and `namespace` (one namespace throughout): comparable across files.
fn expand(
    json: &serde_json::Value,
    defs: &BTreeMap<String, serde_json::Value>,
) -> serde_json::Value {
    match json {
        serde_json::Value::String(name) if defs.contains_key(name) => expand(&defs[name], defs),
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "doc" && *k != "namespace")
                .map(|(k, v)| {
                    // A field's or the record's own name is not a reference.
                    let v = if k == "name" {
                        v.clone()
                    } else {
                        expand(v, defs)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(|v| expand(v, defs)).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn shared_types_are_defined_identically_in_every_current_file() {
    // Each .avsc is self-contained (usable alone by any Avro client), so shared types such as
    // ExecutionResult or Instant are spelled out in several files; they must not drift apart.
    let mut seen: BTreeMap<String, (String, serde_json::Value)> = BTreeMap::new();
    for s in schemas::current() {
        let json: serde_json::Value = serde_json::from_str(&s.text).unwrap();
        let mut defs = BTreeMap::new();
        named_types(&json, &mut defs);
        for (name, def) in &defs {
            let expanded = expand(def, &defs);
            if let Some((file, other)) = seen.get(name) {
                assert_eq!(
                    &expanded, other,
                    "type {name} differs between {file} and {}",
                    s.file
                );
            } else {
                seen.insert(name.clone(), (s.file.to_string(), expanded));
            }
        }
    }
    for shared in [
        "ExecutionResult",
        "Instant",
        "Parent",
        "ChildKind",
        "Response",
    ] {
        assert!(seen.contains_key(shared), "{shared}");
    }
}

/// Every sample of `R`, written with a schema that differs from the current one only by an
/// extra trailing field (so that decoding must resolve every nested union, record and enum),
/// reads back equal: union branches are matched by name, not by shape.
fn check_full_resolution<R: AvroRecord + PartialEq + std::fmt::Debug>(records: &[R]) {
    let current = R::schema();
    let mut json: serde_json::Value = serde_json::from_str(&current.text).unwrap();
    json["fields"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "zz_extra", "type": "long", "default": 0}));
    let text = json.to_string();
    let writer = Schema::parse_str(&text).unwrap();
    let registry = Arc::new(InMemoryRegistry::new());
    let id = block_on(registry.register("x-value", &text)).unwrap();
    let codec = Codec::new(Some(registry));
    for record in records {
        let Value::Record(mut fields) = record.to_avro().unwrap() else {
            unreachable!()
        };
        fields.push(("zz_extra".into(), Value::Long(7)));
        let mut bytes = vec![0];
        bytes.extend_from_slice(&id.to_be_bytes());
        GenericDatumWriter::builder(&writer)
            .build()
            .unwrap()
            .write_value(&mut bytes, Value::Record(fields))
            .unwrap();
        let decoded =
            block_on(codec.decode_fetching::<R>(&bytes, &RecordPosition::topic("x"))).unwrap();
        assert_eq!(&decoded, record);
    }
}

#[test]
fn resolution_matches_union_branches_by_name() {
    check_full_resolution(&history_records());
    check_full_resolution(&responses());
    check_full_resolution(&submissions());
    check_full_resolution(&activity_requests());
    check_full_resolution(&activity_cancels());
    check_full_resolution(&execution_finished());
    check_full_resolution(&dlq_envelopes());
    check_full_resolution(&event_records());
    check_full_resolution(&correlation_commands());
    check_full_resolution(&correlation_states());
    check_full_resolution(&remembered_events());
    check_full_resolution(&pause_requests());
    check_full_resolution(&reset_requests());
    check_full_resolution(&reset_starts());
    check_full_resolution(&batch_commands());
    check_full_resolution(&batch_states());
    check_full_resolution(&batch_outcomes());
    check_full_resolution(&query_requests());
    check_full_resolution(&query_answers());
}

/// A `QueryErrorKind` a newer writer added (at the end, as the rules say) reads as `OTHER`,
/// the enum's default, with its message: an older asker still hears why.
#[test]
fn a_query_error_kind_from_a_newer_writer_reads_as_other() {
    use weir::query::{QueryAnswer, QueryErrorKind};
    let current = <QueryAnswer as AvroRecord>::schema();
    let mut json: serde_json::Value = serde_json::from_str(&current.text).unwrap();
    let kind = &mut json["fields"][2]["type"][1]["fields"][0]["type"];
    assert_eq!(kind["name"], "QueryErrorKind");
    let symbols = kind["symbols"].as_array_mut().unwrap();
    symbols.push("FROM_THE_FUTURE".into());
    let index = symbols.len() - 1;
    let text = json.to_string();
    let writer = Schema::parse_str(&text).unwrap();
    let registry = Arc::new(InMemoryRegistry::new());
    let id = block_on(registry.register("weir.answers-value", &text)).unwrap();
    let codec = Codec::new(Some(registry));
    let answer = query_answers()
        .into_iter()
        .find(|a| a.outcome.is_err())
        .unwrap();
    let value = Value::Record(vec![
        ("query_id".into(), Value::String(answer.query_id.clone())),
        (
            "execution_id".into(),
            Value::String(answer.execution_id.to_string()),
        ),
        (
            "outcome".into(),
            Value::Union(
                1,
                Box::new(Value::Record(vec![
                    (
                        "kind".into(),
                        Value::Enum(index as u32, "FROM_THE_FUTURE".into()),
                    ),
                    ("message".into(), Value::String("news".into())),
                ])),
            ),
        ),
        ("version".into(), Value::Long(3)),
        (
            "answered_at".into(),
            answer
                .to_avro()
                .unwrap()
                .clone()
                .record_field("answered_at"),
        ),
    ]);
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    GenericDatumWriter::builder(&writer)
        .build()
        .unwrap()
        .write_value(&mut bytes, value)
        .unwrap();
    let decoded: QueryAnswer =
        block_on(codec.decode_fetching(&bytes, &RecordPosition::topic("weir.answers"))).unwrap();
    let error = decoded.outcome.unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (QueryErrorKind::Other, "news")
    );
}

/// The field `name` of a record value.
trait RecordField {
    fn record_field(self, name: &str) -> Value;
}

impl RecordField for Value {
    fn record_field(self, name: &str) -> Value {
        let Value::Record(fields) = self else {
            panic!("not a record: {self:?}")
        };
        fields
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no field {name}"))
    }
}

#[test]
fn every_previous_version_is_readable_by_the_current_schema() {
    assert!(!schemas::previous().is_empty());
    for old in schemas::previous() {
        let current = schemas::current_named(old.name);
        assert_ne!(old.fingerprint, current.fingerprint, "{}", old.file);
        SchemaCompatibility::can_read(&old.schema, &current.schema).unwrap_or_else(|e| {
            panic!(
                "{} cannot be read by the current {}: {e}",
                old.file, current.file
            )
        });
    }
    // Every current schema reads itself, of course.
    for s in schemas::current() {
        SchemaCompatibility::can_read(&s.schema, &s.schema).unwrap();
    }
}

#[test]
fn the_check_catches_a_field_added_without_default() {
    let current = schemas::current_named("Submission");
    let mut json: serde_json::Value = serde_json::from_str(&current.text).unwrap();
    json["fields"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "region", "type": "string"}));
    let broken = Schema::parse_str(&json.to_string()).unwrap();
    assert!(SchemaCompatibility::can_read(&current.schema, &broken).is_err());
    // And the in-memory registry refuses it as a new version of the subject.
    let registry = InMemoryRegistry::new();
    block_on(registry.register("s-value", &current.text)).unwrap();
    assert!(block_on(registry.register("s-value", &json.to_string())).is_err());
}

/// Fields added to nested records since the first schemas (`Created.component`,
/// `Created.deadline`): dropped from a value written with an old schema that lacks them.
const NESTED_FIELDS_ADDED: &[&str] = &[
    "component",
    "deadline",
    "submitted_at",
    "ran",
    "reset_of",
    "slots",
];

/// `value` without the nested record fields `names`, at any depth.
fn without_fields(value: Value, names: &[&str]) -> Value {
    match value {
        Value::Record(fields) => Value::Record(
            fields
                .into_iter()
                .filter(|(name, _)| !names.contains(&name.as_str()))
                .map(|(name, v)| (name, without_fields(v, names)))
                .collect(),
        ),
        Value::Union(i, v) => Value::Union(i, Box::new(without_fields(*v, names))),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| without_fields(v, names))
                .collect(),
        ),
        other => other,
    }
}

/// `record`'s value with only the top-level fields that `old` has, and without the nested
/// fields added since `old`.
fn as_old_value<R: AvroRecord>(record: &R, old: &RecordSchema) -> Value {
    let Schema::Record(old_record) = &old.schema else {
        unreachable!()
    };
    let Value::Record(fields) = record.to_avro().unwrap() else {
        unreachable!()
    };
    let missing: Vec<&str> = NESTED_FIELDS_ADDED
        .iter()
        .copied()
        .filter(|name| !old.text.contains(&format!("\"name\":\"{name}\"")))
        .collect();
    Value::Record(
        fields
            .into_iter()
            .filter(|(name, _)| old_record.fields.iter().any(|f| &f.name == name))
            .map(|(name, v)| (name, without_fields(v, &missing)))
            .collect(),
    )
}

fn write_old(old: &RecordSchema, value: Value, header: &[u8]) -> Vec<u8> {
    let mut out = header.to_vec();
    GenericDatumWriter::builder(&old.schema)
        .build()
        .unwrap()
        .write_value(&mut out, value)
        .unwrap();
    out
}

/// Writes each of `records` with the previous schemas of `version` (`history/<version>/`, in
/// both framings) and reads it with the current codec; `expected` is what the current type
/// reads (new fields at their defaults).
fn check_old_records<R: AvroRecord + PartialEq + std::fmt::Debug>(
    version: &str,
    topic: &str,
    records: &[R],
    expected: impl Fn(&R) -> R,
) {
    let olds: Vec<_> = schemas::previous()
        .iter()
        .filter(|s| s.name == R::NAME && s.file.starts_with(&format!("history/{version}/")))
        .collect();
    assert!(!olds.is_empty());
    let registry: Arc<dyn SchemaRegistry> = Arc::new(InMemoryRegistry::new());
    let codec = Codec::new(Some(registry.clone()));
    let position = RecordPosition::topic(topic);
    for old in olds {
        // The old version was registered first (by an older Weir); then the current one.
        let old_id = block_on(registry.register(&value_subject(topic), &old.text)).unwrap();
        block_on(codec.register::<R>(topic)).unwrap();
        for record in records {
            let value = as_old_value(record, old);
            let mut single_object_header = vec![0xC3, 0x01];
            single_object_header.extend_from_slice(&old.fingerprint.to_le_bytes());
            let so = write_old(old, value.clone(), &single_object_header);
            let mut confluent_header = vec![0];
            confluent_header.extend_from_slice(&old_id.to_be_bytes());
            let cf = write_old(old, value, &confluent_header);

            let want = expected(record);
            assert_eq!(codec.decode::<R>(&so, &position).unwrap(), want);
            assert_eq!(
                block_on(codec.decode_fetching::<R>(&cf, &position)).unwrap(),
                want
            );
            assert_eq!(
                Codec::single_object().decode::<R>(&so, &position).unwrap(),
                want
            );
        }
    }
}

#[test]
fn v0_submissions_read_as_current_with_empty_metadata() {
    check_old_records("v0", "weir.submissions", &submissions(), |s| Submission {
        metadata: Default::default(),
        deadline: None,
        concurrency: None,
        tenant: None,
        ..s.clone()
    });
}

#[test]
fn v0_execution_finished_read_as_current_without_correlation_id() {
    check_old_records("v0", "weir.results", &execution_finished(), |f| {
        ExecutionFinished {
            correlation_id: None,
            ..f.clone()
        }
    });
}

/// v1 lacks only enum symbols added since (`DlqReason` MISROUTED, CONFLICT, REFUSED;
/// `ExecutionErrorKind` CONFLICT) and `Created.component`: its records read as they were
/// written.
#[test]
fn v1_records_read_as_current_unchanged() {
    // The samples v1 can hold: none with a symbol or a field added since (nobody wrote
    // those with v1).
    fn v1_can_hold(record: &impl std::fmt::Debug) -> bool {
        let text = format!("{record:?}");
        !text.contains("kind: Conflict")
            && !text.contains("component: Some")
            && !text.contains("Upgraded")
            && !holds_events(&text)
            && !holds_deadline(&text)
            && !holds_correlation(&text)
    }
    fn held<R: std::fmt::Debug>(records: Vec<R>) -> Vec<R> {
        let held: Vec<R> = records.into_iter().filter(v1_can_hold).collect();
        assert!(!held.is_empty());
        held
    }
    check_old_records(
        "v1",
        "weir.results",
        &held(execution_finished()),
        Clone::clone,
    );
    check_old_records(
        "v1",
        "weir.history",
        &held(timeless_history()),
        Clone::clone,
    );
    check_old_records(
        "v1",
        "weir.responses",
        &held(timeless_responses()),
        Clone::clone,
    );
    let dlq: Vec<DlqEnvelope> = dlq_envelopes()
        .into_iter()
        .filter(|e| {
            !matches!(
                e.reason,
                DlqReason::Misrouted | DlqReason::Conflict | DlqReason::Refused
            )
        })
        .collect();
    assert!(!dlq.is_empty());
    check_old_records("v1", "weir.dlq", &dlq, Clone::clone);
}

/// v2 lacks only `Created.component` (the build an execution is pinned to) and the
/// `Upgraded` entry: its history records read as they were written, pinned to nothing.
#[test]
fn v2_history_records_read_as_current_unpinned() {
    let held: Vec<HistoryRecord> = timeless_history()
        .into_iter()
        .filter(|r| {
            let text = format!("{r:?}");
            !text.contains("component: Some")
                && !text.contains("Upgraded")
                && !holds_events(&text)
                && !holds_deadline(&text)
                && !holds_correlation(&text)
        })
        .collect();
    assert!(
        held.iter()
            .any(|r| matches!(r.entry, HistoryEntry::Created(_)))
    );
    check_old_records("v2", "weir.history", &held, Clone::clone);
}

/// Whether a sample (its `Debug` text) holds what only v4 has: event waits and events.
fn holds_events(text: &str) -> bool {
    text.contains("EventRequest")
        || text.contains("EventDelivered")
        || text.contains("EventReceived")
        || text.contains("CancelRequested")
}

/// v3 (before events) history records read as current records unchanged.
#[test]
fn v3_history_records_read_as_current_unchanged() {
    let held: Vec<HistoryRecord> = timeless_history()
        .into_iter()
        .filter(|r| {
            let text = format!("{r:?}");
            !holds_events(&text) && !holds_deadline(&text) && !holds_correlation(&text)
        })
        .collect();
    assert!(
        held.iter()
            .any(|r| matches!(r.entry, HistoryEntry::Upgraded { .. }))
    );
    check_old_records("v3", "weir.history", &held, Clone::clone);
}

/// Whether a sample (its `Debug` text) holds what only v5 has: a deadline.
fn holds_deadline(text: &str) -> bool {
    text.contains("deadline: Some")
}

/// v4 (before deadlines) submissions and history records read as current ones without a
/// deadline.
#[test]
fn v4_records_read_as_current_without_deadlines() {
    assert!(submissions().iter().any(|s| s.deadline.is_some()));
    check_old_records("v4", "weir.submissions", &submissions(), |s| Submission {
        deadline: None,
        concurrency: None,
        tenant: None,
        ..s.clone()
    });
    let records = held_before_correlation(timeless_history());
    assert!(holds_deadline(&format!("{records:?}")));
    check_old_records("v4", "weir.history", &records, |r| match &r.entry {
        HistoryEntry::Created(c) => HistoryRecord {
            entry: HistoryEntry::Created(Created {
                deadline: None,
                ..c.clone()
            }),
            ..r.clone()
        },
        _ => r.clone(),
    });
}

/// Whether a sample (its `Debug` text) holds what only v6 has: a correlation key.
fn holds_correlation(text: &str) -> bool {
    text.contains("Correlate {") || text.contains("correlation_key: Some")
}

/// The history records v5 and earlier can hold (no `Correlate`).
fn held_before_correlation(records: Vec<HistoryRecord>) -> Vec<HistoryRecord> {
    let held: Vec<HistoryRecord> = records
        .into_iter()
        .filter(|r| !holds_correlation(&format!("{r:?}")))
        .collect();
    assert!(!held.is_empty());
    held
}

/// v5 (before correlation keys) events read as current ones: for an execution, without a
/// `correlation_key`; for a key (a target that is not an execution id: an older client could
/// send it), without `returned_by`. Its history records (no `Correlate`) read unchanged.
#[test]
fn v5_records_read_as_current_without_correlation() {
    let events = inbound_events();
    assert!(holds_correlation(&format!("{events:?}")));
    check_old_records("v5", "weir.events", &events, |e| InboundEvent {
        correlation_key: None,
        waited_until: None,
        ..e.clone()
    });
    let keyed = keyed_events();
    assert!(keyed.iter().any(|k| k.returned_by.is_some()));
    check_old_records("v5", "weir.events", &keyed, |k| KeyedEvent {
        returned_by: None,
        ..k.clone()
    });
    check_old_records("v5", "weir.events", &event_records(), |r| match r {
        EventRecord::Execution(e) => EventRecord::Execution(InboundEvent {
            correlation_key: None,
            waited_until: None,
            ..e.clone()
        }),
        EventRecord::Keyed(k) => EventRecord::Keyed(KeyedEvent {
            returned_by: None,
            ..k.clone()
        }),
    });
    let records = timeless_history();
    assert!(holds_correlation(&format!("{records:?}")));
    check_old_records(
        "v5",
        "weir.history",
        &held_before_correlation(records),
        Clone::clone,
    );
}

/// v6 (before events could come before their execution) events read as current ones without
/// `waited_until`, correlation states without `waits_until`; a v6 reader (an older worker
/// in a rolling deploy) reads current records, ignoring both.
#[test]
fn v6_records_read_as_current_without_early_waits() {
    let events = inbound_events();
    assert!(events.iter().any(|e| e.waited_until.is_some()));
    check_old_records("v6", "weir.events", &events, |e| InboundEvent {
        waited_until: None,
        ..e.clone()
    });
    let states = correlation_states();
    assert!(states.iter().any(|s| s.state.waits_until.is_some()));
    check_old_records("v6", "weir.state", &states, |s| StoredCorrelation {
        state: CorrelationState {
            waits_until: None,
            cancel: None,
            ..s.state.clone()
        },
        ..s.clone()
    });
}

/// Before cancellations could be kept for an execution not submitted yet: a `CancelRequest`
/// had no `waited_until`, a `CorrelationState` no `cancel`.
#[test]
fn v7_records_read_as_current_without_kept_cancellations() {
    let requests = cancel_requests();
    assert!(requests.iter().any(|c| c.waited_until.is_some()));
    check_old_records("v7", "weir.responses", &requests, |c| {
        weir::codec::CancelRequest {
            waited_until: None,
            ..c.clone()
        }
    });
    let states = correlation_states();
    assert!(states.iter().any(|s| s.state.cancel.is_some()));
    check_old_records("v7", "weir.state", &states, |s| StoredCorrelation {
        state: CorrelationState {
            cancel: None,
            ..s.state.clone()
        },
        ..s.clone()
    });
}

/// Until Weir computed the Parsing Canonical Form itself, apache-avro's form (which keeps a
/// logical-typed primitive as `{"type":"long"}`) named the schemas with other fingerprints
/// than every other Avro implementation. Records written then are still read.
#[test]
fn records_framed_with_the_legacy_fingerprint_still_decode() {
    let schema = schemas::current_named("ActivityRequest");
    let legacy = schema
        .legacy_fingerprint
        .expect("ActivityRequest uses a logical type, so its legacy fingerprint differs");
    let form = schemas::parsing_canonical_form(&schema.schema);
    assert!(
        form.contains(r#"{"name":"micros","type":"long"}"#),
        "{form}"
    );
    assert!(!form.contains(r#"{"type":"long"}"#), "{form}");

    let codec = Codec::single_object();
    for request in activity_requests() {
        let mut bytes = codec.encode("weir.activity.x", &request).unwrap();
        assert_eq!(&bytes[2..10], &schema.fingerprint.to_le_bytes());
        bytes[2..10].copy_from_slice(&legacy.to_le_bytes());
        let position = RecordPosition::at("weir.activity.x", 0, 0);
        let decoded: weir::codec::ActivityRequest = codec.decode(&bytes, &position).unwrap();
        assert_eq!(decoded, request);
    }
    // A schema without logical types (Response before it said when an answer ran) has one
    // fingerprint.
    let timeless = schemas::previous()
        .iter()
        .find(|s| s.file == "history/v8/response.avsc")
        .expect("v8 Response");
    assert!(!timeless.text.contains("logicalType"));
    assert_eq!(timeless.legacy_fingerprint, None);
}

/// A response as a Weir before true timings (schema v8) wrote it: no answer says when it ran.
fn timeless(response: &Response) -> Response {
    match response {
        Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ..
        } => Response::child_finished(child_execution_id.clone(), result.clone()),
        other => other.clone(),
    }
}

/// A history record as a Weir before true timings wrote it: it does not say when it happened,
/// its creation when it was submitted, its answer when it ran.
fn timeless_record(record: &HistoryRecord) -> HistoryRecord {
    let entry = match &record.entry {
        HistoryEntry::Created(c) => HistoryEntry::Created(Created {
            submitted_at: None,
            ..c.clone()
        }),
        HistoryEntry::ResponseAppended(r) => HistoryEntry::ResponseAppended(timeless(r)),
        other => other.clone(),
    };
    HistoryRecord {
        entry,
        at: None,
        ..record.clone()
    }
}

fn timeless_history() -> Vec<HistoryRecord> {
    before_pause(history_records())
        .iter()
        .map(timeless_record)
        .collect()
}

/// Whether a sample (its `Debug` text) holds what only the current schema has: a pause or a
/// resume.
fn holds_pause(text: &str) -> bool {
    text.contains("Paused {") || text.contains("Resumed {")
}

/// The history records v9 and earlier can hold (no `Paused`, no `Resumed`, nothing of a
/// reset).
fn before_pause(records: Vec<HistoryRecord>) -> Vec<HistoryRecord> {
    let held: Vec<HistoryRecord> = before_reset(records)
        .into_iter()
        .filter(|r| !holds_pause(&format!("{r:?}")))
        .collect();
    assert!(!held.is_empty());
    held
}

/// Whether a sample (its `Debug` text) holds what only the current schema has: a `Reset`
/// entry, or a creation by a reset.
fn holds_reset(text: &str) -> bool {
    text.contains("Reset {")
        || text.contains("reset_of: Some")
        // Concurrency slots (v12) came after reset: no earlier version holds them either.
        || text.contains("SlotGranted {")
        || text.contains("SlotClaim {")
}

/// The history records v10 and earlier can hold (no `Reset`, no `Created.reset_of`, nothing
/// of concurrency slots).
fn before_reset(records: Vec<HistoryRecord>) -> Vec<HistoryRecord> {
    let held: Vec<HistoryRecord> = records
        .into_iter()
        .filter(|r| !holds_reset(&format!("{r:?}")))
        .collect();
    assert!(!held.is_empty());
    held
}

fn timeless_responses() -> Vec<Response> {
    responses().iter().map(timeless).collect()
}

/// Before true timings: a history record did not say when it happened (`at`), a creation
/// when it was submitted, a child's answer (in history and on `weir.responses`) when it ran.
/// Such records read as current ones without them.
#[test]
fn v8_records_read_as_current_without_timings() {
    let records = before_pause(history_records());
    let text = format!("{records:?}");
    assert!(text.contains("at: Some") && text.contains("submitted_at: Some"));
    assert!(text.contains("ran: Some"));
    check_old_records("v8", "weir.history", &records, timeless_record);
    check_old_records("v8", "weir.responses", &responses(), timeless);
}

/// v9 (before pause and resume) history records read as current ones unchanged; the samples
/// hold both entries, which only the current schema has.
#[test]
fn v9_history_records_read_as_current_unchanged() {
    let all = history_records();
    assert!(holds_pause(&format!("{all:?}")));
    check_old_records("v9", "weir.history", &before_pause(all), Clone::clone);
}

/// v10 (before reset) history records read as current ones unchanged: a creation that no
/// reset made (`reset_of` null); the samples hold a `Reset` entry and a creation by a reset,
/// which only the current schema has.
#[test]
fn v10_history_records_read_as_current_unchanged() {
    let all = history_records();
    assert!(holds_reset(&format!("{all:?}")));
    let held = before_reset(all);
    assert!(holds_pause(&format!("{held:?}")));
    assert!(
        held.iter()
            .any(|r| matches!(r.entry, HistoryEntry::Created(_)))
    );
    check_old_records("v10", "weir.history", &held, Clone::clone);
}

/// v11 (before concurrency slots) submissions and reset starts read as current ones without
/// a concurrency key; the samples hold keys, with a limit and without.
#[test]
fn v11_records_read_as_current_without_concurrency_keys() {
    let all = submissions();
    assert!(
        all.iter()
            .any(|s| s.concurrency.as_ref().is_some_and(|k| k.limit.is_none()))
    );
    assert!(
        all.iter()
            .any(|s| s.concurrency.as_ref().is_some_and(|k| k.limit.is_some()))
    );
    check_old_records("v11", "weir.submissions", &all, |s| Submission {
        concurrency: None,
        tenant: None,
        ..s.clone()
    });
    let starts = reset_starts();
    assert!(starts.iter().any(|s| s.submission.concurrency.is_some()));
    // Their kept entries are history records of the current schema (nested bytes).
    check_old_records("v11", "weir.submissions", &starts, |s| {
        weir::codec::records::ResetStart {
            submission: Submission {
                concurrency: None,
                ..s.submission.clone()
            },
            ..s.clone()
        }
    });
}

/// v12 (before batch resets and parked activities' pauses) reset requests read as current
/// ones cutting at their seq, and pause requests as ones that name no parked activity; the
/// samples hold a request for the latest point and a pause that names one.
#[test]
fn v12_requests_read_as_current_without_latest_points_or_parked_activities() {
    use weir::codec::records::{PauseRequest, ResetPoint, ResetRequest};
    let resets = reset_requests();
    assert!(resets.iter().any(|r| r.to == ResetPoint::Latest));
    check_old_records("v12", "weir.responses", &resets, |r| ResetRequest {
        to: match r.to {
            ResetPoint::Latest => ResetPoint::Seq(0),
            seq => seq,
        },
        ..r.clone()
    });
    let pauses = pause_requests();
    assert!(pauses.iter().any(|p| p.parked.is_some()));
    check_old_records("v12", "weir.responses", &pauses, |p| PauseRequest {
        parked: None,
        ..p.clone()
    });
}

/// v13 (before fairness) submissions read as current ones without a tenant; the samples hold
/// one with a tenant and ones without.
#[test]
fn v13_submissions_read_as_current_without_tenants() {
    let all = submissions();
    assert!(all.iter().any(|s| s.tenant.is_some()));
    assert!(all.iter().any(|s| s.tenant.is_none()));
    check_old_records("v13", "weir.submissions", &all, |s| Submission {
        tenant: None,
        ..s.clone()
    });
}
