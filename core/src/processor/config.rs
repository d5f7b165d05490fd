//! The processor's settings, counters and error.

use crate::projection::ProjectionError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessorError {
    /// The changelog of an execution breaks the projection's rules: a bug or a corrupt store.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// Settings of the processor (their defaults live with the worker's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorConfig {
    /// Bytes the cached executions may hold (their views and parked runs, as
    /// [`Processor::evict`] weighs them); beyond, the cache policy evicts.
    pub cache_bytes: u64,
    /// At most this many parked runs (a backstop under the byte budget).
    pub cache_size: usize,
    /// Input records larger than this are dead-lettered.
    pub max_record_bytes: usize,
    /// Partitions of the co-partitioned topics (submissions, responses, history).
    pub partitions: i32,
    /// How long an event for an execution that does not exist waits for its submission
    /// (default [`correlation::EARLY_EVENT_WAIT`]) before it is dead-lettered.
    pub early_event_wait: chrono::Duration,
}

impl ProcessorConfig {
    /// A `cache_size` that caps nothing (only the byte budget bounds the cache).
    pub const UNCAPPED: usize = usize::MAX;
}

/// Counters of what the processor did (cumulative; the driver exports them as metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessorStats {
    pub created: u64,
    pub finished: u64,
    /// Runs rebuilt from the store by replay (the cold path).
    pub replayed: u64,
    /// Responses delivered to a parked run (the hot path).
    pub hot_deliveries: u64,
    pub dead_letters: u64,
    /// Inputs for executions whose stored history cannot be read or rebuilt.
    pub unreadable: u64,
    /// Starts deferred because the host or the store could not run them then (a full instance
    /// pool, a component a rolling deploy has not brought yet, an incomplete read).
    pub deferred_starts: u64,
    /// Parked runs dropped to make room for a run the host had no room for.
    pub evicted_for_room: u64,
    /// Events taken by an execution (delivered to a wait or buffered).
    pub events_received: u64,
    /// Events dropped because their execution had them already (same event id).
    pub events_duplicate: u64,
    /// Events kept for an execution that did not exist yet (its submission still to come).
    pub events_early: u64,
    /// Cancellations kept for an execution that did not exist yet (its submission still to
    /// come).
    pub cancels_early: u64,
    /// Buffered events no wait took before their execution finished.
    pub events_unclaimed: u64,
    /// Executions cancelled or terminated.
    pub cancelled: u64,
    /// Executions paused and resumed (`weir pause`, `weir resume`).
    pub paused: u64,
    pub resumed: u64,
    /// Queries answered, with a value or an error ([`crate::query`]).
    pub queries: u64,
    /// Executions reset (`weir reset`): new executions started from their histories.
    pub resets: u64,
    /// Executions that timed out at their deadline (or were submitted past it).
    pub deadlines_passed: u64,
    /// Schedule ticks that started an execution, were skipped for an overlap, were missed
    /// (owed for longer than the catch-up window).
    pub ticks_started: u64,
    pub ticks_skipped: u64,
    pub ticks_missed: u64,
    /// Events sent to correlation keys: forwarded to the key's holder, or buffered in the
    /// key until one registers.
    pub keyed_events_forwarded: u64,
    pub keyed_events_buffered: u64,
    /// Forwarded events that found their execution finished and went back to their key.
    pub keyed_events_returned: u64,
    /// Places in concurrency slots granted to executions, and refused (a full queue).
    pub slots_granted: u64,
    pub slots_refused: u64,
    /// Records of `weir.state` that did not decode, copied to the DLQ and their keys
    /// forgotten ([`super::corrupt_state`]; counted when taken over, written by the first
    /// batch).
    pub corrupt_states_dropped: u64,
    /// Remembered event ids forgotten before their window ended, a key having forwarded more
    /// than [`crate::correlation::MAX_REMEMBERED`] within it.
    pub remembered_cut: u64,
    /// Requests sent by batch operations ([`super::batches`]).
    pub batch_requests: u64,
}
