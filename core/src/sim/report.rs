//! What a run found: the [`Report`] (its violations, trace, stats and findings), and the
//! tallies of how much of each feature's rules a run exercised, read from the committed log
//! ([`EventCounts`], [`ScheduleCounts`], [`CorrelationCounts`], [`StubCounts`]; a test sums
//! them over its seeds).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};

use super::checks::Violation;
use super::cluster::{Payload, Topic};
use super::config::{Faults, SimConfig};
use super::sent::StubSend;
use super::world::{Stats, World};

/// `+=` for a run's tallies, field by field: a test sums them over seeds.
macro_rules! tally_sum {
    ($t:ident { $($field:ident),* $(,)? }) => {
        impl std::ops::AddAssign for $t {
            fn add_assign(&mut self, other: $t) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

tally_sum!(CorrelationCounts {
    sent,
    registered,
    queued,
    forwarded,
    cross_partition,
    returned,
    buffered,
    taken,
    unclaimed,
});
tally_sum!(EventCounts {
    sent,
    kept,
    taken,
    cancelled,
    executions_cancelled,
    with_deadline,
    timed_out,
    held_early,
    waited,
    cancels_held_early,
});
tally_sum!(ScheduleCounts {
    started,
    skipped,
    missed,
    paused,
    generations,
    cancelled,
});

tally_sum!(StubCounts {
    stubs,
    written,
    cancelled,
    ok,
    ok_again,
    conflicts,
    not_found,
    outside,
    outside_taken,
    outside_again,
    outside_conflicts,
    outside_refused,
    after_finish,
});

/// What the stubs of a run did, read from the committed log (`checks::stub_model`) and the
/// writes the scheduler made: how much of the stub rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StubCounts {
    /// Stub requests committed; those that hold a written value; those that hold a
    /// cancellation (a race's delay came first, the parent was cancelled or timed out).
    pub stubs: u64,
    pub written: u64,
    pub cancelled: u64,
    /// Writers' requests answered `ok` (the first write that fits), `ok` for the value held
    /// already, `conflict`, `not-found`.
    pub ok: u64,
    pub ok_again: u64,
    pub conflicts: u64,
    pub not_found: u64,
    /// Writes from outside; those journalled, those of the value held already (nothing),
    /// those dead-lettered `conflict` and `refused`.
    pub outside: u64,
    pub outside_taken: u64,
    pub outside_again: u64,
    pub outside_conflicts: u64,
    pub outside_refused: u64,
    /// Writes sent once the target's parent had finished (its `Finished` committed).
    pub after_finish: u64,
}

impl StubCounts {
    pub(super) fn of(w: &World, sends: &[StubSend]) -> Self {
        use super::checks::StubExpect;
        use crate::records::DlqReason;
        let model = super::checks::stub_model(w);
        let mut counts = StubCounts {
            stubs: model.stubs.len() as u64,
            after_finish: sends.iter().filter(|s| s.after_finish).count() as u64,
            ..StubCounts::default()
        };
        for s in model.stubs.values() {
            match s.values.first() {
                Some(ExecutionResult::ExecutionError(e))
                    if e.kind == ExecutionErrorKind::Cancelled =>
                {
                    counts.cancelled += 1
                }
                Some(_) => counts.written += 1,
                None => {}
            }
        }
        for write in &model.writes {
            if write.request.is_some() {
                match write.answers.first() {
                    Some(ExecutionResult::Ok(_)) if write.expect == StubExpect::Again => {
                        counts.ok_again += 1
                    }
                    Some(ExecutionResult::Ok(_)) => counts.ok += 1,
                    Some(ExecutionResult::Err(v)) if v == "conflict" => counts.conflicts += 1,
                    Some(ExecutionResult::Err(v)) if v == "not-found" => counts.not_found += 1,
                    _ => {}
                }
                continue;
            }
            counts.outside += 1;
            match (write.dead.first(), write.expect) {
                (Some(DlqReason::Conflict), _) => counts.outside_conflicts += 1,
                (Some(DlqReason::Refused), _) => counts.outside_refused += 1,
                (None, StubExpect::Taken) => counts.outside_taken += 1,
                (None, StubExpect::Again) => counts.outside_again += 1,
                _ => {}
            }
        }
        counts
    }
}

/// What the correlation keys of a run did, read from the committed log: how much of the
/// correlation rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CorrelationCounts {
    /// Events clients sent to keys (records; an id sent twice counts twice).
    pub sent: u64,
    /// Registrations (`Register` commands) and those of a key another execution held: they
    /// queued.
    pub registered: u64,
    pub queued: u64,
    /// Events a key forwarded to its holder, and those whose holder is on another partition
    /// than the key.
    pub forwarded: u64,
    pub cross_partition: u64,
    /// Forwarded events that found their holder finished and came back to the key.
    pub returned: u64,
    /// Distinct events that waited in a key's buffer at some point.
    pub buffered: u64,
    /// Events of keys taken by a wait (`EventDelivered` received), and kept by an execution
    /// that finished without taking them.
    pub taken: u64,
    pub unclaimed: u64,
}

impl CorrelationCounts {
    pub(super) fn of(w: &World) -> Self {
        use crate::model::{EventOutcome, Response};
        use crate::records::HistoryEntry;
        let mut counts = CorrelationCounts::default();
        let partitions = w.cluster.partitions(Topic::History);
        for (partition, r) in w.cluster.committed_records(Topic::Events) {
            match &r.payload {
                Some(Payload::KeyedEvent(e)) if e.returned_by.is_none() => counts.sent += 1,
                Some(Payload::KeyedEvent(_)) => counts.returned += 1,
                Some(Payload::Event(e)) if e.correlation_key.is_some() => {
                    counts.forwarded += 1;
                    let key = e.correlation_key.as_deref().unwrap_or_default();
                    let home = crate::partitioner::partition_for_key(key.as_bytes(), partitions);
                    if home != partition {
                        counts.cross_partition += 1;
                    }
                }
                _ => {}
            }
        }
        let mut held: BTreeMap<&str, usize> = BTreeMap::new();
        let mut buffered = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::State) {
            if let (Some(key), Some(Payload::Correlation(state))) = (&r.key, &r.payload) {
                let holders = state.as_ref().map_or(0, |s| s.holders.len());
                if holders > held.get(key.as_str()).copied().unwrap_or(0) && holders > 1 {
                    counts.queued += 1;
                }
                held.insert(key, holders);
                for b in state.iter().flat_map(|s| &s.buffered) {
                    buffered.insert((key.as_str(), b.event.event_id.as_str()));
                }
            }
        }
        counts.buffered = buffered.len() as u64;
        counts.registered = w
            .cluster
            .committed_records(Topic::Responses)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::CorrelationCommand(c))
                    if c.action == crate::correlation::CorrelationAction::Register)
            })
            .count() as u64;
        let mut seen = std::collections::BTreeSet::new();
        let mut kept: BTreeMap<&ExecutionId, Vec<&str>> = BTreeMap::new();
        let mut taken: std::collections::BTreeSet<(&ExecutionId, &str)> = Default::default();
        let mut finished = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((record.execution_id.clone(), record.seq)) {
                continue;
            }
            let id = &record.execution_id;
            match &record.entry {
                HistoryEntry::EventReceived(e) if e.event_id.starts_with("kev-") => {
                    kept.entry(id).or_default().push(&e.event_id);
                }
                HistoryEntry::ResponseAppended(Response::EventDelivered {
                    outcome: EventOutcome::Received { event_id, .. },
                    ..
                }) if event_id.starts_with("kev-") => {
                    counts.taken += 1;
                    taken.insert((id, event_id.as_str()));
                }
                HistoryEntry::Finished { .. } => {
                    finished.insert(id);
                }
                _ => {}
            }
        }
        counts.unclaimed = kept
            .iter()
            .filter(|(id, _)| finished.contains(*id))
            .flat_map(|(id, events)| events.iter().map(move |e| (*id, *e)))
            .filter(|k| !taken.contains(k))
            .count() as u64;
        counts
    }
}

/// What became of the events of a run, read from the committed log: how much of the event
/// rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Event records on the events topic.
    pub sent: u64,
    /// `EventReceived` entries: events that came before a wait of their name.
    pub kept: u64,
    /// Events taken by a wait (`EventDelivered` received).
    pub taken: u64,
    /// Waits cancelled (their join set closed first: a timeout won; or a cancellation).
    pub cancelled: u64,
    /// Executions asked to stop (`CancelRequested` entries).
    pub executions_cancelled: u64,
    /// Executions with a deadline (their `Created`), and those timed out by it.
    pub with_deadline: u64,
    pub timed_out: u64,
    /// States written for executions that did not exist yet (an event came first).
    pub held_early: u64,
    /// Events sent back after waiting for their execution's submission in vain.
    pub waited: u64,
    /// States written holding a cancellation of an execution that did not exist yet.
    pub cancels_held_early: u64,
}

impl EventCounts {
    pub(super) fn of(w: &World) -> Self {
        use crate::model::{EventOutcome, Response};
        use crate::records::HistoryEntry;
        let mut counts = EventCounts {
            sent: w.cluster.committed_records(Topic::Events).count() as u64,
            waited: w
                .cluster
                .committed_records(Topic::Events)
                .filter(|(_, r)| matches!(&r.payload, Some(Payload::Event(e)) if e.waited_until.is_some()))
                .count() as u64,
            held_early: w
                .cluster
                .committed_records(Topic::State)
                .filter(|(_, r)| {
                    r.key.as_deref().is_some_and(|k| {
                        crate::state_key::StateKey::for_events(k).is_ok_and(|k| k.execution().is_some())
                    })
                        && matches!(&r.payload, Some(Payload::Correlation(Some(_))))
                })
                .count() as u64,
            cancels_held_early: w
                .cluster
                .committed_records(Topic::State)
                .filter(|(_, r)| {
                    matches!(&r.payload, Some(Payload::Correlation(Some(s))) if s.cancel.is_some())
                })
                .count() as u64,
            ..EventCounts::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((record.execution_id.clone(), record.seq)) {
                continue;
            }
            match &record.entry {
                HistoryEntry::EventReceived(_) => counts.kept += 1,
                HistoryEntry::CancelRequested { .. } => counts.executions_cancelled += 1,
                HistoryEntry::Created(c) if c.deadline.is_some() => counts.with_deadline += 1,
                HistoryEntry::Finished {
                    result: crate::model::ExecutionResult::ExecutionError(e),
                    ..
                } if e.kind == crate::model::ExecutionErrorKind::TimedOut => counts.timed_out += 1,
                HistoryEntry::ResponseAppended(Response::EventDelivered { outcome, .. }) => {
                    match outcome {
                        EventOutcome::Received { .. } => counts.taken += 1,
                        EventOutcome::Cancelled => counts.cancelled += 1,
                    }
                }
                _ => {}
            }
        }
        counts
    }
}

/// What the schedules of a run did, read from their committed states on `weir.state`: how
/// much of the schedule rules a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleCounts {
    /// Ticks started, skipped (overlap `skip`) and missed (beyond the catch-up window), as
    /// the last state of each generation counts them.
    pub started: u64,
    pub skipped: u64,
    pub missed: u64,
    /// Pauses taken (an active state followed by a paused one).
    pub paused: u64,
    /// Generations (a create, or a create after a delete).
    pub generations: u64,
    /// Runs cancelled by a later tick (overlap `cancel-previous`).
    pub cancelled: u64,
}

impl ScheduleCounts {
    pub(super) fn of(w: &World) -> Self {
        use crate::schedule::{ScheduleState, Status};
        let mut counts = ScheduleCounts::default();
        let mut last: BTreeMap<&str, &ScheduleState> = BTreeMap::new();
        let add = |counts: &mut ScheduleCounts, s: &ScheduleState| {
            counts.started += s.started;
            counts.skipped += s.skipped;
            counts.missed += s.missed;
        };
        for (_, r) in w.cluster.committed_records(Topic::State) {
            let (Some(key), Some(Payload::Schedule(state))) = (&r.key, &r.payload) else {
                continue;
            };
            let previous = last.remove(key.as_str());
            match (previous, state) {
                (Some(p), None) => add(&mut counts, p),
                (None, Some(_)) => counts.generations += 1,
                (Some(p), Some(s)) if p.status == Status::Active && s.status == Status::Paused => {
                    counts.paused += 1;
                }
                _ => {}
            }
            if let Some(s) = state {
                last.insert(key, s);
            }
        }
        for s in last.values() {
            add(&mut counts, s);
        }
        counts.cancelled = w
            .cluster
            .committed_records(Topic::Submissions)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::Cancel(c)) if c.reason.contains("cancel-previous"))
            })
            .count() as u64;
        counts
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub config: SimConfig,
    pub faults: Faults,
    pub settled: bool,
    pub violations: Vec<Violation>,
    pub trace: Vec<String>,
    pub stats: Stats,
    pub events: EventCounts,
    pub schedules: ScheduleCounts,
    pub correlation: CorrelationCounts,
    pub stubs: StubCounts,
    pub upgrades: super::checks::UpgradeCounts,
    /// What the pauses and resumes did (`Faults::pause_resume`).
    pub pauses: super::checks::PauseCounts,
    /// What the batch operations did (`Faults::batches`).
    pub batches: super::checks::BatchCounts,
    /// What the resets did (`Faults::resets`).
    pub resets: super::checks::ResetCounts,
    /// What the fairness check saw (`Faults::fairness`).
    pub fairness: super::checks::FairnessCounts,
    /// What the queries check saw (`Faults::queries`).
    pub queries: super::checks::QueryCounts,
    /// What the concurrency slots did (`Faults::concurrency`).
    pub concurrency: super::checks::ConcurrencyCounts,
    /// What the paused routes did (`Faults::route_pauses`).
    pub routes: super::checks::RouteCounts,
    /// What the rate limits did (`Faults::rate_limits`).
    pub rates: super::checks::RateCounts,
    /// What the retries that end in `paused` did (`Faults::exhausted_pauses`).
    pub exhausted: super::checks::ExhaustedCounts,
    /// What the activity workers did (`Faults::activity_workers`).
    pub activity: super::activity::ActivityCounts,
    /// What the trigger workers did (`Faults::triggers`).
    pub triggers: super::triggers::TriggerCounts,
    pub executions: usize,
    /// Known holes the run entered: `(tag, first occurrence, count)`.
    pub findings: Vec<(&'static str, String, u64)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The invariants that failed, by name.
    pub fn failed_invariants(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> =
            self.violations.iter().map(|v| v.invariant.name()).collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// How to run exactly this again.
    pub fn reproduce(&self) -> String {
        format!(
            "WEIR_DST_SEED={} WEIR_DST_FAULTS={} cargo test -p weir-core --features test-util --test dst dst_short -- --nocapture",
            self.seed, self.faults
        )
    }

    pub fn summary(&self) -> String {
        let s = &self.stats;
        format!(
            "seed {}: {} executions, {} commits, {} refused (generation), {} fenced, {} txns timed out, \
             {} kills, {} error exits, {} freezes, {} rebalances, {} store errors, {} commits while the store was down, \
             {} duplicate answers; {}",
            self.seed,
            self.executions,
            s.commits,
            s.refused_generation,
            s.fenced,
            s.timed_out_txns,
            s.crashes,
            s.exits,
            s.freezes,
            s.rebalances,
            s.store_errors,
            s.commits_while_store_down,
            s.duplicate_answers,
            if self.passed() {
                "ok".to_owned()
            } else {
                format!(
                    "FAILED: {} (findings: {})",
                    self.failed_invariants().join(", "),
                    self.findings
                        .iter()
                        .map(|(t, _, _)| *t)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )
    }

    /// The full report: violations, then the trace (its last `tail` lines; all with `None`).
    pub fn render(&self, tail: Option<usize>) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.summary());
        let _ = writeln!(out, "config: {:?}", self.config);
        let _ = writeln!(out, "faults: {}", self.faults);
        let _ = writeln!(out, "settled: {}", self.settled);
        let _ = writeln!(out, "reproduce: {}", self.reproduce());
        for v in &self.violations {
            let _ = writeln!(out, "VIOLATION [{}] {}", v.invariant, v.detail);
        }
        for (tag, first, n) in &self.findings {
            let _ = writeln!(out, "FINDING [{tag}] ×{n}, first at {first}");
        }
        let skip = tail.map_or(0, |t| self.trace.len().saturating_sub(t));
        let _ = writeln!(
            out,
            "trace ({} lines{}; `#n` = scheduler step, indented = what the seams did):",
            self.trace.len(),
            if skip > 0 {
                format!(", first {skip} omitted; WEIR_DST_TRACE=full prints all")
            } else {
                String::new()
            }
        );
        for line in &self.trace[skip..] {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}
