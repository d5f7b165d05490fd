//! TODO(doc run)

use crate::correlation::{CorrelationAction, CorrelationCommand};
use crate::model::{EventOutcome, ExecutionError, ExecutionErrorKind, ExecutionResult, Response};
use crate::projection::{ExecutionView, TimerChange};
use crate::records::{ExecutionFinished, HistoryEntry};
use crate::replay::{Effects, Execution};
use crate::runner::WorkflowRun;
use crate::runner::{RunError, RunStep, WorkflowRunner};
use crate::schedule;
use crate::schedule::{ScheduleAction, ScheduleCommand};

use super::Live;
use super::config::{ProcessorError, ProcessorStats};
use super::effect::{Batch, Effect};
use super::outputs::output_effect;
use super::size::oversized;

pub(super) fn error_result(kind: ExecutionErrorKind, reason: String) -> ExecutionResult {
    ExecutionResult::ExecutionError(ExecutionError {
        kind,
        reason,
        detail: None,
    })
}

pub(super) fn push_timer_changes(batch: &mut Batch, changes: Vec<TimerChange>) {
    batch
        .effects
        .extend(changes.into_iter().map(|change| match change {
            TimerChange::Put(timer) => Effect::PutTimer(timer),
            TimerChange::Delete(key) => Effect::DeleteTimer(key),
        }));
}

/// Appends the next changelog entry of `view`: through the projection, then as an effect.
pub(super) fn append(
    batch: &mut Batch,
    view: &mut ExecutionView,
    entry: HistoryEntry,
) -> Result<(), ProcessorError> {
    let seq = view.next_seq;
    let timers = view.apply(seq, &entry, batch.now)?;
    batch.effects.push(Effect::Append {
        execution_id: view.id.clone(),
        seq,
        entry,
    });
    push_timer_changes(batch, timers);
    batch.touched.insert(view.id.clone());
    Ok(())
}

/// What the rules of a run's step need from the processor: its runner (for the terms of
/// activity requests) and the largest value a record may carry.
pub(super) struct Rules<'a, R> {
    pub(super) runner: &'a R,
    pub(super) value_limit: usize,
}

impl<R> Clone for Rules<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Rules<'_, R> {}

impl<'a, R> Rules<'a, R> {
    pub(super) fn new(runner: &'a R, value_limit: usize) -> Self {
        Rules {
            runner,
            value_limit,
        }
    }
}

/// How a run starts.
pub(super) enum Start {
    /// A new execution, just created.
    Fresh,
    /// A scheduled execution whose time came.
    Scheduled,
    /// A rebuild from its recorded history and journalled responses.
    Rebuild(Vec<crate::model::HistoryEvent>, Vec<Response>),
}

/// Starts (or rebuilds) the run of `live` and adds what it produced to the batch. A run that
/// cannot start for a reason that passes ([`RunError::is_retryable`]: a full instance pool,
/// a component a rolling deploy has not brought yet, an incomplete read of the journal) is
/// not finished: it stays parked, and the error is returned so that the start is tried
/// again (before, it finished with `trap`). Any other failure finishes it with `trap`.
pub(super) async fn start_run<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    start: Start,
) -> Result<Option<RunError>, ProcessorError> {
    let execution = Execution {
        id: live.view.id.clone(),
        ffqn: live.view.created.ffqn.clone(),
        params: live.view.created.params.clone(),
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
    match rules
        .runner
        .start(execution, history, responses, batch.now)
        .await
    {
        Ok((run, step)) => {
            live.run = Some(run);
            apply_step(rules, stats, batch, live, step).await?;
            Ok(None)
        }
        Err(e) if e.is_retryable(rebuilding) => Ok(Some(e)),
        Err(e) => {
            tracing::warn!(execution = %live.view.id, error = %e, "execution failed to start");
            let result = error_result(ExecutionErrorKind::Trap, e.to_string());
            finish(stats, batch, live, result)?;
            Ok(None)
        }
    }
}

/// Adds a run's events and outputs to the batch. A finished run's outputs end with
/// `Finished`, which closes the changelog and answers the parent or `weir.results`.
///
/// A step with a value larger than `limit` (params of a child or a schedule, a stub's or
/// the execution's result) is not taken: no record could carry it, and its batch would fail
/// forever (issue 11 item 7). The execution finishes with `value-too-large` instead, at the
/// history version the step would have started from.
pub(super) async fn apply_step<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    step: RunStep,
) -> Result<(), ProcessorError> {
    let cancellations = take_step(rules, stats, batch, live, step)?;
    deliver_own(rules, stats, batch, live, cancellations).await
}

/// Delivers responses the execution gives itself (`own`: what closing a join set or a
/// cancellation cancelled, the values it wrote for its own stubs), then every event match,
/// each journalled then delivered; a step they cause is taken and its own responses delivered
/// too.
pub(super) async fn deliver_own<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
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
        match run.deliver(response.clone(), batch.now).await {
            Ok(step) => {
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
                cancellations.extend(take_step(rules, stats, batch, live, step)?);
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
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
                // What it cancelled that the run did not see is journalled too: every
                // cancelled request has its answer in the history.
                let rest = cancellations.split_off(next.min(cancellations.len()));
                journal_all(batch, live, rest)?;
                let result = error_result(ExecutionErrorKind::Trap, e.to_string());
                return finish(stats, batch, live, result);
            }
        }
    }
    Ok(())
}

/// Adds one step's events and outputs to the batch; returns the responses cancelling what
/// the step cancelled, to deliver to the run while it is parked (a finished run's are
/// journalled before its `Finished`, here).
fn take_step<R: WorkflowRunner>(
    rules: Rules<'_, R>,
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<R::Run>,
    step: RunStep,
) -> Result<Vec<Response>, ProcessorError> {
    let finished = matches!(step, RunStep::Finished { .. });
    if finished {
        live.run = None;
    }
    let Effects { events, outputs } = step.into_effects();
    if let Some(problem) = outputs.iter().find_map(|o| oversized(o, rules.value_limit)) {
        tracing::warn!(execution = %live.view.id, %problem, "a value too large for a record: the execution ends");
        finish(
            stats,
            batch,
            live,
            error_result(ExecutionErrorKind::ValueTooLarge, problem),
        )?;
        return Ok(Vec::new());
    }
    for versioned in events {
        append(
            batch,
            &mut live.view,
            HistoryEntry::Event {
                version: versioned.version,
                event: versioned.event,
            },
        )?;
    }
    let mut cancellations = Vec::new();
    for output in outputs {
        if let Some(response) = output_effect(rules, stats, batch, live, output)? {
            if finished {
                append(
                    batch,
                    &mut live.view,
                    HistoryEntry::ResponseAppended(response),
                )?;
            } else {
                cancellations.push(response);
            }
        }
    }
    Ok(cancellations)
}

/// Journals `responses` as they are, without a run to deliver them to.
pub(super) fn journal_all<Run>(
    batch: &mut Batch,
    live: &mut Live<Run>,
    responses: Vec<Response>,
) -> Result<(), ProcessorError> {
    for response in responses {
        append(
            batch,
            &mut live.view,
            HistoryEntry::ResponseAppended(response),
        )?;
    }
    Ok(())
}

/// Records the end of `live` and tells whoever waits: the parent, or `weir.results`.
pub(super) fn finish<Run>(
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<Run>,
    result: ExecutionResult,
) -> Result<(), ProcessorError> {
    // Once asked to stop, an execution finishes `cancelled`, whatever the run ended with
    // (that is in the detail).
    let result = match (&live.view.cancel_requested, result) {
        (Some(reason), ended) => {
            let detail = match &ended {
                ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Cancelled => {
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
    finish_with(stats, batch, live, result)
}

/// [`finish`] with `result` as it is.
pub(super) fn finish_with<Run>(
    stats: &mut ProcessorStats,
    batch: &mut Batch,
    live: &mut Live<Run>,
    result: ExecutionResult,
) -> Result<(), ProcessorError> {
    live.run = None;
    let unclaimed = live.view.buffered_events().len();
    if unclaimed > 0 {
        tracing::info!(execution = %live.view.id, unclaimed, "the execution finished with events no wait took: dropped");
        stats.events_unclaimed += unclaimed as u64;
    }
    append(
        batch,
        &mut live.view,
        HistoryEntry::Finished {
            result: result.clone(),
            finished_at: batch.now,
        },
    )?;
    stats.finished += 1;
    let created = &live.view.created;
    let effect = match &created.parent {
        Some(parent) => Effect::Respond {
            to: parent.execution_id.clone(),
            response: Response::ChildExecutionFinished {
                child_execution_id: live.view.id.clone(),
                result,
            },
        },
        None => Effect::PublishResult(ExecutionFinished {
            execution_id: live.view.id.clone(),
            ffqn: created.ffqn.clone(),
            result,
            finished_at: batch.now,
            correlation_id: created.correlation_id.clone(),
        }),
    };
    batch.effects.push(effect);
    // The keys it registered take no more events for it.
    for key in &live.view.correlation_keys {
        batch.effects.push(Effect::Correlation(CorrelationCommand {
            key: key.clone(),
            execution_id: live.view.id.clone(),
            action: CorrelationAction::Unregister,
            sent_at: batch.now,
        }));
    }
    // A tick's execution tells its schedule, which may wait for it (overlap `skip`).
    if created.parent.is_none()
        && let Some(name) = created.metadata.get(schedule::METADATA_SCHEDULE)
        && schedule::check_name(name).is_ok()
    {
        batch.effects.push(Effect::ScheduleCommand(ScheduleCommand {
            name: name.clone(),
            command_id: format!("run-finished:{}", live.view.id),
            action: ScheduleAction::RunFinished(live.view.id.clone()),
            sent_at: batch.now,
        }));
    }
    Ok(())
}
