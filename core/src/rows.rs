//! What the store keeps, as plain rows, and what one committed batch writes into it
//! ([`MaterialiseJob`]). History records are opaque bytes here: their encoding belongs to the
//! codec, so neither the core nor the store depends on the wire format. States and kinds are
//! typed; they become strings only at the CQL boundary ([`ExecutionState::as_str`], …).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use indexmap::IndexMap;

use crate::model::ids::ExecutionId;

/// A string that names none of an enum's values (read from the store).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`")]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
}

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal, { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling in the store.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownName { what: $what, value: other.to_owned() }),
                }
            }
        }
    };
}

named_enum!(
    /// Where an execution stands, as the projection derives it from its history.
    ExecutionState, "execution state", {
        /// Created with a start time in the future; its schedule timer starts it.
        Scheduled => "scheduled",
        Running => "running",
        Finished => "finished",
    }
);

named_enum!(
    /// The kind of a changelog record.
    EntryKind, "history entry kind", {
        Created => "created",
        Event => "event",
        Response => "response",
        Finished => "finished",
    }
);

named_enum!(
    /// What a due timer does.
    TimerKind, "timer kind", {
        /// Answers a delay with `DelayFinished`.
        Delay => "delay",
        /// Starts a scheduled execution.
        Schedule => "schedule",
    }
);

/// One record of an execution's changelog (`weir.history`), materialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub execution_id: ExecutionId,
    /// Position in the execution's changelog, from 0; the upsert key with `execution_id`.
    pub seq: i64,
    pub kind: EntryKind,
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
    pub state: ExecutionState,
    /// The result as JSON, once finished.
    pub result: Option<String>,
    /// Number of changelog records of this execution (the next seq).
    pub history_version: i64,
    pub kafka_partition: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A delay or a scheduled execution, due at `due_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    /// The partition of the co-partitioned topics that owns the timer's execution.
    pub kafka_partition: i32,
    pub due_at: DateTime<Utc>,
    /// Unique per timer (a delay id, `schedule:<execution id>`).
    pub timer_id: String,
    pub execution_id: ExecutionId,
    pub kind: TimerKind,
    /// Reserved for what firing the timer produces; empty today.
    pub payload: Vec<u8>,
}

impl TimerRow {
    pub fn key(&self) -> TimerKey {
        TimerKey {
            kafka_partition: self.kafka_partition,
            due_at: self.due_at,
            timer_id: self.timer_id.clone(),
        }
    }
}

/// What identifies a stored timer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub kafka_partition: i32,
    pub due_at: DateTime<Utc>,
    pub timer_id: String,
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

/// Per partition: every timer due before `fired_before` has fired (and is deleted); a new
/// owner starts reading the timer table there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerWatermark {
    pub kafka_partition: i32,
    pub fired_before: DateTime<Utc>,
    pub owner: String,
    pub updated_at: DateTime<Utc>,
}

/// Everything one committed batch (or a run of catch-up) adds to or removes from the store.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MaterialiseJob {
    /// Changelog rows with their `weir.history` partition and offset.
    pub history: Vec<HistoryRow>,
    pub executions: Vec<ExecutionRow>,
    pub new_timers: Vec<TimerRow>,
    /// Fired or cancelled timers.
    pub removed_timers: Vec<TimerKey>,
    /// Written last: history checkpoints and timer watermarks.
    pub checkpoints: Vec<Checkpoint>,
    pub watermarks: Vec<TimerWatermark>,
}

impl MaterialiseJob {
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
            && self.executions.is_empty()
            && self.new_timers.is_empty()
            && self.removed_timers.is_empty()
            && self.checkpoints.is_empty()
            && self.watermarks.is_empty()
    }

    /// One job with the effect of `jobs` applied in order: history rows accumulate; of an
    /// execution row, a timer (written or removed), a checkpoint and a watermark only the
    /// latest state is kept. (Keeping a timer's insert and its later delete both would also
    /// send them to the store concurrently, where the delete could lose.)
    pub fn merge(jobs: Vec<MaterialiseJob>) -> MaterialiseJob {
        if jobs.len() == 1 {
            return jobs.into_iter().next().unwrap_or_default();
        }
        let mut history = Vec::new();
        let mut executions: IndexMap<ExecutionId, ExecutionRow> = IndexMap::new();
        // `None`: removed.
        let mut timers: IndexMap<TimerKey, Option<TimerRow>> = IndexMap::new();
        let mut checkpoints: IndexMap<(String, i32), Checkpoint> = IndexMap::new();
        let mut watermarks: IndexMap<i32, TimerWatermark> = IndexMap::new();
        for job in jobs {
            history.extend(job.history);
            for row in job.executions {
                executions.insert(row.execution_id.clone(), row);
            }
            for timer in job.new_timers {
                timers.insert(timer.key(), Some(timer));
            }
            for key in job.removed_timers {
                timers.insert(key, None);
            }
            for checkpoint in job.checkpoints {
                let key = (checkpoint.topic.clone(), checkpoint.kafka_partition);
                checkpoints.insert(key, checkpoint);
            }
            for watermark in job.watermarks {
                watermarks.insert(watermark.kafka_partition, watermark);
            }
        }
        let mut merged = MaterialiseJob {
            history,
            executions: executions.into_values().collect(),
            checkpoints: checkpoints.into_values().collect(),
            watermarks: watermarks.into_values().collect(),
            ..MaterialiseJob::default()
        };
        for (key, timer) in timers {
            match timer {
                Some(timer) => merged.new_timers.push(timer),
                None => merged.removed_timers.push(key),
            }
        }
        merged
    }
}
