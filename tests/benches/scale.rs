//! The benchmark of issue 12 (latency and scale): Weir's figures on the real stack beside the
//! Kafka transaction floor measured in the same run, printed as one table. It prints figures
//! and asserts nothing about time.
//!
//! Run against a local stack (`bash docker/local/stack.sh up`,
//! `eval "$(bash docker/local/stack.sh env)"`), after `bash examples/build.sh`:
//!
//! ```sh
//! cargo build --release -p weir --bins && cargo bench -p weir-e2e --bench scale
//! ```
//!
//! Environment (all optional):
//! - `WEIR_BENCH_ONLY=floor,topics,lone,hello,saga,fanout,idle,throughput,scaleout`: run only
//!   these scenarios (default: all but `scaleout`);
//! - `WEIR_BENCH_PEERS=restate`: also run these peers on the same machine
//!   (`tests/benches/peers/<name>.sh`) and compare;
//! - `WEIR_BENCH_SCALEOUT=1`: run `scaleout` too;
//! - `WEIR_BENCH_THROUGHPUT=20,200,2000`: the concurrency levels of `throughput`;
//! - `WEIR_BENCH_WORKER_ARGS="--cache-size 2500 --max-instances 3000"`: more arguments for
//!   every worker the bench starts (split at whitespace).
//!
//! ## Set-up
//!
//! Each group of scenarios gets a deployment of its own (topic namespace and keyspace, the
//! repository's topology) and its own `weir worker` processes (release build, workflow and
//! activity worker in one process), started with the worker's defaults — no argument but
//! `--metrics-addr` (a port in 20800..21000) and those a scenario names, `WEIR_LOG` the
//! worker's default — and warmed up (as many executions of each workflow the group runs as
//! there are partitions, then the partitions' assignment settled: all owned, each worker owning
//! one when there are enough, on two looks 2 s apart). `lone`,
//! `hello`, `saga`, `fanout` and `idle` share one deployment and worker (in that order); the
//! `--inline-activities off` run, each throughput level and each scale-out size get their own.
//!
//! One *observer* (`common::Observer`: a `read_committed` consumer with
//! `fetch.wait.max.ms = 5` on its own thread) stamps every record of `weir.submissions`,
//! `weir.history`, `weir.responses` and `weir.results` with the monotonic time it became
//! visible. Every latency is a difference of two such stamps, so the observer's own delay
//! cancels out (to its jitter).
//!
//! ## The figures
//!
//! - **side by side** (issue 38, `side_by_side.rs`): after the table, the figures of this run
//!   as ratios — through topics against the floor and against inline, and against the peers
//!   `WEIR_BENCH_PEERS` names — beside the issue's goals.
//! - **topics** (`topics`): the lone 20-step and the 100-way fan-out (×5, one at a time) on a
//!   worker with `--inline-activities off`, and 20 and 200 concurrent 20-step executions
//!   through the topics (each level its own deployment and worker).
//! - **Kafka txn floor** (`floor`): `common::kafka_floor` with one chain of 200 hops: two
//!   bare rdkafka consume → produce loops ping-ponging one record, one transaction per batch
//!   (produce, acknowledgements, `send_offsets_to_transaction`, commit), the worker's client
//!   settings and batching function (`collect_batch`, the worker's default commit interval).
//!   A *round* is two hops back to back, visible(hop k+2) − visible(hop k): what one step
//!   through an activity topic cost at least before issue 38 (the workflow worker's
//!   transaction + the activity worker's). Reported per round; the notes give the per-hop
//!   p50 of each side and where a transaction's time goes from its batch's collection
//!   (offsets sent, records acknowledged, committed). Then the same with the second side
//!   producing idempotently and committing its offsets after (`HopWrite::Idempotent`): what a
//!   step through a topic costs at least since issue 38.
//! - **Step** of a `steps.fibonacci-chain(30, 20)` execution (20 sequential `fibonacci`
//!   calls): the interval between two consecutive journalled responses of the execution,
//!   visible(`ResponseAppended` k) − visible(`ResponseAppended` k−1) on `weir.history`, for
//!   k = 2..20 (19 per execution; the first step, which includes the creation, is left out).
//!   It is the whole cycle: request k becomes visible with response k−1 (one transaction),
//!   then the activity runs, then response k is journalled. Inline steps committed together
//!   share a stamp (an interval of 0), so the lone rows also give *submit → result / 20*.
//!   When the responses go through `weir.responses`, a step splits into its *activity side*
//!   (request visible → response visible on `weir.responses`) and its *workflow side*
//!   (response visible → journalled on `weir.history`).
//! - **lone 20-step** (`lone`): 5 executions one after another, each alone; run with the
//!   worker's default configuration and again with `--inline-activities off` ("n/a" when
//!   `weir worker --help` has no `--inline-activities`).
//! - **submit → result** (`hello`, `saga`, `fanout`): visible on `weir.submissions` → its
//!   `ExecutionFinished` visible on `weir.results`, executions one at a time:
//!   `hello.greet` ×50, `order.checkout` (the order saga: price, reserve, charge, ship) ×20,
//!   `fanout.fibonacci-sum` over 100 numbers (100 children, one join) ×5.
//! - **throughput** (`throughput`): N executions of `steps.fibonacci-chain(30, 20)` submitted
//!   at once (N = 20, 200, 2000). Steps/s = responses journalled / (first submission visible →
//!   last result visible); per-step p50/p99 as above; *rebuilt* = executions rebuilt from the
//!   store by replay during the run (`weir_executions_replayed_total`, one per step whose
//!   execution was no longer in memory), of all steps; *busy* = the cores the worker and the
//!   stack kept busy together (their CPU seconds / wall seconds), to set beside the machine's.
//! - **CPU** (every row but the floor's, which has no worker): CPU time (user + system, from
//!   `/proc/<pid>/stat`) of the worker process(es) / Kafka / Cassandra (the pid files of
//!   `docker/local/stack.sh`) from the first submission to the last result, per step (per
//!   execution for `hello` and `saga`, per child for `fanout`, per round for the floor: Kafka
//!   and Cassandra only). The bench's own process (observer, submitter) is not counted, but what
//!   its observer's fetches cost Kafka is (~10–20 % of a core, the `idle with the bench's
//!   observer` row): the rows of executions one at a time, whose runs are mostly waiting, also
//!   give their CPU *net of* that baseline (the stack idle with the observer reading, scaled to
//!   the run's duration).
//! - **RSS**: the worker's resident memory (`VmRSS` of `/proc/<pid>/status`, summed over the
//!   workers) at the end of the scenario. The throughput rows also give *per parked
//!   execution*: sampled every 250 ms during the run, (RSS at the largest
//!   `weir_executions_parked` − RSS before the first submission) / that largest count.
//! - **idle** (`idle`): after the shared worker's scenarios, 3 s to settle, then the CPU of the
//!   worker, Kafka and Cassandra over 10 s with nothing submitted, in % of one core; then the
//!   same with an observer reading (what the bench's own fetches cost the stack, included in
//!   the CPU of every other row).
//! - **scale-out** (`scaleout`): 1, 2 and 4 worker processes on the same stack (6 partitions),
//!   400 executions of `steps.fibonacci-chain(30, 20)` at once, the assignment settled:
//!   steps/s, per-step p50/p99, CPU per step (all workers summed) and their RSS; beside them
//!   the substrate's limit at that concurrency, the floor with 400 chains of 20 hops in flight
//!   (rounds/s: steps/s a workflow of topic activities could do on Kafka alone).

mod common;
#[path = "scale/side_by_side.rs"]
mod side_by_side;
#[path = "scale/table.rs"]
mod table;
#[path = "scale/usage.rs"]
mod usage;
#[path = "scale/workers.rs"]
mod workers;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{COMMIT_INTERVAL, Observer, RESULTS_TIMEOUT, Seen, fib, stats};
use serde_json::{Value, json};
use weir::codec::{ExecutionFinished, HistoryEntry, HistoryRecord, RecordPosition};
use weir::model::{ExecutionId, ExecutionResult, Response};
use weir::projection::response_id;
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;

use table::{Row, print_table, report, report_as};
use usage::{Memory, Usage, mib};
use workers::Setup;

const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
const HELLO: &str = "weir-examples:workflows/hello.greet";
const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
const FIBONACCI_SUM: &str = "weir-examples:workflows/fanout.fibonacci-sum";
const STEPS_PER_EXECUTION: u32 = 20;
const STEPS_N: u8 = 30;
const FLOOR_HOPS: u32 = 200;
const LONE_EXECUTIONS: usize = 5;
const HELLO_EXECUTIONS: usize = 50;
const SAGA_EXECUTIONS: usize = 20;
const FANOUT_EXECUTIONS: usize = 5;
const FANOUT_WIDTH: usize = 100;
const DEFAULT_THROUGHPUT: [usize; 3] = [20, 200, 2000];
const SCALEOUT_WORKERS: [usize; 3] = [1, 2, 4];
const SCALEOUT_EXECUTIONS: usize = 400;
const SCALEOUT_FLOOR_HOPS: u32 = 20;
/// How long the partitions' assignment must hold before a scenario starts.
const SETTLED: Duration = Duration::from_secs(2);
const IDLE_SETTLE: Duration = Duration::from_secs(3);
const IDLE: Duration = Duration::from_secs(10);
/// How often a run looks for the results it waits for (the next execution of a scenario run
/// one at a time is submitted at most this long after the previous result).
const RESULTS_POLL: Duration = Duration::from_millis(5);
/// How often the throughput rows sample RSS and parked executions.
const MEMORY_SAMPLE: Duration = Duration::from_millis(250);
/// The workers' metrics ports: the first free ones of this range.
const METRICS_PORTS: std::ops::Range<u16> = 20800..21000;
const INLINE_FLAG: &str = "--inline-activities";

const SCENARIOS: [&str; 9] = [
    "floor",
    "topics",
    "lone",
    "hello",
    "saga",
    "fanout",
    "idle",
    "throughput",
    "scaleout",
];

// ------------------------------------------------------------------------------ options

struct Options {
    /// `WEIR_BENCH_ONLY`, when given.
    only: Option<HashSet<String>>,
    scaleout: bool,
    throughput: Vec<usize>,
    /// `WEIR_BENCH_WORKER_ARGS`: appended to every worker's arguments.
    worker_args: Vec<String>,
    /// Whether `weir worker` accepts `--inline-activities`.
    has_inline_flag: bool,
}

impl Options {
    fn from_env() -> Self {
        let only = std::env::var("WEIR_BENCH_ONLY").ok().map(|list| {
            let names: HashSet<String> = list
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            for name in &names {
                assert!(
                    SCENARIOS.contains(&name.as_str()),
                    "WEIR_BENCH_ONLY: unknown scenario `{name}` (known: {})",
                    SCENARIOS.join(",")
                );
            }
            names
        });
        let throughput = std::env::var("WEIR_BENCH_THROUGHPUT").map_or_else(
            |_| DEFAULT_THROUGHPUT.to_vec(),
            |list| {
                list.split(',')
                    .map(|n| n.trim().parse().expect("WEIR_BENCH_THROUGHPUT: numbers"))
                    .collect()
            },
        );
        let worker_args = std::env::var("WEIR_BENCH_WORKER_ARGS")
            .map(|args| args.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let help = Command::new(weir_e2e::weir_binary())
            .args(["worker", "--help"])
            .output()
            .expect("run weir worker --help");
        Options {
            only,
            scaleout: std::env::var("WEIR_BENCH_SCALEOUT").is_ok_and(|v| v == "1"),
            throughput,
            worker_args,
            has_inline_flag: String::from_utf8_lossy(&help.stdout).contains(INLINE_FLAG),
        }
    }

    fn runs(&self, scenario: &str) -> bool {
        match &self.only {
            Some(only) => only.contains(scenario),
            None => scenario != "scaleout" || self.scaleout,
        }
    }
}

// ------------------------------------------------------------------------------ runs

/// What the observer saw of one execution.
struct Timeline {
    /// Its submission visible on `weir.submissions`.
    submitted: f64,
    /// Its result visible on `weir.results`.
    finished: f64,
    /// Each journalled response, in history order: visible on `weir.history`, and visible on
    /// `weir.responses` if it went through that topic.
    responses: Vec<(f64, Option<f64>)>,
}

/// A scenario's executions as seen, with what they cost.
struct Run {
    timelines: Vec<Timeline>,
    usage: Usage,
    memory: Memory,
    rss_end: u64,
}

impl Run {
    fn responses(&self) -> usize {
        self.timelines.iter().map(|t| t.responses.len()).sum()
    }

    /// Submit → result of each execution, in ms.
    fn totals(&self) -> Vec<f64> {
        self.timelines
            .iter()
            .map(|t| t.finished - t.submitted)
            .collect()
    }

    /// The steps (see the header): intervals between consecutive journalled responses.
    fn steps(&self) -> Vec<f64> {
        self.timelines
            .iter()
            .flat_map(|t| t.responses.windows(2).map(|w| w[1].0 - w[0].0))
            .collect()
    }

    /// (activity side, workflow side) of each step whose response went through its topic.
    fn split(&self) -> (Vec<f64>, Vec<f64>) {
        let mut activity = Vec::new();
        let mut workflow = Vec::new();
        for t in &self.timelines {
            for w in t.responses.windows(2) {
                if let Some(visible) = w[1].1 {
                    activity.push(visible - w[0].0);
                    workflow.push(w[1].0 - visible);
                }
            }
        }
        (activity, workflow)
    }

    /// Journalled responses per second, first submission → last result.
    fn steps_per_second(&self) -> f64 {
        let first = self
            .timelines
            .iter()
            .map(|t| t.submitted)
            .fold(f64::MAX, f64::min);
        let last = self
            .timelines
            .iter()
            .map(|t| t.finished)
            .fold(0.0, f64::max);
        self.responses() as f64 / ((last - first) / 1000.0)
    }
}

/// Submits `waves` of `ffqn` (a wave at once, the next after the previous one's results) on
/// `setup`, and returns what was seen of them; every result must pass `check`.
async fn run(
    setup: &Setup,
    ffqn: &str,
    waves: Vec<Vec<Value>>,
    check: impl Fn(&ExecutionResult) -> bool,
) -> Run {
    let deployment = &setup.deployment;
    let [submissions, history, responses, results] = [
        TopicRole::Submissions,
        TopicRole::History,
        TopicRole::Responses,
        TopicRole::Results,
    ]
    .map(|role| deployment.topic(role));
    let observer = Observer::start(&[
        submissions.clone(),
        history.clone(),
        responses.clone(),
        results.clone(),
    ]);
    let producer = deployment.producer();
    let mut memory = Memory::start(setup);
    let before = setup.snapshot();
    let mut ids = Vec::new();
    for wave in waves {
        let timeout = RESULTS_TIMEOUT + Duration::from_millis(200) * wave.len() as u32;
        let wave_ids = futures::future::join_all(
            wave.into_iter()
                .map(|params| deployment.submit(&producer, ffqn, params)),
        )
        .await;
        let mut pending: HashSet<String> = wave_ids.iter().map(ToString::to_string).collect();
        // An execution's history is on other partitions than its result, read apart: the run
        // waits for its `Finished` there too, or its last responses go uncounted (with two
        // workers, 259 of 8 000 steps were, 3 % off the rate).
        let mut unfinished = pending.clone();
        let mut looked = 0;
        observer.wait_ticking(
            "the results and histories of a wave",
            timeout,
            RESULTS_POLL,
            |seen| {
                for s in &seen[looked..] {
                    if s.topic == results {
                        pending.remove(&s.key);
                    } else if s.topic == history && unfinished.contains(&s.key) {
                        let position = RecordPosition::at(&s.topic, s.partition, s.offset);
                        let record: HistoryRecord = deployment
                            .codec
                            .decode(&s.payload, &position)
                            .expect("history record");
                        if matches!(record.entry, HistoryEntry::Finished { .. }) {
                            unfinished.remove(&s.key);
                        }
                    }
                }
                looked = seen.len();
                pending.is_empty() && unfinished.is_empty()
            },
            || memory.sample(setup),
        );
        ids.extend(wave_ids);
    }
    let after = setup.snapshot();
    let rss_end = setup.rss();
    let seen = observer.finish();
    let topics = Topics {
        submissions,
        history,
        responses,
        results,
    };
    Run {
        timelines: timelines(deployment, &topics, &seen, &ids, check),
        usage: Usage::between(&before, &after),
        memory,
        rss_end,
    }
}

struct Topics {
    submissions: String,
    history: String,
    responses: String,
    results: String,
}

fn timelines(
    deployment: &Deployment,
    topics: &Topics,
    seen: &[Seen],
    ids: &[ExecutionId],
    check: impl Fn(&ExecutionResult) -> bool,
) -> Vec<Timeline> {
    let wanted: HashSet<String> = ids.iter().map(ToString::to_string).collect();
    let mut submitted: HashMap<&str, f64> = HashMap::new();
    let mut finished: HashMap<String, f64> = HashMap::new();
    let mut response_at: HashMap<String, f64> = HashMap::new();
    // Per execution: (seq, response id, visible).
    let mut journalled: HashMap<String, Vec<(u64, String, f64)>> = HashMap::new();
    for s in seen {
        let position = RecordPosition::at(&s.topic, s.partition, s.offset);
        if s.topic == topics.submissions {
            if wanted.contains(&s.key) {
                submitted.entry(&s.key).or_insert(s.at_ms);
            }
        } else if s.topic == topics.responses {
            let response: Response = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("response");
            response_at.entry(response_id(&response)).or_insert(s.at_ms);
        } else if s.topic == topics.history {
            if !wanted.contains(&s.key) {
                continue;
            }
            let record: HistoryRecord = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("history record");
            if let HistoryEntry::ResponseAppended(response) = &record.entry {
                journalled
                    .entry(record.execution_id.to_string())
                    .or_default()
                    .push((record.seq, response_id(response), s.at_ms));
            }
        } else if s.topic == topics.results {
            let result: ExecutionFinished = deployment
                .codec
                .decode(&s.payload, &position)
                .expect("result");
            let id = result.execution_id.to_string();
            if wanted.contains(&id) {
                assert!(
                    check(&result.result),
                    "unexpected result of {id}: {}",
                    result.result
                );
                finished.entry(id).or_insert(s.at_ms);
            }
        }
    }
    ids.iter()
        .map(|id| {
            let id = id.to_string();
            let mut responses = journalled.remove(&id).unwrap_or_default();
            responses.sort_by_key(|(seq, _, _)| *seq);
            let seen_at = |at: Option<&f64>, what: &str| {
                *at.unwrap_or_else(|| panic!("the {what} of {id} was not seen"))
            };
            Timeline {
                submitted: seen_at(submitted.get(id.as_str()), "submission"),
                finished: seen_at(finished.get(&id), "result"),
                responses: responses
                    .into_iter()
                    .map(|(_, response, at)| (at, response_at.get(&response).copied()))
                    .collect(),
            }
        })
        .collect()
}

fn steps_params() -> Value {
    json!([STEPS_N, STEPS_PER_EXECUTION])
}

fn steps_ok(result: &ExecutionResult) -> bool {
    let expected = u64::from(STEPS_PER_EXECUTION) * fib(u64::from(STEPS_N));
    matches!(result, ExecutionResult::Ok(v) if *v == json!(expected))
}

fn order(i: usize) -> Value {
    json!([{ "id": format!("o{i}"), "customer": "alice", "sku": "widget", "quantity": 2, "address": "1 Main St" }])
}

fn fanout_numbers() -> Vec<u8> {
    (0..FANOUT_WIDTH).map(|i| (i % 30) as u8).collect()
}

// ------------------------------------------------------------------------------ scenarios

fn floor_row(floor: &common::FloorResult) -> Row {
    use common::HopWrite;
    let kind = match floor.writes {
        [HopWrite::Transaction, HopWrite::Transaction] => "2 transactional hops",
        [HopWrite::Transaction, HopWrite::Idempotent] => {
            "a transactional hop + an idempotent one (offsets committed after)"
        }
        _ => "2 idempotent hops",
    };
    let mut row = Row::new(format!(
        "Kafka floor: {kind} back to back ({} chain(s) in flight), per round",
        floor.chains
    ));
    row.figure = Some(floor.rounds.p50);
    row.n = floor.rounds.n.to_string();
    row.p50 = format!("{:.2} ms", floor.rounds.p50);
    row.p99 = format!("{:.2} ms", floor.rounds.p99);
    row.rate = format!("{:.0} rounds/s", floor.hops_per_second / 2.0);
    row.cpu = floor
        .cpu
        .ms_per(floor.rounds.n)
        .map_or_else(String::new, |(k, c)| {
            format!("- / {k:.2} / {c:.2} ms per round")
        });
    let phases = match (&floor.offsets, &floor.acked) {
        (Some(offsets), Some(acked)) => format!(
            "; a transaction, from its batch: offsets sent p50 {:.2}, acked {:.2}, committed \
             {:.2} ms",
            offsets.p50, acked.p50, floor.in_process.p50
        ),
        _ => format!(
            "; batch -> offsets committed p50 {:.2} ms",
            floor.in_process.p50
        ),
    };
    row.notes = format!(
        "a hop p50 {:.2} / p99 {:.2} ms (side 1 {:.2}, side 2 {:.2}){phases}",
        floor.observed.p50, floor.observed.p99, floor.sides[0].p50, floor.sides[1].p50
    );
    row
}

/// The lone 20-step rows: `LONE_EXECUTIONS` executions one after another.
async fn lone_row(setup: &Setup, label: &str, baseline: Option<&Usage>) -> Row {
    let waves = (0..LONE_EXECUTIONS).map(|_| vec![steps_params()]).collect();
    let run = run(setup, STEPS, waves, steps_ok).await;
    let steps = run.steps();
    let mut row = Row::new(format!("lone 20-step sequential, {label}, per step")).latency(&steps);
    let per_step: Vec<f64> = run
        .totals()
        .iter()
        .map(|t| t / f64::from(STEPS_PER_EXECUTION))
        .collect();
    let (activity, workflow) = run.split();
    row.rate = format!("{:.0}", run.steps_per_second());
    row.cpu = run.usage.per(run.responses(), "step");
    row.rss = mib(run.rss_end);
    row.figure = Some(stats(&per_step).p50);
    row.cpu_ms = baseline.map_or_else(
        || run.usage.total_ms_per(run.responses()),
        |b| run.usage.net_of(b).total_ms_per(run.responses()),
    );
    row.notes = format!("submit -> result / 20: p50 {:.2} ms", stats(&per_step).p50);
    if !activity.is_empty() {
        row.notes += &format!(
            "; activity side p50 {:.2} ms, workflow side p50 {:.2} ms",
            stats(&activity).p50,
            stats(&workflow).p50
        );
    }
    row.notes += &format!("; rebuilt {:.0}", run.usage.replayed);
    if let Some(baseline) = baseline {
        row.notes += &format!(
            "; CPU net of the idle stack and observer: {}",
            run.usage.net_of(baseline).per(run.responses(), "step")
        );
    }
    row
}

/// What the CPU of an [`in_turn_row`] is divided by.
#[derive(Clone, Copy)]
enum PerUnit {
    Execution,
    Child,
}

/// Executions of `ffqn` one at a time: submit → result.
async fn in_turn_row(
    setup: &Setup,
    label: &str,
    ffqn: &str,
    params: Vec<Value>,
    unit: PerUnit,
    check: impl Fn(&ExecutionResult) -> bool,
    baseline: Option<&Usage>,
) -> Row {
    let executions = params.len();
    let waves = params.into_iter().map(|p| vec![p]).collect();
    let run = run(setup, ffqn, waves, check).await;
    let mut row = Row::new(format!("{label}: submit -> result")).latency(&run.totals());
    row.figure = Some(stats(&run.totals()).p50);
    let responses = run.responses();
    let per = |usage: &Usage| match unit {
        PerUnit::Execution => usage.per(executions, "execution"),
        PerUnit::Child => usage.per(responses, "child"),
    };
    row.cpu = per(&run.usage);
    row.rss = mib(run.rss_end);
    row.notes = format!(
        "{} responses journalled per execution; rebuilt {:.0}",
        responses / executions.max(1),
        run.usage.replayed
    );
    if let Some(baseline) = baseline {
        row.notes += &format!(
            "; CPU net of the idle stack and observer: {}",
            per(&run.usage.net_of(baseline))
        );
    }
    row
}

/// `concurrency` executions of 20 steps submitted at once.
async fn throughput_row(setup: &Setup, label: String, concurrency: usize) -> Row {
    let waves = vec![(0..concurrency).map(|_| steps_params()).collect()];
    let run = run(setup, STEPS, waves, steps_ok).await;
    let mut row = Row::new(label).latency(&run.steps());
    let responses = run.responses();
    row.figure = Some(run.steps_per_second());
    row.rate = format!("{:.0}", run.steps_per_second());
    row.cpu = run.usage.per(responses, "step");
    row.rss = mib(run.rss_end);
    row.notes = format!(
        "rebuilt {:.0} of {responses} steps; {}; worker + stack busy {:.2} cores",
        run.usage.replayed,
        run.memory.per_parked(),
        run.usage.busy_cores()
    );
    row
}

fn idle_row(setup: &Setup) -> Row {
    std::thread::sleep(IDLE_SETTLE);
    let usage = idle_usage(setup);
    let mut row = Row::new(format!("idle, {} s", IDLE.as_secs()));
    row.cpu = usage.percent();
    row.rss = mib(setup.rss());
    row.notes = "nothing submitted; after the shared worker's scenarios".to_owned();
    row
}

/// The same with the bench's observer reading the deployment's topics: what its fetches (every
/// `OBSERVER_FETCH_WAIT_MS`) cost Kafka, which the rows of every scenario include.
fn observer_row(setup: &Setup) -> (Row, Usage) {
    let topics = [
        TopicRole::Submissions,
        TopicRole::History,
        TopicRole::Responses,
        TopicRole::Results,
    ]
    .map(|role| setup.deployment.topic(role));
    let observer = Observer::start(&topics);
    std::thread::sleep(IDLE_SETTLE);
    let usage = idle_usage(setup);
    drop(observer.finish());
    let mut row = Row::new(format!(
        "idle with the bench's observer, {} s, before the scenarios",
        IDLE.as_secs()
    ));
    row.cpu = usage.percent();
    row.notes = "what the observer alone costs: every other row includes it; the rows of the \
                 shared worker also give their CPU net of this"
        .to_owned();
    (row, usage)
}

fn idle_usage(setup: &Setup) -> Usage {
    let before = setup.snapshot();
    std::thread::sleep(IDLE);
    Usage::between(&before, &setup.snapshot())
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench());
}

async fn bench() {
    common::now_ms();
    let started = Instant::now();
    let options = Options::from_env();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "weir scale benchmark (issue 12): brokers {}, cql {}, worker {}, commit interval {} ms, \
         worker has {INLINE_FLAG}: {}, extra worker args {:?}, {} cores, load average {}",
        weir_e2e::brokers(),
        weir_e2e::cql_contact_points().join(","),
        weir_e2e::weir_binary().display(),
        COMMIT_INTERVAL.as_millis(),
        options.has_inline_flag,
        options.worker_args,
        std::thread::available_parallelism().map_or(0, usize::from),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut rows = Vec::new();
    let mut figures = side_by_side::Figures::default();
    let figs = &mut figures;

    if options.runs("floor") {
        let floor = common::kafka_floor(1, FLOOR_HOPS).await;
        report_as(
            &mut rows,
            figs,
            "floor.txn-txn.round",
            None,
            floor_row(&floor),
        );
        // A step through an activity topic since issue 38: the workflow worker's transaction,
        // the activity worker's idempotent answer.
        let writes = [common::HopWrite::Transaction, common::HopWrite::Idempotent];
        let floor = common::kafka_floor_of(1, FLOOR_HOPS, writes).await;
        report_as(
            &mut rows,
            figs,
            "floor.txn-idem.round",
            None,
            floor_row(&floor),
        );
    }

    let shared = ["lone", "hello", "saga", "fanout", "idle"];
    if shared.iter().any(|s| options.runs(s)) {
        let ns = fanout_numbers();
        let warm = [
            (STEPS, json!([5, 2])),
            (HELLO, json!(["warm"])),
            (CHECKOUT, order(0)),
            (FIBONACCI_SUM, json!([[1, 2, 3]])),
        ];
        let setup = Setup::start(&options, "shared", 1, &[], &warm).await;
        let (row, baseline) = observer_row(&setup);
        report(&mut rows, row);
        let baseline = Some(&baseline);
        if options.runs("lone") {
            let row = lone_row(&setup, "default config", baseline).await;
            report_as(
                &mut rows,
                figs,
                "lone.inline.step",
                Some("lone.inline.cpu"),
                row,
            );
        }
        if options.runs("hello") {
            let params = (0..HELLO_EXECUTIONS).map(|_| json!(["bench"])).collect();
            let row = in_turn_row(
                &setup,
                &format!("hello.greet x{HELLO_EXECUTIONS}"),
                HELLO,
                params,
                PerUnit::Execution,
                |r| matches!(r, ExecutionResult::Ok(v) if *v == json!("hello, bench")),
                baseline,
            )
            .await;
            report(&mut rows, row);
        }
        if options.runs("saga") {
            let params = (1..=SAGA_EXECUTIONS).map(order).collect();
            let row = in_turn_row(
                &setup,
                &format!("order saga (order.checkout) x{SAGA_EXECUTIONS}"),
                CHECKOUT,
                params,
                PerUnit::Execution,
                |r| matches!(r, ExecutionResult::Ok(v) if v["tracking-number"].is_string()),
                baseline,
            )
            .await;
            report(&mut rows, row);
        }
        if options.runs("fanout") {
            let expected: u64 = ns.iter().map(|&n| fib(u64::from(n))).sum();
            let params = (0..FANOUT_EXECUTIONS).map(|_| json!([ns])).collect();
            let row = in_turn_row(
                &setup,
                &format!("{FANOUT_WIDTH}-way fan-out x{FANOUT_EXECUTIONS}"),
                FIBONACCI_SUM,
                params,
                PerUnit::Child,
                |r| matches!(r, ExecutionResult::Ok(v) if v["sum"] == json!(expected)),
                baseline,
            )
            .await;
            report_as(&mut rows, figs, "fanout.inline", None, row);
        }
        if options.runs("idle") {
            report(&mut rows, idle_row(&setup));
        }
    }

    if options.runs("lone") || options.runs("topics") {
        let label = format!("{INLINE_FLAG} off");
        if options.has_inline_flag {
            let warm = [(STEPS, json!([5, 2]))];
            let setup = Setup::start(&options, "topic", 1, &[INLINE_FLAG, "off"], &warm).await;
            let (_, baseline) = observer_row(&setup);
            let row = lone_row(&setup, &label, Some(&baseline)).await;
            report_as(
                &mut rows,
                figs,
                "lone.topics.step",
                Some("lone.topics.cpu"),
                row,
            );
            if options.runs("topics") {
                let expected: u64 = fanout_numbers().iter().map(|&n| fib(u64::from(n))).sum();
                let params = (0..FANOUT_EXECUTIONS)
                    .map(|_| json!([fanout_numbers()]))
                    .collect();
                let row = in_turn_row(
                    &setup,
                    &format!("{FANOUT_WIDTH}-way fan-out x{FANOUT_EXECUTIONS}, {label}"),
                    FIBONACCI_SUM,
                    params,
                    PerUnit::Child,
                    |r| matches!(r, ExecutionResult::Ok(v) if v["sum"] == json!(expected)),
                    Some(&baseline),
                )
                .await;
                report_as(&mut rows, figs, "fanout.topics", None, row);
            }
        } else {
            let mut row = Row::new(format!("lone 20-step sequential, {label}, per step"));
            row.notes = format!("n/a (worker has no {INLINE_FLAG})");
            report(&mut rows, row);
        }
    }

    if options.runs("throughput") {
        for &concurrency in &options.throughput {
            let warm = [(STEPS, json!([5, 2]))];
            let setup = Setup::start(&options, &format!("t{concurrency}"), 1, &[], &warm).await;
            let label = format!("{concurrency} concurrent 20-step, per step");
            let key = side_by_side::throughput_key("inline", concurrency);
            let row = throughput_row(&setup, label, concurrency).await;
            report_as(&mut rows, figs, key, None, row);
        }
    }

    if options.runs("topics") && options.has_inline_flag {
        for concurrency in side_by_side::LEVELS {
            let warm = [(STEPS, json!([5, 2]))];
            let args = [INLINE_FLAG, "off"];
            let setup = Setup::start(&options, &format!("q{concurrency}"), 1, &args, &warm).await;
            let label = format!("{concurrency} concurrent 20-step, {INLINE_FLAG} off, per step");
            let key = side_by_side::throughput_key("topics", concurrency);
            let row = throughput_row(&setup, label, concurrency).await;
            report_as(&mut rows, figs, key, None, row);
        }
    }

    if options.runs("scaleout") {
        // The substrate's own limit at this concurrency: as many floor chains in flight.
        let floor = common::kafka_floor(SCALEOUT_EXECUTIONS, SCALEOUT_FLOOR_HOPS).await;
        report(&mut rows, floor_row(&floor));
        for workers in SCALEOUT_WORKERS {
            let warm = [(STEPS, json!([5, 2]))];
            let setup = Setup::start(&options, &format!("w{workers}"), workers, &[], &warm).await;
            let label = format!(
                "scale-out: {workers} worker(s), {SCALEOUT_EXECUTIONS} concurrent 20-step, per step"
            );
            report(
                &mut rows,
                throughput_row(&setup, label, SCALEOUT_EXECUTIONS).await,
            );
        }
    }

    println!();
    println!(
        "weir scale benchmark, {} s (definitions: tests/benches/scale.rs)",
        started.elapsed().as_secs()
    );
    print_table(&rows);
    let peers = side_by_side::peers_from_env(&weir_e2e::repo_root());
    side_by_side::print(&figures, &peers);
}
