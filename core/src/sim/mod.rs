//! Deterministic simulation testing (DST) of the workflow worker's loop
//! ([`crate::driver::Driver`]): the real driver and processor, run against a simulated Kafka
//! cluster (topics, transactions, `read_committed`, a consumer group with generations), a
//! simulated CQL store with a background materialiser, a scripted [`WorkflowRunner`] and an
//! activity service — all in one thread, driven step by step by a seeded scheduler, so that
//! a failing seed replays exactly. See `docs/design/simulation.md`.
//!
//! - [`activity`]: the activity workers (`Faults::activity_workers`): processes running the
//!   real activity core ([`crate::activity`]), and the external route's service;
//!   `checks/activity.rs` their invariants.
//! - [`cluster`]: the Kafka model (what `read_committed` sees, the LSO, transactions and
//!   their fencing, committed offsets, the eager-protocol consumer group).
//! - [`triggers`]: the trigger workers (`Faults::triggers`): processes mapping another
//!   system's topic by the real trigger mapping ([`crate::trigger`]) in transactions (their
//!   state; their turns in `trigger_procs.rs`); `checks/triggers.rs` their invariants.
//! - [`routes`]: paused activity routes (`Faults::route_pauses`): what each worker process
//!   read of `weir.control` and told its core; `checks/routes.rs` their invariant.
//! - [`exhausted`]: retries that end in `paused` (`Faults::exhausted_pauses`): the broken
//!   activities' switches and the operator; `checks/exhausted.rs` their invariants.
//! - [`rates`]: rate-limited activity routes (`Faults::rate_limits`): the run's limit and what
//!   the activity workers' cores held for it; `checks/rates.rs` their invariant.
//! - [`store`]: the store's tables (upserts, last write wins) and the materialiser queue.
//! - `seams`: [`SimLog`], [`SimStore`], [`SimMaterialiser`] — the driver's three seams.
//! - [`workflows`]: scripted workflows on the replay engine, and [`SimRunner`].
//! - [`Sim`]: the scheduler (`scheduler.rs`: the clock, the phases, the seeded choice and
//!   dispatch of each step); `workers.rs` the workflow workers' slots; `workloads/` what the
//!   steps do, one module per feature (clients, crashes, freezes, rebalances, outages, the
//!   activity workers); [`run_seed`] is one random run, [`check`](Sim::check) the invariants,
//!   [`Report`] (`report.rs`) what it found.
//! - [`checks`]: the invariants, one module per concern ([`checks::check`] runs them all).
//! - [`sent`]: what the simulated clients sent (the scheduler records it, [`checks`] holds
//!   the outcome against it).
//! - `exec`: the hand-written single-threaded executor (no async runtime).
//! - [`log`]: the code's own `tracing` events in the trace, when a test asks.
//!
//! [`WorkflowRunner`]: crate::runner::WorkflowRunner

pub mod activity;
mod activity_effects;
mod activity_procs;
pub mod checks;
pub mod cluster;
pub mod config;
pub mod exec;
pub mod exhausted;
pub mod host;
pub mod invariant;
pub mod log;
pub mod process;
pub mod rates;
mod report;
pub mod rng;
pub mod routes;
mod scheduler;
mod seams;
pub mod sent;
mod service;
pub mod store;
mod trigger_procs;
pub mod triggers;
mod workers;
pub mod workflows;
mod workloads;
pub mod world;

pub use checks::Violation;
pub use config::{Faults, SimConfig};
pub use host::SimHost;
pub use report::{CorrelationCounts, EventCounts, Report, ScheduleCounts, StubCounts};
pub use rng::Rng;
pub use scheduler::{Mix, Sim, epoch, run_seed};
pub use seams::{SimLog, SimMaterialiser, SimStore};
pub use sent::{
    KeyedSend, PauseSeen, PauseSend, ResetSend, ScheduleEnd, SimSchedule, StubSend, Submitted,
};
pub use workflows::{SimRunner, Workflow};
