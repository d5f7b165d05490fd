//! Resetting an execution (`weir reset`; issue 35 item 2; the design: `docs/design/reset.md`):
//! the one rule of where an execution's history can be cut, and of what a new execution
//! started from it copies. The owner of the execution reset applies it (the processor's
//! `reset` rules) to the history it reads from the store; the clients (the CLI, the HTTP
//! API) apply it to the history they read, to refuse a point before sending a request.
//!
//! A cut at `to_seq` keeps the entries `1..=to_seq` after `Created`. It is allowed where the
//! execution **waits for nothing**: every child, activity, delay and wait for an event it
//! requested up to there is answered up to there. The new execution then needs nothing from
//! the old one's children, activities or timers: it replays the kept entries with their
//! answers and goes on from there, making its next requests itself. (A cut in the middle
//! of a request would leave the new execution waiting for an answer that goes to the old
//! one.) What else is refused: a cut at or past its `Finished` entry (nothing of a finished
//! run goes on), past a `CancelRequested` (the workflow was compensating), in the end of an
//! execution that passed its deadline (the waits its deadline cancelled, right before its
//! `Finished`: the workflow never saw them), a point outside the history.
//!
//! What is copied, in order, with every id of the old execution (its children, delays, waits
//! for events) moved to the new one ([`crate::model::ExecutionId::rebased`]): the workflow's
//! own entries, `Event`, `ResponseAppended` and `EventReceived`. An operator's entries
//! (`Paused`, `Resumed`, `Upgraded`, earlier `Reset`s) are not: the new execution runs the
//! newest build of its function, and is neither paused nor linked to other resets. Event
//! versions are positions among the events, and every event up to the cut is kept, so they
//! stay what they were.

use chrono::{DateTime, Utc};
use ulid::Ulid;

use crate::model::{
    DelayOutcome, EventOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent,
    JoinSetRequest, Response,
};
use crate::projection::{ExecutionView, ProjectionError};
use crate::records::{HistoryEntry, HistoryRecord};

/// Why a history cannot be cut where asked. Each names the execution and the point.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResetError {
    #[error(
        "{execution} is a child execution: its parent awaits it by its id, so it cannot be \
         reset; reset its top-level execution ({root}) instead"
    )]
    NotTopLevel {
        execution: ExecutionId,
        root: ExecutionId,
    },
    #[error("the new execution's id {new} must be a top-level id other than {execution}'s own")]
    BadNewId {
        execution: ExecutionId,
        new: ExecutionId,
    },
    #[error("reset point {to_seq} is outside the history of {execution}, whose last seq is {last}")]
    OutsideHistory {
        execution: ExecutionId,
        to_seq: u64,
        last: u64,
    },
    #[error(
        "reset point {to_seq} of {execution} is at or past its finish (seq {finished}); \
         the latest point a reset can keep is {latest}"
    )]
    AtOrPastFinish {
        execution: ExecutionId,
        to_seq: u64,
        finished: u64,
        latest: Clean,
    },
    #[error(
        "reset point {to_seq} of {execution} is in its end: from seq {from} its waits were \
         cancelled because it passed its deadline, not by the workflow; the latest point \
         before it is {latest}"
    )]
    InItsEnd {
        execution: ExecutionId,
        to_seq: u64,
        from: u64,
        latest: Clean,
    },
    #[error(
        "reset point {to_seq} of {execution} is past its cancellation (seq {cancelled}): it \
         was compensating; the latest point before it is {latest}"
    )]
    PastCancellation {
        execution: ExecutionId,
        to_seq: u64,
        cancelled: u64,
        latest: Clean,
    },
    #[error(
        "at seq {to_seq} {execution} waits for {open:?}: a reset point must be one where it \
         waits for nothing (its answers go to this execution, not to the new one); the \
         latest such point at or before {to_seq} is {latest}"
    )]
    Waits {
        execution: ExecutionId,
        to_seq: u64,
        open: Vec<String>,
        latest: Clean,
    },
    #[error("the history of {execution} read has no seq {missing} (it has {read} records)")]
    Incomplete {
        execution: ExecutionId,
        missing: u64,
        read: usize,
    },
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// The latest point a history can be cut at, before a point that cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clean(pub u64);

impl std::fmt::Display for Clean {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq {}", self.0)
    }
}

/// The entries that follow `Created` in the history of `new`, reset from `old`'s history
/// `records` (its seqs from 0, in order, with when each was recorded) at `to_seq`: see the
/// module docs. `records` may go on past `to_seq`.
pub fn cut(
    old: &ExecutionId,
    records: &[(HistoryRecord, DateTime<Utc>)],
    to_seq: u64,
    new: &ExecutionId,
) -> Result<Vec<HistoryEntry>, ResetError> {
    if !new.is_top_level() || new == old {
        return Err(ResetError::BadNewId {
            execution: old.clone(),
            new: new.clone(),
        });
    }
    walk(old, records, to_seq, &mut |_| {})?;
    let (from, to) = (old.root(), new.root());
    Ok(records[1..=to_seq as usize]
        .iter()
        .filter_map(|(record, _)| copied(&record.entry, from, to))
        .collect())
}

/// The seqs a history can be cut at (what [`cut`] allows), ascending, in one pass over it:
/// what the CLI lists and the UI offers.
pub fn points(old: &ExecutionId, records: &[(HistoryRecord, DateTime<Utc>)]) -> Vec<u64> {
    let mut points = Vec::new();
    let last = (records.len() as u64).saturating_sub(1);
    // Whatever stops the walk (its finish, its deadline's end, a wait at the last seq)
    // stops the points there: none lies past it.
    let _ = walk(old, records, last, &mut |seq| points.push(seq));
    points
}

/// The rule of the cut on `old`'s history up to `to_seq` (see the module docs): `Ok` if it
/// can be cut there; on the way, `clean` hears every seq up to `to_seq` it can be cut at.
fn walk(
    old: &ExecutionId,
    records: &[(HistoryRecord, DateTime<Utc>)],
    to_seq: u64,
    clean: &mut dyn FnMut(u64),
) -> Result<(), ResetError> {
    if !old.is_top_level() {
        return Err(ResetError::NotTopLevel {
            execution: old.clone(),
            root: ExecutionId::top_level(old.root()),
        });
    }
    let last = (records.len() as u64).saturating_sub(1);
    if records.is_empty() || to_seq > last {
        return Err(ResetError::OutsideHistory {
            execution: old.clone(),
            to_seq,
            last,
        });
    }
    for (i, (record, _)) in records.iter().enumerate() {
        if record.seq != i as u64 {
            return Err(ResetError::Incomplete {
                execution: old.clone(),
                missing: i as u64,
                read: records.len(),
            });
        }
    }
    let (first, at) = &records[0];
    let HistoryEntry::Created(created) = &first.entry else {
        return Err(ProjectionError::NoCreated {
            execution: old.clone(),
            kind: crate::projection::entry_kind(&first.entry),
        }
        .into());
    };
    let end = deadline_end(records);
    let (mut view, _) = ExecutionView::new(old.clone(), 0, created.clone(), *at);
    let mut latest = Clean(0);
    clean(0);
    let mut cancelled = None;
    for (record, at) in &records[1..=to_seq as usize] {
        if let Some(from) = end.filter(|from| record.seq >= *from) {
            return Err(ResetError::InItsEnd {
                execution: old.clone(),
                to_seq,
                from,
                latest,
            });
        }
        match &record.entry {
            HistoryEntry::Finished { .. } => {
                return Err(ResetError::AtOrPastFinish {
                    execution: old.clone(),
                    to_seq,
                    finished: record.seq,
                    latest,
                });
            }
            HistoryEntry::CancelRequested { .. } => cancelled = Some(record.seq),
            _ => {}
        }
        view.apply(record.seq, &record.entry, *at)?;
        if cancelled.is_none() && view.open_requests().is_empty() {
            latest = Clean(record.seq);
            clean(record.seq);
        }
    }
    if let Some(cancelled) = cancelled {
        return Err(ResetError::PastCancellation {
            execution: old.clone(),
            to_seq,
            cancelled,
            latest,
        });
    }
    let open = view.open_requests();
    if !open.is_empty() {
        return Err(ResetError::Waits {
            execution: old.clone(),
            to_seq,
            open,
            latest,
        });
    }
    Ok(())
}

/// Where the end of an execution that passed its deadline begins: the waits its deadline
/// cancelled (journalled in the step that finished it `timed-out`, right before `Finished`),
/// which the workflow never saw and a new execution must not (`None`: it did not end so).
/// (`Reset` entries may follow its `Finished`.)
fn deadline_end(records: &[(HistoryRecord, DateTime<Utc>)]) -> Option<u64> {
    let finished = records.iter().position(|(r, _)| {
        matches!(&r.entry, HistoryEntry::Finished {
            result: ExecutionResult::ExecutionError(error),
            ..
        } if error.kind == ExecutionErrorKind::TimedOut)
    })?;
    let cancellations = records[..finished]
        .iter()
        .rev()
        .take_while(|(r, _)| matches!(&r.entry, HistoryEntry::ResponseAppended(response) if is_cancellation(response)))
        .count();
    Some((finished - cancellations) as u64)
}

/// Whether `response` is a wait cancelled (a delay, a child, a wait for an event).
fn is_cancellation(response: &Response) -> bool {
    match response {
        Response::DelayFinished { outcome, .. } => *outcome == DelayOutcome::Cancelled,
        Response::ChildExecutionFinished {
            result: ExecutionResult::ExecutionError(e),
            ..
        } => e.kind == ExecutionErrorKind::Cancelled,
        Response::ChildExecutionFinished { .. } => false,
        Response::EventDelivered { outcome, .. } => *outcome == EventOutcome::Cancelled,
    }
}

/// `entry` as the new execution keeps it (`None`: not kept).
fn copied(entry: &HistoryEntry, from: Ulid, to: Ulid) -> Option<HistoryEntry> {
    match entry {
        HistoryEntry::Event { version, event } => Some(HistoryEntry::Event {
            version: *version,
            event: rebased_event(event, from, to),
        }),
        HistoryEntry::ResponseAppended(response) => Some(HistoryEntry::ResponseAppended(
            rebased_response(response, from, to),
        )),
        HistoryEntry::EventReceived(event) => Some(HistoryEntry::EventReceived(event.clone())),
        HistoryEntry::Created(_)
        | HistoryEntry::Finished { .. }
        | HistoryEntry::CancelRequested { .. }
        | HistoryEntry::Upgraded { .. }
        | HistoryEntry::Paused { .. }
        | HistoryEntry::Resumed { .. }
        | HistoryEntry::Reset { .. }
        // The new execution takes its own places in its slots.
        | HistoryEntry::SlotGranted { .. } => None,
    }
}

fn rebased_event(event: &HistoryEvent, from: Ulid, to: Ulid) -> HistoryEvent {
    match event {
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request,
        } => HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: match request {
                JoinSetRequest::ChildExecutionRequest {
                    child_execution_id,
                    target_ffqn,
                    params,
                    child_kind,
                } => JoinSetRequest::ChildExecutionRequest {
                    child_execution_id: child_execution_id.rebased(from, to),
                    target_ffqn: target_ffqn.clone(),
                    params: params.clone(),
                    child_kind: *child_kind,
                },
                JoinSetRequest::DelayRequest {
                    delay_id,
                    timeout,
                    expires_at,
                } => JoinSetRequest::DelayRequest {
                    delay_id: delay_id.rebased(from, to),
                    timeout: *timeout,
                    expires_at: *expires_at,
                },
                JoinSetRequest::EventRequest {
                    event_request_id,
                    name,
                } => JoinSetRequest::EventRequest {
                    event_request_id: event_request_id.rebased(from, to),
                    name: name.clone(),
                },
            },
        },
        HistoryEvent::Stub {
            target_execution_id,
            result,
            outcome,
        } => HistoryEvent::Stub {
            target_execution_id: target_execution_id.rebased(from, to),
            result: result.clone(),
            outcome: *outcome,
        },
        // No id of the execution in them (a scheduled execution is its own top-level one).
        HistoryEvent::JoinSetCreate { .. }
        | HistoryEvent::JoinNext { .. }
        | HistoryEvent::JoinNextTooMany { .. }
        | HistoryEvent::Persist { .. }
        | HistoryEvent::Schedule { .. }
        | HistoryEvent::Correlate { .. } => event.clone(),
    }
}

fn rebased_response(response: &Response, from: Ulid, to: Ulid) -> Response {
    match response {
        Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ran,
        } => Response::ChildExecutionFinished {
            child_execution_id: child_execution_id.rebased(from, to),
            result: result.clone(),
            ran: *ran,
        },
        Response::DelayFinished { delay_id, outcome } => Response::DelayFinished {
            delay_id: delay_id.rebased(from, to),
            outcome: *outcome,
        },
        Response::EventDelivered {
            event_request_id,
            outcome,
        } => Response::EventDelivered {
            event_request_id: event_request_id.rebased(from, to),
            outcome: outcome.clone(),
        },
    }
}
