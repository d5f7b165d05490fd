//! Per-join-set state: requests by index, the inbox of arrived responses in arrival order,
//! and the counters that make join-next, closing and `get` O(1).
//!
//! A slot may exist before its join set is created: a replay receives all responses up front,
//! before the history that creates their join sets has been replayed.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use crate::model::{ChildKind, DelayOutcome, ExecutionResult, Ffqn, JoinSetId, Response};

use super::error::{DeliveryError, UsageError};
use super::outcome::Joined;

pub(crate) enum Request {
    Child {
        ffqn: Ffqn,
        kind: ChildKind,
        /// Set when a join-next consumed the child's response.
        result: Option<ExecutionResult>,
        /// The value this execution wrote with `stub`, if any.
        stubbed: Option<ExecutionResult>,
    },
    Delay {
        expires_at: DateTime<Utc>,
        outcome: Option<DelayOutcome>,
    },
}

impl Request {
    fn is_consumed(&self) -> bool {
        match self {
            Request::Child { result, .. } => result.is_some(),
            Request::Delay { outcome, .. } => outcome.is_some(),
        }
    }
}

pub(crate) struct JoinSetState {
    pub id: JoinSetId,
    pub created: bool,
    /// Closing has started (cancellations decided); set before `closed`.
    pub closing: bool,
    pub closed: bool,
    /// A closing join-next has been recorded and waits for its response.
    pub closing_wait: bool,
    /// Request `i` has index `i + 1`.
    pub requests: Vec<Request>,
    /// Responses consumed by join-nexts.
    pub consumed: usize,
    /// Workflow children whose response has not been consumed: what closing waits for.
    pub unconsumed_workflows: usize,
    inbox: VecDeque<Response>,
    /// Indices whose response has arrived; dedupes redelivered responses. A set, not a
    /// vector by index: a bogus index must not allocate.
    arrived: HashSet<u64>,
}

impl JoinSetState {
    fn new(id: JoinSetId) -> Self {
        JoinSetState {
            id,
            created: false,
            closing: false,
            closed: false,
            closing_wait: false,
            requests: Vec::new(),
            consumed: 0,
            unconsumed_workflows: 0,
            inbox: VecDeque::new(),
            arrived: HashSet::new(),
        }
    }

    /// Requests whose response has not been consumed.
    pub fn unawaited(&self) -> usize {
        self.requests.len() - self.consumed
    }

    pub fn all_processed(&self) -> bool {
        self.consumed == self.requests.len()
    }

    pub fn next_index(&self) -> u64 {
        self.requests.len() as u64 + 1
    }

    pub fn has_arrived(&self, index: u64) -> bool {
        self.arrived.contains(&index)
    }

    pub fn request(&self, index: u64) -> Option<&Request> {
        self.requests.get(index.checked_sub(1)? as usize)
    }

    pub fn request_mut(&mut self, index: u64) -> Option<&mut Request> {
        self.requests.get_mut(index.checked_sub(1)? as usize)
    }

    pub fn push_request(&mut self, request: Request) {
        if let Request::Child {
            kind: ChildKind::Workflow,
            ..
        } = request
        {
            self.unconsumed_workflows += 1;
        }
        self.requests.push(request);
    }

    /// Indices of requests that closing cancels: activities, stubs and delays whose response
    /// has neither been consumed nor arrived (cancelling a finished one would be noise).
    pub fn cancellable(&self) -> impl Iterator<Item = (u64, &Request)> {
        self.requests.iter().enumerate().filter_map(|(i, r)| {
            let index = i as u64 + 1;
            let cancellable = !r.is_consumed()
                && !self.has_arrived(index)
                && !matches!(
                    r,
                    Request::Child {
                        kind: ChildKind::Workflow,
                        ..
                    }
                );
            cancellable.then_some((index, r))
        })
    }

    /// The arrived, unconsumed response to request `index`, if any.
    pub fn queued_response(&self, index: u64) -> Option<&Response> {
        self.inbox
            .iter()
            .find(|r| r.step().is_some_and(|s| s.index == index))
    }

    /// Takes the next response in arrival order. `Err` leaves it queued: it answers no request
    /// made so far, or a request of the other kind.
    pub fn consume_next(&mut self) -> Option<Result<Joined, Response>> {
        let front = self.inbox.front()?;
        let index = front.step().map_or(0, |s| s.index);
        let fits = matches!(
            (front, self.request(index)),
            (
                Response::ChildExecutionFinished { .. },
                Some(Request::Child { .. })
            ) | (Response::DelayFinished { .. }, Some(Request::Delay { .. }))
        );
        if !fits {
            return Some(Err(front.clone()));
        }
        let response = self.inbox.pop_front().expect("front exists");
        self.consumed += 1;
        let request = self.request_mut(index).expect("checked above");
        let joined = match (response, request) {
            (
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                },
                Request::Child {
                    ffqn,
                    kind,
                    result: slot,
                    ..
                },
            ) => {
                let workflow = *kind == ChildKind::Workflow;
                *slot = Some(result.clone());
                let joined = Joined::Child {
                    child_execution_id,
                    ffqn: ffqn.clone(),
                    result,
                };
                if workflow {
                    self.unconsumed_workflows -= 1;
                }
                joined
            }
            (
                Response::DelayFinished { delay_id, outcome },
                Request::Delay { outcome: slot, .. },
            ) => {
                *slot = Some(outcome);
                Joined::Delay { delay_id, outcome }
            }
            _ => unreachable!("kinds checked above"),
        };
        Some(Ok(joined))
    }
}

#[derive(Default)]
pub(crate) struct JoinSets {
    slots: Vec<JoinSetState>,
    by_id: HashMap<JoinSetId, usize>,
    /// Slots of created join sets, in creation order (closing walks it backwards).
    created: Vec<usize>,
}

impl JoinSets {
    fn slot_or_insert(&mut self, id: &JoinSetId) -> usize {
        if let Some(&slot) = self.by_id.get(id) {
            return slot;
        }
        let slot = self.slots.len();
        self.slots.push(JoinSetState::new(id.clone()));
        self.by_id.insert(id.clone(), slot);
        slot
    }

    pub fn find(&self, id: &JoinSetId) -> Option<&JoinSetState> {
        self.by_id.get(id).map(|&s| &self.slots[s])
    }

    pub fn is_created(&self, id: &JoinSetId) -> bool {
        self.find(id).is_some_and(|s| s.created)
    }

    /// Marks `id` created; returns its slot. The caller has checked it was not created before.
    pub fn create(&mut self, id: &JoinSetId) -> usize {
        let slot = self.slot_or_insert(id);
        debug_assert!(!self.slots[slot].created, "{id} created twice");
        self.slots[slot].created = true;
        self.created.push(slot);
        slot
    }

    /// The slot of a created join set that still accepts calls.
    pub fn usable(&self, id: &JoinSetId) -> Result<usize, UsageError> {
        match self.by_id.get(id) {
            Some(&slot) if self.slots[slot].created => {
                if self.slots[slot].closing {
                    Err(UsageError::JoinSetClosed(id.clone()))
                } else {
                    Ok(slot)
                }
            }
            _ => Err(UsageError::UnknownJoinSet(id.clone())),
        }
    }

    /// The slot of a created join set, closed or not.
    pub fn created_slot(&self, id: &JoinSetId) -> Option<usize> {
        self.by_id
            .get(id)
            .copied()
            .filter(|&s| self.slots[s].created)
    }

    pub fn get(&self, slot: usize) -> &JoinSetState {
        &self.slots[slot]
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut JoinSetState {
        &mut self.slots[slot]
    }

    pub fn created_slots(&self) -> &[usize] {
        &self.created
    }

    /// Queues a response (already checked to be for this execution, so it has a step).
    /// Returns whether it is new (not a duplicate) and its join set's slot.
    pub fn deliver(&mut self, response: Response) -> Result<(bool, usize), DeliveryError> {
        let step = response
            .step()
            .expect("a response for this execution has a step");
        let index = step.index;
        let slot = self.slot_or_insert(&step.join_set_id);
        let state = &mut self.slots[slot];
        let kind_ok = match (&response, state.request(index)) {
            (_, None) => true, // not replayed yet; checked when consumed
            (Response::ChildExecutionFinished { .. }, Some(Request::Child { .. })) => true,
            (Response::DelayFinished { .. }, Some(Request::Delay { .. })) => true,
            _ => false,
        };
        if !kind_ok {
            return Err(DeliveryError::KindMismatch(Box::new(response)));
        }
        if state.has_arrived(index) {
            return Ok((false, slot));
        }
        state.arrived.insert(index);
        state.inbox.push_back(response);
        Ok((true, slot))
    }
}
