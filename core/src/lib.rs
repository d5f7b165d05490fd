//! Weir's pure core: everything that decides, nothing that does I/O. No tokio, wasmtime,
//! rdkafka or scylla is a dependency of this crate, so the compiler keeps it pure; time is
//! always passed in. The `weir` crate plugs Kafka, the CQL store and the wasmtime host into the
//! seams defined here; the deterministic simulation (`sim`, feature `test-util`) plugs in
//! simulated ones and drives the very same code.
//!
//! - [`activity`]: **the activity worker's rules** — requests, attempts, retries, cancellations,
//!   external deadlines, and the progress committed with the answers.
//! - [`processor`]: **the partition processor** — the rules that turn inputs into effects.
//! - [`cache`]: the eviction policy of the processor's execution cache (weighted S3-FIFO).
//! - [`projection`]: the one projection from an execution's changelog to its state and rows.
//! - [`driver`]: the workflow worker's loop (take-over, batch, commit, materialise) over its
//!   seams: [`driver::Log`], [`driver::StoreRead`], [`driver::Materialise`].
//! - [`inline`]: activities the workflow worker answers itself, in the batch that requests them.
//! - [`timers`]: the timers held in memory, their horizon and watermark.
//! - [`runner`]: the seam to whatever runs workflow code.
//! - [`replay`]: the deterministic history engine a workflow run is driven through.
//! - [`model`]: ids, history events, responses, results — the vocabulary.
//! - [`records`]: the plain records of every topic (submissions, history, results, DLQ).
//! - [`rows`]: what the store keeps, typed.
//! - [`list`]: what one list request may cost: its range, rows read and page, for every store.
//! - [`partitioner`]: Kafka's murmur2 partitioner (which partition owns an execution).
//! - [`query`]: queries: reading a running execution's state without changing it.
//! - [`correlation`]: correlation keys: how an event sent to a key reaches the execution
//!   holding it, and the rules of a key's state.
//! - [`schedule`]: recurring schedules: their ticks and the rules of their state.
//! - [`retry`]: the one retry decision of an activity (retry when, or give up answering what).
//! - [`wire`]: the wire-address table: the topic, key, kind and headers of every record an
//!   effect writes, and what a record read from a topic is.

pub mod activity;
pub mod batch;
pub mod cache;
pub mod concurrency;
pub mod control;
pub mod correlation;
pub mod dlq;
pub mod driver;
pub mod fairness;
pub mod inline;
pub mod list;
pub mod model;
pub mod partitioner;
pub mod processor;
pub mod projection;
pub mod query;
pub mod records;
pub mod replay;
pub mod reset;
pub mod retry;
pub mod rows;
pub mod runner;
pub mod schedule;
#[cfg(feature = "test-util")]
pub mod sim;
pub mod stamp_order;
pub mod state_key;
pub mod timers;
pub mod trace;
pub mod trigger;
pub mod wire;
