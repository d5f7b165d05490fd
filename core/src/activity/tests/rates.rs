//! Rate limits ([`CoreConfig::rate_limits`]): an attempt of a rate-limited topic starts only
//! with a token of its topic's bucket; one without waits ready (it takes no slot, holds up no
//! other topic, is not lost), and `next_wake` names the instant its token comes.

use std::collections::BTreeMap;

use super::*;

/// A core of `concurrency` slots whose topic [`TOPIC`] is limited to `per_second`, `burst`.
fn limited(concurrency: usize, per_second: f64, burst: u32) -> CoreConfig {
    CoreConfig {
        rate_limits: BTreeMap::from([(TOPIC.to_owned(), RateLimit { per_second, burst })]),
        ..config(concurrency, MAX_PARTITION_WINDOW)
    }
}

fn shown(fx: &[Effect<i64>]) -> Vec<String> {
    fx.iter().map(show).collect()
}

/// Burst 2, 2 a second: two attempts at once, the third at the next token (500 ms after the
/// first), which `next_wake` names; the counter counts each delayed attempt once.
#[test]
fn a_limited_route_starts_its_burst_then_one_attempt_a_token() {
    let core = run(
        limited(8, 2.0, 2),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                0,
                req(1, 2, wasm()),
                &["start #1 weir.activity.t/0@1 attempt 1 Some(5s)"],
            ),
            // No token: it waits, ready, taking no slot.
            (0, req(2, 3, wasm()), &[]),
            (10, req(3, 4, wasm()), &[]),
            (499, Input::Tick, &[]),
            (
                500,
                Input::Tick,
                &["start #2 weir.activity.t/0@2 attempt 1 Some(5s)"],
            ),
            (
                1_000,
                Input::Tick,
                &["start #3 weir.activity.t/0@3 attempt 1 Some(5s)"],
            ),
        ],
    );
    assert_eq!(core.next_wake(), None, "nothing waits for a token");
    let mut core = core;
    let counters = core.take_counters();
    assert_eq!(counters.attempts, 4);
    assert_eq!(
        counters.rate_limited,
        BTreeMap::from([(TOPIC.to_owned(), 2)]),
        "c3 and c4 waited, each counted once however many ticks found no token"
    );
}

/// A loop that sleeps until `next_wake` (and ticks only then) starts a backlog at the rate:
/// at most `burst + rate · t` attempts by `t`, each at the instant its token comes — nothing
/// waits for a tick that never comes.
#[test]
fn driven_by_next_wake_a_backlog_starts_at_the_rate_and_nothing_is_stuck() {
    for (per_second, burst) in [(2.0, 3), (10.0, 1), (0.5, 2), (3.0, 5)] {
        let mut core = ActivityCore::new(limited(64, per_second, burst)).expect("valid");
        core.handle(assigned(&[(0, None)]), t(0));
        for n in 0..30 {
            core.handle(req(n, n as u64 + 1, wasm()), t(0));
        }
        let interval = (1e9 / per_second).ceil() as i64;
        let nanos = |at: DateTime<Utc>| (at - t(0)).num_nanoseconds().expect("nanoseconds");
        let mut now = t(0);
        let mut started: Vec<i64> = Vec::new();
        while started.len() < 30 {
            for effect in core.handle(Input::Tick, now) {
                if let Effect::Start(s) = effect {
                    started.push(nanos(now));
                    // Each attempt ends at once: the slots are never what holds them.
                    core.handle(finished(s.id.0, ok(1)), now);
                }
            }
            // Their answers commit at once.
            if core
                .handle(Input::Tick, now)
                .iter()
                .any(|e| matches!(e, Effect::Commit(_)))
            {
                core.handle(Input::Committed, now);
            }
            let taken = started.len() as f64;
            let elapsed = nanos(now) as f64 / 1e9;
            assert!(
                taken <= f64::from(burst) + per_second * elapsed + 1e-9,
                "{per_second}/s burst {burst}: {taken} started by {elapsed} s"
            );
            if started.len() == 30 {
                break;
            }
            let wake = core.next_wake().unwrap_or_else(|| {
                panic!("{per_second}/s burst {burst}: attempts wait and no wake is named")
            });
            assert!(wake > now, "{per_second}/s: a wake in the past would spin");
            now = wake;
        }
        let expected: Vec<i64> = (0..30i64)
            .map(|i| (i - i64::from(burst) + 1).max(0) * interval)
            .collect();
        assert_eq!(started, expected, "{per_second}/s burst {burst}");
    }
}

/// A retry is an attempt: its backoff over, it waits for a token too.
#[test]
fn a_retry_waits_for_a_token_too() {
    run(
        limited(8, 1.0, 1),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            // Backoff 100 ms: attempt 2 may run at +110, the next token comes at +1000.
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            (110, Input::Tick, &[]),
            (999, Input::Tick, &[]),
            (
                1_000,
                Input::Tick,
                &["start #1 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
        ],
    );
}

/// Attempts waiting for a token take no slot and hold up no other topic: an unlimited
/// topic's requests start meanwhile, oldest first as ever.
#[test]
fn attempts_waiting_for_a_token_hold_up_no_other_topic() {
    const OTHER: &str = "weir.activity.u";
    let other = |offset: i64, n: u64| -> Input<i64> {
        Input::Record(Record {
            partition: RoutePartition::new(OTHER, 0),
            offset,
            written_at: Some(t(0)),
            source: 100 + offset,
            body: Body::Request {
                request: request(n),
                serve: wasm(),
                not_before: None,
            },
        })
    };
    let mut core = ActivityCore::new(limited(2, 1.0, 1)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    core.handle(req(0, 1, wasm()), t(0));
    core.handle(req(1, 2, wasm()), t(0));
    core.handle(req(2, 3, wasm()), t(0));
    core.handle(other(0, 4), t(0));
    let fx = core.handle(Input::Tick, t(0));
    assert_eq!(
        shown(&fx),
        [
            "start #0 weir.activity.t/0@0 attempt 1 Some(5s)",
            "start #1 weir.activity.u/0@0 attempt 1 Some(5s)",
        ]
    );
    assert_eq!(core.gauges().rate_held, 2);
    assert_eq!(core.next_wake(), Some(t(1_000)), "the next token");
    // The other topic's next request takes the slot c4's answer frees.
    core.handle(other(1, 5), t(1));
    core.handle(finished(1, ok(4)), t(1));
    let fx = core.handle(Input::Tick, t(1));
    assert_eq!(
        shown(&fx),
        [
            "start #2 weir.activity.u/0@1 attempt 1 Some(5s)",
            "commit [answer c4 ok(4)] weir.activity.t/0=0 wa1;n=3;o=0,1,2 weir.activity.u/0=1 wa1;n=1;o=0"
        ]
    );
    core.handle(Input::Committed, t(1));
    // Both slots taken at the token's instant: c2 and c3 wait for a slot, not for a token
    // (an attempt's end wakes the loop).
    let fx = core.handle(Input::Tick, t(1_000));
    assert_eq!(shown(&fx), Vec::<String>::new(), "no slot free");
    assert_eq!(core.gauges().rate_held, 0);
    assert_eq!(core.next_wake(), None);
    core.handle(finished(0, ok(1)), t(1_000));
    let fx = core.handle(Input::Tick, t(1_000));
    assert_eq!(
        shown(&fx)[0],
        "start #3 weir.activity.t/0@1 attempt 1 Some(5s)"
    );
    assert_eq!(core.next_wake(), None, "c3 waits for a slot again");
}

/// A paused route's attempts wait for its resume, not for a token (no wake for them); a
/// cancellation of an attempt waiting for a token answers it `cancelled`; a take-over keeps
/// the process's bucket (no new burst); a deadline that passes while an attempt waits for a
/// token answers it `timed-out` without taking one.
#[test]
fn waiting_for_a_token_loses_nothing_and_a_take_over_gives_no_new_tokens() {
    let mut core = ActivityCore::new(limited(8, 1.0, 1)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    core.handle(req(0, 1, wasm()), t(0));
    core.handle(req(1, 2, wasm()), t(0));
    let fx = core.handle(Input::Tick, t(0));
    assert_eq!(
        shown(&fx),
        ["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"]
    );
    assert_eq!(core.next_wake(), Some(t(1_000)));
    // Paused: c2 waits for the resume.
    let fx = core.handle(paused(&[TOPIC]), t(1));
    assert_eq!(shown(&fx), ["pause weir.activity.t/0"]);
    assert_eq!(core.next_wake(), None, "a paused route waits for no token");
    let fx = core.handle(paused(&[]), t(2));
    assert_eq!(shown(&fx), ["resume weir.activity.t/0 Some(2)"]);
    assert_eq!(core.next_wake(), Some(t(1_000)));
    // Cancelled while it waits for a token: answered `cancelled`, nothing left waiting.
    core.handle(cancel(2, 2), t(3));
    let fx = core.handle(Input::Tick, t(3));
    assert_eq!(
        shown(&fx),
        [
            "commit [answer c2 CANCELLED: attempt 1 had not started] weir.activity.t/0=0 wa1;n=3;o=0"
                .replace("CANCELLED", CANCELLED)
        ]
    );
    core.handle(Input::Committed, t(3));
    // A take-over at +500 (the process's bucket is still empty): c3 waits for +1000.
    core.handle(assigned(&[(0, Some((0, "wa1;n=3;o=0")))]), t(500));
    core.handle(req(0, 1, wasm()), t(500));
    core.handle(req(3, 3, wasm()), t(500));
    let late = record(
        4,
        Body::Request {
            request: ActivityRequest {
                deadline: Some(t(800)),
                ..request(4)
            },
            serve: wasm(),
            not_before: None,
        },
    );
    core.handle(late, t(500));
    assert!(shown(&core.handle(Input::Tick, t(500))).is_empty());
    assert_eq!(core.gauges().rate_held, 3);
    // +1000: c4's deadline passed while it waited (answered without a token); c1, the oldest,
    // takes the token; c3 waits for the next.
    let fx = core.handle(Input::Tick, t(1_000));
    assert_eq!(
        shown(&fx),
        [
            "start #1 weir.activity.t/0@0 attempt 1 Some(5s)",
            "commit [answer c4 timed-out: the activity's deadline passed before attempt 1 could start] weir.activity.t/0=0 wa1;n=5;o=0,3"
        ]
    );
    assert_eq!(core.next_wake(), Some(t(2_000)));
}

/// A limit that is none is refused with its topic named.
#[test]
fn a_bad_limit_is_refused_naming_its_topic() {
    for (per_second, burst) in [
        (0.0, 1),
        (-2.0, 1),
        (f64::NAN, 1),
        (f64::INFINITY, 3),
        (1.0, 0),
    ] {
        let error =
            ActivityCore::<i64>::new(limited(1, per_second, burst)).expect_err("an invalid limit");
        assert!(
            matches!(&error, ActivitySettingsError::Rate { topic, .. } if topic == TOPIC),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("the rate limit of route topic `weir.activity.t`"),
            "{error}"
        );
    }
}
