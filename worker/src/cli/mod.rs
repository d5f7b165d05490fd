//! The `weir` command line: parses flags and environment, sets up logging, and runs one
//! subcommand. Each subcommand lives in its own file and only wires the library together.
//!
//! Exit codes: 0 success, 1 failure, 2 usage error, 3 drift between the topology and what the
//! cluster holds (`topology apply|check`), 4 an execution that finished with an error
//! (`submit --follow`), 5 a recorded execution that does not replay on the build given
//! (`replay`), 6 a stub that holds another value (`stub`); `query`: 4 an answer that is an
//! error, 5 no answer by the deadline.

mod batch;
mod client;
mod correlation;
pub mod deploy;
mod digest;
mod follow;
mod list;
mod new;
mod pause;
mod query;
mod replay;
mod reset;
mod route;
mod schedule;
mod security;
mod serve;
mod test;

mod topology;
mod worker;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::kafka::KafkaConfig;
use crate::options;
use crate::store::CqlConfig;

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "Durable workflows as WebAssembly components behind Kafka"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or check the Kafka topics and the CQL schema of a deployment.
    #[command(subcommand)]
    Topology(topology::TopologyCommand),
    /// Run a worker: workflows and activities of the registry, behind Kafka.
    Worker(Box<worker::WorkerArgs>),
    /// Submit an execution (and with --follow, wait for its result).
    Submit(client::SubmitArgs),
    /// Send an event to a running execution or to a correlation key (weir.events): `weir
    /// send-event E_… approved '"ann"' --event-id order-42-approval`, or `weir send-event
    /// payment:order-42 paid '{"amount": 1250}'` for the execution that registered the key.
    SendEvent(client::SendEventArgs),
    /// Write a stub activity's value from outside: `weir stub E_….o:1-request_1
    /// '{"ok": "ann"}'` (the same value again is ok, another is a conflict: exit code 6).
    Stub(client::StubArgs),
    /// Stop an execution: what it waits for is cancelled (its child workflows too), and it
    /// finishes `cancelled` after it reacted (compensations run); `--terminate` finishes it
    /// at once: `weir cancel E_… --reason "order withdrawn"`.
    Cancel(client::CancelArgs),
    /// Pause an execution: it runs no code and starts nothing until resumed (what comes for
    /// it meanwhile is journalled): `weir pause E_… --reason "tax service down"`.
    Pause(pause::PauseArgs),
    /// Resume a paused execution: its run is rebuilt from its history and goes on.
    Resume(pause::PauseArgs),
    /// Start a new execution from an execution's history up to a point (its last good
    /// step): `weir reset E_… --to-seq 7 --then cancel`; without `--to-seq`, list the points.
    Reset(reset::ResetArgs),
    /// Ask a running execution a query (a function of its component that reads its state
    /// and changes nothing): `weir query E_… status '[]'` prints the value as JSON (exit code
    /// 4 when the answer is an error, 5 when none came by `--deadline`).
    Query(query::QueryArgs),
    /// Hold or release an activity route's requests: `weir route pause|resume|list`.
    #[command(subcommand)]
    Route(route::RouteCommand),
    /// Act on every execution a list filter selects, durably and at a rate: `weir batch
    /// start|status|list|cancel`.
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// Manage recurring schedules: `weir schedule create|list|pause|resume|delete`.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Show correlation keys: `weir correlation list [--key payment:order-42]`.
    #[command(subcommand)]
    Correlation(correlation::CorrelationCommand),
    /// Show where an execution stands (from the CQL store).
    Status(client::ShowArgs),
    /// Show an execution's history (from the CQL store).
    History(client::ShowArgs),
    /// Serve the HTTP API (submit, get, history, list; docs/openapi.yaml).
    Serve(Box<serve::ServeArgs>),
    /// List executions of a function or children of an execution, newest first.
    List(Box<list::ListArgs>),
    /// Print the content digest of every component, to record in components.toml.
    Digest(digest::DigestArgs),
    /// Store the registry's workflow builds, so that executions pinned to them run on any
    /// worker after newer builds are deployed (workers do this at start too).
    Deploy(Box<deploy::DeployArgs>),
    /// Replay recorded executions against a build of their workflow, without side effects
    /// (exit code 5 on a mismatch: gate a deploy on it).
    Replay(Box<replay::ReplayArgs>),
    /// Create a project of a workflow and an activity: `weir new greeter --lang ts`, then
    /// `cd greeter && bash build.sh && weir test`.
    New(new::NewArgs),
    /// Run an author's tests (`tests.toml`) on the in-memory bus, without Kafka or a store:
    /// each execution hot, rebuilt at every step, and replayed, which must agree.
    Test(Box<test::TestArgs>),
}

/// Where the cluster is: every subcommand that talks to Kafka or the CQL store takes these.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "WEIR_BROKERS", default_value = options::DEFAULT_BROKERS)]
    pub brokers: String,
    /// Extra librdkafka property for every client, `key=value` (repeatable).
    #[arg(long = "kafka-property", value_parser = parse_key_value)]
    pub kafka_properties: Vec<(String, String)>,
    /// CQL contact points, comma-separated `host:port`.
    #[arg(
        long,
        env = "WEIR_CQL",
        default_value = options::DEFAULT_CQL,
        value_delimiter = ','
    )]
    pub cql: Vec<String>,
    /// The keyspace that holds Weir's tables.
    #[arg(long, env = "WEIR_KEYSPACE", default_value = options::DEFAULT_KEYSPACE)]
    pub keyspace: String,
    /// Replication factor of the keyspace when it is created.
    #[arg(
        long,
        env = "WEIR_CQL_REPLICATION_FACTOR",
        default_value_t = options::DEFAULT_CQL_REPLICATION_FACTOR
    )]
    pub cql_replication_factor: u32,
    /// Folder with topics.toml and routes.toml.
    #[arg(long, env = "WEIR_TOPOLOGY", default_value = options::DEFAULT_TOPOLOGY)]
    pub topology: std::path::PathBuf,
    /// Prefix of every topic name (`<namespace>.weir.submissions`), consumer group and
    /// transactional id, to share a Kafka cluster.
    #[arg(long, env = "WEIR_NAMESPACE", default_value = options::DEFAULT_NAMESPACE)]
    pub namespace: String,
    #[command(flatten)]
    pub kafka_security: security::KafkaSecurityArgs,
    #[command(flatten)]
    pub cql_security: security::CqlSecurityArgs,
}

impl ClusterArgs {
    pub fn kafka(&self) -> Result<KafkaConfig, security::SecurityArgsError> {
        Ok(KafkaConfig {
            brokers: self.brokers.clone(),
            security: self.kafka_security.security()?,
            namespace: self.namespace.clone(),
            properties: self.kafka_properties.clone(),
        })
    }

    pub fn cql(&self) -> Result<CqlConfig, security::SecurityArgsError> {
        Ok(CqlConfig {
            contact_points: self.cql.clone(),
            keyspace: self.keyspace.clone(),
            replication_factor: self.cql_replication_factor,
            login: self.cql_security.login()?,
            tls: self.cql_security.tls()?,
        })
    }
}

/// Which component registry: `weir worker`, `weir digest` and `weir replay` read it alike.
#[derive(Debug, Clone, Args)]
pub struct RegistryArgs {
    /// The component registry.
    #[arg(long, env = "WEIR_COMPONENTS", default_value = options::DEFAULT_COMPONENTS)]
    pub components: std::path::PathBuf,
    /// Where the registry's relative component paths are resolved.
    #[arg(
        long,
        env = "WEIR_COMPONENTS_DIR",
        default_value = options::DEFAULT_COMPONENTS_DIR
    )]
    pub components_dir: std::path::PathBuf,
}

impl RegistryArgs {
    /// Its entries, with defaults applied and paths resolved.
    pub fn specs(&self) -> Result<Vec<crate::wasm::ComponentSpec>, crate::wasm::RegistryError> {
        crate::wasm::ComponentsFile::read(&self.components)?.resolve(&self.components_dir)
    }
}

/// A host of `specs` for the commands that load a registry but run no activity (`weir replay`,
/// `weir deploy`): without the activities' secrets, with a small instance pool.
fn offline_host(
    mut specs: Vec<crate::wasm::ComponentSpec>,
) -> Result<crate::wasm::WasmHost, crate::wasm::HostError> {
    for spec in &mut specs {
        spec.secrets.clear();
    }
    crate::wasm::WasmHost::load(
        crate::wasm::EngineConfig {
            max_instances: 16,
            ..crate::wasm::EngineConfig::default()
        },
        specs,
    )
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not `key=value`")),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp = match &cli.command {
        Command::Worker(args) => args.otlp(),
        _ => None,
    };
    // `weir test` prints its own report; the workflows' logs only when asked (WEIR_LOG).
    let default_filter = match &cli.command {
        Command::Test(_) => options::DEFAULT_TEST_LOG_FILTER,
        _ => options::DEFAULT_LOG_FILTER,
    };
    let telemetry = match init_tracing(otlp.as_ref(), default_filter) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Topology(command) => topology::run(command).await,
            Command::Worker(args) => worker::run(*args).await,
            Command::Submit(args) => client::submit(args).await,
            Command::SendEvent(args) => client::send_event(args).await,
            Command::Stub(args) => client::stub(args).await,
            Command::Cancel(args) => client::cancel(args).await,
            Command::Pause(args) => pause::run(args, crate::codec::PauseAction::Pause).await,
            Command::Resume(args) => pause::run(args, crate::codec::PauseAction::Resume).await,
            Command::Reset(args) => reset::run(args).await,
            Command::Query(args) => query::run(args).await,
            Command::Schedule(command) => schedule::run(command).await,
            Command::Batch(command) => batch::run(command).await,
            Command::Route(command) => route::run(command).await,
            Command::Correlation(command) => correlation::run(command).await,
            Command::Status(args) => client::status(args).await,
            Command::History(args) => client::history(args).await,
            Command::Digest(args) => digest::run(args),
            Command::Deploy(args) => deploy::run(*args).await,
            Command::List(args) => list::run(*args).await,
            Command::Serve(args) => serve::run(*args).await,
            Command::Replay(args) => replay::run(*args).await,
            Command::Test(args) => test::run(*args).await,
            Command::New(args) => new::run(args),
        }
    });
    telemetry.shutdown();
    code
}

/// Logs go to stderr, filtered by `WEIR_LOG` (or `RUST_LOG`), [`options::DEFAULT_LOG_FILTER`]
/// by default; spans also go to `otlp` if given.
fn init_tracing(
    otlp: Option<&crate::telemetry::OtlpConfig>,
    default_filter: &str,
) -> Result<crate::telemetry::Telemetry, crate::telemetry::TelemetryError> {
    let filter = std::env::var("WEIR_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| default_filter.to_owned());
    crate::telemetry::init(&filter, otlp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kafka_properties_must_be_key_value() {
        assert_eq!(
            parse_key_value("a=b=c").unwrap(),
            ("a".into(), "b=c".into())
        );
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_key_value("=x").is_err());
    }
}
