//! What a workflow reads without a host call of its own: the clocks and the entropy that
//! interpreted guests (StarlingMonkey under `componentize-js`, CPython under
//! `componentize-py`) take from WASI. The WASM host serves `wasi:clocks` and `wasi:random`
//! from here (`docs/design/deterministic-wasi.md`).
//!
//! Invariants, which make a run hot, a cold rebuild and a replay from the journal read the
//! same values at the same points:
//! - **Nothing is recorded.** A read adds no history event, so a build that reads the clock
//!   (an interpreter may at any time) replays a history recorded by a build that never does.
//! - **The clock is the execution's recorded time**: its creation time, moved forward to the
//!   latest time told by a response it has consumed: a delay's recorded expiry, the end of
//!   the activity attempt or child that answered (when the answerer told it). It never goes
//!   back, and it stands still between consumptions: time does not pass within a step.
//!   An event, and an answer whose answerer did not say when it ran, leave it where it is.
//! - **The entropy is a stream per step**: positioned at the execution's seed and the number
//!   of responses consumed so far, restarted at every consumption. A step draws the same
//!   values whenever it runs.
//!
//! These depend only on which responses the run has consumed, in which order, and on the
//! recorded history, which replay reproduces exactly.

use chrono::{DateTime, Utc};

use super::engine::Replay;
use super::rng::{Draw, StepEntropy};

/// Keeps the guest's entropy apart from the engine's own fresh draws (random values,
/// generated ids), which use the same seed.
const ENTROPY_SALT: u64 = 0x5745_4952_5741_5349; // "WEIRWASI"

impl Replay {
    /// The execution's recorded time: see the [module docs](self).
    pub fn recorded_time(&self) -> DateTime<Utc> {
        let created_at = self.execution.created_at;
        self.join_sets
            .told()
            .map_or(created_at, |t| t.max(created_at))
    }

    /// Nanoseconds since the execution was created, by [`Replay::recorded_time`]: a monotonic
    /// clock that never decreases and reads the same on replay.
    pub fn recorded_monotonic_nanos(&self) -> u64 {
        let elapsed = self.recorded_time() - self.execution.created_at;
        elapsed
            .num_nanoseconds()
            .map_or(u64::MAX, |n| u64::try_from(n).unwrap_or(0))
    }

    /// The next value of the current step's entropy stream.
    pub fn entropy_u64(&mut self) -> u64 {
        let step = self.join_sets.consumed();
        let seed = self.seed ^ ENTROPY_SALT;
        let entropy = match &mut self.entropy {
            Some(entropy) if entropy.step == step => entropy,
            slot => slot.insert(StepEntropy {
                step,
                draw: Draw::at(seed, step),
            }),
        };
        entropy.draw.next_u64()
    }

    /// Fills `buf` from the current step's entropy stream.
    pub fn fill_entropy(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.entropy_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}
