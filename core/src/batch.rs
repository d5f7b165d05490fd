//! Batch operations (issue 35 item 3; the design: `docs/design/batches.md`): one action —
//! cancel, terminate, pause, resume, reset — applied to every execution a list filter selects
//! (`weir list`'s filters: [`ListQuery`]), durably, at a bounded rate, with progress and an
//! outcome per execution.
//!
//! A batch is keyed state, like a schedule: named `weir:batch:<id>`
//! ([`crate::state_key::StateKey::Batch`]), owned by the partition of that key, its whole
//! state one [`BatchState`] on `weir.state`, its commands ([`BatchCommand`]) on
//! `weir.responses`. The owner advances a running batch a turn at a time
//! ([`crate::processor`]'s `batches`): [`wants`] says which list page it needs (the driver
//! reads it from the store), [`advance`] decides, for each execution of the page, the
//! [`Outcome`] and the request to send (the same [`PauseRequest`] / [`CancelRequest`] /
//! [`ResetRequest`] the CLI sends), and moves the cursor — all committed in one transaction.
//!
//! Invariants a reader may trust:
//! - **Once per execution.** The cursor moves past an execution in the transaction that
//!   sends its request: a new owner (after a crash, a rebalance, a zombie fenced) resumes
//!   from the committed cursor, so at most one request per (batch, execution) is ever
//!   committed; the list's order (newest first, by creation time then id) never changes, and
//!   `created_until` is pinned at the start, so no execution is listed twice nor skipped.
//! - **The rate.** A request is sent only with a token of the batch's bucket ([`TokenBucket`],
//!   the GCRA of activity routes), kept in the state: over any span `[s, t]` of batch time,
//!   at most `burst + rate · (t − s)` requests.
//! - **Progress is the outcomes.** [`BatchCounts`] grows by exactly the outcomes of the turn
//!   that commits them (written beside it, [`crate::processor::Effect::PutBatchOutcomes`]).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::activity::rate::{RateLimit, RateLimitError, TokenBucket};
use crate::model::ExecutionId;
use crate::records::{
    CancelRequest, PauseAction, PauseRequest, ResetPoint, ResetRequest, ResetThen,
};
use crate::rows::{ExecutionState, ListBy, ListCursor, ListPage, ListQuery, ListedExecution};

/// The most executions one turn reads (and acts on).
pub const MAX_PAGE: usize = 100;

/// The longest batch id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// The longest reason, in bytes.
pub const MAX_REASON_LEN: usize = 1_024;

/// What a batch does to each execution it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchAction {
    Cancel,
    Terminate,
    Pause,
    Resume,
    /// A new execution from each one's history ([`BatchSpec::reset`] says where it is cut
    /// and what becomes of the old one).
    Reset,
}

impl BatchAction {
    pub const ALL: [BatchAction; 5] = [
        BatchAction::Cancel,
        BatchAction::Terminate,
        BatchAction::Pause,
        BatchAction::Resume,
        BatchAction::Reset,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchAction::Cancel => "cancel",
            BatchAction::Terminate => "terminate",
            BatchAction::Pause => "pause",
            BatchAction::Resume => "resume",
            BatchAction::Reset => "reset",
        }
    }
}

impl fmt::Display for BatchAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BatchAction {
    type Err = BatchError;
    fn from_str(s: &str) -> Result<Self, BatchError> {
        BatchAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| BatchError::UnknownAction(s.to_owned()))
    }
}

/// Which executions a batch selects: `weir list`'s filters (never the finish-time ones: a
/// batch acts on executions that have not finished, mostly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFilter {
    pub by: ListBy,
    pub state: Option<ExecutionState>,
    pub outcome: Option<String>,
    pub created_from: Option<DateTime<Utc>>,
    /// Created before; pinned to the batch's start when not given (so that executions created
    /// later are not selected, and the list the cursor walks never grows ahead of it).
    pub created_until: Option<DateTime<Utc>>,
}

/// What a batch is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSpec {
    pub filter: BatchFilter,
    pub action: BatchAction,
    /// Executions acted on per second at most (the bucket's burst is one second of it, at
    /// least 1, at most [`MAX_PAGE`]).
    pub per_second: f64,
    /// A reset's point and what becomes of the old executions (read by a reset only).
    pub reset: BatchReset,
    /// Why, for the requests it sends (and the histories they write).
    pub reason: String,
}

/// Where a reset batch cuts each history, and what becomes of the executions it resets
/// (read by [`BatchAction::Reset`] only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchReset {
    pub to: ResetPoint,
    pub then: ResetThen,
}

impl Default for BatchReset {
    /// The latest point of each history (its last good step), the old execution left as it is.
    fn default() -> Self {
        BatchReset {
            to: ResetPoint::Latest,
            then: ResetThen::Keep,
        }
    }
}

impl BatchSpec {
    /// The rate limit of the batch's bucket.
    pub fn rate(&self) -> RateLimit {
        let burst = if self.per_second.is_finite() {
            self.per_second.ceil().clamp(1.0, MAX_PAGE as f64) as u32
        } else {
            1
        };
        RateLimit {
            per_second: self.per_second,
            burst,
        }
    }
}

/// Where a batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchStatus {
    Running,
    /// Every selected execution has its outcome.
    Done,
    /// Cancelled (`weir batch cancel`): no further request is sent.
    Cancelled,
}

impl BatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Running => "running",
            BatchStatus::Done => "done",
            BatchStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            BatchStatus::Running,
            BatchStatus::Done,
            BatchStatus::Cancelled,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

/// What a batch did to one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Its request was sent (its owner takes it: a second pause, say, changes nothing).
    Acted,
    /// Skipped: it had finished.
    Finished,
    /// Skipped: already as the action would leave it (paused for a pause, not paused for a
    /// resume).
    AlreadyThere,
    /// Skipped by a reset: a child execution (its parent awaits it by its id; reset the
    /// top-level execution instead).
    Child,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acted => "acted",
            Outcome::Finished => "skipped-finished",
            Outcome::AlreadyThere => "skipped-already",
            Outcome::Child => "skipped-child",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Outcome::Acted,
            Outcome::Finished,
            Outcome::AlreadyThere,
            Outcome::Child,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

/// The outcome of one execution, as the batch recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionOutcome {
    pub execution_id: ExecutionId,
    pub outcome: Outcome,
}

/// The outcomes of one turn of a batch (`weir.state`, keyed `weir:batch:<id>:<turn>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcomes {
    pub id: String,
    pub turn: u64,
    pub outcomes: Vec<ExecutionOutcome>,
}

/// The outcomes so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub acted: u64,
    pub finished: u64,
    pub already: u64,
    pub children: u64,
}

impl BatchCounts {
    /// Executions with an outcome.
    pub fn seen(&self) -> u64 {
        self.acted + self.finished + self.already + self.children
    }

    /// Executions skipped (not acted on).
    pub fn skipped(&self) -> u64 {
        self.finished + self.already + self.children
    }

    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Acted => self.acted += 1,
            Outcome::Finished => self.finished += 1,
            Outcome::AlreadyThere => self.already += 1,
            Outcome::Child => self.children += 1,
        }
    }
}

/// The whole state of a batch (`weir.state`, keyed `weir:batch:<id>`).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchState {
    pub id: String,
    pub spec: BatchSpec,
    pub status: BatchStatus,
    pub started_at: DateTime<Utc>,
    /// When it was done or cancelled.
    pub ended_at: Option<DateTime<Utc>>,
    /// The next page starts after this execution (`None`: from the newest).
    pub cursor: Option<ListCursor>,
    pub counts: BatchCounts,
    /// The bucket's theoretical arrival time ([`TokenBucket::tat`]).
    pub tat: Option<DateTime<Utc>>,
    /// Turns committed: each turn's outcomes are a record of their own, numbered by it.
    pub turns: u64,
    /// The batch time of its last change (a turn, a command).
    pub updated_at: DateTime<Utc>,
}

/// What is asked of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchCommandAction {
    Start(BatchSpec),
    Cancel,
}

/// A command for a batch's owner (`weir.responses`, keyed `weir:batch:<id>`).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchCommand {
    pub id: String,
    pub action: BatchCommandAction,
    pub requested_at: DateTime<Utc>,
}

/// A request a batch sends to an execution's owner.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchRequest {
    Cancel(CancelRequest),
    Pause(PauseRequest),
    Reset(ResetRequest),
}

impl BatchRequest {
    pub fn execution_id(&self) -> &ExecutionId {
        match self {
            BatchRequest::Cancel(r) => &r.execution_id,
            BatchRequest::Pause(r) => &r.execution_id,
            BatchRequest::Reset(r) => &r.execution_id,
        }
    }

    /// The reason the request carries.
    pub fn reason(&self) -> &str {
        match self {
            BatchRequest::Cancel(r) => &r.reason,
            BatchRequest::Pause(r) => &r.reason,
            BatchRequest::Reset(r) => &r.reason,
        }
    }
}

/// Why a batch or a command is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchError {
    #[error("`{0}` is not a batch action (one of cancel, terminate, pause, resume, reset)")]
    UnknownAction(String),
    #[error("batch id `{0}` is not 1 to {MAX_ID_LEN} of A-Z a-z 0-9 . _ -")]
    BadId(String),
    #[error("the rate of batch `{id}`: {error}")]
    Rate { id: String, error: RateLimitError },
    #[error("the reason of batch `{0}` is longer than {MAX_REASON_LEN} bytes")]
    LongReason(String),
    #[error("batch `{0}` selects by an empty function name")]
    NoFunction(String),
    #[error("batch `{id}`: the creation range {from} .. {until} is empty")]
    EmptyRange {
        id: String,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    #[error("batch `{0}` exists already, with another spec")]
    Exists(String),
    #[error("batch `{0}` does not exist")]
    Unknown(String),
}

/// Checks a batch id.
pub fn check_id(id: &str) -> Result<(), BatchError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(BatchError::BadId(id.to_owned()))
    }
}

/// Checks a spec (its id included): what a start is refused for.
pub fn check(id: &str, spec: &BatchSpec) -> Result<(), BatchError> {
    check_id(id)?;
    spec.rate().validate().map_err(|error| BatchError::Rate {
        id: id.to_owned(),
        error,
    })?;
    if spec.reason.len() > MAX_REASON_LEN {
        return Err(BatchError::LongReason(id.to_owned()));
    }
    if matches!(&spec.filter.by, ListBy::Function(f) if f.is_empty()) {
        return Err(BatchError::NoFunction(id.to_owned()));
    }
    if let (Some(from), Some(until)) = (spec.filter.created_from, spec.filter.created_until)
        && from >= until
    {
        return Err(BatchError::EmptyRange {
            id: id.to_owned(),
            from,
            until,
        });
    }
    Ok(())
}

/// What a command does to a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    Unchanged,
    Refused(BatchError),
    Put(Box<BatchState>),
}

/// Folds `command` into the batch's state (`None`: none yet) at `now`.
pub fn apply(state: Option<&BatchState>, command: &BatchCommand, now: DateTime<Utc>) -> Applied {
    let id = &command.id;
    match (&command.action, state) {
        (BatchCommandAction::Start(spec), None) => {
            if let Err(e) = check(id, spec) {
                return Applied::Refused(e);
            }
            let mut spec = spec.clone();
            let until = spec.filter.created_until.map_or(now, |u| u.min(now));
            spec.filter.created_until = Some(until);
            Applied::Put(Box::new(BatchState {
                id: id.clone(),
                spec,
                status: BatchStatus::Running,
                started_at: now,
                ended_at: None,
                cursor: None,
                counts: BatchCounts::default(),
                tat: None,
                turns: 0,
                updated_at: now,
            }))
        }
        // A start sent again (a CLI that crashed and ran again with the same id).
        (BatchCommandAction::Start(spec), Some(state)) => {
            let mut same = spec.clone();
            same.filter.created_until = state.spec.filter.created_until;
            if same == state.spec {
                Applied::Unchanged
            } else {
                Applied::Refused(BatchError::Exists(id.clone()))
            }
        }
        (BatchCommandAction::Cancel, None) => Applied::Refused(BatchError::Unknown(id.clone())),
        (BatchCommandAction::Cancel, Some(state)) if state.status == BatchStatus::Running => {
            let mut state = state.clone();
            state.status = BatchStatus::Cancelled;
            state.ended_at = Some(now);
            state.updated_at = now;
            Applied::Put(Box::new(state))
        }
        (BatchCommandAction::Cancel, Some(_)) => Applied::Unchanged,
    }
}

fn bucket(state: &BatchState) -> Option<TokenBucket> {
    // A spec is checked at its start: a bucket that does not build is a state from elsewhere.
    TokenBucket::resume(&state.spec.rate(), state.tat).ok()
}

/// The tokens a running batch's bucket has at `now`, at most [`MAX_PAGE`].
pub fn tokens(state: &BatchState, now: DateTime<Utc>) -> usize {
    if state.status != BatchStatus::Running {
        return 0;
    }
    let Some(mut b) = bucket(state) else {
        return 0;
    };
    (0..MAX_PAGE).take_while(|_| b.take(now)).count()
}

/// The list page a running batch needs at `now` to take its next turn (`None`: it is not
/// running, or has no token before [`next_token`]).
pub fn wants(state: &BatchState, now: DateTime<Utc>) -> Option<ListQuery> {
    let limit = tokens(state, now);
    if limit == 0 {
        return None;
    }
    let f = &state.spec.filter;
    Some(ListQuery {
        by: f.by.clone(),
        state: f.state,
        outcome: f.outcome.clone(),
        created_from: f.created_from,
        created_until: f.created_until,
        finished_from: None,
        finished_until: None,
        limit,
        after: state.cursor.clone(),
    })
}

/// When a running batch without a token has one again.
pub fn next_token(state: &BatchState) -> Option<DateTime<Utc>> {
    (state.status == BatchStatus::Running)
        .then(|| bucket(state).and_then(|b| b.next_token()))
        .flatten()
}

/// What an action does to `execution`, listed in `state`.
pub fn decide(action: BatchAction, execution: &ExecutionId, state: ExecutionState) -> Outcome {
    match (action, state) {
        // A reset is most for executions that finished wrong.
        (BatchAction::Reset, _) if !execution.is_top_level() => Outcome::Child,
        (BatchAction::Reset, _) => Outcome::Acted,
        (_, ExecutionState::Finished) => Outcome::Finished,
        (BatchAction::Pause, ExecutionState::Paused) => Outcome::AlreadyThere,
        (BatchAction::Resume, s) if s != ExecutionState::Paused => Outcome::AlreadyThere,
        _ => Outcome::Acted,
    }
}

/// The request of `action` for `execution` (the reason names the batch: `batch <id>: …`).
pub fn request(
    id: &str,
    spec: &BatchSpec,
    execution: &ExecutionId,
    now: DateTime<Utc>,
) -> BatchRequest {
    let reason = if spec.reason.is_empty() {
        format!("batch {id}")
    } else {
        format!("batch {id}: {}", spec.reason)
    };
    let pause = |action| {
        BatchRequest::Pause(PauseRequest {
            execution_id: execution.clone(),
            action,
            reason: reason.clone(),
            requested_at: now,
            parked: None,
        })
    };
    let cancel = |terminate| {
        BatchRequest::Cancel(CancelRequest {
            execution_id: execution.clone(),
            reason: reason.clone(),
            terminate,
            requested_at: now,
            waited_until: None,
        })
    };
    match spec.action {
        BatchAction::Pause => pause(PauseAction::Pause),
        BatchAction::Resume => pause(PauseAction::Resume),
        BatchAction::Cancel => cancel(false),
        BatchAction::Terminate => cancel(true),
        BatchAction::Reset => BatchRequest::Reset(ResetRequest {
            execution_id: execution.clone(),
            to: spec.reset.to,
            new_execution_id: reset_id(id, execution),
            then: spec.reset.then,
            reason,
            requested_at: now,
        }),
    }
}

/// The new execution a reset batch `id` makes of `execution`: derived from both
/// ([`ExecutionId::from_digest`]), so a batch never resets one execution into two.
pub fn reset_id(id: &str, execution: &ExecutionId) -> ExecutionId {
    use sha2::{Digest, Sha256};
    let digest: [u8; 32] = Sha256::new()
        .chain_update(b"weir batch reset\0")
        .chain_update(id.as_bytes())
        .chain_update(b"\0")
        .chain_update(execution.to_string().as_bytes())
        .finalize()
        .into();
    ExecutionId::from_digest(&digest)
}

/// One turn of a batch: the requests to send, the outcomes to record, the new state.
#[derive(Debug, Clone, PartialEq)]
pub struct Advanced {
    pub requests: Vec<BatchRequest>,
    pub outcomes: Vec<ExecutionOutcome>,
    pub state: BatchState,
}

/// Takes a turn of a running batch with the page [`wants`] asked for (see the module docs).
/// An execution is acted on only with a token; the cursor moves past each execution given
/// an outcome, and past the page (to its `next`) once all of it has one; a last page done
/// ends the batch.
pub fn advance(state: &BatchState, page: &ListPage, now: DateTime<Utc>) -> Advanced {
    let mut next = state.clone();
    let mut requests = Vec::new();
    let mut outcomes = Vec::new();
    let Some(mut bucket) = bucket(state).filter(|_| state.status == BatchStatus::Running) else {
        return Advanced {
            requests,
            outcomes,
            state: next,
        };
    };
    let mut all = true;
    for e in &page.executions {
        if !after_cursor(state.cursor.as_ref(), e) {
            // A store that gave a row the cursor passed: it had its outcome already.
            continue;
        }
        let outcome = decide(state.spec.action, &e.execution_id, e.state);
        if outcome == Outcome::Acted {
            if !bucket.take(now) {
                all = false;
                break;
            }
            requests.push(request(&state.id, &state.spec, &e.execution_id, now));
        }
        next.counts.add(outcome);
        outcomes.push(ExecutionOutcome {
            execution_id: e.execution_id.clone(),
            outcome,
        });
        next.cursor = Some(ListCursor {
            created_at: e.created_at,
            execution_id: e.execution_id.clone(),
        });
    }
    if all {
        match &page.next {
            Some(cursor) => next.cursor = Some(cursor.clone()),
            None => {
                next.status = BatchStatus::Done;
                next.ended_at = Some(now);
            }
        }
    }
    next.tat = bucket.tat();
    next.turns += 1;
    next.updated_at = now;
    Advanced {
        requests,
        outcomes,
        state: next,
    }
}

fn after_cursor(cursor: Option<&ListCursor>, e: &ListedExecution) -> bool {
    cursor.is_none_or(|c| c.precedes(e))
}

#[cfg(test)]
mod tests;
