//! `weir list`: executions of a function or children of an execution, newest first, filtered
//! by state, outcome and time, a page at a time, from the store's list tables
//! (`executions_by_function`, `executions_by_parent`; never a scan).

use std::io::Write;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;

use super::ClusterArgs;
use crate::store::Store;
use weir_core::rows::{ExecutionState, ListBy, ListPage, ListQuery};

/// Rows a page shows unless `--limit` says otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 50;

/// Which executions to list and how; shared by `weir list` and `weir replay --function`.
#[derive(Debug, Clone, Args)]
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

impl ListFilter {
    /// The query of the first page of `limit` rows; `after` a cursor printed by a previous
    /// page.
    pub fn query(&self, limit: usize, after: Option<&str>) -> anyhow::Result<ListQuery> {
        let by = match (&self.function, &self.parent) {
            (Some(function), None) => ListBy::Function(function.clone()),
            (None, Some(parent)) => ListBy::Parent(
                parent
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--parent `{parent}`: {e}"))?,
            ),
            _ => anyhow::bail!("say which executions: --function FFQN or --parent ID"),
        };
        let state = self
            .state
            .as_deref()
            .map(str::parse::<ExecutionState>)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--state: {e} (scheduled, running or finished)"))?;
        Ok(ListQuery {
            by,
            state,
            outcome: self.outcome.clone(),
            created_from: self.since,
            created_until: self.until,
            finished_from: self.finished_since,
            finished_until: self.finished_until,
            limit: limit.max(1),
            after: after
                .map(|text| {
                    crate::present::parse_cursor(text).ok_or_else(|| {
                        anyhow::anyhow!("--after `{text}` is not a cursor printed by `weir list`")
                    })
                })
                .transpose()?,
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub filter: ListFilter,
    /// At most this many executions.
    #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
    pub limit: usize,
    /// Start after this cursor (printed as `next` by the previous page).
    #[arg(long)]
    pub after: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: ListArgs) -> ExitCode {
    let list = async {
        let query = args.filter.query(args.limit, args.after.as_deref())?;
        let store = super::client::store(&args.cluster).await?;
        let page: ListPage = store.list_executions(&query).await?;
        let mut out = std::io::stdout().lock();
        if args.json {
            let json = crate::present::page_json(&page);
            writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        } else {
            writeln!(
                out,
                "{:<40}  {:<9}  {:<24}  {:<25}  function",
                "execution", "state", "outcome", "created"
            )?;
            for e in &page.executions {
                writeln!(
                    out,
                    "{:<40}  {:<9}  {:<24}  {:<25}  {}",
                    e.execution_id.to_string(),
                    e.state.as_str(),
                    e.outcome.as_deref().unwrap_or("-"),
                    e.created_at.to_rfc3339(),
                    e.ffqn
                )?;
            }
            if let Some(next) = &page.next {
                writeln!(
                    out,
                    "next page: --after {}",
                    crate::present::cursor_text(next)
                )?;
            }
        }
        anyhow::Ok(())
    };
    match list.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
