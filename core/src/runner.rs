//! The seam between the partition processor and whatever runs workflow code: a
//! [`WorkflowRunner`] starts (or rebuilds by replay) a run, a [`WorkflowRun`] takes responses.
//! The wasmtime host implements it in the `weir` crate; the simulation's scripted runner
//! implements it for tests. The processor never sees WASM.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{ExecutionResult, Ffqn, HistoryEvent, JoinSetId, Response};
use crate::query::QueryError;
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
    /// The build the execution is pinned to is not loadable here (not in the store, or it
    /// no longer links against the registry): not the execution's failure; it is parked and
    /// tried again until the build is deployed (`weir deploy`).
    #[error(
        "execution {execution}: its component {component} is not available: {reason} (parked \
         until it is deployed again with `weir deploy`)"
    )]
    VersionUnavailable {
        execution: String,
        component: String,
        reason: String,
    },
    /// The host had no room for the run (its WASM instance pool was full) and ran none of the
    /// workflow's code: a limit of the host, not a failure of the execution, to retry later.
    #[error("execution {execution}: no room to run it (not its failure; retry later): {reason}")]
    NoCapacity { execution: String, reason: String },
}

impl RunError {
    /// Whether a run that failed to start with this error should be tried again later, not
    /// finished: the fault is the host's or the store's, not the execution's. `rebuilding`:
    /// the execution existed before (a rebuild from its history, or the start of a scheduled
    /// one), so a function that cannot be found is one a rolling deploy has not brought yet.
    pub fn is_retryable(&self, rebuilding: bool) -> bool {
        match self {
            RunError::NoCapacity { .. } | RunError::VersionUnavailable { .. } => true,
            // The journal of responses was read incompletely: read it again.
            RunError::Engine {
                source: ReplayError::MissingResponse { .. },
                ..
            } => true,
            RunError::UnknownFunction { .. } | RunError::NotAWorkflow { .. } => rebuilding,
            _ => false,
        }
    }
}

/// Why a submission cannot run at all (it is dead-lettered and finished with an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    UnknownFunction(String),
    #[error("{0}")]
    InvalidParams(String),
}

/// What the requests for an activity carry, from its declaration (`components.toml`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTerms {
    /// The bound of one attempt: the request's `timeout_millis`.
    pub attempt_timeout: Option<std::time::Duration>,
    /// How long the whole activity may take from its request: the request's `deadline` is
    /// the request's time plus this (an external service's answer after it loses to
    /// `timed-out`).
    pub deadline_after: Option<std::time::Duration>,
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

    /// Runs the query function `name` of the execution's component with `params` (a JSON
    /// array) against the values this parked run has set ([`crate::query`]): in an instance
    /// of its own, which may call nothing that is recorded. The run is not changed and nothing
    /// is recorded.
    fn query(
        &self,
        name: &str,
        params: &Value,
    ) -> impl Future<Output = Result<Value, QueryError>> + Send;

    /// An estimate of the memory the parked run holds (its instance's memory, its copy of
    /// the history): its weight in the processor's byte-bounded cache.
    fn resident_bytes(&self) -> usize;
}

/// Starts runs.
pub trait WorkflowRunner: Send + Sync {
    type Run: WorkflowRun;

    /// Type-checks a submission against the target function.
    fn check_submission(&self, ffqn: &Ffqn, params: &Value) -> Result<(), Rejection>;

    /// The content digest of the build new executions of workflow `ffqn` are pinned to (the
    /// newest registered); `None` pins nothing.
    fn component_of(&self, _ffqn: &Ffqn) -> Option<String> {
        None
    }

    /// How long after its creation an execution of workflow `ffqn` may run unless its
    /// submission asks for less: the component's default deadline (none by default).
    fn default_deadline(&self, _ffqn: &Ffqn) -> Option<std::time::Duration> {
        None
    }

    /// At most how many executions of workflow `ffqn` run at once, across every partition
    /// (`max_running` in `components.toml`; none by default): [`crate::concurrency`].
    fn concurrency_limit(&self, _ffqn: &Ffqn) -> Option<u32> {
        None
    }

    /// What the requests for activity `ffqn` carry (none by default).
    fn request_terms(&self, _ffqn: &Ffqn) -> RequestTerms {
        RequestTerms::default()
    }

    /// Type-checks an answer another client sent for a child calling `ffqn` (an external
    /// service's) against the function's result type; `Err` says why it does not fit.
    /// Answers Weir made itself are typed where they are made and need no check.
    fn check_answer(&self, _ffqn: &Ffqn, _result: &ExecutionResult) -> Result<(), String> {
        Ok(())
    }

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
