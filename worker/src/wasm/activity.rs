//! The activity host: runs an activity component with WASI p2 and outgoing `wasi:http`,
//! bounded by a timeout, fuel and a memory limit, retried with exponential backoff and
//! jitter, and cancellable.
//!
//! Retry rules (per component, `[component.retries]` in components.toml) are the core's one
//! decision, [`weir_core::retry::decide`]: a trap, a limit or a timeout is retried; an `err`
//! return is retried unless `retry_on_err = false`; after the last attempt an `err` is the
//! result as such (the caller's `err`), any other failure becomes `retries-exhausted` with the
//! last reason. Each attempt runs in a fresh instance: an activity keeps no state between
//! attempts.
//!
//! A full instance pool is back-pressure, never a failure: the attempt waits for a free slot
//! (and reports how often it had to).
//!
//! Backoff in [`ActivityTemplate::run`] is an in-process sleep (the in-memory bus uses it); the
//! Kafka activity worker makes retries durable instead, with
//! [`ActivityTemplate::run_attempt`] and the same decision.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker, ResourceTable, Val};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use weir_core::retry::{self, Decision};

use crate::model::{ExecutionErrorKind, ExecutionResult};

use super::egress::{Egress, EgressHooks};
use super::limits::{self, MemoryLimiter};
use super::registry::{FunctionInfo, Limits, RetryPolicy};
use super::secrets::{ComponentSecrets, GuestStderr};
use super::values;

/// Store data of an activity instance.
pub struct ActivityState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    egress: EgressHooks,
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
            hooks: &mut self.egress,
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
    /// Times an attempt found the instance pool full and waited for a slot (back-pressure).
    pub pool_waits: u32,
}

/// How one attempt went.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptReport {
    /// `ok` / `err` as the activity returned it, or the execution error that ended it.
    pub result: ExecutionResult,
    /// Times the instance pool was found full before the instance could be created: the
    /// attempt waited for a slot (never counted as a failure of the guest).
    pub pool_waits: u32,
    /// Time spent waiting for that slot.
    pub waited: Duration,
}

/// Everything needed to run one activity function.
#[derive(Clone)]
pub(crate) struct ActivityTemplate {
    pub pre: InstancePre<ActivityState>,
    pub function: Arc<FunctionInfo>,
    pub limits: Limits,
    pub retries: RetryPolicy,
    pub fuel_yield_interval: u64,
    /// Run inline by workflow workers (see `ComponentSpec::inline`).
    pub inline: bool,
    /// The hosts its attempts may reach (`ComponentSpec::egress`).
    pub egress: Arc<Egress>,
    /// Its component's secrets: the guests' environment, redacted from what they produce.
    pub secrets: Arc<ComponentSecrets>,
}

/// First and longest pause of an attempt waiting for a free slot of the instance pool.
const POOL_WAIT_FIRST: Duration = Duration::from_millis(2);
const POOL_WAIT_MAX: Duration = Duration::from_millis(200);

impl ActivityTemplate {
    /// Runs the activity with its retry policy (the core's one decision,
    /// [`weir_core::retry::decide`]) until it answers or is cancelled; backoffs are in-process
    /// sleeps. `params` must have been type-checked at submission.
    pub async fn run(&self, params: &Value, mut cancel: Cancellation) -> ActivityOutcome {
        let f = &self.function;
        let mut attempt = 1;
        let mut pool_waits = 0;
        loop {
            let span = tracing::info_span!("activity", function = %f.ffqn, attempt);
            let report = tokio::select! {
                report = self.run_attempt(params, None).instrument(span) => report,
                () = cancel.cancelled() => return cancelled(attempt, pool_waits),
            };
            pool_waits += report.pool_waits;
            let last = report.result.clone();
            match retry::decide(
                &self.retries,
                attempt,
                report.result,
                chrono::Utc::now(),
                None,
                random_unit(),
            ) {
                // The in-process host has no parent to pause: a pausing policy
                // (`on_exhausted = "pause"`) answers here what it would have answered.
                Decision::Answer(result) | Decision::Park { answer: result, .. } => {
                    return ActivityOutcome {
                        result,
                        attempts: attempt,
                        pool_waits,
                    };
                }
                Decision::Retry {
                    attempt: next,
                    backoff,
                    ..
                } => {
                    tracing::info!(function = %f.ffqn, attempt = next, ?backoff, %last, "retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = cancel.cancelled() => return cancelled(attempt, pool_waits),
                    }
                    attempt = next;
                }
            }
        }
    }

    /// One attempt, without retries (what the Kafka activity worker, which makes retries
    /// durable, calls). It is bounded by the component's `timeout_ms`, or by `timeout` when
    /// that is shorter. A full instance pool is waited out (back-pressure, reported in
    /// [`AttemptReport::pool_waits`]), outside that bound: a host limit is never a failure of
    /// the guest. Dropping the future interrupts the attempt at its next await point (a host
    /// call, or the fuel yield every `fuel_yield_interval` units).
    pub async fn run_attempt(&self, params: &Value, timeout: Option<Duration>) -> AttemptReport {
        let f = &self.function;
        let mut report = AttemptReport {
            result: ExecutionResult::Ok(Value::Null),
            pool_waits: 0,
            waited: Duration::ZERO,
        };
        if f.stub {
            report.result = ExecutionResult::error(
                ExecutionErrorKind::Trap,
                format!("{} is a stub activity: its code is never run", f.ffqn),
            );
            return report;
        }
        let params = match values::params_to_vals(f.ffqn.as_str(), &f.func, params) {
            Ok(p) => p,
            Err(e) => {
                report.result =
                    ExecutionResult::error(ExecutionErrorKind::InvalidParams, e.to_string());
                return report;
            }
        };
        let (mut store, instance) = match self.instantiate(&mut report).await {
            Ok(pair) => pair,
            Err(e) => {
                report.result = self.trapped(&e);
                return report;
            }
        };
        let limit = timeout.map_or(self.limits.timeout, |t| t.min(self.limits.timeout));
        let call = self.call(&mut store, instance, params);
        report.result = match tokio::time::timeout(limit, call).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => self.trapped(&e),
            Err(_) => ExecutionResult::error(
                ExecutionErrorKind::TimedOut,
                format!("the attempt took longer than {limit:?}"),
            ),
        };
        // Nothing an attempt produces leaves it with a secret's value in it.
        self.secrets.redact_result(&mut report.result);
        report
    }

    /// The execution error of an attempt that trapped or hit a limit, logged redacted (a
    /// trap's text can hold what the guest had: issue 33 F13).
    fn trapped(&self, e: &wasmtime::Error) -> ExecutionResult {
        let (kind, reason) = limits::describe_trap(e);
        tracing::info!(error = %self.secrets.redact(&reason), "activity attempt failed");
        ExecutionResult::ExecutionError(
            crate::model::ExecutionError::new(kind, reason).with_detail(format!("{e:?}")),
        )
    }

    /// A fresh store and instance; waits while the pooling allocator has no free slot (the
    /// pool is shared with parked workflows and other attempts), with a growing pause.
    async fn instantiate(
        &self,
        report: &mut AttemptReport,
    ) -> wasmtime::Result<(Store<ActivityState>, wasmtime::component::Instance)> {
        let mut pause = POOL_WAIT_FIRST;
        loop {
            let mut wasi = WasiCtx::builder();
            wasi.stderr(GuestStderr(Arc::clone(&self.secrets)));
            for (name, value) in self.secrets.env() {
                wasi.env(name, value);
            }
            let state = ActivityState {
                wasi: wasi.build(),
                http: WasiHttpCtx::new(),
                egress: EgressHooks(Arc::clone(&self.egress), Arc::clone(&self.secrets)),
                table: ResourceTable::new(),
                limiter: MemoryLimiter::new(self.limits.memory_bytes),
            };
            let mut store = Store::new(self.pre.engine(), state);
            store.limiter(|s| &mut s.limiter);
            store.set_fuel(self.limits.fuel)?;
            // Yielding lets the timeout (and a cancellation) fire even in a loop that never
            // calls the host.
            store.fuel_async_yield_interval(Some(self.fuel_yield_interval))?;
            match self.pre.instantiate_async(&mut store).await {
                Ok(instance) => return Ok((store, instance)),
                Err(e) if limits::is_pool_full(&e) => {
                    if report.pool_waits == 0 {
                        tracing::warn!(function = %self.function.ffqn, error = %e,
                            "the instance pool is full: the attempt waits for a free slot");
                    }
                    report.pool_waits += 1;
                    let started = std::time::Instant::now();
                    tokio::time::sleep(pause).await;
                    report.waited += started.elapsed();
                    pause = (pause * 2).min(POOL_WAIT_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn call(
        &self,
        store: &mut Store<ActivityState>,
        instance: wasmtime::component::Instance,
        params: Vec<Val>,
    ) -> wasmtime::Result<ExecutionResult> {
        let f = &self.function;
        let func = instance
            .get_func(&mut *store, f.export)
            .ok_or_else(|| wasmtime::Error::msg(format!("{} is not exported", f.ffqn)))?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut *store, &params, &mut results).await?;
        values::return_to_result(&results[0], &f.result).map_err(|e| {
            wasmtime::Error::msg(format!("the result of {} does not convert: {e}", f.ffqn))
        })
    }
}

fn cancelled(attempts: u32, pool_waits: u32) -> ActivityOutcome {
    ActivityOutcome {
        result: ExecutionResult::error(ExecutionErrorKind::Cancelled, "the activity was cancelled"),
        attempts,
        pool_waits,
    }
}

/// A uniform number in `[0, 1)` for jitter. `RandomState` is randomly keyed per instance,
/// which is all jitter needs (no cryptographic or reproducible randomness).
fn random_unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A jitter draw in [0, 1) for the retry of `execution_id`'s attempt `attempt` that differs
/// between activities and attempts (no shared RNG state).
pub fn jitter_unit(execution_id: &crate::model::ExecutionId, attempt: u32) -> f64 {
    let seed = execution_id.stable_hash() ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mixed = (seed ^ (chrono::Utc::now().timestamp_subsec_nanos() as u64))
        .wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}
