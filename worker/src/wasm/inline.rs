//! Inline activities in the wasmtime host: the workflow worker's implementation of the core's
//! [`InlineActivities`] seam (the rules — what is answered in the batch, what goes to the
//! topic — are `weir_core::inline`'s and the driver's).
//!
//! A round runs one attempt of each request as a task of its own (the attempts of a batch
//! use every core), each bounded by its request's `timeout_millis` and the component's
//! `timeout_ms` like on the topic path, and all of them by the round's budget
//! ([`InlineConfig::budget`], `--inline-budget-ms`). The attempt's result goes through the
//! one retry decision ([`weir_core::retry::decide`]): an answer is journalled by the driver in
//! the same batch; a retry goes to the activity topic as the next attempt, not before its
//! backoff; an attempt still running when the budget is spent is interrupted (its task
//! aborted: wasmtime stops the guest at its next await point) and the request goes to the
//! topic as it was, to run there in full.
//!
//! Nothing of a rate-limited route (`rate` in `routes.toml`) runs inline: an inline attempt
//! takes no token of the bucket the route's activity workers start its attempts with, so it
//! would escape the limit; its requests go to the topic. Nor of a paused route
//! ([`PausedRoutes`]): the route's activity workers hold it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use weir_core::inline::{InlineActivities, InlineOutcome};
use weir_core::retry::{self, Decision};

use crate::codec::ActivityRequest;
use crate::model::{Ffqn, Ran};

use super::WasmHost;
use super::activity::jitter_unit;

/// Settings of the inline activities of a workflow worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineConfig {
    /// Off: every request goes to its topic (`--inline-activities off`).
    pub enabled: bool,
    /// How long one round of inline attempts may run; attempts not done by then go to their
    /// topics.
    pub budget: Duration,
}

/// The routes paused now ([`weir_core::control`]) and the topology that routes a function
/// to its topic: a request of a paused route is not run inline (it goes to its topic, where
/// the route's activity workers hold it).
pub struct PausedRoutes {
    pub controls: tokio::sync::watch::Receiver<weir_core::control::Controls>,
    pub topology: Arc<crate::topology::Topology>,
}

impl PausedRoutes {
    fn holds(&self, ffqn: &Ffqn) -> bool {
        self.topology
            .route(ffqn.ifc_fqn())
            .is_some_and(|route| self.controls.borrow().is_route_paused(&route.topic))
    }
}

/// The workflow worker's inline activities: those of `host` whose component is inline and
/// whose route in `topology` has no rate limit.
pub struct WasmInline {
    host: Arc<WasmHost>,
    config: InlineConfig,
    topology: Arc<crate::topology::Topology>,
    paused: Option<PausedRoutes>,
}

impl WasmInline {
    pub fn new(
        host: Arc<WasmHost>,
        config: InlineConfig,
        topology: Arc<crate::topology::Topology>,
    ) -> Self {
        WasmInline {
            host,
            config,
            topology,
            paused: None,
        }
    }

    /// Runs nothing inline of the routes `paused` holds.
    pub fn with_paused_routes(mut self, paused: PausedRoutes) -> Self {
        self.paused = Some(paused);
        self
    }
}

impl InlineActivities for WasmInline {
    fn runs(&self, ffqn: &Ffqn) -> bool {
        self.config.enabled
            && self.host.runs_inline(ffqn)
            && self.topology.rate_limit_of(ffqn.ifc_fqn()).is_none()
            && !self.paused.as_ref().is_some_and(|p| p.holds(ffqn))
    }

    async fn run(
        &mut self,
        requests: &[ActivityRequest],
        traces: &[Option<weir_core::trace::TraceParent>],
        _: DateTime<Utc>,
    ) -> Vec<InlineOutcome> {
        let deadline = tokio::time::Instant::now() + self.config.budget;
        let tasks: Vec<_> = requests
            .iter()
            .zip(traces.iter().chain(std::iter::repeat(&None)))
            .map(|(request, trace)| {
                let host = Arc::clone(&self.host);
                let request = request.clone();
                let span = tracing::info_span!("inline activity", execution = %request.execution_id, ffqn = %request.ffqn, attempt = request.attempt);
                crate::telemetry::set_parent(&span, *trace);
                tokio::spawn(tracing::Instrument::instrument(
                    async move { attempt(&host, &request).await },
                    span,
                ))
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for mut task in tasks {
            let outcome = match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(outcome)) => outcome,
                // A panicked attempt: the topic path runs it again.
                Ok(Err(_join)) => InlineOutcome::Spill,
                Err(_budget) => {
                    task.abort();
                    InlineOutcome::Spill
                }
            };
            outcomes.push(outcome);
        }
        outcomes
    }
}

/// One attempt of `request` and the retry decision on its result (its backoff counted from
/// when the attempt ended, as on the topic path).
async fn attempt(host: &WasmHost, request: &ActivityRequest) -> InlineOutcome {
    let Some((policy, _)) = host.activity_settings(&request.ffqn) else {
        return InlineOutcome::Spill;
    };
    let policy = policy.clone();
    // The attempt ends by the deadline at the latest (its parent's, if the parent has one).
    let started_at = Utc::now();
    let timeout = request.attempt_bound(started_at);
    let report = match host
        .run_activity_attempt(&request.ffqn, &request.params, timeout)
        .await
    {
        Ok(report) => report,
        Err(_unknown) => return InlineOutcome::Spill,
    };
    let finished_at = Utc::now();
    match retry::decide(
        &policy,
        request.attempt,
        report.result,
        finished_at,
        request.deadline,
        jitter_unit(&request.execution_id, request.attempt),
    ) {
        Decision::Answer(result) => InlineOutcome::Answered {
            result,
            ran: Ran {
                started_at,
                finished_at,
            },
        },
        // A pausing policy (`on_exhausted = "pause"`) is never inline (the registry makes it
        // so: only the activity worker can park a request); were one run here, its request
        // would go to its topic as it is, whose worker parks it.
        Decision::Park { .. } => InlineOutcome::Spill,
        Decision::Retry {
            attempt,
            not_before,
            ..
        } => {
            tracing::info!(execution = %request.execution_id, next_attempt = attempt, "inline attempt failed; the retry goes to the activity topic");
            InlineOutcome::Retry {
                attempt,
                not_before,
            }
        }
    }
}
