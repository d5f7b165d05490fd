//! Triggers (`trigger-lost`, `trigger-once`): what the trigger workers made of the source
//! topic, against what its writer sent (`sent::TriggerSends`). The executions themselves are
//! held by the other checks (`results`: each finishes once, with its value).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::ExecutionId;
use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::TriggerSends;
use crate::sim::triggers::SOURCE_TOPIC;
use crate::sim::world::World;

/// The metadata entry naming the source record a trigger's submission came from.
const SOURCE_METADATA: &str = "weir.trigger.source";

/// See the module docs. `dead`: the DLQ copies committed, by original record.
pub(super) fn check_triggers(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    sent: &TriggerSends,
    dead: &BTreeMap<(String, i32, i64), usize>,
    settled: bool,
) {
    // A record is read once per reset of the group's offsets, and once more.
    let readings = 1 + w.trig.counts.resets as usize;
    let mut started: BTreeSet<&ExecutionId> = BTreeSet::new();
    let mut per_record: BTreeMap<&str, usize> = BTreeMap::new();
    for (p, r) in w.cluster.committed_records(Topic::Submissions) {
        let (Producer::TriggerWorker { .. }, Some(Payload::Submission(s))) =
            (r.producer, &r.payload)
        else {
            continue;
        };
        started.insert(&s.execution_id);
        let source = s
            .metadata
            .get(SOURCE_METADATA)
            .map_or("(no source)", String::as_str);
        *per_record.entry(source).or_default() += 1;
        if !sent.ids.contains(&s.execution_id) {
            add(
                Invariant::TriggerLost,
                format!(
                    "submissions/{p}@{}: a trigger started {}, which no source record maps to (from {source})",
                    r.offset, s.execution_id
                ),
            );
        }
    }
    for (source, n) in per_record.iter().filter(|(_, n)| **n > readings) {
        add(
            Invariant::TriggerOnce,
            format!("the submission of {source} committed {n} times in {readings} readings"),
        );
    }
    for ((topic, p, offset), n) in dead {
        if topic == SOURCE_TOPIC && *n > readings {
            add(
                Invariant::TriggerOnce,
                format!(
                    "the DLQ copy of {topic}/{p}@{offset} committed {n} times in {readings} readings"
                ),
            );
        }
    }
    let poison: BTreeSet<(i32, i64)> = sent.poison.iter().map(|(p, o, _)| (*p, *o)).collect();
    for (topic, p, offset) in dead.keys() {
        if topic == SOURCE_TOPIC && !poison.contains(&(*p, *offset)) {
            add(
                Invariant::TriggerLost,
                format!("{topic}/{p}@{offset} maps, and was dead-lettered"),
            );
        }
    }
    let reasons: BTreeMap<(i32, i64), crate::records::DlqReason> = w
        .cluster
        .committed_records(Topic::Dlq)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Dlq(e)) if e.original_topic == SOURCE_TOPIC => {
                Some(((e.original_partition, e.original_offset), e.reason))
            }
            _ => None,
        })
        .collect();
    if !settled {
        return;
    }
    for id in &sent.ids {
        if !started.contains(id) {
            add(
                Invariant::TriggerLost,
                format!(
                    "{id}: a source record maps to it, and no trigger submission of it was committed"
                ),
            );
        }
    }
    for (p, offset, reason) in &sent.poison {
        match reasons.get(&(*p, *offset)) {
            None => add(
                Invariant::TriggerLost,
                format!(
                    "{SOURCE_TOPIC}/{p}@{offset} does not map ({reason:?}), and was not dead-lettered"
                ),
            ),
            Some(got) if got != reason => add(
                Invariant::TriggerLost,
                format!("{SOURCE_TOPIC}/{p}@{offset} dead-lettered as {got:?}, not {reason:?}"),
            ),
            Some(_) => {}
        }
    }
}
