//! The activity host: runs an activity component with WASI p2 and outgoing `wasi:http`,
//! bounded by a timeout, fuel and a memory limit, retried with exponential backoff and
//! jitter, and cancellable.
//!
//! Retry rules (per component, `[component.retries]` in components.toml): a trap, a limit or
//! a timeout is always retried; an `err` return is retried unless `retry_on_err = false`.
//! After the last attempt an `err` is the result as such (the caller's `err`), any other
//! failure becomes `retries-exhausted` with the last reason. Each attempt runs in a fresh
//! instance: an activity keeps no state between attempts.
//!
//! Backoff here is an in-process sleep; a worker that must survive restarts during a backoff
//! schedules the retry as a timer instead, with [`ActivityTemplate::run_attempt`] and
//! [`RetryPolicy::backoff`].

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker, ResourceTable, Val};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::model::{ExecutionErrorKind, ExecutionResult};

use super::limits::{self, MemoryLimiter};
use super::registry::{FunctionInfo, Limits, RetryPolicy};
use super::values;

/// Store data of an activity instance.
pub struct ActivityState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
}

impl WasiView for ActivityState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ActivityState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: Default::default(),
        }
    }
}

/// The linker every activity gets: WASI p2 and outgoing HTTP, nothing from Weir.
pub(crate) fn activity_linker(
    engine: &wasmtime::Engine,
) -> wasmtime::Result<Linker<ActivityState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    Ok(linker)
}

/// Cancels a running activity (e.g. its parent closed the join set).
#[derive(Clone, Debug)]
pub struct CancelHandle(Arc<watch::Sender<bool>>);

/// The receiving side given to [`ActivityTemplate::run`].
#[derive(Clone, Debug)]
pub struct Cancellation(watch::Receiver<bool>);

/// A connected pair: cancel with the handle, pass the cancellation to the run.
pub fn cancellation() -> (CancelHandle, Cancellation) {
    let (tx, rx) = watch::channel(false);
    (CancelHandle(Arc::new(tx)), Cancellation(rx))
}

impl CancelHandle {
    pub fn cancel(&self) {
        let _ = self.0.send(true);
    }
}

impl Cancellation {
    /// Never cancelled.
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive forever so `changed` never reports a closed channel.
        std::mem::forget(tx);
        Cancellation(rx)
    }

    async fn cancelled(&mut self) {
        // A dropped handle means nobody can cancel any more: wait forever.
        if self.0.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What a run of an activity ended with.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivityOutcome {
    pub result: ExecutionResult,
    /// Attempts made (1 when the first attempt decided).
    pub attempts: u32,
}

/// Everything needed to run one activity function.
#[derive(Clone)]
pub(crate) struct ActivityTemplate {
    pub pre: InstancePre<ActivityState>,
    pub function: Arc<FunctionInfo>,
    pub limits: Limits,
    pub retries: RetryPolicy,
    pub fuel_yield_interval: u64,
}

/// How one attempt ended.
enum Attempt {
    /// `ok` or `err` returned by the activity.
    Returned(ExecutionResult),
    /// Trap, limit or timeout.
    Failed(ExecutionResult),
}

impl ActivityTemplate {
    /// Runs the activity with its retry policy until it succeeds, fails for good or is
    /// cancelled. `params` must have been type-checked at submission.
    pub async fn run(&self, params: &Value, mut cancel: Cancellation) -> ActivityOutcome {
        let f = &self.function;
        let mut attempt = 1;
        loop {
            let span = tracing::info_span!("activity", function = %f.ffqn, attempt);
            let outcome = tokio::select! {
                outcome = self.attempt(params).instrument(span) => outcome,
                () = cancel.cancelled() => return cancelled(attempt),
            };
            let (result, retryable) = match outcome {
                Attempt::Returned(r @ ExecutionResult::Err(_)) => (r, self.retries.retry_on_err),
                Attempt::Returned(r) => (r, false),
                Attempt::Failed(r) => (r, true),
            };
            if !retryable {
                return ActivityOutcome {
                    result,
                    attempts: attempt,
                };
            }
            if attempt >= self.retries.max_attempts {
                let result = match result {
                    ExecutionResult::ExecutionError(e) if self.retries.max_attempts > 1 => {
                        ExecutionResult::error(
                            ExecutionErrorKind::RetriesExhausted,
                            format!("{attempt} attempts failed; the last one: {e}"),
                        )
                    }
                    other => other,
                };
                return ActivityOutcome {
                    result,
                    attempts: attempt,
                };
            }
            attempt += 1;
            let delay = self.retries.backoff(attempt, random_unit());
            tracing::info!(function = %f.ffqn, attempt, ?delay, last = %result, "retrying");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = cancel.cancelled() => return cancelled(attempt - 1),
            }
        }
    }

    /// One attempt, without retries: what a durable scheduler of retries calls.
    pub async fn run_attempt(&self, params: &Value) -> ExecutionResult {
        match self.attempt(params).await {
            Attempt::Returned(r) | Attempt::Failed(r) => r,
        }
    }

    async fn attempt(&self, params: &Value) -> Attempt {
        let f = &self.function;
        if f.stub {
            return Attempt::Returned(ExecutionResult::error(
                ExecutionErrorKind::Trap,
                format!("{} is a stub activity: its code is never run", f.ffqn),
            ));
        }
        let params = match values::params_to_vals(f.ffqn.as_str(), &f.func, params) {
            Ok(p) => p,
            Err(e) => {
                return Attempt::Returned(ExecutionResult::error(
                    ExecutionErrorKind::InvalidParams,
                    e.to_string(),
                ));
            }
        };
        let call = self.call(params);
        match tokio::time::timeout(self.limits.timeout, call).await {
            Ok(Ok(result)) => Attempt::Returned(result),
            Ok(Err(e)) => {
                let (kind, reason) = limits::describe_trap(&e);
                tracing::info!(error = %reason, "activity attempt failed");
                Attempt::Failed(ExecutionResult::ExecutionError(
                    crate::model::ExecutionError::new(kind, reason).with_detail(format!("{e:?}")),
                ))
            }
            Err(_) => Attempt::Failed(ExecutionResult::error(
                ExecutionErrorKind::TimedOut,
                format!("the attempt took longer than {:?}", self.limits.timeout),
            )),
        }
    }

    async fn call(&self, params: Vec<Val>) -> wasmtime::Result<ExecutionResult> {
        let state = ActivityState {
            wasi: WasiCtx::builder().inherit_stderr().build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(self.limits.memory_bytes),
        };
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_fuel(self.limits.fuel)?;
        // Yielding lets the timeout fire even in a loop that never calls the host.
        store.fuel_async_yield_interval(Some(self.fuel_yield_interval))?;
        let instance = self.pre.instantiate_async(&mut store).await?;
        let f = &self.function;
        let func = instance
            .get_func(&mut store, f.export)
            .ok_or_else(|| wasmtime::Error::msg(format!("{} is not exported", f.ffqn)))?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut store, &params, &mut results).await?;
        values::return_to_result(&results[0], &f.result).map_err(|e| {
            wasmtime::Error::msg(format!("the result of {} does not convert: {e}", f.ffqn))
        })
    }
}

fn cancelled(attempts: u32) -> ActivityOutcome {
    ActivityOutcome {
        result: ExecutionResult::error(ExecutionErrorKind::Cancelled, "the activity was cancelled"),
        attempts,
    }
}

/// A uniform number in `[0, 1)` for jitter. `RandomState` is randomly keyed per instance,
/// which is all jitter needs (no cryptographic or reproducible randomness).
fn random_unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
