//! The trigger's source and its workers (`Faults::triggers`): the source's writer sends
//! records (new orders, its retries, undecodable ones, ones missing a field, ones mapped over
//! the record limit) and records what each must become; the faults of the trigger workers.
//! The workers themselves are `sim/triggers.rs`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::ExecutionId;
use crate::processor::Effect;
use crate::records::DlqReason;
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::process::Status;
use crate::sim::scheduler::Sim;
use crate::sim::sent::Submitted;
use crate::sim::triggers::{Decided, SOURCE_TOPIC, decide, sim_trigger};
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

impl Sim {
    /// Draws the trigger of the run and starts its workers (once).
    pub(in crate::sim) fn trig_configure(&mut self) {
        let by_field = self.rng.chance(500);
        let max_batch = self.rng.range(1, 8) as usize;
        let workers = self.rng.range(1, 2);
        {
            let mut w = lock(&self.world);
            w.trig.trigger = Some(sim_trigger(by_field));
            w.trig.max_batch = max_batch;
        }
        self.note(format!(
            "trigger `orders` on {SOURCE_TOPIC}: identity {}, batches of {max_batch}",
            if by_field {
                "/id"
            } else {
                "topic/partition/offset"
            }
        ));
        for _ in 0..workers {
            self.trig_add();
        }
    }

    /// A new trigger worker slot, its process started.
    pub(in crate::sim) fn trig_add(&mut self) {
        let slot = self.next_slot;
        self.next_slot += 1;
        let pid = self.next_pid;
        self.next_pid += 1;
        lock(&self.world).trig_start(slot, pid);
        self.note(format!("add trigger worker t{slot} (p{pid})"));
    }

    /// One turn of the worker of `slot`; a dead one is restarted first (the supervisor).
    pub(in crate::sim) fn trig_run(&mut self, slot: u32) -> bool {
        let pid = lock(&self.world).trig.slots.get(&slot).copied().flatten();
        let pid = match pid {
            Some(pid) => pid,
            None => {
                let pid = self.next_pid;
                self.next_pid += 1;
                lock(&self.world).trig_start(slot, pid);
                self.note(format!("supervisor restarts t{slot} as p{pid}"));
                pid
            }
        };
        lock(&self.world).trig_turn(pid)
    }

    /// Every trigger worker until none has anything to do (bounded).
    pub(in crate::sim) fn trig_all(&mut self, turns: usize) {
        let slots: Vec<u32> = lock(&self.world).trig.slots.keys().copied().collect();
        for _ in 0..turns {
            let mut any = false;
            for &slot in &slots {
                any |= self.trig_run(slot);
            }
            if !any {
                break;
            }
        }
    }

    /// The source's writer sends a record: mostly a new order, some sent again (the same
    /// record: the writer's retry), some undecodable, missing a field, or padded over the
    /// record limit. What it must become is recorded: a submission of the trigger's
    /// function (by the same mapping), or a dead letter.
    pub(in crate::sim) fn trig_send(&mut self) {
        let roll = self.rng.range(0, 40);
        let again = roll < 8 && !self.trig_sends.mapped.is_empty();
        let (key, value): (Option<String>, Vec<u8>) = if again {
            let i = self.rng.below(self.trig_sends.mapped.len() as u64) as usize;
            self.trig_sends.mapped[i].clone()
        } else {
            self.trig_sends.orders += 1;
            let id = format!("o-{}", self.trig_sends.orders);
            let n = self.rng.range(1, 3);
            let base = self.rng.range(0, 100);
            let value = match roll {
                8..=10 => b"{\"id\": \"broken".to_vec(),
                11..=13 => serde_json::to_vec(&json!({"id": id, "base": base})).unwrap_or_default(),
                14..=15 => serde_json::to_vec(&json!({"id": id, "n": n, "base": vec![base; 600]}))
                    .unwrap_or_default(),
                _ => {
                    serde_json::to_vec(&json!({"id": id, "n": n, "base": base})).unwrap_or_default()
                }
            };
            (Some(id), value)
        };
        let (partition, offset, decided) = {
            let mut w = lock(&self.world);
            let now = w.now;
            let (partition, offset) = w.cluster.append_source(key.clone(), value.clone(), now);
            w.trig.counts.sent += 1;
            let record = w.cluster.source[partition as usize][offset as usize].clone();
            let trigger = w.trig.trigger.clone().expect("configured");
            (partition, offset, decide(&trigger, partition, &record, now))
        };
        let text = String::from_utf8_lossy(&value)
            .chars()
            .take(60)
            .collect::<String>();
        match decided {
            Ok(Decided {
                effect: Effect::Submit(submission),
                ..
            }) => {
                let params: Value = submission.params.clone();
                let ints: Vec<i64> = params
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_i64).collect())
                    .unwrap_or_default();
                self.trig_sends.ids.insert(submission.execution_id.clone());
                self.submitted
                    .entry(submission.execution_id.clone())
                    .or_insert_with(|| Submitted {
                        ffqn: submission.ffqn.clone(),
                        params,
                        scheduled_at: None,
                        expected: Workflow::Seq.expected(&ints),
                        times: 1,
                        conflicts: 0,
                        events: Vec::new(),
                        cancelled: false,
                        early_cancel: None,
                        deadline: None,
                    });
                self.note(format!(
                    "source writer: {text} -> {SOURCE_TOPIC}/{partition}@{offset} (starts {})",
                    submission.execution_id
                ));
            }
            Ok(other) => unreachable!(
                "the sim's trigger only starts executions: {:?}",
                other.effect
            ),
            Err((reason, _)) => {
                self.trig_sends.poison.push((partition, offset, reason));
                self.note(format!(
                    "source writer: {text} -> {SOURCE_TOPIC}/{partition}@{offset} (dead-lettered: {reason:?})"
                ));
            }
        }
        if !again && decided_ok(&self.trig_sends.poison, partition, offset) {
            self.trig_sends.mapped.push((key, value));
        }
    }

    /// A trigger fault: a kill inside a transaction, a freeze into a zombie, or an offsets
    /// reset.
    pub(in crate::sim) fn trig_fault(&mut self, action: &str) {
        let live: Vec<u64> = {
            let w = lock(&self.world);
            w.trig
                .procs
                .values()
                .filter(|p| p.status == Status::Running)
                .map(|p| p.pid)
                .collect()
        };
        match action {
            "trig-crash" if !live.is_empty() => {
                let pid = *self.rng.pick(&live);
                self.note(format!("kill trigger worker p{pid}"));
                lock(&self.world).trig_kill(pid);
            }
            "trig-zombie" if !live.is_empty() => {
                let pid = *self.rng.pick(&live);
                let ms = self.rng.range(5_000, 40_000) as i64;
                self.note(format!("freeze trigger worker p{pid} for {ms} ms"));
                lock(&self.world).trig_freeze(pid, ms);
            }
            "trig-reset" => {
                self.note("reset the trigger group's offsets");
                lock(&self.world).trig_reset_offsets();
            }
            "trig-add" => self.trig_add(),
            _ => {}
        }
    }

    /// `submitted` as the checks read it: an execution a trigger starts is submitted once per
    /// trigger submission of it committed (a record read again after an offsets reset, the
    /// writer's retry of one record), so it may be answered that often.
    pub(in crate::sim) fn with_trigger_submissions(
        &self,
    ) -> indexmap::IndexMap<ExecutionId, Submitted> {
        let mut submitted = self.submitted.clone();
        if self.trig_sends.ids.is_empty() {
            return submitted;
        }
        let w = self.world();
        let mut times: BTreeMap<&ExecutionId, u32> = BTreeMap::new();
        for (_, r) in w.cluster.committed_records(Topic::Submissions) {
            if let (Producer::TriggerWorker { .. }, Some(Payload::Submission(s))) =
                (r.producer, &r.payload)
            {
                *times.entry(&s.execution_id).or_default() += 1;
            }
        }
        for id in &self.trig_sends.ids {
            if let Some(s) = submitted.get_mut(id) {
                s.times = times.get(id).copied().unwrap_or(0).max(1);
            }
        }
        submitted
    }
}

/// Whether the record at `partition`/`offset` maps (it is not among the dead letters).
fn decided_ok(poison: &[(i32, i64, DlqReason)], partition: i32, offset: i64) -> bool {
    !poison
        .iter()
        .any(|(p, o, _)| *p == partition && *o == offset)
}
