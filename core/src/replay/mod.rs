//! The deterministic history engine (`docs/design/vocabulary.md` and `docs/design/partition-processor.md`): turns a workflow's host calls into history
//! events, matches them against the recorded history on replay, detects nondeterminism, and
//! yields the new events and the outputs to emit. Pure: no I/O, no clock (the host passes
//! `now`), no threads; the WASM host and the Kafka worker drive it.
//!
//! # Driving an execution
//!
//! ```text
//! let mut engine = Replay::new(execution, recorded_history, journalled_responses, now)?;
//! // run the workflow; each host import calls one engine method:
//! //   create_join_set / create_named_join_set / submit / submit_delay / join_next /
//! //   await_next / get / call / sleep / random_u64 / random_string / schedule / stub / close
//! // and when the function returns:  finish(result)   (or fail(error) on a trap, a limit …)
//! let effects = engine.take_effects();   // new events + outputs: commit them in one transaction
//! ```
//!
//! The same code serves a new execution (empty history), a cold rebuild (the whole recorded
//! history and every journalled response, in arrival order) and the hot path (an engine kept
//! in memory while its workflow is parked).
//!
//! - **Replay or fresh.** Each call either meets the recorded event at the cursor (replay:
//!   it is compared — see [`Mismatch`] — and its recorded outcome returned, no event added) or
//!   runs past the end of the history (fresh: a new event is appended, outputs are emitted).
//! - **Blocking.** [`Replay::join_next`], [`Replay::await_next`], [`Replay::call`],
//!   [`Replay::sleep`], [`Replay::close`] and [`Replay::finish`] return
//!   [`Progress::Blocked`] when the join set has no response yet. The host parks the workflow
//!   (the WASM call stays suspended), feeds arriving responses to
//!   [`Replay::deliver_response`] — which says whether the blocked call should wake — and
//!   then retries *exactly the same call*; the retry resumes it without recording anything
//!   again. Any other call while blocked is a [`UsageError::RetryMismatch`]. Hot path and
//!   cold path produce the same events and outcomes.
//! - **Responses** are queued per join set, in arrival order, deduplicated by child or delay
//!   id; join-next takes the head of its join set's queue. Responses given to
//!   [`Replay::new`] are sorted into their queues lazily, as join-nexts need them, so a
//!   replay streams through history and journal together. Per-join-set queues, request
//!   tables and slots found from the counter in generated and one-off ids keep replay linear
//!   in the history length.
//! - **Outputs** ([`Output`]) are emitted only by calls that run fresh: child submissions,
//!   delay requests, schedules, stub writes, cancellations, and [`Output::Finished`].
//!   Commit them together with the new events ([`Replay::take_effects`]); a later replay of
//!   those events emits nothing again. Cancellations by closing and the finish have no event
//!   of their own: they are emitted whenever the run reaches them past the last recorded
//!   event, so a run redone after an aborted transaction emits them again, as it must.
//! - **Finishing** closes join sets with unawaited requests in reverse creation order
//!   (activities, stubs and delays cancelled, child workflows awaited), then requires the
//!   whole history to have been replayed.
//! - **Errors.** Values the workflow handles (all-processed, function mismatch, name conflict,
//!   stub conflict, cancelled sleep) are returned inside `Ok`. [`ReplayError`] ends the run:
//!   after [`ReplayError::Nondeterminism`] the engine has finished the execution with
//!   `nondeterminism-detected` (the error names the history version, the expected call and
//!   the recorded event, and the [`Output::Finished`] is in the outputs); trap the instance
//!   and commit the effects. [`ReplayError::MissingResponse`] and
//!   [`ReplayError::ResponseWithoutRequest`] mean inconsistent input (reload);
//!   [`UsageError`] is a host bug.
//! - **Fresh values** (random draws, scheduled ids) derive from the execution id's stable hash
//!   and the version, delays and schedules from `now`: a fresh run is reproducible.
//!
//! Files: `engine.rs` (state, cursor, delivery, effects), `calls.rs` (non-blocking calls),
//! `blocking.rs`, `closing.rs`, `join_sets.rs` (per-join-set state), `matching.rs`
//! (comparisons), `outcome.rs`, `error.rs`, `rng.rs`, `hash.rs`, `guest.rs` (the clock and
//! entropy a guest reads through WASI); tests in `tests/`.

mod blocking;
mod calls;
mod closing;
mod engine;
mod error;
mod guest;
mod hash;
mod join_sets;
mod matching;
mod outcome;
mod rng;

#[cfg(test)]
mod tests;

pub use calls::MAX_RANDOM_STRING_LEN;
pub use engine::{Execution, Replay};
pub use error::{DeliveryError, Expected, Mismatch, Nondeterminism, ReplayError, UsageError};
pub use outcome::{
    AllProcessed, AwaitNextError, Blocked, Cancelled, CreateJoinSetError, Delivery, Effects,
    GetError, Joined, Output, Progress, StubError, VersionedEvent,
};
