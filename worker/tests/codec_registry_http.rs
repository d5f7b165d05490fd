//! The HTTP schema registry client (Confluent REST API).
//!
//! No real schema registry could be installed here (Karapace is not on PyPI; Confluent's is not
//! on Maven Central), so the client is tested against `StandIn`: a small HTTP server in this
//! file implementing the two endpoints Weir uses, with the Confluent semantics (global ids from
//! 1, the same schema gets the same id, 409 for an incompatible new version, 404 / 40403 for an
//! unknown id). It is a stand-in, not a registry. The same conformance test runs against a real
//! registry when `WEIR_TEST_SCHEMA_REGISTRY_URL` is set (e.g. a Confluent, Karapace, Redpanda or
//! Apicurio `ccompat` endpoint).

mod codec_samples;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;
use codec_samples::*;
use weir::codec::{
    ActivityCancel, ActivityRequest, Codec, DecodeErrorKind, DlqEnvelope, ExecutionFinished,
    HistoryRecord, HttpRegistry, RecordPosition, RegistryError, ResetRequest, ResetStart,
    SchemaRef, SchemaRegistry, Submission,
};
use weir::model::Response;

#[derive(Default)]
struct StandInState {
    schemas: Vec<String>,
    subjects: HashMap<String, Vec<u32>>,
    requests: Vec<String>,
}

/// A minimal HTTP/1.1 server with `POST /subjects/{subject}/versions` and
/// `GET /schemas/ids/{id}`, one thread, one request per connection.
struct StandIn {
    url: String,
    state: Arc<Mutex<StandInState>>,
}

impl StandIn {
    fn start() -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(StandInState::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let _ = serve(stream, &shared);
            }
        });
        StandIn { url, state }
    }
}

fn serve(stream: TcpStream, state: &Mutex<StandInState>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, json) = route(method, path, &headers, &body, state);
    let body = json.to_string();
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        _ => "Error",
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

fn error(status: u16, code: i64, message: &str) -> (u16, serde_json::Value) {
    (
        status,
        serde_json::json!({"error_code": code, "message": message}),
    )
}

fn route(
    method: &str,
    path: &str,
    headers: &HashMap<String, String>,
    body: &[u8],
    state: &Mutex<StandInState>,
) -> (u16, serde_json::Value) {
    let mut state = state.lock().unwrap();
    state.requests.push(format!("{method} {path}"));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["subjects", subject, "versions"]) => {
            let content_type = headers.get("content-type").map(String::as_str);
            if !matches!(
                content_type,
                Some("application/vnd.schemaregistry.v1+json" | "application/json")
            ) {
                return error(415, 415, "unsupported content type");
            }
            let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
                return error(422, 42201, "invalid JSON");
            };
            let Some(text) = request["schema"].as_str() else {
                return error(422, 42201, "no schema");
            };
            let Ok(schema) = Schema::parse_str(text) else {
                return error(422, 42201, "Invalid schema");
            };
            let versions = state.subjects.get(*subject).cloned().unwrap_or_default();
            // Confluent identifies a schema by its (normalised) text; the same schema under
            // another subject keeps its id.
            let existing = state.schemas.iter().position(|s| s == text);
            if let Some(i) = existing
                && versions.contains(&(i as u32 + 1))
            {
                return (200, serde_json::json!({"id": i + 1}));
            }
            if let Some(&latest) = versions.last() {
                let latest = Schema::parse_str(&state.schemas[latest as usize - 1]).unwrap();
                if SchemaCompatibility::can_read(&latest, &schema).is_err() {
                    return error(
                        409,
                        409,
                        "Schema being registered is incompatible with an earlier schema",
                    );
                }
            }
            let id = match existing {
                Some(i) => i as u32 + 1,
                None => {
                    state.schemas.push(text.to_string());
                    state.schemas.len() as u32
                }
            };
            state
                .subjects
                .entry(subject.to_string())
                .or_default()
                .push(id);
            (200, serde_json::json!({"id": id}))
        }
        ("GET", ["schemas", "ids", id]) => {
            match id
                .parse::<usize>()
                .ok()
                .and_then(|id| id.checked_sub(1))
                .and_then(|i| state.schemas.get(i))
            {
                Some(text) => (200, serde_json::json!({"schema": text})),
                None => error(404, 40403, "Schema not found"),
            }
        }
        _ => error(404, 404, "HTTP 404 Not Found"),
    }
}

async fn conformance(url: &str) {
    let registry = Arc::new(HttpRegistry::new(url).unwrap());
    let writer = Codec::new(Some(registry.clone()));
    let reader = Codec::new(Some(Arc::new(HttpRegistry::new(url).unwrap())));
    // Topic names unique per run, so that a real registry's earlier state does not matter.
    let run = ulid::Ulid::new().to_string().to_lowercase();
    let topic = |t: &str| format!("weir-test-{run}.{t}");
    macro_rules! round_trip {
        ($ty:ty, $t:literal, $samples:expr) => {{
            let topic = topic($t);
            let id = writer.register::<$ty>(&topic).await.unwrap().unwrap();
            // Registering again gives the same id.
            assert_eq!(
                registry
                    .register(
                        &<$ty as weir::codec::AvroRecord>::subject(&topic),
                        &<$ty as weir::codec::AvroRecord>::schema().text
                    )
                    .await
                    .unwrap(),
                id
            );
            for record in $samples {
                let bytes = writer.encode(&topic, &record).unwrap();
                assert_eq!(&bytes[1..5], &id.to_be_bytes());
                let decoded: $ty = reader
                    .decode_fetching(&bytes, &RecordPosition::at(&topic, 0, 0))
                    .await
                    .unwrap();
                assert_eq!(decoded, record);
            }
        }};
    }
    round_trip!(Submission, "submissions", submissions());
    round_trip!(Response, "responses", responses());
    round_trip!(ActivityRequest, "activity.compute", activity_requests());
    round_trip!(ActivityCancel, "activity.compute", activity_cancels());
    round_trip!(HistoryRecord, "history", history_records());
    round_trip!(ExecutionFinished, "results", execution_finished());
    round_trip!(DlqEnvelope, "dlq", dlq_envelopes());
    round_trip!(ResetRequest, "responses", reset_requests());
    round_trip!(ResetStart, "submissions", reset_starts());

    // An unknown id.
    let bytes = [0, 0x7f, 0xff, 0xff, 0xf0, 0];
    let e = reader
        .decode_fetching::<Submission>(&bytes, &RecordPosition::at("t", 1, 2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            *e.kind,
            DecodeErrorKind::UnknownSchema {
                schema: SchemaRef::RegistryId(0x7fff_fff0)
            }
        ),
        "{e}"
    );
    match registry.schema_by_id(0x7fff_fff0).await {
        Err(RegistryError::NotFound(0x7fff_fff0)) => {}
        other => panic!("{other:?}"),
    }

    // An incompatible new version of a subject (a field without default) is refused.
    let subject = format!("{}-value", topic("submissions"));
    let mut json: serde_json::Value =
        serde_json::from_str(&weir::codec::schemas::current_named("Submission").text).unwrap();
    json["fields"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "region", "type": "string"}));
    match registry.register(&subject, &json.to_string()).await {
        Err(RegistryError::Incompatible { subject: s, .. }) => assert_eq!(s, subject),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn http_registry_against_the_stand_in() {
    let stand_in = StandIn::start();
    conformance(&stand_in.url).await;
    let requests = stand_in.state.lock().unwrap().requests.clone();
    assert!(requests.iter().any(|r| r.starts_with("POST /subjects/")));
    assert!(requests.iter().any(|r| r.starts_with("GET /schemas/ids/")));
}

#[tokio::test]
async fn http_registry_errors_carry_status_and_code() {
    let stand_in = StandIn::start();
    let registry = HttpRegistry::new(&format!("{}/", stand_in.url)).unwrap();
    match registry.register("s-value", "{not avro").await {
        Err(RegistryError::Http {
            status: 422,
            error_code: Some(42201),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// Needs a real registry, which cannot be installed here: run it with
/// `WEIR_TEST_SCHEMA_REGISTRY_URL=http://… cargo test -p weir --test codec_registry_http -- --ignored`.
#[tokio::test]
#[ignore = "needs a real schema registry at WEIR_TEST_SCHEMA_REGISTRY_URL"]
async fn http_registry_against_a_real_registry() {
    let url = std::env::var("WEIR_TEST_SCHEMA_REGISTRY_URL")
        .expect("WEIR_TEST_SCHEMA_REGISTRY_URL names the registry to test against");
    conformance(&url).await;
}
