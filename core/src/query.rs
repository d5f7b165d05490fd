//! Queries (issue 35 item 5; the design: `docs/design/queries.md`): reading a running
//! execution's state without changing it.
//!
//! A workflow keeps named values of its own with the host's `set-state` (`weir:workflow/host`;
//! not recorded: a replay sets them again, in the same order, so the values of a parked run are
//! a function of its history). It exports query functions, declared in `components.toml`
//! (`queries = ["status"]`), which read those values with `get-state` and compute an answer.
//!
//! A [`QueryRequest`] travels on `weir.responses`, keyed by its execution (header
//! `weir.kind = query`), so that the execution's owner takes it in order with its other
//! inputs. The owner runs the query function in a fresh instance of the execution's build
//! that sees the parked run's values and may call nothing that would be recorded (a side
//! effect traps: [`QueryErrorKind::SideEffect`]). It appends nothing to the history, and
//! answers with a [`QueryAnswer`] on `weir.answers` (keyed by the execution), in the batch's
//! transaction: a query taken by a committed batch is answered exactly once; one whose batch
//! aborted is taken again by the next owner.
//!
//! Invariants (checked by the simulation's `queries` class):
//! - a query appends nothing to any history, starts nothing and changes no state;
//! - every query read by a committed batch is answered once in that batch, with the values
//!   of the history as the batch had it before the query (the answer's `version`);
//! - a query past its deadline is answered `deadline-exceeded` without running.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::ExecutionId;

/// The longest query id, in bytes.
pub const MAX_QUERY_ID_LEN: usize = 128;

/// A query of an execution: `weir.responses`, keyed by `execution_id`, kind `query`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryRequest {
    /// The caller's id for the query, echoed by the answer: 1 to [`MAX_QUERY_ID_LEN`] bytes.
    pub query_id: String,
    pub execution_id: ExecutionId,
    /// The query function (an export of the execution's component, declared in its
    /// `queries`), by its WIT name: `status`.
    pub name: String,
    /// Its arguments: a JSON array, one value per parameter.
    pub params: Value,
    pub requested_at: DateTime<Utc>,
    /// No answer is worth anything after it: an owner that takes the query later answers
    /// `deadline-exceeded` without running it.
    pub deadline: DateTime<Utc>,
}

/// The answer to a [`QueryRequest`]: `weir.answers`, keyed by `execution_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryAnswer {
    pub query_id: String,
    pub execution_id: ExecutionId,
    /// The query function's value, as JSON, or why there is none.
    pub outcome: Result<Value, QueryError>,
    /// The execution's history version the answer reflects: its next seq when the query ran
    /// (0 when the execution does not exist).
    pub version: u64,
    pub answered_at: DateTime<Utc>,
}

/// Why a query has no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct QueryError {
    pub kind: QueryErrorKind,
    pub message: String,
}

impl QueryError {
    pub fn new(kind: QueryErrorKind, message: impl Into<String>) -> Self {
        QueryError {
            kind,
            message: message.into(),
        }
    }
}

/// The kinds of [`QueryError`]. New kinds are added at the end; a reader that does not know
/// one reads it as [`QueryErrorKind::Other`] (the Avro enum's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueryErrorKind {
    /// No execution has the id (on this deployment).
    UnknownExecution,
    /// The execution has finished: its result is its answer (`weir result`).
    Finished,
    /// The execution has not started yet (scheduled, or queued for a concurrency slot).
    NotStarted,
    /// The execution is paused: it runs no code, a query's included, until resumed.
    Paused,
    /// The execution's component declares no query of that name.
    UnknownQuery,
    /// The params do not fit the query function's parameters.
    InvalidParams,
    /// The query function called the host for something that would be recorded (a child,
    /// a delay, a random value, a correlation key): a query must not change anything.
    SideEffect,
    /// The query function trapped or hit a limit.
    Trap,
    /// The owner took the query after its deadline.
    DeadlineExceeded,
    /// The owner could not run the execution's code now (its build is not deployed, or the
    /// instance pool is full): ask again later.
    Unavailable,
    /// The answer is larger than a record may carry.
    ValueTooLarge,
    /// The request itself is malformed (an empty or too long id, params not an array).
    InvalidRequest,
    /// A kind this reader does not know.
    Other,
}

impl QueryErrorKind {
    /// Every kind, in the Avro enum's order.
    pub const ALL: [QueryErrorKind; 13] = [
        QueryErrorKind::UnknownExecution,
        QueryErrorKind::Finished,
        QueryErrorKind::NotStarted,
        QueryErrorKind::Paused,
        QueryErrorKind::UnknownQuery,
        QueryErrorKind::InvalidParams,
        QueryErrorKind::SideEffect,
        QueryErrorKind::Trap,
        QueryErrorKind::DeadlineExceeded,
        QueryErrorKind::Unavailable,
        QueryErrorKind::ValueTooLarge,
        QueryErrorKind::InvalidRequest,
        QueryErrorKind::Other,
    ];

    /// The kind as the wire and the CLI spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryErrorKind::UnknownExecution => "unknown-execution",
            QueryErrorKind::Finished => "finished",
            QueryErrorKind::NotStarted => "not-started",
            QueryErrorKind::Paused => "paused",
            QueryErrorKind::UnknownQuery => "unknown-query",
            QueryErrorKind::InvalidParams => "invalid-params",
            QueryErrorKind::SideEffect => "side-effect",
            QueryErrorKind::Trap => "trap",
            QueryErrorKind::DeadlineExceeded => "deadline-exceeded",
            QueryErrorKind::Unavailable => "unavailable",
            QueryErrorKind::ValueTooLarge => "value-too-large",
            QueryErrorKind::InvalidRequest => "invalid-request",
            QueryErrorKind::Other => "other",
        }
    }

    /// The kind `text` spells; an unknown spelling is [`QueryErrorKind::Other`].
    pub fn parse(text: &str) -> QueryErrorKind {
        QueryErrorKind::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .unwrap_or(QueryErrorKind::Other)
    }
}

impl std::fmt::Display for QueryErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a request before any execution is looked at: an id that is empty or
/// longer than [`MAX_QUERY_ID_LEN`], a name that is empty, params that are not an array.
/// One rule for every writer (the CLI, the API) and the owner.
pub fn check_request(query_id: &str, name: &str, params: &Value) -> Result<(), QueryError> {
    let invalid = |message: String| Err(QueryError::new(QueryErrorKind::InvalidRequest, message));
    if query_id.is_empty() || query_id.len() > MAX_QUERY_ID_LEN {
        return invalid(format!(
            "a query id is 1 to {MAX_QUERY_ID_LEN} bytes, not {}",
            query_id.len()
        ));
    }
    if name.is_empty() {
        return invalid("a query names its function".to_owned());
    }
    if !params.is_array() {
        return invalid(format!("a query's params are a JSON array, not `{params}`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_kind_is_read_back_from_its_spelling_and_an_unknown_one_is_other() {
        for kind in QueryErrorKind::ALL {
            assert_eq!(QueryErrorKind::parse(kind.as_str()), kind);
        }
        assert_eq!(
            QueryErrorKind::parse("from-the-future"),
            QueryErrorKind::Other
        );
    }

    #[test]
    fn a_request_needs_an_id_of_bounded_length_a_name_and_an_array_of_params() {
        assert!(check_request("q1", "status", &json!([])).is_ok());
        let kind = |r: Result<(), QueryError>| r.unwrap_err().kind;
        assert_eq!(
            kind(check_request("", "status", &json!([]))),
            QueryErrorKind::InvalidRequest
        );
        let long = "q".repeat(MAX_QUERY_ID_LEN + 1);
        assert_eq!(
            kind(check_request(&long, "status", &json!([]))),
            QueryErrorKind::InvalidRequest
        );
        assert!(check_request(&"q".repeat(MAX_QUERY_ID_LEN), "status", &json!([])).is_ok());
        assert_eq!(
            kind(check_request("q1", "", &json!([]))),
            QueryErrorKind::InvalidRequest
        );
        assert_eq!(
            kind(check_request("q1", "status", &json!({"a": 1}))),
            QueryErrorKind::InvalidRequest
        );
    }
}
