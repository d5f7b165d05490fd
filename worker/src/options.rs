//! The default of every setting of the `weir` command line and of the library configurations
//! behind it, in one place.
//!
//! Before this module the same setting had a default in clap, another in the library's
//! constructor and a third in the README (the parked-instance cache was 512 in the CLI and
//! 10 000 in `WorkerConfig::new`; the instance pool 1024 in the CLI and 256 in
//! `EngineConfig::default()`). Now each default is one constant here, and
//! - clap's `default_value`s in [`crate::cli`] are these constants (so `--help` shows them),
//! - [`WorkerConfig::new`](crate::kafka::member::WorkerConfig::new) and
//!   [`EngineConfig::default`](crate::wasm::EngineConfig) take their values from them,
//! - `worker/tests/cli_defaults.rs` checks the configuration tables of `docs/cli.md` against clap's
//!   defaults, and the library defaults against clap's.
//!
//! Constants are in the unit the flag takes (`…_MS` in milliseconds, `…_SECS` in seconds), so
//! that clap shows exactly what `docs/cli.md` says. Only the command line reads the environment
//! (clap's `env` arguments and `WEIR_LOG`); library code takes everything as parameters.

// ------------------------------------------------------------ every subcommand (`ClusterArgs`)

/// `--brokers` / `WEIR_BROKERS`: Kafka bootstrap servers.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// `--cql` / `WEIR_CQL`: CQL contact points, comma-separated.
pub const DEFAULT_CQL: &str = "127.0.0.1:9042";
/// `--keyspace` / `WEIR_KEYSPACE`: the keyspace of Weir's tables.
pub const DEFAULT_KEYSPACE: &str = "weir";
/// `--cql-replication-factor` / `WEIR_CQL_REPLICATION_FACTOR` (3 in production).
pub const DEFAULT_CQL_REPLICATION_FACTOR: u32 = 1;
/// `--topology` / `WEIR_TOPOLOGY`: the folder with `topics.toml` and `routes.toml`.
pub const DEFAULT_TOPOLOGY: &str = "topology";
/// `--namespace` / `WEIR_NAMESPACE`: prefix of every topic name; empty for none.
pub const DEFAULT_NAMESPACE: &str = "";
/// `WEIR_LOG` (or `RUST_LOG`): the `tracing` log filter.
pub const DEFAULT_LOG_FILTER: &str = "info,scylla=warn,rdkafka=warn";
/// `weir test`'s registry: a `weir new` project's, run in its directory.
pub const DEFAULT_PROJECT_COMPONENTS: &str = "components.toml";
/// Where a `weir new` project's build.sh puts its components.
pub const DEFAULT_PROJECT_COMPONENTS_DIR: &str = "build";
/// The log filter of `weir test` (which prints its own report): warnings only.
pub const DEFAULT_TEST_LOG_FILTER: &str = "warn";

// ------------------------------------------------------------------------------ `weir worker`

/// `--components` / `WEIR_COMPONENTS`: the component registry.
pub const DEFAULT_COMPONENTS: &str = "topology/components.toml";
/// `--components-dir` / `WEIR_COMPONENTS_DIR`: where the registry's relative paths are resolved.
pub const DEFAULT_COMPONENTS_DIR: &str = "/var/cache/weir/examples";
/// `--compiled-dir` / `WEIR_COMPILED_DIR`: the cache of compiled components.
pub const DEFAULT_COMPILED_DIR: &str = "/var/cache/weir/compiled";
/// `--commit-interval-ms` / `WEIR_COMMIT_INTERVAL_MS`: how long a batch waits for more input
/// after its first record; 0 = committed as soon as nothing more is ready (group commit: under
/// load, batches grow by themselves while the one before them commits)…
pub const DEFAULT_COMMIT_INTERVAL_MS: u64 = 0;
/// `--max-batch` / `WEIR_MAX_BATCH`: …or after this many input records.
pub const DEFAULT_MAX_BATCH: usize = 500;
/// `--cache-bytes` / `WEIR_CACHE_BYTES`: the memory the workflow worker's cached executions
/// (parked runs and views) may hold, as the processor weighs them. 1 GiB: a sixteenth of a
/// 16 GiB worker machine, leaving the rest to the process's other needs (the materialiser's
/// queue, 128 MiB; librdkafka's buffers; activities' instances) and to other processes. At
/// ~55 KiB per parked `steps.fibonacci-chain` run (docs/benchmarks.md) it holds about
/// 18 000 of them; under cyclic access beyond that, about budget/N of the steps still hit.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;
/// `--cache-size` / `WEIR_CACHE_SIZE`: at most this many parked workflow runs, whatever their
/// weight (a backstop: the byte budget is the rule; the default is above what it holds).
pub const DEFAULT_CACHE_SIZE: usize = 100_000;
/// `--max-instances` / `WEIR_MAX_INSTANCES`: WASM instances the pooling allocator holds.
/// `weir worker` raises it at start-up to what `--cache-bytes` can park
/// (`wasm::workflow::parkable_runs`) plus `--activity-concurrency`, up to
/// [`MAX_POOLED_INSTANCES`]; this default is what a library host (`EngineConfig::default()`,
/// every test's) reserves.
pub const DEFAULT_MAX_INSTANCES: u32 = 1024;
/// The most instances `weir worker` raises its pool to: each linear-memory slot reserves
/// ~4.3 GiB of address space (wasmtime's 4 GiB reservation for 32-bit memories, which spares
/// the guest's bounds checks, plus guards), and a process has 128 TiB; 16 384 slots and their
/// 1/8 headroom take ~80 TiB (measured: 43 818 slots asked for 189 TiB and failed).
pub const MAX_POOLED_INSTANCES: u32 = 16_384;

/// Memory mappings a parked instance of the pool costs the process, at most (measured: 65 528
/// mappings with 8 000 parked `steps` runs, ~8.2 each: its linear memory and guard, its table,
/// its stack and guard page, the slot's keep-resident split), with headroom.
pub const MAPPINGS_PER_INSTANCE: u64 = 10;
/// Mappings left for everything else of the process (threads' stacks, libraries, heap arenas,
/// librdkafka's buffers).
pub const MAPPINGS_RESERVED: u64 = 8_192;

/// The most instances a pool may hold in a process the kernel allows `max_map_count` memory
/// mappings (`/proc/sys/vm/max_map_count`, 65 530 by default): beyond, an instantiation's
/// `mmap` fails and so does every allocation of the process (found by the issue 12 bench: at
/// 8 000 parked runs a 16 384-slot pool had used 65 528 mappings, and the worker's next 2 MiB
/// allocation failed). An operator who wants more parked runs per worker raises the sysctl.
pub fn instances_for_map_count(max_map_count: u64) -> u32 {
    let instances = max_map_count.saturating_sub(MAPPINGS_RESERVED) / MAPPINGS_PER_INSTANCE;
    u32::try_from(instances).unwrap_or(u32::MAX)
}

/// The most parked workflow runs a worker keeps, given its pool of `max_instances`: parked
/// runs hold their instances, and the activity attempts their answers wait for need
/// instances of the same pool (as do the new starts of a batch, parked before the cache is
/// trimmed between batches). A pool full of parked runs starved every attempt, and the
/// executions waited for answers that could never be computed (found by the issue 12 bench,
/// 20 000 concurrent executions: 8 000 parked, 6 449 of 6 449 tables taken, no attempt ran).
pub fn parked_runs_cap(max_instances: u32, activity_concurrency: usize, max_batch: usize) -> usize {
    usize::try_from(max_instances)
        .unwrap_or(usize::MAX)
        .saturating_sub(activity_concurrency)
        .saturating_sub(max_batch)
}

/// Admission (`weir_core::driver`, module docs): a running execution not stepped for longer
/// than this is not counted as in flight (it waits for a child, a delay or a slow activity).
pub const ADMISSION_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Submissions a workflow worker reads ahead and holds for their turn at most, in bytes of
/// their records (`weir_core::fairness`): enough to see past one tenant's burst of some
/// hundred thousand small submissions to the next tenant's, bounded because a record may be
/// up to 1 MB.
pub const FAIR_READ_AHEAD_BYTES: usize = 64 * 1024 * 1024;

/// Admission's limit: new submissions are read while fewer executions than this are in
/// flight, leaving room within the parked runs' cap (`cache_size`) for one batch of starts
/// (`weir_core::driver::admission_limit`, which the driver also applies to what the pool
/// turns out to park).
pub fn admission_limit(cache_size: usize, max_batch: usize) -> usize {
    if cache_size == weir_core::processor::ProcessorConfig::UNCAPPED {
        return usize::MAX;
    }
    weir_core::driver::admission_limit(cache_size, max_batch)
}

/// `--max-record-bytes` / `WEIR_MAX_RECORD_BYTES`: larger input records go to the DLQ.
pub const DEFAULT_MAX_RECORD_BYTES: usize = MAX_INPUT_RECORD_BYTES;
/// A value a workflow step puts into a record (a child's params, a result, a stub's value)
/// may be `--max-record-bytes` less this; a larger one ends its execution `value-too-large`.
pub use weir_core::processor::ENVELOPE_ALLOWANCE;
/// The most `--max-record-bytes` may be: an accepted input record becomes a record of about
/// its size plus an envelope (its `Created` record, its DLQ copy), which must fit
/// [`MAX_PRODUCED_RECORD_BYTES`](crate::kafka::config::MAX_PRODUCED_RECORD_BYTES) (960 KiB
/// of 1 000 000: before, 1 MiB was accepted and a submission between 1 000 000 and 1 048 576
/// bytes made a `Created` record no producer could send, failing its batch forever).
pub const MAX_INPUT_RECORD_BYTES: usize = 960 * 1024;
/// `--materialise-linger-ms` / `WEIR_MATERIALISE_LINGER_MS`: the store is written at most this
/// often.
pub const DEFAULT_MATERIALISE_LINGER_MS: u64 = 200;
/// `--transaction-timeout-ms` / `WEIR_TRANSACTION_TIMEOUT_MS`: how long a dead worker's open
/// transaction can hold its partitions.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 30_000;
/// `--store-patience-secs` / `WEIR_STORE_PATIENCE_SECS`: how long a store outage is ridden out
/// (failed calls retried with backoff) before the worker gives up and stops.
pub const DEFAULT_STORE_PATIENCE_SECS: u64 = 300;
/// `--early-event-wait-secs` / `WEIR_EARLY_EVENT_WAIT_SECS`: how long an event for an execution
/// that does not exist waits for its submission before it is dead-lettered (the core's
/// default, `weir_core::correlation::EARLY_EVENT_WAIT`).
pub const DEFAULT_EARLY_EVENT_WAIT_SECS: u64 = weir_core::correlation::EARLY_EVENT_WAIT
    .num_seconds()
    .unsigned_abs();
/// `--session-timeout-ms` / `WEIR_SESSION_TIMEOUT_MS`: how long a worker that stopped
/// heartbeating (killed, frozen) keeps its partitions (Kafka's default; the broker bounds it by
/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`, 6 s and 30 min).
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 45_000;
/// On SIGTERM / SIGINT, how long the worker waits for its consumers to leave their groups
/// (each finishes or aborts its batch first) before it stops anyway (no flag).
pub const DEFAULT_LEAVE_GROUP_TIMEOUT_SECS: u64 = 20;
/// `--metrics-addr` / `WEIR_METRICS_ADDR`: where `GET /metrics` is served.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9464";

/// `weir serve --listen` / `WEIR_API_LISTEN`: where the HTTP API listens (loopback by default:
/// exposing it is a decision, with tokens).
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:8080";
/// `--activity-concurrency` / `WEIR_ACTIVITY_CONCURRENCY`: activity attempts running at once in
/// one activity worker.
pub const DEFAULT_ACTIVITY_CONCURRENCY: usize = 64;
/// `--activity-partition-window` / `WEIR_ACTIVITY_PARTITION_WINDOW`: unfinished activity
/// requests per partition before the activity worker pauses it (at most 100).
pub const DEFAULT_ACTIVITY_PARTITION_WINDOW: usize = 64;
/// `--unknown-activity-grace-secs` / `WEIR_UNKNOWN_ACTIVITY_GRACE_SECS`: how long a request for
/// an activity no component of the worker exports waits for a worker that runs it, from the
/// request's timestamp, before it is answered with `unknown-function`.
pub const DEFAULT_UNKNOWN_ACTIVITY_GRACE_SECS: u64 = 600;
/// The longest `--unknown-activity-grace-secs` taken (30 days): a longer wait is a mistake, and
/// an unbounded one overflowed the instant it ends (issue 33 F14).
pub const MAX_UNKNOWN_ACTIVITY_GRACE_SECS: u64 = 30 * 24 * 3600;
/// `--inline-activities` / `WEIR_INLINE_ACTIVITIES`: the workflow worker runs the attempts of
/// WASM activities itself (those whose component does not say `inline = false`), answering
/// in the transaction that journals the request; off, every request goes to its topic.
pub const DEFAULT_INLINE_ACTIVITIES: bool = true;
/// `--inline-budget-ms` / `WEIR_INLINE_BUDGET_MS`: how long a round of inline attempts may
/// hold its batch; an attempt not done by then is interrupted and sent to its topic.
pub const DEFAULT_INLINE_BUDGET_MS: u64 = 200;
/// Rounds of inline attempts per batch at most (no flag): a round's answers may request
/// more; what the last round requests goes to the topics.
pub const MAX_INLINE_ROUNDS: usize = 100;
/// Timers due within this many seconds are held in memory (no flag).
pub const DEFAULT_TIMER_HORIZON_SECS: u64 = 60;
/// Committed batches the materialiser's queue holds at most, waiting for the store (no flag):
/// a store outage of ~30 s at 500 batches a second. Beyond, the workflow worker waits.
pub const DEFAULT_MATERIALISE_QUEUE_JOBS: usize = 16_384;
/// …and at most about this many bytes of rows (no flag): the memory a store outage may cost a
/// workflow worker process (~4 KiB per batch of a few steps: 30 s at 500 batches a second is
/// ~60 MiB).
pub const DEFAULT_MATERIALISE_QUEUE_BYTES: usize = 128 * 1024 * 1024;

// ------------------------------------------------------------------------------ `weir submit`

/// `weir submit --follow --timeout`: how long to wait for the result, in seconds.
pub const DEFAULT_FOLLOW_TIMEOUT_SECS: u64 = 120;
/// `weir submit --follow --not-taken-after`: seconds without the execution in the store before
/// `--follow` says why it is likely not taken.
pub const DEFAULT_NOT_TAKEN_AFTER_SECS: u64 = 5;

// -------------------------------------------------------------------------------- `weir list`

/// `weir list --limit` (and the HTTP API's `limit`): rows a page of a listing shows.
pub const DEFAULT_LIST_LIMIT: usize = 50;

// ------------------------------------------------------------------------------- `weir batch`

/// `weir batch start --rate` (and the HTTP API's `rate`): executions a batch acts on per
/// second at most.
pub const DEFAULT_BATCH_RATE: f64 = 50.0;

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool fits the kernel's mapping limit: at the default 65 530, 8 000 parked runs had
    /// used 65 528 mappings (the bench's crash), so the cap must stay well under 8 000.
    #[test]
    fn the_pool_fits_the_mapping_limit() {
        for (max_map_count, instances) in [
            (65_530, 5_733),
            (262_144, 25_395),
            (MAPPINGS_RESERVED, 0),
            (0, 0),
        ] {
            assert_eq!(
                instances_for_map_count(max_map_count),
                instances,
                "{max_map_count}"
            );
        }
        let default = u64::from(instances_for_map_count(65_530));
        assert!(default * 82 / 10 + MAPPINGS_RESERVED <= 65_530);
    }

    /// Parked runs leave the pool room for the attempts and a batch's starts.
    #[test]
    fn parked_runs_leave_room_in_the_pool() {
        let cap = parked_runs_cap(5_733, DEFAULT_ACTIVITY_CONCURRENCY, DEFAULT_MAX_BATCH);
        assert_eq!(cap, 5_733 - 64 - 500);
        assert_eq!(parked_runs_cap(100, 64, 500), 0);
    }

    #[test]
    fn admission_leaves_room_for_one_batch_of_starts_within_the_parked_cap() {
        let cap = parked_runs_cap(5_733, DEFAULT_ACTIVITY_CONCURRENCY, DEFAULT_MAX_BATCH);
        assert_eq!(
            admission_limit(cap, DEFAULT_MAX_BATCH),
            cap - DEFAULT_MAX_BATCH
        );
        // A small cache: half of it, and never nothing.
        assert_eq!(admission_limit(600, 500), 300);
        assert_eq!(admission_limit(1, 500), 1);
        assert_eq!(admission_limit(0, 500), 1);
        assert_eq!(
            admission_limit(weir_core::processor::ProcessorConfig::UNCAPPED, 500),
            usize::MAX
        );
    }

    /// A schedule's default catch-up window outlasts a take-over with the default timeouts
    /// (issue 33 F12): after a kill -9 the ticks owed are started, not counted missed. The next
    /// owner gets the partition once the group drops the dead member (the session timeout),
    /// then waits out its open transaction (the transaction timeout), then takes over; the
    /// window must cover both with room to spare (it was one minute: 45 s + 30 s did not fit).
    #[test]
    fn the_default_catch_up_window_outlasts_a_take_over() {
        let recovery = std::time::Duration::from_millis(
            DEFAULT_SESSION_TIMEOUT_MS + DEFAULT_TRANSACTION_TIMEOUT_MS,
        );
        let window = weir_core::schedule::DEFAULT_CATCHUP_WINDOW
            .to_std()
            .expect("a positive window");
        assert!(
            window >= recovery * 2,
            "catch-up window {window:?} against a take-over of up to {recovery:?}"
        );
    }
}
