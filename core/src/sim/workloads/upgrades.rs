//! Upgrades (`Faults::upgrades`): a client moves a submitted execution (mostly a running one)
//! to another build, naming the history length it read in the committed log, which may be
//! behind (the owner then refuses it as a conflict).

use indexmap::IndexMap;

use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::world::lock;

impl Sim {
    /// A client upgrades a random submitted execution to another build, with the length of
    /// its history it read in the log (committed records: it may be behind, then the owner
    /// refuses it as a conflict).
    pub(in crate::sim) fn random_upgrade(&mut self) {
        // Mostly a running execution (as `weir upgrade` is used); sometimes any one.
        let running_only = !self.rng.chance(5);
        let world = lock(&self.world);
        let mut lengths: IndexMap<ExecutionId, (u64, bool)> = IndexMap::new();
        for (_, r) in world.cluster.committed_records(Topic::History) {
            if let Some(Payload::History(h)) = &r.payload {
                let seen = lengths.entry(h.execution_id.clone()).or_default();
                seen.0 += 1;
                seen.1 |= matches!(h.entry, crate::records::HistoryEntry::Finished { .. });
            }
        }
        let now = world.now;
        drop(world);
        let candidates: Vec<(ExecutionId, u64)> = self
            .submitted
            .keys()
            .filter_map(|id| {
                let (len, finished) = lengths.get(id).copied().unwrap_or_default();
                (!running_only || (len > 0 && !finished)).then(|| (id.clone(), len))
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (id, expected_seq) = self.rng.pick(&candidates).clone();
        let build = self.rng.range(2, 5);
        let request = crate::records::UpgradeRequest {
            execution_id: id.clone(),
            component: format!("sim-v{build}"),
            expected_seq,
            requested_at: now,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::Upgrade),
            Payload::Upgrade(request),
        );
        self.note(format!(
            "upgrade {id} to sim-v{build} at seq {expected_seq} -> responses/{partition}@{offset}"
        ));
    }
}
