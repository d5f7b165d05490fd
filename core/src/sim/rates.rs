//! Rate-limited activity routes (`Faults::rate_limits`; `rate = { per_second, burst }` on a
//! route in `topology/routes.toml`): in most runs of the class the activity route carries a
//! rate limit, drawn from an RNG of its own ([`Rates::draw`]: the run's other draws are the
//! same with or without it), which every activity worker process's core is configured with
//! ([`crate::activity::CoreConfig::rate_limits`]) — one bucket per process, as in production —
//! and which the workflow workers' inline seam honours (`SimInline::runs`: nothing of a
//! rate-limited route runs inline). The external route is never limited (the topology refuses
//! it).
//!
//! [`Rates`] keeps what `checks/rates.rs` needs besides the activity log's starts: what each
//! turn of an activity worker left waiting for a token, and whether its core named a wake for
//! it.

use std::collections::BTreeMap;

use chrono::TimeDelta;

use super::cluster::{SimTime, Topic};
use super::rng::Rng;
use crate::activity::RateLimit;

/// The rate limits of a run and what the activity workers did with them.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    /// The activity route's limit in this run (`None`: not limited).
    pub limit: Option<RateLimit>,
    /// Attempts the cores reported delayed by the limit (`Counters::rate_limited`).
    pub delayed: u64,
    /// Turns of an activity worker that ended with attempts waiting for a token.
    pub held_turns: u64,
    /// Turns that ended with attempts waiting for a token while the core named no wake within
    /// one interval of the turn (production's loop would sleep past the token: stuck).
    pub unwoken: Vec<String>,
    /// Inline requests of the rate-limited route sent to its topic instead of run.
    pub inline_held: u64,
}

impl Rates {
    /// The class's draw for `seed`: three runs in four limit the activity route, at a rate
    /// of half an attempt to twenty a second, a burst of one to five.
    pub fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x7a7e_11b1_7000);
        let limit = (!rng.chance(250)).then(|| RateLimit {
            per_second: *rng.pick(&[0.5, 1.0, 2.0, 5.0, 20.0]),
            burst: *rng.pick(&[1, 1, 2, 3, 5]),
        });
        Rates {
            limit,
            ..Rates::default()
        }
    }

    /// The limits by request topic, as `CoreConfig::rate_limits` takes them.
    pub fn limits(&self) -> BTreeMap<String, RateLimit> {
        self.limit
            .iter()
            .map(|limit| (Topic::Activity.name().to_owned(), *limit))
            .collect()
    }

    /// Whether requests of `topic` are rate-limited.
    pub fn limits_topic(&self, topic: &str) -> bool {
        self.limit.is_some() && topic == Topic::Activity.name()
    }

    /// At the end of a turn of activity worker `name` at `now`: `held` ready attempts wait for
    /// a token, and its core's next wake is `wake`. The token comes within one interval of the
    /// last one taken (no later than `now` plus an interval), so a wake later than that (or
    /// none) leaves them waiting for whatever else wakes the loop.
    pub fn observe_turn(
        &mut self,
        name: &str,
        now: SimTime,
        start: SimTime,
        held: usize,
        wake: Option<SimTime>,
    ) {
        let Some(limit) = self.limit.filter(|_| held > 0) else {
            return;
        };
        self.held_turns += 1;
        let interval = limit.interval().unwrap_or(TimeDelta::MAX);
        let bound = now.checked_add_signed(interval).unwrap_or(SimTime::MAX_UTC);
        if wake.is_none_or(|at| at > bound) {
            let ms = |t: SimTime| (t - start).num_milliseconds();
            self.unwoken.push(format!(
                "{name}: at +{}ms {held} attempts wait for a token ({limit}), and its core's next wake is {:?} (the token is due by +{}ms)",
                ms(now),
                wake.map(ms),
                ms(bound)
            ));
        }
    }
}
