//! TODO(doc stubs)

use serde_json::Value;

use crate::model::{ExecutionResult, Response};
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;

use super::Processor;
use super::config::ProcessorError;
use super::effect::{Batch, Effect};
use super::input::StubWrite;

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
            let response = Response::ChildExecutionFinished {
                child_execution_id: target,
                result,
            };
            self.deliver(batch, owner, response, None, None).await?;
        }
        batch.effects.push(Effect::Respond {
            to: writer,
            response: Response::ChildExecutionFinished {
                child_execution_id: request,
                result: stub_write_answer(outcome),
            },
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
