//! Issue 35 item 4 on the real stack: concurrency keys given at submission and functions'
//! limits (`max_running` in `components.toml`), enforced by the owners of their slots.
//!
//! - Three `sleepy` executions submitted with one concurrency key (limit 1) by `weir submit
//!   --concurrency-key`: while the first runs the others are `queued`; they run one at a
//!   time (no two between their grant and their finish at once), granted in the order they
//!   were created.
//! - A function limited to two (`max_running = 2`), five executions, the worker killed
//!   (`kill -9`) while some wait: after the restart all five finish once, never more than
//!   two at a time.
//! - Bad input: a limit of 0, a limit without a key (the CLI), a key that is not one (a raw
//!   Kafka record: dead-lettered with why).
//!
//! The rules are the processor's tests (`core/tests/processor/concurrency.rs`) and the
//! simulation's class `concurrency`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use weir::codec::{Codec, HistoryEntry, HistoryRecord, Submission};
use weir::concurrency::{ConcurrencyKey, Slot};
use weir::model::{ExecutionId, Ffqn};
use weir::store::{ExecutionState, Store};
use weir::topology::TopicRole;
use weir_e2e::cli::{failed, succeeded, weir};
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_for;

const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
const TIMEOUT: Duration = Duration::from_secs(120);

/// When an execution held its last slot and when it finished, by its history's own times.
fn ran(history: &[HistoryRecord]) -> (DateTime<Utc>, DateTime<Utc>) {
    let granted = history
        .iter()
        .filter(|r| matches!(r.entry, HistoryEntry::SlotGranted { .. }))
        .filter_map(|r| r.at)
        .max()
        .expect("a SlotGranted entry with its time");
    let finished = history
        .iter()
        .find_map(|r| match &r.entry {
            HistoryEntry::Finished { finished_at, .. } => Some(*finished_at),
            _ => None,
        })
        .expect("Finished");
    (granted, finished)
}

/// The most intervals that overlap at one instant.
fn most_at_once(intervals: &[(DateTime<Utc>, DateTime<Utc>)]) -> usize {
    intervals
        .iter()
        .map(|(start, _)| {
            intervals
                .iter()
                .filter(|(s, f)| s <= start && start < f)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_concurrency_key_runs_one_at_a_time_in_the_order_they_came() {
    let deployment = Deployment::new("concurrency_key");
    let _worker = deployment.start_worker("w", &[]);
    let store = deployment.store().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let out = succeeded(&weir(
            &deployment,
            &[
                "submit",
                SLEEP_FOR,
                "[2500]",
                "--concurrency-key",
                "customer-42",
            ],
        ));
        let id: ExecutionId = out.trim().parse().expect("the id printed");
        ids.push(id);
    }
    // While one runs, the others wait, queued, and run no code.
    wait_for("two executions queued", TIMEOUT, || async {
        let mut queued = 0;
        for id in &ids {
            if let Ok(Some(row)) = store.execution(id).await
                && row.state == ExecutionState::Queued
            {
                queued += 1;
            }
        }
        (queued == 2).then_some(())
    })
    .await;
    // `weir list` reads the list (`executions_by_function`), written apart from the rows
    // read above: it shows the two waiting once it has caught up (a CI run read it between).
    wait_for(
        "weir list --state queued shows the two waiting",
        TIMEOUT,
        || async {
            let listed = succeeded(&weir(
                &deployment,
                &["list", "--function", SLEEP_FOR, "--state", "queued"],
            ));
            let shown = ids
                .iter()
                .filter(|id| listed.contains(&id.to_string()))
                .count();
            (shown == 2).then_some(())
        },
    )
    .await;

    let mut histories = Vec::new();
    for id in &ids {
        histories.push(deployment.finished_history(&store, id).await);
    }
    let key = Slot::Key("customer-42".into());
    for (id, history) in ids.iter().zip(&histories) {
        let granted: Vec<&Slot> = history
            .iter()
            .filter_map(|r| match &r.entry {
                HistoryEntry::SlotGranted { slot } => Some(slot),
                _ => None,
            })
            .collect();
        assert_eq!(granted, vec![&key], "{id}: held its key once");
        let first_step = history
            .iter()
            .position(|r| matches!(r.entry, HistoryEntry::Event { .. }))
            .expect("it ran");
        let grant = history
            .iter()
            .position(|r| matches!(r.entry, HistoryEntry::SlotGranted { .. }))
            .expect("granted");
        assert!(
            grant < first_step,
            "{id}: no code before its grant: {history:?}"
        );
    }
    let intervals: Vec<_> = histories.iter().map(|h| ran(h)).collect();
    assert_eq!(
        most_at_once(&intervals),
        1,
        "one at a time per key: {intervals:?}"
    );
    // Granted in the order their owner created them (one worker: the order it asked the
    // key); executions created by one batch share its time and may come in any order.
    let created_at = |h: &[HistoryRecord]| match &h[0].entry {
        HistoryEntry::Created(c) => c.created_at,
        other => panic!("not Created: {other:?}"),
    };
    for i in 0..3 {
        for j in 0..3 {
            if created_at(&histories[i]) < created_at(&histories[j]) {
                assert!(
                    intervals[i].0 < intervals[j].0,
                    "{} was created before {} and granted after it",
                    ids[i],
                    ids[j]
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_limit_holds_across_a_kill_and_every_execution_finishes_once() {
    let deployment = Deployment::new("concurrency_fn");
    let components = deployment.components_with("limited", |text| {
        text.replace(
            "name = \"sleepy\"\n",
            "name = \"sleepy\"\nmax_running = 2\n",
        )
    });
    let components = components.to_str().expect("a UTF-8 path").to_owned();
    let env = [("WEIR_COMPONENTS", components.as_str())];
    let worker = deployment.start_worker_with_env("w", &[], &env);
    let producer = deployment.producer();
    let store = deployment.store().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(deployment.submit(&producer, SLEEP_FOR, json!([1500])).await);
    }
    // Two run, three wait: then the worker dies.
    wait_for("three executions queued", TIMEOUT, || async {
        let mut queued = 0;
        for id in &ids {
            if let Ok(Some(row)) = store.execution(id).await
                && row.state == ExecutionState::Queued
            {
                queued += 1;
            }
        }
        (queued == 3).then_some(())
    })
    .await;
    let mut worker = worker;
    worker.signal("KILL");
    let _ = worker.child.wait();
    let _restarted = deployment.start_worker_with_env("w", &[], &env);

    let mut intervals = Vec::new();
    for id in &ids {
        let history = deployment.finished_history(&store, id).await;
        let finishes = history
            .iter()
            .filter(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
            .count();
        assert_eq!(finishes, 1, "{id}: finished once");
        let ffqn: Ffqn = SLEEP_FOR.parse().expect("ffqn");
        assert!(
            history.iter().any(|r| matches!(&r.entry, HistoryEntry::SlotGranted { slot } if *slot == Slot::Function(ffqn.clone()))),
            "{id}: held its function's slot"
        );
        intervals.push(ran(&history));
    }
    assert_eq!(
        most_at_once(&intervals),
        2,
        "at most two at a time, and two did run together: {intervals:?}"
    );
    // One result each (`results` fails on a duplicate).
    let results = deployment.results(&ids, TIMEOUT);
    assert_eq!(results.len(), ids.len(), "{results:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_concurrency_keys_and_limits_are_refused_with_why() {
    let deployment = Deployment::new("concurrency_bad");
    let zero = failed(&weir(
        &deployment,
        &[
            "submit",
            SLEEP_FOR,
            "[1]",
            "--concurrency-key",
            "k",
            "--concurrency-limit",
            "0",
        ],
    ));
    assert!(zero.contains("limit 0 of key `k`"), "{zero}");
    let no_key = failed(&weir(
        &deployment,
        &["submit", SLEEP_FOR, "[1]", "--concurrency-limit", "3"],
    ));
    assert!(no_key.contains("--concurrency-key"), "{no_key}");
    let spaced = failed(&weir(
        &deployment,
        &["submit", SLEEP_FOR, "[1]", "--concurrency-key", "a b"],
    ));
    assert!(spaced.contains("`a b`"), "{spaced}");

    // From any Kafka client: the record is dead-lettered with why, and nothing is created.
    let _worker = deployment.start_worker("w", &[]);
    let producer = deployment.producer();
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let submission = Submission {
        concurrency: Some(ConcurrencyKey {
            key: "a b".into(),
            limit: None,
        }),
        ..Submission::top_level(
            &id,
            SLEEP_FOR.parse().expect("ffqn"),
            json!([1]),
            Default::default(),
            None,
        )
    };
    let topic = deployment.topic(TopicRole::Submissions);
    weir::kafka::submit::submit(&producer, &Codec::single_object(), &topic, &submission)
        .await
        .expect("sent");
    let letter = wait_for("the record dead-lettered", TIMEOUT, || async {
        deployment
            .dead_letters_from(&topic, Duration::from_secs(5))
            .into_iter()
            .find(|l| l.key.as_deref() == Some(id.to_string().as_bytes()))
    })
    .await;
    assert!(
        letter.error.contains("`a b`"),
        "dead-lettered with why: {letter:?}"
    );
    let store = deployment.store().await;
    assert!(store.execution(&id).await.expect("read").is_none());
}
