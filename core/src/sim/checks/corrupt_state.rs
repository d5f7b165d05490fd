//! Corrupt keyed state (`corrupt-state`, `Faults::corrupt_state`): each record of `weir.state`
//! that does not decode and that Weir could have written is copied to the DLQ at most once,
//! and exactly once if it was there when the workers started (every first take-over reads
//! it), and its key is tombstoned after the copy; one Weir cannot have written is left in
//! place, never copied.

use std::collections::BTreeMap;

use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::CorruptSent;
use crate::sim::world::World;

pub(super) fn check_corrupt_states(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    corrupt: &[CorruptSent],
    dead: &BTreeMap<(String, i32, i64), usize>,
    settled: bool,
) {
    for c in corrupt {
        let CorruptSent {
            partition,
            offset,
            key,
            weirs,
            before_start,
        } = c;
        let copies = dead
            .get(&(Topic::State.name().to_owned(), *partition, *offset))
            .copied()
            .unwrap_or(0);
        // The records of its key on its partition after it, as a reader of the state sees them.
        let after: Vec<bool> = w
            .cluster
            .committed_records(Topic::State)
            .filter(|(p, r)| {
                p == partition && r.offset > *offset && r.key.as_deref() == Some(key.as_str())
            })
            .map(|(_, r)| {
                matches!(
                    r.payload,
                    Some(
                        Payload::Correlation(None)
                            | Payload::Schedule(None)
                            | Payload::Remembered(None)
                    )
                )
            })
            .collect();
        if !weirs {
            if copies > 0 || !after.is_empty() {
                add(
                    Invariant::CorruptState,
                    format!(
                        "{key}@{partition}/{offset} is not Weir's, but was dead-lettered \
                         {copies} times and written {} times after",
                        after.len()
                    ),
                );
            }
            continue;
        }
        if (settled && *before_start && copies != 1) || copies > 1 {
            add(
                Invariant::CorruptState,
                format!("corrupt state {key}@{partition}/{offset} dead-lettered {copies} times"),
            );
        }
        if copies > 0 && after.first() != Some(&true) {
            add(
                Invariant::CorruptState,
                format!(
                    "corrupt state {key}@{partition}/{offset} was dead-lettered, but the next \
                     record of its key is not a tombstone ({after:?})"
                ),
            );
        }
    }
}
