//! Records the consumer cannot even fetch: a batch librdkafka cannot decompress (a codec it was
//! built without, corrupt compressed data) or parse. librdkafka reports the error and fetches
//! the same batch again, forever, so without help its partition never moves (issue 11 item 8).
//!
//! librdkafka knows the partition and offset of such an error, but the Rust client hands the
//! application only its code. So the member finds them itself: for each partition it owns, a
//! *probe* (a consumer of that one partition, outside the group, `read_committed` like the
//! member) fetches from the member's position; the partition whose probe fails the same way is
//! the stuck one. The bad batch is then skipped: probes find the first offset behind it that
//! can be fetched (doubling the step, then bisecting: a few probes even for a batch of
//! thousands of records), the member seeks there, and the skip is logged at ERROR with the
//! topic, partition and offsets, and counted (`weir_unfetchable_offsets_skipped_total`).
//!
//! The records of the skipped batch cannot reach the DLQ: they cannot be read. Their offsets
//! are committed with the next batch of their partition. Should two unreadable batches enclose
//! a readable one within one doubling step, the bisection may skip the readable one too; the
//! log names the whole range skipped.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode as Code;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tracing::{debug, error, warn};

use super::KafkaConfig;

/// Where a member skips an unfetchable batch: `topic`/`partition` from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
}

/// Whether `error`, surfaced by a consumer, means a batch could not be fetched: decompressed,
/// parsed or checked.
pub fn is_fetch_error(error: &KafkaError) -> bool {
    match error {
        KafkaError::MessageConsumption(code) | KafkaError::MessageConsumptionFatal(code) => {
            matches!(
                code,
                Code::BadCompression
                    | Code::BadMessage
                    | Code::NotImplemented
                    | Code::InvalidMessage
                    | Code::InvalidRecord
            )
        }
        _ => false,
    }
}

/// How long a probe waits for its first answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many probes one search may take.
const MAX_PROBES: usize = 64;

/// What fetching one partition from an offset gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// A record at this offset (at or after the one asked for).
    Readable(i64),
    /// The end of the partition: nothing (readable) there.
    End,
    /// The same kind of error as the member's.
    Unfetchable,
    /// Nothing conclusive within the timeout.
    Unknown,
}

/// Finds the partition `consumer` is stuck on and seeks it past the unfetchable batch; the
/// skip, or `None` when no owned partition is stuck (a transient error). Blocking: it runs
/// probes (librdkafka's synchronous calls) in place.
pub fn find_and_skip<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    kafka: &KafkaConfig,
    error: &KafkaError,
) -> Option<Skip> {
    let candidates = match stuck_candidates(consumer) {
        Ok(candidates) => candidates,
        Err(e) => {
            error!(%error, cause = %e, "a record cannot be fetched, and the partitions owned cannot be listed");
            return None;
        }
    };
    let skip = tokio::task::block_in_place(|| {
        candidates.into_iter().find_map(|(topic, partition, from)| {
            if probe(kafka, &topic, partition, from) != Probe::Unfetchable {
                return None;
            }
            let to = first_readable_after(kafka, &topic, partition, from);
            Some(Skip {
                topic,
                partition,
                from,
                to,
            })
        })
    });
    let Some(skip) = skip else {
        warn!(%error, "a fetch error, but no owned partition is stuck on it");
        return None;
    };
    let mut list = TopicPartitionList::new();
    let seek = list
        .add_partition_offset(&skip.topic, skip.partition, Offset::Offset(skip.to))
        .and_then(|()| consumer.seek_partitions(list, Duration::from_secs(30)));
    match seek {
        Ok(_) => {
            error!(
                topic = %skip.topic,
                partition = skip.partition,
                from = skip.from,
                to = skip.to,
                %error,
                "records that cannot be fetched were SKIPPED: offsets from..to (excluded) of \
                 this partition are lost to Weir (weir_unfetchable_offsets_skipped_total)"
            );
            Some(skip)
        }
        Err(e) => {
            error!(
                topic = %skip.topic,
                partition = skip.partition,
                offset = skip.from,
                %error,
                cause = %e,
                "records cannot be fetched, and seeking past them failed"
            );
            None
        }
    }
}

/// Every owned partition with its position (the next offset the member reads): where it would
/// be stuck.
fn stuck_candidates<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
) -> Result<Vec<(String, i32, i64)>, KafkaError> {
    let assignment = consumer.assignment()?;
    let positions = consumer.position()?;
    let mut unknown = TopicPartitionList::new();
    let mut candidates = Vec::new();
    for element in assignment.elements() {
        let position = positions
            .find_partition(element.topic(), element.partition())
            .map(|p| p.offset());
        match position {
            Some(Offset::Offset(offset)) => {
                candidates.push((element.topic().to_owned(), element.partition(), offset))
            }
            _ => {
                unknown.add_partition(element.topic(), element.partition());
            }
        }
    }
    drop(positions);
    drop(assignment);
    if unknown.count() > 0 {
        // Nothing read yet: the member starts at its committed offset, or at the beginning.
        let committed = consumer.committed_offsets(unknown, Duration::from_secs(30))?;
        for element in committed.elements() {
            let offset = match element.offset() {
                Offset::Offset(offset) => offset,
                _ => {
                    consumer
                        .fetch_watermarks(
                            element.topic(),
                            element.partition(),
                            Duration::from_secs(30),
                        )?
                        .0
                }
            };
            candidates.push((element.topic().to_owned(), element.partition(), offset));
        }
    }
    Ok(candidates)
}

/// The smallest offset after `stuck` (known unfetchable) whose probe reads a record or the end.
fn first_readable_after(kafka: &KafkaConfig, topic: &str, partition: i32, stuck: i64) -> i64 {
    let (mut bad, mut step, mut probes) = (stuck, 1_i64, 0);
    // Doubling: `bad` stays unfetchable, `good` is the first readable offset found.
    let good = loop {
        let at = stuck.saturating_add(step);
        probes += 1;
        match probe(kafka, topic, partition, at) {
            Probe::Readable(_) | Probe::End => break at,
            Probe::Unfetchable if probes < MAX_PROBES => {
                bad = at;
                step = step.saturating_mul(2);
            }
            // Out of probes or inconclusive: skip only the offset known bad.
            _ => return bad + 1,
        }
    };
    // Bisection between the last bad offset and the first good one.
    let (mut bad, mut good) = (bad, good);
    while good - bad > 1 && probes < MAX_PROBES {
        let mid = bad + (good - bad) / 2;
        probes += 1;
        match probe(kafka, topic, partition, mid) {
            Probe::Unfetchable => bad = mid,
            Probe::Readable(_) | Probe::End => good = mid,
            Probe::Unknown => break,
        }
    }
    debug!(
        topic,
        partition, stuck, good, probes, "unfetchable batch bounded"
    );
    good
}

/// The context of a probe: its errors are what it looks for, so they are not logged as such.
struct ProbeContext;

impl ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        debug!(%error, %reason, "probe");
    }
}

impl ConsumerContext for ProbeContext {}

/// Fetches `topic`/`partition` from `offset` with a consumer of its own.
fn probe(kafka: &KafkaConfig, topic: &str, partition: i32, offset: i64) -> Probe {
    let mut config = kafka.client();
    config
        .set("group.id", kafka.group_id("weir-unfetchable-probe"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true");
    let consumer: BaseConsumer<ProbeContext> = match config.create_with_context(ProbeContext) {
        Ok(consumer) => consumer,
        Err(e) => {
            warn!(topic, partition, offset, error = %e, "cannot create a probe");
            return Probe::Unknown;
        }
    };
    let mut list = TopicPartitionList::new();
    if list
        .add_partition_offset(topic, partition, Offset::Offset(offset))
        .and_then(|()| consumer.assign(&list))
        .is_err()
    {
        return Probe::Unknown;
    }
    let deadline = Instant::now() + PROBE_TIMEOUT;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) if message.offset() >= offset => {
                return Probe::Readable(message.offset());
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Probe::End,
            Some(Err(e)) if is_fetch_error(&e) => return Probe::Unfetchable,
            Some(Err(e)) => {
                debug!(topic, partition, offset, error = %e, "probe error");
            }
        }
    }
    Probe::Unknown
}
