//! How each simulated process follows `weir.control` at its turns (`Faults::route_pauses`;
//! what it keeps, and the one fold, are `sim/routes.rs`'s).

use std::collections::BTreeSet;

use crate::activity::Input;
use crate::control::Controls;

use super::World;
use crate::sim::activity::SimSource;
use crate::sim::cluster::Topic;
use crate::sim::routes::{Told, fold};

/// What `weir.control` says, folded over every committed record (a client's read to its
/// end).
pub fn controls_now(w: &World) -> Controls {
    let mut controls = Controls::default();
    for (_, r) in w.cluster.committed_records(Topic::Control) {
        fold(&mut controls, r.key.as_deref(), r.payload.as_ref());
    }
    controls
}

impl World {
    /// `pid` follows `weir.control` at one of its turns: when records are committed past its
    /// position, at about one turn in two it reads them all and folds them. True if the
    /// paused routes it knows changed. (Nothing is drawn while nothing is new: a run that
    /// writes no control record draws what it drew before.)
    fn follow_controls(&mut self, pid: u64) -> bool {
        let World {
            cluster, routes, ..
        } = self;
        let follower = routes.followers.entry(pid).or_default();
        let (records, next) =
            cluster.read_committed(Topic::Control, 0, follower.position, usize::MAX);
        if next == follower.position || !routes.rng.chance(500) {
            return false;
        }
        let before = follower.controls.paused_route_names();
        for r in records {
            fold(&mut follower.controls, r.key.as_deref(), r.payload.as_ref());
        }
        follower.position = next;
        follower.controls.paused_route_names() != before
    }

    /// A workflow worker follows `weir.control` before its poll: what its inline seam goes by.
    pub(in crate::sim) fn follow_view(&mut self, pid: u64) {
        if !self.follow_controls(pid) {
            return;
        }
        let topics = self.routes.followers[&pid].controls.paused_route_names();
        let seq = self.act.log.next();
        let name = self
            .procs
            .get(&pid)
            .map_or_else(|| format!("p{pid}"), |p| p.name());
        self.event(format!(
            "{name}: reads weir.control: paused routes {topics:?}"
        ));
        self.routes.log.told.push(Told {
            seq,
            at: self.now,
            pid,
            core: false,
            topics,
        });
    }

    /// Whether workflow worker `pid` read `topic`'s route paused.
    pub(in crate::sim) fn route_read_paused(&self, pid: u64, topic: &str) -> bool {
        self.routes
            .followers
            .get(&pid)
            .is_some_and(|f| f.controls.is_route_paused(topic))
    }

    /// Whether activity worker `pid` told its core that `topic`'s route is paused.
    pub(in crate::sim) fn route_told_paused(&self, pid: u64, topic: &str) -> bool {
        self.routes
            .followers
            .get(&pid)
            .is_some_and(|f| f.told.contains(topic))
    }

    /// An activity worker follows `weir.control` at its turn: the paused routes' topics, when
    /// they differ from what its core was last told (production's `paused_topics`).
    pub(in crate::sim) fn act_controls(&mut self, pid: u64) -> Option<Input<SimSource>> {
        self.follow_controls(pid);
        let follower = self.routes.followers.get(&pid)?;
        let topics = follower.controls.paused_route_names();
        (topics != follower.told).then_some(Input::TopicsPaused(topics))
    }

    /// Activity worker `pid` tells its core `topics` (now).
    pub(in crate::sim) fn route_told(&mut self, pid: u64, topics: &BTreeSet<String>) {
        let seq = self.act.log.next();
        let name = self
            .act
            .procs
            .get(&pid)
            .map_or_else(|| format!("p{pid}"), |p| p.name());
        self.event(format!(
            "{name}: tells its core the paused routes {topics:?}"
        ));
        self.routes.followers.entry(pid).or_default().told = topics.clone();
        self.routes.log.told.push(Told {
            seq,
            at: self.now,
            pid,
            core: true,
            topics: topics.clone(),
        });
    }
}
