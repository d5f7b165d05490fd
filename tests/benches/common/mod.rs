//! What the stack benchmarks share (`stack.rs`, issue 5; `scale.rs`, issue 12): the observer
//! that stamps when records become visible, nearest-rank statistics, the Kafka transaction
//! floor (a consume → produce ping-pong with the worker's client settings and batching), and
//! the CPU time of processes read from /proc.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use weir::kafka::group::collect_batch;
use weir::kafka::producer::Served;
use weir_e2e::{create_topics, kafka_config, unique_name};

/// The worker's default commit interval and batch size; the floor uses the same.
pub const COMMIT_INTERVAL: Duration =
    Duration::from_millis(weir::options::DEFAULT_COMMIT_INTERVAL_MS);
const MAX_BATCH_RECORDS: usize = weir::options::DEFAULT_MAX_BATCH;
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the observer's fetches return when nothing new is committed.
const OBSERVER_FETCH_WAIT_MS: &str = "5";
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(300);

/// Milliseconds since the start of the benchmark (monotonic).
pub fn now_ms() -> f64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
}

// ------------------------------------------------------------------------------ statistics

#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles.
pub fn stats(samples: &[f64]) -> Stats {
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
pub struct Seen {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub payload: Vec<u8>,
    pub at_ms: f64,
}

/// A read_committed consumer of every partition of some topics, on its own thread, stamping
/// each record with the time it became visible.
pub struct Observer {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    pub fn start(topics: &[String]) -> Self {
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
    pub fn wait(&self, what: &str, timeout: Duration, done: impl FnMut(&[Seen]) -> bool) {
        self.wait_ticking(what, timeout, Duration::from_millis(50), done, || {});
    }

    /// [`wait`](Self::wait), looking every `every` and calling `tick` between two looks
    /// (outside the observer's lock, so that a slow tick does not delay its stamps).
    pub fn wait_ticking(
        &self,
        what: &str,
        timeout: Duration,
        every: Duration,
        mut done: impl FnMut(&[Seen]) -> bool,
        mut tick: impl FnMut(),
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.seen.lock().expect("observer lock")) {
                return;
            }
            tick();
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(every);
        }
    }

    pub fn finish(mut self) -> Vec<Seen> {
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

/// How one side of the floor writes its hop and commits what it consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopWrite {
    /// One transaction per batch: the hops produced and the input offsets committed together
    /// (what the workflow worker does, and the activity worker did before issue 38).
    Transaction,
    /// The hops produced by the idempotent producer outside any transaction and acknowledged,
    /// then the input offsets committed by the consumer: at-least-once, the reader dropping
    /// duplicates (what the activity worker does since issue 38).
    #[allow(dead_code)] // `scale.rs` runs it; `stack.rs` only the transactional floor
    Idempotent,
}

/// The floor's Kafka client settings: the worker's, plus `WEIR_BENCH_KAFKA_PROPERTIES`
/// (`key=value,key=value`: a setting tried on the floor before it is given to the workers).
fn floor_config() -> weir::kafka::KafkaConfig {
    let mut config = kafka_config();
    if let Ok(list) = std::env::var("WEIR_BENCH_KAFKA_PROPERTIES") {
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .expect("WEIR_BENCH_KAFKA_PROPERTIES: key=value,key=value");
            config
                .properties
                .push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    config
}

/// Where a side's time went in one batch, in ms from the batch's collection: the hops
/// acknowledged, the offsets sent (`send_offsets_to_transaction`, or the consumer's commit),
/// the transaction committed (equal to the offsets for [`HopWrite::Idempotent`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    pub offsets: f64,
    pub acked: f64,
    pub committed: f64,
}

/// One side of the ping-pong: consumes `input`, produces the next hop of every chain to
/// `output`, as `write` says. Records, per batch, where its time went ([`Phases`]).
async fn hop_loop(
    input: String,
    output: String,
    write: HopWrite,
    stop: Arc<AtomicBool>,
    phases: Arc<Mutex<Vec<Phases>>>,
) {
    let config = floor_config();
    let group = unique_name("benchfloor");
    let mut consumer_config = config.consumer(&group);
    consumer_config.set("partition.assignment.strategy", "range");
    let consumer: StreamConsumer = consumer_config.create().expect("floor consumer");
    consumer.subscribe(&[&input]).expect("subscribe");
    // The worker's producer (its delivery reports served by a thread of its own) and its
    // commit (`Served::commit_transaction`), so that the floor commits as the worker does.
    let producer = match write {
        HopWrite::Transaction => {
            let producer =
                Served::create(config.transactional_producer(&format!("{group}-tx")).set(
                    "transaction.timeout.ms",
                    TRANSACTION_TIMEOUT.as_millis().to_string(),
                ))
                .expect("floor producer");
            let p = Arc::clone(producer.producer());
            blocking(move || p.init_transactions(TRANSACTION_TIMEOUT))
                .await
                .expect("init transactions");
            producer
        }
        HopWrite::Idempotent => Served::create(&config.producer()).expect("floor producer"),
    };
    while !stop.load(Ordering::Relaxed) {
        let records = collect(&consumer).await;
        if records.is_empty() {
            continue;
        }
        let collected = records[0].1;
        if write == HopWrite::Transaction {
            producer.producer().begin_transaction().expect("begin");
        }
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let mut deliveries = Vec::new();
        for (message, _) in &records {
            offsets.insert(message.partition(), message.offset() + 1);
            let (chain, hop, last) = parse_hop(message.payload().unwrap_or_default());
            if hop < last {
                let payload = hop_payload(chain, hop + 1, last);
                let key = chain.to_string();
                let delivery = producer
                    .send(
                        &output,
                        None,
                        &key,
                        Some(payload.as_bytes()),
                        OwnedHeaders::new(),
                    )
                    .expect("produce");
                deliveries.push(delivery);
            }
        }
        let mut list = TopicPartitionList::new();
        for (partition, offset) in offsets {
            list.add_partition_offset(&input, partition, Offset::Offset(offset))
                .expect("offset");
        }
        let mut phase = Phases::default();
        match write {
            HopWrite::Transaction => {
                // Offsets sent while the hops are acknowledged, as the worker does.
                let metadata = consumer.group_metadata().expect("group metadata");
                let p = Arc::clone(producer.producer());
                blocking(move || {
                    p.send_offsets_to_transaction(&list, &metadata, TRANSACTION_TIMEOUT)
                })
                .await
                .expect("send offsets");
                phase.offsets = now_ms() - collected;
                acknowledged(deliveries).await;
                phase.acked = now_ms() - collected;
                let p = producer.clone();
                blocking(move || p.commit_transaction(TRANSACTION_TIMEOUT))
                    .await
                    .expect("commit");
                phase.committed = now_ms() - collected;
            }
            HopWrite::Idempotent => {
                acknowledged(deliveries).await;
                phase.acked = now_ms() - collected;
                consumer
                    .commit(&list, rdkafka::consumer::CommitMode::Sync)
                    .expect("commit offsets");
                phase.offsets = now_ms() - collected;
                phase.committed = phase.offsets;
            }
        }
        phases.lock().expect("lock").push(phase);
    }
}

/// Waits until every hop of a batch is acknowledged.
async fn acknowledged(deliveries: Vec<weir::kafka::producer::Delivery>) {
    for delivery in deliveries {
        delivery
            .await
            .expect("delivery not cancelled")
            .expect("delivered");
    }
}

#[allow(dead_code)] // `stack.rs` reads a part, `scale.rs` all of it
pub struct FloorResult {
    pub chains: usize,
    /// Per hop: visible(hop k+1) − visible(hop k).
    pub observed: Stats,
    /// Per two-hop round: visible(hop k+2) − visible(hop k), k even.
    pub rounds: Stats,
    /// Per hop, by the side that wrote it (ping → pong, pong → ping).
    pub sides: [Stats; 2],
    pub writes: [HopWrite; 2],
    /// Per batch of the transactional side(s), ms from the batch's collection.
    pub offsets: Option<Stats>,
    pub acked: Option<Stats>,
    pub in_process: Stats,
    pub hops_per_second: f64,
    /// The stack's CPU over the measured chains.
    pub cpu: SubstrateCpu,
}

/// The ping-pong with `chains` chains of `hops` hops each in flight at once, both sides
/// transactional (two transactions a round, as a step through an activity topic paid before
/// issue 38).
pub async fn kafka_floor(chains: usize, hops: u32) -> FloorResult {
    kafka_floor_of(chains, hops, [HopWrite::Transaction, HopWrite::Transaction]).await
}

/// The ping-pong, each side writing as `writes` says (ping → pong, pong → ping).
pub async fn kafka_floor_of(chains: usize, hops: u32, writes: [HopWrite; 2]) -> FloorResult {
    let ping = unique_name("benchping");
    let pong = unique_name("benchpong");
    create_topics(&[(&ping, 6), (&pong, 6)]);
    let observer = Observer::start(&[ping.clone(), pong.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let phases = [Arc::default(), Arc::default()];
    let loops = [
        tokio::spawn(hop_loop(
            ping.clone(),
            pong.clone(),
            writes[0],
            Arc::clone(&stop),
            Arc::clone(&phases[0]),
        )),
        tokio::spawn(hop_loop(
            pong.clone(),
            ping.clone(),
            writes[1],
            Arc::clone(&stop),
            Arc::clone(&phases[1]),
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
    for side in &phases {
        side.lock().expect("lock").clear();
    }

    let mut cpu = SubstrateCpu::start();
    let started = now_ms();
    // All at once: seeded one after another, the chains' acknowledgements would count in
    // the hops/s of many chains.
    futures::future::join_all((0..chains).map(|chain| seed(chain, hops))).await;
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
    let mut sides: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut ended = started;
    for chain in 0..chains {
        for hop in 0..hops {
            let from = at[&(chain, hop)];
            let to = at[&(chain, hop + 1)];
            hop_latencies.push(to - from);
            // Hop 0 is seeded on ping; side 0 (ping → pong) writes the odd hops.
            sides[(hop % 2) as usize].push(to - from);
            ended = ended.max(to);
        }
    }
    let rounds: Vec<f64> = (0..chains)
        .flat_map(|chain| (0..hops - 1).step_by(2).map(move |hop| (chain, hop)))
        .map(|(chain, hop)| at[&(chain, hop + 2)] - at[&(chain, hop)])
        .collect();
    let phases: Vec<(HopWrite, Phases)> = writes
        .iter()
        .zip(&phases)
        .flat_map(|(write, side)| {
            std::mem::take(&mut *side.lock().expect("lock"))
                .into_iter()
                .map(move |p| (*write, p))
        })
        .collect();
    let transactional: Vec<&Phases> = phases
        .iter()
        .filter(|(w, _)| *w == HopWrite::Transaction)
        .map(|(_, p)| p)
        .collect();
    let of = |f: fn(&Phases) -> f64| {
        (!transactional.is_empty())
            .then(|| stats(&transactional.iter().map(|p| f(p)).collect::<Vec<_>>()))
    };
    FloorResult {
        chains,
        observed: stats(&hop_latencies),
        sides: [stats(&sides[0]), stats(&sides[1])],
        writes,
        rounds: stats(&rounds),
        offsets: of(|p| p.offsets),
        acked: of(|p| p.acked),
        in_process: stats(&phases.iter().map(|(_, p)| p.committed).collect::<Vec<_>>()),
        hops_per_second: hop_latencies.len() as f64 / ((ended - started) / 1000.0),
        cpu,
    }
}

pub fn fib(n: u64) -> u64 {
    (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0
}

// ------------------------------------------------------------------------------ substrate CPU

/// /proc reports process times in ticks of USER_HZ, 100 on Linux.
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name: state is field 3 of proc(5), utime 14 and stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / USER_HZ)
}

/// CPU seconds used so far by the local stack's Kafka and Cassandra, read from /proc through
/// the pid files of `docker/local/stack.sh` (`$WEIR_STACK_DIR`, else `$WEIR_CACHE/stack`);
/// `None` when they are not processes of this machine. On a small machine the store's CPU is
/// taken from Kafka's, so a scenario's cost to each is printed beside its latency.
pub fn stack_cpu_seconds() -> Option<(f64, f64)> {
    let dir = std::env::var("WEIR_STACK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| weir_e2e::weir_cache().join("stack"));
    let read = |service: &str| -> Option<f64> {
        let pid = std::fs::read_to_string(dir.join(service).join("pid")).ok()?;
        cpu_seconds(pid.trim().parse().ok()?)
    };
    Some((read("kafka")?, read("cassandra")?))
}

/// The substrate's CPU over a scenario, per hop or step.
pub struct SubstrateCpu {
    start: Option<(f64, f64)>,
    end: Option<(f64, f64)>,
}

impl SubstrateCpu {
    pub fn start() -> Self {
        SubstrateCpu {
            start: stack_cpu_seconds(),
            end: None,
        }
    }

    pub fn stop(&mut self) {
        self.end = stack_cpu_seconds();
    }

    /// (kafka, cassandra) milliseconds of CPU per one of `count`, when known.
    pub fn ms_per(&self, count: usize) -> Option<(f64, f64)> {
        match (self.start, self.end) {
            (Some((k0, c0)), Some((k1, c1))) if count > 0 => Some((
                (k1 - k0) * 1000.0 / count as f64,
                (c1 - c0) * 1000.0 / count as f64,
            )),
            _ => None,
        }
    }
}
