//! Stubs: values written for an execution's stub children, from outside (a record on
//! `weir.responses`: `weir stub`, any client) or by another workflow (a `stub-write` request),
//! with Obelisk's rules: the value the stub holds again is nothing new (ignored; a writer is
//! answered `ok`); another value is a conflict (the stub keeps its value, even after the
//! execution finished); one that does not fit the stub function's result type is refused
//! (nothing is journalled, so a fitting value can still be written), as is one for an
//! execution that finished without it; a write through another
//! function, or of a child that is no stub, is `not-found`. A workflow's write of its own stub
//! is taken in the batch of its call ([`super::outputs`]).

use super::Live;
use super::Processor;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::effect::Batch;
use super::effect::Effect;
use super::input::StubWrite;
use crate::model::ExecutionResult;
use crate::model::Response;
use crate::records::DlqReason;
use crate::rows::ExecutionState;

use crate::runner::WorkflowRunner;
use serde_json::Value;

impl<R: WorkflowRunner> Processor<R> {
    /// A workflow writes the value of a stub child of an execution of this partition, with
    /// the rules of a value written from outside (Obelisk's); the writer is answered `ok`,
    /// `conflict` or `not-found` (a record it sent itself, so nothing is dead-lettered).
    pub(super) async fn write_stub(
        &mut self,
        batch: &mut Batch,
        write: StubWrite,
    ) -> Result<(), ProcessorError> {
        let StubWrite {
            request,
            target,
            ffqn,
            result,
        } = write;
        let Some(writer) = request.parent() else {
            return Ok(());
        };
        let owner = target.parent();
        let outcome = match owner.as_ref().and_then(|o| self.cache.get(o)) {
            None => StubWriteOutcome::NotFound,
            // A write names the stub's function: through another it is not this stub, held
            // value or not (before the value, and after, the same answer).
            Some(live) if live.view.stub_function(&target) != Some(&ffqn) => {
                StubWriteOutcome::NotFound
            }
            Some(live) => match live.view.stub_child(&target) {
                None => StubWriteOutcome::NotFound,
                Some(Some(held)) if *held == result => StubWriteOutcome::Ok,
                Some(Some(_)) => StubWriteOutcome::Conflict,
                Some(None) => {
                    let fits = live.view.pending_child(&target) == Some(&ffqn)
                        && live.view.state != ExecutionState::Finished
                        && self.runner.check_answer(&ffqn, &result).is_ok();
                    if fits {
                        StubWriteOutcome::Ok
                    } else {
                        StubWriteOutcome::NotFound
                    }
                }
            },
        };
        tracing::info!(execution = %writer, stub = %target, ?outcome, "stub of another execution written");
        if let (StubWriteOutcome::Ok, Some(owner)) = (outcome, &owner)
            && self
                .view(owner)
                .is_some_and(|v| v.stub_child(&target) == Some(None))
        {
            let response = Response::child_finished(target, result);
            self.deliver(batch, owner, response, None, None).await?;
        }
        batch.effects.push(Effect::Respond {
            to: writer,
            response: Response::child_finished(request, stub_write_answer(outcome)),
        });
        Ok(())
    }
}

/// What a write of another execution's stub found (its answer to the writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubWriteOutcome {
    /// Written now, or the stub held this value already.
    Ok,
    /// The stub holds another value.
    Conflict,
    /// No execution made such a stub request (of this function), or it no longer waits.
    NotFound,
}

/// The answer of a [`ChildKind::StubWrite`] request: `ok(null)`, `err("conflict")`,
/// `err("not-found")`.
pub fn stub_write_answer(outcome: StubWriteOutcome) -> ExecutionResult {
    match outcome {
        StubWriteOutcome::Ok => ExecutionResult::Ok(Value::Null),
        StubWriteOutcome::Conflict => ExecutionResult::Err(Value::from("conflict")),
        StubWriteOutcome::NotFound => ExecutionResult::Err(Value::from("not-found")),
    }
}

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// Whether the record `index` carrying `response` is a stub's value that is not to be
    /// journalled: the value the stub holds already (ignored), another one (dead-lettered
    /// `conflict`), one for an execution that finished without it or one that does not fit
    /// the stub's result type (dead-lettered `refused`). `false` for any other response, and for a fitting first value.
    pub(super) fn stub_value_refused(
        &mut self,
        live: &Live<R::Run>,
        index: usize,
        response: &Response,
    ) -> bool {
        let Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ..
        } = response
        else {
            return false;
        };
        let Some(written) = live.view.stub_child(child_execution_id) else {
            return false;
        };
        let owner = &live.view.id;
        let refusal = match written {
            Some(written) if written == result => {
                tracing::debug!(execution = %owner, stub = %child_execution_id, "the stub holds this value already");
                return true;
            }
            Some(written) => Some((
                DlqReason::Conflict,
                format!("stub {child_execution_id} holds {written}: {result} is not written"),
            )),
            // Finished with the stub still waiting (a run that trapped): nothing will take
            // the value, and its writer must learn so (the API answered it 202).
            None if live.view.state == ExecutionState::Finished => Some((
                DlqReason::Refused,
                format!(
                    "stub {child_execution_id} takes no value: {owner} finished before one was \
                     written"
                ),
            )),
            None => live
                .view
                .pending_child(child_execution_id)
                .and_then(|ffqn| Some((ffqn, self.runner.check_answer(ffqn, result).err()?)))
                .map(|(ffqn, why)| {
                    (
                        DlqReason::Refused,
                        format!(
                            "the value for stub {child_execution_id} does not fit the result \
                             type of {ffqn}: {why}"
                        ),
                    )
                }),
        };
        let Some((reason, error)) = refusal else {
            return false;
        };
        tracing::warn!(execution = %owner, %error, "a stub value refused");
        self.dead_letter(index, reason, error);
        true
    }
}
