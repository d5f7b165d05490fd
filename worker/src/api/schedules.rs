//! The schedules' and the correlation keys' endpoints: list them (from `weir.state`), and
//! create, delete, pause and resume a schedule (`weir schedule`; `docs/openapi.yaml`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, ApiError, ApiResult, Scope, authorize};

/// Every schedule, as `weir.state` has them (`weir schedule list`).
pub(super) async fn list_schedules(State(api): State<Arc<Api>>, headers: HeaderMap) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let _read = api.state_reads.begin()?;
    let api2 = Arc::clone(&api);
    let states = tokio::task::spawn_blocking(move || {
        crate::kafka::schedules::list(&api2.kafka, &api2.codec, &api2.topology)
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let shown: Vec<Value> = states.iter().map(crate::present::schedule_json).collect();
    Ok(Json(json!({ "schedules": shown })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CorrelationQuery {
    key: Option<String>,
}

/// Every correlation key, as `weir.state` has them (`weir correlation list`).
pub(super) async fn list_correlations(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    query: Result<Query<CorrelationQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(key) = &query.key {
        weir_core::state_key::StateKey::for_events(key)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let _read = api.state_reads.begin()?;
    let api2 = Arc::clone(&api);
    let keys = tokio::task::spawn_blocking(move || {
        crate::kafka::correlations::list(
            &api2.kafka,
            &api2.codec,
            &api2.topology,
            query.key.as_deref(),
        )
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let shown: Vec<Value> = keys.iter().map(crate::present::correlation_json).collect();
    Ok(Json(json!({ "correlations": shown })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleBody {
    cron: String,
    function: String,
    #[serde(default = "empty_params")]
    params: Value,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    overlap: Option<String>,
    /// A duration, e.g. `"1m"`.
    #[serde(default)]
    catchup_window: Option<String>,
}

fn empty_params() -> Value {
    json!([])
}

/// Defines a schedule (`weir schedule create`): 400 with why for a bad spec, else 202 (its
/// owner takes it; the same spec again changes nothing).
pub(super) async fn create_schedule(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let body: ScheduleBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            r#"the body is not {{"cron", "function", "params"?, "timezone"?, "overlap"?, "catchup_window"?}}: {e}"#
        ))
    })?;
    let spec = crate::topology::schedules::spec(
        &name,
        &body.cron,
        body.timezone.as_deref(),
        &body.function,
        body.params,
        body.overlap.as_deref(),
        body.catchup_window.as_deref(),
    )
    .map_err(ApiError::bad_request)?;
    send_schedule(
        &api,
        &name,
        weir_core::schedule::ScheduleAction::Create(spec),
    )
    .await
}

pub(super) async fn delete_schedule(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    send_schedule(&api, &name, weir_core::schedule::ScheduleAction::Delete).await
}

/// `pause` or `resume` a schedule.
pub(super) async fn schedule_action(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let action = match action.as_str() {
        "pause" => weir_core::schedule::ScheduleAction::Pause,
        "resume" => weir_core::schedule::ScheduleAction::Resume,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no action `{other}` of a schedule: pause or resume"),
            ));
        }
    };
    send_schedule(&api, &name, action).await
}

async fn send_schedule(
    api: &Api,
    name: &str,
    action: weir_core::schedule::ScheduleAction,
) -> ApiResult {
    weir_core::schedule::check_name(name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let command = crate::kafka::schedules::command(name, action);
    crate::kafka::schedules::send(&api.producer, &api.codec, &api.topology, &command)
        .await
        .map_err(ApiError::internal)?;
    let accepted = json!({
        "schedule": name,
        "action": command.action.as_str(),
        "command_id": command.command_id,
    });
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}
