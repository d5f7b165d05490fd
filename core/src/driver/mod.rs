//! The workflow worker's loop, written once against its seams: the [`Log`] (Kafka in
//! production, the simulated log in tests), the store it reads ([`StoreRead`]) and the
//! background writer of committed batches ([`Materialise`]). Whatever runs it, the order of
//! things is this file's:
//!
//! 1. **Take-over** on every change of the partitions owned: wait until every committed batch
//!    is in the store, forget what memory holds, take the new group generation (the stamp of
//!    every store write from now on: see [`WriteStamp`]), rewind the log to the committed
//!    offsets (which waits for the previous owner's transaction), catch the store up with
//!    `weir.history` of each owned partition (through the [projection](crate::projection)),
//!    restore the partitions' keyed state from `weir.state` (a record that does not decode
//!    is dropped by the first batch: [`crate::processor::CorruptState`]), load the timers due within the
//!    horizon, and write the checkpoints and watermarks it starts from.
//! 2. **A batch**: the records of one poll, the timers due now and the schedule ticks due
//!    now, each stepped through the [processor](crate::processor) (rehydrating from the store
//!    what it names first), and a turn of each batch operation with a token (its list page
//!    read from the store, [`StoreRead::list`]); then one transaction with every effect and
//!    the input offsets.
//! 3. **After the commit**: the batch's history rows (with the offsets they landed at),
//!    execution rows, timer changes, checkpoints and watermarks go to the materialiser; the
//!    touched executions stay pinned until they are in the store.
//!
//! 4. **Fairness and admission**: the submissions partitions are read ahead of what the
//!    batches take, up to [`DriverConfig::read_ahead_bytes`] held (then the log stops reading
//!    them, [`Log::admit`], and they wait in Kafka, while responses and timers go on); the
//!    records read are held by tenant and taken round-robin ([`crate::fairness`]), so that
//!    one tenant's burst does not hold another's submissions behind it. Each batch takes up
//!    to [`DriverConfig::max_batch`] of them first (before the poll's other records: an
//!    execution exists before an answer to it read in the same poll is stepped), while
//!    **admission** is open: while fewer executions are in flight than
//!    [`DriverConfig::admit_below`] — those with a deferred start, and
//!    running ones stepped within [`DriverConfig::admission_idle`]. Running executions idle longer do not count (a parent
//!    waiting for its children must not keep them out), so admission never stops for good; a
//!    deferred start counts until it runs (it waits for room, not for an answer).
//!    The limit is the configured one, or lower once the pool has had no room for a run
//!    ([`Processor::capacity_seen`]: what it really parks, [`admission_limit`] of it).
//!    Without it, more executions in flight than the instance pool holds dropped each other's
//!    runs for room and rebuilt them, and nothing finished (a livelock, `docs/benchmarks.md`).
//!
//! A batch the log refuses to commit because the group moved on is dropped and the inputs are
//! read again after a take-over — of the membership the log reports *after* the refusal (the
//! next `Polled::Rebalanced`, or a newer generation; at most [`DriverConfig::rejoin_wait`]
//! later, the one it reports): until then the worker writes nothing, since the partitions it
//! had may be another member's already. Any other failure stops the loop (the process
//! restarts).
//!
//! The hot path — an execution cached in memory, its inputs and due timers — reads nothing
//! from the store, and the loop does not wait for the materialiser on its account: a store
//! outage holds back the materialiser (whose queue takes the batches meanwhile) and whatever
//! must read the store (a cold rebuild, a new submission's existence check, a take-over, an
//! urgent timer refill: see [`TimerIndex`]), not the batches of cached executions.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use tracing::Instrument;

use crate::fairness::{self, Held};
use crate::inline::{self, InlineActivities, InlineOutcome, NoInline};
use crate::model::ExecutionId;
use crate::processor::{Batch, Effect, Input, Processor, ProcessorError};
use crate::projection::{self, ExecutionView, entry_kind, rebuild};
use crate::records::HistoryEntry;
use crate::rows::{
    Checkpoint, ExecutionState, HistoryRow, MaterialiseJob, TimerChanges, TimerId, TimerRow,
    TimerWatermark, WriteStamp,
};
use crate::runner::WorkflowRunner;
use crate::stamp_order::StampOrder;
use crate::timers::{Refill, TimerIndex};

mod batch;
mod materialise;
mod ports;
mod take_over;

pub use ports::*;

/// At most how many more polls a turn makes to read ahead after a full one (see
/// [`Driver::turn`]): with a poll of twice a batch, up to 34 batches' worth of submissions a
/// turn, within [`DriverConfig::read_ahead_bytes`].
const READ_AHEAD_POLLS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("log: {0}")]
    Log(BoxError),
    #[error("commit: {0}")]
    Commit(BoxError),
    #[error("store: {0}")]
    Store(BoxError),
    #[error("materialiser: {0}")]
    Materialise(BoxError),
    #[error("catch-up of history partition {partition}: {reason}")]
    Catchup { partition: i32, reason: String },
    #[error(transparent)]
    Processor(#[from] ProcessorError),
}

/// Settings of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverConfig {
    /// Rounds of inline activities per batch at most ([`crate::inline`]): a round runs every
    /// inline request the batch has so far; what the last round's answers request goes to the
    /// topics.
    pub max_inline_rounds: usize,
    /// Records (and due timers) per batch at most.
    pub max_batch: usize,
    /// Written into checkpoints and watermarks (for operators).
    pub instance_id: String,
    /// Timers due within this are held in memory.
    pub timer_horizon: std::time::Duration,
    /// After a batch refused because the group moved on, how long to wait (by the log's
    /// clock) for the log to report the new membership before taking the one it reports
    /// over anyway (a refusal without a membership change must not stop the worker).
    pub rejoin_wait: std::time::Duration,
    /// Admission (see the module docs): submissions are read while fewer executions in
    /// flight than this were stepped within `admission_idle` ([`usize::MAX`]: always).
    pub admit_below: usize,
    pub admission_idle: std::time::Duration,
    /// Submissions read ahead and held for their turn ([`crate::fairness`]) at most, in bytes
    /// of their records; the log stops reading them at this.
    pub read_ahead_bytes: usize,
}

/// Admission's limit for a pool that parks `capacity` runs: one batch of new starts must
/// still fit (so that runs in flight are not dropped for them), and never below half of it;
/// at least one.
pub fn admission_limit(capacity: usize, max_batch: usize) -> usize {
    capacity.saturating_sub(max_batch).max(capacity / 2).max(1)
}

/// The loop; see the module docs.
pub struct Driver<R: WorkflowRunner, L: Log, S: StoreRead, M: Materialise, I = NoInline> {
    pub processor: Processor<R>,
    inline: I,
    timers: TimerIndex,
    log: L,
    store: S,
    materialiser: M,
    config: DriverConfig,
    owned: BTreeSet<i32>,
    /// The group generation of the membership taken over: the order of this worker's store
    /// writes ([`WriteStamp::owner`]).
    generation: u64,
    /// The next offset to read of every owned input partition.
    positions: IndexMap<(InputTopic, i32), i64>,
    /// The submissions read and not yet taken ([`crate::fairness`]).
    held: Held<PolledRecord>,
    /// Handles of records read and skipped (taken by a former owner): the next commit
    /// releases them ([`Commit::consumed`]).
    released: Vec<usize>,
    /// Whether the log reads the submissions partitions (see the module docs).
    reading: bool,
    /// Running executions this owner's catch-up read whose start it has not tried yet (see
    /// [`Driver::take_over`]): the history offset of each one's first record read, which no
    /// checkpoint passes until its reminder has fired in a committed batch.
    reminded: IndexMap<ExecutionId, (i32, i64)>,
    /// The stamps of this owner's jobs (see [`StampOrder`]).
    stamp_order: StampOrder,
    /// Whether held submissions are taken (admission, see the module docs).
    admitting: bool,
    retried: u64,
    inline_answered: u64,
    inline_spilled: u64,
    /// The number of the last job submitted to the materialiser.
    last_job: u64,
    /// The last job with a timer change the timer index does not hold (a timer put beyond
    /// the loaded window, or removed from it): a refill must not read the store before the
    /// store has it.
    unloaded_timers_job: u64,
    /// Set when a batch was refused because the group moved on: nothing is written until
    /// the log reports the membership after it.
    refused: Option<Refused>,
}

/// A batch refused for the generation `generation` at `at` (the log's clock).
#[derive(Debug, Clone, Copy)]
struct Refused {
    generation: u64,
    at: DateTime<Utc>,
}

impl<R, L, S, M> Driver<R, L, S, M, NoInline>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
{
    /// A loop that sends every activity request to its topic.
    pub fn new(
        processor: Processor<R>,
        log: L,
        store: S,
        materialiser: M,
        config: DriverConfig,
    ) -> Self {
        Driver::with_inline(processor, log, store, materialiser, config, NoInline)
    }
}

impl<R, L, S, M, I> Driver<R, L, S, M, I>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
    I: InlineActivities,
{
    /// A loop that runs the activities `inline` runs itself ([`crate::inline`]).
    pub fn with_inline(
        processor: Processor<R>,
        log: L,
        store: S,
        materialiser: M,
        config: DriverConfig,
        inline: I,
    ) -> Self {
        Driver {
            processor,
            inline,
            timers: TimerIndex::new(config.timer_horizon),
            log,
            store,
            materialiser,
            config,
            owned: BTreeSet::new(),
            generation: 0,
            positions: IndexMap::new(),
            held: Held::default(),
            released: Vec::new(),
            reading: true,
            reminded: IndexMap::new(),
            stamp_order: StampOrder::default(),
            admitting: true,
            retried: 0,
            inline_answered: 0,
            inline_spilled: 0,
            last_job: 0,
            unloaded_timers_job: 0,
            refused: None,
        }
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn owned(&self) -> &BTreeSet<i32> {
        &self.owned
    }

    /// Runs until the log says shutdown; then waits for the store to hold every batch.
    pub async fn run(&mut self) -> Result<(), DriverError> {
        while self.turn().await? {}
        self.materialiser
            .flush()
            .await
            .map_err(DriverError::Materialise)
    }

    /// One turn of the loop: a poll, and a batch or a take-over. `false` on shutdown.
    pub async fn turn(&mut self) -> Result<bool, DriverError> {
        self.materialiser
            .health()
            .map_err(DriverError::Materialise)?;
        self.admission().await?;
        // While there is room to read ahead, a poll may bring a batch more than a batch takes,
        // so that the held submissions grow under a backlog (fairness needs them to).
        let budget = if self.reading {
            self.config.max_batch.saturating_mul(2)
        } else {
            self.config.max_batch
        };
        let polled = self.log.poll(budget).await.map_err(DriverError::Log)?;
        let records = match polled {
            Polled::Shutdown => return Ok(false),
            Polled::Rebalanced { generation, owned } => {
                self.refused = None;
                self.take_over(generation, owned).await?;
                return Ok(true);
            }
            Polled::Records(records) => records,
        };
        if let Some(refused) = self.refused {
            // A batch was refused because the group moved on, and the log has not said what
            // this worker owns now: its old assignment may be another member's, so nothing is
            // written for it. The records are dropped (the take-over rewinds).
            let (generation, owned) = self.log.membership();
            let waited = self.log.now() - refused.at;
            let patience = chrono::Duration::from_std(self.config.rejoin_wait)
                .unwrap_or(chrono::Duration::MAX);
            if generation <= refused.generation {
                if waited < patience {
                    return Ok(true);
                }
                tracing::warn!(
                    generation,
                    waited_ms = waited.num_milliseconds(),
                    "no new membership after a refused batch; taking the reported one over"
                );
            }
            self.refused = None;
            self.take_over(generation, owned).await?;
            return Ok(true);
        }
        let full = records.len() >= budget;
        let mut records = self.hold_submissions(records);
        // Reading ahead: a full poll under a backlog is followed by more, in the same turn,
        // while there is room to hold them and the batch has room for what is not held, so
        // that a burst's tail (another tenant's submissions behind it) is held within a few
        // turns, not one batch a turn (`docs/design/fairness.md#reading-ahead`).
        let mut more = full;
        let mut extra = 0;
        while more
            && extra < READ_AHEAD_POLLS
            && self.reading
            && self.held.bytes() < self.config.read_ahead_bytes
            && records.len() < self.config.max_batch
        {
            extra += 1;
            let polled = self.log.poll(budget).await.map_err(DriverError::Log)?;
            match polled {
                // What was polled is not committed: the next owner reads it again.
                Polled::Shutdown => return Ok(false),
                Polled::Rebalanced { generation, owned } => {
                    self.take_over(generation, owned).await?;
                    return Ok(true);
                }
                Polled::Records(next) => {
                    more = next.len() >= budget;
                    records.extend(self.hold_submissions(next));
                }
            }
        }
        let now = self.log.now();
        // Every turn, loaded or idle: the horizon moves with the clock, and a timer beyond it
        // when it was written must be read before it is due.
        self.refill_timers(now).await?;
        let timers = self.timers.take_due(now, self.config.max_batch);
        if records.is_empty()
            && timers.is_empty()
            && (!self.admitting || self.held.is_empty())
            && !self.processor.schedule_due(now)
            && !self.processor.batch_due(now)
            && !self.processor.correlation_due(now)
            && !self.processor.take_over_effects_due()
        {
            self.write_idle_watermarks(now).await?;
            return Ok(true);
        }
        let span = tracing::info_span!("batch", records = records.len(), timers = timers.len());
        self.process_and_commit(records, timers, now)
            .instrument(span)
            .await?;
        Ok(true)
    }

    /// Opens or closes admission, and reading the submissions partitions (see the module
    /// docs).
    pub(super) async fn admission(&mut self) -> Result<(), DriverError> {
        let limit = match self.processor.capacity_seen() {
            Some(capacity) => self
                .config
                .admit_below
                .min(admission_limit(capacity, self.config.max_batch)),
            None => self.config.admit_below,
        };
        let now = self.log.now();
        let admit = limit == usize::MAX || {
            let since = chrono::Duration::from_std(self.config.admission_idle)
                .ok()
                .and_then(|idle| now.checked_sub_signed(idle))
                .unwrap_or(DateTime::<Utc>::MIN_UTC);
            self.processor.recently_stepped(since) < limit
        };
        let reading = self.held.bytes() < self.config.read_ahead_bytes;
        // An early event waits again if a submission may have been unread at some instant of
        // its wait (issue 33 F7): not read, not taken, or held behind other tenants.
        self.processor
            .submissions_read(self.reading && self.admitting && self.held.is_empty(), now);
        if reading != self.reading {
            let from: Vec<(i32, i64)> = self
                .positions
                .iter()
                .filter(|((topic, _), _)| *topic == InputTopic::Submissions)
                .map(|(&(_, partition), &offset)| (partition, offset))
                .collect();
            self.log
                .admit(reading, &from)
                .await
                .map_err(DriverError::Log)?;
            if reading {
                tracing::info!("submissions read again: room to read ahead");
            } else {
                tracing::info!(
                    held = self.held.len(),
                    bytes = self.held.bytes(),
                    "submissions paused: as many held as the worker reads ahead"
                );
            }
            self.reading = reading;
        }
        if admit != self.admitting {
            if admit {
                tracing::info!(
                    "executions started again: fewer in flight than the admission limit"
                );
            } else {
                tracing::info!(
                    limit,
                    "no new executions started: as many in flight as the admission limit"
                );
            }
            self.admitting = admit;
            self.report(0, 0);
        }
        Ok(())
    }

    /// Holds the poll's submissions for their turn ([`crate::fairness`]); returns its other
    /// records. Every record moves its partition's next offset to read.
    fn hold_submissions(&mut self, records: Vec<PolledRecord>) -> Vec<PolledRecord> {
        let mut others = Vec::with_capacity(records.len());
        for record in records {
            self.positions
                .insert((record.topic, record.partition), record.offset + 1);
            let Input::Record {
                index, size, key, ..
            } = &record.input
            else {
                others.push(record);
                continue;
            };
            if record.topic != InputTopic::Submissions {
                others.push(record);
                continue;
            }
            let (index, size, key) = (*index, *size, key.clone());
            let (partition, offset) = (record.partition, record.offset);
            let lane = fairness::lane(&record.input);
            if !self
                .held
                .push(partition, offset, size, key.as_deref(), lane, record)
            {
                tracing::debug!(
                    partition,
                    offset,
                    "submission taken by a former owner (the committed offset's metadata lists it): skipped"
                );
                self.released.push(index);
            }
        }
        others
    }

    /// The held submissions a batch takes, in turn: at most a batch, while admission is open.
    pub(super) fn take_held(&mut self) -> Vec<PolledRecord> {
        if !self.admitting {
            return Vec::new();
        }
        std::iter::from_fn(|| self.held.pop().map(|(_, _, record)| record))
            .take(self.config.max_batch)
            .collect()
    }

    /// The offsets a batch commits: every owned partition's next to read, a submissions
    /// partition's at its lowest held record with what was taken beyond it.
    pub(super) fn commit_positions(&self) -> Positions {
        self.positions
            .iter()
            .map(|(&(topic, partition), &next)| {
                let (offset, metadata) = match topic {
                    InputTopic::Submissions => self.held.commit_position(partition, next),
                    _ => (next, String::new()),
                };
                Position {
                    topic,
                    partition,
                    offset,
                    metadata,
                }
            })
            .collect()
    }

    pub(super) fn report(&mut self, inputs: usize, effects: usize) {
        let report = Report {
            owned: self.owned.len(),
            cached: self.processor.len(),
            parked: self.processor.parked(),
            deferred: self.processor.deferred(),
            stats: self.processor.stats(),
            inputs,
            effects,
            retried: self.retried,
            inline_answered: self.inline_answered,
            inline_spilled: self.inline_spilled,
            admitting: self.admitting,
            held: self.held.len(),
            held_bytes: self.held.bytes(),
        };
        self.log.observe(&report);
    }
}
