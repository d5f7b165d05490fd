//! The workflow host: runs a workflow component on the replay engine.
//!
//! A run is a future owning the wasmtime `Store` whose data holds the [`Replay`] engine. It
//! runs inline on the caller's task until it first parks or finishes; only a run that parks is
//! spawned as a tokio task.
//! Every host call of the guest goes to the engine. When the engine says `Blocked`, the host
//! call hands the new effects to the driver ([`WorkflowRun`]) and awaits the next response
//! delivered for that execution *inside the pending async host call* — the instance stays
//! parked in memory (the hot path). Dropping the [`WorkflowRun`] discards the instance; the
//! next start replays the recorded history and responses through a fresh instance (the cold
//! path), which the engine guarantees to yield the same events and results.
//!
//! Files: `linker.rs` (the host package and the dynamic imports with their extension
//! functions), `shapes.rs` (structural type checks of imports), `convert.rs` (values of the
//! `weir:workflow/types` interface), `wasi.rs` (the deterministic WASI of interpreted guests),
//! `state.rs` (the values `set-state` keeps), `query.rs` (query functions run against them).

pub(crate) mod convert;
pub(crate) mod linker;
pub(crate) mod query;
pub(crate) mod shapes;
pub mod state;
pub(crate) mod wasi;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tracing::Instrument;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Val};

use crate::model::{
    DelayId, ExecutionError, ExecutionErrorKind, ExecutionResult, HistoryEvent, JoinSetId,
    JoinSetRequest, Response,
};
use crate::replay::{
    Blocked, Delivery, DeliveryError, Effects, Execution, Progress, Replay, ReplayError, UsageError,
};

use super::limits::{self, MemoryLimiter};
use super::registry::{FunctionInfo, Limits};
use super::values;

/// Tag type of the host resource `weir:workflow/host.join-set`; the resource's rep indexes
/// [`WorkflowState::join_sets`].
pub struct JoinSetResource;

/// Why a host call ended the run: carried through wasmtime as the trap's error.
#[derive(Debug, thiserror::Error)]
pub enum HostFailure {
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The driver dropped the run (eviction); the instance is discarded silently.
    #[error("the run was evicted")]
    Evicted,
    /// A child's execution error that the caller's `err` type cannot hold (README §4 rule 5).
    #[error("{0}")]
    UnhandledChild(String),
    /// The guest broke a rule of the host interface (e.g. an empty random range).
    #[error("{0}")]
    GuestError(String),
    /// A value did not have the shape checked at link time: a host bug.
    #[error("unexpected value: {0}")]
    BadValue(String),
    /// A sleep or await-event whose wait was cancelled (only when the whole execution is being cancelled).
    #[error("the wait (a sleep or an await-event) was cancelled")]
    WaitCancelled,
    /// A query function called `{0}`, which would be recorded or start something: a query
    /// changes nothing (only in query mode; `query.rs`).
    #[error("a query may not call {0}: a query reads the execution's state and changes nothing")]
    SideEffect(String),
    /// The guest trapped or hit a limit (fuel, memory).
    #[error("{kind}: {reason}")]
    Trapped {
        kind: ExecutionErrorKind,
        reason: String,
        detail: String,
    },
}

impl HostFailure {
    pub(crate) fn into_wasmtime(self) -> wasmtime::Error {
        wasmtime::Error::new(self)
    }
}

/// Store data of a workflow instance.
pub struct WorkflowState {
    pub(crate) replay: Replay,
    /// Resource rep → join set id.
    pub(crate) join_sets: Vec<JoinSetId>,
    /// Recorded expiries of this run's delays, for `delay-finished.expired`.
    pub(crate) delay_expiries: HashMap<DelayId, DateTime<Utc>>,
    inbox: mpsc::UnboundedReceiver<Inbound>,
    outbox: mpsc::UnboundedSender<Status>,
    pub(crate) limiter: MemoryLimiter,
    /// WASI for interpreted guests ([`wasi`]), built at the instance's first WASI call.
    pub(crate) wasi: Option<Box<wasi::GuestWasi>>,
    /// The values `set-state` keeps ([`state`]), shared with the run's handle.
    pub(crate) state: state::SharedState,
    /// In an instance answering a query: the query's name. Such an instance may call only
    /// `get-state` and `log` (and read the deterministic WASI): any other host call fails
    /// with [`HostFailure::SideEffect`], before it reaches the engine ([`query`]).
    pub(crate) query: Option<String>,
}

impl WorkflowState {
    /// Runs `call` on the engine until it is ready, parking on `Blocked`. `call` must be
    /// the same call every time (the engine resumes it).
    pub(crate) async fn wait<T>(
        &mut self,
        mut call: impl FnMut(&mut Replay) -> Result<Progress<T>, ReplayError>,
    ) -> Result<T, HostFailure> {
        loop {
            match call(&mut self.replay) {
                Ok(Progress::Ready(t)) => return Ok(t),
                Ok(Progress::Blocked(blocked)) => self.park(blocked).await?,
                Err(ReplayError::Usage(UsageError::InvalidRange {
                    what,
                    min,
                    max_exclusive,
                })) => {
                    return Err(HostFailure::GuestError(format!(
                        "{what} called with an empty range [{min}, {max_exclusive})"
                    )));
                }
                Err(ReplayError::Usage(
                    UsageError::InvalidEventName(why) | UsageError::InvalidCorrelationKey(why),
                )) => {
                    return Err(HostFailure::GuestError(why));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Hands the effects so far to the driver and waits for a response that wakes the
    /// blocked call.
    async fn park(&mut self, blocked: Blocked) -> Result<(), HostFailure> {
        let mut rejected = None;
        loop {
            let status = Status::Parked {
                effects: self.replay.take_effects(),
                blocked_on: blocked.join_set_id.clone(),
                rejected: rejected.take(),
                resident_bytes: self.resident_bytes(),
            };
            if self.outbox.send(status).is_err() {
                return Err(HostFailure::Evicted);
            }
            let Some(inbound) = self.inbox.recv().await else {
                return Err(HostFailure::Evicted);
            };
            self.replay.set_now(inbound.now);
            match self.replay.deliver_response(inbound.response) {
                Ok(Delivery::Accepted { wakes: true }) => return Ok(()),
                Ok(_) => {}
                Err(e) => rejected = Some(e),
            }
        }
    }

    /// The estimate of what the parked run holds; see [`WorkflowRun::resident_bytes`].
    fn resident_bytes(&self) -> usize {
        let memory = self.limiter.memory_bytes();
        PARKED_INSTANCE_BYTES
            + memory / LINEAR_MEMORY_RESIDENT_SHARE
            + HISTORY_ITEM_BYTES * (self.replay.history().len() + self.delay_expiries.len())
            + self.state.lock().bytes()
    }

    /// Fails a host call other than `get-state` and `log` made by a query function:
    /// `what` names it (`random-u64`, `weir-examples:compute-ext/compute#fibonacci-submit`).
    pub(crate) fn refuse_in_query(&self, what: &str) -> Result<(), HostFailure> {
        match &self.query {
            Some(_) => Err(HostFailure::SideEffect(what.to_owned())),
            None => Ok(()),
        }
    }

    pub(crate) fn join_set(&self, rep: u32) -> Result<JoinSetId, HostFailure> {
        self.join_sets
            .get(rep as usize)
            .cloned()
            .ok_or_else(|| HostFailure::BadValue(format!("unknown join-set handle {rep}")))
    }

    /// Remembers the expiry of a delay just submitted (recorded or fresh: it is the last
    /// `DelayRequest` for this id, near the end of the processed history).
    pub(crate) fn note_delay(&mut self, delay_id: &DelayId) {
        let processed = &self.replay.history()[..self.replay.version().0 as usize];
        let expiry = processed.iter().rev().find_map(|e| match e {
            HistoryEvent::JoinSetRequest {
                request:
                    JoinSetRequest::DelayRequest {
                        delay_id: d,
                        expires_at,
                        ..
                    },
                ..
            } if d == delay_id => Some(*expires_at),
            _ => None,
        });
        if let Some(expiry) = expiry {
            self.delay_expiries.insert(delay_id.clone(), expiry);
        }
    }
}

/// The part of a parked run's memory that does not grow with its guest's linear memory or
/// history: the touched pages of its fiber stack, its `Store`, instance and tables, the run's
/// task and channels. Calibrated by `cargo bench -p weir --bench wasm` (docs/benchmarks.md,
/// "Parked executions: memory and eviction").
pub const PARKED_INSTANCE_BYTES: usize = 32 << 10;

/// The most parked runs `cache_bytes` can hold: each weighs at least
/// [`PARKED_INSTANCE_BYTES`] (`weir worker` raises `--cache-size` to it at start-up).
pub const fn parkable_runs(cache_bytes: u64) -> u32 {
    let runs = cache_bytes / PARKED_INSTANCE_BYTES as u64;
    if runs > u32::MAX as u64 / 2 {
        u32::MAX / 2
    } else {
        runs as u32
    }
}
/// A linear memory is mapped in full but its pages are committed only when touched: a Rust
/// guest's 1 MiB stack region and unused heap are mostly untouched. Its accessible size
/// (kept by the store's limiter) over this is the estimate of its committed pages.
pub const LINEAR_MEMORY_RESIDENT_SHARE: usize = 48;
/// The in-memory history of a run, per event (the replay engine's copy).
pub const HISTORY_ITEM_BYTES: usize = 256;

struct Inbound {
    response: Response,
    now: DateTime<Utc>,
}

enum Status {
    Parked {
        effects: Effects,
        blocked_on: JoinSetId,
        rejected: Option<DeliveryError>,
        /// The run's estimate of what it holds, at this park.
        resident_bytes: usize,
    },
    Finished {
        result: ExecutionResult,
        effects: Effects,
    },
    /// The engine refused the run's input; nothing was finished.
    Failed(ReplayError),
    /// The instance pool had no free slot: no code of the workflow ran.
    NoCapacity(String),
}

pub use weir_core::runner::{RunError, RunStep};

/// A running (parked) workflow execution; see the module docs. Dropping it discards the
/// instance.
pub struct WorkflowRun {
    execution: String,
    inbox: mpsc::UnboundedSender<Inbound>,
    status: mpsc::UnboundedReceiver<Status>,
    /// The run task, spawned only once the run first parked (`None` when it finished inline).
    task: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
    /// What the run said it holds when it last parked.
    resident_bytes: usize,
    /// The values the run has set, shared with its store.
    state: state::SharedState,
    /// What a query of the run needs: its component's query functions, pre-instantiated.
    queries: Arc<query::QueryFunctions>,
    /// The execution without its params: what a query instance's idle engine is made of.
    probe: Execution,
}

impl Drop for WorkflowRun {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl WorkflowRun {
    /// Delivers a response (in arrival order) and runs the workflow until it parks again or
    /// finishes. `now` is the clock for fresh delays and schedules.
    pub async fn deliver(
        &mut self,
        response: Response,
        now: DateTime<Utc>,
    ) -> Result<RunStep, RunError> {
        if self.finished {
            return Err(RunError::Finished {
                execution: self.execution.clone(),
            });
        }
        if self.inbox.send(Inbound { response, now }).is_err() {
            return Err(self.stopped("the instance is gone"));
        }
        self.next_step().await
    }

    /// An estimate of the memory the parked run holds, as of its last park: a fixed part
    /// ([`PARKED_INSTANCE_BYTES`]), its linear memories' committed share (their size, kept by
    /// the store's [`MemoryLimiter`], over [`LINEAR_MEMORY_RESIDENT_SHARE`]) and its history
    /// ([`HISTORY_ITEM_BYTES`] per event). Its weight in the processor's byte budget.
    pub fn resident_bytes(&self) -> usize {
        self.resident_bytes
    }

    fn stopped(&self, reason: &str) -> RunError {
        RunError::Stopped {
            execution: self.execution.clone(),
            reason: reason.into(),
        }
    }

    async fn next_step(&mut self) -> Result<RunStep, RunError> {
        let status = self.status.recv().await;
        self.step(status)
    }

    fn step(&mut self, status: Option<Status>) -> Result<RunStep, RunError> {
        match status {
            Some(Status::Parked {
                effects,
                blocked_on,
                rejected,
                resident_bytes,
            }) => match rejected {
                Some(source) => {
                    // Effects are empty after a refused response: nothing ran.
                    debug_assert!(effects.events.is_empty() && effects.outputs.is_empty());
                    Err(RunError::Delivery {
                        execution: self.execution.clone(),
                        source,
                    })
                }
                None => {
                    self.resident_bytes = resident_bytes;
                    Ok(RunStep::Parked {
                        effects,
                        blocked_on,
                    })
                }
            },
            Some(Status::Finished { result, effects }) => {
                self.finished = true;
                Ok(RunStep::Finished { result, effects })
            }
            Some(Status::Failed(source)) => {
                self.finished = true;
                Err(RunError::Engine {
                    execution: self.execution.clone(),
                    source,
                })
            }
            Some(Status::NoCapacity(reason)) => {
                self.finished = true;
                Err(RunError::NoCapacity {
                    execution: self.execution.clone(),
                    reason,
                })
            }
            None => {
                self.finished = true;
                Err(self.stopped("the run task ended without a result (panic?)"))
            }
        }
    }
}

/// Everything needed to start runs of one workflow function.
#[derive(Clone)]
pub(crate) struct WorkflowTemplate {
    pub pre: InstancePre<WorkflowState>,
    pub function: Arc<FunctionInfo>,
    pub limits: Limits,
    pub fuel_yield_interval: u64,
    /// The query functions of the component (shared by its templates).
    pub queries: Arc<query::QueryFunctions>,
}

impl WorkflowTemplate {
    /// Starts a run: a fresh execution (empty history) or a cold rebuild (recorded history and
    /// every journalled response in arrival order). Returns once it parks or finishes.
    pub async fn start(
        self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
        now: DateTime<Utc>,
    ) -> Result<(WorkflowRun, RunStep), RunError> {
        let id = execution.id.to_string();
        let trace = execution.trace;
        let probe = Execution {
            id: execution.id.clone(),
            ffqn: execution.ffqn.clone(),
            params: serde_json::Value::Null,
            created_at: execution.created_at,
            component: execution.component.clone(),
            trace: None,
        };
        let replay = Replay::new(execution, history, responses, now).map_err(|source| {
            RunError::Delivery {
                execution: id.clone(),
                source,
            }
        })?;
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = mpsc::unbounded_channel();
        let shared = state::SharedState::default();
        let queries = self.queries.clone();
        let state = WorkflowState {
            replay,
            join_sets: Vec::new(),
            delay_expiries: HashMap::new(),
            inbox: inbox_rx,
            outbox: status_tx.clone(),
            limiter: MemoryLimiter::new(self.limits.memory_bytes),
            wasi: None,
            state: shared.clone(),
            query: None,
        };
        let span = tracing::info_span!("workflow", execution = %id, function = %self.function.ffqn);
        crate::telemetry::set_parent(&span, trace);
        // The run goes inline on the caller's task until its first status: a run that finishes
        // without blocking (the common short workflow, and most cold rebuilds) costs no task
        // spawn and no task switches. Only a run that parks is spawned, to wait for responses.
        let mut run_future = Box::pin(self.run(state, status_tx).instrument(span));
        let mut status_rx = status_rx;
        let (first, done) = std::future::poll_fn(|cx| {
            // Fuel yields and parking return `Pending`; the status tells which one it was.
            let done = run_future.as_mut().poll(cx).is_ready();
            match status_rx.try_recv() {
                Ok(status) => Poll::Ready((Some(status), done)),
                Err(_) if done => Poll::Ready((None, true)),
                Err(_) => Poll::Pending,
            }
        })
        .await;
        let task = (!done).then(|| tokio::spawn(run_future));
        let mut run = WorkflowRun {
            execution: id,
            inbox: inbox_tx,
            status: status_rx,
            task,
            finished: false,
            resident_bytes: PARKED_INSTANCE_BYTES,
            state: shared,
            queries,
            probe,
        };
        let step = run.step(first)?;
        Ok((run, step))
    }

    async fn run(self, state: WorkflowState, status: mpsc::UnboundedSender<Status>) {
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        let outcome = self.call(&mut store).await;
        let state = store.data_mut();
        let result = match outcome {
            Ok(result) => match state.wait(|r| r.finish(result.clone())).await {
                Ok(result) => result,
                Err(failure) => match self.failed(state, failure) {
                    Some(r) => r,
                    None => return,
                },
            },
            // The instance (or its fiber) could not be allocated: nothing of the workflow ran,
            // and it is not its failure (issue 11 item 17).
            Err(e) if limits::is_pool_full(&e) => {
                tracing::warn!(error = %e, "the instance pool is full: the workflow run cannot start");
                let _ = status.send(Status::NoCapacity(e.to_string()));
                return;
            }
            Err(e) => {
                let failure = match e.downcast::<HostFailure>() {
                    Ok(failure) => failure,
                    Err(e) => {
                        let (kind, reason) = limits::describe_trap(&e);
                        HostFailure::Trapped {
                            kind,
                            reason,
                            detail: format!("{e:?}"),
                        }
                    }
                };
                match self.failed(state, failure) {
                    Some(r) => r,
                    None => return,
                }
            }
        };
        let effects = state.replay.take_effects();
        let _ = status.send(Status::Finished { result, effects });
    }

    /// The result after a failure, or `None` when the run must end without one (evicted, or
    /// inconsistent input reported to the driver).
    fn failed(&self, state: &mut WorkflowState, failure: HostFailure) -> Option<ExecutionResult> {
        let error = match failure {
            HostFailure::Evicted => return None,
            HostFailure::Replay(ReplayError::Nondeterminism(n)) => {
                tracing::warn!(error = %n, "nondeterminism detected");
                // The engine has finished the execution already.
                return state.replay.finished().cloned();
            }
            HostFailure::Replay(e) => {
                let _ = state.outbox.send(Status::Failed(e));
                return None;
            }
            HostFailure::UnhandledChild(reason) => {
                ExecutionError::new(ExecutionErrorKind::UnhandledChildExecutionError, reason)
            }
            HostFailure::WaitCancelled => ExecutionError::new(
                ExecutionErrorKind::Cancelled,
                "the wait (a sleep or an await-event) was cancelled",
            ),
            HostFailure::GuestError(reason) | HostFailure::BadValue(reason) => {
                ExecutionError::new(ExecutionErrorKind::Trap, reason)
            }
            // Only an instance answering a query refuses calls, and it has no execution to fail.
            failure @ HostFailure::SideEffect(_) => {
                ExecutionError::new(ExecutionErrorKind::Trap, failure.to_string())
            }
            HostFailure::Trapped {
                kind,
                reason,
                detail,
            } => ExecutionError::new(kind, reason).with_detail(detail),
        };
        tracing::info!(error = %error, "workflow failed");
        match state.replay.fail(error) {
            Ok(result) => Some(result),
            Err(e) => {
                let _ = state.outbox.send(Status::Failed(e));
                None
            }
        }
    }

    /// Instantiates and calls the workflow function; its `result` as an execution result, or
    /// the error that ended the call.
    async fn call(
        &self,
        store: &mut Store<WorkflowState>,
    ) -> Result<ExecutionResult, wasmtime::Error> {
        store.set_fuel(self.limits.fuel)?;
        store.fuel_async_yield_interval(Some(self.fuel_yield_interval))?;
        let f = &self.function;
        let params = {
            let execution = store.data().replay.execution();
            match values::params_to_vals(f.ffqn.as_str(), &f.func, &execution.params) {
                Ok(p) => p,
                Err(e) => {
                    // Submissions are type-checked; this means the registry changed since.
                    return Ok(ExecutionResult::error(
                        ExecutionErrorKind::InvalidParams,
                        e.to_string(),
                    ));
                }
            }
        };
        let instance = self.pre.instantiate_async(&mut *store).await?;
        let func = instance
            .get_func(&mut *store, f.export)
            .ok_or_else(|| wasmtime::Error::msg(format!("{} is not exported", f.ffqn)))?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut *store, &params, &mut results).await?;
        Ok(
            values::return_to_result(&results[0], &f.result).unwrap_or_else(|e| {
                ExecutionResult::error(
                    ExecutionErrorKind::Trap,
                    format!("the result of {} does not convert: {e}", f.ffqn),
                )
            }),
        )
    }
}
