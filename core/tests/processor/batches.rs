//! Batch operations: started by a command, refused with why, a turn per page within the
//! rate (the requests, the turn's outcomes and the new state in one batch), and a new owner
//! going on from the committed state, acting on none twice.

use crate::fixtures::*;
use chrono::{DateTime, Duration, Utc};
use weir_core::batch::{
    BatchAction, BatchCommand, BatchCommandAction, BatchFilter, BatchRequest, BatchSpec,
    BatchState, BatchStatus,
};
use weir_core::model::ExecutionId;
use weir_core::processor::{Batch, Body, Effect, Input, Processor};
use weir_core::records::DlqReason;
use weir_core::rows::{ExecutionState, ListBy, ListPage, ListQuery, ListedExecution};
use weir_core::sim::{SimRunner, Workflow};
use weir_core::state_key::StateKey;

fn at(ms: i64) -> DateTime<Utc> {
    now() + Duration::milliseconds(ms)
}

fn start(id: &str, per_second: f64) -> Input {
    let command = BatchCommand {
        id: id.to_owned(),
        action: BatchCommandAction::Start(BatchSpec {
            filter: BatchFilter {
                by: ListBy::Function(Workflow::Seq.ffqn().to_string()),
                state: None,
                outcome: None,
                created_from: None,
                created_until: None,
            },
            action: BatchAction::Pause,
            per_second,
            reason: "bad deploy".into(),
        }),
        requested_at: now(),
    };
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(StateKey::Batch(id.to_owned()).to_string()),
        size: 100,
        body: Ok(Body::Batch(command)),
        timestamp: None,
    }
}

/// `n` running executions of the function, created before the start.
fn store(n: u32) -> Vec<ListedExecution> {
    (0..n)
        .map(|i| ListedExecution {
            execution_id: ExecutionId::top_level(ulid::Ulid::from(u128::from(i) + 1)),
            ffqn: Workflow::Seq.ffqn().to_string(),
            parent_id: None,
            state: ExecutionState::Running,
            outcome: None,
            created_at: now() - Duration::seconds(i64::from(i) + 1),
            finished_at: None,
        })
        .collect()
}

/// One driver turn of the batches at `now`, with the store's pages.
fn turn(p: &mut Processor<SimRunner>, rows: &[ListedExecution], now: DateTime<Utc>) -> Vec<Effect> {
    let mut batch = Batch::new(now);
    for (id, query) in p.batch_wants(now) {
        let page: ListPage = ListQuery::page(&query, rows.iter().cloned());
        p.advance_batch(&mut batch, &id, &page);
    }
    batch.effects
}

fn paused(effects: &[Effect]) -> Vec<ExecutionId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::BatchRequest(BatchRequest::Pause(r)) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect()
}

fn state(effects: &[Effect]) -> Option<BatchState> {
    effects.iter().rev().find_map(|e| match e {
        Effect::PutBatch(s) => Some((**s).clone()),
        _ => None,
    })
}

#[test]
fn a_batch_acts_on_each_execution_once_within_its_rate_across_a_take_over() {
    let rows = store(7);
    let mut owner = processor(1 << 20);
    let started = step(&mut owner, start("b", 2.0));
    let committed = state(&started).expect("the batch's state");
    assert_eq!(committed.status, BatchStatus::Running);
    // Two a second, a burst of two: two at once, then one every 500 ms.
    let first = turn(&mut owner, &rows, now());
    assert_eq!(paused(&first).len(), 2);
    assert!(first.iter().any(
        |e| matches!(e, Effect::PutBatchOutcomes { turn: 1, outcomes, .. } if outcomes.len() == 2)
    ));
    assert!(turn(&mut owner, &rows, at(100)).is_empty(), "no token yet");
    let second = turn(&mut owner, &rows, at(500));
    assert_eq!(paused(&second).len(), 1);
    // The owner dies before its next commit; a new one restores the committed state.
    let _lost = turn(&mut owner, &rows, at(1_000));
    let mut next = processor(1 << 20);
    next.restore_batches([state(&second).expect("a state")]);
    let mut acted: Vec<ExecutionId> = paused(&first);
    acted.extend(paused(&second));
    let mut ms = 1_000;
    while next.batches().any(|b| b.status == BatchStatus::Running) {
        acted.extend(paused(&turn(&mut next, &rows, at(ms))));
        ms += 250;
        assert!(ms < 60_000, "the batch never ends");
    }
    let expected: Vec<ExecutionId> = rows.iter().map(|r| r.execution_id.clone()).collect();
    assert_eq!(acted, expected, "each once, newest first");
    let done = next.batches().next().expect("the batch");
    assert_eq!(done.counts.acted, 7);
}

#[test]
fn bad_commands_are_dead_lettered_with_why_and_change_nothing() {
    let mut p = processor(1 << 20);
    let effects = step(&mut p, start("b", 0.0));
    let dead = dead_letters(&effects);
    assert_eq!(dead.len(), 1, "{effects:?}");
    assert_eq!(dead[0].0, DlqReason::Refused);
    assert!(dead[0].1.contains("must be more than 0"), "{}", dead[0].1);
    assert_eq!(p.batches().count(), 0);
    // On another partition's key: misrouted.
    let Input::Record { body, .. } = start("b", 1.0) else {
        unreachable!()
    };
    let misrouted = Input::Record {
        index: 0,
        partition: 0,
        key: Some("weir:batch:other".into()),
        size: 100,
        body,
        timestamp: None,
    };
    let effects = step(&mut p, misrouted);
    assert_eq!(dead_letters(&effects)[0].0, DlqReason::Misrouted);
    assert_eq!(p.batches().count(), 0);
}
