//! Which build of a workflow an execution runs on.
//!
//! An execution is pinned, in its `Created` record, to the content digest of the component
//! its creator had registered (`Created::component`), and every replay of it runs that build:
//! changing a workflow's code never changes the code of the executions already in flight.
//! The host's registry holds the newest builds, which new executions get. An older build is
//! fetched by digest from a [`BuildSource`] (the store, where `weir deploy` and every worker
//! at start put the builds they run), checked against its digest, compiled, linked against
//! the registry like any workflow, and kept for the next execution pinned to it. A build
//! that cannot be had is [`RunError::VersionUnavailable`]: the execution is parked and tried
//! again, never failed (a deploy of the build brings it back).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::model::Ffqn;
use crate::replay::Execution;

use super::engine::{WasmEngine, component_digest};
use super::registry::{ComponentKind, Exported, LoadedComponent, Registry, exported_functions};
use super::workflow::linker::workflow_templates;
use super::workflow::{RunError, WorkflowTemplate};

/// A stored build: the registry name it was deployed under, and the file.
pub type NamedBuild = (String, Vec<u8>);

/// Where older builds are found by digest.
pub trait BuildSource: Send + Sync {
    /// The build stored under `digest`, if any; `Err` for a source that could not be read
    /// (the execution is tried again later).
    fn fetch<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Option<NamedBuild>, String>>;
}

/// The workflow templates of one build, by function.
type Templates = HashMap<Ffqn, WorkflowTemplate>;

/// The older builds a host has loaded, and where it finds more.
#[derive(Default)]
pub(crate) struct OlderBuilds {
    source: Option<Arc<dyn BuildSource>>,
    loaded: Mutex<HashMap<String, Arc<Templates>>>,
}

impl OlderBuilds {
    pub fn set_source(&mut self, source: Arc<dyn BuildSource>) {
        self.source = Some(source);
    }

    /// The template of `execution`'s function in the build `digest` (not the registry's).
    pub async fn template(
        &self,
        engine: &WasmEngine,
        registry: &Registry,
        execution: &Execution,
        digest: &str,
    ) -> Result<WorkflowTemplate, RunError> {
        let unavailable = |reason: String| RunError::VersionUnavailable {
            execution: execution.id.to_string(),
            component: digest.to_owned(),
            reason,
        };
        let cached = self.lock().get(digest).cloned();
        let templates = match cached {
            Some(templates) => templates,
            None => {
                let templates = Arc::new(
                    self.load(engine, registry, digest)
                        .await
                        .map_err(unavailable)?,
                );
                self.lock()
                    .entry(digest.to_owned())
                    .or_insert(templates)
                    .clone()
            }
        };
        templates.get(&execution.ffqn).cloned().ok_or_else(|| {
            unavailable(format!(
                "the build does not export the workflow {}",
                execution.ffqn
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Templates>>> {
        // Every write is one insert: a panic elsewhere leaves the map consistent.
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn load(
        &self,
        engine: &WasmEngine,
        registry: &Registry,
        digest: &str,
    ) -> Result<Templates, String> {
        let source = self
            .source
            .as_ref()
            .ok_or("this host has only the registry's builds (no store to fetch others from)")?;
        let (name, bytes) = source
            .fetch(digest)
            .await
            .map_err(|e| format!("the store could not be read: {e}"))?
            .ok_or("no build with that digest is stored (deploy it with `weir deploy`)")?;
        let found = component_digest(&bytes);
        if found != digest {
            return Err(format!(
                "the stored build `{name}` has digest {found}: refusing to run it"
            ));
        }
        // Limits and the rest of the declaration come from the component of that name as
        // registered now: the build is code, the declaration is the deployment's.
        let current = registry
            .component(&name)
            .filter(|c| c.spec.kind == ComponentKind::Workflow)
            .ok_or_else(|| {
                format!("the build was deployed as `{name}`, which is no workflow component of the registry now")
            })?;
        let path = PathBuf::from(format!("(stored build {digest} of `{name}`)"));
        let (component, loaded_from) = engine
            .load_bytes(&path, &bytes)
            .map_err(|e| format!("it does not compile: {e}"))?;
        let mut spec = current.spec.clone();
        spec.path = path;
        spec.digest = Some(digest.to_owned());
        // A query the declaration names and this build does not export is not an error here:
        // the build predates it, and its executions answer it `unknown-query`.
        let Exported {
            functions: exports,
            queries,
        } = exported_functions(engine, &spec, &component).map_err(|e| e.to_string())?;
        let loaded = LoadedComponent {
            spec,
            digest: digest.to_owned(),
            component,
            loaded_from,
            exports,
            queries,
        };
        let templates = workflow_templates(engine, registry, &loaded)
            .map_err(|e| format!("it does not link against the registry now: {e}"))?;
        tracing::info!(component = %name, %digest, "an older build of a workflow is loaded for the executions pinned to it");
        Ok(templates.into_iter().collect())
    }
}
