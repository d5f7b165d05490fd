//! Cancellation and deadlines: an execution stops waiting for what it waits for.
//!
//! - **Cancel** (`CancelRequest`, on `weir.responses` from outside, on `weir.submissions` for
//!   a child): for an unknown execution kept until its submission comes (another topic, so it
//!   may come later) or `EARLY_CANCEL_WAIT` (the submissions' retention) passes, then
//!   dead-lettered (issue 33; the early events' rule, [`super::events`]); for a finished one,
//!   or one cancelled already, nothing — but a kept one back after its wait that finds its
//!   execution finished uncancelled (the submission came after the wait) is dead-lettered. Otherwise `CancelRequested` is appended and
//!   everything the execution waits for is cancelled: activities (with `CancelActivity`) and
//!   stubs answered `cancelled`, delays and event waits answered cancelled, child workflows
//!   sent a `CancelRequest` of their own; the answers are journalled and delivered to the
//!   run, which may compensate. Once cancelled, an execution finishes `cancelled` whatever it returns
//!   ([`StepCtx::finish`]). `terminate` (or a still scheduled execution) finishes at once. A paused
//!   execution is resumed so that it can compensate ([`super::pause`]).
//! - **Deadline**: before any input of an execution is taken, an execution past its deadline
//!   (`Created.deadline`: the earlier of its submission's and its component's default) that
//!   has not finished stops waiting as a terminated one does (activities interrupted and
//!   answered `cancelled`, child workflows terminated, delays and event waits cancelled, all
//!   journalled) and finishes `timed-out`; the input then finds it finished. One submitted
//!   past its deadline never runs. A child workflow's submission carries its parent's
//!   deadline, and an activity request's deadline is never later than its parent's.

use super::Live;
use super::Processor;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::ctx::error_result;
use super::effect::Batch;
use super::effect::Effect;
use crate::model::ChildKind;
use crate::model::DelayOutcome;
use crate::model::EventOutcome;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::model::Ffqn;
use crate::model::Response;
use crate::projection::ExecutionView;
use crate::records::CancelRequest;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;
use chrono::DateTime;
use chrono::Utc;

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// The one rule of an activity its execution stops waiting for — closed in its join set
    /// ([`super::outputs`]), cancelled, terminated, past its deadline, or finished with it
    /// outstanding ([`StepCtx::finish_with`]): [`Effect::CancelActivity`] on its route, keyed
    /// by the activity, which interrupts a running attempt, drops a waiting retry and answers
    /// a parked request (`on_exhausted = "pause"`: nothing else would ever take it off its
    /// partition) `cancelled`.
    pub(super) fn cancel_activity(&mut self, parent: &ExecutionId, child: ExecutionId, ffqn: Ffqn) {
        self.batch.effects.push(Effect::CancelActivity {
            parent: parent.clone(),
            child,
            ffqn,
        });
    }

    /// [`StepCtx::cancel_activity`] for every activity `view` still waits for.
    pub(super) fn cancel_activities(&mut self, view: &ExecutionView) {
        for (child, ffqn, kind) in view.waiting_for().children {
            if kind == ChildKind::Activity {
                self.cancel_activity(&view.id, child, ffqn);
            }
        }
    }

    /// The effects and the self-answers that cancel everything `live` waits for: its activities
    /// and stubs end `cancelled` (an activity's running attempt is interrupted, a pending retry
    /// dropped: [`Effect::CancelActivity`]), its delays and event waits are answered cancelled,
    /// and its child workflows are cancelled in turn (they answer when they finish).
    fn cancel_waits(&mut self, live: &Live<R::Run>, stop: &Stop) -> Vec<Response> {
        let reason = &stop.reason;
        let id = &live.view.id;
        self.cancel_activities(&live.view);
        let waits = live.view.waiting_for();
        let mut own = Vec::new();
        for (child, _, kind) in waits.children {
            match kind {
                ChildKind::Workflow => {
                    self.batch
                        .effects
                        .push(Effect::CancelExecution(CancelRequest {
                            execution_id: child,
                            reason: format!("its parent {id} {reason}"),
                            terminate: stop.terminate,
                            requested_at: self.batch.now,
                            waited_until: None,
                        }))
                }
                ChildKind::Activity | ChildKind::Stub | ChildKind::StubWrite => {
                    own.push(Response::ChildExecutionFinished {
                        ran: None,
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
}

impl<R: WorkflowRunner> Processor<R> {
    /// A cancellation of an execution that does not exist: its submission may still be on its
    /// way (another topic), so it is kept under the execution's id until the submission takes
    /// it or [`EARLY_CANCEL_WAIT`](crate::correlation::EARLY_CANCEL_WAIT) passes, as an early
    /// event is; one whose wait ran out is dead-lettered, unless the submissions were not all
    /// read during the wait (then kept again: the submission may be in the part not read).
    fn cancel_unknown(&mut self, batch: &mut Batch, index: usize, request: CancelRequest) {
        let id = request.execution_id.clone();
        let wait = crate::correlation::EARLY_CANCEL_WAIT;
        let keep = match request.waited_until {
            None => true,
            Some(until) => self.submissions_unread_since(until - wait),
        };
        if keep {
            tracing::debug!(execution = %id, "cancellation kept: the execution does not exist yet");
            self.stats.cancels_early += 1;
            let key = id.to_string();
            let changed = crate::correlation::hold_cancel(
                self.correlations.get(&key),
                request,
                batch.now,
                wait,
            );
            self.put_correlation(batch, &key, changed);
            return;
        }
        let error = format!(
            "cancellation of {id}: the execution does not exist (the cancellation waited for \
             its submission until {})",
            request.waited_until.map(rfc3339).unwrap_or_default()
        );
        self.dead_letter(batch, index, DlqReason::Other, error);
    }

    /// A request to stop an execution; see the module docs.
    pub(super) async fn cancel(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: CancelRequest,
    ) -> Result<(), ProcessorError> {
        let id = request.execution_id.clone();
        let Some((mut ctx, live)) = self.ctx_of(batch, &id) else {
            self.cancel_unknown(batch, index, request);
            return Ok(());
        };
        let reason = if request.reason.is_empty() {
            "cancelled".to_owned()
        } else {
            request.reason.clone()
        };
        if let Some(waited_until) = request.waited_until
            && live.view.state == ExecutionState::Finished
            && live.view.cancel_requested.is_none()
        {
            // A cancellation kept for its submission, back after its wait: the submission
            // came later and the execution finished before this copy was read. It was
            // accepted and never applied, so its sender hears of it.
            let error = format!(
                "cancellation of {id}: it came before the submission and waited for it until \
                 {}; the execution ran after that and finished before it was read again: not \
                 cancelled",
                rfc3339(waited_until)
            );
            tracing::warn!(execution = %id, %error, "a kept cancellation came too late");
            ctx.dead_letter(index, DlqReason::Other, error);
            return Ok(());
        }
        if live.view.state == ExecutionState::Finished
            || (live.view.cancel_requested.is_some() && !request.terminate)
        {
            tracing::debug!(execution = %id, "cancellation ignored: finished, or cancelled already");
            return Ok(());
        }
        tracing::info!(execution = %id, %reason, terminate = request.terminate, "execution cancelled");
        ctx.stats.cancelled += 1;
        if live.view.cancel_requested.is_none() {
            let entry = HistoryEntry::CancelRequested {
                reason: reason.clone(),
            };
            ctx.append(&mut live.view, entry)?;
        }
        let stop = Stop {
            reason: format!("was cancelled: {reason}"),
            terminate: request.terminate,
        };
        let own = ctx.cancel_waits(live, &stop);
        if request.terminate || live.view.waits_for_its_start() {
            // Nothing waits for the workflow: what it waited for is journalled cancelled,
            // and it finishes now.
            ctx.journal_all(live, own)?;
            let why = if request.terminate {
                format!("terminated: {reason}")
            } else {
                format!("cancelled before it started: {reason}")
            };
            return ctx.finish_with(live, error_result(ExecutionErrorKind::Cancelled, why));
        }
        if live.view.state == ExecutionState::Paused {
            // Paused: resumed, so that it can compensate (its run is rebuilt from the store
            // with the cancellations journalled here, as any resumed run is).
            ctx.journal_all(live, own)?;
            let resumed = HistoryEntry::Resumed {
                reason: format!("to handle its cancellation: {reason}"),
            };
            ctx.append(&mut live.view, resumed)?;
            ctx.stats.resumed += 1;
            self.rebuild_resumed(batch, &id);
            return Ok(());
        }
        if live.run.is_none() {
            // Not running now (its start was deferred): the journal has the cancellations for
            // when it starts.
            ctx.journal_all(live, own)?;
            return Ok(());
        }
        ctx.deliver_own(live, own).await
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
        // When what is delivered next happened (`Batch::at`): an inline attempt that ended past
        // the deadline comes too late, though the batch began before it.
        let now = batch.at;
        let passed = |live: &Live<R::Run>| {
            live.view.state != ExecutionState::Finished
                && live.view.created.deadline.is_some_and(|d| d <= now)
        };
        if !self.cache.get(id).is_some_and(passed) {
            return Ok(());
        }
        let Some((mut ctx, live)) = self.ctx_of(batch, id) else {
            return Ok(());
        };
        let deadline = live.view.created.deadline.unwrap_or(now);
        let result = deadline_result(&live.view, now);
        tracing::info!(execution = %id, deadline = %deadline, "deadline passed: the execution timed out");
        ctx.stats.deadlines_passed += 1;
        let stop = Stop {
            reason: format!("passed its deadline {}", rfc3339(deadline)),
            terminate: true,
        };
        let own = ctx.cancel_waits(live, &stop);
        ctx.journal_all(live, own)?;
        ctx.finish_with(live, result)
    }
}

/// Why an execution stops waiting, as [`StepCtx::cancel_waits`] tells its children: `reason` follows
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

/// An instant as the texts of errors and dead letters show it.
pub(super) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
