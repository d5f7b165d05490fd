//! The core's rules, table-style: inputs in (each at an instant), effects out, rendered as
//! short lines (`start #0 t/0@3 attempt 1`, `commit [answer c3 ok: 7] t/0=4 wa1;n=0;o=`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::*;
use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionId, JoinSetId};

mod outcomes;
mod parking;
mod rates;

const TOPIC: &str = "weir.activity.t";

fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
}

fn parent() -> ExecutionId {
    ExecutionId::top_level(ulid::Ulid::from_parts(1, 1))
}

/// Child `n` of the parent.
fn child(n: u64) -> ExecutionId {
    parent().child(&JoinSetId::one_off(n, "a").expect("a join set"), 1)
}

fn p(partition: i32) -> RoutePartition {
    RoutePartition::new(TOPIC, partition)
}

fn policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        backoff_base: Duration::from_millis(100),
        backoff_max: Duration::from_secs(10),
        jitter: 0.0,
        retry_on_err: false,
        on_exhausted: crate::retry::OnExhausted::Answer,
    }
}

fn wasm() -> Serve {
    Serve::Wasm(policy(3))
}

fn request(n: u64) -> ActivityRequest {
    ActivityRequest {
        execution_id: child(n),
        parent_execution_id: parent(),
        ffqn: "t:a/b.c".parse().expect("ffqn"),
        params: json!([n]),
        attempt: 1,
        timeout_millis: Some(5_000),
        deadline: None,
    }
}

/// A record of partition 0 (its source is its offset), written at t(0).
fn record(offset: i64, body: Body) -> Input<i64> {
    Input::Record(Record {
        partition: p(0),
        offset,
        written_at: Some(t(0)),
        source: offset,
        body,
    })
}

/// Request of child `n` at `offset`.
fn req(offset: i64, n: u64, serve: Serve) -> Input<i64> {
    record(
        offset,
        Body::Request {
            request: request(n),
            serve,
            not_before: None,
        },
    )
}

fn cancel(offset: i64, n: u64) -> Input<i64> {
    record(
        offset,
        Body::Cancel(ActivityCancel {
            execution_id: child(n),
            parent_execution_id: parent(),
            cancelled_at: t(0),
        }),
    )
}

fn finished(id: u64, result: ExecutionResult) -> Input<i64> {
    Input::AttemptFinished {
        id: AttemptId(id),
        result,
        jitter: 0.5,
    }
}

fn ok(v: i64) -> ExecutionResult {
    ExecutionResult::Ok(json!(v))
}

fn trap() -> ExecutionResult {
    ExecutionResult::ExecutionError(ExecutionError::new(ExecutionErrorKind::Trap, "boom"))
}

fn assigned(committed: &[(i32, Option<(i64, &str)>)]) -> Input<i64> {
    Input::Assigned(
        committed
            .iter()
            .map(|(partition, c)| {
                (
                    p(*partition),
                    c.map(|(offset, metadata)| Committed {
                        offset,
                        metadata: metadata.to_owned(),
                    }),
                )
            })
            .collect(),
    )
}

/// The child number of an id made by [`child`].
fn n_of(id: &ExecutionId) -> String {
    (1..100)
        .find(|n| child(*n) == *id)
        .map_or_else(|| id.to_string(), |n| format!("c{n}"))
}

fn show(effect: &Effect<i64>) -> String {
    match effect {
        Effect::Seek { partition, offset } => format!("seek {partition} {offset:?}"),
        Effect::Start(s) => format!(
            "start {} {}@{} attempt {} {:?}",
            s.id, s.partition, s.offset, s.attempt, s.timeout
        ),
        Effect::CheckService {
            id,
            partition,
            offset,
            group,
        } => format!("check {id} {partition}@{offset} {group}"),
        Effect::Abort { id } => format!("abort {id}"),
        Effect::Pause { partition } => format!("pause {partition}"),
        Effect::Resume { partition, from } => format!("resume {partition} {from:?}"),
        Effect::Commit(c) => {
            let records: Vec<String> = c
                .records
                .iter()
                .map(|r| match r {
                    Outgoing::Answer {
                        parent: to,
                        response:
                            Response::ChildExecutionFinished {
                                child_execution_id,
                                result,
                                ..
                            },
                        ..
                    } if *to == parent() => {
                        format!("answer {} {result}", n_of(child_execution_id))
                    }
                    Outgoing::Answer { .. } => "answer ?".to_owned(),
                    Outgoing::DeadLetter { source, reason, .. } => {
                        format!("dead @{source} {reason:?}")
                    }
                    Outgoing::Pause {
                        request, activity, ..
                    } if request.execution_id == parent()
                        && request.action == crate::records::PauseAction::Pause =>
                    {
                        format!("pause parent for {}", n_of(activity))
                    }
                    Outgoing::Pause { .. } => "pause ?".to_owned(),
                })
                .collect();
            let progress: Vec<String> = c
                .progress
                .iter()
                .map(|(k, p)| format!("{k}={} {}", p.frontier, p.metadata()))
                .collect();
            format!("commit [{}] {}", records.join(", "), progress.join(" "))
        }
    }
}

/// What a cancellation says (the parent's id, then what it stopped).
const CANCELLED: &str =
    "cancelled: cancelled by its parent E_00000000010000000000000001 (its join set was closed)";

/// What an external request's time-out says.
const TIMED_OUT: &str = "timed-out: the external service of t:a/b.c did not answer by the deadline 2026-01-01T00:00:02.000Z";

fn config(concurrency: usize, window: usize) -> CoreConfig {
    CoreConfig {
        settings: ActivitySettings {
            concurrency,
            partition_window: window,
            unknown_grace: Duration::from_secs(60),
        },
        commit_interval: Duration::ZERO,
        max_batch: 100,
        rate_limits: std::collections::BTreeMap::new(),
    }
}

/// [`config`] with a commit interval of 10 ms.
fn config_10ms(concurrency: usize, window: usize) -> CoreConfig {
    CoreConfig {
        commit_interval: Duration::from_millis(10),
        ..config(concurrency, window)
    }
}

/// One row: at `ms`, this input, these effects (rendered).
type Step = (i64, Input<i64>, &'static [&'static str]);

/// Runs the steps in order against a core with `config` that owns partition 0 from offset 0
/// (nothing committed); every step is followed by a tick at the same instant (whose effects
/// are part of the row), and a commit is reported committed at once. (With [`config`], what
/// is finished commits at the tick of the same instant.)
fn run(config: CoreConfig, steps: Vec<Step>) -> ActivityCore<i64> {
    let mut core = ActivityCore::new(config).expect("valid settings");
    let seek = core.handle(assigned(&[(0, None)]), t(0));
    assert_eq!(
        seek.iter().map(show).collect::<Vec<_>>(),
        ["seek weir.activity.t/0 None"]
    );
    for (i, (ms, input, expected)) in steps.into_iter().enumerate() {
        let mut fx = core.handle(input, t(ms));
        fx.extend(core.handle(Input::Tick, t(ms)));
        let shown: Vec<String> = fx.iter().map(show).collect();
        let expected: Vec<String> = expected
            .iter()
            .map(|e| {
                e.replace("CANCELLED", CANCELLED)
                    .replace("TIMED_OUT", TIMED_OUT)
            })
            .collect();
        assert_eq!(shown, expected, "step {i} at +{ms} ms");
        if fx.iter().any(|e| matches!(e, Effect::Commit(_))) {
            assert!(core.handle(Input::Committed, t(ms)).is_empty());
        }
    }
    core
}

#[test]
fn an_attempt_answers_its_parent_in_a_commit_with_the_progress() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                1,
                req(1, 2, wasm()),
                &["start #1 weir.activity.t/0@1 attempt 1 Some(5s)"],
            ),
            // The second finishes first: the frontier stays at the first, the metadata lists it.
            (
                5,
                finished(1, ok(5)),
                &["commit [answer c2 ok(5)] weir.activity.t/0=0 wa1;n=2;o=0"],
            ),
            (
                20,
                finished(0, ok(3)),
                &["commit [answer c1 ok(3)] weir.activity.t/0=2 wa1;n=0;o="],
            ),
            // A result that comes again (a task reporting twice) is ignored.
            (31, finished(0, ok(3)), &[]),
            (60, Input::Tick, &[]),
        ],
    );
}

#[test]
fn answers_wait_for_the_commit_interval_and_commit_together() {
    run(
        config_10ms(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (
                1,
                req(1, 2, wasm()),
                &["start #1 weir.activity.t/0@1 attempt 1 Some(5s)"],
            ),
            (5, finished(1, ok(5)), &[]),
            (14, finished(0, ok(3)), &[]),
            (
                15,
                Input::Tick,
                &["commit [answer c2 ok(5), answer c1 ok(3)] weir.activity.t/0=2 wa1;n=0;o="],
            ),
        ],
    );
}

#[test]
fn a_failed_attempt_is_retried_durably_at_its_not_before() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, wasm()),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            // Backoff 100 ms: attempt 2 not before +110, recorded in the metadata.
            (
                10,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:2@1767225600110"],
            ),
            (109, Input::Tick, &[]),
            (
                110,
                Input::Tick,
                &["start #1 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
            // Then 200 ms: attempt 3 at +510; the last one fails: retries exhausted.
            (
                310,
                finished(1, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=1;o=0:3@1767225600510"],
            ),
            (
                510,
                Input::Tick,
                &["start #2 weir.activity.t/0@0 attempt 3 Some(5s)"],
            ),
            (
                600,
                finished(2, trap()),
                &[
                    "commit [answer c1 retries-exhausted: 3 attempts failed; the last one: trap: boom] weir.activity.t/0=1 wa1;n=0;o=",
                ],
            ),
        ],
    );
}

#[test]
fn a_later_attempt_from_a_workflow_worker_waits_for_its_not_before_header() {
    let retry = record(
        0,
        Body::Request {
            request: ActivityRequest {
                attempt: 2,
                ..request(1)
            },
            serve: wasm(),
            not_before: Some(t(500)),
        },
    );
    let core = run(
        config(8, 8),
        vec![
            (0, retry, &[]),
            (499, Input::Tick, &[]),
            (
                500,
                Input::Tick,
                &["start #0 weir.activity.t/0@0 attempt 2 Some(5s)"],
            ),
        ],
    );
    assert_eq!(core.unfinished(&p(0)), [(0, child(1), 2, true)]);
}

#[test]
fn a_take_over_resumes_from_the_committed_progress() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config(8, 8)).expect("valid");
    // 10 is unfinished at its first attempt, 12 waits for attempt 2 until +700; 11, 13 are
    // finished; 14 was not read.
    let fx = core.handle(
        assigned(&[(0, Some((10, "wa1;n=4;o=0,2:2@1767225600700")))]),
        t(0),
    );
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["seek weir.activity.t/0 Some(10)"]
    );
    let mut fx = Vec::new();
    for (offset, n) in [(9, 9), (10, 1), (11, 2), (12, 3), (13, 4), (14, 5)] {
        fx.extend(core.handle(req(offset, n, wasm()), t(0)));
    }
    fx.extend(core.handle(Input::Tick, t(0)));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        [
            "start #0 weir.activity.t/0@10 attempt 1 Some(5s)",
            "start #1 weir.activity.t/0@14 attempt 1 Some(5s)"
        ]
    );
    assert_eq!(
        core.unfinished(&p(0))
            .iter()
            .map(|(o, _, a, r)| (*o, *a, *r))
            .collect::<Vec<_>>(),
        [(10, 1, true), (12, 2, false), (14, 1, true)]
    );
    let fx = core.handle(Input::Tick, t(700));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["start #2 weir.activity.t/0@12 attempt 2 Some(5s)"]
    );
}

#[test]
fn metadata_not_ours_runs_everything_from_the_frontier_again() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config(8, 8)).expect("valid");
    core.handle(assigned(&[(0, Some((3, "someone else's")))]), t(0));
    core.handle(req(2, 1, wasm()), t(0));
    core.handle(req(3, 2, wasm()), t(0));
    core.handle(req(4, 3, wasm()), t(0));
    let offsets: Vec<i64> = core.unfinished(&p(0)).iter().map(|u| u.0).collect();
    assert_eq!(offsets, [3, 4], "2 is before the committed offset");
}

#[test]
fn a_revoke_aborts_what_runs_and_forgets_what_is_not_committed() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config(8, 1)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    core.handle(req(0, 1, wasm()), t(0));
    let fx = core.handle(Input::Tick, t(0));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        [
            "start #0 weir.activity.t/0@0 attempt 1 Some(5s)",
            "pause weir.activity.t/0"
        ]
    );
    core.handle(finished(0, ok(1)), t(1));
    assert!(core.dirty());
    let fx = core.handle(Input::Revoked, t(2));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["resume weir.activity.t/0 None"]
    );
    assert!(!core.dirty(), "the answer not committed is forgotten");
    // Taken over again: the request runs again as a new attempt id; an old id is ignored.
    core.handle(assigned(&[(0, None)]), t(3));
    core.handle(req(0, 1, wasm()), t(3));
    let fx = core.handle(Input::Tick, t(3));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        [
            "start #1 weir.activity.t/0@0 attempt 1 Some(5s)",
            "pause weir.activity.t/0"
        ]
    );
    core.handle(finished(0, ok(1)), t(4));
    assert_eq!(core.unfinished(&p(0)), [(0, child(1), 1, true)]);
    let fx = core.handle(Input::Revoked, t(5));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["abort #1", "resume weir.activity.t/0 None"]
    );
}

#[test]
fn no_second_commit_while_one_is_in_flight() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config_10ms(8, 8)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    core.handle(req(0, 1, wasm()), t(0));
    core.handle(req(1, 2, wasm()), t(0));
    core.handle(Input::Tick, t(0));
    core.handle(finished(0, ok(1)), t(1));
    let fx = core.handle(Input::Tick, t(20));
    assert!(matches!(fx.as_slice(), [Effect::Commit(_)]));
    core.handle(finished(1, ok(2)), t(21));
    assert!(core.handle(Input::Tick, t(40)).is_empty(), "in flight");
    core.handle(Input::Committed, t(41));
    let fx = core.handle(Input::Tick, t(42));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["commit [answer c2 ok(2)] weir.activity.t/0=2 wa1;n=0;o="]
    );
    core.handle(Input::Committed, t(43));
    assert!(
        core.handle(Input::Flush { interrupt: false }, t(44))
            .is_empty()
    );
}

#[test]
fn a_flush_commits_at_once_and_may_interrupt_what_runs() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config(8, 8)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    core.handle(req(0, 1, wasm()), t(0));
    core.handle(req(1, 2, wasm()), t(0));
    core.handle(Input::Tick, t(0));
    core.handle(finished(1, ok(2)), t(1));
    let fx = core.handle(Input::Flush { interrupt: true }, t(2));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        [
            "abort #0",
            "commit [answer c2 ok(2)] weir.activity.t/0=0 wa1;n=2;o=0"
        ]
    );
    assert_eq!(core.gauges().running, 0);
}

#[test]
fn the_next_wake_is_the_first_thing_waited_for() {
    let mut core: ActivityCore<i64> = ActivityCore::new(config_10ms(8, 8)).expect("valid");
    core.handle(assigned(&[(0, None)]), t(0));
    assert_eq!(core.next_wake(), None);
    core.handle(req(0, 1, Serve::Unknown), t(0));
    assert_eq!(core.next_wake(), Some(t(60_000)));
    core.handle(req(1, 2, wasm()), t(0));
    core.handle(Input::Tick, t(0));
    core.handle(finished(0, trap()), t(5));
    assert_eq!(core.next_wake(), Some(t(15)), "the commit");
    core.handle(Input::Tick, t(15));
    core.handle(Input::Committed, t(15));
    assert_eq!(core.next_wake(), Some(t(105)), "the retry");
    assert_eq!(
        core.gauges(),
        Gauges {
            running: 0,
            waiting: 2,
            paused: 0,
            parked: 0,
            rate_held: 0
        }
    );
    let counters = core.take_counters();
    assert_eq!(
        (
            counters.attempts,
            counters.retries_scheduled,
            counters.unknown_requests
        ),
        (1, 1, 1)
    );
    assert_eq!(core.take_counters(), Counters::default());
}

#[test]
fn settings_are_validated() {
    let ok = config(1, 1).settings;
    assert_eq!(ok.validate(), Ok(()));
    let none = ActivitySettings {
        concurrency: 0,
        ..ok.clone()
    };
    assert_eq!(none.validate(), Err(ActivitySettingsError::NoConcurrency));
    let wide = ActivitySettings {
        partition_window: MAX_PARTITION_WINDOW + 1,
        ..ok
    };
    assert_eq!(
        wide.validate(),
        Err(ActivitySettingsError::Window(MAX_PARTITION_WINDOW + 1))
    );
    assert!(
        ActivityCore::<()>::new(CoreConfig {
            settings: wide_settings(),
            ..config(1, 1)
        })
        .is_err()
    );
}

fn wide_settings() -> ActivitySettings {
    ActivitySettings {
        partition_window: 0,
        ..config(1, 1).settings
    }
}

fn paused(topics: &[&str]) -> Input<i64> {
    Input::TopicsPaused(topics.iter().map(|t| (*t).to_owned()).collect())
}

/// A paused route (`weir route pause`): its partitions are not fetched and no attempt of it
/// starts — a running one goes on and answers, a new request and a retry wait — until it is
/// resumed; then they start and the partition is fetched again from the next record.
#[test]
fn a_paused_route_starts_nothing_until_resumed() {
    run(
        config(8, 8),
        vec![
            (
                0,
                req(0, 1, Serve::Wasm(policy(2))),
                &["start #0 weir.activity.t/0@0 attempt 1 Some(5s)"],
            ),
            (1, paused(&[TOPIC]), &["pause weir.activity.t/0"]),
            // Read before the pause took effect: kept, not started.
            (2, req(1, 2, wasm()), &[]),
            // The running attempt fails: its retry waits for the route too.
            (
                3,
                finished(0, trap()),
                &["commit [] weir.activity.t/0=0 wa1;n=2;o=0:2@1767225600103,1"],
            ),
            (200, Input::Tick, &[]),
            // Another route paused: this one still is.
            (201, paused(&[TOPIC, "weir.activity.other"]), &[]),
            (
                300,
                paused(&["weir.activity.other"]),
                &[
                    "resume weir.activity.t/0 Some(2)",
                    "start #1 weir.activity.t/0@0 attempt 2 Some(5s)",
                    "start #2 weir.activity.t/0@1 attempt 1 Some(5s)",
                ],
            ),
        ],
    );
}

/// A take-over of a paused route's partition pauses its fetch at once, after the seek.
#[test]
fn a_paused_route_taken_over_is_not_fetched() {
    let mut core = ActivityCore::new(config(8, 8)).expect("valid settings");
    assert!(core.handle(paused(&[TOPIC]), t(0)).is_empty());
    let fx = core.handle(assigned(&[(0, None)]), t(0));
    assert_eq!(
        fx.iter().map(show).collect::<Vec<_>>(),
        ["seek weir.activity.t/0 None", "pause weir.activity.t/0"]
    );
}
