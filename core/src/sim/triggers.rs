//! The simulated trigger workers (`Faults::triggers`): another system writes records to its
//! own topic (the source, [`SOURCE_TOPIC`]), and trigger worker processes in their own group
//! turn each into what the trigger says — by [`crate::trigger`], the code the real trigger
//! worker runs — and commit that with the source offsets in one transaction, as
//! `weir::kafka::trigger_worker` does: a batch is produced in one turn and committed in a
//! later one, so a process can be killed or frozen inside its transaction.
//!
//! What a mapped record becomes is an [`Effect`] routed by [`wire::address`] (the routing of
//! every writer), and it passes the trigger's size gate ([`oversize`]) against the
//! simulation's record limit ([`SIM_RECORD_LIMIT`]); a record over it produced anyway is an
//! anomaly, as the real producer would fail the transaction for ever. Faults: kills inside
//! the transaction (the restarted process fences it), zombies (a frozen member removed from
//! the group while its transaction holds offsets: the next owner's stable fetch waits for it),
//! and an operator resetting the group's offsets to the earliest (every record read again:
//! the same submissions, which the workflow workers take once).

use std::collections::{BTreeMap, BTreeSet};

use super::cluster::{Payload, SimTime, SourceRecord, Topic, encode};
use super::process::Status;
use super::workflows::Workflow;
use crate::processor::Effect;
use crate::records::DlqReason;
use crate::trigger::{self, Action, Format, Source, Trigger, oversize};
use crate::wire::{self, Key};

/// The source topic's name.
pub const SOURCE_TOPIC: &str = "shop.orders";

/// The deployment's namespace (identities are derived within it).
const NAMESPACE: &str = "sim";

/// The simulation's stand-in for the producer's record limit (and for what a workflow worker
/// takes): small, so that a record the source's writer pads is over it.
pub const SIM_RECORD_LIMIT: usize = 2_048;

/// The trigger of the run: every source record starts a `seq [n, base]` from its fields; its
/// identity is its `/id` field (`by_field`: the writer's retries are the same record) or its
/// topic, partition and offset.
pub fn sim_trigger(by_field: bool) -> Trigger {
    Trigger {
        name: "orders".to_owned(),
        topic: SOURCE_TOPIC.to_owned(),
        format: Format::Json,
        action: Action::Start {
            ffqn: Workflow::Seq.ffqn(),
            params: vec![
                Source::Value("/n".to_owned()),
                Source::Value("/base".to_owned()),
            ],
        },
        identity: by_field.then(|| Source::Value("/id".to_owned())),
    }
}

/// A source record's effect, routed by the wire table and encoded: what a trigger worker
/// produces.
#[derive(Debug, Clone)]
pub struct Decided {
    pub effect: Effect,
    pub topic: Topic,
    pub key: String,
    pub payload: Payload,
    /// The value as the simulation's producer sends it (its size is gated).
    pub bytes: Vec<u8>,
}

/// What the trigger makes of a source record at `partition`/`offset`: the effect to produce,
/// routed and encoded, or why the record is dead-lettered (the mapping's or the size gate's
/// reason).
pub fn decide(
    trigger: &Trigger,
    partition: i32,
    record: &SourceRecord,
    now: SimTime,
) -> Result<Decided, (DlqReason, String)> {
    let source = trigger::SourceRecord {
        topic: SOURCE_TOPIC,
        partition,
        offset: record.offset,
        key: record.key.as_deref().map(str::as_bytes),
        value: Some(&record.value),
        headers: &[],
    };
    let mapped = trigger
        .map(NAMESPACE, &source, now)
        .map_err(|e| (e.dlq_reason(), e.to_string()))?;
    let effect = mapped.effect();
    let (topic, key, payload) = routed(&effect);
    let bytes = encode(&payload);
    match oversize(key.len() + bytes.len(), SIM_RECORD_LIMIT, topic.name()) {
        Some(refused) => Err(refused),
        None => Ok(Decided {
            effect,
            topic,
            key,
            payload,
            bytes,
        }),
    }
}

/// Where `effect` goes by the wire table, and its value as the simulation keeps it.
fn routed(effect: &Effect) -> (Topic, String, Payload) {
    let address = match wire::address(effect) {
        Ok(Some(address)) => address,
        other => unreachable!("a trigger's effect has an address: {other:?}"),
    };
    let Key::Exactly(key) = address.key else {
        unreachable!("a trigger's effect is keyed by its own id")
    };
    let payload = match effect {
        Effect::Submit(s) => Payload::Submission(s.clone()),
        Effect::ForwardEvent(e) => Payload::Event(e.clone()),
        Effect::ReturnEvent(e) => Payload::KeyedEvent(e.clone()),
        other => unreachable!("a trigger produces no {other:?}"),
    };
    (Topic::of_destination(&address.destination), key, payload)
}

/// A trigger worker process.
#[derive(Debug, Clone)]
pub struct TrigProc {
    pub pid: u64,
    pub slot: u32,
    pub status: Status,
    pub member: Option<u64>,
    pub generation: u64,
    pub owned: BTreeSet<i32>,
    /// The next offset to read, per owned partition whose committed offset was fetched.
    pub positions: BTreeMap<i32, i64>,
    /// The transaction of the batch produced and not committed yet.
    pub open: Option<u64>,
    pub transactional_id: String,
    pub epoch: u32,
}

impl TrigProc {
    pub fn name(&self) -> String {
        format!("t{}/p{}", self.slot, self.pid)
    }
}

/// What the trigger workers did in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerCounts {
    /// Records the source's writer sent.
    pub sent: u64,
    pub batches: u64,
    pub aborted: u64,
    pub dead_lettered: u64,
    pub kills: u64,
    pub resets: u64,
}

impl std::ops::AddAssign for TriggerCounts {
    fn add_assign(&mut self, o: Self) {
        self.sent += o.sent;
        self.batches += o.batches;
        self.aborted += o.aborted;
        self.dead_lettered += o.dead_lettered;
        self.kills += o.kills;
        self.resets += o.resets;
    }
}

/// The trigger workers of the world (`Faults::triggers`).
#[derive(Debug, Clone, Default)]
pub struct Triggers {
    pub trigger: Option<Trigger>,
    pub max_batch: usize,
    pub procs: BTreeMap<u64, TrigProc>,
    /// Slot → its live process, or `None` (dead, restarted at its next turn).
    pub slots: BTreeMap<u32, Option<u64>>,
    pub counts: TriggerCounts,
}
