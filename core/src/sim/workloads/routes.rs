//! Paused activity routes (`Faults::route_pauses`; `weir route pause`, `weir route
//! resume`): a client writes records keyed `route:<request topic>` to `weir.control` — a
//! [`RoutePause`] pauses the route, a tombstone resumes it. Mostly it pauses the activity
//! route (the one the activity workers run attempts of, and the workflow workers run inline)
//! and resumes it later; sometimes the external route (the CLI refuses to, but the core must
//! go on answering its deadlines if one is listed), a route no worker serves; it pauses one
//! paused already (a new reason), resumes one that is not paused, and writes records the
//! workers skip (a value that does not decode, a key that names nothing). When the faults
//! stop, it goes on for a while as the executions run ([`Sim::routes_after_faults`]), then
//! resumes every route it paused ([`Sim::resume_routes`]), so that every request held can
//! run and the run can settle. Drawn from an RNG of its own ([`Sim::route_rng`]).
//!
//! How the workers follow the topic is `crate::sim::routes`'s; what is checked,
//! `checks/routes.rs`'s.

use crate::control::{ControlKey, RoutePause};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::routes::{OTHER_ROUTE, RouteSend};
use crate::sim::scheduler::Sim;
use crate::sim::world::lock;

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn route_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x0a07_e5ee_d000)
    }

    /// The RNG of the workers' followers of `weir.control` (`crate::sim::routes`).
    pub(in crate::sim) fn route_follower_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x0f01_10e5_d000)
    }

    /// During the fault phase, at about one step in twenty-five: a control record.
    pub(in crate::sim) fn maybe_route_control(&mut self) {
        if self.route_rng.chance(40) {
            self.random_route_control();
        }
    }

    /// After the fault phase (and the pauses' rounds, with `Faults::pause_resume`): for 5–30
    /// rounds the workers run without faults while the client goes on pausing and resuming
    /// routes; then it resumes every route it paused.
    pub(in crate::sim) fn routes_after_faults(&mut self) {
        self.stop_faults("faults stop; a client goes on pausing and resuming routes");
        let rounds = self.route_rng.range(5, 30);
        for _ in 0..rounds {
            for slot in self.slots() {
                let polls = self.route_rng.range(1, 8) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            if self.route_rng.chance(250) {
                self.random_route_control();
            }
            let ms = self.route_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
        self.resume_routes();
    }

    /// A control record, chosen as the module docs say.
    fn random_route_control(&mut self) {
        let activity = Topic::Activity.name();
        let external = Topic::External.name();
        let routes = [activity, external, OTHER_ROUTE];
        let r = self.route_rng.below(100);
        match r {
            0..60 => self.toggle_route(activity),
            60..72 => self.toggle_route(external),
            72..78 => self.toggle_route(OTHER_ROUTE),
            // A pause of a route paused already: its reason replaced, nothing else changes.
            78..86 => {
                let paused: Vec<String> = self.paused_routes.iter().cloned().collect();
                if paused.is_empty() {
                    self.toggle_route(activity);
                } else {
                    let route = self.route_rng.pick(&paused).clone();
                    self.pause_route(&route);
                }
            }
            // A resume of a route that is not paused: nothing changes.
            86..92 => {
                let running: Vec<&str> = routes
                    .into_iter()
                    .filter(|r| !self.paused_routes.contains(*r))
                    .collect();
                if running.is_empty() {
                    self.toggle_route(activity);
                } else {
                    let route = *self.route_rng.pick(&running);
                    self.resume_route(route);
                }
            }
            // A value that does not decode, under the activity route's key: skipped (what it
            // says of that route stands).
            92..96 => {
                let key = ControlKey::Route(activity.to_owned()).to_string();
                self.send_control(key, Payload::Garbage("not a RoutePause".to_owned()));
            }
            // A key that names nothing Weir controls: skipped.
            _ => {
                let pause = self.route_pause(activity);
                self.send_control(
                    format!("function:{activity}"),
                    Payload::RoutePause(Some(pause)),
                );
            }
        }
    }

    fn toggle_route(&mut self, route: &str) {
        if self.paused_routes.contains(route) {
            self.resume_route(route);
        } else {
            self.pause_route(route);
        }
    }

    fn route_pause(&mut self, route: &str) -> RoutePause {
        let n = lock(&self.world).routes.log.sends.len() + 1;
        RoutePause {
            route: route.to_owned(),
            reason: format!("sim route pause {n}"),
            paused_at: self.now(),
        }
    }

    /// A client pauses `route` (`weir route pause`): a [`RoutePause`] keyed by it.
    pub fn pause_route(&mut self, route: &str) {
        let pause = self.route_pause(route);
        let key = ControlKey::Route(route.to_owned()).to_string();
        self.send_control(key, Payload::RoutePause(Some(pause)));
        self.paused_routes.insert(route.to_owned());
    }

    /// A client resumes `route` (`weir route resume`): a tombstone of its key.
    pub fn resume_route(&mut self, route: &str) {
        let key = ControlKey::Route(route.to_owned()).to_string();
        self.send_control(key, Payload::RoutePause(None));
        self.paused_routes.remove(route);
    }

    /// The faults stop: the client resumes every route it paused.
    pub fn resume_routes(&mut self) {
        let paused: Vec<String> = self.paused_routes.iter().cloned().collect();
        for route in paused {
            self.resume_route(&route);
        }
    }

    /// Appends a record to `weir.control` (one partition; not transactional: visible at
    /// once), and logs it.
    fn send_control(&mut self, key: String, payload: Payload) {
        let what = match &payload {
            Payload::RoutePause(Some(p)) => format!("pause ({})", p.reason),
            Payload::RoutePause(None) => "tombstone".to_owned(),
            other => format!("{other:?}"),
        };
        let offset = {
            let mut w = lock(&self.world);
            let (_, offset) =
                w.client_append_at(Topic::Control, 0, key.clone(), None, payload.clone());
            let seq = w.act.log.next();
            let at = w.now;
            w.routes.log.sends.push(RouteSend {
                seq,
                at,
                offset,
                key: key.clone(),
                payload,
            });
            offset
        };
        self.note(format!(
            "control `{key}`: {what} -> weir.control/0@{offset}"
        ));
    }
}
