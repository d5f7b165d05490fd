//! Sample records for the codec tests: every record type, every history event, response and
//! result variant. Shared by the `codec_*` test files (`mod codec_samples;`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use ulid::Ulid;
use weir::codec::{
    ActivityCancel, ActivityRequest, CancelRequest, Created, DlqEnvelope, DlqHeader, DlqReason,
    EventRecord, ExecutionFinished, HistoryEntry, HistoryRecord, InboundEvent, ParentRef,
    PauseAction, PauseRequest, ReceivedEvent, ResetOf, ResetRequest, ResetStart, ResetThen,
    StoredCorrelation, Submission, UpgradeRequest,
};
use weir::correlation::{
    BufferedEvent, CorrelationAction, CorrelationCommand, CorrelationState, KeyedEvent,
    RememberedEvent,
};
use weir::model::{
    ChildKind, DelayOutcome, EventOutcome, ExecutionError, ExecutionErrorKind, ExecutionId,
    ExecutionResult, Ffqn, HistoryEvent, JoinSetId, JoinSetRequest, PersistValue, Ran, Response,
    ScheduleAt, StubOutcome, Version,
};

pub fn root() -> ExecutionId {
    ExecutionId::top_level(Ulid::from(0x0190_1234_5678_9abc_def0_1234_5678_9abc_u128))
}

pub fn ffqn() -> Ffqn {
    "weir-examples:activities/compute@1.2.0.fib"
        .parse()
        .unwrap()
}

/// A time with nanosecond precision (what `Utc::now()` gives).
pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap()
}

pub fn results() -> Vec<ExecutionResult> {
    let mut results = vec![
        ExecutionResult::Ok(json!({"a": [1, 2.5, "x", null, true]})),
        ExecutionResult::Ok(json!(null)),
        ExecutionResult::Err(json!("insufficient funds")),
        ExecutionResult::ExecutionError(
            ExecutionError::new(ExecutionErrorKind::NondeterminismDetected, "mismatch")
                .with_detail("history: JoinNext(g:1)\ncode: Persist"),
        ),
    ];
    for kind in [
        ExecutionErrorKind::TimedOut,
        ExecutionErrorKind::NondeterminismDetected,
        ExecutionErrorKind::Cancelled,
        ExecutionErrorKind::Trap,
        ExecutionErrorKind::OutOfFuel,
        ExecutionErrorKind::OutOfMemory,
        ExecutionErrorKind::UnhandledChildExecutionError,
        ExecutionErrorKind::InvalidParams,
        ExecutionErrorKind::RetriesExhausted,
    ] {
        results.push(ExecutionResult::error(kind, format!("{kind}")));
    }
    results
}

pub fn responses() -> Vec<Response> {
    let js = JoinSetId::generated(1).unwrap();
    let mut responses: Vec<Response> = results()
        .into_iter()
        .enumerate()
        .map(|(i, result)| Response::ChildExecutionFinished {
            child_execution_id: root().child(&js, i as u64 + 1),
            result,
            // Told and not told, each.
            ran: (i % 2 == 0).then(|| Ran {
                started_at: t0(),
                finished_at: t0() + chrono::Duration::nanoseconds(1_250_000_001),
            }),
        })
        .collect();
    let sleep = JoinSetId::one_off(2, "sleep").unwrap();
    responses.push(Response::DelayFinished {
        delay_id: root().delay(&sleep, 1),
        outcome: DelayOutcome::Ok,
    });
    responses.push(Response::DelayFinished {
        delay_id: root().delay(&sleep, 1),
        outcome: DelayOutcome::Cancelled,
    });
    responses
}

pub fn events() -> Vec<HistoryEvent> {
    let js = JoinSetId::generated(1).unwrap();
    let named = JoinSetId::named("payments-2024").unwrap();
    let one_off = JoinSetId::one_off(3, "charge").unwrap();
    let mut events = vec![
        HistoryEvent::JoinSetCreate {
            join_set_id: named.clone(),
        },
        HistoryEvent::JoinNext {
            join_set_id: js.clone(),
            closing: true,
            requested_ffqn: Some(ffqn()),
        },
        HistoryEvent::JoinNext {
            join_set_id: one_off.clone(),
            closing: false,
            requested_ffqn: None,
        },
        HistoryEvent::JoinNextTooMany {
            join_set_id: js.clone(),
            requested_ffqn: Some(ffqn()),
        },
        HistoryEvent::JoinNextTooMany {
            join_set_id: js.clone(),
            requested_ffqn: None,
        },
        HistoryEvent::Persist {
            value: PersistValue::RandomU64 {
                min: 0,
                max_exclusive: u64::MAX,
                value: u64::MAX - 1,
            },
        },
        HistoryEvent::Persist {
            value: PersistValue::RandomString {
                min_length: 1,
                max_length_exclusive: 64,
                value: "héllo ✓".into(),
            },
        },
        HistoryEvent::Stub {
            target_execution_id: root().child(&one_off, 1),
            result: ExecutionResult::Ok(json!(42)),
            outcome: StubOutcome::Ok,
        },
        HistoryEvent::JoinSetRequest {
            join_set_id: named.clone(),
            request: JoinSetRequest::EventRequest {
                event_request_id: root().event_request(&named, 4),
                name: "payment.received".into(),
            },
        },
        HistoryEvent::Stub {
            target_execution_id: root().child(&one_off, 1),
            result: ExecutionResult::Err(json!({"code": 7})),
            outcome: StubOutcome::Conflict,
        },
        HistoryEvent::Correlate {
            key: "payment:order-42".into(),
        },
    ];
    for (i, kind) in [ChildKind::Workflow, ChildKind::Activity, ChildKind::Stub]
        .into_iter()
        .enumerate()
    {
        events.push(HistoryEvent::JoinSetRequest {
            join_set_id: js.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: root().child(&js, i as u64 + 1).child(&one_off, 1),
                target_ffqn: ffqn(),
                params: json!([1, "two", {"three": [3]}]),
                child_kind: kind,
            },
        });
    }
    for (i, timeout) in schedule_ats().into_iter().enumerate() {
        events.push(HistoryEvent::JoinSetRequest {
            join_set_id: one_off.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id: root().delay(&one_off, i as u64 + 1),
                timeout,
                expires_at: t0(),
            },
        });
        events.push(HistoryEvent::Schedule {
            execution_id: ExecutionId::top_level(Ulid::from(i as u128 + 7)),
            ffqn: ffqn(),
            params: json!([]),
            intention: timeout,
            scheduled_at: t0(),
        });
    }
    events
}

pub fn schedule_ats() -> Vec<ScheduleAt> {
    vec![
        ScheduleAt::Now,
        ScheduleAt::At(t0()),
        ScheduleAt::At(DateTime::from_timestamp(-86_400 * 365, 999).unwrap()),
        ScheduleAt::In(Duration::from_nanos(1_500_000_001)),
        ScheduleAt::In(Duration::new(i64::MAX as u64, 999_999_999)),
    ]
}

pub fn submissions() -> Vec<Submission> {
    let js = JoinSetId::generated(4).unwrap();
    vec![
        Submission {
            execution_id: root(),
            ffqn: ffqn(),
            params: json!([10]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: BTreeMap::new(),
            deadline: None,
            concurrency: None,
            tenant: None,
        },
        Submission {
            execution_id: root().child(&js, 2),
            ffqn: ffqn(),
            params: json!([{"order": "o-1", "items": [1, 2]}, "x"]),
            parent: Some(ParentRef {
                execution_id: root(),
                join_set_id: js,
                child_kind: ChildKind::Workflow,
            }),
            scheduled_at: Some(t0()),
            correlation_id: Some("req-17".into()),
            metadata: BTreeMap::from([
                ("traceparent".to_string(), "00-abc-def-01".to_string()),
                ("tenant".to_string(), "acme".to_string()),
            ]),
            deadline: Some(t0() + chrono::Duration::nanoseconds(1_500)),
            concurrency: None,
            tenant: None,
        },
        // A concurrency key with its limit (and a tenant), and one with the default limit.
        Submission {
            execution_id: reset_to(),
            ffqn: ffqn(),
            params: json!([]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: BTreeMap::new(),
            deadline: None,
            concurrency: Some(weir::concurrency::ConcurrencyKey {
                key: "customer-42".into(),
                limit: Some(3),
            }),
            tenant: Some("acme".into()),
        },
        Submission {
            execution_id: root(),
            ffqn: ffqn(),
            params: json!([null]),
            parent: None,
            scheduled_at: Some(t0()),
            correlation_id: None,
            metadata: BTreeMap::new(),
            deadline: None,
            concurrency: Some(weir::concurrency::ConcurrencyKey {
                key: "k".into(),
                limit: None,
            }),
            tenant: None,
        },
    ]
}

pub fn activity_requests() -> Vec<ActivityRequest> {
    let js = JoinSetId::one_off(1, "fib").unwrap();
    vec![
        ActivityRequest {
            execution_id: root().child(&js, 1),
            parent_execution_id: root(),
            ffqn: ffqn(),
            params: json!([30]),
            attempt: 1,
            timeout_millis: None,
            deadline: None,
        },
        ActivityRequest {
            execution_id: root().child(&js, 1),
            parent_execution_id: root(),
            ffqn: ffqn(),
            params: json!([]),
            attempt: 4,
            timeout_millis: Some(30_000),
            deadline: Some(t0()),
        },
    ]
}

/// Responses only history carries (`weir.responses` never does).
pub fn event_deliveries() -> Vec<Response> {
    let js = JoinSetId::one_off(2, "event").unwrap();
    vec![
        Response::EventDelivered {
            event_request_id: root().event_request(&js, 1),
            outcome: EventOutcome::Received {
                event_id: "order-42:paid".into(),
                payload: json!({"amount": 1250, "note": "é"}),
            },
        },
        Response::EventDelivered {
            event_request_id: root().event_request(&js, 1),
            outcome: EventOutcome::Cancelled,
        },
    ]
}

pub fn inbound_events() -> Vec<InboundEvent> {
    let js = JoinSetId::generated(1).unwrap();
    vec![
        InboundEvent {
            event: ReceivedEvent {
                event_id: "e-1".into(),
                name: "approved".into(),
                payload: json!(true),
            },
            target: root(),
            sent_at: t0(),
            correlation_key: None,
            waited_until: None,
        },
        InboundEvent {
            event: ReceivedEvent {
                event_id: "x".repeat(128),
                name: "a.b_c-9".into(),
                payload: json!([1, {"k": null}]),
            },
            target: root().child(&js, 3),
            sent_at: DateTime::<Utc>::MAX_UTC,
            correlation_key: None,
            waited_until: None,
        },
        // Forwarded by its correlation key to the execution holding it.
        InboundEvent {
            event: ReceivedEvent {
                event_id: "order-42:paid".into(),
                name: "paid".into(),
                payload: json!({"amount": 1250}),
            },
            target: root(),
            sent_at: t0(),
            correlation_key: Some("payment:order-42".into()),
            waited_until: None,
        },
        // Kept for an execution that did not exist, sent back when none came in time.
        InboundEvent {
            event: ReceivedEvent {
                event_id: "early".into(),
                name: "approved".into(),
                payload: json!(1),
            },
            target: root(),
            sent_at: t0(),
            correlation_key: None,
            waited_until: Some(t0() + chrono::Duration::nanoseconds(600_000_000_123)),
        },
    ]
}

/// Events for correlation keys: sent by a client, and sent back by a finished holder.
pub fn keyed_events() -> Vec<KeyedEvent> {
    let js = JoinSetId::generated(1).unwrap();
    vec![
        KeyedEvent {
            event: ReceivedEvent {
                event_id: "order-42:paid".into(),
                name: "paid".into(),
                payload: json!({"amount": 1250, "note": "é"}),
            },
            key: "payment:order-42".into(),
            sent_at: t0(),
            returned_by: None,
        },
        KeyedEvent {
            event: ReceivedEvent {
                event_id: "x".repeat(128),
                name: "a.b_c-9".into(),
                payload: json!(null),
            },
            key: "k".repeat(128),
            sent_at: DateTime::<Utc>::MAX_UTC,
            returned_by: Some(root().child(&js, 3)),
        },
    ]
}

/// Every record of `weir.events`, both kinds.
pub fn event_records() -> Vec<EventRecord> {
    inbound_events()
        .into_iter()
        .map(EventRecord::Execution)
        .chain(keyed_events().into_iter().map(EventRecord::Keyed))
        .collect()
}

pub fn correlation_commands() -> Vec<CorrelationCommand> {
    let js = JoinSetId::generated(1).unwrap();
    vec![
        CorrelationCommand {
            key: "payment:order-42".into(),
            execution_id: root(),
            action: CorrelationAction::Register,
            sent_at: t0(),
        },
        CorrelationCommand {
            key: "~!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}".into(),
            execution_id: root().child(&js, 2),
            action: CorrelationAction::Unregister,
            sent_at: DateTime::<Utc>::MAX_UTC,
        },
    ]
}

/// Keys' states as `weir.state` holds them: the first as an earlier Weir wrote it, with its
/// remembered ids in its own record.
pub fn correlation_states() -> Vec<StoredCorrelation> {
    let js = JoinSetId::generated(1).unwrap();
    vec![
        // Held, others waiting.
        StoredCorrelation {
            state: CorrelationState {
                key: "payment:order-42".into(),
                holders: vec![root(), root().child(&js, 2)],
                buffered: Vec::new(),
                waits_until: None,
                cancel: None,
            },
            forwarded: vec![
                weir_core::correlation::Forwarded {
                    event_id: "pay-1".into(),
                    at: t0(),
                },
                weir_core::correlation::Forwarded {
                    event_id: "pay-2".into(),
                    at: t0() + chrono::Duration::nanoseconds(1_234_567),
                },
            ],
        },
        // Nobody holds it: events wait.
        StoredCorrelation::of(CorrelationState {
            key: "k".repeat(128),
            holders: Vec::new(),
            buffered: keyed_events()
                .into_iter()
                .map(|k| BufferedEvent {
                    event: k.event,
                    sent_at: k.sent_at,
                })
                .collect(),
            waits_until: None,
            cancel: None,
        }),
        // Events kept for an execution that does not exist yet, under its id.
        StoredCorrelation::of(CorrelationState {
            key: root().to_string(),
            holders: Vec::new(),
            buffered: inbound_events()
                .into_iter()
                .take(2)
                .map(|e| BufferedEvent {
                    event: e.event,
                    sent_at: e.sent_at,
                })
                .collect(),
            waits_until: Some(t0() + chrono::Duration::minutes(10)),
            cancel: None,
        }),
        // A cancellation (and an event) kept for an execution that does not exist yet.
        StoredCorrelation::of(CorrelationState {
            key: root().to_string(),
            holders: Vec::new(),
            buffered: inbound_events()
                .into_iter()
                .take(1)
                .map(|e| BufferedEvent {
                    event: e.event,
                    sent_at: e.sent_at,
                })
                .collect(),
            waits_until: Some(t0() + chrono::Duration::minutes(10)),
            cancel: Some(Box::new(CancelRequest {
                execution_id: root(),
                reason: "withdrawn before it was read".into(),
                terminate: true,
                requested_at: t0() + chrono::Duration::nanoseconds(7),
                waited_until: None,
            })),
        }),
    ]
}

/// Event ids keys remember forwarding (records of their own on `weir.state`).
pub fn remembered_events() -> Vec<RememberedEvent> {
    vec![
        RememberedEvent {
            key: "payment:order-42".into(),
            forwarded: weir_core::correlation::Forwarded {
                event_id: "pay-1".into(),
                at: t0() + chrono::Duration::nanoseconds(1_234_567),
            },
        },
        RememberedEvent {
            key: "k".repeat(128),
            forwarded: weir_core::correlation::Forwarded {
                event_id: "an id with spaces and ü".into(),
                at: DateTime::<Utc>::MAX_UTC,
            },
        },
    ]
}

pub fn cancel_requests() -> Vec<CancelRequest> {
    let js = JoinSetId::generated(1).unwrap();
    vec![
        CancelRequest {
            execution_id: root(),
            reason: "order withdrawn".into(),
            terminate: false,
            requested_at: t0(),
            waited_until: None,
        },
        CancelRequest {
            execution_id: root().child(&js, 2),
            reason: String::new(),
            terminate: true,
            requested_at: DateTime::<Utc>::MAX_UTC,
            waited_until: None,
        },
        // Sent back after waiting for its submission.
        CancelRequest {
            execution_id: root(),
            reason: "order withdrawn".into(),
            terminate: false,
            requested_at: t0(),
            waited_until: Some(t0() + chrono::Duration::minutes(10)),
        },
    ]
}

pub fn pause_requests() -> Vec<PauseRequest> {
    vec![
        PauseRequest {
            execution_id: root(),
            action: PauseAction::Pause,
            reason: "the tax service is down: é".into(),
            requested_at: t0(),
            parked: None,
        },
        PauseRequest {
            execution_id: root(),
            action: PauseAction::Resume,
            reason: String::new(),
            requested_at: t0(),
            parked: None,
        },
        PauseRequest {
            execution_id: root(),
            action: PauseAction::Pause,
            reason: "activity E_x: retries exhausted".into(),
            requested_at: t0(),
            parked: Some(weir::codec::records::ParkedActivity {
                execution_id: root().child(
                    &weir::model::JoinSetId::one_off(1, "charge").expect("a join set"),
                    1,
                ),
                ffqn: ffqn(),
            }),
        },
    ]
}

pub fn query_requests() -> Vec<weir::query::QueryRequest> {
    vec![
        weir::query::QueryRequest {
            query_id: "01KQ0000000000000000000000".into(),
            execution_id: root(),
            name: "collected".into(),
            params: json!([]),
            requested_at: t0(),
            deadline: t0() + chrono::Duration::seconds(10),
        },
        weir::query::QueryRequest {
            query_id: "q-é".into(),
            execution_id: root(),
            name: "status".into(),
            params: json!([1, "x", {"a": [null, true]}]),
            requested_at: t0(),
            deadline: t0(),
        },
        // Params that are not an array decode: the owner answers `invalid-request`.
        weir::query::QueryRequest {
            query_id: "q".into(),
            execution_id: root(),
            name: "status".into(),
            params: json!({"a": 1}),
            requested_at: t0(),
            deadline: t0(),
        },
    ]
}

/// An answer of each kind, and values.
pub fn query_answers() -> Vec<weir::query::QueryAnswer> {
    use weir::query::{QueryAnswer, QueryError, QueryErrorKind};
    let answer = |outcome, version| QueryAnswer {
        query_id: "01KQ0000000000000000000000".into(),
        execution_id: root(),
        outcome,
        version,
        answered_at: t0(),
    };
    let mut answers = vec![
        answer(Ok(json!(["a", "b"])), 7),
        answer(Ok(json!(null)), 0),
        answer(Ok(json!({"n": u64::MAX})), u64::MAX),
    ];
    answers.extend(
        QueryErrorKind::ALL
            .into_iter()
            .map(|kind| answer(Err(QueryError::new(kind, format!("why: {kind} é"))), 3)),
    );
    answers
}

/// The execution a reset of [`root`] starts.
pub fn reset_to() -> ExecutionId {
    ExecutionId::top_level(Ulid::from(0x0190_1234_5678_9abc_def0_1234_5678_9abd_u128))
}

pub fn reset_requests() -> Vec<ResetRequest> {
    use weir::codec::records::ResetPoint;
    [
        ResetThen::Keep,
        ResetThen::Cancel,
        ResetThen::Terminate,
        ResetThen::Keep,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, then)| ResetRequest {
        execution_id: root(),
        to: [
            ResetPoint::Seq(0),
            ResetPoint::Seq(7),
            ResetPoint::Seq(u64::MAX),
            ResetPoint::Latest,
        ][i],
        new_execution_id: reset_to(),
        then,
        reason: ["", "a bad deploy: é", "x", "batch b: a bad deploy"][i].into(),
        requested_at: t0(),
    })
    .collect()
}

/// Starts of reset executions: with only `Created` kept, and with one of every entry a
/// reset copies (an event of each kind, an answer of each kind, an event kept for a wait),
/// with the new execution's ids.
pub fn reset_starts() -> Vec<ResetStart> {
    let (from, to) = (root().root(), reset_to().root());
    let plain = Submission {
        execution_id: reset_to(),
        ffqn: ffqn(),
        params: json!([10]),
        parent: None,
        scheduled_at: None,
        correlation_id: None,
        metadata: BTreeMap::new(),
        deadline: None,
        concurrency: None,
        tenant: None,
    };
    let mut entries: Vec<HistoryEntry> = events()
        .into_iter()
        .enumerate()
        .map(|(i, event)| HistoryEntry::Event {
            version: Version(i as u64),
            event,
        })
        .collect();
    entries.extend(responses().into_iter().map(|r| match r {
        Response::ChildExecutionFinished {
            child_execution_id,
            result,
            ran,
        } => HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            child_execution_id: child_execution_id.rebased(from, to),
            result,
            ran,
        }),
        other => HistoryEntry::ResponseAppended(other),
    }));
    entries.extend(
        event_deliveries()
            .into_iter()
            .map(HistoryEntry::ResponseAppended),
    );
    entries.extend(
        inbound_events()
            .into_iter()
            .map(|e| HistoryEntry::EventReceived(e.event)),
    );
    vec![
        ResetStart {
            submission: plain.clone(),
            reset_of: ResetOf {
                execution_id: root(),
                seq: 0,
            },
            entries: Vec::new(),
        },
        ResetStart {
            submission: Submission {
                params: json!([{"order": "o-1", "items": [1, 2]}, "é"]),
                metadata: BTreeMap::from([
                    ("traceparent".to_string(), "00-abc-def-01".to_string()),
                    ("tenant".to_string(), "acme".to_string()),
                ]),
                // A reset execution keeps the old one's concurrency key.
                concurrency: Some(weir::concurrency::ConcurrencyKey {
                    key: "customer-42".into(),
                    limit: Some(2),
                }),
                ..plain
            },
            reset_of: ResetOf {
                execution_id: root(),
                seq: entries.len() as u64,
            },
            entries,
        },
    ]
}

pub fn upgrade_requests() -> Vec<UpgradeRequest> {
    vec![UpgradeRequest {
        execution_id: root(),
        component: format!("sha256:{}", "cd".repeat(32)),
        expected_seq: u64::MAX,
        requested_at: t0(),
    }]
}

pub fn activity_cancels() -> Vec<ActivityCancel> {
    let js = JoinSetId::one_off(1, "fib").unwrap();
    vec![ActivityCancel {
        execution_id: root().child(&js, 1),
        parent_execution_id: root(),
        cancelled_at: t0(),
    }]
}

pub fn history_records() -> Vec<HistoryRecord> {
    let id = root();
    let mut entries = vec![
        HistoryEntry::Created(Created {
            ffqn: ffqn(),
            params: json!([1]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: BTreeMap::new(),
            created_at: t0(),
            component: None,
            deadline: None,
            submitted_at: None,
            reset_of: None,
            slots: Vec::new(),
        }),
        HistoryEntry::Created(Created {
            ffqn: ffqn(),
            params: json!(["a", 2]),
            parent: Some(ParentRef {
                execution_id: root(),
                join_set_id: JoinSetId::named("n1").unwrap(),
                child_kind: ChildKind::Stub,
            }),
            scheduled_at: Some(DateTime::<Utc>::MAX_UTC),
            correlation_id: Some("c".into()),
            metadata: BTreeMap::from([("k".to_string(), "v".to_string())]),
            created_at: DateTime::<Utc>::MIN_UTC,
            component: Some(format!("sha256:{}", "ab".repeat(32))),
            deadline: Some(DateTime::<Utc>::MAX_UTC),
            submitted_at: Some(DateTime::<Utc>::MIN_UTC),
            reset_of: None,
            slots: Vec::new(),
        }),
        // Started by a reset.
        HistoryEntry::Created(Created {
            ffqn: ffqn(),
            params: json!([1]),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: BTreeMap::from([("k".to_string(), "v".to_string())]),
            created_at: t0(),
            component: Some(format!("sha256:{}", "ab".repeat(32))),
            deadline: None,
            submitted_at: Some(t0()),
            reset_of: Some(ResetOf {
                execution_id: reset_to(),
                seq: u64::MAX,
            }),
            slots: vec![
                weir::concurrency::SlotClaim {
                    slot: weir::concurrency::Slot::Key("customer-42".into()),
                    limit: 1,
                },
                weir::concurrency::SlotClaim {
                    slot: weir::concurrency::Slot::Function(ffqn()),
                    limit: 1000,
                },
            ],
        }),
    ];
    entries.extend(
        events()
            .into_iter()
            .enumerate()
            .map(|(i, event)| HistoryEntry::Event {
                version: Version(i as u64),
                event,
            }),
    );
    entries.extend(responses().into_iter().map(HistoryEntry::ResponseAppended));
    entries.extend(
        event_deliveries()
            .into_iter()
            .map(HistoryEntry::ResponseAppended),
    );
    entries.extend(
        inbound_events()
            .into_iter()
            .map(|e| HistoryEntry::EventReceived(e.event)),
    );
    entries.push(HistoryEntry::CancelRequested {
        reason: "order withdrawn: é".into(),
    });
    entries.push(HistoryEntry::Paused {
        reason: "the tax service is down".into(),
    });
    entries.push(HistoryEntry::Resumed { reason: "".into() });
    entries.push(HistoryEntry::SlotGranted {
        slot: weir::concurrency::Slot::Function(ffqn()),
    });
    entries.push(HistoryEntry::Reset {
        new_execution_id: reset_to(),
        to_seq: 12,
        reason: "a bad deploy: é".into(),
    });
    entries.extend(results().into_iter().map(|result| HistoryEntry::Finished {
        result,
        finished_at: t0(),
    }));
    entries.extend([
        HistoryEntry::Upgraded {
            from: None,
            to: format!("sha256:{}", "cd".repeat(32)),
        },
        HistoryEntry::Upgraded {
            from: Some(format!("sha256:{}", "ab".repeat(32))),
            to: format!("sha256:{}", "cd".repeat(32)),
        },
    ]);
    entries
        .into_iter()
        .enumerate()
        .map(|(seq, entry)| HistoryRecord {
            execution_id: id.clone(),
            seq: seq as u64,
            entry,
            // When it happened: told, and not (a record of an earlier Weir).
            at: (seq % 2 == 0).then(|| t0() + chrono::Duration::nanoseconds(seq as i64 * 1_001)),
        })
        .collect()
}

pub fn execution_finished() -> Vec<ExecutionFinished> {
    results()
        .into_iter()
        .enumerate()
        .map(|(i, result)| ExecutionFinished {
            execution_id: root(),
            ffqn: ffqn(),
            result,
            finished_at: t0(),
            correlation_id: (i % 2 == 0).then(|| format!("corr-{i}")),
        })
        .collect()
}

pub fn dlq_envelopes() -> Vec<DlqEnvelope> {
    DlqReason::ALL
        .into_iter()
        .enumerate()
        .map(|(i, reason)| DlqEnvelope {
            original_topic: "weir.submissions".into(),
            original_partition: i as i32,
            original_offset: 1_000_000 + i as i64,
            original_timestamp_millis: (i % 2 == 0).then_some(1_700_000_000_000),
            key: (i % 3 != 0).then(|| b"E_01J".to_vec()),
            value: (i % 2 == 1).then(|| vec![0xC3, 0x01, 0xff, 0x00]),
            original_headers: vec![
                DlqHeader {
                    key: "traceparent".into(),
                    value: Some(b"00-1".to_vec()),
                },
                DlqHeader {
                    key: "empty".into(),
                    value: None,
                },
            ],
            reason,
            error: format!("error {i}: ✗ did not decode"),
            failed_at: t0(),
        })
        .collect()
}

/// Batch commands: a start of each action, by function (every filter given) and by parent
/// (none), and a cancel.
pub fn batch_commands() -> Vec<weir::batch::BatchCommand> {
    use weir::batch::{BatchAction, BatchCommand, BatchCommandAction};
    let mut commands: Vec<BatchCommand> = BatchAction::ALL
        .into_iter()
        .enumerate()
        .map(|(i, action)| BatchCommand {
            id: format!("batch-{i}"),
            action: BatchCommandAction::Start(batch_spec(i, action)),
            requested_at: t0(),
        })
        .collect();
    commands.push(BatchCommand {
        id: "batch.0".into(),
        action: BatchCommandAction::Cancel,
        requested_at: t0(),
    });
    commands
}

fn batch_spec(i: usize, action: weir::batch::BatchAction) -> weir::batch::BatchSpec {
    use weir::batch::{BatchFilter, BatchSpec};
    use weir::store::ExecutionState;
    use weir::store::rows::ListBy;
    let filter = if i.is_multiple_of(2) {
        BatchFilter {
            by: ListBy::Function(ffqn().to_string()),
            state: Some(ExecutionState::Paused),
            outcome: Some("timed-out".into()),
            created_from: Some(t0()),
            created_until: Some(t0() + chrono::Duration::nanoseconds(1_000_000_123)),
        }
    } else {
        BatchFilter {
            by: ListBy::Parent(root()),
            state: None,
            outcome: None,
            created_from: None,
            created_until: None,
        }
    };
    BatchSpec {
        filter,
        action,
        per_second: [0.5, 20.0, 1e-3, 100.0][i % 4],
        reset: weir::batch::BatchReset {
            to: [
                weir::codec::records::ResetPoint::Latest,
                weir::codec::records::ResetPoint::Seq(3),
            ][i % 2],
            then: [
                weir::codec::records::ResetThen::Keep,
                weir::codec::records::ResetThen::Terminate,
                weir::codec::records::ResetThen::Cancel,
            ][i % 3],
        },
        reason: ["", "a bad deploy: é"][i % 2].into(),
    }
}

/// Batch states: a fresh one, one under way, one done.
pub fn batch_states() -> Vec<weir::batch::BatchState> {
    use weir::batch::{BatchAction, BatchCounts, BatchState, BatchStatus};
    let fresh = BatchState {
        id: "b".into(),
        spec: batch_spec(1, BatchAction::Resume),
        status: BatchStatus::Running,
        started_at: t0(),
        ended_at: None,
        cursor: None,
        counts: BatchCounts::default(),
        tat: None,
        turns: 0,
        updated_at: t0(),
    };
    let under_way = BatchState {
        spec: batch_spec(0, BatchAction::Pause),
        cursor: Some(weir::store::rows::ListCursor {
            created_at: t0(),
            execution_id: root(),
        }),
        counts: BatchCounts {
            acted: 7,
            finished: 2,
            already: u64::MAX,
            children: 3,
        },
        tat: Some(t0() + chrono::Duration::nanoseconds(7)),
        turns: 3,
        ..fresh.clone()
    };
    let done = BatchState {
        status: BatchStatus::Done,
        ended_at: Some(t0()),
        ..under_way.clone()
    };
    let cancelled = BatchState {
        status: BatchStatus::Cancelled,
        ..under_way.clone()
    };
    vec![fresh, under_way, done, cancelled]
}

/// Outcomes of turns: none, and one of each.
pub fn batch_outcomes() -> Vec<weir::batch::BatchOutcomes> {
    use weir::batch::{BatchOutcomes, ExecutionOutcome, Outcome};
    vec![
        BatchOutcomes {
            id: "b".into(),
            turn: 1,
            outcomes: Vec::new(),
        },
        BatchOutcomes {
            id: "b".into(),
            turn: u64::MAX,
            outcomes: [
                Outcome::Acted,
                Outcome::Finished,
                Outcome::AlreadyThere,
                Outcome::Child,
            ]
            .into_iter()
            .map(|outcome| ExecutionOutcome {
                execution_id: root(),
                outcome,
            })
            .collect(),
        },
    ]
}
