//! The cache of runs: starts deferred for want of room and their retries, room made in the
//! host's pool, the byte budget, pinning, and the count of recent steps admission reads.

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

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

    async fn query(
        &self,
        name: &str,
        params: &serde_json::Value,
    ) -> Result<serde_json::Value, weir_core::query::QueryError> {
        self.inner.query(name, params).await
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

/// A processor whose host has room for one run at a time.
fn one_slot_processor() -> Processor<SlotRunner> {
    processor_of(slots(1), 1 << 20)
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
    let config = ProcessorConfig {
        cache_bytes: 1 << 30,
        cache_size: 16,
        max_record_bytes: 1 << 20,
        partitions: 1,
        early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
    };
    let mut processor = Processor::new(slots(0), config);
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
        if let Some((needed, _)) = processor.needs(&batch, &input) {
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
    let mut new_owner = Processor::new(slots(1), config);
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
    assert_eq!(processor.needs(&batch, &due), Some((id.clone(), 0)));
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
                ran: None,
            },
        )),
        timestamp: None,
    };
    assert_eq!(processor.needs(&batch, &answer), None);
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
                ran: None,
            },
        )),
        timestamp: None,
    };
    assert_eq!(
        processor.needs(&batch, &second),
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

/// Issue 33 F1: two answers for an execution whose start is deferred, in one batch. The
/// first asks for a rebuild (deferred again: no room) and is journalled at the next seq; the
/// second was rebuilt from the store too, which lacks the first, and was journalled at the
/// same seq (two records with one seq, one answer lost; `dst_deferrals` seeds 16, 75 and 81
/// of 0..100 found it). The second is taken by the view in memory.
#[test]
fn two_answers_for_a_deferred_execution_in_one_batch_take_two_seqs() {
    let (id, requests, history) = fan_out_parked_on_two_activities();
    // A new owner whose host has no room: the rebuild the first answer asks for is deferred.
    let mut owner = processor_of(slots(0), 1 << 20);
    let mut batch = Batch::new(now());
    let answer = |index, child: &ExecutionId| answer_input(&id, index, child);
    let one = answer(0, &requests[0].execution_id);
    let (needed, _) = owner.needs(&batch, &one).expect("not cached: rebuilt");
    block_on(owner.rehydrate(&mut batch, &needed, Some(history.clone()))).expect("rebuilt");
    assert_eq!(owner.deferred(), 1, "no room: deferred");
    block_on(owner.step(&mut batch, one)).expect("no processor error");
    let two = answer(1, &requests[1].execution_id);
    assert_eq!(
        owner.needs(&batch, &two),
        None,
        "no rebuild from a store that lacks this batch"
    );
    block_on(owner.step(&mut batch, two)).expect("no processor error");
    let next = history.len() as u64;
    let seqs: Vec<u64> = appended(&batch.effects).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, vec![next, next + 1], "{:?}", batch.effects);
}

/// A host with room for `free` runs at a time.
fn slots(free: u32) -> SlotRunner {
    SlotRunner {
        free: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(free)),
    }
}

/// A `Fanout [2, 5]` started where there was room, parked on its two activities: its id,
/// the two requests and its history as the store holds it.
fn fan_out_parked_on_two_activities() -> (
    ExecutionId,
    Vec<weir_core::records::ActivityRequest>,
    weir_core::sim::store::Changelog,
) {
    let mut first = processor_of(slots(1), 1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let effects = step(
        &mut first,
        submission_input(&id, Workflow::Fanout, json!([2, 5])),
    );
    let requests: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2, "{effects:?}");
    let history = stored(&id, &effects, now());
    (id, requests, history)
}

/// The input record `index`: the answer `index` of `child`, a child of `id`.
fn answer_input(id: &ExecutionId, index: usize, child: &ExecutionId) -> Input {
    Input::Record {
        index,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(
            weir_core::model::Response::ChildExecutionFinished {
                child_execution_id: child.clone(),
                result: ExecutionResult::Ok(json!(index)),
                ran: None,
            },
        )),
        timestamp: None,
    }
}

/// Issue 33, a suspected item confirmed: an answer for an execution whose start is deferred
/// (no run in memory to check it against the requests made) was journalled whatever it
/// answered; a run refuses one that answers no request of its execution (a buggy external
/// service's). Such an answer is now checked against the requests the history holds: one
/// that answers none is dead-lettered (`refused`) and not journalled, as a run would have
/// it, and the execution's real answers still go on.
#[test]
fn an_answer_to_no_request_of_a_deferred_execution_is_refused() {
    let (id, requests, history) = fan_out_parked_on_two_activities();
    let mut owner = processor_of(slots(0), 1 << 20);
    let mut batch = Batch::new(now());
    let real = answer_input(&id, 0, &requests[0].execution_id);
    let (needed, _) = owner.needs(&batch, &real).expect("not cached: rebuilt");
    block_on(owner.rehydrate(&mut batch, &needed, Some(history.clone()))).expect("rebuilt");
    assert_eq!(owner.deferred(), 1, "no room: deferred");
    // The same join set, an index the execution never asked for.
    let asked = requests[1].execution_id.to_string();
    let (join_set, _) = asked
        .rsplit_once('_')
        .expect("a child id ends with its index");
    let stranger: ExecutionId = format!("{join_set}_9").parse().expect("a child id");
    assert!(requests.iter().all(|r| r.execution_id != stranger));
    let bogus = answer_input(&id, 1, &stranger);
    block_on(owner.step(&mut batch, bogus)).expect("no processor error");
    block_on(owner.step(&mut batch, real)).expect("no processor error");
    let refused = dead_letters(&batch.effects);
    assert_eq!(refused.len(), 1, "{:?}", batch.effects);
    assert_eq!(refused[0].0, weir_core::records::DlqReason::Refused);
    assert!(refused[0].1.contains(&stranger.to_string()), "{refused:?}");
    let journalled = appended(&batch.effects);
    assert_eq!(journalled.len(), 1, "only the real answer: {journalled:?}");
    assert_eq!(journalled[0].0, history.len() as u64);
}

/// An execution has one `retry` timer. A timer's key has its due time, so a put at another
/// time is another timer: every input of a parked execution added one, each firing put the
/// next, and a retry that fired for an execution it had just rebuilt and deferred again put
/// one more due at once; they multiplied into a loop of starts tried many times a second
/// that left the partition's submissions unread (`dst_short`, `stuck-partition`). The next
/// put deletes the one before, and a retry that rebuilt and deferred puts nothing due now.
#[test]
fn a_parked_execution_keeps_one_retry_timer() {
    let (id, requests, mut history) = fan_out_parked_on_two_activities();
    let mut owner = processor_of(slots(0), 1 << 20);
    let at = |s: i64| now() + chrono::Duration::seconds(s);
    // Each input as the driver runs it in a batch of its own: rebuilt, then stepped.
    let mut run = |input: Input, at, history: &mut weir_core::sim::store::Changelog| {
        let mut batch = Batch::new(at);
        if let Some((needed, _)) = owner.needs(&batch, &input) {
            block_on(owner.rehydrate(&mut batch, &needed, Some(history.clone()))).expect("rebuilt");
        }
        block_on(owner.step(&mut batch, input)).expect("no processor error");
        history.extend(stored(&id, &batch.effects, at));
        batch.effects
    };
    let retries = |effects: &[Effect]| -> (
        Vec<weir_core::rows::TimerRow>,
        Vec<weir_core::rows::TimerKey>,
    ) {
        let put = effects
            .iter()
            .filter_map(|e| match e {
                Effect::PutTimer(t) if t.kind == weir_core::rows::TimerKind::Retry => {
                    Some(t.clone())
                }
                _ => None,
            })
            .collect();
        let deleted = effects
            .iter()
            .filter_map(|e| match e {
                Effect::DeleteTimer(k) if k.timer_id.starts_with("retry:") => Some(k.clone()),
                _ => None,
            })
            .collect();
        (put, deleted)
    };
    let first = run(
        answer_input(&id, 0, &requests[0].execution_id),
        at(0),
        &mut history,
    );
    let (put, _) = retries(&first);
    assert_eq!(put.len(), 1, "{first:?}");
    let pending = put[0].clone();
    // The second answer, in a later batch: rebuilt, deferred again; the first timer goes.
    let second = run(
        answer_input(&id, 1, &requests[1].execution_id),
        at(0) + chrono::Duration::milliseconds(500),
        &mut history,
    );
    let (put, deleted) = retries(&second);
    assert_eq!(put.len(), 1, "{second:?}");
    assert_eq!(
        deleted,
        vec![pending.key()],
        "the one before is deleted: {second:?}"
    );
    let pending = put[0].clone();
    // It fires: rebuilt and deferred again, one timer for the next try, none due now.
    let fired_at = pending.due_at;
    let third = run(Input::TimerDue(pending.clone()), fired_at, &mut history);
    let (put, _) = retries(&third);
    assert_eq!(put.len(), 1, "{third:?}");
    assert!(put[0].due_at > fired_at, "not due at once: {third:?}");
}
