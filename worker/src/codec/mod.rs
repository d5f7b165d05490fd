//! Wire formats of the records on every topic: Avro, with the schemas of `schemas/avro/`.
//!
//! - [`records`]: the record types that are not model types ([`Submission`],
//!   [`ActivityRequest`], [`HistoryRecord`], [`ExecutionFinished`], [`DlqEnvelope`]);
//!   `weir.responses` carries the model's [`Response`](crate::model::Response).
//! - [`AvroRecord`]: conversion of each record type to and from Avro values.
//! - [`Codec`]: encodes a record for a topic and decodes one, in either framing:
//!   - **Avro single-object encoding** (no schema registry configured):
//!     `C3 01` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema + body;
//!   - **Confluent wire format** (a schema registry configured): `00` + the 4-byte big-endian
//!     schema id + body, ids registered under the subject `<topic>-value`.
//!
//!   Decoding accepts both framings whatever the configuration, finds the writer schema (by
//!   fingerprint among the current and previous schemas, or by id in the registry) and resolves
//!   it to the current schema, so records written by older versions read as current records.
//! - [`registry`]: the [`SchemaRegistry`] seam, [`InMemoryRegistry`], [`HttpRegistry`].
//!
//! Typical use by a Kafka worker:
//!
//! ```ignore
//! let codec = Codec::new(registry_url.map(|u| Arc::new(HttpRegistry::new(&u)?) as _));
//! codec.register::<Submission>("weir.submissions").await?; // once, at start; no-op without registry
//! let bytes = codec.encode("weir.submissions", &submission)?;
//! let pos = RecordPosition::at(msg.topic(), msg.partition(), msg.offset());
//! match codec.decode_fetching::<Submission>(payload, &pos).await {
//!     Ok(s) => …,
//!     Err(e) if e.is_transient() => /* registry down: retry later */,
//!     Err(e) => /* to weir.dlq with e.dlq_reason() and e.to_string() */,
//! }
//! ```

mod batch;
mod concurrency;
mod control;
mod convert;
mod dlq;
pub mod error;
mod events;
mod history;
mod query;
pub use weir_core::records;
pub mod registry;
mod reset;
mod resolve;
mod response;
pub mod schemas;
mod state;
mod submission;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;

pub use convert::AvroRecord;
pub use error::{
    DecodeError, DecodeErrorKind, EncodeError, FieldError, RecordPosition, RegistryError, SchemaRef,
};
pub use events::EventRecord;
pub use records::{
    ActivityCancel, ActivityRequest, CancelRequest, Created, DlqEnvelope, DlqHeader, DlqReason,
    ExecutionFinished, HistoryEntry, HistoryRecord, InboundEvent, ParentRef, PauseAction,
    PauseRequest, ReceivedEvent, ResetOf, ResetRequest, ResetStart, ResetThen, Submission,
    UpgradeRequest, dlq_headers,
};
pub use registry::{HttpRegistry, InMemoryRegistry, SchemaRegistry, value_subject};
pub use response::ResponseInput;
pub use schemas::{NAMESPACE, RecordSchema};
pub use state::StoredCorrelation;
pub use submission::SubmissionInput;

/// The magic bytes of Avro single-object encoding.
pub const SINGLE_OBJECT_MAGIC: [u8; 2] = [0xC3, 0x01];
/// The magic byte of the Confluent wire format.
pub const CONFLUENT_MAGIC: u8 = 0x00;
const SINGLE_OBJECT_HEADER_LEN: usize = 10;
const CONFLUENT_HEADER_LEN: usize = 5;

/// Which framing [`Codec::encode`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireFormat {
    /// `C3 01` + 8-byte CRC-64-AVRO fingerprint + body.
    SingleObject,
    /// `00` + 4-byte big-endian schema registry id + body.
    Confluent,
}

/// A schema the registry would not register at start-up.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot register the schema of {record} for topic `{topic}` (subject `{subject}`): {source}"
)]
pub struct RegisterError {
    pub topic: String,
    pub subject: String,
    pub record: &'static str,
    pub source: Box<RegistryError>,
}

/// Splits `bytes` into the writer schema's reference and the Avro body.
pub fn split_framing(bytes: &[u8]) -> Result<(SchemaRef, &[u8]), DecodeErrorKind> {
    match bytes {
        [] => Err(DecodeErrorKind::Empty),
        [0xC3, 0x01, ..] | [0xC3] => {
            if bytes.len() < SINGLE_OBJECT_HEADER_LEN {
                return Err(DecodeErrorKind::TruncatedHeader {
                    framing: "single-object",
                    len: bytes.len(),
                    needed: SINGLE_OBJECT_HEADER_LEN,
                });
            }
            let mut fp = [0u8; 8];
            fp.copy_from_slice(&bytes[2..10]);
            Ok((
                SchemaRef::Fingerprint(u64::from_le_bytes(fp)),
                &bytes[SINGLE_OBJECT_HEADER_LEN..],
            ))
        }
        [CONFLUENT_MAGIC, ..] => {
            if bytes.len() < CONFLUENT_HEADER_LEN {
                return Err(DecodeErrorKind::TruncatedHeader {
                    framing: "Confluent",
                    len: bytes.len(),
                    needed: CONFLUENT_HEADER_LEN,
                });
            }
            let mut id = [0u8; 4];
            id.copy_from_slice(&bytes[1..5]);
            Ok((
                SchemaRef::RegistryId(u32::from_be_bytes(id)),
                &bytes[CONFLUENT_HEADER_LEN..],
            ))
        }
        [first, ..] => Err(DecodeErrorKind::UnknownFraming { first: *first }),
    }
}

/// A writer schema known to the codec.
#[derive(Clone)]
struct Writer {
    schema: Arc<Schema>,
    /// Its Rabin fingerprint; equal to the reader's means no resolution is needed.
    fingerprint: u64,
}

/// Encodes and decodes Weir's records. Cheap to share (`Arc<Codec>`); all methods take `&self`.
pub struct Codec {
    registry: Option<Arc<dyn SchemaRegistry>>,
    by_fingerprint: HashMap<u64, Writer>,
    by_id: RwLock<HashMap<u32, Arc<Writer>>>,
    /// (subject, record name) → id of the current schema under that subject.
    subject_ids: RwLock<HashMap<(String, &'static str), u32>>,
}

impl Codec {
    /// A codec writing the Confluent wire format through `registry` when one is given, Avro
    /// single-object encoding otherwise.
    pub fn new(registry: Option<Arc<dyn SchemaRegistry>>) -> Self {
        let by_fingerprint = schemas::current()
            .iter()
            .chain(schemas::previous())
            .flat_map(|s| {
                let writer = Writer {
                    schema: Arc::new(s.schema.clone()),
                    fingerprint: s.fingerprint,
                };
                // Records written before the fingerprint followed the specification name the
                // same schema by its legacy fingerprint.
                let legacy = s.legacy_fingerprint.map(|fp| (fp, writer.clone()));
                std::iter::once((s.fingerprint, writer)).chain(legacy)
            })
            .collect();
        Codec {
            registry,
            by_fingerprint,
            by_id: RwLock::default(),
            subject_ids: RwLock::default(),
        }
    }

    /// The schema registry it writes through, if any (the trigger worker reads the schemas of
    /// other systems' Avro records from it).
    pub fn registry(&self) -> Option<&Arc<dyn SchemaRegistry>> {
        self.registry.as_ref()
    }

    /// A codec without registry: single-object encoding.
    pub fn single_object() -> Self {
        Self::new(None)
    }

    pub fn wire_format(&self) -> WireFormat {
        if self.registry.is_some() {
            WireFormat::Confluent
        } else {
            WireFormat::SingleObject
        }
    }

    /// Registers the current schema of `R` under its subject on `topic` ([`AvroRecord::subject`]:
    /// `<topic>-value` but for the cancellations on a route's topic) and remembers its id, so that
    /// [`encode`](Self::encode) can write records of `R` to `topic`. Returns the id; `None`
    /// (and does nothing) without a registry. Idempotent; call it at start for every topic.
    pub async fn register<R: AvroRecord>(&self, topic: &str) -> Result<Option<u32>, RegistryError> {
        let Some(registry) = &self.registry else {
            return Ok(None);
        };
        let subject = R::subject(topic);
        let key = (subject, R::NAME);
        if let Some(id) = read(&self.subject_ids).get(&key) {
            return Ok(Some(*id));
        }
        let rs = R::schema();
        let id = registry.register(&key.0, &rs.text).await?;
        write(&self.by_id).entry(id).or_insert_with(|| {
            Arc::new(Writer {
                schema: Arc::new(rs.schema.clone()),
                fingerprint: rs.fingerprint,
            })
        });
        write(&self.subject_ids).insert(key, id);
        Ok(Some(id))
    }

    /// Registers the schema of every record type Weir writes, under the subject of each topic
    /// of `topology` that carries it (`<topic>-value`): `Submission` on the submissions topic,
    /// `Response` on the responses topic, `HistoryRecord`, `ExecutionFinished`, `DlqEnvelope`,
    /// `ActivityRequest` on every activity route's topic, `ActivityCancel` on those Weir
    /// serves (subject `<topic>-dev.weir.v1.ActivityCancel`), `ScheduleState` on the state
    /// topic, and by record name the other records workflow workers write: `CancelRequest`
    /// on the submissions topic, `ScheduleCommand` and `CorrelationCommand` on the responses
    /// topic, `CorrelationState` and `RememberedEvent` on the state topic. Without it a codec with a
    /// registry can encode nothing; `weir worker` calls it at start-up. Returns (subject,
    /// record, id) of each; nothing without a registry. Idempotent.
    ///
    /// A reset's records too: `ResetStart` on the submissions topic, `ResetRequest` (sent
    /// back to its execution) on the responses topic.
    pub async fn register_topology(
        &self,
        topology: &crate::topology::Topology,
    ) -> Result<Vec<(String, &'static str, u32)>, RegisterError> {
        use crate::topology::TopicRole;
        if self.registry.is_none() {
            return Ok(Vec::new());
        }
        let name = |role: TopicRole| topology.topic(role).name.clone();
        let mut registered = Vec::new();
        let mut note = |topic: String,
                        subject: String,
                        record: &'static str,
                        id: Result<Option<u32>, RegistryError>| {
            match id {
                Ok(Some(id)) => {
                    registered.push((subject, record, id));
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(source) => Err(RegisterError {
                    subject,
                    topic,
                    record,
                    source: Box::new(source),
                }),
            }
        };
        let submissions = name(TopicRole::Submissions);
        note(
            submissions.clone(),
            Submission::subject(&submissions),
            Submission::NAME,
            self.register::<Submission>(&submissions).await,
        )?;
        let responses = name(TopicRole::Responses);
        note(
            responses.clone(),
            <crate::model::Response as AvroRecord>::subject(&responses),
            <crate::model::Response as AvroRecord>::NAME,
            self.register::<crate::model::Response>(&responses).await,
        )?;
        let events = name(TopicRole::Events);
        note(
            events.clone(),
            InboundEvent::subject(&events),
            InboundEvent::NAME,
            self.register::<InboundEvent>(&events).await,
        )?;
        let history = name(TopicRole::History);
        note(
            history.clone(),
            HistoryRecord::subject(&history),
            HistoryRecord::NAME,
            self.register::<HistoryRecord>(&history).await,
        )?;
        let results = name(TopicRole::Results);
        note(
            results.clone(),
            ExecutionFinished::subject(&results),
            ExecutionFinished::NAME,
            self.register::<ExecutionFinished>(&results).await,
        )?;
        let dlq = name(TopicRole::Dlq);
        note(
            dlq.clone(),
            DlqEnvelope::subject(&dlq),
            DlqEnvelope::NAME,
            self.register::<DlqEnvelope>(&dlq).await,
        )?;
        // What workflow workers write besides each topic's own record type, under subjects of
        // their own (`<topic>-dev.weir.v1.<Record>`): a child workflow's cancellation on the
        // submissions topic, a finished run's word to its schedule on the responses topic.
        note(
            submissions.clone(),
            CancelRequest::subject(&submissions),
            CancelRequest::NAME,
            self.register::<CancelRequest>(&submissions).await,
        )?;
        // A reset: the new execution's start on the submissions topic, and a request sent
        // back to the execution reset (read again once the store holds its history).
        note(
            submissions.clone(),
            ResetStart::subject(&submissions),
            ResetStart::NAME,
            self.register::<ResetStart>(&submissions).await,
        )?;
        note(
            responses.clone(),
            ResetRequest::subject(&responses),
            ResetRequest::NAME,
            self.register::<ResetRequest>(&responses).await,
        )?;
        note(
            responses.clone(),
            weir_core::schedule::ScheduleCommand::subject(&responses),
            weir_core::schedule::ScheduleCommand::NAME,
            self.register::<weir_core::schedule::ScheduleCommand>(&responses)
                .await,
        )?;
        // A key's owner's word to a correlation key (registration, a finished holder) on the
        // responses topic, and the key's state on the state topic (whose own record type is
        // `ScheduleState`).
        note(
            responses.clone(),
            weir_core::correlation::CorrelationCommand::subject(&responses),
            weir_core::correlation::CorrelationCommand::NAME,
            self.register::<weir_core::correlation::CorrelationCommand>(&responses)
                .await,
        )?;
        let state = name(TopicRole::State);
        note(
            state.clone(),
            weir_core::schedule::ScheduleState::subject(&state),
            weir_core::schedule::ScheduleState::NAME,
            self.register::<weir_core::schedule::ScheduleState>(&state)
                .await,
        )?;
        note(
            state.clone(),
            StoredCorrelation::subject(&state),
            StoredCorrelation::NAME,
            self.register::<StoredCorrelation>(&state).await,
        )?;
        // Batch operations: commands on the responses topic, states and turns' outcomes on the
        // state topic, and the requests a batch sends each execution on the responses topic
        // (`weir pause` / `weir cancel`'s records).
        note(
            responses.clone(),
            crate::codec::records::PauseRequest::subject(&responses),
            crate::codec::records::PauseRequest::NAME,
            self.register::<crate::codec::records::PauseRequest>(&responses)
                .await,
        )?;
        note(
            responses.clone(),
            CancelRequest::subject(&responses),
            CancelRequest::NAME,
            self.register::<CancelRequest>(&responses).await,
        )?;
        note(
            responses.clone(),
            weir_core::batch::BatchCommand::subject(&responses),
            weir_core::batch::BatchCommand::NAME,
            self.register::<weir_core::batch::BatchCommand>(&responses)
                .await,
        )?;
        note(
            state.clone(),
            weir_core::batch::BatchState::subject(&state),
            weir_core::batch::BatchState::NAME,
            self.register::<weir_core::batch::BatchState>(&state).await,
        )?;
        note(
            state.clone(),
            weir_core::batch::BatchOutcomes::subject(&state),
            weir_core::batch::BatchOutcomes::NAME,
            self.register::<weir_core::batch::BatchOutcomes>(&state)
                .await,
        )?;
        note(
            state.clone(),
            weir_core::correlation::RememberedEvent::subject(&state),
            weir_core::correlation::RememberedEvent::NAME,
            self.register::<weir_core::correlation::RememberedEvent>(&state)
                .await,
        )?;
        // Concurrency slots: their commands on the responses topic, their states on the
        // state topic.
        note(
            responses.clone(),
            weir_core::concurrency::SlotCommand::subject(&responses),
            weir_core::concurrency::SlotCommand::NAME,
            self.register::<weir_core::concurrency::SlotCommand>(&responses)
                .await,
        )?;
        note(
            state.clone(),
            weir_core::concurrency::SlotState::subject(&state),
            weir_core::concurrency::SlotState::NAME,
            self.register::<weir_core::concurrency::SlotState>(&state)
                .await,
        )?;
        // Queries: their requests on the responses topic (what clients with a registry send),
        // their answers on the answers topic (the answers topic's own record type).
        note(
            responses.clone(),
            weir_core::query::QueryRequest::subject(&responses),
            weir_core::query::QueryRequest::NAME,
            self.register::<weir_core::query::QueryRequest>(&responses)
                .await,
        )?;
        let answers = name(TopicRole::Answers);
        note(
            answers.clone(),
            weir_core::query::QueryAnswer::subject(&answers),
            weir_core::query::QueryAnswer::NAME,
            self.register::<weir_core::query::QueryAnswer>(&answers)
                .await,
        )?;
        let mut routes: Vec<&str> = topology.routes.iter().map(|r| r.topic.as_str()).collect();
        routes.sort_unstable();
        routes.dedup();
        for topic in routes {
            note(
                topic.to_owned(),
                ActivityRequest::subject(topic),
                ActivityRequest::NAME,
                self.register::<ActivityRequest>(topic).await,
            )?;
        }
        // Cancellations go to the topics Weir's activity workers serve, under a subject of
        // their own (`<topic>-dev.weir.v1.ActivityCancel`).
        for topic in topology.cancellation_topics() {
            note(
                topic.clone(),
                ActivityCancel::subject(&topic),
                ActivityCancel::NAME,
                self.register::<ActivityCancel>(&topic).await,
            )?;
        }
        Ok(registered)
    }

    /// Encodes `record` as the value of a record of `topic`, in this codec's wire format.
    /// With a registry, `R` must have been [registered](Self::register) for `topic`.
    pub fn encode<R: AvroRecord>(&self, topic: &str, record: &R) -> Result<Vec<u8>, EncodeError> {
        let rs = R::schema();
        let mut out = Vec::with_capacity(128);
        match self.registry {
            None => {
                out.extend_from_slice(&SINGLE_OBJECT_MAGIC);
                out.extend_from_slice(&rs.fingerprint.to_le_bytes());
            }
            Some(_) => {
                let subject = R::subject(topic);
                let id = read(&self.subject_ids)
                    .get(&(subject, R::NAME))
                    .copied()
                    .ok_or_else(|| EncodeError::NotRegistered {
                        record: R::NAME,
                        topic: topic.to_string(),
                        subject: R::subject(topic),
                    })?;
                out.push(CONFLUENT_MAGIC);
                out.extend_from_slice(&id.to_be_bytes());
            }
        }
        self.write_body(topic, record, &mut out)?;
        Ok(out)
    }

    /// [`encode`](Self::encode), registering `R` for `topic` first if needed.
    pub async fn encode_registering<R: AvroRecord>(
        &self,
        topic: &str,
        record: &R,
    ) -> Result<Vec<u8>, EncodeError> {
        self.register::<R>(topic)
            .await
            .map_err(|source| EncodeError::Registry {
                record: R::NAME,
                topic: topic.to_string(),
                source: Box::new(source),
            })?;
        self.encode(topic, record)
    }

    /// Encodes `record` in single-object encoding whatever this codec's configuration: for
    /// tools and tests.
    pub fn encode_single_object<R: AvroRecord>(
        topic: &str,
        record: &R,
    ) -> Result<Vec<u8>, EncodeError> {
        Codec::single_object().encode(topic, record)
    }

    fn write_body<R: AvroRecord>(
        &self,
        topic: &str,
        record: &R,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let value = record.to_avro().map_err(|source| EncodeError::Value {
            record: R::NAME,
            topic: topic.to_string(),
            source,
        })?;
        let avro = |e: apache_avro::Error| EncodeError::Avro {
            record: R::NAME,
            topic: topic.to_string(),
            message: e.to_string(),
        };
        let writer = GenericDatumWriter::builder(&R::schema().schema)
            .build()
            .map_err(avro)?;
        writer.write_value_ref(out, &value).map_err(avro)?;
        Ok(())
    }

    /// Decodes a record value of type `R`, in either framing. A registry id that this codec has
    /// not seen yet is an [`DecodeErrorKind::UnknownSchema`] error here; use
    /// [`decode_fetching`](Self::decode_fetching) to ask the registry for it.
    pub fn decode<R: AvroRecord>(
        &self,
        bytes: &[u8],
        position: &RecordPosition,
    ) -> Result<R, DecodeError> {
        self.decode_kind::<R>(bytes).map_err(|kind| DecodeError {
            record: R::NAME,
            position: position.clone(),
            kind: Box::new(kind),
        })
    }

    /// [`decode`](Self::decode), fetching an unknown schema id from the registry (once; it is
    /// cached). Registry failures are [`DecodeErrorKind::Registry`] errors, transient ones
    /// flagged by [`DecodeError::is_transient`].
    pub async fn decode_fetching<R: AvroRecord>(
        &self,
        bytes: &[u8],
        position: &RecordPosition,
    ) -> Result<R, DecodeError> {
        let result = self.decode::<R>(bytes, position);
        let unknown_id = match &result {
            Err(e) => match *e.kind {
                DecodeErrorKind::UnknownSchema {
                    schema: SchemaRef::RegistryId(id),
                } => Some(id),
                _ => None,
            },
            Ok(_) => None,
        };
        match unknown_id {
            Some(id) if self.registry.is_some() => {
                self.fetch_schema(id).await.map_err(|kind| DecodeError {
                    record: R::NAME,
                    position: position.clone(),
                    kind: Box::new(kind),
                })?;
                self.decode::<R>(bytes, position)
            }
            _ => result,
        }
    }

    /// Fetches schema `id` from the registry into this codec's cache.
    pub async fn fetch_schema(&self, id: u32) -> Result<(), DecodeErrorKind> {
        if read(&self.by_id).contains_key(&id) {
            return Ok(());
        }
        let schema_ref = SchemaRef::RegistryId(id);
        let Some(registry) = &self.registry else {
            return Err(DecodeErrorKind::UnknownSchema { schema: schema_ref });
        };
        let text = match registry.schema_by_id(id).await {
            Ok(text) => text,
            Err(RegistryError::NotFound(_)) => {
                return Err(DecodeErrorKind::UnknownSchema { schema: schema_ref });
            }
            Err(e) => {
                return Err(DecodeErrorKind::Registry {
                    schema: schema_ref,
                    transient: e.is_transient(),
                    message: e.to_string(),
                });
            }
        };
        let schema =
            Schema::parse_str(&text).map_err(|e| DecodeErrorKind::InvalidWriterSchema {
                schema: schema_ref,
                message: e.to_string(),
            })?;
        let fingerprint = schemas::fingerprint(&schema);
        write(&self.by_id).insert(
            id,
            Arc::new(Writer {
                schema: Arc::new(schema),
                fingerprint,
            }),
        );
        Ok(())
    }

    fn decode_kind<R: AvroRecord>(&self, bytes: &[u8]) -> Result<R, DecodeErrorKind> {
        let (schema_ref, body) = split_framing(bytes)?;
        let by_id;
        let writer: &Writer = match schema_ref {
            SchemaRef::Fingerprint(fp) => self
                .by_fingerprint
                .get(&fp)
                .ok_or(DecodeErrorKind::UnknownSchema { schema: schema_ref })?,
            SchemaRef::RegistryId(id) => {
                by_id = read(&self.by_id)
                    .get(&id)
                    .cloned()
                    .ok_or(DecodeErrorKind::UnknownSchema { schema: schema_ref })?;
                &by_id
            }
        };
        let writer_name = || match writer.schema.as_ref() {
            Schema::Record(r) => r.name.fullname(None),
            other => format!("{other:?}").chars().take(40).collect(),
        };
        let body_error = |message: String| DecodeErrorKind::Body {
            schema: schema_ref,
            writer: writer_name(),
            message,
        };
        let value = read_body(&writer.schema, body).map_err(|e| match e {
            BodyError::Trailing(count) => DecodeErrorKind::TrailingBytes {
                schema: schema_ref,
                writer: writer_name(),
                count,
            },
            other => body_error(other.to_string()),
        })?;
        let current = R::schema();
        let value = if writer.fingerprint == current.fingerprint {
            value
        } else {
            resolve::resolve(value, &writer.schema, &current.schema).map_err(|message| {
                DecodeErrorKind::Incompatible {
                    schema: schema_ref,
                    writer: writer_name(),
                    message,
                }
            })?
        };
        R::from_avro(value).map_err(|e| DecodeErrorKind::Field {
            schema: schema_ref,
            path: e.path,
            message: e.message,
        })
    }
}

/// The codec of records nested in another record as bytes (the history a [`ResetStart`]
/// carries): single-object encoding, every current and previous schema known by its
/// fingerprint, no registry (a nested record never has the registry's framing).
fn nested() -> &'static Codec {
    static NESTED: OnceLock<Codec> = OnceLock::new();
    NESTED.get_or_init(Codec::single_object)
}

/// `record` in Avro single-object encoding, as another record carries it: what the codec
/// writes to its own topic without a registry.
fn nested_bytes<R: AvroRecord>(record: &R) -> Result<Vec<u8>, FieldError> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&SINGLE_OBJECT_MAGIC);
    out.extend_from_slice(&R::schema().fingerprint.to_le_bytes());
    match nested().write_body(R::NAME, record, &mut out) {
        Ok(()) => Ok(out),
        Err(EncodeError::Value { source, .. }) => Err(source),
        Err(other) => Err(FieldError::new("", other.to_string())),
    }
}

/// A record of type `R` nested in another one as `bytes` (single-object encoding, written
/// with any schema this codec knows of `R`), resolved to the current schema.
fn read_nested<R: AvroRecord>(bytes: &[u8]) -> Result<R, FieldError> {
    nested().decode_kind::<R>(bytes).map_err(|kind| match kind {
        DecodeErrorKind::Field {
            schema,
            path,
            message,
        } => FieldError::new(path, format!("{message} (nested {}, {schema})", R::NAME)),
        other => FieldError::new("", format!("nested {}: {other}", R::NAME)),
    })
}

/// A reader over the body that remembers whether the decoder tried to read past its end.
/// Why an Avro body does not read as a value of its writer schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("{0}")]
    Invalid(String),
    #[error("truncated: the body ends inside the record")]
    Truncated,
    #[error("{0} bytes after the value")]
    Trailing(usize),
}

/// Reads `body` (Avro binary, no framing) as a value of `schema`, all of it: a body cut short
/// or with bytes after its value is an error.
pub fn read_body(schema: &Schema, body: &[u8]) -> Result<Value, BodyError> {
    let reader = GenericDatumReader::builder(schema)
        .build()
        .map_err(|e| BodyError::Invalid(e.to_string()))?;
    let mut cursor = EofDetector {
        rest: body,
        hit_eof: false,
    };
    let value: Value = reader
        .read_value(&mut cursor)
        .map_err(|e| BodyError::Invalid(e.to_string()))?;
    if cursor.hit_eof {
        // apache-avro reads a union index at the end of input as branch 0 instead of
        // failing, so a record cut before an optional field would decode "successfully".
        return Err(BodyError::Truncated);
    }
    if !cursor.rest.is_empty() {
        return Err(BodyError::Trailing(cursor.rest.len()));
    }
    Ok(value)
}

struct EofDetector<'a> {
    rest: &'a [u8],
    hit_eof: bool,
}

impl std::io::Read for EofDetector<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() && !buf.is_empty() {
            self.hit_eof = true;
        }
        self.rest.read(buf)
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}
