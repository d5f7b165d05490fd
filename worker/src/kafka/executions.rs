//! The executions a workflow worker holds for its partitions, and the translation of what they
//! do into records: history entries, child submissions, activity requests, responses to
//! parents and results. One [`Batch`] collects the records of one Kafka transaction and what
//! to materialise into the store once it commits.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use serde_json::Value;

use crate::codec::{
    ActivityRequest, AvroRecord, Codec, Created, EncodeError, ExecutionFinished, HistoryEntry,
    HistoryRecord, ParentRef, Submission,
};
use crate::model::{
    ChildKind, ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn, Response,
};
use crate::replay::{Effects, Output};
use crate::store::{ExecutionRow, HistoryRow, TimerRow};
use crate::topology::{TopicRole, Topology};
use crate::wasm::WorkflowRun;

use super::partitioner::partition_for_key;
use super::transaction::OutgoingRecord;

/// Timer kinds kept in the store.
pub const TIMER_DELAY: &str = "delay";
pub const TIMER_SCHEDULE: &str = "schedule";

/// The id of the timer that starts a scheduled execution.
pub fn schedule_timer_id(execution_id: &ExecutionId) -> String {
    format!("schedule:{execution_id}")
}

/// Where an execution stands in this worker.
pub enum Phase {
    /// Created with a start time in the future; a schedule timer will start it.
    Scheduled,
    /// Running: parked in memory (`Some`), or evicted and to be rebuilt by replay (`None`).
    Running(Option<WorkflowRun>),
    Finished(ExecutionResult),
}

/// An execution of one of this worker's partitions.
pub struct Live {
    pub created: Created,
    pub id: ExecutionId,
    pub partition: i32,
    /// The seq of the next changelog record.
    pub next_seq: u64,
    /// Ids (child execution or delay) of the responses already journalled: duplicates of a
    /// response are ignored.
    pub responses_seen: HashSet<String>,
    pub phase: Phase,
    pub updated_at: DateTime<Utc>,
    /// The materialiser's number of the last committed batch that touched this execution:
    /// until that batch is in the store, the store is behind memory and the execution is
    /// pinned (never evicted, never rebuilt from the store).
    pub pinned_until: u64,
}

impl Live {
    fn is_pinned(&self, materialised: u64) -> bool {
        self.pinned_until > materialised
    }

    pub fn state_name(&self) -> &'static str {
        match self.phase {
            Phase::Scheduled => "scheduled",
            Phase::Running(_) => "running",
            Phase::Finished(_) => "finished",
        }
    }

    pub fn row(&self) -> ExecutionRow {
        let (result, finished_at) = match &self.phase {
            Phase::Finished(result) => (
                Some(serde_json::to_string(result).unwrap_or_default()),
                Some(self.updated_at),
            ),
            _ => (None, None),
        };
        ExecutionRow {
            execution_id: self.id.clone(),
            ffqn: self.created.ffqn.to_string(),
            parent_id: self.created.parent.as_ref().map(|p| p.execution_id.clone()),
            params: self.created.params.to_string(),
            state: self.state_name().to_owned(),
            result,
            history_version: self.next_seq as i64,
            kafka_partition: self.partition,
            created_at: self.created.created_at,
            updated_at: self.updated_at,
            finished_at,
        }
    }
}

/// A bounded cache of executions. Least recently used parked runs are dropped first (they
/// are rebuilt by replay when needed); the bookkeeping of an execution is small and kept.
#[derive(Default)]
pub struct Executions {
    entries: IndexMap<ExecutionId, Live>,
    parked_limit: usize,
}

impl Executions {
    pub fn new(parked_limit: usize) -> Self {
        Executions {
            entries: IndexMap::new(),
            parked_limit: parked_limit.max(1),
        }
    }

    pub fn get_mut(&mut self, id: &ExecutionId) -> Option<&mut Live> {
        // Move to the back: the back is the most recently used.
        let index = self.entries.get_index_of(id)?;
        let last = self.entries.len() - 1;
        self.entries.move_index(index, last);
        self.entries.get_index_mut(last).map(|(_, live)| live)
    }

    pub fn contains(&self, id: &ExecutionId) -> bool {
        self.entries.contains_key(id)
    }

    /// Adds an execution. Nothing is evicted here: executions touched by the batch being built
    /// must stay until it is committed and materialised (see [`Executions::evict`]).
    pub fn insert(&mut self, live: Live) {
        self.entries.insert(live.id.clone(), live);
    }

    /// Keeps at most `parked_limit` parked instances, dropping the least recently used, and
    /// forgets idle executions beyond four times that many entries. Executions pinned by a
    /// batch that is not yet materialised (`materialised` = the materialiser's last batch in
    /// the store) are kept whatever the count: a rebuild would read a store that is behind.
    /// Call it only between batches.
    pub fn evict(&mut self, materialised: u64) {
        let parked = self
            .entries
            .values()
            .filter(|l| matches!(l.phase, Phase::Running(Some(_))))
            .count();
        let mut excess = parked.saturating_sub(self.parked_limit);
        for live in self.entries.values_mut() {
            if excess == 0 {
                break;
            }
            if live.is_pinned(materialised) {
                continue;
            }
            if let Phase::Running(run @ Some(_)) = &mut live.phase {
                *run = None;
                excess -= 1;
            }
        }
        while self.entries.len() > self.parked_limit * 4 {
            let Some(index) = self.entries.values().position(|l| {
                !matches!(l.phase, Phase::Running(Some(_))) && !l.is_pinned(materialised)
            }) else {
                break;
            };
            self.entries.shift_remove_index(index);
        }
    }

    /// Drops everything (after an aborted transaction or a rebalance: in-memory runs may
    /// have moved past what is committed).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn parked(&self) -> usize {
        self.entries
            .values()
            .filter(|l| matches!(l.phase, Phase::Running(Some(_))))
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("execution {execution}: no route for activity {ffqn} (add it to topology/routes.toml)")]
    NoRoute { execution: String, ffqn: Ffqn },
}

/// The records of one transaction and what to write to the store after it commits.
pub struct Batch<'a> {
    codec: &'a Codec,
    topology: &'a Topology,
    history_partitions: i32,
    pub records: Vec<OutgoingRecord>,
    /// History rows, with the index of their record in `records` (for the landed offset).
    pub history_rows: Vec<(usize, HistoryRow)>,
    pub touched: Vec<ExecutionId>,
    pub new_timers: Vec<TimerRow>,
    /// (partition, due_at, timer id) of timers fired or cancelled.
    pub removed_timers: Vec<(i32, DateTime<Utc>, String)>,
    pub now: DateTime<Utc>,
}

impl<'a> Batch<'a> {
    pub fn new(codec: &'a Codec, topology: &'a Topology, now: DateTime<Utc>) -> Self {
        Batch {
            codec,
            topology,
            history_partitions: topology.topic(TopicRole::History).partitions,
            records: Vec::new(),
            history_rows: Vec::new(),
            touched: Vec::new(),
            new_timers: Vec::new(),
            removed_timers: Vec::new(),
            now,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn topic(&self, role: TopicRole) -> String {
        self.topology.topic(role).name.clone()
    }

    fn push<R: AvroRecord>(
        &mut self,
        topic: String,
        key: &ExecutionId,
        record: &R,
    ) -> Result<usize, BatchError> {
        let value = self.codec.encode(&topic, record)?;
        self.records.push(OutgoingRecord {
            topic,
            key: key.to_string(),
            value,
            headers: Vec::new(),
        });
        Ok(self.records.len() - 1)
    }

    /// Appends one changelog record of `live` (and remembers it for materialisation).
    pub fn history(&mut self, live: &mut Live, entry: HistoryEntry) -> Result<(), BatchError> {
        let kind = match &entry {
            HistoryEntry::Created(_) => "created",
            HistoryEntry::Event { .. } => "event",
            HistoryEntry::ResponseAppended(_) => "response",
            HistoryEntry::Finished { .. } => "finished",
        };
        let record = HistoryRecord {
            execution_id: live.id.clone(),
            seq: live.next_seq,
            entry,
        };
        let index = self.push(self.topic(TopicRole::History), &live.id, &record)?;
        let row = HistoryRow {
            execution_id: live.id.clone(),
            seq: live.next_seq as i64,
            kind: kind.to_owned(),
            record: self.records[index].value.clone(),
            kafka_partition: partition_for_key(
                live.id.to_string().as_bytes(),
                self.history_partitions,
            ),
            kafka_offset: -1,
            recorded_at: self.now,
        };
        self.history_rows.push((index, row));
        live.next_seq += 1;
        live.updated_at = self.now;
        if !self.touched.contains(&live.id) {
            self.touched.push(live.id.clone());
        }
        Ok(())
    }

    /// Journals a response consumed for `live`.
    pub fn journal_response(
        &mut self,
        live: &mut Live,
        response: &Response,
    ) -> Result<(), BatchError> {
        live.responses_seen.insert(response_id(response));
        self.history(live, HistoryEntry::ResponseAppended(response.clone()))
    }

    /// Turns what a run produced into records: its events, then its outputs.
    pub fn effects(&mut self, live: &mut Live, effects: Effects) -> Result<(), BatchError> {
        for versioned in effects.events {
            self.history(
                live,
                HistoryEntry::Event {
                    version: versioned.version,
                    event: versioned.event,
                },
            )?;
        }
        for output in effects.outputs {
            self.output(live, output)?;
        }
        Ok(())
    }

    fn output(&mut self, live: &mut Live, output: Output) -> Result<(), BatchError> {
        match output {
            Output::SubmitChild {
                child_execution_id,
                ffqn,
                params,
                kind,
            } => self.submit_child(live, child_execution_id, ffqn, params, kind),
            Output::RequestDelay {
                delay_id,
                expires_at,
            } => {
                self.new_timers.push(TimerRow {
                    kafka_partition: live.partition,
                    due_at: expires_at,
                    timer_id: delay_id.to_string(),
                    execution_id: live.id.clone(),
                    kind: TIMER_DELAY.to_owned(),
                    payload: Vec::new(),
                });
                Ok(())
            }
            Output::Schedule {
                execution_id,
                ffqn,
                params,
                at,
            } => {
                let submission = Submission {
                    execution_id: execution_id.clone(),
                    ffqn,
                    params,
                    parent: None,
                    scheduled_at: Some(at),
                    correlation_id: None,
                    metadata: Default::default(),
                };
                self.push(
                    self.topic(TopicRole::Submissions),
                    &execution_id,
                    &submission,
                )?;
                Ok(())
            }
            Output::StubWrite {
                execution_id,
                result,
            } => {
                // The stub's result answers this very execution, through weir.responses like
                // any child's, so that it is journalled in arrival order.
                let response = Response::ChildExecutionFinished {
                    child_execution_id: execution_id,
                    result,
                };
                self.push(
                    self.topic(TopicRole::Responses),
                    &live.id.clone(),
                    &response,
                )?;
                Ok(())
            }
            Output::CancelChild { child_execution_id } => {
                // Activities are at-least-once and cannot be recalled once requested; the
                // engine has closed the join set, so a late answer is ignored by the parent.
                tracing::debug!(execution = %live.id, child = %child_execution_id, "activity cancelled");
                Ok(())
            }
            Output::CancelDelay { delay_id } => {
                if let Some(timer) = self
                    .new_timers
                    .iter()
                    .position(|t| t.timer_id == delay_id.to_string())
                {
                    self.new_timers.remove(timer);
                }
                // The stored timer may exist from an earlier batch; its due time is unknown
                // here, so it stays and its firing is ignored (the delay was answered).
                Ok(())
            }
            Output::Finished { result } => self.finish(live, result),
        }
    }

    fn submit_child(
        &mut self,
        live: &mut Live,
        child: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        kind: ChildKind,
    ) -> Result<(), BatchError> {
        match kind {
            ChildKind::Workflow => {
                let join_set_id = child
                    .join_set_id()
                    .cloned()
                    .expect("a child id names its join set");
                let submission = Submission {
                    execution_id: child.clone(),
                    ffqn,
                    params,
                    parent: Some(ParentRef {
                        execution_id: live.id.clone(),
                        join_set_id,
                        child_kind: kind,
                    }),
                    scheduled_at: None,
                    correlation_id: None,
                    metadata: Default::default(),
                };
                self.push(self.topic(TopicRole::Submissions), &child, &submission)?;
            }
            ChildKind::Activity => {
                let Some(route) = self.topology.route(ffqn.ifc_fqn()) else {
                    return Err(BatchError::NoRoute {
                        execution: live.id.to_string(),
                        ffqn,
                    });
                };
                let request = ActivityRequest {
                    execution_id: child.clone(),
                    parent_execution_id: live.id.clone(),
                    ffqn,
                    params,
                    attempt: 1,
                    timeout_millis: None,
                    deadline: None,
                };
                self.push(route.topic.clone(), &child, &request)?;
            }
            // Never executed: the workflow writes its result with `<f>-stub`.
            ChildKind::Stub => {}
        }
        Ok(())
    }

    /// Records the end of `live` and tells whoever waits: the parent, or `weir.results`.
    pub fn finish(&mut self, live: &mut Live, result: ExecutionResult) -> Result<(), BatchError> {
        self.history(
            live,
            HistoryEntry::Finished {
                result: result.clone(),
                finished_at: self.now,
            },
        )?;
        match &live.created.parent {
            Some(parent) => {
                let response = Response::ChildExecutionFinished {
                    child_execution_id: live.id.clone(),
                    result: result.clone(),
                };
                let parent_id = parent.execution_id.clone();
                self.push(self.topic(TopicRole::Responses), &parent_id, &response)?;
            }
            None => {
                let finished = ExecutionFinished {
                    execution_id: live.id.clone(),
                    ffqn: live.created.ffqn.clone(),
                    result: result.clone(),
                    finished_at: self.now,
                    correlation_id: live.created.correlation_id.clone(),
                };
                self.push(self.topic(TopicRole::Results), &live.id.clone(), &finished)?;
            }
        }
        if let Phase::Scheduled = live.phase {
            self.removed_timers.push((
                live.partition,
                live.created.scheduled_at.unwrap_or(self.now),
                schedule_timer_id(&live.id),
            ));
        }
        live.phase = Phase::Finished(result);
        Ok(())
    }

    /// Finishes `live` with an execution error of `kind`.
    pub fn fail(
        &mut self,
        live: &mut Live,
        kind: ExecutionErrorKind,
        reason: String,
    ) -> Result<(), BatchError> {
        self.finish(
            live,
            ExecutionResult::ExecutionError(ExecutionError {
                kind,
                reason,
                detail: None,
            }),
        )
    }

    /// A record for any topic, outside an execution's changelog (DLQ, answers to strangers).
    pub fn raw(&mut self, record: OutgoingRecord) {
        self.records.push(record);
    }

    /// A response for `to`, through `weir.responses`.
    pub fn respond(&mut self, to: &ExecutionId, response: &Response) -> Result<(), BatchError> {
        self.push(self.topic(TopicRole::Responses), to, response)?;
        Ok(())
    }
}

/// The id that deduplicates a response: the child execution's or the delay's.
pub fn response_id(response: &Response) -> String {
    match response {
        Response::ChildExecutionFinished {
            child_execution_id, ..
        } => child_execution_id.to_string(),
        Response::DelayFinished { delay_id, .. } => delay_id.to_string(),
    }
}

/// Shared, immutable parts of a worker that batches need.
pub struct Shared {
    pub codec: Arc<Codec>,
    pub topology: Arc<Topology>,
}
