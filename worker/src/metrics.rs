//! Metrics a user can scrape: counters and gauges of the worker, rendered in the Prometheus
//! text format and served at `GET /metrics` by [`serve`]. Hand-rolled (a few atomics) rather
//! than a metrics framework: the set is small and fixed.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{info, warn};

#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default, Debug)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sum and count of observations, exported as a Prometheus summary without quantiles.
#[derive(Default, Debug)]
pub struct Timing {
    count: AtomicU64,
    micros: AtomicU64,
}

impl Timing {
    pub fn observe(&self, seconds: f64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }
}

/// The batches of one kind of worker, exported with a `worker` label (`workflow`, `activity`).
#[derive(Default, Debug)]
pub struct BatchMetrics {
    /// Input records (and, for the workflow worker, fired timers) of committed batches.
    pub records_in: Counter,
    pub records_out: Counter,
    pub committed: Counter,
    pub aborted: Counter,
    /// The worker's Kafka clients (consumer and transactional producer) rebuilt in process
    /// after one failed fatally (`kafka::recovery`).
    pub client_restarts: Counter,
    /// Processing and commit of a batch.
    pub seconds: Timing,
}

/// Every metric of a worker process.
#[derive(Default, Debug)]
pub struct Metrics {
    pub workflow_batches: BatchMetrics,
    pub activity_batches: BatchMetrics,
    /// The trigger worker's: records of trigger topics in, what they became out.
    pub trigger_batches: BatchMetrics,
    /// Workflow worker only: running a batch's inputs (decode, load, run, encode).
    pub workflow_process_seconds: Timing,
    /// Workflow worker only: the batch's Kafka transaction (produce, offsets, commit).
    pub workflow_commit_seconds: Timing,
    /// Dead letters whose transaction committed (counted by the transactional producer after
    /// the commit, so an aborted attempt that is run again is not counted twice).
    pub dlq_records: Counter,
    /// Offsets skipped because librdkafka could not fetch their batch (`kafka::unfetchable`).
    pub unfetchable_offsets_skipped: Counter,
    pub executions_created: Counter,
    pub executions_finished: Counter,
    pub executions_replayed: Counter,
    /// Starts the host could not run then (a full pool, a component not deployed yet),
    /// parked and tried again by a `retry` timer.
    pub execution_starts_deferred: Counter,
    /// Parked runs dropped to make room for a start the pool had no room for.
    pub executions_evicted_for_room: Counter,
    /// Times admission closed the submissions partitions (runs in flight at the limit).
    pub admission_pauses: Counter,
    /// Schedule ticks that started an execution, were skipped for an overlap, were missed
    /// (owed longer than the catch-up window): `weir_schedule_ticks_total{outcome}`.
    pub schedule_ticks_started: Counter,
    pub schedule_ticks_skipped: Counter,
    pub schedule_ticks_missed: Counter,
    /// Events sent to correlation keys, by what their key's owner did: forwarded to the
    /// execution holding the key, buffered in the key (no execution held it), returned (a
    /// forwarded event that found its execution finished, back to its key):
    /// `weir_keyed_events_total{outcome}`.
    pub keyed_events_forwarded: Counter,
    pub keyed_events_buffered: Counter,
    pub keyed_events_returned: Counter,
    /// Events kept for an execution that did not exist yet (its submission not read):
    /// `weir_events_early_total`.
    pub events_early: Counter,
    /// Cancellations kept for an execution that did not exist yet: `weir_cancels_early_total`.
    pub cancels_early: Counter,
    /// Records of `weir.state` that did not decode, found at a take-over (and dropped by its
    /// first batch): `weir_state_corrupt_dropped_total`.
    pub state_corrupt_dropped: Counter,
    /// Event ids a correlation key forgot before their dedup window ended (past
    /// `MAX_REMEMBERED` ids): `weir_correlation_ids_cut_total`.
    pub correlation_ids_cut: Counter,
    /// Activity requests a workflow worker answered itself, in the batch that made them.
    pub inline_activities_answered: Counter,
    /// Inline requests sent to their topics instead (not run, interrupted at the budget, or a
    /// failed attempt's retry).
    pub inline_activities_spilled: Counter,
    pub executions_cached: Gauge,
    pub executions_parked: Gauge,
    /// 1 while admission keeps new submissions in their partitions (as many runs in flight
    /// as the pool may park), 0 while they are read.
    pub submissions_paused: Gauge,
    pub partitions_owned: Gauge,
    pub activity_attempts: Counter,
    /// Store calls retried during an outage (reads and materialiser writes).
    pub store_retries: Counter,
    /// Records read again later because the schema registry did not answer for their writer
    /// schema (held in their partition, never dead-lettered).
    pub registry_holds: Counter,
    pub activity_retries_scheduled: Counter,
    /// Activity worker: attempts running now.
    pub activity_running: Gauge,
    /// Activity worker: requests waiting (a retry's backoff, a worker that runs an unknown
    /// function, an external answer).
    pub activity_waiting: Gauge,
    /// Activity worker: partitions paused because their window of unfinished requests is full.
    pub activity_partitions_paused: Gauge,
    /// Activity worker: activities cancelled by their parent while unfinished.
    pub activity_cancelled: Counter,
    /// Activity worker: requests for a function no component of the worker exports (each
    /// waits for a worker that runs it).
    pub activity_unknown_requests: Counter,
    /// Activity worker: of those, answered with `unknown-function` after the grace.
    pub activity_unknown_answered: Counter,
    /// Activity worker: external requests answered `timed-out` at their deadline.
    pub activity_deadlines_enforced: Counter,
    /// Activity attempts that found the WASM instance pool full and waited for a slot.
    pub wasm_pool_waits: Counter,
}

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_batches(&mut out);
        let _ = writeln!(
            out,
            "# HELP weir_schedule_ticks_total Schedule ticks taken, by outcome: started an execution, skipped (overlap), missed (owed longer than the catch-up window).\n# TYPE weir_schedule_ticks_total counter"
        );
        for (outcome, counter) in [
            ("started", &self.schedule_ticks_started),
            ("skipped", &self.schedule_ticks_skipped),
            ("missed", &self.schedule_ticks_missed),
        ] {
            let _ = writeln!(
                out,
                "weir_schedule_ticks_total{{outcome=\"{outcome}\"}} {}",
                counter.get()
            );
        }
        let _ = writeln!(
            out,
            "# HELP weir_keyed_events_total Events sent to correlation keys, by outcome: forwarded to the execution holding the key, buffered in the key (none held it), returned to the key by a holder that had finished.\n# TYPE weir_keyed_events_total counter"
        );
        for (outcome, counter) in [
            ("forwarded", &self.keyed_events_forwarded),
            ("buffered", &self.keyed_events_buffered),
            ("returned", &self.keyed_events_returned),
        ] {
            let _ = writeln!(
                out,
                "weir_keyed_events_total{{outcome=\"{outcome}\"}} {}",
                counter.get()
            );
        }
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP weir_{name} {help}\n# TYPE weir_{name} counter\nweir_{name} {value}"
            );
        };
        counter(
            "dlq_records_total",
            "Input records sent to the DLQ (in committed transactions).",
            self.dlq_records.get(),
        );
        counter(
            "unfetchable_offsets_skipped_total",
            "Offsets skipped because their batch could not be fetched (decompressed, parsed).",
            self.unfetchable_offsets_skipped.get(),
        );
        counter(
            "executions_created_total",
            "Executions created.",
            self.executions_created.get(),
        );
        counter(
            "executions_finished_total",
            "Executions finished.",
            self.executions_finished.get(),
        );
        counter(
            "events_early_total",
            "Events kept for an execution that did not exist yet, to wait for its submission.",
            self.events_early.get(),
        );
        counter(
            "cancels_early_total",
            "Cancellations kept for an execution that did not exist yet, to wait for its submission.",
            self.cancels_early.get(),
        );
        counter(
            "state_corrupt_dropped_total",
            "Records of weir.state that did not decode, found at a take-over; the first batch copies each to the DLQ and forgets its key (a take-over before it commits finds it again).",
            self.state_corrupt_dropped.get(),
        );
        counter(
            "correlation_ids_cut_total",
            "Event ids a correlation key forgot before their dedup window ended (beyond the ids a key remembers).",
            self.correlation_ids_cut.get(),
        );
        counter(
            "executions_replayed_total",
            "Executions rebuilt from the store by replay.",
            self.executions_replayed.get(),
        );
        counter(
            "execution_starts_deferred_total",
            "Execution starts deferred (no room in the instance pool, a component not deployed yet) and tried again later.",
            self.execution_starts_deferred.get(),
        );
        counter(
            "executions_evicted_for_room_total",
            "Parked runs dropped to make room for a run the instance pool had no room for.",
            self.executions_evicted_for_room.get(),
        );
        counter(
            "admission_pauses_total",
            "Times admission left new submissions in their partitions (runs in flight at the limit).",
            self.admission_pauses.get(),
        );
        counter(
            "inline_activities_answered_total",
            "Activity requests answered inline by a workflow worker, in the transaction that made them.",
            self.inline_activities_answered.get(),
        );
        counter(
            "inline_activities_spilled_total",
            "Inline activity requests sent to their topic instead (not run, past the inline budget, or retried).",
            self.inline_activities_spilled.get(),
        );
        counter(
            "store_retries_total",
            "Store calls retried with backoff during an outage.",
            self.store_retries.get(),
        );
        counter(
            "registry_holds_total",
            "Records held in their partition and read again because the schema registry did not answer.",
            self.registry_holds.get(),
        );
        counter(
            "egress_denied_total",
            "HTTP requests of activities to hosts their component does not allow (allowed_hosts), denied.",
            crate::wasm::egress::denied_total(),
        );
        counter(
            "activity_attempts_total",
            "Activity attempts run.",
            self.activity_attempts.get(),
        );
        counter(
            "activity_retries_scheduled_total",
            "Activity retries scheduled.",
            self.activity_retries_scheduled.get(),
        );
        counter(
            "activity_cancelled_total",
            "Activities cancelled by their parent while unfinished (interrupted, or a retry dropped).",
            self.activity_cancelled.get(),
        );
        counter(
            "activity_unknown_requests_total",
            "Activity requests for a function no component of this worker exports (each waits for a worker that runs it).",
            self.activity_unknown_requests.get(),
        );
        counter(
            "activity_unknown_answered_total",
            "Activity requests answered unknown-function after waiting their grace.",
            self.activity_unknown_answered.get(),
        );
        counter(
            "activity_deadlines_enforced_total",
            "External activity requests answered timed-out at their deadline.",
            self.activity_deadlines_enforced.get(),
        );
        counter(
            "wasm_pool_waits_total",
            "Activity attempts that found the WASM instance pool full and waited for a slot.",
            self.wasm_pool_waits.get(),
        );
        let mut gauge = |name: &str, help: &str, value: i64| {
            let _ = writeln!(
                out,
                "# HELP weir_{name} {help}\n# TYPE weir_{name} gauge\nweir_{name} {value}"
            );
        };
        gauge(
            "executions_cached",
            "Executions held in memory.",
            self.executions_cached.get(),
        );
        gauge(
            "executions_parked",
            "Workflow instances parked in memory.",
            self.executions_parked.get(),
        );
        gauge(
            "submissions_paused",
            "1 while admission leaves new submissions in their partitions (runs in flight at the limit).",
            self.submissions_paused.get(),
        );
        gauge(
            "partitions_owned",
            "Partitions this worker owns.",
            self.partitions_owned.get(),
        );
        gauge(
            "activity_running",
            "Activity attempts running.",
            self.activity_running.get(),
        );
        gauge(
            "activity_waiting",
            "Activity requests waiting (a retry's backoff, a worker that runs the function, an external answer).",
            self.activity_waiting.get(),
        );
        gauge(
            "activity_partitions_paused",
            "Activity request partitions paused: their window of unfinished requests is full.",
            self.activity_partitions_paused.get(),
        );
        for (name, help, timing) in [
            (
                "workflow_process_seconds",
                "Workflow worker: time to run a batch's inputs, before its commit.",
                &self.workflow_process_seconds,
            ),
            (
                "workflow_commit_seconds",
                "Workflow worker: time of a batch's Kafka transaction commit.",
                &self.workflow_commit_seconds,
            ),
        ] {
            let count = timing.count.load(Ordering::Relaxed);
            let sum = timing.micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "# HELP weir_{name} {help}\n# TYPE weir_{name} summary\nweir_{name}_sum {sum}\nweir_{name}_count {count}"
            );
        }
        out
    }

    /// The per-worker batch metrics, one series per worker kind.
    fn render_batches(&self, out: &mut String) {
        type Get = fn(&BatchMetrics) -> u64;
        let kinds = [
            ("workflow", &self.workflow_batches),
            ("activity", &self.activity_batches),
            ("trigger", &self.trigger_batches),
        ];
        let counters: [(&str, &str, Get); 5] = [
            (
                "records_in_total",
                "Input records and timers of committed batches.",
                |b| b.records_in.get(),
            ),
            (
                "records_out_total",
                "Records produced in committed transactions.",
                |b| b.records_out.get(),
            ),
            ("batches_committed_total", "Transactions committed.", |b| {
                b.committed.get()
            }),
            (
                "batches_aborted_total",
                "Transactions aborted (batch reprocessed).",
                |b| b.aborted.get(),
            ),
            (
                "kafka_client_restarts_total",
                "Kafka consumer and transactional producer rebuilt in process after a fatal client error.",
                |b| b.client_restarts.get(),
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP weir_{name} {help}\n# TYPE weir_{name} counter");
            for (worker, batches) in kinds {
                let _ = writeln!(out, "weir_{name}{{worker=\"{worker}\"}} {}", get(batches));
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_batch_seconds Time to process and commit a batch.\n\
             # TYPE weir_batch_seconds summary"
        );
        for (worker, batches) in kinds {
            let count = batches.seconds.count.load(Ordering::Relaxed);
            let sum = batches.seconds.micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "weir_batch_seconds_sum{{worker=\"{worker}\"}} {sum}\n\
                 weir_batch_seconds_count{{worker=\"{worker}\"}} {count}"
            );
        }
    }
}

/// Serves `GET /metrics` on `addr` until the process ends. Returns the bound address (useful
/// with port 0).
pub async fn serve(metrics: Arc<Metrics>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "metrics endpoint listening");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = Arc::clone(&metrics);
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let n = stream.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]);
                let (status, body) = if head.starts_with("GET /metrics") {
                    ("200 OK", metrics.render())
                } else {
                    ("404 Not Found", "try GET /metrics\n".to_owned())
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                if let Err(e) = stream.write_all(response.as_bytes()).await {
                    warn!(error = %e, "metrics response failed");
                }
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_endpoint_serves_current_values() {
        let metrics = Arc::new(Metrics::default());
        metrics.workflow_batches.committed.add(3);
        metrics.activity_batches.seconds.observe(0.5);
        metrics.partitions_owned.set(2);
        metrics.activity_batches.client_restarts.inc();
        metrics.keyed_events_buffered.add(2);
        let addr = serve(Arc::clone(&metrics), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(
            response.contains("weir_batches_committed_total{worker=\"workflow\"} 3"),
            "{response}"
        );
        assert!(
            response.contains("weir_batches_committed_total{worker=\"activity\"} 0"),
            "{response}"
        );
        assert!(
            response.contains("weir_batch_seconds_count{worker=\"activity\"} 1"),
            "{response}"
        );
        assert_eq!(
            response
                .matches("# TYPE weir_batch_seconds summary")
                .count(),
            1,
            "one family, two series: {response}"
        );
        assert!(response.contains("weir_partitions_owned 2"), "{response}");
        assert!(
            response.contains("weir_keyed_events_total{outcome=\"buffered\"} 2"),
            "{response}"
        );
        assert!(
            response.contains("weir_keyed_events_total{outcome=\"returned\"} 0"),
            "{response}"
        );
        assert!(
            response.contains("weir_kafka_client_restarts_total{worker=\"activity\"} 1"),
            "{response}"
        );
    }
}
