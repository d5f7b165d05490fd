//! Closing join sets (explicitly, or all of them when the function returns) and finishing.
//!
//! Closing a join set cancels its unawaited activities, stubs and delays and awaits its child
//! workflows: it records a closing `JoinNext` per response it takes, until every workflow child
//! has answered (responses of cancelled requests that arrive first are taken on the way).
//! Cancellations are outputs without events of their own; they are emitted only when closing
//! starts fresh (at the end of the recorded history). Outputs are committed with the events
//! that follow them, so a closing that starts while replaying was already emitted by the run
//! that recorded those events.

use crate::model::{ExecutionError, ExecutionResult, JoinSetId};

use super::engine::{PendingCall, Replay};
use super::error::{Expected, Mismatch, ReplayError, UsageError};
use super::join_sets::Request;
use super::outcome::{Output, Progress};

impl Replay {
    /// Closes `js`: cancels its unawaited activities and delays, awaits its child workflows.
    /// Afterwards the join set accepts no calls.
    pub fn close(&mut self, js: &JoinSetId) -> Result<Progress<()>, ReplayError> {
        let resumed = self.resume_pending(
            |p| matches!(p, PendingCall::Close { join_set_id } if join_set_id == js),
            || format!("close of {js}"),
        )?;
        let slot = match resumed {
            Some(slot) => slot,
            None => self.join_sets.usable(js)?,
        };
        self.close_slot(slot, || PendingCall::Close {
            join_set_id: js.clone(),
        })
    }

    /// The function returned `result`. Closes every join set with unawaited requests, newest
    /// first; may block awaiting child workflows (retry `finish` with the same result). Then
    /// checks that the whole history was replayed, and emits [`Output::Finished`].
    pub fn finish(
        &mut self,
        result: ExecutionResult,
    ) -> Result<Progress<ExecutionResult>, ReplayError> {
        self.resume_pending(
            |p| matches!(p, PendingCall::Finish { result: r } if *r == result),
            || format!("finish with {result}"),
        )?;
        for slot in (0..self.join_sets.len()).rev() {
            let state = self.join_sets.get(slot);
            if state.closed {
                continue;
            }
            if !state.closing && state.unawaited() == 0 {
                self.join_sets.get_mut(slot).closed = true;
                continue;
            }
            let progress = self.close_slot(slot, || PendingCall::Finish {
                result: result.clone(),
            })?;
            if let Progress::Blocked(blocked) = progress {
                return Ok(Progress::Blocked(blocked));
            }
        }
        if self.is_replaying() {
            return Err(self.nondeterminism(Mismatch::UnprocessedHistory, Expected::Finish));
        }
        self.pending = None;
        self.finished = Some(result.clone());
        self.outputs.push(Output::Finished {
            result: result.clone(),
        });
        Ok(Progress::Ready(result))
    }

    /// Ends the execution abnormally (trap, out of fuel, timeout, …) without awaiting anything:
    /// activities and delays without a response are cancelled, child workflows are left to
    /// finish on their own. Allowed while blocked. Returns the result emitted as
    /// [`Output::Finished`].
    pub fn fail(&mut self, error: ExecutionError) -> Result<ExecutionResult, ReplayError> {
        if self.finished.is_some() {
            return Err(UsageError::Finished.into());
        }
        let result = ExecutionResult::ExecutionError(error);
        self.terminate(result.clone());
        Ok(result)
    }

    fn close_slot(
        &mut self,
        slot: usize,
        pending: impl Fn() -> PendingCall,
    ) -> Result<Progress<()>, ReplayError> {
        if !self.join_sets.get(slot).closing {
            self.join_sets.get_mut(slot).closing = true;
            if self.is_fresh() {
                // Whether a response has arrived decides what is cancelled.
                self.join_sets.flush();
                self.emit_cancellations(slot);
            }
        }
        loop {
            let state = self.join_sets.get(slot);
            if state.unconsumed_workflows == 0 {
                self.join_sets.get_mut(slot).closed = true;
                self.pending = None;
                return Ok(Progress::Ready(()));
            }
            if !state.closing_wait {
                let js = state.id.clone();
                self.record_join_next(&js, true, None)?;
                self.join_sets.get_mut(slot).closing_wait = true;
            }
            match self.consume_or_block(slot, &pending)? {
                Progress::Ready(_) => self.join_sets.get_mut(slot).closing_wait = false,
                Progress::Blocked(blocked) => return Ok(Progress::Blocked(blocked)),
            }
        }
    }

    fn emit_cancellations(&mut self, slot: usize) {
        let state = self.join_sets.get(slot);
        let id = &self.execution.id;
        for (index, request) in state.cancellable() {
            self.outputs.push(match request {
                Request::Child { ffqn, kind, .. } => Output::CancelChild {
                    child_execution_id: id.child(&state.id, index),
                    ffqn: ffqn.clone(),
                    kind: *kind,
                },
                Request::Delay { .. } => Output::CancelDelay {
                    delay_id: id.delay(&state.id, index),
                },
                Request::Event { .. } => Output::CancelEvent {
                    event_request_id: id.event_request(&state.id, index),
                },
            });
        }
    }
}
