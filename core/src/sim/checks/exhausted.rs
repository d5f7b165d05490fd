//! Retries that end in `paused` (`Faults::exhausted_pauses`), over the committed route topics
//! and the activity log ([`crate::sim::activity::ActivityLog`]'s `parks`,
//! `parks_committed`, `notices`):
//!
//! - `exhausted-request`: no activity id has two requests of its first attempt on the route
//!   topics (a parked activity is never requested again: its parent's resume sends a retry
//!   notice, not a request).
//! - `exhausted-parked`: an attempt of an activity that starts (at any process) while the
//!   progress its partition committed last has it parked follows a retry notice of the
//!   activity read by that process since the failed attempt that parked it — nothing runs of
//!   a parked request before its parent resumed. (A notice read between the park and its
//!   commit — the parent resumed for another activity's pause — frees it before its park is
//!   committed; a park lost with its commit leaves the request as the last progress says.)
//!
//! That every parked activity is answered in the end, once, with its value, and its parent
//! finishes with it is what `activity-lost`, `activity-journal` and the results check; that
//! its parent is paused only as an activity or a client asked, and resumed, `pause` and
//! `pause-requests` (the activity workers' pauses are requests too: [`activity_pauses`]).
//! And the tally of a run ([`ExhaustedCounts`]).

use std::collections::BTreeMap;

use crate::model::ExecutionId;
use crate::records::PauseAction;
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::{PauseSeen, PauseSend};
use crate::sim::world::World;

/// The pauses the activity workers sent (parked activities' parents), as the requests the
/// pause checks hold the histories against: each carries a reason unique in the run (the
/// failed attempt's, `sim/exhausted.rs`).
pub(super) fn activity_pauses(w: &World) -> Vec<PauseSend> {
    w.cluster
        .committed_records(Topic::Responses)
        .filter(|(_, r)| matches!(r.producer, Producer::ActivityWorker { .. }))
        .filter_map(|(partition, r)| match &r.payload {
            Some(Payload::Pause(request)) => Some(PauseSend {
                execution_id: request.execution_id.clone(),
                action: PauseAction::Pause,
                reason: request.reason.clone(),
                at: (partition, r.offset),
                seen: PauseSeen::Running,
                stray: false,
                sent_at: r.timestamp,
                parked: request.parked.as_ref().map(|p| p.execution_id.clone()),
            }),
            _ => None,
        })
        .collect()
}

pub(super) fn check_exhausted(add: &mut impl FnMut(Invariant, String), w: &World) {
    let mut firsts: BTreeMap<&ExecutionId, u32> = BTreeMap::new();
    for topic in Topic::ROUTES {
        for (_, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(request)) = &r.payload
                && request.attempt == 1
            {
                *firsts.entry(&request.execution_id).or_default() += 1;
            }
        }
    }
    for (child, n) in firsts.into_iter().filter(|(_, n)| *n > 1) {
        add(
            Invariant::ExhaustedRequest,
            format!("{child}: {n} requests of its first attempt on the route topics"),
        );
    }
    let log = &w.act.log;
    let ms = |t: crate::sim::cluster::SimTime| (t - w.start).num_milliseconds();
    // Where each activity's request is.
    let mut at: BTreeMap<&ExecutionId, (Topic, i32)> = BTreeMap::new();
    for topic in Topic::ROUTES {
        for (partition, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(request)) = &r.payload {
                at.entry(&request.execution_id)
                    .or_insert((topic, partition));
            }
        }
    }
    for s in &log.started {
        let Some(&(topic, partition)) = at.get(&s.child) else {
            continue;
        };
        // The progress of its partition committed last before the start: parked there?
        let Some(committed) = log
            .progress_parked
            .iter()
            .rfind(|(seq, t, p, _)| *seq < s.seq && *t == topic && *p == partition)
            .filter(|(_, _, _, parked)| parked.contains(&s.child))
            .map(|(seq, ..)| *seq)
        else {
            continue;
        };
        // The failure that parked it: a notice read since (its parent resumed after the
        // park, before its commit or after) frees it.
        let failed = log
            .failed
            .iter()
            .filter(|f| f.child == s.child && f.seq < committed)
            .map(|f| f.seq)
            .max()
            .unwrap_or(0);
        let told = log
            .notices
            .iter()
            .any(|(seq, pid, c)| *c == s.child && *pid == s.pid && *seq > failed && *seq < s.seq);
        if !told {
            add(
                Invariant::ExhaustedParked,
                format!(
                    "{}: attempt {} started by p{} at +{}ms while the progress committed last \
                     (log seq {committed}) has it parked, with no retry notice read by p{} \
                     since the failure that parked it (log seq {failed})",
                    s.child,
                    s.attempt,
                    s.pid,
                    ms(s.at),
                    s.pid
                ),
            );
        }
    }
}

/// What the retries that end in `paused` did in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExhaustedCounts {
    /// Parents' pauses the activity workers produced (a park each)…
    pub parks: u64,
    /// …of which their progress committed.
    pub parks_committed: u64,
    /// Activities parked more than once (resumed without their switch flipped, or their park
    /// lost with its commit).
    pub parked_twice: u64,
    /// Retry notices the activity workers read.
    pub notices: u64,
    /// Parked activities started again after a notice (a fresh budget).
    pub restarted: u64,
    /// What the operator did.
    pub operator: crate::sim::exhausted::OperatorCounts,
}

impl ExhaustedCounts {
    pub fn of(w: &World) -> Self {
        let log = &w.act.log;
        let mut per_child: BTreeMap<&ExecutionId, u64> = BTreeMap::new();
        for p in &log.parks {
            *per_child.entry(&p.child).or_default() += 1;
        }
        let restarted = log
            .parks_committed
            .iter()
            .filter(|(parked, _, child)| {
                log.started
                    .iter()
                    .any(|s| s.child == *child && s.seq > *parked)
            })
            .count() as u64;
        ExhaustedCounts {
            parks: log.parks.len() as u64,
            parks_committed: log.parks_committed.len() as u64,
            parked_twice: per_child.values().filter(|n| **n > 1).count() as u64,
            notices: log.notices.len() as u64,
            restarted,
            operator: w.act.exhausted.counts,
        }
    }
}

impl std::ops::AddAssign for ExhaustedCounts {
    fn add_assign(&mut self, o: Self) {
        self.parks += o.parks;
        self.parks_committed += o.parks_committed;
        self.parked_twice += o.parked_twice;
        self.notices += o.notices;
        self.restarted += o.restarted;
        self.operator.read += o.operator.read;
        self.operator.fixed += o.operator.fixed;
        self.operator.unfixed += o.operator.unfixed;
        self.operator.cancelled += o.operator.cancelled;
        self.operator.restored_parked += o.operator.restored_parked;
    }
}
