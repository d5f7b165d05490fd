//! Paused activity routes (`Faults::route_pauses`), from the records of `weir.control` and
//! what the workers did with them ([`crate::sim::routes::RouteLog`], in the sequence of the
//! activity log's starts):
//!
//! - `route-pause`: no attempt (`Effect::Start`) of a request of a route's topic starts at an
//!   activity worker whose core was last told (`Input::TopicsPaused`) that the route is
//!   paused, and no workflow worker runs inline a request of a route it read paused; once a
//!   settled run ends, `weir.control` pauses no route (the client resumed them all) and every
//!   running worker that owns partitions read so (an activity worker told its core).
//!
//! That a request held by a pause is not lost — answered once, its parent finished with its
//! value — is the other checkers' (`activity-lost`, `activity-journal`, `activity-stuck`,
//! `results`, `unfinished`): a resumed route's requests must all run.
//!
//! And the tally of a run ([`RouteCounts`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::control::Controls;
use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, SimTime, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::process::Status;
use crate::sim::routes::{Told, fold};
use crate::sim::world::World;
use crate::sim::world::controls_now;

/// Paused routes: see the module docs.
pub(super) fn check_routes(add: &mut impl FnMut(Invariant, String), w: &World, settled: bool) {
    let (violations, _) = analyse(w, settled);
    for detail in violations {
        add(Invariant::RoutePause, detail);
    }
}

/// What the paused routes of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    /// Records a client wrote to `weir.control`: pauses…
    pub pauses_sent: u64,
    /// …tombstones (resumes)…
    pub resumes_sent: u64,
    /// …and records the workers skip (a value that does not decode, a key naming nothing).
    pub skipped_sent: u64,
    /// `Input::TopicsPaused` told to activity cores (each a change of the paused routes).
    pub told: u64,
    /// Attempts started of a request that its worker had fetched before or while its core
    /// was told the route is paused: held by the pause, started once it was resumed.
    pub held: u64,
    /// Requests of a route fetched by a worker whose core was told it is paused (fetched
    /// before the pause took effect: they wait).
    pub fetched_while_paused: u64,
    /// Attempts started while `weir.control` said their route is paused, by a worker that had
    /// not read it yet (the propagation delay).
    pub started_unaware: u64,
    /// Inline requests of a paused route sent to its topic instead of run.
    pub inline_held: u64,
    /// Inline runs of the activity route's requests.
    pub inline_ran: u64,
    /// External checks started and answers produced by a worker told the external route is
    /// paused.
    pub external_while_paused: u64,
}

impl RouteCounts {
    pub fn of(w: &World) -> Self {
        analyse(w, false).1
    }
}

impl std::ops::AddAssign for RouteCounts {
    fn add_assign(&mut self, o: Self) {
        self.pauses_sent += o.pauses_sent;
        self.resumes_sent += o.resumes_sent;
        self.skipped_sent += o.skipped_sent;
        self.told += o.told;
        self.held += o.held;
        self.fetched_while_paused += o.fetched_while_paused;
        self.started_unaware += o.started_unaware;
        self.inline_held += o.inline_held;
        self.inline_ran += o.inline_ran;
        self.external_while_paused += o.external_while_paused;
    }
}

/// The paused set in force at `seq` of a timeline (sorted by seq): the last entry before it.
fn at<'a>(timeline: Option<&Vec<&'a Told>>, seq: u64) -> Option<&'a Told> {
    let timeline = timeline?;
    let i = timeline.partition_point(|t| t.seq < seq);
    i.checked_sub(1).map(|i| timeline[i])
}

fn paused(told: Option<&Told>, topic: &str) -> bool {
    told.is_some_and(|t| t.topics.contains(topic))
}

/// The topic each activity's request is on.
fn request_topics(w: &World) -> BTreeMap<ExecutionId, Topic> {
    let mut out = BTreeMap::new();
    for topic in Topic::ROUTES {
        for (_, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(request)) = &r.payload {
                out.insert(request.execution_id.clone(), topic);
            }
        }
    }
    out
}

fn analyse(w: &World, settled: bool) -> (Vec<String>, RouteCounts) {
    let log = &w.routes.log;
    let ms = |t: SimTime| (t - w.start).num_milliseconds();
    let mut out = Vec::new();
    let mut counts = RouteCounts {
        inline_held: log.inline_held,
        external_while_paused: log.external_while_paused,
        ..RouteCounts::default()
    };

    // What the topic said after each record a client wrote.
    let mut said: Vec<(u64, BTreeSet<String>)> = Vec::new();
    let mut client = Controls::default();
    for send in &log.sends {
        if fold(&mut client, Some(&send.key), Some(&send.payload)) {
            match &send.payload {
                Payload::RoutePause(Some(_)) => counts.pauses_sent += 1,
                _ => counts.resumes_sent += 1,
            }
        } else {
            counts.skipped_sent += 1;
        }
        said.push((send.seq, client.paused_route_names()));
    }
    let said_at = |seq: u64| -> Option<&BTreeSet<String>> {
        let i = said.partition_point(|(s, _)| *s < seq);
        i.checked_sub(1).map(|i| &said[i].1)
    };

    // Per process: what its core was told, or what it read (a workflow worker).
    let mut core: BTreeMap<u64, Vec<&Told>> = BTreeMap::new();
    let mut view: BTreeMap<u64, Vec<&Told>> = BTreeMap::new();
    for t in &log.told {
        if t.core {
            counts.told += 1;
            core.entry(t.pid).or_default().push(t);
        } else {
            view.entry(t.pid).or_default().push(t);
        }
    }

    let mut fetched: BTreeMap<(u64, &ExecutionId), Vec<u64>> = BTreeMap::new();
    for f in &log.fetched {
        fetched.entry((f.pid, &f.child)).or_default().push(f.seq);
        if paused(at(core.get(&f.pid), f.seq), f.topic.name()) {
            counts.fetched_while_paused += 1;
        }
    }

    let topics = request_topics(w);
    let name = |pid: u64| {
        w.act
            .procs
            .get(&pid)
            .map_or_else(|| format!("p{pid}"), |p| p.name())
    };
    for s in &w.act.log.started {
        let topic = topics
            .get(&s.child)
            .copied()
            .unwrap_or(Topic::Activity)
            .name();
        let timeline = core.get(&s.pid);
        let told = at(timeline, s.seq);
        if paused(told, topic) {
            let told = told.expect("paused");
            out.push(format!(
                "{}: attempt {} started by {} at +{}ms, its core told at +{}ms that {topic} is paused ({:?})",
                s.child,
                s.attempt,
                name(s.pid),
                ms(s.at),
                ms(told.at),
                told.topics
            ));
            continue;
        }
        if said_at(s.seq).is_some_and(|t| t.contains(topic)) {
            counts.started_unaware += 1;
        }
        let last_fetch = fetched
            .get(&(s.pid, &s.child))
            .and_then(|seqs| seqs.iter().rev().find(|f| **f < s.seq))
            .copied();
        if let Some(f) = last_fetch {
            let held = paused(at(timeline, f), topic)
                || timeline.is_some_and(|l| {
                    l.iter()
                        .any(|t| t.seq > f && t.seq < s.seq && t.topics.contains(topic))
                });
            if held {
                counts.held += 1;
            }
        }
    }

    for run in &log.inline {
        counts.inline_ran += 1;
        let read = at(view.get(&run.pid), run.seq);
        if paused(read, run.topic) {
            let read = read.expect("paused");
            let name = w
                .procs
                .get(&run.pid)
                .map_or_else(|| format!("p{}", run.pid), |p| p.name());
            out.push(format!(
                "{}: run inline by {name} at +{}ms, which read at +{}ms that {} is paused ({:?})",
                run.child,
                ms(run.at),
                ms(read.at),
                run.topic,
                read.topics
            ));
        }
    }

    if settled {
        let now = controls_now(w).paused_route_names();
        if !now.is_empty() {
            out.push(format!(
                "the run settled with routes paused on weir.control: {now:?}"
            ));
        }
        // A process that owns nothing (between a revoke and its next assignment) acts on no
        // route: it tells its core at its next turn, as production's loop does.
        let acting = w
            .act
            .procs
            .values()
            .filter(|p| p.status == Status::Running && !p.owned.is_empty());
        for p in acting {
            let told = w
                .routes
                .followers
                .get(&p.pid)
                .map(|f| f.told.clone())
                .unwrap_or_default();
            if told != now {
                out.push(format!(
                    "{}: its core was last told {told:?} paused; weir.control says {now:?}",
                    p.name()
                ));
            }
        }
        for p in w.procs.values().filter(|p| p.status == Status::Running) {
            let read = w
                .routes
                .followers
                .get(&p.pid)
                .map(|f| f.controls.paused_route_names())
                .unwrap_or_default();
            if read != now {
                out.push(format!(
                    "{}: read {read:?} paused; weir.control says {now:?}",
                    p.name()
                ));
            }
        }
    }
    (out, counts)
}
