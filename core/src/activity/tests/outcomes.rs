//! The rules of a request's outcomes other than an attempt's answer: cancellations, the
//! unknown-function grace, external deadlines and services, dead letters, flow control,
//! deadlines.

use std::time::Duration;

use super::*;

#[test]
fn a_cancel_stops_a_running_attempt_and_answers_cancelled_once() {
    let core = run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                5,
                cancel(1, 1),
                &[
                    "abort #0",
                    "commit [answer c1 CANCELLED: attempt 1 was interrupted after 5ms] weir.activity.t/0=2 wa1;n=0;o=",
                ],
            ),
            // The aborted attempt's result, if it still comes, is ignored.
            (6, finished(0, ok(3)), &[]),
            (20, Input::Tick, &[]),
            // A cancel of an activity answered already: nothing (it is finished as a record).
            (
                21,
                cancel(2, 1),
                &["commit [] weir.activity.t/0=3 wa1;n=0;o="],
            ),
        ],
    );
    assert_eq!(core.gauges(), Gauges::default());
}

#[test]
fn a_cancel_drops_a_waiting_retry() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            (
                20,
                cancel(1, 1),
                &[
                    "commit [answer c1 CANCELLED: attempt 2 was waiting for its backoff (due 2026-01-01T00:00:00.110Z): dropped] weir.activity.t/0=2 wa1;n=0;o=",
                ],
            ),
            (200, Input::Tick, &[]),
        ],
    );
}

#[test]
fn an_answer_that_finished_first_wins_over_a_cancel() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                5,
                finished(0, ok(3)),
                &["commit [answer c1 ok(3)] weir.activity.t/0=1 wa1;n=0;o="],
            ),
            (
                6,
                cancel(1, 1),
                &["commit [] weir.activity.t/0=2 wa1;n=0;o="],
            ),
        ],
    );
}

#[test]
fn an_unknown_function_waits_its_grace_then_is_answered() {
    let core = run(
        config(8, 8),
        vec![
            (0, req(0, 1, Serve::Unknown), &[]),
            (59_999, Input::Tick, &[]),
            (
                60_000,
                Input::Tick,
                &[
                    "commit [answer c1 unknown-function: no activity worker ran t:a/b.c within 60s of the request (2026-01-01T00:00:00.000Z): no registered component exports it] weir.activity.t/0=1 wa1;n=0;o=",
                ],
            ),
        ],
    );
    assert!(core.unfinished(&p(0)).is_empty());
}

#[test]
fn an_external_request_is_answered_timed_out_at_its_deadline() {
    let external = Serve::External {
        service_group: None,
        timeout: Some(Duration::from_secs(2)),
    };
    run(
        config(8, 8),
        vec![
            (0, req(0, 1, external), &[]),
            (1_999, Input::Tick, &[]),
            (
                2_000,
                Input::Tick,
                &["commit [answer c1 TIMED_OUT] weir.activity.t/0=1 wa1;n=0;o="],
            ),
        ],
    );
}

#[test]
fn an_external_service_that_committed_past_is_not_answered_again() {
    let external = || Serve::External {
        service_group: Some("svc".to_owned()),
        timeout: Some(Duration::from_secs(2)),
    };
    let check = |id, check| Input::ServiceChecked {
        id: AttemptId(id),
        check,
    };
    run(
        config(8, 8),
        vec![
            (0, req(0, 1, external()), &[]),
            (1, req(1, 2, external()), &[]),
            (
                2_000,
                Input::Tick,
                &[
                    "check #0 weir.activity.t/0@0 svc",
                    "check #1 weir.activity.t/0@1 svc",
                ],
            ),
            // Unreachable: asked again a second later.
            (2_001, check(0, ServiceCheck::Unavailable), &[]),
            (
                2_002,
                check(1, ServiceCheck::NotAnswered),
                &["commit [answer c2 TIMED_OUT] weir.activity.t/0=0 wa1;n=2;o=0"],
            ),
            (3_000, Input::Tick, &[]),
            (3_001, Input::Tick, &["check #2 weir.activity.t/0@0 svc"]),
            (
                3_002,
                check(2, ServiceCheck::Answered),
                &["commit [] weir.activity.t/0=2 wa1;n=0;o="],
            ),
        ],
    );
}

#[test]
fn a_cancelled_external_request_answers_nothing() {
    let external = Serve::External {
        service_group: None,
        timeout: None,
    };
    run(
        config(8, 8),
        vec![
            (0, req(0, 1, external), &[]),
            (
                5,
                cancel(1, 1),
                &["commit [] weir.activity.t/0=2 wa1;n=0;o="],
            ),
            (120_000, Input::Tick, &[]),
        ],
    );
}

#[test]
fn undecodable_records_are_dead_lettered_in_order() {
    let bad = |offset| {
        record(
            offset,
            Body::Undecodable {
                reason: DlqReason::Undecodable,
                error: "bad".to_owned(),
            },
        )
    };
    run(
        config(8, 8),
        vec![
            (
                0,
                bad(0),
                &["commit [dead @0 Undecodable] weir.activity.t/0=1 wa1;n=0;o="],
            ),
            (
                1,
                req(1, 1, wasm()),
                &["start #0 weir.activity.t/0@1 attempt 1 Some(5s)"],
            ),
            (
                2,
                bad(2),
                &["commit [dead @2 Undecodable] weir.activity.t/0=1 wa1;n=2;o=0"],
            ),
        ],
    );
}

#[test]
fn a_full_window_pauses_its_partition_until_one_finishes() {
    run(
        config(1, 2),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            // One slot: the second waits for it; two unfinished fill the window.
            (1, req(1, 2, wasm()), &["pause weir.activity.t/0"]),
            // Delivered again (fetched before the pause): skipped.
            (2, req(1, 2, wasm()), &[]),
            (
                3,
                finished(0, ok(3)),
                &[
                    "start #1 weir.activity.t/0@1 attempt 1 Some(5s)",
                    "resume weir.activity.t/0 Some(2)",
                    "commit [answer c1 ok(3)] weir.activity.t/0=1 wa1;n=1;o=0",
                ],
            ),
        ],
    );
}

#[test]
fn a_deadline_past_before_the_attempt_starts_answers_timed_out() {
    let late = record(
        0,
        Body::Request {
            request: ActivityRequest {
                deadline: Some(t(100)),
                ..request(1)
            },
            serve: wasm(),
            not_before: Some(t(100)),
        },
    );
    run(
        config(8, 8),
        vec![
            (0, late, &[]),
            (
                100,
                Input::Tick,
                &[
                    "commit [answer c1 timed-out: the activity's deadline passed before attempt 1 could start] weir.activity.t/0=1 wa1;n=0;o=",
                ],
            ),
        ],
    );
}

#[test]
fn the_deadline_bounds_an_attempt_and_its_retries() {
    let bounded = record(
        0,
        Body::Request {
            request: ActivityRequest {
                deadline: Some(t(1_050)),
                ..request(1)
            },
            serve: wasm(),
            not_before: None,
        },
    );
    run(
        config(8, 8),
        vec![
            (
                0,
                bounded,
                &["start #0 weir.activity.t/0@0 attempt 1 Some(1.05s)"],
            ),
            // The retry would start at +1 100, past the deadline: the error is the answer.
            (
                1_000,
                finished(0, trap()),
                &[
                    "commit [answer c1 timed-out: the deadline 2026-01-01T00:00:01.050Z leaves no time for another attempt after 1; the last one: trap: boom] weir.activity.t/0=1 wa1;n=0;o=",
                ],
            ),
        ],
    );
}
