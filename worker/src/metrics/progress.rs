//! The consumer lag of a worker's owned input partitions and how long each has been stuck
//! ([`PartitionProgress`]), sampled by the worker's loop and rendered with the other metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
pub(super) struct PartitionState {
    pub(super) position: i64,
    pub(super) end: i64,
    /// When its position last moved forward or it had nothing to read.
    pub(super) advanced_at: Instant,
}

impl PartitionState {
    pub(super) fn lag(&self) -> i64 {
        (self.end - self.position).max(0)
    }

    /// How long it has had records to read without its position moving: 0 when caught up.
    pub(super) fn stalled(&self, now: Instant) -> Duration {
        if self.lag() > 0 {
            now.saturating_duration_since(self.advanced_at)
        } else {
            Duration::ZERO
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct ProgressState {
    pub(super) sampled_at: Option<Instant>,
    pub(super) partitions: BTreeMap<(String, i32), PartitionState>,
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

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, ProgressState> {
        // A panic while holding it leaves nothing half-written that matters to a metric.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The consumer lag and stalls of each worker kind: per owned partition, and per worker
/// (always there).
pub(super) fn render(out: &mut String, kinds: &[(&str, &PartitionProgress)], now: Instant) {
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
