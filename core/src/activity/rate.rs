//! Rate limits of activity routes (`rate = { per_second, burst }` on a route in
//! `topology/routes.toml`): a token bucket per rate-limited request topic in each activity
//! worker process (`docs/design/activities.md#rate-limits`). Pure: no clock, every call takes
//! the instant it is made at.
//!
//! The bucket holds at most `burst` tokens and gains `per_second` of them a second; an attempt
//! starts only with a token, which it takes. It is kept in its GCRA form (the generic cell rate
//! algorithm, the token bucket written as instants): the *theoretical arrival time* `tat` of
//! the next token if the bucket were drained one token an `interval` (`1 / per_second`,
//! rounded up to the nanosecond), and a `tolerance` of `(burst − 1)` intervals. A token is
//! there at `now` when `tat − tolerance <= now`; taking one moves `tat` to `max(tat, now) +
//! interval`. A bucket never used (or idle long enough) is full.
//!
//! Invariants:
//! - **The limit**: over any span `[s, t]` of one bucket's life, at most `burst + per_second ·
//!   (t − s)` tokens are taken (the interval rounded up makes it at most stricter, by less than
//!   a nanosecond a token).
//! - **No starvation**: when [`TokenBucket::take`] refuses at `now`,
//!   [`TokenBucket::next_token`] is an instant after `now` and at most one interval after the
//!   last token taken; at that instant `take` succeeds. A caller that waits for it (the
//!   activity core's `next_wake`) is never stuck on an empty bucket.
//! - A [`RateLimit`] is valid ([`RateLimit::validate`]) when its rate is a finite number of at
//!   least [`MIN_PER_SECOND`] and its burst at least 1; the bucket of a valid limit computes
//!   no instant that overflows (one that would is taken as "long ago" or "never").

use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};

/// The smallest rate a route may be limited to: one attempt a day. A slower route is not
/// limited but held: `weir route pause` holds it.
pub const MIN_PER_SECOND: f64 = 1.0 / 86_400.0;

/// A route's rate limit as configured: at most `burst` attempts at once, `per_second` a
/// second on average.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

/// Why a [`RateLimit`] is not one.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum RateLimitError {
    #[error("a rate of {0} per second is not a finite number")]
    NotFinite(f64),
    #[error("a rate of {0} per second lets nothing start: it must be more than 0")]
    NotPositive(f64),
    #[error(
        "a rate of {0} per second is below one a day ({MIN_PER_SECOND:e} per second): hold the route with `weir route pause` instead"
    )]
    TooSlow(f64),
    #[error("a burst of 0 lets nothing start: it must be at least 1")]
    NoBurst,
}

impl RateLimit {
    pub fn validate(&self) -> Result<(), RateLimitError> {
        let rate = self.per_second;
        if !rate.is_finite() {
            return Err(RateLimitError::NotFinite(rate));
        }
        if rate <= 0.0 {
            return Err(RateLimitError::NotPositive(rate));
        }
        if rate < MIN_PER_SECOND {
            return Err(RateLimitError::TooSlow(rate));
        }
        if self.burst == 0 {
            return Err(RateLimitError::NoBurst);
        }
        Ok(())
    }

    /// The time between two tokens: `1 / per_second`, rounded up to the nanosecond (at least
    /// one).
    pub fn interval(&self) -> Result<TimeDelta, RateLimitError> {
        self.validate()?;
        // At most 86 400 s (MIN_PER_SECOND): fits an i64 of nanoseconds.
        let nanos = (1e9 / self.per_second).ceil().max(1.0) as i64;
        Ok(TimeDelta::nanoseconds(nanos))
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per second, burst {}", self.per_second, self.burst)
    }
}

/// One rate-limited topic's bucket (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    interval: TimeDelta,
    /// `(burst − 1)` intervals (saturated: a burst that large never runs dry).
    tolerance: TimeDelta,
    /// The theoretical arrival time; `None`: never taken from (full).
    tat: Option<DateTime<Utc>>,
}

impl TokenBucket {
    /// A full bucket of `limit`.
    pub fn new(limit: &RateLimit) -> Result<Self, RateLimitError> {
        let interval = limit.interval()?;
        let nanos = i128::from(interval.num_nanoseconds().unwrap_or(i64::MAX))
            * i128::from(limit.burst - 1);
        let tolerance = i64::try_from(nanos)
            .map(TimeDelta::nanoseconds)
            .unwrap_or(TimeDelta::MAX);
        Ok(TokenBucket {
            interval,
            tolerance,
            tat: None,
        })
    }

    /// A bucket of `limit` as it was when [`TokenBucket::tat`] gave `tat` (a bucket kept in a
    /// record: a batch's, `crate::batch`).
    pub fn resume(limit: &RateLimit, tat: Option<DateTime<Utc>>) -> Result<Self, RateLimitError> {
        let mut bucket = TokenBucket::new(limit)?;
        bucket.tat = tat;
        Ok(bucket)
    }

    /// The theoretical arrival time (`None`: never taken from), what [`TokenBucket::resume`]
    /// takes back.
    pub fn tat(&self) -> Option<DateTime<Utc>> {
        self.tat
    }

    /// The first instant a token is there; `None`: now already (full, or never drained
    /// that far).
    pub fn next_token(&self) -> Option<DateTime<Utc>> {
        self.tat
            .and_then(|tat| tat.checked_sub_signed(self.tolerance))
    }

    /// Whether a token is there at `now`.
    pub fn ready(&self, now: DateTime<Utc>) -> bool {
        self.next_token().is_none_or(|at| at <= now)
    }

    /// Takes a token at `now`; `false` (and nothing changes) when there is none.
    pub fn take(&mut self, now: DateTime<Utc>) -> bool {
        if !self.ready(now) {
            return false;
        }
        let base = self.tat.map_or(now, |tat| tat.max(now));
        self.tat = Some(
            base.checked_add_signed(self.interval)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        );
        true
    }

    /// The time between two tokens.
    pub fn interval(&self) -> TimeDelta {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    fn bucket(per_second: f64, burst: u32) -> TokenBucket {
        TokenBucket::new(&RateLimit { per_second, burst }).expect("a valid limit")
    }

    /// Takes at each of `at` (ms), in order: which were granted.
    fn takes(b: &mut TokenBucket, at: &[i64]) -> Vec<bool> {
        at.iter().map(|ms| b.take(t(*ms))).collect()
    }

    #[test]
    fn a_full_bucket_gives_its_burst_at_once_then_one_token_an_interval() {
        // 2 a second: a token every 500 ms; 3 at once.
        let mut b = bucket(2.0, 3);
        assert_eq!(b.next_token(), None, "full");
        assert_eq!(takes(&mut b, &[0, 0, 0, 0]), [true, true, true, false]);
        // Empty: the next token comes one interval after the first take.
        assert_eq!(b.next_token(), Some(t(500)));
        assert!(!b.ready(t(499)));
        assert_eq!(takes(&mut b, &[499, 500, 500]), [false, true, false]);
        assert_eq!(b.next_token(), Some(t(1_000)));
        // Idle for long: full again, never more than the burst.
        assert_eq!(
            takes(&mut b, &[10_000, 10_000, 10_000, 10_000]),
            [true, true, true, false]
        );
        assert_eq!(b.next_token(), Some(t(10_500)));
    }

    /// Partly refilled: a bucket drained at 0 holds two tokens again 1 s later (burst 3, 2 a
    /// second), not three.
    #[test]
    fn the_bucket_refills_at_its_rate_up_to_its_burst() {
        let mut b = bucket(2.0, 3);
        assert_eq!(takes(&mut b, &[0, 0, 0]), [true, true, true]);
        assert_eq!(takes(&mut b, &[1_000, 1_000, 1_000]), [true, true, false]);
        assert_eq!(b.next_token(), Some(t(1_500)));
        // A burst of one is a plain spacing: one token per interval, none saved up beyond one.
        let mut one = bucket(4.0, 1);
        assert_eq!(
            takes(&mut one, &[0, 100, 250, 250, 499, 500, 5_000, 5_000]),
            [true, false, true, false, false, true, true, false]
        );
    }

    /// Whatever the pattern of takes, no span `[s, t]` saw more than `burst + rate · (t − s)`,
    /// and a refused take names a later instant at which the next one succeeds.
    #[test]
    fn no_span_takes_more_than_the_limit_and_a_refusal_names_when_to_come_back() {
        for (per_second, burst) in [(1.0, 1), (3.0, 2), (0.5, 4), (1000.0, 5), (7.3, 3)] {
            let limit = RateLimit { per_second, burst };
            let mut b = TokenBucket::new(&limit).expect("valid");
            let mut granted: Vec<i64> = Vec::new();
            let mut ms = 0;
            for step in 0..2_000i64 {
                // Bursts and pauses of different lengths (deterministic).
                ms += (step * 7919) % 13 * (step % 5) * 17;
                let now = t(ms);
                if b.take(now) {
                    granted.push(ms);
                } else {
                    let next = b
                        .next_token()
                        .expect("an empty bucket names its next token");
                    assert!(
                        next > now,
                        "{limit}: refused at {ms} with a token due {next}"
                    );
                    let mut probe = b.clone();
                    assert!(
                        probe.take(next),
                        "{limit}: the token due at {next} is there"
                    );
                }
            }
            for (i, s) in granted.iter().enumerate() {
                for (j, e) in granted.iter().enumerate().skip(i) {
                    let allowed = f64::from(burst) + per_second * (e - s) as f64 / 1_000.0;
                    assert!(
                        (j - i + 1) as f64 <= allowed + 1e-9,
                        "{limit}: {} takes in [{s}, {e}] ms",
                        j - i + 1
                    );
                }
            }
            assert!(granted.len() > 10, "{limit}: the pattern drains the bucket");
        }
    }

    #[test]
    fn limits_are_validated() {
        let limit = |per_second, burst| RateLimit { per_second, burst }.validate();
        assert_eq!(limit(50.0, 10), Ok(()));
        assert_eq!(limit(MIN_PER_SECOND, 1), Ok(()));
        assert_eq!(limit(0.0, 1), Err(RateLimitError::NotPositive(0.0)));
        assert_eq!(limit(-1.0, 1), Err(RateLimitError::NotPositive(-1.0)));
        assert!(matches!(
            limit(f64::NAN, 1),
            Err(RateLimitError::NotFinite(_))
        ));
        assert_eq!(
            limit(f64::INFINITY, 1),
            Err(RateLimitError::NotFinite(f64::INFINITY))
        );
        assert_eq!(limit(1e-9, 1), Err(RateLimitError::TooSlow(1e-9)));
        assert_eq!(limit(1.0, 0), Err(RateLimitError::NoBurst));
        assert!(
            TokenBucket::new(&RateLimit {
                per_second: 0.0,
                burst: 1
            })
            .is_err()
        );
        assert_eq!(
            RateLimitError::NotPositive(0.0).to_string(),
            "a rate of 0 per second lets nothing start: it must be more than 0"
        );
    }

    /// The extremes compute no instant that overflows: the slowest rate with the largest burst,
    /// the fastest rate, instants at the ends of time.
    #[test]
    fn extreme_limits_neither_overflow_nor_starve() {
        let mut wide = bucket(MIN_PER_SECOND, u32::MAX);
        assert!((0..1_000).all(|_| wide.take(t(0))));
        assert_eq!(wide.interval(), TimeDelta::seconds(86_400));
        let mut fast = bucket(1e12, 1);
        assert_eq!(fast.interval(), TimeDelta::nanoseconds(1));
        assert!(fast.take(t(0)));
        assert_eq!(
            fast.next_token(),
            t(0).checked_add_signed(TimeDelta::nanoseconds(1))
        );
        // A token due past the end of time never comes.
        let mut late = bucket(MIN_PER_SECOND, 1);
        let end = DateTime::<Utc>::MAX_UTC;
        let near_end = end - TimeDelta::hours(1);
        assert!(late.take(near_end));
        assert!(!late.take(near_end));
        assert_eq!(late.next_token(), Some(end));
    }
}
