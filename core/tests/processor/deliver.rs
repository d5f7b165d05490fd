//! Answers delivered to the executions that wait for them: the terms a request carries, an
//! answer that does not fit or does not decode, and a response nobody may send.

use crate::fixtures::*;
use serde_json::json;
use weir_core::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::HistoryEntry;
use weir_core::sim::Workflow;
use weir_core::sim::exec::block_on;

/// What the parent of `request` journalled for it after `body` came, and the dead letters.
fn answered<R: weir_core::runner::WorkflowRunner>(
    processor: &mut Processor<R>,
    request: &weir_core::records::ActivityRequest,
    body: Body,
) -> (Vec<ExecutionResult>, Vec<weir_core::records::DlqReason>) {
    use weir_core::model::Response;
    let input = Input::Record {
        index: 0,
        partition: 0,
        key: Some(request.parent_execution_id.to_string()),
        size: 100,
        body: Ok(body),
        timestamp: None,
    };
    let mut batch = Batch::new(now());
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    let journalled = appended(&batch.effects)
        .into_iter()
        .filter_map(|(_, entry)| match entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            }) if child_execution_id == request.execution_id => Some(result),
            _ => None,
        })
        .collect();
    let dead = batch
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    (journalled, dead)
}

/// Issue 11 item 15: requests of an external activity carried no deadline or attempt bound
/// (the service could not know when it was too late), and an answer of the wrong shape was
/// journalled as is and trapped the parent when it read it. The request carries the
/// declaration's terms; an answer that does not fit becomes the child's `invalid-response`
/// error (the record copied to the DLQ as `refused`); one that fits is taken as before.
#[test]
fn external_requests_carry_their_terms_and_misfit_answers_become_the_childs_error() {
    use weir_core::model::Response;
    use weir_core::records::DlqReason;

    let config = ProcessorConfig {
        cache_bytes: 1 << 30,
        cache_size: 16,
        max_record_bytes: 1 << 20,
        partitions: 1,
        early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
    };
    let mut processor = Processor::new(TunedRunner::EXTERNAL, config);
    let request = seq_request(&mut processor);
    assert_eq!(request.timeout_millis, Some(5_000));
    assert_eq!(
        request.deadline,
        Some(now() + chrono::Duration::seconds(60))
    );
    let answer = |request: &weir_core::records::ActivityRequest, value: serde_json::Value| {
        Body::Response(Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: ExecutionResult::Ok(value),
            ran: None,
        })
    };
    let misfit = answer(&request, json!({"ten": 10}));
    let (journalled, dead) = answered(&mut processor, &request, misfit);
    assert!(
        matches!(journalled.as_slice(), [ExecutionResult::ExecutionError(e)]
            if e.kind == ExecutionErrorKind::InvalidResponse && e.reason.contains("is not a number")),
        "{journalled:?}"
    );
    assert_eq!(dead, [DlqReason::Refused]);

    // An answer that fits is taken as it is.
    let mut processor = Processor::new(TunedRunner::EXTERNAL, config);
    let request = seq_request(&mut processor);
    let fit = answer(&request, json!(10));
    let (journalled, dead) = answered(&mut processor, &request, fit);
    assert_eq!(journalled, [ExecutionResult::Ok(json!(10))]);
    assert!(dead.is_empty(), "{dead:?}");

    // Without declared terms (Weir's own activities in the simulation) nothing is added.
    let request = seq_request(&mut self::processor(1 << 20));
    assert_eq!((request.timeout_millis, request.deadline), (None, None));
}

/// Issue 11 item 15: an answer whose value is not JSON (the codec reads it as the child's
/// `invalid-response` error, `Body::MalformedAnswer`) was dead-lettered whole and its parent
/// waited forever. It is journalled as that error, and the record copied to the DLQ.
#[test]
fn a_malformed_answer_is_journalled_as_the_childs_error_and_dead_lettered() {
    use weir_core::model::{ExecutionError, Response};
    use weir_core::records::DlqReason;

    let mut processor = processor(1 << 20);
    let request = seq_request(&mut processor);
    let error = ExecutionResult::ExecutionError(ExecutionError::new(
        ExecutionErrorKind::InvalidResponse,
        "the answer was not taken: the value is not JSON text",
    ));
    let body = Body::MalformedAnswer {
        response: Response::ChildExecutionFinished {
            child_execution_id: request.execution_id.clone(),
            result: error.clone(),
            ran: None,
        },
        error: "the value is not JSON text".into(),
    };
    let (journalled, dead) = answered(&mut processor, &request, body);
    assert_eq!(journalled, [error]);
    assert_eq!(dead, [DlqReason::Undecodable]);
}

/// Events come only through the events topic, where they are deduplicated: a delivery
/// forged on `weir.responses` is dead-lettered and the wait stays open.
#[test]
fn an_event_delivery_on_the_responses_topic_is_refused() {
    use weir_core::model::{EventOutcome, JoinSetId, Response};

    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    step(
        &mut processor,
        submission_input(&id, Workflow::Approval, json!([0])),
    );
    let js = JoinSetId::one_off(1, "event").expect("join set");
    let forged = Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 100,
        body: Ok(Body::Response(Response::EventDelivered {
            event_request_id: id.event_request(&js, 1),
            outcome: EventOutcome::Received {
                event_id: "forged".into(),
                payload: json!(1),
            },
        })),
        timestamp: None,
    };
    let effects = step(&mut processor, forged);
    assert!(appended(&effects).is_empty(), "{effects:?}");
    assert_eq!(
        dead_letters(&effects)[0].0,
        weir_core::records::DlqReason::Refused
    );
    let real = step(&mut processor, event_input(&id, "real", 9));
    assert_eq!(published(&real), Some(ExecutionResult::Ok(json!(9))));
}
