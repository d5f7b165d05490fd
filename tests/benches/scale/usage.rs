//! What a scenario cost: CPU between two snapshots, the workers' memory sampled during a run.

use std::time::Instant;

use crate::MEMORY_SAMPLE;
use crate::workers::Setup;

/// CPU seconds and counters at one moment.
pub(crate) struct Snapshot {
    pub(crate) at: Instant,
    pub(crate) worker: f64,
    pub(crate) stack: Option<(f64, f64)>,
    pub(crate) replayed: f64,
}

/// What a scenario cost between two snapshots.
pub(crate) struct Usage {
    pub(crate) seconds: f64,
    pub(crate) worker: f64,
    pub(crate) stack: Option<(f64, f64)>,
    pub(crate) replayed: f64,
}

impl Usage {
    pub(crate) fn between(before: &Snapshot, after: &Snapshot) -> Usage {
        Usage {
            seconds: (after.at - before.at).as_secs_f64(),
            worker: after.worker - before.worker,
            stack: before
                .stack
                .zip(after.stack)
                .map(|((k0, c0), (k1, c1))| (k1 - k0, c1 - c0)),
            replayed: after.replayed - before.replayed,
        }
    }

    /// "worker / kafka / cassandra ms per <unit>".
    pub(crate) fn per(&self, count: usize, unit: &str) -> String {
        let ms = |seconds: f64| seconds * 1000.0 / count.max(1) as f64;
        let (kafka, cassandra) = self
            .stack
            .map_or(("?".to_owned(), "?".to_owned()), |(k, c)| {
                (format!("{:.2}", ms(k)), format!("{:.2}", ms(c)))
            });
        format!(
            "{:.2} / {kafka} / {cassandra} ms per {unit}",
            ms(self.worker)
        )
    }

    /// Cores kept busy by the worker(s), Kafka and Cassandra together.
    /// This usage less what `baseline` (the idle stack with an observer reading) would have
    /// used over the same time: what the work itself cost (at least zero).
    pub(crate) fn net_of(&self, baseline: &Usage) -> Usage {
        let scale = self.seconds / baseline.seconds.max(f64::EPSILON);
        let less = |used: f64, idle: f64| (used - idle * scale).max(0.0);
        Usage {
            seconds: self.seconds,
            worker: less(self.worker, baseline.worker),
            stack: self
                .stack
                .zip(baseline.stack)
                .map(|((k, c), (k0, c0))| (less(k, k0), less(c, c0))),
            replayed: self.replayed,
        }
    }

    /// Worker + Kafka + Cassandra CPU, ms per `count`.
    pub(crate) fn total_ms_per(&self, count: usize) -> Option<f64> {
        let (kafka, cassandra) = self.stack?;
        Some((self.worker + kafka + cassandra) * 1000.0 / count.max(1) as f64)
    }

    pub(crate) fn busy_cores(&self) -> f64 {
        let (kafka, cassandra) = self.stack.unwrap_or_default();
        (self.worker + kafka + cassandra) / self.seconds
    }

    /// "worker / kafka / cassandra % of a core".
    pub(crate) fn percent(&self) -> String {
        let pct = |seconds: f64| seconds / self.seconds * 100.0;
        let (kafka, cassandra) = self
            .stack
            .map_or(("?".to_owned(), "?".to_owned()), |(k, c)| {
                (format!("{:.1}", pct(k)), format!("{:.1}", pct(c)))
            });
        format!(
            "{:.1} / {kafka} / {cassandra} % of a core",
            pct(self.worker)
        )
    }
}

/// The workers' memory during a run, sampled.
pub(crate) struct Memory {
    pub(crate) before: u64,
    pub(crate) peak_parked: f64,
    pub(crate) rss_at_peak: u64,
    pub(crate) sampled: Instant,
}

impl Memory {
    pub(crate) fn start(setup: &Setup) -> Memory {
        Memory {
            before: setup.rss(),
            peak_parked: 0.0,
            rss_at_peak: 0,
            sampled: Instant::now(),
        }
    }

    pub(crate) fn sample(&mut self, setup: &Setup) {
        if self.sampled.elapsed() < MEMORY_SAMPLE {
            return;
        }
        self.sampled = Instant::now();
        let parked = setup.metric("weir_executions_parked");
        if parked > self.peak_parked {
            self.peak_parked = parked;
            self.rss_at_peak = setup.rss();
        }
    }

    /// "peak N parked, K KiB each".
    pub(crate) fn per_parked(&self) -> String {
        if self.peak_parked < 1.0 {
            return "no execution seen parked".to_owned();
        }
        let grown = self.rss_at_peak.saturating_sub(self.before) as f64;
        format!(
            "peak {:.0} parked at {}: {:.0} KiB per parked execution",
            self.peak_parked,
            mib(self.rss_at_peak),
            grown / self.peak_parked / 1024.0
        )
    }
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}
