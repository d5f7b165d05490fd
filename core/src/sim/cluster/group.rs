//! The simulated consumer group of the workflow workers: members, generations, the eager
//! rebalance protocol with its session and rebalance timeouts, and Kafka's `range` assignor
//! (the rules are listed in the parent module's docs).

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;

use super::SimTime;
use crate::driver::InputTopic;

/// One member of the consumer group.
#[derive(Debug, Clone)]
pub struct Member {
    pub pid: u64,
    /// Has rejoined the rebalance in progress (or joined during it).
    pub rejoined: bool,
    /// No heartbeat since: removed at this time (frozen or dead process).
    pub expires_at: Option<SimTime>,
}

/// The consumer group of the workflow workers.
#[derive(Debug, Clone)]
pub struct Group {
    pub generation: u64,
    pub members: BTreeMap<u64, Member>,
    /// Of the current generation.
    pub assignment: BTreeMap<u64, BTreeSet<i32>>,
    /// A rebalance in progress since.
    pub rebalance_since: Option<SimTime>,
    /// Committed offsets (the next offset to read).
    pub committed: BTreeMap<(InputTopic, i32), i64>,
    /// The metadata committed with each offset (fairness: the submissions taken beyond it).
    pub committed_metadata: BTreeMap<(InputTopic, i32), String>,
    next_member: u64,
    partitions: i32,
}

impl Group {
    pub fn new(partitions: i32) -> Self {
        Group {
            generation: 0,
            members: BTreeMap::new(),
            assignment: BTreeMap::new(),
            rebalance_since: None,
            committed: BTreeMap::new(),
            committed_metadata: BTreeMap::new(),
            next_member: 1,
            partitions,
        }
    }

    /// A new member (it has joined: it takes part in the rebalance this starts).
    pub fn join(&mut self, pid: u64, now: SimTime) -> u64 {
        let id = self.next_member;
        self.next_member += 1;
        self.start_rebalance(now);
        self.members.insert(
            id,
            Member {
                pid,
                rejoined: true,
                expires_at: None,
            },
        );
        id
    }

    /// A member leaves (or is removed); true if it was a member.
    pub fn remove(&mut self, member: u64, now: SimTime) -> bool {
        if self.members.remove(&member).is_none() {
            return false;
        }
        self.assignment.remove(&member);
        self.start_rebalance(now);
        self.try_complete();
        true
    }

    fn start_rebalance(&mut self, now: SimTime) {
        if self.rebalance_since.is_none() {
            self.rebalance_since = Some(now);
            for m in self.members.values_mut() {
                m.rejoined = false;
            }
        }
    }

    /// Completes the rebalance in progress if every member has rejoined; true if it did.
    pub fn try_complete(&mut self) -> bool {
        if self.rebalance_since.is_none() || self.members.values().any(|m| !m.rejoined) {
            return false;
        }
        self.generation += 1;
        self.rebalance_since = None;
        self.assignment = range_assignment(self.members.keys().copied(), self.partitions);
        true
    }

    pub fn is_current(&self, member: u64, generation: u64) -> bool {
        self.members.contains_key(&member) && generation == self.generation
    }

    /// Removes members whose session expired and members that did not rejoin within the
    /// rebalance timeout; returns what happened.
    pub fn tick(&mut self, now: SimTime, rebalance_timeout: Duration) -> Vec<String> {
        let mut events = Vec::new();
        let expired: Vec<u64> = self
            .members
            .iter()
            .filter(|(_, m)| m.expires_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let pid = self.members[&id].pid;
            self.remove(id, now);
            events.push(format!(
                "group: member {id} (p{pid}) removed: session timed out"
            ));
        }
        if let Some(since) = self.rebalance_since
            && now - since >= rebalance_timeout
        {
            let late: Vec<u64> = self
                .members
                .iter()
                .filter(|(_, m)| !m.rejoined)
                .map(|(id, _)| *id)
                .collect();
            for id in late {
                let pid = self.members[&id].pid;
                self.members.remove(&id);
                events.push(format!(
                    "group: member {id} (p{pid}) removed: did not rejoin within the rebalance timeout"
                ));
            }
            self.try_complete();
        }
        events
    }

    /// The next instant at which [`Group::tick`] may do something.
    pub fn next_deadline(&self, rebalance_timeout: Duration) -> Option<SimTime> {
        let expiry = self.members.values().filter_map(|m| m.expires_at).min();
        let rebalance = self.rebalance_since.map(|s| s + rebalance_timeout);
        [expiry, rebalance].into_iter().flatten().min()
    }

    /// `member` stops heartbeating at `now` (its process frozen or killed): it is removed
    /// once `session` has passed, or earlier if it was to be already.
    pub fn stop_heartbeats(&mut self, member: Option<u64>, now: SimTime, session: Duration) {
        if let Some(m) = member.and_then(|m| self.members.get_mut(&m)) {
            m.expires_at = Some(m.expires_at.map_or(now + session, |t| t.min(now + session)));
        }
    }

    /// `member` heartbeats again (its process resumed); whether it still is a member (if
    /// not, the process is a zombie).
    pub fn resume_heartbeats(&mut self, member: Option<u64>) -> bool {
        match member.and_then(|m| self.members.get_mut(&m)) {
            Some(m) => {
                m.expires_at = None;
                true
            }
            None => false,
        }
    }

    pub fn member_of(&self, pid: u64) -> Option<u64> {
        self.members
            .iter()
            .find(|(_, m)| m.pid == pid)
            .map(|(id, _)| *id)
    }
}

/// Kafka's `range` assignor for co-partitioned topics: members in id order, each a contiguous
/// range, the first ones one partition more.
pub fn range_assignment(
    members: impl Iterator<Item = u64>,
    partitions: i32,
) -> BTreeMap<u64, BTreeSet<i32>> {
    let members: Vec<u64> = members.collect();
    let mut out = BTreeMap::new();
    if members.is_empty() {
        return out;
    }
    let n = members.len() as i32;
    let (per, extra) = (partitions / n, partitions % n);
    let mut next = 0;
    for (i, m) in members.into_iter().enumerate() {
        let count = per + i32::from((i as i32) < extra);
        out.insert(m, (next..next + count).collect());
        next += count;
    }
    out
}
