//! How the partition processor's effects become Kafka records: each [`Effect`] of a batch is
//! encoded (Avro, see [`crate::codec`]) for its topic with its key. Timer changes produce no
//! record; they are materialised into the store after the commit. A cancelled activity becomes
//! an [`ActivityCancel`] on its route's request topic if Weir's activity workers serve it,
//! keyed by the activity's id so that it lands on its request's partition, after it
//! (`docs/design/activities.md#cancellation`).

use rdkafka::message::OwnedMessage;
use weir_core::processor::Effect;
use weir_core::trace::TraceParent;

use crate::codec::{ActivityCancel, AvroRecord, Codec, EncodeError, HistoryRecord};
use crate::model::{ExecutionId, Ffqn};
use crate::topology::{TopicRole, Topology};

use super::activity_worker::{CANCEL_KIND, CORRELATION_KIND, KIND_HEADER, NOT_BEFORE_HEADER};
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
    #[error("a stub write of {target}, which is nobody's child (the processor answers those)")]
    StubWithoutParent { target: String },
}

/// A record of `weir.state` under `key`: `state`, or a tombstone (`None`: the schedule or key
/// is gone, and compaction forgets it).
fn state_record<R: AvroRecord>(
    codec: &Codec,
    topic: String,
    key: String,
    state: Option<&R>,
    headers: Vec<(String, Vec<u8>)>,
) -> Result<OutgoingRecord, EncodeError> {
    let value = state.map(|state| codec.encode(&topic, state)).transpose()?;
    Ok(OutgoingRecord {
        topic,
        key,
        value,
        headers,
    })
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
            Effect::PutSchedule { name, state } => records.push(state_record(
                codec,
                topic(TopicRole::State),
                weir_core::schedule::key(name),
                state.as_ref(),
                Vec::new(),
            )?),
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
            // A correlation key's records: keyed by the key, on the key's partition of each
            // co-partitioned topic. On the state topic the header `weir.kind = correlation`
            // tells a key's state from a schedule's (and rides on its tombstone too).
            Effect::WriteStub(write) => {
                let t = topic(TopicRole::Responses);
                let owner =
                    write
                        .target
                        .parent()
                        .ok_or_else(|| EncodeEffectError::StubWithoutParent {
                            target: write.target.to_string(),
                        })?;
                let response = crate::model::Response::ChildExecutionFinished {
                    child_execution_id: write.target.clone(),
                    result: write.result.clone(),
                };
                let value = codec.encode(&t, &response)?;
                records.push(OutgoingRecord {
                    topic: t,
                    key: owner.to_string(),
                    value: Some(value),
                    headers: vec![
                        (
                            KIND_HEADER.to_owned(),
                            super::activity_worker::STUB_WRITE_KIND.to_vec(),
                        ),
                        (
                            super::activity_worker::STUB_REQUEST_HEADER.to_owned(),
                            write.request.to_string().into_bytes(),
                        ),
                        (
                            super::activity_worker::STUB_FUNCTION_HEADER.to_owned(),
                            write.ffqn.to_string().into_bytes(),
                        ),
                    ],
                });
            }
            Effect::Correlation(command) => {
                let t = topic(TopicRole::Responses);
                let value = codec.encode(&t, command)?;
                records.push(OutgoingRecord {
                    topic: t,
                    key: command.key.clone(),
                    value: Some(value),
                    headers: vec![(KIND_HEADER.to_owned(), CORRELATION_KIND.to_vec())],
                });
            }
            Effect::PutCorrelation { key, state } => records.push(state_record(
                codec,
                topic(TopicRole::State),
                key.clone(),
                state.as_ref(),
                vec![(KIND_HEADER.to_owned(), CORRELATION_KIND.to_vec())],
            )?),
            // An event of a key for its holder, keyed by the holder (`correlation_key` set).
            Effect::ForwardEvent(event) => {
                let t = topic(TopicRole::Events);
                let value = codec.encode(&t, event)?;
                records.push(record(t, &event.target, value));
            }
            // Back to its key from a finished holder (`returned_by` set), keyed by the key.
            Effect::ReturnEvent(event) => {
                let t = topic(TopicRole::Events);
                let value = codec.encode(&t, event)?;
                records.push(OutgoingRecord {
                    topic: t,
                    key: event.key.clone(),
                    value: Some(value),
                    headers: Vec::new(),
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
/// cancelled, see the external contract in `docs/design/external-activities.md`).
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use weir_core::correlation::{
        BufferedEvent, CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent,
    };

    use super::*;
    use crate::codec::{EventRecord, InboundEvent, ReceivedEvent, RecordPosition};

    fn topology() -> Topology {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        Topology::load(&root).expect("the repository's topology")
    }

    fn kind(record: &OutgoingRecord) -> Option<&[u8]> {
        record
            .headers
            .iter()
            .find(|(k, _)| k == KIND_HEADER)
            .map(|(_, v)| v.as_slice())
    }

    /// A correlation key's four effects: each on its topic, keyed by the key or by the
    /// holder, with `weir.kind = correlation` where the topic carries other record types.
    #[test]
    fn correlation_effects_are_keyed_by_the_key_or_the_holder() {
        let topology = topology();
        let codec = Codec::single_object();
        let at = Utc::now();
        let key = "payment:order-42".to_owned();
        let holder = ExecutionId::top_level(ulid::Ulid::new());
        let event = ReceivedEvent {
            event_id: "e-1".into(),
            name: "paid".into(),
            payload: serde_json::json!({"amount": 1250}),
        };
        let state = CorrelationState {
            key: key.clone(),
            holders: Vec::new(),
            buffered: vec![BufferedEvent {
                event: event.clone(),
                sent_at: at,
            }],
            forwarded: Vec::new(),
            waits_until: None,
        };
        let forwarded = InboundEvent {
            event: event.clone(),
            target: holder.clone(),
            sent_at: at,
            correlation_key: Some(key.clone()),
            waited_until: None,
        };
        let returned = KeyedEvent {
            event,
            key: key.clone(),
            sent_at: at,
            returned_by: Some(holder.clone()),
        };
        let effects = [
            Effect::Correlation(CorrelationCommand {
                key: key.clone(),
                execution_id: holder.clone(),
                action: CorrelationAction::Register,
                sent_at: at,
            }),
            Effect::PutCorrelation {
                key: key.clone(),
                state: Some(state.clone()),
            },
            Effect::PutCorrelation {
                key: key.clone(),
                state: None,
            },
            Effect::ForwardEvent(forwarded.clone()),
            Effect::ReturnEvent(returned.clone()),
        ];
        let records =
            records(&codec, &topology, &[], &effects, &[], &mut Vec::new()).expect("encoded");
        let name = |role| topology.topic(role).name.clone();
        let shape: Vec<(String, String, Option<&[u8]>, bool)> = records
            .iter()
            .map(|r| (r.topic.clone(), r.key.clone(), kind(r), r.value.is_some()))
            .collect();
        let correlation = Some(super::super::activity_worker::CORRELATION_KIND);
        assert_eq!(
            shape,
            vec![
                (name(TopicRole::Responses), key.clone(), correlation, true),
                (name(TopicRole::State), key.clone(), correlation, true),
                // A tombstone carries the header too.
                (name(TopicRole::State), key.clone(), correlation, false),
                (name(TopicRole::Events), holder.to_string(), None, true),
                (name(TopicRole::Events), key.clone(), None, true),
            ]
        );
        let position = RecordPosition::at("weir.events", 0, 0);
        let decoded = |i: usize| -> EventRecord {
            codec
                .decode(records[i].value.as_deref().expect("a value"), &position)
                .expect("decodes")
        };
        assert_eq!(decoded(3), EventRecord::Execution(forwarded));
        assert_eq!(decoded(4), EventRecord::Keyed(returned));
        let read: CorrelationState = codec
            .decode(records[1].value.as_deref().expect("a value"), &position)
            .expect("decodes");
        assert_eq!(read, state);
    }
}
