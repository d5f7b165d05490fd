//! Replay cost per history event, at 1,000, 10,000 and 100,000 events.
//!
//! `cargo bench -p weir --bench replay` prints, per size, the nanoseconds per replayed event
//! (best of several runs) and the ratio of the 100k figure to the 1k one; replay is linear
//! when the ratio stays near 1. A replay here is what a cold start does: build the engine
//! from the recorded history and the response journal, run the workflow's calls against it
//! to the end, and finish.
//!
//! The workflow mixes every kind of event: per round it creates a join set, submits two
//! activities and a delay into it and awaits them, submits into and awaits a long-lived join
//! set (so one join set accumulates as many requests as there are rounds), draws a random
//! number, makes a direct call and sleeps.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use weir::model::{
    ChildKind, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, Response, ScheduleAt,
};
use weir::replay::{Execution, Output, Progress, Replay, ReplayError};

/// Events recorded per round of [`workflow`].
const EVENTS_PER_ROUND: usize = 16;

fn execution() -> Execution {
    Execution {
        id: "E_01ARZ3NDEKTSV4RRFFQ69G5FAV"
            .parse::<ExecutionId>()
            .unwrap(),
        ffqn: "bench:wf/main.run".parse().unwrap(),
        params: json!([]),
    }
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

/// Answers every request the engine emitted, in order; what the outside world would do.
fn answer(outputs: Vec<Output>, inbox: &mut Vec<Response>) {
    for output in outputs {
        match output {
            Output::SubmitChild {
                child_execution_id,
                params,
                ..
            } => inbox.push(Response::ChildExecutionFinished {
                child_execution_id,
                result: ExecutionResult::Ok(params),
            }),
            Output::RequestDelay { delay_id, .. } => inbox.push(Response::DelayFinished {
                delay_id,
                outcome: weir::model::DelayOutcome::Ok,
            }),
            _ => {}
        }
    }
}

/// Runs a blocking call; when blocked, delivers what the world has answered and retries.
/// `journal` collects delivered responses (the response journal of the execution).
fn blocking<T>(
    engine: &mut Replay,
    journal: &mut Vec<Response>,
    mut call: impl FnMut(&mut Replay) -> Result<Progress<T>, ReplayError>,
) -> T {
    loop {
        match call(engine).expect("no replay error") {
            Progress::Ready(v) => return v,
            Progress::Blocked(_) => {
                let mut inbox = Vec::new();
                answer(engine.take_outputs(), &mut inbox);
                assert!(!inbox.is_empty(), "blocked with nothing outstanding");
                for r in inbox {
                    journal.push(r.clone());
                    engine.deliver_response(r).unwrap();
                }
            }
        }
    }
}

/// The benchmarked workflow: `rounds` rounds of [`EVENTS_PER_ROUND`] events.
fn workflow(
    engine: &mut Replay,
    journal: &mut Vec<Response>,
    rounds: usize,
    f: &[Ffqn; 3],
) -> ExecutionResult {
    let long_lived = engine.create_join_set().unwrap(); // 1 event
    let mut sum = 0u64;
    for i in 0..rounds {
        let params = json!([i]);
        let js = engine.create_join_set().unwrap(); // 1
        engine
            .submit(&js, &f[0], &params, ChildKind::Activity)
            .unwrap(); // 1
        engine
            .submit(&js, &f[1], &params, ChildKind::Activity)
            .unwrap(); // 1
        engine
            .submit_delay(&js, ScheduleAt::In(Duration::from_secs(1)))
            .unwrap(); // 1
        for _ in 0..3 {
            blocking(engine, journal, |e| e.join_next(&js)).unwrap(); // 3
        }
        engine
            .submit(&long_lived, &f[2], &params, ChildKind::Workflow)
            .unwrap(); // 1
        blocking(engine, journal, |e| e.await_next(&long_lived, &f[2])).unwrap(); // 1
        sum += engine.random_u64(0, 100).unwrap(); // 1
        blocking(engine, journal, |e| {
            e.call(&f[0], &params, ChildKind::Activity)
        }); // 3
        blocking(engine, journal, |e| {
            e.sleep(ScheduleAt::In(Duration::from_secs(1)))
        })
        .unwrap(); // 3
    }
    let result = ExecutionResult::Ok(json!(sum));
    blocking(engine, journal, |e| e.finish(result.clone()))
}

fn functions() -> [Ffqn; 3] {
    [
        "bench:wf/acts.charge",
        "bench:wf/acts.ship",
        "bench:wf/child.run",
    ]
    .map(|s| s.parse().unwrap())
}

/// Runs the workflow fresh; returns its history and response journal.
fn record(rounds: usize) -> (Vec<HistoryEvent>, Vec<Response>) {
    let mut engine = Replay::new(execution(), Vec::new(), Vec::new(), now()).unwrap();
    let mut journal = Vec::new();
    workflow(&mut engine, &mut journal, rounds, &functions());
    (engine.history().to_vec(), journal)
}

/// One cold replay; returns its duration (inputs are cloned before the clock starts).
fn replay_once(
    history: &[HistoryEvent],
    journal: &[Response],
    rounds: usize,
    f: &[Ffqn; 3],
) -> Duration {
    let (history, journal) = (history.to_vec(), journal.to_vec());
    let start = Instant::now();
    let mut engine = Replay::new(execution(), history, journal, now()).unwrap();
    let mut unused = Vec::new();
    let result = workflow(&mut engine, &mut unused, rounds, f);
    let elapsed = start.elapsed();
    assert!(unused.is_empty(), "a replay never blocks");
    assert!(
        engine.take_new_events().is_empty(),
        "a replay records nothing"
    );
    black_box((result, engine));
    elapsed
}

fn main() {
    let f = functions();
    let mut per_event = Vec::new();
    println!("replay engine: cold replay of a recorded history (best of N runs)");
    println!(
        "{:>10} {:>8} {:>12} {:>10}",
        "events", "runs", "ns/event", "total ms"
    );
    for target in [1_000usize, 10_000, 100_000] {
        let rounds = target / EVENTS_PER_ROUND;
        let (history, journal) = record(rounds);
        let events = history.len();
        // Enough runs for about a second of work per size, at least five.
        let runs = (2_000_000 / events).clamp(5, 400);
        // Warm up allocator and caches once.
        replay_once(&history, &journal, rounds, &f);
        let best = (0..runs)
            .map(|_| replay_once(&history, &journal, rounds, &f))
            .min()
            .unwrap();
        let ns = best.as_nanos() as f64 / events as f64;
        per_event.push(ns);
        println!(
            "{:>10} {:>8} {:>12.0} {:>10.2}",
            events,
            runs,
            ns,
            best.as_secs_f64() * 1e3
        );
    }
    let ratio = per_event[2] / per_event[0];
    println!("ratio ns/event 100k / 1k: {ratio:.2} (linear: <= 1.5)");
    println!(
        "max ns/event: {:.0} (goal: < 2000)",
        per_event.iter().cloned().fold(0.0, f64::max)
    );
}
