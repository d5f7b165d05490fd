//! Retries that end in `paused` (`on_exhausted = "pause"`): a request whose attempts are
//! exhausted is parked (its mark `!`), its parent's pause goes out in the commit that marks
//! it so, nothing starts until a retry notice gives it a fresh budget, and a cancellation ends
//! it as any other.

use super::*;
use crate::records::ActivityRetry;
use crate::retry::OnExhausted;

/// Two attempts, then parked.
fn pausing() -> Serve {
    Serve::Wasm(RetryPolicy {
        on_exhausted: OnExhausted::Pause,
        ..policy(2)
    })
}

fn notice(offset: i64, n: u64) -> Input<i64> {
    record(
        offset,
        Body::Retry(ActivityRetry {
            execution_id: child(n),
            parent_execution_id: parent(),
            resumed_at: t(0),
        }),
    )
}

#[test]
fn an_exhausted_request_is_parked_until_its_parents_retry_notice() {
    let core = run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, pausing()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            (
                110,
                Input::Tick,
                &["start #1 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
            // Exhausted: parked (no attempt kept in its mark), its parent's pause in the same
            // commit; no answer.
            (
                120,
                finished(1, trap()),
                &["commit [pause parent for c1] weir.activity.t/0=0 wa1;n=1;o=0!"],
            ),
            // Nothing starts, however long it waits; a notice of another activity, or one
            // read before the request (a cancellation's partition holds them after it), changes
            // nothing but the progress past it.
            (60_000, Input::Tick, &[]),
            (
                60_001,
                notice(1, 7),
                &["commit [] weir.activity.t/0=0 wa1;n=2;o=0!"],
            ),
            // Its parent resumed: a fresh budget, attempt 1 again.
            (
                60_002,
                notice(2, 1),
                &[
                    "start #2 weir.activity.t/0@0 attempt 1 Some(5s)",
                    "commit [] weir.activity.t/0=0 wa1;n=3;o=0",
                ],
            ),
            (
                60_010,
                finished(2, ok(4)),
                &["commit [answer c1 ok(4)] weir.activity.t/0=3 wa1;n=0;o="],
            ),
        ],
    );
    assert_eq!(core.gauges().parked, 0);
}

#[test]
fn a_notice_for_a_request_not_parked_changes_nothing() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, pausing()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            // Waiting for its backoff: the notice (a resume after an operator's pause) leaves
            // it at attempt 2, not before +110.
            (
                20,
                notice(1, 1),
                &["commit [] weir.activity.t/0=0 wa1;n=2;o=0:2@1767225600110"],
            ),
            (
                110,
                Input::Tick,
                &["start #1 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
        ],
    );
}

#[test]
fn a_parked_request_is_restored_parked_and_cancelled_as_any_other() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config(8, 8)).expect("valid");
    core.handle(assigned(&[(0, Some((0, "wa1;n=1;o=0!")))]), t(0));
    let mut fx = core.handle(req(0, 1, pausing()), t(0));
    fx.extend(core.handle(Input::Tick, t(100_000)));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(core.parked(&p(0)), [child(1)]);
    assert_eq!(core.gauges().parked, 1);
    let mut fx = core.handle(cancel(1, 1), t(100_001));
    fx.extend(core.handle(Input::Tick, t(100_001)));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        [format!(
            "commit [answer c1 {CANCELLED}: it was parked after its attempts were exhausted (attempt 1)] weir.activity.t/0=2 wa1;n=0;o="
        )]
    );
}

/// A parked request does not hold its partition's window: the notices behind it must be read.
#[test]
fn parked_requests_do_not_fill_the_window() {
    run(
        config(8, 1),
        vec![
            (
                0,
                req(0, 1, pausing()),
                &[
                    "start #0 weir.activity.t/0@0 attempt 1 Some(5s)",
                    "pause weir.activity.t/0",
                ],
            ),
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            (
                110,
                Input::Tick,
                &["start #1 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
            (
                120,
                finished(1, trap()),
                &[
                    "resume weir.activity.t/0 Some(1)",
                    "commit [pause parent for c1] weir.activity.t/0=0 wa1;n=1;o=0!",
                ],
            ),
        ],
    );
}

/// At most `MAX_PARKED` requests are parked on a partition (their marks must fit the offset
/// metadata): one more exhausted is answered as without the policy.
#[test]
fn a_partition_parks_at_most_its_limit() {
    let one_attempt = Serve::Wasm(RetryPolicy {
        on_exhausted: OnExhausted::Pause,
        ..policy(1)
    });
    let mut core: ActivityCore<i64> =
        ActivityCore::new(config(1, MAX_PARTITION_WINDOW)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    let mut pauses = 0;
    let mut answers = Vec::new();
    for n in 0..=MAX_PARKED as u64 {
        let mut fx = core.handle(req(n as i64, n + 1, one_attempt.clone()), t(0));
        fx.extend(core.handle(Input::Tick, t(0)));
        fx.extend(core.handle(finished(n, trap()), t(0)));
        fx.extend(core.handle(Input::Tick, t(0)));
        for e in &fx {
            if let Effect::Commit(c) = e {
                for r in &c.records {
                    match r {
                        Outgoing::Pause { .. } => pauses += 1,
                        Outgoing::Answer { response, .. } => answers.push(response.clone()),
                        Outgoing::DeadLetter { .. } => panic!("{r:?}"),
                    }
                }
                core.handle(Input::Committed, t(0));
            }
        }
    }
    assert_eq!(pauses, MAX_PARKED);
    assert_eq!(core.gauges().parked, MAX_PARKED);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(core.take_counters().park_refused, 1);
}
