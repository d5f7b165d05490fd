//! The seam between the partition processor and whatever runs workflow code: a
//! [`WorkflowRunner`] starts (or rebuilds by replay) a run, a [`WorkflowRun`] takes responses.
//! The wasmtime host implements it in the `weir` crate; the simulation's scripted runner
//! implements it for tests. The processor never sees WASM.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{ExecutionResult, Ffqn, HistoryEvent, JoinSetId, Response};
use crate::replay::{DeliveryError, Effects, Execution, ReplayError};

/// Where a run stands after it was started or given a response.
#[derive(Clone, Debug, PartialEq)]
pub enum RunStep {
    /// Blocked on a join set; the instance is parked. Commit `effects`.
    Parked {
        effects: Effects,
        blocked_on: JoinSetId,
    },
    /// Finished (the result is also the last output of `effects`). Commit `effects`.
    Finished {
        result: ExecutionResult,
        effects: Effects,
    },
}

impl RunStep {
    pub fn effects(&self) -> &Effects {
        match self {
            RunStep::Parked { effects, .. } | RunStep::Finished { effects, .. } => effects,
        }
    }

    pub fn into_effects(self) -> Effects {
        match self {
            RunStep::Parked { effects, .. } | RunStep::Finished { effects, .. } => effects,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("execution {execution}: unknown workflow function {function}")]
    UnknownFunction { execution: String, function: String },
    #[error("execution {execution}: {function} is not a workflow")]
    NotAWorkflow { execution: String, function: String },
    #[error("execution {execution}: the history or responses are inconsistent: {source}")]
    Engine {
        execution: String,
        source: ReplayError,
    },
    #[error("execution {execution}: response refused: {source}")]
    Delivery {
        execution: String,
        source: DeliveryError,
    },
    #[error("execution {execution}: the run has finished")]
    Finished { execution: String },
    #[error("execution {execution}: the run stopped unexpectedly: {reason}")]
    Stopped { execution: String, reason: String },
    /// The host had no room for the run (its WASM instance pool was full) and ran none of the
    /// workflow's code: a limit of the host, not a failure of the execution, to retry later.
    #[error("execution {execution}: no room to run it (not its failure; retry later): {reason}")]
    NoCapacity { execution: String, reason: String },
}

/// Why a submission cannot run at all (it is dead-lettered and finished with an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    UnknownFunction(String),
    #[error("{0}")]
    InvalidParams(String),
}

/// A parked run of one execution.
pub trait WorkflowRun: Send {
    /// Delivers a response (in arrival order) and runs until the workflow parks again or
    /// finishes; `now` is the clock for fresh delays and schedules.
    fn deliver(
        &mut self,
        response: Response,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<RunStep, RunError>> + Send;
}

/// Starts runs.
pub trait WorkflowRunner: Send + Sync {
    type Run: WorkflowRun;

    /// Type-checks a submission against the target function.
    fn check_submission(&self, ffqn: &Ffqn, params: &Value) -> Result<(), Rejection>;

    /// Starts (or rebuilds, given its recorded history and journalled responses) a run;
    /// returns once it parks or finishes.
    fn start(
        &self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(Self::Run, RunStep), RunError>> + Send;
}
