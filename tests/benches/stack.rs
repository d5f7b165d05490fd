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
//!   (`weir::kafka::group::collect_batch`, commit interval 20 ms). Hop latency = visible(hop k+1) − visible(hop k), stamped by the
//!   same observer; measured with as many chains in flight as the Weir scenario it is compared
//!   to (20 for (a), 100 for (b)), and with one chain for reference.
//! - **Floor, CQL**: a prepared single-row `INSERT` (history-row shaped), executed one at a
//!   time with the scylla driver.
//!
//! Ratios printed: Weir / Kafka floor (the goal: p50 ≤ 1.5×, p99 ≤ 3×), and Weir / (Kafka
//! floor + one CQL write), for reference: the worker used to write the store between batches (it
//! now hands committed batches to a background materialiser, see `weir::kafka::materialiser`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;
use weir::codec::{ExecutionFinished, HistoryEntry, HistoryRecord, RecordPosition};
use weir::kafka::group::collect_batch;
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, Response};
use weir::projection::response_id;
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::{cql_contact_points, create_topics, kafka_config, unique_name};

/// The worker's default commit interval; the floor uses the same.
const COMMIT_INTERVAL: Duration = Duration::from_millis(20);
const MAX_BATCH_RECORDS: usize = 500;
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the observer's fetches return when nothing new is committed.
const OBSERVER_FETCH_WAIT_MS: &str = "5";

const STEPS: &str = "weir-examples:workflows/steps.fibonacci-chain";
const FIBONACCI_SUM: &str = "weir-examples:workflows/fanout.fibonacci-sum";
const STEPS_EXECUTIONS: usize = 20;
const STEPS_PER_EXECUTION: u32 = 20;
const STEPS_N: u8 = 30;
const FANOUT_EXECUTIONS: usize = 5;
const FANOUT_WIDTH: usize = 100;
const CQL_WRITES: usize = 2000;
const RESULTS_TIMEOUT: Duration = Duration::from_secs(300);

/// Milliseconds since the start of the benchmark (monotonic).
fn now_ms() -> f64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
}

// ------------------------------------------------------------------------------ statistics

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

/// Nearest-rank percentiles.
fn stats(samples: &[f64]) -> Stats {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let index = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[index.clamp(1, sorted.len()) - 1]
    };
    Stats {
        n: sorted.len(),
        p50: rank(50.0),
        p99: rank(99.0),
        max: sorted[sorted.len() - 1],
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={:<5} p50 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
            self.n, self.p50, self.p99, self.max
        )
    }
}

// ------------------------------------------------------------------------------ observer

/// A record as the observer saw it.
struct Seen {
    topic: String,
    partition: i32,
    offset: i64,
    key: String,
    payload: Vec<u8>,
    at_ms: f64,
}

/// A read_committed consumer of every partition of some topics, on its own thread, stamping
/// each record with the time it became visible.
struct Observer {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    fn start(topics: &[String]) -> Self {
        let mut config = kafka_config().client();
        config
            .set("group.id", unique_name("benchobserver"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", OBSERVER_FETCH_WAIT_MS);
        let consumer: BaseConsumer = config.create().expect("observer consumer");
        let mut list = TopicPartitionList::new();
        for topic in topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .expect("metadata");
            for p in metadata.topics()[0].partitions() {
                list.add_partition_offset(topic, p.id(), Offset::Beginning)
                    .expect("offset");
            }
        }
        consumer.assign(&list).expect("assign");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let seen = Arc::clone(&seen);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(polled) = consumer.poll(Duration::from_millis(50)) else {
                        continue;
                    };
                    let at_ms = now_ms();
                    let message = polled.expect("observer consume");
                    let record = Seen {
                        topic: message.topic().to_owned(),
                        partition: message.partition(),
                        offset: message.offset(),
                        key: String::from_utf8_lossy(message.key().unwrap_or_default())
                            .into_owned(),
                        payload: message.payload().unwrap_or_default().to_vec(),
                        at_ms,
                    };
                    seen.lock().expect("observer lock").push(record);
                }
            })
        };
        // Let the first fetches start before anything is produced.
        std::thread::sleep(Duration::from_millis(500));
        Observer {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Waits until `done` holds for what was seen so far.
    fn wait(&self, what: &str, timeout: Duration, mut done: impl FnMut(&[Seen]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.seen.lock().expect("observer lock")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn finish(mut self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("observer thread");
        }
        std::mem::take(&mut *self.seen.lock().expect("observer lock"))
    }
}

// ------------------------------------------------------------------------------ Kafka floor

/// A ping-pong hop payload: `chain:hop:last`.
fn hop_payload(chain: usize, hop: u32, last: u32) -> String {
    format!("{chain}:{hop}:{last}")
}

fn parse_hop(payload: &[u8]) -> (usize, u32, u32) {
    let text = std::str::from_utf8(payload).expect("utf-8 hop");
    let mut parts = text.split(':').map(|p| p.parse::<u64>().expect("number"));
    let (Some(chain), Some(hop), Some(last)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("malformed hop {text}")
    };
    (chain as usize, hop as u32, last as u32)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking call")
}

/// The worker's own batching rule (`weir::kafka::group::collect_batch`, shared by both of
/// its loops), so that the floor batches exactly as the worker does; each record is stamped
/// when the batch is handed over.
async fn collect(consumer: &StreamConsumer) -> Vec<(OwnedMessage, f64)> {
    let records = collect_batch(consumer, COMMIT_INTERVAL, MAX_BATCH_RECORDS).await;
    let at = now_ms();
    records.into_iter().map(|m| (m, at)).collect()
}

/// One side of the ping-pong: consumes `input`, produces the next hop of every chain to
/// `output`, one transaction per batch with the input offsets. Records, per consumed hop,
/// the in-process time from the end of its batch's collection to that batch's commit.
async fn hop_loop(
    input: String,
    output: String,
    stop: Arc<AtomicBool>,
    in_process: Arc<Mutex<Vec<f64>>>,
) {
    let config = kafka_config();
    let group = unique_name("benchfloor");
    let mut consumer_config = config.consumer(&group);
    consumer_config.set("partition.assignment.strategy", "range");
    let consumer: StreamConsumer = consumer_config.create().expect("floor consumer");
    consumer.subscribe(&[&input]).expect("subscribe");
    let producer: FutureProducer = config
        .transactional_producer(&format!("{group}-tx"))
        .set(
            "transaction.timeout.ms",
            TRANSACTION_TIMEOUT.as_millis().to_string(),
        )
        .create()
        .expect("floor producer");
    {
        let producer = producer.clone();
        blocking(move || producer.init_transactions(TRANSACTION_TIMEOUT))
            .await
            .expect("init transactions");
    }
    while !stop.load(Ordering::Relaxed) {
        let records = collect(&consumer).await;
        if records.is_empty() {
            continue;
        }
        producer.begin_transaction().expect("begin");
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let mut deliveries = Vec::new();
        for (message, _) in &records {
            offsets.insert(message.partition(), message.offset() + 1);
            let (chain, hop, last) = parse_hop(message.payload().unwrap_or_default());
            if hop < last {
                let payload = hop_payload(chain, hop + 1, last);
                let key = chain.to_string();
                let delivery = producer
                    .send_result(FutureRecord::to(&output).key(&key).payload(&payload))
                    .map_err(|(e, _)| e)
                    .expect("produce");
                deliveries.push(delivery);
            }
        }
        // Acknowledged before the commit: committing with records in flight makes librdkafka's
        // commit_transaction take ~100 ms here (measured), in the worker as in this loop.
        for delivery in deliveries {
            delivery
                .await
                .expect("delivery not cancelled")
                .map_err(|(e, _)| e)
                .expect("delivered");
        }
        let mut list = TopicPartitionList::new();
        for (partition, offset) in offsets {
            list.add_partition_offset(&input, partition, Offset::Offset(offset))
                .expect("offset");
        }
        let metadata = consumer.group_metadata().expect("group metadata");
        let p = producer.clone();
        blocking(move || p.send_offsets_to_transaction(&list, &metadata, TRANSACTION_TIMEOUT))
            .await
            .expect("send offsets");
        let p = producer.clone();
        blocking(move || p.commit_transaction(TRANSACTION_TIMEOUT))
            .await
            .expect("commit");
        let committed = now_ms();
        in_process
            .lock()
            .expect("lock")
            .extend(records.iter().map(|(_, consumed)| committed - consumed));
    }
}

struct FloorResult {
    chains: usize,
    observed: Stats,
    in_process: Stats,
    hops_per_second: f64,
    substrate_cpu: String,
}

/// The ping-pong with `chains` chains of `hops` hops each in flight at once.
async fn kafka_floor(chains: usize, hops: u32) -> FloorResult {
    let ping = unique_name("benchping");
    let pong = unique_name("benchpong");
    create_topics(&[(&ping, 6), (&pong, 6)]);
    let observer = Observer::start(&[ping.clone(), pong.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let in_process = Arc::new(Mutex::new(Vec::new()));
    let loops = [
        tokio::spawn(hop_loop(
            ping.clone(),
            pong.clone(),
            Arc::clone(&stop),
            Arc::clone(&in_process),
        )),
        tokio::spawn(hop_loop(
            pong.clone(),
            ping.clone(),
            Arc::clone(&stop),
            Arc::clone(&in_process),
        )),
    ];
    let seeder: FutureProducer = kafka_config().producer().create().expect("seeder");
    let seed = |chain: usize, last: u32| {
        let seeder = seeder.clone();
        let ping = ping.clone();
        async move {
            let payload = hop_payload(chain, 0, last);
            let key = chain.to_string();
            seeder
                .send(
                    FutureRecord::to(&ping).key(&key).payload(&payload),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("seed");
        }
    };
    // Warm-up: both groups joined and both producers ready before anything is measured.
    let warmup = chains;
    seed(warmup, 6).await;
    let is_last = |s: &Seen, chain: usize| {
        let (c, h, last) = parse_hop(&s.payload);
        c == chain && h == last
    };
    observer.wait("the floor's warm-up chain", RESULTS_TIMEOUT, |seen| {
        seen.iter().any(|s| is_last(s, warmup))
    });
    in_process.lock().expect("lock").clear();

    let mut cpu = SubstrateCpu::start();
    let started = now_ms();
    for chain in 0..chains {
        seed(chain, hops).await;
    }
    observer.wait("every floor chain", RESULTS_TIMEOUT, |seen| {
        seen.iter()
            .filter(|s| {
                let (c, h, last) = parse_hop(&s.payload);
                c < chains && h == last
            })
            .count()
            == chains
    });
    cpu.stop();
    let substrate_cpu = cpu.per(chains * hops as usize, "hop");
    stop.store(true, Ordering::Relaxed);
    for handle in loops {
        handle.await.expect("hop loop");
    }
    let seen = observer.finish();
    let mut at: HashMap<(usize, u32), f64> = HashMap::new();
    for s in &seen {
        let (chain, hop, _) = parse_hop(&s.payload);
        if chain < chains {
            at.entry((chain, hop)).or_insert(s.at_ms);
        }
    }
    let mut hop_latencies = Vec::new();
    let mut ended = started;
    for chain in 0..chains {
        for hop in 0..hops {
            let from = at[&(chain, hop)];
            let to = at[&(chain, hop + 1)];
            hop_latencies.push(to - from);
            ended = ended.max(to);
        }
    }
    let in_process = std::mem::take(&mut *in_process.lock().expect("lock"));
    FloorResult {
        chains,
        observed: stats(&hop_latencies),
        in_process: stats(&in_process),
        hops_per_second: hop_latencies.len() as f64 / ((ended - started) / 1000.0),
        substrate_cpu,
    }
}

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
    (stats(&latencies), cpu.per(writes, "write"))
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
        substrate_cpu: cpu.per(journalled, "step"),
    }
}

fn fib(n: u64) -> u64 {
    (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0
}

// ------------------------------------------------------------------------------ substrate CPU

/// /proc reports process times in ticks of USER_HZ, 100 on Linux.
const USER_HZ: f64 = 100.0;

/// CPU seconds used so far by the local stack's Kafka and Cassandra, read from /proc through
/// the pid files of `docker/local/stack.sh` (`$WEIR_STACK_DIR`, else `$WEIR_CACHE/stack`);
/// `None` when they are not processes of this machine. On a small machine the store's CPU is
/// taken from Kafka's, so a scenario's cost to each is printed beside its latency.
fn stack_cpu_seconds() -> Option<(f64, f64)> {
    let dir = std::env::var("WEIR_STACK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| weir_e2e::weir_cache().join("stack"));
    let read = |service: &str| -> Option<f64> {
        let pid = std::fs::read_to_string(dir.join(service).join("pid")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
        // After the command name: state is field 3 of proc(5), utime 14 and stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / USER_HZ)
    };
    Some((read("kafka")?, read("cassandra")?))
}

/// The substrate's CPU over a scenario, per hop or step.
struct SubstrateCpu {
    start: Option<(f64, f64)>,
    end: Option<(f64, f64)>,
}

impl SubstrateCpu {
    fn start() -> Self {
        SubstrateCpu {
            start: stack_cpu_seconds(),
            end: None,
        }
    }

    fn stop(&mut self) {
        self.end = stack_cpu_seconds();
    }

    /// "kafka X ms, cassandra Y ms per <unit>", or nothing when unknown.
    fn per(&self, count: usize, unit: &str) -> String {
        match (self.start, self.end) {
            (Some((k0, c0)), Some((k1, c1))) if count > 0 => format!(
                "      substrate CPU per {unit}: kafka {:.2} ms, cassandra {:.2} ms",
                (k1 - k0) * 1000.0 / count as f64,
                (c1 - c0) * 1000.0 / count as f64
            ),
            _ => String::new(),
        }
    }
}

// ------------------------------------------------------------------------------ report

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
        "      (in-process, batch collected -> committed: {})",
        floor.in_process
    );
    if !floor.substrate_cpu.is_empty() {
        println!("{}", floor.substrate_cpu);
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
    let worker = deployment.start_worker_with_env(
        "bench",
        &["--commit-interval-ms", &interval],
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
