//! The activity worker's rules, pure: what to do with each record of an activity route's
//! partition, with each finished attempt and as time passes (`docs/design.md#activities`).
//! The Kafka activity worker (`worker/src/kafka/activity_worker.rs`) and the simulated one
//! (`sim`, feature `test-util`) feed the same [`ActivityCore`] and execute its [`Effect`]s;
//! neither decides anything itself. No I/O, no clock: every input comes with the instant
//! it is handled at.
//!
//! - [`progress`]: the frontier and the offset metadata format ([`Progress`]).
//! - `partition`: one owned partition: its unfinished requests, what it restored from the
//!   previous owner, what it committed, its flow control.
//! - [`external`]: requests of external routes, watched until their deadline.
//! - [`answer`]: the size gate of an answer (too large: `value-too-large`).
//! - [`rate`]: the token bucket of a rate-limited route's topic ([`RateLimit`]).
//! - `state`: [`ActivityCore`], the state machine over the owned partitions.
//!
//! **What it promises** (exactly once, nothing lost, no partition stuck):
//! - Each request is answered to its parent (a [`Response`] keyed by the parent) exactly
//!   once *in the parent's history*: the answer is only ever emitted inside a [`Commit`]
//!   together with the progress that marks its request finished, and the driver makes the
//!   answer durable (produced and acknowledged) before it commits that progress. After the
//!   progress committed, no owner runs the request again (the frontier passed it, or the
//!   metadata does not list it). Before, a crash, a zombie or a refused commit may leave an
//!   answer on the topic whose request is then answered again by the next owner: a
//!   duplicate, which the parent drops (it journals one answer per child,
//!   `crate::processor`'s `deliver`). A commit that fails is followed by a take-over
//!   ([`Input::Revoked`], [`Input::Assigned`]) that forgets everything not committed.
//!   (Until issue 38 the answers and the progress were one Kafka transaction; one
//!   transaction a step less is most of what a step through a topic costs:
//!   `docs/design/activities.md#answers-before-progress`.)
//! - Nothing is lost: a request stays unfinished (listed in the metadata, or at or past the
//!   frontier) until its answer (or its dead letter, or its cancellation) commits.
//! - No partition is stuck: a request for a function nobody runs is answered
//!   `unknown-function` after [`ActivitySettings::unknown_grace`]; an external one
//!   `timed-out` at its deadline; a partition paused for its window is resumed as soon as
//!   one of its requests finishes.
//! - **Retries are durable**: a failed attempt with attempts left ([`crate::retry::decide`])
//!   is recorded in the metadata as its next attempt and its not-before instant; no attempt
//!   starts before its not-before, and an attempt whose answer committed never runs again.
//! - **Cancellation**: an [`ActivityCancel`] read after its request stops it (a running
//!   attempt is aborted, a waiting retry dropped) and answers the parent `cancelled`; one
//!   for an activity answered already is ignored.
//! - **Flow control**: a partition with [`ActivitySettings::partition_window`] unfinished
//!   requests is paused until one finishes (the metadata stays within the broker's limit).
//! - **Paused routes** ([`Input::TopicsPaused`]): no attempt of a paused route starts and its
//!   partitions are not fetched until it is resumed; nothing of it is lost or answered.
//! - **Rate limits** ([`CoreConfig::rate_limits`], [`rate`]): an attempt of a rate-limited
//!   topic starts only with a token of its topic's bucket — one bucket per topic and per core
//!   (per worker process), kept across take-overs; retries are attempts like the first. An
//!   attempt without a token stays ready, as a paused route's does (nothing lost, nothing
//!   answered; its partition is fetched until its window is full), and
//!   [`ActivityCore::next_wake`] names the instant the next token comes, so no partition is
//!   stuck on an empty bucket.
//! - **Exhausted retries that pause** (`on_exhausted = "pause"`, [`crate::retry::Decision::Park`]):
//!   the request stays unfinished, parked ([`Mark::parked`]), and a [`PauseRequest`] for its
//!   parent goes out in the same [`Commit`] as that progress (the request is durable
//!   first). A parked request starts no attempt; a retry notice ([`Body::Retry`], its
//!   parent's resume) gives it a fresh budget of attempts (attempt 1 again); a cancellation
//!   ends it as any other. A parked request does not count towards the partition window (the
//!   notices behind it must be read); at most [`MAX_PARKED`] are parked per partition, one
//!   more is answered as without the policy. Nothing is re-requested: the activity id keeps its one request
//!   (`docs/design/pause.md#retries-that-end-in-paused`).

pub mod answer;
pub mod external;
mod partition;
pub mod progress;
pub mod rate;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use self::progress::{MAX_PARKED, MAX_PARTITION_WINDOW, Mark, MetadataError, Progress};
pub use self::rate::{RateLimit, RateLimitError};
pub use self::state::ActivityCore;
use crate::model::{ExecutionId, ExecutionResult, Ffqn, Response};
use crate::records::{ActivityCancel, ActivityRequest, ActivityRetry, DlqReason, PauseRequest};
use crate::retry::RetryPolicy;

/// Settings of the activity worker's rules.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivitySettings {
    /// Attempts running at once in this worker.
    pub concurrency: usize,
    /// Unfinished requests per partition beyond which the partition is paused.
    pub partition_window: usize,
    /// How long a request for a function this worker does not run waits (from the request's
    /// timestamp) for a worker that does before it is answered with `unknown-function`.
    pub unknown_grace: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ActivitySettingsError {
    #[error("activity concurrency must be at least 1")]
    NoConcurrency,
    #[error("the activity partition window must be 1 to {MAX_PARTITION_WINDOW}, not {0}")]
    Window(usize),
    #[error("the rate limit of route topic `{topic}` ({limit}): {error}")]
    Rate {
        topic: String,
        limit: RateLimit,
        error: RateLimitError,
    },
}

impl ActivitySettings {
    pub fn validate(&self) -> Result<(), ActivitySettingsError> {
        if self.concurrency == 0 {
            return Err(ActivitySettingsError::NoConcurrency);
        }
        if self.partition_window == 0 || self.partition_window > MAX_PARTITION_WINDOW {
            return Err(ActivitySettingsError::Window(self.partition_window));
        }
        Ok(())
    }
}

/// What the core needs to know besides its [`ActivitySettings`].
#[derive(Clone, Debug, PartialEq)]
pub struct CoreConfig {
    pub settings: ActivitySettings,
    /// What is finished is committed this long after the first of it finished at the latest.
    pub commit_interval: Duration,
    /// ... or as soon as this many records wait to be committed.
    pub max_batch: usize,
    /// The rate-limited request topics (the topology's `rate` of their routes), each with its
    /// limit: what one core — one activity worker process — starts of the topic's attempts.
    pub rate_limits: BTreeMap<String, RateLimit>,
}

impl CoreConfig {
    pub fn validate(&self) -> Result<(), ActivitySettingsError> {
        self.settings.validate()?;
        for (topic, limit) in &self.rate_limits {
            limit
                .validate()
                .map_err(|error| ActivitySettingsError::Rate {
                    topic: topic.clone(),
                    limit: *limit,
                    error,
                })?;
        }
        Ok(())
    }
}

/// A partition of an activity route's topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoutePartition {
    pub topic: String,
    pub partition: i32,
}

impl RoutePartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        RoutePartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for RoutePartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Names one attempt the core started (or one check of an external service); never reused,
/// so a result of an attempt of an earlier ownership, or of an aborted one, is recognised
/// and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId(pub u64);

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// How the worker serves a request's function: a fact the driver looks up (its topology and
/// its components), not a decision.
#[derive(Clone, Debug, PartialEq)]
pub enum Serve {
    /// A WASM activity this worker runs, retried by this policy.
    Wasm(RetryPolicy),
    /// A function no component of this worker exports (a rolling deploy): it waits for a
    /// worker that runs it, for [`ActivitySettings::unknown_grace`].
    Unknown,
    /// A request on an external route: watched until its deadline (its own, else its
    /// `written_at` plus `timeout`, the declaration's `timeout_ms`, else the unknown grace).
    /// With `service_group`, the service's consumer group is checked before answering
    /// `timed-out`.
    External {
        service_group: Option<String>,
        timeout: Option<Duration>,
    },
}

/// What a record of a route's topic is.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Request {
        request: ActivityRequest,
        serve: Serve,
        /// The not-before header of a request that arrives as a later attempt.
        not_before: Option<DateTime<Utc>>,
    },
    Cancel(ActivityCancel),
    /// A retry notice: the parent resumed; a parked request takes it as a fresh budget.
    Retry(ActivityRetry),
    /// Unreadable (or too large): dead-lettered.
    Undecodable {
        reason: DlqReason,
        error: String,
    },
}

/// One record read from an owned partition. `source` is whatever the driver needs to
/// dead-letter the record or continue its trace (the message itself, in production); the
/// core hands it back in the effects about the record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record<S> {
    pub partition: RoutePartition,
    pub offset: i64,
    /// The record's timestamp; `None`: unknown (the instant it is handled at is taken).
    pub written_at: Option<DateTime<Utc>>,
    pub source: S,
    pub body: Body,
}

/// What the committed offset of an assigned partition is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    /// Its metadata text (empty: none).
    pub metadata: String,
}

/// What an external service's consumer group says about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceCheck {
    /// The group has committed past the request: the service answered.
    Answered,
    /// It has not: the request is answered `timed-out`.
    NotAnswered,
    /// The group cannot be asked now (no client, its offsets could not be read): asked again
    /// in a second ([`external::checked`]).
    Unavailable,
}

/// An input of the core.
// A record is the largest input and the most frequent: boxing it would cost an allocation
// per record for inputs that are moved once into `handle` and never kept.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Input<S> {
    /// A take-over: these partitions are owned now, each with its committed offset (`None`:
    /// nothing committed). Everything held before is forgotten (as by [`Input::Revoked`]).
    Assigned(Vec<(RoutePartition, Option<Committed>)>),
    /// Nothing is owned any more (a rebalance, a failed commit, a restarted client):
    /// running attempts are aborted, paused partitions resumed, what is not committed
    /// forgotten.
    Revoked,
    Record(Record<S>),
    /// An attempt ended with `result`; `jitter` is a uniform draw in `[0, 1)` for the
    /// backoff of a retry.
    AttemptFinished {
        id: AttemptId,
        result: ExecutionResult,
        jitter: f64,
    },
    /// The check of an external service's consumer group ended.
    ServiceChecked {
        id: AttemptId,
        check: ServiceCheck,
    },
    /// Time passes: fire what is due, start what is ready, pause or resume partitions,
    /// commit what waited long enough.
    Tick,
    /// The last [`Effect::Commit`] committed.
    Committed,
    /// The request topics of the routes an operator paused (`weir route pause`, read from
    /// `weir.control`: [`crate::control`]), the whole set each time. No attempt of a paused
    /// route's request starts (attempts running go on; retries and new requests wait) and its
    /// partitions are not fetched (from a take-over on too), so its requests wait in Kafka;
    /// the requests already read have their deadlines, unknown functions and external checks
    /// answered as always, the others once they are read after the resume. (An external
    /// route's topic listed here is not fetched either; `weir route pause` refuses one.)
    TopicsPaused(std::collections::BTreeSet<String>),
    /// Commit what is finished now, whatever the interval (the worker leaves or stops);
    /// with `interrupt`, running attempts are aborted first (their requests run again at the
    /// next owner).
    Flush {
        interrupt: bool,
    },
}

/// A record to produce in the next commit.
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing<S> {
    /// The answer to the parent: `weir.responses`, keyed by `parent`; `ffqn` is the
    /// activity's (for what the driver says if the answer cannot be sent as it is).
    Answer {
        parent: ExecutionId,
        ffqn: Ffqn,
        response: Response,
        source: S,
    },
    /// A pause of the parent of a request just parked (`weir.responses`, keyed by the parent,
    /// header `weir.kind = pause-execution`); `activity` is the parked request's activity,
    /// `source` its record.
    Pause {
        request: PauseRequest,
        activity: ExecutionId,
        source: S,
    },
    /// A copy of the record for the DLQ.
    DeadLetter {
        source: S,
        reason: DlqReason,
        error: String,
    },
}

impl<S> Outgoing<S> {
    /// The answered activity's id (`None` for a dead letter).
    pub fn answered(&self) -> Option<&ExecutionId> {
        match self {
            Outgoing::Answer {
                response:
                    Response::ChildExecutionFinished {
                        child_execution_id, ..
                    },
                ..
            } => Some(child_execution_id),
            _ => None,
        }
    }
}

/// One commit: its records, produced first, and the progress of every partition whose
/// progress moved (its frontier as the offset, [`Progress::metadata`] as the offset's
/// metadata), committed once they are acknowledged.
#[derive(Clone, Debug, PartialEq)]
pub struct Commit<S> {
    pub records: Vec<Outgoing<S>>,
    pub progress: Vec<(RoutePartition, Progress)>,
    /// Input records it finishes.
    pub finished: u64,
}

/// An attempt to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Start<S> {
    pub id: AttemptId,
    pub partition: RoutePartition,
    pub offset: i64,
    pub attempt: u32,
    pub request: ActivityRequest,
    /// The attempt ends by then at the latest (its timeout, cut to the deadline).
    pub timeout: Option<Duration>,
    pub source: S,
}

/// What the driver does, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect<S> {
    /// Read `partition` from `offset` (`None`: from its beginning).
    Seek {
        partition: RoutePartition,
        offset: Option<i64>,
    },
    /// Run an attempt; report it with [`Input::AttemptFinished`].
    Start(Start<S>),
    /// Ask whether `group` committed past `offset` of `partition`; report it with
    /// [`Input::ServiceChecked`].
    CheckService {
        id: AttemptId,
        partition: RoutePartition,
        offset: i64,
        group: String,
    },
    /// Interrupt a running attempt (or check); its result, if one still comes, is ignored.
    Abort { id: AttemptId },
    /// Stop fetching `partition`.
    Pause { partition: RoutePartition },
    /// Fetch `partition` again, from `from` (the record after the last one taken) if known.
    Resume {
        partition: RoutePartition,
        from: Option<i64>,
    },
    /// Produce the records (durably: acknowledged), then commit the progress; report
    /// [`Input::Committed`], or take over ([`Input::Revoked`]) if either failed.
    Commit(Commit<S>),
}

/// What happened since the last [`ActivityCore::take_counters`] (for the metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub attempts: u64,
    pub retries_scheduled: u64,
    pub unknown_requests: u64,
    pub unknown_answered: u64,
    pub cancelled: u64,
    pub deadlines_enforced: u64,
    /// Requests parked (their parents asked to pause) and unparked by a retry notice.
    pub parked: u64,
    pub unparked: u64,
    /// Exhausted requests answered because their partition parked
    /// [`progress::MAX_PARKED`] already.
    pub park_refused: u64,
    /// Attempts a rate limit delayed (each attempt once, when it first found its topic's
    /// bucket empty with a slot free), by topic.
    pub rate_limited: BTreeMap<String, u64>,
}

/// What stands now (for the metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub running: usize,
    pub waiting: usize,
    pub paused: usize,
    /// Parked requests (exhausted, their parents paused).
    pub parked: usize,
    /// Ready attempts the last start found waiting for a token of their topic's rate limit.
    pub rate_held: usize,
}
