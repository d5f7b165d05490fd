//! Batch operations (`Faults::batches`), over what the owners committed — the requests on
//! `weir.responses` (their reason names the batch: `batch <id>: …`), the batches' states and
//! their turns' outcomes on `weir.state` — and the commands clients sent ([`BatchSend`]):
//!
//! - `batch`: at most one request committed per (batch, execution), at most one outcome per
//!   (batch, execution); once a batch is done, every execution of its function the store held
//!   when its start was sent, created before its pinned end, has an outcome; every outcome is
//!   of an execution of its function created before that end; a start refused by the rules
//!   made no batch and was dead-lettered.
//! - `batch-rate`: over the committed states of a batch, in order, the executions acted on
//!   between turns at `s` and `t` are at most `burst + rate · (t − s)`.
//! - `batch-progress`: each committed state's counts are the tally of the outcomes committed
//!   up to its turn; the `acted` outcomes are exactly the executions with a committed request;
//!   states only move forward (turns and counts never decrease, an ended batch stays ended).
//!
//! And the tally of a run ([`BatchCounts`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::batch::{BatchCommandAction, BatchState, BatchStatus, Outcome};
use crate::model::ExecutionId;
use crate::rows::ListBy;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::BatchSend;
use crate::sim::world::World;
use crate::state_key::BATCH_PREFIX;

/// What the batches of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    /// Batches committed (started), and those done.
    pub started: u64,
    pub done: u64,
    pub cancelled: u64,
    /// Commands dead-lettered (refused).
    pub refused: u64,
    /// Requests committed, and outcomes skipped.
    pub acted: u64,
    pub skipped: u64,
    /// Turns committed.
    pub turns: u64,
}

impl std::ops::AddAssign for BatchCounts {
    fn add_assign(&mut self, o: Self) {
        self.started += o.started;
        self.done += o.done;
        self.cancelled += o.cancelled;
        self.refused += o.refused;
        self.acted += o.acted;
        self.skipped += o.skipped;
        self.turns += o.turns;
    }
}

impl BatchCounts {
    pub fn of(w: &World, sends: &[BatchSend]) -> Self {
        analyse(w, sends, false).1
    }
}

/// See the module docs.
pub(super) fn check_batches(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    sends: &[BatchSend],
    settled: bool,
) {
    for (invariant, detail) in analyse(w, sends, settled).0 {
        add(invariant, detail);
    }
}

/// The batch a request's reason names.
fn batch_of(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix("batch ")?;
    Some(rest.split_once(": ").map_or(rest, |(id, _)| id))
}

fn analyse(
    w: &World,
    sends: &[BatchSend],
    settled: bool,
) -> (Vec<(Invariant, String)>, BatchCounts) {
    let mut out = Vec::new();
    let mut counts = BatchCounts::default();
    // Requests: (batch, execution) → how many committed.
    let mut requests: BTreeMap<(String, ExecutionId), u32> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        let (id, reason) = match &r.payload {
            Some(Payload::Pause(p)) => (&p.execution_id, &p.reason),
            Some(Payload::Cancel(c)) => (&c.execution_id, &c.reason),
            _ => continue,
        };
        if let Some(batch) = batch_of(reason) {
            *requests.entry((batch.to_owned(), id.clone())).or_default() += 1;
        }
    }
    for ((batch, id), n) in &requests {
        counts.acted += 1;
        if *n > 1 {
            out.push((
                Invariant::Batch,
                format!("batch {batch}: {n} requests committed for {id}"),
            ));
        }
    }
    // States in commit order, and outcomes by turn, per batch.
    let mut states: BTreeMap<String, Vec<BatchState>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, BTreeMap<u64, Vec<(ExecutionId, Outcome)>>> =
        BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::State) {
        let Some(key) = r.key.as_deref().and_then(|k| k.strip_prefix(BATCH_PREFIX)) else {
            continue;
        };
        match &r.payload {
            Some(Payload::Batch(Some(state))) => {
                states
                    .entry(key.to_owned())
                    .or_default()
                    .push(state.clone());
            }
            Some(Payload::BatchOutcomes(list)) => {
                let Some((batch, turn)) = key.rsplit_once(':') else {
                    out.push((Invariant::Batch, format!("outcomes keyed `{key}`: no turn")));
                    continue;
                };
                let turn: u64 = turn.parse().unwrap_or(u64::MAX);
                let turns = outcomes.entry(batch.to_owned()).or_default();
                if turns
                    .insert(
                        turn,
                        list.iter()
                            .map(|o| (o.execution_id.clone(), o.outcome))
                            .collect(),
                    )
                    .is_some()
                {
                    out.push((
                        Invariant::Batch,
                        format!("batch {batch}: the outcomes of turn {turn} committed twice"),
                    ));
                }
            }
            _ => {}
        }
    }
    let dead: BTreeSet<(i32, i64)> = w
        .cluster
        .committed_records(Topic::Dlq)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Dlq(e)) if e.original_topic == Topic::Responses.name() => {
                Some((e.original_partition, e.original_offset))
            }
            _ => None,
        })
        .collect();
    for send in sends {
        let id = &send.command.id;
        let dead_lettered = dead.contains(&send.at);
        if dead_lettered {
            counts.refused += 1;
        }
        if send.refused && settled && !dead_lettered {
            out.push((
                Invariant::Batch,
                format!("batch {id}: a command the rules refuse was not dead-lettered"),
            ));
        }
        if send.refused
            && matches!(send.command.action, BatchCommandAction::Start(_))
            && states.contains_key(id)
            && !sends.iter().any(|s| s.command.id == *id && !s.refused)
        {
            out.push((
                Invariant::Batch,
                format!("batch {id}: a start the rules refuse made a batch"),
            ));
        }
    }
    for (batch, chain) in &states {
        counts.started += 1;
        let Some(last) = chain.last() else { continue };
        counts.turns += last.turns;
        match last.status {
            BatchStatus::Done => counts.done += 1,
            BatchStatus::Cancelled => counts.cancelled += 1,
            BatchStatus::Running => {}
        }
        let turns = outcomes.get(batch).cloned().unwrap_or_default();
        check_chain(&mut out, batch, chain, &turns);
        // Once per execution, and the acted ones are the requests.
        let mut seen: BTreeMap<&ExecutionId, Outcome> = BTreeMap::new();
        for (turn, list) in &turns {
            if *turn > last.turns {
                out.push((
                    Invariant::BatchProgress,
                    format!(
                        "batch {batch}: outcomes of turn {turn}, past its last state's {}",
                        last.turns
                    ),
                ));
            }
            for (id, outcome) in list {
                if seen.insert(id, *outcome).is_some() {
                    out.push((
                        Invariant::Batch,
                        format!("batch {batch}: {id} has two outcomes (turn {turn})"),
                    ));
                }
            }
        }
        counts.skipped += seen.values().filter(|o| **o != Outcome::Acted).count() as u64;
        let acted: BTreeSet<&ExecutionId> = seen
            .iter()
            .filter(|(_, o)| **o == Outcome::Acted)
            .map(|(id, _)| *id)
            .collect();
        let requested: BTreeSet<&ExecutionId> = requests
            .keys()
            .filter(|(b, _)| b == batch)
            .map(|(_, id)| id)
            .collect();
        if acted != requested {
            out.push((
                Invariant::BatchProgress,
                format!(
                    "batch {batch}: acted on {:?} by its outcomes, requests committed for {:?}",
                    acted.difference(&requested).collect::<Vec<_>>(),
                    requested.difference(&acted).collect::<Vec<_>>()
                ),
            ));
        }
        // The selection.
        let ListBy::Function(function) = &last.spec.filter.by else {
            continue;
        };
        let until = last.spec.filter.created_until;
        let rows = &w.store.executions;
        for id in seen.keys() {
            if let Some(row) = rows.get(id)
                && (row.ffqn != *function || until.is_some_and(|u| row.created_at >= u))
            {
                out.push((
                    Invariant::Batch,
                    format!("batch {batch}: an outcome for {id}, which it does not select"),
                ));
            }
        }
        // A state filter selects by what changes (a resume batch's `paused`): the rows the
        // client saw may have left it by the list; only a batch without one is held to them.
        if !settled || last.status != BatchStatus::Done || last.spec.filter.state.is_some() {
            continue;
        }
        let start = sends.iter().find(|s| {
            s.command.id == *batch
                && !s.refused
                && matches!(s.command.action, BatchCommandAction::Start(_))
        });
        if let Some(start) = start {
            for (id, created) in &start.selected {
                if until.is_some_and(|u| *created < u) && !seen.contains_key(id) {
                    out.push((
                        Invariant::Batch,
                        format!(
                            "batch {batch}: done, yet {id} (in the store when it was started) \
                             has no outcome"
                        ),
                    ));
                }
            }
        }
    }
    (out, counts)
}

/// The states of one batch in commit order: forward only, counts are the outcomes, the rate.
fn check_chain(
    out: &mut Vec<(Invariant, String)>,
    batch: &str,
    chain: &[BatchState],
    turns: &BTreeMap<u64, Vec<(ExecutionId, Outcome)>>,
) {
    for pair in chain.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let back = b.turns < a.turns
            || b.counts.acted < a.counts.acted
            || b.counts.seen() < a.counts.seen()
            || (a.status != BatchStatus::Running && b.status != a.status);
        if back {
            out.push((
                Invariant::BatchProgress,
                format!("batch {batch}: state went back: {a:?} then {b:?}"),
            ));
        }
    }
    for state in chain {
        let mut tally = crate::batch::BatchCounts::default();
        for list in turns.range(..=state.turns).map(|(_, l)| l) {
            for (_, outcome) in list {
                match outcome {
                    Outcome::Acted => tally.acted += 1,
                    Outcome::Finished => tally.finished += 1,
                    Outcome::AlreadyThere => tally.already += 1,
                }
            }
        }
        if tally != state.counts {
            out.push((
                Invariant::BatchProgress,
                format!(
                    "batch {batch}: turn {} counts {:?}, its committed outcomes {:?}",
                    state.turns, state.counts, tally
                ),
            ));
        }
    }
    // The rate: between the turns at `s` (i) and `t` (j), acted_j − acted_(i−1) at most
    // burst + rate · (t − s).
    let rate = chain.first().map(|s| s.spec.rate());
    let Some(rate) = rate else { return };
    for i in 0..chain.len() {
        let before = if i == 0 { 0 } else { chain[i - 1].counts.acted };
        for j in i..chain.len() {
            let n = chain[j].counts.acted.saturating_sub(before);
            if n == 0 {
                continue;
            }
            let secs = (chain[j].updated_at - chain[i].updated_at)
                .num_nanoseconds()
                .unwrap_or(i64::MAX) as f64
                / 1e9;
            let allowed = f64::from(rate.burst) + rate.per_second * secs + 1e-6;
            if n as f64 > allowed {
                out.push((
                    Invariant::BatchRate,
                    format!(
                        "batch {batch}: {n} acted on between +{} and +{} ({secs:.3} s): more than \
                         {} + {}/s",
                        chain[i].updated_at, chain[j].updated_at, rate.burst, rate.per_second
                    ),
                ));
                return;
            }
        }
    }
}
