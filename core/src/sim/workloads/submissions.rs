//! Submissions: a client submits executions of the scripted workflows (the mix follows the
//! run's fault classes), some again, some scheduled for later or with a deadline; and the
//! poison step's records: undecodable, misrouted, conflicting, of an unknown function.

use chrono::Duration;
use serde_json::{Value, json};

use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn};
use crate::records::Submission;
use crate::sim::cluster::{Payload, SimTime, Topic};
use crate::sim::scheduler::{Sim, epoch};
use crate::sim::sent::Submitted;
use crate::sim::workflows::{Workflow, unknown_ffqn};
use crate::sim::world::lock;

impl Sim {
    /// A client submits a new execution of `workflow`.
    pub fn submit(&mut self, workflow: Workflow, params: &[i64]) -> ExecutionId {
        self.submit_at(workflow, params, None)
    }

    /// A client submits a new execution of `workflow` to start at `at`.
    pub fn submit_at(
        &mut self,
        workflow: Workflow,
        params: &[i64],
        at: Option<SimTime>,
    ) -> ExecutionId {
        self.submit_with_deadline(workflow, params, at, None)
    }

    /// A client submits a new execution of `workflow` to start at `at`, with `deadline`.
    pub fn submit_with_deadline(
        &mut self,
        workflow: Workflow,
        params: &[i64],
        at: Option<SimTime>,
        deadline: Option<SimTime>,
    ) -> ExecutionId {
        let id = self.new_id();
        self.submit_execution(
            id.clone(),
            workflow.ffqn(),
            json!(params),
            (at, deadline),
            workflow.expected(params),
        );
        id
    }

    /// A client submits `id` (again, if it was submitted before: the same submission), to
    /// start at `scheduled_at`, with `deadline`.
    pub fn submit_execution(
        &mut self,
        id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        (scheduled_at, deadline): (Option<SimTime>, Option<SimTime>),
        expected: ExecutionResult,
    ) {
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: ffqn.clone(),
            params: params.clone(),
            parent: None,
            scheduled_at,
            correlation_id: Some(format!("c-{id}")),
            metadata: Default::default(),
            deadline,
            concurrency: self
                .faults
                .concurrency
                .then(|| concurrency_key(&id, &ffqn))
                .flatten(),
            tenant: self.next_tenant(),
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            id.to_string(),
            None,
            Payload::Submission(submission),
        );
        let entry = self.submitted.entry(id.clone()).or_insert(Submitted {
            ffqn,
            params,
            scheduled_at,
            expected,
            times: 0,
            conflicts: 0,
            events: Vec::new(),
            cancelled: false,
            early_cancel: None,
            deadline,
        });
        entry.times += 1;
        let times = entry.times;
        let text = format!(
            "submit {id} {}{} {}{}{} -> submissions/{partition}@{offset}",
            entry.ffqn.function(),
            entry.params,
            entry
                .scheduled_at
                .map(|t| format!("at +{}ms ", (t - epoch()).num_milliseconds()))
                .unwrap_or_default(),
            entry
                .deadline
                .map(|t| format!("by +{}ms ", (t - epoch()).num_milliseconds()))
                .unwrap_or_default(),
            if times > 1 { "(again)" } else { "" },
        );
        self.note(text);
    }

    /// Submits an already submitted execution again.
    pub fn resubmit(&mut self, id: &ExecutionId) {
        // A trigger's execution is submitted by the trigger workers alone, a reset's by the
        // reset execution's owner.
        if self.trig_sends.ids.contains(id) || self.made_by_reset(id) {
            return;
        }
        if let Some(s) = self.submitted.get(id).cloned() {
            let times = (s.scheduled_at, s.deadline);
            self.submit_execution(id.clone(), s.ffqn, s.params, times, s.expected);
        }
    }

    /// A submission of a function nobody exports: dead-lettered, finished with
    /// `unknown-function`.
    pub fn submit_unknown(&mut self) -> ExecutionId {
        let id = self.new_id();
        let ffqn = unknown_ffqn();
        let expected = ExecutionResult::ExecutionError(ExecutionError::new(
            ExecutionErrorKind::UnknownFunction,
            format!("no component exports {ffqn}"),
        ));
        self.submit_execution(id.clone(), ffqn, json!([]), (None, None), expected);
        id
    }

    /// An undecodable record on submissions: dead-lettered once.
    pub fn submit_poison(&mut self) {
        let key = format!("poison-{}", self.rng.next_u64() % 1_000_000);
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            key.clone(),
            None,
            Payload::Garbage(format!("{key}: not Avro")),
        );
        self.poison.push((partition, offset));
        self.note(format!(
            "poison record {key} -> submissions/{partition}@{offset}"
        ));
    }

    /// A valid submission on a partition other than its key's (issue 11 item 3): dead-lettered
    /// once, never run.
    pub fn submit_misrouted(&mut self) {
        let id = self.new_id();
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: Workflow::Seq.ffqn(),
            params: json!([1, 0]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        };
        let mut w = lock(&self.world);
        let partitions = w.cluster.partitions(Topic::Submissions);
        let right = w.cluster.partition_for(Topic::Submissions, &id.to_string());
        // With one partition, the key is what is wrong.
        let (partition, key) = if partitions > 1 {
            ((right + 1) % partitions, id.to_string())
        } else {
            (right, format!("{id}-other"))
        };
        let (partition, offset) = w.client_append_at(
            Topic::Submissions,
            partition,
            key.clone(),
            None,
            Payload::Submission(submission),
        );
        drop(w);
        self.poison.push((partition, offset));
        self.note(format!(
            "misrouted submission of {id} keyed `{key}` -> submissions/{partition}@{offset}"
        ));
    }

    /// A submission of an existing top-level id with other params (issue 11 item 4):
    /// dead-lettered once and answered with a `conflict` error; the execution is untouched.
    pub fn submit_conflicting(&mut self, id: &ExecutionId) {
        // A conflict could come before the trigger's (or the reset's) own submission, and win.
        if self.trig_sends.ids.contains(id) || self.made_by_reset(id) {
            return;
        }
        let Some(s) = self.submitted.get_mut(id) else {
            return;
        };
        s.conflicts += 1;
        let submission = Submission {
            execution_id: id.clone(),
            ffqn: s.ffqn.clone(),
            params: json!(["other params", s.conflicts]),
            parent: None,
            scheduled_at: None,
            correlation_id: Some(format!("conflict-{id}")),
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        };
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Submissions,
            id.to_string(),
            None,
            Payload::Submission(submission),
        );
        self.poison.push((partition, offset));
        self.note(format!(
            "conflicting submission of {id} -> submissions/{partition}@{offset}"
        ));
    }

    pub(in crate::sim) fn random_submission(&mut self) {
        if self.maybe_tenant_burst() {
            return;
        }
        if self.faults.duplicate_submissions && !self.submitted.is_empty() && self.rng.chance(150) {
            let i = self.rng.below(self.submitted.len() as u64) as usize;
            let id = self.submitted.get_index(i).map(|(id, _)| id.clone());
            if let Some(id) = id {
                self.resubmit(&id);
                return;
            }
        }
        let mut choices = vec![
            Workflow::Seq,
            Workflow::Sleepy,
            Workflow::Fanout,
            Workflow::Mixed,
            Workflow::Parent,
            Workflow::Abandon,
        ];
        if self.faults.long_timers {
            choices.push(Workflow::LongSleep);
        }
        if self.faults.events {
            choices.push(Workflow::Approval);
        }
        if self.faults.correlation {
            // Often: several share a key.
            choices.extend([Workflow::Order; 4]);
        }
        if self.faults.activity_workers {
            choices.extend([Workflow::Watched, Workflow::Watched]);
        }
        if self.faults.stub_writes {
            choices.extend([
                Workflow::Stubbed,
                Workflow::Stubbed,
                Workflow::StubRace,
                Workflow::StubRace,
            ]);
        }
        let workflow = *self.rng.pick(&choices);
        let r = &mut self.rng;
        let base = r.range(0, 999) as i64;
        let params: Vec<i64> = match workflow {
            Workflow::Seq | Workflow::Parent => vec![r.range(1, 4) as i64, base],
            Workflow::Fanout => vec![r.range(1, 5) as i64, base],
            Workflow::Sleepy => vec![r.range(1, 3) as i64, r.range(50, 20_000) as i64, base],
            Workflow::Mixed => vec![r.range(1, 4) as i64, r.range(50, 15_000) as i64, base],
            Workflow::LongSleep => vec![r.range(70, 180) as i64],
            Workflow::Watched => vec![base],
            Workflow::Abandon => vec![r.range(0, 3) as i64, r.range(50, 15_000) as i64, base],
            // A third wait with no timeout (`await-event`).
            Workflow::Approval if r.chance(333) => vec![0],
            Workflow::Approval => vec![r.range(50, 15_000) as i64],
            Workflow::Order => {
                let n = r.below(self.order_keys as u64) as i64;
                let ms = match r.weighted(&[3, 1, 5]) {
                    0 => 0,
                    1 => -1,
                    _ => r.range(50, 15_000) as i64,
                };
                vec![n, ms, r.range(0, 2) as i64]
            }
            Workflow::Stubbed => vec![],
            // Often short enough that the delay wins.
            Workflow::StubRace => vec![r.range(500, 30_000) as i64],
            // Never chosen: the stub step submits them.
            Workflow::StubWriter => vec![],
        };
        let at = if self.faults.scheduled && self.rng.chance(150) {
            let ms = self.rng.range(100, 20_000) as i64;
            Some(self.now() + Duration::milliseconds(ms))
        } else {
            None
        };
        // Mostly within the run's span; a few passed before the submission is read.
        let deadline = if self.faults.deadlines && self.rng.chance(300) {
            let ms = self.rng.range(0, 60_000) as i64 - 2_000;
            Some(self.now() + Duration::milliseconds(ms))
        } else {
            None
        };
        self.submit_with_deadline(workflow, &params, at, deadline);
    }

    /// The `poison` step: a misrouted, conflicting, undecodable or unknown submission.
    pub(in crate::sim) fn random_poison(&mut self) {
        match self.rng.below(4) {
            0 => self.submit_misrouted(),
            1 if !self.submitted.is_empty() => {
                let i = self.rng.below(self.submitted.len() as u64) as usize;
                if let Some(id) = self.submitted.get_index(i).map(|(id, _)| id.clone()) {
                    self.submit_conflicting(&id);
                }
            }
            _ if self.rng.chance(500) => self.submit_poison(),
            _ => {
                self.submit_unknown();
            }
        }
    }
}

/// The concurrency key of a submission of `id` under `Faults::concurrency`, by a digest of
/// the id (no draw): none for a quarter, else `k1` (limit 1) or `k2` (limit 2). None for a
/// workflow that waits for what another submission writes (a stub): holding the key's one
/// place while its writer waits behind it for that place would wait forever — as it would
/// for a user who gave both one key (`docs/design/concurrency.md`).
pub(crate) fn concurrency_key(
    id: &ExecutionId,
    ffqn: &crate::model::Ffqn,
) -> Option<crate::concurrency::ConcurrencyKey> {
    if matches!(
        Workflow::of(ffqn),
        Some(Workflow::Stubbed | Workflow::StubRace)
    ) {
        return None;
    }
    let digest = id
        .to_string()
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let (key, limit) = match digest % 4 {
        0 => return None,
        1 | 3 => ("k1", 1),
        _ => ("k2", 2),
    };
    Some(crate::concurrency::ConcurrencyKey {
        key: key.to_owned(),
        limit: Some(limit),
    })
}
