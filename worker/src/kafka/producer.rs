//! The producer behind [`super::transaction::Transactor`] and [`super::answers::Answers`]:
//! librdkafka's `BaseProducer`, each
//! record's delivery report sent to a future, and the reports served by a thread of Weir's.
//!
//! Why not rdkafka's `FutureProducer`: its polling thread (`ThreadedProducer`, rdkafka 0.39)
//! polls in pieces of 100 ms, and every piece ends in a busy loop of up to a millisecond: the
//! deadline's remaining time is truncated to whole milliseconds (`Timeout::as_millis`), so the
//! last wait is for 0 ms, again and again, until the deadline passes. That was 0.85 % of a
//! core for each of a worker's two producers with nothing to do (840 µs of CPU per piece,
//! `perf`: `clock_gettime` from `Deadline::elapsed`), most of an idle worker's 2.2 %. The
//! thread here polls in pieces of [`POLL_PIECE`]: the same busy end, a tenth as often. A
//! report is handled as soon as librdkafka queues it, whatever the piece (the poll returns
//! only at the deadline, serving each event as it comes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use tokio::sync::oneshot;

use super::outgoing::{Landed, OutgoingRecord};

/// How long one poll of the serving thread waits for delivery reports; also how long the
/// thread (and the producer it holds) outlives the last [`Served`] handle at most.
pub const POLL_PIECE: Duration = Duration::from_secs(1);

/// Where a record's delivery report goes.
pub type Delivery = oneshot::Receiver<Result<Landed, KafkaError>>;

/// Sends each delivery report to the future of its record.
pub struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<oneshot::Sender<Result<Landed, KafkaError>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, report: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok(Landed {
                partition: message.partition(),
                offset: message.offset(),
            }),
            Err((error, _)) => Err(error.clone()),
        };
        // The batch that waited for it may have given up (its future dropped): nothing to do.
        let _ = report.send(outcome);
    }
}

/// A producer whose delivery reports are served by its own thread; clones share both. The
/// thread stops within [`POLL_PIECE`] of the last clone's drop, and drops the producer then.
#[derive(Clone)]
pub struct Served {
    inner: Arc<Handle>,
}

struct Handle {
    producer: Arc<BaseProducer<Reports>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Served {
    /// Creates the producer of `config` and starts its serving thread.
    pub fn create(config: &ClientConfig) -> Result<Self, KafkaError> {
        let producer = Arc::new(BaseProducer::from_config_and_context(config, Reports)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (served, flag) = (Arc::clone(&producer), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("weir-producer".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    served.poll(POLL_PIECE);
                }
            })
            .map_err(|e| {
                KafkaError::ClientCreation(format!("cannot start the producer's thread: {e}"))
            })?;
        Ok(Served {
            inner: Arc::new(Handle { producer, stop }),
        })
    }

    /// The producer, for the transactional calls of `rdkafka::producer::Producer`.
    pub fn producer(&self) -> &Arc<BaseProducer<Reports>> {
        &self.inner.producer
    }

    /// Commits the open transaction: rdkafka's `commit_transaction`, once librdkafka counts no
    /// message of this producer as in flight.
    ///
    /// rdkafka's `commit_transaction` flushes first: one `rd_kafka_flush(0)` and, while a
    /// message is still counted, a poll of the event queue for 100 ms, always the whole 100
    /// ms (`BaseProducer::poll` returns at its deadline). librdkafka stops counting a message
    /// when its delivery report is destroyed, which is after the report's future was told: a
    /// batch that awaited its deliveries and commits at once can find the serving thread still
    /// holding the last report, and its commit then waited 100 ms for nothing (issue 32's
    /// stack bench: the ~115 ms steps, in some runs most of a fan-out's). So the count is
    /// awaited here first, by `rd_kafka_flush` with the transaction's timeout: with delivery
    /// reports as events (rdkafka's mode) it waits on librdkafka's condition variable for the
    /// count to reach zero and leaves the queue to the serving thread.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        use rdkafka::producer::Producer;
        use rdkafka::types::RDKafkaErrorCode;
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let client = self.inner.producer.client().native_ptr();
        // SAFETY: `client` is the live producer handle of `self.inner.producer`, borrowed for
        // the call; `rd_kafka_flush` only reads it and waits.
        let flushed = unsafe { rdkafka::bindings::rd_kafka_flush(client, millis) };
        let flushed = RDKafkaErrorCode::from(flushed);
        if flushed != RDKafkaErrorCode::NoError {
            return Err(KafkaError::Flush(flushed));
        }
        self.inner.producer.commit_transaction(timeout)
    }

    /// Queues a record (on `partition`, or its key's); its future resolves with where it
    /// landed (or why not).
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &str,
        payload: Option<&[u8]>,
        headers: OwnedHeaders,
    ) -> Result<Delivery, KafkaError> {
        let (report, delivery) = oneshot::channel();
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(report))
            .key(key)
            .headers(headers);
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        self.inner.producer.send(record).map_err(|(e, _)| e)?;
        Ok(delivery)
    }

    /// [`send`](Self::send) of an [`OutgoingRecord`].
    pub fn send_record(&self, record: &OutgoingRecord) -> Result<Delivery, KafkaError> {
        let headers = record
            .headers
            .iter()
            .fold(OwnedHeaders::new(), |headers, (key, value)| {
                headers.insert(Header {
                    key,
                    value: Some(value),
                })
            });
        self.send(
            &record.topic,
            record.partition,
            &record.key,
            record.value.as_deref(),
            headers,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `/proc` directories of this process's threads named `name`.
    fn threads_named(name: &str) -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/task")
            .expect("procfs")
            .map(|task| task.expect("task").path())
            .filter(|path| {
                std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .collect()
    }

    /// CPU time (ns) of this process's threads named `name`, from their `schedstat`.
    fn cpu_of_threads(name: &str) -> u64 {
        threads_named(name)
            .iter()
            .filter_map(|path| {
                let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
                stat.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + POLL_PIECE * 5;
        while !done() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The busy end of every poll (see the module docs) is paid once a [`POLL_PIECE`]: with
    /// nothing to deliver, the serving thread uses a small fraction of what rdkafka's
    /// 100 ms polling thread did (840 µs of CPU a piece, 0.85 % of a core). Over 3 s it may
    /// use 15 ms (0.5 %); with 100 ms pieces it used ~25 ms. The thread stops once the last
    /// handle is dropped.
    #[test]
    fn an_idle_producer_costs_next_to_nothing_and_its_thread_stops_after_the_last_handle() {
        let before = threads_named("weir-producer").len();
        let mut config = ClientConfig::new();
        // Nothing listens there: no broker traffic, only the serving thread's own polls.
        config.set("bootstrap.servers", "127.0.0.1:9");
        let served = Served::create(&config).expect("producer");
        let clone = served.clone();
        // The thread names itself once it runs.
        wait_until("the serving thread runs", || {
            threads_named("weir-producer").len() > before
        });
        let start = cpu_of_threads("weir-producer");
        std::thread::sleep(Duration::from_secs(3));
        let used = cpu_of_threads("weir-producer").saturating_sub(start);
        assert!(
            used < 15_000_000,
            "the idle serving thread used {} ms of CPU in 3 s",
            used / 1_000_000
        );
        drop(served);
        drop(clone);
        wait_until("the serving thread stops after the last handle", || {
            threads_named("weir-producer").len() <= before
        });
    }
}
