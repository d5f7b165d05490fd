//! Deadlines (`deadline`): an execution with a deadline is answered timed out exactly when it
//! ends at or after it, one without is never timed out by one, and a child's deadline is no
//! later than its parent's.

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::HistoryEntry;
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::{Logged, past_deadline};

/// Deadlines: an execution times out at its deadline, not before, and nothing else
/// ends it at or after it; a child never has a later deadline than its parent.
pub(super) fn check_deadline(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    id: &ExecutionId,
    firsts: &[&Logged<'_>],
) {
    if let Some(HistoryEntry::Created(created)) = firsts.first().map(|e| &e.record.entry) {
        let ended = firsts.iter().find_map(|e| match &e.record.entry {
            HistoryEntry::Finished {
                result,
                finished_at,
            } => Some((result, *finished_at)),
            _ => None,
        });
        match (created.deadline, ended) {
            (Some(deadline), Some((result, at))) if past_deadline(result) != (at >= deadline) => {
                add(
                    Invariant::Deadline,
                    format!(
                        "{id}: finished at +{}ms with {result}; its deadline is +{}ms",
                        (at - w.start).num_milliseconds(),
                        (deadline - w.start).num_milliseconds()
                    ),
                )
            }
            (None, Some((result, _))) if past_deadline(result) => add(
                Invariant::Deadline,
                format!("{id}: timed out by a deadline it does not have: {result}"),
            ),
            _ => {}
        }
        let parent_deadline = created.parent.as_ref().and_then(|p| {
            match logs.get(&p.execution_id)?.first().map(|e| &e.record.entry) {
                Some(HistoryEntry::Created(c)) => c.deadline,
                _ => None,
            }
        });
        if let Some(parent) = parent_deadline
            && created.deadline.is_none_or(|d| d > parent)
        {
            add(
                Invariant::Deadline,
                format!(
                    "{id}: deadline {:?}, later than its parent's {parent}",
                    created.deadline
                ),
            );
        }
    }
}
