//! Keyed state that does not decode at all: a record of `weir.state` whose bytes no schema
//! this worker knows can read (corrupt framing, a body that breaks under its own writer
//! schema). Left out at take-over, it lost a key's holders and buffered events (or a
//! schedule) to the new owner without a trace, and stayed in the compacted topic for every
//! later owner to skip again (issue 33, a suspected finding confirmed).
//!
//! The rule: the first batch after a take-over copies each such record to the DLQ
//! (`undecodable`, byte for byte within [`crate::dlq`]'s bounds) and tombstones its key, in
//! that batch's transaction and before any effect of its inputs (an input of the same batch
//! may write the key afresh; the tombstone must not land after it). Both or neither commit,
//! so a copy is made once: an owner that dies first leaves the record to the next one, an
//! owner that commits leaves a tombstone.
//!
//! What is *not* corrupt is never destroyed: a record in a writer schema this worker does not
//! know (a newer Weir's, in a rolling upgrade), or of a kind it does not know, is the
//! reader's to leave in place (`weir::kafka::history_reader` tells them apart); and a record
//! Weir cannot have written (a key that is not a key of its kind, or that belongs to another
//! partition) is left where it is with an error log, since its tombstone would not shadow it.

use super::Processor;
use super::effect::Effect;
use crate::records::{CorruptState, StateOf};
use crate::runner::WorkflowRunner;
use crate::state_key::StateKey;

impl CorruptState {
    /// The tombstone that forgets this record's key on a worker with `partitions`, or why
    /// Weir cannot have written it (no tombstone would shadow it: it is left in place).
    pub fn tombstone(&self, partitions: i32) -> Result<Effect, String> {
        let key = self
            .key
            .as_deref()
            .ok_or("it has no key")
            .and_then(|key| std::str::from_utf8(key).map_err(|_| "its key is not UTF-8"))?;
        // A concurrency slot's key is read by its own module (`weir:slot:…`).
        if self.of == StateOf::Slot {
            crate::concurrency::Slot::of_wire_key(key).map_err(|e| e.to_string())?;
            let tombstone = Effect::PutSlot {
                key: key.to_owned(),
                state: None,
            };
            return self.at_home(tombstone, key, partitions);
        }
        let (tombstone, partitioned_by) = match (self.of, StateKey::parse(key)) {
            (StateOf::Schedule, Ok(StateKey::Schedule(name))) => {
                (Effect::PutSchedule { name, state: None }, key.to_owned())
            }
            (StateOf::Correlation, Ok(StateKey::Correlation(_) | StateKey::Execution(_))) => {
                let tombstone = Effect::PutCorrelation {
                    key: key.to_owned(),
                    state: None,
                };
                (tombstone, key.to_owned())
            }
            // On its correlation key's partition.
            (StateOf::Remembered, Ok(StateKey::Remembered { key, event_id })) => {
                let tombstone = Effect::PutRemembered {
                    key: key.clone(),
                    event_id,
                    at: None,
                };
                (tombstone, key)
            }
            (of, Ok(parsed)) => {
                return Err(format!("its key names {parsed:?}, not a state of {of:?}"));
            }
            (_, Err(e)) => return Err(e.to_string()),
        };
        self.at_home(tombstone, &partitioned_by, partitions)
    }

    /// `tombstone`, if this record is on the partition of `partitioned_by` (else a tombstone
    /// would not shadow it).
    fn at_home(
        &self,
        tombstone: Effect,
        partitioned_by: &str,
        partitions: i32,
    ) -> Result<Effect, String> {
        let home = crate::partitioner::partition_for_key(partitioned_by.as_bytes(), partitions);
        if home != self.partition {
            return Err(format!("its key belongs to partition {home}"));
        }
        Ok(tombstone)
    }
}

impl<R: WorkflowRunner> Processor<R> {
    /// Takes the records of the partitions taken over that do not decode: each is dropped by
    /// the first batch ([`Processor::take_over_effects`]: its DLQ copy, then its key's
    /// tombstone), or, if Weir cannot have written it, left in place with an error log.
    pub fn restore_corrupt_states(&mut self, states: impl IntoIterator<Item = CorruptState>) {
        for state in states {
            match state.tombstone(self.config.partitions) {
                Ok(tombstone) => {
                    tracing::error!(
                        partition = state.partition,
                        offset = state.offset,
                        key = %state.key_text(),
                        error = %state.error,
                        "a keyed state does not decode: it goes to the DLQ and its key is forgotten"
                    );
                    self.stats.corrupt_states_dropped += 1;
                    self.take_over_effects
                        .push(Effect::DeadLetterState(Box::new(state)));
                    self.take_over_effects.push(tombstone);
                }
                Err(why) => tracing::error!(
                    partition = state.partition,
                    offset = state.offset,
                    key = %state.key_text(),
                    error = %state.error,
                    %why,
                    "a record of the state topic does not decode and is not Weir's: left in place"
                ),
            }
        }
    }
}
