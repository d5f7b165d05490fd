//! A consumer-group member that tells its owner about rebalances.
//!
//! librdkafka runs rebalance callbacks inside `poll`. The worker only polls while it collects a
//! batch, never while a transaction is open, so a rebalance can never cut a transaction in two;
//! the context just records that one happened so that the batch collected across it is dropped
//! (nothing of it was committed, and the eager protocol resets every position to the committed
//! offsets when it reassigns).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::topic_partition_list::TopicPartitionList;
use tracing::info;

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
}

impl RebalanceTracker {
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

impl ClientContext for RebalanceTracker {}

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

/// Seeks every assigned partition back to its committed offset (the beginning when nothing is
/// committed yet): after an aborted batch or a rebalance, the records read past it must be
/// read again. Returns the committed offsets (partitions with none are left out: until their
/// first record is read, there is nothing to commit for them).
pub fn rewind_to_committed<C: ConsumerContext>(
    consumer: &rdkafka::consumer::StreamConsumer<C>,
) -> KafkaResult<Vec<(String, i32, i64)>> {
    use rdkafka::Offset;
    use rdkafka::consumer::Consumer;
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(Vec::new());
    }
    // Fetched as stable (KIP-447): this waits until a previous owner's open transaction on
    // these partitions is resolved, which takes up to its transaction timeout.
    let committed = consumer.committed_offsets(assignment, std::time::Duration::from_secs(120))?;
    let mut seek = TopicPartitionList::new();
    let mut positions = Vec::new();
    for element in committed.elements() {
        let offset = match element.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        seek.add_partition_offset(element.topic(), element.partition(), offset)?;
        if let Offset::Offset(o) = offset {
            positions.push((element.topic().to_owned(), element.partition(), o));
        }
    }
    // A list obtained from the consumer must be gone before the consumer is dropped.
    drop(committed);
    consumer.seek_partitions(seek, std::time::Duration::from_secs(30))?;
    Ok(positions)
}

/// Collects up to `max_records` records within `interval` from the call (the batching window
/// of one transaction). While nothing has arrived it waits at least 50 ms, so that an idle
/// caller does not spin, yet returns often enough for its loop (due timers, shutdown).
/// Rebalance callbacks run inside these polls.
pub async fn collect_batch<C: ConsumerContext + 'static>(
    consumer: &rdkafka::consumer::StreamConsumer<C>,
    interval: std::time::Duration,
    max_records: usize,
) -> Vec<rdkafka::message::OwnedMessage> {
    let start = std::time::Instant::now();
    let idle_wait = interval.max(std::time::Duration::from_millis(50));
    let mut records = Vec::new();
    while records.len() < max_records {
        let window = if records.is_empty() {
            idle_wait
        } else {
            interval
        };
        let remaining = (start + window).saturating_duration_since(std::time::Instant::now());
        if remaining.is_zero() {
            break;
        }
        match tokio::time::timeout(remaining, consumer.recv()).await {
            Ok(Ok(message)) => records.push(message.detach()),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "consumer error");
                break;
            }
            Err(_elapsed) => break,
        }
    }
    records
}
