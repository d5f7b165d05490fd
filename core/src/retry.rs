//! The retry decision of an activity: after an attempt, retry it (when, as which attempt) or
//! give up (answering what). One pure function, [`decide`], used by every path that runs
//! activities — the Kafka activity worker (`worker/src/kafka/activity_worker.rs`, retries made
//! durable in its committed offsets) and the in-process host (`worker/src/wasm/activity.rs`,
//! which the in-memory bus uses) — so that both answer a parent the same way.
//!
//! No I/O and no clock: the time the attempt ended and the random draw for the jitter are
//! arguments.
//!
//! The rules (`docs/design/activities.md#retries`):
//! - `ok` is the answer, never retried.
//! - `err` is retried while attempts are left if the policy's `retry_on_err` says so; when it
//!   is not retried (by policy, or because no attempt or time is left) the `err` itself is the
//!   answer: it is the activity's own typed answer, which the caller's WIT can represent.
//! - an execution error is retried while attempts are left, unless its kind says that running
//!   the same request again cannot help ([`is_retryable`]: `invalid-params`, `cancelled`,
//!   `unknown-function`, `nondeterminism-detected`). Giving up after more than one attempt
//!   answers `retries-exhausted`, with the number of attempts and the last reason; after a
//!   single attempt (`max_attempts = 1`, or a kind never retried) the error itself.
//! - a deadline (the activity's, all attempts included) the next attempt could not start
//!   before ends the retries there: the `err` as such, or `timed-out` naming the last reason.
//! - with [`OnExhausted::Pause`] (`on_exhausted = "pause"`), giving up after the last attempt
//!   of an outcome that would have been retried ([`Decision::Park`]) parks the request and
//!   pauses its parent instead of answering (`docs/design/pause.md#retries-that-end-in-paused`);
//!   what is never retried (`ok`, an `err` without `retry_on_err`, a kind never retried) and a
//!   deadline still answer.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionResult};

/// Retries of an activity: exponential backoff `base · 2^(n−2)` before attempt `n`, capped at
/// `max`, each delay scaled by a random factor in `[1 − jitter, 1 + jitter]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 = no retry).
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub jitter: f64,
    /// Retry when the activity returns `err` (traps, limits and timeouts are always retried).
    pub retry_on_err: bool,
    /// What the last failed attempt leads to.
    pub on_exhausted: OnExhausted,
}

/// What an activity whose attempts are exhausted does (`on_exhausted` in `components.toml`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExhausted {
    /// Its parent is answered (`retries-exhausted`, or the last error or `err`).
    #[default]
    Answer,
    /// The request is parked (unfinished, no attempt starts) and its parent paused; the
    /// parent's resume gives it a fresh budget of attempts.
    Pause,
}

impl OnExhausted {
    /// Its name in `components.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExhausted::Answer => "answer",
            OnExhausted::Pause => "pause",
        }
    }
}

impl std::str::FromStr for OnExhausted {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "answer" => Ok(OnExhausted::Answer),
            "pause" => Ok(OnExhausted::Pause),
            other => Err(format!(
                "on_exhausted must be \"answer\" or \"pause\", not {other:?}"
            )),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `next_attempt` (2 = first retry). `unit` is a uniform random
    /// number in `[0, 1)` supplied by the caller, so tests and durable schedulers choose it.
    pub fn backoff(&self, next_attempt: u32, unit: f64) -> Duration {
        let exp = next_attempt.saturating_sub(2).min(30);
        let raw = self.backoff_base.saturating_mul(1u32 << exp);
        let capped = raw.min(self.backoff_max);
        let factor = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        capped.mul_f64(factor.max(0.0))
    }
}

/// What to do after an attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Run attempt `attempt` at `not_before` (the attempt's end plus `backoff`).
    Retry {
        attempt: u32,
        backoff: Duration,
        not_before: DateTime<Utc>,
    },
    /// No more attempts: this is the answer to the parent.
    Answer(ExecutionResult),
    /// No more attempts, and the policy pauses ([`OnExhausted::Pause`]): the request is
    /// parked and its parent paused. `answer` is what [`OnExhausted::Answer`] would have
    /// answered (what a host that cannot park answers).
    Park {
        attempts: u32,
        answer: ExecutionResult,
    },
}

/// Whether an execution error of this kind is worth another attempt of the same request.
pub fn is_retryable(kind: ExecutionErrorKind) -> bool {
    match kind {
        ExecutionErrorKind::Trap
        | ExecutionErrorKind::OutOfFuel
        | ExecutionErrorKind::OutOfMemory
        | ExecutionErrorKind::TimedOut
        | ExecutionErrorKind::UnhandledChildExecutionError
        | ExecutionErrorKind::RetriesExhausted => true,
        ExecutionErrorKind::InvalidParams
        | ExecutionErrorKind::Cancelled
        | ExecutionErrorKind::UnknownFunction
        | ExecutionErrorKind::NondeterminismDetected
        | ExecutionErrorKind::Conflict
        // The same params make the same too-large value.
        | ExecutionErrorKind::ValueTooLarge
        // An answer the caller's types refuse; another attempt is the service's business.
        | ExecutionErrorKind::InvalidResponse => false,
    }
}

/// The decision after attempt `attempt` (1-based) of an activity with `policy` ended with
/// `result` at `now`. `deadline` is the activity's absolute deadline, if it has one; `unit` is
/// a uniform random draw in `[0, 1)` for the jitter.
pub fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    result: ExecutionResult,
    now: DateTime<Utc>,
    deadline: Option<DateTime<Utc>>,
    unit: f64,
) -> Decision {
    let retryable = match &result {
        ExecutionResult::Ok(_) => false,
        ExecutionResult::Err(_) => policy.retry_on_err,
        ExecutionResult::ExecutionError(e) => is_retryable(e.kind),
    };
    if !retryable {
        return Decision::Answer(result);
    }
    if attempt >= policy.max_attempts {
        let answer = exhausted(attempt, result);
        return match policy.on_exhausted {
            OnExhausted::Answer => Decision::Answer(answer),
            OnExhausted::Pause => Decision::Park {
                attempts: attempt,
                answer,
            },
        };
    }
    let next = attempt + 1;
    let backoff = policy.backoff(next, unit);
    let not_before = chrono::Duration::from_std(backoff)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    match deadline {
        Some(deadline) if not_before >= deadline => {
            Decision::Answer(past_deadline(attempt, deadline, result))
        }
        _ => Decision::Retry {
            attempt: next,
            backoff,
            not_before,
        },
    }
}

/// The answer when no attempt is left after `attempts` of them.
fn exhausted(attempts: u32, last: ExecutionResult) -> ExecutionResult {
    match last {
        ExecutionResult::ExecutionError(e) if attempts > 1 => {
            let mut error = ExecutionError::new(
                ExecutionErrorKind::RetriesExhausted,
                format!("{attempts} attempts failed; the last one: {e}"),
            );
            error.detail = e.detail;
            ExecutionResult::ExecutionError(error)
        }
        other => other,
    }
}

/// The answer when the next attempt could not start before the deadline.
fn past_deadline(attempts: u32, deadline: DateTime<Utc>, last: ExecutionResult) -> ExecutionResult {
    match last {
        ExecutionResult::ExecutionError(e) => {
            let mut error = ExecutionError::new(
                ExecutionErrorKind::TimedOut,
                format!(
                    "the deadline {} leaves no time for another attempt after {attempts}; the last one: {e}",
                    deadline.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                ),
            );
            error.detail = e.detail;
            ExecutionResult::ExecutionError(error)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(max_attempts: u32, retry_on_err: bool) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
            jitter: 0.0,
            retry_on_err,
            on_exhausted: OnExhausted::Answer,
        }
    }

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    fn error(kind: ExecutionErrorKind) -> ExecutionResult {
        ExecutionResult::ExecutionError(ExecutionError::new(kind, "boom").with_detail("trace"))
    }

    fn retry(attempt: u32, backoff_ms: u64, at_ms: i64) -> Decision {
        Decision::Retry {
            attempt,
            backoff: Duration::from_millis(backoff_ms),
            not_before: t(at_ms),
        }
    }

    fn answer_error(kind: ExecutionErrorKind, reason: &str) -> Decision {
        Decision::Answer(ExecutionResult::ExecutionError(
            ExecutionError::new(kind, reason).with_detail("trace"),
        ))
    }

    /// One row of the table: (max attempts, retry_on_err), the attempt that just ended, its
    /// outcome, the deadline (ms after the attempt ended) → the decision.
    type Case = (
        &'static str,
        (u32, bool),
        u32,
        ExecutionResult,
        Option<i64>,
        Decision,
    );

    /// The attempt ends at t(0); backoff 100 ms doubling, capped at 1 s, no jitter.
    #[test]
    #[rustfmt::skip]
    fn the_decision_table() {
        use ExecutionErrorKind::*;
        let ok = ExecutionResult::Ok(json!(1));
        let err = ExecutionResult::Err(json!("no"));
        let exhausted_trap = "3 attempts failed; the last one: trap: boom";
        let no_time = "the deadline 2026-01-01T00:00:00.100Z leaves no time for another attempt after 1; the last one: trap: boom";
        let cases: Vec<Case> = vec![
            ("ok is the answer",                      (3, true),  1, ok.clone(),           None,      Decision::Answer(ok.clone())),
            ("ok on the last attempt",                (3, true),  3, ok.clone(),           None,      Decision::Answer(ok)),
            ("err retried with retry_on_err",         (3, true),  1, err.clone(),          None,      retry(2, 100, 100)),
            ("err never retried without it",          (3, false), 1, err.clone(),          None,      Decision::Answer(err.clone())),
            ("err after the last attempt is the err", (3, true),  3, err.clone(),          None,      Decision::Answer(err.clone())),
            ("trap retried",                          (3, true),  1, error(Trap),          None,      retry(2, 100, 100)),
            ("backoff doubles",                       (5, true),  2, error(Trap),          None,      retry(3, 200, 200)),
            ("backoff capped",                        (9, true),  7, error(OutOfFuel),     None,      retry(8, 1000, 1000)),
            ("timeout retried without retry_on_err",  (3, false), 1, error(TimedOut),      None,      retry(2, 100, 100)),
            ("out of memory retried",                 (3, true),  2, error(OutOfMemory),   None,      retry(3, 200, 200)),
            ("trap exhausted",                        (3, true),  3, error(Trap),          None,      answer_error(RetriesExhausted, exhausted_trap)),
            ("a single attempt keeps its error",      (1, true),  1, error(Trap),          None,      answer_error(Trap, "boom")),
            ("invalid params never retried",          (3, true),  1, error(InvalidParams), None,      answer_error(InvalidParams, "boom")),
            ("cancelled never retried",               (3, true),  1, error(Cancelled),     None,      answer_error(Cancelled, "boom")),
            ("unknown function never retried",        (3, true),  2, error(UnknownFunction), None,    answer_error(UnknownFunction, "boom")),
            ("retry before the deadline",             (3, true),  1, error(Trap),          Some(101), retry(2, 100, 100)),
            ("no time left for a retry",              (3, true),  1, error(Trap),          Some(100), answer_error(TimedOut, no_time)),
            ("an err past the deadline is the err",   (3, true),  1, err.clone(),          Some(50),  Decision::Answer(err)),
        ];
        for (what, (max_attempts, retry_on_err), attempt, result, deadline, expected) in cases {
            let decision = decide(&policy(max_attempts, retry_on_err), attempt, result, t(0), deadline.map(t), 0.5);
            assert_eq!(decision, expected, "{what}");
        }
    }

    /// With `on_exhausted = "pause"`, what would have been retried parks after the last
    /// attempt; what is never retried, and a deadline, still answer.
    #[test]
    fn a_pausing_policy_parks_what_it_would_have_retried() {
        use ExecutionErrorKind::*;
        let p = RetryPolicy {
            on_exhausted: OnExhausted::Pause,
            ..policy(3, true)
        };
        let park = |attempts, answer| Decision::Park { attempts, answer };
        let err = ExecutionResult::Err(json!("no"));
        let cases: Vec<(&str, u32, ExecutionResult, Option<i64>, Decision)> = vec![
            (
                "a trap exhausted parks",
                3,
                error(Trap),
                None,
                park(
                    3,
                    ExecutionResult::ExecutionError(
                        ExecutionError::new(
                            RetriesExhausted,
                            "3 attempts failed; the last one: trap: boom",
                        )
                        .with_detail("trace"),
                    ),
                ),
            ),
            (
                "an err exhausted parks",
                3,
                err.clone(),
                None,
                park(3, err.clone()),
            ),
            (
                "a retry is still a retry",
                1,
                error(Trap),
                None,
                retry(2, 100, 100),
            ),
            (
                "never retried: answered",
                3,
                error(InvalidParams),
                None,
                answer_error(InvalidParams, "boom"),
            ),
            (
                "ok answers",
                3,
                ExecutionResult::Ok(json!(1)),
                None,
                Decision::Answer(ExecutionResult::Ok(json!(1))),
            ),
            (
                "a deadline answers",
                1,
                error(Trap),
                Some(100),
                answer_error(
                    TimedOut,
                    "the deadline 2026-01-01T00:00:00.100Z leaves no time for another attempt after 1; the last one: trap: boom",
                ),
            ),
        ];
        for (what, attempt, result, deadline, expected) in cases {
            assert_eq!(
                decide(&p, attempt, result, t(0), deadline.map(t), 0.5),
                expected,
                "{what}"
            );
        }
        let single = RetryPolicy {
            max_attempts: 1,
            ..p
        };
        assert_eq!(
            decide(&single, 1, error(Trap), t(0), None, 0.5),
            park(1, error(Trap)),
            "a single attempt parks with its own error"
        );
        assert_eq!("pause".parse(), Ok(OnExhausted::Pause));
        assert!("stop".parse::<OnExhausted>().is_err());
    }

    #[test]
    fn jitter_scales_the_backoff_within_its_bounds() {
        let p = RetryPolicy {
            jitter: 0.5,
            ..policy(10, true)
        };
        assert_eq!(p.backoff(2, 0.5), Duration::from_millis(100));
        assert_eq!(p.backoff(2, 0.0), Duration::from_millis(50));
        assert!(p.backoff(2, 0.999) < Duration::from_millis(150));
        assert_eq!(p.backoff(40, 0.5), Duration::from_millis(1000));
        let Decision::Retry { not_before, .. } =
            decide(&p, 1, error(ExecutionErrorKind::Trap), t(0), None, 0.0)
        else {
            panic!("a trap is retried")
        };
        assert_eq!(not_before, t(50));
    }
}
