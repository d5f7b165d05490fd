//! TODO(doc cancel)

use chrono::{DateTime, Utc};

use crate::model::{
    ChildKind, DelayOutcome, EventOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult,
    Response,
};
use crate::projection::ExecutionView;
use crate::records::{CancelRequest, DlqReason, HistoryEntry};
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;

use super::config::ProcessorError;
use super::effect::{Batch, Effect};
use super::run::{Rules, append, deliver_own, error_result, finish_with, journal_all};
use super::{Live, Processor};

impl<R: WorkflowRunner> Processor<R> {
    /// A request to stop an execution; see the module docs.
    pub(super) async fn cancel(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: CancelRequest,
    ) -> Result<(), ProcessorError> {
        let id = request.execution_id.clone();
        if !self.cache.contains_key(&id) {
            let error = format!("cancellation of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
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
        let Some(live) = cache.get_mut(&id) else {
            return Ok(());
        };
        accessed.insert(id.clone());
        let reason = if request.reason.is_empty() {
            "cancelled".to_owned()
        } else {
            request.reason.clone()
        };
        if live.view.state == ExecutionState::Finished
            || (live.view.cancel_requested.is_some() && !request.terminate)
        {
            tracing::debug!(execution = %id, "cancellation ignored: finished, or cancelled already");
            return Ok(());
        }
        tracing::info!(execution = %id, %reason, terminate = request.terminate, "execution cancelled");
        stats.cancelled += 1;
        let rules = Rules::new(runner, limit);
        if live.view.cancel_requested.is_none() {
            append(
                batch,
                &mut live.view,
                HistoryEntry::CancelRequested {
                    reason: reason.clone(),
                },
            )?;
        }
        let stop = Stop {
            reason: format!("was cancelled: {reason}"),
            terminate: request.terminate,
        };
        let own = cancel_waits(batch, live, &stop);
        if request.terminate || live.view.state == ExecutionState::Scheduled {
            // Nothing waits for the workflow: what it waited for is journalled cancelled,
            // and it finishes now.
            journal_all(batch, live, own)?;
            let why = if request.terminate {
                format!("terminated: {reason}")
            } else {
                format!("cancelled before it started: {reason}")
            };
            return finish_with(
                stats,
                batch,
                live,
                error_result(ExecutionErrorKind::Cancelled, why),
            );
        }
        if live.run.is_none() {
            // Not running now (its start was deferred): the journal has the cancellations for
            // when it starts.
            journal_all(batch, live, own)?;
            return Ok(());
        }
        deliver_own(rules, stats, batch, live, own).await
    }

    /// Before any input of execution `id` is taken: if it has passed its deadline and has not
    /// finished (its deadline timer is due, or an input came first), what it waits for is
    /// cancelled (its child workflows terminated: nobody waits for them any more) and it
    /// finishes `timed-out` without running again; the input then finds it finished. So no
    /// step of an execution runs past its deadline, whichever input comes first.
    pub(super) fn enforce_deadline(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
    ) -> Result<(), ProcessorError> {
        let Some(live) = self.cache.get_mut(id) else {
            return Ok(());
        };
        let Some(deadline) = live.view.created.deadline else {
            return Ok(());
        };
        if live.view.state == ExecutionState::Finished || deadline > batch.now {
            return Ok(());
        }
        self.accessed.insert(id.clone());
        let result = deadline_result(&live.view, batch.now);
        tracing::info!(execution = %id, deadline = %deadline, "deadline passed: the execution timed out");
        self.stats.deadlines_passed += 1;
        let stop = Stop {
            reason: format!("passed its deadline {}", rfc3339(deadline)),
            terminate: true,
        };
        let own = cancel_waits(batch, live, &stop);
        journal_all(batch, live, own)?;
        finish_with(&mut self.stats, batch, live, result)
    }
}

/// The effects and the self-answers that cancel everything `live` waits for: its activities
/// and stubs end `cancelled` (an activity's running attempt is interrupted, a pending retry
/// dropped: [`Effect::CancelActivity`]), its delays and event waits are answered cancelled,
/// and its child workflows are cancelled in turn (they answer when they finish).
fn cancel_waits<Run>(batch: &mut Batch, live: &Live<Run>, stop: &Stop) -> Vec<Response> {
    let reason = &stop.reason;
    let id = &live.view.id;
    let waits = live.view.waiting_for();
    let mut own = Vec::new();
    for (child, ffqn, kind) in waits.children {
        match kind {
            ChildKind::Workflow => batch.effects.push(Effect::CancelExecution(CancelRequest {
                execution_id: child,
                reason: format!("its parent {id} {reason}"),
                terminate: stop.terminate,
                requested_at: batch.now,
            })),
            ChildKind::Activity | ChildKind::Stub | ChildKind::StubWrite => {
                if kind == ChildKind::Activity {
                    batch.effects.push(Effect::CancelActivity {
                        parent: id.clone(),
                        child: child.clone(),
                        ffqn,
                    });
                }
                own.push(Response::ChildExecutionFinished {
                    result: error_result(
                        ExecutionErrorKind::Cancelled,
                        format!("{child} was cancelled: {id} {reason}"),
                    ),
                    child_execution_id: child,
                });
            }
        }
    }
    own.extend(
        waits
            .delays
            .into_iter()
            .map(|delay_id| Response::DelayFinished {
                delay_id,
                outcome: DelayOutcome::Cancelled,
            }),
    );
    own.extend(
        waits
            .events
            .into_iter()
            .map(|event_request_id| Response::EventDelivered {
                event_request_id,
                outcome: EventOutcome::Cancelled,
            }),
    );
    own
}

/// Why an execution stops waiting, as [`cancel_waits`] tells its children: `reason` follows
/// the execution's id ("was cancelled: …", "passed its deadline …"); `terminate` child
/// workflows rather than let them compensate.
struct Stop {
    reason: String,
    terminate: bool,
}

/// The result of an execution that did not finish by its deadline.
fn deadline_result(view: &ExecutionView, now: DateTime<Utc>) -> ExecutionResult {
    let deadline = view.created.deadline.unwrap_or(now);
    error_result(
        ExecutionErrorKind::TimedOut,
        format!(
            "{} did not finish by its deadline {}",
            view.id,
            rfc3339(deadline)
        ),
    )
}

pub(super) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
