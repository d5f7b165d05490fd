//! Upgrades: moving an execution to another build (`weir upgrade`), if nothing happened to
//! it since its history was verified on that build ([`UpgradeRequest`]).

use super::Processor;
use super::config::ProcessorError;
use super::effect::Batch;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::records::UpgradeRequest;
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// Moves an execution to another build, if nothing happened to it since its history was
    /// verified on that build (see [`UpgradeRequest`]); else dead-letters the request with
    /// why. The parked run is dropped: the next input rebuilds it on the new build.
    pub(super) fn upgrade(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: UpgradeRequest,
    ) -> Result<(), ProcessorError> {
        let id = &request.execution_id;
        let Some((mut ctx, live)) = self.ctx_of(batch, id) else {
            let error = format!("upgrade of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        let refusal = if live.view.state == ExecutionState::Finished {
            Some((DlqReason::Refused, "it has finished".to_owned()))
        } else if live.view.next_seq != request.expected_seq {
            Some((
                DlqReason::Conflict,
                format!(
                    "its history has {} records, the build was checked against {}: replay it \
                     on the build again",
                    live.view.next_seq, request.expected_seq
                ),
            ))
        } else {
            None
        };
        if let Some((reason, why)) = refusal {
            let error = format!("upgrade of {id} to {} refused: {why}", request.component);
            tracing::warn!(execution = %id, %error, "upgrade refused");
            ctx.dead_letter(index, reason, error);
            return Ok(());
        }
        if live.view.component.as_deref() == Some(request.component.as_str()) {
            tracing::debug!(execution = %id, component = %request.component, "upgrade to the build it runs on: nothing to do");
            return Ok(());
        }
        tracing::info!(execution = %id, from = ?live.view.component, to = %request.component, "execution upgraded");
        let entry = HistoryEntry::Upgraded {
            from: live.view.component.clone(),
            to: request.component,
        };
        ctx.append(&mut live.view, entry)?;
        live.run = None;
        // Rebuilt on the new build once this batch is in the store, whether another input
        // comes or not (one in this batch is journalled for it: the store lacks the batch).
        let now = batch.now;
        self.retry_at(batch, id, now);
        Ok(())
    }
}
