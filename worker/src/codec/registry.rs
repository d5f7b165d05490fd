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
use serde::Deserialize;

use super::error::RegistryError;

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
    basic_auth: Option<(String, String)>,
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
    /// timeout per request. Plain HTTP only: this build has no TLS backend.
    pub fn new(base_url: &str) -> Result<Self, RegistryError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| RegistryError::Transport {
                method: "-",
                url: base_url.to_string(),
                message: e.to_string(),
            })?;
        Ok(HttpRegistry {
            base_url: base_url.trim_end_matches('/').to_string(),
            client,
            basic_auth: None,
        })
    }

    /// Sends HTTP basic authentication with every request.
    pub fn with_basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.basic_auth = Some((user.into(), password.into()));
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
            request = request.basic_auth(user, Some(password));
        }
        let transport = |e: reqwest::Error| RegistryError::Transport {
            method,
            url: url.clone(),
            message: e.to_string(),
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
