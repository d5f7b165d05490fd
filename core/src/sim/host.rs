//! The host the simulated workers run workflows on: the scripted [`SimRunner`], and, with
//! [`Faults::deferrals`](super::Faults::deferrals), starts it cannot make now.
//!
//! A real host refuses a start for reasons that pass — its instance pool is full
//! (`NoCapacity`), the execution's build is not deployed here yet (`VersionUnavailable`) —
//! and the processor parks the execution with a deferred start ([`crate::processor`]'s
//! `starts`), retried by a timer and at its next input. [`SimHost`] refuses a quarter of the
//! starts and rebuilds, chosen by a hash of the seed, the execution and the instant: the
//! same run replays the same refusals, and a start tried again later is decided afresh, so
//! every execution starts in the end.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{ExecutionResult, Ffqn, HistoryEvent, Response};
use crate::replay::Execution;
use crate::runner::{Rejection, RunError, RunStep, WorkflowRunner};

use super::workflows::{SimRun, SimRunner};

/// The simulated workers' [`WorkflowRunner`]: [`SimRunner`], refusing some starts when
/// `deferrals` is on.
#[derive(Debug, Clone, Copy)]
pub struct SimHost {
    deferrals: bool,
    /// Mixed into each decision, so that seeds refuse different starts.
    salt: u64,
}

impl SimHost {
    pub fn new(deferrals: bool, seed: u64) -> Self {
        SimHost {
            deferrals,
            salt: seed,
        }
    }

    /// Why the start of `execution` at `now` is refused, if it is.
    fn refusal(&self, execution: &Execution, now: DateTime<Utc>) -> Option<RunError> {
        if !self.deferrals {
            return None;
        }
        let h = fnv1a(&[
            &self.salt.to_le_bytes(),
            execution.id.to_string().as_bytes(),
            &now.timestamp_millis().to_le_bytes(),
        ]);
        if !h.is_multiple_of(4) {
            return None;
        }
        let id = execution.id.to_string();
        Some(if (h >> 8).is_multiple_of(2) {
            RunError::NoCapacity {
                execution: id,
                reason: "the simulated instance pool is full".to_owned(),
            }
        } else {
            RunError::VersionUnavailable {
                execution: id,
                component: execution
                    .component
                    .clone()
                    .unwrap_or_else(|| "sim".to_owned()),
                reason: "the simulated rolling deploy has not brought it yet".to_owned(),
            }
        })
    }
}

/// FNV-1a over `parts`, then mixed (splitmix64's finaliser): stable across builds and
/// platforms (a replayed seed decides alike). Without the mix the low bits the decision
/// reads depend only on the low bits of each byte, so a start retried a whole number of
/// seconds later (1 s, 2 s, 4 s…: the retry delays) was decided alike every time, and an
/// execution refused once was refused for ever (a partition "stuck" in the simulation only).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            h ^= u64::from(*byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl WorkflowRunner for SimHost {
    type Run = SimRun;

    fn check_submission(&self, ffqn: &Ffqn, params: &Value) -> Result<(), Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn check_answer(&self, ffqn: &Ffqn, result: &ExecutionResult) -> Result<(), String> {
        SimRunner.check_answer(ffqn, result)
    }

    fn start(
        &self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(SimRun, RunStep), RunError>> + Send {
        let refused = self.refusal(&execution, now);
        let started = SimRunner.start(execution, history, responses, now);
        async move {
            match refused {
                Some(error) => Err(error),
                None => started.await,
            }
        }
    }
}
