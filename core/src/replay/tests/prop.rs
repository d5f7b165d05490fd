//! Property tests: random workflow programs with random response arrival orders.
//!
//! Each program runs hot and cold-at-every-block (same events, outputs and outcomes), is
//! replayed from every prefix of its history and continued fresh with the rest of the
//! response journal (same events and outcomes), and, mutated at one call, is reported
//! nondeterministic at exactly that call's first event.

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::harness::{Mode, Outcome, R, Run, Stop, World, execute, now};
use crate::model::{ChildKind, ExecutionId, ExecutionResult, HistoryEvent, JoinSetId, ScheduleAt};
use crate::replay::{Mismatch, Output, ReplayError};

const FUNCTIONS: [&str; 4] = ["a", "b", "fail-c", "trap-d"];

#[derive(Clone, Debug)]
enum Op {
    CreateJoinSet,
    CreateNamed(u8),
    Submit {
        js: u8,
        f: u8,
        arg: u8,
        workflow: bool,
    },
    SubmitDelay {
        js: u8,
        secs: u8,
    },
    JoinNext {
        js: u8,
    },
    AwaitNext {
        js: u8,
        f: u8,
    },
    Get {
        child: u8,
        f: u8,
    },
    Call {
        f: u8,
        arg: u8,
        workflow: bool,
    },
    Sleep {
        secs: u8,
    },
    RandomU64 {
        max: u8,
    },
    RandomString {
        max: u8,
    },
    Schedule {
        f: u8,
        at: u8,
    },
    /// Submit a stub child and stub it; optionally stub it again with `second`.
    StubChild {
        js: u8,
        value: u8,
        second: Option<u8>,
    },
    Close {
        js: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let small = 0u8..4;
    prop_oneof![
        3 => Just(Op::CreateJoinSet),
        1 => (0u8..3).prop_map(Op::CreateNamed),
        6 => (any::<u8>(), 0u8..4, 0u8..3, any::<bool>())
            .prop_map(|(js, f, arg, workflow)| Op::Submit { js, f, arg, workflow }),
        2 => (any::<u8>(), 0u8..100).prop_map(|(js, secs)| Op::SubmitDelay { js, secs }),
        5 => any::<u8>().prop_map(|js| Op::JoinNext { js }),
        2 => (any::<u8>(), small.clone()).prop_map(|(js, f)| Op::AwaitNext { js, f }),
        1 => (any::<u8>(), small.clone()).prop_map(|(child, f)| Op::Get { child, f }),
        2 => (small.clone(), 0u8..3, any::<bool>())
            .prop_map(|(f, arg, workflow)| Op::Call { f, arg, workflow }),
        1 => (0u8..100).prop_map(|secs| Op::Sleep { secs }),
        1 => (1u8..20).prop_map(|max| Op::RandomU64 { max }),
        1 => (1u8..8).prop_map(|max| Op::RandomString { max }),
        1 => (small, 0u8..3).prop_map(|(f, at)| Op::Schedule { f, at }),
        2 => (any::<u8>(), 0u8..3, proptest::option::of(0u8..3))
            .prop_map(|(js, value, second)| Op::StubChild { js, value, second }),
        1 => any::<u8>().prop_map(|js| Op::Close { js }),
    ]
}

fn schedule_at(at: u8, secs: u8) -> ScheduleAt {
    match at % 3 {
        0 => ScheduleAt::Now,
        1 => ScheduleAt::At(now() + chrono::TimeDelta::seconds(i64::from(secs))),
        _ => ScheduleAt::In(Duration::from_secs(u64::from(secs))),
    }
}

fn kind(workflow: bool) -> ChildKind {
    if workflow {
        ChildKind::Workflow
    } else {
        ChildKind::Activity
    }
}

/// Runs `ops` as a workflow. Ops referring to join sets or children pick among those that
/// exist (by index modulo the count) and are skipped when there are none. Records, per op,
/// the history length before it (for the mutation test).
fn interpret(run: &mut Run, ops: &[Op], starts: &mut Vec<usize>) -> R<ExecutionResult> {
    starts.clear();
    let mut open: Vec<JoinSetId> = Vec::new();
    let mut children: Vec<ExecutionId> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        run.maybe_arrive(i);
        starts.push(run.engine.version().0 as usize);
        let pick =
            |js: u8, open: &[JoinSetId]| open.get(usize::from(js) % open.len().max(1)).cloned();
        match op {
            Op::CreateJoinSet => open.push(run.create_join_set()?),
            Op::CreateNamed(n) => {
                if let Ok(js) = run.create_named(&format!("set-{n}"))? {
                    open.push(js);
                }
            }
            Op::Submit {
                js,
                f,
                arg,
                workflow,
            } => {
                if let Some(js) = pick(*js, &open) {
                    let name = FUNCTIONS[usize::from(*f) % FUNCTIONS.len()];
                    children.push(run.submit(&js, name, json!([arg]), kind(*workflow))?);
                }
            }
            Op::SubmitDelay { js, secs } => {
                if let Some(js) = pick(*js, &open) {
                    run.submit_delay(&js, ScheduleAt::In(Duration::from_secs(u64::from(*secs))))?;
                }
            }
            Op::JoinNext { js } => {
                if let Some(js) = pick(*js, &open) {
                    let _ = run.join_next(&js)?;
                }
            }
            Op::AwaitNext { js, f } => {
                if let Some(js) = pick(*js, &open) {
                    let _ = run.await_next(&js, FUNCTIONS[usize::from(*f) % FUNCTIONS.len()])?;
                }
            }
            Op::Get { child, f } => {
                if let Some(c) = children.get(usize::from(*child) % children.len().max(1)) {
                    let _ = run.get(&c.clone(), FUNCTIONS[usize::from(*f) % FUNCTIONS.len()])?;
                }
            }
            Op::Call { f, arg, workflow } => {
                let name = FUNCTIONS[usize::from(*f) % FUNCTIONS.len()];
                run.call(name, json!([arg]), kind(*workflow))?;
            }
            Op::Sleep { secs } => {
                let _ = run.sleep(ScheduleAt::In(Duration::from_secs(u64::from(*secs))))?;
            }
            Op::RandomU64 { max } => {
                run.random_u64(0, u64::from(*max))?;
            }
            Op::RandomString { max } => {
                run.random_string(0, u64::from(*max))?;
            }
            Op::Schedule { f, at } => {
                let name = FUNCTIONS[usize::from(*f) % FUNCTIONS.len()];
                run.schedule(name, json!([f]), schedule_at(*at, 30))?;
            }
            Op::StubChild { js, value, second } => {
                if let Some(js) = pick(*js, &open) {
                    let s = run.submit(&js, "stubbed", json!([]), ChildKind::Stub)?;
                    let _ = run.stub(&s, ExecutionResult::Ok(json!(value)))?;
                    if let Some(v) = second {
                        let _ = run.stub(&s, ExecutionResult::Ok(json!(v)))?;
                    }
                    children.push(s);
                }
            }
            Op::Close { js } => {
                if let Some(j) = pick(*js, &open) {
                    run.close(&j)?;
                    open.retain(|x| *x != j);
                }
            }
        }
    }
    starts.push(run.engine.version().0 as usize);
    run.finish(ExecutionResult::Ok(json!(ops.len())))
}

fn program(ops: &[Op]) -> impl Fn(&mut Run) -> R<(ExecutionResult, Vec<usize>)> + '_ {
    move |run: &mut Run| {
        let mut starts = Vec::new();
        let r = interpret(run, ops, &mut starts)?;
        Ok((r, starts))
    }
}

fn run_hot_and_cold(ops: &[Op], seed: u64) -> Outcome<(ExecutionResult, Vec<usize>)> {
    let p = program(ops);
    let hot = execute(Mode::Hot(World::seeded(Some(seed))), vec![], vec![], &p)
        .unwrap_or_else(|(s, r)| panic!("hot: {s:?} {:#?}", r.trace));
    let cold = execute(
        Mode::ColdRestarts(World::seeded(Some(seed))),
        vec![],
        vec![],
        &p,
    )
    .unwrap_or_else(|(s, r)| panic!("cold: {s:?} {:#?}", r.trace));
    assert_eq!(cold.history, hot.history);
    assert_eq!(cold.trace, hot.trace);
    assert_eq!(cold.outputs, hot.outputs);
    assert_eq!(cold.value, hot.value);
    hot
}

/// Replays the first `k` events with the responses delivered before the last of them was
/// recorded (a crash right after it), and continues fresh, feeding the rest of the journal
/// in its order.
fn check_prefix(ops: &[Op], hot: &Outcome<(ExecutionResult, Vec<usize>)>, k: usize) {
    let split = hot.journal.iter().take_while(|a| a.at_len < k).count();
    let preloaded = hot.journal[..split].to_vec();
    let rest: VecDeque<_> = hot.journal[split..].iter().cloned().collect();
    let p = program(ops);
    let out = execute(
        Mode::Journal(rest),
        hot.history[..k].to_vec(),
        preloaded,
        &p,
    )
    .unwrap_or_else(|(s, r)| panic!("prefix {k}: {s:?} {:#?}", r.trace));
    assert_eq!(out.history, hot.history, "prefix {k}: history");
    assert_eq!(out.trace, hot.trace, "prefix {k}: outcomes");
    assert_eq!(out.value, hot.value, "prefix {k}: result");
    // Outputs from the continuation: the tail of the original ones, with one per request
    // and schedule recorded after the prefix.
    assert!(
        hot.outputs.ends_with(&out.outputs),
        "prefix {k}: outputs\n{:#?}\nvs\n{:#?}\nhistory {:#?}",
        out.outputs,
        hot.outputs,
        hot.history
    );
    let requests_after = hot.history[k..]
        .iter()
        .filter(|e| {
            matches!(
                e,
                HistoryEvent::JoinSetRequest { .. } | HistoryEvent::Schedule { .. }
            )
        })
        .count();
    let request_outputs = out
        .outputs
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::SubmitChild { .. } | Output::RequestDelay { .. } | Output::Schedule { .. }
            )
        })
        .count();
    assert_eq!(
        request_outputs, requests_after,
        "prefix {k}: request outputs"
    );
    if k == hot.history.len() {
        super::harness::assert_replay_outputs(&hot.outputs, &out.outputs);
    }
}

/// A change to op `i` that must be detected at its first event, with the mismatch expected.
fn mutate(op: &Op) -> Option<(Op, Mismatch)> {
    Some(match op.clone() {
        Op::Submit {
            js,
            f,
            arg,
            workflow,
        } => {
            if arg % 2 == 0 {
                (
                    Op::Submit {
                        js,
                        f,
                        arg: arg + 1,
                        workflow,
                    },
                    Mismatch::Params,
                )
            } else {
                (
                    Op::Submit {
                        js,
                        f: f + 1,
                        arg,
                        workflow,
                    },
                    Mismatch::Ffqn,
                )
            }
        }
        Op::SubmitDelay { js, secs } => (
            Op::SubmitDelay { js, secs: secs + 1 },
            Mismatch::DelayTimeout,
        ),
        Op::JoinNext { js } => (Op::AwaitNext { js, f: 0 }, Mismatch::RequestedFfqn),
        Op::AwaitNext { js, f } => (Op::AwaitNext { js, f: f + 1 }, Mismatch::RequestedFfqn),
        Op::Call {
            f,
            arg,
            workflow: _,
        } => (Op::Sleep { secs: f + arg }, Mismatch::JoinSet),
        Op::Sleep { secs } => (
            Op::Call {
                f: secs % 4,
                arg: 0,
                workflow: false,
            },
            Mismatch::JoinSet,
        ),
        Op::RandomU64 { max } => (Op::RandomU64 { max: max + 1 }, Mismatch::RandomValue),
        Op::RandomString { max } => (Op::RandomU64 { max }, Mismatch::Kind),
        Op::Schedule { f, at } => (Op::Schedule { f, at: at + 1 }, Mismatch::ScheduleIntention),
        Op::StubChild {
            js,
            value,
            second: None,
        } => (
            Op::StubChild {
                js,
                value: value + 1,
                second: None,
            },
            Mismatch::StubValue,
        ),
        Op::CreateJoinSet => (Op::RandomU64 { max: 3 }, Mismatch::Kind),
        _ => return None,
    })
}

fn check_mutation(ops: &[Op], hot: &Outcome<(ExecutionResult, Vec<usize>)>, which: usize) {
    let starts = &hot.value.1;
    // Ops that recorded an event and have a mutation.
    let candidates: Vec<(usize, Op, Mismatch)> = ops
        .iter()
        .enumerate()
        .filter(|(i, _)| starts[*i] < starts[*i + 1])
        .filter_map(|(i, op)| mutate(op).map(|(m, k)| (i, m, k)))
        .collect();
    if candidates.is_empty() {
        return;
    }
    let (i, mutated, mismatch) = candidates[which % candidates.len()].clone();
    let mut changed = ops.to_vec();
    changed[i] = mutated;
    // The stub's first event is its child request; the stub itself is the second.
    let version = starts[i] + usize::from(matches!(ops[i], Op::StubChild { .. }));
    let p = program(&changed);
    let journal_all = hot.journal.clone();
    match execute(
        Mode::Journal(VecDeque::new()),
        hot.history.clone(),
        journal_all,
        &p,
    ) {
        Err((Stop::Error(ReplayError::Nondeterminism(n)), run)) => {
            assert_eq!(n.version.0 as usize, version, "op {i} {:?}: {n}", ops[i]);
            assert_eq!(n.mismatch, mismatch, "op {i} {:?}: {n}", ops[i]);
            assert!(run.engine.finished().is_some());
        }
        Err((other, _)) => panic!("op {i} {:?}: {other:?}", ops[i]),
        Ok(_) => panic!("mutation of op {i} {:?} went undetected", ops[i]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_replay_identically(
        ops in proptest::collection::vec(op(), 0..48),
        seed in any::<u64>(),
        which in any::<usize>(),
    ) {
        let hot = run_hot_and_cold(&ops, seed);
        for k in 0..=hot.history.len() {
            check_prefix(&ops, &hot, k);
        }
        check_mutation(&ops, &hot, which);
        // Dropping the last op that recorded events leaves history unprocessed or mismatched.
        let starts = &hot.value.1;
        // (Not a close or a named creation: a later close or a creation that conflicted
        // before may then record exactly the same events, a legitimately equal program.)
        let droppable = |op: &Op| !matches!(op, Op::Close { .. } | Op::CreateNamed(_));
        let last = (0..ops.len()).rev().find(|&i| starts[i] < starts[i + 1]);
        if let Some(last) = last.filter(|&i| droppable(&ops[i])) {
            let mut shorter = ops.clone();
            shorter.remove(last);
            let p = program(&shorter);
            match execute(Mode::Journal(VecDeque::new()), hot.history.clone(), hot.journal.clone(), &p) {
                Err((Stop::Error(ReplayError::Nondeterminism(n)), _)) => {
                    prop_assert!(n.version.0 as usize >= starts[last], "{}", n);
                }
                Err((other, _)) => prop_assert!(false, "{:?}", other),
                Ok(_) => prop_assert!(false, "dropping op {} went undetected", last),
            }
        }
    }
}

#[test]
fn a_blocked_run_resumed_in_memory_or_rebuilt_gives_the_same_history() {
    let ops = vec![
        Op::CreateJoinSet,
        Op::Submit {
            js: 0,
            f: 0,
            arg: 1,
            workflow: true,
        },
        Op::Submit {
            js: 0,
            f: 2,
            arg: 2,
            workflow: false,
        },
        Op::SubmitDelay { js: 0, secs: 5 },
        Op::CreateNamed(1),
        Op::Submit {
            js: 1,
            f: 1,
            arg: 0,
            workflow: true,
        },
        Op::JoinNext { js: 0 },
        Op::RandomU64 { max: 9 },
        Op::Call {
            f: 0,
            arg: 0,
            workflow: true,
        },
        Op::AwaitNext { js: 1, f: 1 },
        Op::Sleep { secs: 3 },
        Op::StubChild {
            js: 0,
            value: 1,
            second: Some(2),
        },
        Op::Schedule { f: 1, at: 2 },
        Op::JoinNext { js: 0 },
    ];
    for seed in 0..20 {
        let hot = run_hot_and_cold(&ops, seed);
        let cold = execute(
            Mode::ColdRestarts(World::seeded(Some(seed))),
            vec![],
            vec![],
            &program(&ops),
        )
        .unwrap_or_else(|(s, _)| panic!("{s:?}"));
        assert!(
            cold.restarts >= 2,
            "the run blocked and was rebuilt: {}",
            cold.restarts
        );
        assert_eq!(cold.history, hot.history);
        assert!(matches!(hot.value.0, ExecutionResult::Ok(_)));
    }
}
