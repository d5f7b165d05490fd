//! How the partition processor's effects become Kafka records: each [`Effect`] of a batch is
//! encoded (Avro, see [`crate::codec`]) for its topic with its key. Timer changes produce no
//! record; they are materialised into the store after the commit. A cancelled activity becomes
//! an [`ActivityCancel`] on its route's request topic if Weir's activity workers serve it,
//! keyed by the activity's id so that it lands on its request's partition, after it
//! (`docs/design.md#activities`).

use rdkafka::message::OwnedMessage;
use weir_core::processor::Effect;
use weir_core::trace::TraceParent;

use crate::codec::{ActivityCancel, Codec, EncodeError, HistoryRecord};
use crate::model::{ExecutionId, Ffqn};
use crate::topology::{TopicRole, Topology};

use super::activity_worker::{CANCEL_KIND, KIND_HEADER, NOT_BEFORE_HEADER};
use super::dlq::{DeadLetterError, try_dead_letter};
use super::transaction::OutgoingRecord;

#[derive(Debug, thiserror::Error)]
pub enum EncodeEffectError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("execution {execution}: no route for activity {ffqn} (add it to topology/routes.toml)")]
    NoRoute { execution: String, ffqn: Ffqn },
    #[error("dead letter for input {input}, which the batch does not have")]
    NoInput { input: usize },
    #[error(transparent)]
    DeadLetter(#[from] DeadLetterError),
}

/// The records of a batch's effects, in order; `history` gets the index in the returned
/// records of each `Append`'s record. Each record of an execution carries its trace context
/// (`traces`, by effect index) as a `traceparent` header.
pub fn records(
    codec: &Codec,
    topology: &Topology,
    inputs: &[OwnedMessage],
    effects: &[Effect],
    traces: &[Option<TraceParent>],
    history: &mut Vec<usize>,
) -> Result<Vec<OutgoingRecord>, EncodeEffectError> {
    let topic = |role: TopicRole| topology.topic(role).name.clone();
    let mut records = Vec::with_capacity(effects.len());
    let record = |topic: String, key: &ExecutionId, value: Vec<u8>| -> OutgoingRecord {
        OutgoingRecord {
            topic,
            key: key.to_string(),
            value: Some(value),
            headers: Vec::new(),
        }
    };
    for (index, effect) in effects.iter().enumerate() {
        let before = records.len();
        match effect {
            Effect::Append {
                execution_id,
                seq,
                entry,
            } => {
                let history_topic = topic(TopicRole::History);
                let value = codec.encode(
                    &history_topic,
                    &HistoryRecord {
                        execution_id: execution_id.clone(),
                        seq: *seq,
                        entry: entry.clone(),
                    },
                )?;
                history.push(records.len());
                records.push(record(history_topic, execution_id, value));
            }
            Effect::Submit(submission) => {
                let t = topic(TopicRole::Submissions);
                let value = codec.encode(&t, submission)?;
                records.push(record(t, &submission.execution_id, value));
            }
            Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
                let Some(route) = topology.route(request.ffqn.ifc_fqn()) else {
                    return Err(EncodeEffectError::NoRoute {
                        execution: request.parent_execution_id.to_string(),
                        ffqn: request.ffqn.clone(),
                    });
                };
                let value = codec.encode(&route.topic, request)?;
                let mut request_record = record(route.topic.clone(), &request.execution_id, value);
                if let Effect::RetryActivity { not_before, .. } = effect {
                    // The activity worker waits until then (see `NOT_BEFORE_HEADER`).
                    request_record.headers.push((
                        NOT_BEFORE_HEADER.to_owned(),
                        not_before.timestamp_millis().to_string().into_bytes(),
                    ));
                }
                records.push(request_record);
            }
            Effect::Respond { to, response } => {
                let t = topic(TopicRole::Responses);
                let value = codec.encode(&t, response)?;
                records.push(record(t, to, value));
            }
            // On the submissions topic, after the child's own submission (same key, same
            // partition, a later offset): a child cannot see its cancellation before it exists.
            Effect::CancelExecution(request) => {
                let t = topic(TopicRole::Submissions);
                let value = codec.encode(&t, request)?;
                let mut cancel_record = record(t, &request.execution_id, value);
                cancel_record.headers.push((
                    KIND_HEADER.to_owned(),
                    super::activity_worker::CANCEL_EXECUTION_KIND.to_vec(),
                ));
                records.push(cancel_record);
            }
            Effect::PublishResult(finished) => {
                let t = topic(TopicRole::Results);
                let value = codec.encode(&t, finished)?;
                records.push(record(t, &finished.execution_id, value));
            }
            Effect::DeadLetter {
                input,
                reason,
                error,
            } => {
                let message = inputs
                    .get(*input)
                    .ok_or(EncodeEffectError::NoInput { input: *input })?;
                records.push(try_dead_letter(
                    topology,
                    codec,
                    message,
                    *reason,
                    error.clone(),
                )?);
            }
            Effect::CancelActivity {
                parent,
                child,
                ffqn,
            } => {
                // Only a route Weir serves: an external service reads requests only (its
                // contract has no cancellation; the parent ignores its late answer).
                let Some(route) = topology.route(ffqn.ifc_fqn()).filter(|r| !r.external) else {
                    tracing::debug!(execution = %parent, %child, %ffqn, "activity cancelled (external: not told)");
                    continue;
                };
                let cancel = ActivityCancel {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    cancelled_at: chrono::Utc::now(),
                };
                let value = codec.encode(&route.topic, &cancel)?;
                let mut cancel_record = record(route.topic.clone(), child, value);
                cancel_record
                    .headers
                    .push((KIND_HEADER.to_owned(), CANCEL_KIND.to_vec()));
                records.push(cancel_record);
                tracing::debug!(execution = %parent, %child, topic = %route.topic, "activity cancelled");
            }
            // A deleted schedule is a tombstone: compaction forgets its key.
            Effect::PutSchedule { name, state } => {
                let t = topic(TopicRole::State);
                let value = match state {
                    Some(state) => Some(codec.encode(&t, state)?),
                    None => None,
                };
                records.push(OutgoingRecord {
                    topic: t,
                    key: weir_core::schedule::key(name),
                    value,
                    headers: Vec::new(),
                });
            }
            Effect::ScheduleCommand(command) => {
                let t = topic(TopicRole::Responses);
                let value = codec.encode(&t, command)?;
                records.push(OutgoingRecord {
                    topic: t,
                    key: weir_core::schedule::key(&command.name),
                    value: Some(value),
                    headers: vec![(
                        KIND_HEADER.to_owned(),
                        super::activity_worker::SCHEDULE_KIND.to_vec(),
                    )],
                });
            }
            Effect::PutTimer(_) | Effect::DeleteTimer(_) => {}
        }
        if let Some(Some(trace)) = traces.get(index) {
            for record in &mut records[before..] {
                record.headers.push(super::trace_headers::header_of(trace));
            }
        }
    }
    Ok(records)
}

/// The request topics that Weir's activity workers serve: a topic with an external route is
/// left alone (its service reads `ActivityRequest`s only; external activities are not
/// cancelled, see the external contract in `docs/design.md#external-activities`).
pub fn cancellation_topics(topology: &Topology) -> Vec<String> {
    let mut topics: Vec<String> = topology
        .routes
        .iter()
        .filter(|r| !r.external)
        .map(|r| r.topic.clone())
        .filter(|t| !topology.routes.iter().any(|r| r.external && r.topic == *t))
        .collect();
    topics.sort();
    topics.dedup();
    topics
}
