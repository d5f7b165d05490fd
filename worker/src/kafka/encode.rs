//! How the partition processor's effects become Kafka records: each [`Effect`] of a batch is
//! encoded (Avro, see [`crate::codec`]) for its topic with its key. Timer changes and
//! cancellations produce no record; they are materialised into the store after the commit.

use rdkafka::message::OwnedMessage;
use weir_core::processor::Effect;

use crate::codec::{Codec, EncodeError, HistoryRecord};
use crate::model::{ExecutionId, Ffqn};
use crate::topology::{TopicRole, Topology};

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
/// records of each `Append`'s record.
pub fn records(
    codec: &Codec,
    topology: &Topology,
    inputs: &[OwnedMessage],
    effects: &[Effect],
    history: &mut Vec<usize>,
) -> Result<Vec<OutgoingRecord>, EncodeEffectError> {
    let topic = |role: TopicRole| topology.topic(role).name.clone();
    let mut records = Vec::with_capacity(effects.len());
    let record = |topic: String, key: &ExecutionId, value: Vec<u8>| -> OutgoingRecord {
        OutgoingRecord {
            topic,
            key: key.to_string(),
            value,
            headers: Vec::new(),
        }
    };
    for effect in effects {
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
            Effect::RequestActivity(request) => {
                let Some(route) = topology.route(request.ffqn.ifc_fqn()) else {
                    return Err(EncodeEffectError::NoRoute {
                        execution: request.parent_execution_id.to_string(),
                        ffqn: request.ffqn.clone(),
                    });
                };
                let value = codec.encode(&route.topic, request)?;
                records.push(record(route.topic.clone(), &request.execution_id, value));
            }
            Effect::Respond { to, response } => {
                let t = topic(TopicRole::Responses);
                let value = codec.encode(&t, response)?;
                records.push(record(t, to, value));
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
            Effect::CancelActivity { parent, child } => {
                // Activities are at-least-once and cannot be recalled once requested; the
                // engine has closed the join set, so a late answer is ignored by the parent.
                tracing::debug!(execution = %parent, %child, "activity cancelled");
            }
            Effect::PutTimer(_) | Effect::DeleteTimer(_) => {}
        }
    }
    Ok(records)
}
