//! `weir worker`: runs a workflow worker and an activity worker in one process, with the
//! Prometheus metrics endpoint. Stateless: any number of them share the partitions.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::ClusterArgs;
use crate::codec::{Codec, SchemaRegistry};
use crate::failpoints;
use crate::kafka::activity_worker::{ActivitySettings, ActivityWorker};
use crate::kafka::config::check_codecs;
use crate::kafka::group::Departure;
use crate::kafka::member::WorkerConfig;
use crate::kafka::workflow_worker::WorkflowWorker;
use crate::metrics::{self, Metrics};
use crate::options;
use crate::store::{CqlStore, Retention, connect};
use crate::topology::Topology;
use crate::wasm::inline::InlineConfig;
use crate::wasm::{EngineConfig, WasmHost};

/// The consumer group of the workflow workers (in the deployment's namespace): `weir submit
/// --follow` looks at its members to say that no workflow worker runs.
pub(super) const WORKFLOW_WORKERS_GROUP: &str = "weir.workflow-workers";

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub registry: super::RegistryArgs,
    /// A secret for the activities whose components name it (`secrets = [...]` in
    /// components.toml), `NAME=file:PATH` or `NAME=env:VARIABLE` (repeatable). Its value is
    /// given to those components only, and redacted from everything Weir writes.
    #[arg(long = "secret", value_parser = super::security::parse_secret_arg)]
    pub secrets: Vec<super::security::SecretArg>,
    /// Refuse to start unless every component of the registry records its content digest
    /// (`digest = "sha256:…"`, printed by `weir digest`): no file runs that was not recorded.
    #[arg(long, env = "WEIR_REQUIRE_DIGESTS")]
    pub require_digests: bool,
    /// Keep a finished execution (its row, list rows and history in the store) this long
    /// after it finished, then let it expire (a CQL TTL): `30d`, `12h`, `90m` or `45s`.
    /// Unfinished executions never expire. Default: keep everything.
    #[arg(long, env = "WEIR_RETENTION", value_parser = parse_retention)]
    pub retention: Option<Retention>,
    /// Export spans (per batch, per execution step, per activity attempt, each execution's in
    /// its trace) to this OpenTelemetry collector over OTLP/HTTP: `http://collector:4318`.
    #[arg(long, env = "WEIR_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The OTLP/HTTP encoding.
    #[arg(long, env = "WEIR_OTLP_PROTOCOL", default_value = "http/protobuf")]
    pub otlp_protocol: crate::telemetry::OtlpProtocol,
    /// The cache of compiled components (a restart loads them instead of recompiling).
    #[arg(
        long,
        env = "WEIR_COMPILED_DIR",
        default_value = options::DEFAULT_COMPILED_DIR
    )]
    pub compiled_dir: PathBuf,
    /// How long a batch waits for more input after its first record, in milliseconds; 0: it is
    /// committed as soon as nothing more is ready (or at `--max-batch` records).
    #[arg(
        long,
        env = "WEIR_COMMIT_INTERVAL_MS",
        default_value_t = options::DEFAULT_COMMIT_INTERVAL_MS
    )]
    pub commit_interval_ms: u64,
    /// Commit a batch after this many input records at most.
    #[arg(long, env = "WEIR_MAX_BATCH", default_value_t = options::DEFAULT_MAX_BATCH)]
    pub max_batch: usize,
    /// Kafka transaction timeout: how long a dead worker's open transaction can hold its
    /// partitions before the broker aborts it.
    #[arg(
        long,
        env = "WEIR_TRANSACTION_TIMEOUT_MS",
        default_value_t = options::DEFAULT_TRANSACTION_TIMEOUT_MS
    )]
    pub transaction_timeout_ms: u64,
    /// How long a store outage is ridden out (failed calls retried with backoff, counted in
    /// `weir_store_retries_total`) before the worker gives up and stops.
    #[arg(
        long,
        env = "WEIR_STORE_PATIENCE_SECS",
        default_value_t = options::DEFAULT_STORE_PATIENCE_SECS
    )]
    pub store_patience_secs: u64,
    /// How long an event sent to an execution that does not exist yet (its submission may
    /// still be on its way) is kept for it before it goes to the DLQ.
    #[arg(
        long,
        env = "WEIR_EARLY_EVENT_WAIT_SECS",
        default_value_t = options::DEFAULT_EARLY_EVENT_WAIT_SECS
    )]
    pub early_event_wait_secs: u64,
    /// Activity attempts running at once in this worker.
    #[arg(
        long,
        env = "WEIR_ACTIVITY_CONCURRENCY",
        default_value_t = options::DEFAULT_ACTIVITY_CONCURRENCY
    )]
    pub activity_concurrency: usize,
    /// Unfinished activity requests per partition before the partition is paused (1 to 100).
    #[arg(
        long,
        env = "WEIR_ACTIVITY_PARTITION_WINDOW",
        default_value_t = options::DEFAULT_ACTIVITY_PARTITION_WINDOW
    )]
    pub activity_partition_window: usize,
    /// How long a request for an activity this worker does not run waits for a worker that
    /// does (from the request's timestamp) before it is answered with `unknown-function` (at
    /// most 30 days).
    #[arg(
        long,
        env = "WEIR_UNKNOWN_ACTIVITY_GRACE_SECS",
        default_value_t = options::DEFAULT_UNKNOWN_ACTIVITY_GRACE_SECS,
        value_parser = clap::value_parser!(u64).range(0..=options::MAX_UNKNOWN_ACTIVITY_GRACE_SECS)
    )]
    pub unknown_activity_grace_secs: u64,
    /// Kafka session timeout: how long a worker that stopped heartbeating (killed, frozen)
    /// keeps its partitions before the group moves them to the others.
    #[arg(
        long,
        env = "WEIR_SESSION_TIMEOUT_MS",
        default_value_t = options::DEFAULT_SESSION_TIMEOUT_MS
    )]
    pub session_timeout_ms: u64,
    /// Input records larger than this go to the DLQ.
    #[arg(
        long,
        env = "WEIR_MAX_RECORD_BYTES",
        default_value_t = options::DEFAULT_MAX_RECORD_BYTES
    )]
    pub max_record_bytes: usize,
    /// Write committed batches to the CQL store at most once per this many milliseconds
    /// (merging them: fewer, larger writes; the store lags Kafka by up to this much more).
    #[arg(
        long,
        env = "WEIR_MATERIALISE_LINGER_MS",
        default_value_t = options::DEFAULT_MATERIALISE_LINGER_MS
    )]
    pub materialise_linger_ms: u64,
    /// Bytes the cached workflow executions (parked runs and their views) may hold.
    #[arg(long, env = "WEIR_CACHE_BYTES", default_value_t = options::DEFAULT_CACHE_BYTES)]
    pub cache_bytes: u64,
    /// At most this many parked workflow runs (a backstop under --cache-bytes).
    #[arg(long, env = "WEIR_CACHE_SIZE", default_value_t = options::DEFAULT_CACHE_SIZE)]
    pub cache_size: usize,
    /// WASM instances the pooling allocator can hold (parked workflows and running
    /// activities); raised, if lower, to what --cache-bytes can park plus
    /// --activity-concurrency (at most 16 384: each slot reserves ~4.3 GiB of address space).
    #[arg(
        long,
        env = "WEIR_MAX_INSTANCES",
        default_value_t = options::DEFAULT_MAX_INSTANCES
    )]
    pub max_instances: u32,
    /// Where `GET /metrics` is served.
    #[arg(long, env = "WEIR_METRICS_ADDR", default_value = options::DEFAULT_METRICS_ADDR)]
    pub metrics_addr: SocketAddr,
    /// This process's stable identity (e.g. the StatefulSet pod name), unique among the live
    /// workers: its consumers become static group members (`group.instance.id`) and its
    /// transactional ids stay the same across restarts, so a restarted worker gets its
    /// partitions back at once. Default: host, pid and time (a new, dynamic identity each run).
    #[arg(long, env = "WEIR_INSTANCE_ID")]
    pub instance_id: Option<String>,
    #[command(flatten)]
    pub schema_registry: super::security::SchemaRegistryArgs,
    /// A triggers file (`topology/triggers.toml`): existing topics whose records start
    /// executions or send events; this worker reads them in the group `weir.trigger-workers`.
    #[arg(long, env = "WEIR_TRIGGERS")]
    pub triggers: Option<std::path::PathBuf>,
    /// Fault injection for tests, e.g. `before-commit=pause-once(3000)` (`weir::failpoints`).
    #[arg(long, env = "WEIR_FAILPOINTS", hide = true)]
    pub failpoints: Option<String>,
    /// Whether the workflow worker runs WASM activities itself (`on`; those whose component
    /// says `inline = false` excepted), answering in the transaction that journals the
    /// request, or sends every request to its topic (`off`).
    #[arg(
        long,
        env = "WEIR_INLINE_ACTIVITIES",
        default_value = on_off(options::DEFAULT_INLINE_ACTIVITIES),
        value_parser = parse_on_off,
        action = clap::ArgAction::Set,
    )]
    pub inline_activities: bool,
    /// How long a round of inline activity attempts may hold its batch, in milliseconds; an
    /// attempt not done by then is interrupted and sent to its topic.
    #[arg(
        long,
        env = "WEIR_INLINE_BUDGET_MS",
        default_value_t = options::DEFAULT_INLINE_BUDGET_MS
    )]
    pub inline_budget_ms: u64,
    /// Run only the workflow worker (activities served elsewhere).
    #[arg(long, conflicts_with = "activities_only")]
    pub workflows_only: bool,
    /// Run only the activity worker.
    #[arg(long)]
    pub activities_only: bool,
}

impl WorkerArgs {
    /// Where this worker exports spans, if anywhere.
    pub fn otlp(&self) -> Option<crate::telemetry::OtlpConfig> {
        self.otlp_endpoint
            .as_ref()
            .map(|endpoint| crate::telemetry::OtlpConfig {
                endpoint: endpoint.clone(),
                protocol: self.otlp_protocol,
                service_name: "weir-worker".to_owned(),
            })
    }
}

pub async fn run(args: WorkerArgs) -> ExitCode {
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: WorkerArgs) -> anyhow::Result<()> {
    if let Some(spec) = &args.failpoints {
        failpoints::install(spec);
    }
    let most = crate::options::MAX_INPUT_RECORD_BYTES;
    anyhow::ensure!(
        args.max_record_bytes <= most,
        "--max-record-bytes {} is more than {most}: what an input record becomes (its `Created` \
         record, its DLQ copy) must fit the {} bytes a producer may send",
        args.max_record_bytes,
        crate::kafka::config::MAX_PRODUCED_RECORD_BYTES
    );
    // Installed first, so that a signal during start-up (compiling components) is not the
    // default action (death) but a graceful stop once the workers are up.
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let cluster = &args.cluster;
    let features = check_codecs()?;
    info!(%features, "librdkafka features");
    let topology = Arc::new(Topology::load(&cluster.topology)?.with_namespace(&cluster.namespace)?);
    // A given instance id is a stable identity: static membership (see WorkerConfig).
    let static_membership = args.instance_id.is_some();
    let instance_id = args.instance_id.clone().unwrap_or_else(default_instance_id);
    // The pool never caps the parked runs below what the byte budget holds (issue 12 goal 3).
    let needed = crate::wasm::workflow::parkable_runs(args.cache_bytes)
        .saturating_add(u32::try_from(args.activity_concurrency).unwrap_or(u32::MAX));
    // …nor above what the kernel's mapping limit lets the process map (every allocation of the
    // process fails beyond it).
    let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(65_530);
    let mappable = options::instances_for_map_count(max_map_count);
    let ceiling = options::MAX_POOLED_INSTANCES.min(mappable);
    let max_instances = args.max_instances.max(needed.min(ceiling));
    if max_instances > args.max_instances {
        info!(
            max_instances,
            asked = args.max_instances,
            cache_bytes = args.cache_bytes,
            "the instance pool is raised to what --cache-bytes can park plus --activity-concurrency"
        );
    }
    if needed > ceiling && ceiling == mappable {
        warn!(
            max_instances,
            wanted = needed,
            max_map_count,
            "vm.max_map_count limits the instance pool below what --cache-bytes can park: runs \
             beyond it are dropped from memory and rebuilt when their answers come; raise the \
             sysctl (10 mappings per instance) for more"
        );
    }
    if args.max_instances > mappable {
        warn!(
            max_instances = args.max_instances,
            mappable,
            max_map_count,
            "--max-instances is more than vm.max_map_count lets this process map: allocations \
             may fail once that many runs are parked"
        );
    }
    let parked_cap =
        options::parked_runs_cap(max_instances, args.activity_concurrency, args.max_batch);
    if parked_cap < args.cache_size {
        info!(
            parked_runs = parked_cap,
            max_instances,
            "parked workflow runs are capped so that the pool keeps room for activity attempts \
             and a batch's new starts"
        );
    }
    let triggers = match &args.triggers {
        Some(path) => crate::trigger::TriggersFile::read(path)?,
        None => Vec::new(),
    };
    let specs = args.registry.specs()?;
    if args.require_digests {
        let unrecorded: Vec<&str> = specs
            .iter()
            .filter(|s| s.digest.is_none())
            .map(|s| s.name.as_str())
            .collect();
        anyhow::ensure!(
            unrecorded.is_empty(),
            "--require-digests: components {unrecorded:?} of {} record no digest (see `weir digest`)",
            args.registry.components.display()
        );
    }
    let host = WasmHost::load_with_secrets(
        EngineConfig {
            cache_dir: Some(args.compiled_dir.clone()),
            max_instances,
            ..EngineConfig::default()
        },
        specs,
        &super::security::load_secrets(&args.secrets)?,
    )?;
    // Workflow workers: the store keeps every build executions are pinned to (this worker's
    // included), and is where builds other than the registry's are fetched.
    let (host, store) = if args.activities_only {
        (host, None)
    } else {
        let session = connect(&cluster.cql()?).await?;
        let store = Arc::new(
            CqlStore::new(Arc::new(session), &cluster.keyspace)
                .await?
                .with_retention(args.retention.unwrap_or_default()),
        );
        for d in super::deploy::store_builds(host.registry(), store.as_ref()).await? {
            info!(component = %d.name, digest = %d.digest, stored_now = d.stored_now, "workflow build in the store");
        }
        let source = Arc::new(super::deploy::StoredBuilds(Arc::clone(&store)));
        (host.with_build_source(source), Some(store))
    };
    let host = Arc::new(host);
    host.registry().check_routes(&topology)?;
    let registry: Option<Arc<dyn SchemaRegistry>> = match args.schema_registry.registry()? {
        Some(registry) => Some(Arc::new(registry)),
        None => None,
    };
    let codec = Arc::new(Codec::new(registry));
    // With a registry, every schema Weir writes is registered before anything is produced.
    let registered = codec.register_topology(&topology).await?;
    if !registered.is_empty() {
        info!(subjects = registered.len(), "schemas registered");
    }
    let metrics = Arc::new(Metrics::default());
    metrics::serve(Arc::clone(&metrics), args.metrics_addr).await?;
    let departure = Departure::default();
    let kafka = cluster.kafka()?;
    let config = |group: &str| {
        let mut config =
            WorkerConfig::new(kafka.clone(), kafka.group_id(group), instance_id.clone());
        config.commit_interval = Duration::from_millis(args.commit_interval_ms);
        config.materialise_linger = Duration::from_millis(args.materialise_linger_ms);
        config.max_batch_records = args.max_batch;
        config.cache_bytes = args.cache_bytes;
        config.cache_size = args.cache_size.min(parked_cap);
        config.inline = InlineConfig {
            enabled: args.inline_activities,
            budget: Duration::from_millis(args.inline_budget_ms),
        };
        config.max_record_bytes = args.max_record_bytes;
        config.transaction_timeout = Duration::from_millis(args.transaction_timeout_ms);
        config.store_patience = Duration::from_secs(args.store_patience_secs);
        config.early_event_wait = Duration::from_secs(args.early_event_wait_secs);
        config.session_timeout = Duration::from_millis(args.session_timeout_ms);
        config.static_membership = static_membership;
        config.departure = departure.clone();
        config.metrics = Arc::clone(&metrics);
        config
    };
    // SIGTERM (docker stop, Kubernetes) and SIGINT alike: every member leaves its group at
    // its next poll (its batch committed or aborted first), so that its partitions move at
    // once; then the workers stop.
    let (stop, stopped) = watch::channel(false);
    let leaving = departure.clone();
    tokio::spawn(async move {
        let signal = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        info!(signal, "stopping: leaving the consumer groups");
        leaving.request();
        let timeout = Duration::from_secs(options::DEFAULT_LEAVE_GROUP_TIMEOUT_SECS);
        tokio::select! {
            left = leaving.all_left(timeout) => if !left {
                warn!(
                    remaining = leaving.remaining(),
                    ?timeout,
                    "not every consumer left its group in time; stopping anyway"
                );
            },
            // A second signal does not wait for the groups.
            _ = interrupt.recv() => warn!("second SIGINT: stopping now"),
            _ = terminate.recv() => warn!("second SIGTERM: stopping now"),
        }
        let _ = stop.send(true);
    });

    // Paused routes (`weir route pause`), as `weir.control` says: followed for the inline
    // activities and the activity worker.
    let controls = crate::kafka::control::follow(&kafka, Arc::clone(&codec), &topology)?;
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(store) = store {
        let worker = WorkflowWorker::new(
            config(WORKFLOW_WORKERS_GROUP),
            Arc::clone(&topology),
            Arc::clone(&host),
            store,
            Arc::clone(&codec),
            Arc::clone(&metrics),
        )
        .with_controls(controls.clone());
        let stopped = stopped.clone();
        tasks.spawn(async move { worker.run(stopped).await });
    }
    if !triggers.is_empty() {
        let worker = crate::kafka::trigger_worker::TriggerWorker::new(
            config("weir.trigger-workers"),
            Arc::clone(&topology),
            Arc::clone(&codec),
            Arc::clone(&metrics),
            cluster.namespace.clone(),
            triggers,
        );
        let stopped = stopped.clone();
        tasks.spawn(async move { worker.run(stopped).await });
    }
    if !args.workflows_only {
        let worker = ActivityWorker::new(
            config("weir.activity-workers"),
            Arc::clone(&topology),
            Arc::clone(&host),
            Arc::clone(&codec),
            Arc::clone(&metrics),
        )
        .with_settings(ActivitySettings {
            concurrency: args.activity_concurrency,
            partition_window: args.activity_partition_window,
            unknown_grace: Duration::from_secs(args.unknown_activity_grace_secs),
        })?
        .with_controls(controls.clone());
        tasks.spawn(async move { worker.run(stopped).await });
    }
    info!(instance = %instance_id, "worker running");
    while let Some(result) = tasks.join_next().await {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                error!(error = %e, "worker failed");
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

const fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn parse_on_off(value: &str) -> Result<bool, String> {
    match value {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => Err(format!("`{other}`: expected `on` or `off`")),
    }
}

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    format!("{host}-{}-{}", std::process::id(), ulid::Ulid::new())
}

/// `--retention`: a whole number with a unit, `d`, `h`, `m` or `s` (one small grammar; a
/// duration crate would bring more forms than this flag needs).
fn parse_retention(text: &str) -> Result<Retention, String> {
    let text = text.trim();
    let split = text.len().saturating_sub(1);
    let (number, unit) = (
        text.get(..split).unwrap_or(""),
        text.get(split..).unwrap_or(""),
    );
    let seconds_per = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" => 1,
        _ => {
            return Err(format!(
                "`{text}`: say a number and a unit: 30d, 12h, 90m or 45s"
            ));
        }
    };
    let number: i64 = number
        .parse()
        .map_err(|_| format!("`{text}`: `{number}` is not a whole number"))?;
    number
        .checked_mul(seconds_per)
        .map(chrono::TimeDelta::seconds)
        .and_then(Retention::after)
        .ok_or_else(|| format!("`{text}`: a retention is 1 s to 20 years"))
}

#[cfg(test)]
mod retention_tests {
    use super::*;

    #[test]
    fn retentions_parse_with_their_units_and_nothing_else_does() {
        let period =
            |text: &str| parse_retention(text).map(|r| r.period().map(|p| p.num_seconds()));
        assert_eq!(period("30d"), Ok(Some(30 * 86_400)));
        assert_eq!(period(" 12h "), Ok(Some(12 * 3_600)));
        assert_eq!(period("90m"), Ok(Some(5_400)));
        assert_eq!(period("45s"), Ok(Some(45)));
        for bad in [
            "",
            "d",
            "30",
            "30w",
            "-1d",
            "0s",
            "1.5d",
            "7301d",
            "99999999999999999d",
        ] {
            assert!(parse_retention(bad).is_err(), "{bad:?} parsed");
        }
    }
}
