//! Keyed state that does not decode: the first batch after a take-over copies it to the DLQ
//! and tombstones its key before any input's effects; what Weir cannot have written is left.

use crate::fixtures::*;
use weir_core::model::ExecutionId;
use weir_core::processor::{Batch, CorruptState, Effect, Processor, StateOf};
use weir_core::sim::SimRunner;
use weir_core::sim::exec::block_on;

fn corrupt(partition: i32, key: &[u8], of: StateOf) -> CorruptState {
    CorruptState {
        partition,
        offset: 3,
        timestamp_millis: Some(now().timestamp_millis()),
        of,
        key: Some(key.to_vec()),
        value: b"\x07garbage".to_vec(),
        headers: Vec::new(),
        error: "unknown framing".into(),
    }
}

/// What a batch that drops the corrupt states first, then steps `input`, writes.
fn batch_after_take_over(
    processor: &mut Processor<SimRunner>,
    input: weir_core::processor::Input,
) -> Vec<Effect> {
    let mut batch = Batch::new(now());
    processor.take_over_effects(&mut batch);
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    batch.effects
}

/// An early-event buffer whose state is corrupt: the copy, then its tombstone, then the new
/// state an event of the same batch makes (in this order: the tombstone must not land after
/// the new state and forget it). Once dropped, the next batch drops nothing.
#[test]
fn a_corrupt_state_is_copied_and_forgotten_before_the_batch_writes_its_key_again() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let key = id.to_string();
    processor.restore_corrupt_states([corrupt(0, key.as_bytes(), StateOf::Correlation)]);
    assert!(processor.take_over_effects_due());
    let effects = batch_after_take_over(&mut processor, event_input(&id, "ev-1", 7));
    assert!(
        matches!(&effects[0], Effect::DeadLetterState(c) if c.key.as_deref() == Some(key.as_bytes())),
        "{effects:?}"
    );
    assert!(
        matches!(&effects[1], Effect::PutCorrelation { key: k, state: None } if *k == key),
        "{effects:?}"
    );
    assert!(
        matches!(&effects[2], Effect::PutCorrelation { key: k, state: Some(s) } if *k == key && s.buffered.len() == 1),
        "{effects:?}"
    );
    assert!(!processor.take_over_effects_due());
    assert_eq!(processor.stats().corrupt_states_dropped, 1);
    let next = batch_after_take_over(&mut processor, event_input(&id, "ev-2", 8));
    assert!(
        !next.iter().any(|e| matches!(e, Effect::DeadLetterState(_))),
        "{next:?}"
    );
}

/// A schedule's key is forgotten as a schedule; a record Weir cannot have written is left in
/// place (no copy, no tombstone): a key of another partition, a key of the wrong kind, a key
/// that is not UTF-8, no key.
#[test]
fn only_what_weir_can_have_written_is_dropped() {
    let partitions = 4;
    let schedule = corrupt(0, b"schedule:nightly", StateOf::Schedule);
    let home = weir_core::partitioner::partition_for_key(b"schedule:nightly", partitions);
    let schedule = CorruptState {
        partition: home,
        ..schedule
    };
    assert_eq!(
        schedule.tombstone(partitions),
        Ok(Effect::PutSchedule {
            name: "nightly".into(),
            state: None
        })
    );
    let elsewhere = CorruptState {
        partition: (home + 1) % partitions,
        ..schedule.clone()
    };
    assert!(elsewhere.tombstone(partitions).is_err());
    let wrong_kind = CorruptState {
        of: StateOf::Correlation,
        ..schedule.clone()
    };
    assert!(wrong_kind.tombstone(partitions).is_err());
    // An id a key remembers: forgotten on its key's partition.
    let seen = b"weir:seen:payment:1 ev-1";
    let id_home = weir_core::partitioner::partition_for_key(b"payment:1", partitions);
    assert_eq!(
        corrupt(id_home, seen, StateOf::Remembered).tombstone(partitions),
        Ok(Effect::PutRemembered {
            key: "payment:1".into(),
            event_id: "ev-1".into(),
            at: None
        })
    );
    let not_utf8 = corrupt(0, b"\xff\xfe", StateOf::Correlation);
    assert!(not_utf8.tombstone(1).is_err());
    let no_key = CorruptState {
        key: None,
        ..corrupt(0, b"", StateOf::Correlation)
    };
    assert!(no_key.tombstone(1).is_err());

    let mut processor = processor(1 << 20);
    processor.restore_corrupt_states([not_utf8, no_key]);
    assert!(!processor.take_over_effects_due());
}
