//! Pause and resume (`weir pause`, `weir resume`; issue 35 item 1; the design:
//! `docs/design/pause.md`).
//!
//! A [`PauseRequest`] on `weir.responses`, keyed by its execution:
//! - **Pause** appends `Paused` and drops the execution's run from memory. From then on the
//!   execution's state is `Paused`, and every rule that would run its code or start anything
//!   passes it by, because they all take a run in memory or a `Running` / `Scheduled` state:
//!   - answers, due delays and events are journalled (checked against the requests its
//!     history holds) and wait for the run ([`super::deliver`]);
//!   - [`Processor::needs`] asks for no rebuild and a rehydration starts no run;
//!   - a start due (its schedule timer, a deferred start's `retry` timer) starts nothing;
//!   - running activity attempts go on; their answers are journalled too;
//!   - its deadline still holds: past it, the execution finishes `timed-out` without
//!     running ([`super::cancel`]).
//! - **Resume** appends `Resumed`: the state goes back to what it was (the projection keeps
//!   it). A running one gets a `retry` timer due now; when it fires, after this batch is in
//!   the store, the run is rebuilt from its history — what was journalled while it was paused
//!   included — and takes its next steps, exactly as after an eviction. One paused before its
//!   start time has its schedule timer put again by the projection (due now, if its time
//!   passed while it was paused). A new owner that took the partition over between the two
//!   finds a running execution in its catch-up and tries its start (the take-over's
//!   reminders), so a resume lost with its owner's timers is not lost.
//! - **Resume** also sends, for each activity the execution still waits for, a retry notice
//!   on its route's topic ([`Effect::RetryParkedActivity`], keyed by the activity, after its
//!   request): a request its activity worker parked when its attempts were exhausted
//!   (`on_exhausted = "pause"`, which paused this execution) takes it as a fresh budget of
//!   attempts; any other ignores it. Nothing is re-requested, so an activity id never has two
//!   requests. A cancellation, termination or deadline cancels a parked activity as any other
//!   (`CancelActivity`).
//! - A cancellation of a paused execution resumes it, so that it can compensate
//!   ([`super::cancel`]); a termination, or one of an execution not started yet, finishes it
//!   at once.
//!
//! - A pause an activity worker asks for when it parks an activity names it
//!   ([`PauseRequest::parked`]): an execution that no longer waits for that activity — it
//!   finished, or the activity was answered or cancelled since — cancels it instead
//!   (`CancelActivity`, which takes the park off), and so does a request for an execution
//!   that does not exist. No parked request outlives its parent's interest in it.
//!
//! Bad input changes nothing: pausing or resuming an execution that does not exist, or one
//! that has finished, is dead-lettered with why; pausing a paused execution, or resuming one
//! that is not paused, is ignored.

use super::Processor;
use super::config::ProcessorError;
use super::effect::Batch;
use super::effect::Effect;
use crate::model::ChildKind;
use crate::model::ExecutionId;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::records::PauseAction;
use crate::records::PauseRequest;
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// Takes a pause or resume request (see the module docs).
    pub(super) fn pause(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: PauseRequest,
    ) -> Result<(), ProcessorError> {
        let id = request.execution_id.clone();
        let verb = match request.action {
            PauseAction::Pause => "pause",
            PauseAction::Resume => "resume",
        };
        let Some((mut ctx, live)) = self.ctx_of(batch, &id) else {
            if let Some(parked) = request.parked {
                // No execution waits for it: nothing to pause, and the park must not stay.
                tracing::warn!(execution = %id, activity = %parked.execution_id, "a parked activity of an execution that does not exist: cancelled");
                batch.effects.push(Effect::CancelActivity {
                    parent: id,
                    child: parked.execution_id,
                    ffqn: parked.ffqn,
                });
                return Ok(());
            }
            let error = format!("{verb} of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        if let Some(parked) = &request.parked {
            let waits = live.view.state != ExecutionState::Finished
                && live
                    .view
                    .waiting_for()
                    .children
                    .iter()
                    .any(|(child, _, _)| *child == parked.execution_id);
            if !waits {
                // Finished, or answered some other way since (a cancellation, a closed join
                // set, an answer whose attempt ran again): pausing would hold it for nothing,
                // and nothing would ever take the park off.
                tracing::info!(execution = %id, activity = %parked.execution_id, "a parked activity its execution no longer waits for: cancelled instead of a pause");
                ctx.cancel_activity(&id, parked.execution_id.clone(), parked.ffqn.clone());
                return Ok(());
            }
        }
        let reason = if request.reason.is_empty() {
            format!("{verb}d")
        } else {
            request.reason
        };
        match (request.action, live.view.state) {
            (_, ExecutionState::Finished) => {
                let error = format!("{verb} of {id} refused: it has finished");
                tracing::warn!(execution = %id, %error, "pause request refused");
                ctx.dead_letter(index, DlqReason::Refused, error);
                Ok(())
            }
            (PauseAction::Pause, ExecutionState::Paused) => {
                tracing::debug!(execution = %id, "pause ignored: paused already");
                Ok(())
            }
            (
                PauseAction::Pause,
                ExecutionState::Running | ExecutionState::Scheduled | ExecutionState::Queued,
            ) => {
                tracing::info!(execution = %id, %reason, "execution paused");
                ctx.append(&mut live.view, HistoryEntry::Paused { reason })?;
                ctx.stats.paused += 1;
                live.run = None;
                Ok(())
            }
            (PauseAction::Resume, ExecutionState::Paused) => {
                tracing::info!(execution = %id, %reason, "execution resumed");
                ctx.append(&mut live.view, HistoryEntry::Resumed { reason })?;
                ctx.stats.resumed += 1;
                for (child, ffqn, kind) in live.view.waiting_for().children {
                    if kind == ChildKind::Activity {
                        ctx.batch.effects.push(Effect::RetryParkedActivity {
                            parent: id.clone(),
                            child,
                            ffqn,
                        });
                    }
                }
                let running = live.view.state == ExecutionState::Running;
                if running {
                    self.rebuild_resumed(batch, &id);
                }
                Ok(())
            }
            (
                PauseAction::Resume,
                ExecutionState::Running | ExecutionState::Scheduled | ExecutionState::Queued,
            ) => {
                tracing::debug!(execution = %id, "resume ignored: not paused");
                Ok(())
            }
        }
    }

    /// A resumed running execution has no run in memory: its run is rebuilt from the store
    /// (once this batch, which resumed it, is there) by a `retry` timer due now.
    pub(super) fn rebuild_resumed(&mut self, batch: &mut Batch, id: &ExecutionId) {
        let now = batch.now;
        self.retry_at(batch, id, now);
    }
}
