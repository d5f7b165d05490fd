//! Events: delivered to their wait once whenever they come, kept for an execution not
//! submitted yet, and routed by correlation key.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input};
use weir_core::records::HistoryEntry;
use weir_core::sim::Workflow;
use weir_core::sim::exec::block_on;

/// The state the processor keeps for an execution that does not exist, from a batch's
/// effects: `Some(None)` when it is forgotten.
fn early_state(
    effects: &[Effect],
    id: &ExecutionId,
) -> Option<Option<weir_core::correlation::CorrelationState>> {
    correlation_put(effects, &id.to_string())
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
    let back = forwards(&batch.effects);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].target, never);
    assert_eq!(back[0].waited_until, Some(late));
    assert_eq!(early_state(&batch.effects, &never), Some(None));
    let returned = input_of(&never, Body::Event(back[0].clone()));
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

/// Issue 33 F7: an early event whose wait ran out while the owner was not reading the
/// submissions (admission paused them for a while) is kept again, not dead-lettered: its
/// submission may be in the part not read. Once it comes, it takes the event. (It was
/// dead-lettered `other`, and the execution never had it.)
#[test]
fn an_early_event_is_kept_again_when_the_submissions_were_paused_during_its_wait() {
    use weir_core::correlation::EARLY_EVENT_WAIT;

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(&mut processor, event_input(&id, "ev-1", 7));
    // Admission paused the submissions 30 s into the wait.
    processor.submissions_read(false, now() + chrono::Duration::seconds(30));
    let late = now() + EARLY_EVENT_WAIT;
    let mut batch = Batch::new(late);
    processor.expire_correlations(&mut batch);
    let back = forwards(&batch.effects);
    assert_eq!(back.len(), 1, "{:?}", batch.effects);
    let returned = input_of(&id, Body::Event(back[0].clone()));
    let again = step_at(&mut processor, returned, late);
    assert!(dead_letters(&again).is_empty(), "{again:?}");
    let kept = early_state(&again, &id).flatten().expect("kept again");
    assert_eq!(kept.buffered.len(), 1);
    assert_eq!(kept.waits_until, Some(late + EARLY_EVENT_WAIT));
    // The submission comes: the event is the execution's.
    let created = step_at(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
        late,
    );
    assert_eq!(published(&created), Some(ExecutionResult::Ok(json!(7))));

    // Read all along a wait, the submissions hold no such execution: dead-lettered.
    let never = ExecutionId::top_level(ulid::Ulid::new());
    let start = late + chrono::Duration::seconds(1);
    step_at(&mut processor, event_input(&never, "ev-2", 1), start);
    let mut batch = Batch::new(start + EARLY_EVENT_WAIT);
    processor.expire_correlations(&mut batch);
    let back = forwards(&batch.effects).pop().expect("sent back");
    let returned = input_of(&never, Body::Event(back));
    let dead = step_at(&mut processor, returned, start + EARLY_EVENT_WAIT);
    assert_eq!(dead_letters(&dead).len(), 1, "{dead:?}");
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

/// Issue 13 item 2: correlation keys through `Processor::step` — the key's owner forwards,
/// buffers, queues holders and takes back what a finished holder returns; the execution's
/// owner returns a forwarded event it cannot take instead of dead-lettering it.
mod correlation {
    use super::correlation_put;
    use crate::fixtures::*;
    use serde_json::json;
    use weir_core::correlation::{
        CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent,
    };
    use weir_core::model::{ExecutionId, ExecutionResult};
    use weir_core::processor::{Batch, Body, Effect, Input, Processor};
    use weir_core::records::{DlqReason, InboundEvent, ReceivedEvent};
    use weir_core::sim::exec::block_on;
    use weir_core::sim::{SimRunner, Workflow};

    const KEY: &str = "payment:order-42";

    /// A processor of three partitions, so that keys and executions may sit apart.
    fn processor() -> Processor<SimRunner> {
        Processor::new(SimRunner, processor_config(1 << 20, 3))
    }

    /// The input record of `body` keyed `key`, on the partition of `key`.
    fn record(key: &str, body: Body) -> Input {
        Input::Record {
            index: 0,
            partition: weir_core::partitioner::partition_for_key(key.as_bytes(), 3),
            key: Some(key.to_owned()),
            size: 100,
            body: Ok(body),
            timestamp: None,
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

    fn put(effects: &[Effect]) -> Option<Option<CorrelationState>> {
        correlation_put(effects, KEY)
    }

    fn id() -> ExecutionId {
        ExecutionId::top_level(ulid::Ulid::new())
    }

    /// The remembered ids `effects` write (`true`) or forget (`false`), in order.
    fn remembered_puts(effects: &[Effect]) -> Vec<(String, bool)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::PutRemembered { event_id, at, .. } => {
                    Some((event_id.clone(), at.is_some()))
                }
                _ => None,
            })
            .collect()
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
        assert_eq!(remembered_puts(&registered), [("ev-1".to_owned(), true)]);
        let next = step(&mut p, record(KEY, keyed("ev-2", None)));
        assert_eq!(forwards(&next)[0].target, first);
        assert_eq!(
            put(&next),
            None,
            "a forward leaves the key's record as it is"
        );
        assert_eq!(
            remembered_puts(&next),
            [("ev-2".to_owned(), true)],
            "a forward remembers its id, a record of its own"
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
        assert_eq!(put(&gone), Some(None), "held by nobody: a tombstone");
        assert_eq!(p.correlations().count(), 0);
        // The remembered ids live on apart, and are forgotten after the window.
        let resent = step(&mut p, record(KEY, keyed("ev-1", None)));
        assert!(resent.is_empty(), "still a duplicate {resent:?}");
        let due = now() + weir_core::correlation::DEDUP_WINDOW;
        assert!(!p.correlation_due(due - chrono::Duration::seconds(1)));
        assert!(p.correlation_due(due));
        let mut batch = Batch::new(due);
        p.expire_correlations(&mut batch);
        assert_eq!(
            remembered_puts(&batch.effects),
            [
                ("ev-1".to_owned(), false),
                ("ev-2".to_owned(), false),
                ("ev-3".to_owned(), false)
            ],
            "tombstones"
        );
        assert_eq!(p.remembered().count(), 0);
        assert_eq!(p.stats().keyed_events_forwarded, 3);
    }

    /// Past the old bound of 1,000 remembered ids (the ids had to fit the key's record), the
    /// first id sent again is still a duplicate: it reached a second holder before (issue 33,
    /// a suspected finding confirmed). Each forward wrote the key's whole record then; it
    /// writes one id now.
    #[test]
    fn a_key_remembers_more_than_a_thousand_ids() {
        let mut p = processor();
        let (first, second) = (id(), id());
        for holder in [&first, &second] {
            step(
                &mut p,
                record(KEY, command(holder, CorrelationAction::Register)),
            );
        }
        for n in 0..1_001 {
            let sent = step(&mut p, record(KEY, keyed(&format!("ev-{n}"), None)));
            assert_eq!(forwards(&sent).len(), 1);
            assert_eq!(put(&sent), None, "the key's record is not written again");
        }
        step(
            &mut p,
            record(KEY, command(&first, CorrelationAction::Unregister)),
        );
        let resent = step(&mut p, record(KEY, keyed("ev-0", None)));
        assert!(
            forwards(&resent).is_empty(),
            "the first id does not reach the second holder: {resent:?}"
        );
        assert_eq!(p.remembered().count(), 1_001);
    }

    /// A key record an earlier Weir wrote held its remembered ids: the new owner's first
    /// batch writes each as a record of its own and the key's record without them, before
    /// any input's effects; the ids dedup meanwhile.
    #[test]
    fn ids_an_old_key_record_held_are_moved_out_by_the_first_batch() {
        use weir_core::correlation::{Forwarded, RememberedEvent};
        let mut p = processor();
        let holder = id();
        step(
            &mut p,
            record(KEY, command(&holder, CorrelationAction::Register)),
        );
        let state = p.correlations().next().cloned().expect("held");
        let mut owner = processor();
        owner.restore_correlations([state.clone()]);
        let old = |event_id: &str| RememberedEvent {
            key: KEY.to_owned(),
            forwarded: Forwarded {
                event_id: event_id.to_owned(),
                at: now(),
            },
        };
        owner.restore_remembered([old("old-1"), old("old-2")], [KEY.to_owned()]);
        assert!(owner.take_over_effects_due());
        let mut batch = Batch::new(now());
        owner.take_over_effects(&mut batch);
        block_on(owner.step(&mut batch, record(KEY, keyed("old-1", None)))).expect("steps");
        assert_eq!(
            remembered_puts(&batch.effects),
            [("old-1".to_owned(), true), ("old-2".to_owned(), true)]
        );
        assert!(
            matches!(&batch.effects[2], Effect::PutCorrelation { state: Some(s), .. } if *s == state),
            "{:?}",
            batch.effects
        );
        assert!(forwards(&batch.effects).is_empty(), "old-1 is a duplicate");
        assert!(!owner.take_over_effects_due());
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
        // A key restored at take-over goes on from its committed state and remembered ids.
        let mut again = processor();
        again.restore_correlations(p.correlations().cloned().collect::<Vec<_>>());
        again.restore_remembered(p.remembered().collect::<Vec<_>>(), []);
        let next = step(&mut again, record(KEY, keyed("ev-2", None)));
        assert_eq!(forwards(&next)[0].target, second);
        let resent = step(&mut again, record(KEY, keyed("ev-1", None)));
        assert!(
            resent.is_empty(),
            "remembered across the take-over: {resent:?}"
        );
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
            timestamp: None,
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

    /// The registration one past `MAX_HOLDERS` is dead-lettered, and its execution is told by
    /// an event it can await (issue 33 F11: it used to wait for the key's events forever).
    #[test]
    fn a_registration_the_key_cannot_take_is_answered_to_its_execution() {
        use weir_core::correlation::{MAX_HOLDERS, REFUSED_EVENT};
        let mut p = processor();
        for _ in 0..MAX_HOLDERS {
            let effects = step(
                &mut p,
                record(KEY, command(&id(), CorrelationAction::Register)),
            );
            assert!(dead_letters(&effects).is_empty(), "{effects:?}");
        }
        let late = id();
        let refused = step(
            &mut p,
            record(KEY, command(&late, CorrelationAction::Register)),
        );
        assert_eq!(dead_letters(&refused)[0].0, DlqReason::Refused);
        let told = forwards(&refused);
        assert_eq!(told.len(), 1, "{refused:?}");
        assert_eq!(told[0].target, late);
        assert_eq!(told[0].event.name, REFUSED_EVENT);
        assert_eq!(told[0].event.payload["key"], KEY);
        assert!(
            told[0].event.payload["reason"]
                .as_str()
                .is_some_and(|r| r.contains("hold or wait")),
            "{told:?}"
        );
        assert_eq!(put(&refused), None, "the key's state is unchanged");
    }
}
