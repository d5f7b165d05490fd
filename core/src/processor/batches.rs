//! Batch operations of the owned partitions: the processor's glue to the rules of
//! [`crate::batch`] (the design: `docs/design/batches.md`).
//!
//! A command (`weir.responses`, keyed `weir:batch:<id>` on that key's partition, else
//! `misrouted`, [`super::admit`]) is folded into the batch's state, a refused one
//! dead-lettered with why. Each batch the driver asks which running batches have a token
//! ([`Processor::batch_wants`]), reads the list page each needs from the store, and gives it
//! back ([`Processor::advance_batch`]): the requests the turn sends (on `weir.responses`,
//! keyed by each execution, as `weir pause` / `weir cancel` send them), the turn's outcomes
//! (`PutBatchOutcomes`) and the new state with its cursor moved (`PutBatch`, on `weir.state`)
//! go into the batch's one transaction: a new owner resumes from the last committed cursor.

use super::Processor;
use super::effect::{Batch, Effect};
use crate::batch::{self, Applied, BatchCommand, BatchState};
use crate::records::DlqReason;
use crate::rows::{ListPage, ListQuery};
use crate::runner::WorkflowRunner;
use chrono::{DateTime, Utc};

impl<R: WorkflowRunner> Processor<R> {
    /// A command about a batch of an owned partition; see [`crate::batch::apply`].
    pub(super) fn batch_command(&mut self, batch: &mut Batch, index: usize, command: BatchCommand) {
        let id = command.id.clone();
        match batch::apply(self.batches.get(&id), &command, batch.now) {
            Applied::Unchanged => {
                tracing::debug!(batch = %id, "batch command changes nothing");
            }
            Applied::Refused(error) => {
                tracing::warn!(batch = %id, %error, "batch command refused");
                self.dead_letter(batch, index, DlqReason::Refused, error.to_string());
            }
            Applied::Put(state) => {
                tracing::info!(batch = %id, status = state.status.as_str(), action = %state.spec.action, "batch changed");
                self.put_batch(batch, *state);
            }
        }
    }

    fn put_batch(&mut self, batch: &mut Batch, state: BatchState) {
        batch
            .effects
            .push(Effect::PutBatch(Box::new(state.clone())));
        self.batches.insert(state.id.clone(), state);
    }

    /// Adopts the batches of a partition taken over, as `weir.state` has them.
    pub fn restore_batches(&mut self, states: impl IntoIterator<Item = BatchState>) {
        for state in states {
            self.batches.insert(state.id.clone(), state);
        }
    }

    /// The batches of the owned partitions.
    pub fn batches(&self) -> impl Iterator<Item = &BatchState> {
        self.batches.values()
    }

    /// Whether a running batch can take a turn at `now` (the driver makes a batch for it).
    pub fn batch_due(&self, now: DateTime<Utc>) -> bool {
        self.batches
            .values()
            .any(|s| batch::wants(s, now).is_some())
    }

    /// The running batches that can take a turn at `now`, with the list page each needs.
    pub fn batch_wants(&self, now: DateTime<Utc>) -> Vec<(String, ListQuery)> {
        self.batches
            .values()
            .filter_map(|s| batch::wants(s, now).map(|q| (s.id.clone(), q)))
            .collect()
    }

    /// A turn of batch `id` with the page [`Processor::batch_wants`] asked for; see
    /// [`crate::batch::advance`].
    pub fn advance_batch(&mut self, batch: &mut Batch, id: &str, page: &ListPage) {
        let Some(state) = self.batches.get(id) else {
            return;
        };
        let advanced = batch::advance(state, page, batch.now);
        if advanced.state == *state {
            return;
        }
        self.stats.batch_requests += advanced.requests.len() as u64;
        for request in advanced.requests {
            tracing::debug!(batch = %id, execution = %request.execution_id(), "batch request");
            batch.effects.push(Effect::BatchRequest(request));
        }
        if !advanced.outcomes.is_empty() {
            batch.effects.push(Effect::PutBatchOutcomes {
                id: id.to_owned(),
                turn: advanced.state.turns,
                outcomes: advanced.outcomes,
            });
        }
        if advanced.state.status != state.status {
            tracing::info!(batch = %id, status = advanced.state.status.as_str(), acted = advanced.state.counts.acted, "batch ended");
        }
        self.put_batch(batch, advanced.state);
    }
}
