//! The invariants of a run, checked against what a `read_committed` reader of the log sees
//! and what the store holds once the run has settled. [`check`] runs every checker, in a
//! fixed order (the order of the violations it returns); each module holds one concern:
//!
//! - `upgrades`: `Upgraded` entries only as requested; [`UpgradeCounts`].
//! - `pauses`: no step of a paused execution, `Paused` and `Resumed` entries only as
//!   requested, requests dead-lettered only as the rules say; [`PauseCounts`].
//! - `history`: each execution's committed history, its store copy and row, its end;
//!   with `deadlines`, `delays` and `replay` for what else each history must say.
//! - `results`: each execution answered once per submission, with its expected value.
//! - `outputs`: no output committed twice; poison records dead-lettered once.
//! - `events`, `cancels`, `schedules`, `correlation`, `stubs`, `activity`, `triggers`: the
//!   features'; `corrupt_state`: corrupt keyed state dropped once, the rest left in place.
//! - `routes`: nothing of a paused route starts at a worker told it is paused, everything
//!   resumed at the end; [`RouteCounts`].
//! - `exhausted`: a parked activity is never requested again, and starts no attempt before a
//!   retry notice (its parent's resume); [`ExhaustedCounts`].
//! - `rates`: no worker starts more of a rate-limited route than its bucket allows, none of
//!   it inline, no attempt waiting for a token without a wake; [`RateCounts`].
//! - `resets`: `Reset` entries only as requested, each new execution created once from the
//!   rule's cut of the old history, nothing refused made, nothing allowed lost; [`ResetCounts`].
//! - `concurrency`: no code before an execution holds its slots, no slot above its limit,
//!   grants in order, places freed only by finishes.
//! - `fairness`: submissions read are taken round-robin by tenant.
//! - `queries`: each query answered once, in its batch, with the run's state at the answer's
//!   version; versions in the order asked; nothing answered that was not asked; [`QueryCounts`].
//! - `timings`: when each history record says it happened, in order, and kept by the store.
//! - `quiescence`: nothing left behind once the run settled.
//!
//! Here: [`Violation`], and the helpers several checkers share (the committed histories,
//! [`unconsumed_inputs`], how an entry or a list reads in a message).

mod activity;
mod batches;
mod cancels;
mod concurrency;
mod correlation;
mod corrupt_state;
mod deadlines;
mod delays;
mod events;
mod exhausted;
mod fairness;
mod history;
mod outputs;
mod pauses;
mod queries;
mod quiescence;
mod rates;
mod replay;
mod resets;
mod results;
mod routes;
mod schedules;
mod stubs;
mod timings;
mod triggers;
mod upgrades;

use std::collections::{BTreeMap, BTreeSet};

pub use batches::BatchCounts;
pub use concurrency::ConcurrencyCounts;
pub use correlation::correlation_at_settle;
pub use exhausted::ExhaustedCounts;
pub use fairness::FairnessCounts;
pub use pauses::PauseCounts;
pub use queries::QueryCounts;
pub use rates::RateCounts;
pub use resets::ResetCounts;
pub use routes::RouteCounts;
pub use stubs::{StubExpect, StubModel, StubSeen, StubWriteSeen, WriterSeen, stub_model};
pub use upgrades::UpgradeCounts;

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::records::{HistoryEntry, HistoryRecord};

use super::cluster::{Payload, SimTime, Topic};
use super::invariant::Invariant;
use super::sent::{KeyedSend, PauseSend, ResetSend, SimSchedule, Submitted, TriggerSends};
use super::world::World;

/// An invariant that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    pub detail: String,
}

/// Whether `result` is a time-out by the execution's deadline (not an activity's own).
fn past_deadline(result: &ExecutionResult) -> bool {
    matches!(result, ExecutionResult::ExecutionError(e)
        if e.kind == ExecutionErrorKind::TimedOut && e.reason.contains("by its deadline"))
}

/// Input partitions with committed records beyond the group's committed offset.
pub fn unconsumed_inputs(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for topic in super::world::INPUTS {
        let t = Topic::of_input(topic);
        for p in 0..w.cluster.partitions(t) {
            let committed = w.cluster.committed_offset(topic, p);
            let (unread, _) = w.cluster.read_committed(t, p, committed, usize::MAX);
            if let Some(first) = unread.first() {
                out.push(format!(
                    "{}/{p}: committed offset {committed}, {} readable records from offset {}",
                    t.name(),
                    unread.len(),
                    first.offset
                ));
            }
        }
    }
    out
}

struct Logged<'a> {
    partition: i32,
    offset: i64,
    record: &'a HistoryRecord,
    bytes: &'a [u8],
    timestamp: SimTime,
}

fn describe(entry: &HistoryEntry) -> String {
    match entry {
        HistoryEntry::Created(c) => format!("Created({})", c.ffqn.function()),
        HistoryEntry::Event { version, event } => format!("Event v{version} {}", event.kind_name()),
        HistoryEntry::ResponseAppended(r) => {
            format!("Response({})", crate::projection::response_id(r))
        }
        HistoryEntry::Finished { result, .. } => format!("Finished({result})"),
        HistoryEntry::Upgraded { to, .. } => format!("Upgraded({to})"),
        HistoryEntry::EventReceived(e) => format!("EventReceived({})", e.event_id),
        HistoryEntry::CancelRequested { reason } => format!("CancelRequested({reason})"),
        HistoryEntry::Paused { reason } => format!("Paused({reason})"),
        HistoryEntry::Resumed { reason } => format!("Resumed({reason})"),
        HistoryEntry::Reset {
            new_execution_id,
            to_seq,
            ..
        } => format!("Reset({new_execution_id} at {to_seq})"),
        HistoryEntry::SlotGranted { slot } => format!("SlotGranted({slot})"),
    }
}

/// The committed history, per execution, in log order.
fn committed_histories(w: &World) -> BTreeMap<ExecutionId, Vec<Logged<'_>>> {
    let mut logs: BTreeMap<ExecutionId, Vec<Logged<'_>>> = BTreeMap::new();
    for (partition, r) in w.cluster.committed_records(Topic::History) {
        if let Some(Payload::History(record)) = &r.payload {
            logs.entry(record.execution_id.clone())
                .or_default()
                .push(Logged {
                    partition,
                    offset: r.offset,
                    record,
                    bytes: &r.bytes,
                    timestamp: r.timestamp,
                });
        }
    }
    logs
}

/// What the simulated clients sent, as the checks read it ([`check`]).
pub struct Sent<'a> {
    pub submitted: &'a indexmap::IndexMap<ExecutionId, Submitted>,
    /// Poison submissions: (partition, offset) of `weir.submissions`.
    pub poison: &'a [(i32, i64)],
    /// Corrupt records of `weir.state` written before the workers started.
    pub corrupt_states: &'a [super::sent::CorruptSent],
    pub stray_events: &'a [(String, ExecutionId)],
    pub schedules: &'a [SimSchedule],
    pub keyed: &'a [KeyedSend],
    pub triggered: &'a TriggerSends,
    /// Pause and resume requests, in order (`Faults::pause_resume`).
    pub pauses: &'a [PauseSend],
    /// Reset requests, in order (`Faults::resets`).
    pub resets: &'a [ResetSend],
    /// Batch commands, in order (`Faults::batches`).
    pub batches: &'a [super::sent::BatchSend],
    /// Queries, in order (`Faults::queries`).
    pub queries: &'a [super::sent::QuerySend],
}

/// Every invariant, at the end of a run; `settled`: it ended quiescent (if not, that is a
/// violation of its own: something is stuck).
pub fn check(w: &World, sent: &Sent<'_>, settled: bool) -> Vec<Violation> {
    let Sent {
        submitted,
        poison,
        corrupt_states,
        stray_events,
        schedules,
        keyed,
        triggered,
        pauses,
        resets,
        batches,
        queries,
    } = *sent;
    let mut out = Vec::new();
    let mut add = |invariant: Invariant, detail: String| {
        out.push(Violation { invariant, detail });
    };

    for a in &w.anomalies {
        add(Invariant::SeamContract, a.clone());
    }

    let logs = committed_histories(w);

    upgrades::check_upgrades(&mut add, w, &logs);
    // The activity workers' pauses of parked activities' parents are requests too.
    let mut pause_requests = pauses.to_vec();
    if w.faults.activity_workers {
        pause_requests.extend(exhausted::activity_pauses(w));
    }
    pauses::check_pauses(&mut add, w, &logs, &pause_requests, settled);
    resets::check_resets(&mut add, &logs, resets, settled);
    concurrency::check_concurrency(&mut add, w, &logs);
    fairness::check_fairness(&mut add, w);
    queries::check_queries(&mut add, &logs, w, queries, settled);
    batches::check_batches(&mut add, w, batches, settled);
    history::check_histories(&mut add, w, &logs);
    timings::check_timings(&mut add, w, &logs);
    let results = results::check_results(&mut add, w, &logs, submitted, keyed);
    let dead = outputs::check_outputs(&mut add, w, poison);

    let keyed_ids: BTreeSet<&str> = keyed.iter().map(|k| k.event_id.as_str()).collect();
    events::check_events(
        &mut add,
        w,
        &logs,
        submitted,
        stray_events,
        &keyed_ids,
        &dead,
    );
    cancels::check_early_cancels(&mut add, w, &logs, submitted, &dead, settled);
    schedules::check_schedules(&mut add, w, &logs, &results, schedules, settled);
    correlation::check_correlation(&mut add, w, &logs, keyed, settled);
    stubs::check_stubs(&mut add, w, &logs, settled);
    if w.faults.activity_workers {
        activity::check_activity(&mut add, w, settled);
        exhausted::check_exhausted(&mut add, w);
    }
    routes::check_routes(&mut add, w, settled);
    rates::check_rates(&mut add, w);
    if w.faults.triggers {
        triggers::check_triggers(&mut add, w, triggered, &dead, settled);
    }
    corrupt_state::check_corrupt_states(&mut add, w, corrupt_states, &dead, settled);
    quiescence::check_quiescence(&mut add, w, settled);
    out
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}
