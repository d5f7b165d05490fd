//! What a run's outputs become: child submissions, activity requests (with the terms of the
//! function's declaration, and a deadline never later than the parent's), stub writes,
//! correlation registrations, scheduled executions, and the answers an execution gives itself
//! (what closing a join set cancels, the values it writes for its own stubs).
//!
//! Closing a join set cancels its unawaited activities and delays: the execution answers each
//! itself (`cancelled`, `DelayFinished{cancelled}`), journalled and delivered to the run in
//! that order, and an activity's `CancelActivity` names its function. An unanswered event
//! wait is answered `EventDelivered{cancelled}`.

use super::Live;
use super::config::ProcessorError;
use super::ctx::StepCtx;
use super::ctx::error_result;
use super::effect::Effect;
use super::input::StubWrite;
use super::stubs::StubWriteOutcome;
use super::stubs::stub_write_answer;
use super::submit::earlier;
use crate::correlation::CorrelationAction;
use crate::correlation::CorrelationCommand;
use crate::model::ChildKind;
use crate::model::DelayOutcome;
use crate::model::EventOutcome;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionId;
use crate::model::ExecutionResult;
use crate::model::Ffqn;
use crate::model::Response;
use crate::records::ActivityRequest;
use crate::records::ParentRef;
use crate::records::Submission;
use crate::replay::Output;
use crate::runner::RequestTerms;
use crate::runner::WorkflowRunner;
use chrono::DateTime;
use chrono::Utc;
use serde_json::Value;
use std::collections::BTreeMap;

impl<R: WorkflowRunner> StepCtx<'_, R> {
    /// The effect of one output; a cancellation, or a stub value the workflow writes for its own
    /// stub child, returns the response that answers it (the execution answers itself).
    pub(super) fn output_effect(
        &mut self,
        live: &mut Live<R::Run>,
        output: Output,
    ) -> Result<Option<Response>, ProcessorError> {
        let id = live.view.id.clone();
        match output {
            Output::SubmitChild {
                child_execution_id,
                ffqn,
                params,
                kind,
            } => {
                let terms = match kind {
                    ChildKind::Activity => self.runner.request_terms(&ffqn),
                    _ => RequestTerms::default(),
                };
                let child = Child {
                    id: child_execution_id,
                    ffqn,
                    params,
                    kind,
                };
                let parent = Parent {
                    id: &id,
                    deadline: live.view.created.deadline,
                    trace: crate::trace::inherited(&id, &live.view.created.metadata),
                };
                if let Some(effect) = child_effect(parent, child, terms, self.batch.now) {
                    self.batch.effects.push(effect);
                }
            }
            // The projection puts the timer of the delay's `DelayRequest` event.
            Output::RequestDelay { .. } => {}
            Output::Correlate { key } => {
                self.batch
                    .effects
                    .push(Effect::Correlation(CorrelationCommand {
                        key,
                        execution_id: id,
                        action: CorrelationAction::Register,
                        sent_at: self.batch.now,
                    }))
            }
            Output::Schedule {
                execution_id,
                ffqn,
                params,
                at,
            } => self.batch.effects.push(Effect::Submit(Submission {
                execution_id,
                ffqn,
                params,
                parent: None,
                scheduled_at: Some(at),
                correlation_id: None,
                // A scheduled execution is its own top-level execution, in its scheduler's trace,
                // not bound by its scheduler's deadline.
                metadata: crate::trace::inherited(&id, &live.view.created.metadata),
                deadline: None,
                concurrency: None,
                tenant: None,
            })),
            // The stub's value answers this very execution at once, in the batch of the call that
            // wrote it: journalled, then delivered to the run like a cancellation's answer. The
            // call answered `ok` because the stub held nothing; taken now, it is the value the
            // stub holds, and a value from outside read later is a conflict. (Sent through
            // `weir.responses`, as it was, an outside value read in between won, and the
            // workflow had been told `ok` for the value that lost.)
            Output::StubWrite {
                execution_id,
                result,
            } => {
                return Ok(Some(Response::child_finished(execution_id, result)));
            }
            // An unawaited activity or stub of a closed join set ends `cancelled`, and a delay
            // `DelayFinished` with outcome `cancelled` (its timer is deleted by the projection):
            // the execution's history says what it cancelled, and a late answer is a duplicate.
            Output::CancelChild {
                child_execution_id,
                ffqn,
                kind,
            } => {
                if kind == ChildKind::Activity {
                    self.cancel_activity(&id, child_execution_id.clone(), ffqn);
                }
                let reason = format!(
                    "{child_execution_id} was cancelled: its join set was closed before it answered"
                );
                return Ok(Some(Response::child_finished(
                    child_execution_id,
                    error_result(ExecutionErrorKind::Cancelled, reason),
                )));
            }
            Output::CancelDelay { delay_id } => {
                return Ok(Some(Response::DelayFinished {
                    delay_id,
                    outcome: DelayOutcome::Cancelled,
                }));
            }
            Output::CancelEvent { event_request_id } => {
                return Ok(Some(Response::EventDelivered {
                    event_request_id,
                    outcome: EventOutcome::Cancelled,
                }));
            }
            Output::Finished { result } => self.finish(live, result)?,
        }
        Ok(None)
    }
}

/// A child a run submitted.
struct Child {
    id: ExecutionId,
    ffqn: Ffqn,
    params: Value,
    kind: ChildKind,
}

/// The execution a child is submitted by, as its child's record carries it.
struct Parent<'a> {
    id: &'a ExecutionId,
    /// The parent's deadline: no child gets a later one.
    deadline: Option<DateTime<Utc>>,
    /// The trace keys a child workflow inherits ([`crate::trace::inherited`]).
    trace: BTreeMap<String, String>,
}

/// The record a child becomes: a submission of a workflow (with its parent's deadline, its
/// metadata the trace keys it inherits), an activity request with the `terms` of its
/// declaration (its deadline counted from `now`, never later than the parent's), nothing
/// for a stub.
fn child_effect(
    Parent {
        id: parent,
        deadline: parent_deadline,
        trace,
    }: Parent<'_>,
    child: Child,
    terms: RequestTerms,
    now: DateTime<Utc>,
) -> Option<Effect> {
    let Child {
        id: child,
        ffqn,
        params,
        kind,
    } = child;
    match kind {
        ChildKind::Workflow => {
            let join_set_id = child.join_set_id()?.clone();
            Some(Effect::Submit(Submission {
                execution_id: child,
                ffqn,
                params,
                parent: Some(ParentRef {
                    execution_id: parent.clone(),
                    join_set_id,
                    child_kind: kind,
                }),
                scheduled_at: None,
                correlation_id: None,
                metadata: trace,
                deadline: parent_deadline,
                concurrency: None,
                tenant: None,
            }))
        }
        ChildKind::Activity => Some(Effect::RequestActivity(ActivityRequest {
            execution_id: child,
            parent_execution_id: parent.clone(),
            ffqn,
            params,
            attempt: 1,
            timeout_millis: terms
                .attempt_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            deadline: earlier(
                terms
                    .deadline_after
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .and_then(|d| now.checked_add_signed(d)),
                parent_deadline,
            ),
        })),
        // Never executed: the workflow writes its result with `<f>-stub`.
        ChildKind::Stub => None,
        // The stub's owner writes it and answers; a target that is nobody's child (or params
        // this host did not make) is answered `not-found` at once.
        ChildKind::StubWrite => {
            let target = params
                .get(0)
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<ExecutionId>().ok())
                .filter(|t| t.parent().is_some());
            let result = params
                .get(1)
                .and_then(|v| serde_json::from_value::<ExecutionResult>(v.clone()).ok());
            match (target, result) {
                (Some(target), Some(result)) => Some(Effect::WriteStub(StubWrite {
                    request: child,
                    target,
                    ffqn,
                    result,
                })),
                _ => Some(Effect::Respond {
                    to: parent.clone(),
                    response: Response::child_finished(
                        child,
                        stub_write_answer(StubWriteOutcome::NotFound),
                    ),
                }),
            }
        }
    }
}
