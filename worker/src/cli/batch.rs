//! `weir batch start|status|list|cancel`: batch operations (the design:
//! `docs/design/batches.md`). A batch runs in the workflow worker that owns its key, not in
//! the CLI: `start` sends its command (after counting what the filter selects now, for the
//! progress bar, and refusing a filter that selects nothing), and `--follow` draws its
//! progress from the states the owner commits to `weir.state` until it ends. The CLI may be
//! killed at any time: `weir batch status ID --follow` picks the batch up again.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use rdkafka::producer::FutureProducer;
use weir_core::batch::{self, BatchCommandAction, BatchState, BatchStatus};

use super::ClusterArgs;
use super::client::topology;
use crate::codec::Codec;
use crate::kafka::batches::{self, Listed};
use crate::options::DEFAULT_BATCH_RATE;
use crate::store::list::ListFilter;

/// How often `--follow` reads the batch's state.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Start a batch: `weir batch start --action pause --function app:orders/flow.run
    /// --state running --rate 20 --follow`.
    Start(Box<StartArgs>),
    /// Show a batch's progress (`--follow`: until it ends) and outcomes.
    Status(StatusArgs),
    /// Show every batch.
    List(ListArgs),
    /// Stop a running batch: no further request is sent (those sent stand).
    Cancel(IdArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub filter: ListFilter,
    /// What to do to each execution selected: cancel, terminate, pause or resume.
    #[arg(long)]
    pub action: String,
    /// Executions acted on per second at most (more than 0).
    #[arg(long, default_value_t = DEFAULT_BATCH_RATE, allow_negative_numbers = true)]
    pub rate: f64,
    /// Why (carried by every request: `batch <id>: <reason>`).
    #[arg(long, default_value = "")]
    pub reason: String,
    /// The batch's id (default: a new ULID). Starting the same id with the same spec again
    /// changes nothing.
    #[arg(long)]
    pub id: Option<String>,
    /// Draw the progress until the batch ends.
    #[arg(long)]
    pub follow: bool,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    pub id: String,
    /// Draw the progress until the batch ends.
    #[arg(long)]
    pub follow: bool,
    /// Print every execution's outcome.
    #[arg(long)]
    pub outcomes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct IdArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    pub id: String,
}

pub async fn run(command: BatchCommand) -> ExitCode {
    let result = match command {
        BatchCommand::Start(args) => start(*args).await,
        BatchCommand::Status(args) => status(args).await,
        BatchCommand::List(args) => list(args).await,
        BatchCommand::Cancel(args) => cancel(args).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn start(args: StartArgs) -> anyhow::Result<ExitCode> {
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| ulid::Ulid::new().to_string());
    let spec =
        crate::batch_client::spec_of(&args.filter, &args.action, args.rate, &args.reason, &id)?;
    let store = super::client::store(&args.cluster).await?;
    let total = crate::batch_client::count(&store, &spec).await?;
    if total == 0 {
        anyhow::bail!("no execution matches the filter: batch `{id}` not started");
    }
    let topology = topology(&args.cluster)?;
    let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
    let command = batches::command(&id, BatchCommandAction::Start(spec));
    batches::send(&producer, &Codec::single_object(), &topology, &command).await?;
    println!(
        "batch `{id}`: {} of {total} executions at most {} a second, started (`weir batch \
         status {id} --follow` follows it; a refused start is in the DLQ with why)",
        args.action, args.rate
    );
    if args.follow {
        return follow(&args.cluster, &id, Some(total)).await;
    }
    Ok(ExitCode::SUCCESS)
}

async fn read(cluster: &ClusterArgs) -> anyhow::Result<Vec<Listed>> {
    let topology = topology(cluster)?;
    let kafka = cluster.kafka()?;
    Ok(tokio::task::spawn_blocking(move || {
        batches::list(&kafka, &Codec::single_object(), &topology)
    })
    .await??)
}

async fn find(cluster: &ClusterArgs, id: &str) -> anyhow::Result<Option<Listed>> {
    Ok(read(cluster).await?.into_iter().find(|b| b.state.id == id))
}

/// A progress line: a bar when the total is known.
pub fn progress_line(state: &BatchState, total: Option<u64>) -> String {
    const WIDTH: u64 = 30;
    let seen = state.counts.seen();
    let bar = match total {
        Some(total) if total > 0 => {
            let filled = (seen.min(total) * WIDTH / total) as usize;
            format!(
                "[{}{}] {seen}/{total} ",
                "#".repeat(filled),
                ".".repeat(WIDTH as usize - filled)
            )
        }
        _ => format!("{seen} seen "),
    };
    format!(
        "{bar}acted {} skipped {} (finished {}, already {}) {}",
        state.counts.acted,
        state.counts.finished + state.counts.already,
        state.counts.finished,
        state.counts.already,
        state.status.as_str()
    )
}

/// Draws the batch's progress until it ends: exit 0 when done, 1 when cancelled.
async fn follow(cluster: &ClusterArgs, id: &str, total: Option<u64>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stderr();
    loop {
        if let Some(listed) = find(cluster, id).await? {
            write!(out, "\r{}", progress_line(&listed.state, total))?;
            out.flush()?;
            match listed.state.status {
                BatchStatus::Running => {}
                BatchStatus::Done => {
                    writeln!(out)?;
                    return Ok(ExitCode::SUCCESS);
                }
                BatchStatus::Cancelled => {
                    writeln!(out)?;
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    batch::check_id(&args.id)?;
    if args.follow {
        follow(&args.cluster, &args.id, None).await?;
    }
    let Some(listed) = find(&args.cluster, &args.id).await? else {
        anyhow::bail!(
            "no batch `{}` (a start not taken yet, or refused: the DLQ says why)",
            args.id
        );
    };
    if args.json {
        let json = crate::present::batch_json(&listed.state, Some(listed.outcomes.as_slice()));
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(ExitCode::SUCCESS);
    }
    let s = &listed.state;
    println!("batch {}: {} {}", s.id, s.spec.action, s.status.as_str());
    println!("{}", progress_line(s, None));
    if args.outcomes {
        for turn in &listed.outcomes {
            for o in &turn.outcomes {
                println!("{}  {}", o.execution_id, o.outcome.as_str());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let listed = read(&args.cluster).await?;
    if args.json {
        let shown: Vec<_> = listed
            .iter()
            .map(|b| crate::present::batch_json(&b.state, None))
            .collect();
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        println!("no batches");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<28} {:<9} {:<9} {:>7} {:>7} {:>7}  STARTED",
        "ID", "ACTION", "STATUS", "ACTED", "SKIPPED", "RATE"
    );
    for b in &listed {
        let s = &b.state;
        println!(
            "{:<28} {:<9} {:<9} {:>7} {:>7} {:>7}  {}",
            s.id,
            s.spec.action.as_str(),
            s.status.as_str(),
            s.counts.acted,
            s.counts.finished + s.counts.already,
            s.spec.per_second,
            s.started_at.to_rfc3339()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn cancel(args: IdArgs) -> anyhow::Result<ExitCode> {
    batch::check_id(&args.id)?;
    let topology = topology(&args.cluster)?;
    let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
    let command = batches::command(&args.id, BatchCommandAction::Cancel);
    batches::send(&producer, &Codec::single_object(), &topology, &command).await?;
    println!(
        "batch `{}`: cancel sent (a cancel of an unknown batch is in the DLQ with why)",
        args.id
    );
    Ok(ExitCode::SUCCESS)
}
