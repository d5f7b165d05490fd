//! Runs: starting (or rebuilding) an execution's run, and taking what each step of it yields
//! — its events journalled, its outputs turned into effects, the answers it gives itself
//! (cancellations, its own stubs' values, buffered events for its open waits) journalled and
//! delivered. A value too large for any record ends the execution instead of its batch.

use super::Live;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::ctx::error_result;
use super::size::oversized;
use crate::model::EventOutcome;
use crate::model::ExecutionErrorKind;
use crate::model::Response;
use crate::records::HistoryEntry;
use crate::replay::Effects;
use crate::replay::Execution;
use crate::runner::RunError;
use crate::runner::RunStep;
use crate::runner::WorkflowRun;
use crate::runner::WorkflowRunner;

/// How a run starts.
pub(super) enum Start {
    /// A new execution, just created.
    Fresh,
    /// A scheduled execution whose time came.
    Scheduled,
    /// A rebuild from its recorded history and journalled responses.
    Rebuild(Vec<crate::model::HistoryEvent>, Vec<Response>),
}

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// Starts (or rebuilds) the run of `live` and adds what it produced to the self.batch. A run that
    /// cannot start for a reason that passes ([`RunError::is_retryable`]: a full instance pool,
    /// a component a rolling deploy has not brought yet, an incomplete read of the journal) is
    /// not finished: it stays parked, and the error is returned so that the start is tried
    /// again (before, it finished with `trap`). Any other failure finishes it with `trap`.
    pub(super) async fn start_run(
        &mut self,
        live: &mut Live<R::Run>,
        start: Start,
    ) -> Result<Option<RunError>, ProcessorError> {
        debug_assert!(
            live.run.is_none(),
            "{}: a run starts where one is parked",
            live.view.id
        );
        let execution = Execution {
            id: live.view.id.clone(),
            ffqn: live.view.created.ffqn.clone(),
            params: live.view.created.params.clone(),
            created_at: live.view.created.created_at,
            component: live.view.component.clone(),
            trace: Some(crate::trace::TraceParent::of_execution(
                &live.view.id,
                &live.view.created.metadata,
            )),
        };
        let (rebuilding, history, responses) = match start {
            Start::Fresh => (false, Vec::new(), Vec::new()),
            Start::Scheduled => (true, Vec::new(), Vec::new()),
            Start::Rebuild(history, responses) => (true, history, responses),
        };
        match self
            .runner
            .start(execution, history, responses, self.batch.now)
            .await
        {
            Ok((run, step)) => {
                live.run = Some(run);
                self.apply_step(live, step).await?;
                Ok(None)
            }
            Err(e) if e.is_retryable(rebuilding) => Ok(Some(e)),
            Err(e) => {
                tracing::warn!(execution = %live.view.id, error = %e, "execution failed to start");
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                self.finish(live, result)?;
                Ok(None)
            }
        }
    }

    /// Adds a run's events and outputs to the self.batch. A finished run's outputs end with
    /// `Finished`, which closes the changelog and answers the parent or `weir.results`.
    ///
    /// A step with a value larger than `limit` (params of a child or a schedule, a stub's or
    /// the execution's result) is not taken: no record could carry it, and its batch would fail
    /// forever (issue 11 item 7). The execution finishes with `value-too-large` instead, at the
    /// history version the step would have started from.
    pub(super) async fn apply_step(
        &mut self,
        live: &mut Live<R::Run>,
        step: RunStep,
    ) -> Result<(), ProcessorError> {
        let cancellations = self.take_step(live, step)?;
        self.deliver_own(live, cancellations).await
    }

    /// Delivers responses the execution gives itself (`own`: what closing a join set or a
    /// cancellation cancelled, the values it wrote for its own stubs), then every event match,
    /// each journalled then delivered; a step they cause is taken and its own responses delivered
    /// too.
    pub(super) async fn deliver_own(
        &mut self,
        live: &mut Live<R::Run>,
        mut cancellations: Vec<Response>,
    ) -> Result<(), ProcessorError> {
        // What closing a join set cancelled is answered at once, by the execution itself, in
        // the order it was cancelled: journalled, then delivered to the run like any response
        // (a rebuild reads it back in the same place), so that a closing join-next waiting for
        // a workflow child takes it on the way exactly as it would take a late answer.
        //
        // Then every open event wait whose name has a buffered event takes it, the same way (a
        // wait the step opened may find an event that came before it).
        let mut next = 0;
        let mut matching = true;
        while let Some(run) = live.run.as_mut() {
            let response = match cancellations.get(next) {
                Some(response) => {
                    next += 1;
                    response.clone()
                }
                None => match live.view.next_event_match().filter(|_| matching) {
                    Some((request, event)) => Response::EventDelivered {
                        event_request_id: request.clone(),
                        outcome: EventOutcome::Received {
                            event_id: event.event_id.clone(),
                            payload: event.payload.clone(),
                        },
                    },
                    None => break,
                },
            };
            match run.deliver(response.clone(), self.batch.now).await {
                Ok(step) => {
                    self.append(&mut live.view, HistoryEntry::ResponseAppended(response))?;
                    cancellations.extend(self.take_step(live, step)?);
                }
                // The run refused its own cancellation: nothing is journalled, and the late
                // answer of the request (if any) will be taken or refused as it comes.
                Err(RunError::Delivery { source, .. }) => {
                    tracing::error!(execution = %live.view.id, error = %source, response = %response, "a run refused a response of its own");
                    // The match would be made again and again: the events stay buffered.
                    matching = false;
                }
                Err(e) => {
                    tracing::warn!(execution = %live.view.id, error = %e, "the run failed on a cancellation");
                    live.run = None;
                    self.append(&mut live.view, HistoryEntry::ResponseAppended(response))?;
                    // What it cancelled that the run did not see is journalled too: every
                    // cancelled request has its answer in the history.
                    let rest = cancellations.split_off(next.min(cancellations.len()));
                    self.journal_all(live, rest)?;
                    let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                    return self.finish(live, result);
                }
            }
        }
        Ok(())
    }

    /// Adds one step's events and outputs to the batch; returns the responses cancelling what
    /// the step cancelled, to deliver to the run while it is parked (a finished run's are
    /// journalled before its `Finished`, here).
    fn take_step(
        &mut self,
        live: &mut Live<R::Run>,
        step: RunStep,
    ) -> Result<Vec<Response>, ProcessorError> {
        let finished = matches!(step, RunStep::Finished { .. });
        if finished {
            live.run = None;
        }
        let Effects { events, outputs } = step.into_effects();
        if let Some(problem) = outputs.iter().find_map(|o| oversized(o, self.value_limit)) {
            tracing::warn!(execution = %live.view.id, %problem, "a value too large for a record: the execution ends");
            self.finish(
                live,
                error_result(ExecutionErrorKind::ValueTooLarge, problem),
            )?;
            return Ok(Vec::new());
        }
        for versioned in events {
            self.append(
                &mut live.view,
                HistoryEntry::Event {
                    version: versioned.version,
                    event: versioned.event,
                },
            )?;
        }
        let mut cancellations = Vec::new();
        for output in outputs {
            if let Some(response) = self.output_effect(live, output)? {
                if finished {
                    self.append(&mut live.view, HistoryEntry::ResponseAppended(response))?;
                } else {
                    cancellations.push(response);
                }
            }
        }
        Ok(cancellations)
    }
}
