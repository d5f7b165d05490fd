//! Retries that end in `paused` (`Faults::exhausted_pauses`; `on_exhausted = "pause"`, issue
//! 35 item 1): the activity route's policy pauses ([`Exhausted::policy`]), and the activities
//! that are [`broken`] fail every attempt until an operator flips their switch
//! ([`Exhausted::fails`]), each failure with a reason unique in the run ([`switch_off`]), which
//! the parent's pause carries. The operator (`workloads/exhausted.rs`) reads the pauses the
//! activity workers sent and, for each, flips the switch (or not), resumes the parent (or
//! cancels it); once the faults stop every switch is flipped.
//!
//! What the checks need of it is in the activity log (`parks`, `parks_committed`,
//! `notices`) and in [`Exhausted::counts`]; `checks/exhausted.rs` holds the invariants.

use std::collections::BTreeSet;

use chrono::TimeDelta;

use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::retry::{OnExhausted, RetryPolicy};

/// What the operator did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorCounts {
    /// Pauses the activity workers sent that the operator read.
    pub read: u64,
    /// Parents resumed with the activity's switch flipped…
    pub fixed: u64,
    /// …or not flipped (the activity parks again).
    pub unfixed: u64,
    /// Parents cancelled (or terminated) instead.
    pub cancelled: u64,
    /// Parked requests a take-over restored from the committed metadata.
    pub restored_parked: u64,
}

/// The switches and the operator's doings of a run.
#[derive(Debug, Clone, Default)]
pub struct Exhausted {
    /// The class is on: the route's policy pauses, broken activities fail.
    pub on: bool,
    /// Activities whose switch the operator flipped: their attempts answer.
    pub fixed: BTreeSet<ExecutionId>,
    /// The broken activities whose switch is off now: at most [`MAX_FAILING`] at once.
    pub failing: BTreeSet<ExecutionId>,
    /// Every switch is flipped (the faults stopped).
    pub all_fixed: bool,
    /// The activity workers' pauses the operator read, by (partition, offset) of
    /// `weir.responses`.
    pub handled: BTreeSet<(i32, i64)>,
    pub counts: OperatorCounts,
}

/// The most activities failing for their switch at once: half of what a partition parks
/// (`activity::MAX_PARKED`), so that the runs stay within the policy (the answer of one
/// exhausted past that limit is the core's tests').
pub const MAX_FAILING: usize = crate::activity::MAX_PARKED / 2;

/// Whether `child` is broken (about one activity in three, independent of how many attempts
/// of it fail otherwise, `activity::failures`).
pub fn broken(child: &ExecutionId) -> bool {
    (child.stable_hash() / 3).is_multiple_of(3)
}

/// A failed attempt of a broken activity, its reason unique in the run (the activity, the
/// attempt, the process and the instant): the pause of its parent carries it.
pub fn switch_off(child: &ExecutionId, attempt: u32, pid: u64, at: TimeDelta) -> ExecutionResult {
    ExecutionResult::ExecutionError(ExecutionError::new(
        ExecutionErrorKind::Trap,
        format!(
            "attempt {attempt} of {child} by p{pid} at +{}ms failed: its switch is off (simulated)",
            at.num_milliseconds()
        ),
    ))
}

impl Exhausted {
    /// The activity route's retry policy: `base` (the simulated activity's,
    /// `sim::activity::retry_policy`), pausing when the class is on.
    pub fn policy(&self, base: RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            on_exhausted: if self.on {
                OnExhausted::Pause
            } else {
                OnExhausted::Answer
            },
            ..base
        }
    }

    /// Whether an attempt of `child` started now fails for its switch: a broken activity
    /// fails from its first attempt until its switch is flipped, if fewer than
    /// [`MAX_FAILING`] others fail then (else it works).
    pub fn fails(&mut self, child: &ExecutionId) -> bool {
        if !self.on || self.all_fixed || !broken(child) || self.fixed.contains(child) {
            return false;
        }
        if self.failing.contains(child) {
            return true;
        }
        if self.failing.len() >= MAX_FAILING {
            return false;
        }
        self.failing.insert(child.clone())
    }

    /// The operator flipped `child`'s switch (or cancelled its parent: it fails no more).
    pub fn fix(&mut self, child: &ExecutionId) {
        self.failing.remove(child);
        self.fixed.insert(child.clone());
    }
}

/// The activity a pause's reason names (`activity <id> (<ffqn>) exhausted …`, as the activity
/// core writes it).
pub fn named_activity(reason: &str) -> Option<ExecutionId> {
    reason
        .strip_prefix("activity ")?
        .split_once(' ')?
        .0
        .parse()
        .ok()
}
