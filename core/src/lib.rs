//! Weir's pure core: everything that decides, nothing that does I/O. No tokio, wasmtime,
//! rdkafka or scylla is a dependency of this crate, so the compiler keeps it pure; time is
//! always passed in.
//!
//! - [`model`]: ids, history events, responses, results — the vocabulary.
//! - [`replay`]: the deterministic history engine a workflow run is driven through.
//! - [`records`]: the plain records of every topic (submissions, history, results, DLQ).

pub mod model;
pub mod records;
pub mod replay;
