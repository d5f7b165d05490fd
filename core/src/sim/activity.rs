//! The simulated activity workers (`Faults::activity_workers`): processes that run the very
//! rules the Kafka activity worker runs ([`crate::activity::ActivityCore`]). Each scheduler
//! step of one is a turn of its loop: poll the activity workers' group (the eager protocol,
//! as the workflow workers' group in `cluster.rs`), take over from the committed offsets and
//! their metadata (fetched as stable: not while an open transaction holds offsets of an
//! owned partition), fetch records of the route topics, feed the finished attempts, the
//! records and a tick to the core, and execute its effects. A commit takes two steps
//! (produce; then send the offsets and commit), so that a kill or a freeze can come between
//! them: a transaction left hanging, or a zombie whose answers the next owner produces again
//! and whose own are aborted when its offsets are refused.
//!
//! Attempts are simulated: attempt `n` of activity `c` fails (a trap) while `n <=
//! failures(c)` (0 to 2, from `c`'s hash) and otherwise answers `2x + 1`; the retry policy
//! allows 4 attempts without jitter, so every request is answered with its value in the end
//! (what the workflows' results are checked against), after retries that cross kills and
//! take-overs; a request with a deadline answers at its first attempt, within its bound. An
//! attempt ends after a drawn latency (some of seconds: a kill finds attempts in flight).
//!
//! The external route ([`Topic::External`]) is watched until [`EXTERNAL_TIMEOUT`]; the
//! outside service (`World::service_step`) answers its requests late, twice or never, and
//! commits its own group's offset past the requests it answered, in order.
//!
//! [`ActivityLog`] records what `check_activity` needs, in one sequence: every attempt
//! started, every failure handled, every answer produced and committed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use super::cluster::{SimTime, Topic};
use super::process::Status;
use super::workflows::activity_result;
use crate::activity::{ActivityCore, AttemptId, Commit, CoreConfig, Input, RoutePartition};
use crate::model::{ExecutionError, ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::retry::RetryPolicy;

/// How long a request of the external route is watched (its declaration's `timeout_ms`).
pub const EXTERNAL_TIMEOUT: StdDuration = StdDuration::from_secs(3);
/// The outside service's consumer group (when the route names it).
pub const SERVICE_GROUP: &str = "sim.external-service";

/// The retries of the simulated activity: 4 attempts, 500 ms doubling, no jitter.
pub fn retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        backoff_base: StdDuration::from_millis(500),
        backoff_max: StdDuration::from_secs(4),
        jitter: 0.0,
        retry_on_err: false,
        on_exhausted: crate::retry::OnExhausted::Answer,
    }
}

/// How many attempts of `child` fail before one answers (0 to 2).
pub fn failures(child: &ExecutionId) -> u32 {
    (child.stable_hash() % 3) as u32
}

/// What attempt `attempt` of `child` with `params` ends with.
pub fn attempt_result(
    child: &ExecutionId,
    attempt: u32,
    params: &serde_json::Value,
) -> ExecutionResult {
    if attempt <= failures(child) {
        ExecutionResult::ExecutionError(ExecutionError::new(
            ExecutionErrorKind::Trap,
            format!("attempt {attempt} of {child} crashed (simulated)"),
        ))
    } else {
        activity_result(params)
    }
}

/// What the simulated driver keeps of a record: its copy, for a dead letter.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSource {
    pub topic: Topic,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub bytes: Vec<u8>,
    pub timestamp: SimTime,
}

/// An attempt (or a check of the service's group) in flight.
#[derive(Debug, Clone)]
pub enum Running {
    Attempt {
        due: SimTime,
        child: ExecutionId,
        attempt: u32,
        result: ExecutionResult,
    },
    Check {
        due: SimTime,
        partition: i32,
        offset: i64,
    },
}

impl Running {
    pub(super) fn due(&self) -> SimTime {
        match self {
            Running::Attempt { due, .. } | Running::Check { due, .. } => *due,
        }
    }
}

/// One activity worker process.
#[derive(Debug)]
pub struct ActProc {
    pub pid: u64,
    pub slot: u32,
    pub status: Status,
    pub member: Option<u64>,
    pub generation: u64,
    pub owned: BTreeSet<i32>,
    /// Has taken over the partitions of its generation (restored their progress).
    pub taken_over: bool,
    pub positions: BTreeMap<(Topic, i32), i64>,
    pub paused: BTreeSet<(Topic, i32)>,
    pub core: ActivityCore<SimSource>,
    pub running: BTreeMap<AttemptId, Running>,
    /// A commit whose records are produced (acknowledged), its offsets not committed yet.
    pub producing: Option<Commit<SimSource>>,
    /// Asked to stop: the next step flushes and leaves.
    pub shutdown: bool,
    pub at: &'static str,
}

impl ActProc {
    pub fn name(&self) -> String {
        format!("a{}/p{}", self.slot, self.pid)
    }

    /// Forgets everything not committed (a revoke, a refused commit).
    pub(super) fn revoke(&mut self, now: SimTime) {
        self.core.handle(Input::Revoked, now);
        self.running.clear();
        self.paused.clear();
        self.positions.clear();
        self.taken_over = false;
    }
}

/// An attempt started.
#[derive(Debug, Clone)]
pub struct Started {
    pub seq: u64,
    pub at: SimTime,
    pub pid: u64,
    pub child: ExecutionId,
    pub attempt: u32,
}

/// A request parked (`Faults::exhausted_pauses`): its parent's pause produced.
#[derive(Debug, Clone)]
pub struct Park {
    pub seq: u64,
    pub at: SimTime,
    pub pid: u64,
    pub child: ExecutionId,
    pub parent: ExecutionId,
}

/// Everything the checks need, in one sequence (`seq`).
#[derive(Debug, Clone, Default)]
pub struct ActivityLog {
    pub seq: u64,
    pub started: Vec<Started>,
    /// A failed attempt fed to a core (the retry decided then, if any).
    pub failed: Vec<Started>,
    /// Answers produced (each visible at once): (seq, pid, child).
    pub produced: Vec<(u64, u64, ExecutionId)>,
    /// The first answer of each activity whose progress committed: (seq, when).
    pub committed: BTreeMap<ExecutionId, (u64, SimTime)>,
    /// How many commits whose progress committed carried an answer of each activity.
    pub progress_committed: BTreeMap<ExecutionId, u64>,
    /// The not-before header of requests sent as later attempts (inline retries), by
    /// (topic, partition, offset).
    pub headers: BTreeMap<(Topic, i32, i64), SimTime>,
    /// Parks (`Faults::exhausted_pauses`): their parents' pauses produced…
    pub parks: Vec<Park>,
    /// …and those whose commit's progress (marking the request parked) committed: (seq,
    /// pid, child).
    pub parks_committed: Vec<(u64, u64, ExecutionId)>,
    /// Retry notices fetched by a process: (seq, pid, child).
    pub notices: Vec<(u64, u64, ExecutionId)>,
    /// The activities each committed progress marks parked: (seq, topic, partition, them).
    pub progress_parked: Vec<(u64, Topic, i32, Vec<ExecutionId>)>,
}

impl ActivityLog {
    pub(super) fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// What the runs did (to check that they exercise the rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActivityCounts {
    pub attempts: u64,
    pub failures: u64,
    /// Attempts in flight when their process was killed.
    pub lost_in_flight: u64,
    /// Offset commits refused (a zombie's, after a rebalance): their answers were produced
    /// already, and are answered again by the next owner.
    pub refused_commits: u64,
    /// Running attempts aborted by a cancellation.
    pub cancel_aborts: u64,
    /// Take-overs that restored a retry (a mark with an attempt) from the metadata.
    pub restored_retries: u64,
    pub pauses: u64,
    /// External requests checked against the service's group: answered by it, or not.
    pub service_answered: u64,
    pub service_not_answered: u64,
    /// Activities answered more than once on `weir.responses` (a zombie's answer, or one
    /// whose progress a crash or a refused commit lost; the parent journals one).
    pub produced_twice: u64,
    /// Retries (attempt `n > 1`) started by another process than the one whose attempt
    /// `n − 1` failed: resumed from the committed metadata.
    pub retried_elsewhere: u64,
}

impl std::ops::AddAssign for ActivityCounts {
    fn add_assign(&mut self, o: Self) {
        self.produced_twice += o.produced_twice;
        self.retried_elsewhere += o.retried_elsewhere;
        self.attempts += o.attempts;
        self.failures += o.failures;
        self.lost_in_flight += o.lost_in_flight;
        self.refused_commits += o.refused_commits;
        self.cancel_aborts += o.cancel_aborts;
        self.restored_retries += o.restored_retries;
        self.pauses += o.pauses;
        self.service_answered += o.service_answered;
        self.service_not_answered += o.service_not_answered;
    }
}

/// The outside service of the external route: what it read, what it will answer, what it
/// committed.
#[derive(Debug, Clone, Default)]
pub struct Service {
    /// Requests read and not answered yet (or never to be): (partition, offset).
    pub open: BTreeSet<(i32, i64)>,
    /// Where each activity's request is.
    pub requests: BTreeMap<ExecutionId, (i32, i64)>,
    /// Its group's committed offset per partition: past every request it answered, in
    /// order (a request it never answers holds it back).
    pub committed: BTreeMap<i32, i64>,
}

/// The activity workers of a run.
#[derive(Debug, Default)]
pub struct ActivityWorkers {
    pub procs: BTreeMap<u64, ActProc>,
    pub log: ActivityLog,
    pub counts: ActivityCounts,
    pub service: Service,
    /// The external route names the service's group (drawn per run).
    pub service_group: bool,
    /// The core's configuration of the run (drawn).
    pub config: Option<CoreConfig>,
    /// Retries that end in `paused` (`Faults::exhausted_pauses`): the switches of the
    /// activities that fail until flipped, and the operator's doings.
    pub exhausted: super::exhausted::Exhausted,
    /// The run's rate limits and what the workers did with them (`Faults::rate_limits`).
    pub rates: super::rates::Rates,
}

pub(super) fn topic_of(name: &str) -> Topic {
    if name == Topic::External.name() {
        Topic::External
    } else {
        Topic::Activity
    }
}

pub(super) fn key_of(topic: Topic, partition: i32) -> RoutePartition {
    RoutePartition::new(topic.name(), partition)
}
