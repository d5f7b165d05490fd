//! The component registry: `topology/components.toml` (which components exist, their kind,
//! file, limits, retries and route), and what each loaded component exports, typed by its WIT.
//!
//! Resolution rules (checked at load time, errors name the component and the item):
//! - every exported function is in an interface, returns one WIT `result`, and uses only
//!   JSON-convertible types (schemas/wit/README.md §1);
//! - one FFQN is exported by one component only;
//! - package names ending in `-ext` / `-stub` are reserved for generated interfaces.
//!
//! Linking the workflows against these exports is in `workflow/linker.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex};

use crate::model::{ChildKind, Ffqn};
use crate::topology::Topology;

use super::engine::{EngineError, LoadedFrom, WasmEngine};
use super::values::{self, ParamsError};

// ---------------------------------------------------------------- the file

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentKind {
    Workflow,
    Activity,
}

/// Limits as written in the file; unset values come from `[defaults]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsEntry {
    pub fuel: Option<u64>,
    pub memory_mib: Option<u64>,
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetriesEntry {
    pub max_attempts: Option<u32>,
    pub backoff_base_ms: Option<u64>,
    pub backoff_max_ms: Option<u64>,
    pub jitter: Option<f64>,
    pub retry_on_err: Option<bool>,
    /// `"answer"` (the default) or `"pause"` ([`weir_core::retry::OnExhausted`]).
    pub on_exhausted: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub limits: LimitsEntry,
    #[serde(default)]
    pub retries: RetriesEntry,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentEntry {
    pub name: String,
    pub kind: ComponentKind,
    pub path: PathBuf,
    #[serde(default)]
    pub limits: LimitsEntry,
    #[serde(default)]
    pub retries: RetriesEntry,
    /// Name of the activity route (`weir.activity.<route>`); activities only.
    pub route: Option<String>,
    /// A stub activity: never executed, its result is written by a workflow.
    #[serde(default)]
    pub stub: bool,
    /// A declaration-only activity, served outside Weir by any Kafka client: Weir reads its
    /// WIT (to type calls and values) and never runs it. Its interfaces' routes must be
    /// `external = true` in routes.toml.
    #[serde(default)]
    pub external: bool,
    /// Activities: whether a workflow worker that has this component runs its attempts
    /// itself, answering in the transaction that journals the request (default `true`); set
    /// `false` for long-running activities, which then always go through their route's topic.
    pub inline: Option<bool>,
    /// Activities Weir runs: the hosts they may reach over `wasi:http`
    /// (`scheme://host[:port]`, see [`super::egress`]); none by default.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Activities Weir runs: names of the secrets (given to the worker with `--secret`) its
    /// attempts see as environment variables (see [`super::secrets`]); none by default.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The content digest the file must have (`sha256:<hex>`, see
    /// [`super::engine::component_digest`]): a file swapped on disk is refused, not run.
    pub digest: Option<String>,
    /// Workflows: how long an execution may run from its creation unless its submission asks
    /// for less; past it, it finishes `timed-out` (none by default).
    pub deadline_ms: Option<u64>,
    /// Workflows: at most this many executions of each of its functions run at once, across
    /// every partition and worker; the others are `queued` and start in the order they came
    /// (`docs/design/concurrency.md`; none by default).
    pub max_running: Option<u32>,
    /// Workflows: the query functions it exports (by their WIT name, e.g. `status`): functions
    /// of its exported interface that are no workflows, run to answer `weir query` against
    /// a running execution's values (`docs/authoring.md`, "Queries"; none by default).
    #[serde(default)]
    pub queries: Vec<String>,
}

/// The parsed `components.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentsFile {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default, rename = "component")]
    pub components: Vec<ComponentEntry>,
}

/// Resource limits of one component's executions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Fuel for one run of an execution (a replay starts again with full fuel).
    pub fuel: u64,
    pub memory_bytes: usize,
    /// Wall-clock bound of one activity attempt.
    pub timeout: Duration,
}

/// Retries of an activity (the policy and the one retry decision live in the pure core).
pub use weir_core::retry::{OnExhausted, RetryPolicy};

/// One entry of the file with defaults applied and its path resolved.
#[derive(Clone, Debug)]
pub struct ComponentSpec {
    pub name: String,
    pub kind: ComponentKind,
    pub path: PathBuf,
    pub limits: Limits,
    pub retries: RetryPolicy,
    pub route: Option<String>,
    pub stub: bool,
    pub external: bool,
    /// Runs inline in a workflow worker (a WASM activity, neither stub nor external, unless
    /// `inline = false`).
    pub inline: bool,
    /// The hosts its activities may reach, and the count of requests denied.
    pub egress: std::sync::Arc<super::egress::Egress>,
    /// The content digest recorded for its file, if any (checked at load).
    pub digest: Option<String>,
    /// Names of the secrets its activities see (`ComponentEntry::secrets`).
    pub secrets: Vec<String>,
    /// Workflows: the default deadline of an execution, from its creation.
    pub deadline: Option<Duration>,
    /// Workflows: at most this many executions of each function run at once.
    pub max_running: Option<u32>,
    /// Workflows: the names of its query functions (`ComponentEntry::queries`).
    pub queries: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file is not the one recorded: refused, not run.
    #[error(
        "component `{component}`: {path} has digest {found}, but components.toml records \
         {expected}: the file is not the one deployed; refusing to load it"
    )]
    DigestMismatch {
        component: String,
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("cannot read {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid components file: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("component `{component}`: {reason}")]
    InvalidEntry { component: String, reason: String },
    #[error("component `{component}`: {source}")]
    Engine {
        component: String,
        source: EngineError,
    },
    #[error("component `{component}` exports {item}: {reason}")]
    BadExport {
        component: String,
        item: String,
        reason: String,
    },
    #[error("{ffqn} is exported by both `{first}` and `{second}`")]
    DuplicateExport {
        ffqn: String,
        first: String,
        second: String,
    },
    /// An import that no registered component (or the host) satisfies.
    #[error("component `{component}` imports `{import}`, which {reason}")]
    UnsatisfiedImport {
        component: String,
        import: String,
        reason: String,
    },
    #[error("component `{component}` imports `{import}`: function `{function}` {reason}")]
    ImportType {
        component: String,
        import: String,
        function: String,
        reason: String,
    },
    #[error("component `{component}` cannot be linked: {reason}")]
    Link { component: String, reason: String },
    /// A query declared in `components.toml` that the component does not export.
    #[error(
        "component `{component}` declares the query `{query}` in components.toml, but exports \
         no function `{query}`"
    )]
    UnknownQuery { component: String, query: String },
    /// An activity interface whose route (routes.toml) is missing or disagrees with the
    /// component about who serves it.
    #[error("activity `{component}` exports `{interface}`, but {reason}")]
    Route {
        component: String,
        interface: String,
        reason: String,
    },
}

impl ComponentsFile {
    pub fn parse(text: &str, origin: &Path) -> Result<Self, RegistryError> {
        toml::from_str(text).map_err(|e| RegistryError::Parse {
            path: origin.to_owned(),
            source: Box::new(e),
        })
    }

    pub fn read(path: &Path) -> Result<Self, RegistryError> {
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Applies the defaults and resolves relative paths against `base_dir`.
    pub fn resolve(&self, base_dir: &Path) -> Result<Vec<ComponentSpec>, RegistryError> {
        let d = &self.defaults;
        let mut seen = std::collections::HashSet::new();
        self.components
            .iter()
            .map(|c| {
                let invalid = |reason: &str| RegistryError::InvalidEntry {
                    component: c.name.clone(),
                    reason: reason.to_owned(),
                };
                if !seen.insert(c.name.clone()) {
                    return Err(invalid("defined twice"));
                }
                if c.stub && c.kind != ComponentKind::Activity {
                    return Err(invalid("only an activity can be a stub"));
                }
                if c.route.is_some() && c.kind != ComponentKind::Activity {
                    return Err(invalid("only activities have a route"));
                }
                if c.external && (c.kind != ComponentKind::Activity || c.stub) {
                    return Err(invalid("only a (non-stub) activity can be external"));
                }
                if !c.allowed_hosts.is_empty()
                    && (c.kind != ComponentKind::Activity || c.stub || c.external)
                {
                    return Err(invalid(
                        "only an activity Weir runs has allowed_hosts (workflows have no network)",
                    ));
                }
                if !c.secrets.is_empty() && (c.kind != ComponentKind::Activity || c.stub || c.external) {
                    return Err(invalid(
                        "only an activity Weir runs has secrets (a workflow must be replayable from its history alone)",
                    ));
                }
                if let Some(name) = c.secrets.iter().find(|n| !super::secrets::valid_name(n)) {
                    return Err(invalid(&format!(
                        "secret name `{name}` must be an environment variable name (ASCII letters, digits, `_`)"
                    )));
                }
                let egress = super::egress::Egress::parse(&c.name, &c.allowed_hosts)
                    .map_err(|e| invalid(&e.to_string()))?;
                if let Some(digest) = &c.digest {
                    let hex = digest
                        .strip_prefix(super::engine::DIGEST_PREFIX)
                        .unwrap_or_default();
                    if hex.len() != 64
                        || !hex
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                    {
                        return Err(invalid(
                            "digest must be `sha256:` and 64 lower-case hex digits",
                        ));
                    }
                }
                if c.inline == Some(true)
                    && (c.kind != ComponentKind::Activity || c.stub || c.external)
                {
                    return Err(invalid(
                        "only an activity Weir runs (not a stub, not external) can be inline",
                    ));
                }
                if c.deadline_ms.is_some() && c.kind != ComponentKind::Workflow {
                    return Err(invalid(
                        "deadline_ms is a workflow's (an activity's attempts are bounded by \
                         limits.timeout_ms)",
                    ));
                }
                if c.deadline_ms == Some(0) {
                    return Err(invalid("deadline_ms must be at least 1"));
                }
                let r = &c.retries;
                let on_exhausted: OnExhausted = r
                    .on_exhausted
                    .as_deref()
                    .or(d.retries.on_exhausted.as_deref())
                    .map(str::parse)
                    .transpose()
                    .map_err(|e: String| invalid(&format!("retries.{e}")))?
                    .unwrap_or_default();
                let pauses = on_exhausted == OnExhausted::Pause;
                // Only the activity worker can park a request (docs/design/pause.md): a
                // pausing policy is an activity's Weir runs, and never inline.
                if r.on_exhausted.is_some()
                    && (c.kind != ComponentKind::Activity || c.stub || c.external)
                {
                    return Err(invalid(
                        "retries.on_exhausted is an activity's Weir runs (an external service \
                         answers its own requests, a stub is never run, a workflow is not retried)",
                    ));
                }
                if pauses && c.inline == Some(true) {
                    return Err(invalid(
                        "an activity with retries.on_exhausted = \"pause\" cannot be inline: \
                         only the activity worker parks a request and pauses its parent",
                    ));
                }
                if let Some(max) = c.max_running {
                    if c.kind != ComponentKind::Workflow {
                        return Err(invalid(
                            "max_running is a workflow's (an activity route's pace is its \
                             `rate` in routes.toml)",
                        ));
                    }
                    weir_core::concurrency::check_limit(i64::from(max), "max_running")
                        .map_err(|e| invalid(&e.to_string()))?;
                }
                if !c.queries.is_empty() && c.kind != ComponentKind::Workflow {
                    return Err(invalid(
                        "queries are a workflow's (an activity has no running state to query)",
                    ));
                }
                let mut query_names = std::collections::HashSet::new();
                for query in &c.queries {
                    if query.is_empty() {
                        return Err(invalid("a query name is not empty"));
                    }
                    if !query_names.insert(query.as_str()) {
                        return Err(invalid(&format!("the query `{query}` is declared twice")));
                    }
                }
                let inline = c.kind == ComponentKind::Activity
                    && !c.stub
                    && !c.external
                    && !pauses
                    && c.inline.unwrap_or(true);
                let retries = RetryPolicy {
                    max_attempts: r.max_attempts.or(d.retries.max_attempts).unwrap_or(3),
                    backoff_base: Duration::from_millis(
                        r.backoff_base_ms
                            .or(d.retries.backoff_base_ms)
                            .unwrap_or(100),
                    ),
                    backoff_max: Duration::from_millis(
                        r.backoff_max_ms
                            .or(d.retries.backoff_max_ms)
                            .unwrap_or(10_000),
                    ),
                    jitter: r.jitter.or(d.retries.jitter).unwrap_or(0.2),
                    retry_on_err: r.retry_on_err.or(d.retries.retry_on_err).unwrap_or(true),
                    on_exhausted,
                };
                if retries.max_attempts == 0 {
                    return Err(invalid("retries.max_attempts must be at least 1"));
                }
                if !(0.0..=1.0).contains(&retries.jitter) {
                    return Err(invalid("retries.jitter must be in [0, 1]"));
                }
                let l = &c.limits;
                let memory_mib = l.memory_mib.or(d.limits.memory_mib).unwrap_or(64);
                let limits = Limits {
                    fuel: l.fuel.or(d.limits.fuel).unwrap_or(10_000_000_000),
                    memory_bytes: usize::try_from(memory_mib.saturating_mul(1 << 20))
                        .map_err(|_| invalid("limits.memory_mib too large"))?,
                    timeout: Duration::from_millis(
                        l.timeout_ms.or(d.limits.timeout_ms).unwrap_or(30_000),
                    ),
                };
                Ok(ComponentSpec {
                    name: c.name.clone(),
                    kind: c.kind,
                    path: base_dir.join(&c.path),
                    limits,
                    retries,
                    route: c.route.clone(),
                    stub: c.stub,
                    external: c.external,
                    inline,
                    egress: std::sync::Arc::new(egress),
                    digest: c.digest.clone(),
                    secrets: c.secrets.clone(),
                    deadline: c.deadline_ms.map(Duration::from_millis),
                    max_running: c.max_running,
                    queries: c.queries.clone(),
                })
            })
            .collect()
    }
}

// ---------------------------------------------------------------- loaded components

/// A function exported by a registered component.
#[derive(Clone)]
pub struct FunctionInfo {
    pub ffqn: Ffqn,
    /// Name of the exporting component.
    pub component: String,
    pub kind: ComponentKind,
    pub stub: bool,
    /// The WIT type of the function (params with names, one `result`).
    pub func: ComponentFunc,
    /// The function's `result<T, E>`.
    pub result: Type,
    pub export: ComponentExportIndex,
}

impl FunctionInfo {
    /// What a parent's closing of a join set does to such a child.
    pub fn child_kind(&self) -> ChildKind {
        match (self.kind, self.stub) {
            (ComponentKind::Workflow, _) => ChildKind::Workflow,
            (ComponentKind::Activity, true) => ChildKind::Stub,
            (ComponentKind::Activity, false) => ChildKind::Activity,
        }
    }
}

impl std::fmt::Debug for FunctionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({})",
            values::wit_signature(self.ffqn.as_str(), &self.func),
            self.component
        )
    }
}

/// A registered component, compiled.
pub struct LoadedComponent {
    pub spec: ComponentSpec,
    /// The content digest of the file loaded (`sha256:<hex>`): what executions of its
    /// workflows are pinned to.
    pub digest: String,
    pub component: Component,
    pub loaded_from: LoadedFrom,
    /// Exported functions, in export order (its query functions excluded).
    pub exports: Vec<Arc<FunctionInfo>>,
    /// Its query functions (`ComponentSpec::queries`), each found among its exports; their
    /// `result` is the function's one result type, whatever it is.
    pub queries: Vec<Arc<FunctionInfo>>,
}

/// Every registered component and the functions they export.
#[derive(Default)]
pub struct Registry {
    components: Vec<Arc<LoadedComponent>>,
    functions: HashMap<Ffqn, Arc<FunctionInfo>>,
    /// `ns:pkg/iface[@ver]` → its functions in declaration order.
    interfaces: HashMap<String, Vec<Arc<FunctionInfo>>>,
}

/// Whether a package name is reserved for the generated extension interfaces.
pub fn is_reserved_package(interface: &str) -> bool {
    let package = interface.split('/').next().unwrap_or(interface);
    package.ends_with("-ext") || package.ends_with("-stub")
}

impl Registry {
    /// Compiles (or loads from the cache) every component and indexes its exports.
    pub fn load(engine: &WasmEngine, specs: Vec<ComponentSpec>) -> Result<Self, RegistryError> {
        let mut registry = Registry::default();
        for spec in specs {
            let engine_error = |source| RegistryError::Engine {
                component: spec.name.clone(),
                source,
            };
            let bytes = super::engine::read_component(&spec.path).map_err(engine_error)?;
            let digest = super::engine::component_digest(&bytes);
            if let Some(expected) = &spec.digest {
                let found = digest.clone();
                if &found != expected {
                    return Err(RegistryError::DigestMismatch {
                        component: spec.name.clone(),
                        path: spec.path.clone(),
                        expected: expected.clone(),
                        found,
                    });
                }
            }
            let (component, loaded_from) = engine
                .load_bytes(&spec.path, &bytes)
                .map_err(engine_error)?;
            tracing::debug!(component = %spec.name, ?loaded_from, "component loaded");
            let Exported {
                functions: exports,
                queries,
            } = exported_functions(engine, &spec, &component)?;
            if let Some(query) = spec
                .queries
                .iter()
                .find(|q| !queries.iter().any(|f| f.ffqn.function() == q.as_str()))
            {
                return Err(RegistryError::UnknownQuery {
                    component: spec.name.clone(),
                    query: query.clone(),
                });
            }
            for f in &exports {
                if let Some(other) = registry.functions.get(&f.ffqn) {
                    return Err(RegistryError::DuplicateExport {
                        ffqn: f.ffqn.to_string(),
                        first: other.component.clone(),
                        second: spec.name.clone(),
                    });
                }
                registry.functions.insert(f.ffqn.clone(), f.clone());
                registry
                    .interfaces
                    .entry(f.ffqn.ifc_fqn().to_owned())
                    .or_default()
                    .push(f.clone());
            }
            registry.components.push(Arc::new(LoadedComponent {
                spec,
                digest,
                component,
                loaded_from,
                exports,
                queries,
            }));
        }
        Ok(registry)
    }

    pub fn components(&self) -> &[Arc<LoadedComponent>] {
        &self.components
    }

    pub fn component(&self, name: &str) -> Option<&Arc<LoadedComponent>> {
        self.components.iter().find(|c| c.spec.name == name)
    }

    pub fn function(&self, ffqn: &Ffqn) -> Option<&Arc<FunctionInfo>> {
        self.functions.get(ffqn)
    }

    /// The functions of interface `ns:pkg/iface[@ver]`, in declaration order.
    pub fn interface(&self, name: &str) -> Option<&[Arc<FunctionInfo>]> {
        self.interfaces.get(name).map(Vec::as_slice)
    }

    /// Type-checks `params` (a JSON array) against `ffqn`'s WIT parameters: what a submission
    /// must pass before an execution is created.
    pub fn check_params(&self, ffqn: &Ffqn, params: &Value) -> Result<(), SubmitError> {
        let f = self
            .function(ffqn)
            .ok_or_else(|| SubmitError::UnknownFunction(ffqn.clone()))?;
        values::params_to_vals(ffqn.as_str(), &f.func, params)?;
        Ok(())
    }

    /// Checks that every activity interface has a route, and that the route is `external`
    /// exactly when the component is: requests to an interface without a route could not be
    /// sent, and a WASM activity on an external route (or the reverse) would never be served.
    pub fn check_routes(&self, topology: &Topology) -> Result<(), RegistryError> {
        for component in &self.components {
            let spec = &component.spec;
            if spec.kind != ComponentKind::Activity || spec.stub {
                continue;
            }
            for f in &component.exports {
                let interface = f.ffqn.ifc_fqn();
                let reason = match topology.route(interface) {
                    None => "routes.toml has no route for it".to_owned(),
                    Some(route) if route.external && !spec.external => format!(
                        "its route to `{}` is external while the component is not marked `external`",
                        route.topic
                    ),
                    Some(route) if !route.external && spec.external => format!(
                        "the component is `external` while its route to `{}` is not",
                        route.topic
                    ),
                    Some(_) => continue,
                };
                return Err(RegistryError::Route {
                    component: spec.name.clone(),
                    interface: interface.to_owned(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// The WIT type of `ffqn`'s result, for presenting results as typed values.
    pub fn result_type(&self, ffqn: &Ffqn) -> Option<String> {
        self.function(ffqn).map(|f| values::wit_type(&f.result))
    }
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("no registered component exports {0}")]
    UnknownFunction(Ffqn),
    #[error(transparent)]
    Params(#[from] ParamsError),
}

/// Exports a guest toolchain adds for itself, which are no function of the component: the
/// plain-named instance `exports` of componentize-py, whose `init` is its build-time hook
/// (`docs/design/wit.md`, load-time rules). A plain name cannot be an interface of a package,
/// so no workflow or activity can be hidden by this.
fn is_toolchain_hook(name: &str) -> bool {
    name == "exports"
}

/// What a component exports: its functions (workflows or activities), and its query
/// functions.
pub(crate) struct Exported {
    pub functions: Vec<Arc<FunctionInfo>>,
    /// The exports named by `ComponentSpec::queries` that were found (one may be missing:
    /// the caller decides whether that is an error).
    pub queries: Vec<Arc<FunctionInfo>>,
}

pub(crate) fn exported_functions(
    engine: &WasmEngine,
    spec: &ComponentSpec,
    component: &Component,
) -> Result<Exported, RegistryError> {
    let bad = |item: &str, reason: String| RegistryError::BadExport {
        component: spec.name.clone(),
        item: item.to_owned(),
        reason,
    };
    let ty = component.component_type();
    let mut out = Vec::new();
    let mut queries: Vec<Arc<FunctionInfo>> = Vec::new();
    for (name, export) in ty.exports(engine.engine()) {
        let instance = match &export.ty {
            ComponentItem::ComponentInstance(i) => i,
            ComponentItem::ComponentFunc(_) => {
                return Err(bad(name, "a function outside an interface".into()));
            }
            // Types and other items carry no executable function.
            _ => continue,
        };
        if is_toolchain_hook(name) {
            continue;
        }
        if is_reserved_package(name) {
            return Err(bad(
                name,
                "package names ending in -ext or -stub are reserved for generated interfaces"
                    .into(),
            ));
        }
        let ifc_index = component
            .get_export_index(None, name)
            .ok_or_else(|| bad(name, "export index not found".into()))?;
        for (fname, item) in instance.exports(engine.engine()) {
            let ComponentItem::ComponentFunc(func) = item.ty else {
                continue;
            };
            let item_name = format!("{name}.{fname}");
            let ffqn: Ffqn = item_name
                .parse()
                .map_err(|e| bad(&item_name, format!("not a valid function name: {e}")))?;
            let results: Vec<Type> = func.results().collect();
            if spec.queries.iter().any(|q| q == fname) {
                if let Some(other) = queries.iter().find(|q| q.ffqn.function() == fname) {
                    return Err(bad(
                        &item_name,
                        format!(
                            "the query `{fname}` is exported by two interfaces (also as {})",
                            other.ffqn
                        ),
                    ));
                }
                let result = match results.as_slice() {
                    [r] if values::is_json_convertible(r) => r.clone(),
                    [r] => {
                        return Err(bad(
                            &item_name,
                            format!(
                                "the query's result type {} has no JSON form",
                                values::wit_type(r)
                            ),
                        ));
                    }
                    _ => return Err(bad(&item_name, "a query returns exactly one value".into())),
                };
                if let Some((p, t)) = func.params().find(|(_, t)| !values::is_json_convertible(t)) {
                    return Err(bad(
                        &item_name,
                        format!(
                            "parameter `{p}` of the query has type {}, which has no JSON form",
                            values::wit_type(&t)
                        ),
                    ));
                }
                let export = component
                    .get_export_index(Some(&ifc_index), fname)
                    .ok_or_else(|| bad(&item_name, "export index not found".into()))?;
                queries.push(Arc::new(FunctionInfo {
                    ffqn,
                    component: spec.name.clone(),
                    kind: spec.kind,
                    stub: false,
                    func,
                    result,
                    export,
                }));
                continue;
            }
            let result = match results.as_slice() {
                [r @ Type::Result(_)] => r.clone(),
                _ => {
                    return Err(bad(
                        &item_name,
                        "must return exactly one WIT `result`".into(),
                    ));
                }
            };
            if let Some((p, t)) = func.params().find(|(_, t)| !values::is_json_convertible(t)) {
                return Err(bad(
                    &item_name,
                    format!(
                        "parameter `{p}` has type {}, which has no JSON form",
                        values::wit_type(&t)
                    ),
                ));
            }
            if !values::is_json_convertible(&result) {
                return Err(bad(&item_name, "its result type has no JSON form".into()));
            }
            let export = component
                .get_export_index(Some(&ifc_index), fname)
                .ok_or_else(|| bad(&item_name, "export index not found".into()))?;
            out.push(Arc::new(FunctionInfo {
                ffqn,
                component: spec.name.clone(),
                kind: spec.kind,
                stub: spec.stub,
                func,
                result,
                export,
            }));
        }
    }
    Ok(Exported {
        functions: out,
        queries,
    })
}
