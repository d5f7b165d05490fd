//! `GET /v1/routes`, `POST /v1/routes/{name}/pause|resume`: activity routes and their
//! switches on `weir.control` (`weir route`, [`crate::kafka::control`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::json;
use weir_core::control::RoutePause;

use super::control::PauseBody;
use super::{Api, ApiError, ApiResult, Scope, authorize};
use crate::topology::RouteLookupError;

/// Every route: its topic, interfaces, who serves it, whether it is paused.
pub(super) async fn list(State(api): State<Arc<Api>>, headers: HeaderMap) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let api2 = Arc::clone(&api);
    let controls = tokio::task::spawn_blocking(move || {
        crate::kafka::control::read(&api2.kafka, &api2.codec, &api2.topology)
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let routes = crate::present::routes_json(&api.topology, &controls);
    Ok(Json(json!({ "routes": routes })).into_response())
}

/// Pauses or resumes a route (`action`: `pause` or `resume`): 404 `not_found` for a name that
/// names no route, 409 `external` for a route served outside Weir, else 202.
pub(super) async fn action(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let pause = match action.as_str() {
        "pause" => true,
        "resume" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no route action `{other}` (pause, resume)"),
            ));
        }
    };
    let body = PauseBody::read(&body)?;
    let topic = match api.topology.served_route_topic(&name) {
        Ok(topic) => topic.to_owned(),
        Err(e @ RouteLookupError::Unknown { .. }) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                e.to_string(),
            ));
        }
        Err(e @ RouteLookupError::External { .. }) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "external",
                e.to_string(),
            ));
        }
    };
    let value = pause.then(|| RoutePause {
        route: topic.clone(),
        reason: body
            .reason
            .unwrap_or_else(|| "paused through the HTTP API".to_owned()),
        paused_at: chrono::Utc::now(),
    });
    crate::kafka::control::set_route(
        &api.producer,
        &api.codec,
        &api.topology,
        &topic,
        value.as_ref(),
    )
    .await
    .map_err(ApiError::internal)?;
    let accepted = json!({"topic": topic, "paused": pause});
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}
