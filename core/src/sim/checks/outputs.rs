//! Outputs (`output-once`, `dlq`): no child submission, activity request, answer to a parent
//! or DLQ copy a worker produced is committed twice, and every poison record the clients sent
//! is dead-lettered exactly once.

use std::collections::{BTreeMap, BTreeSet};

use crate::sim::cluster::{Payload, Producer, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::world::World;

/// Outputs, once each.
///
/// Returns the DLQ copies committed, by original record (topic, partition, offset).
pub(super) fn check_outputs(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    poison: &[(i32, i64)],
) -> BTreeMap<(String, i32, i64), usize> {
    let mut children: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Submissions) {
        if let (Producer::Worker { .. }, Some(Payload::Submission(s))) = (r.producer, &r.payload) {
            *children.entry(s.execution_id.to_string()).or_default() += 1;
        }
    }
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    for topic in Topic::ROUTES {
        for (_, r) in w.cluster.committed_records(topic) {
            if let Some(Payload::Activity(a)) = &r.payload {
                *requests.entry(a.execution_id.to_string()).or_default() += 1;
            }
        }
    }
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        if let (Producer::Worker { .. }, Some(Payload::Response(resp))) = (r.producer, &r.payload) {
            *answers
                .entry(crate::projection::response_id(resp))
                .or_default() += 1;
        }
    }
    let mut dead: BTreeMap<(String, i32, i64), usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload {
            *dead
                .entry((
                    e.original_topic.clone(),
                    e.original_partition,
                    e.original_offset,
                ))
                .or_default() += 1;
        }
    }
    for (what, counts) in [
        ("child submission", &children),
        ("activity request", &requests),
        ("answer to a parent", &answers),
    ] {
        for (id, n) in counts.iter().filter(|(_, n)| **n > 1) {
            add(
                Invariant::OutputOnce,
                format!("{what} {id} committed {n} times"),
            );
        }
    }
    // A trigger's source is read again after an offsets reset: `checks/triggers.rs`.
    let source = crate::sim::triggers::SOURCE_TOPIC;
    for ((topic, p, offset), n) in dead.iter().filter(|((t, ..), n)| **n > 1 && t != source) {
        add(
            Invariant::OutputOnce,
            format!("DLQ copy of {topic}/{p}@{offset} committed {n} times"),
        );
    }
    let poison: BTreeSet<&(i32, i64)> = poison.iter().collect();
    for (p, offset) in &poison {
        let n = dead
            .get(&(Topic::Submissions.name().to_owned(), *p, *offset))
            .copied()
            .unwrap_or(0);
        if n != 1 {
            add(
                Invariant::Dlq,
                format!("poison record submissions/{p}@{offset} dead-lettered {n} times"),
            );
        }
    }
    dead
}
