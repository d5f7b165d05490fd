//! Control of one execution: cancel (or terminate), pause and resume it (`weir cancel`,
//! `weir pause`, `weir resume`; `docs/openapi.yaml`). Each checks the store's row first (404
//! for an unknown execution, 409 for a finished one) and sends its request on
//! `weir.responses`; the execution's owner decides.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::{Api, ApiError, ApiResult, Scope, authorize, not_found, parse_id};
use crate::store::Store;
use crate::topology::TopicRole;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    terminate: bool,
}

/// Cancels (or with `terminate`, terminates) an execution: 404 for one the store does not
/// have, 409 `finished` for one that has finished, else 202.
pub(super) async fn cancel(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let id = parse_id(&id)?;
    let body: CancelBody = if body.is_empty() {
        CancelBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                r#"the body is not {{"reason"?, "terminate"?}}: {e}"#
            ))
        })?
    };
    let row = api.store.execution(&id).await.map_err(ApiError::internal)?;
    match row {
        None => return Err(not_found(&id)),
        Some(row) if row.state == crate::store::ExecutionState::Finished => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "finished",
                format!("{id} has finished: nothing to cancel"),
            ));
        }
        Some(_) => {}
    }
    let request = crate::codec::CancelRequest {
        execution_id: id.clone(),
        reason: body
            .reason
            .unwrap_or_else(|| "cancelled through the HTTP API".to_owned()),
        terminate: body.terminate,
        requested_at: chrono::Utc::now(),
        waited_until: None,
    };
    let topic = &api.topology.topic(TopicRole::Responses).name;
    crate::kafka::submit::send_cancel(&api.producer, &api.codec, topic, &request)
        .await
        .map_err(ApiError::internal)?;
    let accepted = json!({"execution_id": id.to_string(), "terminate": request.terminate});
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// The body of a pause or resume (of an execution or a route): `{"reason"?}`, or empty.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseBody {
    #[serde(default)]
    pub(super) reason: Option<String>,
}

impl PauseBody {
    /// Reads `body` (empty: no reason); one that is not `{"reason"?}` is a 400.
    pub(super) fn read(body: &[u8]) -> Result<Self, ApiError> {
        if body.is_empty() {
            return Ok(PauseBody::default());
        }
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!(r#"the body is not {{"reason"?}}: {e}"#)))
    }
}

/// Pauses an execution (`weir pause`): 404 for one the store does not have, 409 `finished`
/// for one that has finished, 200 for one paused already, else 202.
pub(super) async fn pause(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    pause_or_resume(api, headers, id, body, crate::codec::PauseAction::Pause).await
}

/// Resumes a paused execution (`weir resume`): 404, 409 `finished` as for a pause; 200 for
/// one that is not paused, else 202.
pub(super) async fn resume(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    pause_or_resume(api, headers, id, body, crate::codec::PauseAction::Resume).await
}

async fn pause_or_resume(
    api: Arc<Api>,
    headers: HeaderMap,
    id: String,
    body: axum::body::Bytes,
    action: crate::codec::PauseAction,
) -> ApiResult {
    use crate::pause::{PauseRefusal, PauseStep};
    authorize(&api, &headers, Scope::Admin)?;
    let id = parse_id(&id)?;
    let body = PauseBody::read(&body)?;
    let row = api.store.execution(&id).await.map_err(ApiError::internal)?;
    let state = row.as_ref().map(|r| r.state.to_string());
    match crate::pause::check(&id, row.as_ref(), action) {
        Err(PauseRefusal::NotFound(_)) => return Err(not_found(&id)),
        Err(refusal @ PauseRefusal::Finished { .. }) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "finished",
                refusal.to_string(),
            ));
        }
        Ok(PauseStep::AlreadyThere) => {
            let body = json!({"execution_id": id.to_string(), "state": state});
            return Ok((StatusCode::OK, Json(body)).into_response());
        }
        Ok(PauseStep::Send) => {}
    }
    let reason = body
        .reason
        .unwrap_or_else(|| format!("{} through the HTTP API", crate::pause::done(action)));
    let request = crate::pause::request(&id, action, reason);
    let topic = &api.topology.topic(TopicRole::Responses).name;
    crate::kafka::submit::send_pause(&api.producer, &api.codec, topic, &request)
        .await
        .map_err(ApiError::internal)?;
    let accepted = json!({"execution_id": id.to_string(), "state": state});
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}
