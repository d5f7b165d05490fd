//! The outside service of the external route (`Faults::activity_workers`): it reads the
//! route's requests, answers them late, twice or never (not transactionally), and commits
//! its own group's offset past the requests it answered, in order — what the activity
//! workers check before answering `timed-out`.

use chrono::Duration;

use super::cluster::{Payload, Topic};
use super::workflows::activity_result;
use super::world::{PendingAnswer, World};

impl World {
    /// The outside service reads the external route's new requests and answers them (after
    /// up to 6 s, some twice with `Faults::duplicate_answers`, some never), committing its
    /// group past what it answered.
    pub fn service_step(&mut self) {
        let now = self.now;
        for partition in 0..self.cluster.partitions(Topic::External) {
            let from = self
                .activities
                .positions
                .get(&partition)
                .copied()
                .unwrap_or(0);
            let (records, next) =
                self.cluster
                    .read_committed(Topic::External, partition, from, usize::MAX);
            let requests: Vec<(i64, crate::records::ActivityRequest)> = records
                .into_iter()
                .filter_map(|r| match &r.payload {
                    Some(Payload::Activity(req)) => Some((r.offset, req.clone())),
                    _ => None,
                })
                .collect();
            self.activities.positions.insert(partition, next);
            for (offset, request) in requests {
                self.act.service.open.insert((partition, offset));
                self.act
                    .service
                    .requests
                    .insert(request.execution_id.clone(), (partition, offset));
                if self.rng.chance(100) {
                    continue; // never answered
                }
                let result = activity_result(&request.params);
                let twice = self.faults.duplicate_answers && self.rng.chance(300);
                let copies = if twice { 2 } else { 1 };
                for _ in 0..copies {
                    let latency = self.rng.range(0, 6_000) as i64;
                    self.activities.pending.push(PendingAnswer {
                        due: now + Duration::milliseconds(latency),
                        parent: request.parent_execution_id.clone(),
                        child: request.execution_id.clone(),
                        result: result.clone(),
                    });
                }
                if copies == 2 {
                    self.stats.duplicate_answers += 1;
                }
            }
            self.act.service.committed.entry(partition).or_insert(0);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.activities.pending)
            .into_iter()
            .partition(|a| a.due <= now);
        self.activities.pending = later;
        for answer in due {
            if let Some(at) = self.act.service.requests.get(&answer.child) {
                self.act.service.open.remove(at);
            }
            self.send_answer(answer);
        }
        // Committed past every request answered, in order.
        for partition in 0..self.cluster.partitions(Topic::External) {
            let read = self
                .activities
                .positions
                .get(&partition)
                .copied()
                .unwrap_or(0);
            let first_open = self
                .act
                .service
                .open
                .range((partition, i64::MIN)..=(partition, i64::MAX))
                .next()
                .map(|(_, o)| *o);
            let committed = first_open.unwrap_or(read);
            self.act.service.committed.insert(partition, committed);
        }
    }

    /// Whether the outside service has read every request and sent every answer it will.
    pub fn service_idle(&self) -> bool {
        self.activities.pending.is_empty()
            && (0..self.cluster.partitions(Topic::External)).all(|p| {
                let from = self.activities.positions.get(&p).copied().unwrap_or(0);
                let (unread, _) = self.cluster.read_committed(Topic::External, p, from, 1);
                unread.is_empty()
            })
    }
}
