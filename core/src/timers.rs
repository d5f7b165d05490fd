//! The timers a worker holds in memory for its partitions, and when it reads more from the
//! store.
//!
//! Timers live in the store's timer table (bucketed per partition and minute). A worker keeps
//! those due within a horizon in memory, fires the due ones inside its batches, and reads the
//! next stretch from the store as the horizon moves ([`TimerIndex::refills`]). A per-partition
//! watermark — every timer due before it has fired — tells a new owner where to start reading
//! ([`TimerIndex::watermarks`]). Pure: the driver passes `now` and does the reading.
//!
//! A refill reads the store, which lacks the timer changes still in the materialiser's queue:
//! the driver waits until the store has every change the index does not hold
//! ([`TimerIndex::committed`] says which) before it reads. So that a store outage does not
//! stop the hot path, a refill is [urgent](Refill::urgent) only once less than a quarter of
//! the horizon is loaded ahead of the clock; before that the driver may postpone it while the
//! materialiser is behind (every timer due before the loaded window's end is in the index, so
//! nothing due is missed and the watermarks, never past `now`, never pass a timer not
//! loaded).
//!
//! Behind its watermark an owner drops the timer buckets it has passed whole
//! ([`TimerIndex::passed_buckets`]): a former owner's queued timer write that lands after the
//! new owner loaded from the watermark (a fenced zombie's `retry` timer) would otherwise stay
//! in the store forever, never loaded nor deleted; the drop's later stamp shadows it.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use crate::processor::Effect;
use crate::rows::{DroppedTimerBucket, TIMER_BUCKET_SECONDS, TimerKey, TimerRow, timer_bucket};

/// A read of the timer table the driver must make: timers of `partition` due in
/// `[from, until)`; `from: None` means "from the partition's stored watermark" (or
/// [`TimerIndex::default_start`] without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refill {
    pub partition: i32,
    pub from: Option<DateTime<Utc>>,
    pub until: DateTime<Utc>,
    /// Nothing is loaded yet, or less than a quarter of the horizon is loaded ahead of `now`:
    /// the read must not wait any longer (a later one could let a timer be due before it is
    /// loaded).
    pub urgent: bool,
}

/// Where `bucket` starts.
fn bucket_start(bucket: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(bucket * TIMER_BUCKET_SECONDS, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A partition is read again when less than this of its horizon is left.
const REFILL_AHEAD: Duration = Duration::seconds(5);

/// A watermark to write ([`TimerIndex::watermarks`]) and the buckets dropped with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkWrite {
    pub partition: i32,
    pub fired_before: DateTime<Utc>,
    pub dropped: Vec<DroppedTimerBucket>,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct TimerIndex {
    horizon: Duration,
    /// Due-time ordered timers of owned partitions within the horizon.
    timers: BTreeMap<(DateTime<Utc>, String), TimerRow>,
    /// Per owned partition: timers up to here are loaded into `timers`.
    loaded_until: BTreeMap<i32, DateTime<Utc>>,
    /// Per owned partition: the watermark last handed out to be written.
    watermarks_written: BTreeMap<i32, DateTime<Utc>>,
    /// Per owned partition: the first bucket not dropped yet ([`TimerIndex::passed_buckets`]).
    dropped_until: BTreeMap<i32, i64>,
}

/// Buckets dropped with one watermark at most: an owner that loaded from a watermark days
/// old drops the buckets since over its next writes, not in one job.
pub const MAX_DROPPED_BUCKETS_PER_WRITE: i64 = 60;

/// Buckets before the one it loaded from that a new owner drops again: what its predecessor
/// left undropped behind its last watermark (the minute of slack, a backlog it had not
/// finished), where a zombie's late write may land. Dropping a bucket twice is harmless.
pub const DROP_LOOKBACK_BUCKETS: i64 = 10;

impl TimerIndex {
    pub fn new(horizon: std::time::Duration) -> Self {
        TimerIndex {
            horizon: Duration::from_std(horizon).unwrap_or(Duration::seconds(60)),
            timers: BTreeMap::new(),
            loaded_until: BTreeMap::new(),
            watermarks_written: BTreeMap::new(),
            dropped_until: BTreeMap::new(),
        }
    }

    /// Forgets everything (on a new assignment).
    pub fn clear(&mut self) {
        self.timers.clear();
        self.loaded_until.clear();
        self.watermarks_written.clear();
        self.dropped_until.clear();
    }

    /// Where a partition without a stored watermark starts reading.
    pub fn default_start(now: DateTime<Utc>) -> DateTime<Utc> {
        now - Duration::days(1)
    }

    /// The reads to make now for `owned` partitions: a partition is read again when less
    /// than five seconds of its horizon are left, and urgently when less than a quarter of
    /// it is (see [`Refill::urgent`]).
    pub fn refills(&self, owned: &BTreeSet<i32>, now: DateTime<Utc>) -> Vec<Refill> {
        let until = now + self.horizon;
        let urgent_before = now + self.horizon / 4;
        owned
            .iter()
            .filter_map(|&partition| match self.loaded_until.get(&partition) {
                Some(loaded) if *loaded >= until - REFILL_AHEAD => None,
                Some(loaded) => Some(Refill {
                    partition,
                    from: Some(*loaded),
                    until,
                    urgent: *loaded < urgent_before,
                }),
                None => Some(Refill {
                    partition,
                    from: None,
                    until,
                    urgent: true,
                }),
            })
            .collect()
    }

    /// The result of a [`Refill`] (the first one's `from`, the watermark this owner loaded
    /// from, is where its bucket drops start).
    pub fn loaded(&mut self, refill: &Refill, timers: Vec<TimerRow>) {
        if let Some(from) = refill.from {
            self.dropped_until
                .entry(refill.partition)
                .or_insert_with(|| timer_bucket(from) - DROP_LOOKBACK_BUCKETS);
        }
        for timer in timers {
            self.timers
                .insert((timer.due_at, timer.timer_id.clone()), timer);
        }
        self.loaded_until.insert(refill.partition, refill.until);
    }

    /// Holds `timers` in memory only (the store never sees them), each unless a timer of the
    /// same id is held already; returns how many were added. The driver's reminders at a
    /// take-over: firing one deletes a row that was never written, which is harmless.
    pub fn remind(&mut self, timers: impl IntoIterator<Item = TimerRow>) -> usize {
        let held: std::collections::HashSet<String> =
            self.timers.values().map(|t| t.timer_id.clone()).collect();
        let mut added = 0;
        for timer in timers {
            if !held.contains(&timer.timer_id) {
                self.timers
                    .insert((timer.due_at, timer.timer_id.clone()), timer);
                added += 1;
            }
        }
        added
    }

    /// Removes and returns up to `max` timers due at `now`.
    pub fn take_due(&mut self, now: DateTime<Utc>, max: usize) -> Vec<TimerRow> {
        let mut due = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now || due.len() >= max {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// After a commit: the timers the batch put (within the horizon, of owned partitions)
    /// join the index, those it deleted leave it. `true` if the batch changed a timer the
    /// index does not account for — a timer put beyond the horizon (or of a partition not
    /// owned), a timer removed at or beyond its partition's loaded window — which a later
    /// refill reads from the store: the store must have the change by then.
    pub fn committed(
        &mut self,
        effects: &[Effect],
        owned: &BTreeSet<i32>,
        now: DateTime<Utc>,
    ) -> bool {
        let horizon = now + self.horizon;
        let mut outside = false;
        for effect in effects {
            match effect {
                Effect::PutTimer(timer)
                    if timer.due_at <= horizon && owned.contains(&timer.kafka_partition) =>
                {
                    self.timers
                        .insert((timer.due_at, timer.timer_id.clone()), timer.clone());
                }
                Effect::PutTimer(_) => outside = true,
                Effect::DeleteTimer(TimerKey {
                    kafka_partition,
                    due_at,
                    timer_id,
                }) => {
                    self.timers.remove(&(*due_at, timer_id.clone()));
                    let loaded = self.loaded_until.get(kafka_partition);
                    outside |= loaded.is_none_or(|loaded| *due_at >= *loaded);
                }
                _ => {}
            }
        }
        outside
    }

    /// The watermarks to write: per owned partition, the earliest timer still pending (or
    /// `now`), when it moved by `min_step` or more since the last one written (or was never
    /// written by this owner); each with the buckets it lets this owner drop.
    ///
    /// A watermark never runs ahead of the drops: while they lag (an owner that loaded from a
    /// watermark days old drops [`MAX_DROPPED_BUCKETS_PER_WRITE`] per write), it is held at
    /// the bucket after the last one dropped. The next owner then finds every bucket more
    /// than one before the stored watermark dropped, which its [`DROP_LOOKBACK_BUCKETS`]
    /// cover with room to spare: a lagging owner that loses the partition leaves no bucket
    /// that nobody drops.
    pub fn watermarks(
        &mut self,
        owned: &BTreeSet<i32>,
        now: DateTime<Utc>,
        min_step: Duration,
    ) -> Vec<WatermarkWrite> {
        let mut out = Vec::new();
        for &partition in owned {
            let earliest_pending = self
                .timers
                .values()
                .filter(|t| t.kafka_partition == partition)
                .map(|t| t.due_at)
                .min()
                .unwrap_or(now)
                .min(now);
            let written = self.watermarks_written.get(&partition).copied();
            if written.is_some_and(|w| (earliest_pending - w).abs() < min_step) {
                continue;
            }
            let (dropped, held_at) = self.passed_buckets(partition, earliest_pending);
            let fired_before = held_at.map_or(earliest_pending, |h| h.min(earliest_pending));
            self.watermarks_written.insert(partition, fired_before);
            out.push(WatermarkWrite {
                partition,
                fired_before,
                dropped,
            });
        }
        out
    }

    /// The buckets of `partition` that the watermark `fired_before` has passed whole and
    /// that are not dropped yet, at most [`MAX_DROPPED_BUCKETS_PER_WRITE`] of them, oldest
    /// first; and, if that leaves some undropped, where the watermark must be held. From
    /// [`DROP_LOOKBACK_BUCKETS`] before the bucket of the watermark this owner loaded from
    /// (what its predecessor may have left), up to a bucket short of `fired_before`'s (a
    /// minute of slack for a clock that steps back). Nothing before the first load of the
    /// partition.
    fn passed_buckets(
        &mut self,
        partition: i32,
        fired_before: DateTime<Utc>,
    ) -> (Vec<DroppedTimerBucket>, Option<DateTime<Utc>>) {
        let Some(next) = self.dropped_until.get_mut(&partition) else {
            return (Vec::new(), None);
        };
        let due = timer_bucket(fired_before) - 1;
        let until = due.min(*next + MAX_DROPPED_BUCKETS_PER_WRITE);
        let passed: Vec<_> = (*next..until)
            .map(|bucket| DroppedTimerBucket {
                kafka_partition: partition,
                bucket,
            })
            .collect();
        *next = (*next).max(until);
        let held_at = (*next < due).then(|| bucket_start(*next + 1));
        (passed, held_at)
    }

    pub fn len(&self) -> usize {
        self.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(n: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(n * 60, 0).expect("valid time")
    }

    /// Buckets are dropped from a lookback before the one loaded from, never a bucket the
    /// watermark is in nor the one before it, at most `MAX_DROPPED_BUCKETS_PER_WRITE` at a
    /// time, each once; while they lag, the watermark is held at the bucket after the last
    /// one dropped.
    #[test]
    fn the_buckets_a_watermark_passed_are_dropped_once_from_where_the_owner_loaded() {
        let mut index = TimerIndex::new(std::time::Duration::from_secs(60));
        let write = |index: &mut TimerIndex, partition: i32, now: DateTime<Utc>| {
            let owned = BTreeSet::from([partition]);
            let mut writes = index.watermarks(&owned, now, Duration::zero());
            assert_eq!(writes.len(), 1, "one watermark per owned partition");
            let write = writes.remove(0);
            let buckets: Vec<i64> = write.dropped.iter().map(|d| d.bucket).collect();
            (write.fired_before, buckets)
        };
        assert_eq!(
            write(&mut index, 0, minute(100)),
            (minute(100), vec![]),
            "nothing loaded yet: nothing dropped"
        );
        let refill = Refill {
            partition: 0,
            from: Some(minute(1_000) + Duration::seconds(30)),
            until: minute(1_001),
            urgent: true,
        };
        index.loaded(&refill, Vec::new());
        let lookback: Vec<i64> = (1_000 - DROP_LOOKBACK_BUCKETS..999).collect();
        assert_eq!(
            write(&mut index, 0, minute(1_000)),
            (minute(1_000), lookback),
            "the lookback, short of the minute of slack"
        );
        let now = minute(1_003) + Duration::seconds(5);
        assert_eq!(write(&mut index, 0, now), (now, vec![999, 1_000, 1_001]));
        assert_eq!(
            write(&mut index, 0, minute(1_003)),
            (minute(1_003), vec![]),
            "each once"
        );
        let (held, far) = write(&mut index, 0, minute(2_000));
        assert_eq!(far.len() as i64, MAX_DROPPED_BUCKETS_PER_WRITE);
        assert_eq!(far[0], 1_002);
        assert_eq!(
            held,
            minute(1_063),
            "held at the bucket after the last dropped (1,061), so its successor's lookback \
             covers the rest"
        );
        let (held, next) = write(&mut index, 0, minute(2_000));
        assert_eq!((held, next[0]), (minute(1_123), 1_062), "catching up");
        assert_eq!(
            write(&mut index, 1, minute(2_000)),
            (minute(2_000), vec![]),
            "another partition"
        );
        index.clear();
        assert_eq!(
            write(&mut index, 0, minute(3_000)),
            (minute(3_000), vec![]),
            "forgotten with the assignment"
        );
    }
}
