//! Records of `weir.state` that do not decode (`Faults::corrupt_state`): some written before
//! the workers start, so that the first take-overs read them; more during the fault phase,
//! read by whichever take-over comes next (a rebalance, a kill, a zombie's successor). Drawn
//! from an RNG of their own ([`Sim::corrupt_rng`]): the run's other draws are the same with
//! or without the class.

use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::sent::CorruptSent;
use crate::sim::world::lock;
use crate::state_key::{REMEMBERED_PREFIX, SCHEDULE_PREFIX};
use crate::wire::RecordKind;

/// What a corrupt record is the state of.
#[derive(Clone, Copy)]
enum Of {
    Correlation,
    EarlyEvents,
    Schedule,
    /// An event id a correlation key remembers, on the key's partition.
    Remembered,
    /// A correlation key's, on a partition its key does not belong to: not Weir's.
    Stray,
}

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn corrupt_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x00c0_ffee_5eed)
    }

    /// Before the workers start: one corrupt state of each kind (a second correlation key's in
    /// some runs), and one that is not Weir's.
    pub(in crate::sim) fn write_corrupt_states(&mut self) {
        for of in [
            Of::Correlation,
            Of::EarlyEvents,
            Of::Schedule,
            Of::Remembered,
            Of::Stray,
        ] {
            self.write_corrupt_state(of, true);
        }
        if self.corrupt_rng.chance(500) {
            self.write_corrupt_state(Of::Correlation, true);
        }
    }

    /// During the fault phase, at one step in fifty: a corrupt state of any kind.
    pub(in crate::sim) fn maybe_write_corrupt_state(&mut self) {
        if self.corrupt_rng.chance(20) {
            let of = *self.corrupt_rng.pick(&[
                Of::Correlation,
                Of::EarlyEvents,
                Of::Schedule,
                Of::Remembered,
                Of::Stray,
            ]);
            self.write_corrupt_state(of, false);
        }
    }

    fn write_corrupt_state(&mut self, of: Of, before_start: bool) {
        let n = self.corrupt_rng.range(0, 1_000_000);
        let (key, kind) = match of {
            Of::Correlation | Of::Stray => (format!("corrupt-{n}"), Some(RecordKind::Correlation)),
            // An execution nobody submits: its early-event buffer's key.
            Of::EarlyEvents => {
                let ms = self.now().timestamp_millis() as u64;
                let id = ExecutionId::top_level(ulid::Ulid::from_parts(
                    ms,
                    u128::from(self.corrupt_rng.next_u64()),
                ));
                (id.to_string(), Some(RecordKind::Correlation))
            }
            Of::Schedule => (format!("{SCHEDULE_PREFIX}corrupt-{n}"), None),
            Of::Remembered => (
                format!("{REMEMBERED_PREFIX}corrupt-{n} ev-{n}"),
                Some(RecordKind::Remembered),
            ),
        };
        let payload = Payload::Garbage(format!("{key}: not Avro"));
        let mut w = lock(&self.world);
        let partitions = w.cluster.partitions(Topic::State);
        // An id a key remembers lives on its key's partition.
        let home = match of {
            Of::Remembered => w
                .cluster
                .partition_for(Topic::State, &format!("corrupt-{n}")),
            _ => w.cluster.partition_for(Topic::State, &key),
        };
        let (partition, weirs) = match of {
            Of::Stray if partitions > 1 => ((home + 1) % partitions, false),
            Of::Stray => return,
            _ => (home, true),
        };
        let (partition, offset) =
            w.client_append_at(Topic::State, partition, key.clone(), kind, payload);
        drop(w);
        self.note(format!(
            "corrupt state {key} -> state/{partition}@{offset}{}",
            if weirs { "" } else { " (not Weir's)" }
        ));
        self.corrupt_states.push(CorruptSent {
            partition,
            offset,
            key,
            weirs,
            before_start,
        });
    }
}
