//! A worker's place in its consumer group, shared by the workflow, activity and trigger
//! workers: how a worker runs ([`WorkerConfig`], whose defaults are [`crate::options`]'s),
//! its member ([`GroupMember`]: the subscribed consumer, what its rebalances did, the
//! transactional producer that commits its batches), how a member joins and is rebuilt
//! after one of its clients failed ([`super::recovery`]), and what a worker stops with
//! ([`WorkerError`]).
//!
//! A member's identity is fixed by its config: the transactional id is
//! `<group>-<instance id>` (namespaced by the group, so that deployments sharing a cluster
//! never fence each other), and a rebuilt member keeps it, so that its new producer fences
//! whatever the old one left open. Only the members that commit batches in transactions (the
//! workflow and trigger workers') have one ([`MemberProducer`]); the activity worker's
//! commits through its consumer and has no transactional id.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use tokio::sync::watch;
use tracing::{info, warn};
use weir_core::driver::DriverError;

use super::KafkaConfig;
use super::config::MemberSettings;
use super::group::{Departure, RebalanceTracker};
use super::materialiser::{MaterialiseError, QueueBound};
use super::recovery::{self, ClusterTrouble, Failure, Recovery, Verdict};
use super::transaction::{TransactionError, Transactor};
use crate::metrics::{Counter, Metrics};
use crate::store::StoreError;
use crate::wasm::inline::InlineConfig;

/// How a worker runs (the workflow worker; the activity and trigger workers take the group
/// membership part).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub kafka: KafkaConfig,
    /// Unique among the live processes of a deployment: part of the transactional id and the
    /// checkpoint owner, and with [`static_membership`](Self::static_membership) the
    /// `group.instance.id` of its consumers.
    pub instance_id: String,
    /// The instance id is the process's stable identity (a StatefulSet pod name, a container
    /// name), the same after a restart: its consumers are static members of their groups
    /// (`group.instance.id` = the instance id, KIP-345), so a worker restarted within its
    /// session gets its partitions back without a rebalance, and its transactional id (which
    /// holds the instance id) fences the dead process's open transaction at once. `false`: a
    /// dynamic member, whose partitions wait for the dead member's session to expire and for
    /// its transaction to time out.
    pub static_membership: bool,
    /// How long a member that stopped heartbeating keeps its partitions.
    pub session_timeout: Duration,
    /// The process's request to leave the groups (on SIGTERM / SIGINT), shared by its members.
    pub departure: Departure,
    /// Where the group member's consumer and producer count (unfetchable records, committed
    /// dead letters): the same as the worker's.
    pub metrics: Arc<Metrics>,
    pub group_id: String,
    /// How long a batch waits for more input after its first record (zero: it is committed
    /// as soon as nothing more is ready; see [`super::group::collect_batch`]), at most `max_batch_records`.
    pub commit_interval: Duration,
    pub max_batch_records: usize,
    /// The bytes the cached executions may hold (`--cache-bytes`).
    pub cache_bytes: u64,
    /// At most this many parked workflow runs (`--cache-size`).
    pub cache_size: usize,
    /// Input records larger than this go to the DLQ.
    pub max_record_bytes: usize,
    /// The store is written at most once per this (see [`super::materialiser::Materialiser::spawn`]).
    pub materialise_linger: Duration,
    /// Committed batches that may wait for the store before the worker waits for it.
    pub materialise_queue: QueueBound,
    /// Timers due within this horizon are held in memory.
    pub timer_horizon: Duration,
    /// Activities the workflow worker answers itself (`weir_core::inline`).
    pub inline: InlineConfig,
    pub transaction_timeout: Duration,
    /// How long a store outage is ridden out before the worker stops.
    pub store_patience: Duration,
    /// How long an event for an execution that does not exist waits for its submission.
    pub early_event_wait: Duration,
    /// Signs that this process lost the cluster itself, shared by the process's members (see
    /// [`super::recovery`]).
    pub trouble: ClusterTrouble,
}

/// A worker's place in its consumer group: the subscribed consumer, what its rebalances did,
/// and what commits its batches (`T`: the transactional producer, or nothing).
pub(super) struct GroupMember<T = Transactor> {
    pub consumer: StreamConsumer<RebalanceTracker>,
    pub tracker: RebalanceTracker,
    pub transactor: T,
}

/// What a member commits its batches with, built with the member and again with each rebuilt
/// one.
pub(super) trait MemberProducer: Sized + Send + 'static {
    fn create(config: &WorkerConfig) -> impl Future<Output = Result<Self, WorkerError>> + Send;
    /// Its transactional id, if it has one (for the logs).
    fn transactional_id(&self) -> Option<&str>;
}

/// The transactional producer `<group>-<instance>`: its registration fences any earlier
/// producer with that id (and aborts what it left open).
impl MemberProducer for Transactor {
    async fn create(config: &WorkerConfig) -> Result<Self, WorkerError> {
        Ok(Transactor::new(
            &config.kafka,
            &format!("{}-{}", config.group_id, config.instance_id),
            config.transaction_timeout,
        )
        .await?
        .with_metrics(Arc::clone(&config.metrics)))
    }

    fn transactional_id(&self) -> Option<&str> {
        Some(Transactor::transactional_id(self))
    }
}

/// No producer: a member whose progress is committed by its consumer (the activity worker,
/// whose answers go through the idempotent producer of `super::answers`; issue 38). It
/// registers no transactional id.
pub(super) struct NoTransactions;

impl MemberProducer for NoTransactions {
    async fn create(_: &WorkerConfig) -> Result<Self, WorkerError> {
        Ok(NoTransactions)
    }

    fn transactional_id(&self) -> Option<&str> {
        None
    }
}

impl WorkerConfig {
    pub fn new(
        kafka: KafkaConfig,
        group_id: impl Into<String>,
        instance_id: impl Into<String>,
    ) -> Self {
        WorkerConfig {
            kafka,
            instance_id: instance_id.into(),
            group_id: group_id.into(),
            commit_interval: Duration::from_millis(crate::options::DEFAULT_COMMIT_INTERVAL_MS),
            max_batch_records: crate::options::DEFAULT_MAX_BATCH,
            cache_bytes: crate::options::DEFAULT_CACHE_BYTES,
            cache_size: crate::options::DEFAULT_CACHE_SIZE,
            max_record_bytes: crate::options::DEFAULT_MAX_RECORD_BYTES,
            materialise_linger: Duration::from_millis(
                crate::options::DEFAULT_MATERIALISE_LINGER_MS,
            ),
            materialise_queue: QueueBound::default(),
            timer_horizon: Duration::from_secs(crate::options::DEFAULT_TIMER_HORIZON_SECS),
            inline: InlineConfig {
                enabled: crate::options::DEFAULT_INLINE_ACTIVITIES,
                budget: Duration::from_millis(crate::options::DEFAULT_INLINE_BUDGET_MS),
            },
            transaction_timeout: Duration::from_millis(
                crate::options::DEFAULT_TRANSACTION_TIMEOUT_MS,
            ),
            store_patience: Duration::from_secs(crate::options::DEFAULT_STORE_PATIENCE_SECS),
            early_event_wait: Duration::from_secs(crate::options::DEFAULT_EARLY_EVENT_WAIT_SECS),
            static_membership: false,
            session_timeout: Duration::from_millis(crate::options::DEFAULT_SESSION_TIMEOUT_MS),
            departure: Departure::default(),
            metrics: Arc::new(Metrics::default()),
            trouble: ClusterTrouble::default(),
        }
    }

    /// How this worker's consumers are members of their groups.
    pub fn member_settings(&self) -> MemberSettings {
        MemberSettings {
            session_timeout: Some(self.session_timeout),
            static_instance_id: self.static_membership.then(|| self.instance_id.clone()),
        }
    }

    /// Subscribes to `topics` in the group (with a partition assignment strategy, if given)
    /// and creates the member's producer `T` (the transactional producer
    /// `<group>-<instance>` — namespaced by the group, so that deployments sharing a cluster
    /// never fence each other — fences any earlier producer with that id).
    pub(super) async fn join_group<T: MemberProducer>(
        &self,
        topics: &[String],
        assignment_strategy: Option<&str>,
    ) -> Result<GroupMember<T>, WorkerError> {
        let consumer_error = |source| WorkerError::Consumer {
            group: self.group_id.clone(),
            source,
        };
        let tracker = RebalanceTracker::new(
            self.departure.clone(),
            self.kafka.clone(),
            Arc::clone(&self.metrics),
            self.trouble.clone(),
        );
        let mut consumer_config = self.kafka.member(&self.group_id, &self.member_settings());
        if let Some(strategy) = assignment_strategy {
            consumer_config.set("partition.assignment.strategy", strategy);
        }
        let consumer: StreamConsumer<RebalanceTracker> = consumer_config
            .create_with_context(tracker.clone())
            .map_err(consumer_error)?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(consumer_error)?;
        let transactor = T::create(self).await?;
        Ok(GroupMember {
            consumer,
            tracker,
            transactor,
        })
    }

    /// [`join_group`](Self::join_group) at a worker's start. A broker that is away (a
    /// transactional producer's `init_transactions` timing out while it restarts) is waited
    /// for, a second at first, doubling to [`START_RETRY_MAX`], as a restart of the member
    /// waits for it, instead of stopping the process; any other failure stops it. `Ok(None)`:
    /// the process is stopping.
    pub(super) async fn join_group_at_start<T: MemberProducer>(
        &self,
        topics: &[String],
        assignment_strategy: Option<&str>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<GroupMember<T>>, WorkerError> {
        let mut wait = Duration::from_secs(1);
        loop {
            match self.join_group(topics, assignment_strategy).await {
                Ok(member) => return Ok(Some(member)),
                Err(e) if e.is_broker_away() => {
                    warn!(group = %self.group_id, error = %e, retry_in = ?wait, "cannot join the group yet: the broker is away; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = shutdown.changed() => return Ok(None),
                    }
                    if *shutdown.borrow() {
                        return Ok(None);
                    }
                    wait = (wait * 2).min(START_RETRY_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Replaces `member`, one of whose clients failed with `failure` (`cause`), by a new
    /// member of the same group with the same identity (`group.instance.id`, transactional
    /// id): see [`super::recovery`]. Waits the backoff first, and again while the new clients
    /// cannot be built (the broker still away). Counts the restart in `restarts`. `Ok(false)`:
    /// the process is stopping, nothing was replaced. Errs when the rule says that another live
    /// process holds this identity.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn restart_member<T: MemberProducer>(
        &self,
        member: &mut GroupMember<T>,
        topics: &[String],
        assignment_strategy: Option<&str>,
        recovery: &mut Recovery,
        failure: Failure,
        cause: String,
        restarts: &Counter,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, WorkerError> {
        let transactional_id = member
            .transactor
            .transactional_id()
            .unwrap_or("none")
            .to_owned();
        let mut cause = cause;
        let mut failure = failure;
        loop {
            let after = match recovery.decide(failure, self.trouble.last(), Instant::now()) {
                Verdict::Restart { after } => after,
                Verdict::Stop => {
                    return Err(WorkerError::IdentityTaken {
                        group: self.group_id.clone(),
                        instance_id: self.instance_id.clone(),
                        fencings: recovery.unexplained_fencings(),
                        cause,
                    });
                }
            };
            warn!(
                group = %self.group_id,
                %transactional_id,
                instance = %self.instance_id,
                failure = recovery::describe(failure),
                %cause,
                ?after,
                "a Kafka client of this worker failed; rebuilding its consumer (and its transactional producer, if it has one) in process (uncommitted work is dropped and taken over again)"
            );
            tokio::select! {
                () = tokio::time::sleep(after) => {}
                _ = shutdown.changed() => return Ok(false),
            }
            if *shutdown.borrow() {
                return Ok(false);
            }
            match self.join_group(topics, assignment_strategy).await {
                Ok(new) => {
                    let old = std::mem::replace(member, new);
                    retire(old);
                    restarts.inc();
                    info!(group = %self.group_id, %transactional_id, "Kafka clients rebuilt; rejoining the group");
                    return Ok(true);
                }
                Err(e) => {
                    cause = format!("cannot rebuild the clients: {e}");
                    failure = Failure::Broken;
                }
            }
        }
    }
}

/// The longest wait between two tries to join a group at a worker's start while the broker
/// is away.
pub const START_RETRY_MAX: Duration = Duration::from_secs(10);

/// Drops a member's failed clients (off the async threads: closing a consumer blocks), and
/// counts it as gone for the process's [`Departure`]. Its open transaction, if any, was
/// already aborted and its producer fenced by the new producer's `init_transactions`.
fn retire<T: MemberProducer>(old: GroupMember<T>) {
    use super::group::MemberContext;
    old.consumer.context().left();
    tokio::task::spawn_blocking(move || drop(old));
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot create the consumer of group `{group}`: {source}")]
    Consumer {
        group: String,
        source: rdkafka::error::KafkaError,
    },
    /// A take-over could not read the committed offsets it starts from (or seek to them),
    /// after fetching them again while the cluster failed transiently
    /// ([`super::group::fetch_committed`]).
    #[error(
        "cannot take the partitions of group `{group}` over from their committed offsets: {source}"
    )]
    TakeOver {
        group: String,
        source: rdkafka::error::KafkaError,
    },
    /// The consumer cannot go on (librdkafka's fatal error); the worker rebuilds it (see
    /// [`super::recovery`]). A fencing here is most often this process's own rejoin after its
    /// session timed out (a broker away longer than the session).
    #[error(
        "the consumer of group `{group}` (instance id `{instance_id}`) failed fatally \
         ({code:?}: {reason})"
    )]
    ConsumerFatal {
        group: String,
        instance_id: String,
        code: rdkafka::types::RDKafkaErrorCode,
        reason: String,
    },
    /// Fenced again and again without this process having lost the cluster first (see
    /// [`super::recovery`]): another live process most likely uses the instance id.
    #[error(
        "the identity of this worker in group `{group}` was taken {fencings} times within \
         10 minutes although this process had not lost the cluster: another live worker most \
         likely uses the instance id `{instance_id}` (instance ids must be unique); last: {cause}"
    )]
    IdentityTaken {
        group: String,
        instance_id: String,
        fencings: usize,
        cause: String,
    },
    #[error(transparent)]
    Transaction(Box<TransactionError>),
    /// The activity worker's commit of answers and progress failed (`super::answers`).
    #[error("activity commit: {0}")]
    Answers(Box<super::answers::AnswerError>),
    /// The schema registry did not answer (the trigger worker reading an Avro record's
    /// schema); nothing of the batch was committed.
    #[error("schema registry: {0}")]
    Registry(Box<crate::codec::RegistryError>),
    /// A record cannot be encoded for `topic` (with a schema registry: its schema is not
    /// registered there).
    #[error("cannot encode a record for `{topic}`: {source}")]
    Encode {
        topic: String,
        source: Box<crate::codec::EncodeError>,
    },
    #[error("store: {0}")]
    Store(Box<StoreError>),
    #[error(transparent)]
    Materialise(#[from] MaterialiseError),
    #[error(transparent)]
    Driver(#[from] DriverError),
}

// Boxed: the errors of librdkafka and the CQL driver are large.
impl WorkerError {
    /// Whether it says that the broker did not answer in time (a client to build again
    /// later), not that something is wrong with this worker.
    pub fn is_broker_away(&self) -> bool {
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode as Code;
        let WorkerError::Transaction(e) = self else {
            return false;
        };
        let TransactionError::Create {
            source: KafkaError::Transaction(e),
            ..
        } = e.as_ref()
        else {
            return false;
        };
        e.is_retriable()
            || matches!(
                e.code(),
                Code::OperationTimedOut | Code::AllBrokersDown | Code::BrokerTransportFailure
            )
    }
}

impl From<TransactionError> for WorkerError {
    fn from(e: TransactionError) -> Self {
        WorkerError::Transaction(Box::new(e))
    }
}

impl From<StoreError> for WorkerError {
    fn from(e: StoreError) -> Self {
        WorkerError::Store(Box::new(e))
    }
}
