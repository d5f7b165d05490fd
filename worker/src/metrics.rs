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
use std::time::{Duration, Instant};

use crate::codec::DlqReason;

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

/// How often [`PartitionProgress`] is sampled at most (each sample asks the consumer for its
/// positions and cached high watermarks: cheap, local, but not for every poll).
pub const PROGRESS_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// What a worker's consumer knows of one partition it owns when it is sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSample {
    pub topic: String,
    pub partition: i32,
    /// The next offset the worker reads (librdkafka's application position, which moves past
    /// transaction markers and aborted records); `None` right after an assignment or a seek,
    /// until the first record or marker is taken.
    pub position: Option<i64>,
    /// The partition's high watermark as last fetched; `None` before the first fetch.
    pub end: Option<i64>,
}

/// One owned partition as last sampled.
#[derive(Debug, Clone, Copy)]
struct PartitionState {
    position: i64,
    end: i64,
    /// When its position last moved forward or it had nothing to read.
    advanced_at: Instant,
}

impl PartitionState {
    fn lag(&self) -> i64 {
        (self.end - self.position).max(0)
    }

    /// How long it has had records to read without its position moving: 0 when caught up.
    fn stalled(&self, now: Instant) -> Duration {
        if self.lag() > 0 {
            now.saturating_duration_since(self.advanced_at)
        } else {
            Duration::ZERO
        }
    }
}

#[derive(Debug, Default)]
struct ProgressState {
    sampled_at: Option<Instant>,
    partitions: BTreeMap<(String, i32), PartitionState>,
}

/// The consumer lag of a worker's owned input partitions, and how long each has been stuck:
/// `weir_consumer_lag{worker,topic,partition}` (records readable past the worker's position)
/// and `weir_partition_stall_seconds{…}` (how long a partition with records to read has not
/// moved), with the per-worker aggregates `weir_consumer_lag_records{worker}` and
/// `weir_partition_stall_seconds_max{worker}`, rendered from the start.
///
/// Sampled by the worker's loop ([`crate::kafka::lag`]) from what its consumer has locally.
/// A stall is computed when rendered, from the instant the partition last moved, so it keeps
/// growing while the loop itself is blocked (a batch that never ends, a store outage ridden
/// out) as long as the last sample saw records to read. A partition whose position is not
/// known yet (assigned or sought, nothing taken since) keeps the position of its last
/// sample, or at its first sample counts as caught up with the end it has.
#[derive(Debug, Default)]
pub struct PartitionProgress(Mutex<ProgressState>);

impl PartitionProgress {
    /// Whether a sample is due at `now` (none taken within [`PROGRESS_SAMPLE_INTERVAL`]).
    pub fn due(&self, now: Instant) -> bool {
        self.state()
            .sampled_at
            .is_none_or(|at| now.saturating_duration_since(at) >= PROGRESS_SAMPLE_INTERVAL)
    }

    /// Replaces the owned partitions with `samples` taken at `now`: a partition not among
    /// them is no longer owned and its series go.
    pub fn record(&self, now: Instant, samples: impl IntoIterator<Item = PartitionSample>) {
        let mut state = self.state();
        let previous = std::mem::take(&mut state.partitions);
        for sample in samples {
            let key = (sample.topic, sample.partition);
            let before = previous.get(&key);
            let Some(end) = sample.end.or(before.map(|b| b.end)) else {
                continue; // nothing fetched yet: nothing to say
            };
            let position = sample
                .position
                .or(before.map(|b| b.position))
                .unwrap_or(end);
            let moved = before.is_none_or(|b| position > b.position);
            let mut current = PartitionState {
                position,
                end,
                advanced_at: now,
            };
            if !moved
                && current.lag() > 0
                && let Some(before) = before
            {
                current.advanced_at = before.advanced_at;
            }
            state.partitions.insert(key, current);
        }
        state.sampled_at = Some(now);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ProgressState> {
        // A panic while holding it leaves nothing half-written that matters to a metric.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    /// 1 while admission keeps new submissions in their partitions (as many runs in flight
    /// as the pool may park), 0 while they are read.
    pub submissions_paused: Gauge,
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
        self.render_progress(&mut out, Instant::now());
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

    /// The consumer lag and stalls of each worker kind: per owned partition, and per worker
    /// (always there).
    fn render_progress(&self, out: &mut String, now: Instant) {
        let kinds = [
            ("workflow", &self.workflow_batches.progress),
            ("activity", &self.activity_batches.progress),
            ("trigger", &self.trigger_batches.progress),
        ];
        let states: Vec<_> = kinds
            .iter()
            .map(|(worker, progress)| (*worker, progress.state().partitions.clone()))
            .collect();
        let _ = writeln!(
            out,
            "# HELP weir_consumer_lag Records readable on an owned input partition past the worker's position (its high watermark less its position).\n# TYPE weir_consumer_lag gauge"
        );
        for (worker, partitions) in &states {
            for ((topic, partition), state) in partitions {
                let _ = writeln!(
                    out,
                    "weir_consumer_lag{{worker=\"{worker}\",topic=\"{topic}\",partition=\"{partition}\"}} {}",
                    state.lag()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_partition_stall_seconds How long an owned input partition has had records to read without the worker's position moving (0 when caught up).\n# TYPE weir_partition_stall_seconds gauge"
        );
        for (worker, partitions) in &states {
            for ((topic, partition), state) in partitions {
                let _ = writeln!(
                    out,
                    "weir_partition_stall_seconds{{worker=\"{worker}\",topic=\"{topic}\",partition=\"{partition}\"}} {}",
                    state.stalled(now).as_secs_f64()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_consumer_lag_records Records readable past the worker's position, summed over the input partitions it owns.\n# TYPE weir_consumer_lag_records gauge"
        );
        for (worker, partitions) in &states {
            let sum: i64 = partitions.values().map(PartitionState::lag).sum();
            let _ = writeln!(
                out,
                "weir_consumer_lag_records{{worker=\"{worker}\"}} {sum}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP weir_partition_stall_seconds_max The longest stall among the input partitions the worker owns (0 when none has records it does not read).\n# TYPE weir_partition_stall_seconds_max gauge"
        );
        for (worker, partitions) in &states {
            let max = partitions
                .values()
                .map(|state| state.stalled(now))
                .max()
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "weir_partition_stall_seconds_max{{worker=\"{worker}\"}} {}",
                max.as_secs_f64()
            );
        }
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

    /// `weir_activity_rate_limited_total` is there from the start, with a series per topic
    /// registered (at 0) or counted.
    #[test]
    fn the_rate_limited_counter_has_a_series_per_limited_topic() {
        let metrics = Metrics::default();
        let rendered = metrics.render();
        assert!(
            rendered.contains("# TYPE weir_activity_rate_limited_total counter"),
            "{rendered}"
        );
        metrics.activity_rate_limited.register("weir.activity.a");
        metrics.activity_rate_limited.add("weir.activity.b", 2);
        metrics.activity_rate_limited.add("weir.activity.b", 1);
        metrics.activity_rate_held.set(4);
        let rendered = metrics.render();
        for (series, value) in [
            (
                "weir_activity_rate_limited_total{topic=\"weir.activity.a\"}",
                "0",
            ),
            (
                "weir_activity_rate_limited_total{topic=\"weir.activity.b\"}",
                "3",
            ),
            ("weir_activity_rate_held", "4"),
        ] {
            assert_eq!(line(&rendered, series), Some(value), "{rendered}");
        }
    }

    fn sample(partition: i32, position: Option<i64>, end: Option<i64>) -> PartitionSample {
        PartitionSample {
            topic: "weir.submissions".to_owned(),
            partition,
            position,
            end,
        }
    }

    fn line<'a>(rendered: &'a str, series: &str) -> Option<&'a str> {
        rendered
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn every_family_an_alert_names_is_there_before_anything_happened() {
        let rendered = Metrics::default().render();
        for series in [
            "weir_consumer_lag_records{worker=\"workflow\"}",
            "weir_partition_stall_seconds_max{worker=\"trigger\"}",
            "weir_dlq_records_by_reason_total{reason=\"misrouted\"}",
            "weir_store_retries_total{op=\"read\"}",
            "weir_store_retries_total{op=\"write\"}",
            "weir_execution_starts_deferred_total",
        ] {
            assert_eq!(line(&rendered, series), Some("0"), "{series} in {rendered}");
        }
        assert!(!rendered.contains("weir_consumer_lag{"), "{rendered}");
    }

    #[test]
    fn dead_letters_are_counted_by_the_reason_in_their_header() {
        let metrics = Metrics::default();
        metrics.dead_letter(b"misrouted");
        metrics.dead_letter(b"misrouted");
        metrics.dead_letter(b"no-such-reason");
        let rendered = metrics.render();
        assert_eq!(line(&rendered, "weir_dlq_records_total"), Some("3"));
        let by = |reason: &str| {
            line(
                &rendered,
                &format!("weir_dlq_records_by_reason_total{{reason=\"{reason}\"}}"),
            )
        };
        assert_eq!(by("misrouted"), Some("2"));
        assert_eq!(by("other"), Some("1"));
        assert_eq!(by("conflict"), Some("0"));
    }

    #[test]
    fn a_partition_with_records_to_read_and_no_progress_stalls() {
        let progress = PartitionProgress::default();
        let start = Instant::now();
        progress.record(start, [sample(0, Some(5), Some(10)), sample(1, None, None)]);
        let (lag, stalled) = {
            let state = progress.state();
            assert_eq!(state.partitions.len(), 1, "nothing fetched of 1: not shown");
            let p0 = state.partitions[&("weir.submissions".to_owned(), 0)];
            (p0.lag(), p0.stalled(start + Duration::from_secs(7)))
        };
        assert_eq!(lag, 5);
        assert_eq!(
            stalled,
            Duration::from_secs(7),
            "no progress since the first sample"
        );
        // Same position, more records: the stall goes on.
        let later = start + Duration::from_secs(10);
        progress.record(later, [sample(0, Some(5), Some(12))]);
        let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
        assert_eq!(p0.stalled(later), Duration::from_secs(10));
        // Moving forward ends it, even with records still to read.
        let moved = later + Duration::from_secs(1);
        progress.record(moved, [sample(0, Some(6), Some(12))]);
        let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
        assert_eq!((p0.lag(), p0.stalled(moved)), (6, Duration::ZERO));
    }

    #[test]
    fn an_unknown_position_keeps_the_last_one_or_counts_as_caught_up() {
        let progress = PartitionProgress::default();
        let now = Instant::now();
        // First sight, nothing taken yet: caught up with the end it has.
        progress.record(now, [sample(0, None, Some(10))]);
        let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
        assert_eq!(p0.lag(), 0);
        // Then records arrive and are not read (a sought or paused partition): they lag.
        progress.record(now, [sample(0, None, Some(14))]);
        let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
        assert_eq!(p0.lag(), 4);
        // A partition no longer assigned goes.
        progress.record(now, [sample(3, Some(0), Some(0))]);
        let state = progress.state();
        assert_eq!(
            state.partitions.keys().collect::<Vec<_>>(),
            [&("weir.submissions".to_owned(), 3)]
        );
    }

    #[test]
    fn per_partition_series_and_their_aggregates_are_rendered() {
        let metrics = Metrics::default();
        let now = Instant::now();
        metrics.workflow_batches.progress.record(
            now,
            [sample(0, Some(1), Some(4)), sample(1, Some(2), Some(4))],
        );
        let rendered = metrics.render();
        let series =
            "weir_consumer_lag{worker=\"workflow\",topic=\"weir.submissions\",partition=\"0\"}";
        assert_eq!(line(&rendered, series), Some("3"), "{rendered}");
        assert_eq!(
            line(&rendered, "weir_consumer_lag_records{worker=\"workflow\"}"),
            Some("5")
        );
        assert_eq!(
            rendered.matches("# TYPE weir_consumer_lag gauge").count(),
            1,
            "{rendered}"
        );
        assert!(
            rendered.contains(
                "weir_partition_stall_seconds{worker=\"workflow\",topic=\"weir.submissions\",partition=\"1\"}"
            ),
            "{rendered}"
        );
    }
}
