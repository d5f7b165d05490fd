//! Responses: answers of children and activities (`weir.responses`, or inline), due delays,
//! delivered to the execution they answer.
//!
//! A response is keyed by the execution it answers; a key that is not an execution id, or a
//! response that answers no request of the key, or one for an execution that does not exist
//! is dead-lettered. A duplicate (same child or delay id) or one for a finished execution is
//! ignored. An answer whose value is not JSON (read as the child's `invalid-response` error),
//! or one for a child calling an external function that does not fit its result type
//! ([`WorkflowRunner::check_answer`]), is taken as that error and the record copied to the
//! DLQ. Otherwise it is delivered to the run; a response the run refuses (it answers no
//! request made, or one of the other kind: what a buggy external service sends) is
//! dead-lettered (`refused`) and the run goes on as if it never came; with no run in memory
//! (a start deferred, an upgrade in this batch) the history's open requests decide instead
//! ([`crate::projection::ExecutionView::awaits`]). An accepted response
//! is journalled, then the run's new events; a run that fails on it finishes with `trap`. An
//! `EventDelivered` on `weir.responses` is dead-lettered: events come only through
//! `weir.events`, where they are deduplicated.
//!
//! A due delay timer becomes a `DelayFinished` response (as above, with no record to
//! dead-letter); a schedule timer starts its execution if it is still scheduled.

use super::Live;
use super::Processor;
use super::admit::response_owner;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::ctx::error_result;
use super::effect::Batch;
use crate::model::ChildKind;
use crate::model::DelayOutcome;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::model::Ran;
use crate::model::Response;
use crate::projection;
use crate::records::ActivityRequest;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::rows::ExecutionState;
use crate::rows::{TimerId, TimerRow};
use crate::runner::RunError;
use crate::runner::WorkflowRun;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// A response record, keyed by the execution it answers; `copy`: the record also goes to
    /// the DLQ with that reason once the response is journalled (an answer Weir had to
    /// rewrite).
    pub(super) async fn answer(
        &mut self,
        batch: &mut Batch,
        index: usize,
        key: Option<&str>,
        response: Response,
        copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        let Some(owner) = response_owner(key) else {
            let error = "the key is not an execution id".to_owned();
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        if !response.is_for(&owner) {
            let error = format!("the response does not answer a request of {owner}");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        }
        if let Response::EventDelivered { .. } = response {
            let error = format!(
                "an event delivery for {owner} on the responses topic: events are sent on the \
                 events topic"
            );
            self.dead_letter(batch, index, DlqReason::Refused, error);
            return Ok(());
        }
        self.deliver(batch, &owner, response, Some(index), copy)
            .await
    }

    /// The answer of an activity request that ran inline ([`crate::inline`]): delivered to its
    /// parent as if it had come on `weir.responses` — journalled, then given to the run, in
    /// the batch that journals the request. The parent is in memory with its run: it was
    /// stepped in this batch, and a run the batch touched is never dropped for room.
    /// What the answer makes the parent append happened when the attempt ended (`ran`), not
    /// at the batch's start ([`Batch::at`]).
    pub async fn answer_inline(
        &mut self,
        batch: &mut Batch,
        request: &ActivityRequest,
        result: ExecutionResult,
        ran: Ran,
    ) -> Result<(), ProcessorError> {
        let response = Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result,
            ran: Some(ran),
        };
        let at = std::mem::replace(&mut batch.at, ran.finished_at.max(batch.now));
        // An answer that came after the parent's deadline finds it timed out (and is dropped).
        let delivered = match self.enforce_deadline(batch, &request.parent_execution_id) {
            Ok(()) => {
                self.deliver(batch, &request.parent_execution_id, response, None, None)
                    .await
            }
            Err(e) => Err(e),
        };
        batch.at = at;
        delivered
    }

    /// Delivers `response` to `owner`: from the input record `index` (`None`: a due timer, or
    /// an inline answer); `copy`: see [`Processor::answer`]. A record for an execution that
    /// does not exist is dead-lettered.
    pub(super) async fn deliver(
        &mut self,
        batch: &mut Batch,
        owner: &ExecutionId,
        response: Response,
        index: Option<usize>,
        copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        let Some((mut ctx, live)) = self.ctx_of(batch, owner) else {
            match index {
                Some(index) => {
                    let error = format!("execution {owner} does not exist");
                    self.dead_letter(batch, index, DlqReason::Other, error);
                }
                None => tracing::warn!(execution = %owner, "timer of an unknown execution dropped"),
            }
            return Ok(());
        };
        ctx.deliver(live, response, index, copy).await
    }

    pub(super) async fn fire_timer(
        &mut self,
        batch: &mut Batch,
        timer: TimerRow,
    ) -> Result<(), ProcessorError> {
        match timer.id() {
            Ok(TimerId::Delay(delay_id)) => {
                let response = Response::DelayFinished {
                    delay_id,
                    outcome: DelayOutcome::Ok,
                };
                self.deliver(batch, &timer.execution_id, response, None, None)
                    .await
            }
            Ok(TimerId::Schedule(_)) => self.start_scheduled(batch, &timer.execution_id).await,
            Ok(TimerId::Retry(_)) => {
                self.retry_fired(&timer.execution_id, timer.due_at);
                self.retry_start(batch, timer.execution_id).await
            }
            // Enforced by `step` before any input of the execution, this one included.
            Ok(TimerId::Deadline(_)) => Ok(()),
            Err(error) => {
                tracing::warn!(%error, "malformed timer dropped");
                Ok(())
            }
        }
    }
}

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// Delivers `response` to the execution `live` (see [`Processor::deliver`]): a stub's
    /// value from a record follows the stub rules ([`StepCtx::stub_value_refused`]); a
    /// duplicate, or one for a finished execution, is ignored; an answer from outside that
    /// does not fit its function's result type becomes the child's `invalid-response` error;
    /// a response the run refuses is dead-lettered (`refused`) and the run goes on as if it
    /// never came; else it is journalled and the run's step taken.
    pub(super) async fn deliver(
        &mut self,
        live: &mut Live<R::Run>,
        response: Response,
        index: Option<usize>,
        mut copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        let owner = live.view.id.clone();
        if let Some(index) = index
            && self.stub_value_refused(live, index, &response)
        {
            return Ok(());
        }
        let id = projection::response_id(&response);
        if live.view.responses_seen.contains(&id) || live.view.state == ExecutionState::Finished {
            tracing::debug!(execution = %owner, response = %id, "response ignored: duplicate or execution finished");
            return Ok(());
        }
        let response = match index {
            Some(_) if copy.is_none() => self.fit_answer(live, response, &mut copy),
            _ => response,
        };
        let Some(run) = live.run.as_mut() else {
            // No run to check the response against the requests it made (a start deferred,
            // an upgrade in this batch, a scheduled execution): the history's requests are.
            if !live.view.awaits(&response) {
                let error =
                    format!("{owner} refuses the response {id}: it answers no request made");
                tracing::warn!(execution = %owner, response = %id, %error, "response refused");
                self.refuse(index, error);
                return Ok(());
            }
            tracing::debug!(execution = %owner, response = %id, "response journalled for a run not in memory");
            self.copy_to_dlq(index, copy);
            return self.append(&mut live.view, HistoryEntry::ResponseAppended(response));
        };
        // Delivered first, journalled only if taken: the run checks a response against the
        // requests it made before it runs any code, and leaves itself as it was if it
        // refuses one.
        let delivered = run.deliver(response.clone(), self.batch.now).await;
        if let Err(RunError::Delivery { source, .. }) = &delivered {
            let error = format!("{owner} refuses the response: {source}");
            tracing::warn!(execution = %owner, response = %id, %error, "response refused");
            self.refuse(index, error);
            return Ok(());
        }
        self.copy_to_dlq(index, copy);
        self.append(&mut live.view, HistoryEntry::ResponseAppended(response))?;
        self.stats.hot_deliveries += 1;
        match delivered {
            Ok(step) => self.apply_step(live, step).await,
            Err(e) => {
                tracing::warn!(execution = %owner, error = %e, "response could not be delivered");
                live.run = None;
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                self.finish(live, result)
            }
        }
    }

    /// An answer from outside for a child that calls an external function, checked against
    /// that function's result type: one that does not fit becomes the child's
    /// `invalid-response` error (instead of a trap of the parent when it reads it), and the
    /// record is to be copied to the DLQ (`copy`). A stub write's answer is Weir's own.
    fn fit_answer(
        &self,
        live: &Live<R::Run>,
        response: Response,
        copy: &mut Option<(DlqReason, String)>,
    ) -> Response {
        let Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ran,
        } = response
        else {
            return response;
        };
        let view = &live.view;
        let misfit = view
            .pending_child(&child_execution_id)
            .filter(|_| view.pending_child_kind(&child_execution_id) != Some(ChildKind::StubWrite))
            .and_then(|ffqn| Some((ffqn, self.runner.check_answer(ffqn, &result).err()?)));
        let result = match misfit {
            Some((ffqn, why)) => {
                let reason = format!(
                    "the answer for {child_execution_id} does not fit the result type of \
                     {ffqn}: {why}"
                );
                tracing::warn!(execution = %view.id, %reason, "an invalid answer");
                *copy = Some((DlqReason::Refused, reason.clone()));
                error_result(ExecutionErrorKind::InvalidResponse, reason)
            }
            None => result,
        };
        Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ran,
        }
    }

    /// A response refused: its record `index` is dead-lettered (`refused`); one of no record
    /// (a timer's, an inline answer) is dropped.
    fn refuse(&mut self, index: Option<usize>, error: String) {
        match index {
            Some(index) => self.dead_letter(index, DlqReason::Refused, error),
            None => {
                tracing::warn!(%error, "a response of no record (a timer's, an inline answer) refused; dropped")
            }
        }
    }

    /// The input record `index` also goes to the DLQ, with `copy`'s reason (an answer Weir
    /// took in another form).
    fn copy_to_dlq(&mut self, index: Option<usize>, copy: Option<(DlqReason, String)>) {
        if let (Some(input), Some((reason, error))) = (index, copy) {
            self.dead_letter(input, reason, error);
        }
    }
}
