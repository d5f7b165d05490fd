//! The one projection from an execution's changelog to its state and its store rows.
//!
//! Every path that learns about an execution goes through [`ExecutionView::apply`]: the
//! partition processor applies each entry it appends (the live path), catch-up applies the
//! entries it reads from `weir.history`, and rehydration folds the stored changelog
//! ([`rebuild`]). So the execution row, the timers to put or delete and the dedup set of
//! responses are decided by one set of rules, whichever path saw the entry:
//!
//! | entry | state | timers |
//! |---|---|---|
//! | `Created` with `scheduled_at` after `created_at` | scheduled | put the schedule timer |
//! | `Created` otherwise | running | |
//! | `Created` with a `deadline` | | put the deadline timer |
//! | an event, while scheduled | running | delete the schedule timer |
//! | event `JoinSetRequest(DelayRequest)` | | put the delay's timer |
//! | response `DelayFinished` | | delete the delay's timer |
//! | `Finished` | finished | delete the schedule and deadline timers and every delay still pending |
//!
//! Events sent to the execution: an `EventReceived` entry puts the event in the buffer and
//! its id in `events_seen`; an event request (`JoinSetRequest(EventRequest)`) opens a wait;
//! `ResponseAppended(EventDelivered)` closes the wait and takes its event out of the buffer.
//! [`ExecutionView::next_event_match`] pairs open waits with buffered events, the one rule
//! both the live path and rebuilds use.
//!
//! Seqs must be contiguous from 0: an entry at a seq already applied is ignored (catch-up may
//! read what the store already has), a gap is an error.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use indexmap::IndexSet;

use crate::concurrency::{Slot, SlotClaim};

use crate::model::{
    ChildKind, EventOutcome, EventRequestId, ExecutionId, ExecutionResult, Ffqn, HistoryEvent,
    JoinSetRequest, Response,
};
use crate::records::{Created, HistoryEntry, HistoryRecord, ReceivedEvent};
use crate::rows::{EntryKind, ExecutionRow, ExecutionState, TimerId, TimerKey, TimerRow};

/// The timer that rebuilds a running execution and starts its run (a start deferred, an
/// upgrade, a take-over that found batches the store lacked), due at `due_at`: one per
/// execution, a later put moves it. Not the projection's: the processor and the catch-up put
/// it.
pub fn retry_timer(partition: i32, execution_id: &ExecutionId, due_at: DateTime<Utc>) -> TimerRow {
    TimerId::Retry(execution_id.clone()).row(partition, execution_id, due_at)
}

/// The id that deduplicates a response: the child execution's, the delay's or the event
/// request's.
pub fn response_id(response: &Response) -> String {
    match response {
        Response::ChildExecutionFinished {
            child_execution_id, ..
        } => child_execution_id.to_string(),
        Response::DelayFinished { delay_id, .. } => delay_id.to_string(),
        Response::EventDelivered {
            event_request_id, ..
        } => event_request_id.to_string(),
    }
}

/// The kind of a changelog entry.
pub fn entry_kind(entry: &HistoryEntry) -> EntryKind {
    match entry {
        HistoryEntry::Created(_) => EntryKind::Created,
        HistoryEntry::Event { .. } => EntryKind::Event,
        HistoryEntry::ResponseAppended(_) => EntryKind::Response,
        HistoryEntry::Finished { .. } => EntryKind::Finished,
        HistoryEntry::Upgraded { .. } => EntryKind::Upgraded,
        HistoryEntry::EventReceived(_) => EntryKind::EventReceived,
        HistoryEntry::CancelRequested { .. } => EntryKind::CancelRequested,
        HistoryEntry::Paused { .. } => EntryKind::Paused,
        HistoryEntry::Resumed { .. } => EntryKind::Resumed,
        HistoryEntry::Reset { .. } => EntryKind::Reset,
        HistoryEntry::SlotGranted { .. } => EntryKind::SlotGranted,
    }
}

/// A change of the timer table that an entry implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerChange {
    Put(TimerRow),
    Delete(TimerKey),
}

impl TimerChange {
    /// Records the change in a job's timer writes.
    pub fn add_to(self, changes: &mut crate::rows::TimerChanges) {
        match self {
            TimerChange::Put(timer) => changes.put(timer),
            TimerChange::Delete(key) => changes.delete(key),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    #[error("execution {execution}: history version {seq} follows version {expected}: a gap")]
    Gap {
        execution: ExecutionId,
        seq: u64,
        expected: u64,
    },
    #[error("execution {execution}: the history does not start with Created (seq 0 is {kind})")]
    NoCreated {
        execution: ExecutionId,
        kind: EntryKind,
    },
    #[error("execution {execution}: a second Created at history version {seq}")]
    SecondCreated { execution: ExecutionId, seq: u64 },
    #[error("execution {execution}: an entry at history version {seq} after Finished")]
    AfterFinished { execution: ExecutionId, seq: u64 },
    #[error("execution {execution}: the history is empty")]
    Empty { execution: ExecutionId },
}

/// What the changelog says about one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionView {
    pub id: ExecutionId,
    /// The partition of the co-partitioned topics that owns it.
    pub partition: i32,
    pub created: Created,
    /// The build it runs on: `created.component`, or the last `Upgraded` entry's.
    pub component: Option<String>,
    /// The seq of the next changelog entry (the history version).
    pub next_seq: u64,
    pub state: ExecutionState,
    pub result: Option<ExecutionResult>,
    /// Ids (child execution or delay) of the responses journalled: duplicates are ignored.
    pub responses_seen: HashSet<String>,
    /// Delays requested and not answered: delay id → due time.
    pending_delays: BTreeMap<String, DateTime<Utc>>,
    /// Children requested and not answered: child id → the function it calls (what its
    /// answer is checked against) and what it is.
    pending_children: HashMap<String, (Ffqn, ChildKind)>,
    /// Why the execution was asked to stop, once it was (`CancelRequested`).
    pub cancel_requested: Option<String>,
    /// While it is paused (`state` is `Paused`): the state it goes back to when resumed,
    /// `Running` or `Scheduled` (one paused before its start time keeps waiting for it).
    resume_to: Option<ExecutionState>,
    /// Stub children requested: child id → the function of the request and the value
    /// written (`None` until one is). Kept after the finish, so a later write of another
    /// value is still a conflict, and one through another function is still not this stub.
    stub_children: HashMap<String, (Ffqn, Option<ExecutionResult>)>,
    /// Ids of the events that reached the execution (buffered or delivered): a second send
    /// of one is dropped.
    pub events_seen: HashSet<String>,
    /// Events received and not taken by a wait yet, in arrival order.
    buffered_events: Vec<ReceivedEvent>,
    /// Waits for events requested and not answered, in request order.
    pending_events: Vec<(EventRequestId, String)>,
    /// The correlation keys the execution registered (`Correlate`), in order, each once: its
    /// finish unregisters them.
    pub correlation_keys: IndexSet<String>,
    /// The executions started from this one's history (`Reset`), in order: a reset request
    /// naming one of them again changes nothing.
    pub resets: Vec<ExecutionId>,
    /// The concurrency slots of `created.slots` it holds (`SlotGranted`), in the order
    /// granted: it starts once it holds them all.
    pub slots_held: Vec<Slot>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl ExecutionView {
    /// The view after its first entry, `Created` (seq 0), recorded at `at`.
    pub fn new(
        id: ExecutionId,
        partition: i32,
        created: Created,
        at: DateTime<Utc>,
    ) -> (Self, Vec<TimerChange>) {
        let scheduled = created.scheduled_at.filter(|s| *s > created.created_at);
        let view = ExecutionView {
            id: id.clone(),
            partition,
            state: if scheduled.is_some() {
                ExecutionState::Scheduled
            } else if !created.slots.is_empty() {
                ExecutionState::Queued
            } else {
                ExecutionState::Running
            },
            component: created.component.clone(),
            created,
            next_seq: 1,
            result: None,
            responses_seen: HashSet::new(),
            pending_delays: BTreeMap::new(),
            pending_children: HashMap::new(),
            stub_children: HashMap::new(),
            cancel_requested: None,
            resume_to: None,
            events_seen: HashSet::new(),
            buffered_events: Vec::new(),
            pending_events: Vec::new(),
            correlation_keys: IndexSet::new(),
            resets: Vec::new(),
            slots_held: Vec::new(),
            updated_at: at,
            finished_at: None,
        };
        let mut timers = Vec::new();
        if let Some(due_at) = scheduled {
            timers.push(TimerChange::Put(view.schedule_timer(due_at)));
        }
        if let Some(timer) = view.deadline_timer() {
            timers.push(TimerChange::Put(timer));
        }
        (view, timers)
    }

    fn deadline_timer(&self) -> Option<TimerRow> {
        let due_at = self.created.deadline?;
        Some(TimerId::Deadline(self.id.clone()).row(self.partition, &self.id, due_at))
    }

    fn schedule_timer(&self, due_at: DateTime<Utc>) -> TimerRow {
        TimerId::Schedule(self.id.clone()).row(self.partition, &self.id, due_at)
    }

    fn schedule_timer_key(&self) -> Option<TimerKey> {
        let due_at = self.created.scheduled_at?;
        Some(self.schedule_timer(due_at).key())
    }

    /// Applies the entry at `seq`, recorded at `at`; returns the timer changes it implies.
    /// An entry already applied (`seq < next_seq`) changes nothing.
    pub fn apply(
        &mut self,
        seq: u64,
        entry: &HistoryEntry,
        at: DateTime<Utc>,
    ) -> Result<Vec<TimerChange>, ProjectionError> {
        if seq < self.next_seq {
            return Ok(Vec::new());
        }
        if seq > self.next_seq {
            return Err(ProjectionError::Gap {
                execution: self.id.clone(),
                seq,
                expected: self.next_seq,
            });
        }
        // A finished execution's history takes one kind of entry more: the link to an
        // execution reset from it (`weir reset` of a run that went wrong).
        if self.state == ExecutionState::Finished && !matches!(entry, HistoryEntry::Reset { .. }) {
            return Err(ProjectionError::AfterFinished {
                execution: self.id.clone(),
                seq,
            });
        }
        let mut timers = Vec::new();
        match entry {
            HistoryEntry::Created(_) => {
                return Err(ProjectionError::SecondCreated {
                    execution: self.id.clone(),
                    seq,
                });
            }
            HistoryEntry::Event { event, .. } => {
                if self.state == ExecutionState::Scheduled {
                    self.state = ExecutionState::Running;
                    timers.extend(self.schedule_timer_key().map(TimerChange::Delete));
                }
                if let HistoryEvent::JoinSetRequest {
                    request:
                        JoinSetRequest::ChildExecutionRequest {
                            child_execution_id,
                            target_ffqn,
                            child_kind,
                            ..
                        },
                    ..
                } = event
                {
                    self.pending_children.insert(
                        child_execution_id.to_string(),
                        (target_ffqn.clone(), *child_kind),
                    );
                    if *child_kind == ChildKind::Stub {
                        self.stub_children
                            .insert(child_execution_id.to_string(), (target_ffqn.clone(), None));
                    }
                }
                if let HistoryEvent::Correlate { key } = event {
                    self.correlation_keys.insert(key.clone());
                }
                if let HistoryEvent::JoinSetRequest {
                    request:
                        JoinSetRequest::EventRequest {
                            event_request_id,
                            name,
                        },
                    ..
                } = event
                {
                    self.pending_events
                        .push((event_request_id.clone(), name.clone()));
                }
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
                    self.pending_delays
                        .insert(delay_id.to_string(), *expires_at);
                    let timer = TimerId::Delay(delay_id.clone());
                    let row = timer.row(self.partition, &self.id, *expires_at);
                    timers.push(TimerChange::Put(row));
                }
            }
            HistoryEntry::ResponseAppended(response) => {
                let id = response_id(response);
                if let Response::DelayFinished { .. } = response
                    && let Some(due_at) = self.pending_delays.remove(&id)
                {
                    timers.push(TimerChange::Delete(TimerKey {
                        kafka_partition: self.partition,
                        due_at,
                        timer_id: id.clone(),
                    }));
                }
                if let Response::EventDelivered {
                    event_request_id,
                    outcome,
                } = response
                {
                    self.pending_events.retain(|(r, _)| r != event_request_id);
                    if let EventOutcome::Received { event_id, .. } = outcome {
                        self.buffered_events.retain(|e| e.event_id != *event_id);
                        self.events_seen.insert(event_id.clone());
                    }
                }
                if let Response::ChildExecutionFinished { result, .. } = response
                    && let Some((_, written @ None)) = self.stub_children.get_mut(&id)
                {
                    *written = Some(result.clone());
                }
                self.pending_children.remove(&id);
                self.responses_seen.insert(id);
            }
            HistoryEntry::CancelRequested { reason } => {
                self.cancel_requested = Some(reason.clone());
            }
            HistoryEntry::Paused { .. } => {
                if self.state != ExecutionState::Paused {
                    self.resume_to = Some(self.state);
                    self.state = ExecutionState::Paused;
                }
            }
            HistoryEntry::Resumed { .. } => {
                if let Some(to) = self.resume_to.take() {
                    self.state = to;
                }
                // Its schedule timer may have fired while it was paused (and started
                // nothing): put again, due now if its time has passed. The same key if not.
                if self.state == ExecutionState::Scheduled
                    && let Some(scheduled_at) = self.created.scheduled_at
                {
                    timers.push(TimerChange::Put(self.schedule_timer(scheduled_at.max(at))));
                }
            }
            HistoryEntry::Reset {
                new_execution_id, ..
            } => self.resets.push(new_execution_id.clone()),
            HistoryEntry::SlotGranted { slot } => {
                if !self.slots_held.contains(slot) {
                    self.slots_held.push(slot.clone());
                }
                // Holding them all, it is let go: a queued one runs (its owner starts it in
                // the batch of the last grant), a paused one will when resumed.
                if self.next_slot().is_none() {
                    if self.state == ExecutionState::Queued {
                        self.state = ExecutionState::Running;
                    }
                    if self.resume_to == Some(ExecutionState::Queued) {
                        self.resume_to = Some(ExecutionState::Running);
                    }
                }
            }
            HistoryEntry::EventReceived(event) => {
                self.events_seen.insert(event.event_id.clone());
                self.buffered_events.push(event.clone());
            }
            HistoryEntry::Finished {
                result,
                finished_at,
            } => {
                if self.waits_for_its_start() {
                    timers.extend(self.schedule_timer_key().map(TimerChange::Delete));
                }
                self.resume_to = None;
                timers.extend(self.deadline_timer().map(|t| TimerChange::Delete(t.key())));
                self.pending_children.clear();
                self.pending_events.clear();
                self.buffered_events.clear();
                for (timer_id, due_at) in std::mem::take(&mut self.pending_delays) {
                    timers.push(TimerChange::Delete(TimerKey {
                        kafka_partition: self.partition,
                        due_at,
                        timer_id,
                    }));
                }
                self.state = ExecutionState::Finished;
                self.result = Some(result.clone());
                self.finished_at = Some(*finished_at);
            }
            HistoryEntry::Upgraded { to, .. } => self.component = Some(to.clone()),
        }
        self.next_seq += 1;
        self.updated_at = at;
        Ok(timers)
    }

    /// Whether it has not started yet: scheduled or queued for its slots, or paused before
    /// its start.
    pub fn waits_for_its_start(&self) -> bool {
        let not_started =
            |s: ExecutionState| matches!(s, ExecutionState::Scheduled | ExecutionState::Queued);
        not_started(self.state) || self.resume_to.is_some_and(not_started)
    }

    /// The first slot of `created.slots` it does not hold yet, with its limit (`None`: it
    /// holds them all, or needs none).
    pub fn next_slot(&self) -> Option<&SlotClaim> {
        self.created
            .slots
            .iter()
            .find(|claim| !self.slots_held.contains(&claim.slot))
    }

    /// The requests it made and has no answer for: children and activities, delays, waits
    /// for events (their ids, sorted).
    pub fn open_requests(&self) -> Vec<String> {
        let mut open: Vec<String> = self
            .pending_children
            .keys()
            .chain(self.pending_delays.keys())
            .cloned()
            .chain(self.pending_events.iter().map(|(id, _)| id.to_string()))
            .collect();
        open.sort();
        open
    }

    /// The state a paused execution goes back to when resumed (`None`: not paused).
    pub fn resumes_to(&self) -> Option<ExecutionState> {
        self.resume_to
    }

    /// The execution's row in the store.
    pub fn row(&self) -> ExecutionRow {
        ExecutionRow {
            execution_id: self.id.clone(),
            ffqn: self.created.ffqn.to_string(),
            parent_id: self.created.parent.as_ref().map(|p| p.execution_id.clone()),
            params: self.created.params.to_string(),
            state: self.state,
            result: self
                .result
                .as_ref()
                .map(|r| serde_json::to_string(r).unwrap_or_default()),
            history_version: self.next_seq as i64,
            kafka_partition: self.partition,
            created_at: self.created.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        }
    }

    /// The function a child requested and not answered yet calls.
    pub fn pending_child(&self, child: &ExecutionId) -> Option<&Ffqn> {
        self.pending_children
            .get(&child.to_string())
            .map(|(f, _)| f)
    }

    /// Whether `response` answers a request the history holds and no response answered yet:
    /// a child's, a delay's or an event wait's. What an execution with no run in memory
    /// checks an answer against (a run checks it against the requests it made).
    pub fn awaits(&self, response: &Response) -> bool {
        match response {
            Response::ChildExecutionFinished {
                child_execution_id, ..
            } => self.pending_child(child_execution_id).is_some(),
            Response::DelayFinished { delay_id, .. } => {
                self.pending_delays.contains_key(&delay_id.to_string())
            }
            Response::EventDelivered {
                event_request_id, ..
            } => self
                .pending_events
                .iter()
                .any(|(request, _)| request == event_request_id),
        }
    }

    /// What a child requested and not answered is.
    pub fn pending_child_kind(&self, child: &ExecutionId) -> Option<ChildKind> {
        self.pending_children
            .get(&child.to_string())
            .map(|(_, kind)| *kind)
    }

    /// Everything the execution waits for, sorted by id: children (id, function, kind),
    /// delays and event waits. What a cancellation cancels.
    pub fn waiting_for(&self) -> Waits {
        let mut children: Vec<(ExecutionId, Ffqn, ChildKind)> = self
            .pending_children
            .iter()
            .filter_map(|(id, (ffqn, kind))| Some((id.parse().ok()?, ffqn.clone(), *kind)))
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        let delays = self
            .pending_delays
            .keys()
            .filter_map(|id| id.parse().ok())
            .collect();
        let mut events: Vec<EventRequestId> =
            self.pending_events.iter().map(|(r, _)| r.clone()).collect();
        events.sort();
        Waits {
            children,
            delays,
            events,
        }
    }

    /// Whether `child` is a stub child of this execution, and the value written for it if
    /// any: `None` for no stub child, `Some(None)` for one not written yet.
    pub fn stub_child(&self, child: &ExecutionId) -> Option<Option<&ExecutionResult>> {
        self.stub_children
            .get(&child.to_string())
            .map(|(_, written)| written.as_ref())
    }

    /// The function stub child `child` was requested as (`None`: no such stub child).
    pub fn stub_function(&self, child: &ExecutionId) -> Option<&Ffqn> {
        self.stub_children
            .get(&child.to_string())
            .map(|(ffqn, _)| ffqn)
    }

    /// Stub children and the values written for them.
    pub fn stub_children(&self) -> impl Iterator<Item = (&str, Option<&ExecutionResult>)> {
        self.stub_children
            .iter()
            .map(|(id, (_, written))| (id.as_str(), written.as_ref()))
    }

    /// The next event to deliver: the oldest open wait whose name has a buffered event,
    /// with the oldest such event. `None` when no open wait has an event.
    pub fn next_event_match(&self) -> Option<(&EventRequestId, &ReceivedEvent)> {
        self.pending_events.iter().find_map(|(request, name)| {
            self.buffered_events
                .iter()
                .find(|e| e.name == *name)
                .map(|e| (request, e))
        })
    }

    /// The oldest open wait for an event named `name`.
    pub fn open_event_request(&self, name: &str) -> Option<&EventRequestId> {
        self.pending_events
            .iter()
            .find(|(_, n)| n == name)
            .map(|(r, _)| r)
    }

    /// Events received and not taken by a wait yet, in arrival order.
    pub fn buffered_events(&self) -> &[ReceivedEvent] {
        &self.buffered_events
    }

    /// Delays requested and not yet answered, by id, with their due times.
    pub fn pending_delays(&self) -> impl Iterator<Item = (&str, DateTime<Utc>)> {
        self.pending_delays
            .iter()
            .map(|(id, at)| (id.as_str(), *at))
    }
}

/// What an execution waits for ([`ExecutionView::waiting_for`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Waits {
    pub children: Vec<(ExecutionId, Ffqn, ChildKind)>,
    pub delays: Vec<crate::model::DelayId>,
    pub events: Vec<EventRequestId>,
}

/// An execution rebuilt from its whole changelog: its view, and what a replay needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Rebuilt {
    pub view: ExecutionView,
    /// The recorded history events, in order.
    pub events: Vec<HistoryEvent>,
    /// The journalled responses, in arrival order.
    pub responses: Vec<Response>,
}

/// Folds a whole changelog (seq order, starting at `Created`) into a view. `at` is when each
/// entry was recorded, as far as the caller knows (the store's `recorded_at`).
pub fn rebuild(
    id: &ExecutionId,
    partition: i32,
    records: impl IntoIterator<Item = (HistoryRecord, DateTime<Utc>)>,
) -> Result<Rebuilt, ProjectionError> {
    let mut records = records.into_iter();
    let Some((first, at)) = records.next() else {
        return Err(ProjectionError::Empty {
            execution: id.clone(),
        });
    };
    let HistoryEntry::Created(created) = first.entry else {
        return Err(ProjectionError::NoCreated {
            execution: id.clone(),
            kind: entry_kind(&first.entry),
        });
    };
    if first.seq != 0 {
        return Err(ProjectionError::Gap {
            execution: id.clone(),
            seq: first.seq,
            expected: 0,
        });
    }
    let (mut view, _) = ExecutionView::new(id.clone(), partition, created, at);
    let mut events = Vec::new();
    let mut responses = Vec::new();
    for (record, at) in records {
        if record.seq < view.next_seq {
            continue; // read twice
        }
        view.apply(record.seq, &record.entry, at)?;
        match record.entry {
            HistoryEntry::Event { event, .. } => events.push(event),
            HistoryEntry::ResponseAppended(response) => responses.push(response),
            HistoryEntry::Created(_)
            | HistoryEntry::Finished { .. }
            | HistoryEntry::Upgraded { .. }
            | HistoryEntry::EventReceived(_)
            | HistoryEntry::CancelRequested { .. }
            | HistoryEntry::Paused { .. }
            | HistoryEntry::Resumed { .. }
            | HistoryEntry::Reset { .. }
            | HistoryEntry::SlotGranted { .. } => {}
        }
    }
    Ok(Rebuilt {
        view,
        events,
        responses,
    })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use chrono::{Duration, TimeZone};
    use serde_json::json;

    use super::*;
    use crate::model::{DelayId, DelayOutcome, Ffqn, JoinSetId, ScheduleAt, Version};
    use crate::rows::TimerKind;

    const ID: &str = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";

    fn t0() -> DateTime<Utc> {
        Utc.timestamp_opt(1_790_000_000, 0).single().expect("valid")
    }

    fn created(scheduled_at: Option<DateTime<Utc>>) -> Created {
        Created {
            ffqn: Ffqn::from_str("ns:pkg/ifc.f").expect("ffqn"),
            params: json!([]),
            parent: None,
            scheduled_at,
            correlation_id: None,
            metadata: Default::default(),
            created_at: t0(),
            component: None,
            deadline: None,
            submitted_at: None,
            reset_of: None,
            slots: Vec::new(),
        }
    }

    fn id() -> ExecutionId {
        ExecutionId::from_str(ID).expect("id")
    }

    fn delay() -> DelayId {
        DelayId::from_str("Delay_01ARZ3NDEKTSV4RRFFQ69G5FAV.o:1-sleep_1").expect("delay id")
    }

    fn delay_request(version: u64) -> HistoryEntry {
        HistoryEntry::Event {
            version: Version(version),
            event: HistoryEvent::JoinSetRequest {
                join_set_id: JoinSetId::from_str("o:1-sleep").expect("join set"),
                request: JoinSetRequest::DelayRequest {
                    delay_id: delay(),
                    timeout: ScheduleAt::In(std::time::Duration::from_secs(90)),
                    expires_at: t0() + Duration::seconds(90),
                },
            },
        }
    }

    fn finished() -> HistoryEntry {
        HistoryEntry::Finished {
            result: ExecutionResult::Ok(json!(1)),
            finished_at: t0(),
        }
    }

    fn delay_key() -> TimerKey {
        TimerKey {
            kafka_partition: 3,
            due_at: t0() + Duration::seconds(90),
            timer_id: delay().to_string(),
        }
    }

    /// Each row: the entries after `Created` (not scheduled), the state after them, and the
    /// timer changes of the last one.
    #[test]
    fn entries_decide_state_and_timers() {
        let answered = HistoryEntry::ResponseAppended(Response::DelayFinished {
            delay_id: delay(),
            outcome: DelayOutcome::Ok,
        });
        let put = TimerChange::Put(TimerRow {
            kafka_partition: 3,
            due_at: t0() + Duration::seconds(90),
            timer_id: delay().to_string(),
            execution_id: id(),
            kind: TimerKind::Delay,
        });
        let table: Vec<(Vec<HistoryEntry>, ExecutionState, Vec<TimerChange>)> = vec![
            (vec![delay_request(0)], ExecutionState::Running, vec![put]),
            (
                vec![delay_request(0), answered.clone()],
                ExecutionState::Running,
                vec![TimerChange::Delete(delay_key())],
            ),
            // A delay still pending when the execution finishes is deleted with it.
            (
                vec![delay_request(0), finished()],
                ExecutionState::Finished,
                vec![TimerChange::Delete(delay_key())],
            ),
            // Answered, then finished: nothing left to delete.
            (
                vec![delay_request(0), answered, finished()],
                ExecutionState::Finished,
                vec![],
            ),
        ];
        for (entries, state, last_changes) in table {
            let (mut view, timers) = ExecutionView::new(id(), 3, created(None), t0());
            assert!(timers.is_empty());
            let mut changes = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                changes = view.apply(i as u64 + 1, entry, t0()).expect("applies");
            }
            assert_eq!(view.state, state, "after {entries:?}");
            assert_eq!(changes, last_changes, "after {entries:?}");
            assert_eq!(view.next_seq, entries.len() as u64 + 1);
            assert_eq!(view.row().history_version, entries.len() as i64 + 1);
        }
    }

    #[test]
    fn a_scheduled_execution_runs_at_its_first_event_and_its_timer_goes() {
        let at = t0() + Duration::minutes(5);
        let (mut view, timers) = ExecutionView::new(id(), 3, created(Some(at)), t0());
        assert_eq!(view.state, ExecutionState::Scheduled);
        let key = TimerKey {
            kafka_partition: 3,
            due_at: at,
            timer_id: TimerId::Schedule(id()).to_string(),
        };
        assert!(
            matches!(&timers[..], [TimerChange::Put(t)] if t.key() == key && t.kind == TimerKind::Schedule)
        );
        let changes = view.apply(1, &delay_request(0), t0()).expect("applies");
        assert_eq!(view.state, ExecutionState::Running);
        assert_eq!(changes[0], TimerChange::Delete(key));
    }

    #[test]
    fn a_deadline_puts_its_timer_and_the_finish_deletes_it() {
        let deadline = t0() + Duration::seconds(30);
        let created = Created {
            deadline: Some(deadline),
            ..created(None)
        };
        let (mut view, timers) = ExecutionView::new(id(), 3, created, t0());
        let key = TimerKey {
            kafka_partition: 3,
            due_at: deadline,
            timer_id: TimerId::Deadline(id()).to_string(),
        };
        assert!(
            matches!(&timers[..], [TimerChange::Put(t)] if t.key() == key && t.kind == TimerKind::Deadline),
            "{timers:?}"
        );
        // Running on does not touch it; the finish deletes it with the delay still pending.
        assert_eq!(
            view.apply(1, &delay_request(0), t0())
                .expect("applies")
                .len(),
            1
        );
        let changes = view.apply(2, &finished(), t0()).expect("applies");
        assert!(changes.contains(&TimerChange::Delete(key)), "{changes:?}");
        assert!(
            changes.contains(&TimerChange::Delete(delay_key())),
            "{changes:?}"
        );
    }

    #[test]
    fn seqs_must_be_contiguous_and_repeats_are_ignored() {
        let (mut view, _) = ExecutionView::new(id(), 3, created(None), t0());
        assert_eq!(
            view.apply(0, &HistoryEntry::Created(created(None)), t0()),
            Ok(vec![])
        );
        assert!(matches!(
            view.apply(2, &delay_request(0), t0()),
            Err(ProjectionError::Gap {
                seq: 2,
                expected: 1,
                ..
            })
        ));
        view.apply(1, &finished(), t0()).expect("applies");
        assert!(matches!(
            view.apply(2, &delay_request(1), t0()),
            Err(ProjectionError::AfterFinished { seq: 2, .. })
        ));
    }

    #[test]
    fn rebuild_equals_applying_and_skips_records_read_twice() {
        let record = |seq, entry| {
            (
                HistoryRecord {
                    execution_id: id(),
                    seq,
                    entry,
                    at: Some(t0()),
                },
                t0(),
            )
        };
        let records = vec![
            record(0, HistoryEntry::Created(created(None))),
            record(1, delay_request(0)),
            record(1, delay_request(0)),
            record(2, finished()),
        ];
        let rebuilt = rebuild(&id(), 3, records).expect("rebuilds");
        assert_eq!(rebuilt.events.len(), 1);
        assert_eq!(rebuilt.view.state, ExecutionState::Finished);
        assert_eq!(rebuilt.view.next_seq, 3);
        assert!(rebuilt.view.pending_delays().next().is_none());
        assert!(matches!(
            rebuild(&id(), 3, vec![record(0, finished())]),
            Err(ProjectionError::NoCreated { .. })
        ));
    }
}
