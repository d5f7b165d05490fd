//! Requests of external routes: watched, never served. Each is held until its deadline (its
//! own `deadline`, else the request's timestamp plus the `timeout_ms` of the declaration-only
//! component, else plus the unknown grace), then — unless the route names the service's
//! consumer group and that group has committed past the request, which means the service
//! answered — the parent is answered `timed-out`. An answer of the service committed after
//! that may lose to it: the parent keeps the first answer for each child id.
//!
//! Invariants: a request is never answered `timed-out` before its deadline; with a service
//! group, never once the group committed past it (as the driver last read it), nor while
//! the group's offsets cannot be read, up to [`CHECK_PATIENCE`] past the deadline; a
//! cancellation of an external request answers nothing (the parent has journalled it).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ServiceCheck;
use crate::model::{ExecutionErrorKind, ExecutionResult, Ffqn};
use crate::records::ActivityRequest;

/// How long the check of an unreachable service group waits before it is tried again.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);

/// How long past its deadline a request whose service group cannot be read is checked
/// again before it is answered `timed-out` anyway (a group the worker is not allowed to
/// read must not hold the request open for ever).
pub const CHECK_PATIENCE: Duration = Duration::from_secs(10 * 60);

/// The deadline an external request is watched until.
pub fn deadline(
    request: &ActivityRequest,
    written_at: DateTime<Utc>,
    timeout: Option<Duration>,
    unknown_grace: Duration,
) -> DateTime<Utc> {
    request
        .deadline
        .unwrap_or_else(|| after(written_at, timeout.unwrap_or(unknown_grace)))
}

/// What the deadline passing does.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    /// Ask the service's consumer group first.
    Check,
    /// Answer `timed-out` now.
    TimedOut,
}

pub fn due(service_group: Option<&str>) -> Due {
    match service_group {
        Some(_) => Due::Check,
        None => Due::TimedOut,
    }
}

/// What a check's outcome does.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// The service answered: the request is finished, nothing to say.
    Finished,
    TimedOut,
    /// Check again then.
    Again(DateTime<Utc>),
}

/// What a check's outcome does for a request due at `deadline`: a group that could not be
/// read (a transient Kafka error) is asked again, not taken for a service that did not
/// answer, until [`CHECK_PATIENCE`] past the deadline.
pub fn checked(check: ServiceCheck, now: DateTime<Utc>, deadline: DateTime<Utc>) -> Checked {
    match check {
        ServiceCheck::Answered => Checked::Finished,
        ServiceCheck::NotAnswered => Checked::TimedOut,
        ServiceCheck::Unavailable if now >= after(deadline, CHECK_PATIENCE) => Checked::TimedOut,
        ServiceCheck::Unavailable => Checked::Again(after(now, UNAVAILABLE_RETRY)),
    }
}

/// The answer of a request its service did not answer by `deadline`.
pub fn timed_out(ffqn: &Ffqn, deadline: Option<DateTime<Utc>>) -> ExecutionResult {
    let deadline = deadline
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default();
    ExecutionResult::error(
        ExecutionErrorKind::TimedOut,
        format!("the external service of {ffqn} did not answer by the deadline {deadline}"),
    )
}

/// `at + d`, saturating.
pub fn after(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    fn request(deadline: Option<DateTime<Utc>>) -> ActivityRequest {
        let parent = crate::model::ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        ActivityRequest {
            execution_id: parent.child(
                &crate::model::JoinSetId::one_off(1, "x").expect("a join set"),
                1,
            ),
            parent_execution_id: parent,
            ffqn: "ext:pay/charge.charge".parse().expect("ffqn"),
            params: serde_json::json!([]),
            attempt: 1,
            timeout_millis: None,
            deadline,
        }
    }

    #[test]
    fn the_deadline_is_the_requests_else_the_timeout_else_the_grace() {
        let grace = Duration::from_secs(600);
        let ms = Duration::from_millis;
        assert_eq!(
            deadline(&request(Some(t(5))), t(0), Some(ms(100)), grace),
            t(5)
        );
        assert_eq!(deadline(&request(None), t(0), Some(ms(100)), grace), t(100));
        assert_eq!(deadline(&request(None), t(0), None, grace), t(600_000));
        assert_eq!(
            deadline(&request(None), t(0), Some(Duration::MAX), grace),
            DateTime::<Utc>::MAX_UTC
        );
        // Issue 33 F14: `--unknown-activity-grace-secs 18446744073709551615` made
        // `written_at + grace` panic in the worker; the deadline saturates instead.
        assert_eq!(
            deadline(&request(None), t(0), None, Duration::from_secs(u64::MAX)),
            DateTime::<Utc>::MAX_UTC
        );
        assert_eq!(
            after(t(0), Duration::from_secs(u64::MAX)),
            DateTime::<Utc>::MAX_UTC
        );
    }

    #[test]
    fn a_check_decides_the_answer() {
        assert_eq!(due(Some("svc")), Due::Check);
        assert_eq!(due(None), Due::TimedOut);
        assert_eq!(
            checked(ServiceCheck::Answered, t(0), t(0)),
            Checked::Finished
        );
        assert_eq!(
            checked(ServiceCheck::NotAnswered, t(0), t(0)),
            Checked::TimedOut
        );
        assert_eq!(
            checked(ServiceCheck::Unavailable, t(0), t(0)),
            Checked::Again(t(1_000))
        );
        let patience = CHECK_PATIENCE.as_millis() as i64;
        assert_eq!(
            checked(ServiceCheck::Unavailable, t(patience - 1), t(0)),
            Checked::Again(t(patience + 999))
        );
        assert_eq!(
            checked(ServiceCheck::Unavailable, t(patience), t(0)),
            Checked::TimedOut,
            "a group never readable does not hold the request for ever"
        );
        let answer = timed_out(&"ext:pay/charge.charge".parse().expect("ffqn"), Some(t(0)));
        assert_eq!(
            answer.to_string(),
            "timed-out: the external service of ext:pay/charge.charge did not answer by the deadline 2026-01-01T00:00:00.000Z"
        );
    }
}
