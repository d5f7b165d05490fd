//! The HTTP API (`weir serve`): a small JSON API over what a client can do with Kafka and the
//! store. It can submit (idempotently, by key), send an event to an execution or a correlation key, write a
//! stub's value, cancel or terminate an execution, get an execution, read its history, follow it
//! live ([`stream`]: server-sent events), list, and name the functions that have executions,
//! list, create, pause, resume and delete recurring schedules, and list correlation keys (`docs/openapi.yaml`). The web UI ([`ui`]) is
//! served beside it and reads only this API.
//!
//! - **Errors** are `{"error": {"code", "message"}}` with the HTTP status of the code.
//! - **Tokens.** Every request needs `Authorization: Bearer <token>` by default. A read token
//!   may read; an admin token may also submit, send events, write stubs and cancel. Tokens are held as SHA-256 digests, so a
//!   compare is of digests, not of the secret text.
//! - **Running without tokens** takes an explicit flag, and the server warns about it at start.
//! - **Web pages** the operator visits cannot make it write, nor read it through a rebound
//!   name ([`guard`]).

mod batch;
mod control;
pub mod guard;
mod query;
mod reset;
mod routes;
mod schedules;
pub mod stream;
pub mod ui;

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rdkafka::producer::FutureProducer;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::codec::{Codec, EventRecord};
use crate::model::{ExecutionId, Ffqn};
use crate::store::{CqlStore, Store};
use crate::topology::{TopicRole, Topology};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Get, history, list.
    Read,
    /// Everything `Read` may, and submit.
    Admin,
}

/// The tokens the API accepts, as SHA-256 digests.
#[derive(Clone, Default)]
pub struct Tokens {
    read: HashSet<[u8; 32]>,
    admin: HashSet<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens({} read, {} admin)",
            self.read.len(),
            self.admin.len()
        )
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// Adds a token of `scope` (surrounding whitespace is not part of it).
    pub fn add(&mut self, scope: Scope, token: &str) {
        let digest = digest(token.trim());
        match scope {
            Scope::Read => self.read.insert(digest),
            Scope::Admin => self.admin.insert(digest),
        };
    }

    pub fn is_empty(&self) -> bool {
        self.read.is_empty() && self.admin.is_empty()
    }

    /// The scope of `token`, if it is one of ours.
    pub fn scope_of(&self, token: &str) -> Option<Scope> {
        let digest = digest(token);
        if self.admin.contains(&digest) {
            Some(Scope::Admin)
        } else if self.read.contains(&digest) {
            Some(Scope::Read)
        } else {
            None
        }
    }
}

/// Who may call: tokens, or (explicitly) anyone.
#[derive(Clone, Debug)]
pub enum Access {
    Tokens(Tokens),
    /// No authentication at all (`--api-insecure-no-auth`).
    Anyone,
}

/// What the handlers share.
pub struct Api {
    pub access: Access,
    pub producer: FutureProducer,
    pub topology: Topology,
    pub codec: Codec,
    pub store: CqlStore,
    /// The deployment's namespace: an idempotency key's execution id is derived within it.
    pub namespace: String,
    /// For reads of `weir.state` (the schedules).
    pub kafka: crate::kafka::KafkaConfig,
    /// The host names requests may name besides addresses and `localhost` ([`guard`]).
    pub allowed_hosts: guard::AllowedHosts,
    /// The schedule and correlation listings read the whole of `weir.state`: one at a time.
    pub state_reads: StateReads,
    /// The live views open on this server ([`stream`]), bounded, and ended when it stops.
    pub streams: stream::Streams,
    /// Queries to running executions ([`query`]): one follower of `weir.answers` for the
    /// process, started at the first query.
    pub queries: crate::kafka::query_client::QueryClient,
}

/// The one read of `weir.state` the API does at a time: a listing of schedules or correlation
/// keys reads the whole compacted topic, so a caller repeating it would keep the server and
/// the brokers busy. A request that finds a read under way is answered `429 busy` with
/// `Retry-After`, never queued.
#[derive(Debug)]
pub struct StateReads(tokio::sync::Semaphore);

impl Default for StateReads {
    fn default() -> Self {
        StateReads(tokio::sync::Semaphore::new(1))
    }
}

impl StateReads {
    /// Starts a read; it ends when the permit is dropped.
    fn begin(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
        self.0.try_acquire().map_err(|_| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "busy",
                "another listing of weir.state is being read; retry in a second",
            )
        })
    }
}

/// An error as the API answers it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A failure inside the server (the store, Kafka): the caller gets a reference to the
    /// log line, not the error's text, which may name hosts, keyspaces and queries.
    fn internal(e: impl std::fmt::Display) -> Self {
        let reference = ulid::Ulid::new();
        tracing::warn!(error = %e, %reference, "API request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the request failed inside the server; its log has the cause as {reference}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

type ApiResult = Result<Response, ApiError>;

/// Checks the request's token against `needed`.
fn authorize(api: &Api, headers: &HeaderMap, needed: Scope) -> Result<(), ApiError> {
    let Access::Tokens(tokens) = &api.access else {
        return Ok(());
    };
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this API needs `Authorization: Bearer <token>`",
            )
        })?;
    match tokens.scope_of(token.trim()) {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the token is not one this API accepts",
        )),
        Some(scope) if scope < needed => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a read token cannot do this: it needs an admin token",
        )),
        Some(_) => Ok(()),
    }
}

/// The router of the API over `api`.
pub fn router(api: Arc<Api>) -> Router {
    let allowed_hosts = Arc::new(api.allowed_hosts.clone());
    Router::new()
        .route("/v1/executions", get(list).post(submit))
        .route("/v1/executions/{id}", get(execution))
        .route("/v1/executions/{id}/history", get(history))
        .route("/v1/executions/{id}/stream", get(stream::stream))
        .route(
            "/v1/executions/{id}/events",
            axum::routing::post(send_event),
        )
        .route("/v1/executions/{id}/stub", axum::routing::post(write_stub))
        .route(
            "/v1/executions/{id}/cancel",
            axum::routing::post(control::cancel),
        )
        .route(
            "/v1/executions/{id}/pause",
            axum::routing::post(control::pause),
        )
        .route(
            "/v1/executions/{id}/resume",
            axum::routing::post(control::resume),
        )
        .route(
            "/v1/executions/{id}/reset",
            axum::routing::post(reset::reset),
        )
        .route("/v1/executions/{id}/reset-points", get(reset::points))
        .route(
            "/v1/executions/{id}/queries/{name}",
            axum::routing::post(query::query),
        )
        .route("/v1/functions", get(functions))
        .route("/v1/routes", get(routes::list))
        .route(
            "/v1/routes/{name}/{action}",
            axum::routing::post(routes::action),
        )
        .route("/v1/batches", get(batch::list).post(batch::start))
        .route("/v1/batches/{id}", get(batch::get))
        .route(
            "/v1/batches/{id}/cancel",
            axum::routing::post(batch::cancel),
        )
        .route("/v1/schedules", get(schedules::list_schedules))
        .route("/v1/correlations", get(schedules::list_correlations))
        .route(
            "/v1/schedules/{name}",
            axum::routing::put(schedules::create_schedule).delete(schedules::delete_schedule),
        )
        .route(
            "/v1/schedules/{name}/{action}",
            axum::routing::post(schedules::schedule_action),
        )
        .merge(ui::routes())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint (see docs/openapi.yaml)",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            allowed_hosts,
            guard::check,
        ))
        .with_state(api)
}

/// The execution id an idempotency key stands for in `namespace`: the same key always
/// submits the same execution, which Weir runs once.
pub fn idempotent_id(namespace: &str, key: &str) -> ExecutionId {
    let digest = Sha256::digest(format!("weir-idempotency-key\0{namespace}\0{key}").as_bytes());
    ExecutionId::from_digest(&digest.into())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    ffqn: String,
    params: Value,
    idempotency_key: Option<String>,
    /// An RFC 3339 instant or a duration from now (`90s`, `5m`).
    deadline: Option<String>,
    /// At most `limit` (default 1) executions with `key` run at once.
    concurrency: Option<ConcurrencyBody>,
    /// Whose work this is, for fairness: submissions are taken round-robin by tenant within
    /// a partition. 1 to 128 bytes.
    tenant: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConcurrencyBody {
    key: String,
    limit: Option<i64>,
}

async fn submit(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let submission = submission_of(&api.namespace, &headers, &body)?;
    let topic = &api.topology.topic(TopicRole::Submissions).name;
    crate::kafka::submit::submit(&api.producer, &api.codec, topic, &submission)
        .await
        .map_err(ApiError::internal)?;
    let key = submission.execution_id.to_string();
    Ok((StatusCode::ACCEPTED, Json(json!({"execution_id": key}))).into_response())
}

/// The submission a `POST /v1/executions` body asks for in `namespace`, checked: whatever
/// breaks a rule is a 400 that says why, and nothing is sent.
fn submission_of(
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<crate::codec::Submission, ApiError> {
    let body: SubmitBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a submission: {e}")))?;
    let ffqn: Ffqn = body
        .ffqn
        .parse()
        .map_err(|e| ApiError::bad_request(format!("ffqn `{}`: {e}", body.ffqn)))?;
    if !body.params.is_array() {
        return Err(ApiError::bad_request(
            "params must be a JSON array, one element per parameter",
        ));
    }
    let id = match &body.idempotency_key {
        Some(key) if key.is_empty() || key.len() > 256 => {
            return Err(ApiError::bad_request(
                "idempotency_key must be 1 to 256 bytes",
            ));
        }
        Some(key) => idempotent_id(namespace, key),
        None => ExecutionId::top_level(ulid::Ulid::new()),
    };
    let deadline = body
        .deadline
        .as_deref()
        .map(|d| crate::kafka::submit::parse_deadline(d, chrono::Utc::now()))
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let concurrency = body
        .concurrency
        .as_ref()
        .map(|c| crate::kafka::submit::concurrency_key(Some(&c.key), c.limit))
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?
        .flatten();
    if let Some(tenant) = &body.tenant {
        crate::kafka::submit::validate_tenant(tenant)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    Ok(crate::codec::Submission {
        concurrency,
        tenant: body.tenant,
        ..crate::codec::Submission::top_level(
            &id,
            ffqn,
            body.params,
            trace_metadata(headers)?,
            deadline,
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventBody {
    name: String,
    /// Any JSON value.
    payload: Value,
    event_id: Option<String>,
}

/// Sends an event to an execution, or to a correlation key (`weir.events`): the path's
/// `{id}` is the target, an execution id (`E_…`) or a key (percent-encoded where it holds
/// `/`, `?`, `#` or `%`). An execution the store shows finished is refused at once (409);
/// one the store does not know yet is sent (it may have been submitted an instant ago), and
/// goes to the DLQ if the execution never comes. An event for a key is sent as it is: the
/// key's owner forwards it to the execution holding the key, or keeps it until one
/// registers.
async fn send_event(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let body: EventBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not an event: {e}")))?;
    let event = crate::kafka::submit::event(
        &id,
        &body.name,
        &body.payload.to_string(),
        body.event_id,
        chrono::Utc::now(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let EventRecord::Execution(inbound) = &event {
        let row = api
            .store
            .execution(&inbound.target)
            .await
            .map_err(ApiError::internal)?;
        if row.is_some_and(|r| r.state == crate::store::ExecutionState::Finished) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "finished",
                format!("{} has finished: it takes no more events", inbound.target),
            ));
        }
    }
    let topic = &api.topology.topic(TopicRole::Events).name;
    crate::kafka::submit::send_event(&api.producer, &api.codec, topic, &event)
        .await
        .map_err(ApiError::internal)?;
    let accepted = match &event {
        EventRecord::Execution(inbound) => json!({
            "execution_id": inbound.target.to_string(),
            "event_id": inbound.event.event_id,
        }),
        EventRecord::Keyed(keyed) => json!({
            "correlation_key": keyed.key,
            "event_id": keyed.event.event_id,
        }),
    };
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StubBody {
    /// `{"ok": …}` or `{"err": …}`.
    result: crate::model::ExecutionResult,
}

/// Writes a stub child's value (`weir stub`), with Obelisk's answers read from its parent's
/// stored history: 404 `not_found` (no such stub request), 409 `conflict` (it holds another
/// value), 200 (it holds this value already), else 202 (sent to the parent, which takes it by
/// the same rules: a writer that came first makes this one a conflict, dead-lettered).
async fn write_stub(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    use crate::present::{StubState, stub_state};
    authorize(&api, &headers, Scope::Admin)?;
    let child = parse_id(&id)?;
    let body: StubBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            r#"the body is not {{"result": {{"ok"|"err": …}}}}: {e}"#
        ))
    })?;
    if let crate::model::ExecutionResult::ExecutionError(_) = body.result {
        return Err(ApiError::bad_request(
            r#"a stub's value is {"ok": …} or {"err": …}"#,
        ));
    }
    let no_stub = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no stub request {child} in the store"),
        )
    };
    let parent = child.parent().ok_or_else(no_stub)?;
    let rows = api
        .store
        .history(&parent)
        .await
        .map_err(ApiError::internal)?;
    let state = stub_state(&api.codec, &rows, &child).map_err(ApiError::internal)?;
    let outcome = |outcome: &str| json!({"execution_id": child.to_string(), "outcome": outcome});
    match state {
        StubState::NotAStub => return Err(no_stub()),
        StubState::Written(held) if held == body.result => {
            return Ok((StatusCode::OK, Json(outcome("ok"))).into_response());
        }
        StubState::Written(held) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("{child} holds {held}"),
            ));
        }
        StubState::Open => {}
    }
    let topic = &api.topology.topic(TopicRole::Responses).name;
    crate::kafka::submit::send_stub(&api.producer, &api.codec, topic, &child, body.result)
        .await
        .map_err(ApiError::internal)?;
    Ok((StatusCode::ACCEPTED, Json(outcome("sent"))).into_response())
}

/// The W3C trace headers of a request, as the metadata that starts the execution in the
/// caller's trace ([`weir_core::trace`]); a malformed `traceparent` is refused.
fn trace_metadata(
    headers: &HeaderMap,
) -> Result<std::collections::BTreeMap<String, String>, ApiError> {
    use weir_core::trace::{TRACEPARENT, TRACESTATE, TraceParent};
    let mut metadata = std::collections::BTreeMap::new();
    let text = |name: &str| -> Result<Option<String>, ApiError> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map(str::to_owned)
                    .map_err(|_| ApiError::bad_request(format!("the {name} header is not text")))
            })
            .transpose()
    };
    if let Some(value) = text(TRACEPARENT)? {
        let trace = TraceParent::parse(&value).map_err(|e| ApiError::bad_request(e.to_string()))?;
        metadata.insert(TRACEPARENT.to_owned(), trace.to_string());
        if let Some(state) = text(TRACESTATE)? {
            metadata.insert(TRACESTATE.to_owned(), state);
        }
    }
    Ok(metadata)
}

fn parse_id(id: &str) -> Result<ExecutionId, ApiError> {
    id.parse()
        .map_err(|e| ApiError::bad_request(format!("`{id}` is not an execution id: {e}")))
}

fn not_found(id: &ExecutionId) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no execution {id} in the store"),
    )
}

async fn execution(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let id = parse_id(&id)?;
    let row = api.store.execution(&id).await.map_err(ApiError::internal)?;
    let row = row.ok_or_else(|| not_found(&id))?;
    Ok(Json(crate::present::execution_json(&row)).into_response())
}

async fn history(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let id = parse_id(&id)?;
    let rows = api.store.history(&id).await.map_err(ApiError::internal)?;
    if rows.is_empty() {
        return Err(not_found(&id));
    }
    let entries = crate::present::decode_history(&api.codec, &rows).map_err(ApiError::internal)?;
    let json: Vec<Value> = entries
        .iter()
        .map(|(row, record)| crate::present::history_entry_json(row, record))
        .collect();
    Ok(Json(json!({"execution_id": id.to_string(), "entries": json})).into_response())
}

async fn functions(State(api): State<Arc<Api>>, headers: HeaderMap) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let functions = api.store.functions().await.map_err(ApiError::internal)?;
    Ok(Json(json!({"functions": functions})).into_response())
}

/// The query of `GET /v1/executions`: the filters of `weir list`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    function: Option<String>,
    parent: Option<String>,
    state: Option<String>,
    outcome: Option<String>,
    since: Option<chrono::DateTime<chrono::Utc>>,
    until: Option<chrono::DateTime<chrono::Utc>>,
    finished_since: Option<chrono::DateTime<chrono::Utc>>,
    finished_until: Option<chrono::DateTime<chrono::Utc>>,
    limit: Option<usize>,
    after: Option<String>,
}

async fn list(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let Query(p) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let filter = crate::store::list::ListFilter {
        function: p.function,
        parent: p.parent,
        state: p.state,
        outcome: p.outcome,
        since: p.since,
        until: p.until,
        finished_since: p.finished_since,
        finished_until: p.finished_until,
    };
    let limit = p.limit.unwrap_or(crate::options::DEFAULT_LIST_LIMIT);
    let query = filter
        .query(limit, p.after.as_deref(), chrono::Utc::now())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let page = api
        .store
        .list_executions(&query)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(crate::present::page_json(&page)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("a body");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    /// The store's or Kafka's error text stays in the server's log; the caller gets a
    /// reference to it.
    #[tokio::test]
    async fn an_internal_error_answers_a_reference_not_the_cause() {
        let response = ApiError::internal(
            "CQL statement failed on 10.0.0.7:9042: keyspace secret_ks: SELECT * FROM ...",
        )
        .into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_of(response).await;
        let message = body["error"]["message"].as_str().expect("a message");
        assert!(!message.contains("10.0.0.7"), "{message}");
        assert!(!message.contains("secret_ks"), "{message}");
        let reference = message.rsplit(' ').next().expect("a reference");
        assert!(reference.parse::<ulid::Ulid>().is_ok(), "{message}");
    }

    /// A submission's tenant is carried as given; an empty one or one over 128 bytes is
    /// answered 400 with why.
    #[tokio::test]
    async fn a_submission_carries_its_tenant_and_a_bad_one_is_a_400() {
        let headers = HeaderMap::new();
        let body = |tenant: Value| {
            json!({"ffqn": "weir-examples:workflows/hello.greet", "params": ["ann"], "tenant": tenant})
                .to_string()
        };
        let submission =
            submission_of("ns", &headers, body(json!("acme")).as_bytes()).expect("a submission");
        assert_eq!(submission.tenant.as_deref(), Some("acme"));
        let submission = submission_of("ns", &headers, body(Value::Null).as_bytes())
            .expect("a submission without a tenant");
        assert_eq!(submission.tenant, None);
        for (tenant, why) in [
            (
                json!("t".repeat(129)),
                "the tenant is 129 bytes: a tenant is 1 to 128 bytes",
            ),
            (json!(""), "the tenant is empty"),
            (json!(7), "the body is not a submission"),
        ] {
            let refused = submission_of("ns", &headers, body(tenant).as_bytes())
                .expect_err("refused")
                .into_response();
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
            let body = body_of(refused).await;
            let message = body["error"]["message"].as_str().expect("a message");
            assert!(message.contains(why), "{message}");
        }
    }

    /// A second listing of `weir.state` while one is read is answered 429 with Retry-After;
    /// once the first ends, the next may start.
    #[tokio::test]
    async fn one_read_of_the_state_topic_at_a_time() {
        let reads = StateReads::default();
        let first = reads.begin().expect("the first read");
        let busy = reads.begin().expect_err("a second read at once");
        let response = busy.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers().get(axum::http::header::RETRY_AFTER),
            Some(&axum::http::HeaderValue::from_static("1"))
        );
        assert_eq!(body_of(response).await["error"]["code"], "busy");
        drop(first);
        assert!(reads.begin().is_ok());
    }
}
