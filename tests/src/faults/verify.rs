//! The invariants checked after a fault run, on what a `read_committed` reader sees and on the
//! store: every execution finished exactly once with the right result; no output twice (results,
//! child submissions, activity requests, responses, history records); the history in
//! `weir.history` equal to the store's for every execution, with contiguous seqs, and each
//! execution row agreeing with it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use weir::codec::{
    ActivityRequest, AvroRecord, Codec, DlqEnvelope, ExecutionFinished, HistoryEntry,
    HistoryRecord, RecordPosition, Submission,
};
use weir::model::{ExecutionId, ExecutionResult, Response};
use weir::store::rows::ExecutionState;
use weir::topology::TopicRole;

use super::cluster::{FaultError, wait_until};
use super::workload::Job;
use crate::deployment::Deployment;
use crate::deployment::reader;
use crate::{kafka_config, unique_name};

/// How many examples of each kind of violation are kept.
const EXAMPLES: usize = 5;

/// One record as read, undecodable ones included.
pub struct Read<R> {
    pub key: String,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (the producer's clock, inside its transaction), in ms.
    pub timestamp: Option<i64>,
    pub record: Result<R, String>,
}

/// Waits until no transaction is open on any partition of `topic` (its last stable offset,
/// the high watermark under `read_committed`, reaches the high watermark), so that reading to
/// the end reads everything that will ever be committed there.
fn wait_stable(topic: &str, timeout: Duration) -> Result<(), FaultError> {
    let client = |isolation: &str| -> BaseConsumer {
        let mut config = kafka_config().client();
        config
            .set("group.id", unique_name("faults_lso"))
            .set("isolation.level", isolation);
        config.create().expect("consumer")
    };
    let (committed, uncommitted) = (client("read_committed"), client("read_uncommitted"));
    let metadata = committed
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(|e| FaultError::Timeout {
            what: format!("metadata of {topic}: {e}"),
            after: Duration::from_secs(30),
        })?;
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    wait_until(&format!("no open transaction on {topic}"), timeout, || {
        partitions
            .iter()
            .all(|&p| {
                let t = Duration::from_secs(10);
                let stable = committed.fetch_watermarks(topic, p, t).ok().map(|w| w.1);
                let high = uncommitted.fetch_watermarks(topic, p, t).ok().map(|w| w.1);
                stable.is_some() && stable == high
            })
            .then_some(())
    })
}

/// Every committed record of `topic`, read to the end of every partition.
pub fn read_all<R: AvroRecord>(
    codec: &Codec,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<Read<R>>, FaultError> {
    wait_stable(topic, timeout)?;
    let consumer = reader(topic, true);
    let partitions = consumer.assignment().map(|a| a.count()).unwrap_or_default();
    let mut at_end = HashSet::new();
    let mut records = Vec::new();
    wait_until(&format!("the end of {topic}"), timeout, || {
        while let Some(polled) = consumer.poll(Duration::from_millis(100)) {
            match polled {
                Ok(message) => {
                    at_end.remove(&message.partition());
                    let position = RecordPosition::at(topic, message.partition(), message.offset());
                    records.push(Read {
                        key: String::from_utf8_lossy(message.key().unwrap_or_default())
                            .into_owned(),
                        partition: message.partition(),
                        offset: message.offset(),
                        timestamp: message.timestamp().to_millis(),
                        record: codec
                            .decode::<R>(message.payload().unwrap_or_default(), &position)
                            .map_err(|e| e.to_string()),
                    });
                }
                Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                    at_end.insert(p);
                }
                Err(_) => {}
            }
        }
        (at_end.len() == partitions).then_some(())
    })?;
    Ok(records)
}

/// A time in ms since the epoch as `HH:MM:SS.mmm` UTC.
pub fn utc(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%H:%M:%S%.3f").to_string())
        .unwrap_or_else(|| millis.to_string())
}

/// What the checks found.
#[derive(Default)]
pub struct Verdict {
    /// Executions of the run with a result.
    pub finished: usize,
    /// Extra copies of outputs, per kind (`results`, `child submissions`, …).
    pub duplicates: BTreeMap<&'static str, usize>,
    /// Disagreements, per kind (`wrong result`, `log vs store`, …).
    pub mismatches: BTreeMap<&'static str, usize>,
    /// Examples, per kind.
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Figures that are not violations (records read, client resubmissions, …).
    pub notes: Vec<String>,
}

impl Verdict {
    fn duplicate(&mut self, kind: &'static str, n: usize, example: impl FnOnce() -> String) {
        *self.duplicates.entry(kind).or_default() += n;
        self.example(kind, example);
    }

    fn mismatch(&mut self, kind: &'static str, example: impl FnOnce() -> String) {
        *self.mismatches.entry(kind).or_default() += 1;
        self.example(kind, example);
    }

    fn example(&mut self, kind: &'static str, example: impl FnOnce() -> String) {
        let examples = self.examples.entry(kind).or_default();
        if examples.len() < EXAMPLES {
            examples.push(example());
        }
    }

    pub fn duplicates_total(&self) -> usize {
        self.duplicates.values().sum()
    }

    pub fn mismatches_total(&self) -> usize {
        self.mismatches.values().sum()
    }

    /// Counts the keys seen more than once.
    fn count_duplicates<K: std::hash::Hash + Eq + std::fmt::Debug>(
        &mut self,
        kind: &'static str,
        counts: HashMap<K, usize>,
    ) {
        for (key, n) in counts {
            if n > 1 {
                self.duplicate(kind, n - 1, || format!("{key:?} {n} times"));
            }
        }
    }
}

fn decoded<R>(verdict: &mut Verdict, topic: &str, reads: Vec<Read<R>>) -> Vec<(String, R)> {
    reads
        .into_iter()
        .filter_map(|read| match read.record {
            Ok(record) => Some((read.key, record)),
            Err(e) => {
                verdict.mismatch("undecodable records", || {
                    format!("{topic}[{}]@{}: {e}", read.partition, read.offset)
                });
                None
            }
        })
        .collect()
}

/// Runs every check. `submitted_at` is when each job was sent.
pub async fn verify(
    deployment: &Deployment,
    jobs: &[Job],
    submitted_at: &HashMap<ExecutionId, SystemTime>,
    timeout: Duration,
) -> Result<Verdict, FaultError> {
    let mut verdict = Verdict::default();
    let codec = Codec::single_object();
    let topic = |role| deployment.topic(role);

    // weir.history: per execution, in log order.
    let history_topic = topic(TopicRole::History);
    let reads = read_all::<HistoryRecord>(&codec, &history_topic, timeout)?;
    verdict
        .notes
        .push(format!("{} history records", reads.len()));
    let mut histories: HashMap<ExecutionId, Vec<HistoryRecord>> = HashMap::new();
    let mut written: HashMap<(ExecutionId, u64), i64> = HashMap::new();
    for read in reads {
        match read.record {
            Ok(record) => {
                if let Some(t) = read.timestamp {
                    written.insert((record.execution_id.clone(), record.seq), t);
                }
                histories
                    .entry(record.execution_id.clone())
                    .or_default()
                    .push(record);
            }
            Err(e) => verdict.mismatch("undecodable records", || {
                format!("{history_topic}[{}]@{}: {e}", read.partition, read.offset)
            }),
        }
    }

    // Results: exactly one per execution, the right one.
    let results_topic = topic(TopicRole::Results);
    let reads = read_all::<ExecutionFinished>(&codec, &results_topic, timeout)?;
    let mut results: HashMap<ExecutionId, Vec<ExecutionResult>> = HashMap::new();
    for (_, finished) in decoded(&mut verdict, &results_topic, reads) {
        results
            .entry(finished.execution_id)
            .or_default()
            .push(finished.result);
    }
    let known: HashSet<&ExecutionId> = jobs.iter().map(|j| &j.id).collect();
    for (id, all) in &results {
        if !known.contains(id) {
            verdict.mismatch("results of unknown executions", || id.to_string());
        }
        if all.len() > 1 {
            verdict.duplicate("results", all.len() - 1, || {
                let all: Vec<String> = all.iter().map(ToString::to_string).collect();
                format!("{id}: {} results: {}", all.len(), all.join(", "))
            });
        }
    }
    for job in jobs {
        match results.get(&job.id).and_then(|all| all.first()) {
            None => verdict.mismatch("no result", || format!("{} ({})", job.id, job.kind)),
            Some(result) => {
                verdict.finished += 1;
                if let Err(e) = job.check(result, &histories, submitted_at.get(&job.id).copied()) {
                    verdict.mismatch("wrong result", || {
                        format!("{} ({} {}): {e}", job.id, job.kind, job.params)
                    });
                }
            }
        }
    }

    // Submissions: the client's own (top-level) and the workers' (children).
    let submissions_topic = topic(TopicRole::Submissions);
    let reads = read_all::<Submission>(&codec, &submissions_topic, timeout)?;
    let (mut children, mut top_level) = (HashMap::new(), HashMap::new());
    for (_, submission) in decoded(&mut verdict, &submissions_topic, reads) {
        let counts = if submission.parent.is_some() {
            &mut children
        } else {
            &mut top_level
        };
        *counts
            .entry(submission.execution_id.to_string())
            .or_insert(0) += 1;
    }
    let resubmitted = top_level.values().filter(|n| **n > 1).count();
    verdict.notes.push(format!(
        "{} top-level submissions ({resubmitted} sent more than once by the client), {} child submissions",
        top_level.len(),
        children.len()
    ));
    verdict.count_duplicates("child submissions", children);

    // Activity requests: one per activity and attempt.
    let mut requests: HashMap<(String, u32), usize> = HashMap::new();
    for activity_topic in deployment.topology.route_topics() {
        let reads = read_all::<ActivityRequest>(&codec, &activity_topic, timeout)?;
        for (_, request) in decoded(&mut verdict, &activity_topic, reads) {
            *requests
                .entry((request.execution_id.to_string(), request.attempt))
                .or_default() += 1;
        }
    }
    let retries = requests.keys().filter(|(_, attempt)| *attempt > 1).count();
    verdict.notes.push(format!(
        "{} activity requests ({retries} retries)",
        requests.len()
    ));
    let activities: HashSet<String> = requests.keys().map(|(id, _)| id.clone()).collect();
    verdict.count_duplicates("activity requests", requests);

    // Responses: one per child (or delay) id, except an activity's answer, which the activity
    // worker produces before it commits its request's progress (issue 38,
    // `docs/design/activities.md#answers-before-progress`): a kill between the two leaves it
    // answered again. Each parent journals one answer (checked with the histories below).
    let responses_topic = topic(TopicRole::Responses);
    let reads = read_all::<Response>(&codec, &responses_topic, timeout)?;
    let mut answers: HashMap<String, usize> = HashMap::new();
    for (_, response) in decoded(&mut verdict, &responses_topic, reads) {
        *answers
            .entry(weir::projection::response_id(&response))
            .or_default() += 1;
    }
    let (answered_again, answers): (HashMap<_, _>, HashMap<_, _>) = answers
        .into_iter()
        .partition(|(id, n)| *n > 1 && activities.contains(id));
    verdict.notes.push(format!(
        "{} responses ({} activity answers on the topic more than once)",
        answers.len() + answered_again.len(),
        answered_again.len()
    ));
    verdict.count_duplicates("responses", answers);

    // Dead letters: none expected from this workload.
    let dlq_topic = topic(TopicRole::Dlq);
    let reads = read_all::<DlqEnvelope>(&codec, &dlq_topic, timeout)?;
    for (_, dead) in decoded(&mut verdict, &dlq_topic, reads) {
        verdict.mismatch("dead letters", || {
            format!(
                "{}[{}]@{} {:?}: {}",
                dead.original_topic,
                dead.original_partition,
                dead.original_offset,
                dead.reason,
                dead.error
            )
        });
    }

    // The log's histories: contiguous seqs, one Created first, one Finished last.
    for (id, history) in &histories {
        let seqs: Vec<u64> = history.iter().map(|r| r.seq).collect();
        let mut unique = seqs.clone();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() < seqs.len() {
            verdict.duplicate("history records", seqs.len() - unique.len(), || {
                format!("{id}: seqs {seqs:?}")
            });
        }
        if seqs != (0..seqs.len() as u64).collect::<Vec<_>>() {
            verdict.mismatch("seqs not contiguous", || format!("{id}: {seqs:?}"));
        }
        let mut journalled: HashMap<String, usize> = HashMap::new();
        for record in history {
            if let HistoryEntry::ResponseAppended(response) = &record.entry {
                *journalled
                    .entry(weir::projection::response_id(response))
                    .or_default() += 1;
            }
        }
        verdict.count_duplicates("journalled responses", journalled);
        let finishes = history
            .iter()
            .filter(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
            .count();
        let created_first = matches!(
            history.first().map(|r| &r.entry),
            Some(HistoryEntry::Created(_))
        );
        let finished_last = matches!(
            history.last().map(|r| &r.entry),
            Some(HistoryEntry::Finished { .. })
        );
        if !created_first || !finished_last || finishes != 1 {
            verdict.mismatch("history shape", || {
                format!(
                    "{id}: Created first {created_first}, Finished last {finished_last}, \
                     {finishes} Finished"
                )
            });
        }
    }

    // The store: the same histories, and execution rows that agree with them.
    let store = deployment.store().await;
    let checks = futures::stream::iter(histories.iter())
        .map(|(id, committed)| {
            let store = &store;
            async move {
                let stored = deployment.store_history(store, id).await;
                let row = weir::store::Store::execution(store, id).await;
                (id, committed, stored, row)
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for (id, committed, stored, row) in checks {
        if &stored != committed {
            let first = committed
                .iter()
                .zip(&stored)
                .position(|(a, b)| a != b)
                .unwrap_or(committed.len().min(stored.len()));
            // The log's records the store lacks (or holds otherwise), and when they were
            // committed: to lay beside the faults' times.
            let missing: Vec<u64> = committed
                .iter()
                .filter(|r| !stored.contains(r))
                .map(|r| r.seq)
                .collect();
            let times: Vec<i64> = missing
                .iter()
                .filter_map(|seq| written.get(&(id.clone(), *seq)).copied())
                .collect();
            let when = match (times.iter().min(), times.iter().max()) {
                (Some(a), Some(b)) => format!(", written to the log {} – {}", utc(*a), utc(*b)),
                _ => String::new(),
            };
            verdict.mismatch("log vs store history", || {
                format!(
                    "{id}: {} records in the log, {} in the store, first difference at {first}; \
                     seqs missing from the store {missing:?}{when}",
                    committed.len(),
                    stored.len()
                )
            });
        }
        let result_in_log = committed.iter().find_map(|r| match &r.entry {
            HistoryEntry::Finished { result, .. } => Some(result.clone()),
            _ => None,
        });
        match row {
            Ok(Some(row)) => {
                let result_in_row = row
                    .result
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<ExecutionResult>(r).ok());
                if row.state != ExecutionState::Finished
                    || row.history_version != committed.len() as i64
                    || result_in_row != result_in_log
                {
                    verdict.mismatch("execution row vs history", || {
                        format!(
                            "{id}: row {} at version {} with result {:?}; the log has {} \
                             records, result {:?}",
                            row.state,
                            row.history_version,
                            row.result,
                            committed.len(),
                            result_in_log.map(|r| r.to_string())
                        )
                    });
                }
            }
            Ok(None) => verdict.mismatch("execution row vs history", || {
                format!("{id}: no execution row")
            }),
            Err(e) => verdict.mismatch("execution row vs history", || {
                format!("{id}: cannot read the row: {e}")
            }),
        }
    }
    verdict.notes.push(format!(
        "{} executions in weir.history (children included)",
        histories.len()
    ));
    Ok(verdict)
}
