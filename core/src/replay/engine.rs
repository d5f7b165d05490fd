//! The engine's state, construction, response delivery, effects and the replay cursor.
//! Host calls are in `calls.rs` (non-blocking), `blocking.rs` and `closing.rs`.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{
    ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn, HistoryEvent,
    JoinSetId, JoinSetRequest, Response, Version,
};

use super::error::{DeliveryError, Expected, Mismatch, Nondeterminism, ReplayError, UsageError};
use super::join_sets::JoinSets;
use super::outcome::{Blocked, Delivery, Effects, Joined, Output, Progress, VersionedEvent};

/// The execution being run: what the workflow was invoked with.
#[derive(Clone, Debug, PartialEq)]
pub struct Execution {
    pub id: ExecutionId,
    pub ffqn: Ffqn,
    /// A JSON array, one element per WIT parameter.
    pub params: Value,
    /// When it was created ([`Created::created_at`](crate::records::Created)): where the
    /// clock a guest reads starts ([`Replay::recorded_time`]).
    pub created_at: DateTime<Utc>,
    /// The component build it is pinned to ([`Created::component`](crate::records::Created)).
    pub component: Option<String>,
    /// The trace its runs' spans belong to ([`crate::trace`]); `None` where no span is
    /// exported (replay checks, the simulation).
    pub trace: Option<crate::trace::TraceParent>,
}

/// A call the run is blocked in, kept so that its retry resumes it instead of starting anew.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum PendingCall {
    JoinNext {
        join_set_id: JoinSetId,
        requested: Option<Ffqn>,
    },
    Call {
        ffqn: Ffqn,
        params: Value,
    },
    Sleep {
        timeout: crate::model::ScheduleAt,
    },
    AwaitEvent {
        name: String,
    },
    Close {
        join_set_id: JoinSetId,
    },
    Finish {
        result: ExecutionResult,
    },
}

pub(super) struct Pending {
    pub call: PendingCall,
    /// The join set whose next response the call waits for.
    pub slot: usize,
}

/// The deterministic history engine for one execution. See the [module docs](super).
pub struct Replay {
    pub(super) execution: Execution,
    /// Seed of fresh draws; see `rng.rs`.
    pub(super) seed: u64,
    pub(super) now: DateTime<Utc>,
    /// Recorded events followed by the new ones.
    pub(super) history: Vec<HistoryEvent>,
    /// Events before the cursor are processed. `cursor == history.len()`: running fresh.
    pub(super) cursor: usize,
    /// New events before this index have been handed out by `take_new_events`.
    taken: usize,
    pub(super) outputs: Vec<Output>,
    pub(super) join_sets: JoinSets,
    /// Join sets created so far; names generated and one-off join sets.
    pub(super) join_set_counter: u64,
    pub(super) pending: Option<Pending>,
    pub(super) finished: Option<ExecutionResult>,
    /// The guest's entropy stream of the current step (`guest.rs`).
    pub(super) entropy: Option<super::rng::StepEntropy>,
}

impl Replay {
    /// An engine for `execution` that will replay `history` (empty for a new execution) with
    /// `responses` in their arrival order, then continue fresh. `now` is the clock for fresh
    /// delays and schedules (see [`Replay::set_now`]).
    ///
    /// Fails on a response that is not for this execution; duplicates are ignored.
    pub fn new(
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: impl IntoIterator<Item = Response>,
        now: DateTime<Utc>,
    ) -> Result<Self, DeliveryError> {
        let seed = execution.id.stable_hash();
        let recorded = history.len();
        let mut replay = Replay {
            execution,
            seed,
            now,
            history,
            cursor: 0,
            taken: recorded,
            outputs: Vec::new(),
            join_sets: JoinSets::default(),
            join_set_counter: 0,
            pending: None,
            finished: None,
            entropy: None,
        };
        let responses = responses.into_iter();
        replay.join_sets.reserve(responses.size_hint().0);
        for response in responses {
            if !response.is_for(&replay.execution.id) {
                return Err(DeliveryError::NotForThisExecution(Box::new(response)));
            }
            replay.join_sets.enqueue_journal(response);
        }
        Ok(replay)
    }

    pub fn execution(&self) -> &Execution {
        &self.execution
    }

    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution.id
    }

    /// The whole history: recorded events followed by the events of this run.
    pub fn history(&self) -> &[HistoryEvent] {
        &self.history
    }

    /// The version the next host call is compared with (replay) or recorded at (fresh).
    pub fn version(&self) -> Version {
        Version(self.cursor as u64)
    }

    /// Whether recorded events remain to be replayed (a host may silence workflow logs then).
    pub fn is_replaying(&self) -> bool {
        self.cursor < self.history.len()
    }

    /// The join set the run is blocked on, if it is blocked.
    pub fn blocked_on(&self) -> Option<&JoinSetId> {
        self.pending
            .as_ref()
            .map(|p| &self.join_sets.get(p.slot).id)
    }

    /// The result, once the execution has finished (including by nondeterminism).
    pub fn finished(&self) -> Option<&ExecutionResult> {
        self.finished.as_ref()
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// Sets the clock used by fresh calls: a delay's expiry and a schedule's time are resolved
    /// against it. Replayed calls return recorded times and never read it.
    pub fn set_now(&mut self, now: DateTime<Utc>) {
        self.now = now;
    }

    /// Queues a response for its join set, in arrival order. Call it for every response
    /// consumed from Kafka, whether the run is blocked or not; when the result says `wakes`,
    /// retry the blocked call. (Responses given to [`Replay::new`] are sorted in lazily; the
    /// first delivery sorts them all in, to keep the arrival order.)
    pub fn deliver_response(&mut self, response: Response) -> Result<Delivery, DeliveryError> {
        if !response.is_for(&self.execution.id) {
            return Err(DeliveryError::NotForThisExecution(Box::new(response)));
        }
        let caught_up = self.is_fresh();
        let (new, slot) = self.join_sets.deliver(response, caught_up)?;
        if !new {
            return Ok(Delivery::Duplicate);
        }
        let wakes = self.pending.as_ref().is_some_and(|p| Some(p.slot) == slot);
        Ok(Delivery::Accepted { wakes })
    }

    /// The events recorded fresh since the last take, with their versions.
    pub fn take_new_events(&mut self) -> Vec<VersionedEvent> {
        let start = self.taken;
        self.taken = self.history.len();
        self.history[start..]
            .iter()
            .enumerate()
            .map(|(i, event)| VersionedEvent {
                version: Version((start + i) as u64),
                event: event.clone(),
            })
            .collect()
    }

    /// The outputs produced since the last take, in the order they were produced.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    /// New events and outputs together: what one transaction commits.
    pub fn take_effects(&mut self) -> Effects {
        Effects {
            events: self.take_new_events(),
            outputs: self.take_outputs(),
        }
    }

    // ---- the cursor ----

    pub(super) fn is_fresh(&self) -> bool {
        self.cursor == self.history.len()
    }

    /// Replaying: compares the call with the recorded event at the cursor and moves past it,
    /// returning its index. Fresh: `None`, and the caller appends the new event. On a mismatch
    /// the execution finishes with nondeterminism-detected. `expected` builds the event the
    /// call would record, only for the error.
    pub(super) fn replay_step(
        &mut self,
        check: impl FnOnce(&HistoryEvent) -> Result<(), Mismatch>,
        expected: impl FnOnce(&Self) -> HistoryEvent,
    ) -> Result<Option<usize>, ReplayError> {
        let Some(recorded) = self.history.get(self.cursor) else {
            return Ok(None);
        };
        if let Err(mismatch) = check(recorded) {
            let expected = Expected::Event(expected(self));
            return Err(self.nondeterminism(mismatch, expected));
        }
        self.cursor += 1;
        Ok(Some(self.cursor - 1))
    }

    pub(super) fn append(&mut self, event: HistoryEvent) {
        debug_assert!(self.is_fresh());
        self.history.push(event);
        self.cursor += 1;
    }

    /// Fails the call unless the engine can take a new call: not finished, not blocked.
    pub(super) fn ensure_idle(&self, call: &str) -> Result<(), ReplayError> {
        self.resume_pending(|_| false, || call.to_string())
            .map(|_| ())
    }

    /// `Some(slot)` if the run is blocked in a call `same` recognises (a retry), `None` if not
    /// blocked; an error if finished or blocked in another call.
    pub(super) fn resume_pending(
        &self,
        same: impl FnOnce(&PendingCall) -> bool,
        call: impl FnOnce() -> String,
    ) -> Result<Option<usize>, ReplayError> {
        if self.finished.is_some() {
            return Err(UsageError::Finished.into());
        }
        match &self.pending {
            None => Ok(None),
            Some(p) if same(&p.call) => Ok(Some(p.slot)),
            Some(p) => Err(UsageError::RetryMismatch {
                blocked: format!("{:?}", p.call),
                call: call(),
            }
            .into()),
        }
    }

    /// Takes the next response of join set `slot`, whose join-next event has just been
    /// processed, or blocks on it.
    pub(super) fn consume_or_block(
        &mut self,
        slot: usize,
        pending: impl FnOnce() -> PendingCall,
    ) -> Result<Progress<Joined>, ReplayError> {
        let join_next_version = Version(self.cursor as u64 - 1);
        match self.join_sets.consume_next(slot) {
            Some(Ok(joined)) => {
                self.pending = None;
                Ok(Progress::Ready(joined))
            }
            Some(Err(response)) => Err(ReplayError::ResponseWithoutRequest {
                version: join_next_version,
                response: Box::new(response),
            }),
            None => {
                let join_set_id = self.join_sets.get(slot).id.clone();
                if self.is_replaying() {
                    return Err(ReplayError::MissingResponse {
                        version: join_next_version,
                        join_set_id,
                    });
                }
                if self.pending.is_none() {
                    self.pending = Some(Pending {
                        call: pending(),
                        slot,
                    });
                }
                Ok(Progress::Blocked(Blocked { join_set_id }))
            }
        }
    }

    // ---- termination ----

    /// Finishes the execution with nondeterminism-detected and returns the error naming the
    /// recorded event at the cursor.
    pub(super) fn nondeterminism(&mut self, mismatch: Mismatch, expected: Expected) -> ReplayError {
        let n = Nondeterminism {
            version: self.version(),
            mismatch,
            expected,
            recorded: self.history[self.cursor].clone(),
        };
        let error = ExecutionError::new(ExecutionErrorKind::NondeterminismDetected, n.to_string());
        self.terminate(ExecutionResult::ExecutionError(error));
        ReplayError::Nondeterminism(Box::new(n))
    }

    /// Ends the execution abnormally: no join set is awaited, every activity and delay
    /// without a response, recorded anywhere in the history, is cancelled.
    pub(super) fn terminate(&mut self, result: ExecutionResult) {
        self.pending = None;
        self.join_sets.flush();
        let id = &self.execution.id;
        for event in &self.history {
            let HistoryEvent::JoinSetRequest {
                join_set_id,
                request,
            } = event
            else {
                continue;
            };
            let state = self.join_sets.find(join_set_id);
            if state.is_some_and(|s| s.closing) {
                continue; // cancelled when closing started
            }
            let (step_index, output) = match request {
                JoinSetRequest::ChildExecutionRequest {
                    child_execution_id,
                    child_kind,
                    target_ffqn,
                    ..
                } if *child_kind != crate::model::ChildKind::Workflow => (
                    child_execution_id.step().map_or(0, |s| s.index),
                    Output::CancelChild {
                        child_execution_id: child_execution_id.clone(),
                        ffqn: target_ffqn.clone(),
                        kind: *child_kind,
                    },
                ),
                JoinSetRequest::DelayRequest { delay_id, .. } => (
                    delay_id.index(),
                    Output::CancelDelay {
                        delay_id: delay_id.clone(),
                    },
                ),
                _ => continue,
            };
            // A consumed response has arrived too.
            let answered = state.is_some_and(|s| s.has_arrived(step_index));
            if !answered && is_own(id, &output) {
                self.outputs.push(output);
            }
        }
        self.outputs.push(Output::Finished {
            result: result.clone(),
        });
        self.finished = Some(result);
    }
}

/// Recorded requests name this execution's own children; a corrupted history must not make
/// the engine cancel someone else's.
fn is_own(id: &ExecutionId, output: &Output) -> bool {
    match output {
        Output::CancelChild {
            child_execution_id, ..
        } => child_execution_id.is_child_of(id),
        Output::CancelDelay { delay_id } => delay_id.execution_id() == id,
        Output::CancelEvent { event_request_id } => event_request_id.execution_id() == id,
        _ => true,
    }
}
