//! What a worker does when one of its librdkafka clients fails for good: the one rule,
//! shared by the workflow worker and the activity worker.
//!
//! A consumer or a transactional producer that failed fatally never works again, but the
//! process can: the worker drops both clients of its group member and builds them again in
//! process — a new consumer with the same `group.instance.id` (static membership) and a new
//! transactional producer with the same `transactional.id`, whose `init_transactions` bumps
//! the epoch, aborts whatever the old producer left open and fences it. Everything in memory
//! that is not committed is forgotten by the take-over that follows (the driver's, on the next
//! `Polled::Rebalanced`; the activity worker's `take_over`): exactly-once is the take-over's,
//! not the restart's. Each restart waits a backoff first (1 s, doubling, at most 30 s; back to
//! 1 s after 5 minutes without a failure), is logged at WARN with the group, the transactional
//! id and the cause, and counted in `weir_kafka_client_restarts_total{worker=…}`.
//!
//! **The rule** ([`Recovery::decide`]):
//!
//! - a client that broke ([`Failure::Broken`]: librdkafka's fatal error other than a fencing,
//!   `INVALID_TXN_STATE` while aborting a transaction a restarted broker had already resolved,
//!   an abort that failed, a producer that cannot be registered again) is restarted, always;
//! - a fencing ([`Failure::InstanceFenced`]: the consumer's `FENCED_INSTANCE_ID`;
//!   [`Failure::ProducerFenced`]: `PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`, `_FENCED`) means
//!   that a newer holder of this identity exists. That holder is usually this very process:
//!   when the broker is away longer than the session, librdkafka's own session timeout makes
//!   the static member rejoin under a new member id, and the broker then fences the old one
//!   (librdkafka issue #3437); a producer whose transaction timed out is bumped the same way.
//!   So a fencing that arrives within [`TROUBLE_WINDOW`] of a sign that this process lost the
//!   cluster itself ([`ClusterTrouble`]: librdkafka's `SESSTMOUT`, all brokers down) is this
//!   process's own doing, and is restarted without counting;
//! - a fencing without such a sign may be another live process using the same instance id.
//!   It cannot be told apart for certain from a fencing of our own (librdkafka does not say
//!   who the newer member is), so it is restarted too, but counted: the
//!   [`MAX_UNEXPLAINED_FENCINGS`]th within [`FENCING_WINDOW`] stops the process with an error
//!   naming the instance id. Two live processes with one identity fence each other in turn,
//!   and the first one fenced reaches that count first; a process fenced by its own rejoin
//!   does not get there.
//! - Without a stable identity (no `--instance-id`: members are dynamic and the transactional
//!   id is new every run), nobody else can hold this process's identity: every failure is
//!   restarted.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::transaction::TransactionError;
use crate::store::patience::Patience;

/// The first wait before a restart.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// After this long without a failure, the backoff starts again from [`FIRST_BACKOFF`].
pub const CALM: Duration = Duration::from_secs(300);
/// How long after a sign of its own trouble with the cluster a fencing counts as this
/// process's own doing.
pub const TROUBLE_WINDOW: Duration = Duration::from_secs(120);
/// Fencings without such a sign within this window are counted...
pub const FENCING_WINDOW: Duration = Duration::from_secs(600);
/// ...and this many stop the process.
pub const MAX_UNEXPLAINED_FENCINGS: usize = 3;

/// Whether a client call that failed with `code` may succeed if made again in a moment: the
/// cluster (or this process's connections to it, after a pause) is away for now. A worker's
/// one-off reads (a take-over's catch-up of `weir.history`) retry these within their
/// patience instead of stopping the process; anything else is a real error.
pub fn is_transient(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::LeaderNotAvailable
            | RDKafkaErrorCode::NotLeaderForPartition
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::CoordinatorNotAvailable
    )
}

/// How long a worker makes a one-off call to the cluster again while it fails transiently
/// ([`is_transient`]), when nothing else bounds it: the committed offsets a take-over starts
/// from. Longer than a broker takes to restart or a group's coordinator to move; past it the
/// error is the worker's (it stops, and its supervisor starts it again).
pub const CLUSTER_PATIENCE: Duration = Duration::from_secs(300);

/// `call`, made again while it fails with an error that passes ([`is_transient`]: a process
/// whose connections dropped while it was paused, a broker restarting, a coordinator moving)
/// while `patience` allows, counted from `started` ([`Patience::next_delay`], the store's
/// backoff rule). Blocking: it sleeps between tries; `what` names the call in the warning
/// logged before each retry.
pub fn patiently<T>(
    what: &str,
    patience: &Patience,
    started: Instant,
    mut call: impl FnMut() -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let mut failures = 0;
    loop {
        match call() {
            Err(e) if e.rdkafka_error_code().is_some_and(is_transient) => {
                failures += 1;
                let Some(pause) = patience.next_delay(failures, started.elapsed()) else {
                    return Err(e);
                };
                tracing::warn!(error = %e, retry_in = ?pause, "{what} failed for now; trying again");
                std::thread::sleep(pause);
            }
            other => return other,
        }
    }
}

/// How a client failed, as far as the rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The consumer's group membership was taken by a newer member with its
    /// `group.instance.id` (`FENCED_INSTANCE_ID`).
    InstanceFenced,
    /// The transactional id was registered by a newer producer.
    ProducerFenced,
    /// The client cannot go on for another reason.
    Broken,
}

impl Failure {
    /// The failure of a consumer whose librdkafka fatal error is `code`.
    pub fn of_consumer(code: RDKafkaErrorCode) -> Failure {
        match code {
            RDKafkaErrorCode::FencedInstanceId => Failure::InstanceFenced,
            _ => Failure::Broken,
        }
    }

    /// The failure of the transactional producer, if `error` is one (an aborted batch or a
    /// group that moved on is not: the producer goes on).
    pub fn of_transaction(error: &TransactionError) -> Option<Failure> {
        match error {
            TransactionError::Aborted { .. } | TransactionError::Rebalanced { .. } => None,
            TransactionError::Fenced { .. } => Some(Failure::ProducerFenced),
            TransactionError::Fatal { .. } | TransactionError::Create { .. } => {
                Some(Failure::Broken)
            }
        }
    }

    fn is_fencing(self) -> bool {
        matches!(self, Failure::InstanceFenced | Failure::ProducerFenced)
    }
}

/// What to do about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rebuild the clients after waiting this long.
    Restart { after: Duration },
    /// Another live process most likely holds this process's identity: stop.
    Stop,
}

/// The last sign that this process itself lost the cluster (its session timed out on its own
/// side, or every broker connection was down), noted by the consumers' contexts. Cheap to
/// clone; every clone is the same record, and it outlives the clients that note it.
#[derive(Clone, Debug, Default)]
pub struct ClusterTrouble {
    last: Arc<Mutex<Option<Instant>>>,
}

impl ClusterTrouble {
    pub fn note(&self) {
        *self.lock() = Some(Instant::now());
    }

    pub fn last(&self) -> Option<Instant> {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The restarts of one group member's clients; see the module docs.
#[derive(Debug)]
pub struct Recovery {
    /// The process's identity is stable (`--instance-id`): another process may hold it.
    stable_identity: bool,
    next_backoff: Duration,
    last_failure: Option<Instant>,
    unexplained: VecDeque<Instant>,
}

impl Recovery {
    pub fn new(stable_identity: bool) -> Self {
        Recovery {
            stable_identity,
            next_backoff: FIRST_BACKOFF,
            last_failure: None,
            unexplained: VecDeque::new(),
        }
    }

    /// Decides about `failure` at `now`, `trouble` being the last sign that this process lost
    /// the cluster itself.
    pub fn decide(&mut self, failure: Failure, trouble: Option<Instant>, now: Instant) -> Verdict {
        if self
            .last_failure
            .is_some_and(|last| now.saturating_duration_since(last) >= CALM)
        {
            self.next_backoff = FIRST_BACKOFF;
        }
        self.last_failure = Some(now);
        let own_doing = trouble.is_some_and(|t| now.saturating_duration_since(t) <= TROUBLE_WINDOW);
        if failure.is_fencing() && self.stable_identity && !own_doing {
            while self
                .unexplained
                .front()
                .is_some_and(|&at| now.saturating_duration_since(at) > FENCING_WINDOW)
            {
                self.unexplained.pop_front();
            }
            self.unexplained.push_back(now);
            if self.unexplained.len() >= MAX_UNEXPLAINED_FENCINGS {
                return Verdict::Stop;
            }
        }
        let after = self.next_backoff;
        self.next_backoff = (self.next_backoff * 2).min(MAX_BACKOFF);
        Verdict::Restart { after }
    }

    /// Fencings counted against the identity now (for the log).
    pub fn unexplained_fencings(&self) -> usize {
        self.unexplained.len()
    }
}

/// What a restart was about, for the log: "the consumer …" or "the transactional producer …".
pub fn describe(failure: Failure) -> &'static str {
    match failure {
        Failure::InstanceFenced => "the consumer was fenced (FENCED_INSTANCE_ID)",
        Failure::ProducerFenced => "the transactional producer was fenced",
        Failure::Broken => "a client failed fatally",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;

    #[test]
    fn transient_errors_are_those_that_pass() {
        use RDKafkaErrorCode as C;
        let table = [
            (C::AllBrokersDown, true),
            (C::BrokerTransportFailure, true),
            (C::OperationTimedOut, true),
            (C::RequestTimedOut, true),
            (C::NotLeaderForPartition, true),
            (C::LeaderNotAvailable, true),
            (C::UnknownTopicOrPartition, false),
            (C::TopicAuthorizationFailed, false),
            (C::Fatal, false),
            (C::InvalidConfig, false),
        ];
        for (code, transient) in table {
            assert_eq!(is_transient(code), transient, "{code:?}");
        }
    }

    fn txn(kind: &str) -> TransactionError {
        let transactional_id = "g-a".to_owned();
        let source = KafkaError::Canceled;
        match kind {
            "aborted" => TransactionError::Aborted {
                transactional_id,
                step: "commit",
                source,
            },
            "rebalanced" => TransactionError::Rebalanced {
                transactional_id,
                source,
            },
            "fenced" => TransactionError::Fenced {
                transactional_id,
                source,
            },
            "fatal" => TransactionError::Fatal {
                transactional_id,
                step: "abort",
                source,
            },
            _ => TransactionError::Create {
                transactional_id,
                source,
            },
        }
    }

    #[test]
    fn errors_are_classified() {
        use RDKafkaErrorCode as Code;
        let table = [
            (Code::FencedInstanceId, Failure::InstanceFenced),
            (Code::InvalidTransactionalState, Failure::Broken),
            (Code::Fatal, Failure::Broken),
            (Code::AllBrokersDown, Failure::Broken),
        ];
        for (code, failure) in table {
            assert_eq!(Failure::of_consumer(code), failure, "{code:?}");
        }
        let table = [
            ("aborted", None),
            ("rebalanced", None),
            ("fenced", Some(Failure::ProducerFenced)),
            ("fatal", Some(Failure::Broken)),
            ("create", Some(Failure::Broken)),
        ];
        for (kind, failure) in table {
            assert_eq!(Failure::of_transaction(&txn(kind)), failure, "{kind}");
        }
    }

    /// Each row: the failures in order, seconds after the start, with the seconds since the
    /// last trouble (none: no trouble seen), and the verdicts expected.
    #[test]
    fn the_rule_as_a_table() {
        use Failure::*;
        const S: Verdict = Verdict::Stop;
        let r = |secs| Verdict::Restart {
            after: Duration::from_secs(secs),
        };
        type Row = (
            &'static str,
            bool,
            Vec<(u64, Failure, Option<u64>)>,
            Vec<Verdict>,
        );
        let table: Vec<Row> = vec![
            (
                "broken clients are always restarted, backoff doubling to 30 s",
                true,
                (0..7).map(|i| (i * 10, Broken, None)).collect(),
                vec![r(1), r(2), r(4), r(8), r(16), r(30), r(30)],
            ),
            (
                "a fencing after our own session timed out is our own rejoin",
                true,
                (0..6).map(|i| (i * 20, InstanceFenced, Some(5))).collect(),
                vec![r(1), r(2), r(4), r(8), r(16), r(30)],
            ),
            (
                "a producer fenced during a broker outage is our own epoch bump",
                true,
                vec![(0, ProducerFenced, Some(30)), (5, InstanceFenced, Some(35))],
                vec![r(1), r(2)],
            ),
            (
                "fencings without trouble: the third within 10 min stops",
                true,
                vec![
                    (0, InstanceFenced, None),
                    (10, ProducerFenced, None),
                    (20, InstanceFenced, None),
                ],
                vec![r(1), r(2), S],
            ),
            (
                "trouble long ago explains nothing",
                true,
                vec![
                    (200, InstanceFenced, Some(190)),
                    (210, InstanceFenced, Some(200)),
                    (220, InstanceFenced, Some(210)),
                ],
                vec![r(1), r(2), S],
            ),
            (
                "only the fencings of the last 10 min count",
                true,
                vec![
                    (0, InstanceFenced, None),
                    (250, InstanceFenced, None),
                    // The first one is out of the window now; and 6 min of calm reset the
                    // backoff.
                    (620, InstanceFenced, None),
                    (640, InstanceFenced, None),
                ],
                vec![r(1), r(2), r(1), S],
            ),
            (
                "without a stable identity nobody else can hold it",
                false,
                (0..4).map(|i| (i * 10, InstanceFenced, None)).collect(),
                vec![r(1), r(2), r(4), r(8)],
            ),
            (
                "the backoff starts again after 5 min without failures",
                true,
                vec![(0, Broken, None), (10, Broken, None), (400, Broken, None)],
                vec![r(1), r(2), r(1)],
            ),
        ];
        let start = Instant::now();
        for (name, stable, failures, expected) in table {
            let mut recovery = Recovery::new(stable);
            let verdicts: Vec<Verdict> = failures
                .iter()
                .map(|&(at, failure, trouble_ago)| {
                    let now = start + Duration::from_secs(at);
                    let trouble = trouble_ago.map(|ago| now - Duration::from_secs(ago));
                    recovery.decide(failure, trouble, now)
                })
                .collect();
            assert_eq!(verdicts, expected, "{name}");
        }
    }
}
