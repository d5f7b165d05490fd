//! Concurrency slots ([`crate::concurrency`], `docs/design/concurrency.md`): both sides of
//! the exchange, the slot's owner and the execution's.
//!
//! - **A slot of this partition** takes `Acquire` and `Release` by the pure rules
//!   ([`crate::concurrency::apply`]); its new state is written to `weir.state` and its grants
//!   and refusals sent, all in the batch's transaction.
//! - **An execution of this partition** that claims slots (`Created::slots`) starts only once
//!   it holds them all: it is created `queued` (or `scheduled`, until its time) and acquires
//!   its first slot in the batch of its creation (or of its start time); each `Grant` is
//!   journalled (`SlotGranted`) with the next slot's `Acquire`, and the last one starts its
//!   run. A `Refuse` finishes it `conflict`, with why. Its finish (any: [`super::finish`])
//!   releases what it holds or waits for.
//!
//! What holds the invariant "none runs above its limit": an execution's run starts only where
//! its view holds every slot ([`ExecutionView::next_slot`] is `None`), which only journalled
//! grants make; a slot grants only below its limit; and a slot frees a place only on a
//! `Release`, sent in the transaction of `Finished`. A paused execution journals a grant and
//! starts when resumed (it holds its slot while paused).

use super::Processor;
use super::config::ProcessorError;
use super::ctx::error_result;
use super::effect::{Batch, Effect};
use super::run::Start;
use crate::concurrency::{self, SlotAction, SlotCommand, SlotState};
use crate::model::ExecutionErrorKind;
use crate::projection::ExecutionView;
use crate::records::{DlqReason, HistoryEntry};
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// A slot's command: to a slot of this partition, or to an execution of it.
    pub(super) async fn slot_command(
        &mut self,
        batch: &mut Batch,
        index: usize,
        command: SlotCommand,
    ) -> Result<(), ProcessorError> {
        if command.for_slot() {
            self.slot_owner(batch, &command);
            return Ok(());
        }
        self.slot_answer(batch, index, command).await
    }

    /// An `Acquire` or a `Release` for a slot of this partition.
    fn slot_owner(&mut self, batch: &mut Batch, command: &SlotCommand) {
        let key = command.slot.wire_key();
        let applied = concurrency::apply(self.slots.get(&key), command, batch.now);
        for reply in applied.replies {
            match reply.action {
                SlotAction::Grant => self.stats.slots_granted += 1,
                _ => self.stats.slots_refused += 1,
            }
            batch.effects.push(Effect::Slot(reply));
        }
        if applied.changed {
            match &applied.state {
                Some(state) => self.slots.insert(key.clone(), state.clone()),
                None => self.slots.remove(&key),
            };
            batch.effects.push(Effect::PutSlot {
                key,
                state: applied.state,
            });
        }
    }

    /// A `Grant` or a `Refuse` for an execution of this partition.
    async fn slot_answer(
        &mut self,
        batch: &mut Batch,
        index: usize,
        command: SlotCommand,
    ) -> Result<(), ProcessorError> {
        let id = command.execution_id.clone();
        let Some(live) = self.cache.get(&id) else {
            let error = format!(
                "a {} of concurrency slot {} for {id}, which does not exist",
                action_name(&command.action),
                command.slot
            );
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        // Finished: its release is sent already (with its `Finished`), and frees the place.
        if live.view.state == ExecutionState::Finished {
            return Ok(());
        }
        if !live
            .view
            .created
            .slots
            .iter()
            .any(|c| c.slot == command.slot)
        {
            let error = format!(
                "a {} of concurrency slot {} for {id}, which claims no such slot",
                action_name(&command.action),
                command.slot
            );
            self.dead_letter(batch, index, DlqReason::Refused, error);
            return Ok(());
        }
        // Granted again (an `Acquire` read twice by the slot): it holds it already.
        if live.view.slots_held.contains(&command.slot) {
            return Ok(());
        }
        let Some((mut ctx, live)) = self.ctx_of(batch, &id) else {
            return Ok(());
        };
        match command.action {
            SlotAction::Refuse { reason } => {
                tracing::warn!(execution = %id, slot = %command.slot, %reason, "concurrency slot refused");
                let reason = format!("{id} cannot take its concurrency slot: {reason}");
                ctx.finish_with(live, error_result(ExecutionErrorKind::Conflict, reason))?;
                Ok(())
            }
            SlotAction::Grant => {
                ctx.append(
                    &mut live.view,
                    HistoryEntry::SlotGranted { slot: command.slot },
                )?;
                if acquire_next(ctx.batch, &live.view) || live.view.state == ExecutionState::Paused
                {
                    // Paused while it waited: it starts when resumed.
                    return Ok(());
                }
                if live.view.created.reset_of.is_some() {
                    // Its copied steps are in its history: rebuilt from the store once this
                    // batch is there.
                    self.retry_at(batch, &id, batch.now);
                    return Ok(());
                }
                let deferred = ctx.start_run(live, Start::Scheduled).await?;
                self.note_start(&id, deferred, batch);
                Ok(())
            }
            // Not for an execution (`for_slot`).
            SlotAction::Acquire { .. } | SlotAction::Release => Ok(()),
        }
    }

    /// Adopts the slots of the partitions taken over, as `weir.state` has them.
    pub fn restore_slots(&mut self, states: impl IntoIterator<Item = SlotState>) {
        for state in states {
            self.slots.insert(state.slot.wire_key(), state);
        }
    }

    /// The concurrency slots of the owned partitions that hold or queue executions.
    pub fn slots(&self) -> impl Iterator<Item = &SlotState> {
        self.slots.values()
    }
}

/// If `view` lacks a slot it claims, sends the `Acquire` of the first it lacks and says so:
/// it waits. (Sent again, by a take-over's start or a resume, it changes nothing at the slot.)
pub(super) fn acquire_next(batch: &mut Batch, view: &ExecutionView) -> bool {
    let Some(claim) = view.next_slot() else {
        return false;
    };
    batch.effects.push(Effect::Slot(SlotCommand {
        slot: claim.slot.clone(),
        execution_id: view.id.clone(),
        action: SlotAction::Acquire { limit: claim.limit },
        sent_at: batch.now,
    }));
    true
}

/// The releases an execution's finish sends: each slot it holds, and the one it may wait
/// for (the first it lacks: its `Acquire` may be in the slot's queue). That one is sent even
/// by an execution that may not have asked yet (scheduled for later): whether its start
/// timer fired is no journalled fact (an owner whose clock ran ahead may have sent the
/// `Acquire`), and a release the slot does not need is ignored there, while one it needed
/// and did not get would hold the place for good.
pub(super) fn releases(view: &ExecutionView, now: chrono::DateTime<chrono::Utc>) -> Vec<Effect> {
    let waited = view.next_slot().map(|claim| &claim.slot);
    view.slots_held
        .iter()
        .chain(waited)
        .map(|slot| {
            Effect::Slot(SlotCommand {
                slot: slot.clone(),
                execution_id: view.id.clone(),
                action: SlotAction::Release,
                sent_at: now,
            })
        })
        .collect()
}

fn action_name(action: &SlotAction) -> &'static str {
    match action {
        SlotAction::Acquire { .. } => "acquisition",
        SlotAction::Release => "release",
        SlotAction::Grant => "grant",
        SlotAction::Refuse { .. } => "refusal",
    }
}
