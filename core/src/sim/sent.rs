//! What the simulated clients sent, as the scheduler records it: the submissions and what
//! each must finish with, the events sent to correlation keys, the stub writes, the
//! schedules and the commands that ended them, the pause and resume requests. The scheduler writes these as it sends; the
//! invariants ([`super::checks`]) hold the run's outcome against them. Plain data: neither
//! side's rules live here.

use serde_json::Value;

use crate::model::{ExecutionId, ExecutionResult, Ffqn};
use crate::records::DlqReason;
use crate::schedule::ScheduleSpec;

use super::cluster::SimTime;

/// A top-level execution a client submitted, and what it must finish with.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub ffqn: Ffqn,
    pub params: Value,
    pub scheduled_at: Option<SimTime>,
    pub expected: ExecutionResult,
    /// How many times it was submitted.
    pub times: u32,
    /// How many submissions of its id with other params were made (each is dead-lettered
    /// and answered with a `conflict` error).
    pub conflicts: u32,
    /// The events sent to it, in order: (event id, payload). An `approval` finishes with the
    /// payload of one of them (or -1, its timeout), not with `expected`.
    pub events: Vec<(String, i64)>,
    /// A cancellation (or termination) was sent for it: it may finish `cancelled`.
    pub cancelled: bool,
    /// A cancellation was sent for it before its submission (`weir.responses` partition and
    /// offset): it is applied when the submission comes, or dead-lettered if none came in
    /// time (`checks/cancels.rs`).
    pub early_cancel: Option<(i32, i64)>,
    /// Its submission's deadline: it may finish `timed-out`.
    pub deadline: Option<SimTime>,
}

/// An event a client sent to a correlation key (`Faults::correlation`): `weir.events`, keyed
/// by the key. The same event id may be sent more than once (always with the same payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedSend {
    pub key: String,
    pub event_id: String,
    pub payload: i64,
    pub sent_at: SimTime,
}

/// A write of a stub's value the scheduler made (`Faults::stub_writes`): from outside (a
/// client's `Response` on `weir.responses`) or by a `stub-writer` execution it submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct StubSend {
    /// What it names: a stub child, or (to be `not-found`) an id that is none.
    pub target: ExecutionId,
    pub result: ExecutionResult,
    /// The `stub-writer` execution that writes it (`None`: from outside).
    pub writer: Option<ExecutionId>,
    /// The writer writes it through another function than the stub's.
    pub wrong_function: bool,
    /// The target's parent had finished (its `Finished` committed) when it was sent.
    pub after_finish: bool,
    pub sent_at: SimTime,
}

/// A pause or resume request a client sent (`Faults::pause_resume`), on `weir.responses`.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseSend {
    pub execution_id: ExecutionId,
    pub action: crate::records::PauseAction,
    /// Its reason, unique in the run (`sim pause 3`): the `Paused` or `Resumed` entry it
    /// makes carries it.
    pub reason: String,
    /// Where it went: (partition, offset) of `weir.responses`.
    pub at: (i32, i64),
    /// What the client had read of the execution in the committed log when it sent it.
    pub seen: PauseSeen,
    /// The id is no execution a client submitted nor one it saw (dead-lettered: it does not
    /// exist).
    pub stray: bool,
    pub sent_at: SimTime,
    /// The activity an activity worker parked, when the request is that worker's: an
    /// execution that no longer waits for it cancels it instead of pausing.
    pub parked: Option<ExecutionId>,
}

/// A query a client sent (`Faults::queries`), on `weir.responses`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySend {
    pub request: crate::query::QueryRequest,
    /// Where it went: (partition, offset) of `weir.responses`.
    pub at: (i32, i64),
}

/// A reset request a client sent (`Faults::resets`), on `weir.responses`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResetSend {
    pub execution_id: ExecutionId,
    pub new_execution_id: ExecutionId,
    pub to: crate::records::ResetPoint,
    pub then: crate::records::ResetThen,
    /// The rule ([`crate::reset::cut`]) allows it on the history the client read: it makes
    /// the new execution (once per new id), which must finish. Else it is refused.
    pub allowed: bool,
    /// Where it went: (partition, offset) of `weir.responses`.
    pub at: (i32, i64),
    pub sent_at: SimTime,
}

/// What a client had read of an execution's committed history when it sent a
/// [`PauseSend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseSeen {
    /// No `Created` yet: its owner may not have read its submission (then the request is
    /// dead-lettered, the execution does not exist yet).
    Nothing,
    /// Created and not finished: its owner knows it.
    Running,
    /// Finished: the request is refused (dead-lettered).
    Finished,
}

/// A schedule a client created (`Faults::schedules`), and what it asked of it since.
#[derive(Debug, Clone)]
pub struct SimSchedule {
    pub name: String,
    /// Never changed: a create again is the same spec.
    pub spec: ScheduleSpec,
    /// The ids of the creates that defined it, one per generation (a create after a delete
    /// starts a new one), in order.
    pub generations: Vec<String>,
    /// Its last pause or resume was a pause.
    pub paused: bool,
    /// The command that ended it before the run settled.
    pub end: Option<ScheduleEnd>,
}

/// How a client ended a schedule before the run settled (so that nothing ticks forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleEnd {
    /// Deleted (else paused).
    pub deleted: bool,
    /// The schedule was paused already (the pause changes nothing).
    pub was_paused: bool,
    pub sent_at: SimTime,
}

/// What the trigger's source writer sent (`Faults::triggers`): the records that map (each
/// sent again as the writer's retries), the executions they start, and the records that must
/// be dead-lettered, with why.
#[derive(Debug, Clone, Default)]
pub struct TriggerSends {
    pub mapped: Vec<(Option<String>, Vec<u8>)>,
    /// Orders numbered so far (their `/id`s).
    pub orders: u64,
    pub ids: std::collections::BTreeSet<ExecutionId>,
    /// (partition, offset, reason) in the source topic.
    pub poison: Vec<(i32, i64, DlqReason)>,
}

/// A record of `weir.state` that does not decode, written before the workers started
/// (`Faults::corrupt_state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptSent {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    /// Whether Weir could have written it (its key is a state's key of its kind, on the key's
    /// own partition): then it is dropped (DLQ, tombstone), else left in place.
    pub weirs: bool,
    /// Written before the workers started: every first take-over reads it, so it is copied
    /// once the run settles (one written later is copied if a take-over comes after it).
    pub before_start: bool,
}

/// A command a client sent to a batch operation (`Faults::batches`), on `weir.responses`.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSend {
    pub command: crate::batch::BatchCommand,
    /// The start is refused by the rules (a rate of 0 or less, a cancel of an unknown batch).
    pub refused: bool,
    /// For a start: the executions of its function the store held when it was sent, each
    /// with its creation time: those created before the batch's pinned end must each get an
    /// outcome once it is done.
    pub selected: Vec<(ExecutionId, chrono::DateTime<chrono::Utc>)>,
    /// Where it went: (partition, offset) of `weir.responses`.
    pub at: (i32, i64),
    pub sent_at: SimTime,
}
