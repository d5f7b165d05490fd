//! `weir route pause|resume|list`: hold an activity route's requests in Kafka while what it
//! calls is down, and let them run again (the switch: a record on `weir.control`,
//! [`crate::kafka::control`]; the rules: `docs/design/pause.md#routes`).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use rdkafka::producer::FutureProducer;
use weir_core::control::RoutePause;

use super::ClusterArgs;
use super::client::{fail, topology};
use crate::codec::Codec;
use crate::kafka::control;

#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// Hold a route's requests: no attempt starts (those running go on), its requests wait in
    /// Kafka: `weir route pause weir-examples:compute/math --reason "tax service down"` (an
    /// interface, or the route's request topic: every interface routed to it is held).
    Pause(PauseArgs),
    /// Let a paused route's requests run again.
    Resume(NameArgs),
    /// Show every route: its topic, its interfaces, who serves it, whether it is paused.
    List(ListArgs),
}

#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// An interface (`namespace:package/interface`) or a route's request topic.
    pub route: String,
    /// Why, for the operators (`weir route list` shows it).
    #[arg(long, default_value = "paused from the command line")]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// An interface (`namespace:package/interface`) or a route's request topic.
    pub route: String,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(command: RouteCommand) -> ExitCode {
    let result = match command {
        RouteCommand::Pause(args) => {
            set(&args.cluster, &args.route, Some(args.reason.clone())).await
        }
        RouteCommand::Resume(args) => set(&args.cluster, &args.route, None).await,
        RouteCommand::List(args) => list(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Pauses (`reason` given) or resumes the route `name` names.
async fn set(cluster: &ClusterArgs, name: &str, reason: Option<String>) -> anyhow::Result<()> {
    let topology = topology(cluster)?;
    let topic = topology.served_route_topic(name)?.to_owned();
    let producer: FutureProducer = cluster.kafka()?.producer().create()?;
    let pause = reason.map(|reason| RoutePause {
        route: topic.clone(),
        reason,
        paused_at: chrono::Utc::now(),
    });
    let codec = Codec::single_object();
    control::set_route(&producer, &codec, &topology, &topic, pause.as_ref()).await?;
    let interfaces = topology.interfaces_of(&topic).join(", ");
    match pause {
        Some(_) => println!(
            "route {topic} paused ({interfaces}): its requests wait in Kafka until `weir route \
             resume {topic}`"
        ),
        None => println!("route {topic} resumed ({interfaces})"),
    }
    Ok(())
}

fn list(args: &ListArgs) -> anyhow::Result<()> {
    let topology = topology(&args.cluster)?;
    let controls = control::read(&args.cluster.kafka()?, &Codec::single_object(), &topology)?;
    let routes = crate::present::routes_json(&topology, &controls);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&routes)?);
        return Ok(());
    }
    println!(
        "{:<40} {:<9} {:<8} {:<14} interfaces",
        "topic", "served", "state", "rate"
    );
    for route in routes.as_array().into_iter().flatten() {
        let paused = &route["paused"];
        let state = if paused.is_null() {
            "running"
        } else {
            "paused"
        };
        let rate = &route["rate"];
        let rate = if rate.is_null() {
            "-".to_owned()
        } else {
            format!("{}/s burst {}", rate["per_second"], rate["burst"])
        };
        println!(
            "{:<40} {:<9} {:<8} {:<14} {}{}",
            route["topic"].as_str().unwrap_or_default(),
            if route["external"].as_bool() == Some(true) {
                "external"
            } else {
                "weir"
            },
            state,
            rate,
            route["interfaces"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            paused["reason"]
                .as_str()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default(),
        );
    }
    Ok(())
}
