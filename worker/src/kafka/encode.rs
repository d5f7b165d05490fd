//! How the partition processor's effects become Kafka records: each [`Effect`] of a batch goes
//! where the core's wire-address table ([`weir_core::wire::address`]) says — topic, key,
//! kind and headers — with its value encoded (Avro, see [`crate::codec`]) for that topic.
//! What is decided here is the Kafka side only: the topic of a role or route
//! ([`Topology`]), the value, a dead letter's envelope ([`super::dlq`]) and the trace
//! context. Timer changes produce no record; they are materialised into the store after the
//! commit. A cancelled activity becomes an [`ActivityCancel`] on its route's request topic if
//! Weir's activity workers serve it (an external service is not told), keyed by the
//! activity's id so that it lands on its request's partition, after it
//! (`docs/design/activities.md#cancellation`).

use rdkafka::message::{Message, OwnedMessage};
use weir_core::dlq::Original;
use weir_core::processor::Effect;
use weir_core::trace::TraceParent;
use weir_core::wire::{self, AddressError, Destination, Key};

use weir_core::correlation::{Forwarded, RememberedEvent};

use crate::codec::{
    ActivityCancel, AvroRecord, Codec, DlqReason, EncodeError, HistoryRecord, StoredCorrelation,
};
use crate::model::{ExecutionId, Ffqn};
use crate::topology::{TopicRole, Topology};

use super::dlq::{DeadLetterError, try_dead_letter, try_dead_letter_of};
use super::outgoing::OutgoingRecord;

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
    #[error(transparent)]
    Address(#[from] AddressError),
}

/// The input records a dead letter may copy, by their handles
/// ([`weir_core::driver::PolledRecord`]).
pub type Inputs = std::collections::BTreeMap<usize, OwnedMessage>;

/// The records of a batch's effects, in order; `history` gets the index in the returned
/// records of each `Append`'s record. Each record of an execution carries its trace context
/// (`traces`, by effect index) as a `traceparent` header.
pub fn records(
    codec: &Codec,
    topology: &Topology,
    inputs: &Inputs,
    effects: &[Effect],
    traces: &[Option<TraceParent>],
    history: &mut Vec<usize>,
) -> Result<Vec<OutgoingRecord>, EncodeEffectError> {
    let mut records = Vec::with_capacity(effects.len());
    for (index, effect) in effects.iter().enumerate() {
        let Some(address) = wire::address(effect)? else {
            continue;
        };
        let topic = match &address.destination {
            Destination::Topic(role) => topology.topic(*role).name.clone(),
            Destination::Route(ffqn) => {
                let route = topology.route(ffqn.ifc_fqn());
                // A cancellation only to a route that hears of it, a retry notice only to a
                // route Weir serves (`RouteService`).
                if let Effect::CancelActivity { parent, child, .. }
                | Effect::RetryParkedActivity { parent, child, .. } = effect
                    && !route.is_some_and(|route| route.service().takes(&address))
                {
                    tracing::debug!(execution = %parent, %child, %ffqn, kind = ?address.kind, "notice of an activity not written (external route)");
                    continue;
                }
                match route {
                    Some(route) => route.topic.clone(),
                    None => {
                        return Err(EncodeEffectError::NoRoute {
                            execution: requester(effect)
                                .map(ToString::to_string)
                                .unwrap_or_default(),
                            ffqn: ffqn.clone(),
                        });
                    }
                }
            }
        };
        let (key, partition) = match &address.key {
            Key::Exactly(key) => (key.clone(), None),
            Key::Within { key, partition_of } => {
                let partitions = topology.topic(address.role()).partitions;
                let partition =
                    weir_core::partitioner::partition_for_key(partition_of.as_bytes(), partitions);
                (key.clone(), Some(partition))
            }
            Key::OfInput(input) => {
                let original = inputs
                    .get(input)
                    .ok_or(EncodeEffectError::NoInput { input: *input })?;
                let key = String::from_utf8_lossy(original.key().unwrap_or_default());
                (key.into_owned(), None)
            }
        };
        let mut headers: Vec<(String, Vec<u8>)> = address
            .all_headers()
            .map(|(name, value)| (name.to_owned(), value.to_vec()))
            .collect();
        let value = match value(codec, topology, &topic, inputs, effect)? {
            Value::Of(value) => value,
            // A dead letter's value is its envelope, with the reason in headers of its own.
            Value::DeadLetter(letter) => {
                headers.extend(letter.headers);
                letter.value
            }
        };
        let mut record = OutgoingRecord {
            topic,
            partition,
            key,
            value,
            headers,
        };
        if let Effect::Append { .. } = effect {
            history.push(records.len());
        }
        if let Some(Some(trace)) = traces.get(index) {
            record.headers.push(super::trace_headers::header_of(trace));
        }
        records.push(record);
    }
    Ok(records)
}

/// The execution an activity request is for (what a missing route names).
fn requester(effect: &Effect) -> Option<&ExecutionId> {
    match effect {
        Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
            Some(&request.parent_execution_id)
        }
        _ => None,
    }
}

/// A record's value.
enum Value {
    /// Encoded for its topic (`None`: a tombstone).
    Of(Option<Vec<u8>>),
    /// A dead letter: the DLQ's record of its input (its envelope, and the headers that
    /// give the reason).
    DeadLetter(OutgoingRecord),
}

/// The value `effect` writes to `topic` (one arm per effect that writes a record).
fn value(
    codec: &Codec,
    topology: &Topology,
    topic: &str,
    inputs: &Inputs,
    effect: &Effect,
) -> Result<Value, EncodeEffectError> {
    fn encoded<R: AvroRecord>(
        codec: &Codec,
        topic: &str,
        record: &R,
    ) -> Result<Value, EncodeEffectError> {
        Ok(Value::Of(Some(codec.encode(topic, record)?)))
    }
    match effect {
        Effect::Append {
            execution_id,
            seq,
            entry,
            at,
        } => encoded(
            codec,
            topic,
            &HistoryRecord {
                execution_id: execution_id.clone(),
                seq: *seq,
                entry: entry.clone(),
                at: Some(*at),
            },
        ),
        Effect::Submit(submission) => encoded(codec, topic, submission),
        Effect::RequestActivity(request) | Effect::RetryActivity { request, .. } => {
            encoded(codec, topic, request)
        }
        Effect::Respond { response, .. } => encoded(codec, topic, response),
        Effect::CancelExecution(request) => encoded(codec, topic, request),
        Effect::StartReset(start) => encoded(codec, topic, start),
        Effect::ResendReset(request) => encoded(codec, topic, request),
        Effect::PublishResult(finished) => encoded(codec, topic, finished),
        Effect::DeadLetter {
            input,
            reason,
            error,
        } => {
            let message = inputs
                .get(input)
                .ok_or(EncodeEffectError::NoInput { input: *input })?;
            Ok(Value::DeadLetter(try_dead_letter(
                topology,
                codec,
                message,
                *reason,
                error.clone(),
            )?))
        }
        Effect::DeadLetterState(state) => {
            let original = Original {
                topic: &topology.topic(TopicRole::State).name,
                partition: state.partition,
                offset: state.offset,
                timestamp_millis: state.timestamp_millis,
                key: state.key.as_deref(),
                value: Some(&state.value),
            };
            let headers = state
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_deref()));
            Ok(Value::DeadLetter(try_dead_letter_of(
                topology,
                codec,
                original,
                headers,
                DlqReason::Undecodable,
                state.error.clone(),
            )?))
        }
        Effect::CancelActivity { parent, child, .. } => {
            tracing::debug!(execution = %parent, %child, %topic, "activity cancelled");
            encoded(
                codec,
                topic,
                &ActivityCancel {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    cancelled_at: chrono::Utc::now(),
                },
            )
        }
        // A retry notice is written as an `ActivityCancel` record (the same three fields),
        // told apart by its kind header (`retry-activity`).
        Effect::RetryParkedActivity { parent, child, .. } => {
            tracing::debug!(execution = %parent, %child, %topic, "retry notice of an activity");
            encoded(
                codec,
                topic,
                &ActivityCancel {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    cancelled_at: chrono::Utc::now(),
                },
            )
        }
        Effect::PutSchedule { state, .. } => Ok(Value::Of(
            state.as_ref().map(|s| codec.encode(topic, s)).transpose()?,
        )),
        Effect::ScheduleCommand(command) => encoded(codec, topic, command),
        Effect::PutBatch(state) => encoded(codec, topic, state.as_ref()),
        Effect::PutBatchOutcomes { id, turn, outcomes } => encoded(
            codec,
            topic,
            &weir_core::batch::BatchOutcomes {
                id: id.clone(),
                turn: *turn,
                outcomes: outcomes.clone(),
            },
        ),
        Effect::BatchRequest(weir_core::batch::BatchRequest::Pause(request)) => {
            encoded(codec, topic, request)
        }
        Effect::BatchRequest(weir_core::batch::BatchRequest::Cancel(request)) => {
            encoded(codec, topic, request)
        }
        Effect::BatchRequest(weir_core::batch::BatchRequest::Reset(request)) => {
            encoded(codec, topic, request)
        }
        // The stub's value as its parent reads a child's: `ChildExecutionFinished`.
        Effect::WriteStub(write) => encoded(
            codec,
            topic,
            &crate::model::Response::child_finished(write.target.clone(), write.result.clone()),
        ),
        Effect::Correlation(command) => encoded(codec, topic, command),
        Effect::Slot(command) => encoded(codec, topic, command),
        Effect::PutSlot { state, .. } => Ok(Value::Of(
            state.as_ref().map(|s| codec.encode(topic, s)).transpose()?,
        )),
        Effect::PutCorrelation { state, .. } => Ok(Value::Of(
            state
                .as_ref()
                .map(|s| codec.encode(topic, &StoredCorrelation::of(s.clone())))
                .transpose()?,
        )),
        Effect::PutRemembered { key, event_id, at } => Ok(Value::Of(
            at.map(|at| {
                codec.encode(
                    topic,
                    &RememberedEvent {
                        key: key.clone(),
                        forwarded: Forwarded {
                            event_id: event_id.clone(),
                            at,
                        },
                    },
                )
            })
            .transpose()?,
        )),
        Effect::AnswerQuery(answer) => encoded(codec, topic, answer),
        Effect::ForwardEvent(event) => encoded(codec, topic, event),
        Effect::ReturnEvent(event) => encoded(codec, topic, event),
        // No record (`wire::address` says so first).
        Effect::PutTimer(_) | Effect::DeleteTimer(_) => Ok(Value::Of(None)),
    }
}

#[cfg(test)]
mod tests {
    /// Where a record went: topic, partition (`None`: its key's), key and kind.
    type Placed<'a> = (String, Option<i32>, String, Option<&'a [u8]>);

    use chrono::Utc;
    use weir_core::correlation::{
        BufferedEvent, CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent,
    };

    use super::*;
    use crate::codec::{EventRecord, InboundEvent, ReceivedEvent, RecordPosition};
    use weir_core::wire::{KIND_HEADER, RecordKind, examples};

    use crate::topology::TopicRole;

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
            waits_until: None,
            cancel: None,
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
            Effect::PutRemembered {
                key: key.clone(),
                event_id: "e-1".into(),
                at: Some(at),
            },
            Effect::PutRemembered {
                key: key.clone(),
                event_id: "e-1".into(),
                at: None,
            },
        ];
        let records = records(
            &codec,
            &topology,
            &Inputs::new(),
            &effects,
            &[],
            &mut Vec::new(),
        )
        .expect("encoded");
        let name = |role| topology.topic(role).name.clone();
        let shape: Vec<(Placed<'_>, bool)> = records
            .iter()
            .map(|r| {
                let placed = (r.topic.clone(), r.partition, r.key.clone(), kind(r));
                (placed, r.value.is_some())
            })
            .collect();
        let correlation = Some(RecordKind::Correlation.header_value());
        let remembered = Some(RecordKind::Remembered.header_value());
        // An id the key remembers: a record of its own, on the key's partition.
        let home = Some(weir_core::partitioner::partition_for_key(
            key.as_bytes(),
            topology.topic(TopicRole::State).partitions,
        ));
        let seen = format!("weir:seen:{key} e-1");
        let at = |role, partition, key: &str, kind| (name(role), partition, key.to_owned(), kind);
        assert_eq!(
            shape,
            vec![
                (at(TopicRole::Responses, None, &key, correlation), true),
                (at(TopicRole::State, None, &key, correlation), true),
                // A tombstone carries the header too.
                (at(TopicRole::State, None, &key, correlation), false),
                (at(TopicRole::Events, None, &holder.to_string(), None), true),
                (at(TopicRole::Events, None, &key, None), true),
                (at(TopicRole::State, home, &seen, remembered), true),
                (at(TopicRole::State, home, &seen, remembered), false),
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
        let read: crate::codec::StoredCorrelation = codec
            .decode(records[1].value.as_deref().expect("a value"), &position)
            .expect("decodes");
        assert_eq!(read.state, state);
        assert!(
            read.forwarded.is_empty(),
            "remembered ids are records of their own"
        );
        let remembered: weir_core::correlation::RememberedEvent = codec
            .decode(records[5].value.as_deref().expect("a value"), &position)
            .expect("decodes");
        assert_eq!(remembered.key, key);
        assert_eq!(remembered.forwarded.event_id, "e-1");
    }

    /// Issue 33 F2: a key's state is written whole as one `weir.state` record, so the
    /// fullest state the bounds allow (the most holders, buffered events of the longest ids
    /// and names with the most payload bytes, a kept cancellation of the longest reason) must
    /// fit the producer's limit. With 1 MiB of buffered payloads it did not: the batch that
    /// wrote it aborted, and the partition retried it forever. (Remembered ids were part of
    /// it too, up to 1,000 of them, rewritten at every forward; each is a record of its own
    /// now, issue 33 F10: the largest, the longest key and id, is a few hundred bytes.)
    #[test]
    fn the_fullest_correlation_state_fits_one_record() {
        use weir_core::correlation::{MAX_BUFFERED_EVENT_BYTES, MAX_BUFFERED_EVENTS, MAX_HOLDERS};
        use weir_core::model::inbound::{MAX_EVENT_ID_LEN, MAX_EVENT_NAME_LEN};
        use weir_core::state_key::MAX_KEY_LEN;
        let topology = topology();
        let codec = Codec::single_object();
        let at = Utc::now();
        let key = "k".repeat(MAX_KEY_LEN);
        // Each payload a JSON string: its quotes count towards the bound.
        let payload = "p".repeat(MAX_BUFFERED_EVENT_BYTES / MAX_BUFFERED_EVENTS - 2);
        let id = |n: usize| format!("{n:0>width$}", width = MAX_EVENT_ID_LEN);
        let state = CorrelationState {
            key: key.clone(),
            holders: (0..MAX_HOLDERS)
                .map(|_| ExecutionId::top_level(ulid::Ulid::new()))
                .collect(),
            buffered: (0..MAX_BUFFERED_EVENTS)
                .map(|n| BufferedEvent {
                    event: ReceivedEvent {
                        event_id: id(n),
                        name: "n".repeat(MAX_EVENT_NAME_LEN),
                        payload: serde_json::Value::String(payload.clone()),
                    },
                    sent_at: at,
                })
                .collect(),
            waits_until: Some(at),
            cancel: Some(Box::new(weir_core::records::CancelRequest {
                execution_id: ExecutionId::top_level(ulid::Ulid::new()),
                reason: "r".repeat(weir_core::correlation::MAX_KEPT_CANCEL_REASON),
                terminate: true,
                requested_at: at,
                waited_until: None,
            })),
        };
        let effects = [
            Effect::PutCorrelation {
                key: key.clone(),
                state: Some(state),
            },
            Effect::PutRemembered {
                key: key.clone(),
                event_id: id(0),
                at: Some(at),
            },
        ];
        let records = records(
            &codec,
            &topology,
            &Inputs::new(),
            &effects,
            &[],
            &mut Vec::new(),
        )
        .expect("encoded");
        let size = records[0].size();
        assert!(
            size <= crate::kafka::config::MAX_PRODUCED_RECORD_BYTES,
            "the fullest state is {size} bytes"
        );
        let id_size = records[1].size();
        assert!(id_size < 1_000, "a remembered id is {id_size} bytes");
    }

    /// The encoder routes every effect by `wire::address` (the simulation's producer does
    /// too: `weir_core::sim::world`'s tests): each record goes to the topic of the address's
    /// role or route, with its key, its kind and its headers. Routing anything here by
    /// another rule, or changing the table without this encoder following, fails this.
    #[test]
    fn every_effect_goes_where_the_wire_table_says() {
        use rdkafka::Timestamp;
        let topology = topology();
        let codec = Codec::single_object();
        let effects = examples::one_of_each(Utc::now());
        // The input a dead letter copies.
        let input = OwnedMessage::new(
            Some(b"not Avro".to_vec()),
            Some(b"poison".to_vec()),
            topology.topic(TopicRole::Submissions).name.clone(),
            Timestamp::NotAvailable,
            0,
            7,
            None,
        );
        let records = records(
            &codec,
            &topology,
            &Inputs::from([(0, input)]),
            &effects,
            &[],
            &mut Vec::new(),
        )
        .expect("encoded");
        let expected: Vec<Placed<'_>> = effects
            .iter()
            .filter_map(|effect| wire::address(effect).expect("an address"))
            .map(|address| {
                let topic = match &address.destination {
                    Destination::Topic(role) => topology.topic(*role).name.clone(),
                    Destination::Route(ffqn) => topology
                        .route(ffqn.ifc_fqn())
                        .expect("a route")
                        .topic
                        .clone(),
                };
                let (key, partition) = match &address.key {
                    Key::Exactly(key) => (key.clone(), None),
                    Key::Within { key, partition_of } => {
                        let partitions = topology.topic(address.role()).partitions;
                        let partition = weir_core::partitioner::partition_for_key(
                            partition_of.as_bytes(),
                            partitions,
                        );
                        (key.clone(), Some(partition))
                    }
                    Key::OfInput(0) => ("poison".to_owned(), None),
                    Key::OfInput(other) => panic!("no input {other}"),
                };
                (
                    topic,
                    partition,
                    key,
                    address.kind.map(RecordKind::header_value),
                )
            })
            .collect();
        let written: Vec<Placed<'_>> = records
            .iter()
            .map(|r| (r.topic.clone(), r.partition, r.key.clone(), kind(r)))
            .collect();
        assert_eq!(written, expected);
        // And every other header of the address, with its value.
        let addressed = effects
            .iter()
            .filter_map(|effect| wire::address(effect).expect("an address"));
        for (record, address) in records.iter().zip(addressed) {
            for (name, value) in &address.headers {
                assert!(
                    record.headers.iter().any(|(n, v)| n == name && v == value),
                    "{name} on {record:?}"
                );
            }
        }
    }

    /// A cancellation is not written for an external route (its service is not told), unless
    /// the route asks for `cancel_notices`: then an `ActivityCancel` follows the request on its
    /// topic, keyed by the activity, of kind `cancel`.
    #[test]
    fn an_external_route_hears_of_a_cancellation_only_if_it_asks() {
        let mut topology = topology();
        let external = topology
            .routes
            .iter()
            .find(|r| r.external)
            .expect("an external route in the repository's topology")
            .clone();
        let cancel = Effect::CancelActivity {
            parent: examples::PARENT.parse().expect("an id"),
            child: examples::ACTIVITY.parse().expect("an id"),
            ffqn: format!("{}.rate", external.interface)
                .parse()
                .expect("a function name"),
        };
        let encoded = |topology: &Topology| {
            records(
                &Codec::single_object(),
                topology,
                &Inputs::new(),
                std::slice::from_ref(&cancel),
                &[],
                &mut Vec::new(),
            )
            .expect("encoded")
        };
        assert_eq!(encoded(&topology), Vec::new());
        for route in topology.routes.iter_mut() {
            if route.interface == external.interface {
                route.cancel_notices = true;
            }
        }
        let told = encoded(&topology);
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0].topic, external.topic);
        assert_eq!(told[0].key, examples::ACTIVITY);
        assert!(
            told[0]
                .headers
                .iter()
                .any(|(n, v)| n == "weir.kind" && v.as_slice() == b"cancel"),
            "{told:?}"
        );
    }
}
