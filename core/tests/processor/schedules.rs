//! Schedules: created by their commands, each tick starting one execution, overlap
//! policies, catch-up, pause, resume and delete, and a new owner going on from the
//! committed state.

use crate::fixtures::*;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::{DlqReason, Submission};
use weir_core::schedule::{
    self, METADATA_SCHEDULE, METADATA_TICK, Overlap, ScheduleAction, ScheduleCommand, ScheduleSpec,
    ScheduleState, Status, tick_execution_id,
};
use weir_core::sim::{SimRunner, Workflow};

const NAME: &str = "every-second";

/// `now()` plus `ms` milliseconds.
fn at(ms: i64) -> DateTime<Utc> {
    now() + Duration::milliseconds(ms)
}

/// Every second in UTC, starting `workflow` with `params`.
fn spec(overlap: Overlap, workflow: Workflow, params: serde_json::Value) -> ScheduleSpec {
    ScheduleSpec {
        cron: "* * * * * *".to_owned(),
        timezone: "UTC".to_owned(),
        ffqn: workflow.ffqn(),
        params,
        overlap,
        catchup_window: schedule::DEFAULT_CATCHUP_WINDOW,
    }
}

fn command(
    name: &str,
    id: &str,
    action: ScheduleAction,
    sent_at: DateTime<Utc>,
) -> ScheduleCommand {
    ScheduleCommand {
        name: name.to_owned(),
        command_id: id.to_owned(),
        action,
        sent_at,
    }
}

/// The input record of `command`, keyed `key`, read on `partition`.
fn input_on(partition: i32, key: Option<String>, command: ScheduleCommand) -> Input {
    Input::Record {
        index: 0,
        partition,
        key,
        size: 100,
        body: Ok(Body::Schedule(command)),
        timestamp: None,
    }
}

/// The input record of `command`, where it belongs (partition 0 of one).
fn input(command: ScheduleCommand) -> Input {
    let key = weir_core::state_key::StateKey::schedule(&command.name).to_string();
    input_on(0, Some(key), command)
}

/// The effects of the schedule ticks due at `now`.
fn fire<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    now: DateTime<Utc>,
) -> Vec<Effect> {
    let mut batch = Batch::new(now);
    processor.fire_schedules(&mut batch);
    batch.effects
}

/// The schedule states `effects` put, in order.
fn puts(effects: &[Effect]) -> Vec<(String, Option<ScheduleState>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PutSchedule { name, state } => Some((name.clone(), state.clone())),
            _ => None,
        })
        .collect()
}

/// The one state `effects` put for `NAME`.
fn put(effects: &[Effect]) -> ScheduleState {
    match puts(effects).as_slice() {
        [(name, Some(state))] if name == NAME => state.clone(),
        other => panic!("one state of {NAME} expected: {other:?} in {effects:?}"),
    }
}

fn submits(effects: &[Effect]) -> Vec<Submission> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Submit(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// A processor with the schedule `NAME` of `spec` created at `now() + 200 ms` (by the
/// command `c1`), and that state.
fn created(spec: ScheduleSpec) -> (Processor<SimRunner>, ScheduleState) {
    let mut processor = processor(1 << 20);
    let create = command(NAME, "c1", ScheduleAction::Create(spec), at(200));
    let effects = step_at(&mut processor, input(create), at(200));
    let state = put(&effects);
    (processor, state)
}

/// A schedule is created by its command (its state put on `weir.state`), and each tick
/// starts one execution, once: its id is the tick's, its metadata names the schedule and
/// the tick; firing again at the same time does nothing. A tick's execution that finishes
/// tells its schedule (`RunFinished` to the schedule's key), which forgets the run.
#[test]
fn a_schedule_is_created_and_each_tick_starts_one_execution() {
    let spec = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    let (mut processor, state) = created(spec.clone());
    assert_eq!(state.name, NAME);
    assert_eq!(state.generation, "c1");
    assert_eq!(state.spec, spec);
    assert_eq!(state.status, Status::Active);
    assert_eq!(state.last_tick, None);
    assert_eq!(state.next_tick, Some(at(1_000)));
    assert_eq!((state.started, state.skipped, state.missed), (0, 0, 0));
    assert_eq!(
        processor.schedules().cloned().collect::<Vec<_>>(),
        vec![state.clone()]
    );

    // Not due yet: nothing.
    assert!(!processor.schedule_due(at(999)));
    assert!(fire(&mut processor, at(999)).is_empty());

    // The first tick: one submission and the new state, in this order of effects.
    assert!(processor.schedule_due(at(1_000)));
    let effects = fire(&mut processor, at(1_000));
    let id = tick_execution_id(NAME, "c1", at(1_000));
    let started = submits(&effects);
    assert_eq!(started.len(), 1, "{effects:?}");
    let submission = &started[0];
    assert_eq!(submission.execution_id, id);
    assert_eq!(submission.ffqn, spec.ffqn);
    assert_eq!(submission.params, spec.params);
    assert_eq!(submission.parent, None);
    assert_eq!(
        submission
            .metadata
            .get(METADATA_SCHEDULE)
            .map(String::as_str),
        Some(NAME)
    );
    assert_eq!(
        submission.metadata.get(METADATA_TICK).cloned(),
        Some(at(1_000).to_rfc3339())
    );
    let state = put(&effects);
    assert_eq!(state.last_tick, Some(at(1_000)));
    assert_eq!(state.next_tick, Some(at(2_000)));
    assert_eq!(state.running, vec![id.clone()]);
    assert_eq!(state.started, 1);
    assert_eq!(processor.stats().ticks_started, 1);

    // Again at the same time: nothing (the tick was taken).
    assert!(!processor.schedule_due(at(1_000)));
    assert!(fire(&mut processor, at(1_000)).is_empty());

    // Two more ticks owed: two submissions, in tick order.
    let effects = fire(&mut processor, at(3_500));
    let ids: Vec<ExecutionId> = submits(&effects)
        .into_iter()
        .map(|s| s.execution_id)
        .collect();
    assert_eq!(
        ids,
        vec![
            tick_execution_id(NAME, "c1", at(2_000)),
            tick_execution_id(NAME, "c1", at(3_000))
        ]
    );
    let state = put(&effects);
    assert_eq!(state.running.len(), 3);
    assert_eq!(state.last_tick, Some(at(3_000)));

    // The first tick's execution runs (here, in the same processor: one partition) and
    // finishes at once (`seq` of no steps): it tells its schedule.
    let record = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Submission(submission.clone())),
        timestamp: None,
    };
    let effects = step_at(&mut processor, record, at(3_600));
    assert_eq!(published(&effects), Some(ExecutionResult::Ok(json!(0))));
    let told: Vec<&ScheduleCommand> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::ScheduleCommand(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 1, "{effects:?}");
    assert_eq!(told[0].name, NAME);
    assert_eq!(told[0].action, ScheduleAction::RunFinished(id.clone()));
    // The schedule forgets the run when the command comes back.
    let effects = step_at(&mut processor, input(told[0].clone()), at(3_700));
    let after = put(&effects);
    assert!(!after.running.contains(&id), "{after:?}");
    assert_eq!(after.running.len(), 2);
    // ... and again (a duplicate): nothing.
    assert!(step_at(&mut processor, input(told[0].clone()), at(3_800)).is_empty());

    // An execution not started by a schedule tells none.
    let effects = submit(&mut processor, Workflow::Seq, json!([0, 5]));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::ScheduleCommand(_))),
        "{effects:?}"
    );
}

/// `skip`: a tick while the previous tick's execution runs starts nothing (counted); once
/// its `RunFinished` came, the next tick starts again.
#[test]
fn overlap_skip_waits_for_the_running_tick() {
    let (mut processor, _) = created(spec(Overlap::Skip, Workflow::Seq, json!([1, 5])));
    let first = fire(&mut processor, at(1_000));
    let id = tick_execution_id(NAME, "c1", at(1_000));
    assert_eq!(submits(&first).len(), 1);
    let skipped = fire(&mut processor, at(2_000));
    assert!(submits(&skipped).is_empty(), "{skipped:?}");
    let state = put(&skipped);
    assert_eq!((state.started, state.skipped), (1, 1));
    assert_eq!(state.last_tick, Some(at(2_000)));
    assert_eq!(state.running, vec![id.clone()]);
    assert_eq!(processor.stats().ticks_skipped, 1);

    let finished = command(
        NAME,
        &format!("run-finished:{id}"),
        ScheduleAction::RunFinished(id),
        at(2_500),
    );
    let state = put(&step_at(&mut processor, input(finished), at(2_500)));
    assert!(state.running.is_empty());
    let third = fire(&mut processor, at(3_000));
    assert_eq!(
        submits(&third)
            .into_iter()
            .map(|s| s.execution_id)
            .collect::<Vec<_>>(),
        vec![tick_execution_id(NAME, "c1", at(3_000))]
    );
    assert_eq!(put(&third).started, 2);
}

/// `cancel-previous`: a tick cancels the running executions (not terminated), then
/// starts its own.
#[test]
fn overlap_cancel_previous_cancels_the_running_tick() {
    let (mut processor, _) = created(spec(Overlap::CancelPrevious, Workflow::Seq, json!([1, 5])));
    fire(&mut processor, at(1_000));
    let previous = tick_execution_id(NAME, "c1", at(1_000));
    let effects = fire(&mut processor, at(2_000));
    let cancels: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelExecution(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(cancels.len(), 1, "{effects:?}");
    assert_eq!(cancels[0].execution_id, previous);
    assert!(!cancels[0].terminate);
    let next = tick_execution_id(NAME, "c1", at(2_000));
    assert_eq!(
        submits(&effects)
            .into_iter()
            .map(|s| s.execution_id)
            .collect::<Vec<_>>(),
        vec![next.clone()]
    );
    assert_eq!(put(&effects).running, vec![next]);
}

/// Ticks owed longer than the catch-up window are counted missed and start nothing; those
/// within it start.
#[test]
fn ticks_beyond_the_catchup_window_are_missed() {
    let mut spec = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    spec.catchup_window = Duration::seconds(2);
    let (mut processor, _) = created(spec);
    let effects = fire(&mut processor, at(10_000));
    let ticks: Vec<String> = submits(&effects)
        .into_iter()
        .map(|s| s.metadata[METADATA_TICK].clone())
        .collect();
    assert_eq!(
        ticks,
        [8_000, 9_000, 10_000]
            .map(|ms| at(ms).to_rfc3339())
            .to_vec()
    );
    let state = put(&effects);
    assert_eq!((state.started, state.skipped, state.missed), (3, 0, 7));
    assert_eq!(processor.stats().ticks_missed, 7);
}

/// Pause: no tick fires, and a pause again changes nothing; resume: from the next tick
/// after now (the ticks while paused are not owed); delete: the state's tombstone, no
/// more ticks, and commands about it are refused (a delete again changes nothing).
#[test]
fn pause_resume_and_delete() {
    let (mut processor, _) = created(spec(Overlap::Allow, Workflow::Seq, json!([0, 5])));
    let pause = command(NAME, "p1", ScheduleAction::Pause, at(500));
    let paused = put(&step_at(&mut processor, input(pause.clone()), at(500)));
    assert_eq!(paused.status, Status::Paused);
    assert_eq!(paused.updated_at, at(500));
    assert!(!processor.schedule_due(at(5_000)));
    assert!(fire(&mut processor, at(5_000)).is_empty());
    assert!(step_at(&mut processor, input(pause), at(5_100)).is_empty());

    let resume = command(NAME, "r1", ScheduleAction::Resume, at(5_500));
    let resumed = put(&step_at(&mut processor, input(resume.clone()), at(5_500)));
    assert_eq!(resumed.status, Status::Active);
    assert_eq!(resumed.next_tick, Some(at(6_000)));
    assert!(step_at(&mut processor, input(resume), at(5_600)).is_empty());
    let effects = fire(&mut processor, at(6_000));
    assert_eq!(
        submits(&effects)
            .into_iter()
            .map(|s| s.execution_id)
            .collect::<Vec<_>>(),
        vec![tick_execution_id(NAME, "c1", at(6_000))],
        "only the tick after the resume"
    );
    assert_eq!(put(&effects).started, 1);

    let delete = command(NAME, "d1", ScheduleAction::Delete, at(6_500));
    let effects = step_at(&mut processor, input(delete.clone()), at(6_500));
    assert_eq!(puts(&effects), vec![(NAME.to_owned(), None)]);
    assert_eq!(processor.schedules().count(), 0);
    assert!(!processor.schedule_due(at(60_000)));
    assert!(fire(&mut processor, at(60_000)).is_empty());
    assert!(step_at(&mut processor, input(delete), at(7_000)).is_empty());
    let pause = command(NAME, "p2", ScheduleAction::Pause, at(7_000));
    let effects = step_at(&mut processor, input(pause), at(7_000));
    assert_eq!(dead_letters(&effects)[0].0, DlqReason::Other, "{effects:?}");
    assert!(puts(&effects).is_empty());
}

/// A create of the same spec again (a declaration applied again) changes nothing: the
/// generation, and with it every tick's id, stays.
#[test]
fn the_same_create_again_changes_nothing() {
    let spec = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    let (mut processor, state) = created(spec.clone());
    let again = command(NAME, "c2", ScheduleAction::Create(spec), at(700));
    assert!(step_at(&mut processor, input(again), at(700)).is_empty());
    assert_eq!(processor.schedules().next(), Some(&state));
    let effects = fire(&mut processor, at(1_000));
    assert_eq!(
        submits(&effects)[0].execution_id,
        tick_execution_id(NAME, "c1", at(1_000))
    );
}

/// A command is keyed `schedule:<name>` on the partition murmur2 gives that key; any
/// other is dead-lettered `misrouted` (another worker owns the schedule) and changes
/// nothing.
#[test]
fn a_misrouted_command_is_dead_lettered() {
    let mut processor = Processor::new(
        SimRunner,
        ProcessorConfig {
            cache_bytes: 1 << 30,
            cache_size: 16,
            max_record_bytes: 1 << 20,
            partitions: 4,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        },
    );
    let key = weir_core::state_key::StateKey::schedule(NAME).to_string();
    let home = processor.partition_of_key(&key);
    let other = (home + 1) % 4;
    let create = || {
        command(
            NAME,
            "c1",
            ScheduleAction::Create(spec(Overlap::Allow, Workflow::Seq, json!([0, 5]))),
            at(0),
        )
    };
    for (partition, key) in [
        (home, Some(NAME.to_owned())),
        (home, Some("schedule:another".to_owned())),
        (home, None),
        (other, Some(key.clone())),
    ] {
        let effects = step_at(
            &mut processor,
            input_on(partition, key.clone(), create()),
            at(0),
        );
        let dead = dead_letters(&effects);
        assert_eq!(dead.len(), 1, "{partition} {key:?}: {effects:?}");
        assert_eq!(dead[0].0, DlqReason::Misrouted, "{partition} {key:?}");
        assert!(dead[0].1.contains(NAME), "{}", dead[0].1);
        assert!(puts(&effects).is_empty());
        assert_eq!(processor.schedules().count(), 0);
    }
    // Where it belongs: created.
    let effects = step_at(&mut processor, input_on(home, Some(key), create()), at(0));
    assert!(dead_letters(&effects).is_empty(), "{effects:?}");
    assert_eq!(puts(&effects).len(), 1);
}

/// A create of a function nobody exports, or with params that do not fit it, or with a
/// cron expression that does not parse, is dead-lettered with why; no schedule exists.
#[test]
fn a_create_that_cannot_run_is_refused() {
    let mut unknown = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    unknown.ffqn = weir_core::sim::workflows::unknown_ffqn();
    let mut bad_cron = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    bad_cron.cron = "every second".to_owned();
    let mut bad_zone = spec(Overlap::Allow, Workflow::Seq, json!([0, 5]));
    bad_zone.timezone = "Mars/Olympus".to_owned();
    for (spec, reason, why) in [
        (unknown, DlqReason::UnknownFfqn, "flows.nope"),
        (
            spec(Overlap::Allow, Workflow::Seq, json!([0])),
            DlqReason::InvalidParams,
            "takes 2 params",
        ),
        (bad_cron, DlqReason::InvalidParams, "every second"),
        (bad_zone, DlqReason::InvalidParams, "Mars/Olympus"),
    ] {
        let mut processor = processor(1 << 20);
        let create = command(NAME, "c1", ScheduleAction::Create(spec), at(0));
        let effects = step_at(&mut processor, input(create), at(0));
        let dead = dead_letters(&effects);
        assert_eq!(dead.len(), 1, "{effects:?}");
        assert_eq!(dead[0].0, reason, "{}", dead[0].1);
        assert!(dead[0].1.contains(why), "{}", dead[0].1);
        assert!(puts(&effects).is_empty());
        assert_eq!(processor.schedules().count(), 0);
        assert!(fire(&mut processor, at(5_000)).is_empty());
    }
}

/// A new owner restores the committed states (`weir.state`) and goes on from them: a tick
/// whose state committed is not taken again; one whose batch aborted (the state before it
/// restored) is taken again with the same execution id.
#[test]
fn a_restored_schedule_goes_on_from_its_committed_state() {
    let (mut first, created) = created(spec(Overlap::Allow, Workflow::Seq, json!([0, 5])));
    let committed = put(&fire(&mut first, at(1_000)));

    let mut owner = processor(1 << 20);
    assert!(!owner.schedule_due(at(5_000)));
    owner.restore_schedules([committed.clone()]);
    assert_eq!(
        owner.schedules().cloned().collect::<Vec<_>>(),
        vec![committed]
    );
    assert!(
        fire(&mut owner, at(1_500)).is_empty(),
        "the tick of 1 s was taken"
    );
    let effects = fire(&mut owner, at(2_000));
    assert_eq!(
        submits(&effects)
            .into_iter()
            .map(|s| s.execution_id)
            .collect::<Vec<_>>(),
        vec![tick_execution_id(NAME, "c1", at(2_000))]
    );
    assert_eq!(put(&effects).started, 2);

    // The batch of the first tick aborted: the state before it is restored, and the tick
    // makes the same submission as before.
    let mut again = processor(1 << 20);
    again.restore_schedules([created]);
    let effects = fire(&mut again, at(1_000));
    assert_eq!(
        submits(&effects)
            .into_iter()
            .map(|s| s.execution_id)
            .collect::<Vec<_>>(),
        vec![tick_execution_id(NAME, "c1", at(1_000))]
    );

    // Forgetting (a take-over, an aborted batch) drops the schedules until restored.
    again.clear();
    assert_eq!(again.schedules().count(), 0);
    assert!(fire(&mut again, at(9_000)).is_empty());
}
