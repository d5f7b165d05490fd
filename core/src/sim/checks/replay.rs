//! Replay (`replay`): a fresh run of the replay engine over an execution's committed history
//! finishes with the result the history recorded and adds no events (the hot and the cold
//! path journalled the same thing); cancelled and timed-out executions are left out.

use crate::model::{ExecutionId, ExecutionResult};
use crate::records::HistoryEntry;
use crate::replay::Execution;
use crate::runner::RunStep;
use crate::sim::invariant::Invariant;
use crate::sim::workflows::{Workflow, run_fresh};
use crate::sim::world::World;

use super::{Logged, past_deadline};

/// A fresh replay of the committed history agrees with it (hot and cold paths
/// recorded the same thing).
/// (A cancelled execution's result is not what its run returned: that is in the
/// error's detail; a timed-out one's run did not return at all.)
pub(super) fn check_replay(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    id: &ExecutionId,
    firsts: &[&Logged<'_>],
    finished: Option<&ExecutionResult>,
) {
    let cancelled = firsts.iter().any(|e| match &e.record.entry {
        HistoryEntry::CancelRequested { .. } => true,
        HistoryEntry::Finished { result, .. } => past_deadline(result),
        _ => false,
    });
    if let (Some(recorded), Some(HistoryEntry::Created(created))) =
        (finished, firsts.first().map(|e| &e.record.entry))
        && !cancelled
        && let Some(workflow) = Workflow::of(&created.ffqn)
    {
        let mut events = Vec::new();
        let mut responses = Vec::new();
        for e in firsts {
            match &e.record.entry {
                HistoryEntry::Event { event, .. } => events.push(event.clone()),
                HistoryEntry::ResponseAppended(r) => responses.push(r.clone()),
                _ => {}
            }
        }
        let execution = Execution {
            id: id.clone(),
            ffqn: created.ffqn.clone(),
            params: created.params.clone(),
            created_at: created.created_at,
            component: created.component.clone(),
            trace: None,
        };
        match run_fresh(&execution, workflow, events, responses, w.now) {
            Ok((RunStep::Finished { result, effects }, _)) => {
                if !effects.events.is_empty() {
                    add(
                        Invariant::Replay,
                        format!(
                            "{id}: replaying the committed history adds {} events",
                            effects.events.len()
                        ),
                    );
                }
                if result != *recorded {
                    add(
                        Invariant::Replay,
                        format!("{id}: replay finishes with {result}, the history with {recorded}"),
                    );
                }
            }
            Ok((RunStep::Parked { blocked_on, .. }, _)) => add(
                Invariant::Replay,
                format!(
                    "{id}: replaying the committed history parks on {blocked_on}, yet it finished with {recorded}"
                ),
            ),
            Err(e) => add(
                Invariant::Replay,
                format!("{id}: replaying the committed history fails: {e}"),
            ),
        }
    }
}
