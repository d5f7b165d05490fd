//! Riding out a store outage (issue 11 item 11): a store call that fails for a reason that
//! can pass (no connection, a timeout, an unavailable replica, a page that did not come) is
//! tried again after a growing delay, until the worker's patience is spent; then the error
//! stands and the worker stops (its supervisor restarts it, and a take-over starts afresh).
//! An error that cannot pass (bad data, a bad statement) stands at once.
//!
//! Killing Cassandra under load stopped both workers within 0.3 s before: one failed read
//! stopped the process, and so did the writer after ~1.5 s of retries.

use std::future::Future;
use std::time::Duration;

use super::StoreError;
use crate::metrics::Counter;

/// When to try a failed store call again, and when to give up. A pure rule: a table test
/// checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// The delay after the first failure; it doubles with each failure after it…
    pub first_delay: Duration,
    /// …up to this.
    pub max_delay: Duration,
    /// No try starts once this long has passed since the first failure.
    pub give_up_after: Duration,
}

impl Patience {
    pub fn new(give_up_after: Duration) -> Self {
        Patience {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            give_up_after,
        }
    }

    /// The delay before try `failures + 1`, after `failures` failed tries (≥ 1) and
    /// `elapsed` since the first of them; `None`: give up.
    pub fn next_delay(&self, failures: u32, elapsed: Duration) -> Option<Duration> {
        let doubled = self
            .first_delay
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        let delay = doubled.min(self.max_delay);
        (elapsed + delay <= self.give_up_after).then_some(delay)
    }
}

impl StoreError {
    /// Whether the error can pass by itself (an outage), so that a retry may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            // A refused login or certificate is a configuration to fix, not an outage.
            StoreError::Connect { failure, .. } => *failure == super::ConnectFailure::Other,
            StoreError::Result { .. } => true,
            StoreError::Execute { source, .. } => !matches!(
                **source,
                scylla::errors::ExecutionError::BadQuery(_)
                    | scylla::errors::ExecutionError::PrepareError(_)
            ),
            StoreError::KeyspaceName(_)
            | StoreError::Corrupt { .. }
            | StoreError::TimerRange { .. }
            | StoreError::SchemaFile(_)
            | StoreError::TlsFile { .. }
            | StoreError::Tls(_)
            | StoreError::Drift { .. } => false,
        }
    }
}

/// Runs `call` until it succeeds, fails for good, or `patience` is spent; counts each retry
/// in `retries` and logs the first failure of an outage and its end.
pub async fn patiently<T, F, Fut>(
    patience: &Patience,
    retries: &Counter,
    what: &str,
    mut call: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut failures = 0u32;
    let started = tokio::time::Instant::now();
    loop {
        match call().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!(what, failures, waited = ?started.elapsed(), "the store answers again");
                }
                return Ok(value);
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                let Some(delay) = patience.next_delay(failures, started.elapsed()) else {
                    tracing::error!(what, failures, error = %e, "the store stayed unavailable past the worker's patience");
                    return Err(e);
                };
                if failures == 1 {
                    tracing::warn!(what, error = %e, "the store failed; retrying with backoff");
                }
                retries.inc();
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_stop_at_the_patience() {
        let p = Patience::new(Duration::from_secs(60));
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let table = [
            (1, ms(0), Some(ms(100))),
            (2, ms(100), Some(ms(200))),
            (3, ms(300), Some(ms(400))),
            (6, s(3), Some(s(3) + ms(200))),
            (7, s(7), Some(s(5))),
            (40, s(50), Some(s(5))),
            (41, s(55), Some(s(5))),
            (42, s(56), None),
            (1, s(61), None),
        ];
        for (failures, elapsed, expected) in table {
            assert_eq!(
                p.next_delay(failures, elapsed),
                expected,
                "after {failures} failures, {elapsed:?} in"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_within_the_patience_is_ridden_out_and_counted() {
        let retries = Counter::default();
        let patience = Patience::new(Duration::from_secs(30));
        let mut calls = 0;
        let value = patiently(&patience, &retries, "a read", || {
            calls += 1;
            let fail = calls <= 4;
            async move {
                if fail {
                    Err(StoreError::Result {
                        context: "read".into(),
                        reason: "connection reset".into(),
                    })
                } else {
                    Ok(7)
                }
            }
        })
        .await
        .expect("ridden out");
        assert_eq!((value, calls, retries.get()), (7, 5, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn bad_data_fails_at_once_and_a_long_outage_after_the_patience() {
        let retries = Counter::default();
        let patience = Patience::new(Duration::from_secs(10));
        let mut calls = 0;
        let corrupt = patiently(&patience, &retries, "a read", || {
            calls += 1;
            async {
                Err::<(), _>(StoreError::Corrupt {
                    execution_id: "E_x".into(),
                    reason: "bad".into(),
                })
            }
        })
        .await;
        assert!(matches!(corrupt, Err(StoreError::Corrupt { .. })) && calls == 1);
        let started = tokio::time::Instant::now();
        let down = patiently(&patience, &retries, "a write", || async {
            Err::<(), _>(StoreError::Result {
                context: "write".into(),
                reason: "unavailable".into(),
            })
        })
        .await;
        assert!(down.is_err());
        assert!(
            started.elapsed() <= Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() >= Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
