//! What the feature modules share: a processor, the inputs they step, and readers of the
//! effects that come out.

use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::{HistoryEntry, Submission};
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

/// The time the tests step their batches at, unless they say otherwise.
pub fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
}

/// A processor of the simulation's runner, with room for 16 runs, on one partition.
pub fn processor(max_record_bytes: usize) -> Processor<SimRunner> {
    processor_of(SimRunner, max_record_bytes)
}

/// A processor of `runner` with room for 16 runs, on one partition.
pub fn processor_of<R: weir_core::runner::WorkflowRunner>(
    runner: R,
    max_record_bytes: usize,
) -> Processor<R> {
    Processor::new(runner, processor_config(max_record_bytes, 1))
}

/// The configuration of a processor with room for 16 runs, on `partitions` partitions.
pub fn processor_config(max_record_bytes: usize, partitions: i32) -> ProcessorConfig {
    ProcessorConfig {
        cache_bytes: 1 << 30,
        cache_size: 16,
        max_record_bytes,
        partitions,
        early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
    }
}

/// The input record of a top-level submission of `workflow` with `params` as `id`.
pub fn submission_input(id: &ExecutionId, workflow: Workflow, params: serde_json::Value) -> Input {
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Submission(Submission {
            execution_id: id.clone(),
            ffqn: workflow.ffqn(),
            params,
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: Default::default(),
            deadline: None,
            concurrency: None,
            tenant: None,
        })),
        timestamp: None,
    }
}

/// The effects of `input`, stepped alone in a batch at `now()`.
pub fn step<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    input: Input,
) -> Vec<Effect> {
    step_at(processor, input, now())
}

/// The effects of `input` stepped alone in a batch at `now`.
pub fn step_at<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    input: Input,
    now: DateTime<Utc>,
) -> Vec<Effect> {
    let mut batch = Batch::new(now);
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    batch.effects
}

/// The effects of submitting `workflow` with `params` (a new execution) to `processor`.
pub fn submit<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    workflow: Workflow,
    params: serde_json::Value,
) -> Vec<Effect> {
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(processor, submission_input(&id, workflow, params))
}

/// The history `effects` append to `id`, as the store would return it (recorded at `at`).
pub fn stored(
    id: &ExecutionId,
    effects: &[Effect],
    at: DateTime<Utc>,
) -> Vec<(weir_core::records::HistoryRecord, DateTime<Utc>)> {
    appended(effects)
        .into_iter()
        .map(|(seq, entry)| {
            let record = weir_core::records::HistoryRecord {
                execution_id: id.clone(),
                seq,
                entry,
                at: Some(at),
            };
            (record, at)
        })
        .collect()
}

/// The appended history entries of `effects`, with their seqs.
pub fn appended(effects: &[Effect]) -> Vec<(u64, HistoryEntry)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { seq, entry, .. } => Some((*seq, entry.clone())),
            _ => None,
        })
        .collect()
}

/// The activity request of `Seq [1, 5]`, a new execution submitted to `processor`.
pub fn seq_request<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
) -> weir_core::records::ActivityRequest {
    submit(processor, Workflow::Seq, json!([1, 5]))
        .into_iter()
        .find_map(|e| match e {
            Effect::RequestActivity(r) => Some(r),
            _ => None,
        })
        .expect("the activity request")
}

/// The input record of event `event_id` named `approved` for `target`, with `payload`.
pub fn event_input(target: &ExecutionId, event_id: &str, payload: i64) -> Input {
    event_named(target, event_id, "approved", payload)
}

/// The input record of `body`, keyed by `key`, on partition 0.
pub fn input_of(key: &ExecutionId, body: Body) -> Input {
    Input::Record {
        index: 0,
        partition: 0,
        key: Some(key.to_string()),
        size: 100,
        body: Ok(body),
        timestamp: None,
    }
}

/// An answer for `owner`'s child (or stub child) `child` on `weir.responses`: what a child's
/// owner, an external service or `weir stub` writes.
pub fn answer(owner: &ExecutionId, child: &ExecutionId, result: ExecutionResult) -> Input {
    input_of(
        owner,
        Body::Response(weir_core::model::Response::ChildExecutionFinished {
            child_execution_id: child.clone(),
            result,
            ran: None,
        }),
    )
}

/// The state `effects` put for the key `key` (a correlation key, or the id of an execution
/// that does not exist yet), if any: `Some(None)` when it is forgotten.
pub fn correlation_put(
    effects: &[Effect],
    key: &str,
) -> Option<Option<weir_core::correlation::CorrelationState>> {
    effects.iter().find_map(|e| match e {
        Effect::PutCorrelation { key: put, state } if put == key => Some(state.clone()),
        _ => None,
    })
}

/// The events `effects` forward (to a key's holder, or back to `weir.events` marked).
pub fn forwards(effects: &[Effect]) -> Vec<weir_core::records::InboundEvent> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ForwardEvent(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

/// The input record of event `event_id` named `name` for `target`, with `payload`.
pub fn event_named(target: &ExecutionId, event_id: &str, name: &str, payload: i64) -> Input {
    input_of(
        target,
        Body::Event(weir_core::records::InboundEvent {
            event: weir_core::records::ReceivedEvent {
                event_id: event_id.to_owned(),
                name: name.to_owned(),
                payload: json!(payload),
            },
            target: target.clone(),
            sent_at: now(),
            correlation_key: None,
            waited_until: None,
        }),
    )
}

/// The result `effects` publish for a top-level execution, if any.
pub fn published(effects: &[Effect]) -> Option<ExecutionResult> {
    effects.iter().find_map(|e| match e {
        Effect::PublishResult(f) => Some(f.result.clone()),
        _ => None,
    })
}

/// The dead letters `effects` write, with their reasons and errors.
pub fn dead_letters(effects: &[Effect]) -> Vec<(weir_core::records::DlqReason, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { reason, error, .. } => Some((*reason, error.clone())),
            _ => None,
        })
        .collect()
}

/// The input record of an operator's cancellation of `id` (a termination if `terminate`).
pub fn cancel_input(id: &ExecutionId, terminate: bool) -> Input {
    input_of(
        id,
        Body::Cancel(weir_core::records::CancelRequest {
            execution_id: id.clone(),
            reason: "operator".into(),
            terminate,
            requested_at: now(),
            waited_until: None,
        }),
    )
}

/// Whether `result` is the error of a cancelled execution.
pub fn cancelled(result: Option<ExecutionResult>) -> bool {
    matches!(result, Some(ExecutionResult::ExecutionError(e)) if e.kind == ExecutionErrorKind::Cancelled)
}

/// The simulation's runner with a few of its answers changed: its activity declared external
/// ([`TunedRunner::EXTERNAL`]: requests carry a 5 s attempt bound and a 60 s deadline, and an
/// answer that is not a number does not fit), or every function limited to `n` running
/// executions across the fleet ([`TunedRunner::limited`], `max_running`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TunedRunner {
    pub external: bool,
    pub limit: Option<u32>,
}

impl TunedRunner {
    pub const EXTERNAL: TunedRunner = TunedRunner {
        external: true,
        limit: None,
    };

    pub fn limited(n: u32) -> Self {
        TunedRunner {
            external: false,
            limit: Some(n),
        }
    }
}

impl weir_core::runner::WorkflowRunner for TunedRunner {
    type Run = <SimRunner as weir_core::runner::WorkflowRunner>::Run;

    fn check_submission(
        &self,
        ffqn: &weir_core::model::Ffqn,
        params: &serde_json::Value,
    ) -> Result<(), weir_core::runner::Rejection> {
        SimRunner.check_submission(ffqn, params)
    }

    fn concurrency_limit(&self, ffqn: &weir_core::model::Ffqn) -> Option<u32> {
        self.limit.or_else(|| SimRunner.concurrency_limit(ffqn))
    }

    fn request_terms(&self, ffqn: &weir_core::model::Ffqn) -> weir_core::runner::RequestTerms {
        if !self.external {
            return SimRunner.request_terms(ffqn);
        }
        weir_core::runner::RequestTerms {
            attempt_timeout: Some(std::time::Duration::from_secs(5)),
            deadline_after: Some(std::time::Duration::from_secs(60)),
        }
    }

    fn check_answer(
        &self,
        ffqn: &weir_core::model::Ffqn,
        result: &ExecutionResult,
    ) -> Result<(), String> {
        match result {
            ExecutionResult::Ok(v) if self.external && !v.is_i64() => {
                Err(format!("{v} is not a number"))
            }
            _ => SimRunner.check_answer(ffqn, result),
        }
    }

    async fn start(
        &self,
        execution: weir_core::replay::Execution,
        history: Vec<weir_core::model::HistoryEvent>,
        responses: Vec<weir_core::model::Response>,
        now: DateTime<Utc>,
    ) -> Result<(Self::Run, weir_core::runner::RunStep), weir_core::runner::RunError> {
        SimRunner.start(execution, history, responses, now).await
    }
}
