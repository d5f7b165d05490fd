//! Bad input gives the right typed error, naming the position and the schema; never a panic.

mod codec_samples;

use std::sync::Arc;

use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use codec_samples::*;
use proptest::prelude::*;
use weir::codec::{
    AvroRecord, Codec, DecodeError, DecodeErrorKind, DlqReason, HistoryRecord, HttpRegistry,
    InMemoryRegistry, RecordPosition, ResetStart, SchemaRef, Submission,
};
use weir::model::Response;

fn pos() -> RecordPosition {
    RecordPosition::at("weir.submissions", 4, 1234)
}

fn decode_submission(bytes: &[u8]) -> DecodeError {
    Codec::single_object()
        .decode::<Submission>(bytes, &pos())
        .unwrap_err()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The bytes of `value` written with the current Submission schema, single-object framed.
fn raw_submission(value: Value) -> Vec<u8> {
    let rs = Submission::schema();
    let mut out = vec![0xC3, 0x01];
    out.extend_from_slice(&rs.fingerprint.to_le_bytes());
    GenericDatumWriter::builder(&rs.schema)
        .build()
        .unwrap()
        .write_value(&mut out, value)
        .unwrap();
    out
}

fn with_field(name: &str, new: Value) -> Value {
    let Value::Record(mut fields) = submissions()[1].to_avro().unwrap() else {
        unreachable!()
    };
    for (k, v) in &mut fields {
        if k == name {
            *v = new.clone();
        }
    }
    Value::Record(fields)
}

#[test]
fn errors_name_the_record_and_its_position() {
    let e = decode_submission(&[]);
    assert!(matches!(*e.kind, DecodeErrorKind::Empty));
    let text = e.to_string();
    assert!(
        text.contains("Submission")
            && text.contains("weir.submissions")
            && text.contains("partition 4")
            && text.contains("offset 1234"),
        "{text}"
    );
    assert_eq!(e.dlq_reason(), DlqReason::Undecodable);
    assert!(!e.is_transient());
}

#[test]
fn unknown_framing() {
    let e = decode_submission(b"{\"json\": true}");
    assert!(
        matches!(*e.kind, DecodeErrorKind::UnknownFraming { first: b'{' }),
        "{e}"
    );
    let e = decode_submission(&[0xC3, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(matches!(
        *e.kind,
        DecodeErrorKind::UnknownFraming { first: 0xC3 }
    ));
}

#[test]
fn truncated_headers() {
    for bytes in [&[0xC3][..], &[0xC3, 0x01, 1, 2, 3][..]] {
        let e = decode_submission(bytes);
        assert!(
            matches!(
                *e.kind,
                DecodeErrorKind::TruncatedHeader {
                    framing: "single-object",
                    needed: 10,
                    ..
                }
            ),
            "{e}"
        );
    }
    let e = decode_submission(&[0, 0, 0, 1]);
    assert!(matches!(
        *e.kind,
        DecodeErrorKind::TruncatedHeader {
            framing: "Confluent",
            len: 4,
            needed: 5
        }
    ));
}

#[test]
fn unknown_fingerprint() {
    let mut bytes = Codec::encode_single_object("t", &submissions()[0]).unwrap();
    bytes[2..10].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
    let e = decode_submission(&bytes);
    assert!(matches!(
        *e.kind,
        DecodeErrorKind::UnknownSchema {
            schema: SchemaRef::Fingerprint(0x0123_4567_89ab_cdef)
        }
    ));
    assert!(
        e.to_string().contains("fingerprint 0x0123456789abcdef"),
        "{e}"
    );
    assert_eq!(e.dlq_reason(), DlqReason::UnknownSchema);
}

#[test]
fn unknown_schema_id_without_and_with_registry() {
    let bytes = [0, 0, 0, 0, 42, 2, 0];
    // No registry: the id cannot be known.
    let e = decode_submission(&bytes);
    assert!(matches!(
        *e.kind,
        DecodeErrorKind::UnknownSchema {
            schema: SchemaRef::RegistryId(42)
        }
    ));
    assert!(e.to_string().contains("schema id 42"), "{e}");
    let codec = Codec::single_object();
    let e = block_on(codec.decode_fetching::<Submission>(&bytes, &pos())).unwrap_err();
    assert!(matches!(*e.kind, DecodeErrorKind::UnknownSchema { .. }));
    // A registry that does not have it.
    let codec = Codec::new(Some(Arc::new(InMemoryRegistry::new())));
    let e = block_on(codec.decode_fetching::<Submission>(&bytes, &pos())).unwrap_err();
    assert!(
        matches!(
            *e.kind,
            DecodeErrorKind::UnknownSchema {
                schema: SchemaRef::RegistryId(42)
            }
        ),
        "{e}"
    );
    assert_eq!(e.dlq_reason(), DlqReason::UnknownSchema);
}

#[test]
fn unreachable_registry_is_a_transient_error() {
    // Nothing listens on port 9 (discard) locally.
    let registry = HttpRegistry::new("http://127.0.0.1:9").unwrap();
    let codec = Codec::new(Some(Arc::new(registry)));
    let e = block_on(codec.decode_fetching::<Submission>(&[0, 0, 0, 0, 7, 0], &pos())).unwrap_err();
    assert!(
        matches!(
            *e.kind,
            DecodeErrorKind::Registry {
                schema: SchemaRef::RegistryId(7),
                transient: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_transient());
}

#[test]
fn every_truncation_of_every_record_is_an_error() {
    let codec = Codec::single_object();
    let check = |bytes: &[u8], decode: &dyn Fn(&[u8]) -> Result<(), DecodeError>| {
        for cut in 0..bytes.len() {
            let Err(e) = decode(&bytes[..cut]) else {
                panic!("cut at {cut} of {} decoded: {bytes:02x?}", bytes.len())
            };
            assert!(
                matches!(
                    *e.kind,
                    DecodeErrorKind::Empty
                        | DecodeErrorKind::TruncatedHeader { .. }
                        | DecodeErrorKind::Body { .. }
                        | DecodeErrorKind::Field { .. }
                ),
                "cut at {cut}: {e}"
            );
        }
    };
    for r in history_records() {
        let bytes = codec.encode("weir.history", &r).unwrap();
        check(&bytes, &|b| {
            codec.decode::<HistoryRecord>(b, &pos()).map(|_| ())
        });
    }
    for r in submissions() {
        let bytes = codec.encode("weir.submissions", &r).unwrap();
        check(&bytes, &|b| {
            codec.decode::<Submission>(b, &pos()).map(|_| ())
        });
    }
}

#[test]
fn trailing_bytes() {
    let mut bytes = Codec::encode_single_object("t", &submissions()[0]).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    let e = decode_submission(&bytes);
    assert!(
        matches!(*e.kind, DecodeErrorKind::TrailingBytes { count: 3, .. }),
        "{e}"
    );
}

#[test]
fn a_record_of_another_type_is_incompatible() {
    let bytes = Codec::encode_single_object("t", &submissions()[0]).unwrap();
    let e = Codec::single_object()
        .decode::<Response>(&bytes, &pos())
        .unwrap_err();
    assert!(
        matches!(*e.kind, DecodeErrorKind::Incompatible { ref writer, .. } if writer == "dev.weir.v1.Submission"),
        "{e}"
    );
}

#[test]
fn bad_field_values_name_the_field() {
    let cases = [
        (
            with_field("execution_id", Value::String("E_nope".into())),
            "execution_id",
        ),
        (
            with_field("ffqn", Value::String("not a function".into())),
            "ffqn",
        ),
        (with_field("params", Value::String("[1,".into())), "params"),
        (
            with_field("params", Value::String("{\"a\": 1}".into())),
            "params",
        ),
    ];
    for (value, field) in cases {
        let e = decode_submission(&raw_submission(value));
        match &*e.kind {
            DecodeErrorKind::Field { path, .. } => assert_eq!(path, field, "{e}"),
            other => panic!("{field}: {other}"),
        }
        assert_eq!(e.dlq_reason(), DlqReason::Undecodable);
    }
    // Nested: the parent's join set id.
    let Value::Union(1, parent) = with_field("x", Value::Null)
        .clone()
        .into_record_field("parent")
    else {
        unreachable!()
    };
    let Value::Record(mut parent) = *parent else {
        unreachable!()
    };
    parent[1].1 = Value::String("g:01".into());
    let e = decode_submission(&raw_submission(with_field(
        "parent",
        Value::Union(1, Box::new(Value::Record(parent))),
    )));
    match &*e.kind {
        DecodeErrorKind::Field { path, .. } => assert_eq!(path, "parent.join_set_id", "{e}"),
        other => panic!("{other}"),
    }
}

/// A reset's start whose history records are not the new execution's 1, 2, … in order, or
/// not records at all, does not decode: the error names the record in the history.
#[test]
fn a_reset_starts_history_must_be_the_new_executions_in_order() {
    let codec = Codec::single_object();
    let start = reset_starts().remove(1);
    let value = start.to_avro().unwrap();
    let with_history = |change: &dyn Fn(&mut Vec<Value>)| {
        let Value::Record(mut fields) = value.clone() else {
            unreachable!()
        };
        for (name, field) in &mut fields {
            if let ("history", Value::Array(items)) = (name.as_str(), field) {
                change(items);
            }
        }
        let rs = ResetStart::schema();
        let mut out = vec![0xC3, 0x01];
        out.extend_from_slice(&rs.fingerprint.to_le_bytes());
        GenericDatumWriter::builder(&rs.schema)
            .build()
            .unwrap()
            .write_value(&mut out, Value::Record(fields))
            .unwrap();
        out
    };
    let other = Codec::encode_single_object(
        "weir.history",
        &HistoryRecord {
            execution_id: root(),
            seq: 1,
            entry: start.entries[0].clone(),
            at: None,
        },
    )
    .unwrap();
    /// Changes the history's records.
    type Change<'a> = &'a dyn Fn(&mut Vec<Value>);
    let cases: [(Change, &str); 4] = [
        (&|items| items.swap(0, 1), "history[0].seq"),
        (
            &|items| items[0] = Value::Bytes(other.clone()),
            "history[0].execution_id",
        ),
        (
            &|items| items[2] = Value::Bytes(vec![0xC3, 0x01, 0, 0]),
            "history[2]",
        ),
        (
            &|items| items[1] = Value::Bytes(other[..other.len() - 1].to_vec()),
            "history[1]",
        ),
    ];
    for (change, path) in cases {
        let e = codec
            .decode::<ResetStart>(&with_history(change), &pos())
            .unwrap_err();
        match &*e.kind {
            DecodeErrorKind::Field { path: at, .. } => assert_eq!(at, path, "{e}"),
            other => panic!("{path}: {other}"),
        }
        assert_eq!(e.dlq_reason(), DlqReason::Undecodable);
    }
    // Untouched, it reads back.
    assert_eq!(
        codec
            .decode::<ResetStart>(&with_history(&|_| {}), &pos())
            .unwrap(),
        start
    );
}

trait RecordField {
    fn into_record_field(self, name: &str) -> Value;
}

impl RecordField for Value {
    fn into_record_field(self, name: &str) -> Value {
        match self {
            Value::Record(fields) => fields.into_iter().find(|(k, _)| k == name).unwrap().1,
            _ => unreachable!(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..200), framing in 0..3u8) {
        let codec = Codec::single_object();
        let mut bytes = match framing {
            0 => {
                let mut b = vec![0xC3, 0x01];
                b.extend_from_slice(&HistoryRecord::schema().fingerprint.to_le_bytes());
                b
            }
            1 => vec![0xC3, 0x01],
            _ => vec![],
        };
        bytes.extend_from_slice(&tail);
        let _ = codec.decode::<HistoryRecord>(&bytes, &pos());
        let _ = codec.decode::<Submission>(&bytes, &pos());
    }

    #[test]
    fn corrupted_records_never_panic(index in 0usize..40, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let records = history_records();
        let record = &records[index % records.len()];
        let codec = Codec::single_object();
        let mut bytes = codec.encode("weir.history", record).unwrap();
        for (at, byte) in flips {
            let at = 10 + at % (bytes.len() - 10);
            bytes[at] ^= byte;
        }
        let _ = codec.decode::<HistoryRecord>(&bytes, &pos());
    }
}

/// What the workflow worker reads (issue 11 items 9 and 15): a submission whose function name
/// or params do not parse, and an answer whose value is not JSON, still decode, with the
/// reason, because the execution they name can be told.
#[test]
fn the_workflow_workers_inputs_keep_what_names_the_execution() {
    use weir::codec::{ResponseInput, SubmissionInput};
    use weir::model::{ExecutionErrorKind, ExecutionResult};

    let codec = Codec::single_object();
    let bad_name = raw_submission(with_field("ffqn", Value::String("not a function".into())));
    let input = codec
        .decode::<SubmissionInput>(&bad_name, &pos())
        .expect("decodes");
    assert_eq!(input.submission.ffqn, weir_core::records::unparsable_ffqn());
    assert!(
        input
            .ffqn_error
            .as_deref()
            .is_some_and(|e| e.contains("not a function")),
        "{input:?}"
    );
    let bad_params = raw_submission(with_field("params", Value::String("[1,".into())));
    let input = codec
        .decode::<SubmissionInput>(&bad_params, &pos())
        .expect("decodes");
    assert!(input.params_error.is_some() && input.ffqn_error.is_none());

    // A child's answer with an `ok` value that is not JSON text.
    let response = responses()
        .into_iter()
        .find(|r| {
            matches!(
                r,
                Response::ChildExecutionFinished {
                    result: ExecutionResult::Ok(_),
                    ..
                }
            )
        })
        .expect("a sample answer");
    let Response::ChildExecutionFinished {
        child_execution_id, ..
    } = &response
    else {
        unreachable!()
    };
    let mut value = response.to_avro().expect("to avro");
    fn garble(v: &mut Value) {
        match v {
            Value::Record(fields) => {
                for (name, field) in fields {
                    if name == "value" {
                        *field = Value::String("{oops".into());
                    } else {
                        garble(field);
                    }
                }
            }
            Value::Union(_, inner) => garble(inner),
            _ => {}
        }
    }
    garble(&mut value);
    let rs = Response::schema();
    let mut bytes = vec![0xC3, 0x01];
    bytes.extend_from_slice(&rs.fingerprint.to_le_bytes());
    GenericDatumWriter::builder(&rs.schema)
        .build()
        .unwrap()
        .write_value(&mut bytes, value)
        .unwrap();
    assert!(codec.decode::<Response>(&bytes, &pos()).is_err());
    let input = codec
        .decode::<ResponseInput>(&bytes, &pos())
        .expect("decodes");
    assert!(input.value_error.is_some(), "{input:?}");
    match &input.response {
        Response::ChildExecutionFinished {
            child_execution_id: id,
            result: ExecutionResult::ExecutionError(e),
            ..
        } => {
            assert_eq!(id, child_execution_id);
            assert_eq!(e.kind, ExecutionErrorKind::InvalidResponse);
            assert!(e.reason.contains("{oops"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
