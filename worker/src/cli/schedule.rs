//! `weir schedule create|list|pause|resume|delete`: manage recurring schedules. A command is a
//! record for the schedule's owner (see [`crate::kafka::schedules`]), which takes it in its next
//! batch; `list` reads the states the owners committed.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use rdkafka::producer::FutureProducer;
use weir_core::schedule::ScheduleAction;

use super::ClusterArgs;
use super::client::topology;
use crate::codec::Codec;
use crate::kafka::schedules;

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Define a schedule (the same spec again changes nothing; another replaces it from its
    /// next tick): `weir schedule create nightly --cron "0 0 2 * * *" --function
    /// app:report/jobs.nightly --params '["eu"]' --timezone Europe/Prague`.
    Create(CreateArgs),
    /// Show every schedule: status, next and last tick, runs, counts.
    List(ListArgs),
    /// Stop a schedule's ticks until it is resumed.
    Pause(NameArgs),
    /// Start ticking again, from the next tick after now (ticks while paused are not owed).
    Resume(NameArgs),
    /// Remove a schedule (its running executions go on).
    Delete(NameArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// 1 to 128 of A-Z a-z 0-9 _ . -
    pub name: String,
    /// Six or seven fields, seconds first: `sec min hour day-of-month month day-of-week
    /// [year]`, e.g. `"0 30 9 * * Mon-Fri"`.
    #[arg(long)]
    pub cron: String,
    /// The workflow function each tick starts, `namespace:package/interface.function`.
    #[arg(long)]
    pub function: String,
    /// Its parameters, a JSON array.
    #[arg(long, default_value = "[]")]
    pub params: String,
    /// The IANA time zone the cron fields are read in (default UTC).
    #[arg(long)]
    pub timezone: Option<String>,
    /// While an earlier tick's execution runs: `skip` the tick (the default), `allow` it, or
    /// `cancel-previous`.
    #[arg(long)]
    pub overlap: Option<String>,
    /// Ticks owed longer than this (workers down) are missed, not started (default 1m).
    #[arg(long)]
    pub catchup_window: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The schedule's name.
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(command: ScheduleCommand) -> ExitCode {
    let result = match command {
        ScheduleCommand::Create(args) => create(args).await,
        ScheduleCommand::List(args) => list(args).await,
        ScheduleCommand::Pause(args) => simple(args, ScheduleAction::Pause).await,
        ScheduleCommand::Resume(args) => simple(args, ScheduleAction::Resume).await,
        ScheduleCommand::Delete(args) => simple(args, ScheduleAction::Delete).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let params: serde_json::Value = serde_json::from_str(&args.params)
        .map_err(|e| anyhow::anyhow!("--params is not JSON: {e}"))?;
    let spec = crate::topology::schedules::spec(
        &args.name,
        &args.cron,
        args.timezone.as_deref(),
        &args.function,
        params,
        args.overlap.as_deref(),
        args.catchup_window.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    send(&args.cluster, &args.name, ScheduleAction::Create(spec)).await
}

async fn simple(args: NameArgs, action: ScheduleAction) -> anyhow::Result<()> {
    weir_core::schedule::check_name(&args.name)?;
    send(&args.cluster, &args.name, action).await
}

async fn send(cluster: &ClusterArgs, name: &str, action: ScheduleAction) -> anyhow::Result<()> {
    let topology = topology(cluster)?;
    let producer: FutureProducer = cluster.kafka()?.producer().create()?;
    let command = schedules::command(name, action);
    schedules::send(&producer, &Codec::single_object(), &topology, &command).await?;
    println!(
        "schedule `{name}`: {} sent (`weir schedule list` shows it once its worker took it; a \
         refused command is in the DLQ with why)",
        command.action.as_str()
    );
    Ok(())
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let topology = topology(&args.cluster)?;
    let kafka = args.cluster.kafka()?;
    let states = tokio::task::spawn_blocking(move || {
        schedules::list(&kafka, &Codec::single_object(), &topology)
    })
    .await??;
    if args.json {
        let shown: Vec<_> = states.iter().map(crate::present::schedule_json).collect();
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    if states.is_empty() {
        println!("no schedules");
        return Ok(());
    }
    println!(
        "{:<24} {:<7} {:<20} {:<16} {:<15} {:<26} {:<26} {:>7} {:>7} {:>7} {:>7}",
        "NAME",
        "STATUS",
        "CRON",
        "TIMEZONE",
        "OVERLAP",
        "NEXT TICK",
        "LAST TICK",
        "RUNNING",
        "STARTED",
        "SKIPPED",
        "MISSED"
    );
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339())
    };
    for s in &states {
        println!(
            "{:<24} {:<7} {:<20} {:<16} {:<15} {:<26} {:<26} {:>7} {:>7} {:>7} {:>7}",
            s.name,
            s.status.as_str(),
            s.spec.cron,
            s.spec.timezone,
            s.spec.overlap.as_str(),
            time(s.next_tick),
            time(s.last_tick),
            s.running.len(),
            s.started,
            s.skipped,
            s.missed
        );
    }
    Ok(())
}
