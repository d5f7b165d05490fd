//! Reset (`weir reset`; issue 35 item 2; the design: `docs/design/reset.md`): a new execution
//! started from an execution's history up to a chosen point.
//!
//! A [`ResetRequest`] on `weir.responses`, keyed by the execution reset, is taken by its
//! owner, which reads the execution's history from the store ([`Processor::reads`]: once the
//! store holds every batch that touched it) and cuts it by the one rule,
//! [`crate::reset::cut`]. Then, in one batch:
//! - `Reset { new_execution_id, to_seq }` is appended to the old history (the link to the
//!   new one; allowed after `Finished` too: resetting a finished execution that went wrong
//!   is what a reset is most for);
//! - a [`ResetStart`] goes to the new execution's owner on `weir.submissions`: its function
//!   and params, the link back ([`ResetOf`]) and the kept entries, with its ids;
//! - the old execution is cancelled or terminated if the request asked ([`super::cancel`]'s
//!   rules, after the `Reset` entry), or goes on as it was.
//!
//! The new execution's owner creates it ([`super::submit`]): `Created` with `reset_of`,
//! the copied entries, then its run rebuilt from them on the newest build of the function
//! (a replay that must match what was recorded up to the cut) and going on from there.
//! The correlation keys the copied history registered are registered for it.
//!
//! Exactly once: the request names the new execution's id, so a request sent twice finds
//! its id among the old execution's resets and changes nothing; a [`ResetStart`] read twice
//! finds its execution created. A request taken by a batch that had already changed the
//! execution cannot read that batch's entries from the store: it is sent back to the
//! execution (same key, a later offset), in the batch's transaction, and taken again later.
//!
//! Bad input changes nothing and is dead-lettered with why: an execution that does not
//! exist (`other`), a point the history cannot be cut at, a child execution, a new id that
//! is not a fresh top-level id, a cut too large for one record (`refused`).

use super::Processor;
use super::config::ProcessorError;
use super::effect::{Batch, Effect};
use super::size::json_size;
use crate::records::{
    CancelRequest, DlqReason, HistoryEntry, HistoryRecord, ResetOf, ResetPoint, ResetRequest,
    ResetStart, ResetThen, Submission,
};
use crate::reset::{ResetError, cut, points};
use crate::rows::ExecutionState;
use crate::runner::WorkflowRunner;
use chrono::{DateTime, Utc};

/// A history as the store gives it: its records with when each was recorded.
pub(super) type Stored = Vec<(HistoryRecord, DateTime<Utc>)>;

impl<R: WorkflowRunner> Processor<R> {
    /// Takes a reset request (see the module docs); `stored` is the execution's history read
    /// for it (`None`: not read, because this batch changed the execution).
    pub(super) async fn reset(
        &mut self,
        batch: &mut Batch,
        index: usize,
        request: ResetRequest,
    ) -> Result<(), ProcessorError> {
        let id = request.execution_id.clone();
        let stored = self
            .provided
            .take()
            .filter(|(read, _)| *read == id)
            .map(|(_, stored)| stored.unwrap_or_default());
        let Some((mut ctx, live)) = self.ctx_of(batch, &id) else {
            let error = format!("reset of {id}: the execution does not exist");
            self.dead_letter(batch, index, DlqReason::Other, error);
            return Ok(());
        };
        let new = request.new_execution_id.clone();
        if live.view.resets.contains(&new) {
            tracing::debug!(execution = %id, %new, "reset ignored: done already");
            return Ok(());
        }
        if let ResetPoint::Seq(to_seq) = request.to
            && to_seq >= live.view.next_seq
        {
            let error = ResetError::OutsideHistory {
                execution: id.clone(),
                to_seq,
                last: live.view.next_seq - 1,
            };
            ctx.dead_letter(index, DlqReason::Refused, error.to_string());
            return Ok(());
        }
        let Some(stored) = stored else {
            tracing::debug!(execution = %id, "reset sent back: this batch changed the execution");
            ctx.batch.effects.push(Effect::ResendReset(request));
            return Ok(());
        };
        let to_seq = match request.to {
            ResetPoint::Seq(seq) => Some(seq),
            ResetPoint::Latest => points(&id, &stored).last().copied(),
        };
        let (to_seq, entries) = match to_seq
            .ok_or_else(|| ResetError::NoPoint(id.clone()))
            .and_then(|to_seq| cut(&id, &stored, to_seq, &new).map(|e| (to_seq, e)))
        {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(execution = %id, %error, "reset refused");
                ctx.dead_letter(index, DlqReason::Refused, error.to_string());
                return Ok(());
            }
        };
        let created = &live.view.created;
        let submission = Submission {
            execution_id: new.clone(),
            ffqn: created.ffqn.clone(),
            params: created.params.clone(),
            parent: None,
            scheduled_at: None,
            // Whoever waits for the old one's result by its correlation id does not get a
            // second result: the new one is found by its link.
            correlation_id: None,
            metadata: created.metadata.clone(),
            deadline: None,
            // The same place in line for the same key; the function's limit is its own.
            concurrency: created.concurrency_key(),
            // Not kept in the history: the new one takes the shared lane.
            tenant: None,
        };
        let size = json_size(&submission.params) + entries.iter().map(entry_size).sum::<usize>();
        if size > ctx.value_limit {
            let error = format!(
                "reset of {id} to seq {} refused: the kept history is {size} bytes of JSON; \
                 a record carries at most {}",
                to_seq, ctx.value_limit
            );
            ctx.dead_letter(index, DlqReason::Refused, error);
            return Ok(());
        }
        let reason = if request.reason.is_empty() {
            "reset".to_owned()
        } else {
            request.reason.clone()
        };
        tracing::info!(execution = %id, %new, to_seq, %reason, "execution reset");
        ctx.append(
            &mut live.view,
            HistoryEntry::Reset {
                new_execution_id: new.clone(),
                to_seq,
                reason: reason.clone(),
            },
        )?;
        ctx.stats.resets += 1;
        let finished = live.view.state == ExecutionState::Finished;
        ctx.batch.effects.push(Effect::StartReset(ResetStart {
            submission,
            reset_of: ResetOf {
                execution_id: id.clone(),
                seq: to_seq,
            },
            entries,
        }));
        let terminate = match request.then {
            ResetThen::Keep => return Ok(()),
            _ if finished => return Ok(()),
            ResetThen::Cancel => false,
            ResetThen::Terminate => true,
        };
        let cancel = CancelRequest {
            execution_id: id,
            reason: format!("reset to {new}: {reason}"),
            terminate,
            requested_at: request.requested_at,
            waited_until: None,
        };
        self.cancel(batch, index, cancel).await
    }
}

/// A bound of what `entry` adds to a record: the JSON of its values, and room for its ids.
fn entry_size(entry: &HistoryEntry) -> usize {
    const IDS: usize = 256;
    IDS + match entry {
        HistoryEntry::Event { event, .. } => serde_json::to_string(event).map_or(0, |s| s.len()),
        HistoryEntry::ResponseAppended(response) => {
            serde_json::to_string(response).map_or(0, |s| s.len())
        }
        HistoryEntry::EventReceived(event) => json_size(&event.payload) + event.name.len(),
        _ => 0,
    }
}

/// The start of a reset execution as the submission rule takes it: the link back and the
/// entries that follow `Created`.
pub(super) struct Seed {
    pub(super) reset_of: ResetOf,
    pub(super) entries: Vec<HistoryEntry>,
}

impl Seed {
    pub(super) fn of(start: ResetStart) -> (Submission, Seed) {
        (
            start.submission,
            Seed {
                reset_of: start.reset_of,
                entries: start.entries,
            },
        )
    }
}
