//! TODO(doc deliver)

use crate::model::{
    ChildKind, DelayId, DelayOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult, Response,
};
use crate::projection;
use crate::records::{ActivityRequest, DlqReason, HistoryEntry};
use crate::rows::{ExecutionState, TimerKind, TimerRow};
use crate::runner::WorkflowRun;
use crate::runner::{RunError, WorkflowRunner};
use std::str::FromStr;

use super::Processor;
use super::admit::response_owner;
use super::config::{ProcessorError, ProcessorStats};
use super::effect::{Batch, Effect};
use super::run::{Rules, append, apply_step, error_result, finish};

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
    pub async fn answer_inline(
        &mut self,
        batch: &mut Batch,
        request: &ActivityRequest,
        result: ExecutionResult,
    ) -> Result<(), ProcessorError> {
        let response = Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result,
        };
        self.deliver(batch, &request.parent_execution_id, response, None, None)
            .await
    }

    /// Delivers `response` to `owner`: from the input record `index` (`None`: a due timer, or
    /// an inline answer);
    /// `copy`: see [`Processor::answer`].
    pub(super) async fn deliver(
        &mut self,
        batch: &mut Batch,
        owner: &ExecutionId,
        response: Response,
        index: Option<usize>,
        mut copy: Option<(DlqReason, String)>,
    ) -> Result<(), ProcessorError> {
        if !self.cache.contains_key(owner) {
            match index {
                Some(index) => {
                    let error = format!("execution {owner} does not exist");
                    self.dead_letter(batch, index, DlqReason::Other, error);
                }
                None => tracing::warn!(execution = %owner, "timer of an unknown execution dropped"),
            }
            return Ok(());
        }
        let limit = self.value_limit();
        let Processor {
            stats,
            cache,
            runner,
            accessed,
            ..
        } = self;
        let Some(live) = cache.get_mut(owner) else {
            return Ok(());
        };
        accessed.insert(owner.clone());
        let id = projection::response_id(&response);
        // A stub's value from a record (`weir stub`, any client): the same value again is
        // nothing new, another one is a conflict, one that does not fit the stub's result
        // type is refused; none is journalled, and the stub keeps its value.
        if let (
            Some(index),
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
            },
        ) = (index, &response)
            && let Some(written) = live.view.stub_child(child_execution_id)
        {
            let refusal = match written {
                Some(written) if written == result => {
                    tracing::debug!(execution = %owner, stub = %child_execution_id, "the stub holds this value already");
                    return Ok(());
                }
                Some(written) => Some((
                    DlqReason::Conflict,
                    format!("stub {child_execution_id} holds {written}: {result} is not written"),
                )),
                None => live
                    .view
                    .pending_child(child_execution_id)
                    .and_then(|ffqn| Some((ffqn, runner.check_answer(ffqn, result).err()?)))
                    .map(|(ffqn, why)| {
                        (
                            DlqReason::Refused,
                            format!(
                                "the value for stub {child_execution_id} does not fit the \
                                 result type of {ffqn}: {why}"
                            ),
                        )
                    }),
            };
            if let Some((reason, error)) = refusal {
                tracing::warn!(execution = %owner, %error, "a stub value refused");
                stats.dead_letters += 1;
                batch.effects.push(Effect::DeadLetter {
                    input: index,
                    reason,
                    error,
                });
                return Ok(());
            }
        }
        if live.view.responses_seen.contains(&id) || live.view.state == ExecutionState::Finished {
            tracing::debug!(execution = %owner, response = %id, "response ignored: duplicate or execution finished");
            return Ok(());
        }
        // An answer from outside for a child that calls an external function is checked
        // against that function's result type: one that does not fit becomes the child's
        // `invalid-response` error (instead of a trap of the parent when it reads it).
        let response = match response {
            Response::ChildExecutionFinished {
                child_execution_id,
                result,
            } if index.is_some()
                && copy.is_none()
                && live.view.pending_child_kind(&child_execution_id)
                    != Some(ChildKind::StubWrite) =>
            {
                let misfit = live
                    .view
                    .pending_child(&child_execution_id)
                    .and_then(|ffqn| Some((ffqn, runner.check_answer(ffqn, &result).err()?)));
                let result = match misfit {
                    Some((ffqn, why)) => {
                        let reason = format!(
                            "the answer for {child_execution_id} does not fit the result type \
                             of {ffqn}: {why}"
                        );
                        tracing::warn!(execution = %owner, %reason, "an invalid answer");
                        copy = Some((DlqReason::Refused, reason.clone()));
                        error_result(ExecutionErrorKind::InvalidResponse, reason)
                    }
                    None => result,
                };
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                }
            }
            other => other,
        };
        let copy_to_dlq = |stats: &mut ProcessorStats, batch: &mut Batch, copy| {
            if let (Some(input), Some((reason, error))) = (index, copy) {
                stats.dead_letters += 1;
                batch.effects.push(Effect::DeadLetter {
                    input,
                    reason,
                    error,
                });
            }
        };
        let Some(run) = live.run.as_mut() else {
            // A scheduled execution has no requests to answer yet.
            tracing::warn!(execution = %owner, response = %id, "response for an execution that has not started");
            copy_to_dlq(stats, batch, copy);
            return append(
                batch,
                &mut live.view,
                HistoryEntry::ResponseAppended(response),
            );
        };
        // Delivered first, journalled only if taken: the run checks a response against the
        // requests it made before it runs any code, and leaves itself as it was if it
        // refuses one.
        let delivered = run.deliver(response.clone(), batch.now).await;
        if let Err(RunError::Delivery { source, .. }) = &delivered {
            let error = format!("{owner} refuses the response: {source}");
            tracing::warn!(execution = %owner, response = %id, %error, "response refused");
            match index {
                Some(index) => {
                    stats.dead_letters += 1;
                    batch.effects.push(Effect::DeadLetter {
                        input: index,
                        reason: DlqReason::Refused,
                        error,
                    });
                }
                None => {
                    tracing::warn!(execution = %owner, "a response of no record (a timer's, an inline answer) refused; dropped")
                }
            }
            return Ok(());
        }
        copy_to_dlq(stats, batch, copy);
        append(
            batch,
            &mut live.view,
            HistoryEntry::ResponseAppended(response),
        )?;
        stats.hot_deliveries += 1;
        match delivered {
            Ok(step) => apply_step(Rules::new(runner, limit), stats, batch, live, step).await,
            Err(e) => {
                tracing::warn!(execution = %owner, error = %e, "response could not be delivered");
                live.run = None;
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                finish(stats, batch, live, result)
            }
        }
    }

    pub(super) async fn fire_timer(
        &mut self,
        batch: &mut Batch,
        timer: TimerRow,
    ) -> Result<(), ProcessorError> {
        match timer.kind {
            TimerKind::Delay => {
                let Ok(delay_id) = DelayId::from_str(&timer.timer_id) else {
                    tracing::warn!(timer = %timer.timer_id, "malformed delay timer dropped");
                    return Ok(());
                };
                let response = Response::DelayFinished {
                    delay_id,
                    outcome: DelayOutcome::Ok,
                };
                self.deliver(batch, &timer.execution_id, response, None, None)
                    .await
            }
            TimerKind::Schedule => self.start_scheduled(batch, &timer.execution_id).await,
            TimerKind::Retry => self.retry_start(batch, timer.execution_id).await,
            // Enforced by `step` before any input of the execution, this one included.
            TimerKind::Deadline => Ok(()),
        }
    }
}
