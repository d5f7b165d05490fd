//! The rules of a slot, case by case ([`super`]).

use super::*;

fn id(n: u8) -> ExecutionId {
    ExecutionId::from_digest(&[n; 32])
}

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).expect("valid")
}

fn slot() -> Slot {
    Slot::Key("customer-42".to_owned())
}

fn acquire(n: u8, limit: u32) -> SlotCommand {
    SlotCommand {
        slot: slot(),
        execution_id: id(n),
        action: SlotAction::Acquire { limit },
        sent_at: at(),
    }
}

fn release(n: u8) -> SlotCommand {
    SlotCommand {
        action: SlotAction::Release,
        ..acquire(n, 1)
    }
}

/// Applies `commands` in order from no state: the state, and every reply by execution.
fn run(commands: &[SlotCommand]) -> (Option<SlotState>, Vec<(ExecutionId, SlotAction)>) {
    let mut state = None;
    let mut replies = Vec::new();
    for command in commands {
        let applied = apply(state.as_ref(), command, at());
        replies.extend(
            applied
                .replies
                .into_iter()
                .map(|r| (r.execution_id, r.action)),
        );
        state = applied.state;
    }
    (state, replies)
}

#[test]
fn grants_up_to_the_limit_then_queues_in_order_and_grants_on_release() {
    let (state, replies) = run(&[acquire(1, 2), acquire(2, 2), acquire(3, 2), acquire(4, 2)]);
    let state = state.expect("held");
    assert_eq!(state.holders, vec![id(1), id(2)]);
    assert_eq!(state.waiting, vec![id(3), id(4)]);
    assert_eq!(
        replies,
        vec![(id(1), SlotAction::Grant), (id(2), SlotAction::Grant)]
    );
    let applied = apply(Some(&state), &release(2), at());
    assert!(applied.changed);
    let replies: Vec<_> = applied.replies.iter().map(|r| &r.execution_id).collect();
    assert_eq!(replies, vec![&id(3)], "the first waiting one, only");
    let state = applied.state.expect("held");
    assert_eq!(state.holders, vec![id(1), id(3)]);
    assert_eq!(state.waiting, vec![id(4)]);
}

#[test]
fn an_acquire_read_twice_grants_nothing_new_and_a_release_of_a_stranger_changes_nothing() {
    let (state, replies) = run(&[acquire(1, 1), acquire(2, 1), acquire(2, 1)]);
    let state = state.expect("held");
    assert_eq!(state.waiting, vec![id(2)], "queued once");
    assert_eq!(replies, vec![(id(1), SlotAction::Grant)]);
    // A holder asking again is granted again (its owner ignores a grant it has).
    let again = apply(Some(&state), &acquire(1, 1), at());
    assert!(!again.changed);
    assert_eq!(again.replies.len(), 1);
    assert_eq!(again.replies[0].action, SlotAction::Grant);
    let stranger = apply(Some(&state), &release(9), at());
    assert!(!stranger.changed && stranger.replies.is_empty());
    assert_eq!(stranger.state.as_ref(), Some(&state));
    assert!(!apply(None, &release(9), at()).changed);
}

#[test]
fn a_waiting_execution_released_leaves_the_queue_and_an_idle_slot_is_forgotten() {
    let (state, _) = run(&[acquire(1, 1), acquire(2, 1), release(2)]);
    let state = state.expect("held");
    assert_eq!(
        (state.holders.clone(), state.waiting.len()),
        (vec![id(1)], 0)
    );
    let applied = apply(Some(&state), &release(1), at());
    assert!(applied.changed && applied.replies.is_empty());
    assert_eq!(applied.state, None, "idle: a tombstone");
}

#[test]
fn a_lowered_limit_grants_nothing_until_below_it_and_a_raised_one_grants_at_once() {
    let (state, _) = run(&[acquire(1, 3), acquire(2, 3), acquire(3, 3), acquire(4, 1)]);
    let state = state.expect("held");
    assert_eq!(state.limit, 1);
    assert_eq!(state.holders.len(), 3);
    let applied = apply(Some(&state), &release(1), at());
    assert!(applied.replies.is_empty(), "still above the limit");
    let state = applied.state.expect("held");
    let applied = apply(Some(&state), &acquire(5, 4), at());
    let granted: Vec<_> = applied
        .replies
        .iter()
        .map(|r| r.execution_id.clone())
        .collect();
    assert_eq!(granted, vec![id(4), id(5)], "in the order they came");
}

#[test]
fn a_full_queue_refuses_one_more_and_changes_nothing() {
    let mut state = run(&[acquire(0, 1)]).0.expect("held");
    state.waiting = (0..MAX_WAITING)
        .map(|n| {
            let mut digest = [0u8; 32];
            digest[..8].copy_from_slice(&(n as u64).to_be_bytes());
            ExecutionId::from_digest(&digest)
        })
        .collect();
    let applied = apply(Some(&state), &acquire(7, 1), at());
    assert!(!applied.changed);
    assert!(matches!(
        &applied.replies[..],
        [SlotCommand { action: SlotAction::Refuse { reason }, .. }] if reason.contains("10000 executions wait")
    ));
}

#[test]
fn slots_read_back_from_their_wire_keys_and_bad_ones_are_refused() {
    let ffqn: Ffqn = "weir:demo/orders.place".parse().expect("ffqn");
    for slot in [Slot::Key("customer-42".to_owned()), Slot::Function(ffqn)] {
        assert_eq!(Slot::of_wire_key(&slot.wire_key()), Ok(slot.clone()));
    }
    assert!(Slot::of_wire_key("weir:slot:key:has space").is_err());
    assert!(Slot::of_wire_key("weir:slot:other:x").is_err());
    assert!(Slot::of_wire_key("key:x").is_err());
}

#[test]
fn claims_take_the_key_first_and_refuse_bad_limits() {
    let ffqn: Ffqn = "weir:demo/orders.place".parse().expect("ffqn");
    let key = ConcurrencyKey {
        key: "customer-42".to_owned(),
        limit: None,
    };
    let claims = claims(&ffqn, Some(&key), Some(5)).expect("valid");
    assert_eq!(
        claims,
        vec![
            SlotClaim {
                slot: Slot::Key("customer-42".to_owned()),
                limit: DEFAULT_KEY_LIMIT
            },
            SlotClaim {
                slot: Slot::Function(ffqn.clone()),
                limit: 5
            },
        ]
    );
    let zero = ConcurrencyKey {
        limit: Some(0),
        ..key.clone()
    };
    let error = super::claims(&ffqn, Some(&zero), None).expect_err("0 refused");
    assert!(
        error.to_string().contains("limit 0 of key `customer-42`"),
        "{error}"
    );
    assert!(super::claims(&ffqn, None, Some(MAX_LIMIT + 1)).is_err());
    let spaced = ConcurrencyKey {
        key: "a b".to_owned(),
        limit: None,
    };
    assert!(super::claims(&ffqn, Some(&spaced), None).is_err());
    assert_eq!(
        check_limit(-3, ""),
        Err(SlotError::Limit {
            limit: -3,
            of: String::new()
        })
    );
}
