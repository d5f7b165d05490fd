//! The tasks the activity worker runs for its core (`weir_core::activity`): attempts of WASM
//! activities on the [`WasmHost`], and checks of external services' consumer groups. Each
//! reports on one channel; the loop turns a report into the core's input
//! ([`Tasks::finished`]). A task the core aborts (a cancellation, a take-over) is aborted
//! here; a report that comes anyway is ignored by the core (its attempt id is not running).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::warn;
use weir_core::activity::{AttemptId, Input, RoutePartition, ServiceCheck, Start};

use super::KafkaConfig;
use crate::metrics::Metrics;
use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::wasm::activity::jitter_unit;
use crate::wasm::{AttemptReport, WasmHost};

/// What the activity core keeps of a record: the message itself (its bytes for a dead
/// letter, its headers for the trace of its attempts and its answer).
pub(super) type Source = Arc<OwnedMessage>;

/// A finished task: an attempt, or the check of an external service.
pub(super) enum TaskDone {
    Attempt {
        id: AttemptId,
        execution: ExecutionId,
        attempt: u32,
        report: Box<AttemptReport>,
    },
    Service {
        id: AttemptId,
        check: ServiceCheck,
    },
}

/// The tasks running for the core, and the clients of the external services' groups.
pub(super) struct Tasks {
    tx: mpsc::UnboundedSender<TaskDone>,
    running: HashMap<AttemptId, AbortHandle>,
    services: HashMap<String, Arc<BaseConsumer>>,
}

impl Tasks {
    /// No task yet, and the channel their reports come on.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<TaskDone>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let tasks = Tasks {
            tx,
            running: HashMap::new(),
            services: HashMap::new(),
        };
        (tasks, rx)
    }

    pub fn abort(&mut self, id: AttemptId) {
        if let Some(handle) = self.running.remove(&id) {
            handle.abort();
        }
    }

    /// Interrupts every task (a take-over: their results would be ignored anyway).
    pub fn abort_all(&mut self) {
        for (_, handle) in self.running.drain() {
            handle.abort();
        }
    }

    /// The core's input for a finished task.
    pub fn finished(&mut self, done: TaskDone, metrics: &Metrics) -> Input<Source> {
        match done {
            TaskDone::Attempt {
                id,
                execution,
                attempt,
                report,
            } => {
                self.running.remove(&id);
                metrics.wasm_pool_waits.add(u64::from(report.pool_waits));
                Input::AttemptFinished {
                    id,
                    result: report.result,
                    // A random draw (for the backoff's jitter), not a decision.
                    jitter: jitter_unit(&execution, attempt),
                }
            }
            TaskDone::Service { id, check } => {
                self.running.remove(&id);
                Input::ServiceChecked { id, check }
            }
        }
    }

    /// Runs an attempt as a task of its own.
    pub fn start(&mut self, host: &Arc<WasmHost>, start: Start<Source>) {
        let Start {
            id,
            attempt,
            request,
            timeout,
            source,
            ..
        } = start;
        let host = Arc::clone(host);
        let tx = self.tx.clone();
        let span = tracing::info_span!("activity", execution = %request.execution_id, ffqn = %request.ffqn, attempt);
        crate::telemetry::set_parent(&span, super::trace_headers::traceparent(&source));
        let task = async move {
            let report = match host
                .run_activity_attempt(&request.ffqn, &request.params, timeout)
                .await
            {
                Ok(report) => report,
                // The host's components do not change while it runs.
                Err(e) => AttemptReport {
                    result: ExecutionResult::error(
                        ExecutionErrorKind::UnknownFunction,
                        e.to_string(),
                    ),
                    pool_waits: 0,
                    waited: Duration::ZERO,
                },
            };
            let _ = tx.send(TaskDone::Attempt {
                id,
                execution: request.execution_id,
                attempt,
                report: Box::new(report),
            });
        };
        let handle = tokio::spawn(tracing::Instrument::instrument(task, span));
        self.running.insert(id, handle.abort_handle());
    }

    /// Reads whether the external service's `group` committed past `offset`, as a blocking
    /// task.
    pub fn check(
        &mut self,
        kafka: &KafkaConfig,
        id: AttemptId,
        partition: RoutePartition,
        offset: i64,
        group: String,
    ) {
        let service = match self.services.get(&group) {
            Some(service) => Arc::clone(service),
            None => match kafka.consumer(&group).create::<BaseConsumer>() {
                Ok(service) => {
                    let service = Arc::new(service);
                    self.services.insert(group.clone(), Arc::clone(&service));
                    service
                }
                Err(error) => {
                    warn!(%group, %error, "cannot read the external service's offsets");
                    let _ = self.tx.send(TaskDone::Service {
                        id,
                        check: ServiceCheck::Unavailable,
                    });
                    return;
                }
            },
        };
        let tx = self.tx.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let RoutePartition { topic, partition } = partition;
            let check = std::panic::AssertUnwindSafe(|| {
                service_committed_past(&service, &topic, partition, offset)
            });
            let read = match std::panic::catch_unwind(check) {
                Ok(read) => read.map_err(|e| e.to_string()),
                Err(_panic) => Err("the read panicked".to_owned()),
            };
            if let Err(error) = &read {
                warn!(%group, %topic, partition, offset, %error, "cannot read the external service's committed offset; asked again");
            }
            let check = service_check(&read);
            let _ = tx.send(TaskDone::Service { id, check });
        });
        self.running.insert(id, handle.abort_handle());
    }
}

/// What a read of the service group's committed offset says: a read that failed (a
/// transient Kafka error) is not an answer, so it is asked again rather than answered
/// `timed-out` for a request the service may have answered.
fn service_check(read: &Result<bool, String>) -> ServiceCheck {
    match read {
        Ok(true) => ServiceCheck::Answered,
        Ok(false) => ServiceCheck::NotAnswered,
        Err(_) => ServiceCheck::Unavailable,
    }
}

/// Whether the consumer group of an external service has committed past `offset`.
fn service_committed_past(
    service: &BaseConsumer,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<bool, rdkafka::error::KafkaError> {
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = service.committed_offsets(list, Duration::from_secs(10))?;
    let past = committed
        .find_partition(topic, partition)
        .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o > offset));
    Ok(past)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, a suspected item confirmed: a read of the service group's offsets that
    /// failed (a transient Kafka error) answered the request `timed-out`, though the service
    /// may have answered it. It is asked again ([`ServiceCheck::Unavailable`]); the core
    /// answers `timed-out` only once the group says so, or after its patience.
    #[test]
    fn a_failed_read_of_the_service_group_is_asked_again_not_timed_out() {
        let failed = Err("Broker: Coordinator not available".to_owned());
        assert_eq!(service_check(&failed), ServiceCheck::Unavailable);
        assert_eq!(service_check(&Ok(true)), ServiceCheck::Answered);
        assert_eq!(service_check(&Ok(false)), ServiceCheck::NotAnswered);
    }
}
