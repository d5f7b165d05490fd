//! Consumer lag, measured where the worker reads: each worker loop (workflow, activity,
//! trigger) calls [`sample`] after it polled, and at most once per
//! [`PROGRESS_SAMPLE_INTERVAL`](crate::metrics::PROGRESS_SAMPLE_INTERVAL) it records, for
//! every partition its consumer is assigned, the consumer's position and the partition's high
//! watermark into the worker kind's [`PartitionProgress`] (rendered as `weir_consumer_lag` and
//! `weir_partition_stall_seconds`).
//!
//! Both come from what librdkafka holds locally (no request to a broker, so sampling never
//! waits on the cluster):
//!
//! - the position is librdkafka's *application* position, the offset after the last record
//!   or transaction marker the worker took. It moves past commit and abort markers (which the
//!   consumer takes but never hands over), so a partition the worker has read to its end has
//!   lag 0 even though every write to it ended with a marker. The offsets the worker commits
//!   would not do: they stop after the last record, short of its marker, and short of every
//!   aborted record after it.
//! - the end is the high watermark of the last fetch response. librdkafka's statistics
//!   (`statistics.interval.ms`) were not used: their `consumer_lag` is measured from the
//!   offsets the consumer itself committed, which under transactions (offsets committed by
//!   the producer) stay at what was fetched at the assignment, and `consumer_lag_stored`
//!   needs `enable.auto.offset.store`, which the workers turn off. The high watermark rather
//!   than the last stable offset also shows a partition held by a transaction that stays
//!   open (see "Hanging transactions" in `docs/operating.md`): its end grows, its position
//!   does not.
//!
//! Records of a transaction still open count in the lag until it ends (a read_committed
//! consumer cannot take them yet). A paused partition is not fetched: its end stays where it
//! was until it is resumed.

use std::time::Instant;

use rdkafka::Offset;
use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};

use crate::metrics::{PartitionProgress, PartitionSample};

/// Records the positions and ends of `consumer`'s assigned partitions into `progress`, if a
/// sample is due. A consumer that cannot say what it is assigned leaves the last sample.
pub fn sample<C: ConsumerContext>(consumer: &StreamConsumer<C>, progress: &PartitionProgress) {
    let now = Instant::now();
    if !progress.due(now) {
        return;
    }
    let Ok(positions) = consumer.position() else {
        return;
    };
    let samples: Vec<PartitionSample> = positions
        .elements()
        .iter()
        .map(|element| {
            let (topic, partition) = (element.topic().to_owned(), element.partition());
            let end = cached_high_watermark(consumer, &topic, partition);
            let position = match element.offset() {
                Offset::Offset(offset) if offset >= 0 => Some(offset),
                _ => None,
            };
            PartitionSample {
                topic,
                partition,
                position,
                end,
            }
        })
        .collect();
    // A list obtained from the consumer must be gone before the consumer is dropped.
    drop(positions);
    progress.record(now, samples);
}

/// The high watermark of `topic`/`partition` as `consumer` last fetched it
/// (`rd_kafka_get_watermark_offsets`, which reads librdkafka's cache and asks no broker:
/// rust-rdkafka wraps only the querying call); `None` before the first fetch.
fn cached_high_watermark<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    let client = consumer.client().native_ptr();
    // SAFETY: `client` is a live consumer handle (borrowed from `consumer`), `topic` a
    // NUL-terminated string that outlives the call, and `low`/`high` valid places for the two
    // integers librdkafka writes; it keeps no pointer to any of them.
    let error = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client,
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (error == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}
