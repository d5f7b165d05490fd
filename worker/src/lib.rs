//! Weir: durable workflows, written as WebAssembly components, run by stateless workers
//! behind Kafka. See `docs/design/README.md` and the README for the architecture.
//!
//! Modules, one job each:
//! - [`model`], [`replay`], [`wire`] (the wire-address table of every record): re-exported
//!   from the pure core crate `weir-core`.
//! - [`wasm`]: the wasmtime host for workflow and activity components.
//! - [`kafka`]: clients, the murmur2 partitioner, topic administration, the partition processor.
//! - [`store`]: the CQL store (ScyllaDB / Cassandra): schema, history, state, timers.
//! - [`codec`]: wire formats of the records on every topic.
//! - [`topology`]: the declarative description of topics, routes and components (`topology/`).
//! - [`failpoints`]: named pauses for fault-injection tests (`WEIR_FAILPOINTS`).
//! - [`metrics`]: the worker's counters and gauges and their Prometheus endpoint.
//! - [`options`]: the default of every setting, one source for clap, the library and `docs/cli.md`.
//! - [`pause`]: what a client checks before it pauses or resumes an execution.
//! - [`cli`]: the `weir` command line.

pub mod api;
pub mod batch_client;
pub mod cli;
pub mod codec;
pub mod failpoints;
pub mod kafka;
pub mod metrics;
pub mod options;
pub mod pause;
pub mod present;
pub mod reset;
// The pure core lives in `weir-core`; its modules keep their paths here.
pub use weir_core::{
    batch, concurrency, correlation, model, partitioner, projection, query, replay, schedule, wire,
};
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod topology;
pub mod trigger;
pub mod wasm;
