//! The context of one step of the partition processor: what the rules of an execution's
//! step work with besides the execution itself — the runner, the largest value a record may
//! carry, the counters and the batch being built ([`StepCtx`]). Every changelog entry goes
//! through [`StepCtx::append`], so the projection sees each one as the store will.

use super::Live;
use super::Processor;
use super::config::ProcessorError;
use super::config::ProcessorStats;
use super::effect::Batch;
use super::effect::Effect;
use crate::model::ExecutionError;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::model::Response;
use crate::projection::ExecutionView;
use crate::projection::TimerChange;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::runner::WorkflowRunner;

/// What the rules of an execution's step work with besides the execution: the runner (the
/// host's checks, the terms of activity requests, the runs), the largest value a record may
/// carry, the processor's counters and the batch being built. Borrowed from the processor
/// for one input ([`Processor::ctx`], [`Processor::ctx_of`]).
pub(super) struct StepCtx<'p, R: WorkflowRunner> {
    pub(super) runner: &'p R,
    pub(super) value_limit: usize,
    pub(super) stats: &'p mut ProcessorStats,
    pub(super) batch: &'p mut Batch,
}

impl<R: WorkflowRunner> Processor<R> {
    /// The step context of `batch`, for an execution not (yet) in the cache.
    pub(super) fn ctx<'p>(&'p mut self, batch: &'p mut Batch) -> StepCtx<'p, R> {
        let value_limit = self.value_limit();
        StepCtx {
            runner: &self.runner,
            value_limit,
            stats: &mut self.stats,
            batch,
        }
    }

    /// The step context of `batch` and the cached execution `id` (noted as used, for the
    /// cache policy); `None` if `id` is not cached.
    pub(super) fn ctx_of<'p>(
        &'p mut self,
        batch: &'p mut Batch,
        id: &ExecutionId,
    ) -> Option<(StepCtx<'p, R>, &'p mut Live<R::Run>)> {
        let value_limit = self.value_limit();
        let live = self.cache.get_mut(id)?;
        self.accessed.insert(id.clone());
        let ctx = StepCtx {
            runner: &self.runner,
            value_limit,
            stats: &mut self.stats,
            batch,
        };
        Some((ctx, live))
    }
}

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// Appends the next changelog entry of `view`: through the projection, then as an effect
    /// (with the timer changes the projection makes).
    pub(super) fn append(
        &mut self,
        view: &mut ExecutionView,
        entry: HistoryEntry,
    ) -> Result<(), ProcessorError> {
        let seq = view.next_seq;
        let timers = view.apply(seq, &entry, self.batch.now)?;
        debug_assert_eq!(
            view.next_seq,
            seq + 1,
            "{}: the projection did not move past seq {seq}",
            view.id
        );
        self.batch.effects.push(Effect::Append {
            execution_id: view.id.clone(),
            seq,
            entry,
            at: self.batch.at,
        });
        push_timer_changes(self.batch, timers);
        self.batch.touched.insert(view.id.clone());
        Ok(())
    }

    /// The input record `input` of the batch goes to the DLQ, byte for byte, with why.
    pub(super) fn dead_letter(&mut self, input: usize, reason: DlqReason, error: String) {
        self.stats.dead_letters += 1;
        self.batch.effects.push(Effect::DeadLetter {
            input,
            reason,
            error,
        });
    }

    /// Journals `responses` as they are, without a run to deliver them to.
    pub(super) fn journal_all(
        &mut self,
        live: &mut Live<R::Run>,
        responses: Vec<Response>,
    ) -> Result<(), ProcessorError> {
        for response in responses {
            self.append(&mut live.view, HistoryEntry::ResponseAppended(response))?;
        }
        Ok(())
    }
}

pub(super) fn error_result(kind: ExecutionErrorKind, reason: String) -> ExecutionResult {
    ExecutionResult::ExecutionError(ExecutionError {
        kind,
        reason,
        detail: None,
    })
}

pub(super) fn push_timer_changes(batch: &mut Batch, changes: Vec<TimerChange>) {
    batch
        .effects
        .extend(changes.into_iter().map(|change| match change {
            TimerChange::Put(timer) => Effect::PutTimer(timer),
            TimerChange::Delete(key) => Effect::DeleteTimer(key),
        }));
}
