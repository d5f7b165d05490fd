//! Metrics a user can scrape: counters and gauges of the worker, rendered in the Prometheus
//! text format and served at `GET /metrics` by [`serve`]. Hand-rolled (a few atomics) rather
//! than a metrics framework: the set is small and fixed.
//!
//! Every family is rendered from the start of the process, each series at 0 before anything
//! happened (one series per worker kind, DLQ reason, store operation), so that a dashboard or
//! an alert that names a metric never finds it absent (`docker/monitoring/`, checked against a
//! running worker by `tests/tests/dashboards.rs`). The one exception are the per-partition
//! series of [`PartitionProgress`], which exist while their partition is owned; each has a
//! per-worker aggregate that is always there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::codec::DlqReason;

mod progress;
pub use progress::{PROGRESS_SAMPLE_INTERVAL, PartitionProgress, PartitionSample};

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

/// Counters by topic, each series there from when its topic is [registered](Self::register)
/// (at 0).
#[derive(Default, Debug)]
pub struct TopicCounters(Mutex<BTreeMap<String, u64>>);

impl TopicCounters {
    /// The series of `topic`, at 0 if it was not there.
    pub fn register(&self, topic: &str) {
        self.lock().entry(topic.to_owned()).or_default();
    }

    pub fn add(&self, topic: &str, n: u64) {
        *self.lock().entry(topic.to_owned()).or_default() += n;
    }

    /// Every series, by topic.
    pub fn get(&self) -> BTreeMap<String, u64> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// The lag and stalls of the partitions its consumer owns.
    pub progress: PartitionProgress,
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
    /// The same, by reason (the index of its reason in [`DlqReason::ALL`]):
    /// `weir_dlq_records_by_reason_total{reason}`.
    pub dlq_by_reason: [Counter; DlqReason::ALL.len()],
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
    /// Times admission closed: no new execution started (runs in flight at the limit).
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
    /// Executions paused and resumed (`weir pause`, `weir resume`, a cancellation of a paused
    /// execution): `weir_executions_paused_total`, `weir_executions_resumed_total`.
    pub executions_paused: Counter,
    pub executions_resumed: Counter,
    /// Executions reset (`weir reset`): new executions started from their histories,
    /// `weir_executions_reset_total`.
    pub executions_reset: Counter,
    /// Places in concurrency slots granted and refused (a full queue):
    /// `weir_concurrency_slots_granted_total`, `weir_concurrency_slots_refused_total`.
    pub slots_granted: Counter,
    pub slots_refused: Counter,
    /// Requests batch operations sent (`weir batch`): `weir_batch_requests_total`.
    pub batch_requests: Counter,
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
    /// Executions whose start is deferred, waiting for their `retry` timer.
    pub executions_start_deferred: Gauge,
    /// 1 while admission starts no new execution (as many runs in flight as the pool may
    /// park), 0 while it does.
    pub submissions_paused: Gauge,
    /// Submissions read ahead and held for their turn by tenant (`weir_submissions_held`),
    /// and their bytes (`weir_submissions_held_bytes`).
    pub submissions_held: Gauge,
    pub submissions_held_bytes: Gauge,
    pub partitions_owned: Gauge,
    pub activity_attempts: Counter,
    /// Store calls retried during an outage: the workflow worker's reads (loads, checkpoints,
    /// timers) and the materialiser's writes: `weir_store_retries_total{op}`.
    pub store_read_retries: Counter,
    pub store_write_retries: Counter,
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
    /// Activity worker: requests parked when their attempts were exhausted (their policy's
    /// `on_exhausted = "pause"`: their parents asked to pause), and parked requests given a
    /// fresh budget by their parent's resume; parked ones now.
    pub activity_parked: Counter,
    pub activity_unparked: Counter,
    pub activity_parked_now: Gauge,
    /// Activity worker: requests for a function no component of the worker exports (each
    /// waits for a worker that runs it).
    pub activity_unknown_requests: Counter,
    /// Activity worker: of those, answered with `unknown-function` after the grace.
    pub activity_unknown_answered: Counter,
    /// Activity worker: external requests answered `timed-out` at their deadline.
    pub activity_deadlines_enforced: Counter,
    /// Activity worker: attempts a route's rate limit delayed (each once), by request topic:
    /// `weir_activity_rate_limited_total{topic}`, a series per rate-limited topic from the
    /// worker's start.
    pub activity_rate_limited: TopicCounters,
    /// Activity worker: ready attempts waiting for a token of their route's rate limit.
    pub activity_rate_held: Gauge,
    /// Activity attempts that found the WASM instance pool full and waited for a slot.
    pub wasm_pool_waits: Counter,
}

impl Metrics {
    /// Counts one committed dead letter whose `weir.dlq.reason` header is `reason` (a header
    /// value no reason spells counts as `other`).
    pub fn dead_letter(&self, reason: &[u8]) {
        self.dlq_records.inc();
        let index = DlqReason::ALL
            .iter()
            .position(|r| r.header_value().as_bytes() == reason)
            .or_else(|| DlqReason::ALL.iter().position(|r| *r == DlqReason::Other))
            .unwrap_or(0);
        self.dlq_by_reason[index].inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_batches(&mut out);
        progress::render(
            &mut out,
            &[
                ("workflow", &self.workflow_batches.progress),
                ("activity", &self.activity_batches.progress),
                ("trigger", &self.trigger_batches.progress),
            ],
            Instant::now(),
        );
        let _ = writeln!(
            out,
            "# HELP weir_dlq_records_by_reason_total Input records sent to the DLQ (in committed transactions), by the reason in their weir.dlq.reason header.\n# TYPE weir_dlq_records_by_reason_total counter"
        );
        for (reason, counter) in DlqReason::ALL.iter().zip(&self.dlq_by_reason) {
            let _ = writeln!(
                out,
                "weir_dlq_records_by_reason_total{{reason=\"{}\"}} {}",
                reason.header_value(),
                counter.get()
            );
        }
        let _ = writeln!(
            out,
            "# HELP weir_store_retries_total Store calls retried with backoff during an outage, by operation: read (the workflow worker's loads, checkpoints, timers), write (the materialiser's).\n# TYPE weir_store_retries_total counter"
        );
        for (op, counter) in [
            ("read", &self.store_read_retries),
            ("write", &self.store_write_retries),
        ] {
            let _ = writeln!(
                out,
                "weir_store_retries_total{{op=\"{op}\"}} {}",
                counter.get()
            );
        }
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
            "# HELP weir_activity_rate_limited_total Activity attempts delayed by their route's rate limit (each attempt once, when it found the worker's bucket of its topic empty), by request topic.\n# TYPE weir_activity_rate_limited_total counter"
        );
        for (topic, n) in self.activity_rate_limited.get() {
            let _ = writeln!(
                out,
                "weir_activity_rate_limited_total{{topic=\"{topic}\"}} {n}"
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
            "executions_paused_total",
            "Executions paused (weir pause): they run no code until resumed.",
            self.executions_paused.get(),
        );
        counter(
            "executions_resumed_total",
            "Executions resumed (weir resume, or a cancellation of a paused execution).",
            self.executions_resumed.get(),
        );
        counter(
            "executions_reset_total",
            "Executions reset (weir reset): a new execution started from each one's history.",
            self.executions_reset.get(),
        );
        counter(
            "concurrency_slots_granted_total",
            "Places in concurrency slots (keys, functions' max_running) granted to executions by the slots' owners.",
            self.slots_granted.get(),
        );
        counter(
            "concurrency_slots_refused_total",
            "Executions refused by a concurrency slot whose queue was full (they finish conflict).",
            self.slots_refused.get(),
        );
        counter(
            "batch_requests_total",
            "Requests batch operations sent (weir batch): one per execution acted on.",
            self.batch_requests.get(),
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
            "Times admission closed: no new execution started (runs in flight at the limit); submissions are read ahead and held meanwhile.",
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
            "activity_parked_total",
            "Activity requests parked when their attempts were exhausted (on_exhausted = \"pause\"): their parents asked to pause.",
            self.activity_parked.get(),
        );
        counter(
            "activity_unparked_total",
            "Parked activity requests given a fresh budget of attempts by their parent's resume.",
            self.activity_unparked.get(),
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
            "executions_start_deferred",
            "Executions whose start is deferred (a full instance pool, a component not deployed yet), waiting to be tried again.",
            self.executions_start_deferred.get(),
        );
        gauge(
            "submissions_paused",
            "1 while admission starts no new execution (runs in flight at the limit).",
            self.submissions_paused.get(),
        );
        gauge(
            "submissions_held",
            "Submissions read ahead and held for their turn (taken round-robin by tenant).",
            self.submissions_held.get(),
        );
        gauge(
            "submissions_held_bytes",
            "Bytes of the submissions read ahead and held for their turn.",
            self.submissions_held_bytes.get(),
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
            "activity_rate_held",
            "Activity attempts ready to start that wait for a token of their route's rate limit.",
            self.activity_rate_held.get(),
        );
        gauge(
            "activity_parked",
            "Activity requests parked now (attempts exhausted, their parents paused until resumed).",
            self.activity_parked_now.get(),
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
            (
                "batches_committed_total",
                "Batches committed (a transaction; the activity worker's: answers acknowledged, then progress committed).",
                |b| b.committed.get(),
            ),
            (
                "batches_aborted_total",
                "Batches aborted or failed to commit (reprocessed).",
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
mod tests;
