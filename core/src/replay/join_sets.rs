//! Per-join-set state: requests by index, the queue of arrived responses in arrival order,
//! and the counters that make join-next, closing and `get` O(1).
//!
//! Responses given to a replay up front are kept in a journal and sorted into their join
//! sets only when a join-next needs them (or before anything that depends on what has
//! arrived), so a replay streams through history and journal together.
//!
//! Responses of all join sets live in one arena in arrival order, each join set threading a
//! linked queue through it: no allocation per join set, and a replay walks the arena roughly
//! in order, which keeps long replays cache-friendly.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use crate::model::{
    ChildKind, DelayOutcome, EventOutcome, ExecutionResult, Ffqn, JoinSetId, JoinSetKind, Response,
};

use super::error::{DeliveryError, UsageError};
use super::hash::FxBuild;
use super::outcome::Joined;

pub(crate) enum Request {
    Child {
        ffqn: Ffqn,
        kind: ChildKind,
        /// Set when a join-next consumed the child's response.
        result: Option<ExecutionResult>,
        /// The value this execution wrote with `stub`, if any (rare, hence boxed).
        stubbed: Option<Box<ExecutionResult>>,
    },
    Delay {
        expires_at: DateTime<Utc>,
        outcome: Option<DelayOutcome>,
    },
    Event {
        name: String,
        /// Set when a join-next consumed the delivery.
        outcome: Option<EventOutcome>,
    },
}

impl Request {
    fn is_consumed(&self) -> bool {
        match self {
            Request::Child { result, .. } => result.is_some(),
            Request::Delay { outcome, .. } => outcome.is_some(),
            Request::Event { outcome, .. } => outcome.is_some(),
        }
    }
}

const NONE: u32 = u32::MAX;

/// A join set's requests by 1-based index. The first is kept inline: most join sets (every
/// one-off) hold one request, and a replay should not allocate for each.
#[derive(Default)]
struct Requests {
    first: Option<Request>,
    /// Requests 2, 3, …
    rest: Vec<Request>,
}

impl Requests {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn get(&self, index: u64) -> Option<&Request> {
        match index {
            0 => None,
            1 => self.first.as_ref(),
            _ => self.rest.get(usize::try_from(index - 2).ok()?),
        }
    }

    fn get_mut(&mut self, index: u64) -> Option<&mut Request> {
        match index {
            0 => None,
            1 => self.first.as_mut(),
            _ => self.rest.get_mut(usize::try_from(index - 2).ok()?),
        }
    }

    fn push(&mut self, request: Request) {
        if self.first.is_none() {
            self.first = Some(request);
        } else {
            self.rest.push(request);
        }
    }

    /// `(index, request)` in index order.
    fn iter(&self) -> impl Iterator<Item = (u64, &Request)> {
        self.first
            .iter()
            .chain(&self.rest)
            .enumerate()
            .map(|(i, r)| (i as u64 + 1, r))
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
    requests: Requests,
    /// Responses consumed by join-nexts.
    pub consumed: usize,
    /// Workflow children whose response has not been consumed: what closing waits for.
    pub unconsumed_workflows: usize,
    /// First and last arena entries of the queue of arrived, unconsumed responses.
    head: u32,
    tail: u32,
    /// Indices 1..=64 whose response has arrived, as bits; most join sets are small.
    arrived_low: u64,
    /// Larger indices. A set, not a vector by index: a bogus index must not allocate.
    arrived_high: HashSet<u64, FxBuild>,
}

impl JoinSetState {
    fn new(id: JoinSetId) -> Self {
        JoinSetState {
            id,
            created: false,
            closing: false,
            closed: false,
            closing_wait: false,
            requests: Requests::default(),
            consumed: 0,
            unconsumed_workflows: 0,
            head: NONE,
            tail: NONE,
            arrived_low: 0,
            arrived_high: HashSet::default(),
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
        match index {
            1..=64 => self.arrived_low & (1 << (index - 1)) != 0,
            _ => self.arrived_high.contains(&index),
        }
    }

    fn mark_arrived(&mut self, index: u64) {
        match index {
            1..=64 => self.arrived_low |= 1 << (index - 1),
            _ => {
                self.arrived_high.insert(index);
            }
        }
    }

    pub fn request(&self, index: u64) -> Option<&Request> {
        self.requests.get(index)
    }

    pub fn request_mut(&mut self, index: u64) -> Option<&mut Request> {
        self.requests.get_mut(index)
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
        self.requests.iter().filter_map(|(index, r)| {
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
}

struct InboxEntry {
    response: Option<Response>,
    next: u32,
}

/// The counter embedded in a generated (`g:<k>`) or one-off (`o:<k>-…`) join set's name.
fn counter_of(id: &JoinSetId) -> Option<usize> {
    let name = id.name();
    let digits = name.split('-').next()?;
    digits.parse().ok()
}

#[derive(Default)]
pub(crate) struct JoinSets {
    /// Created join sets in creation order: the k-th created is at `k - 1`, so generated and
    /// one-off ids, which embed k, find their slot without hashing.
    slots: Vec<JoinSetState>,
    /// Created named join sets.
    named: HashMap<JoinSetId, usize, FxBuild>,
    /// Join sets that received responses before being created; moved into `slots` when
    /// created. Only a replay's flush or a bogus response puts anything here.
    early: HashMap<JoinSetId, JoinSetState, FxBuild>,
    /// Every response sorted into a join set, in arrival order; taken out when consumed.
    inbox: Vec<InboxEntry>,
    /// Responses given in arrival order but not yet sorted into their join sets. A replay
    /// sorts them in lazily, as join-nexts need them, so that it streams through the
    /// journal alongside the history instead of touching all of it up front.
    journal: VecDeque<Response>,
    /// Responses consumed so far, in every join set: the guest's step ([`super::guest`]).
    consumed: u64,
    /// The latest time a consumed response told ([`Response::told_time`]).
    told: Option<DateTime<Utc>>,
}

impl JoinSets {
    /// Responses consumed so far by join-nexts (and closings), in every join set.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The latest time told by a consumed response, if any told one.
    pub fn told(&self) -> Option<DateTime<Utc>> {
        self.told
    }

    fn slot_of(&self, id: &JoinSetId) -> Option<usize> {
        match id.kind() {
            JoinSetKind::Named => self.named.get(id).copied(),
            JoinSetKind::Generated | JoinSetKind::OneOff => {
                let slot = counter_of(id)?.checked_sub(1)?;
                (self.slots.get(slot)?.id == *id).then_some(slot)
            }
        }
    }

    /// The state of a join set, created or early.
    pub fn find(&self, id: &JoinSetId) -> Option<&JoinSetState> {
        match self.slot_of(id) {
            Some(slot) => Some(&self.slots[slot]),
            None => self.early.get(id),
        }
    }

    pub fn is_created(&self, id: &JoinSetId) -> bool {
        self.slot_of(id).is_some()
    }

    /// Creates `id` as the next join set (its counter is the slot count + 1); returns its
    /// slot. The caller has checked it was not created before.
    pub fn create(&mut self, id: &JoinSetId) -> usize {
        debug_assert!(!self.is_created(id), "{id} created twice");
        let slot = self.slots.len();
        let mut state = self
            .early
            .remove(id)
            .unwrap_or_else(|| JoinSetState::new(id.clone()));
        state.created = true;
        self.slots.push(state);
        if id.kind() == JoinSetKind::Named {
            self.named.insert(id.clone(), slot);
        }
        debug_assert!(id.kind() == JoinSetKind::Named || self.slot_of(id) == Some(slot));
        slot
    }

    /// The slot of a created join set that still accepts calls.
    pub fn usable(&self, id: &JoinSetId) -> Result<usize, UsageError> {
        match self.slot_of(id) {
            Some(slot) if self.slots[slot].closing => Err(UsageError::JoinSetClosed(id.clone())),
            Some(slot) => Ok(slot),
            None => Err(UsageError::UnknownJoinSet(id.clone())),
        }
    }

    /// The slot of a created join set, closed or not.
    pub fn created_slot(&self, id: &JoinSetId) -> Option<usize> {
        self.slot_of(id)
    }

    pub fn get(&self, slot: usize) -> &JoinSetState {
        &self.slots[slot]
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut JoinSetState {
        &mut self.slots[slot]
    }

    /// Created join sets, in creation order.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Makes room for `responses` more responses (a replay knows its journal's length).
    pub fn reserve(&mut self, responses: usize) {
        self.journal.reserve(responses);
        self.inbox.reserve(responses);
    }

    /// Queues a response of the journal (already checked to be for this execution) to be
    /// sorted in when needed.
    pub fn enqueue_journal(&mut self, response: Response) {
        self.journal.push_back(response);
    }

    /// Sorts every journalled response into its join set; needed before anything that
    /// depends on which responses have arrived.
    pub fn flush(&mut self) {
        while let Some(response) = self.journal.pop_front() {
            // Kinds are checked when consumed (a journal cannot be rejected piecemeal).
            let _ = self.sort_in(response, false, false);
        }
    }

    /// Sorts journalled responses in until `slot` has one queued or the journal is empty.
    fn pull_for(&mut self, slot: usize) {
        while self.slots[slot].head == NONE {
            let Some(response) = self.journal.pop_front() else {
                return;
            };
            let _ = self.sort_in(response, false, false);
        }
    }

    /// Delivers a response now (the journal is flushed first, to keep arrival order).
    /// Returns whether it is new (not a duplicate) and its join set's slot if created.
    /// `caught_up`: the replay is past its recorded history, so every request this response
    /// could answer has been made; one that answers none is refused.
    pub fn deliver(
        &mut self,
        response: Response,
        caught_up: bool,
    ) -> Result<(bool, Option<usize>), DeliveryError> {
        self.flush();
        self.sort_in(response, true, caught_up)
    }

    fn sort_in(
        &mut self,
        response: Response,
        check_kind: bool,
        caught_up: bool,
    ) -> Result<(bool, Option<usize>), DeliveryError> {
        let step = response
            .step()
            .expect("a response for this execution has a step");
        let index = step.index;
        let slot = self.slot_of(&step.join_set_id);
        if caught_up && slot.is_none() {
            // A caught-up run has opened every join set a response could be for.
            return Err(DeliveryError::NoSuchRequest(Box::new(response)));
        }
        let state = match slot {
            Some(slot) => &mut self.slots[slot],
            None => self
                .early
                .entry(step.join_set_id.clone())
                .or_insert_with_key(|id| JoinSetState::new(id.clone())),
        };
        let kind_ok = match (&response, state.request(index)) {
            // Not replayed yet: checked when consumed. Caught up: the run has made every
            // request it ever will before this response could be sent, so it answers none.
            (_, None) if caught_up => {
                return Err(DeliveryError::NoSuchRequest(Box::new(response)));
            }
            (_, None) => true,
            (Response::ChildExecutionFinished { .. }, Some(Request::Child { .. })) => true,
            (Response::DelayFinished { .. }, Some(Request::Delay { .. })) => true,
            (Response::EventDelivered { .. }, Some(Request::Event { .. })) => true,
            _ => false,
        };
        if check_kind && !kind_ok {
            return Err(DeliveryError::KindMismatch(Box::new(response)));
        }
        if state.has_arrived(index) {
            return Ok((false, slot));
        }
        state.mark_arrived(index);
        let entry = u32::try_from(self.inbox.len()).expect("fewer than 2^32 responses");
        self.inbox.push(InboxEntry {
            response: Some(response),
            next: NONE,
        });
        if state.tail == NONE {
            state.head = entry;
        } else {
            self.inbox[state.tail as usize].next = entry;
        }
        state.tail = entry;
        Ok((true, slot))
    }

    /// The arrived, unconsumed response to request `index` of `slot`, if any (call `flush`
    /// first for a complete answer).
    pub fn queued_response(&self, slot: usize, index: u64) -> Option<&Response> {
        let mut entry = self.slots[slot].head;
        while entry != NONE {
            let e = &self.inbox[entry as usize];
            let response = e.response.as_ref().expect("queued entries hold a response");
            if response.step().is_some_and(|s| s.index == index) {
                return Some(response);
            }
            entry = e.next;
        }
        None
    }

    /// Takes the next response of `slot` in arrival order, sorting in journalled responses as
    /// needed. `Err` leaves it queued: it answers no request made so far, or a request of the
    /// other kind.
    pub fn consume_next(&mut self, slot: usize) -> Option<Result<Joined, Response>> {
        self.pull_for(slot);
        let state = &mut self.slots[slot];
        if state.head == NONE {
            return None;
        }
        let entry = &mut self.inbox[state.head as usize];
        let front = entry
            .response
            .as_ref()
            .expect("queued entries hold a response");
        let index = front.step().map_or(0, |s| s.index);
        let fits = matches!(
            (front, state.request(index)),
            (
                Response::ChildExecutionFinished { .. },
                Some(Request::Child { .. })
            ) | (Response::DelayFinished { .. }, Some(Request::Delay { .. }))
                | (Response::EventDelivered { .. }, Some(Request::Event { .. }))
        );
        if !fits {
            return Some(Err(front.clone()));
        }
        let response = entry.response.take().expect("checked above");
        let told = match (&response, state.request(index)) {
            (
                Response::DelayFinished {
                    outcome: DelayOutcome::Ok,
                    ..
                },
                Some(Request::Delay { expires_at, .. }),
            ) => Some(*expires_at),
            (response, _) => response.told_time(),
        };
        state.head = entry.next;
        if state.head == NONE {
            state.tail = NONE;
        }
        state.consumed += 1;
        let workflow = matches!(
            state.request(index),
            Some(Request::Child {
                kind: ChildKind::Workflow,
                ..
            })
        );
        if workflow {
            state.unconsumed_workflows -= 1;
        }
        let joined = match (response, state.request_mut(index).expect("checked above")) {
            (
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result,
                    ..
                },
                Request::Child {
                    ffqn, result: slot, ..
                },
            ) => {
                *slot = Some(result.clone());
                Joined::Child {
                    child_execution_id,
                    ffqn: ffqn.clone(),
                    result,
                }
            }
            (
                Response::DelayFinished { delay_id, outcome },
                Request::Delay { outcome: slot, .. },
            ) => {
                *slot = Some(outcome);
                Joined::Delay { delay_id, outcome }
            }
            (
                Response::EventDelivered {
                    event_request_id,
                    outcome,
                },
                Request::Event {
                    name,
                    outcome: slot,
                    ..
                },
            ) => {
                *slot = Some(outcome.clone());
                Joined::Event {
                    event_request_id,
                    name: name.clone(),
                    outcome,
                }
            }
            _ => unreachable!("kinds checked above"),
        };
        self.consumed += 1;
        self.told = self.told.max(told);
        Some(Ok(joined))
    }
}
