//! The records on Weir's topics that are not model types themselves. [`Response`] (on
//! `weir.responses`) is the model's own type.
//!
//! [`Response`]: crate::model::Response

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::concurrency::{ConcurrencyKey, Slot, SlotClaim};

use crate::model::{
    ChildKind, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, JoinSetId, Response, Version,
};

/// The parent of a child execution, as carried by a [`Submission`] and [`Created`].
#[derive(Clone, Debug, PartialEq)]
pub struct ParentRef {
    pub execution_id: ExecutionId,
    pub join_set_id: JoinSetId,
    pub child_kind: ChildKind,
}

/// The function name a submission whose own name does not parse is read with: it names no
/// function, so the submission is answered `unknown-function` (saying what its name was).
pub fn unparsable_ffqn() -> Ffqn {
    Ffqn::new(
        "weir",
        "engine",
        "submission",
        None,
        "unparsable-function-name",
    )
    .unwrap_or_else(|e| unreachable!("a constant name that parses: {e}"))
}

/// A request to start an execution. Topic `weir.submissions`, key: `execution_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    pub execution_id: ExecutionId,
    pub ffqn: Ffqn,
    /// A JSON array, one element per WIT parameter.
    pub params: Value,
    pub parent: Option<ParentRef>,
    /// Run no earlier than this; `None` means now.
    pub scheduled_at: Option<DateTime<Utc>>,
    pub correlation_id: Option<String>,
    /// Free-form caller metadata (added in schema v1; empty when read from a v0 record).
    pub metadata: BTreeMap<String, String>,
    /// Past this the execution finishes `timed-out` and its children are cancelled; the
    /// execution keeps the earlier of this and its component's default. A child workflow's
    /// submission carries its parent's deadline. `None`: none asked (added in schema v2).
    pub deadline: Option<DateTime<Utc>>,
    /// At most `limit` executions submitted with this key run at once; the others wait and
    /// start in the order they came ([`crate::concurrency`]; added in submission schema v4).
    pub concurrency: Option<ConcurrencyKey>,
    /// Whose work this is, for fairness: within a partition, submissions are taken round-robin
    /// across tenants ([`crate::fairness`]); `None` shares one lane with every other submission
    /// without a tenant (added in submission schema v13).
    pub tenant: Option<String>,
}

impl Submission {
    /// The submission of top-level execution `id` of `ffqn` with `params`, `metadata` and an
    /// optional `deadline`, to run now: what every client outside a workflow sends (`weir
    /// submit`, the HTTP API, a trigger). A top-level execution has no parent and no
    /// correlation id; one whose name must always mean the same execution takes its id from a
    /// digest ([`ExecutionId::from_digest`]).
    pub fn top_level(
        id: &ExecutionId,
        ffqn: Ffqn,
        params: Value,
        metadata: BTreeMap<String, String>,
        deadline: Option<DateTime<Utc>>,
    ) -> Submission {
        Submission {
            execution_id: id.clone(),
            ffqn,
            params,
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata,
            deadline,
            concurrency: None,
            tenant: None,
        }
    }
}

/// A request to run an activity. Topic `weir.activity.<route>`, key: `execution_id` (the
/// activity's own id). Answered by a [`Response::ChildExecutionFinished`] on `weir.responses`
/// keyed by `parent_execution_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivityRequest {
    pub execution_id: ExecutionId,
    pub parent_execution_id: ExecutionId,
    pub ffqn: Ffqn,
    /// A JSON array, one element per WIT parameter.
    pub params: Value,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Time allowed for this attempt, if limited.
    pub timeout_millis: Option<u64>,
    /// Absolute deadline of the activity (all attempts), if any.
    pub deadline: Option<DateTime<Utc>>,
}

impl ActivityRequest {
    /// How long an attempt started at `now` may run: its `timeout_millis`, cut to what is
    /// left before the deadline (zero once it has passed); `None` for no bound.
    pub fn attempt_bound(&self, now: DateTime<Utc>) -> Option<std::time::Duration> {
        let timeout = self.timeout_millis.map(std::time::Duration::from_millis);
        let Some(deadline) = self.deadline else {
            return timeout;
        };
        let left = (deadline - now).to_std().unwrap_or_default();
        Some(timeout.map_or(left, |t| t.min(left)))
    }
}

/// A parent closed the join set of an unawaited activity. Topic `weir.activity.<route>` (of
/// every route Weir's activity workers serve), key: `execution_id`, with the Kafka header
/// `weir.kind = cancel`; it lands on the partition of its request, after it.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivityCancel {
    pub execution_id: ExecutionId,
    pub parent_execution_id: ExecutionId,
    pub cancelled_at: DateTime<Utc>,
}

/// A parent resumed while it waits for this activity: a retry notice (issue 35,
/// `docs/design/pause.md#retries-that-end-in-paused`). Topic `weir.activity.<route>` (of every
/// route Weir's activity workers serve), key: `execution_id`, with the Kafka header
/// `weir.kind = retry-activity`; it lands on the partition of its request, after it. Its value
/// is an `ActivityCancel` record (the same three fields: the activity, its parent, when),
/// told apart by that header. A request parked by `on_exhausted = "pause"` takes it as a
/// fresh budget of attempts; any other request (running, waiting, answered) ignores it.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivityRetry {
    pub execution_id: ExecutionId,
    pub parent_execution_id: ExecutionId,
    pub resumed_at: DateTime<Utc>,
}

/// The execution was created. The first entry of every execution's changelog.
#[derive(Clone, Debug, PartialEq)]
pub struct Created {
    pub ffqn: Ffqn,
    pub params: Value,
    pub parent: Option<ParentRef>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub correlation_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    /// When its submission was sent: the submission record's Kafka timestamp (added in history
    /// schema v8; `None` when read from an earlier record, or for a record without one).
    /// From it to `created_at` the submission waited for its owner.
    pub submitted_at: Option<DateTime<Utc>>,
    /// Workflows: the content digest (`sha256:<hex>`) of the component the execution is
    /// pinned to, the newest its creator had; every replay runs that build. `None` in
    /// records written before pinning (and for executions the host did not pin): they run
    /// on whatever build of the function is registered.
    pub component: Option<String>,
    /// The execution's deadline: the earlier of its submission's and its component's
    /// default counted from `created_at` (added in history schema v5).
    pub deadline: Option<DateTime<Utc>>,
    /// Set on an execution started by a reset (`weir reset`): the execution and the last
    /// seq of its history this one starts from; the entries that follow `Created` are that
    /// history's, copied ([`crate::reset`]; added in history schema v11).
    pub reset_of: Option<ResetOf>,
    /// The concurrency slots it holds to run, in the order it takes them (its submission's
    /// concurrency key, its function's limit; [`crate::concurrency::claims`]): it starts once
    /// it holds them all (`SlotGranted`). Empty: it starts at once (added in history schema
    /// v11).
    pub slots: Vec<SlotClaim>,
}

impl Created {
    /// The concurrency key it was submitted with, and its limit (a [`Slot::Key`] claim).
    pub fn concurrency_key(&self) -> Option<ConcurrencyKey> {
        self.slots.iter().find_map(|claim| match &claim.slot {
            Slot::Key(key) => Some(ConcurrencyKey {
                key: key.clone(),
                limit: Some(claim.limit),
            }),
            Slot::Function(_) => None,
        })
    }
}

/// Where a reset execution comes from: the execution reset and the last seq of its history
/// kept (the old one's `Reset` entry links back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetOf {
    pub execution_id: ExecutionId,
    pub seq: u64,
}

/// One entry of an execution's changelog.
#[derive(Clone, Debug, PartialEq)]
pub enum HistoryEntry {
    Created(Created),
    Event {
        version: Version,
        event: HistoryEvent,
    },
    /// A response consumed for the execution, journalled in consumption order.
    ResponseAppended(Response),
    Finished {
        result: ExecutionResult,
        finished_at: DateTime<Utc>,
    },
    /// The execution moved to another build of its workflow (`to`, a content digest) from
    /// the one it was pinned to (`from`; `None` for an execution pinned to none): its
    /// recorded history replayed cleanly on `to` before it was asked (`weir upgrade`), and
    /// every replay from here on runs `to`.
    Upgraded {
        from: Option<String>,
        to: String,
    },
    /// An event sent to the execution arrived when no wait of its name was open: it is kept
    /// (the projection's buffer) until a wait takes it or the execution finishes. An event
    /// that finds its wait open is journalled only as the `ResponseAppended(EventDelivered)`.
    EventReceived(ReceivedEvent),
    /// The execution was asked to stop (`weir cancel`, or its parent's cancellation): what it
    /// waited for at that moment was cancelled, and it finishes `cancelled` whatever it
    /// returns (what it returned is in the error's detail). Requests it makes afterwards (its
    /// compensations) run as usual.
    CancelRequested {
        reason: String,
    },
    /// The execution was paused (`weir pause`): until `Resumed` it runs no code and starts
    /// nothing; what comes for it (answers, due delays, events) is journalled and waits
    /// ([`crate::processor`]'s `pause` rules; `docs/design/pause.md`).
    Paused {
        reason: String,
    },
    /// The execution was resumed (`weir resume`, or a cancellation of a paused execution,
    /// which it must run to compensate): its run is rebuilt from the history, what was
    /// journalled while it was paused included, and goes on.
    Resumed {
        reason: String,
    },
    /// A new execution was started from this one's history up to `to_seq` (`weir reset`):
    /// the link to it. This execution goes on as it was unless the request asked for its
    /// cancellation or termination (which follow this entry).
    Reset {
        new_execution_id: ExecutionId,
        to_seq: u64,
        reason: String,
    },
    /// The execution holds the concurrency slot `slot` (one of `Created::slots`): its owner
    /// granted it. Once it holds every one, it starts ([`crate::concurrency`]).
    SlotGranted {
        slot: Slot,
    },
}

/// An event as an execution keeps it until a wait takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedEvent {
    /// The sender's idempotency key: one event id reaches an execution at most once.
    pub event_id: String,
    pub name: String,
    /// JSON.
    pub payload: Value,
}

/// An event sent into a running execution. Topic `weir.events`, key: `target` (the
/// execution id), so it lands on the partition of its execution.
#[derive(Clone, Debug, PartialEq)]
pub struct InboundEvent {
    pub event: ReceivedEvent,
    pub target: ExecutionId,
    pub sent_at: DateTime<Utc>,
    /// The correlation key it was sent to, when the key's owner forwarded it to its holder
    /// ([`crate::correlation`]): if the execution has finished, it goes back to the key
    /// instead of the DLQ.
    pub correlation_key: Option<String>,
    /// Set by Weir on an event that came before its execution existed, waited for the
    /// submission until then ([`crate::correlation::hold_early`]) and is sent back: if the
    /// execution still does not exist, the event goes to the DLQ instead of waiting again.
    pub waited_until: Option<DateTime<Utc>>,
}

/// A request to move an execution to another build of its workflow. Topic `weir.responses`,
/// key: `execution_id`, with the Kafka header `weir.kind = upgrade`. Taken only if the
/// execution's changelog is still `expected_seq` records long (nothing happened since the
/// history was verified on the build) and it has not finished; else dead-lettered
/// (`conflict`, `refused`) with why.
#[derive(Clone, Debug, PartialEq)]
pub struct UpgradeRequest {
    pub execution_id: ExecutionId,
    /// The content digest of the build to move to (stored with `weir deploy` first).
    pub component: String,
    /// The length of the changelog that was replayed on the build.
    pub expected_seq: u64,
    pub requested_at: DateTime<Utc>,
}

/// A request to stop an execution, key: `execution_id`, with the Kafka header
/// `weir.kind = cancel-execution`: on `weir.responses` from `weir cancel` and the HTTP API; on
/// `weir.submissions` from a workflow worker for the child workflows of an execution being
/// cancelled (after the child's submission on the same partition, so never before it).
/// One from outside may come before its execution's submission (another topic): it is kept
/// under the execution's id, as an early event is ([`crate::correlation::hold_cancel`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CancelRequest {
    pub execution_id: ExecutionId,
    /// Why, for the history and the result.
    pub reason: String,
    /// Finish at once (`cancelled`) without letting the workflow react (`--terminate`).
    pub terminate: bool,
    pub requested_at: DateTime<Utc>,
    /// Set when it was kept for an execution that did not exist and its wait for the
    /// submission ran out (sent back on `weir.submissions` by [`crate::correlation::expire`]):
    /// its owner dead-letters it unless the execution exists by then.
    pub waited_until: Option<DateTime<Utc>>,
}

/// What a [`PauseRequest`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseAction {
    Pause,
    Resume,
}

/// A request to pause or resume an execution, key: `execution_id`, with the Kafka header
/// `weir.kind = pause-execution`, on `weir.responses` (`weir pause`, `weir resume`, the HTTP
/// API). Pausing a finished or unknown execution is dead-lettered with why; pausing a paused
/// one, or resuming one that is not paused, changes nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct PauseRequest {
    pub execution_id: ExecutionId,
    pub action: PauseAction,
    /// Why, for the history.
    pub reason: String,
    pub requested_at: DateTime<Utc>,
    /// The activity whose attempts ran out and that its worker parked (`on_exhausted =
    /// "pause"`), when the request is that worker's: an execution that no longer waits for
    /// it (finished, or past it) cancels it instead of pausing, so that nothing stays parked.
    pub parked: Option<ParkedActivity>,
}

/// An activity parked by its worker, named by the pause it asks of its parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedActivity {
    pub execution_id: ExecutionId,
    pub ffqn: Ffqn,
}

/// What a reset does to the execution it starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetThen {
    /// It goes on as it was.
    Keep,
    /// It is cancelled (it runs its compensations), as `weir cancel` does.
    Cancel,
    /// It is terminated at once, as `weir cancel --terminate` does.
    Terminate,
}

impl ResetThen {
    pub const ALL: [ResetThen; 3] = [ResetThen::Keep, ResetThen::Cancel, ResetThen::Terminate];

    /// Its name, as the CLI and the HTTP API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ResetThen::Keep => "keep",
            ResetThen::Cancel => "cancel",
            ResetThen::Terminate => "terminate",
        }
    }

    /// The one named `name` ([`ResetThen::as_str`]).
    pub fn named(name: &str) -> Option<Self> {
        ResetThen::ALL
            .into_iter()
            .find(|then| then.as_str() == name)
    }
}

/// Where a reset cuts a history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetPoint {
    /// After this seq (0: only `Created`, a new start with the same params).
    Seq(u64),
    /// At the latest point the rule allows ([`crate::reset::points`]): the last step after
    /// which the execution waited for nothing, before its finish (what a batch reset of
    /// executions with different histories asks).
    Latest,
}

impl std::fmt::Display for ResetPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResetPoint::Seq(seq) => write!(f, "seq {seq}"),
            ResetPoint::Latest => f.write_str("its latest point"),
        }
    }
}

/// A request to start a new execution from an execution's history up to `to` (its last
/// good step), key: `execution_id`, with the Kafka header `weir.kind = reset-execution`, on
/// `weir.responses` (`weir reset`, the HTTP API). The new execution, `new_execution_id`
/// (top-level; chosen by the client, so that a request sent twice starts one execution),
/// runs the newest build of the function and replays the kept entries before it goes on
/// ([`crate::reset`] has the rules of the cut; `docs/design/reset.md`). A point the history
/// cannot be cut at, or an execution that does not exist, is dead-lettered with why.
#[derive(Clone, Debug, PartialEq)]
pub struct ResetRequest {
    pub execution_id: ExecutionId,
    /// Where its history is cut: the new execution keeps what comes before.
    pub to: ResetPoint,
    pub new_execution_id: ExecutionId,
    pub then: ResetThen,
    /// Why, for both histories.
    pub reason: String,
    pub requested_at: DateTime<Utc>,
}

/// The start of an execution made by a reset: a submission with the entries it starts
/// from. Topic `weir.submissions`, key: `submission.execution_id`, header
/// `weir.kind = reset-start`; sent by the reset execution's owner, in the transaction that
/// appends its `Reset` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ResetStart {
    pub submission: Submission,
    pub reset_of: ResetOf,
    /// The new execution's entries after `Created`, in order: the kept history, its ids
    /// those of the new execution ([`crate::reset::cut`]).
    pub entries: Vec<HistoryEntry>,
}

/// A record of `weir.history`, key: `execution_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRecord {
    pub execution_id: ExecutionId,
    /// Position in the execution's changelog: 0 for `Created`, then +1 per record. With the
    /// execution id, the idempotency key of the materialised history.
    pub seq: u64,
    pub entry: HistoryEntry,
    /// When it happened, by the clock of the owner that appended it (added in history schema
    /// v8; `None` when read from an earlier record): the store's `recorded_at`.
    pub at: Option<DateTime<Utc>>,
}

/// A finished top-level execution. Topic `weir.results`, key: `execution_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionFinished {
    pub execution_id: ExecutionId,
    pub ffqn: Ffqn,
    pub result: ExecutionResult,
    pub finished_at: DateTime<Utc>,
    /// The submission's correlation id (added in schema v1; `None` when read from v0).
    pub correlation_id: Option<String>,
}

/// Why a record went to the DLQ. New reasons are added at the end; readers that do not know
/// one read it as `Other` (the Avro enum's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DlqReason {
    /// The bytes are not a record of the expected schema (bad framing, bad body, bad field).
    Undecodable,
    /// The writer schema (fingerprint or registry id) is not known.
    UnknownSchema,
    /// No component exports the requested function.
    UnknownFfqn,
    /// The parameters failed the type check against the function's WIT signature.
    InvalidParams,
    /// The record is larger than allowed.
    Oversize,
    Other,
    /// On a partition other than its key's (murmur2), or keyed by other than the execution it
    /// names: another worker owns that execution.
    Misrouted,
    /// A submission whose execution id is taken by another submission (other function or
    /// params), or is not a top-level id.
    Conflict,
    /// A response the execution cannot take: it answers no request of it, or a request of the
    /// other kind.
    Refused,
}

impl DlqReason {
    pub const ALL: [DlqReason; 9] = [
        DlqReason::Undecodable,
        DlqReason::UnknownSchema,
        DlqReason::UnknownFfqn,
        DlqReason::InvalidParams,
        DlqReason::Oversize,
        DlqReason::Other,
        DlqReason::Misrouted,
        DlqReason::Conflict,
        DlqReason::Refused,
    ];

    /// The Avro enum symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            DlqReason::Undecodable => "UNDECODABLE",
            DlqReason::UnknownSchema => "UNKNOWN_SCHEMA",
            DlqReason::UnknownFfqn => "UNKNOWN_FFQN",
            DlqReason::InvalidParams => "INVALID_PARAMS",
            DlqReason::Oversize => "OVERSIZE",
            DlqReason::Other => "OTHER",
            DlqReason::Misrouted => "MISROUTED",
            DlqReason::Conflict => "CONFLICT",
            DlqReason::Refused => "REFUSED",
        }
    }

    /// The spelling used in the `weir.dlq.reason` header: kebab-case.
    pub fn header_value(self) -> &'static str {
        match self {
            DlqReason::Undecodable => "undecodable",
            DlqReason::UnknownSchema => "unknown-schema",
            DlqReason::UnknownFfqn => "unknown-ffqn",
            DlqReason::InvalidParams => "invalid-params",
            DlqReason::Oversize => "oversize",
            DlqReason::Other => "other",
            DlqReason::Misrouted => "misrouted",
            DlqReason::Conflict => "conflict",
            DlqReason::Refused => "refused",
        }
    }

    pub fn from_symbol(symbol: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.symbol() == symbol)
    }
}

/// A Kafka header of the original record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlqHeader {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// An input record that could not be processed. Topic `weir.dlq`, key: the original key.
/// The original key, value and headers are kept byte for byte: nothing is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct DlqEnvelope {
    pub original_topic: String,
    pub original_partition: i32,
    pub original_offset: i64,
    pub original_timestamp_millis: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub original_headers: Vec<DlqHeader>,
    pub reason: DlqReason,
    pub error: String,
    pub failed_at: DateTime<Utc>,
}

/// Header names of a DLQ record.
pub mod dlq_headers {
    /// The reason, kebab-case (`undecodable`, `unknown-schema`, …).
    pub const REASON: &str = "weir.dlq.reason";
    /// The error message, UTF-8, cut to [`MAX_ERROR_HEADER_BYTES`].
    pub const ERROR: &str = "weir.dlq.error";
    pub const ORIGINAL_TOPIC: &str = "weir.dlq.original-topic";
    pub const ORIGINAL_PARTITION: &str = "weir.dlq.original-partition";
    pub const ORIGINAL_OFFSET: &str = "weir.dlq.original-offset";
    /// The full error is in the record's value; the header carries its start.
    pub const MAX_ERROR_HEADER_BYTES: usize = 1024;
    /// On a copy whose value was cut to fit the broker's limit: the original value's size in
    /// bytes, and its SHA-256 (hex), so that the original can be told apart and checked.
    pub const ORIGINAL_SIZE: &str = "weir.dlq.original-size";
    pub const ORIGINAL_SHA256: &str = "weir.dlq.original-sha256";
}

impl DlqEnvelope {
    /// The Kafka headers to send with this envelope: reason, error (cut to
    /// [`dlq_headers::MAX_ERROR_HEADER_BYTES`] on a character boundary) and the original
    /// topic, partition and offset, all as UTF-8 text.
    pub fn kafka_headers(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut cut = self.error.len().min(dlq_headers::MAX_ERROR_HEADER_BYTES);
        while !self.error.is_char_boundary(cut) {
            cut -= 1;
        }
        vec![
            (
                dlq_headers::REASON,
                self.reason.header_value().as_bytes().to_vec(),
            ),
            (dlq_headers::ERROR, self.error.as_bytes()[..cut].to_vec()),
            (
                dlq_headers::ORIGINAL_TOPIC,
                self.original_topic.as_bytes().to_vec(),
            ),
            (
                dlq_headers::ORIGINAL_PARTITION,
                self.original_partition.to_string().into_bytes(),
            ),
            (
                dlq_headers::ORIGINAL_OFFSET,
                self.original_offset.to_string().into_bytes(),
            ),
        ]
    }
}

/// What a record of `weir.state` holds, as its kind says (`crate::wire::state_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOf {
    Schedule,
    Correlation,
    /// An event id a correlation key remembers.
    Remembered,
    /// A concurrency slot's state ([`crate::concurrency::SlotState`]).
    Slot,
    /// A batch operation's state (left in place when corrupt: [`crate::batch`]).
    Batch,
}

/// A record of `weir.state` that does not decode, as the take-over read it.
#[derive(Debug, Clone, PartialEq)]
pub struct CorruptState {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_millis: Option<i64>,
    /// What its kind says it is.
    pub of: StateOf,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// Its headers, names and values, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Why it does not decode.
    pub error: String,
}

impl CorruptState {
    /// The key as text, for logs and the DLQ copy's key.
    pub fn key_text(&self) -> String {
        String::from_utf8_lossy(self.key.as_deref().unwrap_or_default()).into_owned()
    }
}
