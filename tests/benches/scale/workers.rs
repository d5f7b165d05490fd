//! The workers of a group of scenarios: a deployment of its own, its `weir worker` processes
//! started and warmed up, and what they use (CPU, memory, metrics).

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Instant;

use serde_json::Value;
use weir::topology::TopicRole;
use weir_e2e::deployment::{Deployment, WorkerProcess};

use crate::common::{self, RESULTS_TIMEOUT, cpu_seconds};
use crate::usage::Snapshot;
use crate::{METRICS_PORTS, Options, SETTLED};

/// The first free port of [`METRICS_PORTS`] not handed out yet.
pub(crate) fn metrics_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(METRICS_PORTS.start);
    loop {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            METRICS_PORTS.contains(&port),
            "no free metrics port left in {METRICS_PORTS:?}"
        );
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Resident memory of a process in bytes (`VmRSS`), 0 when unknown.
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// A deployment of its own and the workers of one group of scenarios; the workers are killed
/// when it is dropped.
pub(crate) struct Setup {
    pub(crate) deployment: Deployment,
    pub(crate) workers: Vec<WorkerProcess>,
}

impl Setup {
    /// A fresh deployment with `count` workers started with the worker's defaults plus `args`
    /// (and `WEIR_BENCH_WORKER_ARGS`), warmed up: as many executions of each of `warm` as
    /// there are partitions, their results, then the assignment settled.
    pub(crate) async fn start(
        options: &Options,
        name: &str,
        count: usize,
        args: &[&str],
        warm: &[(&str, Value)],
    ) -> Setup {
        let deployment = Deployment::new(&format!("bench{name}"));
        let args: Vec<&str> = args
            .iter()
            .copied()
            .chain(options.worker_args.iter().map(String::as_str))
            .collect();
        let workers = (0..count)
            .map(|i| {
                deployment.spawn_worker_on(
                    &format!("{name}-{i}"),
                    metrics_port(),
                    &args,
                    &[("WEIR_LOG", weir::options::DEFAULT_LOG_FILTER)],
                )
            })
            .collect();
        let setup = Setup {
            deployment,
            workers,
        };
        let partitions = setup
            .deployment
            .topology
            .topic(TopicRole::Submissions)
            .partitions;
        let producer = setup.deployment.producer();
        let mut ids = Vec::new();
        for _ in 0..partitions {
            for (ffqn, params) in warm {
                ids.push(
                    setup
                        .deployment
                        .submit(&producer, ffqn, params.clone())
                        .await,
                );
            }
        }
        setup.deployment.results(&ids, RESULTS_TIMEOUT);
        // With several workers the group may still be settling: wait until every partition is
        // owned and every worker owns one (when there are enough), twice SETTLED apart.
        let settled = || {
            let owned: Vec<f64> = setup
                .workers
                .iter()
                .map(|w| {
                    w.metrics()
                        .and_then(|m| m.get("weir_partitions_owned").copied())
                        .unwrap_or(0.0)
                })
                .collect();
            let everyone = count > partitions as usize || owned.iter().all(|&o| o >= 1.0);
            (everyone && owned.iter().sum::<f64>() == f64::from(partitions)).then_some(owned)
        };
        let mut owned = Vec::new();
        for _ in 0..2 {
            owned = weir_e2e::wait_for("a settled assignment", RESULTS_TIMEOUT, || async {
                settled()
            })
            .await;
            tokio::time::sleep(SETTLED).await;
        }
        println!(
            "  [{name}] {count} worker(s) {args:?} warmed up ({} executions), partitions owned {owned:?}, namespace {}",
            ids.len(),
            setup.deployment.namespace
        );
        setup
    }

    /// A metric summed over the workers (0 where a worker does not answer).
    pub(crate) fn metric(&self, name: &str) -> f64 {
        self.workers
            .iter()
            .filter_map(|w| w.metrics()?.get(name).copied())
            .sum()
    }

    pub(crate) fn rss(&self) -> u64 {
        self.workers.iter().map(|w| rss_bytes(w.child.id())).sum()
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            worker: self
                .workers
                .iter()
                .filter_map(|w| cpu_seconds(w.child.id()))
                .sum(),
            stack: common::stack_cpu_seconds(),
            replayed: self.metric("weir_executions_replayed_total"),
        }
    }
}
