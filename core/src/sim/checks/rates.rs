//! Rate-limited activity routes (`Faults::rate_limits`), from the activity log's starts, the
//! workflow workers' inline runs and what each activity worker's turns left waiting
//! ([`crate::sim::rates::Rates`]):
//!
//! - `rate-limit`: for each activity worker process (one bucket each, full at its start), the
//!   attempts (`Effect::Start`) of the rate-limited route's topic it started satisfy, over
//!   every span `[s, t]` between two of them, `count ≤ burst + per_second · (t − s)` — the
//!   token bucket's arrival curve, checked here from the starts' instants alone, not from the
//!   core's bucket; no workflow worker ran a request of that route inline; and no turn left
//!   attempts waiting for a token without its core naming a wake by the time the token comes
//!   (production's loop sleeps until `next_wake`: a partition would be stuck).
//!
//! That the requests the limit holds are not lost — each answered once, its parent finished
//! with its value — is the other checkers' (`activity-lost`, `activity-journal`,
//! `activity-stuck`, `results`, `unfinished`).
//!
//! And the tally of a run ([`RateCounts`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, SimTime, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

/// Rate limits: see the module docs.
pub(super) fn check_rates(add: &mut impl FnMut(Invariant, String), w: &World) {
    let (violations, _) = analyse(w);
    for detail in violations {
        add(Invariant::RateLimit, detail);
    }
}

/// What the rate limits of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateCounts {
    /// Runs whose activity route is rate-limited.
    pub limited_runs: u64,
    /// Attempts of a rate-limited route started.
    pub attempts: u64,
    /// Of those, started with the last token of their span: the limit was reached
    /// (`count > burst + per_second · (t − s) − 1` for some earlier start `s`).
    pub at_limit: u64,
    /// Attempts the cores reported delayed by the limit.
    pub delayed: u64,
    /// Turns that ended with attempts waiting for a token.
    pub held_turns: u64,
    /// Inline requests of a rate-limited route sent to its topic instead.
    pub inline_held: u64,
}

impl RateCounts {
    pub fn of(w: &World) -> Self {
        analyse(w).1
    }
}

impl std::ops::AddAssign for RateCounts {
    fn add_assign(&mut self, o: Self) {
        self.limited_runs += o.limited_runs;
        self.attempts += o.attempts;
        self.at_limit += o.at_limit;
        self.delayed += o.delayed;
        self.held_turns += o.held_turns;
        self.inline_held += o.inline_held;
    }
}

/// The activities whose requests are on `topic`.
fn requests_on(w: &World, topic: Topic) -> BTreeSet<ExecutionId> {
    w.cluster
        .committed_records(topic)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Activity(request)) => Some(request.execution_id.clone()),
            _ => None,
        })
        .collect()
}

fn analyse(w: &World) -> (Vec<String>, RateCounts) {
    let rates = &w.act.rates;
    let mut out = rates.unwoken.clone();
    let Some(limit) = rates.limit else {
        return (out, RateCounts::default());
    };
    let mut counts = RateCounts {
        limited_runs: 1,
        delayed: rates.delayed,
        held_turns: rates.held_turns,
        inline_held: rates.inline_held,
        ..RateCounts::default()
    };
    let topic = Topic::Activity;
    let ms = |t: SimTime| (t - w.start).num_milliseconds();
    let limited = requests_on(w, topic);
    let mut starts: BTreeMap<u64, Vec<(SimTime, &ExecutionId, u32)>> = BTreeMap::new();
    for s in w
        .act
        .log
        .started
        .iter()
        .filter(|s| limited.contains(&s.child))
    {
        starts
            .entry(s.pid)
            .or_default()
            .push((s.at, &s.child, s.attempt));
    }
    let burst = f64::from(limit.burst);
    for (pid, starts) in &starts {
        counts.attempts += starts.len() as u64;
        // In the log's order, which is the order of the instants.
        for (j, (end, child, attempt)) in starts.iter().enumerate() {
            let mut reached = false;
            for (i, (begin, ..)) in starts[..=j].iter().enumerate() {
                let seconds = (*end - *begin).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
                let allowed = burst + limit.per_second * seconds;
                let taken = (j - i + 1) as f64;
                if taken > allowed + 1e-6 {
                    out.push(format!(
                        "{child}: attempt {attempt} started by p{pid} at +{}ms, its {} start of {} since +{}ms: more than {limit} allows ({allowed:.3})",
                        ms(*end),
                        j - i + 1,
                        topic.name(),
                        ms(*begin),
                    ));
                    break;
                }
                reached |= taken > allowed - 1.0;
            }
            if reached {
                counts.at_limit += 1;
            }
        }
    }
    for run in w
        .routes
        .log
        .inline
        .iter()
        .filter(|r| r.topic == topic.name())
    {
        out.push(format!(
            "{}: run inline by p{} at +{}ms, its route {} rate-limited ({limit})",
            run.child,
            run.pid,
            ms(run.at),
            run.topic
        ));
    }
    (out, counts)
}
