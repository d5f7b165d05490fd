//! Pausing and resuming an execution from outside (`weir pause`, `weir resume`,
//! `POST /v1/executions/{id}/pause|resume`): what a client checks in the store before it sends
//! a [`PauseRequest`], and the request itself. The rules that decide live with the partition
//! owner (`weir_core::processor`'s `pause` module, `docs/design/pause.md`); the store may be a
//! moment behind it, so these checks only spare a request that is sure to change nothing.

use crate::codec::{PauseAction, PauseRequest};
use crate::model::ExecutionId;
use crate::store::{ExecutionRow, ExecutionState};

/// Why a pause or resume is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PauseRefusal {
    #[error(
        "no execution {0} in the store (an execution submitted an instant ago is not in the \
         store yet: try again)"
    )]
    NotFound(ExecutionId),
    #[error("{id} has finished: it cannot be {done}")]
    Finished { id: ExecutionId, done: &'static str },
}

/// What to do about a request, given the execution's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseStep {
    /// Send it.
    Send,
    /// The execution is where the request would take it already (paused, or not paused):
    /// nothing to send.
    AlreadyThere,
}

/// The verb's past participle, as messages say it.
pub fn done(action: PauseAction) -> &'static str {
    match action {
        PauseAction::Pause => "paused",
        PauseAction::Resume => "resumed",
    }
}

/// Whether `action` is worth sending for `id`, whose stored row is `row`.
pub fn check(
    id: &ExecutionId,
    row: Option<&ExecutionRow>,
    action: PauseAction,
) -> Result<PauseStep, PauseRefusal> {
    let Some(row) = row else {
        return Err(PauseRefusal::NotFound(id.clone()));
    };
    match (row.state, action) {
        (ExecutionState::Finished, _) => Err(PauseRefusal::Finished {
            id: id.clone(),
            done: done(action),
        }),
        (ExecutionState::Paused, PauseAction::Pause) => Ok(PauseStep::AlreadyThere),
        (
            ExecutionState::Running | ExecutionState::Scheduled | ExecutionState::Queued,
            PauseAction::Resume,
        ) => Ok(PauseStep::AlreadyThere),
        _ => Ok(PauseStep::Send),
    }
}

/// Whether `row` shows `action` taken (a paused execution after a pause; one not paused, or
/// finished, after a resume).
pub fn taken(row: &ExecutionRow, action: PauseAction) -> bool {
    match action {
        PauseAction::Pause => row.state == ExecutionState::Paused,
        PauseAction::Resume => row.state != ExecutionState::Paused,
    }
}

/// The request, sent now.
pub fn request(id: &ExecutionId, action: PauseAction, reason: String) -> PauseRequest {
    PauseRequest {
        execution_id: id.clone(),
        action,
        reason,
        requested_at: chrono::Utc::now(),
        parked: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: ExecutionState) -> ExecutionRow {
        let now = chrono::Utc::now();
        ExecutionRow {
            execution_id: ExecutionId::top_level(ulid::Ulid::new()),
            ffqn: "a:b/c.d".into(),
            parent_id: None,
            params: "[]".into(),
            state,
            result: None,
            history_version: 1,
            kafka_partition: 0,
            created_at: now,
            updated_at: now,
            finished_at: None,
        }
    }

    #[test]
    fn an_unknown_or_finished_execution_is_refused() {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        assert_eq!(
            check(&id, None, PauseAction::Pause),
            Err(PauseRefusal::NotFound(id.clone()))
        );
        let finished = row(ExecutionState::Finished);
        for action in [PauseAction::Pause, PauseAction::Resume] {
            let refusal = check(&id, Some(&finished), action).expect_err("refused");
            assert!(refusal.to_string().contains("has finished"), "{refusal}");
        }
    }

    #[test]
    fn a_request_that_changes_nothing_is_not_sent() {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        let cases = [
            (ExecutionState::Running, PauseAction::Pause, PauseStep::Send),
            (
                ExecutionState::Scheduled,
                PauseAction::Pause,
                PauseStep::Send,
            ),
            (ExecutionState::Paused, PauseAction::Resume, PauseStep::Send),
            (
                ExecutionState::Paused,
                PauseAction::Pause,
                PauseStep::AlreadyThere,
            ),
            (
                ExecutionState::Running,
                PauseAction::Resume,
                PauseStep::AlreadyThere,
            ),
        ];
        for (state, action, step) in cases {
            assert_eq!(
                check(&id, Some(&row(state)), action),
                Ok(step),
                "{state} {action:?}"
            );
        }
        assert!(taken(&row(ExecutionState::Paused), PauseAction::Pause));
        assert!(!taken(&row(ExecutionState::Paused), PauseAction::Resume));
        assert!(taken(&row(ExecutionState::Finished), PauseAction::Resume));
    }
}
