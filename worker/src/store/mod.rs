//! The CQL store (ScyllaDB in production, Apache Cassandra locally): connection, the schema of
//! `schemas/cql/` with its drift check. History, execution state, timers and checkpoints join
//! here with the worker.

pub mod schema;
pub mod session;

pub use session::{CqlConfig, StoreError, connect};
