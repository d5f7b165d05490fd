use super::*;
use crate::rows::{ListBy, ListedExecution};

fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
}

fn id(n: u32) -> ExecutionId {
    format!("E_01ARZ3NDEKTSV4RRFFQ69G{n:04}")
        .parse()
        .expect("an id")
}

fn spec(action: BatchAction, per_second: f64) -> BatchSpec {
    BatchSpec {
        filter: BatchFilter {
            by: ListBy::Function("ns:pkg/ifc.wf".into()),
            state: None,
            outcome: None,
            created_from: None,
            created_until: None,
        },
        action,
        per_second,
        reason: "bad deploy".into(),
    }
}

fn start(id: &str, spec: BatchSpec) -> BatchCommand {
    BatchCommand {
        id: id.into(),
        action: BatchCommandAction::Start(spec),
        requested_at: t(0),
    }
}

fn started(spec: BatchSpec) -> BatchState {
    match apply(None, &start("b1", spec), t(0)) {
        Applied::Put(state) => *state,
        other => panic!("not started: {other:?}"),
    }
}

/// `n` executions created before the start, newest first, in `state`s by index.
fn executions(states: &[ExecutionState]) -> Vec<ListedExecution> {
    states
        .iter()
        .enumerate()
        .map(|(i, s)| ListedExecution {
            execution_id: id(i as u32),
            ffqn: "ns:pkg/ifc.wf".into(),
            parent_id: None,
            state: *s,
            outcome: None,
            created_at: t(-1_000 - i as i64),
            finished_at: None,
        })
        .collect()
}

/// The store's answer to `query` over `all`.
fn page(all: &[ListedExecution], query: &ListQuery) -> ListPage {
    query.page(all.iter().cloned())
}

#[test]
fn a_start_pins_the_creation_range_and_a_second_start_changes_nothing() {
    let state = started(spec(BatchAction::Pause, 5.0));
    assert_eq!(state.status, BatchStatus::Running);
    assert_eq!(state.spec.filter.created_until, Some(t(0)));
    assert_eq!(
        apply(
            Some(&state),
            &start("b1", spec(BatchAction::Pause, 5.0)),
            t(9)
        ),
        Applied::Unchanged
    );
    assert!(matches!(
        apply(
            Some(&state),
            &start("b1", spec(BatchAction::Resume, 5.0)),
            t(9)
        ),
        Applied::Refused(BatchError::Exists(_))
    ));
}

#[test]
fn bad_input_is_refused_with_why() {
    for rate in [0.0, -1.0, f64::NAN] {
        let refused = apply(None, &start("b1", spec(BatchAction::Pause, rate)), t(0));
        assert!(
            matches!(refused, Applied::Refused(BatchError::Rate { .. })),
            "{rate}: {refused:?}"
        );
    }
    assert!(matches!(
        apply(None, &start("a b", spec(BatchAction::Pause, 1.0)), t(0)),
        Applied::Refused(BatchError::BadId(_))
    ));
    assert_eq!(
        "reboot".parse::<BatchAction>(),
        Err(BatchError::UnknownAction("reboot".into()))
    );
    let cancel = BatchCommand {
        id: "nope".into(),
        action: BatchCommandAction::Cancel,
        requested_at: t(0),
    };
    assert_eq!(
        apply(None, &cancel, t(0)),
        Applied::Refused(BatchError::Unknown("nope".into()))
    );
}

#[test]
fn each_execution_gets_one_outcome_within_the_rate_and_the_batch_ends() {
    use ExecutionState::*;
    let all = executions(&[
        Running, Paused, Finished, Running, Running, Scheduled, Running,
    ]);
    let mut state = started(spec(BatchAction::Pause, 2.0));
    let mut acted = Vec::new();
    let mut outcomes = Vec::new();
    let mut turns_at = Vec::new();
    let mut now = 0;
    while state.status == BatchStatus::Running {
        assert!(now < 60_000, "the batch never ends: {state:?}");
        if let Some(query) = wants(&state, t(now)) {
            let advanced = advance(&state, &page(&all, &query), t(now));
            assert_eq!(
                advanced.state.counts.seen() - state.counts.seen(),
                advanced.outcomes.len() as u64,
                "progress is the outcomes"
            );
            for r in &advanced.requests {
                assert!(r.reason().starts_with("batch b1: "));
                acted.push(r.execution_id().clone());
                turns_at.push(now);
            }
            outcomes.extend(advanced.outcomes);
            state = advanced.state;
        } else {
            assert!(next_token(&state).is_some_and(|at| at > t(now)));
        }
        now += 100;
    }
    assert_eq!(state.status, BatchStatus::Done);
    // Every execution once, in list order; the paused and the finished skipped.
    let ids: Vec<_> = outcomes.iter().map(|o| o.execution_id.clone()).collect();
    assert_eq!(ids, (0..7).map(id).collect::<Vec<_>>());
    assert_eq!(acted, [0, 3, 4, 5, 6].map(id));
    assert_eq!(outcomes[1].outcome, Outcome::AlreadyThere);
    assert_eq!(outcomes[2].outcome, Outcome::Finished);
    assert_eq!(
        state.counts,
        BatchCounts {
            acted: 5,
            finished: 1,
            already: 1
        }
    );
    // 2 a second, a burst of 2: within any span [s, e], at most 2 + 2·(e − s).
    for (i, s) in turns_at.iter().enumerate() {
        for (j, e) in turns_at.iter().enumerate().skip(i) {
            let allowed = 2.0 + 2.0 * (e - s) as f64 / 1_000.0;
            assert!((j - i + 1) as f64 <= allowed, "{turns_at:?}");
        }
    }
}

#[test]
fn a_cancelled_batch_sends_nothing_more() {
    let all = executions(&[ExecutionState::Running; 3]);
    let state = started(spec(BatchAction::Terminate, 1.0));
    let cancel = BatchCommand {
        id: "b1".into(),
        action: BatchCommandAction::Cancel,
        requested_at: t(0),
    };
    let Applied::Put(cancelled) = apply(Some(&state), &cancel, t(1)) else {
        panic!("not cancelled");
    };
    assert_eq!(cancelled.status, BatchStatus::Cancelled);
    assert_eq!(wants(&cancelled, t(10_000)), None);
    let query = wants(&state, t(0)).expect("a token");
    let advanced = advance(&cancelled, &page(&all, &query), t(0));
    assert!(advanced.requests.is_empty());
    assert_eq!(apply(Some(&cancelled), &cancel, t(2)), Applied::Unchanged);
}

#[test]
fn resume_acts_on_paused_ones_only_and_cancel_terminate_send_cancellations() {
    assert_eq!(
        decide(BatchAction::Resume, ExecutionState::Running),
        Outcome::AlreadyThere
    );
    assert_eq!(
        decide(BatchAction::Resume, ExecutionState::Paused),
        Outcome::Acted
    );
    assert_eq!(
        decide(BatchAction::Cancel, ExecutionState::Finished),
        Outcome::Finished
    );
    let s = spec(BatchAction::Terminate, 1.0);
    match request("b1", &s, &id(1), t(0)) {
        BatchRequest::Cancel(c) => assert!(c.terminate),
        other => panic!("{other:?}"),
    }
}
