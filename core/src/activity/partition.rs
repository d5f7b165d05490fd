//! One owned partition of a route's topic: its unfinished requests ([`Job`]s, by offset),
//! the progress the previous owner committed for the records not read again yet, what this
//! owner committed, and whether it is paused.
//!
//! Invariants:
//! - Records are taken in offset order: one at or before the last taken (`next`), or before
//!   the committed frontier, is a redelivery and is skipped.
//! - A record of the restored range `[frontier, end)` is finished unless the restored
//!   metadata lists it; a listed one resumes at the attempt and not-before it records.
//! - [`Partition::progress`] lists every unfinished request, read or restored, and its
//!   frontier is the first of them (or the end of what is known): committing it never
//!   passes an unfinished request.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::AttemptId;
use super::progress::{Mark, Progress};
use crate::model::ExecutionId;
use crate::records::ActivityRequest;
use crate::retry::RetryPolicy;

/// What an unfinished request is.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum JobKind {
    /// A WASM activity this worker runs.
    Wasm(RetryPolicy),
    /// A function no component of this worker exports: waits for a worker that runs it.
    Unknown,
    /// A request on an external route, watched until its deadline.
    External { service_group: Option<String> },
}

/// What an unfinished request is doing.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Phase {
    /// Waiting for a free attempt slot.
    Ready,
    /// An attempt (or, for an external request, the check of its service) runs.
    Running {
        id: AttemptId,
        started: DateTime<Utc>,
    },
    /// Until this instant: a retry's backoff, a worker that runs the function, an external
    /// answer.
    Waiting { until: DateTime<Utc> },
    /// Its attempts are exhausted and its policy pauses (`on_exhausted = "pause"`): its
    /// parent was asked to pause; no attempt starts until a retry notice (its parent's
    /// resume) gives it a fresh budget, or a cancellation ends it.
    Parked,
}

/// One unfinished request.
#[derive(Clone, Debug)]
pub(super) struct Job<S> {
    /// Arrival order, for fairness between partitions.
    pub seq: u64,
    pub source: S,
    pub request: ActivityRequest,
    pub kind: JobKind,
    /// The attempt to run (or running).
    pub attempt: u32,
    /// When the waiting retry may run (committed with the progress).
    pub not_before: Option<DateTime<Utc>>,
    /// The activity's deadline (all attempts), if it has one.
    pub deadline: Option<DateTime<Utc>>,
    /// When the request was written (its record's timestamp).
    pub written_at: DateTime<Utc>,
    pub phase: Phase,
    /// Its attempt found its topic's rate limit without a token (counted once an attempt).
    pub rate_delayed: bool,
}

impl<S> Job<S> {
    pub fn mark(&self) -> Mark {
        Mark {
            // A parked request's attempt is of no use: a retry notice starts a fresh budget.
            attempt: (self.phase != Phase::Parked
                && (self.attempt != self.request.attempt || self.not_before.is_some()))
            .then_some(self.attempt),
            not_before: self.not_before,
            parked: self.phase == Phase::Parked,
        }
    }

    pub fn running(&self) -> Option<AttemptId> {
        match self.phase {
            Phase::Running { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// What a record at an offset is to its partition.
#[derive(Debug, PartialEq)]
pub(super) enum Admit {
    /// Delivered again, or finished before the take-over: nothing to do.
    Skip,
    /// New: take it. With a mark: the previous owner left it unfinished there.
    Take(Option<Mark>),
}

#[derive(Debug)]
pub(super) struct Partition<S> {
    /// The offset after the last record taken.
    pub next: Option<i64>,
    /// Unfinished requests, by offset.
    pub open: BTreeMap<i64, Job<S>>,
    /// The progress committed by the previous owner (or this one before a take-over), for the
    /// records not read again yet.
    pub restored: Option<Progress>,
    /// The (offset, metadata) last committed for this partition. Records before its offset
    /// are finished: one delivered anyway is ignored.
    pub committed: Option<(i64, String)>,
    pub paused: bool,
}

impl<S> Default for Partition<S> {
    fn default() -> Self {
        Partition {
            next: None,
            open: BTreeMap::new(),
            restored: None,
            committed: None,
            paused: false,
        }
    }
}

impl<S> Partition<S> {
    /// Takes the record at `offset` (in order): [`Admit::Skip`] for one delivered again or
    /// finished before the take-over.
    pub fn admit(&mut self, offset: i64) -> Admit {
        let before_frontier = self
            .committed
            .as_ref()
            .is_some_and(|(frontier, _)| offset < *frontier);
        if self.next.is_some_and(|next| offset < next) || before_frontier {
            return Admit::Skip;
        }
        self.next = Some(offset + 1);
        let Some(restored) = &mut self.restored else {
            return Admit::Take(None);
        };
        let restored_end = restored.end;
        let mark = if offset < restored_end {
            match restored.open.remove(&offset) {
                Some(mark) => Some(mark),
                // Finished before the take-over: its answer is committed.
                None => {
                    if offset + 1 >= restored_end {
                        self.restored = None;
                    }
                    return Admit::Skip;
                }
            }
        } else {
            None
        };
        if offset + 1 >= restored_end {
            self.restored = None;
        }
        Admit::Take(mark)
    }

    /// The offset of the unfinished request of activity `id`.
    pub fn find(&self, id: &ExecutionId) -> Option<i64> {
        self.open
            .iter()
            .find(|(_, job)| job.request.execution_id == *id)
            .map(|(offset, _)| *offset)
    }

    /// How many of its requests are parked.
    pub fn parked(&self) -> usize {
        self.open
            .values()
            .filter(|job| job.phase == Phase::Parked)
            .count()
    }

    /// The offset of the request whose attempt `id` runs.
    pub fn running(&self, id: AttemptId) -> Option<i64> {
        self.open
            .iter()
            .find(|(_, job)| job.running() == Some(id))
            .map(|(offset, _)| *offset)
    }

    /// The progress to commit, `None` while nothing is known.
    pub fn progress(&self) -> Option<Progress> {
        let restored_end = self.restored.as_ref().map(|r| r.end);
        let end = match (self.next, restored_end) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b)?,
        };
        let mut open: BTreeMap<i64, Mark> = self
            .open
            .iter()
            .map(|(offset, job)| (*offset, job.mark()))
            .collect();
        if let Some(restored) = &self.restored {
            for (offset, mark) in &restored.open {
                if self.next.is_none_or(|next| *offset >= next) {
                    open.insert(*offset, mark.clone());
                }
            }
        }
        let frontier = open.keys().next().copied().unwrap_or(end);
        Some(Progress {
            frontier,
            end,
            open,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    fn job(offset: i64, attempt: u32, not_before: Option<DateTime<Utc>>) -> Job<()> {
        let parent = crate::model::ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        let child = parent.child(
            &crate::model::JoinSetId::one_off(1, "sleep").expect("a join set"),
            1,
        );
        Job {
            seq: offset as u64,
            source: (),
            request: ActivityRequest {
                execution_id: child,
                parent_execution_id: parent,
                ffqn: "weir-examples:slow/sleeper.sleep".parse().expect("ffqn"),
                params: serde_json::json!([1]),
                attempt: 1,
                timeout_millis: None,
                deadline: None,
            },
            kind: JobKind::Unknown,
            attempt,
            not_before,
            deadline: None,
            written_at: t(0),
            phase: Phase::Ready,
            rate_delayed: false,
        }
    }

    fn mark(attempt: Option<u32>, not_before: Option<i64>) -> Mark {
        Mark {
            attempt,
            not_before: not_before.map(t),
            parked: false,
        }
    }

    /// The frontier is the first unfinished request, read or (restored from the previous
    /// owner's progress) not read again yet; records skipped as finished move nothing.
    #[test]
    fn progress_combines_what_is_read_with_what_was_restored() {
        let mut ps = Partition {
            restored: Some(Progress {
                frontier: 10,
                end: 20,
                open: BTreeMap::from([(10, mark(None, None)), (15, mark(Some(2), Some(5)))]),
            }),
            committed: Some((10, "wa1;n=10;o=0,5:2@1767225600005".to_owned())),
            ..Partition::default()
        };
        let restored = ps.progress().expect("a progress");
        assert_eq!(restored.frontier, 10);
        assert_eq!(restored.metadata(), "wa1;n=10;o=0,5:2@1767225600005");
        // 10 read again (and still running), 11..14 skipped: nothing moves.
        assert_eq!(ps.admit(10), Admit::Take(Some(mark(None, None))));
        ps.open.insert(10, job(10, 1, None));
        for offset in 11..15 {
            assert_eq!(ps.admit(offset), Admit::Skip, "{offset}");
        }
        assert_eq!(ps.admit(12), Admit::Skip, "delivered again");
        assert_eq!(
            ps.progress().expect("a progress").metadata(),
            restored.metadata()
        );
        // 10 finishes: the frontier moves to 15, the retry not read yet.
        ps.open.clear();
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (15, "wa1;n=5;o=0:2@1767225600005".to_owned())
        );
        // Everything of the restored range read and finished, and 21 read and waiting for
        // its retry (attempt 3).
        assert_eq!(ps.admit(15), Admit::Take(Some(mark(Some(2), Some(5)))));
        for offset in 16..20 {
            assert_eq!(ps.admit(offset), Admit::Skip, "{offset}");
        }
        assert!(ps.restored.is_none(), "the restored range is read");
        assert_eq!(ps.admit(21), Admit::Take(None));
        ps.next = Some(22);
        ps.open.insert(21, job(21, 3, Some(t(9))));
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (21, "wa1;n=1;o=0:3@1767225600009".to_owned())
        );
        ps.open.clear();
        let progress = ps.progress().expect("a progress");
        assert_eq!(
            (progress.frontier, progress.metadata()),
            (22, "wa1;n=0;o=".to_owned())
        );
        assert!(
            Partition::<()>::default().progress().is_none(),
            "nothing read, nothing to say"
        );
    }

    #[test]
    fn records_before_the_committed_frontier_are_skipped() {
        let mut ps: Partition<()> = Partition {
            committed: Some((7, String::new())),
            ..Partition::default()
        };
        assert_eq!(ps.admit(6), Admit::Skip);
        assert_eq!(ps.admit(7), Admit::Take(None));
        assert_eq!(ps.admit(7), Admit::Skip);
        assert_eq!(ps.next, Some(8));
    }
}
