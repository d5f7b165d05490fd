//! Benchmarks of the wasmtime host (`cargo bench -p weir --bench wasm`), printing figures:
//!
//! 0. instantiate-and-run of `hello.greet` built in Rust, TypeScript and Python
//!    (`WEIR_BENCH_LANGUAGES_ONLY=1` runs only this part);
//! 1. instantiate-and-run from a warm host, from `InstancePre` to the finished result (runs
//!    inline, no task: neither parks): of the trivial workflow `hello.greet` (no host call),
//!    and of `random-schedule.run` (four host calls: random-u64, random-string, schedule, log);
//! 2. a 100-step workflow fully in memory: `fanout.fibonacci-sum` over 100 children
//!    (submit, activity run, response, await-next, get per step) on the in-memory bus, which
//!    drives the partition processor (`weir_core::processor`) as the worker does, one input
//!    per batch;
//! 3. the order saga (4 sequential direct calls) on the in-memory bus, hot and cold path;
//! 4. parked executions: the resident memory (VmRSS) per parked `steps.fibonacci-chain` run
//!    against the weight the processor gives it, and the hits under cyclic access of 2000
//!    executions on the in-memory bus with a byte budget that holds about a quarter of them
//!    (`WEIR_BENCH_PARKED_ONLY=1` runs only this part; `WEIR_BENCH_MAX_INSTANCES`: its pool,
//!    4096 by default).
//!
//! Runs on one core (current-thread runtime). Needs the example components
//! (`bash examples/build.sh`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::DateTime;
use serde_json::json;
use ulid::Ulid;
use weir::model::{ExecutionId, ExecutionResult, Ffqn};
use weir::replay::Execution;
use weir::wasm::memory::{BUS_PARTITIONS, InMemoryBus};
use weir::wasm::{EngineConfig, RunStep, WasmHost};
use weir_core::processor::ProcessorConfig;

fn examples_dir() -> PathBuf {
    let dir = std::env::var_os("WEIR_EXAMPLES_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/weir/examples"));
    assert!(
        dir.join("random-schedule.wasm").is_file(),
        "example components missing in {}: run `bash examples/build.sh`",
        dir.display()
    );
    dir
}

/// The worker's defaults; compiled components cached in `WEIR_COMPILED_DIR` if set (as with
/// `weir worker`).
fn engine_config() -> EngineConfig {
    let default = EngineConfig::default();
    EngineConfig {
        cache_dir: std::env::var_os("WEIR_COMPILED_DIR")
            .map(PathBuf::from)
            .or(default.cache_dir.clone()),
        ..default
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs a new execution `n` of `function(params)` on `host` from an empty history, inline,
/// and checks that it finished `ok`.
fn run_to_ok(
    rt: &tokio::runtime::Runtime,
    host: &WasmHost,
    n: u128,
    function: &Ffqn,
    params: &serde_json::Value,
    now: chrono::DateTime<chrono::Utc>,
) {
    let execution = Execution {
        id: ExecutionId::top_level(Ulid::from_parts(1, n)),
        ffqn: function.clone(),
        params: params.clone(),
        created_at: now,
        component: None,
        trace: None,
    };
    rt.block_on(async {
        let (_run, step) = host
            .start_workflow(execution, vec![], vec![], now)
            .await
            .expect("a run");
        assert!(matches!(
            step,
            RunStep::Finished {
                result: ExecutionResult::Ok(_),
                ..
            }
        ));
    });
}

/// Instantiate-and-run of `hello.greet` built in Rust, TypeScript and Python (the same
/// world; `examples/ts`, `examples/python`), each from a warm host: what a fresh instance of
/// an interpreted guest costs, and a cold rebuild of its execution with it.
fn languages(rt: &tokio::runtime::Runtime, toml: &Path, now: chrono::DateTime<chrono::Utc>) {
    let function: Ffqn = "weir-examples:workflows/hello.greet".parse().expect("ffqn");
    let mut rust = None;
    for (language, file) in [
        ("Rust", "hello.wasm"),
        ("TypeScript", "hello-ts.wasm"),
        ("Python", "hello-py.wasm"),
    ] {
        let text = std::fs::read_to_string(toml)
            .expect("components.toml")
            .replace("path = \"hello.wasm\"", &format!("path = \"{file}\""));
        let specs = weir::wasm::ComponentsFile::parse(&text, toml)
            .and_then(|f| f.resolve(&examples_dir()))
            .expect("the registry");
        let host = WasmHost::load(engine_config(), specs).expect("a host");
        let mut n: u128 = 0;
        let params = json!(["weir"]);
        let mut once = || {
            n += 1;
            run_to_ok(rt, &host, n, &function, &params, now);
        };
        let per_sample = if file == "hello.wasm" { 250 } else { 10 };
        for _ in 0..per_sample {
            once();
        }
        let mut samples = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            for _ in 0..per_sample {
                once();
            }
            samples.push(t.elapsed() / per_sample);
        }
        let median = median(samples);
        let ratio = rust.map_or(String::new(), |r: Duration| {
            format!(" ({:.0}x Rust)", median.as_secs_f64() / r.as_secs_f64())
        });
        rust.get_or_insert(median);
        println!(
            "wasm host: instantiate-and-run of hello.greet in {language}, warm host: median {:.1} µs per execution{ratio}",
            median.as_secs_f64() * 1e6
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/components.toml");
    let started = Instant::now();
    let host = Arc::new(
        WasmHost::from_file(engine_config(), &toml, &examples_dir(), &Default::default())
            .unwrap_or_else(|e| panic!("loading the host: {e}")),
    );
    println!(
        "wasm host: load of {} components (compile cache warm or cold): {:?}",
        host.registry().components().len(),
        started.elapsed()
    );
    let now = DateTime::from_timestamp(1_767_225_600, 0).expect("a valid time");
    if std::env::var_os("WEIR_BENCH_PARKED_ONLY").is_some() {
        // As `weir worker` raises its pool for the default budget (but 4096: room for 2200).
        let max_instances = std::env::var("WEIR_BENCH_MAX_INSTANCES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4096);
        let host = |max_instances: u32| {
            let config = EngineConfig {
                max_instances,
                ..engine_config()
            };
            let started = Instant::now();
            let host = Arc::new(
                WasmHost::from_file(config, &toml, &examples_dir(), &Default::default())
                    .unwrap_or_else(|e| panic!("loading the host: {e}")),
            );
            println!(
                "wasm host: a host with a pool of {max_instances} instances loads in {:?}",
                started.elapsed()
            );
            host
        };
        let host = |first: bool| host(if first { max_instances } else { 4096 });
        parked_executions(&rt, &host, now);
        return;
    }

    // 1a. the trivial workflow in each language (`WEIR_BENCH_LANGUAGES_ONLY=1`: only this)
    let languages_only = std::env::var_os("WEIR_BENCH_LANGUAGES_ONLY").is_some();
    languages(&rt, &toml, now);
    if languages_only {
        return;
    }

    // 1. instantiate-and-run, trivial and with host calls
    let trivial_only = std::env::var_os("WEIR_BENCH_TRIVIAL_ONLY").is_some();
    let cases = [
        (
            "weir-examples:workflows/hello.greet",
            json!(["weir"]),
            "a trivial workflow (hello.greet: no host call)",
        ),
        (
            "weir-examples:workflows/random-schedule.run",
            json!([100, 1000, 10]),
            "a workflow with 4 host calls (random-schedule.run: random-u64, random-string, schedule, log)",
        ),
    ];
    let mut n: u128 = 0;
    for (function, params, what) in cases.iter().take(if trivial_only { 1 } else { 2 }) {
        let function: Ffqn = function.parse().expect("ffqn");
        let mut once = |host: &WasmHost| {
            n += 1;
            run_to_ok(&rt, host, n, &function, params, now);
        };
        for _ in 0..500 {
            once(&host);
        }
        let mut samples = Vec::new();
        for _ in 0..if trivial_only { 400 } else { 20 } {
            let t = Instant::now();
            for _ in 0..250 {
                once(&host);
            }
            samples.push(t.elapsed() / 250);
        }
        println!(
            "wasm host: instantiate-and-run of {what}, warm host: median {:.1} µs per execution (goal <= 50 µs)",
            median(samples).as_secs_f64() * 1e6
        );
    }
    // For profiling the trivial run alone (`WEIR_BENCH_TRIVIAL_ONLY=1 perf record ...`).
    if trivial_only {
        return;
    }

    // Wall time of `runs` executions of `function(params)`, each alone on a fresh in-memory bus
    // (hot: parked instances resumed; cold: rebuilt by replay at every step), run to the end
    // and checked `ok`; the first `warmup` are not kept.
    let timed_bus_runs =
        |hot: bool, function: &Ffqn, params: &serde_json::Value, runs: usize, warmup: usize| {
            let mut samples = Vec::with_capacity(runs - warmup);
            for i in 0..runs {
                let mut bus = InMemoryBus::new(host.clone(), now);
                bus.set_hot(hot);
                let t = Instant::now();
                rt.block_on(async {
                    let id = bus.submit(function, params.clone()).expect("submit");
                    bus.run_until_idle().await.expect("run");
                    assert!(matches!(bus.result(&id), Some(ExecutionResult::Ok(_))));
                });
                if i >= warmup {
                    samples.push(t.elapsed());
                }
            }
            samples
        };

    // 2. 100 steps in memory
    let sum: Ffqn = "weir-examples:workflows/fanout.fibonacci-sum"
        .parse()
        .expect("ffqn");
    let ns: Vec<u8> = (0..100).map(|i| (i % 90) as u8).collect();
    let samples = timed_bus_runs(true, &sum, &json!([ns]), 25, 5);
    let m = median(samples);
    println!(
        "wasm host: 100-step workflow in memory (fanout.fibonacci-sum, 100 activity children, hot path): median {:.2} ms, {:.0} steps/s on one core",
        m.as_secs_f64() * 1e3,
        100.0 / m.as_secs_f64()
    );

    // 3. sequential saga, hot and cold
    let checkout: Ffqn = "weir-examples:workflows/order.checkout"
        .parse()
        .expect("ffqn");
    let order =
        json!([{"id": "o1", "customer": "alice", "sku": "widget", "quantity": 2, "address": "x"}]);
    for hot in [true, false] {
        let samples = timed_bus_runs(hot, &checkout, &order, 60, 10);
        let m = median(samples);
        println!(
            "wasm host: order saga (4 sequential activity calls) in memory, {} path: median {:.0} µs per execution, {:.0} steps/s",
            if hot {
                "hot"
            } else {
                "cold (replay at every step)"
            },
            m.as_secs_f64() * 1e6,
            4.0 / m.as_secs_f64()
        );
    }
}

/// The process's resident set (VmRSS), in bytes.
fn vm_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024
}

/// 4. Parked executions: memory per parked run, and hits under cyclic access.
fn parked_executions(
    rt: &tokio::runtime::Runtime,
    new_host: &dyn Fn(bool) -> Arc<WasmHost>,
    now: DateTime<chrono::Utc>,
) {
    let host = new_host(true);
    let chain: Ffqn = "weir-examples:workflows/steps.fibonacci-chain"
        .parse()
        .expect("ffqn");
    // Warm the pool's first slots and the allocator, then measure 2000 more.
    let park = |from: u128, n: u128| {
        let mut runs = Vec::new();
        for i in from..from + n {
            let execution = Execution {
                id: ExecutionId::top_level(Ulid::from_parts(7, i)),
                ffqn: chain.clone(),
                params: json!([10, 20]),
                created_at: chrono::DateTime::UNIX_EPOCH,
                component: None,
                trace: None,
            };
            let (run, step) = rt
                .block_on(host.start_workflow(execution, vec![], vec![], now))
                .expect("a run");
            assert!(matches!(step, RunStep::Parked { .. }), "{step:?}");
            runs.push(run);
        }
        runs
    };
    let warm = park(0, 200);
    let n = 2000u128;
    let before = vm_rss_bytes();
    let runs = park(1_000, n);
    let after = vm_rss_bytes();
    let weight: usize = runs.iter().map(|r| r.resident_bytes()).sum();
    println!(
        "wasm host: parked steps.fibonacci-chain runs: {n} parked add {:.1} MiB of VmRSS, {:.1} KiB each; the processor weighs each {:.1} KiB (run) + ~{:.1} KiB (view)",
        (after.saturating_sub(before)) as f64 / (1 << 20) as f64,
        (after.saturating_sub(before)) as f64 / n as f64 / 1024.0,
        weight as f64 / n as f64 / 1024.0,
        0.5,
    );
    drop(runs);
    drop(warm);
    drop(host);
    // A fresh host of 4096 slots (the dropped runs' slots, and a large pool's address space,
    // are freed only as their tasks are reaped).
    let host = new_host(false);

    // Cyclic access: 2000 executions of 10 steps, each step one input, FIFO (round-robin).
    let executions = 2000;
    let per_run = weight as u64 / n as u64 + 1024;
    for budget_runs in [executions as u64 / 4, executions as u64 * 2] {
        let config = ProcessorConfig {
            cache_bytes: budget_runs * per_run,
            cache_size: weir::options::DEFAULT_CACHE_SIZE,
            max_record_bytes: weir::options::DEFAULT_MAX_RECORD_BYTES,
            partitions: BUS_PARTITIONS,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        };
        let mut bus = InMemoryBus::with_config(host.clone(), now, config);
        let t = Instant::now();
        rt.block_on(async {
            let ids: Vec<_> = (0..executions)
                .map(|_| bus.submit(&chain, json!([10, 10])).expect("submit"))
                .collect();
            bus.run_until_idle().await.expect("run");
            for id in &ids {
                let result = bus.result(id);
                assert!(
                    matches!(result, Some(ExecutionResult::Ok(_))),
                    "{id}: {result:?}; {:?}; {:?}; timers {:?}",
                    bus.processor_stats(),
                    bus.dead_letters().first(),
                    bus.pending_timers().first()
                );
            }
        });
        let elapsed = t.elapsed();
        let stats = bus.processor_stats();
        // A step whose run was evicted is rebuilt (replayed) and then delivered to.
        let hits = stats.hot_deliveries.saturating_sub(stats.replayed);
        println!(
            "wasm host: {executions} executions x 10 steps round-robin, budget for ~{budget_runs} parked runs ({:.1} MiB): {} steps, {} rebuilt from the store: hit ratio {:.3} (budget/N {:.3}); {:.0} steps/s on one core",
            (budget_runs * per_run) as f64 / (1 << 20) as f64,
            stats.hot_deliveries,
            stats.replayed,
            hits as f64 / stats.hot_deliveries.max(1) as f64,
            (budget_runs as f64 / executions as f64).min(1.0),
            (executions * 10) as f64 / elapsed.as_secs_f64(),
        );
    }
}
