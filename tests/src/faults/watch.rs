//! A live `read_committed` reader of `weir.results` that stamps when each execution's first
//! result became visible: the progress the fault driver waits on, and the timeline the
//! stalls are measured on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use weir::codec::{Codec, ExecutionFinished, RecordPosition};
use weir::model::ExecutionId;

use crate::deployment::reader;

#[derive(Default)]
pub struct Progress {
    /// When each execution's first result was seen.
    pub first_seen: HashMap<ExecutionId, Instant>,
    /// The same instants, in the order they were seen (non-decreasing).
    pub times: Vec<Instant>,
    pub records: u64,
    pub undecodable: u64,
}

pub struct ResultsWatcher {
    stop: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
    handle: Option<JoinHandle<()>>,
}

impl ResultsWatcher {
    pub fn start(topic: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Progress::default()));
        let consumer = reader(&topic, false);
        let handle = {
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::spawn(move || {
                let codec = Codec::single_object();
                while !stop.load(Ordering::Relaxed) {
                    // Errors (a broker away) are the client's to recover from: poll again.
                    let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else {
                        continue;
                    };
                    let now = Instant::now();
                    let position =
                        RecordPosition::at(&topic, message.partition(), message.offset());
                    let decoded = codec.decode::<ExecutionFinished>(
                        message.payload().unwrap_or_default(),
                        &position,
                    );
                    let mut progress = progress.lock().expect("progress");
                    progress.records += 1;
                    match decoded {
                        Ok(finished) => {
                            let progress = &mut *progress;
                            if let std::collections::hash_map::Entry::Vacant(entry) =
                                progress.first_seen.entry(finished.execution_id)
                            {
                                entry.insert(now);
                                progress.times.push(now);
                            }
                        }
                        Err(_) => progress.undecodable += 1,
                    }
                }
            })
        };
        ResultsWatcher {
            stop,
            progress,
            handle: Some(handle),
        }
    }

    pub fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().expect("progress")
    }

    /// Executions with a result so far.
    pub fn finished(&self) -> usize {
        self.progress().first_seen.len()
    }

    /// The instant of the last new result, if any.
    pub fn last_result(&self) -> Option<Instant> {
        self.progress().times.last().copied()
    }

    pub fn shared(&self) -> Arc<Mutex<Progress>> {
        self.progress.clone()
    }
}

impl Drop for ResultsWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The longest time without a new result in `[from, until]`, counting the time from `from`
/// to the first result in it and from the last one to `until`; and the time to the first.
pub fn longest_gap(
    times: &[Instant],
    from: Instant,
    until: Instant,
) -> (Duration, Option<Duration>) {
    let inside: Vec<Instant> = times
        .iter()
        .copied()
        .filter(|t| *t > from && *t <= until)
        .collect();
    let first = inside.first().map(|t| *t - from);
    let mut previous = from;
    let mut longest = Duration::ZERO;
    for t in inside.iter().copied().chain(std::iter::once(until)) {
        longest = longest.max(t.saturating_duration_since(previous));
        previous = t;
    }
    (longest, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_counts_the_edges_of_the_window() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let times = [at(100), at(1_100), at(1_300), at(4_300), at(9_000)];
        // From the fault at 1 s: 0.1 s to the first result, then 0.2, 3.0, then 0.7 to 5 s.
        assert_eq!(
            longest_gap(&times, at(1_000), at(5_000)),
            (Duration::from_secs(3), Some(Duration::from_millis(100)))
        );
        // No result at all inside: the whole window.
        assert_eq!(
            longest_gap(&times, at(5_000), at(8_000)),
            (Duration::from_secs(3), None)
        );
        // The trailing stretch to the end of the window counts.
        assert_eq!(
            longest_gap(&times, at(4_000), at(8_800)),
            (
                Duration::from_millis(4_500),
                Some(Duration::from_millis(300))
            )
        );
    }
}
