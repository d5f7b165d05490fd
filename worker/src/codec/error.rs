//! Typed errors of the codec. Decode errors name where the record came from (topic, partition,
//! offset when known), the writer schema (fingerprint or registry id) and what did not decode.

use std::fmt;

use super::records::DlqReason;

/// Where a record being decoded came from; part of every [`DecodeError`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordPosition {
    pub topic: String,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
}

impl RecordPosition {
    /// A record of `topic` whose partition and offset are not known (e.g. a CLI argument).
    pub fn topic(topic: impl Into<String>) -> Self {
        RecordPosition {
            topic: topic.into(),
            partition: None,
            offset: None,
        }
    }

    /// A record consumed from `topic`, `partition` at `offset`.
    pub fn at(topic: impl Into<String>, partition: i32, offset: i64) -> Self {
        RecordPosition {
            topic: topic.into(),
            partition: Some(partition),
            offset: Some(offset),
        }
    }
}

impl fmt::Display for RecordPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "topic `{}`", self.topic)?;
        if let Some(p) = self.partition {
            write!(f, " partition {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " offset {o}")?;
        }
        Ok(())
    }
}

/// The writer schema of a record, as its framing names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaRef {
    /// Single-object encoding: the CRC-64-AVRO (Rabin) fingerprint of the schema's canonical form.
    Fingerprint(u64),
    /// Confluent wire format: the schema registry's id.
    RegistryId(u32),
}

impl fmt::Display for SchemaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaRef::Fingerprint(fp) => write!(f, "schema fingerprint {fp:#018x}"),
            SchemaRef::RegistryId(id) => write!(f, "schema id {id}"),
        }
    }
}

/// A record that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode {record} from {position}: {kind}")]
pub struct DecodeError {
    /// The record type that was expected (the reader schema's name), e.g. `Submission`.
    pub record: &'static str,
    pub position: RecordPosition,
    /// Boxed to keep `Result<_, DecodeError>` small.
    pub kind: Box<DecodeErrorKind>,
}

impl DecodeError {
    /// The reason to put on the DLQ envelope (and its headers) for this record.
    pub fn dlq_reason(&self) -> DlqReason {
        match *self.kind {
            DecodeErrorKind::UnknownSchema { .. }
            | DecodeErrorKind::Registry { .. }
            | DecodeErrorKind::InvalidWriterSchema { .. } => DlqReason::UnknownSchema,
            _ => DlqReason::Undecodable,
        }
    }

    /// Whether the bytes are broken, whatever wrote them: no framing Weir knows, a header cut
    /// short, or a body that does not read as its own writer schema (the schema was found;
    /// the bytes do not fit it). Not so a writer schema this reader does not know or cannot
    /// resolve (a newer Weir's, in a rolling upgrade), nor a value its model refuses: those
    /// are good records of another version, which a store of state must keep
    /// ([`weir_core::processor::CorruptState`]).
    pub fn is_corrupt(&self) -> bool {
        match *self.kind {
            DecodeErrorKind::Empty
            | DecodeErrorKind::UnknownFraming { .. }
            | DecodeErrorKind::TruncatedHeader { .. }
            | DecodeErrorKind::Body { .. }
            | DecodeErrorKind::TrailingBytes { .. } => true,
            DecodeErrorKind::UnknownSchema { .. }
            | DecodeErrorKind::Registry { .. }
            | DecodeErrorKind::InvalidWriterSchema { .. }
            | DecodeErrorKind::Incompatible { .. }
            | DecodeErrorKind::Field { .. }
            | DecodeErrorKind::Header { .. } => false,
        }
    }

    /// Whether retrying later may succeed (the registry could not be reached); every other
    /// decode error is a property of the bytes and goes to the DLQ.
    pub fn is_transient(&self) -> bool {
        matches!(
            *self.kind,
            DecodeErrorKind::Registry {
                transient: true,
                ..
            }
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeErrorKind {
    #[error("the value is empty (null or zero bytes)")]
    Empty,
    #[error(
        "unknown framing: first byte {first:#04x} is neither 0x00 (Confluent wire format) nor \
         0xC3 0x01 (Avro single-object encoding)"
    )]
    UnknownFraming { first: u8 },
    #[error("truncated {framing} header: {len} bytes, at least {needed} needed")]
    TruncatedHeader {
        framing: &'static str,
        len: usize,
        needed: usize,
    },
    #[error("unknown {schema}: no such writer schema is known")]
    UnknownSchema { schema: SchemaRef },
    #[error("{schema}: the schema registry failed: {message}")]
    Registry {
        schema: SchemaRef,
        message: String,
        transient: bool,
    },
    #[error("{schema}: the registry's schema does not parse: {message}")]
    InvalidWriterSchema { schema: SchemaRef, message: String },
    #[error("{schema} (`{writer}`): the body does not decode: {message}")]
    Body {
        schema: SchemaRef,
        writer: String,
        message: String,
    },
    #[error("{schema} (`{writer}`): {count} bytes left after the record")]
    TrailingBytes {
        schema: SchemaRef,
        writer: String,
        count: usize,
    },
    #[error("{schema} (`{writer}`) cannot be read as the current schema: {message}")]
    Incompatible {
        schema: SchemaRef,
        writer: String,
        message: String,
    },
    #[error("{schema}: field `{path}`: {message}")]
    Field {
        schema: SchemaRef,
        path: String,
        message: String,
    },
    /// A Kafka header the record type needs is missing or does not parse.
    #[error("header `{header}`: {message}")]
    Header {
        header: &'static str,
        message: String,
    },
}

/// A value that does not fit the record's schema, found while converting a model value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{path}`: {message}")]
pub struct FieldError {
    /// Dotted path of the field, e.g. `entry.Event.event.Persist.value`.
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Prefixes the path with an enclosing field's name.
    pub fn within(mut self, parent: &str) -> Self {
        self.path = if self.path.is_empty() {
            parent.to_string()
        } else {
            format!("{parent}.{}", self.path)
        };
        self
    }
}

/// A record that could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("cannot encode {record} for topic `{topic}`: {source}")]
    Value {
        record: &'static str,
        topic: String,
        #[source]
        source: FieldError,
    },
    #[error("cannot encode {record} for topic `{topic}`: avro: {message}")]
    Avro {
        record: &'static str,
        topic: String,
        message: String,
    },
    #[error(
        "cannot encode {record} for topic `{topic}`: subject `{subject}` has no schema id yet \
         (register it first: Codec::register or Codec::encode_registering)"
    )]
    NotRegistered {
        record: &'static str,
        topic: String,
        subject: String,
    },
    #[error("cannot encode {record} for topic `{topic}`: {source}")]
    Registry {
        record: &'static str,
        topic: String,
        #[source]
        source: Box<RegistryError>,
    },
}

/// A failure of the schema registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{method} {url}: {message}")]
    Transport {
        method: &'static str,
        url: String,
        message: String,
    },
    #[error("{method} {url}: HTTP {status}, error code {error_code:?}: {message}")]
    Http {
        method: &'static str,
        url: String,
        status: u16,
        error_code: Option<i64>,
        message: String,
    },
    #[error("{method} {url}: unexpected response: {message}")]
    InvalidResponse {
        method: &'static str,
        url: String,
        message: String,
    },
    #[error("schema id {0} not found")]
    NotFound(u32),
    #[error(
        "schema for subject `{subject}` is incompatible with its registered versions: {message}"
    )]
    Incompatible { subject: String, message: String },
    #[error("schema does not parse: {0}")]
    InvalidSchema(String),
    /// The TLS handshake failed: the registry's certificate is not trusted, or does not name
    /// its host (not transient: the configuration or the registry must change).
    #[error("{method} {url}: TLS: {message}")]
    Tls {
        method: &'static str,
        url: String,
        message: String,
    },
    /// The client cannot be made as configured (its TLS files, a TLS setting for an
    /// `http://` URL).
    #[error("schema registry {url}: {message}")]
    Setup { url: String, message: String },
}

impl RegistryError {
    /// Whether retrying may succeed (network trouble or a server error), as opposed to an answer.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Transport { .. } => true,
            RegistryError::Http { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}
