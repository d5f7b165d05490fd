//! When things happened, as each committed history says (`timings`): every record says when
//! (`at`), never before the record before it; `Created` says when its submission was sent,
//! not after the creation; `Finished` finished when its record says; a child's answer ran
//! after its request was journalled and before its answer was; and the store keeps each
//! record's own time (`recorded_at`), so that a history rebuilt from the log (a take-over's
//! catch-up) shows the same times as the one the owner wrote. An execution made by a reset
//! copies entries of another's history when it is created: their children ran for that
//! one, before the copies were journalled, so only their order after it is checked. The simulation has one clock,
//! so these orders are exact here; across real machines they hold up to clock skew.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::model::{ExecutionId, HistoryEvent, JoinSetRequest, Response};
use crate::records::HistoryEntry;
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::{Logged, describe};

pub(super) fn check_timings(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
) {
    for (id, entries) in logs {
        // The first record of each seq, as a reader folding the log takes it.
        let mut first: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            first.entry(e.record.seq).or_insert(e);
        }
        let mut previous: Option<(u64, DateTime<Utc>)> = None;
        let mut requested: BTreeMap<&ExecutionId, DateTime<Utc>> = BTreeMap::new();
        // A reset's copies are journalled with its `Created`, at its creation.
        let mut copied_at = None;
        for e in first.values() {
            let record = e.record;
            let seq = record.seq;
            let what = describe(&record.entry);
            let Some(at) = record.at else {
                add(
                    Invariant::Timings,
                    format!("{id}: seq {seq} ({what}) does not say when it happened"),
                );
                continue;
            };
            if let Some((before, then)) = previous
                && at < then
            {
                add(
                    Invariant::Timings,
                    format!(
                        "{id}: seq {seq} ({what}) happened at {at}, before seq {before} ({then})"
                    ),
                );
            }
            previous = Some((seq, at));
            match &record.entry {
                HistoryEntry::Created(c) => {
                    copied_at = c.reset_of.as_ref().map(|_| c.created_at);
                    if c.created_at != at {
                        add(
                            Invariant::Timings,
                            format!("{id}: created at {} but its record says {at}", c.created_at),
                        );
                    }
                    match c.submitted_at {
                        Some(sent) if sent <= c.created_at => {}
                        other => add(
                            Invariant::Timings,
                            format!(
                                "{id}: submitted at {other:?}, for a creation at {}",
                                c.created_at
                            ),
                        ),
                    }
                }
                HistoryEntry::Finished { finished_at, .. } if *finished_at != at => add(
                    Invariant::Timings,
                    format!("{id}: finished at {finished_at} but its record says {at}"),
                ),
                HistoryEntry::Event {
                    event:
                        HistoryEvent::JoinSetRequest {
                            request:
                                JoinSetRequest::ChildExecutionRequest {
                                    child_execution_id, ..
                                },
                            ..
                        },
                    ..
                } if copied_at != Some(at) => {
                    requested.insert(child_execution_id, at);
                }
                HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                    child_execution_id,
                    ran: Some(ran),
                    ..
                }) => {
                    let asked = requested.get(child_execution_id);
                    let in_order = ran.started_at <= ran.finished_at
                        && ran.finished_at <= at
                        && asked.is_none_or(|asked| *asked <= ran.started_at);
                    if !in_order {
                        add(
                            Invariant::Timings,
                            format!(
                                "{id}: {child_execution_id} was asked at {asked:?}, ran from {} to \
                                 {} and was journalled at {at} (seq {seq})",
                                ran.started_at, ran.finished_at
                            ),
                        );
                    }
                }
                _ => {}
            }
            // The store keeps the record's own time (at its precision).
            if let Some(row) = w.store.history.get(&(id.clone(), seq as i64))
                && row.recorded_at != crate::rows::to_store_precision(at)
            {
                add(
                    Invariant::Timings,
                    format!(
                        "{id}: seq {seq} ({what}) is stored as recorded at {}, its record says {at}",
                        row.recorded_at
                    ),
                );
            }
        }
    }
}
