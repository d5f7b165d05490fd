//! Records whose writer schema the registry cannot give now: held in their partition, never
//! dead-lettered (issue 33 F6).
//!
//! A worker with `--schema-registry` fetches a writer schema id it has not seen from the
//! registry. When the registry does not answer (a network error, a 5xx or a 429: a
//! [transient](crate::codec::DecodeError::is_transient) error) the record is fine and only the
//! registry is away: the record and every later one of its partition are dropped from the
//! poll, the partition is sought back to the record, and the worker polls again after a
//! backoff (100 ms doubling to 5 s, reset once a poll holds nothing), counted in
//! `weir_registry_holds_total` and logged. The other partitions go on. Only an answer — the id
//! is unknown (404), the schema does not parse — sends a record to the DLQ. The trigger worker
//! holds its whole batch the same way (`trigger_worker.rs`).

use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};

const FIRST_WAIT: Duration = Duration::from_millis(100);
const MAX_WAIT: Duration = Duration::from_secs(5);

/// The partitions one poll holds back, and the backoff between polls that hold.
#[derive(Debug, Default)]
pub struct RegistryHold {
    /// Per partition held by the current poll: the offset of its first record held.
    held: Vec<(String, i32, i64)>,
    /// The wait before the next poll, after one that held (`None`: the last poll held nothing).
    wait: Option<Duration>,
}

impl RegistryHold {
    /// Whether `message` is behind a record held by this poll (it is dropped: its partition is
    /// read again from the held record).
    pub fn is_held(&self, message: &OwnedMessage) -> bool {
        self.held.iter().any(|(topic, partition, _)| {
            topic == message.topic() && *partition == message.partition()
        })
    }

    /// Holds `message` (its writer schema could not be fetched) and the rest of its partition.
    pub fn hold(&mut self, message: &OwnedMessage) {
        if !self.is_held(message) {
            self.held.push((
                message.topic().to_owned(),
                message.partition(),
                message.offset(),
            ));
        }
    }

    /// After a poll: seeks every held partition back to its first held record and returns how
    /// many partitions were held (0: the backoff is reset).
    pub fn finish_poll<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
        &mut self,
        consumer: &C,
    ) -> Result<usize, KafkaError> {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            self.wait = None;
            return Ok(0);
        }
        let mut list = TopicPartitionList::new();
        for (topic, partition, offset) in &held {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        consumer.seek_partitions(list, Duration::from_secs(30))?;
        self.wait = Some(next_wait(self.wait));
        Ok(held.len())
    }

    /// How long to wait before the next poll (`None`: at once).
    pub fn wait(&self) -> Option<Duration> {
        self.wait
    }
}

/// The wait after a poll that held, given the wait after the previous one.
fn next_wait(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_WAIT, |w| (w * 2).min(MAX_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_five_seconds() {
        let mut wait = None;
        let mut waits = Vec::new();
        for _ in 0..8 {
            wait = Some(next_wait(wait));
            waits.push(wait.unwrap().as_millis());
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
