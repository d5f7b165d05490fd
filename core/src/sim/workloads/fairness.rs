//! Fairness by tenant (`Faults::fairness`; issue 35 item 4): submissions name tenants, and
//! now and then a client submits a burst of one tenant (6 to 12 at once) followed at once by
//! one to three of another, so that the owners hold a backlog of one lane while another's
//! records wait behind it in the log. Drawn from an RNG of its own (`Sim::fair_rng`), so a
//! seed's other draws stay what they were. See `checks/fairness.rs` for what is checked.

use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::workflows::Workflow;

/// The tenants of the simulated clients; `None` (no tenant) is drawn too.
const TENANTS: [&str; 3] = ["a", "b", "c"];

impl Sim {
    pub(in crate::sim) fn fair_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0xfa12_7e4a_0000)
    }

    /// The tenant of the next submission a client makes: the burst's while one is being
    /// submitted, else a drawn one (or none).
    pub(in crate::sim) fn next_tenant(&mut self) -> Option<String> {
        if !self.faults.fairness {
            return None;
        }
        if let Some(tenant) = &self.burst_tenant {
            return Some(tenant.clone());
        }
        let i = self.fair_rng.below(TENANTS.len() as u64 + 1) as usize;
        TENANTS.get(i).map(|t| (*t).to_owned())
    }

    /// Now and then (instead of one submission): a burst of one tenant, then a few of another.
    /// Not with `exhausted_pauses`: a burst parks more activities on a partition than
    /// `MAX_PARKED`, which that class's checks do not expect (`docs/known-gaps.md`).
    pub(in crate::sim) fn maybe_tenant_burst(&mut self) -> bool {
        if !self.faults.fairness || self.faults.exhausted_pauses || !self.fair_rng.chance(150) {
            return false;
        }
        let (first, second) = match self.fair_rng.below(3) {
            0 => ("a", "b"),
            1 => ("b", "c"),
            _ => ("c", "a"),
        };
        let many = self.fair_rng.range(6, 12);
        let few = self.fair_rng.range(1, 3);
        self.note(format!(
            "tenant burst: {many} of {first}, then {few} of {second}"
        ));
        for (tenant, count) in [(first, many), (second, few)] {
            self.burst_tenant = Some(tenant.to_owned());
            for _ in 0..count {
                let base = self.fair_rng.range(0, 999) as i64;
                let steps = self.fair_rng.range(1, 4) as i64;
                self.submit(Workflow::Seq, &[steps, base]);
            }
        }
        self.burst_tenant = None;
        true
    }
}
