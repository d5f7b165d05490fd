//! The rules of a key, table by table ([`super`]).

use super::*;
use serde_json::json;

fn id(n: u8) -> ExecutionId {
    ExecutionId::from_digest(&[n; 32])
}

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).expect("valid")
}

fn event(event_id: &str) -> KeyedEvent {
    KeyedEvent {
        event: ReceivedEvent {
            event_id: event_id.to_owned(),
            name: "paid".to_owned(),
            payload: json!({"amount": 42}),
        },
        key: "payment:order-42".to_owned(),
        sent_at: at(),
        returned_by: None,
    }
}

fn command(n: u8, action: CorrelationAction) -> CorrelationCommand {
    CorrelationCommand {
        key: "payment:order-42".to_owned(),
        execution_id: id(n),
        action,
        sent_at: at(),
    }
}

fn changed(applied: Applied) -> Changed {
    match applied {
        Applied::Changed(c) => c,
        other => panic!("expected a change, got {other:?}"),
    }
}

fn received(r: Received) -> Changed {
    match r {
        Received::Changed(c) => c,
        other => panic!("expected a change, got {other:?}"),
    }
}

fn later(secs: i64) -> DateTime<Utc> {
    at() + Duration::seconds(secs)
}

/// What the processor does with a rule's forwards: their ids remembered at `now`.
fn remember(remembered: &mut Remembered, changed: &Changed, now: DateTime<Utc>) {
    for f in &changed.forwards {
        remembered.remember(Forwarded {
            event_id: f.event.event_id.clone(),
            at: now,
        });
    }
}

fn held(holders: &[u8]) -> CorrelationState {
    let mut state = None;
    for n in holders {
        state = changed(apply(
            state.as_ref(),
            &command(*n, CorrelationAction::Register),
        ))
        .state;
    }
    state.expect("held")
}

#[test]
fn an_event_before_the_registration_waits_and_goes_to_the_first_holder() {
    let buffered = received(receive(None, None, event("ev-1")))
        .state
        .expect("kept");
    assert_eq!(buffered.buffered.len(), 1);
    assert_eq!(
        receive(Some(&buffered), None, event("ev-1")),
        Received::Duplicate
    );
    let registered = changed(apply(
        Some(&buffered),
        &command(1, CorrelationAction::Register),
    ));
    let state = registered.state.clone().expect("held");
    assert_eq!(state.holders, vec![id(1)]);
    assert!(state.buffered.is_empty());
    assert_eq!(registered.forwards.len(), 1);
    assert_eq!(registered.forwards[0].target, id(1));
    assert_eq!(registered.forwards[0].event.event_id, "ev-1");
    assert_eq!(
        registered.forwards[0].correlation_key.as_deref(),
        Some("payment:order-42")
    );
    // The drained id is remembered: sent again, it is a duplicate.
    let mut remembered = Remembered::default();
    remember(&mut remembered, &registered, at());
    assert_eq!(
        receive(Some(&state), Some(&remembered), event("ev-1")),
        Received::Duplicate
    );
}

#[test]
fn an_event_for_a_held_key_is_forwarded_once() {
    let state = held(&[1]);
    let forwarded = received(receive(Some(&state), None, event("ev-1")));
    assert_eq!(forwarded.forwards[0].target, id(1));
    assert_eq!(
        forwarded.state.as_ref(),
        Some(&state),
        "the key's record is unchanged"
    );
    let after = forwarded.state.clone().expect("held");
    let mut remembered = Remembered::default();
    remember(&mut remembered, &forwarded, at());
    assert_eq!(
        receive(Some(&after), Some(&remembered), event("ev-1")),
        Received::Duplicate
    );
    assert_eq!(
        apply(Some(&after), &command(1, CorrelationAction::Register)),
        Applied::Unchanged
    );
}

#[test]
fn a_second_registration_waits_its_turn_and_gets_no_duplicate() {
    let two = held(&[1, 2]);
    assert_eq!(two.holder(), Some(&id(1)));
    let sent = received(receive(Some(&two), None, event("ev-1")));
    assert_eq!(sent.forwards[0].target, id(1));
    let mut remembered = Remembered::default();
    remember(&mut remembered, &sent, at());
    let after = changed(apply(
        sent.state.as_ref(),
        &command(1, CorrelationAction::Unregister),
    ));
    let state = after.state.expect("held");
    assert_eq!(state.holders, vec![id(2)]);
    assert!(after.forwards.is_empty());
    // The first holder took ev-1: sent again, it does not reach the second.
    assert_eq!(
        receive(Some(&state), Some(&remembered), event("ev-1")),
        Received::Duplicate
    );
}

/// A key whose holder finished is forgotten at once (its record a tombstone); the ids it
/// forwarded are remembered apart until the window passes, then new again.
#[test]
fn the_key_is_forgotten_and_its_remembered_ids_expire_apart() {
    let sent = received(receive(Some(&held(&[1])), None, event("ev-1")));
    let mut remembered = Remembered::default();
    remember(&mut remembered, &sent, at());
    let gone = changed(apply(
        sent.state.as_ref(),
        &command(1, CorrelationAction::Unregister),
    ));
    assert_eq!(gone.state, None, "a tombstone");
    assert_eq!(
        receive(None, Some(&remembered), event("ev-1")),
        Received::Duplicate
    );
    let due = remembered.expires_at().expect("an expiry");
    assert_eq!(due, at() + DEDUP_WINDOW);
    assert!(remembered.expire(due - Duration::seconds(1)).is_empty());
    let forgotten = remembered.expire(due);
    assert_eq!(forgotten.len(), 1);
    assert_eq!(forgotten[0].event_id, "ev-1");
    assert!(remembered.is_empty() && remembered.expires_at().is_none());
    // Past the window the id is new again.
    assert!(matches!(
        receive(None, Some(&remembered), event("ev-1")),
        Received::Changed(_)
    ));
    assert_eq!(
        apply(None, &command(1, CorrelationAction::Unregister)),
        Applied::Unchanged
    );
}

/// At most [`MAX_REMEMBERED`] ids, the oldest forgotten first; an id remembered again keeps
/// its first time (nothing to write); ids restored out of order are kept by time.
#[test]
fn at_most_max_remembered_ids_are_kept() {
    let mut remembered = Remembered::default();
    let at_n = |n: usize| at() + Duration::milliseconds(n as i64);
    for n in 0..MAX_REMEMBERED {
        let (new, forgotten) = remembered.remember(Forwarded {
            event_id: format!("ev-{n}"),
            at: at_n(n),
        });
        assert!(new && forgotten.is_empty());
    }
    let (new, forgotten) = remembered.remember(Forwarded {
        event_id: "ev-0".into(),
        at: later(9),
    });
    assert!(!new && forgotten.is_empty(), "remembered already");
    let (new, forgotten) = remembered.remember(Forwarded {
        event_id: "one-more".into(),
        at: later(10),
    });
    assert!(new);
    assert_eq!(forgotten.len(), 1);
    assert_eq!(forgotten[0].event_id, "ev-0", "the oldest forgotten");
    assert_eq!(remembered.len(), MAX_REMEMBERED);
    assert!(!remembered.contains("ev-0") && remembered.contains("ev-1"));

    let mut restored = Remembered::default();
    for (id, secs) in [("b", 2), ("a", 1), ("c", 3)] {
        restored.remember(Forwarded {
            event_id: id.into(),
            at: later(secs),
        });
    }
    let order: Vec<&str> = restored.iter().map(|f| f.event_id.as_str()).collect();
    assert_eq!(order, ["a", "b", "c"]);
}

#[test]
fn an_event_returned_by_a_finished_holder_goes_to_the_next_or_waits() {
    let two = held(&[1, 2]);
    let first = received(receive(Some(&two), None, event("ev-1")));
    let mut returned = event("ev-1");
    returned.returned_by = Some(id(1));
    let next = received(receive(first.state.as_ref(), None, returned.clone()));
    assert_eq!(next.state.expect("held").holders, vec![id(2)]);
    assert_eq!(next.forwards.len(), 1);
    assert_eq!(next.forwards[0].target, id(2));
    // With nobody left, it waits; a returned event is not a duplicate of its own forward,
    // but one the buffer holds already is.
    let alone = received(receive(Some(&held(&[1])), None, returned.clone()))
        .state
        .expect("kept");
    assert!(alone.holders.is_empty());
    assert_eq!(alone.buffered.len(), 1);
    let mut again = returned;
    again.returned_by = Some(id(9));
    assert_eq!(receive(Some(&alone), None, again), Received::Duplicate);
}

/// A cancellation kept for an execution not submitted yet: it waits as long as the
/// submissions are kept (longer than the events beside it), a terminate replaces a
/// cancel and not the other way round, and a long reason is cut to fit the state.
#[test]
fn a_kept_cancellation_waits_for_the_submission_and_a_terminate_stays() {
    let target = id(9);
    let request = |terminate: bool, reason: &str| CancelRequest {
        execution_id: target.clone(),
        reason: reason.to_owned(),
        terminate,
        requested_at: at(),
        waited_until: None,
    };
    let Received::Changed(events) = hold_early(
        None,
        &target,
        event("ev-1").event,
        at(),
        at(),
        EARLY_EVENT_WAIT,
    ) else {
        panic!("kept")
    };
    let events = events.state.expect("a state");
    let kept = hold_cancel(Some(&events), request(false, "a"), at(), EARLY_CANCEL_WAIT)
        .state
        .expect("a state");
    assert_eq!(kept.waits_until, Some(at() + EARLY_CANCEL_WAIT));
    assert_eq!(kept.buffered.len(), 1, "the events stay");
    let terminated = hold_cancel(Some(&kept), request(true, "b"), at(), EARLY_CANCEL_WAIT)
        .state
        .expect("a state");
    assert_eq!(
        terminated.cancel.as_ref().map(|c| c.reason.as_str()),
        Some("b")
    );
    let again = hold_cancel(
        Some(&terminated),
        request(false, "c"),
        at(),
        EARLY_CANCEL_WAIT,
    )
    .state
    .expect("a state");
    assert_eq!(again.cancel.as_ref().map(|c| c.reason.as_str()), Some("b"));
    let long = "é".repeat(MAX_KEPT_CANCEL_REASON);
    let cut = hold_cancel(None, request(false, &long), at(), EARLY_CANCEL_WAIT)
        .state
        .and_then(|s| s.cancel)
        .expect("kept");
    assert!(cut.reason.len() <= MAX_KEPT_CANCEL_REASON && cut.reason.ends_with('…'));
    // Taken by the submission with the events; sent back marked when none came.
    let (early, changed) = take_early(&again);
    assert_eq!(early.events.len(), 1);
    assert!(early.cancel.is_some_and(|c| c.terminate));
    assert_eq!(changed.state, None);
    let back = expire(&again, at() + EARLY_CANCEL_WAIT).expect("due");
    assert_eq!(
        back.cancel_back.and_then(|c| c.waited_until),
        Some(at() + EARLY_CANCEL_WAIT)
    );
    assert_eq!(back.forwards.len(), 1, "the event goes back too");
    assert_eq!(back.state, None);
}

#[test]
fn bounds_refuse_what_does_not_fit() {
    let mut state = CorrelationState::new("payment:order-42");
    for n in 0..MAX_BUFFERED_EVENTS {
        state.buffered.push(BufferedEvent {
            event: event(&format!("ev-{n}")).event,
            sent_at: at(),
        });
    }
    assert!(matches!(
        receive(Some(&state), None, event("one-more")),
        Received::Full(_)
    ));
    let mut holders = CorrelationState::new("payment:order-42");
    holders.holders = (0..MAX_HOLDERS).map(|n| id(n as u8)).collect();
    let refused = apply(Some(&holders), &command(200, CorrelationAction::Register));
    let Applied::Refused { tell, .. } = refused else {
        panic!("the 101st registration is refused: {refused:?}")
    };
    // The registering execution is told, by an event it can await.
    assert_eq!(tell.target, id(200));
    assert_eq!(tell.event.name, REFUSED_EVENT);
    assert_eq!(tell.event.payload["key"], "payment:order-42");
    crate::model::check_event_id(&tell.event.event_id).expect("a valid event id");
    assert_eq!(
        refusal(&command(200, CorrelationAction::Register), "x")
            .event
            .event_id,
        tell.event.event_id,
        "the same command is told with the same id"
    );
    let mut other_key = command(200, CorrelationAction::Register);
    other_key.key = "payment:order-43".into();
    assert_ne!(refusal(&other_key, "x").event.event_id, tell.event.event_id);
}
