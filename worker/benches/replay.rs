//! Replay cost per history event, at 1,000, 10,000 and 100,000 events.
//!
//! `cargo bench -p weir --bench replay` prints, per size, the nanoseconds per replayed event
//! (best of 40 samples, each replaying the largest size's worth of events, the samples of all
//! sizes interleaved so that noise from other processes hits them alike) and the ratio of the
//! 100k figure to the 1k one; replay is linear when the ratio stays near 1. A replay here is what a cold start does: build the engine
//! from the recorded history and the response journal, run the workflow's calls against it
//! to the end, and finish. Histories are stored serialized and deserialized before each
//! replay (untimed), so the engine reads freshly allocated data, as after a load from the
//! store, not data shared with the recording run.
//!
//! Two tables: one history replayed at a time (a 1k history then lives in the CPU cache
//! while a 100k one does not, so the ratio mixes cache effects into the scaling), and the
//! same working set for every size (100 histories of 1k, 10 of 10k, 1 of 100k loaded, then
//! replayed, as a worker rebuilding many executions would), which isolates how cost grows
//! with length. Environment: `WEIR_REPLAY_BENCH_SIZES` (e.g. `1000,100000`),
//! `WEIR_REPLAY_BENCH_SAMPLES`.
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

/// Execution number `n`: distinct ids, so each history has its own ids and seed.
fn execution(n: u64) -> Execution {
    Execution {
        id: ExecutionId::top_level(ulid::Ulid::from_parts(1_700_000_000_000 + n, u128::from(n))),
        ffqn: "bench:wf/main.run".parse().unwrap(),
        params: json!([]),
        created_at: chrono::DateTime::UNIX_EPOCH,
        component: None,
        trace: None,
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
                ran: None,
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

/// A recorded execution, stored as the worker's store would hand it back: serialized.
struct Recorded {
    execution: Execution,
    events: usize,
    history: Vec<u8>,
    journal: Vec<u8>,
    rounds: usize,
}

impl Recorded {
    /// Loads the history and journal (untimed): fresh allocations laid out in order, as a
    /// worker has them after reading them from the store.
    fn load(&self) -> (Execution, Vec<HistoryEvent>, Vec<Response>) {
        (
            self.execution.clone(),
            serde_json::from_slice(&self.history).unwrap(),
            serde_json::from_slice(&self.journal).unwrap(),
        )
    }
}

/// Runs the workflow fresh as execution number `n`; returns its history and response journal.
fn record(n: u64, rounds: usize) -> Recorded {
    let execution = execution(n);
    let mut engine = Replay::new(execution.clone(), Vec::new(), Vec::new(), now()).unwrap();
    let mut journal = Vec::new();
    workflow(&mut engine, &mut journal, rounds, &functions());
    Recorded {
        execution,
        events: engine.history().len(),
        history: serde_json::to_vec(engine.history()).unwrap(),
        journal: serde_json::to_vec(&journal).unwrap(),
        rounds,
    }
}

/// Replays each of `executions` once, cold, and returns the time spent replaying. With
/// `clone_all_first`, every input is loaded before the first replay (their data competes for
/// the CPU cache as many loaded executions do); otherwise each is loaded right before its own
/// replay (a small history is then in cache, as one just loaded would be).
fn replay_all(executions: &[&Recorded], clone_all_first: bool, f: &[Ffqn; 3]) -> Duration {
    let mut inputs: Vec<_> = if clone_all_first {
        executions.iter().map(|r| Some(r.load())).collect()
    } else {
        executions.iter().map(|_| None).collect()
    };
    let mut engines = Vec::with_capacity(executions.len());
    let mut total = Duration::ZERO;
    for (input, recorded) in inputs.iter_mut().zip(executions) {
        let (execution, history, journal) = input.take().unwrap_or_else(|| recorded.load());
        // glibc defers consolidating freed chunks to the next large allocation; make that
        // happen now, or the previous replay's deallocation is billed to this one.
        black_box(Vec::<u8>::with_capacity(64 * 1024));
        let start = Instant::now();
        let mut engine = Replay::new(execution, history, journal, now()).unwrap();
        let mut unused = Vec::new();
        let result = workflow(&mut engine, &mut unused, recorded.rounds, f);
        total += start.elapsed();
        assert!(unused.is_empty(), "a replay never blocks");
        assert!(
            engine.take_new_events().is_empty(),
            "a replay records nothing"
        );
        engines.push((result, engine));
    }
    drop(black_box(engines));
    total
}

/// One row of a table: histories of one size, replayed so that every sample does about the
/// same work (the largest size's worth of events), which keeps samples of different sizes
/// equally exposed to noise from other processes.
struct Case {
    executions: Vec<Recorded>,
    /// How many times each history is replayed per sample.
    repeat: usize,
    clone_all_first: bool,
    best: Duration,
}

impl Case {
    fn events_per_sample(&self) -> usize {
        self.repeat * self.executions.iter().map(|r| r.events).sum::<usize>()
    }

    fn sample(&mut self, f: &[Ffqn; 3]) {
        let order: Vec<&Recorded> = (0..self.repeat).flat_map(|_| &self.executions).collect();
        let t = replay_all(&order, self.clone_all_first, f);
        self.best = self.best.min(t);
    }

    fn ns_per_event(&self) -> f64 {
        self.best.as_nanos() as f64 / self.events_per_sample() as f64
    }
}

fn main() {
    let f = functions();
    // WEIR_REPLAY_BENCH_SIZES=100000 runs one size (e.g. under a profiler).
    let sizes: Vec<usize> = std::env::var("WEIR_REPLAY_BENCH_SIZES")
        .map(|s| {
            s.split(',')
                .map(|n| n.trim().parse().expect("a size"))
                .collect()
        })
        .unwrap_or_else(|_| vec![1_000, 10_000, 100_000]);
    let samples: usize = std::env::var("WEIR_REPLAY_BENCH_SAMPLES")
        .map(|s| s.parse().expect("a number"))
        .unwrap_or(40);
    let largest = *sizes.iter().max().unwrap();
    let titles = [
        "one history at a time, loaded just before its replay (a small one is in the CPU cache)",
        "as many distinct histories as make the largest size, all loaded before replaying \
         (every size works on the same amount of memory)",
    ];
    let mut tables: Vec<Vec<Case>> = Vec::new();
    for (t, _) in titles.iter().enumerate() {
        let fleet = t == 1;
        tables.push(
            sizes
                .iter()
                .map(|&size| {
                    let rounds = size / EVENTS_PER_ROUND;
                    let count = (largest / size).max(1);
                    let distinct = if fleet { count } else { 1 };
                    Case {
                        executions: (0..distinct as u64).map(|n| record(n, rounds)).collect(),
                        repeat: count / distinct,
                        clone_all_first: fleet,
                        best: Duration::MAX,
                    }
                })
                .collect(),
        );
    }
    // Samples of all rows interleaved, best of each kept.
    for _ in 0..samples {
        for case in tables.iter_mut().flatten() {
            case.sample(&f);
        }
    }
    for (title, cases) in titles.iter().zip(&tables) {
        println!("replay engine, cold replay: {title}");
        println!(
            "{:>10} {:>10} {:>12} {:>12}",
            "events", "histories", "ns/event", "ms/sample"
        );
        for case in cases {
            println!(
                "{:>10} {:>10} {:>12.0} {:>12.2}",
                case.executions[0].events,
                case.repeat * case.executions.len(),
                case.ns_per_event(),
                case.best.as_secs_f64() * 1e3
            );
        }
        if cases.len() > 1 {
            let per_event: Vec<f64> = cases.iter().map(Case::ns_per_event).collect();
            let ratio = per_event[per_event.len() - 1] / per_event[0];
            let max = per_event.iter().cloned().fold(0.0, f64::max);
            println!(
                "ratio ns/event largest / smallest: {ratio:.2} (linear: <= 1.5); \
                 max ns/event: {max:.0} (goal: < 2000)"
            );
        }
        println!();
    }
    println!("best of {samples} interleaved samples per row");
}
