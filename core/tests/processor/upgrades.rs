//! Upgrades of an execution to another build.

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::records::HistoryEntry;
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

/// The simulation's runner, pinning new executions to build `sha256:a` and noting the build
/// each start runs on.
#[derive(Clone, Default)]
struct PinningRunner {
    starts: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl weir_core::runner::WorkflowRunner for PinningRunner {
    type Run = <SimRunner as weir_core::runner::WorkflowRunner>::Run;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn component_of(&self, _: &weir_core::model::Ffqn) -> Option<String> {
        Some("sha256:a".to_owned())
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        self.starts
            .lock()
            .expect("not poisoned")
            .push(execution.component.clone());
        SimRunner.start(execution, history, responses, now).await
    }
}

/// Issue 14 item 1: a new execution is pinned to its runner's build, in `Created`. An
/// upgrade request is taken only while the changelog has the length the build was checked
/// against: then `Upgraded` is journalled, the parked run dropped, and the next input (the
/// delay firing) rebuilds the run on the new build; a rebuild from the store (another owner)
/// also runs the new build. A stale request is dead-lettered `conflict`, one for a finished
/// execution `refused`, one for the build it already runs on changes nothing.
#[test]
fn an_upgrade_is_taken_only_for_the_history_it_was_checked_against() {
    use weir_core::model::Response;
    use weir_core::records::{DlqReason, UpgradeRequest};

    let runner = PinningRunner::default();
    let mut processor = processor_of(runner.clone(), 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Sleepy, json!([1, 5_000, 0])),
    );
    let journal = appended(&created);
    assert!(
        matches!(&journal[0], (0, HistoryEntry::Created(c)) if c.component.as_deref() == Some("sha256:a")),
        "{journal:?}"
    );
    let length = journal.len() as u64;
    let upgrade = |to: &str, expected_seq: u64| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Upgrade(UpgradeRequest {
            execution_id: id.clone(),
            component: to.to_owned(),
            expected_seq,
            requested_at: now(),
        })),
        timestamp: None,
    };
    let refused = |effects: &[Effect]| {
        effects.iter().find_map(|e| match e {
            Effect::DeadLetter { reason, error, .. } => Some((*reason, error.clone())),
            _ => None,
        })
    };

    let stale = step(&mut processor, upgrade("sha256:b", length - 1));
    assert!(appended(&stale).is_empty(), "{stale:?}");
    assert!(
        matches!(refused(&stale), Some((DlqReason::Conflict, e)) if e.contains(&format!("{length} records"))),
        "{stale:?}"
    );

    let taken = step(&mut processor, upgrade("sha256:b", length));
    assert_eq!(
        appended(&taken),
        vec![(
            length,
            HistoryEntry::Upgraded {
                from: Some("sha256:a".into()),
                to: "sha256:b".into()
            }
        )]
    );
    let again = step(&mut processor, upgrade("sha256:b", length + 1));
    assert!(
        appended(&again).is_empty() && refused(&again).is_none(),
        "{again:?}"
    );

    // The delay fires: the run is rebuilt on the new build and finishes.
    let mut history = stored(&id, &created, now());
    history.extend(stored(&id, &taken, now()));
    let timer = created
        .iter()
        .find_map(|e| match e {
            Effect::PutTimer(t) if t.kind == weir_core::rows::TimerKind::Delay => Some(t.clone()),
            _ => None,
        })
        .expect("the delay's timer");
    let due = Input::TimerDue(timer.clone());
    let mut batch = Batch::new(now());
    if processor.needs(&batch, &due).is_some() {
        block_on(processor.rehydrate(&mut batch, &id, Some(history.clone()))).expect("rebuilt");
    }
    block_on(processor.step(&mut batch, due)).expect("no processor error");
    let fired = batch.effects;
    let activity = fired
        .iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the run goes on after its sleep: {fired:?}"));
    assert_eq!(
        runner.starts.lock().expect("not poisoned").as_slice(),
        [Some("sha256:a".to_owned()), Some("sha256:b".to_owned())],
        "started on the first build, rebuilt on the second"
    );
    let answered = step(
        &mut processor,
        Input::Record {
            index: 0,
            partition: 0,
            key: Some(id.to_string()),
            size: 100,
            body: Ok(Body::Response(Response::ChildExecutionFinished {
                child_execution_id: activity,
                result: ExecutionResult::Ok(json!(0)),
                ran: None,
            })),
            timestamp: None,
        },
    );
    assert!(
        answered
            .iter()
            .any(|e| matches!(e, Effect::PublishResult(_))),
        "{answered:?}"
    );
    let length = length + 1 + appended(&fired).len() as u64 + appended(&answered).len() as u64;
    let finished = step(&mut processor, upgrade("sha256:c", length));
    assert!(
        matches!(refused(&finished), Some((DlqReason::Refused, e)) if e.contains("finished")),
        "{finished:?}"
    );

    // Another owner rebuilding from the store runs the new build too.
    let other = PinningRunner::default();
    let mut owner = processor_of(other.clone(), 1 << 20);
    let mut batch = Batch::new(now());
    block_on(owner.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert_eq!(
        other.starts.lock().expect("not poisoned").as_slice(),
        [Some("sha256:b".to_owned())]
    );
}
