//! Inline activities: the rule by which a workflow worker answers an activity request itself,
//! in the very transaction that journals the request, instead of sending it to its topic.
//!
//! The promise is unchanged: **every activity request is either answered in the transaction
//! that journals it, or sent to its topic in that transaction.** Nothing of an inline attempt
//! is visible unless the batch commits; a batch that does not commit is read again and the
//! attempt runs again (activities are at-least-once on both paths).
//!
//! After a batch's inputs are stepped, the driver takes the requests the [`InlineActivities`]
//! seam runs out of the batch ([`take_requests`]) and runs one attempt of each, concurrently;
//! each [`InlineOutcome`] becomes either a response delivered to the parent in the same batch
//! (journalled, and the run goes on: consecutive inline steps of one execution commit
//! together) or a request sent to the topic ([`spill`]) — as it was when the attempt did not
//! run or did not finish within the seam's budget, or as its next attempt, not before its
//! backoff, when it failed and the retry policy (the one [`crate::retry::decide`]) retries it.
//! Rounds repeat while new inline requests appear, at most
//! [`DriverConfig::max_inline_rounds`](crate::driver::DriverConfig::max_inline_rounds); what
//! is left then goes to the topic.
//!
//! A request whose join set was closed in the same batch (its `CancelActivity` follows it) is
//! not run at all: the execution has answered it `cancelled` already, and neither the request
//! nor its cancel leaves the worker.

use std::future::Future;

use chrono::{DateTime, Utc};

use crate::model::{ExecutionId, ExecutionResult, Ffqn, Ran};
use crate::processor::{Batch, Effect};
use crate::records::ActivityRequest;

/// How one inline attempt of a request went.
#[derive(Debug, Clone, PartialEq)]
pub enum InlineOutcome {
    /// The answer (the retry policy decided: `ok`, an `err` not retried, or the error that
    /// ends the retries), and when the attempt ran by the seam's clock.
    Answered { result: ExecutionResult, ran: Ran },
    /// The attempt failed and is retried: the request goes to its topic as attempt
    /// `attempt`, to run no earlier than `not_before`.
    Retry {
        attempt: u32,
        not_before: DateTime<Utc>,
    },
    /// Not run, or not finished within the budget (interrupted): the request goes to its
    /// topic as it was.
    Spill,
}

/// The seam to whatever runs activities inside the workflow worker: the wasmtime host in
/// production, a scripted one in the simulation.
pub trait InlineActivities: Send {
    /// Whether requests for `ffqn` are run inline by this worker.
    fn runs(&self, ffqn: &Ffqn) -> bool;

    /// Runs one attempt of each request, concurrently; one outcome per request, in order.
    /// `traces` are the requests' trace contexts, by index (their attempts' spans go in
    /// them). `now` is the batch's time (for the retry's `not_before`).
    fn run(
        &mut self,
        requests: &[ActivityRequest],
        traces: &[Option<crate::trace::TraceParent>],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Vec<InlineOutcome>> + Send;
}

/// No inline activities: every request goes to its topic.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoInline;

impl InlineActivities for NoInline {
    fn runs(&self, _: &Ffqn) -> bool {
        false
    }

    async fn run(
        &mut self,
        requests: &[ActivityRequest],
        _: &[Option<crate::trace::TraceParent>],
        _: DateTime<Utc>,
    ) -> Vec<InlineOutcome> {
        vec![InlineOutcome::Spill; requests.len()]
    }
}

/// Takes out of `batch` the activity requests (from the effect at index `from` on) that
/// `inline` runs, and drops those cancelled later in the batch together with their cancels.
/// Returns the requests to run, in order.
pub fn take_requests<I: InlineActivities + ?Sized>(
    batch: &mut Batch,
    from: usize,
    inline: &I,
) -> Vec<ActivityRequest> {
    let cancelled: Vec<(ExecutionId, ExecutionId)> = batch.effects[from..]
        .iter()
        .filter_map(|effect| match effect {
            Effect::CancelActivity { parent, child, .. } => Some((parent.clone(), child.clone())),
            _ => None,
        })
        .collect();
    let mut dropped: Vec<(ExecutionId, ExecutionId)> = Vec::new();
    let mut taken = Vec::new();
    let mut kept = Vec::with_capacity(batch.effects.len());
    for (index, effect) in std::mem::take(&mut batch.effects).into_iter().enumerate() {
        match effect {
            Effect::RequestActivity(request) if index >= from && inline.runs(&request.ffqn) => {
                let pair = (
                    request.parent_execution_id.clone(),
                    request.execution_id.clone(),
                );
                if cancelled.contains(&pair) {
                    dropped.push(pair);
                } else {
                    taken.push(request);
                }
            }
            Effect::CancelActivity { parent, child, .. }
                if index >= from && dropped.contains(&(parent.clone(), child.clone())) => {}
            effect => kept.push(effect),
        }
    }
    batch.effects = kept;
    taken
}

/// The request that goes to the topic for an outcome that is not an answer (`None` for an
/// answer).
pub fn spill(request: ActivityRequest, outcome: &InlineOutcome) -> Option<Effect> {
    match outcome {
        InlineOutcome::Answered { .. } => None,
        InlineOutcome::Spill => Some(Effect::RequestActivity(request)),
        InlineOutcome::Retry {
            attempt,
            not_before,
        } => Some(Effect::RetryActivity {
            request: ActivityRequest {
                attempt: *attempt,
                ..request
            },
            not_before: *not_before,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Only(&'static str);
    impl InlineActivities for Only {
        fn runs(&self, ffqn: &Ffqn) -> bool {
            ffqn.as_str() == self.0
        }
        async fn run(
            &mut self,
            r: &[ActivityRequest],
            _: &[Option<crate::trace::TraceParent>],
            _: DateTime<Utc>,
        ) -> Vec<InlineOutcome> {
            vec![InlineOutcome::Spill; r.len()]
        }
    }

    fn request(parent: &ExecutionId, n: u64, ffqn: &str) -> ActivityRequest {
        let join_set = crate::model::JoinSetId::generated(1).expect("join set id");
        ActivityRequest {
            execution_id: parent.child(&join_set, n),
            parent_execution_id: parent.clone(),
            ffqn: ffqn.parse().expect("ffqn"),
            params: json!([]),
            attempt: 1,
            timeout_millis: None,
            deadline: None,
        }
    }

    #[test]
    fn takes_the_inline_requests_after_from_and_drops_cancelled_ones_with_their_cancels() {
        let parent = ExecutionId::top_level(ulid::Ulid::from_parts(1, 2));
        let a = request(&parent, 0, "p:i/f.inline");
        let b = request(&parent, 1, "p:i/f.remote");
        let c = request(&parent, 2, "p:i/f.inline");
        let d = request(&parent, 3, "p:i/f.inline");
        let mut batch = Batch::new(Utc::now());
        batch.effects = vec![
            Effect::RequestActivity(a.clone()),
            Effect::RequestActivity(b.clone()),
            Effect::RequestActivity(c.clone()),
            Effect::RequestActivity(d.clone()),
            Effect::CancelActivity {
                parent: parent.clone(),
                child: d.execution_id.clone(),
                ffqn: d.ffqn.clone(),
            },
        ];
        let taken = take_requests(&mut batch, 1, &Only("p:i/f.inline"));
        assert_eq!(taken, vec![c]);
        assert_eq!(
            batch.effects,
            vec![Effect::RequestActivity(a), Effect::RequestActivity(b)],
            "before `from` and not inline: kept; cancelled: dropped with its cancel"
        );
    }

    #[test]
    fn only_answers_stay_out_of_the_topic() {
        let parent = ExecutionId::top_level(ulid::Ulid::from_parts(1, 2));
        let r = request(&parent, 0, "p:i/f.inline");
        let at = Utc::now();
        assert_eq!(
            spill(
                r.clone(),
                &InlineOutcome::Answered {
                    result: ExecutionResult::Ok(json!(1)),
                    ran: Ran {
                        started_at: at,
                        finished_at: at,
                    },
                }
            ),
            None
        );
        assert_eq!(
            spill(r.clone(), &InlineOutcome::Spill),
            Some(Effect::RequestActivity(r.clone()))
        );
        let retried = spill(
            r.clone(),
            &InlineOutcome::Retry {
                attempt: 2,
                not_before: at,
            },
        );
        assert_eq!(
            retried,
            Some(Effect::RetryActivity {
                request: ActivityRequest { attempt: 2, ..r },
                not_before: at,
            })
        );
    }
}
