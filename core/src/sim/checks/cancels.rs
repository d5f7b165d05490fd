//! Cancellations sent before their execution's submission ([`Submitted::early_cancel`]):
//! never dead-lettered for an execution that does not exist yet; one read before the
//! submission is kept under the execution's id and applied when the submission comes (its history has
//! `CancelRequested`), or, if no submission was read in time, dead-lettered (its copy sent
//! back marked `waited_until`, never the request itself), or, in a run that has not settled,
//! still kept. Never dropped without a trace.

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::Submitted;
use crate::sim::world::World;

use super::Logged;

pub(super) fn check_early_cancels(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    submitted: &indexmap::IndexMap<ExecutionId, Submitted>,
    dead: &BTreeMap<(String, i32, i64), usize>,
    settled: bool,
) {
    let early: Vec<(&ExecutionId, (i32, i64))> = submitted
        .iter()
        .filter_map(|(id, s)| Some((id, s.early_cancel?)))
        .collect();
    if early.is_empty() {
        return;
    }
    // The copies sent back marked, once dead-lettered.
    let mut waited_dead = Vec::new();
    for (partition, r) in w.cluster.committed_records(Topic::Submissions) {
        if let Some(Payload::Cancel(c)) = &r.payload
            && c.waited_until.is_some()
            && dead.contains_key(&(Topic::Submissions.name().to_owned(), partition, r.offset))
        {
            waited_dead.push(c.execution_id.clone());
        }
    }
    // Kept at some point (read before the submission), and kept still at the end.
    let (mut ever_kept, mut still_kept) = (Vec::new(), Vec::new());
    for (_, r) in w.cluster.committed_records(Topic::State) {
        if let Some(key) = &r.key {
            let kept = matches!(&r.payload, Some(Payload::Correlation(Some(state))) if state.cancel.is_some());
            still_kept.retain(|k: &String| k != key);
            if kept {
                still_kept.push(key.clone());
                ever_kept.push(key.clone());
            }
        }
    }
    for (id, (partition, offset)) in early {
        let applied = logs.get(id).is_some_and(|log| {
            log.iter()
                .any(|l| matches!(l.record.entry, HistoryEntry::CancelRequested { .. }))
        });
        // The request itself is never dead-lettered: it waits for the submission first.
        if dead.contains_key(&(Topic::Responses.name().to_owned(), partition, offset)) {
            add(
                Invariant::EarlyCancel,
                format!(
                    "{id}: its cancellation (responses/{partition}@{offset}) came before its \
                     submission and was dead-lettered without waiting for it"
                ),
            );
            continue;
        }
        // Read after the submission (Kafka orders the two topics in no way): an ordinary
        // cancellation, which finds the execution running or finished (`results`).
        if !ever_kept.contains(&id.to_string()) {
            continue;
        }
        let dead_lettered = waited_dead.contains(id);
        let kept = still_kept.contains(&id.to_string());
        if applied || dead_lettered || (kept && !settled) {
            continue;
        }
        add(
            Invariant::EarlyCancel,
            format!(
                "{id}: its cancellation (responses/{partition}@{offset}) came before its \
                 submission, was kept for it, and was neither applied, nor dead-lettered{}",
                if kept { ", only still kept" } else { "" }
            ),
        );
    }
}
