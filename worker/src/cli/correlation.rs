//! `weir correlation list`: the correlation keys as their owners committed them to
//! `weir.state` (see [`crate::kafka::correlations`]): who holds each key, who queues for it,
//! what it buffers for the next holder.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::ClusterArgs;
use super::client::topology;
use crate::codec::Codec;
use crate::kafka::correlations;

#[derive(Debug, Subcommand)]
pub enum CorrelationCommand {
    /// Show every correlation key (or one): its holder, the executions queued for it, the
    /// events it buffers, how many forwarded event ids it remembers.
    List(ListArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Only this key, e.g. `payment:order-42` (or an execution id: the events kept for it
    /// before it existed).
    #[arg(long)]
    pub key: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(command: CorrelationCommand) -> ExitCode {
    let result = match command {
        CorrelationCommand::List(args) => list(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    if let Some(key) = &args.key {
        weir_core::state_key::StateKey::for_events(key)?;
    }
    let topology = topology(&args.cluster)?;
    let kafka = args.cluster.kafka()?;
    let only = args.key.clone();
    let keys = tokio::task::spawn_blocking(move || {
        correlations::list(&kafka, &Codec::single_object(), &topology, only.as_deref())
    })
    .await??;
    if args.json {
        let shown: Vec<_> = keys.iter().map(crate::present::correlation_json).collect();
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    if keys.is_empty() {
        println!("no correlation keys");
        return Ok(());
    }
    println!(
        "{:<40} {:<48} {:>6} {:>8} {:>10}",
        "KEY", "HOLDER", "QUEUED", "BUFFERED", "REMEMBERED"
    );
    for listed in &keys {
        let k = &listed.state;
        let holder = k
            .holders
            .first()
            .map_or_else(|| "-".to_owned(), ToString::to_string);
        println!(
            "{:<40} {:<48} {:>6} {:>8} {:>10}",
            k.key,
            holder,
            k.holders.len().saturating_sub(1),
            k.buffered.len(),
            listed.remembered
        );
    }
    Ok(())
}
