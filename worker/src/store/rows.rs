//! What the store keeps, as plain rows. History records are opaque bytes here: their encoding
//! belongs to [`crate::codec`], so the store neither knows nor depends on the wire format.

use chrono::{DateTime, Utc};

use crate::model::ids::ExecutionId;

/// One record of an execution's changelog (`weir.history`), materialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub execution_id: ExecutionId,
    /// Position in the execution's changelog, from 0; the upsert key with `execution_id`.
    pub seq: i64,
    /// The record's kind (`created`, `event`, `response`, `finished`), for queries and tools.
    pub kind: String,
    /// The encoded record, exactly as committed to `weir.history`.
    pub record: Vec<u8>,
    /// Where the record was committed in `weir.history`.
    pub kafka_partition: i32,
    pub kafka_offset: i64,
    pub recorded_at: DateTime<Utc>,
}

/// Where an execution stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    pub execution_id: ExecutionId,
    pub ffqn: String,
    pub parent_id: Option<ExecutionId>,
    /// JSON array of the parameters.
    pub params: String,
    /// `pending`, `blocked`, `finished`, … as the worker names them.
    pub state: String,
    /// The result as JSON, once finished.
    pub result: Option<String>,
    /// Number of changelog records materialised for this execution.
    pub history_version: i64,
    pub kafka_partition: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A delay, an activity retry backoff or a scheduled execution, due at `due_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    /// The partition of the co-partitioned topics that owns the timer's execution.
    pub kafka_partition: i32,
    pub due_at: DateTime<Utc>,
    /// Unique per timer (a delay id, an execution id plus attempt, …).
    pub timer_id: String,
    pub execution_id: ExecutionId,
    pub kind: String,
    /// What firing the timer produces (an encoded response or submission).
    pub payload: Vec<u8>,
}

/// How far one partition of a changelog topic is materialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub topic: String,
    pub kafka_partition: i32,
    /// The next offset to materialise: everything below it is in the store.
    pub materialised_offset: i64,
    /// The worker instance that wrote it (for operators).
    pub owner: String,
    pub updated_at: DateTime<Utc>,
}
