//! The fairness benchmark of issue 35 item 4: tenant A submits a burst of executions, tenant B
//! a few right after; what B waits, with fairness by tenant and without it, beside B alone on
//! an idle worker. It prints figures and ratios and asserts nothing about time.
//!
//! Run against a local stack (`bash docker/local/stack.sh up`,
//! `eval "$(bash docker/local/stack.sh env)"`), after `bash examples/build.sh`:
//!
//! ```sh
//! cargo build --release -p weir --bins && cargo bench -p weir-e2e --bench fairness
//! ```
//!
//! Environment (optional): `WEIR_BENCH_FAIRNESS_A` (default 10000), the burst of tenant A;
//! `WEIR_BENCH_FAIRNESS_B` (default 10), tenant B's.
//!
//! Three runs, each on a deployment of its own (topics, keyspace) and one `weir worker`
//! (release build, its defaults), warmed up with one execution per partition first:
//! - **idle**: B's executions alone;
//! - **fair**: A's burst under tenant `a`, then B's under tenant `b`;
//! - **log order**: the same without tenants (one lane: taken in log order, as before
//!   fairness).
//!
//! B's latency is submit → result: from just before its submission is produced to when its
//! result is first seen by a `read_committed` consumer of `weir.results` polling every 10 ms
//! (the same consumer delay in every run).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::BaseConsumer;
use serde_json::json;
use weir::codec::{ExecutionFinished, RecordPosition};
use weir::model::{ExecutionId, ExecutionResult};
use weir::topology::TopicRole;
use weir_e2e::deployment::{Deployment, reader};

const GREET: &str = "weir-examples:workflows/hello.greet";
const RESULTS_TIMEOUT: Duration = Duration::from_secs(1800);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{name}: a number"))
    })
}

/// Results of `wanted` as a consumer of `weir.results` first sees them: when, by id.
fn seen(
    deployment: &Deployment,
    consumer: &BaseConsumer,
    wanted: &[ExecutionId],
) -> HashMap<ExecutionId, Instant> {
    let topic = deployment.topic(TopicRole::Results);
    let codec = weir::codec::Codec::single_object();
    let mut seen = HashMap::new();
    let started = Instant::now();
    while seen.len() < wanted.len() {
        assert!(
            started.elapsed() < RESULTS_TIMEOUT,
            "{} of {} results seen",
            seen.len(),
            wanted.len()
        );
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(10)) else {
            continue;
        };
        let position = RecordPosition::at(&topic, message.partition(), message.offset());
        let Ok(finished) =
            codec.decode::<ExecutionFinished>(message.payload().unwrap_or_default(), &position)
        else {
            continue;
        };
        if wanted.contains(&finished.execution_id) {
            assert!(
                matches!(finished.result, ExecutionResult::Ok(_)),
                "{}: {:?}",
                finished.execution_id,
                finished.result
            );
            seen.entry(finished.execution_id)
                .or_insert_with(Instant::now);
        }
    }
    seen
}

/// B's latencies (ms, sorted) in one run: `burst` executions of tenant `a` first (none in the
/// idle run), then `few` of tenant `b`; `tenants` false submits them all without one.
async fn run(name: &str, burst: usize, few: usize, tenants: bool) -> Vec<f64> {
    let deployment = Deployment::new(&format!("fair_{name}"));
    let _worker = deployment.start_worker(name, &[]);
    let producer = deployment.producer();
    let partitions = deployment.topology.topic(TopicRole::Submissions).partitions;
    // The results' consumer is warmed up too: its first fetch would count in B's latency.
    let consumer = reader(&deployment.topic(TopicRole::Results), false);
    let mut warm = Vec::new();
    for i in 0..partitions {
        warm.push(
            deployment
                .submit(&producer, GREET, json!([format!("warm{i}")]))
                .await,
        );
    }
    seen(&deployment, &consumer, &warm);
    let submit = |tenant: &'static str, i: usize| {
        let (deployment, producer) = (&deployment, &producer);
        async move {
            let name = json!([format!("{tenant}{i}")]);
            if tenants {
                deployment
                    .submit_for_tenant(producer, tenant, GREET, name)
                    .await
            } else {
                deployment.submit(producer, GREET, name).await
            }
        }
    };
    let started = Instant::now();
    // A's burst all at once (sent together, acknowledged together): a backlog, not a stream
    // the worker keeps up with.
    futures::future::join_all((0..burst).map(|i| submit("a", i))).await;
    let mut b = Vec::new();
    for i in 0..few {
        let at = Instant::now();
        b.push((submit("b", i).await, at));
    }
    let ids: Vec<ExecutionId> = b.iter().map(|(id, _)| id.clone()).collect();
    let seen = seen(&deployment, &consumer, &ids);
    let mut latencies: Vec<f64> = b
        .iter()
        .map(|(id, at)| (seen[id] - *at).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "{name:>9}: B's {few} after A's {burst}: p50 {:.0} ms, max {:.0} ms (run {:.1} s)",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
        started.elapsed().as_secs_f64()
    );
    latencies
}

#[tokio::main]
async fn main() {
    let burst = env_usize("WEIR_BENCH_FAIRNESS_A", 10_000);
    let few = env_usize("WEIR_BENCH_FAIRNESS_B", 10);
    println!(
        "weir fairness benchmark: brokers {}, A {burst}, B {few} ({})",
        weir_e2e::brokers(),
        weir_e2e::weir_binary().display()
    );
    let idle = run("idle", 0, few, true).await;
    let fair = run("fair", burst, few, true).await;
    let fifo = run("log_order", burst, few, false).await;
    let p50 = |l: &[f64]| l[l.len() / 2];
    let max = |l: &[f64]| l[l.len() - 1];
    println!();
    println!("| B's submit → result | p50 ms | max ms | p50 / idle | max / idle |");
    println!("|---|---|---|---|---|");
    for (name, l) in [
        ("idle (B alone)", &idle),
        ("fair (tenants)", &fair),
        ("log order (no tenants)", &fifo),
    ] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} | {:.2} |",
            p50(l),
            max(l),
            p50(l) / p50(&idle),
            max(l) / max(&idle)
        );
    }
}
