//! Replay of a recorded execution against a build of its workflow, without side effects: what
//! `weir replay` runs, so that a deploy can be gated on recorded histories replaying cleanly.
//!
//! The run is the same one a worker makes when it rebuilds an execution
//! ([`WasmHost::start_workflow`] with the recorded events and responses), and the replay
//! engine is what compares the two sides; this module only judges the outcome and throws the
//! run's effects away (nothing is sent anywhere).

use chrono::{DateTime, Utc};

use crate::model::{ExecutionErrorKind, ExecutionResult};
use crate::projection::Rebuilt;
use crate::replay::Execution;
use weir_core::runner::RunStep;

use super::WasmHost;

/// How a recorded execution replays on a build.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every recorded event was made again, in order, and a finished execution finished with
    /// its recorded result. `note` says where a running one stands.
    Clean { note: String },
    /// The build diverges from the recording: the replay engine's message, which names the
    /// history version and both sides.
    Mismatch { reason: String },
    /// The build could not replay it at all (its function is missing, it does not load, …).
    Failed { reason: String },
}

impl Verdict {
    pub fn is_clean(&self) -> bool {
        matches!(self, Verdict::Clean { .. })
    }
}

/// Replays `recorded` on `host` at `now` (what a new delay would be measured from; the run's
/// effects are discarded).
pub async fn verify(host: &WasmHost, recorded: Rebuilt, now: DateTime<Utc>) -> Verdict {
    let view = recorded.view;
    let execution = Execution {
        id: view.id.clone(),
        ffqn: view.created.ffqn.clone(),
        params: view.created.params.clone(),
        created_at: view.created.created_at,
        // On the host's registered build, not the one the execution is pinned to: that is
        // the build under judgement.
        component: None,
        trace: None,
    };
    let recorded_events = recorded.events.len();
    let step = match host
        .start_workflow(execution, recorded.events, recorded.responses, now)
        .await
    {
        Ok((_run, step)) => step,
        Err(e) => {
            return Verdict::Failed {
                reason: e.to_string(),
            };
        }
    };
    judge(view.result.as_ref(), recorded_events, step)
}

/// The verdict of a replay that ended in `step`, for an execution recorded with `recorded`
/// as its result (`None`: still running) and `recorded_events` history events.
pub fn judge(recorded: Option<&ExecutionResult>, recorded_events: usize, step: RunStep) -> Verdict {
    match step {
        RunStep::Finished {
            result: ExecutionResult::ExecutionError(e),
            ..
        } if e.kind == ExecutionErrorKind::NondeterminismDetected => {
            Verdict::Mismatch { reason: e.reason }
        }
        RunStep::Finished { result, effects } => match recorded {
            Some(recorded) if *recorded != result => Verdict::Mismatch {
                reason: format!(
                    "after the {recorded_events} recorded events the replay finished with {result}, \
                     the recording with {recorded}"
                ),
            },
            Some(_) if !effects.events.is_empty() => Verdict::Mismatch {
                reason: format!(
                    "the recording finished after {recorded_events} events; the replay made {} more \
                     before finishing the same way",
                    effects.events.len()
                ),
            },
            Some(_) => Verdict::Clean {
                note: "finished with the recorded result".into(),
            },
            None => Verdict::Clean {
                note: format!(
                    "the recorded {recorded_events} events replay; the build then finishes with \
                     {result}"
                ),
            },
        },
        RunStep::Parked {
            effects,
            blocked_on,
        } => match recorded {
            Some(recorded) => Verdict::Mismatch {
                reason: format!(
                    "the recording finished with {recorded}; the replay waits on join set \
                     {blocked_on} after {} events",
                    recorded_events + effects.events.len()
                ),
            },
            None if effects.events.is_empty() => Verdict::Clean {
                note: format!("running: waits on join set {blocked_on}, as recorded"),
            },
            None => Verdict::Clean {
                note: format!(
                    "running: the recorded {recorded_events} events replay; the build then makes \
                     {} more and waits on join set {blocked_on}",
                    effects.events.len()
                ),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::Version;
    use crate::model::join_set::{JoinSetId, JoinSetKind};
    use crate::model::{ExecutionError, HistoryEvent};
    use crate::replay::{Effects, VersionedEvent};

    fn finished(result: ExecutionResult, extra_events: usize) -> RunStep {
        RunStep::Finished {
            result,
            effects: effects(extra_events),
        }
    }

    fn parked(extra_events: usize) -> RunStep {
        RunStep::Parked {
            effects: effects(extra_events),
            blocked_on: JoinSetId::new(JoinSetKind::Named, "js").expect("name"),
        }
    }

    fn effects(events: usize) -> Effects {
        let event = VersionedEvent {
            version: Version(7),
            event: HistoryEvent::JoinSetCreate {
                join_set_id: JoinSetId::new(JoinSetKind::Named, "x").expect("name"),
            },
        };
        Effects {
            events: vec![event; events],
            outputs: Vec::new(),
        }
    }

    /// Every way a replay can end, against a finished and a running recording.
    #[test]
    fn a_replay_is_judged_by_how_it_ends_and_what_was_recorded() {
        let ok = ExecutionResult::Ok(serde_json::json!(1));
        let other = ExecutionResult::Ok(serde_json::json!(2));
        let diverged = ExecutionResult::ExecutionError(ExecutionError::new(
            ExecutionErrorKind::NondeterminismDetected,
            "at history version 3: recorded X, replayed Y",
        ));
        let trapped = ExecutionResult::ExecutionError(ExecutionError::new(
            ExecutionErrorKind::Trap,
            "unreachable",
        ));
        let clean = |v: &Verdict| v.is_clean();
        let mismatch = |v: &Verdict| matches!(v, Verdict::Mismatch { .. });
        type Check = fn(&Verdict) -> bool;
        let table: Vec<(&str, Option<&ExecutionResult>, RunStep, Check)> = vec![
            ("same result", Some(&ok), finished(ok.clone(), 0), clean),
            (
                "a recorded trap replays as the same trap",
                Some(&trapped),
                finished(trapped.clone(), 0),
                clean,
            ),
            (
                "another result",
                Some(&ok),
                finished(other.clone(), 0),
                mismatch,
            ),
            (
                "same result after more events",
                Some(&ok),
                finished(ok.clone(), 2),
                mismatch,
            ),
            (
                "the engine saw a divergence",
                Some(&ok),
                finished(diverged.clone(), 0),
                mismatch,
            ),
            (
                "a divergence in a running one",
                None,
                finished(diverged.clone(), 0),
                mismatch,
            ),
            (
                "finished recorded, waits on replay",
                Some(&ok),
                parked(0),
                mismatch,
            ),
            ("running, waits as recorded", None, parked(0), clean),
            ("running, the build goes further", None, parked(1), clean),
            (
                "running, the build finishes",
                None,
                finished(ok.clone(), 1),
                clean,
            ),
        ];
        for (case, recorded, step, expected) in table {
            let verdict = judge(recorded, 5, step);
            assert!(expected(&verdict), "{case}: {verdict:?}");
        }
        let Verdict::Mismatch { reason } = judge(Some(&ok), 5, finished(diverged, 0)) else {
            panic!()
        };
        assert!(
            reason.contains("history version 3"),
            "the engine's message: {reason}"
        );
    }
}
