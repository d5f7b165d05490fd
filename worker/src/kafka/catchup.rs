//! Catch-up of the store with `weir.history` when a worker takes a partition over.
//!
//! The previous owner materialises after each commit, but may have died between a commit and
//! its materialisation. The new owner therefore reads the history partition from the stored
//! checkpoint to its last stable offset (a `read_committed` consumer reports the end of the
//! partition there) and upserts what it finds — rows, execution state and timers — before it
//! processes any input. Upserts make reading a record twice harmless.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::KafkaConfig;
use super::executions::{TIMER_DELAY, TIMER_SCHEDULE, schedule_timer_id};
use super::materialiser::{self, MaterialiseJob};
use crate::codec::{Codec, HistoryEntry, HistoryRecord, RecordPosition};
use crate::model::{HistoryEvent, JoinSetRequest, Response};
use crate::store::{Checkpoint, ExecutionRow, HistoryRow, Store, StoreError, TimerRow};
use crate::topology::{TopicRole, Topology};

/// The checkpoint row (topic name + this suffix) holding a partition's timer watermark: the
/// time (epoch millis, in `materialised_offset`) before which every timer has fired.
pub const TIMER_WATERMARK_SUFFIX: &str = "#timers";

/// Rows upserted per round trip group.
const FLUSH_EVERY: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CatchupError {
    #[error("reading {topic}/{partition}: {source}")]
    Kafka {
        topic: String,
        partition: i32,
        source: KafkaError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{topic}/{partition} offset {offset}: {reason}")]
    Record {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
}

pub struct Catchup<'a, S: Store> {
    kafka: &'a KafkaConfig,
    topic: String,
    codec: &'a Codec,
    store: &'a S,
    owner: &'a str,
}

impl<'a, S: Store> Catchup<'a, S> {
    pub fn new(
        kafka: &'a KafkaConfig,
        topology: &Topology,
        codec: &'a Codec,
        store: &'a S,
        owner: &'a str,
    ) -> Self {
        Catchup {
            kafka,
            topic: topology.topic(TopicRole::History).name.clone(),
            codec,
            store,
            owner,
        }
    }

    /// Materialises `partition` of the history up to its last stable offset; returns how many
    /// records were read.
    pub async fn run(&self, partition: i32) -> Result<usize, CatchupError> {
        let from = self
            .store
            .checkpoint(&self.topic, partition)
            .await?
            .map_or(0, |c| c.materialised_offset);
        let kafka_error = |source| CatchupError::Kafka {
            topic: self.topic.clone(),
            partition,
            source,
        };
        let mut config = self.kafka.client();
        config
            .set("group.id", format!("weir-catchup-{}", self.owner))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true");
        let consumer: BaseConsumer = config.create().map_err(kafka_error)?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, Offset::Offset(from))
            .map_err(kafka_error)?;
        consumer.assign(&assignment).map_err(kafka_error)?;

        let mut changes = StoreChanges::default();
        let mut next_offset = from;
        let mut read = 0;
        loop {
            // librdkafka blocks in poll; a short timeout keeps the runtime responsive.
            let polled = tokio::task::block_in_place(|| consumer.poll(Duration::from_millis(200)));
            match polled {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(kafka_error(e)),
                Some(Ok(message)) => {
                    let offset = message.offset();
                    let position = RecordPosition::at(&self.topic, partition, offset);
                    let record: HistoryRecord = self
                        .codec
                        .decode(message.payload().unwrap_or_default(), &position)
                        .map_err(|e| CatchupError::Record {
                            topic: self.topic.clone(),
                            partition,
                            offset,
                            reason: e.to_string(),
                        })?;
                    let recorded_at = message
                        .timestamp()
                        .to_millis()
                        .and_then(DateTime::from_timestamp_millis)
                        .unwrap_or_else(Utc::now);
                    let bytes = message.payload().unwrap_or_default().to_vec();
                    changes
                        .add(self.store, record, bytes, partition, offset, recorded_at)
                        .await?;
                    next_offset = offset + 1;
                    read += 1;
                    if changes.rows.len() >= FLUSH_EVERY {
                        self.flush(&mut changes, partition, next_offset).await?;
                    }
                }
            }
        }
        if read > 0 {
            self.flush(&mut changes, partition, next_offset).await?;
        }
        Ok(read)
    }

    /// Writes the changes gathered so far and then the checkpoint at `next_offset`, the way
    /// the materialiser writes a committed batch.
    async fn flush(
        &self,
        changes: &mut StoreChanges,
        partition: i32,
        next_offset: i64,
    ) -> Result<(), StoreError> {
        let checkpoint = Checkpoint {
            topic: self.topic.clone(),
            kafka_partition: partition,
            materialised_offset: next_offset,
            owner: self.owner.to_owned(),
            updated_at: Utc::now(),
        };
        materialiser::write(self.store, &changes.take_job(checkpoint)).await
    }
}

/// What a run of changelog records turns into in the store.
#[derive(Default)]
struct StoreChanges {
    rows: Vec<HistoryRow>,
    executions: HashMap<String, ExecutionRow>,
    timers: Vec<TimerRow>,
    removed_timers: Vec<(i32, DateTime<Utc>, String)>,
    /// Due times of delays requested in this run, to delete their timers when answered.
    delay_due: HashMap<String, DateTime<Utc>>,
}

impl StoreChanges {
    async fn add<S: Store>(
        &mut self,
        store: &S,
        record: HistoryRecord,
        bytes: Vec<u8>,
        partition: i32,
        offset: i64,
        recorded_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let id = record.execution_id.clone();
        let key = id.to_string();
        if !self.executions.contains_key(&key)
            && let Some(row) = store.execution(&id).await?
        {
            self.executions.insert(key.clone(), row);
        }
        let kind = match &record.entry {
            HistoryEntry::Created(_) => "created",
            HistoryEntry::Event { .. } => "event",
            HistoryEntry::ResponseAppended(_) => "response",
            HistoryEntry::Finished { .. } => "finished",
        };
        match &record.entry {
            HistoryEntry::Created(created) => {
                let scheduled = created.scheduled_at.filter(|at| *at > created.created_at);
                self.executions.insert(
                    key.clone(),
                    ExecutionRow {
                        execution_id: id.clone(),
                        ffqn: created.ffqn.to_string(),
                        parent_id: created.parent.as_ref().map(|p| p.execution_id.clone()),
                        params: created.params.to_string(),
                        state: if scheduled.is_some() {
                            "scheduled"
                        } else {
                            "running"
                        }
                        .to_owned(),
                        result: None,
                        history_version: 0,
                        kafka_partition: partition,
                        created_at: created.created_at,
                        updated_at: recorded_at,
                        finished_at: None,
                    },
                );
                if let Some(due_at) = scheduled {
                    self.timers.push(TimerRow {
                        kafka_partition: partition,
                        due_at,
                        timer_id: schedule_timer_id(&id),
                        execution_id: id.clone(),
                        kind: TIMER_SCHEDULE.to_owned(),
                        payload: Vec::new(),
                    });
                }
            }
            HistoryEntry::Event { event, .. } => {
                if let HistoryEvent::JoinSetRequest {
                    request:
                        JoinSetRequest::DelayRequest {
                            delay_id,
                            expires_at,
                            ..
                        },
                    ..
                } = event
                {
                    self.delay_due.insert(delay_id.to_string(), *expires_at);
                    self.timers.push(TimerRow {
                        kafka_partition: partition,
                        due_at: *expires_at,
                        timer_id: delay_id.to_string(),
                        execution_id: id.clone(),
                        kind: TIMER_DELAY.to_owned(),
                        payload: Vec::new(),
                    });
                }
                if let Some(row) = self.executions.get_mut(&key) {
                    row.state = "running".to_owned();
                }
            }
            HistoryEntry::ResponseAppended(Response::DelayFinished { delay_id, .. }) => {
                let timer_id = delay_id.to_string();
                if let Some(due_at) = self.delay_due.get(&timer_id) {
                    // Not written at all if requested since the last flush: the job's inserts
                    // and deletes go to the store concurrently.
                    self.timers.retain(|t| t.timer_id != timer_id);
                    self.removed_timers.push((partition, *due_at, timer_id));
                }
            }
            HistoryEntry::ResponseAppended(_) => {}
            HistoryEntry::Finished {
                result,
                finished_at,
            } => {
                if let Some(row) = self.executions.get_mut(&key) {
                    row.state = "finished".to_owned();
                    row.result = Some(serde_json::to_string(result).unwrap_or_default());
                    row.finished_at = Some(*finished_at);
                }
            }
        }
        if let Some(row) = self.executions.get_mut(&key) {
            row.history_version = row.history_version.max(record.seq as i64 + 1);
            row.updated_at = recorded_at;
        }
        self.rows.push(HistoryRow {
            execution_id: id,
            seq: record.seq as i64,
            kind: kind.to_owned(),
            record: bytes,
            kafka_partition: partition,
            kafka_offset: offset,
            recorded_at,
        });
        Ok(())
    }

    /// Everything gathered since the last flush, with `checkpoint` to write last. Execution
    /// rows stay: later records of the run update them.
    fn take_job(&mut self, checkpoint: Checkpoint) -> MaterialiseJob {
        MaterialiseJob {
            history: std::mem::take(&mut self.rows),
            executions: self.executions.values().cloned().collect(),
            new_timers: std::mem::take(&mut self.timers),
            removed_timers: std::mem::take(&mut self.removed_timers),
            checkpoints: vec![checkpoint],
        }
    }
}
