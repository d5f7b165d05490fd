//! The trace context each record carries ([`crate::trace`]): that of the execution it is
//! written for.

use super::Processor;
use super::effect::Effect;
use crate::model::ExecutionId;
use crate::runner::WorkflowRunner;
use std::collections::BTreeMap;

impl<R: WorkflowRunner> Processor<R> {
    /// The trace context of the activity `child` of `parent`: the parent's trace, the
    /// activity's own span.
    pub fn activity_trace(
        &self,
        parent: &ExecutionId,
        child: &ExecutionId,
    ) -> crate::trace::TraceParent {
        crate::trace::TraceParent::for_activity(parent, self.metadata_of(parent), child)
    }

    /// The `Created` metadata of a cached execution (none for one not cached: its trace is
    /// then the one derived from its id).
    fn metadata_of(&self, id: &ExecutionId) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.view(id).map_or(&NONE, |view| &view.created.metadata)
    }

    /// The trace context the record of `effect` carries ([`crate::trace`]): that of the
    /// execution it is written for, with that execution's span (an activity's own, for its
    /// request and its cancellation). `None` for effects that are no record of an execution.
    pub fn trace_of(&self, effect: &Effect) -> Option<crate::trace::TraceParent> {
        use crate::trace::TraceParent;
        let metadata = |id: &ExecutionId| self.metadata_of(id);
        let activity =
            |parent: &ExecutionId, child: &ExecutionId| self.activity_trace(parent, child);
        Some(match effect {
            Effect::Append { execution_id, .. } => {
                TraceParent::for_execution(execution_id, metadata(execution_id))
            }
            Effect::Submit(submission) => {
                TraceParent::for_execution(&submission.execution_id, &submission.metadata)
            }
            Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
                activity(&request.parent_execution_id, &request.execution_id)
            }
            Effect::CancelActivity { parent, child, .. }
            | Effect::RetryParkedActivity { parent, child, .. } => activity(parent, child),
            Effect::Respond { to, response } => {
                let from = match response {
                    crate::model::Response::ChildExecutionFinished {
                        child_execution_id, ..
                    } if self.view(child_execution_id).is_some() => child_execution_id,
                    _ => to,
                };
                TraceParent::for_execution(from, metadata(from))
            }
            Effect::PublishResult(finished) => {
                TraceParent::for_execution(&finished.execution_id, metadata(&finished.execution_id))
            }
            // In the trace of the parent that was cancelled.
            Effect::CancelExecution(request) => {
                let parent = request
                    .execution_id
                    .parent()
                    .unwrap_or_else(|| request.execution_id.clone());
                TraceParent::for_execution(&parent, metadata(&parent))
            }
            // In the trace of the execution reset (the new one inherits its metadata).
            Effect::StartReset(start) => TraceParent::for_execution(
                &start.submission.execution_id,
                &start.submission.metadata,
            ),
            Effect::ResendReset(request) => {
                TraceParent::for_execution(&request.execution_id, metadata(&request.execution_id))
            }
            // In the trace of the execution it acts on (derived from its id: another
            // partition's).
            Effect::BatchRequest(request) => {
                let id = request.execution_id();
                TraceParent::for_execution(id, metadata(id))
            }
            Effect::AnswerQuery(answer) => {
                TraceParent::for_execution(&answer.execution_id, metadata(&answer.execution_id))
            }
            // In the trace of the execution it reaches (known only on its partition).
            Effect::ForwardEvent(event) => {
                TraceParent::for_execution(&event.target, metadata(&event.target))
            }
            Effect::PutTimer(_)
            | Effect::DeleteTimer(_)
            | Effect::DeadLetter { .. }
            | Effect::DeadLetterState(_)
            | Effect::PutSchedule { .. }
            | Effect::ScheduleCommand(_)
            | Effect::Correlation(_)
            | Effect::PutCorrelation { .. }
            | Effect::PutRemembered { .. }
            | Effect::Slot(_)
            | Effect::PutSlot { .. }
            | Effect::PutBatch(_)
            | Effect::PutBatchOutcomes { .. }
            | Effect::ReturnEvent(_) => {
                return None;
            }
            // In the trace of the workflow that writes.
            Effect::WriteStub(write) => {
                let writer = write
                    .request
                    .parent()
                    .unwrap_or_else(|| write.request.clone());
                TraceParent::for_execution(&writer, metadata(&writer))
            }
        })
    }
}
