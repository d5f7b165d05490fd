//! Each execution's committed history, one by one: on its partition (`history-partition`),
//! seqs contiguous from 0 (`history-seqs`), the same in the store (`log-vs-store`, and no
//! store row without a history), its execution row in step (`execution-row`), finished
//! (`unfinished`); and, through their modules, its deadline, its delays and its replay.

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::HistoryEntry;
use crate::rows::ExecutionState;
use crate::sim::cluster::Topic;
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::{Logged, describe};

/// The checks of every committed history (the first record of each seq, as a reader folding
/// the log takes it), and of the store's execution rows without one.
pub(super) fn check_histories(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
) {
    for (id, entries) in logs {
        let home = w.cluster.partition_for(Topic::History, &id.to_string());
        if let Some(e) = entries.iter().find(|e| e.partition != home) {
            add(
                Invariant::HistoryPartition,
                format!(
                    "{id}: seq {} on history/{} (murmur2 says {home})",
                    e.record.seq, e.partition
                ),
            );
        }
        // Contiguous seqs from 0, each once.
        let seqs: Vec<u64> = entries.iter().map(|e| e.record.seq).collect();
        let contiguous = seqs.iter().enumerate().all(|(i, s)| *s == i as u64);
        if !contiguous {
            let listing: Vec<String> = entries
                .iter()
                .map(|e| {
                    format!(
                        "{}@{}:{}",
                        e.record.seq,
                        e.offset,
                        describe(&e.record.entry)
                    )
                })
                .collect();
            add(
                Invariant::HistorySeqs,
                format!(
                    "{id}: seqs in log order are not 0,1,2,…: [{}]",
                    listing.join(", ")
                ),
            );
        }
        // First occurrence of each seq (what a reader folding the log takes).
        let mut first: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(e);
        }
        let firsts: Vec<&Logged<'_>> = first.values().copied().collect();

        // The store's history equals the log's.
        let rows: BTreeMap<i64, &crate::rows::HistoryRow> = w
            .store
            .history
            .range((id.clone(), i64::MIN)..=(id.clone(), i64::MAX))
            .map(|((_, seq), row)| (*seq, row))
            .collect();
        for e in &firsts {
            match rows.get(&(e.record.seq as i64)) {
                None => add(
                    Invariant::LogVsStore,
                    format!(
                        "{id}: seq {} ({}) is in the log at history/{}@{} but not in the store",
                        e.record.seq,
                        describe(&e.record.entry),
                        e.partition,
                        e.offset
                    ),
                ),
                Some(row) if row.record != e.bytes => {
                    let stored = w
                        .codec
                        .decode(&row.record)
                        .map_or_else(|| "undecodable".to_owned(), |r| describe(&r.entry));
                    add(
                        Invariant::LogVsStore,
                        format!(
                            "{id}: seq {}: the log has {} (offset {}), the store has {} (offset {})",
                            e.record.seq,
                            describe(&e.record.entry),
                            e.offset,
                            stored,
                            row.kafka_offset
                        ),
                    )
                }
                Some(row) if row.kafka_offset != e.offset || row.kafka_partition != e.partition => {
                    add(
                        Invariant::LogVsStore,
                        format!(
                            "{id}: seq {}: logged at history/{}@{}, the store says {}@{}",
                            e.record.seq,
                            e.partition,
                            e.offset,
                            row.kafka_partition,
                            row.kafka_offset
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        for seq in rows.keys() {
            if !first.contains_key(&(*seq as u64)) {
                add(
                    Invariant::LogVsStore,
                    format!("{id}: the store has history seq {seq}, the log does not"),
                );
            }
        }

        // The execution row agrees with the history.
        let finished = firsts.iter().find_map(|e| match &e.record.entry {
            HistoryEntry::Finished { result, .. } => Some(result),
            _ => None,
        });
        let count = first.len() as i64;
        match w.store.executions.get(id) {
            None => add(
                Invariant::ExecutionRow,
                format!("{id}: no execution row ({count} history entries)"),
            ),
            Some(row) => {
                let state_ok = (row.state == ExecutionState::Finished) == finished.is_some();
                let result_ok = finished.is_none_or(|r| {
                    row.result.as_deref() == serde_json::to_string(r).ok().as_deref()
                });
                if !state_ok || row.history_version != count || !result_ok {
                    add(
                        Invariant::ExecutionRow,
                        format!(
                            "{id}: the row says {} at history version {} (result {:?}); the history has {count} entries, last {}",
                            row.state,
                            row.history_version,
                            row.result,
                            firsts
                                .last()
                                .map_or_else(String::new, |e| describe(&e.record.entry)),
                        ),
                    );
                }
            }
        }

        super::deadlines::check_deadline(add, w, logs, id, &firsts);

        super::delays::check_delays(add, w, entries, &firsts);

        if finished.is_none() {
            let last = entries.last().expect("non-empty");
            add(
                Invariant::Unfinished,
                format!(
                    "{id}: {} history entries, the last {} at +{}ms; the store row says {}{}",
                    entries.len(),
                    describe(&last.record.entry),
                    (last.timestamp - w.start).num_milliseconds(),
                    w.store.executions.get(id).map_or_else(
                        || "nothing".to_owned(),
                        |r| format!("{} v{}", r.state, r.history_version)
                    ),
                    match super::concurrency::standing(w, id) {
                        s if s.is_empty() => s,
                        s => format!("; slots: {s}"),
                    }
                ),
            );
        }

        super::replay::check_replay(add, w, id, &firsts, finished);
    }
    for id in w.store.executions.keys() {
        if !logs.contains_key(id) {
            add(
                Invariant::LogVsStore,
                format!("{id}: an execution row, but no history in the log"),
            );
        }
    }
}
