//! Queries (`POST /v1/executions/{id}/queries/{name}`; `weir query`; [`weir_core::query`]):
//! ask a running execution a query and answer with its value, through the process's one
//! [`QueryClient`](crate::kafka::query_client::QueryClient).
//!
//! 200 `{"value", "version"}`; an answer that is an error is `{"error": {"code": <kind>,
//! "message"}}` with the status of its kind ([`status_of`]); no answer by the deadline is 504
//! `no-answer`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use weir_core::query::QueryErrorKind;

use super::{Api, ApiError, ApiResult, Scope, authorize, parse_id};
use crate::kafka::query_client::{DEFAULT_DEADLINE, QueryClientError, request};

/// The longest a request may wait for its answer, in milliseconds.
pub const MAX_DEADLINE_MS: u64 = 60_000;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct QueryBody {
    /// The query function's arguments, a JSON array (default `[]`).
    #[serde(default)]
    params: Option<Value>,
    /// How long to wait for the answer (default 10 s, at most [`MAX_DEADLINE_MS`]).
    #[serde(default)]
    deadline_ms: Option<u64>,
}

/// The HTTP status of an answer of `kind`.
pub fn status_of(kind: QueryErrorKind) -> StatusCode {
    match kind {
        QueryErrorKind::UnknownExecution | QueryErrorKind::UnknownQuery => StatusCode::NOT_FOUND,
        QueryErrorKind::Finished | QueryErrorKind::Paused | QueryErrorKind::NotStarted => {
            StatusCode::CONFLICT
        }
        QueryErrorKind::InvalidParams | QueryErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        QueryErrorKind::SideEffect | QueryErrorKind::ValueTooLarge => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        QueryErrorKind::Unavailable | QueryErrorKind::DeadlineExceeded => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        QueryErrorKind::Trap | QueryErrorKind::Other => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Asks execution `id` the query `name` and answers with its value (see the module docs).
pub(super) async fn query(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult {
    authorize(&api, &headers, Scope::Admin)?;
    let id = parse_id(&id)?;
    let body: QueryBody = if body.iter().all(u8::is_ascii_whitespace) {
        QueryBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                r#"the body is not {{"params"?: [...], "deadline_ms"?: N}}: {e}"#
            ))
        })?
    };
    let wait = match body.deadline_ms {
        None => DEFAULT_DEADLINE,
        Some(ms) if (1..=MAX_DEADLINE_MS).contains(&ms) => Duration::from_millis(ms),
        Some(ms) => {
            return Err(ApiError::bad_request(format!(
                "deadline_ms is 1 to {MAX_DEADLINE_MS}, not {ms}"
            )));
        }
    };
    let params = body.params.unwrap_or_else(|| json!([]));
    let request = request(id, &name, params, wait)
        .map_err(|e| ApiError::new(status_of(e.kind), e.kind.as_str(), e.message))?;
    match api.queries.ask(&request).await {
        Ok(answer) => match answer.outcome {
            Ok(value) => {
                Ok(Json(json!({"value": value, "version": answer.version})).into_response())
            }
            Err(e) => Err(ApiError::new(status_of(e.kind), e.kind.as_str(), e.message)),
        },
        Err(e @ QueryClientError::NoAnswer { .. }) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "no-answer",
            e.to_string(),
        )),
        Err(e) => Err(ApiError::internal(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_status_the_api_documents() {
        let expected = |kind| match kind {
            QueryErrorKind::UnknownExecution => 404,
            QueryErrorKind::Finished => 409,
            QueryErrorKind::NotStarted => 409,
            QueryErrorKind::Paused => 409,
            QueryErrorKind::UnknownQuery => 404,
            QueryErrorKind::InvalidParams => 400,
            QueryErrorKind::SideEffect => 422,
            QueryErrorKind::Trap => 500,
            QueryErrorKind::DeadlineExceeded => 503,
            QueryErrorKind::Unavailable => 503,
            QueryErrorKind::ValueTooLarge => 422,
            QueryErrorKind::InvalidRequest => 400,
            QueryErrorKind::Other => 500,
        };
        for kind in QueryErrorKind::ALL {
            assert_eq!(status_of(kind).as_u16(), expected(kind), "{kind}");
        }
    }
}
