//! The benchmark of issue 5: Weir's step latency on the real stack, as a ratio to the
//! substrate floor measured in the same run.
//!
//! Run against the local stack (`bash docker/local/stack.sh up`,
//! `eval "$(bash docker/local/stack.sh env)"`), after `bash examples/build.sh`:
//!
//! ```sh
//! cargo build --release -p weir --bins && cargo bench -p weir-e2e --bench stack
//! ```
//!
//! ## What is measured
//!
//! One *observer* — a `read_committed` consumer with `fetch.wait.max.ms = 5`, on its own
//! thread — stamps every record of the watched topics with the monotonic time at which it
//! became visible to it, i.e. the time its transaction committed plus the observer's own
//! delivery delay. Latencies are differences of two such stamps, so the observer's delay
//! cancels out (to its jitter), and Weir and the floor are measured the same way.
//!
//! - **Weir step latency**: from the moment a response (`ChildExecutionFinished`) is visible
//!   on `weir.responses` — i.e. consumable by the workflow worker — to the moment the worker's
//!   transaction that handled it is visible on `weir.history`:
//!   (a) `steps` workflow (20 sequential `fibonacci` calls): up to the *next request*, the
//!   `JoinSetRequest` event that follows the response's `ResponseAppended` (the 20th response
//!   has no next request and is not counted: 19 steps per execution);
//!   (b) `fanout.fibonacci-sum` over 100 numbers: up to the response's own `ResponseAppended`
//!   (a fan-in has no next request; the journalled response and the workflow's next
//!   `JoinNext` commit together).
//!   Steps/s = responses journalled / (first submission → last result visible).
//! - **Floor, Kafka**: a ping-pong between two topics, each side a bare rdkafka
//!   consume → produce loop with one transaction per batch (produce, await the
//!   acknowledgements, `send_offsets_to_transaction`, `commit_transaction`),
//!   the same client settings as the worker and the worker's own batching function
//!   (`weir::kafka::group::collect_batch`, commit interval 20 ms). Hop latency = visible(hop k+1) − visible(hop k) (two-hop rounds, visible(hop k+2) − visible(hop k), are printed beside it), stamped by the
//!   same observer; measured with as many chains in flight as the Weir scenario it is compared
//!   to (20 for (a), 100 for (b)), and with one chain for reference.
//! - **Floor, CQL**: a prepared single-row `INSERT` (history-row shaped), executed one at a
//!   time with the scylla driver.
//!
//! The observer, the statistics, the floor and the CPU readings are shared with `scale.rs`
//! (issue 12) in `common/mod.rs`.
//!
//! Ratios printed: Weir / Kafka floor (the goal: p50 ≤ 1.5×, p99 ≤ 3×), and Weir / (Kafka
//! floor + one CQL write), for reference: the worker used to write the store between batches (it
//! now hands committed batches to a background materialiser, see `weir::kafka::materialiser`).

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use common::{
    COMMIT_INTERVAL, FloorResult, Observer, RESULTS_TIMEOUT, Stats, SubstrateCpu, fib, kafka_floor,
    now_ms, stats,
};
use serde_json::json;
use weir::codec::{ExecutionFinished, HistoryEntry, HistoryRecord, RecordPosition};
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, Response};
use weir::projection::response_id;
use weir::topology::TopicRole;
use weir_e2e::cql_contact_points;
use weir_e2e::deployment::Deployment;

const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
const FIBONACCI_SUM: &str = "weir-examples:workflows/fanout.fibonacci-sum";
const STEPS_EXECUTIONS: usize = 20;
const STEPS_PER_EXECUTION: u32 = 20;
const STEPS_N: u8 = 30;
const FANOUT_EXECUTIONS: usize = 5;
const FANOUT_WIDTH: usize = 100;
const CQL_WRITES: usize = 2000;

// ------------------------------------------------------------------------------ CQL floor

async fn cql_floor(writes: usize) -> (Stats, String) {
    let (session, keyspace) = weir_e2e::scratch_keyspace("benchcql").await;
    session
        .query_unpaged(
            format!(
                "CREATE TABLE {keyspace}.history (execution_id text, seq bigint, kind text, \
                 record blob, kafka_partition int, kafka_offset bigint, \
                 PRIMARY KEY ((execution_id), seq))"
            ),
            (),
        )
        .await
        .expect("create table");
    let insert = session
        .prepare(format!(
            "INSERT INTO {keyspace}.history \
             (execution_id, seq, kind, record, kafka_partition, kafka_offset) \
             VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .await
        .expect("prepare");
    let record = vec![7u8; 200];
    let mut latencies = Vec::with_capacity(writes);
    let mut cpu = SubstrateCpu::start();
    // The first 100 warm the connection and the prepared statement; not counted.
    for i in 0..writes + 100 {
        if i == 100 {
            cpu = SubstrateCpu::start();
        }
        let id = format!("E_bench_{}", i / 20);
        let started = Instant::now();
        session
            .execute_unpaged(
                &insert,
                (
                    id.as_str(),
                    (i % 20) as i64,
                    "event",
                    record.as_slice(),
                    0i32,
                    i as i64,
                ),
            )
            .await
            .expect("insert");
        if i >= 100 {
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    cpu.stop();
    let _ = session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), ())
        .await;
    (stats(&latencies), substrate_per(&cpu, writes, "write"))
}

// ------------------------------------------------------------------------------ Weir

struct WeirResult {
    steps: Stats,
    steps_per_second: f64,
    executions: usize,
    substrate_cpu: String,
}

/// How a scenario's step ends.
#[derive(Clone, Copy)]
enum StepEnd {
    /// At the next `JoinSetRequest` after the response (sequential calls).
    NextRequest,
    /// At the response's own `ResponseAppended` (fan-in).
    Journalled,
}

/// Submits `params` of `ffqn` in `waves` (each wave submitted at once, the next one after the
/// previous one's results), and measures the steps of those executions.
async fn weir_scenario(
    deployment: &Deployment,
    ffqn: &str,
    waves: &[Vec<serde_json::Value>],
    end: StepEnd,
    check: impl Fn(&ExecutionResult) -> bool,
) -> WeirResult {
    let history = deployment.topic(TopicRole::History);
    let responses = deployment.topic(TopicRole::Responses);
    let results = deployment.topic(TopicRole::Results);
    let observer = Observer::start(&[history.clone(), responses.clone(), results.clone()]);
    let producer = deployment.producer();
    let mut cpu = SubstrateCpu::start();
    let started = now_ms();
    let mut ids = Vec::new();
    for wave in waves {
        let mut wave_ids = HashSet::new();
        for params in wave {
            let id = deployment.submit(&producer, ffqn, params.clone()).await;
            wave_ids.insert(id.to_string());
            ids.push(id);
        }
        observer.wait("the results of a wave", RESULTS_TIMEOUT, |seen| {
            seen.iter()
                .filter(|s| s.topic == results && wave_ids.contains(&s.key))
                .count()
                >= wave_ids.len()
        });
    }
    cpu.stop();
    let seen = observer.finish();
    let wanted: HashSet<ExecutionId> = ids.iter().cloned().collect();

    let mut response_at: HashMap<String, f64> = HashMap::new();
    let mut histories: HashMap<ExecutionId, Vec<(HistoryRecord, f64)>> = HashMap::new();
    let mut ended = started;
    for s in &seen {
        let position = RecordPosition::at(&s.topic, s.partition, s.offset);
        if s.topic == responses {
            let response: Response = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("response");
            response_at.entry(response_id(&response)).or_insert(s.at_ms);
        } else if s.topic == history {
            let record: HistoryRecord = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("history record");
            if wanted.contains(&record.execution_id) {
                histories
                    .entry(record.execution_id.clone())
                    .or_default()
                    .push((record, s.at_ms));
            }
        } else {
            let finished: ExecutionFinished = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("result");
            if wanted.contains(&finished.execution_id) {
                assert!(
                    check(&finished.result),
                    "unexpected result of {}: {}",
                    finished.execution_id,
                    finished.result
                );
                ended = ended.max(s.at_ms);
            }
        }
    }
    let mut latencies = Vec::new();
    // (latency, step number within its execution, response visible at, ms since the start).
    let mut slowest: Vec<(f64, usize, f64)> = Vec::new();
    let mut journalled = 0usize;
    let mut journalled_before = 0usize;
    for id in &ids {
        let records = histories
            .get_mut(id)
            .unwrap_or_else(|| panic!("no history of {id}"));
        records.sort_by_key(|(r, _)| r.seq);
        for (i, (record, appended_at)) in records.iter().enumerate() {
            let HistoryEntry::ResponseAppended(response) = &record.entry else {
                continue;
            };
            journalled += 1;
            let step = journalled - journalled_before;
            let id = response_id(response);
            let visible = *response_at
                .get(&id)
                .unwrap_or_else(|| panic!("response {id} not seen on weir.responses"));
            let end_at = match end {
                StepEnd::Journalled => Some(*appended_at),
                StepEnd::NextRequest => records[i + 1..]
                    .iter()
                    .find(|(r, _)| {
                        matches!(
                            &r.entry,
                            HistoryEntry::Event {
                                event: HistoryEvent::JoinSetRequest { .. },
                                ..
                            }
                        )
                    })
                    .map(|(_, at)| *at),
            };
            if let Some(end_at) = end_at {
                latencies.push(end_at - visible);
                slowest.push((end_at - visible, step, visible - started));
            }
        }
        journalled_before = journalled;
    }
    // Where the tail comes from: the five slowest steps, with when they happened.
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (latency, step, at) in slowest.iter().take(5) {
        println!(
            "      slow step: {latency:7.2} ms, step {step} of its execution, response visible at +{at:.0} ms"
        );
    }
    WeirResult {
        steps: stats(&latencies),
        steps_per_second: journalled as f64 / ((ended - started) / 1000.0),
        executions: ids.len(),
        substrate_cpu: substrate_per(&cpu, journalled, "step"),
    }
}

// ------------------------------------------------------------------------------ report

/// "kafka X ms, cassandra Y ms per <unit>", or nothing when unknown.
fn substrate_per(cpu: &SubstrateCpu, count: usize, unit: &str) -> String {
    cpu.ms_per(count)
        .map_or_else(String::new, |(kafka, cassandra)| {
            format!(
                "      substrate CPU per {unit}: kafka {kafka:.2} ms, cassandra {cassandra:.2} ms"
            )
        })
}

/// The workflow worker's own split of its batches: (batches, process seconds, commit seconds).
fn worker_split(worker: &weir_e2e::deployment::WorkerProcess) -> (f64, f64, f64) {
    let metrics = worker.metrics().expect("the worker's metrics endpoint");
    let get = |name: &str| metrics.get(name).copied().unwrap_or(0.0);
    (
        get("weir_workflow_commit_seconds_count"),
        get("weir_workflow_process_seconds_sum"),
        get("weir_workflow_commit_seconds_sum"),
    )
}

fn print_split(before: &(f64, f64, f64), after: &(f64, f64, f64)) {
    let batches = after.0 - before.0;
    if batches > 0.0 {
        println!(
            "      workflow worker, in-process: {batches:.0} batches, mean run {:.2} ms + commit {:.2} ms",
            (after.1 - before.1) / batches * 1000.0,
            (after.2 - before.2) / batches * 1000.0
        );
    }
}

fn verdict(ratio: f64, goal: f64) -> &'static str {
    if ratio <= goal { "met" } else { "NOT met" }
}

fn print_ratios(name: &str, weir: &WeirResult, floor: &FloorResult, cql: &Stats) {
    let p50 = weir.steps.p50 / floor.observed.p50;
    let p99 = weir.steps.p99 / floor.observed.p99;
    println!(
        "  {name}: vs Kafka floor ({} chains): p50 {p50:.2}x (goal <= 1.5x: {}), \
         p99 {p99:.2}x (goal <= 3x: {})",
        floor.chains,
        verdict(p50, 1.5),
        verdict(p99, 3.0)
    );
    let p50 = weir.steps.p50 / (floor.observed.p50 + cql.p50);
    let p99 = weir.steps.p99 / (floor.observed.p99 + cql.p99);
    println!(
        "  {name}: vs Kafka floor + one CQL write: p50 {p50:.2}x ({}), p99 {p99:.2}x ({})",
        verdict(p50, 1.5),
        verdict(p99, 3.0)
    );
}

fn print_floor(floor: &FloorResult) {
    println!(
        "  kafka txn hop, {:>3} chain(s) in flight: {}   {:>6.0} hops/s",
        floor.chains, floor.observed, floor.hops_per_second
    );
    println!(
        "      (two-hop rounds: {}; in-process, batch collected -> committed: {})",
        floor.rounds, floor.in_process
    );
    let cpu = substrate_per(&floor.cpu, floor.observed.n, "hop");
    if !cpu.is_empty() {
        println!("{cpu}");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    now_ms();
    println!(
        "weir stack benchmark: brokers {}, cql {}, commit interval {} ms",
        weir_e2e::brokers(),
        cql_contact_points().join(","),
        COMMIT_INTERVAL.as_millis()
    );

    let deployment = Deployment::new("bench");
    let interval = COMMIT_INTERVAL.as_millis().to_string();
    // Every step goes through the activity topics: the scenarios measure a response visible on
    // `weir.responses` (an inline activity's answer never reaches it).
    let worker = deployment.start_worker_with_env(
        "bench",
        &[
            "--commit-interval-ms",
            &interval,
            "--inline-activities",
            "off",
        ],
        &[("WEIR_LOG", "info,scylla=warn,rdkafka=warn")],
    );
    // Warm-up: partitions assigned, components compiled, one execution of each kind.
    let producer = deployment.producer();
    let warm = [
        deployment.submit(&producer, STEPS, json!([5, 2])).await,
        deployment
            .submit(&producer, FIBONACCI_SUM, json!([[1, 2, 3]]))
            .await,
    ];
    deployment.results(&warm, RESULTS_TIMEOUT);
    println!(
        "worker warmed up ({} namespace {})",
        weir_e2e::weir_binary().display(),
        deployment.namespace
    );

    // Interleaved, so that the machine's background load hits every measurement alike.
    let floor_20 = kafka_floor(STEPS_EXECUTIONS, 2 * STEPS_PER_EXECUTION).await;
    let before_steps = worker_split(&worker);
    let steps_expected = u64::from(STEPS_PER_EXECUTION) * fib(u64::from(STEPS_N));
    let steps = weir_scenario(
        &deployment,
        STEPS,
        &[(0..STEPS_EXECUTIONS)
            .map(|_| json!([STEPS_N, STEPS_PER_EXECUTION]))
            .collect()],
        StepEnd::NextRequest,
        |r| matches!(r, ExecutionResult::Ok(v) if *v == json!(steps_expected)),
    )
    .await;
    let after_steps = worker_split(&worker);
    let floor_100 = kafka_floor(FANOUT_WIDTH, 10).await;
    let before_fanout = worker_split(&worker);
    let ns: Vec<u8> = (0..FANOUT_WIDTH).map(|i| (i % 30) as u8).collect();
    let fanout_expected: u64 = ns.iter().map(|&n| fib(u64::from(n))).sum();
    let fanout = weir_scenario(
        &deployment,
        FIBONACCI_SUM,
        &(0..FANOUT_EXECUTIONS)
            .map(|_| vec![json!([ns])])
            .collect::<Vec<_>>(),
        StepEnd::Journalled,
        |r| matches!(r, ExecutionResult::Ok(v) if v["sum"] == json!(fanout_expected)),
    )
    .await;
    let after_fanout = worker_split(&worker);
    let floor_1 = kafka_floor(1, 200).await;
    let (cql, cql_cpu) = cql_floor(CQL_WRITES).await;

    println!();
    println!("substrate floor");
    print_floor(&floor_1);
    print_floor(&floor_20);
    print_floor(&floor_100);
    println!("  cql prepared INSERT, one at a time:    {cql}");
    if !cql_cpu.is_empty() {
        println!("{cql_cpu}");
    }
    println!();
    println!("weir (one `weir worker` process)");
    println!(
        "  (a) steps: {} executions x {} sequential calls, at once; response visible -> next request committed",
        steps.executions, STEPS_PER_EXECUTION
    );
    println!(
        "      {}   {:>6.0} steps/s",
        steps.steps, steps.steps_per_second
    );
    print_split(&before_steps, &after_steps);
    if !steps.substrate_cpu.is_empty() {
        println!("{}", steps.substrate_cpu);
    }
    println!(
        "  (b) fanout: {} executions x {} children, one after another; response visible -> journalled",
        fanout.executions, FANOUT_WIDTH
    );
    println!(
        "      {}   {:>6.0} steps/s",
        fanout.steps, fanout.steps_per_second
    );
    print_split(&before_fanout, &after_fanout);
    if !fanout.substrate_cpu.is_empty() {
        println!("{}", fanout.substrate_cpu);
    }
    println!();
    println!("ratios (goals: p50 <= 1.5x floor, p99 <= 3x floor)");
    print_ratios("(a) steps ", &steps, &floor_20, &cql);
    print_ratios("(b) fanout", &fanout, &floor_100, &cql);
}
