//! `POST /v1/executions/{id}/reset` (`weir reset`): a new execution from an execution's
//! history up to a point; `GET /v1/executions/{id}/reset-points`: the points it may keep up
//! to (the rules: [`crate::reset`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::{Api, ApiError, ApiResult, Scope, authorize, not_found, parse_id};
use crate::reset::ResetRefusal;
use crate::store::Store;
use crate::topology::TopicRole;

/// The body of a reset: `{"to_seq", "then"?: "keep" | "cancel" | "terminate", "reason"?}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetBody {
    to_seq: u64,
    #[serde(default)]
    then: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// Resets an execution: 400 for a body that is not a reset's, 404 for an execution the
/// store does not have, 409 `reset-point` for a point the history cannot be cut at (the
/// message says why and the latest point that can), else 202 with the new execution's id.
pub(super) async fn reset(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let id = parse_id(&id)?;
    let body: ResetBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            r#"the body is not {{"to_seq", "then"?, "reason"?}}: {e}"#
        ))
    })?;
    let then = match body.then.as_deref() {
        None => crate::codec::ResetThen::Keep,
        Some(name) => crate::codec::records::ResetThen::named(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`then` is `{name}`: it is `keep`, `cancel` or `terminate`"
            ))
        })?,
    };
    let rows = api.store.history(&id).await.map_err(ApiError::internal)?;
    let new = crate::reset::new_id();
    match crate::reset::check(&api.codec, &id, &rows, body.to_seq, &new) {
        Ok(()) => {}
        Err(ResetRefusal::NotFound(_)) => return Err(not_found(&id)),
        Err(ResetRefusal::Point(e)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "reset-point",
                e.to_string(),
            ));
        }
        Err(e @ ResetRefusal::Decode(_)) => return Err(ApiError::internal(e)),
    }
    let reason = body
        .reason
        .unwrap_or_else(|| "reset through the HTTP API".to_owned());
    let request = crate::reset::request(&id, body.to_seq, &new, then, reason);
    let topic = &api.topology.topic(TopicRole::Responses).name;
    crate::kafka::submit::send_reset(&api.producer, &api.codec, topic, &request)
        .await
        .map_err(ApiError::internal)?;
    let accepted = json!({
        "execution_id": new.to_string(),
        "reset_of": {"execution_id": id.to_string(), "seq": body.to_seq},
    });
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// The seqs a reset of an execution may keep up to: 404 for one the store does not have.
pub(super) async fn points(
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
    let records = crate::reset::records(&api.codec, &rows).map_err(ApiError::internal)?;
    let points = crate::reset::points(&id, &records);
    Ok(Json(json!({"execution_id": id.to_string(), "points": points})).into_response())
}
