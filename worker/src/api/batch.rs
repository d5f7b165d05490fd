//! `GET /v1/batches`, `POST /v1/batches`, `GET /v1/batches/{id}`,
//! `POST /v1/batches/{id}/cancel`: batch operations (`weir batch`; the design:
//! `docs/design/batches.md`). A start is checked as the CLI checks it ([`crate::batch_client`]) and
//! sent to the batch's owner; the states and outcomes are read from `weir.state`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use weir_core::batch::BatchCommandAction;

use super::{Api, ApiError, ApiResult, Scope, authorize};
use crate::batch_client::BatchInputError;
use crate::kafka::batches::{self, Listed};
use crate::store::list::ListFilter;

/// The body of a start: the action, `weir list`'s filters, the rate, a reason and an id.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartBody {
    action: String,
    function: Option<String>,
    parent: Option<String>,
    state: Option<String>,
    outcome: Option<String>,
    since: Option<chrono::DateTime<chrono::Utc>>,
    until: Option<chrono::DateTime<chrono::Utc>>,
    rate: Option<f64>,
    reason: Option<String>,
    id: Option<String>,
}

async fn read_all(api: &Arc<Api>) -> Result<Vec<Listed>, ApiError> {
    let _read = api.state_reads.begin()?;
    let api2 = Arc::clone(api);
    tokio::task::spawn_blocking(move || batches::list(&api2.kafka, &api2.codec, &api2.topology))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

/// Every batch (without its outcomes).
pub(super) async fn list(State(api): State<Arc<Api>>, headers: HeaderMap) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let shown: Vec<Value> = read_all(&api)
        .await?
        .iter()
        .map(|b| crate::present::batch_json(&b.state, None))
        .collect();
    Ok(Json(json!({ "batches": shown })).into_response())
}

/// One batch with every execution's outcome; 404 for one its owner has not committed.
pub(super) async fn get(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    weir_core::batch::check_id(&id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let found = read_all(&api).await?.into_iter().find(|b| b.state.id == id);
    let Some(b) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no batch `{id}` (a start not taken yet, or refused: the DLQ says why)"),
        ));
    };
    Ok(Json(crate::present::batch_json(
        &b.state,
        Some(b.outcomes.as_slice()),
    ))
    .into_response())
}

/// Starts a batch: 400 with why for bad input (an unknown action, a rate of 0 or less, no
/// filter, a filter that selects nothing), else 202 with its id and what it selects now.
pub(super) async fn start(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let body: StartBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a batch start: {e}")))?;
    let id = body.id.unwrap_or_else(|| ulid::Ulid::new().to_string());
    let filter = ListFilter {
        function: body.function,
        parent: body.parent,
        state: body.state,
        outcome: body.outcome,
        since: body.since,
        until: body.until,
        finished_since: None,
        finished_until: None,
    };
    let rate = body.rate.unwrap_or(crate::options::DEFAULT_BATCH_RATE);
    let reason = body.reason.unwrap_or_default();
    let bad = |e: BatchInputError| match e {
        BatchInputError::Store(e) => ApiError::internal(e),
        e => ApiError::bad_request(e.to_string()),
    };
    let spec =
        crate::batch_client::spec_of(&filter, &body.action, rate, &reason, &id).map_err(bad)?;
    let total = crate::batch_client::count(&api.store, &spec)
        .await
        .map_err(bad)?;
    if total == 0 {
        return Err(ApiError::bad_request(format!(
            "no execution matches the filter: batch `{id}` not started"
        )));
    }
    let command = batches::command(&id, BatchCommandAction::Start(spec));
    batches::send(&api.producer, &api.codec, &api.topology, &command)
        .await
        .map_err(ApiError::internal)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "total": total})),
    )
        .into_response())
}

/// Cancels a batch: 202 (a cancel of an unknown batch is dead-lettered by its owner).
pub(super) async fn cancel(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    weir_core::batch::check_id(&id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let command = batches::command(&id, BatchCommandAction::Cancel);
    batches::send(&api.producer, &api.codec, &api.topology, &command)
        .await
        .map_err(ApiError::internal)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "cancel": "sent"})),
    )
        .into_response())
}
