//! The trigger worker: reads the topics of `triggers.toml` (topics of other systems, never
//! written by Weir) in its own consumer group and turns every record into what its trigger
//! says ([`crate::trigger`]): a `Submission` on `weir.submissions`, an `InboundEvent` on
//! `weir.events`, or — a record that does not map — a copy on `weir.dlq` with why. Each batch
//! is one Kafka transaction holding those records and the source offsets
//! (`send_offsets_to_transaction`), so a record is taken once; and since what a record
//! becomes carries an id derived from it, a record read again (a crash after the commit of a
//! batch the broker had not acknowledged, a reset of the group's offsets) makes the same
//! submission, which the workflow worker takes once.

use std::collections::BTreeMap;
use std::sync::Arc;

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{info, warn};

use super::dlq;
use super::group::{MemberContext, collect_batch, leave, rewind_to_committed};
use super::member::{GroupMember, WorkerConfig, WorkerError};
use super::outgoing::OutgoingRecord;
use super::recovery::{Failure, Recovery};
use super::transaction::TransactionError;
use crate::codec::{Codec, DlqReason};
use crate::metrics::Metrics;
use crate::options;
use crate::topology::Topology;
use crate::trigger::{Format, Mapped, SourceRecord, Trigger, oversize};
use crate::wire::{self, Key};
use serde_json::Value;
use weir_core::processor::Effect;

/// The most records one transaction takes.
const MAX_BATCH: usize = 500;

/// The prefix of the trigger worker's failpoints (`trigger-before-commit`, …).
const FAILPOINTS: &str = "trigger-";

pub struct TriggerWorker {
    config: WorkerConfig,
    topology: Arc<Topology>,
    codec: Arc<Codec>,
    metrics: Arc<Metrics>,
    /// The deployment's namespace: identities are derived within it.
    namespace: String,
    /// By topic.
    triggers: BTreeMap<String, Trigger>,
    /// Writer schemas of Avro trigger topics, by registry id.
    schemas: std::sync::Mutex<std::collections::HashMap<u32, Arc<apache_avro::Schema>>>,
}

impl TriggerWorker {
    pub fn new(
        config: WorkerConfig,
        topology: Arc<Topology>,
        codec: Arc<Codec>,
        metrics: Arc<Metrics>,
        namespace: String,
        triggers: Vec<Trigger>,
    ) -> Self {
        TriggerWorker {
            config,
            topology,
            codec,
            metrics,
            namespace,
            triggers: triggers.into_iter().map(|t| (t.topic.clone(), t)).collect(),
            schemas: Default::default(),
        }
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        if self.triggers.is_empty() {
            return Ok(());
        }
        let topics: Vec<String> = self.triggers.keys().cloned().collect();
        let Some(mut member): Option<GroupMember> = self
            .config
            .join_group_at_start(&topics, None, &mut shutdown)
            .await?
        else {
            return Ok(());
        };
        member.transactor = member.transactor.clone().with_failpoint_prefix(FAILPOINTS);
        let mut recovery = Recovery::new(self.config.static_membership);
        info!(instance = %self.config.instance_id, ?topics, "trigger worker started");
        let (mut generation, _) = member.tracker.snapshot();
        loop {
            if *shutdown.borrow() {
                break;
            }
            if member.consumer.context().should_leave() {
                leave(&member.consumer).await;
                break;
            }
            let records =
                collect_batch(&member.consumer, std::time::Duration::ZERO, MAX_BATCH).await;
            super::lag::sample(&member.consumer, &self.metrics.trigger_batches.progress);
            if let Some((code, reason)) = member.consumer.client().fatal_error() {
                // E.g. FENCED_INSTANCE_ID, after a broker was away longer than the session: a
                // consumer that failed fatally reads nothing more. Its clients are rebuilt.
                let cause = WorkerError::ConsumerFatal {
                    group: self.config.group_id.clone(),
                    instance_id: self.config.instance_id.clone(),
                    code,
                    reason,
                };
                let failure = Failure::of_consumer(code);
                let cause = cause.to_string();
                let rebuilt = self
                    .restart(
                        &mut member,
                        &topics,
                        &mut recovery,
                        failure,
                        cause,
                        &mut shutdown,
                    )
                    .await?;
                match rebuilt {
                    Some(new_generation) => generation = new_generation,
                    None => break,
                }
                continue;
            }
            let (now_generation, _) = member.tracker.snapshot();
            if now_generation != generation {
                // The batch spans a rebalance: nothing of it is committed; read again from the
                // committed offsets of what is assigned now.
                generation = now_generation;
                self.rewind(&member.consumer).await?;
                continue;
            }
            if records.is_empty() {
                continue;
            }
            let outgoing = match self.outgoing(&records).await {
                Ok(outgoing) => outgoing,
                Err(e @ WorkerError::Registry(_)) => {
                    // Nothing is committed: read the batch again once the registry answers.
                    warn!(error = %e, "trigger batch not taken: the schema registry did not answer; trying again in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    self.rewind(&member.consumer).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let offsets = next_offsets(&records).map_err(|e| self.consumer_error(e))?;
            let Some(group_metadata) = member.consumer.group_metadata() else {
                self.rewind(&member.consumer).await?;
                continue;
            };
            match member
                .transactor
                .commit(&outgoing, offsets, group_metadata)
                .await
            {
                Ok(_) => {
                    let batches = &self.metrics.trigger_batches;
                    batches.records_in.add(records.len() as u64);
                    batches.records_out.add(outgoing.len() as u64);
                    batches.committed.inc();
                    tracing::debug!(records = records.len(), "trigger batch committed");
                }
                Err(
                    e @ (TransactionError::Rebalanced { .. } | TransactionError::Aborted { .. }),
                ) => {
                    warn!(error = %e, "trigger batch aborted: read again");
                    self.metrics.trigger_batches.aborted.inc();
                    self.rewind(&member.consumer).await?;
                }
                Err(e) => {
                    let Some(failure) = Failure::of_transaction(&e) else {
                        return Err(WorkerError::Transaction(Box::new(e)));
                    };
                    // Nothing of the batch is visible: new clients read it again.
                    self.metrics.trigger_batches.aborted.inc();
                    let cause = e.to_string();
                    let rebuilt = self
                        .restart(
                            &mut member,
                            &topics,
                            &mut recovery,
                            failure,
                            cause,
                            &mut shutdown,
                        )
                        .await?;
                    match rebuilt {
                        Some(new_generation) => generation = new_generation,
                        None => break,
                    }
                }
            }
        }
        info!("trigger worker stopped");
        Ok(())
    }

    /// Rebuilds the member's clients after `failure` ([`super::recovery`]): the new member's
    /// rebalance counter, `None` when the process is stopping.
    async fn restart(
        &self,
        member: &mut GroupMember,
        topics: &[String],
        recovery: &mut Recovery,
        failure: Failure,
        cause: String,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<u64>, WorkerError> {
        let restarts = &self.metrics.trigger_batches.client_restarts;
        let rebuilt = self
            .config
            .restart_member(
                member, topics, None, recovery, failure, cause, restarts, shutdown,
            )
            .await?;
        if !rebuilt {
            return Ok(None);
        }
        member.transactor = member.transactor.clone().with_failpoint_prefix(FAILPOINTS);
        Ok(Some(member.tracker.snapshot().0))
    }

    /// Reads again from the committed offsets of what is assigned; one cut short by the
    /// consumer failing fatally is left to the loop's next turn
    /// ([`super::group::unless_fenced`]).
    async fn rewind<C: rdkafka::consumer::ConsumerContext>(
        &self,
        consumer: &rdkafka::consumer::StreamConsumer<C>,
    ) -> Result<(), WorkerError> {
        let rewound = rewind_to_committed(consumer, "trigger-fetch-committed")
            .await
            .map_err(|source| WorkerError::TakeOver {
                group: self.config.group_id.clone(),
                source,
            });
        super::group::unless_fenced(consumer, rewound).map(|_| ())
    }

    fn consumer_error(&self, source: rdkafka::error::KafkaError) -> WorkerError {
        WorkerError::Consumer {
            group: self.config.group_id.clone(),
            source,
        }
    }

    /// What `records` become, in order.
    async fn outgoing(&self, records: &[OwnedMessage]) -> Result<Vec<OutgoingRecord>, WorkerError> {
        let now = chrono::Utc::now();
        let mut out = Vec::with_capacity(records.len());
        for message in records {
            let Some(trigger) = self.triggers.get(message.topic()) else {
                continue;
            };
            let headers: Vec<(String, Option<Vec<u8>>)> = message
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            let source = SourceRecord {
                topic: message.topic(),
                partition: message.partition(),
                offset: message.offset(),
                key: message.key(),
                value: message.payload(),
                headers: &headers,
            };
            let mapped = match trigger.format {
                Format::Json => trigger.map(&self.namespace, &source, now),
                Format::Avro => match self.avro_json(message.payload()).await? {
                    Ok(value) => trigger.map_value(&self.namespace, &source, value, now),
                    Err(reason) => Err(trigger.undecodable(&source, Format::Avro, reason)),
                },
            };
            let produced = match mapped {
                Ok(mapped) => fitting(encode_mapped(&self.codec, &self.topology, mapped)?),
                Err(error) => Err((error.dlq_reason(), error.to_string())),
            };
            match produced {
                Ok(record) => out.push(record),
                Err((reason, error)) => out.push(dlq::dead_letter(
                    &self.topology,
                    &self.codec,
                    &self.metrics,
                    message,
                    reason,
                    error,
                )),
            }
        }
        Ok(out)
    }

    /// An Avro value in the Confluent wire format, as JSON: `Ok(Err(why))` for bytes that are
    /// not such a value (or name a schema the registry does not have); `Err` when the registry
    /// cannot be asked (the batch is not committed, and is read again).
    async fn avro_json(&self, value: Option<&[u8]>) -> Result<Result<Value, String>, WorkerError> {
        let framed = value.and_then(|bytes| match bytes {
            [0, a, b, c, d, body @ ..] => Some((u32::from_be_bytes([*a, *b, *c, *d]), body)),
            _ => None,
        });
        let Some((id, body)) = framed else {
            return Ok(Err(
                "not in the Confluent wire format (`00` and a schema id)".to_owned(),
            ));
        };
        let schema = match self.schema(id).await? {
            Ok(schema) => schema,
            Err(why) => return Ok(Err(why)),
        };
        let read = crate::codec::read_body(&schema, body)
            .map_err(|e| format!("the body does not fit schema {id}: {e}"))
            .and_then(|v| {
                Value::try_from(v).map_err(|e| format!("no JSON form of the value: {e}"))
            });
        Ok(read)
    }

    /// The writer schema with registry id `id`, cached.
    async fn schema(
        &self,
        id: u32,
    ) -> Result<Result<Arc<apache_avro::Schema>, String>, WorkerError> {
        if let Some(schema) = self
            .schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            return Ok(Ok(Arc::clone(schema)));
        }
        let Some(registry) = self.codec.registry() else {
            return Ok(Err("no schema registry to read it with".to_owned()));
        };
        let text = match registry.schema_by_id(id).await {
            Ok(text) => text,
            Err(e) if e.is_transient() => return Err(WorkerError::Registry(Box::new(e))),
            Err(e) => return Ok(Err(format!("schema {id}: {e}"))),
        };
        let schema = match apache_avro::Schema::parse_str(&text) {
            Ok(schema) => Arc::new(schema),
            Err(e) => return Ok(Err(format!("schema {id} does not parse: {e}"))),
        };
        self.schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::clone(&schema));
        Ok(Ok(schema))
    }
}

/// The record a mapped trigger record is produced as: its effect, routed by the wire table
/// ([`crate::wire::address`], as the workflow worker's and the simulation's), its value
/// encoded for its topic.
fn encode_mapped(
    codec: &Codec,
    topology: &Topology,
    mapped: Mapped,
) -> Result<OutgoingRecord, WorkerError> {
    let effect = mapped.effect();
    let address = match wire::address(&effect) {
        Ok(Some(address)) => address,
        other => unreachable!("a trigger's effect has a topic and a key: {other:?}"),
    };
    let topic = topology.topic(address.role()).name.clone();
    let headers = address
        .all_headers()
        .map(|(name, value)| (name.to_owned(), value.to_vec()))
        .collect();
    let Key::Exactly(key) = address.key else {
        unreachable!(
            "a trigger's effect is keyed by its own id: {:?}",
            address.key
        )
    };
    let encode = |value: Result<Vec<u8>, _>| {
        value.map_err(|source| WorkerError::Encode {
            topic: topic.clone(),
            source: Box::new(source),
        })
    };
    let value = match &effect {
        Effect::Submit(submission) => encode(codec.encode(&topic, submission))?,
        Effect::ForwardEvent(event) => encode(codec.encode(&topic, event))?,
        Effect::ReturnEvent(event) => encode(codec.encode(&topic, event))?,
        other => unreachable!("a trigger produces no {other:?}"),
    };
    Ok(OutgoingRecord {
        partition: None,
        topic,
        key,
        value: Some(value),
        headers,
    })
}

/// The size gate of what a trigger produces ([`oversize`]): the limit is what a workflow
/// worker takes ([`options::MAX_INPUT_RECORD_BYTES`], within the producer's limit).
fn fitting(record: OutgoingRecord) -> Result<OutgoingRecord, (DlqReason, String)> {
    match oversize(
        record.size(),
        options::MAX_INPUT_RECORD_BYTES,
        &record.topic,
    ) {
        Some(refused) => Err(refused),
        None => Ok(record),
    }
}

/// The next offset to read of every partition in `records`.
fn next_offsets(records: &[OwnedMessage]) -> rdkafka::error::KafkaResult<TopicPartitionList> {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for m in records {
        let at = next
            .entry((m.topic().to_owned(), m.partition()))
            .or_default();
        *at = (*at).max(m.offset() + 1);
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        list.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::topology::TopicRole;
    use crate::trigger::TriggersFile;

    const ORDERS: &str = r#"
[[trigger]]
name = "orders"
topic = "shop.orders"
function = "weir-examples:workflows/hello.greet"
params = ["/customer/name"]
id = "/order_id"
"#;

    /// Issue 33 F3: a mapped trigger record was never size-checked: a ~1 MB JSON value became
    /// a submission no producer could send, the batch's transaction failed, and the trigger
    /// worker read the same batch again forever. It is dead-lettered as oversize; a record
    /// that fits is produced.
    #[test]
    fn a_mapped_record_over_the_limit_is_dead_lettered_not_produced() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        let topology = Topology::load(&root).expect("the repository's topology");
        let codec = Codec::single_object();
        let triggers = TriggersFile::parse(ORDERS, Path::new("triggers.toml")).expect("valid");
        let produced = |name: &str| {
            let value = serde_json::json!({"order_id": 42, "customer": {"name": name}});
            let value = serde_json::to_vec(&value).expect("json");
            let source = SourceRecord {
                topic: "shop.orders",
                partition: 0,
                offset: 7,
                key: None,
                value: Some(&value),
                headers: &[],
            };
            let mapped = triggers[0]
                .map("ns", &source, chrono::Utc::now())
                .expect("maps");
            fitting(encode_mapped(&codec, &topology, mapped).expect("encodes"))
        };
        let small = produced("ann").expect("fits");
        assert_eq!(small.topic, topology.topic(TopicRole::Submissions).name);
        let (reason, error) = produced(&"n".repeat(1_000_000)).expect_err("too large");
        assert_eq!(reason, DlqReason::Oversize);
        assert!(error.contains("over the limit"), "{error}");
    }
}
