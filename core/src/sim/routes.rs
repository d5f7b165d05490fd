//! Paused activity routes (`Faults::route_pauses`): what each worker process read of
//! `weir.control`, and what it did with it. A client writes the records
//! (`workloads/routes.rs`); every process follows the topic from its beginning, as
//! production's `worker/src/kafka/control.rs` does, at its own turns — an activity worker at
//! each turn of its loop, a workflow worker at each poll — and reads what is committed past
//! its position only at about half of them (the followers' own RNG): a pause reaches each
//! process a while after it was written, and each at another time. A record is folded by the
//! one rule, [`crate::control::Controls::apply`] ([`fold`]); one whose key names nothing or
//! whose value does not decode is skipped, as production skips it.
//!
//! An activity worker tells its core the paused routes' topics when they differ from what it
//! told it last (`Input::TopicsPaused`, after the turn's records, as production does); a
//! workflow worker's inline seam (`seams.rs`, `SimInline`) runs nothing of a route its
//! process read paused. [`RouteLog`] keeps, in the activity log's sequence, what
//! `checks/routes.rs` holds the starts and the inline runs against. How a process follows
//! the topic at its turns is the world's (`world/routes.rs`).

use std::collections::{BTreeMap, BTreeSet};

use crate::control::{ControlKey, Controls};
use crate::model::ExecutionId;

use super::cluster::{Payload, SimTime, Topic};
use super::rng::Rng;

/// A route no worker of the simulation serves (its pause changes nothing but the set).
pub const OTHER_ROUTE: &str = "weir.activity.other";

/// Folds one record of `weir.control` into `controls`, as production's follower does: the
/// key must name a route, the value must be a pause or a tombstone; `false` (skipped)
/// otherwise.
pub fn fold(controls: &mut Controls, key: Option<&str>, payload: Option<&Payload>) -> bool {
    let Ok(key) = ControlKey::parse(key.unwrap_or_default()) else {
        return false;
    };
    match payload {
        Some(Payload::RoutePause(value)) => {
            controls.apply(&key, value.clone());
            true
        }
        _ => false,
    }
}

/// One process's follower of `weir.control`.
#[derive(Debug, Clone, Default)]
pub struct Follower {
    /// The next offset it reads.
    pub position: i64,
    /// What it read, folded.
    pub controls: Controls,
    /// What an activity worker last told its core (`Input::TopicsPaused`).
    pub told: BTreeSet<String>,
}

/// From `seq` on, `pid` acted on `topics` being paused.
#[derive(Debug, Clone)]
pub struct Told {
    pub seq: u64,
    pub at: SimTime,
    pub pid: u64,
    /// An activity worker's core was told (`Input::TopicsPaused`); else a workflow worker read
    /// it (what its inline seam goes by).
    pub core: bool,
    pub topics: BTreeSet<String>,
}

/// A record a client wrote to `weir.control`.
#[derive(Debug, Clone)]
pub struct RouteSend {
    pub seq: u64,
    pub at: SimTime,
    pub offset: i64,
    pub key: String,
    pub payload: Payload,
}

/// A request of a route topic an activity worker fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub seq: u64,
    pub pid: u64,
    pub child: ExecutionId,
    pub topic: Topic,
}

/// A request a workflow worker's inline seam ran.
#[derive(Debug, Clone)]
pub struct InlineRun {
    pub seq: u64,
    pub at: SimTime,
    pub pid: u64,
    pub child: ExecutionId,
    /// Its route's request topic.
    pub topic: &'static str,
}

/// What the checks of the paused routes read, in the activity log's sequence
/// ([`super::activity::ActivityLog::seq`], the order of the starts).
#[derive(Debug, Clone, Default)]
pub struct RouteLog {
    pub sends: Vec<RouteSend>,
    pub told: Vec<Told>,
    pub fetched: Vec<Fetched>,
    pub inline: Vec<InlineRun>,
    /// Inline requests of a paused route sent to its topic instead (`SimInline::runs`).
    pub inline_held: u64,
    /// External checks started and answers produced of the external route by an activity
    /// worker whose core was told it is paused (the CLI refuses to pause an external route;
    /// the core must still answer its deadlines).
    pub external_while_paused: u64,
}

/// The followers and the log of a run.
#[derive(Debug)]
pub struct Routes {
    /// The followers' RNG (when a process reads what is new): seeded by the scheduler, so
    /// that no other draw of the run moves.
    pub rng: Rng,
    pub followers: BTreeMap<u64, Follower>,
    pub log: RouteLog,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            rng: Rng::new(0),
            followers: BTreeMap::new(),
            log: RouteLog::default(),
        }
    }
}
