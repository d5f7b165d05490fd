//! Fairness by tenant (`Faults::fairness`; `crate::fairness`): an owner takes the submissions
//! it has read round-robin across tenants' lanes.
//!
//! What is checked, per owner's take-over (a worker between two rewinds): once its committed
//! batch `j` shows it had read a submission `r` of tenant `L` (the transaction's read
//! position of `r`'s partition is past it), the executions it created after batch `j` and
//! before `r` count at most `2·(n_L + 1)` of any other lane `M`, where `n_L` is how many of
//! `L`'s it created in between (those ahead of `r` in its lane). Round-robin gives one of
//! `M` per turn of `L`, and one more per batch boundary at which `M`'s lane emptied and
//! joined again at the end of the rotation: the factor 2 is that slack. Taking in log order
//! fails it as soon as a burst of one tenant sits before another's record.
//!
//! The executions counted are those a submission created (its `Created` record, by the key
//! of the one submission record with that key: executions with several records under one
//! key — duplicates, cancellations, resets — take a lane that is not their own tenant's, and
//! records that create nothing take turns unseen), so the check runs only in runs whose
//! submissions partitions hold no other kind of record.

use std::collections::{BTreeMap, HashMap};

use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

/// The one submission record of a key: its offset and tenant (`None` in the map: several).
type Sub = (i64, Option<String>);

/// A creation, as the check reads it.
struct Creation {
    /// The owner's take-over: (worker, rewinds).
    owner: (u64, u64),
    /// Its committed batch (index in `committed_txns`).
    txn: usize,
    partition: i32,
    offset: i64,
    lane: Option<String>,
}

/// What the fairness check saw in a run (`Faults::fairness`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FairnessCounts {
    /// Submissions created after a batch that had read them (each one checked).
    pub checked: usize,
    /// Of those, how many had another tenant's executions created before them meanwhile.
    pub behind_others: usize,
    /// The most executions of one other lane created before one of them meanwhile.
    pub most_ahead: usize,
}

impl std::ops::AddAssign for FairnessCounts {
    fn add_assign(&mut self, other: Self) {
        self.checked += other.checked;
        self.behind_others += other.behind_others;
        self.most_ahead = self.most_ahead.max(other.most_ahead);
    }
}

impl FairnessCounts {
    pub fn of(w: &World) -> FairnessCounts {
        let mut counts = FairnessCounts::default();
        for window in windows(w) {
            counts.checked += 1;
            let others = window
                .counts
                .iter()
                .filter(|(lane, _)| **lane != window.lane)
                .map(|(_, &n)| n);
            let most = others.max().unwrap_or(0);
            if most > 0 {
                counts.behind_others += 1;
            }
            counts.most_ahead = counts.most_ahead.max(most);
        }
        counts
    }
}

/// A submission created after a batch that had read it, with the creations in between.
struct Window {
    partition: i32,
    offset: i64,
    owner: u64,
    read_by: usize,
    lane: Option<String>,
    /// Creations of the same take-over after `read_by` and before it, by lane.
    counts: BTreeMap<Option<String>, usize>,
}

pub(super) fn check_fairness(add: &mut impl FnMut(Invariant, String), w: &World) {
    for window in windows(w) {
        let own = window.counts.get(&window.lane).copied().unwrap_or(0);
        for (lane, &count) in &window.counts {
            if *lane != window.lane && count > 2 * (own + 1) {
                add(
                    Invariant::Fairness,
                    format!(
                        "submissions/{}@{} (tenant {:?}) was read by p{}'s batch {} and \
                         created after {count} creations of tenant {lane:?} but only {own} of its \
                         own (round-robin allows {})",
                        window.partition,
                        window.offset,
                        window.lane,
                        window.owner,
                        window.read_by,
                        2 * (own + 1)
                    ),
                );
                return;
            }
        }
    }
}

/// Every window of the run; none when the check cannot run (see the module docs).
fn windows(w: &World) -> Vec<Window> {
    if !w.faults.fairness {
        return Vec::new();
    }
    // The submissions: by partition and key, (offset, tenant) of the one record of the key.
    let mut subs: HashMap<(i32, String), Option<Sub>> = HashMap::new();
    for p in 0..w.cluster.partitions(Topic::Submissions) {
        for record in w.cluster.log(Topic::Submissions, p) {
            if !record.visible() {
                continue;
            }
            let Some(Payload::Submission(s)) = &record.payload else {
                // Another kind of record takes turns the check cannot see.
                return Vec::new();
            };
            let key = record.key.clone().unwrap_or_default();
            subs.entry((p, key))
                .and_modify(|seen| {
                    // A second record under the key: the check cannot tell its lane.
                    *seen = None;
                })
                .or_insert_with(|| Some((record.offset, s.tenant.clone())));
        }
    }
    if subs.values().any(Option::is_none) {
        return Vec::new();
    }
    let mut creations: Vec<Creation> = Vec::new();
    for (txn_index, txn) in w.cluster.committed_txns.iter().enumerate() {
        for &(topic, hp, ho) in &txn.written {
            if topic != Topic::History {
                continue;
            }
            let Some(Payload::History(record)) = w
                .cluster
                .log(Topic::History, hp)
                .get(ho as usize)
                .and_then(|r| r.payload.as_ref())
            else {
                continue;
            };
            if record.seq != 0 || !matches!(record.entry, HistoryEntry::Created(_)) {
                continue;
            }
            let id = record.execution_id.to_string();
            let partition = w.cluster.partition_for(Topic::Submissions, &id);
            let Some(Some((offset, lane))) = subs.get(&(partition, id)) else {
                continue;
            };
            creations.push(Creation {
                owner: (txn.pid, txn.rewinds),
                txn: txn_index,
                partition,
                offset: *offset,
                lane: lane.clone(),
            });
        }
    }
    let mut out = Vec::new();
    for (i, r) in creations.iter().enumerate() {
        // The first committed batch of the same take-over that had read `r`.
        let Some(read_by) = w.cluster.committed_txns[..r.txn].iter().position(|t| {
            (t.pid, t.rewinds) == r.owner
                && t.read
                    .get(&r.partition)
                    .is_some_and(|&read| read > r.offset)
        }) else {
            continue;
        };
        let mut counts: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for c in creations[..i]
            .iter()
            .filter(|c| c.owner == r.owner && c.txn > read_by)
        {
            *counts.entry(c.lane.clone()).or_default() += 1;
        }
        out.push(Window {
            partition: r.partition,
            offset: r.offset,
            owner: r.owner.0,
            read_by,
            lane: r.lane.clone(),
            counts,
        });
    }
    out
}
