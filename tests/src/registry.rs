//! A schema registry for the end-to-end tests: a small HTTP/1.1 server in the test process
//! implementing the part of the Confluent Schema Registry REST API that Weir (and its
//! `HttpRegistry` client) uses — `POST /subjects/{subject}/versions`, `GET /schemas/ids/{id}`,
//! `GET /subjects` — with the Confluent semantics Weir relies on: global ids from 1, the same
//! schema text keeps its id under every subject, an unknown id is 404 / 40403.
//!
//! It stands in for a real registry because none can be installed on this machine (Confluent's
//! is not on Maven Central, Karapace is not on PyPI, Apicurio's is a Quarkus application that
//! is not published runnable). `worker/tests/codec_registry_http.rs` runs the client's
//! conformance test against a real registry when `WEIR_TEST_SCHEMA_REGISTRY_URL` is set.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct State {
    /// The `Authorization` header every request must carry (HTTP basic authentication);
    /// `None`: none is asked for.
    login: Option<String>,
    /// Requests answered 401 for a missing or wrong login.
    unauthorized: u64,
    /// Index `i` holds the schema with id `i + 1`.
    schemas: Vec<String>,
    /// Subject → ids of its versions.
    subjects: BTreeMap<String, Vec<u32>>,
    /// Whether it answers every request with 503 (an outage).
    down: bool,
    /// Requests answered with 503 during outages.
    refused: u64,
}

/// The registry; it serves until the test process ends.
pub struct TestRegistry {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl TestRegistry {
    pub fn start() -> TestRegistry {
        Self::serve_on("http", State::default(), |stream, state| {
            let _ = serve(stream, state);
        })
    }

    /// A registry of `state` on a fresh local port, each connection in a thread of its own
    /// handed to `connection` (plain, or wrapped in TLS first).
    fn serve_on(
        scheme: &str,
        state: State,
        connection: impl Fn(TcpStream, &Mutex<State>) + Send + Sync + 'static,
    ) -> TestRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the registry");
        let url = format!("{scheme}://{}", listener.local_addr().expect("address"));
        let state = Arc::new(Mutex::new(state));
        let shared = Arc::clone(&state);
        let connection = Arc::new(connection);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (shared, connection) = (Arc::clone(&shared), Arc::clone(&connection));
                std::thread::spawn(move || connection(stream, &shared));
            }
        });
        TestRegistry { url, state }
    }

    /// A registry over HTTPS (`https://127.0.0.1:<port>`) with the server certificate chain
    /// and key of `cert` and `key` (PEM), asking every request for HTTP basic authentication
    /// as `user` with `password`.
    pub fn start_tls(cert: &Path, key: &Path, user: &str, password: &str) -> TestRegistry {
        use base64::Engine;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect())
            .unwrap_or_else(|e| panic!("{}: {e}", cert.display()));
        let key =
            PrivateKeyDer::from_pem_file(key).unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the server certificate and key"),
        );
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let state = State {
            login: Some(format!("Basic {credentials}")),
            ..State::default()
        };
        Self::serve_on("https", state, move |stream, state| {
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                return;
            };
            let _ = serve(rustls::StreamOwned::new(connection, stream), state);
        })
    }

    /// How many requests were answered 401 (no login, or a wrong one).
    pub fn unauthorized(&self) -> u64 {
        self.state.lock().expect("registry state").unauthorized
    }

    /// Every subject with the ids of its versions.
    pub fn subjects(&self) -> BTreeMap<String, Vec<u32>> {
        self.state.lock().expect("registry state").subjects.clone()
    }

    /// Starts (`true`) or ends an outage: meanwhile every request is answered 503.
    pub fn set_down(&self, down: bool) {
        self.state.lock().expect("registry state").down = down;
    }

    /// How many requests were answered 503 during outages.
    pub fn refused(&self) -> u64 {
        self.state.lock().expect("registry state").refused
    }

    /// Registers, under `subject`, schema `id` with a `doc` added: the same record, written
    /// the same way, under a new id that no client has fetched yet.
    pub fn register_variant(&self, subject: &str, id: u32) -> u32 {
        let mut state = self.state.lock().expect("registry state");
        let text = state.schemas[id as usize - 1].clone();
        let mut schema: serde_json::Value = serde_json::from_str(&text).expect("schema JSON");
        schema["doc"] = serde_json::Value::from(format!("a variant of schema {id}"));
        state.schemas.push(schema.to_string());
        let variant = state.schemas.len() as u32;
        state
            .subjects
            .entry(subject.to_owned())
            .or_default()
            .push(variant);
        variant
    }
}

fn serve(stream: impl Read + Write, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut length = 0usize;
        let mut authorization = None;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                } else if k.trim().eq_ignore_ascii_case("authorization") {
                    authorization = Some(v.trim().to_owned());
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (status, json) = route(method, path, &body, authorization.as_deref(), state);
        let body = json.to_string();
        let out = reader.get_mut();
        write!(
            out,
            "HTTP/1.1 {status} X\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        out.flush()?;
    }
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
    body: &[u8],
    authorization: Option<&str>,
    state: &Mutex<State>,
) -> (u16, serde_json::Value) {
    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
    if state.login.is_some() && state.login.as_deref() != authorization {
        state.unauthorized += 1;
        return error(401, 40101, "Unauthorized");
    }
    if state.down {
        state.refused += 1;
        return error(503, 50301, "unavailable (an outage of the test registry)");
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["subjects", subject, "versions"]) => {
            let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
                return error(422, 42201, "invalid JSON");
            };
            let Some(text) = request["schema"].as_str() else {
                return error(422, 42201, "no schema");
            };
            let id = match state.schemas.iter().position(|s| s == text) {
                Some(i) => i as u32 + 1,
                None => {
                    state.schemas.push(text.to_owned());
                    state.schemas.len() as u32
                }
            };
            let versions = state.subjects.entry((*subject).to_owned()).or_default();
            if !versions.contains(&id) {
                versions.push(id);
            }
            (200, serde_json::json!({ "id": id }))
        }
        ("GET", ["schemas", "ids", id]) => {
            let schema = id
                .parse::<usize>()
                .ok()
                .and_then(|id| id.checked_sub(1))
                .and_then(|i| state.schemas.get(i));
            match schema {
                Some(text) => (200, serde_json::json!({ "schema": text })),
                None => error(404, 40403, "Schema not found"),
            }
        }
        ("GET", ["subjects"]) => (
            200,
            serde_json::json!(state.subjects.keys().collect::<Vec<_>>()),
        ),
        _ => error(404, 404, "not found"),
    }
}
