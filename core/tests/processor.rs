//! The partition processor's rules driven directly, with the simulation's scripted workflows:
//! inputs in, effects out, no log and no store.

use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::{HistoryEntry, Submission};
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
}

fn processor(max_record_bytes: usize) -> Processor<SimRunner> {
    processor_of(SimRunner, max_record_bytes)
}

/// A processor of `runner` with room for 16 runs, on one partition.
fn processor_of<R: weir_core::runner::WorkflowRunner>(
    runner: R,
    max_record_bytes: usize,
) -> Processor<R> {
    Processor::new(
        runner,
        ProcessorConfig {
            cache_bytes: 1 << 30,
            cache_size: 16,
            max_record_bytes,
            partitions: 1,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        },
    )
}

/// The input record of a top-level submission of `workflow` with `params` as `id`.
fn submission_input(id: &ExecutionId, workflow: Workflow, params: serde_json::Value) -> Input {
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Submission(Submission {
            execution_id: id.clone(),
            ffqn: workflow.ffqn(),
            params,
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
        })),
    }
}

/// The effects of `input`, stepped alone in a batch at `now()`.
fn step<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    input: Input,
) -> Vec<Effect> {
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    batch.effects
}

/// The effects of submitting `workflow` with `params` (a new execution) to `processor`.
fn submit<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    workflow: Workflow,
    params: serde_json::Value,
) -> Vec<Effect> {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(processor, submission_input(&id, workflow, params))
}

/// The history `effects` append to `id`, as the store would return it (recorded at `at`).
fn stored(
    id: &ExecutionId,
    effects: &[Effect],
    at: DateTime<Utc>,
) -> Vec<(weir_core::records::HistoryRecord, DateTime<Utc>)> {
    appended(effects)
        .into_iter()
        .map(|(seq, entry)| {
            let record = weir_core::records::HistoryRecord {
                execution_id: id.clone(),
                seq,
                entry,
            };
            (record, at)
        })
        .collect()
}

/// The appended history entries of `effects`, with their seqs.
fn appended(effects: &[Effect]) -> Vec<(u64, HistoryEntry)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { seq, entry, .. } => Some((*seq, entry.clone())),
            _ => None,
        })
        .collect()
}

/// Issue 11 item 7: a value no record can carry (here the params of the first activity, with
/// a record limit that leaves 2 bytes for them) would fail its batch forever. The step that
/// made it is not taken: the execution finishes with `value-too-large` and requests nothing.
#[test]
fn a_value_too_large_for_a_record_ends_the_execution_instead_of_its_batch() {
    // 16 KiB is the room a record needs around its value.
    let mut tight = processor(16 * 1024 + 2);
    let effects = submit(&mut tight, Workflow::Seq, json!([1, 5]));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
    let finished: Vec<&ExecutionResult> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishResult(f) => Some(&f.result),
            _ => None,
        })
        .collect();
    assert!(
        matches!(finished.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::ValueTooLarge && e.reason.contains("the params of child")),
        "{finished:?}"
    );
    // The history is Created, then Finished: none of the refused step's events.
    let entries: Vec<&HistoryEntry> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { entry, .. } => Some(entry),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            entries.as_slice(),
            [HistoryEntry::Created(_), HistoryEntry::Finished { .. }]
        ),
        "{entries:?}"
    );

    // With room for them, the same submission requests its activity.
    let mut roomy = processor(1 << 20);
    let effects = submit(&mut roomy, Workflow::Seq, json!([1, 5]));
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
}

/// A runner whose runs each hold one of `free` instance slots while they exist, as the
/// wasmtime host's parked runs hold pool instances.
struct SlotRunner {
    free: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

struct SlotRun {
    inner: <SimRunner as weir_core::runner::WorkflowRunner>::Run,
    free: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Drop for SlotRun {
    fn drop(&mut self) {
        self.free.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl weir_core::runner::WorkflowRun for SlotRun {
    async fn deliver(
        &mut self,
        response: weir_core::model::Response,
        now: DateTime<Utc>,
    ) -> Result<weir_core::runner::RunStep, weir_core::runner::RunError> {
        self.inner.deliver(response, now).await
    }

    fn resident_bytes(&self) -> usize {
        self.inner.resident_bytes()
    }
}

impl weir_core::runner::WorkflowRunner for SlotRunner {
    type Run = SlotRun;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        use std::sync::atomic::Ordering;
        if self
            .free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(weir_core::runner::RunError::NoCapacity {
                execution: execution.id.to_string(),
                reason: "every instance is taken".into(),
            });
        }
        let free = std::sync::Arc::clone(&self.free);
        match SimRunner.start(execution, history, responses, now).await {
            Ok((inner, step)) => Ok((SlotRun { inner, free }, step)),
            Err(e) => {
                free.fetch_add(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }
}

/// The `retry` timer among `effects`.
fn retry_timer(effects: &[Effect]) -> Option<weir_core::rows::TimerRow> {
    effects.iter().find_map(|e| match e {
        Effect::PutTimer(t) if t.kind == weir_core::rows::TimerKind::Retry => Some(t.clone()),
        _ => None,
    })
}

/// Issue 11 items 10 and 17: a run the host cannot start for a reason that passes (here a
/// full instance pool) was finished with `trap`, a permanent failure of a healthy execution.
/// It is parked instead, its start tried again by a `retry` timer after 1 s, then 2 s, and it
/// runs once the host has room. The timer is durable: a new owner of the partition (a
/// processor that never saw the deferral, as after a take-over) that loads it from the store
/// tries the start too (before, the retries lived in memory and a new owner never tried).
#[test]
fn a_start_the_host_has_no_room_for_is_deferred_not_failed() {
    // No slot free on the first owner; one on the next.
    let runner = |free| SlotRunner {
        free: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(free)),
    };
    let config = ProcessorConfig {
        cache_bytes: 1 << 30,
        cache_size: 16,
        max_record_bytes: 1 << 20,
        partitions: 1,
        early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
    };
    let mut processor = Processor::new(runner(0), config);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let effects = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([1, 5])),
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::PublishResult(_) | Effect::RequestActivity(_))),
        "parked, neither finished nor started: {effects:?}"
    );
    let mut history = stored(&id, &effects, now());
    assert_eq!(processor.deferred(), 1);
    assert_eq!(processor.stats().deferred_starts, 1);
    let later = |ms: i64| now() + chrono::Duration::milliseconds(ms);
    let timer = retry_timer(&effects).expect("a retry timer");
    assert_eq!(timer.due_at, later(1_000));
    assert_eq!(timer.execution_id, id);
    // Each retry as the driver runs it: rehydrate what `needs` names, then step.
    let retry = |processor: &mut Processor<SlotRunner>, timer, history: Vec<_>| {
        let input = Input::TimerDue(timer);
        let mut batch = Batch::new(later(1_000));
        if let Some((needed, _)) = processor.needs(&input) {
            block_on(processor.rehydrate(&mut batch, &needed, Some(history))).expect("rebuilt");
        }
        block_on(processor.step(&mut batch, input)).expect("no processor error");
        batch.effects
    };
    let effects = retry(&mut processor, timer, history.clone());
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_)))
    );
    let timer = retry_timer(&effects).expect("the next retry timer");
    assert_eq!(timer.due_at, later(3_000), "the second delay is 2 s");
    history.extend(stored(&id, &effects, later(1_000)));

    // A new owner (nothing in memory) loads the timer from the store and starts the run.
    let mut new_owner = Processor::new(runner(1), config);
    let effects = retry(&mut new_owner, timer, history);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "started once the pool had room: {effects:?}"
    );
    assert!(retry_timer(&effects).is_none(), "{effects:?}");
    assert_eq!(new_owner.deferred(), 0);
}

#[test]
fn start_retry_delays_double_up_to_a_minute() {
    use weir_core::processor::start_retry_delay;
    let table = [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (30, 60)];
    for (attempt, secs) in table {
        assert_eq!(
            start_retry_delay(attempt),
            chrono::Duration::seconds(secs),
            "attempt {attempt}"
        );
    }
}

/// Issue 11 item 7: a child's answer larger than a record may be (what an external service
/// can send) was dead-lettered and its parent waited forever. It is still dead-lettered, and
/// the parent is answered with `value-too-large` for that child.
#[test]
fn an_oversize_answer_is_dead_lettered_and_its_parent_answered_value_too_large() {
    use weir_core::model::Response;

    let mut processor = processor(1 << 20);
    let request = seq_request(&mut processor);
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(request.parent_execution_id.to_string()),
        size: 2 << 20,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(json!(10)),
        })),
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, answer)).expect("no processor error");
    assert!(
        batch.effects.iter().any(|e| matches!(
            e,
            Effect::DeadLetter {
                reason: weir_core::records::DlqReason::Oversize,
                ..
            }
        )),
        "{:?}",
        batch.effects
    );
    let journalled: Vec<&ExecutionResult> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append {
                entry:
                    HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                        child_execution_id,
                        result,
                    }),
                ..
            } if *child_execution_id == request.execution_id => Some(result),
            _ => None,
        })
        .collect();
    assert!(
        matches!(journalled.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::ValueTooLarge),
        "{journalled:?}"
    );
}

/// Issue 11 items 7 and 9: a top-level submission too large to take was only dead-lettered;
/// its caller never heard. It is answered with `value-too-large`, and nothing is created.
#[test]
fn an_oversize_submission_is_dead_lettered_and_answered() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 2 << 20,
        body: Ok(Body::Submission(Submission {
            execution_id: id.clone(),
            ffqn: Workflow::Seq.ffqn(),
            params: json!([1, 5]),
            parent: None,
            scheduled_at: None,
            correlation_id: Some("mine".into()),
            metadata: Default::default(),
            deadline: None,
        })),
    };
    let mut batch = Batch::new(now());
    assert_eq!(processor.needs(&input), Some((id.clone(), 0)));
    block_on(processor.rehydrate(&mut batch, &id, None)).expect("nothing stored");
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    assert!(
        !batch
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Append { .. })),
        "{:?}",
        batch.effects
    );
    let answers: Vec<_> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishResult(f) => Some(f),
            _ => None,
        })
        .collect();
    assert!(
        matches!(answers.as_slice(), [f] if f.execution_id == id
            && f.correlation_id.as_deref() == Some("mine")
            && matches!(&f.result, ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::ValueTooLarge)),
        "{answers:?}"
    );
}

/// Issue 11 item 13: closing a join set cancelled its unawaited activities and delays without
/// a trace in the execution's history (a finished parent ignored the late `cancelled` answer,
/// so nothing said what was cancelled), a cancelled delay's timer stayed in the store and fired
/// later, and the cancellation went to every route's topic. Now the execution journals each
/// cancellation itself — `cancelled` for an activity, `DelayFinished{cancelled}` for a delay,
/// whose timer goes with it — the cancel names the activity's function, a late answer is a
/// duplicate, and a rebuild from the journal replays to the same place.
#[test]
fn closing_a_join_set_journals_what_it_cancelled_and_a_rebuild_replays_it() {
    use weir_core::model::{DelayOutcome, Response};

    let mut processor = processor(1 << 20);
    let effects = submit(&mut processor, Workflow::Abandon, json!([2, 5_000, 7]));
    let activities: Vec<ExecutionId> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{effects:?}");
    let cancels: Vec<(&ExecutionId, &weir_core::model::Ffqn)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelActivity { child, ffqn, .. } => Some((child, ffqn)),
            _ => None,
        })
        .collect();
    let double = weir_core::sim::workflows::double_ffqn();
    assert_eq!(
        cancels,
        activities.iter().map(|a| (a, &double)).collect::<Vec<_>>()
    );
    let journal = appended(&effects);
    let cancelled: Vec<&ExecutionId> = journal
        .iter()
        .filter_map(|(_, entry)| match entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result: ExecutionResult::ExecutionError(e),
            }) if e.kind == ExecutionErrorKind::Cancelled => Some(child_execution_id),
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, activities.iter().collect::<Vec<_>>());
    let delay = journal.iter().find_map(|(_, entry)| match entry {
        HistoryEntry::ResponseAppended(Response::DelayFinished {
            delay_id,
            outcome: DelayOutcome::Cancelled,
        }) => Some(delay_id.to_string()),
        _ => None,
    });
    let delay = delay.expect("the delay's cancellation is journalled");
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::DeleteTimer(key) if key.timer_id == delay)),
        "the cancelled delay's timer is deleted: {effects:?}"
    );

    // The child workflow answers: the join set is closed, the last activity is requested.
    let id = match &journal[0] {
        (0, HistoryEntry::Created(_)) => match &effects[0] {
            Effect::Append { execution_id, .. } => execution_id.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let child = effects
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.execution_id.clone()),
            _ => None,
        })
        .expect("the child workflow is submitted");
    let answer = |child: &ExecutionId, value: i64| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result: ExecutionResult::Ok(json!(value)),
        })),
    };
    let answered = step(&mut processor, answer(&child, 14));
    assert!(
        answered
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{answered:?}"
    );
    let mut history = stored(&id, &effects, now());
    history.extend(stored(&id, &answered, now()));

    // A late answer of a cancelled activity is a duplicate: nothing is journalled.
    let late = step(&mut processor, answer(&activities[0], 14));
    assert!(appended(&late).is_empty(), "{late:?}");

    // A rebuild from the journal (another worker, or the evicted run) replays to the same
    // place: nothing new is appended, nothing is requested again.
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert!(batch.effects.is_empty(), "{:?}", batch.effects);
    assert_eq!(rebuilt.row(&id), processor.row(&id));
}

/// The simulation's runner, declaring its activity external: requests carry a 5 s attempt
/// bound and a 60 s deadline, and an answer that is not a number does not fit.
struct ExternalRunner;

impl weir_core::runner::WorkflowRunner for ExternalRunner {
    type Run = <SimRunner as weir_core::runner::WorkflowRunner>::Run;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn request_terms(&self, _: &weir_core::model::Ffqn) -> weir_core::runner::RequestTerms {
        weir_core::runner::RequestTerms {
            attempt_timeout: Some(std::time::Duration::from_secs(5)),
            deadline_after: Some(std::time::Duration::from_secs(60)),
        }
    }

    fn check_answer(
        &self,
        _: &weir_core::model::Ffqn,
        result: &ExecutionResult,
    ) -> Result<(), String> {
        match result {
            ExecutionResult::Ok(v) if !v.is_i64() => Err(format!("{v} is not a number")),
            _ => Ok(()),
        }
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        SimRunner.start(execution, history, responses, now).await
    }
}

/// The activity request of `Seq [1, 5]`, a new execution submitted to `processor`.
fn seq_request<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
) -> weir_core::records::ActivityRequest {
    submit(processor, Workflow::Seq, json!([1, 5]))
        .into_iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r),
            _ => None,
        })
        .expect("the activity request")
}

/// What the parent of `request` journalled for it after `body` came, and the dead letters.
fn answered<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    request: &weir_core::records::ActivityRequest,
    body: Body,
) -> (Vec<ExecutionResult>, Vec<weir_core::records::DlqReason>) {
    use weir_core::model::Response;
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(request.parent_execution_id.to_string()),
        size: 100,
        body: Ok(body),
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    let journalled = appended(&batch.effects)
        .into_iter()
        .filter_map(|(_, entry)| match entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result,
            }) if child_execution_id == request.execution_id => Some(result),
            _ => None,
        })
        .collect();
    let dead = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    (journalled, dead)
}

/// Issue 11 item 15: requests of an external activity carried no deadline or attempt bound
/// (the service could not know when it was too late), and an answer of the wrong shape was
/// journalled as is and trapped the parent when it read it. The request carries the
/// declaration's terms; an answer that does not fit becomes the child's `invalid-response`
/// error (the record copied to the DLQ as `refused`); one that fits is taken as before.
#[test]
fn external_requests_carry_their_terms_and_misfit_answers_become_the_childs_error() {
    use weir_core::model::Response;
    use weir_core::records::DlqReason;

    let config = ProcessorConfig {
        cache_bytes: 1 << 30,
        cache_size: 16,
        max_record_bytes: 1 << 20,
        partitions: 1,
        early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
    };
    let mut processor = Processor::new(ExternalRunner, config);
    let request = seq_request(&mut processor);
    assert_eq!(request.timeout_millis, Some(5_000));
    assert_eq!(
        request.deadline,
        Some(now() + chrono::Duration::seconds(60))
    );
    let answer = |request: &weir_core::records::ActivityRequest, value: serde_json::Value| {
        Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(value),
        })
    };
    let misfit = answer(&request, json!({"ten": 10}));
    let (journalled, dead) = answered(&mut processor, &request, misfit);
    assert!(
        matches!(journalled.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::InvalidResponse && e.reason.contains("is not a number")),
        "{journalled:?}"
    );
    assert_eq!(dead, [DlqReason::Refused]);

    // An answer that fits is taken as it is.
    let mut processor = Processor::new(ExternalRunner, config);
    let request = seq_request(&mut processor);
    let fit = answer(&request, json!(10));
    let (journalled, dead) = answered(&mut processor, &request, fit);
    assert_eq!(journalled, [ExecutionResult::Ok(json!(10))]);
    assert!(dead.is_empty(), "{dead:?}");

    // Without declared terms (Weir's own activities in the simulation) nothing is added.
    let request = seq_request(&mut self::processor(1 << 20));
    assert_eq!((request.timeout_millis, request.deadline), (None, None));
}

/// Issue 11 item 15: an answer whose value is not JSON (the codec reads it as the child's
/// `invalid-response` error, `Body::MalformedAnswer`) was dead-lettered whole and its parent
/// waited forever. It is journalled as that error, and the record copied to the DLQ.
#[test]
fn a_malformed_answer_is_journalled_as_the_childs_error_and_dead_lettered() {
    use weir_core::model::{ExecutionError, Response};
    use weir_core::records::DlqReason;

    let mut processor = processor(1 << 20);
    let request = seq_request(&mut processor);
    let error = ExecutionResult::ExecutionError(ExecutionError::new(
        ExecutionErrorKind::InvalidResponse,
        "the answer was not taken: the value is not JSON text",
    ));
    let body = Body::MalformedAnswer {
        response: Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: error.clone(),
        },
        error: "the value is not JSON text".into(),
    };
    let (journalled, dead) = answered(&mut processor, &request, body);
    assert_eq!(journalled, [error]);
    assert_eq!(dead, [DlqReason::Undecodable]);
}

/// Issue 11 item 9: a submission whose function name does not parse was dead-lettered and
/// its caller never heard. It is answered `unknown-function`, and nothing is created.
#[test]
fn a_submission_with_an_unparsable_function_name_is_answered() {
    use weir_core::records::DlqReason;

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::UnparsableFfqn {
            submission: Submission {
                execution_id: id.clone(),
                ffqn: weir_core::records::unparsable_ffqn(),
                params: json!([]),
                parent: None,
                scheduled_at: None,
                correlation_id: Some("mine".into()),
                metadata: Default::default(),
                deadline: None,
            },
            error: "invalid function name `not a name`".into(),
        }),
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    assert!(appended(&batch.effects).is_empty(), "{:?}", batch.effects);
    let answers: Vec<_> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishResult(f) => Some(f),
            _ => None,
        })
        .collect();
    assert!(
        matches!(answers.as_slice(), [f] if f.execution_id == id
            && f.correlation_id.as_deref() == Some("mine")
            && matches!(&f.result, ExecutionResult::ExecutionError(e)
                if e.kind == ExecutionErrorKind::UnknownFunction && e.reason.contains("not a name"))),
        "{answers:?}"
    );
    assert!(batch.effects.iter().any(|e| matches!(
        e,
        Effect::DeadLetter {
            reason: DlqReason::UnknownFfqn,
            ..
        }
    )));
}

/// A processor whose host has room for one run at a time.
fn one_slot_processor() -> Processor<SlotRunner> {
    processor_of(
        SlotRunner {
            free: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(1)),
        },
        1 << 20,
    )
}

/// Issue 11 item 17: parked runs hold their instances while they wait, so a pool full of them
/// deferred every new start until one of them finished. A start the pool has no room for
/// drops a parked run that the store can rebuild (the cache policy's pick), and its retry runs.
#[test]
fn a_full_pool_of_parked_runs_makes_room_for_a_new_start() {
    let mut processor = one_slot_processor();
    assert_eq!(processor.capacity_seen(), None);
    // The driver's call between batches: everything so far is in the store.
    processor.evict(0);
    let first = seq_request(&mut processor);
    assert_eq!(processor.parked(), 1);
    // …and after its batch (the cache policy learns of the parked run here).
    processor.evict(0);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let effects = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([1, 6])),
    );
    let history = stored(&id, &effects, now());
    let timer = retry_timer(&effects).expect("deferred: no room");
    assert_eq!(processor.stats().evicted_for_room, 1);
    assert_eq!(
        processor.capacity_seen(),
        Some(1),
        "the pool parks one run: admission keeps below it from now on"
    );
    processor.committed([&first.parent_execution_id, &id], 0, now());
    assert_eq!(
        processor.recently_stepped(now() + chrono::Duration::hours(1)),
        1,
        "a deferred start is in flight however long it waits for an instance; the idle \
         running execution is not"
    );
    assert!(
        processor.view(&first.parent_execution_id).is_some(),
        "the evicted execution stays known; only its run is dropped"
    );
    assert_eq!(processor.parked(), 0);
    let mut batch = Batch::new(timer.due_at);
    let due = Input::TimerDue(timer);
    assert_eq!(processor.needs(&due), Some((id.clone(), 0)));
    block_on(processor.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    block_on(processor.step(&mut batch, due)).expect("no processor error");
    assert!(
        batch
            .effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(r) if r.parent_execution_id == id)),
        "the retry found room: {:?}",
        batch.effects
    );
}

/// A run the batch being built has stepped is never dropped to make room: the store cannot
/// hold what the batch appended to it yet, so a second input of the same batch for it would
/// rebuild it from a history that lacks those entries. Before, `make_room` took the least
/// recently used parked run that no *committed* batch pinned, this batch's own included.
#[test]
fn a_run_stepped_in_the_current_batch_is_not_dropped_for_room() {
    let mut processor = one_slot_processor();
    processor.evict(0);
    // `Seq [2, 5]`: parked on its first activity, holding the only slot.
    let first = submit(&mut processor, Workflow::Seq, json!([2, 5]))
        .into_iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r),
            _ => None,
        })
        .expect("the first activity request");
    let owner = first.parent_execution_id.clone();
    // One batch: the first answer (the run goes on and parks on its second activity), then a
    // new submission the host has no room for.
    let mut batch = Batch::new(now());
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(owner.to_string()),
        size: 100,
        body: Ok(Body::Response(
            weir_core::model::Response::ChildExecutionFinished {
                child_execution_id: first.execution_id.clone(),
                result: ExecutionResult::Ok(json!(5)),
            },
        )),
    };
    assert_eq!(processor.needs(&answer), None);
    block_on(processor.step(&mut batch, answer)).expect("no processor error");
    let id = ExecutionId::top_level(ulid::Ulid::new());
    block_on(processor.step(
        &mut batch,
        submission_input(&id, Workflow::Seq, json!([1, 6])),
    ))
    .expect("no processor error");
    assert!(retry_timer(&batch.effects).is_some(), "deferred: no room");
    assert_eq!(processor.stats().evicted_for_room, 0);
    assert_eq!(processor.parked(), 1, "the stepped run is kept");
    let second = Input::Record {
        index: 1,
        partition: 0,
        key: Some(owner.to_string()),
        size: 100,
        body: Ok(Body::Response(
            weir_core::model::Response::ChildExecutionFinished {
                child_execution_id: first
                    .parent_execution_id
                    .child(first.execution_id.join_set_id().expect("a child"), 1),
                result: ExecutionResult::Ok(json!(6)),
            },
        )),
    };
    assert_eq!(
        processor.needs(&second),
        None,
        "no rebuild from a store that lacks this batch"
    );
}

/// Issue 12 goal 3: the cache is bounded by bytes. Executions that park one after the other
/// (each evicted between batches, as the driver does) never make the cache outweigh its
/// budget, the policy's weight is what the cached executions weigh, and the cache holds about
/// as many parked runs as the budget has room for, not fewer.
#[test]
fn the_byte_budget_bounds_what_the_cache_holds() {
    let budget = 64 << 10;
    let mut processor = Processor::new(
        SimRunner,
        ProcessorConfig {
            cache_bytes: budget,
            cache_size: weir_core::processor::ProcessorConfig::UNCAPPED,
            max_record_bytes: 1 << 20,
            partitions: 1,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        },
    );
    let mut batches = 0;
    for _ in 0..200 {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let effects = step(
            &mut processor,
            submission_input(&id, Workflow::Seq, json!([1, 6])),
        );
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::RequestActivity(_))),
            "the run parks on its first activity"
        );
        batches += 1;
        processor.committed([&id], batches, now());
        processor.evict(batches);
        assert!(
            processor.held_bytes() <= budget,
            "{}",
            processor.held_bytes()
        );
    }
    assert!(processor.len() < 200, "some were evicted");
    let one = processor.held_bytes() / processor.len() as u64;
    assert!(
        processor.parked() as u64 >= budget / one - 1,
        "{} parked of room for {}",
        processor.parked(),
        budget / one
    );
}

/// Pinned executions (their batch not yet in the store) are never evicted, whatever the
/// budget: the cache stays over it until the store catches up.
#[test]
fn pinned_executions_outweigh_the_budget_until_materialised() {
    let mut processor = Processor::new(
        SimRunner,
        ProcessorConfig {
            cache_bytes: 1,
            cache_size: weir_core::processor::ProcessorConfig::UNCAPPED,
            max_record_bytes: 1 << 20,
            partitions: 1,
            early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
        },
    );
    let ids: Vec<_> = (0..5)
        .map(|_| ExecutionId::top_level(ulid::Ulid::new()))
        .collect();
    for id in &ids {
        step(
            &mut processor,
            submission_input(id, Workflow::Seq, json!([1, 6])),
        );
    }
    processor.committed(ids.iter(), 1, now());
    processor.evict(0);
    assert_eq!(
        processor.parked(),
        5,
        "pinned by batch 1, which is not in the store"
    );
    processor.evict(1);
    assert_eq!(processor.len(), 0, "materialised: evicted");
    assert_eq!(processor.held_bytes(), 0);
}

/// Admission counts the executions in flight a committed batch stepped within its window: not
/// those idle longer (a parent waiting for its children).
#[test]
fn recently_stepped_counts_executions_in_flight_stepped_since_the_given_time() {
    let mut processor = processor(1 << 20);
    let ids: Vec<_> = (0..3)
        .map(|_| ExecutionId::top_level(ulid::Ulid::new()))
        .collect();
    for id in &ids {
        step(
            &mut processor,
            submission_input(id, Workflow::Seq, json!([1, 6])),
        );
    }
    let t0 = now();
    assert_eq!(
        processor.recently_stepped(t0 - chrono::Duration::hours(1)),
        0,
        "not committed yet: no step time"
    );
    processor.committed(ids[..1].iter(), 1, t0);
    processor.committed(ids[1..].iter(), 2, t0 + chrono::Duration::seconds(20));
    assert_eq!(processor.parked(), 3);
    assert_eq!(processor.recently_stepped(t0), 3);
    assert_eq!(
        processor.recently_stepped(t0 + chrono::Duration::seconds(10)),
        2,
        "the run stepped at t0 is idle by then"
    );
    assert_eq!(
        processor.recently_stepped(t0 + chrono::Duration::seconds(21)),
        0
    );
}

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
    if processor.needs(&due).is_some() {
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
            })),
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

/// The input record of event `event_id` named `approved` for `target`, with `payload`.
fn event_input(target: &ExecutionId, event_id: &str, payload: i64) -> Input {
    event_named(target, event_id, "approved", payload)
}

fn event_named(target: &ExecutionId, event_id: &str, name: &str, payload: i64) -> Input {
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(target.to_string()),
        size: 100,
        body: Ok(Body::Event(weir_core::records::InboundEvent {
            event: weir_core::records::ReceivedEvent {
                event_id: event_id.to_owned(),
                name: name.to_owned(),
                payload: json!(payload),
            },
            target: target.clone(),
            sent_at: now(),
            correlation_key: None,
            waited_until: None,
        })),
    }
}

/// The result `effects` publish for a top-level execution, if any.
/// The stub child `effects` journalled (a `ChildExecutionRequest` of kind `Stub`).
fn stub_child(effects: &[Effect]) -> ExecutionId {
    use weir_core::model::{ChildKind, HistoryEvent, JoinSetRequest};
    appended(effects)
        .into_iter()
        .find_map(|(_, entry)| match entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request:
                            JoinSetRequest::ChildExecutionRequest {
                                child_execution_id,
                                child_kind: ChildKind::Stub,
                                ..
                            },
                        ..
                    },
                ..
            } => Some(child_execution_id),
            _ => None,
        })
        .expect("a stub child")
}

fn published(effects: &[Effect]) -> Option<ExecutionResult> {
    effects.iter().find_map(|e| match e {
        Effect::PublishResult(f) => Some(f.result.clone()),
        _ => None,
    })
}

fn dead_letters(effects: &[Effect]) -> Vec<(weir_core::records::DlqReason, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { reason, error, .. } => Some((*reason, error.clone())),
            _ => None,
        })
        .collect()
}

/// The state the processor keeps for an execution that does not exist, from a batch's
/// effects: `Some(None)` when it is forgotten.
fn early_state(
    effects: &[Effect],
    id: &ExecutionId,
) -> Option<Option<weir_core::correlation::CorrelationState>> {
    effects.iter().find_map(|e| match e {
        Effect::PutCorrelation { key, state } if *key == id.to_string() => Some(state.clone()),
        _ => None,
    })
}

/// An event sent before its execution's submission was read (another topic: Kafka orders
/// them in no way) is kept under the execution's id, in `weir.state`: the submission takes
/// it in its own batch (journalled first, in the order the events came, a duplicate once),
/// and the run's wait finds it. Without a submission within `early_event_wait`, the events
/// go back to `weir.events` marked as having waited, and are dead-lettered then, unless the
/// execution has come meanwhile. A new owner restores what was kept.
#[test]
fn events_come_before_their_submission() {
    use weir_core::model::{EventOutcome, Response};
    use weir_core::records::DlqReason;

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let first = step(&mut processor, event_input(&id, "ev-1", 7));
    let kept = early_state(&first, &id)
        .flatten()
        .expect("kept under the id");
    assert_eq!(kept.buffered.len(), 1);
    assert_eq!(
        kept.waits_until,
        Some(now() + weir_core::correlation::EARLY_EVENT_WAIT)
    );
    let twice = step(&mut processor, event_input(&id, "ev-1", 7));
    assert!(early_state(&twice, &id).is_none() && dead_letters(&twice).is_empty());
    assert_eq!(processor.stats().events_duplicate, 1);
    let other = step(&mut processor, event_named(&id, "ev-2", "rejected", 8));
    assert_eq!(
        early_state(&other, &id).flatten().map(|s| s.buffered.len()),
        Some(2)
    );

    // A new owner (restored from `weir.state`) has them too; the submission takes them.
    let mut owner = self::processor(1 << 20);
    owner.restore_correlations(processor.correlations().cloned().collect::<Vec<_>>());
    let created = step(
        &mut owner,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let journal = appended(&created);
    assert!(
        matches!(&journal[0], (0, HistoryEntry::Created(_))),
        "{journal:?}"
    );
    assert!(
        matches!(&journal[1], (1, HistoryEntry::EventReceived(e)) if e.event_id == "ev-1")
            && matches!(&journal[2], (2, HistoryEntry::EventReceived(e)) if e.event_id == "ev-2"),
        "{journal:?}"
    );
    assert!(
        journal.iter().any(
            |(_, e)| matches!(e, HistoryEntry::ResponseAppended(Response::EventDelivered {
            outcome: EventOutcome::Received { event_id, .. }, ..
        }) if event_id == "ev-1")
        ),
        "the wait takes the early event: {journal:?}"
    );
    assert_eq!(published(&created), Some(ExecutionResult::Ok(json!(7))));
    assert_eq!(early_state(&created, &id), Some(None), "forgotten");
    assert_eq!(owner.correlations().count(), 0);
    // A rebuild from the journal replays to the same place.
    let mut rebuilt = self::processor(1 << 20);
    let mut again = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut again, &id, Some(stored(&id, &created, now()))))
        .expect("rebuilt");
    assert!(again.effects.is_empty(), "{:?}", again.effects);
    assert_eq!(rebuilt.row(&id), owner.row(&id));

    // No submission in time: the events go back marked, and then to the DLQ with why.
    let mut processor = self::processor(1 << 20);
    let never = ExecutionId::top_level(ulid::Ulid::new());
    step(&mut processor, event_input(&never, "ev-3", 1));
    let early = now() + weir_core::correlation::EARLY_EVENT_WAIT - chrono::Duration::seconds(1);
    assert!(!processor.correlation_due(early));
    let late = now() + weir_core::correlation::EARLY_EVENT_WAIT;
    assert!(processor.correlation_due(late));
    let mut batch = Batch::new(late);
    processor.expire_correlations(&mut batch);
    let back: Vec<_> = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ForwardEvent(f) => Some(f.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].target, never);
    assert_eq!(back[0].waited_until, Some(late));
    assert_eq!(early_state(&batch.effects, &never), Some(None));
    let returned = Input::Record {
        index: 0,
        partition: 0,
        key: Some(never.to_string()),
        size: 100,
        body: Ok(Body::Event(back[0].clone())),
    };
    let dead = step(&mut processor, returned.clone());
    assert_eq!(dead_letters(&dead)[0].0, DlqReason::Other);
    assert!(
        dead_letters(&dead)[0].1.contains("does not exist")
            && dead_letters(&dead)[0]
                .1
                .contains("waited for its submission"),
        "{dead:?}"
    );
    assert!(early_state(&dead, &never).is_none(), "not kept again");
    // Had the submission come meanwhile, the marked event is taken as any other.
    step(
        &mut processor,
        submission_input(&never, Workflow::Approval, json!([0])),
    );
    let taken = step(&mut processor, returned);
    assert!(dead_letters(&taken).is_empty());
    assert_eq!(published(&taken), Some(ExecutionResult::Ok(json!(1))));
}

/// Issue 13 item 1, the processor's event rules in a table: an event after the wait, before
/// it (buffered, then taken when the wait opens), twice (delivered once), for a finished and
/// for an unknown execution; an event racing a timeout in one join set, both orders.
#[test]
fn events_reach_their_wait_once_whenever_they_come() {
    use weir_core::model::{EventOutcome, Response};
    use weir_core::records::DlqReason;

    // After the wait: delivered at once, the run finishes with the payload.
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    assert_eq!(published(&started), None);
    let got = step(&mut processor, event_input(&id, "e-1", 42));
    let journal = appended(&got);
    assert!(
        matches!(&journal[0].1, HistoryEntry::ResponseAppended(Response::EventDelivered {
            outcome: EventOutcome::Received { event_id, .. }, ..
        }) if event_id == "e-1"),
        "{journal:?}"
    );
    assert_eq!(published(&got), Some(ExecutionResult::Ok(json!(42))));
    // The same event again, and any after the finish: not delivered twice; dead-lettered
    // with why once the execution has finished.
    let again = step(&mut processor, event_input(&id, "e-1", 42));
    assert!(appended(&again).is_empty(), "{again:?}");
    assert_eq!(dead_letters(&again)[0].0, DlqReason::Refused);
    assert!(
        dead_letters(&again)[0].1.contains("has finished"),
        "{again:?}"
    );

    // Before the wait: a scheduled execution has no wait yet; the event is buffered
    // (journalled), a duplicate dropped, and the wait takes it when the run starts.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let mut input = submission_input(&id, Workflow::Approval, json!([0]));
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut input
    {
        s.scheduled_at = Some(now() + chrono::Duration::seconds(60));
    }
    let created = step(&mut processor, input);
    let early = step(&mut processor, event_input(&id, "early", 7));
    assert!(
        matches!(&appended(&early)[..], [(_, HistoryEntry::EventReceived(e))] if e.event_id == "early"),
        "{early:?}"
    );
    let twice = step(&mut processor, event_input(&id, "early", 8));
    assert!(appended(&twice).is_empty() && dead_letters(&twice).is_empty());
    assert_eq!(processor.stats().events_duplicate, 1);
    let timer = created
        .iter()
        .find_map(|e| match e {
            Effect::PutTimer(t) => Some(t.clone()),
            _ => None,
        })
        .expect("the schedule timer");
    let due = timer.due_at;
    let mut batch = Batch::new(due);
    block_on(processor.step(&mut batch, Input::TimerDue(timer))).expect("started");
    assert_eq!(
        published(&batch.effects),
        Some(ExecutionResult::Ok(json!(7)))
    );
    // A rebuild from the journal replays to the same place.
    let mut history = stored(&id, &created, now());
    history.extend(stored(&id, &early, now()));
    history.extend(stored(&id, &batch.effects, due));
    let mut rebuilt = self::processor(1 << 20);
    let mut again = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut again, &id, Some(history))).expect("rebuilt");
    assert!(again.effects.is_empty(), "{:?}", again.effects);
    assert_eq!(rebuilt.row(&id), processor.row(&id));

    // An execution that does not exist (yet): kept for it, not dead-lettered
    // (`events_come_before_their_submission` follows it to the end).
    let unknown = ExecutionId::top_level(ulid::Ulid::new());
    let kept = step(&mut processor, event_input(&unknown, "x", 1));
    assert!(
        dead_letters(&kept).is_empty() && appended(&kept).is_empty(),
        "{kept:?}"
    );
    assert_eq!(processor.stats().events_early, 1);

    // Racing a timeout, the event first: the payload, and the delay is cancelled.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([5_000])),
    );
    // Another name waits in the buffer; it does not answer the wait.
    let other = step(&mut processor, event_named(&id, "o-1", "rejected", 3));
    assert!(matches!(
        &appended(&other)[..],
        [(_, HistoryEntry::EventReceived(_))]
    ));
    let won = step(&mut processor, event_input(&id, "e-1", 5));
    assert_eq!(published(&won), Some(ExecutionResult::Ok(json!(5))));
    assert!(
        appended(&won).iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::DelayFinished { outcome, .. })
                if *outcome == weir_core::model::DelayOutcome::Cancelled)),
        "{won:?}"
    );
    assert_eq!(
        processor.stats().events_unclaimed,
        1,
        "`rejected` was never taken"
    );

    // Racing a timeout, the timeout first: -1, the wait is cancelled, and an event sent
    // afterwards is refused (the execution has finished).
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([5_000])),
    );
    let timer = started
        .iter()
        .find_map(|e| match e {
            Effect::PutTimer(t) => Some(t.clone()),
            _ => None,
        })
        .expect("the delay's timer");
    let mut batch = Batch::new(timer.due_at);
    block_on(processor.step(&mut batch, Input::TimerDue(timer))).expect("fired");
    assert_eq!(
        published(&batch.effects),
        Some(ExecutionResult::Ok(json!(-1)))
    );
    assert!(
        appended(&batch.effects).iter().any(|(_, e)| matches!(
            e,
            HistoryEntry::ResponseAppended(Response::EventDelivered {
                outcome: EventOutcome::Cancelled,
                ..
            })
        )),
        "{:?}",
        batch.effects
    );
    let late = step(&mut processor, event_input(&id, "late", 1));
    assert_eq!(dead_letters(&late)[0].0, DlqReason::Refused);
}

/// Events come only through the events topic, where they are deduplicated: a delivery
/// forged on `weir.responses` is dead-lettered and the wait stays open.
#[test]
fn an_event_delivery_on_the_responses_topic_is_refused() {
    use weir_core::model::{EventOutcome, JoinSetId, Response};

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let js = JoinSetId::one_off(1, "event").expect("join set");
    let forged = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::EventDelivered {
            event_request_id: id.event_request(&js, 1),
            outcome: EventOutcome::Received {
                event_id: "forged".into(),
                payload: json!(1),
            },
        })),
    };
    let effects = step(&mut processor, forged);
    assert!(appended(&effects).is_empty(), "{effects:?}");
    assert_eq!(
        dead_letters(&effects)[0].0,
        weir_core::records::DlqReason::Refused
    );
    let real = step(&mut processor, event_input(&id, "real", 9));
    assert_eq!(published(&real), Some(ExecutionResult::Ok(json!(9))));
}

/// Issue 13 item 4: a stub's value written from outside (a `ChildExecutionFinished` record
/// for the stub child, as `weir stub` sends): taken once; the same value again is nothing
/// new; another value is dead-lettered `conflict`, also after the finish; a value that does
/// not fit the stub's result type is refused and nothing is journalled, so a fitting one can
/// still be written.
#[test]
fn a_stub_written_from_outside_follows_obelisks_rules() {
    use weir_core::model::Response;
    use weir_core::records::DlqReason;

    let mut processor = processor_of(ExternalRunner, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    assert!(
        !started
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_) | Effect::Submit(_))),
        "a stub is never run: {started:?}"
    );
    let write = |value: serde_json::Value| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: stub.clone(),
            result: ExecutionResult::Ok(value),
        })),
    };
    // Does not fit (not a number): refused, nothing journalled.
    let misfit = step(&mut processor, write(json!("seven")));
    assert!(appended(&misfit).is_empty(), "{misfit:?}");
    assert_eq!(dead_letters(&misfit)[0].0, DlqReason::Refused, "{misfit:?}");
    // Fits: taken, the workflow returns it.
    let taken = step(&mut processor, write(json!(7)));
    assert_eq!(published(&taken), Some(ExecutionResult::Ok(json!(7))));
    // The same value again: nothing; another: a conflict naming both; after the finish too.
    let again = step(&mut processor, write(json!(7)));
    assert!(
        appended(&again).is_empty() && dead_letters(&again).is_empty(),
        "{again:?}"
    );
    let other = step(&mut processor, write(json!(8)));
    assert!(appended(&other).is_empty(), "{other:?}");
    let (reason, error) = &dead_letters(&other)[0];
    assert_eq!(*reason, DlqReason::Conflict);
    assert!(error.contains("holds") && error.contains('8'), "{error}");
}

fn cancel_input(id: &ExecutionId, terminate: bool) -> Input {
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Cancel(weir_core::records::CancelRequest {
            execution_id: id.clone(),
            reason: "operator".into(),
            terminate,
            requested_at: now(),
        })),
    }
}

fn cancelled(result: Option<ExecutionResult>) -> bool {
    matches!(result, Some(ExecutionResult::ExecutionError(e)) if e.kind == ExecutionErrorKind::Cancelled)
}

/// Issue 13 item 5: a cancellation is journalled, cancels everything the execution waits for
/// (activities with a `CancelActivity`, delays, event waits answered cancelled; child
/// workflows cancelled in turn), and the execution finishes `cancelled` whatever it makes of
/// it; a second cancellation and one of a finished execution change nothing; terminate
/// finishes at once; a rebuild replays to the same place.
#[test]
fn a_cancelled_execution_cancels_what_it_waits_for_and_finishes_cancelled() {
    use weir_core::model::Response;
    use weir_core::records::DlqReason;

    // A join set with a delay and two activities.
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let mut input = submission_input(&id, Workflow::Mixed, json!([2, 60_000, 5]));
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut input
    {
        s.ffqn = Workflow::Mixed.ffqn();
    }
    let started = step(&mut processor, input);
    let activities: Vec<ExecutionId> = started
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.execution_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{started:?}");
    let effects = step(&mut processor, cancel_input(&id, false));
    let journal = appended(&effects);
    assert!(
        matches!(&journal[0].1, HistoryEntry::CancelRequested { reason } if reason == "operator"),
        "{journal:?}"
    );
    let interrupted: Vec<&ExecutionId> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelActivity { child, .. } => Some(child),
            _ => None,
        })
        .collect();
    assert_eq!(interrupted, activities.iter().collect::<Vec<_>>());
    // The first cancelled answer fails the workflow (it cannot use it); the delay never
    // fires: its timer goes with the finish.
    assert!(
        journal.iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                result: ExecutionResult::ExecutionError(err), ..
            }) if err.kind == ExecutionErrorKind::Cancelled)),
        "{journal:?}"
    );
    assert!(
        effects.iter().any(|e| matches!(e, Effect::DeleteTimer(_))),
        "{effects:?}"
    );
    assert!(cancelled(published(&effects)), "{effects:?}");
    // Again, and after the finish: nothing.
    assert!(step(&mut processor, cancel_input(&id, false)).is_empty());
    // A rebuild from the journal replays to the same place.
    let mut history = stored(&id, &started, now());
    history.extend(stored(&id, &effects, now()));
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(now());
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert!(batch.effects.is_empty(), "{:?}", batch.effects);
    assert_eq!(rebuilt.row(&id), processor.row(&id));

    // A parent waiting for a child workflow: the child is cancelled in turn; the parent
    // finishes when the child answers.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Parent, json!([2, 1])),
    );
    let child = started
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.execution_id.clone()),
            _ => None,
        })
        .expect("a child workflow");
    let effects = step(&mut processor, cancel_input(&id, false));
    assert!(
        effects.iter().any(
            |e| matches!(e, Effect::CancelExecution(c) if c.execution_id == child && !c.terminate)
        ),
        "{effects:?}"
    );
    assert_eq!(published(&effects), None, "the parent waits for its child");
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result: ExecutionResult::ExecutionError(weir_core::model::ExecutionError::new(
                ExecutionErrorKind::Cancelled,
                "its parent was cancelled",
            )),
        })),
    };
    assert!(cancelled(published(&step(&mut processor, answer))));

    // Terminate: at once, whatever it waits for.
    let mut processor = self::processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let effects = step(&mut processor, cancel_input(&id, true));
    match published(&effects) {
        Some(ExecutionResult::ExecutionError(e)) => {
            assert_eq!(e.kind, ExecutionErrorKind::Cancelled);
            assert!(e.reason.contains("terminated"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }

    // Nobody: dead-lettered.
    let nobody = ExecutionId::top_level(ulid::Ulid::new());
    let lost = step(&mut processor, cancel_input(&nobody, false));
    assert_eq!(dead_letters(&lost)[0].0, DlqReason::Other);
}

/// A runner like the simulation's whose workflows have a default deadline.
struct DefaultDeadline(std::time::Duration);

impl weir_core::runner::WorkflowRunner for DefaultDeadline {
    type Run = <SimRunner as weir_core::runner::WorkflowRunner>::Run;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn default_deadline(&self, _ffqn: &weir_core::model::Ffqn) -> Option<std::time::Duration> {
        Some(self.0)
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        SimRunner.start(execution, history, responses, now).await
    }
}

/// A submission of `workflow` with `params` as a new execution with `deadline`.
fn submission_with_deadline(
    workflow: Workflow,
    params: serde_json::Value,
    deadline: Option<DateTime<Utc>>,
) -> (ExecutionId, Input) {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let mut input = submission_input(&id, workflow, params);
    if let Input::Record {
        body: Ok(Body::Submission(s)),
        ..
    } = &mut input
    {
        s.deadline = deadline;
    }
    (id, input)
}

/// The deadline timer `effects` put, if any.
fn deadline_timer(effects: &[Effect]) -> Option<weir_core::rows::TimerRow> {
    effects.iter().find_map(|e| match e {
        Effect::PutTimer(t) if t.kind == weir_core::rows::TimerKind::Deadline => Some(t.clone()),
        _ => None,
    })
}

fn timed_out(result: Option<ExecutionResult>) -> bool {
    matches!(result, Some(ExecutionResult::ExecutionError(e))
        if e.kind == ExecutionErrorKind::TimedOut && e.reason.contains("deadline"))
}

/// Issue 13 item 6: a deadline is kept as the earlier of the submission's and the
/// component's default; children never get a later one (a child workflow's submission carries
/// it, an activity's request is bounded by it); at the deadline an execution that has not
/// finished is timed out, what it waits for cancelled (activities interrupted, child
/// workflows terminated, delays answered cancelled, all journalled); a submission already
/// past its deadline never runs; a timer that fires early or after the finish does nothing.
#[test]
fn a_deadline_times_the_execution_out_and_bounds_its_children() {
    use weir_core::model::{DelayOutcome, Response};

    let deadline = now() + chrono::Duration::seconds(10);
    let fire = |processor: &mut Processor<SimRunner>, timer: &weir_core::rows::TimerRow, at| {
        let mut batch = Batch::new(at);
        block_on(processor.step(&mut batch, Input::TimerDue(timer.clone())))
            .expect("no processor error");
        batch.effects
    };

    // A delay and two activities in one join set.
    let mut processor = processor(1 << 20);
    let (id, input) =
        submission_with_deadline(Workflow::Mixed, json!([2, 60_000, 5]), Some(deadline));
    let started = step(&mut processor, input);
    let timer = deadline_timer(&started).expect("a deadline timer");
    assert_eq!(timer.due_at, deadline);
    assert!(
        matches!(&appended(&started)[0].1, HistoryEntry::Created(c) if c.deadline == Some(deadline))
    );
    let activities: Vec<_> = started
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(activities.len(), 2, "{started:?}");
    assert!(
        activities.iter().all(|r| r.deadline == Some(deadline)),
        "{activities:?}"
    );
    // Early: nothing.
    assert!(
        fire(
            &mut processor,
            &timer,
            deadline - chrono::Duration::seconds(1)
        )
        .is_empty()
    );
    let effects = fire(&mut processor, &timer, deadline);
    assert!(timed_out(published(&effects)), "{effects:?}");
    let interrupted = effects
        .iter()
        .filter(|e| matches!(e, Effect::CancelActivity { .. }))
        .count();
    assert_eq!(interrupted, 2, "{effects:?}");
    let journal = appended(&effects);
    assert!(
        journal.iter().any(|(_, e)| matches!(
            e,
            HistoryEntry::ResponseAppended(Response::DelayFinished {
                outcome: DelayOutcome::Cancelled,
                ..
            })
        )),
        "{journal:?}"
    );
    assert!(
        matches!(journal.last(), Some((_, HistoryEntry::Finished { .. }))),
        "{journal:?}"
    );
    // After the finish: nothing.
    assert!(
        fire(
            &mut processor,
            &timer,
            deadline + chrono::Duration::seconds(1)
        )
        .is_empty()
    );
    // A rebuild from the journal lands in the same place.
    let mut history = stored(&id, &started, now());
    history.extend(stored(&id, &effects, deadline));
    let mut rebuilt = self::processor(1 << 20);
    let mut batch = Batch::new(deadline);
    block_on(rebuilt.rehydrate(&mut batch, &id, Some(history))).expect("rebuilt");
    assert_eq!(rebuilt.row(&id), processor.row(&id));

    // A child workflow gets its parent's deadline, and is terminated at it.
    let (_, input) = submission_with_deadline(Workflow::Parent, json!([2, 1]), Some(deadline));
    let started = step(&mut processor, input);
    let child = started
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a child workflow");
    assert_eq!(child.deadline, Some(deadline));
    let timer = deadline_timer(&started).expect("a deadline timer");
    let effects = fire(&mut processor, &timer, deadline);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::CancelExecution(c)
            if c.execution_id == child.execution_id && c.terminate && c.reason.contains("deadline"))),
        "{effects:?}"
    );
    assert!(
        timed_out(published(&effects)),
        "the parent does not wait: {effects:?}"
    );

    // Submitted past its deadline: created and timed out, nothing requested.
    let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), Some(now()));
    let effects = step(&mut processor, input);
    assert!(timed_out(published(&effects)), "{effects:?}");
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RequestActivity(_))),
        "{effects:?}"
    );
    assert_eq!(
        appended(&effects).len(),
        2,
        "Created, Finished: {effects:?}"
    );

    // An answer that comes after the deadline, before its timer fired: the execution times
    // out first, and the answer finds it finished (no step runs past the deadline).
    let (id, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), Some(deadline));
    let request = step(&mut processor, input)
        .into_iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r),
            _ => None,
        })
        .expect("the activity request");
    let answer = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(json!(6)),
        })),
    };
    let mut batch = Batch::new(deadline + chrono::Duration::milliseconds(1));
    block_on(processor.step(&mut batch, answer)).expect("no processor error");
    assert!(timed_out(published(&batch.effects)), "{:?}", batch.effects);
    let journal = appended(&batch.effects);
    assert!(
        journal.iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { result: ExecutionResult::ExecutionError(e), .. })
                if e.kind == ExecutionErrorKind::Cancelled)),
        "the activity is cancelled, its late answer not taken: {journal:?}"
    );
    assert!(
        matches!(journal.last(), Some((_, HistoryEntry::Finished { .. }))),
        "{journal:?}"
    );

    // No deadline: no timer.
    let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), None);
    assert_eq!(deadline_timer(&step(&mut processor, input)), None);

    // The component's default counts from the creation, and the earlier deadline wins.
    let mut defaulted = processor_of(DefaultDeadline(std::time::Duration::from_secs(5)), 1 << 20);
    let table = [
        (None, now() + chrono::Duration::seconds(5)),
        (Some(deadline), now() + chrono::Duration::seconds(5)),
        (
            Some(now() + chrono::Duration::seconds(2)),
            now() + chrono::Duration::seconds(2),
        ),
    ];
    for (asked, kept) in table {
        let (_, input) = submission_with_deadline(Workflow::Seq, json!([1, 5]), asked);
        let effects = step(&mut defaulted, input);
        assert_eq!(
            deadline_timer(&effects).map(|t| t.due_at),
            Some(kept),
            "asked {asked:?}"
        );
    }
}

// ---- schedules ----

mod schedules {
    use super::*;
    use chrono::Duration;
    use weir_core::records::DlqReason;
    use weir_core::schedule::{
        self, METADATA_SCHEDULE, METADATA_TICK, Overlap, ScheduleAction, ScheduleCommand,
        ScheduleSpec, ScheduleState, Status, tick_execution_id,
    };

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
        }
    }

    /// The input record of `command`, where it belongs (partition 0 of one).
    fn input(command: ScheduleCommand) -> Input {
        let key = schedule::key(&command.name);
        input_on(0, Some(key), command)
    }

    /// The effects of `input` stepped alone in a batch at `now`.
    fn step_at<R: weir_core::runner::WorkflowRunner>(
        processor: &mut Processor<R>,
        input: Input,
        now: DateTime<Utc>,
    ) -> Vec<Effect> {
        let mut batch = Batch::new(now);
        block_on(processor.step(&mut batch, input)).expect("no processor error");
        batch.effects
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
        let (mut processor, _) =
            created(spec(Overlap::CancelPrevious, Workflow::Seq, json!([1, 5])));
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
        let key = schedule::key(NAME);
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
}

/// Issue 13 item 2: correlation keys through `Processor::step` — the key's owner forwards,
/// buffers, queues holders and takes back what a finished holder returns; the execution's
/// owner returns a forwarded event it cannot take instead of dead-lettering it.
mod correlation {
    use super::*;
    use weir_core::correlation::{
        CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent,
    };
    use weir_core::records::{DlqReason, InboundEvent, ReceivedEvent};

    const KEY: &str = "payment:order-42";

    /// A processor of three partitions, so that keys and executions may sit apart.
    fn processor() -> Processor<SimRunner> {
        Processor::new(
            SimRunner,
            ProcessorConfig {
                cache_bytes: 1 << 30,
                cache_size: 16,
                max_record_bytes: 1 << 20,
                partitions: 3,
                early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
            },
        )
    }

    /// The input record of `body` keyed `key`, on the partition of `key`.
    fn record(key: &str, body: Body) -> Input {
        Input::Record {
            index: 0,
            partition: weir_core::partitioner::partition_for_key(key.as_bytes(), 3),
            key: Some(key.to_owned()),
            size: 100,
            body: Ok(body),
        }
    }

    fn keyed(event_id: &str, returned_by: Option<ExecutionId>) -> Body {
        Body::KeyedEvent(KeyedEvent {
            event: ReceivedEvent {
                event_id: event_id.to_owned(),
                name: "approved".to_owned(),
                payload: json!(7),
            },
            key: KEY.to_owned(),
            sent_at: now(),
            returned_by,
        })
    }

    fn command(id: &ExecutionId, action: CorrelationAction) -> Body {
        Body::Correlation(CorrelationCommand {
            key: KEY.to_owned(),
            execution_id: id.clone(),
            action,
            sent_at: now(),
        })
    }

    fn forwards(effects: &[Effect]) -> Vec<InboundEvent> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::ForwardEvent(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    fn put(effects: &[Effect]) -> Option<Option<CorrelationState>> {
        effects.iter().find_map(|e| match e {
            Effect::PutCorrelation { key, state } if key == KEY => Some(state.clone()),
            _ => None,
        })
    }

    fn id() -> ExecutionId {
        ExecutionId::top_level(ulid::Ulid::new())
    }

    #[test]
    fn a_key_buffers_until_registered_then_forwards_and_queues_holders() {
        let mut p = processor();
        let (first, second) = (id(), id());
        // Before any registration: buffered in the key's state, a duplicate kept once.
        let early = step(&mut p, record(KEY, keyed("ev-1", None)));
        let state = put(&early).flatten().expect("the key keeps the event");
        assert_eq!(state.buffered.len(), 1);
        assert!(forwards(&early).is_empty());
        let twice = step(&mut p, record(KEY, keyed("ev-1", None)));
        assert!(twice.is_empty(), "{twice:?}");
        // The registration takes the buffer: forwarded, keyed by the holder, with the key.
        let registered = step(
            &mut p,
            record(KEY, command(&first, CorrelationAction::Register)),
        );
        let sent = forwards(&registered);
        assert_eq!(sent.len(), 1, "{registered:?}");
        assert_eq!(sent[0].target, first);
        assert_eq!(sent[0].correlation_key.as_deref(), Some(KEY));
        assert_eq!(
            put(&registered).flatten().expect("held").holders,
            vec![first.clone()]
        );
        // A second registrant waits; events go to the first, and change no state.
        step(
            &mut p,
            record(KEY, command(&second, CorrelationAction::Register)),
        );
        let next = step(&mut p, record(KEY, keyed("ev-2", None)));
        assert_eq!(forwards(&next)[0].target, first);
        let remembered = put(&next).flatten().expect("held");
        assert_eq!(
            remembered
                .forwarded
                .iter()
                .map(|f| f.event_id.as_str())
                .collect::<Vec<_>>(),
            ["ev-1", "ev-2"],
            "a forward remembers its id"
        );
        let resent = step(&mut p, record(KEY, keyed("ev-2", None)));
        assert!(resent.is_empty(), "sent again: a duplicate {resent:?}");
        // The first finishes: the second holds the key; the last one gone, the key is forgotten.
        let done = step(
            &mut p,
            record(KEY, command(&first, CorrelationAction::Unregister)),
        );
        assert_eq!(
            put(&done).flatten().expect("held").holders,
            vec![second.clone()]
        );
        let after = step(&mut p, record(KEY, keyed("ev-3", None)));
        assert_eq!(forwards(&after)[0].target, second);
        let gone = step(
            &mut p,
            record(KEY, command(&second, CorrelationAction::Unregister)),
        );
        let remembering = put(&gone).flatten().expect("remembers what it forwarded");
        assert!(remembering.holders.is_empty());
        // The remembered ids expire after the window: then the key is a tombstone.
        let due = remembering.expires_at().expect("an expiry");
        assert!(!p.correlation_due(due - chrono::Duration::seconds(1)));
        assert!(p.correlation_due(due));
        let mut batch = Batch::new(due);
        p.expire_correlations(&mut batch);
        assert_eq!(put(&batch.effects), Some(None), "a tombstone");
        assert_eq!(p.correlations().count(), 0);
        assert_eq!(p.stats().keyed_events_forwarded, 3);
    }

    #[test]
    fn an_event_returned_by_a_finished_holder_goes_to_the_next() {
        let mut p = processor();
        let (first, second) = (id(), id());
        for holder in [&first, &second] {
            step(
                &mut p,
                record(KEY, command(holder, CorrelationAction::Register)),
            );
        }
        let back = step(&mut p, record(KEY, keyed("ev-1", Some(first.clone()))));
        assert_eq!(forwards(&back)[0].target, second);
        assert_eq!(
            put(&back).flatten().expect("held").holders,
            vec![second.clone()],
            "the finished holder is dropped"
        );
        // A key restored at take-over goes on from its committed state.
        let mut again = processor();
        again.restore_correlations(p.correlations().cloned().collect::<Vec<_>>());
        let next = step(&mut again, record(KEY, keyed("ev-2", None)));
        assert_eq!(forwards(&next)[0].target, second);
    }

    #[test]
    fn a_forwarded_event_an_execution_cannot_take_goes_back_to_its_key() {
        let mut p = processor();
        let holder = id();
        let forwarded = |target: &ExecutionId, key: Option<&str>| {
            Body::Event(InboundEvent {
                event: ReceivedEvent {
                    event_id: "ev-1".to_owned(),
                    name: "approved".to_owned(),
                    payload: json!(7),
                },
                target: target.clone(),
                sent_at: now(),
                correlation_key: key.map(str::to_owned),
                waited_until: None,
            })
        };
        let id_text = holder.to_string();
        // Unknown: back to the key, not the DLQ.
        let unknown = step(&mut p, record(&id_text, forwarded(&holder, Some(KEY))));
        assert!(dead_letters(&unknown).is_empty(), "{unknown:?}");
        assert!(
            matches!(&unknown[..], [Effect::ReturnEvent(KeyedEvent { key, returned_by: Some(by), .. })]
                if key == KEY && *by == holder),
            "{unknown:?}"
        );
        // Finished: the same; an event sent to the id itself is still dead-lettered.
        let mut input = submission_input(&holder, Workflow::Approval, json!([0]));
        if let Input::Record { partition, .. } = &mut input {
            *partition = p.partition_of(&holder);
        }
        step(&mut p, input);
        let taken = step(&mut p, record(&id_text, forwarded(&holder, Some(KEY))));
        assert_eq!(published(&taken), Some(ExecutionResult::Ok(json!(7))));
        let mut late = forwarded(&holder, Some(KEY));
        if let Body::Event(e) = &mut late {
            e.event.event_id = "ev-2".to_owned();
        }
        let returned = step(&mut p, record(&id_text, late));
        assert!(
            matches!(&returned[..], [Effect::ReturnEvent(_)]),
            "{returned:?}"
        );
        // One it took already is a duplicate: not given to the key's next holder.
        let again = step(&mut p, record(&id_text, forwarded(&holder, Some(KEY))));
        assert!(again.is_empty(), "{again:?}");
        let direct = step(&mut p, record(&id_text, forwarded(&holder, None)));
        assert_eq!(dead_letters(&direct)[0].0, DlqReason::Refused);
        assert_eq!(p.stats().keyed_events_returned, 2);
    }

    #[test]
    fn a_record_of_a_key_on_another_partition_is_misrouted() {
        let mut p = processor();
        let right = p.partition_of_key(KEY);
        let wrong = (right + 1) % 3;
        let input = Input::Record {
            index: 0,
            partition: wrong,
            key: Some(KEY.to_owned()),
            size: 100,
            body: Ok(keyed("ev-1", None)),
        };
        let effects = step(&mut p, input);
        assert_eq!(dead_letters(&effects)[0].0, DlqReason::Misrouted);
        let other_key = record("payment:other", command(&id(), CorrelationAction::Register));
        let effects = step(&mut p, other_key);
        assert_eq!(
            dead_letters(&effects)[0].0,
            DlqReason::Misrouted,
            "{effects:?}"
        );
    }
}

/// Issue 13 item 4: a workflow writes the value of *another* execution's stub. The owner of
/// the stub's parent applies the rules of a value written from outside and answers the
/// writer's request `ok` (`null`), `conflict` or `not-found`; only a stub request (of that
/// function, still waiting) can be written, never an activity's answer.
#[test]
fn a_workflow_writes_the_stub_of_another_execution() {
    use weir_core::model::{JoinSetId, Response};
    use weir_core::processor::{StubWrite, StubWriteOutcome, stub_write_answer};

    let mut processor = processor_of(ExternalRunner, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    let writer = ExecutionId::top_level(ulid::Ulid::new());
    let js = JoinSetId::generated(1).expect("a join set id");
    let mut n = 0;
    let mut write = |target: &ExecutionId, ffqn: weir_core::model::Ffqn, value: i64| {
        n += 1;
        let request = writer.child(&js, n);
        let input = Input::Record {
            index: 0,
            partition: 0,
            key: target.parent().map(|p| p.to_string()),
            size: 100,
            body: Ok(Body::StubWrite(StubWrite {
                request: request.clone(),
                target: target.clone(),
                ffqn,
                result: ExecutionResult::Ok(json!(value)),
            })),
        };
        (request, input)
    };
    let answer = |effects: &[Effect], request: &ExecutionId| {
        effects.iter().find_map(|e| match e {
            Effect::Respond {
                to,
                response:
                    Response::ChildExecutionFinished {
                        child_execution_id,
                        result,
                    },
            } if child_execution_id == request => {
                assert_eq!(Some(to), request.parent().as_ref());
                Some(result.clone())
            }
            _ => None,
        })
    };
    let double = weir_core::sim::workflows::double_ffqn();

    // Written: the stub's execution takes it (and finishes with it); the writer hears `ok`.
    let (first, input) = write(&stub, double.clone(), 21);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &first),
        Some(stub_write_answer(StubWriteOutcome::Ok))
    );
    assert!(
        appended(&effects).iter().any(|(_, e)| matches!(e,
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished { child_execution_id, .. })
                if *child_execution_id == stub)),
        "{effects:?}"
    );
    assert!(
        published(&effects).is_some(),
        "the stub's workflow finished"
    );
    assert!(dead_letters(&effects).is_empty());
    // The same value again: ok, nothing journalled; another: conflict.
    let (again, input) = write(&stub, double.clone(), 21);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &again),
        Some(stub_write_answer(StubWriteOutcome::Ok))
    );
    assert!(appended(&effects).is_empty(), "{effects:?}");
    let (other, input) = write(&stub, double.clone(), 22);
    let effects = step(&mut processor, input);
    assert_eq!(
        answer(&effects, &other),
        Some(stub_write_answer(StubWriteOutcome::Conflict))
    );
    // Not a stub request of this execution (another function; an execution that does not
    // exist): not-found, and nothing is written.
    let mut waiting = processor_of(ExternalRunner, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let stub_of_waiting = stub_child(&step(
        &mut waiting,
        submission_input(&id, Workflow::Stubbed, json!([])),
    ));
    let wrong_function = Workflow::Seq.ffqn();
    for target in [
        stub_of_waiting.clone(),
        ExecutionId::top_level(ulid::Ulid::new()).child(&js, 1),
    ] {
        let (request, input) = write(&target, wrong_function.clone(), 1);
        let effects = step(&mut waiting, input);
        assert_eq!(
            answer(&effects, &request),
            Some(stub_write_answer(StubWriteOutcome::NotFound)),
            "{effects:?}"
        );
        assert!(appended(&effects).is_empty(), "{effects:?}");
    }
}

/// A stub's value written from outside after its execution was terminated while the stub
/// waited: the termination journalled the stub's cancellation, which is the value the stub
/// holds, so every later write is dead-lettered `conflict` naming it (not dropped in
/// silence).
#[test]
fn a_stub_written_after_its_execution_was_terminated_is_a_conflict() {
    use weir_core::model::Response;
    use weir_core::records::DlqReason;

    let mut processor = processor_of(ExternalRunner, 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let started = step(
        &mut processor,
        submission_input(&id, Workflow::Stubbed, json!([])),
    );
    let stub = stub_child(&started);
    let terminated = step(&mut processor, cancel_input(&id, true));
    assert!(cancelled(published(&terminated)), "{terminated:?}");
    let write = |value: i64| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::ChildExecutionFinished {
            child_execution_id: stub.clone(),
            result: ExecutionResult::Ok(json!(value)),
        })),
    };
    for value in [7, 7] {
        let late = step(&mut processor, write(value));
        assert!(appended(&late).is_empty(), "{late:?}");
        let dead = dead_letters(&late);
        assert_eq!(dead.len(), 1, "{late:?}");
        assert_eq!(dead[0].0, DlqReason::Conflict, "{late:?}");
        assert!(
            dead[0].1.contains(&stub.to_string()) && dead[0].1.contains("cancelled"),
            "{}",
            dead[0].1
        );
    }
}
