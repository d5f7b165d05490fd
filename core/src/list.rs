//! What one list request may cost: the bounds every store applies to a [`ListQuery`], so that
//! a caller with a read token cannot make the store do unbounded work (`docs/design/api.md`,
//! "Bounded work").
//!
//! - **The range.** A function's list reads one store partition per UTC day of its creation
//!   range, so the range spans at most [`MAX_LIST_SPAN_DAYS`]; a longer one is refused with
//!   [`ListRangeError`] at the edge (the CLI's flags, the API's query), never clamped silently.
//! - **The rows read.** A page reads at most [`MAX_LIST_ROWS_READ`] rows. Filters the store
//!   cannot push into its query (state, outcome, finish time) are applied to the rows read; a
//!   page that reads that many without filling ends early, and its `next` cursor is the last
//!   row read, so the following page starts exactly after it. A sparse filter costs pages, not
//!   one unbounded request, and skips nothing: rows come newest first (creation time, then
//!   id, both descending) in every store, and the cursor is a position in that order.
//! - **The page.** At most [`MAX_LIST_LIMIT`] executions.
//!
//! Both stores feed the rows they read, in order, to one [`ListScan`]: the rule is written
//! once.

use chrono::{DateTime, TimeDelta, Utc};

use crate::rows::{ListBy, ListCursor, ListPage, ListQuery, ListedExecution};

/// The longest creation range a function's list may span, in days.
pub const MAX_LIST_SPAN_DAYS: i64 = 366;

/// The most rows a store reads for one page.
pub const MAX_LIST_ROWS_READ: usize = 10_000;

/// The most executions one page holds.
pub const MAX_LIST_LIMIT: usize = 1_000;

/// A creation range a list refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListRangeError {
    #[error(
        "the creation range {from} .. {until} spans {days} days; a list spans at most \
         {MAX_LIST_SPAN_DAYS} (give a later --since or an earlier --until)"
    )]
    TooLong {
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        days: i64,
    },
    #[error("the creation range {from} .. {until} is empty: --since must be before --until")]
    Empty {
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    },
}

impl ListQuery {
    /// [`ListQuery::bounded`], refused if its creation range is empty or longer than
    /// [`MAX_LIST_SPAN_DAYS`]; the limit is brought within 1..=[`MAX_LIST_LIMIT`].
    pub fn checked(&self, now: DateTime<Utc>) -> Result<ListQuery, ListRangeError> {
        let mut query = self.bounded(now);
        query.limit = query.limit.clamp(1, MAX_LIST_LIMIT);
        if let (ListBy::Function(_), Some(from), Some(until)) =
            (&query.by, query.created_from, query.created_until)
        {
            if from >= until {
                return Err(ListRangeError::Empty { from, until });
            }
            let span = until - from;
            if span > TimeDelta::days(MAX_LIST_SPAN_DAYS) {
                return Err(ListRangeError::TooLong {
                    from,
                    until,
                    days: span.num_days(),
                });
            }
        }
        Ok(query)
    }
}

/// One page being read: a store offers it the rows it reads, newest first, until it says it
/// has enough, then takes the page.
#[derive(Debug)]
pub struct ListScan<'q> {
    query: &'q ListQuery,
    budget: usize,
    read: usize,
    found: Vec<ListedExecution>,
    last_read: Option<ListCursor>,
}

impl<'q> ListScan<'q> {
    pub fn new(query: &'q ListQuery) -> Self {
        Self::with_budget(query, MAX_LIST_ROWS_READ)
    }

    /// A scan that reads at most `budget` rows (at least one); [`ListScan::new`] reads at
    /// most [`MAX_LIST_ROWS_READ`].
    pub fn with_budget(query: &'q ListQuery, budget: usize) -> Self {
        ListScan {
            query,
            budget: budget.max(1),
            read: 0,
            found: Vec::new(),
            last_read: None,
        }
    }

    /// Whether the page needs more rows: it has not found one more than its limit (which
    /// tells that a next page exists) and has read less than its budget.
    pub fn wants_more(&self) -> bool {
        self.found.len() <= self.query.limit.max(1) && self.read < self.budget
    }

    /// The next row read (newer rows first); returns [`ListScan::wants_more`].
    pub fn offer(&mut self, row: ListedExecution) -> bool {
        debug_assert!(
            self.last_read.as_ref().is_none_or(
                |last| row.order_key() <= (last.created_at, last.execution_id.to_string())
            ),
            "rows are offered newest first"
        );
        self.read += 1;
        self.last_read = Some(ListCursor {
            created_at: row.created_at,
            execution_id: row.execution_id.clone(),
        });
        if self.query.matches(&row) {
            self.found.push(row);
        }
        self.wants_more()
    }

    /// The page: up to the limit of what matched; `next` after the last one shown if more
    /// matched, else after the last row read if the budget ran out first, else none.
    pub fn page(self) -> ListPage {
        let out_of_budget = self.read >= self.budget;
        let mut page = self.query.page(self.found);
        if page.next.is_none() && out_of_budget {
            page.next = self.last_read;
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::ExecutionState;

    fn at(millis: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_790_000_000_000 + millis).expect("time")
    }

    fn row(n: i64, state: ExecutionState) -> ListedExecution {
        ListedExecution {
            execution_id: format!("E_01ARZ3NDEKTSV4RRFFQ69G5F{n:02}")
                .parse()
                .unwrap_or_else(|e| panic!("id {n}: {e}")),
            ffqn: "a:b/c.d".into(),
            parent_id: None,
            state,
            outcome: None,
            created_at: at(n),
            finished_at: None,
        }
    }

    fn query(limit: usize) -> ListQuery {
        ListQuery {
            by: ListBy::Function("a:b/c.d".into()),
            state: Some(ExecutionState::Running),
            outcome: None,
            created_from: Some(at(-1)),
            created_until: Some(at(1_000)),
            finished_from: None,
            finished_until: None,
            limit,
            after: None,
        }
    }

    /// Reads `rows` (given newest first) page by page with `budget`, as a store does, and
    /// returns the pages.
    fn pages(query: &ListQuery, rows: &[ListedExecution], budget: usize) -> Vec<ListPage> {
        let mut pages = Vec::new();
        let mut query = query.clone();
        loop {
            let mut scan = ListScan::with_budget(&query, budget);
            for row in rows
                .iter()
                .filter(|r| query.after.as_ref().is_none_or(|c| c.precedes(r)))
            {
                if !scan.offer(row.clone()) {
                    break;
                }
            }
            let page = scan.page();
            query.after = page.next.clone();
            let last = page.next.is_none();
            pages.push(page);
            if last {
                return pages;
            }
            assert!(pages.len() < 100, "the pages never end");
        }
    }

    /// A filter that matches one row in four, read with a budget of 5 rows a page: every page
    /// reads at most 5 rows, and the pages together list every match once, in order.
    #[test]
    fn a_sparse_filter_costs_pages_and_skips_nothing() {
        let rows: Vec<ListedExecution> = (0..40)
            .rev()
            .map(|n| {
                let state = if n % 4 == 0 {
                    ExecutionState::Running
                } else {
                    ExecutionState::Finished
                };
                row(n, state)
            })
            .collect();
        let query = query(3);
        let pages = pages(&query, &rows, 5);
        let listed: Vec<_> = pages
            .iter()
            .flat_map(|p| p.executions.iter().map(|e| e.created_at))
            .collect();
        let expected: Vec<_> = (0..40).rev().filter(|n| n % 4 == 0).map(at).collect();
        assert_eq!(listed, expected);
        // 40 rows at 5 a page: 8 pages (one more to find the end would be a 9th).
        assert!(pages.len() >= 8, "{} pages", pages.len());
        assert!(pages.iter().all(|p| p.executions.len() <= 3));
        // With an unlimited budget the same query fills pages of 3.
        let full = super::tests::pages(&query, &rows, usize::MAX);
        assert_eq!(full[0].executions.len(), 3);
        assert_eq!(full.len(), 4);
    }

    #[test]
    fn a_range_is_refused_when_empty_or_longer_than_the_bound() {
        let now = at(0);
        let mut q = query(5_000);
        let checked = q.checked(now).expect("a short range");
        assert_eq!(checked.limit, MAX_LIST_LIMIT);

        q.created_from = Some(DateTime::from_timestamp(-62_135_596_800, 0).expect("year 1"));
        assert!(matches!(
            q.checked(now),
            Err(ListRangeError::TooLong { days, .. }) if days > 700_000
        ));
        q.created_from = Some(at(5));
        q.created_until = Some(at(5));
        assert!(matches!(q.checked(now), Err(ListRangeError::Empty { .. })));
        // Only `since`: the range ends a day after now.
        q.created_until = None;
        q.created_from = Some(now - TimeDelta::days(MAX_LIST_SPAN_DAYS - 2));
        assert!(q.checked(now).is_ok());
        q.created_from = Some(now - TimeDelta::days(MAX_LIST_SPAN_DAYS));
        assert!(q.checked(now).is_err());
        // A parent's children have no creation range.
        let children = ListQuery {
            by: ListBy::Parent("E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("id")),
            created_from: Some(DateTime::from_timestamp(0, 0).expect("1970")),
            created_until: None,
            ..query(10)
        };
        assert!(children.checked(now).is_ok());
    }
}
