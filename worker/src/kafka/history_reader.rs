//! Reads a partition of `weir.history` from an offset to its end, once no transaction is open
//! on it: what a new owner's catch-up of the store needs (the rules of catch-up are the
//! driver's, in `weir_core::driver`). The same read, from the beginning, restores the
//! partition's keyed state (schedules, correlation keys) from `weir.state`.
//!
//! A `read_committed` consumer stops at the last stable offset (LSO), the first offset of the
//! oldest open transaction. A worker killed inside a commit leaves its transaction open until
//! the transaction timeout, and committed batches of a later owner may lie beyond that
//! offset: reading to the LSO would miss them, and the checkpoint would then move past them
//! for good. So the read first waits until the LSO reaches the high watermark seen when it
//! began (librdkafka ≥ 1.7.1 answers `query_watermark_offsets` with the LSO under
//! `read_committed` and the high watermark under `read_uncommitted`). Only the partition's
//! owner writes to it, so the wait ends when the dead transaction times out (or is fenced
//! by a restart with the same transactional id); a zombie's later transaction cannot commit
//! and is not waited for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use weir_core::batch::{BatchOutcomes, BatchState};
use weir_core::concurrency::SlotState;
use weir_core::correlation::RememberedEvent;
use weir_core::driver::{KeyedState, LoggedEntry};
use weir_core::processor::{CorruptState, StateOf};
use weir_core::schedule::ScheduleState;
use weir_core::wire::{KindError, RecordType, TopicRole};

use super::KafkaConfig;
use super::group::QuietEof;
use super::recovery;
use crate::codec::{Codec, HistoryRecord, RecordPosition, StoredCorrelation};
use crate::store::patience::Patience;

#[derive(Debug, thiserror::Error)]
pub enum HistoryReadError {
    #[error("reading {topic}/{partition}: {source}")]
    Kafka {
        topic: String,
        partition: i32,
        source: KafkaError,
    },
    #[error(
        "{topic}/{partition}: a transaction is still open after {waited:?} (last stable offset \
         {lso}, high watermark {high}), past the worker's transaction timeout: either a \
         broker's transaction timeout is longer than the worker's, or the transaction hangs \
         (its coordinator completed it without writing this partition's marker: Kafka 4.4 \
         after a partition leader was lost, KAFKA-20734); `kafka-transactions.sh \
         describe-producers --topic {topic} --partition {partition}` names its producer, and \
         docs/operating.md (\"Hanging transactions\") says what to do"
    )]
    OpenTransaction {
        topic: String,
        partition: i32,
        lso: i64,
        high: i64,
        waited: Duration,
    },
    #[error(
        "{topic}: partitions {partitions:?} gave neither a record nor their end for {waited:?}"
    )]
    NoEnd {
        topic: String,
        partitions: Vec<i32>,
        waited: Duration,
    },
    #[error("{topic}/{partition} offset {offset}: {reason}")]
    Record {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    /// A state that could not be decoded for now (the schema registry could not be reached):
    /// left out, its key would start again from nothing and its next write would replace
    /// what it held, so the read fails and the take-over is tried again.
    #[error("{topic}/{partition} offset {offset}: a state does not decode for now: {source}")]
    StateUnavailable {
        topic: String,
        partition: i32,
        offset: i64,
        source: crate::codec::DecodeError,
    },
}

/// Decodes `bytes`, fetching a schema id the codec has not seen from its registry (a record
/// another Weir version wrote, in the registry's framing). These reads are blocking code run
/// inside the runtime (`block_in_place`, `spawn_blocking`), where waiting on the fetch is
/// allowed; with no runtime, only the schemas the codec knows are tried. The runtime is
/// entered only for a record that did not decode at once: a catch-up reads many.
fn decode_blocking<R: crate::codec::AvroRecord>(
    codec: &Codec,
    bytes: &[u8],
    position: &RecordPosition,
) -> Result<R, crate::codec::DecodeError> {
    let decoded = codec.decode(bytes, position);
    match (&decoded, tokio::runtime::Handle::try_current()) {
        (Err(_), Ok(handle)) => handle.block_on(codec.decode_fetching(bytes, position)),
        _ => decoded,
    }
}

/// How often the end offsets are asked while a transaction is open.
const SETTLE_POLL: Duration = Duration::from_millis(100);
/// How long one `query_watermark_offsets` may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The committed records of `topic`/`partition` from `from` to its end, after waiting (at
/// most `settle`) until no transaction that began before the call is open on it.
pub fn read(
    kafka: &KafkaConfig,
    codec: &Codec,
    owner: &str,
    topic: &str,
    partition: i32,
    from: i64,
    settle: Duration,
) -> Result<Vec<LoggedEntry>, HistoryReadError> {
    let mut entries = Vec::new();
    read_with(
        kafka,
        owner,
        topic,
        &[(partition, from)],
        settle,
        Settle::Wait,
        |message| {
            let offset = message.offset();
            let bytes = message.payload().unwrap_or_default().to_vec();
            let position = RecordPosition::at(topic, partition, offset);
            let record: HistoryRecord =
                decode_blocking(codec, &bytes, &position).map_err(|e| e.to_string())?;
            let timestamp = message
                .timestamp()
                .to_millis()
                .and_then(DateTime::from_timestamp_millis)
                .unwrap_or_else(Utc::now);
            entries.push(LoggedEntry {
                offset,
                record,
                bytes,
                timestamp,
            });
            Ok(())
        },
    )?;
    Ok(entries)
}

/// Whether a read first waits until no transaction is open on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Wait (at most the patience given): what a new owner needs, since a previous owner's
    /// committed batches may lie beyond an open transaction's last stable offset.
    Wait,
    /// Read to the last stable offset as it is: what a client listing needs (a worker killed
    /// inside a transaction would hold it up until the transaction times out).
    ToStableOffset,
}

/// Which records of the state topic a read of it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Schedules, correlation keys and concurrency slots: what a new owner restores.
    All,
    /// Schedules only (a listing of them): correlation keys are skipped undecoded.
    Schedules,
    /// Correlation keys only (a listing of them): schedules are skipped undecoded.
    Correlations,
    /// Concurrency slots only (a listing of them): the others are skipped undecoded.
    Slots,
    /// Batch operations with their turns' outcomes (a listing of them): nothing else is
    /// decoded.
    Batches,
}

impl Wanted {
    /// The record types of the state topic.
    const STATES: [RecordType; 6] = [
        RecordType::ScheduleState,
        RecordType::CorrelationState,
        RecordType::RememberedEvent,
        RecordType::SlotState,
        RecordType::BatchState,
        RecordType::BatchOutcomes,
    ];

    /// Whether a read for this decodes the states of type `t` (the others it skips
    /// undecoded). A take-over (`All`) needs every state but the batches' turns' outcomes,
    /// which only a listing of batches shows.
    fn keeps(self, t: RecordType) -> bool {
        use RecordType as T;
        match self {
            Wanted::All => t != T::BatchOutcomes,
            Wanted::Schedules => t == T::ScheduleState,
            Wanted::Correlations => matches!(t, T::CorrelationState | T::RememberedEvent),
            Wanted::Slots => t == T::SlotState,
            Wanted::Batches => matches!(t, T::BatchState | T::BatchOutcomes),
        }
    }
}

/// How long a client's listing of the state topic rides out a cluster that is away.
const LISTING_PATIENCE: Duration = Duration::from_secs(30);

/// What the owners committed to the deployment's `weir.state` (every partition), for a
/// client's listing (`weir schedule list`, `weir correlation list`, the API). Blocking: it
/// reads each partition to its last stable offset, without waiting for an open transaction
/// (a worker killed inside one would hold a listing up until the transaction times out; the
/// listing shows the states committed before it).
pub fn list_keyed_state(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &crate::topology::Topology,
    wanted: Wanted,
) -> Result<KeyedState, HistoryReadError> {
    let topic = topology.topic(TopicRole::State);
    let reader = format!("state-list-{}", ulid::Ulid::new());
    let partitions: Vec<i32> = (0..topic.partitions).collect();
    read_keyed_state(
        kafka,
        codec,
        &reader,
        &topic.name,
        &partitions,
        LISTING_PATIENCE,
        Settle::ToStableOffset,
        wanted,
    )
}

/// A record of the state topic, as the last one of its key.
enum StateRecord {
    Schedule(ScheduleState),
    Correlation(StoredCorrelation),
    Remembered(RememberedEvent),
    Slot(SlotState),
    Batch(BatchState),
    BatchOutcomes(BatchOutcomes),
    /// Bytes that do not decode at all ([`crate::codec::DecodeError::is_corrupt`]).
    Corrupt(CorruptState),
    /// A tombstone, a record left out (not wanted, or of a schema or kind this worker does
    /// not know).
    None,
}

/// The last record of each key of the state topic, as they are read.
struct StateRecords<'a> {
    codec: &'a Codec,
    topic: &'a str,
    wanted: Wanted,
    last: BTreeMap<Vec<u8>, StateRecord>,
    /// The first state that did not decode for now ([`HistoryReadError::StateUnavailable`]).
    unavailable: Option<HistoryReadError>,
}

impl<'a> StateRecords<'a> {
    fn new(codec: &'a Codec, topic: &'a str, wanted: Wanted) -> Self {
        StateRecords {
            codec,
            topic,
            wanted,
            last: BTreeMap::new(),
            unavailable: None,
        }
    }

    /// A state's `bytes`, decoded as the state `record` says they are. If they do not decode:
    /// corrupt bytes are [`StateRecord::Corrupt`] (the processor drops them); bytes of a
    /// writer schema this worker does not know or cannot read are left out (and in place: a
    /// newer Weir's state in a rolling upgrade), said in the log; bytes that do not decode
    /// *for now* are noted as the read's error.
    fn decode<R: crate::codec::AvroRecord>(
        &mut self,
        key: &[u8],
        bytes: &[u8],
        (partition, offset): (i32, i64),
        of: StateOf,
        state: fn(R) -> StateRecord,
    ) -> StateRecord {
        let topic = self.topic;
        let position = RecordPosition::at(topic, partition, offset);
        match decode_blocking::<R>(self.codec, bytes, &position) {
            Ok(decoded) => state(decoded),
            Err(e) if e.is_transient() => {
                tracing::warn!(topic, partition, offset, error = %e, ?of, "a state does not decode for now; the read fails");
                if self.unavailable.is_none() {
                    self.unavailable = Some(HistoryReadError::StateUnavailable {
                        topic: topic.to_owned(),
                        partition,
                        offset,
                        source: e,
                    });
                }
                StateRecord::None
            }
            Err(e) if e.is_corrupt() => StateRecord::Corrupt(CorruptState {
                partition,
                offset,
                timestamp_millis: None,
                of,
                key: Some(key.to_vec()),
                value: bytes.to_vec(),
                headers: Vec::new(),
                error: e.to_string(),
            }),
            Err(e) => {
                tracing::warn!(topic, partition, offset, error = %e, ?of, "a state this worker cannot read (a newer Weir's?); left out and in place");
                StateRecord::None
            }
        }
    }

    /// The record at `partition`/`offset` with `key` and `payload` (`None`: a tombstone),
    /// which its kind says is `record` ([`weir_core::wire::record_type`] on the state topic).
    fn take(
        &mut self,
        key: &[u8],
        partition: i32,
        offset: i64,
        payload: Option<&[u8]>,
        record: Result<RecordType, KindError>,
    ) {
        let topic = self.topic;
        let at = (partition, offset);
        let state = match (payload, record) {
            (None, _) => StateRecord::None,
            // A state this read does not keep: skipped undecoded.
            (Some(_), Ok(t)) if Wanted::STATES.contains(&t) && !self.wanted.keeps(t) => {
                StateRecord::None
            }
            (Some(bytes), Ok(RecordType::ScheduleState)) => {
                self.decode(key, bytes, at, StateOf::Schedule, StateRecord::Schedule)
            }
            (Some(bytes), Ok(RecordType::CorrelationState)) => self.decode(
                key,
                bytes,
                at,
                StateOf::Correlation,
                StateRecord::Correlation,
            ),
            (Some(bytes), Ok(RecordType::RememberedEvent)) => {
                self.decode(key, bytes, at, StateOf::Remembered, StateRecord::Remembered)
            }
            (Some(bytes), Ok(RecordType::SlotState)) => {
                self.decode(key, bytes, at, StateOf::Slot, StateRecord::Slot)
            }
            (Some(bytes), Ok(RecordType::BatchState)) => {
                self.decode(key, bytes, at, StateOf::Batch, StateRecord::Batch)
            }
            (Some(bytes), Ok(RecordType::BatchOutcomes)) => {
                self.decode(key, bytes, at, StateOf::Batch, StateRecord::BatchOutcomes)
            }
            (Some(_), Ok(other)) => {
                tracing::error!(topic, partition, offset, record = ?other, "not a state; left out");
                StateRecord::None
            }
            (Some(_), Err(e)) => {
                tracing::error!(topic, partition, offset, error = %e, "a state of no kind Weir knows; left out");
                StateRecord::None
            }
        };
        self.last.insert(key.to_vec(), state);
    }

    fn finish(self) -> Result<KeyedState, HistoryReadError> {
        if let Some(error) = self.unavailable {
            return Err(error);
        }
        let mut state = KeyedState::default();
        for record in self.last.into_values() {
            match record {
                StateRecord::Schedule(s) => state.schedules.push(s),
                StateRecord::Batch(b) => state.batches.push(b),
                StateRecord::BatchOutcomes(o) => state.batch_outcomes.push(o),
                StateRecord::Correlation(StoredCorrelation {
                    state: key_state,
                    forwarded,
                }) => {
                    // Ids an earlier Weir kept in the key's own record: the new owner moves
                    // them out (`Processor::restore_remembered`).
                    if !forwarded.is_empty() {
                        state.unrecorded.push(key_state.key.clone());
                        state
                            .remembered
                            .extend(forwarded.into_iter().map(|forwarded| RememberedEvent {
                                key: key_state.key.clone(),
                                forwarded,
                            }));
                    }
                    state.correlations.push(key_state);
                }
                StateRecord::Remembered(r) => state.remembered.push(r),
                StateRecord::Slot(s) => state.slots.push(s),
                StateRecord::Corrupt(c) => state.corrupt.push(c),
                StateRecord::None => {}
            }
        }
        Ok(state)
    }

    /// Takes `message` as [`StateRecords::take`] does; a corrupt one keeps its timestamp and
    /// headers for its DLQ copy.
    fn take_message(&mut self, message: &BorrowedMessage<'_>) {
        let key = message.key().unwrap_or_default();
        self.take(
            key,
            message.partition(),
            message.offset(),
            message.payload(),
            super::headers::record_type(message, TopicRole::State),
        );
        if let Some(StateRecord::Corrupt(corrupt)) = self.last.get_mut(key) {
            corrupt.timestamp_millis = message.timestamp().to_millis();
            corrupt.headers = message
                .headers()
                .into_iter()
                .flat_map(|headers| headers.iter())
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect();
        }
    }
}

/// The keyed state of `partitions` of the state topic `topic` (`weir.state`): the last record
/// of each key read from the beginning (after `settle`, partition by partition, then one read
/// of them all), tombstones dropped. A correlation key's state carries the header
/// `weir.kind = correlation`; a record without it is a schedule's (keyed `schedule:<name>`).
/// A record whose schema id the codec has not seen is decoded with the schema fetched from the
/// registry. One that does not decode is never a reason to refuse the partitions: corrupt
/// bytes are returned as [`KeyedState::corrupt`] (the processor copies them to the DLQ and
/// forgets their key: `weir_core::processor::CorruptState`); bytes of a schema or kind this
/// worker does not know (a newer Weir's) are logged and left out, and left in place for the
/// worker that knows them. One that does not decode *for now* (the
/// registry could not be reached) fails the read instead
/// ([`HistoryReadError::StateUnavailable`]): left out, its key's next write would replace
/// the events it holds.
#[allow(clippy::too_many_arguments)]
pub fn read_keyed_state(
    kafka: &KafkaConfig,
    codec: &Codec,
    owner: &str,
    topic: &str,
    partitions: &[i32],
    patience: Duration,
    settle: Settle,
    wanted: Wanted,
) -> Result<KeyedState, HistoryReadError> {
    let mut records = StateRecords::new(codec, topic, wanted);
    let from: Vec<(i32, i64)> = partitions.iter().map(|&p| (p, 0)).collect();
    read_with(kafka, owner, topic, &from, patience, settle, |message| {
        records.take_message(message);
        Ok(())
    })?;
    records.finish()
}

/// Reads each `(partition, from)` of `topic` from `from` to its end, once settled if
/// `settle` says so (see [`read`]), with one consumer for them all, handing each committed
/// record to `take`; an error of `take` stops the read. `settle` (the wait) and passing
/// errors of the cluster are given `patience`.
fn read_with(
    kafka: &KafkaConfig,
    owner: &str,
    topic: &str,
    partitions: &[(i32, i64)],
    patience: Duration,
    settle: Settle,
    mut take: impl FnMut(&BorrowedMessage<'_>) -> Result<(), String>,
) -> Result<(), HistoryReadError> {
    let Some(&(first, _)) = partitions.first() else {
        return Ok(());
    };
    let kafka_error = |partition: i32| {
        move |source| HistoryReadError::Kafka {
            topic: topic.to_owned(),
            partition,
            source,
        }
    };
    let uncommitted = match settle {
        Settle::Wait => {
            Some(consumer(kafka, owner, "read_uncommitted").map_err(kafka_error(first))?)
        }
        Settle::ToStableOffset => None,
    };
    let consumer = consumer(kafka, owner, "read_committed").map_err(kafka_error(first))?;
    let mut assignment = TopicPartitionList::new();
    for &(partition, from) in partitions {
        if let Some(uncommitted) = &uncommitted {
            wait_until_settled(&consumer, uncommitted, topic, partition, patience)?;
        }
        assignment
            .add_partition_offset(topic, partition, Offset::Offset(from))
            .map_err(kafka_error(partition))?;
    }
    consumer.assign(&assignment).map_err(kafka_error(first))?;
    let mut open: BTreeSet<i32> = partitions.iter().map(|&(p, _)| p).collect();
    let read_started = Instant::now();
    let mut progress = read_started;
    while !open.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            // Nothing comes and no end either, for longer than the patience: a partition whose
            // end is never reported must not hold the read forever.
            None if progress.elapsed() > patience => {
                return Err(HistoryReadError::NoEnd {
                    topic: topic.to_owned(),
                    partitions: open.into_iter().collect(),
                    waited: progress.elapsed(),
                });
            }
            None => continue,
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                open.remove(&partition);
                progress = Instant::now();
            }
            // librdkafka reports a lost connection through poll and reconnects by itself.
            Some(Err(e))
                if e.rdkafka_error_code().is_some_and(recovery::is_transient)
                    && read_started.elapsed() < patience =>
            {
                tracing::warn!(topic, error = %e, "read to the end: the cluster is away for now; polling on");
            }
            Some(Err(e)) => return Err(kafka_error(first)(e)),
            Some(Ok(message)) => {
                progress = Instant::now();
                let (partition, offset) = (message.partition(), message.offset());
                take(&message).map_err(|reason| HistoryReadError::Record {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    reason,
                })?;
            }
        }
    }
    Ok(())
}

fn consumer(
    kafka: &KafkaConfig,
    owner: &str,
    isolation: &str,
) -> Result<BaseConsumer<QuietEof>, KafkaError> {
    let mut config = kafka.client();
    config
        .set("group.id", kafka.group_id(&format!("weir-catchup-{owner}")))
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // The end is what catch-up reads to: a fetch there must not long-poll (librdkafka's
        // default, 500 ms per partition, was most of a take-over's time).
        .set("fetch.wait.max.ms", "10");
    // Its end is what catch-up waits for: not an error to log (issue 11 item 20).
    config.create_with_context(QuietEof)
}

/// Waits until the last stable offset of `topic`/`partition` (as `committed`, a
/// `read_committed` consumer, sees it) reaches the high watermark it had when the wait began
/// (as `uncommitted` sees it).
pub fn wait_until_settled(
    committed: &BaseConsumer<QuietEof>,
    uncommitted: &BaseConsumer<QuietEof>,
    topic: &str,
    partition: i32,
    settle: Duration,
) -> Result<(), HistoryReadError> {
    let kafka_error = |source| HistoryReadError::Kafka {
        topic: topic.to_owned(),
        partition,
        source,
    };
    let started = Instant::now();
    let patience = Patience {
        first_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
        give_up_after: settle,
    };
    let what = format!("reading the end of {topic}/{partition}");
    let (_, high) = recovery::patiently(&what, &patience, started, || {
        uncommitted.fetch_watermarks(topic, partition, QUERY_TIMEOUT)
    })
    .map_err(kafka_error)?;
    let mut warned = false;
    loop {
        let (_, lso) = recovery::patiently(&what, &patience, started, || {
            committed.fetch_watermarks(topic, partition, QUERY_TIMEOUT)
        })
        .map_err(kafka_error)?;
        if lso >= high {
            if warned {
                tracing::info!(topic, partition, waited = ?started.elapsed(), "the open transaction is resolved");
            }
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= settle {
            return Err(HistoryReadError::OpenTransaction {
                topic: topic.to_owned(),
                partition,
                lso,
                high,
                waited,
            });
        }
        if !warned {
            tracing::warn!(
                topic,
                partition,
                lso,
                high,
                "catch-up waits for an open transaction (a worker killed inside a commit; it \
                 ends at the transaction timeout)"
            );
            warned = true;
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

#[cfg(test)]
pub(crate) mod tests;
