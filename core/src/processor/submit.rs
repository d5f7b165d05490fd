//! Submissions (`weir.submissions`): a new execution is created, and its run started.
//!
//! A top-level submission (no parent) must have a top-level id (`E_<ulid>`), and a child's
//! id must be a child of its parent; otherwise it is dead-lettered (`conflict`) and, if
//! top-level, answered on `weir.results` with a `conflict` error. A known id with the same
//! function and params is idempotent: nothing is appended, and a top-level execution that
//! has finished publishes its result again (one that has not will publish it when it does).
//! A known id with another function or other params is a conflict: dead-lettered, and
//! (top-level) answered with a `conflict` error naming the existing execution. A function
//! name that does not parse creates nothing: dead-lettered and answered `unknown-function`.
//! Otherwise `Created` is appended; a function that does not exist, params that do not
//! type-check or are not JSON at all dead-letter the record and finish the execution with
//! `unknown-function` / `invalid-params` (so its caller hears); a start time in the future
//! waits for the schedule timer (put by the projection); else the run starts. Events and a
//! cancellation that came before the submission (kept under its id, [`super::events`],
//! [`super::cancel`]) are taken: the events journalled right after `Created`, the
//! cancellation applied once the run has started, as if it had come right after.

use super::Live;
use super::Processor;
use super::config::ProcessorError;
use super::ctx::error_result;
use super::ctx::push_timer_changes;
use super::effect::Batch;
use super::effect::Effect;
use super::reset::Seed;
use super::run::Start;
use crate::concurrency;
use crate::concurrency::{SlotClaim, SlotError};
use crate::correlation;
use crate::correlation::{CorrelationAction, CorrelationCommand};
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionResult;

use crate::model::Response;
use crate::projection::ExecutionView;
use crate::records::CancelRequest;
use crate::records::Created;
use crate::records::DlqReason;
use crate::records::ExecutionFinished;
use crate::records::HistoryEntry;
use crate::records::Submission;
use crate::rows::ExecutionState;
use crate::runner::Rejection;
use crate::runner::WorkflowRunner;
use chrono::DateTime;
use chrono::Utc;

impl<R: WorkflowRunner> Processor<R> {
    /// A submission (`flaw`: a field that did not parse, and why; `sent_at`: its record's
    /// Kafka timestamp); see the module docs.
    pub(super) async fn submit(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: Submission,
        flaw: Option<Flaw>,
        sent_at: Option<DateTime<Utc>>,
    ) -> Result<(), ProcessorError> {
        self.create_and_start(batch, index, submission, flaw, None, sent_at)
            .await
    }

    /// The start of an execution made by a reset ([`super::reset`]): a submission whose
    /// history starts from `seed`'s entries, its run rebuilt from them.
    pub(super) async fn submit_seeded(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: Submission,
        seed: Seed,
        sent_at: Option<DateTime<Utc>>,
    ) -> Result<(), ProcessorError> {
        self.create_and_start(batch, index, submission, None, Some(seed), sent_at)
            .await
    }

    async fn create_and_start(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: Submission,
        flaw: Option<Flaw>,
        seed: Option<Seed>,
        sent_at: Option<DateTime<Utc>>,
    ) -> Result<(), ProcessorError> {
        let id = submission.execution_id.clone();
        if let Some(problem) = id_problem(&submission) {
            self.refuse_submission(batch, index, &submission, problem);
            return Ok(());
        }
        if let Some(live) = self.cache.get(&id) {
            match &seed {
                None => self.resubmitted(batch, index, &submission),
                // Read twice: it made its execution already.
                Some(seed) if live.view.created.reset_of.as_ref() == Some(&seed.reset_of) => {
                    tracing::debug!(execution = %id, "a reset's start read again: ignored");
                }
                Some(seed) => {
                    let problem = format!(
                        "execution {id} exists, not a reset of {} at seq {}; an execution id \
                         can be used once",
                        seed.reset_of.execution_id, seed.reset_of.seq
                    );
                    self.refuse_submission(batch, index, &submission, problem);
                }
            }
            return Ok(());
        }
        let unparsable = match flaw {
            Some(Flaw::Ffqn(error)) => {
                self.refuse_unparsable_ffqn(batch, index, &submission, error);
                return Ok(());
            }
            Some(Flaw::Params(error)) => Some(error),
            None => None,
        };
        let function_limit = self.runner.concurrency_limit(&submission.ffqn);
        let slots = match concurrency::claims(
            &submission.ffqn,
            submission.concurrency.as_ref(),
            function_limit,
        ) {
            Ok(slots) => slots,
            Err(error) => {
                self.refuse_concurrency(batch, index, &submission, error);
                return Ok(());
            }
        };
        let NewExecution {
            mut live,
            held_cancel,
            start,
        } = self.create(batch, &submission, sent_at, seed, slots)?;
        let checked = match unparsable {
            Some(error) => Err(Rejection::InvalidParams(format!(
                "the params of {id} are not a JSON array: {error}"
            ))),
            None => self
                .runner
                .check_submission(&submission.ffqn, &submission.params),
        };
        let mut ctx = self.ctx(batch);
        let deferred = match checked {
            Err(rejection) => {
                let (reason, kind, error) = match rejection {
                    Rejection::UnknownFunction(e) => (
                        DlqReason::UnknownFfqn,
                        ExecutionErrorKind::UnknownFunction,
                        e,
                    ),
                    Rejection::InvalidParams(e) => (
                        DlqReason::InvalidParams,
                        ExecutionErrorKind::InvalidParams,
                        e,
                    ),
                };
                ctx.dead_letter(index, reason, error.clone());
                ctx.finish(&mut live, error_result(kind, error))?;
                None
            }
            // Past its deadline before it could start: it never runs (timed out below).
            Ok(())
                if live
                    .view
                    .created
                    .deadline
                    .is_some_and(|d| d <= ctx.batch.now) =>
            {
                None
            }
            Ok(()) if live.view.state == ExecutionState::Scheduled => None,
            // It waits for its concurrency slots; its last grant starts it.
            Ok(()) if super::concurrency::acquire_next(ctx.batch, &live.view) => None,
            Ok(()) => ctx.start_run(&mut live, start).await?,
        };
        self.accessed.insert(id.clone());
        self.cache.insert(id.clone(), live);
        self.note_start(&id, deferred, batch);
        self.enforce_deadline(batch, &id)?;
        // A cancellation that came before the submission applies now, as if it had come
        // right after it.
        if let Some(cancel) = held_cancel {
            tracing::info!(execution = %id, "a cancellation kept for the submission applies");
            self.cancel(batch, index, cancel).await?;
        }
        Ok(())
    }

    /// A submission of an id that exists: with the same function and params it is
    /// idempotent (a top-level execution that has finished publishes its result again; one
    /// that has not will when it does), with others a conflict.
    fn resubmitted(&mut self, batch: &mut Batch, index: usize, submission: &Submission) {
        let id = &submission.execution_id;
        let Some(live) = self.cache.get(id) else {
            return;
        };
        let created = &live.view.created;
        if created.ffqn != submission.ffqn || created.params != submission.params {
            let problem = format!(
                "execution {id} exists: {} with params {} (this submission: {} with params {}); \
                 an execution id can be used once",
                created.ffqn, created.params, submission.ffqn, submission.params
            );
            self.refuse_submission(batch, index, submission, problem);
            return;
        }
        match (&created.parent, &live.view.result, live.view.finished_at) {
            (None, Some(result), Some(finished_at)) => {
                tracing::debug!(execution = %id, "resubmission of a finished execution: its result is published again");
                batch.effects.push(Effect::PublishResult(ExecutionFinished {
                    execution_id: id.clone(),
                    ffqn: created.ffqn.clone(),
                    result: result.clone(),
                    finished_at,
                    correlation_id: created.correlation_id.clone(),
                }));
            }
            _ => tracing::debug!(execution = %id, "duplicate submission ignored"),
        }
    }

    /// A function name that does not parse names no function: nothing is created. The caller
    /// hears (`unknown-function`), and the record is dead-lettered.
    fn refuse_unparsable_ffqn(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: &Submission,
        error: String,
    ) {
        let id = &submission.execution_id;
        let error = format!("the function name of {id} does not parse: {error}");
        tracing::warn!(execution = %id, %error, "submission refused");
        self.dead_letter(batch, index, DlqReason::UnknownFfqn, error.clone());
        let result = error_result(ExecutionErrorKind::UnknownFunction, error);
        match &submission.parent {
            None => answer_refused(batch, submission, result),
            Some(parent) => batch.effects.push(Effect::Respond {
                to: parent.execution_id.clone(),
                response: Response::child_finished(id.clone(), result),
            }),
        }
    }

    /// Creates the execution of `submission`: `Created` at seq 0 (its deadline the earlier of
    /// the submission's and its component's default), then a reset's copied entries (`seed`),
    /// then the events kept for it before it existed, in the order they came (the run's first
    /// step finds them as any buffered event), and their buffer forgotten; with the
    /// cancellation kept for it, if one came, and how its run starts.
    fn create(
        &mut self,
        batch: &mut Batch,
        submission: &Submission,
        submitted_at: Option<DateTime<Utc>>,
        seed: Option<Seed>,
        slots: Vec<SlotClaim>,
    ) -> Result<NewExecution<R::Run>, ProcessorError> {
        let (reset_of, entries) = match seed {
            Some(seed) => (Some(seed.reset_of), Some(seed.entries)),
            None => (None, None),
        };
        let id = &submission.execution_id;
        let created = Created {
            ffqn: submission.ffqn.clone(),
            params: submission.params.clone(),
            parent: submission.parent.clone(),
            scheduled_at: submission.scheduled_at,
            correlation_id: submission.correlation_id.clone(),
            metadata: submission.metadata.clone(),
            created_at: batch.now,
            submitted_at,
            component: self.runner.component_of(&submission.ffqn),
            deadline: effective_deadline(
                submission.deadline,
                self.runner.default_deadline(&submission.ffqn),
                batch.now,
            ),
            reset_of,
            slots,
        };
        let partition = self.partition_of(id);
        let (view, timers) = ExecutionView::new(id.clone(), partition, created.clone(), batch.now);
        let mut live = Live {
            view,
            run: None,
            pinned_until: 0,
            stepped_at: None,
        };
        batch.effects.push(Effect::Append {
            execution_id: id.clone(),
            seq: 0,
            entry: HistoryEntry::Created(created),
            at: batch.at,
        });
        push_timer_changes(batch, timers);
        batch.touched.insert(id.clone());
        self.stats.created += 1;
        let start = match entries {
            None => Start::Fresh,
            Some(entries) => self.plant(batch, &mut live, entries)?,
        };
        let key = id.to_string();
        let mut held_cancel = None;
        if let Some(state) = self.correlations.get(&key) {
            let (early, changed) = correlation::take_early(state);
            let mut ctx = self.ctx(batch);
            // The buffer holds each event id once (`correlation::receive`).
            for kept in early.events {
                ctx.stats.events_received += 1;
                ctx.append(&mut live.view, HistoryEntry::EventReceived(kept.event))?;
            }
            held_cancel = early.cancel;
            self.put_correlation(batch, &key, changed);
        }
        Ok(NewExecution {
            live,
            held_cancel,
            start,
        })
    }

    /// Appends a reset execution's copied `entries` after its `Created` (the projection
    /// checks them as any entry) and registers the correlation keys they registered: the
    /// start that rebuilds its run from them.
    fn plant(
        &mut self,
        batch: &mut Batch,
        live: &mut Live<R::Run>,
        entries: Vec<HistoryEntry>,
    ) -> Result<Start, ProcessorError> {
        let mut ctx = self.ctx(batch);
        let (mut events, mut responses) = (Vec::new(), Vec::new());
        for entry in entries {
            match &entry {
                HistoryEntry::Event { event, .. } => events.push(event.clone()),
                HistoryEntry::ResponseAppended(response) => responses.push(response.clone()),
                _ => {}
            }
            ctx.append(&mut live.view, entry)?;
        }
        for key in &live.view.correlation_keys {
            ctx.batch
                .effects
                .push(Effect::Correlation(CorrelationCommand {
                    key: key.clone(),
                    execution_id: live.view.id.clone(),
                    action: CorrelationAction::Register,
                    sent_at: ctx.batch.now,
                }));
        }
        Ok(Start::Rebuild(events, responses))
    }

    /// A submission whose concurrency key or limit is refused creates nothing: dead-lettered
    /// (`invalid-params`) and, if top-level, answered with why.
    fn refuse_concurrency(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: &Submission,
        error: SlotError,
    ) {
        let id = &submission.execution_id;
        let error = format!("the submission of {id} is refused: {error}");
        tracing::warn!(execution = %id, %error, "submission refused");
        self.dead_letter(batch, index, DlqReason::InvalidParams, error.clone());
        if submission.parent.is_none() {
            let result = error_result(ExecutionErrorKind::InvalidParams, error);
            answer_refused(batch, submission, result);
        }
    }

    /// Dead-letters a submission that cannot create its execution and, if it is top-level,
    /// answers it on `weir.results` with a `conflict` error (nothing is appended: the id is
    /// another execution's, or not an execution's at all).
    fn refuse_submission(
        &mut self,
        batch: &mut Batch,
        index: usize,
        submission: &Submission,
        problem: String,
    ) {
        tracing::warn!(execution = %submission.execution_id, %problem, "submission refused");
        self.dead_letter(batch, index, DlqReason::Conflict, problem.clone());
        if submission.parent.is_none() {
            let result = error_result(ExecutionErrorKind::Conflict, problem);
            answer_refused(batch, submission, result);
        }
    }
}

/// Why `submission`'s id cannot be its execution's, if it cannot: a top-level submission
/// needs a top-level id (or a client could take a future child's id and strand its parent),
/// a child's id must be a child of the parent it names.
fn id_problem(submission: &Submission) -> Option<String> {
    let id = &submission.execution_id;
    match &submission.parent {
        None if !id.is_top_level() => Some(format!(
            "{id} is a child's id (of {}); a top-level execution id is `E_` and a ULID",
            id.parent()
                .map_or_else(|| "?".to_owned(), |p| p.to_string())
        )),
        Some(parent) if !id.is_child_of(&parent.execution_id) => Some(format!(
            "{id} is not a child of its parent {}",
            parent.execution_id
        )),
        _ => None,
    }
}

/// Answers a top-level submission that created no execution, on `weir.results`, with why.
pub(super) fn answer_refused(batch: &mut Batch, submission: &Submission, result: ExecutionResult) {
    batch.effects.push(Effect::PublishResult(ExecutionFinished {
        execution_id: submission.execution_id.clone(),
        ffqn: submission.ffqn.clone(),
        result,
        finished_at: batch.now,
        correlation_id: submission.correlation_id.clone(),
    }));
}

/// A new execution as [`Processor::create`] leaves it: in memory, with the cancellation kept
/// for it (if one came before it) and how its run starts.
struct NewExecution<Run> {
    live: Live<Run>,
    held_cancel: Option<CancelRequest>,
    start: Start,
}

/// A field of a submission that did not parse, and why.
pub(super) enum Flaw {
    Params(String),
    Ffqn(String),
}

/// The deadline a new execution keeps: the earlier of the one its submission asks for and
/// its component's default counted from `now`.
fn effective_deadline(
    asked: Option<DateTime<Utc>>,
    default: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let default = default
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .and_then(|d| now.checked_add_signed(d));
    earlier(asked, default)
}

/// The earlier of two optional instants.
pub(super) fn earlier(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
