//! The invariants the simulation checks, by name (`docs/design/simulation.md`): what a
//! [`super::checks::Violation`] says does not hold. The checkers are in `checks/`, one module
//! per concern (`checks/activity.rs` for the activity workers); each variant names one concern.

use std::fmt;

/// An invariant of a simulated run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// The worker's loop kept the contracts of its seams (the simulated Kafka, store and clock refused nothing it did).
    SeamContract,
    /// An `Upgraded` entry only where an upgrade request asked for one, at the history length it named.
    Upgrade,
    /// A paused execution takes no step (no `Event` entry) until resumed, finishes only by a
    /// termination or its deadline meanwhile, and is not left paused.
    Pause,
    /// `Paused` and `Resumed` entries alternate, each a request's (or a cancellation's), once,
    /// in the requests' order; a request is dead-lettered or ignored only as the rules say.
    PauseRequests,
    /// A `Reset` entry only as a request asked, one per new execution, which is created once
    /// from the rule's cut of the old history; a refused request makes nothing, an allowed
    /// one is not lost.
    Reset,
    /// Fairness by tenant: once an owner has read a submission, no other tenant's lane has
    /// more than twice as many executions created before it as its own lane had ahead of it,
    /// plus two (round-robin; `checks/fairness.rs`).
    Fairness,
    /// Queries: every query a client sent is answered once (by the settled end), in the batch
    /// that took it; a `progress` answer counts the events of the execution's committed
    /// history below the answer's version; answers to one execution's queries have versions in
    /// the order they were asked; a query past its deadline is never run; nothing is answered
    /// that was not asked (`checks/queries.rs`).
    Queries,
    /// Concurrency slots: no execution's code runs before it holds every slot it claims; a
    /// slot's committed state never holds more than its limit, grants its waiting executions
    /// in the order they came and frees a place only for an execution whose `Finished` is
    /// committed.
    Concurrency,
    /// A batch operation acts on each execution at most once (one request committed, one
    /// outcome), and, once done, gave an outcome to every execution it selected that the store
    /// held when it was started.
    Batch,
    /// A batch's requests keep to its rate: over its committed turns, at most `burst + rate ·
    /// (t − s)` between `s` and `t`.
    BatchRate,
    /// A batch's counts are its committed outcomes, its `acted` ones are its committed
    /// requests, and its state only moves forward.
    BatchProgress,
    /// Every history record is on its execution's partition of `weir.history`.
    HistoryPartition,
    /// An execution's committed history records have contiguous seqs from 0, one record per seq.
    HistorySeqs,
    /// The store holds exactly the committed history (no aborted record, none missing).
    LogVsStore,
    /// An execution's row in the store agrees with its history.
    ExecutionRow,
    /// An execution past its deadline is answered timed out, and took no step after it.
    Deadline,
    /// A delay fires no earlier than it was due, and once.
    Delays,
    /// Every execution submitted finished once the run settled.
    Unfinished,
    /// Every committed history replays on a fresh run to the same steps.
    Replay,
    /// Each execution finished at most once (one `Finished` entry, one result).
    FinishedOnce,
    /// An execution's result is what its workflow computes from its params.
    Result,
    /// No record a worker produced for an input is committed twice.
    OutputOnce,
    /// Only records that could not be processed are dead-lettered, each once, with a reason that fits.
    Dlq,
    /// No partition's committed offset stays behind its end once the run settled.
    StuckPartition,
    /// No transaction is left open once the run settled.
    OpenTransactions,
    /// No timer is left in the store for a finished execution once the run settled.
    TimersLeft,
    /// No timer put lost to a delete of its own owner's that ties with it (same stamp).
    LostTimerPut,
    /// The run settled (every worker caught up) within its bound.
    Unsettled,
    /// Every event for an execution is journalled once, or dead-lettered with a reason.
    Events,
    /// A cancellation that came before its execution's submission is applied when it comes, or dead-lettered.
    EarlyCancel,
    /// Every execution a schedule started belongs to one of its ticks, and no command of it was dead-lettered.
    ScheduleRuns,
    /// A schedule's state on `weir.state` is what folding its commands and ticks gives.
    ScheduleState,
    /// Every tick owed is started, skipped or counted missed, once.
    ScheduleTicks,
    /// A schedule that is due keeps ticking once the run settled.
    ScheduleLiveness,
    /// A correlation key's state on `weir.state` is what its commands and events give.
    CorrelationState,
    /// A correlation key's events reach only an execution that registered it, with their payloads.
    CorrelationDelivery,
    /// No event sent to a correlation key reaches two executions, nor one twice.
    CorrelationOnce,
    /// No event sent to a correlation key is lost.
    CorrelationLost,
    /// Once the run settled, a key's buffered events went to a holder, and its holders finished.
    CorrelationLiveness,
    /// A stub is written at most once (a second write answers `conflict`).
    StubOnce,
    /// A stub's parent journals the value the first write gave.
    StubValue,
    /// No stub write is lost.
    StubLost,
    /// Every stub write is answered once the run settled.
    StubLiveness,
    /// A stub write is answered as its rules say (`ok`, `conflict`, `not-found`).
    StubAnswer,
    /// Each activity is answered at most once by the activity workers.
    ActivityOnce,
    /// No activity request is left unanswered.
    ActivityLost,
    /// Each activity's answer is journalled exactly once in its parent's history.
    ActivityJournal,
    /// No activity route partition is left behind once the run settled.
    ActivityStuck,
    /// No attempt starts after its activity's answer committed.
    ActivityRerun,
    /// No retry attempt runs before its not-before instant.
    ActivityNotBefore,
    /// No attempt of a paused route's request starts at an activity worker whose core was told
    /// the route is paused, and nothing of it runs inline at a workflow worker that read it
    /// paused; a settled run ends with every route resumed and every running worker told so.
    RoutePause,
    /// No activity worker process starts more attempts of a rate-limited route's topic in any
    /// span `[s, t]` than its bucket allows (`burst + per_second · (t − s)`), nothing of such
    /// a route runs inline, and a turn that leaves attempts waiting for a token names a wake
    /// by the time the token comes.
    RateLimit,
    /// No activity id has two requests (`Faults::exhausted_pauses`: a parked activity is
    /// never requested again; inline retries aside), and every parked activity is answered
    /// in the end (`activity-lost` and the results say it).
    ExhaustedRequest,
    /// No attempt of an activity starts (at any process) while the progress its partition
    /// committed last has it parked, unless that process read a retry notice of the activity
    /// (its parent's resume) since the failed attempt that parked it.
    ExhaustedParked,
    /// Every source record of a trigger that maps starts its execution, and only such
    /// records start one; every one that does not is dead-lettered, with its reason.
    TriggerLost,
    /// A source record's submission is committed once per reading of it (once, unless the
    /// group's offsets were reset), and so is its dead letter.
    TriggerOnce,
    /// A record of `weir.state` that does not decode is copied to the DLQ once and its key
    /// tombstoned after it, if Weir could have written it; else it is left in place.
    CorruptState,
    /// Every history record says when it happened, in seq order; a creation is not before its
    /// submission, a finish is when its record says, a child ran after its request and before
    /// its answer was journalled; the store keeps each record's own time.
    Timings,
}

impl Invariant {
    pub const ALL: [Invariant; 58] = [
        Invariant::SeamContract,
        Invariant::Upgrade,
        Invariant::Pause,
        Invariant::PauseRequests,
        Invariant::Reset,
        Invariant::Fairness,
        Invariant::Queries,
        Invariant::Concurrency,
        Invariant::Batch,
        Invariant::BatchRate,
        Invariant::BatchProgress,
        Invariant::HistoryPartition,
        Invariant::HistorySeqs,
        Invariant::LogVsStore,
        Invariant::ExecutionRow,
        Invariant::Deadline,
        Invariant::Delays,
        Invariant::Unfinished,
        Invariant::Replay,
        Invariant::FinishedOnce,
        Invariant::Result,
        Invariant::OutputOnce,
        Invariant::Dlq,
        Invariant::StuckPartition,
        Invariant::OpenTransactions,
        Invariant::TimersLeft,
        Invariant::LostTimerPut,
        Invariant::Unsettled,
        Invariant::Events,
        Invariant::EarlyCancel,
        Invariant::ScheduleRuns,
        Invariant::ScheduleState,
        Invariant::ScheduleTicks,
        Invariant::ScheduleLiveness,
        Invariant::CorrelationState,
        Invariant::CorrelationDelivery,
        Invariant::CorrelationOnce,
        Invariant::CorrelationLost,
        Invariant::CorrelationLiveness,
        Invariant::StubOnce,
        Invariant::StubValue,
        Invariant::StubLost,
        Invariant::StubLiveness,
        Invariant::StubAnswer,
        Invariant::ActivityOnce,
        Invariant::ActivityLost,
        Invariant::ActivityJournal,
        Invariant::ActivityStuck,
        Invariant::ActivityRerun,
        Invariant::ActivityNotBefore,
        Invariant::RoutePause,
        Invariant::RateLimit,
        Invariant::ExhaustedRequest,
        Invariant::ExhaustedParked,
        Invariant::TriggerLost,
        Invariant::TriggerOnce,
        Invariant::CorruptState,
        Invariant::Timings,
    ];

    /// Its name in reports (kebab-case).
    pub fn name(self) -> &'static str {
        match self {
            Invariant::SeamContract => "seam-contract",
            Invariant::Upgrade => "upgrade",
            Invariant::Pause => "pause",
            Invariant::PauseRequests => "pause-requests",
            Invariant::Reset => "reset",
            Invariant::Fairness => "fairness",
            Invariant::Queries => "queries",
            Invariant::Concurrency => "concurrency",
            Invariant::Batch => "batch",
            Invariant::BatchRate => "batch-rate",
            Invariant::BatchProgress => "batch-progress",
            Invariant::HistoryPartition => "history-partition",
            Invariant::HistorySeqs => "history-seqs",
            Invariant::LogVsStore => "log-vs-store",
            Invariant::ExecutionRow => "execution-row",
            Invariant::Deadline => "deadline",
            Invariant::Delays => "delays",
            Invariant::Unfinished => "unfinished",
            Invariant::Replay => "replay",
            Invariant::FinishedOnce => "finished-once",
            Invariant::Result => "result",
            Invariant::OutputOnce => "output-once",
            Invariant::Dlq => "dlq",
            Invariant::StuckPartition => "stuck-partition",
            Invariant::OpenTransactions => "open-transactions",
            Invariant::TimersLeft => "timers-left",
            Invariant::LostTimerPut => "lost-timer-put",
            Invariant::Unsettled => "unsettled",
            Invariant::Events => "events",
            Invariant::EarlyCancel => "early-cancel",
            Invariant::ScheduleRuns => "schedule-runs",
            Invariant::ScheduleState => "schedule-state",
            Invariant::ScheduleTicks => "schedule-ticks",
            Invariant::ScheduleLiveness => "schedule-liveness",
            Invariant::CorrelationState => "correlation-state",
            Invariant::CorrelationDelivery => "correlation-delivery",
            Invariant::CorrelationOnce => "correlation-once",
            Invariant::CorrelationLost => "correlation-lost",
            Invariant::CorrelationLiveness => "correlation-liveness",
            Invariant::StubOnce => "stub-once",
            Invariant::StubValue => "stub-value",
            Invariant::StubLost => "stub-lost",
            Invariant::StubLiveness => "stub-liveness",
            Invariant::StubAnswer => "stub-answer",
            Invariant::ActivityOnce => "activity-once",
            Invariant::ActivityLost => "activity-lost",
            Invariant::ActivityJournal => "activity-journal",
            Invariant::ActivityStuck => "activity-stuck",
            Invariant::ActivityRerun => "activity-rerun",
            Invariant::TriggerLost => "trigger-lost",
            Invariant::TriggerOnce => "trigger-once",
            Invariant::CorruptState => "corrupt-state",
            Invariant::Timings => "timings",
            Invariant::ActivityNotBefore => "activity-not-before",
            Invariant::RoutePause => "route-pause",
            Invariant::RateLimit => "rate-limit",
            Invariant::ExhaustedRequest => "exhausted-request",
            Invariant::ExhaustedParked => "exhausted-parked",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_kebab_case() {
        let mut seen = std::collections::BTreeSet::new();
        for invariant in Invariant::ALL {
            let name = invariant.name();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
                    && !name.starts_with('-')
                    && !name.ends_with('-'),
                "{name}"
            );
        }
    }
}
