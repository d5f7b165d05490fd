//! The Avro schemas of `schemas/avro/`, embedded in the binary, parsed once.
//!
//! `CURRENT` are the schemas Weir writes with (and reads into); `PREVIOUS` are the earlier
//! versions kept under `schemas/avro/history/<version>/`, which Weir still recognises as writer
//! schemas (by fingerprint in single-object encoding) and resolves to the current ones.

use std::sync::OnceLock;

use apache_avro::Schema;

/// One `.avsc` file, parsed.
#[derive(Debug)]
pub struct RecordSchema {
    /// The record's name without namespace, e.g. `Submission`.
    pub name: &'static str,
    /// The file, relative to `schemas/avro/`, e.g. `submission.avsc` or
    /// `history/v0/submission.avsc`.
    pub file: &'static str,
    /// The file's text, as registered with a schema registry (compacted JSON).
    pub text: String,
    pub schema: Schema,
    /// CRC-64-AVRO (Rabin) fingerprint of the Parsing Canonical Form, as a `u64` read
    /// little-endian (the single-object header carries these 8 bytes in that order).
    pub fingerprint: u64,
    /// The fingerprint Weir wrote before it followed the specification for logical types
    /// (see [`parsing_canonical_form`]), when it differs: still accepted from readers.
    pub legacy_fingerprint: Option<u64>,
}

/// The namespace of every named type in Weir's schemas. `v1` is the generation of the wire
/// contract, not a schema version: compatible changes keep it (Avro resolves named types by
/// full name, so changing it would make every type a new one); only an incompatible redesign,
/// which would need new topics, would bump it.
pub const NAMESPACE: &str = "dev.weir.v1";

macro_rules! avsc {
    ($name:literal, $file:literal) => {
        (
            $name,
            $file,
            include_str!(concat!("../../../schemas/avro/", $file)),
        )
    };
}

const CURRENT_FILES: &[(&str, &str, &str)] = &[
    avsc!("Submission", "submission.avsc"),
    avsc!("Response", "response.avsc"),
    avsc!("ActivityRequest", "activity_request.avsc"),
    avsc!("ActivityCancel", "activity_cancel.avsc"),
    avsc!("UpgradeRequest", "upgrade_request.avsc"),
    avsc!("PauseRequest", "pause_request.avsc"),
    avsc!("ResetRequest", "reset_request.avsc"),
    avsc!("ResetStart", "reset_start.avsc"),
    avsc!("RoutePause", "route_pause.avsc"),
    avsc!("InboundEvent", "event.avsc"),
    avsc!("CancelRequest", "cancel_request.avsc"),
    avsc!("HistoryRecord", "history_record.avsc"),
    avsc!("ExecutionFinished", "execution_finished.avsc"),
    avsc!("DlqEnvelope", "dlq_envelope.avsc"),
    avsc!("ScheduleCommand", "schedule_command.avsc"),
    avsc!("ScheduleState", "schedule_state.avsc"),
    avsc!("CorrelationCommand", "correlation_command.avsc"),
    avsc!("CorrelationState", "correlation_state.avsc"),
    avsc!("RememberedEvent", "remembered_event.avsc"),
    avsc!("SlotCommand", "slot_command.avsc"),
    avsc!("SlotState", "slot_state.avsc"),
    avsc!("BatchCommand", "batch_command.avsc"),
    avsc!("BatchState", "batch_state.avsc"),
    avsc!("BatchOutcomes", "batch_outcomes.avsc"),
    avsc!("QueryRequest", "query_request.avsc"),
    avsc!("QueryAnswer", "query_answer.avsc"),
];

/// Earlier versions, oldest first. When a schema changes, its current file is copied here first.
const PREVIOUS_FILES: &[(&str, &str, &str)] = &[
    avsc!("Submission", "history/v0/submission.avsc"),
    avsc!("ExecutionFinished", "history/v0/execution_finished.avsc"),
    // Before DlqReason gained MISROUTED, CONFLICT, REFUSED and ExecutionErrorKind CONFLICT.
    avsc!("Response", "history/v1/response.avsc"),
    avsc!("HistoryRecord", "history/v1/history_record.avsc"),
    avsc!("ExecutionFinished", "history/v1/execution_finished.avsc"),
    avsc!("DlqEnvelope", "history/v1/dlq_envelope.avsc"),
    // Before Created gained `component` (the build an execution is pinned to).
    avsc!("HistoryRecord", "history/v2/history_record.avsc"),
    // Before events and cancellation: EventRequest, EventDelivered, EventReceived and
    // CancelRequested.
    avsc!("HistoryRecord", "history/v3/history_record.avsc"),
    avsc!("Response", "history/v3/response.avsc"),
    // Before deadlines: Submission and Created gained `deadline`.
    avsc!("Submission", "history/v4/submission.avsc"),
    avsc!("HistoryRecord", "history/v4/history_record.avsc"),
    // Before correlation keys: InboundEvent gained `correlation_key` and `returned_by` (its
    // target may be a key), HistoryEvent the `Correlate` branch.
    avsc!("InboundEvent", "history/v5/event.avsc"),
    avsc!("HistoryRecord", "history/v5/history_record.avsc"),
    // Before ChildKind gained STUB_WRITE (a workflow writing another execution's stub).
    avsc!("Submission", "history/v5/submission.avsc"),
    // Before events could come before their execution: InboundEvent gained `waited_until`,
    // CorrelationState `waits_until` (its key may be an execution id).
    avsc!("InboundEvent", "history/v6/event.avsc"),
    avsc!("CorrelationState", "history/v6/correlation_state.avsc"),
    // Before cancellations could come before their execution: CancelRequest gained
    // `waited_until`, CorrelationState `cancel`.
    avsc!("CancelRequest", "history/v7/cancel_request.avsc"),
    avsc!("CorrelationState", "history/v7/correlation_state.avsc"),
    // Before true timings: HistoryRecord gained `at`, Created `submitted_at`, and a child's
    // answer (Response, and in history) `ran`.
    avsc!("HistoryRecord", "history/v8/history_record.avsc"),
    avsc!("Response", "history/v8/response.avsc"),
    // Before pause and resume: HistoryRecord gained the `Paused` and `Resumed` entries.
    avsc!("HistoryRecord", "history/v9/history_record.avsc"),
    // Before reset: HistoryRecord gained the `Reset` entry, Created `reset_of`.
    avsc!("HistoryRecord", "history/v10/history_record.avsc"),
    // Before concurrency slots: Submission and ResetStart gained `concurrency`, Created
    // `slots`, HistoryRecord the `SlotGranted` entry.
    avsc!("Submission", "history/v11/submission.avsc"),
    avsc!("HistoryRecord", "history/v11/history_record.avsc"),
    avsc!("ResetStart", "history/v11/reset_start.avsc"),
    // Before batch resets: ResetRequest gained `to_latest` (the latest point of its history);
    // before parked activities' pauses named them: PauseRequest gained `parked`.
    avsc!("ResetRequest", "history/v12/reset_request.avsc"),
    avsc!("PauseRequest", "history/v12/pause_request.avsc"),
    // Before fairness: Submission gained `tenant`.
    avsc!("Submission", "history/v13/submission.avsc"),
];

fn parse(files: &[(&'static str, &'static str, &'static str)]) -> Vec<RecordSchema> {
    files
        .iter()
        .map(|&(name, file, text)| {
            // The files are part of the binary; a test parses every one of them.
            let schema = Schema::parse_str(text)
                .unwrap_or_else(|e| panic!("embedded schemas/avro/{file} does not parse: {e}"));
            let json: serde_json::Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("embedded schemas/avro/{file} is not JSON: {e}"));
            let fingerprint = fingerprint(&schema);
            let legacy = crc64_avro(schema.canonical_form().as_bytes());
            RecordSchema {
                name,
                file,
                text: json.to_string(),
                fingerprint,
                legacy_fingerprint: (legacy != fingerprint).then_some(legacy),
                schema,
            }
        })
        .collect()
}

/// The schema's Parsing Canonical Form, as the Avro specification defines it and Apache Avro
/// (Java) computes it.
///
/// apache-avro's `canonical_form` keeps a primitive type with a logical type as an object,
/// `{"type":"long"}`, where the specification's [PRIMITIVES] rule wants the bare name `"long"`;
/// its fingerprints then differ from every other implementation's for any schema using a logical
/// type, and single-object records could not be read by other clients (nor theirs by Weir).
/// In the canonical form every named type's object begins with `"name"`, so an object holding
/// only `"type"` is exactly such a primitive (names cannot contain `{` or `"`).
pub fn parsing_canonical_form(schema: &Schema) -> String {
    let mut form = schema.canonical_form();
    for primitive in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        form = form.replace(
            &format!(r#"{{"type":"{primitive}"}}"#),
            &format!(r#""{primitive}""#),
        );
    }
    form
}

/// The CRC-64-AVRO fingerprint of `schema`'s Parsing Canonical Form, as the `u64` its 8
/// little-endian bytes spell.
pub fn fingerprint(schema: &Schema) -> u64 {
    crc64_avro(parsing_canonical_form(schema).as_bytes())
}

/// CRC-64-AVRO (the Rabin fingerprint of the Avro specification).
fn crc64_avro(bytes: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    static TABLE: OnceLock<[u64; 256]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u64; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let mut fp = i as u64;
            for _ in 0..8 {
                fp = (fp >> 1) ^ (EMPTY & (fp & 1).wrapping_neg());
            }
            *entry = fp;
        }
        table
    });
    bytes.iter().fold(EMPTY, |fp, &b| {
        (fp >> 8) ^ table[((fp ^ u64::from(b)) & 0xff) as usize]
    })
}

/// The current schemas, one per record type.
pub fn current() -> &'static [RecordSchema] {
    static CURRENT: OnceLock<Vec<RecordSchema>> = OnceLock::new();
    CURRENT.get_or_init(|| parse(CURRENT_FILES))
}

/// The earlier versions still recognised as writer schemas.
pub fn previous() -> &'static [RecordSchema] {
    static PREVIOUS: OnceLock<Vec<RecordSchema>> = OnceLock::new();
    PREVIOUS.get_or_init(|| parse(PREVIOUS_FILES))
}

/// The current schema of the record named `name`.
pub fn current_named(name: &str) -> &'static RecordSchema {
    current()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no current schema named {name}"))
}
