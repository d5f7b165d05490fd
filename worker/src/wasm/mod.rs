//! The wasmtime host for workflow and activity components (`docs/design/wit.md`;
//! schemas/wit/README.md for the contract with the guests).
//!
//! - [`engine`]: the wasmtime `Engine` (component model, fuel, pooling allocator) and the
//!   on-disk cache of compiled components.
//! - [`registry`]: `topology/components.toml` and what every component exports, typed by its
//!   WIT; submission type checks.
//! - [`values`]: JSON ↔ component values, WIT type printing, projection of child results.
//! - [`limits`]: the per-store memory limiter and the classification of traps.
//! - [`workflow`]: the workflow linker (host package + dynamic imports with extension
//!   functions) and runs driven by the replay engine (hot and cold path).
//! - [`activity`]: WASI p2 + outgoing HTTP, timeout, retries with backoff and jitter,
//!   cancellation.
//! - [`egress`]: the hosts an activity may reach; [`secrets`]: the values only its component
//!   sees, and their redaction from everything an attempt produces.
//! - [`host`]: [`WasmHost`], everything above loaded and pre-instantiated.
//! - [`versions`]: the build an execution is pinned to, and the older builds fetched from
//!   the store for executions pinned to them.
//! - [`inline`]: activities a workflow worker runs itself (the core's inline seam).
//! - [`memory`]: an in-memory driver of the partition processor that routes submissions,
//!   responses, activities and timers between executions, without Kafka: `weir test` (an
//!   author's tests), the project's fast tests and benchmarks.

// Errors here carry the names and types needed for a useful message; they are built on
// cold paths only (load, submission, failure), so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod activity;
pub mod egress;
pub mod engine;
pub mod host;
pub mod inline;
pub mod limits;
pub mod memory;
pub mod registry;
pub mod secrets;
pub mod values;
pub mod verify;
pub mod versions;
pub mod workflow;

pub use activity::{ActivityOutcome, AttemptReport, CancelHandle, Cancellation, cancellation};
pub use engine::{EngineConfig, LoadedFrom, WasmEngine};
pub use host::{ActivityError, HostError, WasmHost, WasmRunner};
pub use registry::{
    ComponentKind, ComponentSpec, ComponentsFile, Limits, OnExhausted, Registry, RegistryError,
    RetryPolicy, SubmitError,
};
pub use values::TypedValue;
pub use workflow::{RunError, RunStep, WorkflowRun};
