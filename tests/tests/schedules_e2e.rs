//! Issue 13 item 7 on the real stack: recurring schedules, made with `weir schedule`.
//!
//! - An every-second schedule (overlap `allow`) ticks while its worker is killed -9 and a new
//!   one takes over: every second from the first tick to the last has exactly one submission
//!   and one result (none missed, none doubled), and `weir schedule list` counts them.
//! - Overlap `skip` with a workflow that waits for an event: while it waits, ticks are skipped;
//!   once the event finishes it, the schedule hears (its run finished) and the next tick starts
//!   again. Pause stops the ticks, resume goes on, delete removes the schedule.
//! - A schedule declared in `topology/schedules.toml` is sent by `weir topology apply` and
//!   ticks; applying again keeps its generation (the same tick ids).
//! - A worker killed inside the transaction of a schedule's create loses nothing (restarted,
//!   it reads the create again), and the dead transaction holds up no `weir schedule list`.
//!
//! The tick rules (time zones, DST, catch-up, overlap) are `weir_core::schedule`'s table
//! tests; ownership and crashes are the simulation's class `schedules`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use weir::codec::{ExecutionFinished, Submission};
use weir::model::ExecutionResult;
use weir::schedule::{METADATA_SCHEDULE, METADATA_TICK};
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_until;

const GREET: &str = "weir-examples:workflows/hello.greet";
const APPROVAL: &str = "weir-examples:workflows/approval-event.await-approval";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `weir <args>` for the deployment; its stdout, or the test fails with its stderr.
fn weir(deployment: &Deployment, args: &[&str]) -> String {
    let output = deployment.command().args(args).output().expect("run weir");
    assert!(
        output.status.success(),
        "weir {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The schedule `name` as `weir schedule list --json` shows it.
fn listed(deployment: &Deployment, name: &str) -> Option<Value> {
    let out = weir(deployment, &["schedule", "list", "--json"]);
    let all: Vec<Value> = serde_json::from_str(&out).expect("list --json is JSON");
    all.into_iter().find(|s| s["name"] == name)
}

fn tick_of(value: &Value, field: &str) -> Option<DateTime<Utc>> {
    value[field].as_str().map(|t| {
        DateTime::parse_from_rfc3339(t)
            .expect("RFC 3339")
            .with_timezone(&Utc)
    })
}

/// The committed submissions schedule `name` made, by tick, with how many each tick has.
fn tick_submissions(deployment: &Deployment, name: &str) -> BTreeMap<DateTime<Utc>, Vec<String>> {
    let topic = deployment.topic(TopicRole::Submissions);
    let mut ticks: BTreeMap<DateTime<Utc>, Vec<String>> = BTreeMap::new();
    for (id, submission) in deployment.read_to_end::<Submission>(&topic, Duration::from_secs(30)) {
        if submission
            .metadata
            .get(METADATA_SCHEDULE)
            .map(String::as_str)
            != Some(name)
        {
            continue;
        }
        let tick = submission.metadata[METADATA_TICK].clone();
        let tick = DateTime::parse_from_rfc3339(&tick)
            .expect("the tick is RFC 3339")
            .with_timezone(&Utc);
        ticks.entry(tick).or_default().push(id);
    }
    ticks
}

/// How often each execution's result was published on weir.results.
fn results(deployment: &Deployment) -> BTreeMap<String, (usize, ExecutionResult)> {
    let topic = deployment.topic(TopicRole::Results);
    let mut all: BTreeMap<String, (usize, ExecutionResult)> = BTreeMap::new();
    for (id, finished) in
        deployment.read_to_end::<ExecutionFinished>(&topic, Duration::from_secs(30))
    {
        all.entry(id).or_insert((0, finished.result)).0 += 1;
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn an_every_second_schedule_ticks_once_a_second_across_a_kill_9() {
    let deployment = Deployment::new("sched_kill");
    let worker = deployment.start_worker("w1", &[]);
    weir(
        &deployment,
        &[
            "schedule",
            "create",
            "every-second",
            "--cron",
            "* * * * * *",
            "--function",
            GREET,
            "--params",
            r#"["tick"]"#,
            "--overlap",
            "allow",
            // The default catch-up window: a take-over must not make ticks missed.
        ],
    );
    // A few ticks on the first worker.
    wait_until("5 ticks on the first worker", TIMEOUT, || {
        (tick_submissions(&deployment, "every-second").len() >= 5).then_some(())
    });
    // kill -9: whatever it had in flight is aborted or committed, nothing in between.
    drop(worker);
    let killed_at = Utc::now();
    // Down for 3 s on purpose (the ticks of those seconds are owed), then a new worker
    // with another instance id: it takes over once the group drops the dead member.
    wait_until("3 s of downtime", Duration::from_secs(10), || {
        (Utc::now() - killed_at >= chrono::Duration::seconds(3)).then_some(())
    });
    let restarted_at = Utc::now();
    let _worker = deployment.start_worker("w2", &[]);
    wait_until("5 ticks after the take-over", TIMEOUT, || {
        let state = listed(&deployment, "every-second")?;
        (tick_of(&state, "last_tick")? >= restarted_at + chrono::Duration::seconds(5)).then_some(())
    });
    weir(&deployment, &["schedule", "pause", "every-second"]);
    let state = wait_until("the pause taken", TIMEOUT, || {
        listed(&deployment, "every-second").filter(|s| s["status"] == "paused")
    });
    let last = tick_of(&state, "last_tick").expect("a last tick");

    let ticks = tick_submissions(&deployment, "every-second");
    let first = *ticks.keys().next().expect("ticks");
    let seconds = (last - first).num_seconds() + 1;
    let doubled: Vec<_> = ticks.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "ticks with more than one submission: {doubled:?}"
    );
    let missing: Vec<DateTime<Utc>> = (0..seconds)
        .map(|s| first + chrono::Duration::seconds(s))
        .filter(|t| !ticks.contains_key(t))
        .collect();
    assert!(
        missing.is_empty(),
        "ticks without a submission: {missing:?}"
    );
    assert_eq!(
        ticks.len() as i64,
        seconds,
        "one submission per second, none after the pause"
    );
    assert!(
        ticks.keys().any(|t| *t > killed_at && *t < restarted_at),
        "the seconds the workers were down were ticked after the take-over"
    );
    assert_eq!(state["started"], seconds);
    assert_eq!(state["missed"], 0);

    // Every tick's execution ran once: one result each.
    let ids: Vec<String> = ticks.values().flatten().cloned().collect();
    let results = wait_until("every tick's result", TIMEOUT, || {
        let results = results(&deployment);
        ids.iter()
            .all(|id| results.contains_key(id))
            .then_some(results)
    });
    for id in &ids {
        let (count, result) = &results[id];
        assert_eq!(*count, 1, "{id}: one result");
        assert!(matches!(result, ExecutionResult::Ok(_)), "{id}: {result:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn overlap_skip_waits_for_the_run_and_pause_resume_delete_are_taken() {
    let deployment = Deployment::new("sched_skip");
    let _worker = deployment.start_worker("w1", &[]);
    weir(
        &deployment,
        &[
            "schedule",
            "create",
            "approvals",
            "--cron",
            "* * * * * *",
            "--function",
            APPROVAL,
            "--params",
            r#"["order-1", 600]"#,
        ],
    );
    // The first tick's execution waits for its event; the ticks after it are skipped.
    let state = wait_until("3 ticks skipped while the first run waits", TIMEOUT, || {
        listed(&deployment, "approvals").filter(|s| s["skipped"].as_u64() >= Some(3))
    });
    assert_eq!(state["started"], 1);
    let running = state["running"][0]
        .as_str()
        .expect("a running execution")
        .to_owned();
    let ticks = tick_submissions(&deployment, "approvals");
    assert_eq!(ticks.len(), 1, "one execution while it runs: {ticks:?}");

    // The event finishes it; the schedule hears, and a later tick starts the next run.
    weir(
        &deployment,
        &["send-event", &running, "approved", r#""ann""#],
    );
    let state = wait_until("a second run", TIMEOUT, || {
        listed(&deployment, "approvals").filter(|s| s["started"].as_u64() >= Some(2))
    });
    assert!(
        state["running"]
            .as_array()
            .is_some_and(|r| !r.iter().any(|id| id == running.as_str())),
        "the finished run is forgotten: {state}"
    );
    let results = results(&deployment);
    assert!(
        matches!(&results[&running].1, ExecutionResult::Ok(v) if v == "ann"),
        "{:?}",
        results.get(&running)
    );

    // Pause: no tick is taken; resume: ticks go on from after now (none owed for the pause).
    weir(&deployment, &["schedule", "pause", "approvals"]);
    let paused = wait_until("the pause taken", TIMEOUT, || {
        listed(&deployment, "approvals").filter(|s| s["status"] == "paused")
    });
    let paused_last = tick_of(&paused, "last_tick").expect("a last tick");
    let paused_at = Utc::now();
    wait_until("3 s paused", Duration::from_secs(10), || {
        (Utc::now() - paused_at >= chrono::Duration::seconds(3)).then_some(())
    });
    let still = listed(&deployment, "approvals").expect("listed");
    assert_eq!(
        tick_of(&still, "last_tick"),
        Some(paused_last),
        "no tick while paused"
    );
    weir(&deployment, &["schedule", "resume", "approvals"]);
    let resumed_at = Utc::now();
    let resumed = wait_until("a tick after the resume", TIMEOUT, || {
        listed(&deployment, "approvals")
            .filter(|s| s["status"] == "active")
            .filter(|s| tick_of(s, "last_tick").is_some_and(|t| t > paused_last))
    });
    let skipped_before = paused["skipped"].as_u64().expect("skipped");
    let skipped_after = resumed["skipped"].as_u64().expect("skipped");
    assert!(
        skipped_after - skipped_before <= (Utc::now() - resumed_at).num_seconds() as u64 + 2,
        "the paused seconds are not owed: skipped {skipped_before} -> {skipped_after}"
    );

    // Delete: the schedule is gone (a tombstone on weir.state).
    weir(&deployment, &["schedule", "delete", "approvals"]);
    wait_until("the schedule gone", TIMEOUT, || {
        listed(&deployment, "approvals").is_none().then_some(())
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_schedules_are_applied_once_and_tick() {
    let deployment = Deployment::new("sched_declared");
    // The repository's topology with one schedule declared.
    let dir = deployment.logs().join("topology");
    std::fs::create_dir_all(&dir).expect("topology dir");
    for entry in std::fs::read_dir(weir_e2e::repo_root().join("topology")).expect("topology") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            std::fs::copy(&path, dir.join(path.file_name().expect("a name"))).expect("copy");
        }
    }
    std::fs::write(
        dir.join("schedules.toml"),
        format!(
            r#"
[[schedule]]
name = "declared"
cron = "* * * * * *"
function = "{GREET}"
params = ["declared"]
overlap = "allow"
"#
        ),
    )
    .expect("write schedules.toml");
    let apply = || {
        let output = deployment
            .command()
            .env("WEIR_TOPOLOGY", &dir)
            .args(["topology", "apply"])
            .output()
            .expect("run weir topology apply");
        assert!(
            output.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert!(
        apply().contains("create sent"),
        "apply sends the declared schedule"
    );
    let _worker = deployment.start_worker("w1", &[]);
    let first = wait_until("two ticks of the declared schedule", TIMEOUT, || {
        listed(&deployment, "declared").filter(|s| s["started"].as_u64() >= Some(2))
    });
    // Applying again changes nothing: the same generation, so the same tick ids.
    apply();
    let later = wait_until("two more ticks", TIMEOUT, || {
        listed(&deployment, "declared")
            .filter(|s| s["started"].as_u64() >= first["started"].as_u64().map(|n| n + 2))
    });
    assert_eq!(later["generation"], first["generation"]);
    let ids: Vec<String> = tick_submissions(&deployment, "declared")
        .into_values()
        .flatten()
        .collect();
    let results = wait_until("a tick's result", TIMEOUT, || {
        let results = results(&deployment);
        ids.iter()
            .any(|id| results.contains_key(id))
            .then_some(results)
    });
    let greeted = ids.iter().find_map(|id| results.get(id)).expect("a result");
    assert!(
        matches!(&greeted.1, ExecutionResult::Ok(v) if v == "hello, declared"),
        "{greeted:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_inside_a_schedules_transaction_loses_nothing_and_holds_up_no_listing() {
    let deployment = Deployment::new("sched_txn");
    // The worker stops inside its first transaction: the create's state on weir.state, open.
    let worker = deployment.start_worker_with_env(
        "w1",
        &[],
        &[("WEIR_FAILPOINTS", "before-commit=pause-once(60000)")],
    );
    weir(
        &deployment,
        &[
            "schedule",
            "create",
            "in-flight",
            "--cron",
            "* * * * * *",
            "--function",
            GREET,
            "--params",
            r#"["in-flight"]"#,
            "--overlap",
            "allow",
        ],
    );
    worker.wait_for_log("failpoint before-commit reached", TIMEOUT);
    drop(worker);
    // A listing reads what is committed and is not held up by the dead transaction (it waited
    // for it, and failed after 30 s): nothing yet.
    assert!(listed(&deployment, "in-flight").is_none());
    // Restarted with its instance id, the worker fences the dead transaction at once and reads
    // the create again: the schedule exists once and ticks.
    let _worker = deployment.start_worker("w1", &[]);
    let state = wait_until("three ticks", TIMEOUT, || {
        listed(&deployment, "in-flight").filter(|s| s["started"].as_u64() >= Some(3))
    });
    let ticks = tick_submissions(&deployment, "in-flight");
    assert!(ticks.values().all(|ids| ids.len() == 1), "{ticks:?}");
    assert!(ticks.len() as u64 >= 3, "{ticks:?}: {state}");
}
