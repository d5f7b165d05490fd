//! Admission: what every input record passes before the rules of its kind read it.
//!
//! - **Oversize** records (more than `max_record_bytes`) and undecodable ones are
//!   dead-lettered. Whoever waits for an oversize one still hears: a child's answer reaches
//!   its parent as a `value-too-large` error of that child; a new top-level submission is
//!   answered `value-too-large`.
//! - **Misrouted** records are dead-lettered (`misrouted`) before anything reads them: a
//!   submission must be keyed by its execution id, a response by the execution it answers,
//!   keyed state (a schedule, a correlation key) by its key, and each must sit on the
//!   partition murmur2 gives its key. Any other record names an execution that another worker
//!   owns, and acting on it would let two workers act on one execution.
//! - **Deadlines** are enforced before any input of an execution is taken
//!   ([`super::cancel`]).

use super::Processor;
use super::config::ProcessorError;
use super::ctx::error_result;
use super::effect::Batch;
use super::effect::Effect;
use super::input::Body;
use super::input::Input;
use super::input::Undecodable;
use super::submit::answer_refused;
use crate::model::ExecutionErrorKind;
use crate::model::ExecutionId;
use crate::model::Response;
use crate::projection;
use crate::projection::ExecutionView;
use crate::records::DlqReason;
use crate::runner::WorkflowRunner;
use crate::state_key::StateKey;
use std::str::FromStr;

impl<R: WorkflowRunner> Processor<R> {
    /// Admits the input record `record` with `body`: the body for the rules of its kind, or
    /// `None` when admission took care of it (dead-lettered, answered).
    pub(super) async fn admit(
        &mut self,
        batch: &mut Batch,
        record: Record<'_>,
        body: Result<Body, Undecodable>,
    ) -> Result<Option<Body>, ProcessorError> {
        let Record {
            index,
            partition,
            key,
            size,
        } = record;
        if size > self.config.max_record_bytes {
            self.oversize(batch, record, body).await?;
            return Ok(None);
        }
        let body = match body {
            Err(e) => {
                self.dead_letter(batch, index, e.reason, e.error);
                return Ok(None);
            }
            Ok(body) => body,
        };
        if let Some(error) = self.misrouted(partition, key, &body) {
            self.dead_letter(batch, index, DlqReason::Misrouted, error);
            return Ok(None);
        }
        // A query changes nothing, a deadline's end included: the execution's deadline timer
        // ends it.
        if let Some(owner) = input_owner(key, &body).filter(|_| !matches!(body, Body::Query(_))) {
            self.enforce_deadline(batch, &owner)?;
        }
        Ok(Some(body))
    }

    /// A record larger than `max_record_bytes`: dead-lettered, and whoever waits for it told
    /// why (see the module docs).
    async fn oversize(
        &mut self,
        batch: &mut Batch,
        record: Record<'_>,
        body: Result<Body, Undecodable>,
    ) -> Result<(), ProcessorError> {
        let Record {
            index,
            partition,
            key,
            size,
        } = record;
        let error = format!(
            "{size} bytes exceed the limit of {}",
            self.config.max_record_bytes
        );
        self.dead_letter(batch, index, DlqReason::Oversize, error.clone());
        match body {
            // A child's answer too large to take (an external service's) still
            // answers its parent, with why: a parent must not wait forever.
            Ok(Body::Response(Response::ChildExecutionFinished {
                child_execution_id, ..
            })) => {
                if let Some(owner) = response_owner(key)
                    && self.wrong_partition(partition, &owner).is_none()
                    && child_execution_id.is_child_of(&owner)
                {
                    let response = Response::ChildExecutionFinished {
                        child_execution_id,
                        ran: None,
                        result: error_result(
                            ExecutionErrorKind::ValueTooLarge,
                            format!("the answer was not taken: {error}"),
                        ),
                    };
                    self.enforce_deadline(batch, &owner)?;
                    self.deliver(batch, &owner, response, None, None).await?;
                }
            }
            // A top-level submission too large to take is answered with why,
            // unless its id is an existing execution's (whose answer comes as it
            // will).
            Ok(Body::Submission(submission)) => {
                let id = &submission.execution_id;
                if submission.parent.is_none()
                    && id.is_top_level()
                    && key == Some(id.to_string().as_str())
                    && self.wrong_partition(partition, id).is_none()
                    && !self.cache.contains_key(id)
                {
                    let reason = format!("the submission was not taken: {error}");
                    let result = error_result(ExecutionErrorKind::ValueTooLarge, reason);
                    answer_refused(batch, &submission, result);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Why a record read on `partition` with `key` does not belong to this partition's
    /// executions, if it does not.
    pub(super) fn misrouted(
        &self,
        partition: i32,
        key: Option<&str>,
        body: &Body,
    ) -> Option<String> {
        // A record about one execution (a submission, an upgrade) is keyed by its id.
        let keyed_by = |what: &str, id: &ExecutionId| {
            let text = id.to_string();
            if key == Some(text.as_str()) {
                return Ok(id.clone());
            }
            let shown = key.map_or_else(|| "no key".to_owned(), |k| format!("key `{k}`"));
            Err(format!(
                "{what} of {text} with {shown}: {what} is keyed by its execution id"
            ))
        };
        let owner = match body {
            Body::Submission(s)
            | Body::UnparsableParams { submission: s, .. }
            | Body::UnparsableFfqn { submission: s, .. } => {
                keyed_by("a submission", &s.execution_id)
            }
            // A key that is not an execution id is dead-lettered by `step`.
            Body::Response(_) | Body::MalformedAnswer { .. } => Ok(response_owner(key)?),
            Body::Upgrade(u) => keyed_by("an upgrade", &u.execution_id),
            Body::Pause(p) => keyed_by("a pause request", &p.execution_id),
            Body::Query(q) => keyed_by("a query", &q.execution_id),
            Body::Reset(r) => keyed_by("a reset request", &r.execution_id),
            Body::ResetStart(r) => keyed_by("a reset's start", &r.submission.execution_id),
            Body::Event(e) => keyed_by("an event", &e.target),
            Body::StubWrite(w) => match w.target.parent() {
                Some(parent) => keyed_by("a stub write", &parent),
                None => Err(format!("a stub write of {}: not a child", w.target)),
            },
            Body::Cancel(c) => keyed_by("a cancellation", &c.execution_id),
            Body::Schedule(c) => {
                let what = format!("a command for schedule `{}`", c.name);
                return self.misrouted_keyed(
                    partition,
                    key,
                    &StateKey::schedule(&c.name).to_string(),
                    &what,
                );
            }
            Body::Batch(c) => {
                let what = format!("a command for batch `{}`", c.id);
                return self.misrouted_keyed(
                    partition,
                    key,
                    &StateKey::Batch(c.id.clone()).to_string(),
                    &what,
                );
            }
            Body::KeyedEvent(e) => {
                let what = format!("an event for correlation key `{}`", e.key);
                return self.misrouted_keyed(partition, key, &e.key, &what);
            }
            Body::Correlation(c) => {
                let what = format!(
                    "a {} of {} for correlation key `{}`",
                    c.action.as_str(),
                    c.execution_id,
                    c.key
                );
                return self.misrouted_keyed(partition, key, &c.key, &what);
            }
            Body::Slot(c) if c.for_slot() => {
                let what = format!(
                    "a command of {} for concurrency slot {}",
                    c.execution_id, c.slot
                );
                return self.misrouted_keyed(partition, key, &c.slot.wire_key(), &what);
            }
            Body::Slot(c) => keyed_by("a concurrency slot's answer", &c.execution_id),
        };
        match owner {
            Ok(owner) => self.wrong_partition(partition, &owner),
            Err(error) => Some(error),
        }
    }

    /// Why `what` (a record about keyed state: a schedule, a correlation key) read on
    /// `partition` with `key` is not this partition's, if it is not: it is keyed
    /// `expected_key`, on that key's partition.
    fn misrouted_keyed(
        &self,
        partition: i32,
        key: Option<&str>,
        expected_key: &str,
        what: &str,
    ) -> Option<String> {
        if key != Some(expected_key) {
            let shown = key.map_or_else(|| "no key".to_owned(), |k| format!("key `{k}`"));
            return Some(format!("{what} with {shown}: it is keyed `{expected_key}`"));
        }
        let expected = self.partition_of_key(expected_key);
        (expected != partition).then(|| {
            format!(
                "{what} on partition {partition}: murmur2 of its key gives partition {expected}"
            )
        })
    }

    /// Why a record for `owner` read on `partition` belongs to another partition, if it does.
    pub(super) fn wrong_partition(&self, partition: i32, owner: &ExecutionId) -> Option<String> {
        let expected = self.partition_of(owner);
        (expected != partition).then(|| {
            format!(
                "a record for {owner} on partition {partition}: murmur2 of its key gives \
                 partition {expected} (the producer does not partition as Kafka's clients do)"
            )
        })
    }

    /// `input` names `id`, whose stored history cannot be read or rebuilt (`reason`): a record
    /// is dead-lettered (nothing is lost: the DLQ keeps it byte for byte, for a replay once
    /// the store is repaired); a due timer stays in the store. The execution cannot go on;
    /// the other executions of the partition do.
    pub fn unreadable(
        &mut self,
        batch: &mut Batch,
        id: &ExecutionId,
        input: &Input,
        reason: String,
    ) {
        self.stats.unreadable += 1;
        tracing::error!(execution = %id, %reason, "the stored history of the execution is unreadable; its input is set aside");
        if let Input::Record { index, .. } = input {
            let error = format!("the stored history of {id} is unreadable: {reason}");
            self.dead_letter(batch, *index, DlqReason::Other, error);
        }
    }

    pub(super) fn dead_letter(
        &mut self,
        batch: &mut Batch,
        input: usize,
        reason: DlqReason,
        error: String,
    ) {
        self.stats.dead_letters += 1;
        batch.effects.push(Effect::DeadLetter {
            input,
            reason,
            error,
        });
    }
}

/// Whether `input` is an answer `view` has journalled already (what `deliver` ignores).
pub(super) fn is_duplicate(view: &ExecutionView, input: &Input) -> bool {
    match input {
        Input::Record {
            body: Ok(Body::Response(response)),
            ..
        } => view
            .responses_seen
            .contains(&projection::response_id(response)),
        _ => false,
    }
}

/// The owner of a response record: its key, which must be an execution id.
pub(super) fn response_owner(key: Option<&str>) -> Option<ExecutionId> {
    key.and_then(|k| ExecutionId::from_str(k).ok())
}

/// The execution an input is for: a submission's own, the key of a response (the execution
/// it answers), an upgrade's, an event's target, a cancellation's.
pub(super) fn input_owner(key: Option<&str>, body: &Body) -> Option<ExecutionId> {
    Some(match body {
        // A schedule is no execution: nothing to rehydrate.
        Body::Schedule(_) | Body::Batch(_) | Body::KeyedEvent(_) | Body::Correlation(_) => {
            return None;
        }
        // A slot's command is for its slot, no execution; a grant is for its execution.
        Body::Slot(c) if c.for_slot() => return None,
        Body::Slot(c) => c.execution_id.clone(),
        Body::Submission(s)
        | Body::UnparsableParams { submission: s, .. }
        | Body::UnparsableFfqn { submission: s, .. } => s.execution_id.clone(),
        Body::Response(_) | Body::MalformedAnswer { .. } => response_owner(key)?,
        Body::Upgrade(u) => u.execution_id.clone(),
        Body::Pause(p) => p.execution_id.clone(),
        Body::Query(q) => q.execution_id.clone(),
        Body::Reset(r) => r.execution_id.clone(),
        Body::ResetStart(r) => r.submission.execution_id.clone(),
        Body::Event(e) => e.target.clone(),
        Body::Cancel(c) => c.execution_id.clone(),
        Body::StubWrite(w) => w.target.parent()?,
    })
}

/// Where an input record was read, and how large it is.
#[derive(Clone, Copy)]
pub(super) struct Record<'k> {
    /// Its place in the batch's inputs (what [`Effect::DeadLetter`] names).
    pub(super) index: usize,
    pub(super) partition: i32,
    pub(super) key: Option<&'k str>,
    pub(super) size: usize,
}
