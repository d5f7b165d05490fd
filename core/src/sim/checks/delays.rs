//! Delays (`delays`): every delay an execution's history requested fired exactly once (one
//! `DelayFinished` response in the history).

use crate::model::{DelayId, HistoryEvent, JoinSetRequest, Response};
use crate::records::HistoryEntry;
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::Logged;

fn delays_requested(entries: &[&Logged<'_>]) -> Vec<DelayId> {
    entries
        .iter()
        .filter_map(|e| match &e.record.entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::DelayRequest { delay_id, .. },
                        ..
                    },
                ..
            } => Some(delay_id.clone()),
            _ => None,
        })
        .collect()
}

/// Every delay fired exactly once.
pub(super) fn check_delays(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    entries: &[Logged<'_>],
    firsts: &[&Logged<'_>],
) {
    let fired: Vec<String> = entries
        .iter()
        .filter_map(|e| match &e.record.entry {
            HistoryEntry::ResponseAppended(Response::DelayFinished { delay_id, .. }) => {
                Some(delay_id.to_string())
            }
            _ => None,
        })
        .collect();
    for delay in delays_requested(firsts) {
        let n = fired.iter().filter(|d| **d == delay.to_string()).count();
        if n != 1 {
            let due = firsts.iter().find_map(|e| match &e.record.entry {
                HistoryEntry::Event {
                    event:
                        HistoryEvent::JoinSetRequest {
                            request:
                                JoinSetRequest::DelayRequest {
                                    delay_id,
                                    expires_at,
                                    ..
                                },
                            ..
                        },
                    ..
                } if *delay_id == delay => Some(*expires_at),
                _ => None,
            });
            add(
                Invariant::Delays,
                format!(
                    "{delay}: fired {n} times (due {})",
                    due.map_or_else(String::new, |d| format!(
                        "+{}ms",
                        (d - w.start).num_milliseconds()
                    ))
                ),
            );
        }
    }
}
