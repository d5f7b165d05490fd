//! Resets (`Faults::resets`; `weir reset`): invariant `reset`.
//!
//! - A `Reset` entry only where a client's request asked for it (its execution, point and new
//!   id), and only one per new execution across every history.
//! - A `Created` with `reset_of` only for a new execution a `Reset` entry links to, naming
//!   that execution and point; the entries that follow it are, in order, what the one rule
//!   ([`crate::reset::cut`]) keeps of the old execution's committed history at that point.
//! - A request the rule refuses makes nothing (no `Reset` entry, no execution of its new id).
//! - In a settled run, every request the rule allows made its `Reset` entry (nothing lost).
//!
//! That each new execution finishes once with what its params compute is the `results`
//! checker's: the workload counts it as a submission.

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::{HistoryEntry, HistoryRecord, ResetPoint};
use crate::sim::invariant::Invariant;
use crate::sim::sent::ResetSend;
use crate::sim::world::World;

use super::{Logged, describe};

/// What the resets of a run did, for the class's test to check that the runs exercise it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResetCounts {
    /// `Reset` entries committed.
    pub reset: u64,
    /// … of executions that had finished.
    pub of_finished: u64,
    /// Executions created by a reset that kept entries (a point past `Created`).
    pub kept_entries: u64,
    /// Requests the rule refused.
    pub refused: u64,
    /// Requests sent twice (one new execution).
    pub sent_twice: u64,
}

impl std::ops::AddAssign for ResetCounts {
    fn add_assign(&mut self, o: Self) {
        self.reset += o.reset;
        self.of_finished += o.of_finished;
        self.kept_entries += o.kept_entries;
        self.refused += o.refused;
        self.sent_twice += o.sent_twice;
    }
}

impl ResetCounts {
    pub(in crate::sim) fn of(w: &World, sends: &[ResetSend]) -> ResetCounts {
        let mut counts = ResetCounts::default();
        for log in super::committed_histories(w).values() {
            let mut finished = false;
            for e in log {
                match &e.record.entry {
                    HistoryEntry::Finished { .. } => finished = true,
                    HistoryEntry::Reset { .. } => {
                        counts.reset += 1;
                        counts.of_finished += u64::from(finished);
                    }
                    HistoryEntry::Created(c) if c.reset_of.as_ref().is_some_and(|r| r.seq > 0) => {
                        counts.kept_entries += 1;
                    }
                    _ => {}
                }
            }
        }
        counts.refused = sends.iter().filter(|s| !s.allowed).count() as u64;
        counts.sent_twice = sends.len() as u64
            - sends
                .iter()
                .map(|s| &s.new_execution_id)
                .collect::<std::collections::BTreeSet<_>>()
                .len() as u64;
        counts
    }
}

pub(super) fn check_resets(
    add: &mut impl FnMut(Invariant, String),
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    sends: &[ResetSend],
    settled: bool,
) {
    // Every `Reset` entry: (old, seq of the entry, new, point).
    let mut links: BTreeMap<ExecutionId, (ExecutionId, u64)> = BTreeMap::new();
    for (id, log) in logs {
        for e in log {
            let HistoryEntry::Reset {
                new_execution_id,
                to_seq,
                ..
            } = &e.record.entry
            else {
                continue;
            };
            // A request for the latest point asked for the latest point of the history its
            // owner read: what comes before this entry.
            let latest = || {
                let before: Vec<(HistoryRecord, chrono::DateTime<chrono::Utc>)> = log
                    .iter()
                    .take_while(|l| l.record.seq < e.record.seq)
                    .map(|l| (l.record.clone(), l.timestamp))
                    .collect();
                crate::reset::points(id, &before).last().copied()
            };
            let asked = sends.iter().any(|s| {
                s.execution_id == *id
                    && s.new_execution_id == *new_execution_id
                    && match s.to {
                        ResetPoint::Seq(seq) => seq == *to_seq,
                        ResetPoint::Latest => latest() == Some(*to_seq),
                    }
            });
            if !asked {
                add(
                    Invariant::Reset,
                    format!(
                        "{id}: {} at seq {}, which no request asked for",
                        describe(&e.record.entry),
                        e.record.seq
                    ),
                );
            }
            if let Some((other, _)) = links.insert(new_execution_id.clone(), (id.clone(), *to_seq))
            {
                add(
                    Invariant::Reset,
                    format!(
                        "{new_execution_id} is linked by two Reset entries (of {other} and of {id}): \
                         a reset makes one execution"
                    ),
                );
            }
        }
    }
    for (id, log) in logs {
        let Some(HistoryEntry::Created(created)) = log.first().map(|e| &e.record.entry) else {
            continue;
        };
        let link = links.get(id);
        match (&created.reset_of, link) {
            (None, None) => {}
            (None, Some((old, _))) => add(
                Invariant::Reset,
                format!("{id}: linked by a Reset entry of {old}, but not created by a reset"),
            ),
            (Some(of), None) => add(
                Invariant::Reset,
                format!(
                    "{id}: created as a reset of {} at seq {}, which no Reset entry links to",
                    of.execution_id, of.seq
                ),
            ),
            (Some(of), Some((old, point))) if of.execution_id != *old || of.seq != *point => add(
                Invariant::Reset,
                format!(
                    "{id}: created as a reset of {} at seq {}, but linked from {old} at seq {point}",
                    of.execution_id, of.seq
                ),
            ),
            (Some(of), Some(_)) => {
                check_copy(add, id, log, of, logs.get(&of.execution_id));
            }
        }
    }
    for s in sends {
        let made = links.get(&s.new_execution_id);
        if !s.allowed {
            if made.is_some() || logs.contains_key(&s.new_execution_id) {
                add(
                    Invariant::Reset,
                    format!(
                        "a reset of {} to {} into {} the rule refuses made it (responses/{}@{})",
                        s.execution_id, s.to, s.new_execution_id, s.at.0, s.at.1
                    ),
                );
            }
        } else if settled && made.is_none() {
            add(
                Invariant::Reset,
                format!(
                    "a reset of {} to {} into {} (responses/{}@{}) made nothing: lost",
                    s.execution_id, s.to, s.new_execution_id, s.at.0, s.at.1
                ),
            );
        }
    }
}

/// The entries after the new execution's `Created` are the rule's cut of the old history.
fn check_copy(
    add: &mut impl FnMut(Invariant, String),
    id: &ExecutionId,
    log: &[Logged<'_>],
    of: &crate::records::ResetOf,
    old: Option<&Vec<Logged<'_>>>,
) {
    let Some(old) = old else {
        add(
            Invariant::Reset,
            format!("{id}: a reset of {}, which has no history", of.execution_id),
        );
        return;
    };
    let history: Vec<(HistoryRecord, chrono::DateTime<chrono::Utc>)> = old
        .iter()
        .map(|e| (e.record.clone(), e.timestamp))
        .collect();
    let expected = match crate::reset::cut(&of.execution_id, &history, of.seq, id) {
        Ok(entries) => entries,
        Err(error) => {
            add(
                Invariant::Reset,
                format!("{id}: a reset the rule refuses on the committed history: {error}"),
            );
            return;
        }
    };
    let copied: Vec<&HistoryEntry> = log
        .iter()
        .skip(1)
        .take(expected.len())
        .map(|e| &e.record.entry)
        .collect();
    if copied.len() != expected.len() || copied.iter().zip(&expected).any(|(a, b)| *a != b) {
        add(
            Invariant::Reset,
            format!(
                "{id}: its entries after Created are not the cut of {} at seq {}: {} (expected {})",
                of.execution_id,
                of.seq,
                super::list(copied.iter().map(|e| describe(e))),
                super::list(expected.iter().map(describe))
            ),
        );
    }
}
