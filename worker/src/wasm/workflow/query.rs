//! Query functions (issue 35 item 5; `weir_core::query`): reading a parked run's values
//! without changing it.
//!
//! A parked run is suspended inside a pending async host call, and the component model does
//! not let the host enter that instance again. So a query runs in an instance of its own, of
//! the same build as the run: the run's values (`set-state`, [`super::state`]) are copied into
//! a fresh store, in *query mode* ([`WorkflowState::query`]), and the query function, an export
//! of the component declared in its `queries`, is called with the params. In query mode
//! `get-state` reads the copy and `log` logs; every other host call (join sets, sleep,
//! await-event, correlate, random values, set-state) and every generated extension function
//! or direct call of another component fails the query with `side-effect`, before it reaches
//! an engine. The query's store has an engine of its own that never runs (the store data
//! needs one): the run's engine, history and instance are never touched.
//!
//! The query's instance has the component's fuel and memory limits, and is dropped (its
//! pool slot released) when the query returns, whatever its outcome.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Val};
use weir_core::query::{QueryError, QueryErrorKind};

use crate::replay::{Execution, Replay};
use crate::wasm::limits::{self, MemoryLimiter};
use crate::wasm::registry::{FunctionInfo, Limits};
use crate::wasm::values;

use super::state::{SharedState, StateValues};
use super::{HostFailure, WorkflowRun, WorkflowState};

/// The query functions of one workflow component (one build), ready to run.
pub(crate) struct QueryFunctions {
    /// The component's name (for messages).
    pub component: String,
    pub pre: InstancePre<WorkflowState>,
    /// By the query's WIT name.
    pub functions: HashMap<String, Arc<FunctionInfo>>,
    pub limits: Limits,
    pub fuel_yield_interval: u64,
}

impl WorkflowRun {
    /// Runs the query function `name` with `params` (a JSON array) against the values this
    /// run has set (the module docs). The future owns what it needs: it does not borrow the
    /// run.
    pub fn query(
        &self,
        name: &str,
        params: &Value,
    ) -> impl std::future::Future<Output = Result<Value, QueryError>> + Send + 'static {
        let prepared = self.prepare_query(name, params);
        async move {
            let (query, span) = prepared?;
            query.run().instrument(span).await
        }
    }

    fn prepare_query(
        &self,
        name: &str,
        params: &Value,
    ) -> Result<(PreparedQuery, tracing::Span), QueryError> {
        let queries = &self.queries;
        let Some(function) = queries.functions.get(name) else {
            let mut known: Vec<&str> = queries.functions.keys().map(String::as_str).collect();
            known.sort_unstable();
            let known = if known.is_empty() {
                "it declares none".to_owned()
            } else {
                format!("its queries: {}", known.join(", "))
            };
            return Err(QueryError::new(
                QueryErrorKind::UnknownQuery,
                format!(
                    "{}: the build of component `{}` it runs has no query `{name}` ({known})",
                    self.execution, queries.component
                ),
            ));
        };
        let params = values::params_to_vals(function.ffqn.as_str(), &function.func, params)
            .map_err(|e| {
                QueryError::new(
                    QueryErrorKind::InvalidParams,
                    format!("{}: {e}", self.execution),
                )
            })?;
        let span =
            tracing::info_span!("query", execution = %self.execution, query = %function.ffqn);
        Ok((
            PreparedQuery {
                execution: self.execution.clone(),
                probe: self.probe.clone(),
                values: self.state.snapshot(),
                function: function.clone(),
                params,
                queries: queries.clone(),
            },
            span,
        ))
    }
}

/// A query with everything it needs, owned.
struct PreparedQuery {
    /// The execution's id, for messages.
    execution: String,
    probe: Execution,
    values: StateValues,
    function: Arc<FunctionInfo>,
    params: Vec<Val>,
    queries: Arc<QueryFunctions>,
}

impl PreparedQuery {
    async fn run(self) -> Result<Value, QueryError> {
        let PreparedQuery {
            execution,
            probe,
            values,
            function,
            params,
            queries,
        } = self;
        let at = probe.created_at;
        // An idle engine: nothing reaches it (every call that would is refused first).
        let replay = Replay::new(probe, Vec::new(), Vec::new(), at).map_err(|e| {
            QueryError::new(
                QueryErrorKind::Unavailable,
                format!("{execution}: the query's instance cannot be set up: {e}"),
            )
        })?;
        let (_inbox_tx, inbox) = mpsc::unbounded_channel();
        let (outbox, _status_rx) = mpsc::unbounded_channel();
        let state = WorkflowState {
            replay,
            join_sets: Vec::new(),
            delay_expiries: HashMap::new(),
            inbox,
            outbox,
            limiter: MemoryLimiter::new(queries.limits.memory_bytes),
            wasi: None,
            state: SharedState::new(values),
            query: Some(function.ffqn.function().to_owned()),
        };
        let mut store = Store::new(queries.pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        let outcome = call(&mut store, &queries, &function, &params).await;
        // The instance's pool slot is released here, whatever the outcome.
        drop(store);
        let result = outcome.map_err(|e| failure(&execution, &function, e))?;
        values::val_to_json(&result, &function.result).map_err(|e| {
            QueryError::new(
                QueryErrorKind::Trap,
                format!(
                    "{execution}: the result of the query {} does not convert to JSON: {e}",
                    function.ffqn
                ),
            )
        })
    }
}

async fn call(
    store: &mut Store<WorkflowState>,
    queries: &QueryFunctions,
    function: &FunctionInfo,
    params: &[Val],
) -> Result<Val, wasmtime::Error> {
    store.set_fuel(queries.limits.fuel)?;
    store.fuel_async_yield_interval(Some(queries.fuel_yield_interval))?;
    let instance = queries.pre.instantiate_async(&mut *store).await?;
    let func = instance
        .get_func(&mut *store, function.export)
        .ok_or_else(|| wasmtime::Error::msg(format!("{} is not exported", function.ffqn)))?;
    let mut results = [Val::Bool(false)];
    func.call_async(&mut *store, params, &mut results).await?;
    let [result] = results;
    Ok(result)
}

/// The query error of an error that ended the query's instance.
fn failure(execution: &str, function: &FunctionInfo, e: wasmtime::Error) -> QueryError {
    if limits::is_pool_full(&e) {
        return QueryError::new(
            QueryErrorKind::Unavailable,
            format!(
                "{execution}: no instance is free to run the query {} now: ask again later ({e})",
                function.ffqn
            ),
        );
    }
    match e.downcast_ref::<HostFailure>() {
        Some(HostFailure::SideEffect(call)) => QueryError::new(
            QueryErrorKind::SideEffect,
            format!(
                "{execution}: the query {} called {call}, which a query may not: it reads the \
                 execution's state (get-state) and changes nothing",
                function.ffqn
            ),
        ),
        Some(other) => QueryError::new(
            QueryErrorKind::Trap,
            format!("{execution}: the query {} failed: {other}", function.ffqn),
        ),
        None => {
            let (kind, reason) = limits::describe_trap(&e);
            QueryError::new(
                QueryErrorKind::Trap,
                format!(
                    "{execution}: the query {} ended with {kind}: {reason}",
                    function.ffqn
                ),
            )
        }
    }
}
