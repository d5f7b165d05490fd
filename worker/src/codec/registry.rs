//! Schema registries: where the Confluent wire format's schema ids come from.
//!
//! [`SchemaRegistry`] is the seam; [`InMemoryRegistry`] serves tests and single-process setups,
//! [`HttpRegistry`] speaks the Confluent Schema Registry REST API (also served by Karapace,
//! Apicurio's `ccompat` API and Redpanda). Subjects follow the TopicNameStrategy:
//! `<topic>-value`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;
use futures::future::BoxFuture;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::error::RegistryError;
use crate::tls::ClientTls;

/// The subject of a topic's record values (Confluent's TopicNameStrategy).
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

/// A schema registry: registers a schema under a subject and fetches a schema by id.
pub trait SchemaRegistry: Send + Sync {
    /// Registers `schema` (Avro JSON text) under `subject`, returning its global id. Registering
    /// a schema that is already registered returns its existing id.
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, RegistryError>>;

    /// The schema (Avro JSON text) with global id `id`.
    fn schema_by_id(&self, id: u32) -> BoxFuture<'_, Result<String, RegistryError>>;
}

/// A registry in memory, with the Confluent semantics that matter to Weir: global ids from 1,
/// the same schema text gets the same id under every subject, and a new version of a subject
/// must be able to read data written with its latest version (BACKWARD compatibility).
#[derive(Default)]
pub struct InMemoryRegistry {
    state: Mutex<InMemoryState>,
}

#[derive(Default)]
struct InMemoryState {
    /// Index `i` holds the schema with id `i + 1`.
    schemas: Vec<String>,
    ids: HashMap<String, u32>,
    /// Subject → ids of its versions, oldest first.
    subjects: HashMap<String, Vec<u32>>,
}

impl InMemoryRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    fn register_now(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let parsed =
            Schema::parse_str(schema).map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let versions = state.subjects.get(subject).cloned().unwrap_or_default();
        if let Some(&id) = state.ids.get(schema)
            && versions.contains(&id)
        {
            return Ok(id);
        }
        if let Some(&latest) = versions.last() {
            let latest_text = &state.schemas[latest as usize - 1];
            let latest_schema = Schema::parse_str(latest_text)
                .map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
            if let Err(e) = SchemaCompatibility::can_read(&latest_schema, &parsed) {
                return Err(RegistryError::Incompatible {
                    subject: subject.to_string(),
                    message: format!("version {}: {e}", versions.len()),
                });
            }
        }
        let id = match state.ids.get(schema) {
            Some(&id) => id,
            None => {
                state.schemas.push(schema.to_string());
                let id = state.schemas.len() as u32;
                state.ids.insert(schema.to_string(), id);
                id
            }
        };
        state
            .subjects
            .entry(subject.to_string())
            .or_default()
            .push(id);
        Ok(id)
    }
}

impl SchemaRegistry for InMemoryRegistry {
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, RegistryError>> {
        let result = self.register_now(subject, schema);
        Box::pin(async move { result })
    }

    fn schema_by_id(&self, id: u32) -> BoxFuture<'_, Result<String, RegistryError>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let result = id
            .checked_sub(1)
            .and_then(|i| state.schemas.get(i as usize))
            .cloned()
            .ok_or(RegistryError::NotFound(id));
        Box::pin(async move { result })
    }
}

/// The Confluent Schema Registry REST API over HTTP:
/// `POST {base}/subjects/{subject}/versions` with `{"schema": "<text>"}` answers `{"id": N}`,
/// `GET {base}/schemas/ids/{id}` answers `{"schema": "<text>"}`; errors are
/// `{"error_code": N, "message": "…"}` (40403: schema not found, 409: incompatible).
pub struct HttpRegistry {
    base_url: String,
    client: reqwest::Client,
    basic_auth: Option<(String, SecretString)>,
}

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

#[derive(Deserialize)]
struct IdResponse {
    id: u32,
}

#[derive(Deserialize)]
struct SchemaResponse {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
}

#[derive(Deserialize)]
struct ErrorResponse {
    error_code: Option<i64>,
    message: Option<String>,
}

impl HttpRegistry {
    /// A client of the registry at `base_url` (e.g. `http://localhost:8081`), with a 10 s
    /// timeout per request; an `https://` registry's certificate is checked against the
    /// Mozilla roots (`webpki-roots`) and must name its host.
    pub fn new(base_url: &str) -> Result<Self, RegistryError> {
        Self::with_tls(base_url, None)
    }

    /// [`new`](Self::new), with TLS as `tls` says (its CA, client certificate and hostname
    /// check; [`crate::tls`]), for an `https://` registry: given for a plain `http://` one,
    /// it is an error rather than ignored.
    pub fn with_tls(base_url: &str, tls: Option<&ClientTls>) -> Result<Self, RegistryError> {
        let setup = |message: String| RegistryError::Setup {
            url: base_url.to_string(),
            message,
        };
        let https = base_url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
        if tls.is_some() && !https {
            return Err(setup(
                "TLS files are given but the URL is not https://".to_string(),
            ));
        }
        let mozilla = ClientTls {
            ca: None,
            client: None,
            verify_hostname: true,
        };
        // Every client gets a configuration: with no crypto provider compiled into reqwest,
        // it must not build one of its own.
        let config = crate::tls::client_config(tls.unwrap_or(&mozilla))
            .map_err(|e| setup(format!("TLS: {e}")))?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .tls_backend_preconfigured(rustls::ClientConfig::clone(&config))
            .build()
            .map_err(|e| setup(e.to_string()))?;
        Ok(HttpRegistry {
            base_url: base_url.trim_end_matches('/').to_string(),
            client,
            basic_auth: None,
        })
    }

    /// Sends HTTP basic authentication with every request.
    pub fn with_basic_auth(mut self, user: impl Into<String>, password: SecretString) -> Self {
        self.basic_auth = Some((user.into(), password));
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    async fn send(
        &self,
        method: &'static str,
        url: String,
        body: Option<serde_json::Value>,
    ) -> Result<(String, Vec<u8>), RegistryError> {
        let mut request = match body {
            Some(body) => self
                .client
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
                .body(body.to_string()),
            None => self.client.get(&url),
        }
        .header(reqwest::header::ACCEPT, CONTENT_TYPE);
        if let Some((user, password)) = &self.basic_auth {
            request = request.basic_auth(user, Some(password.expose_secret()));
        }
        // A failed handshake is an answer (the certificate is not trusted, or names another
        // host): retrying it would only wait; anything else in sending is an outage.
        let transport = |e: reqwest::Error| match crate::tls::rustls_error(&e) {
            Some(_) => RegistryError::Tls {
                method,
                url: url.clone(),
                message: with_causes(&e),
            },
            None => RegistryError::Transport {
                method,
                url: url.clone(),
                message: with_causes(&e),
            },
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?.to_vec();
        if !status.is_success() {
            let parsed: Option<ErrorResponse> = serde_json::from_slice(&bytes).ok();
            return Err(RegistryError::Http {
                method,
                url,
                status: status.as_u16(),
                error_code: parsed.as_ref().and_then(|e| e.error_code),
                message: parsed
                    .and_then(|e| e.message)
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned()),
            });
        }
        Ok((url, bytes))
    }
}

/// `error`'s message and those of its causes: reqwest says only "error sending request";
/// why (a refused connection, a certificate not trusted or naming another host) is below.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        message.push_str(": ");
        message.push_str(&e.to_string());
        cause = e.source();
    }
    message
}

fn invalid(method: &'static str, url: String, e: impl ToString) -> RegistryError {
    RegistryError::InvalidResponse {
        method,
        url,
        message: e.to_string(),
    }
}

impl SchemaRegistry for HttpRegistry {
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, RegistryError>> {
        Box::pin(async move {
            let url = format!("{}/subjects/{subject}/versions", self.base_url);
            let body = serde_json::json!({ "schema": schema, "schemaType": "AVRO" });
            match self.send("POST", url, Some(body)).await {
                Ok((url, bytes)) => serde_json::from_slice::<IdResponse>(&bytes)
                    .map(|r| r.id)
                    .map_err(|e| invalid("POST", url, e)),
                Err(RegistryError::Http {
                    status: 409,
                    message,
                    ..
                }) => Err(RegistryError::Incompatible {
                    subject: subject.to_string(),
                    message,
                }),
                Err(e) => Err(e),
            }
        })
    }

    fn schema_by_id(&self, id: u32) -> BoxFuture<'_, Result<String, RegistryError>> {
        Box::pin(async move {
            let url = format!("{}/schemas/ids/{id}", self.base_url);
            match self.send("GET", url, None).await {
                Ok((url, bytes)) => {
                    let r: SchemaResponse = serde_json::from_slice(&bytes)
                        .map_err(|e| invalid("GET", url.clone(), e))?;
                    match r.schema_type.as_deref() {
                        None | Some("AVRO") => Ok(r.schema),
                        Some(other) => Err(invalid(
                            "GET",
                            url,
                            format!("schema {id} is of type {other}, not AVRO"),
                        )),
                    }
                }
                Err(RegistryError::Http { status: 404, .. }) => Err(RegistryError::NotFound(id)),
                Err(e) => Err(e),
            }
        })
    }
}
