//! Upgrades: an `Upgraded` entry in a history only where an upgrade request asked for it, at
//! the history length the request named (`upgrade`); and the tally of requests sent and
//! upgrades journalled ([`UpgradeCounts`]).

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::Logged;

/// Upgrades: an execution moves to a build only as a request asked, at the history length
/// the request was checked against (`weir upgrade`'s rule; a stale one is a conflict).
pub(super) fn check_upgrades(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
) {
    let upgrades: Vec<&crate::records::UpgradeRequest> = w
        .cluster
        .committed_records(Topic::Responses)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Upgrade(u)) => Some(u),
            _ => None,
        })
        .collect();
    for (id, entries) in logs {
        for e in entries {
            if let HistoryEntry::Upgraded { to, .. } = &e.record.entry
                && !upgrades.iter().any(|u| {
                    u.execution_id == *id && u.component == *to && u.expected_seq == e.record.seq
                })
            {
                add(
                    Invariant::Upgrade,
                    format!(
                        "{id}: Upgraded({to}) at seq {}, which no upgrade request asked for",
                        e.record.seq
                    ),
                );
            }
        }
    }
}

/// What the upgrades of a run did: requests sent, and `Upgraded` entries journalled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpgradeCounts {
    pub sent: u64,
    pub taken: u64,
}

impl UpgradeCounts {
    pub fn of(w: &World) -> Self {
        let sent = w
            .cluster
            .committed_records(Topic::Responses)
            .filter(|(_, r)| matches!(r.payload, Some(Payload::Upgrade(_))))
            .count() as u64;
        let taken = w
            .cluster
            .committed_records(Topic::History)
            .filter(|(_, r)| {
                matches!(&r.payload, Some(Payload::History(h)) if matches!(h.entry, HistoryEntry::Upgraded { .. }))
            })
            .count() as u64;
        UpgradeCounts { sent, taken }
    }
}

impl std::ops::AddAssign for UpgradeCounts {
    fn add_assign(&mut self, other: Self) {
        self.sent += other.sent;
        self.taken += other.taken;
    }
}
