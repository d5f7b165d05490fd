//! The end of an execution: its last changelog entry, and telling whoever waits (the parent
//! on `weir.responses`, else `weir.results`), the activities it still waited for (cancelled),
//! the concurrency slots, the correlation keys it held and the schedule whose tick started it.

use super::Live;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::effect::Effect;
use crate::correlation::CorrelationAction;
use crate::correlation::CorrelationCommand;
use crate::model::ExecutionError;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionResult;
use crate::model::Ran;
use crate::model::Response;
use crate::records::ExecutionFinished;
use crate::records::HistoryEntry;
use crate::runner::WorkflowRunner;
use crate::schedule;
use crate::schedule::ScheduleAction;
use crate::schedule::ScheduleCommand;

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// Records the end of `live` and tells whoever waits: the parent, or `weir.results`.
    pub(super) fn finish(
        &mut self,
        live: &mut Live<R::Run>,
        result: ExecutionResult,
    ) -> Result<(), ProcessorError> {
        // Once asked to stop, an execution finishes `cancelled`, whatever the run ended with
        // (that is in the detail).
        let result = match (&live.view.cancel_requested, result) {
            (Some(reason), ended) => {
                let detail = match &ended {
                    ExecutionResult::ExecutionError(e)
                        if e.kind == ExecutionErrorKind::Cancelled =>
                    {
                        e.reason.clone()
                    }
                    other => format!("the workflow finished with {other}"),
                };
                ExecutionResult::ExecutionError(
                    ExecutionError::new(
                        ExecutionErrorKind::Cancelled,
                        format!("cancelled: {reason}"),
                    )
                    .with_detail(detail),
                )
            }
            (None, result) => result,
        };
        self.finish_with(live, result)
    }

    /// [`finish`] with `result` as it is.
    pub(super) fn finish_with(
        &mut self,
        live: &mut Live<R::Run>,
        result: ExecutionResult,
    ) -> Result<(), ProcessorError> {
        live.run = None;
        let unclaimed = live.view.buffered_events().len();
        if unclaimed > 0 {
            tracing::info!(execution = %live.view.id, unclaimed, "the execution finished with events no wait took: dropped");
            self.stats.events_unclaimed += unclaimed as u64;
        }
        // What it holds or waits for in concurrency slots is freed by its finish.
        let releases = super::concurrency::releases(&live.view, self.batch.now);
        // The activities it still waits for (its run ended with them outstanding: a trap, a
        // value too large…) are cancelled, as by a cancellation: `Finished` forgets them, and
        // a parked one (`on_exhausted = "pause"`) would stay parked for good, holding a place
        // of its route's partition. After a cancellation or a deadline it waits for none.
        self.cancel_activities(&live.view);
        self.append(
            &mut live.view,
            HistoryEntry::Finished {
                result: result.clone(),
                finished_at: self.batch.at,
            },
        )?;
        self.stats.finished += 1;
        let created = &live.view.created;
        let effect = match &created.parent {
            Some(parent) => Effect::Respond {
                to: parent.execution_id.clone(),
                response: Response::ChildExecutionFinished {
                    child_execution_id: live.view.id.clone(),
                    result,
                    // A child workflow ran from its creation to its finish.
                    ran: Some(Ran {
                        started_at: created.created_at,
                        finished_at: self.batch.at,
                    }),
                },
            },
            None => Effect::PublishResult(ExecutionFinished {
                execution_id: live.view.id.clone(),
                ffqn: created.ffqn.clone(),
                result,
                finished_at: self.batch.at,
                correlation_id: created.correlation_id.clone(),
            }),
        };
        self.batch.effects.push(effect);
        self.batch.effects.extend(releases);
        // The keys it registered take no more events for it.
        for key in &live.view.correlation_keys {
            self.batch
                .effects
                .push(Effect::Correlation(CorrelationCommand {
                    key: key.clone(),
                    execution_id: live.view.id.clone(),
                    action: CorrelationAction::Unregister,
                    sent_at: self.batch.now,
                }));
        }
        // A tick's execution tells its schedule, which may wait for it (overlap `skip`).
        if created.parent.is_none()
            && let Some(name) = created.metadata.get(schedule::METADATA_SCHEDULE)
            && schedule::check_name(name).is_ok()
        {
            self.batch
                .effects
                .push(Effect::ScheduleCommand(ScheduleCommand {
                    name: name.clone(),
                    command_id: format!("run-finished:{}", live.view.id),
                    action: ScheduleAction::RunFinished(live.view.id.clone()),
                    sent_at: self.batch.now,
                }));
        }
        Ok(())
    }
}
