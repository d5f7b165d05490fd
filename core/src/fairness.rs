//! Fairness by tenant: within the submissions partitions a worker owns, records are taken
//! round-robin across tenants, not in log order (`docs/design/fairness.md`). One tenant's
//! burst of ten thousand submissions delays another tenant's next submission by a turn of
//! the lanes, not by the burst.
//!
//! The driver reads the submissions partitions ahead of what it takes (up to
//! [`crate::driver::DriverConfig::read_ahead_bytes`]), [`Held::push`]es each record into its
//! **lane** ([`lane`]: the submission's tenant; records without one share a lane) and
//! [`Held::pop`]s them in turn for each batch while admission lets it start executions.
//!
//! Invariants:
//! - **Order per execution**: a record whose key (the execution id) has a record held already
//!   goes into that record's lane, behind it, whatever its own tenant: a cancel never
//!   overtakes its submission, nor a duplicate the first one.
//! - **Exactly once**: the offset committed for a partition is its lowest held record (or
//!   the next to read when none is held); the records taken beyond it are committed in the
//!   offset's metadata, in the same transaction as their effects ([`taken`]). A new owner
//!   resumes from both ([`Held::resume`]) and skips what was taken: `push` returns `false`.
//! - **Bounded metadata**: a record that would open the partition's
//!   [`MAX_TAKEN_RANGES`]+1-th range is not taken; the partition's lowest held record is
//!   taken instead (which never opens one), so fairness degrades to log order rather than
//!   fail a commit.
//! - **Round-robin**: lanes take turns in the order they were first held; a lane that empties
//!   leaves the rotation and a new one joins at its end.
//!
//! Pure: no I/O, no clock.

mod taken;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use indexmap::IndexMap;

pub use taken::{MAX_TAKEN_RANGES, Taken, TakenError};

use crate::processor::{Body, Input};

/// The longest tenant a client may give, in bytes (`weir submit --tenant`, the API). A raw
/// Kafka client's tenant is taken as it is.
pub const MAX_TENANT_LEN: usize = 128;

/// A lane: a tenant, or `None` for every record without one.
pub type Lane = Option<String>;

/// The lane of a record of a submissions partition by its own content: its tenant. (Held
/// records of the same execution override it: see [`Held::push`].)
pub fn lane(input: &Input) -> Lane {
    let Input::Record { body: Ok(body), .. } = input else {
        return None;
    };
    match body {
        Body::Submission(submission)
        | Body::UnparsableParams { submission, .. }
        | Body::UnparsableFfqn { submission, .. } => submission.tenant.clone(),
        Body::ResetStart(start) => start.submission.tenant.clone(),
        _ => None,
    }
}

/// A record held, with where it was read.
#[derive(Debug)]
struct Entry<T> {
    partition: i32,
    offset: i64,
    size: usize,
    key: Option<String>,
    item: T,
}

/// What one partition holds and has taken beyond its committed offset.
#[derive(Debug, Default)]
struct Partition {
    held: BTreeSet<i64>,
    taken: Taken,
}

/// The records read but not yet taken, by lane; see the module docs.
#[derive(Debug)]
pub struct Held<T> {
    lanes: IndexMap<Lane, VecDeque<Entry<T>>>,
    /// The index of the lane whose turn is next.
    turn: usize,
    partitions: BTreeMap<i32, Partition>,
    /// The lane and the number of held records of each key.
    keys: HashMap<String, (Lane, usize)>,
    len: usize,
    bytes: usize,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            lanes: IndexMap::new(),
            turn: 0,
            partitions: BTreeMap::new(),
            keys: HashMap::new(),
            len: 0,
            bytes: 0,
        }
    }
}

impl<T> Held<T> {
    /// Forgets everything (a take-over reads the partitions again).
    pub fn clear(&mut self) {
        *self = Held::default();
    }

    /// Starts `partition` from its committed `offset` and that offset's `metadata`: the
    /// records it lists were taken and are skipped. Metadata that is not a list of taken
    /// records is ignored (nothing skipped) and its error returned, for a warning.
    pub fn resume(
        &mut self,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> Result<(), TakenError> {
        let (taken, error) = match Taken::parse(offset, metadata) {
            Ok(taken) => (taken, None),
            Err(error) => (Taken::default(), Some(error)),
        };
        self.partitions.insert(
            partition,
            Partition {
                held: BTreeSet::new(),
                taken,
            },
        );
        error.map_or(Ok(()), Err)
    }

    /// Holds the record at `offset` of `partition` (`size` bytes, `key`) in `lane`, or in the
    /// lane of a held record of the same key. `false`: it was taken already (listed in the
    /// committed metadata), and is skipped.
    pub fn push(
        &mut self,
        partition: i32,
        offset: i64,
        size: usize,
        key: Option<&str>,
        lane: Lane,
        item: T,
    ) -> bool {
        let part = self.partitions.entry(partition).or_default();
        if part.taken.contains(offset) {
            return false;
        }
        part.held.insert(offset);
        let lane = match key {
            Some(key) => {
                let (lane, count) = self.keys.entry(key.to_owned()).or_insert_with(|| (lane, 0));
                *count += 1;
                lane.clone()
            }
            None => lane,
        };
        self.lanes.entry(lane).or_default().push_back(Entry {
            partition,
            offset,
            size,
            key: key.map(str::to_owned),
            item,
        });
        self.len += 1;
        self.bytes += size;
        true
    }

    /// The next record in turn (see the module docs), with its partition and offset.
    pub fn pop(&mut self) -> Option<(i32, i64, T)> {
        if self.len == 0 {
            return None;
        }
        let index = self.turn % self.lanes.len();
        let front = self.lanes[index].front()?;
        let part = &self.partitions[&front.partition];
        let lowest = part.held.first().copied();
        let entry = if Some(front.offset) != lowest
            && part.taken.would_open(front.offset)
            && part.taken.ranges() >= MAX_TAKEN_RANGES
        {
            // Its partition's lowest held record instead: the first of that partition in
            // its lane (each lane holds a partition's records in offset order).
            let (partition, lowest) = (front.partition, lowest?);
            let (lane, position) = self.lanes.values().enumerate().find_map(|(l, entries)| {
                entries
                    .iter()
                    .position(|e| e.partition == partition && e.offset == lowest)
                    .map(|p| (l, p))
            })?;
            let entry = self.lanes[lane].remove(position)?;
            self.drop_lane_if_empty(lane);
            entry
        } else {
            let entry = self.lanes[index].pop_front()?;
            if !self.drop_lane_if_empty(index) {
                self.turn = index + 1;
            }
            entry
        };
        self.taken(&entry);
        Some((entry.partition, entry.offset, entry.item))
    }

    /// Removes lane `index` if it holds nothing; `true` if removed.
    fn drop_lane_if_empty(&mut self, index: usize) -> bool {
        if !self.lanes[index].is_empty() {
            return false;
        }
        self.lanes.shift_remove_index(index);
        // The lanes after it moved down by one: the turn stays with the same lane.
        if self.turn > index {
            self.turn -= 1;
        }
        if self.turn >= self.lanes.len() {
            self.turn = 0;
        }
        true
    }

    fn taken(&mut self, entry: &Entry<T>) {
        let part = self
            .partitions
            .get_mut(&entry.partition)
            .expect("a held record's partition is known");
        part.held.remove(&entry.offset);
        part.taken.insert(entry.offset);
        // Every record below the lowest held one was read (records come in offset order),
        // and with none held, every record up to this one; beyond, a former owner's marks
        // wait for their records to be read (and skipped).
        let read_past = part.held.first().copied().unwrap_or(entry.offset + 1);
        part.taken.forget_below(read_past);
        if let Some(key) = &entry.key
            && let Some((_, count)) = self.keys.get_mut(key)
        {
            *count -= 1;
            if *count == 0 {
                self.keys.remove(key);
            }
        }
        self.len -= 1;
        self.bytes -= entry.size;
    }

    /// The offset to commit for `partition` and its metadata, given `next`, the offset after
    /// the last record read of it: the lowest held record, or `next` when none is held, with
    /// what was taken beyond it — by this owner, or by a former one and not read again yet
    /// (a take-over followed by a batch before the first poll of the partition must commit
    /// them again, or the next owner takes them twice).
    pub fn commit_position(&self, partition: i32, next: i64) -> (i64, String) {
        let Some(part) = self.partitions.get(&partition) else {
            return (next, String::new());
        };
        let offset = part.held.first().copied().unwrap_or(next);
        let mut taken = part.taken.clone();
        taken.forget_below(offset);
        (offset, taken.render(offset))
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes of the records held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `offset` of `partition` was taken beyond the committed offset.
    #[cfg(test)]
    pub fn was_taken(&self, partition: i32, offset: i64) -> bool {
        self.partitions
            .get(&partition)
            .is_some_and(|p| p.taken.contains(offset))
    }
}

#[cfg(test)]
mod tests;
