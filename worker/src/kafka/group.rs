//! A consumer-group member that tells its owner about rebalances.
//!
//! librdkafka runs rebalance callbacks inside `poll`. The worker only polls while it collects a
//! batch, never while a transaction is open, so a rebalance can never cut a transaction in two;
//! the context just records that one happened so that the batch collected across it is dropped
//! (nothing of it was committed, and the eager protocol resets every position to the committed
//! offsets when it reassigns).
//!
//! Leaving the group is a step of its own ([`Departure`]): on SIGTERM or SIGINT the process asks
//! every member to leave, each does so at its next poll (never inside a transaction), and only
//! then are the workers stopped. A static member (`group.instance.id`) does not leave when its
//! consumer is closed (KIP-345), so it must unsubscribe and wait until it has left while still
//! polling.
//!
//! A record librdkafka cannot fetch (a batch it cannot decompress or parse) would be fetched
//! again forever; [`collect_batch`] hands such errors to the member's context, which finds the
//! partition and skips the batch ([`super::unfetchable`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::types::RDKafkaErrorCode;
use tracing::{error, info, warn};

use super::KafkaConfig;
use super::recovery::{self, ClusterTrouble};
use super::unfetchable::{self, Skip};
use crate::metrics::Metrics;
use crate::store::patience::Patience;

/// The process's request to its group members to leave their groups, and how many have.
/// Cheap to clone; every clone is the same request.
#[derive(Clone, Debug, Default)]
pub struct Departure {
    inner: Arc<DepartureState>,
}

#[derive(Debug, Default)]
struct DepartureState {
    requested: AtomicBool,
    members: AtomicUsize,
    left: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Departure {
    /// Asks every member to leave its group at its next poll.
    pub fn request(&self) {
        self.inner.requested.store(true, Ordering::SeqCst);
        self.inner.changed.notify_waiters();
    }

    pub fn requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }

    /// Members that joined and have not left yet.
    pub fn remaining(&self) -> usize {
        let members = self.inner.members.load(Ordering::SeqCst);
        members.saturating_sub(self.inner.left.load(Ordering::SeqCst))
    }

    /// Waits until every member that joined has left, at most `timeout`; `false` on timeout.
    pub async fn all_left(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let changed = self.inner.changed.notified();
                if self.remaining() == 0 {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    fn joined(&self) {
        self.inner.members.fetch_add(1, Ordering::SeqCst);
    }

    fn has_left(&self) {
        self.inner.left.fetch_add(1, Ordering::SeqCst);
        self.inner.changed.notify_waiters();
    }
}

/// What [`collect_batch`] asks of its consumer's context: whether to leave the group, and what
/// to do about a record that cannot be fetched. The defaults do nothing but log (for consumers
/// outside a worker, e.g. benches).
pub trait MemberContext: ConsumerContext + Sized + 'static {
    /// Whether this member should leave its group now (and has not yet).
    fn should_leave(&self) -> bool {
        false
    }

    /// Called once the member has left.
    fn left(&self) {}

    /// Called with a fetch error the consumer surfaced (see [`unfetchable::is_fetch_error`]).
    fn unfetchable(&self, _consumer: &StreamConsumer<Self>, error: &KafkaError) -> Option<Skip> {
        error!(%error, "a record cannot be fetched");
        None
    }
}

impl MemberContext for rdkafka::consumer::DefaultConsumerContext {}

/// What the worker needs to know about its group membership.
#[derive(Debug, Default)]
pub struct Membership {
    /// Bumped at every revocation or assignment.
    pub generation: u64,
    /// The partitions (of the first subscribed topic; all subscribed topics are co-partitioned)
    /// this member owns now.
    pub partitions: BTreeSet<i32>,
}

/// Consumer context recording rebalances. Never commits offsets: they are committed by the
/// producer's transactions only (a consumer that commits on its own, even on revoke, would
/// overwrite them).
#[derive(Clone, Default)]
pub struct RebalanceTracker {
    membership: Arc<Mutex<Membership>>,
    departure: Departure,
    left: Arc<AtomicBool>,
    /// How to reach Kafka for the probes of [`unfetchable`]; none: unfetchable records are
    /// only logged.
    kafka: Option<KafkaConfig>,
    metrics: Option<Arc<Metrics>>,
    /// Where signs that this process lost the cluster itself are noted (see
    /// [`super::recovery`]).
    trouble: ClusterTrouble,
}

impl RebalanceTracker {
    /// A tracker of a worker's member: it leaves its group when `departure` is requested,
    /// skips records it cannot fetch (probing with `kafka`, counting them in `metrics`), and
    /// notes in `trouble` when its session timed out on its own side or every broker was down.
    pub fn new(
        departure: Departure,
        kafka: KafkaConfig,
        metrics: Arc<Metrics>,
        trouble: ClusterTrouble,
    ) -> Self {
        departure.joined();
        RebalanceTracker {
            departure,
            kafka: Some(kafka),
            metrics: Some(metrics),
            trouble,
            ..RebalanceTracker::default()
        }
    }

    pub fn snapshot(&self) -> (u64, BTreeSet<i32>) {
        let m = self.lock();
        (m.generation, m.partitions.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Membership> {
        self.membership
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ClientContext for RebalanceTracker {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown) {
            self.trouble.note();
        }
        log_client_error(&error, reason);
    }

    /// librdkafka's log, as rdkafka logs it by default (target `librdkafka`); a session that
    /// timed out on this member's side (`SESSTMOUT`: no answer from the coordinator for a
    /// whole session) is noted as trouble: the member rejoins under a new member id, and the
    /// fencing of its old id that may follow is its own doing.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as Level;
        if fac == "SESSTMOUT" {
            self.trouble.note();
        }
        match level {
            Level::Emerg | Level::Alert | Level::Critical | Level::Error => {
                error!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
            Level::Warning => warn!(target: "librdkafka", "librdkafka: {fac} {log_message}"),
            Level::Notice | Level::Info => {
                info!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
            Level::Debug => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
        }
    }
}

/// librdkafka's client errors, logged by what they mean: the end of a partition (consumers
/// with `enable.partition.eof`) is no error at all, and a fetch error is handled by the member
/// (logged there with its partition and offsets).
pub fn log_client_error(error: &KafkaError, reason: &str) {
    use rdkafka::types::RDKafkaErrorCode as Code;
    match error.rdkafka_error_code() {
        Some(Code::PartitionEOF) => tracing::trace!(%reason, "end of partition"),
        _ if unfetchable::is_fetch_error(error) => warn!(%error, %reason, "fetch error"),
        _ => error!("librdkafka: {error}: {reason}"),
    }
}

/// The context of Weir's consumers outside a group (catch-up's reader of `weir.history`): its
/// client errors are logged by [`log_client_error`], so the end of a partition, which catch-up
/// waits for, is not an error in the log.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ConsumerContext for QuietEof {}

impl MemberContext for RebalanceTracker {
    fn should_leave(&self) -> bool {
        self.departure.requested() && !self.left.load(Ordering::SeqCst)
    }

    fn left(&self) {
        if !self.left.swap(true, Ordering::SeqCst) {
            self.departure.has_left();
        }
    }

    fn unfetchable(&self, consumer: &StreamConsumer<Self>, error: &KafkaError) -> Option<Skip> {
        let Some(kafka) = &self.kafka else {
            error!(%error, "a record cannot be fetched");
            return None;
        };
        let skip = unfetchable::find_and_skip(consumer, kafka, error)?;
        if let Some(metrics) = &self.metrics {
            metrics
                .unfetchable_offsets_skipped
                .add((skip.to - skip.from).max(0) as u64);
        }
        Some(skip)
    }
}

impl ConsumerContext for RebalanceTracker {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let mut m = self.lock();
            m.generation += 1;
            for element in list.elements() {
                m.partitions.remove(&element.partition());
            }
            info!(revoked = ?partitions(list), "partitions revoked");
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            let mut m = self.lock();
            m.generation += 1;
            m.partitions
                .extend(list.elements().iter().map(|e| e.partition()));
            info!(assigned = ?partitions(list), "partitions assigned");
        }
    }

    fn commit_callback(&self, _result: KafkaResult<()>, _offsets: &TopicPartitionList) {}
}

fn partitions(list: &TopicPartitionList) -> Vec<(String, i32)> {
    list.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// How long one fetch of committed offsets may wait for them to be stable.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(120);

/// The committed offsets (with their metadata) of `partitions` for `consumer`'s group, where
/// a take-over starts from. Fetched as stable (KIP-447): the fetch waits until a previous
/// owner's open transaction on these partitions is resolved, up to its transaction timeout.
/// Fetched again while the cluster fails transiently — the coordinator moved (a commit that
/// failed with `NOT_COORDINATOR` is followed by a take-over that meets the same), a broker
/// restarts — within [`recovery::CLUSTER_PATIENCE`]: a worker rides that out instead of
/// stopping (`tests/tests/broker_restart.rs` saw it stop). A blocking call, run off the
/// async scheduling (the worker runs on tokio's multi-threaded runtime).
///
/// A consumer that failed fatally (fenced: another member took its `group.instance.id`,
/// most often its own rejoin after a broker was away longer than the session) is not fetched
/// with again: the fetch fails at once with [`RDKafkaErrorCode::Fatal`] instead of being
/// tried again for minutes, and the worker's loop rebuilds the member
/// ([`unless_fenced`]).
///
/// `failpoint` names the point (see [`crate::failpoints`]) at which a test makes the first
/// fetch fail as a coordinator that moved does; `<failpoint>-fenced` the point at which it
/// makes the consumer fail fatally before it fetches (librdkafka's own fatal state, as a
/// fencing leaves it).
pub async fn fetch_committed<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    partitions: &TopicPartitionList,
    failpoint: &str,
) -> KafkaResult<TopicPartitionList> {
    let mut moved = crate::failpoints::failpoint(failpoint).await;
    if crate::failpoints::failpoint(&format!("{failpoint}-fenced")).await {
        fail_fatally(
            consumer,
            "failpoint: fenced while fetching the committed offsets",
        );
    }
    let what = format!(
        "fetching the committed offsets of {} partitions",
        partitions.count()
    );
    let patience = Patience::new(recovery::CLUSTER_PATIENCE);
    let started = Instant::now();
    tokio::task::block_in_place(|| {
        recovery::patiently(&what, &patience, started, || {
            if consumer.client().fatal_error().is_some() {
                return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fatal));
            }
            if std::mem::take(&mut moved) {
                return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::NotCoordinator));
            }
            consumer.committed_offsets(partitions.clone(), COMMITTED_TIMEOUT)
        })
    })
}

/// Puts `consumer` in librdkafka's fatal state with `FENCED_INSTANCE_ID`
/// (`rd_kafka_test_fatal_error`, librdkafka's way to fabricate a fatal error in tests): for
/// failpoints only.
fn fail_fatally<C: ConsumerContext>(consumer: &StreamConsumer<C>, reason: &str) {
    let Ok(reason) = std::ffi::CString::new(reason) else {
        return;
    };
    // SAFETY: `native_ptr` is the live client handle borrowed from `consumer`, `reason` a
    // NUL-terminated string that outlives the call; librdkafka copies it.
    unsafe {
        rdkafka::bindings::rd_kafka_test_fatal_error(
            consumer.client().native_ptr(),
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID,
            reason.as_ptr(),
        );
    }
}

/// `result` of a take-over step, unless it failed because `consumer` failed fatally
/// meanwhile (fenced while it fetched the committed offsets): then `Ok(None)`, and the
/// take-over is left to the worker loop's next turn, which sees the consumer's fatal error,
/// rebuilds the member (new clients, same identity: [`super::recovery`]) and takes over
/// what the new member is assigned. Until then the worker owns nothing it could commit: the
/// fenced consumer's group metadata is refused. The workflow, activity and trigger workers
/// all take over this way, instead of stopping the process.
pub fn unless_fenced<T, E: std::fmt::Display, C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    result: Result<T, E>,
) -> Result<Option<T>, E> {
    match result {
        Err(error) if consumer.client().fatal_error().is_some() => {
            warn!(%error, "take-over cut short: the consumer failed fatally; rebuilding it");
            Ok(None)
        }
        other => other.map(Some),
    }
}

/// Seeks every assigned partition back to its committed offset (the beginning when nothing is
/// committed yet): after an aborted batch or a rebalance, the records read past it must be
/// read again. Returns the committed offsets (partitions with none are left out: until their
/// first record is read, there is nothing to commit for them). The committed offsets are
/// fetched by [`fetch_committed`] (with `failpoint`).
pub async fn rewind_to_committed<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    failpoint: &str,
) -> KafkaResult<Vec<CommittedOffset>> {
    use rdkafka::Offset;
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(Vec::new());
    }
    let committed = fetch_committed(consumer, &assignment, failpoint).await?;
    let mut seek = TopicPartitionList::new();
    let mut positions = Vec::new();
    for element in committed.elements() {
        let offset = match element.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        seek.add_partition_offset(element.topic(), element.partition(), offset)?;
        if let Offset::Offset(o) = offset {
            positions.push(CommittedOffset {
                topic: element.topic().to_owned(),
                partition: element.partition(),
                offset: o,
                metadata: committed_metadata(&element),
            });
        }
    }
    // A list obtained from the consumer must be gone before the consumer is dropped.
    drop(committed);
    consumer.seek_partitions(seek, std::time::Duration::from_secs(30))?;
    Ok(positions)
}

/// A partition's committed offset and the metadata committed with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// The metadata committed with an offset, or empty when it is not text.
pub fn committed_metadata(
    element: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>,
) -> String {
    // rdkafka panics on metadata that is not UTF-8 (anyone can commit to a group).
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        element.metadata().to_owned()
    }))
    .unwrap_or_default()
}

/// How long [`collect_batch`] waits for a first record before it returns an empty batch, so
/// that an idle caller does not spin, yet returns often enough for its loop (due timers,
/// shutdown). A record that arrives meanwhile wakes it at once.
pub const IDLE_POLL: Duration = Duration::from_millis(50);

/// Collects the records of one transaction, at most `max_records`: waits up to [`IDLE_POLL`]
/// for a first record, then takes every record the consumer has ready, and returns as soon
/// as it has none ready — or, with a `linger` above zero, once `linger` has passed since the
/// first record.
///
/// This is group commit: a lone record is committed at once, and under load the batches grow
/// by themselves, since whatever arrives while one batch commits is ready for the next. A
/// linger only trades latency for fewer, larger transactions.
///
/// Rebalance callbacks run inside these polls. When the process asks its members to leave
/// ([`Departure`]), the member leaves its group here and returns nothing. A fetch error (a
/// batch librdkafka cannot decompress or parse) goes to the context, which skips the batch.
pub async fn collect_batch<C: MemberContext>(
    consumer: &StreamConsumer<C>,
    linger: Duration,
    max_records: usize,
) -> Vec<rdkafka::message::OwnedMessage> {
    use futures::FutureExt;
    let start = std::time::Instant::now();
    let mut first_at: Option<std::time::Instant> = None;
    let mut records = Vec::new();
    while records.len() < max_records {
        if consumer.context().should_leave() {
            leave(consumer).await;
            return Vec::new();
        }
        let polled = match first_at {
            None => {
                let remaining =
                    (start + IDLE_POLL).saturating_duration_since(std::time::Instant::now());
                match tokio::time::timeout(remaining, consumer.recv()).await {
                    Ok(polled) => polled,
                    Err(_elapsed) => break,
                }
            }
            // Ready now: the record librdkafka has already fetched (a fresh `recv` polls its
            // queue once before it waits).
            Some(_) if linger.is_zero() => match consumer.recv().now_or_never() {
                Some(polled) => polled,
                None => break,
            },
            Some(first) => {
                let remaining =
                    (first + linger).saturating_duration_since(std::time::Instant::now());
                match consumer.recv().now_or_never() {
                    Some(polled) => polled,
                    None if remaining.is_zero() => break,
                    None => match tokio::time::timeout(remaining, consumer.recv()).await {
                        Ok(polled) => polled,
                        Err(_elapsed) => break,
                    },
                }
            }
        };
        match polled {
            Ok(message) => {
                first_at.get_or_insert_with(std::time::Instant::now);
                records.push(message.detach());
            }
            Err(KafkaError::PartitionEOF(_)) => {}
            Err(e) if unfetchable::is_fetch_error(&e) => {
                // Records already collected come before the bad batch: keep them. The skip
                // seeks past it, so the next poll reads on behind it.
                consumer.context().unfetchable(consumer, &e);
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "consumer error");
                break;
            }
        }
    }
    records
}

/// How long a member waits for its group to acknowledge that it left.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Leaves the group: unsubscribes, and polls (the revocation runs in a poll) until librdkafka
/// has sent its LeaveGroup (it resets the member id then), so that the partitions move to the
/// other members at once instead of after the session timeout. Records polled meanwhile are
/// dropped: nothing of them was committed, and their next owner reads them again.
pub async fn leave<C: MemberContext>(consumer: &StreamConsumer<C>) {
    let started = std::time::Instant::now();
    consumer.unsubscribe();
    loop {
        // Polled at least once: the revocation is served inside a poll.
        let _ = tokio::time::timeout(Duration::from_millis(50), consumer.recv()).await;
        if member_id(consumer).is_none() {
            info!(after = ?started.elapsed(), "left the consumer group");
            break;
        }
        if started.elapsed() > LEAVE_TIMEOUT {
            warn!(
                after = ?started.elapsed(),
                "the consumer group did not acknowledge the leave; its partitions move after the session timeout"
            );
            break;
        }
    }
    consumer.context().left();
}

/// The consumer group's generation id (Kafka's, which grows with every rebalance of the
/// group, whichever member joins or leaves), as librdkafka holds it for this consumer; `None`
/// before the first join, or if librdkafka's serialised group metadata is not the format this
/// reads. It orders the store writes of partition owners (`weir_core::rows::WriteStamp`): a
/// process-local rebalance counter would not, since a new process starts counting from zero.
pub fn group_generation<C: ConsumerContext, T: Consumer<C>>(consumer: &T) -> Option<i32> {
    use rdkafka::bindings::{
        rd_kafka_consumer_group_metadata, rd_kafka_consumer_group_metadata_destroy,
        rd_kafka_consumer_group_metadata_write, rd_kafka_error_destroy, rd_kafka_mem_free,
    };
    let client = consumer.client().native_ptr();
    // SAFETY: `client` is a live consumer handle (borrowed from `consumer`). librdkafka returns
    // a new metadata object (or NULL) that we destroy, and a buffer of `size` bytes allocated
    // by its allocator that we copy and free with it, as its documentation requires.
    let bytes = unsafe {
        let metadata = rd_kafka_consumer_group_metadata(client);
        if metadata.is_null() {
            return None;
        }
        let mut buffer: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let error = rd_kafka_consumer_group_metadata_write(metadata, &mut buffer, &mut size);
        rd_kafka_consumer_group_metadata_destroy(metadata);
        if !error.is_null() {
            rd_kafka_error_destroy(error);
            return None;
        }
        if buffer.is_null() {
            return None;
        }
        let bytes = std::slice::from_raw_parts(buffer.cast::<u8>(), size).to_vec();
        rd_kafka_mem_free(client, buffer);
        bytes
    };
    generation_of_metadata(&bytes)
}

/// The generation id in librdkafka's serialised group metadata (`CGMDv2:`, then the
/// generation as a native-endian `int32`, then the group id, member id and instance id).
fn generation_of_metadata(bytes: &[u8]) -> Option<i32> {
    const MAGIC: &[u8] = b"CGMDv2:";
    let rest = bytes.strip_prefix(MAGIC)?;
    let generation = i32::from_ne_bytes(rest.get(..4)?.try_into().ok()?);
    (generation >= 0).then_some(generation)
}

/// The member id the group coordinator gave this consumer; `None` before it joined and after
/// it left (librdkafka resets it when it sends its LeaveGroup).
pub fn member_id<C: ConsumerContext>(consumer: &StreamConsumer<C>) -> Option<String> {
    use rdkafka::bindings::{rd_kafka_mem_free, rd_kafka_memberid};
    let client = consumer.client().native_ptr();
    // SAFETY: `client` is a live consumer handle (borrowed from `consumer`); librdkafka returns
    // a NUL-terminated copy of the member id (or NULL), which we copy and free with its own
    // allocator as its documentation requires.
    unsafe {
        let id = rd_kafka_memberid(client);
        if id.is_null() {
            return None;
        }
        let text = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
        rd_kafka_mem_free(client, id.cast());
        (!text.is_empty()).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generation_is_read_from_librdkafkas_serialised_group_metadata() {
        let mut bytes = b"CGMDv2:".to_vec();
        bytes.extend_from_slice(&42i32.to_ne_bytes());
        bytes.extend_from_slice(b"weir.workflow-workers\0member-1\0\x01");
        assert_eq!(generation_of_metadata(&bytes), Some(42));
        // Before a join librdkafka holds -1; another format is not guessed at.
        let mut before = b"CGMDv2:".to_vec();
        before.extend_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(generation_of_metadata(&before), None);
        assert_eq!(generation_of_metadata(b"CGMDv3:\x01\x00\x00\x00"), None);
        assert_eq!(generation_of_metadata(b"CGMDv2:\x01"), None);
    }
}
