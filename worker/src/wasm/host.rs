//! [`WasmHost`]: the registry's components compiled, linked and pre-instantiated
//! (`InstancePre`), ready to start workflow runs and activity attempts.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{ExecutionResult, Ffqn, HistoryEvent, Response};
use crate::replay::Execution;

use super::activity::{self, ActivityOutcome, ActivityTemplate, AttemptReport, Cancellation};
use super::engine::{EngineConfig, WasmEngine};
use super::registry::{
    ComponentKind, ComponentSpec, ComponentsFile, Limits, Registry, RegistryError, RetryPolicy,
    SubmitError,
};
use super::secrets::Secrets;
use super::versions::{BuildSource, OlderBuilds};
use super::workflow::linker::workflow_templates;
use super::workflow::{RunError, RunStep, WorkflowRun, WorkflowTemplate};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Engine(#[from] super::engine::EngineError),
    #[error(transparent)]
    Secret(#[from] super::secrets::SecretError),
}

#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    #[error("no registered activity exports {0}")]
    UnknownActivity(Ffqn),
}

/// Every registered component, ready to run.
pub struct WasmHost {
    engine: WasmEngine,
    registry: Arc<Registry>,
    workflows: HashMap<Ffqn, WorkflowTemplate>,
    activities: HashMap<Ffqn, ActivityTemplate>,
    /// The builds executions are pinned to that are not the registry's (see `versions.rs`).
    older: OlderBuilds,
}

impl WasmHost {
    /// Reads `components.toml` at `path`, resolving component paths against `base_dir`.
    /// `secrets` holds the values its components' `secrets` name.
    pub fn from_file(
        config: EngineConfig,
        path: &Path,
        base_dir: &Path,
        secrets: &Secrets,
    ) -> Result<Self, HostError> {
        let specs = ComponentsFile::read(path)?.resolve(base_dir)?;
        Self::load_with_secrets(config, specs, secrets)
    }

    /// [`load_with_secrets`](Self::load_with_secrets) without secrets: a component that names
    /// one is refused.
    pub fn load(config: EngineConfig, specs: Vec<ComponentSpec>) -> Result<Self, HostError> {
        Self::load_with_secrets(config, specs, &Secrets::default())
    }

    /// Compiles (or loads cached) components, links every workflow against the registry and
    /// every activity against WASI, and pre-instantiates them all; each activity gets the
    /// secrets its component names, and no other.
    pub fn load_with_secrets(
        config: EngineConfig,
        specs: Vec<ComponentSpec>,
        secrets: &Secrets,
    ) -> Result<Self, HostError> {
        let engine = WasmEngine::new(config)?;
        let registry = Arc::new(Registry::load(&engine, specs)?);
        let fuel_yield_interval = engine.config().fuel_yield_interval;
        let mut workflows = HashMap::new();
        let mut activities = HashMap::new();
        let activity_linker =
            activity::activity_linker(engine.engine()).map_err(|e| RegistryError::Link {
                component: "(activity host)".into(),
                reason: format!("{e:#}"),
            })?;
        for component in registry.components() {
            let name = &component.spec.name;
            match component.spec.kind {
                ComponentKind::Workflow => {
                    workflows.extend(workflow_templates(&engine, &registry, component)?);
                }
                // A stub's code is never run: it only lends its WIT to the registry.
                ComponentKind::Activity if component.spec.stub => {}
                ComponentKind::Activity => {
                    let secrets = Arc::new(secrets.for_component(name, &component.spec.secrets)?);
                    let pre = activity_linker
                        .instantiate_pre(&component.component)
                        .map_err(|e| RegistryError::UnsatisfiedImport {
                            component: name.clone(),
                            import: "(see reason)".into(),
                            reason: format!("cannot be linked with WASI p2 + wasi:http: {e:#}"),
                        })?;
                    for f in &component.exports {
                        activities.insert(
                            f.ffqn.clone(),
                            ActivityTemplate {
                                pre: pre.clone(),
                                function: f.clone(),
                                limits: component.spec.limits.clone(),
                                retries: component.spec.retries.clone(),
                                fuel_yield_interval,
                                inline: component.spec.inline,
                                egress: Arc::clone(&component.spec.egress),
                                secrets: Arc::clone(&secrets),
                            },
                        );
                    }
                }
            }
        }
        Ok(WasmHost {
            engine,
            registry,
            workflows,
            activities,
            older: OlderBuilds::default(),
        })
    }

    /// Where the builds executions are pinned to, other than the registry's, are fetched
    /// from (without one, such an execution is parked: [`RunError::VersionUnavailable`]).
    pub fn with_build_source(mut self, source: Arc<dyn BuildSource>) -> Self {
        self.older.set_source(source);
        self
    }

    /// The digest of the registered build of workflow `ffqn`: what new executions of it are
    /// pinned to.
    pub fn component_of(&self, ffqn: &Ffqn) -> Option<String> {
        self.registered_build(ffqn).map(str::to_owned)
    }

    /// [`component_of`](Self::component_of), borrowed (a start compares it with its pin).
    fn registered_build(&self, ffqn: &Ffqn) -> Option<&str> {
        self.workflows.get(ffqn)?;
        let function = self.registry.function(ffqn)?;
        Some(&self.registry.component(&function.component)?.digest)
    }

    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Type-checks a submission's params against the target's WIT.
    pub fn check_submission(&self, ffqn: &Ffqn, params: &Value) -> Result<(), SubmitError> {
        self.registry.check_params(ffqn, params)
    }

    /// Starts (or rebuilds, with a recorded history and journalled responses) a workflow
    /// execution; returns once it parks or finishes.
    pub async fn start_workflow(
        &self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
        now: DateTime<Utc>,
    ) -> Result<(WorkflowRun, RunStep), RunError> {
        if let Some(pinned) = &execution.component
            && self.registered_build(&execution.ffqn) != Some(pinned.as_str())
        {
            let template = self
                .older
                .template(&self.engine, &self.registry, &execution, pinned)
                .await?;
            return template.start(execution, history, responses, now).await;
        }
        let Some(template) = self.workflows.get(&execution.ffqn) else {
            let (execution_id, function) = (execution.id.to_string(), execution.ffqn.to_string());
            return Err(if self.registry.function(&execution.ffqn).is_some() {
                RunError::NotAWorkflow {
                    execution: execution_id,
                    function,
                }
            } else {
                RunError::UnknownFunction {
                    execution: execution_id,
                    function,
                }
            });
        };
        template
            .clone()
            .start(execution, history, responses, now)
            .await
    }

    /// Runs an activity with its retries (see `activity.rs`).
    pub async fn run_activity(
        &self,
        ffqn: &Ffqn,
        params: &Value,
        cancel: Cancellation,
    ) -> Result<ActivityOutcome, ActivityError> {
        let template = self
            .activities
            .get(ffqn)
            .ok_or_else(|| ActivityError::UnknownActivity(ffqn.clone()))?;
        Ok(template.run(params, cancel).await)
    }

    /// One attempt without retries (for schedulers that make retries durable), bounded by
    /// the component's timeout or `timeout` if shorter (see `ActivityTemplate::run_attempt`).
    pub async fn run_activity_attempt(
        &self,
        ffqn: &Ffqn,
        params: &Value,
        timeout: Option<std::time::Duration>,
    ) -> Result<AttemptReport, ActivityError> {
        let template = self
            .activities
            .get(ffqn)
            .ok_or_else(|| ActivityError::UnknownActivity(ffqn.clone()))?;
        Ok(template.run_attempt(params, timeout).await)
    }

    /// At most how many executions of workflow `ffqn` run at once: its component's
    /// `max_running`.
    pub fn concurrency_limit(&self, ffqn: &Ffqn) -> Option<u32> {
        self.registry
            .function(ffqn)
            .and_then(|f| self.registry.component(&f.component))
            .and_then(|c| c.spec.max_running)
    }

    /// The default deadline of executions of workflow `ffqn`: its component's `deadline_ms`.
    pub fn default_deadline(&self, ffqn: &Ffqn) -> Option<std::time::Duration> {
        self.registry
            .function(ffqn)
            .and_then(|f| self.registry.component(&f.component))
            .and_then(|c| c.spec.deadline)
    }

    /// What the requests for activity `ffqn` carry, from its component's declaration: every
    /// activity's attempt is bounded by its `timeout_ms`; a declaration-only (external) one
    /// also has a deadline that far from its request, which its service is told.
    pub fn request_terms(&self, ffqn: &Ffqn) -> weir_core::runner::RequestTerms {
        let Some(component) = self
            .registry
            .function(ffqn)
            .and_then(|f| self.registry.component(&f.component))
        else {
            return Default::default();
        };
        let timeout = component.spec.limits.timeout;
        weir_core::runner::RequestTerms {
            attempt_timeout: Some(timeout),
            deadline_after: component.spec.external.then_some(timeout),
        }
    }

    /// Type-checks an answer for a child calling `ffqn`, when `ffqn` is a declaration-only
    /// (external) activity or a stub: its value comes from any Kafka client, so it is checked
    /// against the WIT here, where it enters, not when the workflow reads it. The answers
    /// of Weir's own activities and workflows are typed where they are made.
    pub fn check_answer(&self, ffqn: &Ffqn, result: &ExecutionResult) -> Result<(), String> {
        let Some(function) = self.registry.function(ffqn) else {
            return Ok(());
        };
        // Answers Weir did not compute: an external service's, and a stub's value.
        let from_outside = self
            .registry
            .component(&function.component)
            .is_some_and(|c| c.spec.external || c.spec.stub);
        if !from_outside {
            return Ok(());
        }
        match super::values::result_to_val(result, &function.result) {
            Err(super::values::ProjectionError::Conversion(e)) => Err(e.to_string()),
            // An execution error the caller's type cannot carry is the caller's rule, applied
            // when it reads the answer.
            Ok(_) | Err(super::values::ProjectionError::Unrepresentable { .. }) => Ok(()),
        }
    }

    /// Whether the activity `ffqn` is run inline by a workflow worker (this host runs it, and
    /// its component does not say `inline = false`).
    pub fn runs_inline(&self, ffqn: &Ffqn) -> bool {
        self.activities.get(ffqn).is_some_and(|t| t.inline)
    }

    /// The retry policy and limits of the activity `ffqn`, if this host runs it.
    pub fn activity_settings(&self, ffqn: &Ffqn) -> Option<(&RetryPolicy, &Limits)> {
        self.activities
            .get(ffqn)
            .map(|template| (&template.retries, &template.limits))
    }
}

/// The wasmtime host as the partition processor's `WorkflowRunner`.
#[derive(Clone)]
pub struct WasmRunner(pub Arc<WasmHost>);

impl weir_core::runner::WorkflowRun for WorkflowRun {
    async fn deliver(
        &mut self,
        response: crate::model::Response,
        now: DateTime<Utc>,
    ) -> Result<RunStep, RunError> {
        WorkflowRun::deliver(self, response, now).await
    }

    /// In an instance of its own (`workflow/query.rs`).
    fn query(
        &self,
        name: &str,
        params: &Value,
    ) -> impl std::future::Future<Output = Result<Value, weir_core::query::QueryError>> + Send {
        WorkflowRun::query(self, name, params)
    }

    fn resident_bytes(&self) -> usize {
        WorkflowRun::resident_bytes(self)
    }
}

impl weir_core::runner::WorkflowRunner for WasmRunner {
    type Run = WorkflowRun;

    fn check_submission(
        &self,
        ffqn: &Ffqn,
        params: &Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        use weir_core::runner::Rejection;
        self.0.check_submission(ffqn, params).map_err(|e| match e {
            SubmitError::UnknownFunction(_) => Rejection::UnknownFunction(e.to_string()),
            SubmitError::Params(_) => Rejection::InvalidParams(e.to_string()),
        })
    }

    fn request_terms(&self, ffqn: &Ffqn) -> weir_core::runner::RequestTerms {
        self.0.request_terms(ffqn)
    }

    fn concurrency_limit(&self, ffqn: &Ffqn) -> Option<u32> {
        self.0.concurrency_limit(ffqn)
    }

    fn default_deadline(&self, ffqn: &Ffqn) -> Option<std::time::Duration> {
        self.0.default_deadline(ffqn)
    }

    fn component_of(&self, ffqn: &Ffqn) -> Option<String> {
        self.0.component_of(ffqn)
    }

    fn check_answer(&self, ffqn: &Ffqn, result: &ExecutionResult) -> Result<(), String> {
        self.0.check_answer(ffqn, result)
    }

    async fn start(
        &self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<crate::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(WorkflowRun, RunStep), RunError> {
        self.0
            .start_workflow(execution, history, responses, now)
            .await
    }
}
