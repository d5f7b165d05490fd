//! The order of one owner's store jobs: the stamp each job is written with.
//!
//! A job's stamp is its owner's generation and its time in seconds ([`WriteStamp::owner`],
//! [design: ordered writes](../../docs/design/store.md#ordered-writes)), and at equal stamps a delete
//! wins, as in CQL. So a timer deleted by one job and put again, under the same key, by a
//! later job of the same second would stay deleted: a `retry` timer fired at its due time and
//! put again due now (a reminder at a take-over, then an upgrade), a schedule's tick deleted
//! by a pause and put back by a resume. The timer is lost and its execution or schedule waits
//! for ever (found by the simulation, seed 325883).
//!
//! Invariant, kept here for every job the driver submits: an owner's stamps never go back, and
//! a job that puts a timer some earlier job deleted is stamped after that job. Such a job is
//! stamped a second ahead of its time; the stamps of the jobs after it wait until the clock
//! catches up. A job never collides with its own deletes: the driver and the materialiser's
//! merge keep one change per timer in a job ([`crate::rows::TimerChanges`]).

use std::collections::HashMap;

use crate::rows::{MaterialiseJob, TimerKey, WriteStamp};

/// See the module docs.
#[derive(Debug, Default)]
pub struct StampOrder {
    /// The stamp of the last job.
    last: WriteStamp,
    /// Timers deleted by jobs stamped at or after `last`'s second: the ones a later job's put
    /// could tie with.
    deleted: HashMap<TimerKey, WriteStamp>,
}

impl StampOrder {
    /// The stamp to write `job` with, `proposed` being its owner's stamp of now.
    pub fn stamp(&mut self, proposed: WriteStamp, job: &MaterialiseJob) -> WriteStamp {
        let mut stamp = proposed.max(self.last);
        for timer in &job.new_timers {
            if let Some(deleted) = self.deleted.get(&timer.key()) {
                stamp = stamp.max(WriteStamp(deleted.0 + 1));
            }
        }
        // Deletes stamped before this job can no longer tie with a later one.
        self.deleted.retain(|_, deleted| *deleted >= stamp);
        for key in &job.removed_timers {
            self.deleted.insert(key.clone(), stamp);
        }
        self.last = stamp;
        stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ExecutionId;
    use crate::rows::TimerRow;
    use chrono::{DateTime, Utc};

    fn retry(due_at: DateTime<Utc>) -> TimerRow {
        let id = ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
        crate::projection::retry_timer(0, &id, due_at)
    }

    /// A timer deleted and put again in the same second is put with a later stamp, and the
    /// stamps after it never go back; an unrelated job keeps its own stamp.
    #[test]
    fn a_timer_put_again_after_its_delete_outranks_the_delete() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("valid time");
        let second = WriteStamp::owner(7, now);
        let timer = retry(now);
        let mut order = StampOrder::default();
        let deleting = MaterialiseJob {
            removed_timers: vec![timer.key()],
            ..MaterialiseJob::default()
        };
        assert_eq!(order.stamp(second, &deleting), second);
        let other = MaterialiseJob {
            new_timers: vec![retry(now + chrono::Duration::seconds(1))],
            ..MaterialiseJob::default()
        };
        assert_eq!(order.stamp(second, &other), second, "another timer: no tie");
        let putting = MaterialiseJob {
            new_timers: vec![timer.clone()],
            ..MaterialiseJob::default()
        };
        let put = order.stamp(second, &putting);
        assert!(
            put.supersedes(false, second, true),
            "the put must replace the delete it follows"
        );
        assert_eq!(
            order.stamp(second, &MaterialiseJob::default()),
            put,
            "never back"
        );
        let later = WriteStamp::owner(7, now + chrono::Duration::seconds(5));
        assert_eq!(
            order.stamp(later, &putting),
            later,
            "the delete is forgotten"
        );
    }
}
