//! Which executions to list, as `weir list`, `weir replay --function` and the HTTP API ask
//! it: a [`ListFilter`] (the flags and query parameters, all text), read into the store's
//! [`ListQuery`]; and the text of a list cursor, which a page prints and the next one takes.
//!
//! A list is of a function's executions or of an execution's children, never of both and
//! never a scan: a filter that names neither, or both, is refused.

use chrono::{DateTime, Utc};
use clap::Args;

use crate::model::ParseIdError;
use crate::store::rows::{ExecutionState, ListBy, ListCursor, ListQuery, UnknownName};

/// Which executions to list and how; shared by `weir list`, `weir replay --function` and the
/// HTTP API (whose query parameters have the flags' names).
#[derive(Debug, Clone, Default, Args)]
pub struct ListFilter {
    /// Executions of this function (`namespace:package/interface.function`).
    #[arg(long, conflicts_with = "parent")]
    pub function: Option<String>,
    /// Children of this execution.
    #[arg(long)]
    pub parent: Option<String>,
    /// Only executions in this state: `scheduled`, `running` or `finished`.
    #[arg(long)]
    pub state: Option<String>,
    /// Only finished executions with this outcome: `ok`, `err` or an execution error kind
    /// (`trap`, `timed-out`, `nondeterminism-detected`, …).
    #[arg(long)]
    pub outcome: Option<String>,
    /// Created at or after (RFC 3339; a function's list looks back 30 days by default).
    #[arg(long)]
    pub since: Option<DateTime<Utc>>,
    /// Created before (RFC 3339).
    #[arg(long)]
    pub until: Option<DateTime<Utc>>,
    /// Finished at or after (RFC 3339).
    #[arg(long)]
    pub finished_since: Option<DateTime<Utc>>,
    /// Finished before (RFC 3339).
    #[arg(long)]
    pub finished_until: Option<DateTime<Utc>>,
}

/// Why a filter cannot be read into a query.
#[derive(Debug, thiserror::Error)]
pub enum ListFilterError {
    #[error("say which executions: --function FFQN or --parent ID")]
    Which,
    #[error("--parent `{parent}`: {source}")]
    Parent {
        parent: String,
        source: ParseIdError,
    },
    #[error("--state: {0} (scheduled, running or finished)")]
    State(UnknownName),
    #[error("--after `{0}` is not a cursor printed by `weir list`")]
    Cursor(String),
    #[error(transparent)]
    Range(#[from] weir_core::list::ListRangeError),
}

impl ListFilter {
    /// The query of the first page of `limit` rows (at most
    /// [`MAX_LIST_LIMIT`](weir_core::list::MAX_LIST_LIMIT)); `after` a cursor printed by a
    /// previous page. Its creation range ends by default a day after `now`, and must span at
    /// most [`MAX_LIST_SPAN_DAYS`](weir_core::list::MAX_LIST_SPAN_DAYS).
    pub fn query(
        &self,
        limit: usize,
        after: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<ListQuery, ListFilterError> {
        let by = match (&self.function, &self.parent) {
            (Some(function), None) => ListBy::Function(function.clone()),
            (None, Some(parent)) => {
                ListBy::Parent(parent.parse().map_err(|source| ListFilterError::Parent {
                    parent: parent.clone(),
                    source,
                })?)
            }
            _ => return Err(ListFilterError::Which),
        };
        let state = self
            .state
            .as_deref()
            .map(str::parse::<ExecutionState>)
            .transpose()
            .map_err(ListFilterError::State)?;
        let query = ListQuery {
            by,
            state,
            outcome: self.outcome.clone(),
            created_from: self.since,
            created_until: self.until,
            finished_from: self.finished_since,
            finished_until: self.finished_until,
            limit: limit.max(1),
            after: after
                .map(|text| parse_cursor(text).ok_or_else(|| ListFilterError::Cursor(text.into())))
                .transpose()?,
        };
        Ok(query.checked(now)?)
    }
}

/// A list cursor as text: the creation time in milliseconds and the id, `<millis>.<id>`.
pub fn cursor_text(cursor: &ListCursor) -> String {
    format!(
        "{}.{}",
        cursor.created_at.timestamp_millis(),
        cursor.execution_id
    )
}

/// The cursor [`cursor_text`] wrote, if `text` is one.
pub fn parse_cursor(text: &str) -> Option<ListCursor> {
    let (millis, id) = text.split_once('.')?;
    Some(ListCursor {
        created_at: DateTime::from_timestamp_millis(millis.parse().ok()?)?,
        execution_id: id.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_written_and_nothing_else_is_one() {
        let cursor = ListCursor {
            created_at: DateTime::from_timestamp_millis(1_790_000_000_123).expect("time"),
            execution_id: "E_01ARZ3NDEKTSV4RRFFQ69G5FAV.o:1-child_1"
                .parse()
                .expect("id"),
        };
        assert_eq!(parse_cursor(&cursor_text(&cursor)), Some(cursor));
        assert_eq!(parse_cursor("1790000000123"), None);
        assert_eq!(parse_cursor("x.E_01ARZ3NDEKTSV4RRFFQ69G5FAV"), None);
        assert_eq!(parse_cursor("1.not-an-id"), None);
    }

    #[test]
    fn a_filter_names_a_function_or_a_parent() {
        let of = |function: Option<&str>, parent: Option<&str>| ListFilter {
            function: function.map(str::to_owned),
            parent: parent.map(str::to_owned),
            ..ListFilter::default()
        };
        assert!(matches!(
            of(None, None).query(10, None, Utc::now()),
            Err(ListFilterError::Which)
        ));
        assert!(matches!(
            of(Some("a:b/c.d"), Some("E_01ARZ3NDEKTSV4RRFFQ69G5FAV")).query(10, None, Utc::now()),
            Err(ListFilterError::Which)
        ));
        assert!(matches!(
            of(None, Some("nobody")).query(10, None, Utc::now()),
            Err(ListFilterError::Parent { .. })
        ));
        let query = of(Some("a:b/c.d"), None)
            .query(0, None, Utc::now())
            .expect("a function's list");
        assert_eq!(query.by, ListBy::Function("a:b/c.d".into()));
        assert_eq!(query.limit, 1);
        let bad_state = ListFilter {
            state: Some("asleep".into()),
            ..of(Some("a:b/c.d"), None)
        };
        assert!(matches!(
            bad_state.query(10, None, Utc::now()),
            Err(ListFilterError::State(_))
        ));
        assert!(matches!(
            of(Some("a:b/c.d"), None).query(10, Some("soon"), Utc::now()),
            Err(ListFilterError::Cursor(_))
        ));
    }

    /// `--since 0001-01-01` would read one partition per day for 740,000 days: refused, and
    /// the message says what to change.
    #[test]
    fn a_creation_range_longer_than_the_bound_is_refused() {
        let filter = ListFilter {
            function: Some("a:b/c.d".into()),
            since: Some("0001-01-01T00:00:00Z".parse().expect("year 1")),
            ..ListFilter::default()
        };
        let err = filter
            .query(10, None, Utc::now())
            .expect_err("an unbounded range");
        assert!(matches!(err, ListFilterError::Range(_)), "{err}");
        assert!(
            err.to_string().contains("a list spans at most 366"),
            "{err}"
        );
        let short = ListFilter {
            since: Some(Utc::now() - chrono::TimeDelta::days(90)),
            ..filter
        };
        assert!(short.query(10, None, Utc::now()).is_ok());
    }
}
