//! TODO(doc admit)

use super::Processor;
use super::effect::Batch;
use super::effect::Effect;
use super::input::Body;
use super::input::Input;
use crate::model::ExecutionId;
use crate::projection;
use crate::projection::ExecutionView;
use crate::records::DlqReason;
use crate::runner::WorkflowRunner;
use crate::schedule;
use std::str::FromStr;

impl<R: WorkflowRunner> Processor<R> {
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
            Body::Event(e) => keyed_by("an event", &e.target),
            Body::StubWrite(w) => match w.target.parent() {
                Some(parent) => keyed_by("a stub write", &parent),
                None => Err(format!("a stub write of {}: not a child", w.target)),
            },
            Body::Cancel(c) => keyed_by("a cancellation", &c.execution_id),
            Body::Schedule(c) => {
                let what = format!("a command for schedule `{}`", c.name);
                return self.misrouted_keyed(partition, key, &schedule::key(&c.name), &what);
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
        Body::Schedule(_) | Body::KeyedEvent(_) | Body::Correlation(_) => return None,
        Body::Submission(s)
        | Body::UnparsableParams { submission: s, .. }
        | Body::UnparsableFfqn { submission: s, .. } => s.execution_id.clone(),
        Body::Response(_) | Body::MalformedAnswer { .. } => response_owner(key)?,
        Body::Upgrade(u) => u.execution_id.clone(),
        Body::Event(e) => e.target.clone(),
        Body::Cancel(c) => c.execution_id.clone(),
        Body::StubWrite(w) => w.target.parent()?,
    })
}
