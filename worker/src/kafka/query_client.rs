//! Asking a running execution a query and waiting for its answer: what `weir query` and the
//! HTTP API (`POST /v1/executions/{id}/queries/{name}`) share ([`weir_core::query`];
//! `docs/design/topics.md#queries`).
//!
//! A [`QueryClient`] follows `weir.answers` (read_committed) from the end of every partition,
//! as the ends were when it started: it is assigned those offsets *before* its first request
//! is sent, so no answer to a request it sends can be missed. Each [`QueryClient::ask`]
//! waits for the answer carrying its query id; answers to other clients' queries are read
//! and dropped. The owner answers in the transaction of the batch that took the query, so a
//! read_committed reader sees exactly one answer per query taken.
//!
//! One client serves any number of concurrent asks (the API keeps one for the process); it
//! starts following at its first ask, and stops when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use tokio::sync::oneshot;
use tracing::{debug, warn};
use weir_core::query::{QueryAnswer, QueryError, QueryRequest, check_request};
use weir_core::wire::RecordKind;

use super::KafkaConfig;
use super::submit::SubmitError;
use crate::codec::{Codec, RecordPosition};
use crate::model::ExecutionId;
use crate::topology::{TopicRole, Topology};

/// How long a query waits for its answer when its caller does not say.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// How long the metadata and the end offsets of `weir.answers` may take at start.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// Why a query got no answer (an answer that is an error is an answer: [`QueryAnswer`]).
#[derive(Debug, thiserror::Error)]
pub enum QueryClientError {
    #[error("cannot follow the answers topic `{topic}`: {source}")]
    Follow { topic: String, source: KafkaError },
    #[error(
        "the answers topic `{topic}` cannot be used: {reason} (`weir topology apply` creates it; \
         an authorization failure means the Kafka user lacks the client's ACLs)"
    )]
    NoTopic { topic: String, reason: String },
    #[error("cannot send query {query_id} of {execution}: {source}")]
    Send {
        execution: ExecutionId,
        query_id: String,
        source: Box<SubmitError>,
    },
    #[error(
        "no answer to query `{name}` ({query_id}) of {execution} by its deadline {}: is a \
         workflow worker running, and does it know `weir.answers`? (a request that cannot be \
         read goes to the DLQ with why)",
        deadline.to_rfc3339()
    )]
    NoAnswer {
        execution: ExecutionId,
        name: String,
        query_id: String,
        deadline: DateTime<Utc>,
    },
    #[error("the reader of `{topic}` stopped before query {query_id} of {execution} was answered")]
    Stopped {
        topic: String,
        execution: ExecutionId,
        query_id: String,
    },
}

/// A new query's id: a ULID, unique to its asker.
pub fn new_query_id() -> String {
    ulid::Ulid::new().to_string()
}

/// The request for `name(params)` of `execution`, answerable until `deadline` from now,
/// checked as the owner checks it ([`check_request`]: an array of params, a name).
pub fn request(
    execution: ExecutionId,
    name: &str,
    params: Value,
    deadline: Duration,
) -> Result<QueryRequest, QueryError> {
    let query_id = new_query_id();
    check_request(&query_id, name, &params)?;
    let requested_at = Utc::now();
    let deadline = chrono::Duration::from_std(deadline)
        .ok()
        .and_then(|d| requested_at.checked_add_signed(d))
        .ok_or_else(|| {
            QueryError::new(
                weir_core::query::QueryErrorKind::InvalidRequest,
                format!("a deadline {deadline:?} from now is too far away"),
            )
        })?;
    Ok(QueryRequest {
        query_id,
        execution_id: execution,
        name: name.to_owned(),
        params,
        requested_at,
        deadline,
    })
}

/// The waiting asks, by query id.
type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<QueryAnswer>>>>;

/// The task that reads `weir.answers` and hands each answer to its ask.
struct Follower {
    waiters: Waiters,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends queries and waits for their answers (see the module docs).
pub struct QueryClient {
    kafka: KafkaConfig,
    codec: Arc<Codec>,
    producer: FutureProducer,
    responses: String,
    answers: String,
    follower: tokio::sync::OnceCell<Follower>,
}

impl std::fmt::Debug for QueryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryClient")
            .field("responses", &self.responses)
            .field("answers", &self.answers)
            .field("following", &self.follower.initialized())
            .finish()
    }
}

/// Takes a waiter out when its ask ends, answered or not.
struct Waiting<'a> {
    waiters: &'a Waiters,
    query_id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(self.waiters).remove(self.query_id);
    }
}

fn lock(
    waiters: &Waiters,
) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<QueryAnswer>>> {
    // A panic while the map was held leaves it whole (inserts and removes only).
    waiters
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl QueryClient {
    /// A client of the deployment of `topology` that sends with `producer` (a plain one).
    pub fn new(
        kafka: &KafkaConfig,
        codec: Arc<Codec>,
        topology: &Topology,
        producer: FutureProducer,
    ) -> Self {
        QueryClient {
            kafka: kafka.clone(),
            codec,
            producer,
            responses: topology.topic(TopicRole::Responses).name.clone(),
            answers: topology.topic(TopicRole::Answers).name.clone(),
            follower: tokio::sync::OnceCell::new(),
        }
    }

    /// The topic answers are read from.
    pub fn answers_topic(&self) -> &str {
        &self.answers
    }

    /// Starts following `weir.answers` now rather than at the first ask (which does it
    /// anyway); a failure is returned, and tried again at the next call.
    pub async fn start(&self) -> Result<(), QueryClientError> {
        self.follower().await.map(|_| ())
    }

    async fn follower(&self) -> Result<&Follower, QueryClientError> {
        self.follower
            .get_or_try_init(|| async {
                let consumer = self.assigned_at_the_end().await?;
                let waiters: Waiters = Arc::default();
                let task = tokio::spawn(follow(
                    consumer,
                    Arc::clone(&self.codec),
                    self.answers.clone(),
                    Arc::clone(&waiters),
                ));
                Ok(Follower { waiters, task })
            })
            .await
    }

    /// A consumer of every partition of `weir.answers`, each at its end offset now.
    async fn assigned_at_the_end(&self) -> Result<StreamConsumer, QueryClientError> {
        let kafka = self.kafka.clone();
        let topic = self.answers.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let failed = |source| QueryClientError::Follow {
                topic: topic.clone(),
                source,
            };
            let consumer: StreamConsumer = kafka
                .consumer(&kafka.group_id(&format!("weir-query-{}", ulid::Ulid::new())))
                .create()
                .map_err(failed)?;
            let metadata = consumer
                .fetch_metadata(Some(&topic), START_PATIENCE)
                .map_err(failed)?;
            let described = metadata.topics().iter().find(|t| t.name() == topic);
            let partitions: Vec<i32> = match described {
                Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                    t.partitions().iter().map(|p| p.id()).collect()
                }
                Some(t) => {
                    let reason = match t.error() {
                        Some(code) => rdkafka::error::RDKafkaErrorCode::from(code).to_string(),
                        None => "it has no partitions".to_owned(),
                    };
                    return Err(QueryClientError::NoTopic { topic, reason });
                }
                None => {
                    return Err(QueryClientError::NoTopic {
                        topic,
                        reason: "the brokers do not know it".to_owned(),
                    });
                }
            };
            let mut assignment = TopicPartitionList::new();
            for partition in partitions {
                let (_, high) = consumer
                    .fetch_watermarks(&topic, partition, START_PATIENCE)
                    .map_err(failed)?;
                assignment
                    .add_partition_offset(&topic, partition, Offset::Offset(high))
                    .map_err(failed)?;
            }
            consumer.assign(&assignment).map_err(failed)?;
            Ok(consumer)
        })
        .await;
        match joined {
            Ok(consumer) => consumer,
            Err(e) => Err(QueryClientError::NoTopic {
                topic: self.answers.clone(),
                reason: format!("its reader could not start: {e}"),
            }),
        }
    }

    /// Sends `request` (on `weir.responses`, keyed by its execution, kind `query`) and waits
    /// for its answer until its deadline.
    pub async fn ask(&self, request: &QueryRequest) -> Result<QueryAnswer, QueryClientError> {
        let follower = self.follower().await?;
        let (sender, receiver) = oneshot::channel();
        lock(&follower.waiters).insert(request.query_id.clone(), sender);
        let _waiting = Waiting {
            waiters: &follower.waiters,
            query_id: &request.query_id,
        };
        send_query(&self.producer, &self.codec, &self.responses, request)
            .await
            .map_err(|source| QueryClientError::Send {
                execution: request.execution_id.clone(),
                query_id: request.query_id.clone(),
                source: Box::new(source),
            })?;
        let left = (request.deadline - Utc::now()).to_std().unwrap_or_default();
        match tokio::time::timeout(left, receiver).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(QueryClientError::Stopped {
                topic: self.answers.clone(),
                execution: request.execution_id.clone(),
                query_id: request.query_id.clone(),
            }),
            Err(_) => Err(QueryClientError::NoAnswer {
                execution: request.execution_id.clone(),
                name: request.name.clone(),
                query_id: request.query_id.clone(),
                deadline: request.deadline,
            }),
        }
    }
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), keyed by its execution,
/// marked with the header `weir.kind = query`, and waits until the broker has it.
pub async fn send_query(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &QueryRequest,
) -> Result<(), SubmitError> {
    let headers = super::headers::of_kind(RecordKind::Query);
    let id = request.execution_id.to_string();
    super::submit::send_keyed(producer, codec, topic, &id, request, Some(headers)).await
}

/// Reads `topic` for as long as the client lives, handing each answer to its ask.
async fn follow(consumer: StreamConsumer, codec: Arc<Codec>, topic: String, waiters: Waiters) {
    loop {
        let message = match consumer.recv().await {
            // Owned: the decoding below may wait for the schema registry.
            Ok(message) => message.detach(),
            Err(error) => {
                warn!(%error, %topic, "reading the answers to queries failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Nobody waits: nothing to decode.
        if lock(&waiters).is_empty() {
            continue;
        }
        let Some(payload) = message.payload() else {
            continue;
        };
        let position = RecordPosition::at(&topic, message.partition(), message.offset());
        let answer = match codec
            .decode_fetching::<QueryAnswer>(payload, &position)
            .await
        {
            Ok(answer) => answer,
            Err(error) => {
                warn!(%error, %position, "an answer to a query skipped: it does not decode");
                continue;
            }
        };
        match lock(&waiters).remove(&answer.query_id) {
            Some(sender) => {
                // The ask may have stopped waiting meanwhile: nothing to do then.
                let _ = sender.send(answer);
            }
            None => {
                debug!(query_id = %answer.query_id, execution = %answer.execution_id, "an answer to another client's query");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weir_core::query::QueryErrorKind;

    use super::*;

    #[test]
    fn a_request_is_checked_and_gets_a_fresh_id_and_its_deadline() {
        let id: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("an id");
        let before = Utc::now();
        let request =
            request(id.clone(), "status", json!([1]), Duration::from_secs(10)).expect("a request");
        assert_eq!(request.execution_id, id);
        assert_eq!(request.params, json!([1]));
        assert!(request.deadline >= before + chrono::Duration::seconds(10));
        assert!(request.deadline <= request.requested_at + chrono::Duration::seconds(10));
        let other =
            super::request(id.clone(), "status", json!([]), DEFAULT_DEADLINE).expect("a request");
        assert_ne!(request.query_id, other.query_id);
        let kind = |r: Result<QueryRequest, QueryError>| r.expect_err("refused").kind;
        assert_eq!(
            kind(super::request(
                id.clone(),
                "status",
                json!({"a": 1}),
                DEFAULT_DEADLINE
            )),
            QueryErrorKind::InvalidRequest
        );
        assert_eq!(
            kind(super::request(id, "", json!([]), DEFAULT_DEADLINE)),
            QueryErrorKind::InvalidRequest
        );
    }
}
