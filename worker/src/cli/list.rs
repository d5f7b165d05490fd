//! `weir list`: executions of a function or children of an execution, newest first, filtered
//! by state, outcome and time, a page at a time, from the store's list tables
//! (`executions_by_function`, `executions_by_parent`; never a scan).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::ClusterArgs;
use crate::options::DEFAULT_LIST_LIMIT;
use crate::store::Store;
use crate::store::list::{ListFilter, cursor_text};
use weir_core::rows::ListPage;

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
        let query = args
            .filter
            .query(args.limit, args.after.as_deref(), chrono::Utc::now())?;
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
                writeln!(out, "next page: --after {}", cursor_text(next))?;
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
