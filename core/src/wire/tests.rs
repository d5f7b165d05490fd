//! The wire table's tests: every router agrees with [`super::address`].

use super::examples::{self, EFFECT_VARIANTS, variant};
use super::*;

fn at() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(1_767_225_600_000).expect("an instant")
}

/// A cancellation is written to a route Weir serves, and to an external one only if it
/// asks; every other record of a route is written whoever serves it.
#[test]
fn only_a_route_that_hears_of_cancellations_gets_them() {
    let effects = examples::one_of_each(at());
    let routed: Vec<Address> = effects
        .iter()
        .filter_map(|e| address(e).ok().flatten())
        .filter(|a| matches!(a.destination, Destination::Route(_)))
        .collect();
    assert!(routed.iter().any(|a| a.kind == Some(RecordKind::Cancel)));
    let serve = |external, cancel_notices| RouteService {
        external,
        cancel_notices,
    };
    assert!(
        routed
            .iter()
            .any(|a| a.kind == Some(RecordKind::RetryActivity))
    );
    for a in &routed {
        let cancel = a.kind == Some(RecordKind::Cancel);
        let retry = a.kind == Some(RecordKind::RetryActivity);
        assert!(serve(false, false).takes(a), "Weir's workers take {a:?}");
        assert_eq!(
            serve(true, true).takes(a),
            !retry,
            "an external route asking takes {a:?}, never a retry notice"
        );
        if retry {
            assert!(!serve(true, false).takes(a), "{a:?}");
            continue;
        }
        assert_eq!(serve(true, false).takes(a), !cancel, "{a:?}");
    }
}

#[test]
fn the_examples_have_every_variant() {
    let effects = examples::one_of_each(at());
    for v in 0..EFFECT_VARIANTS {
        assert!(
            effects.iter().any(|e| variant(e) == v),
            "no example of variant {v}"
        );
    }
}

/// The type of the value `effect` writes.
fn written(effect: &Effect) -> Option<RecordType> {
    Some(match effect {
        Effect::Append { .. } => RecordType::HistoryRecord,
        Effect::Submit(_) => RecordType::Submission,
        Effect::RequestActivity(_) | Effect::RetryActivity { .. } => RecordType::ActivityRequest,
        Effect::Respond { .. } => RecordType::Response,
        Effect::PublishResult(_) => RecordType::ExecutionFinished,
        Effect::AnswerQuery(_) => RecordType::QueryAnswer,
        Effect::PutTimer(_) | Effect::DeleteTimer(_) => return None,
        Effect::CancelActivity { .. } => RecordType::ActivityCancel,
        Effect::RetryParkedActivity { .. } => RecordType::ActivityRetry,
        Effect::CancelExecution(_) => RecordType::CancelRequest,
        Effect::StartReset(_) => RecordType::ResetStart,
        Effect::ResendReset(_) => RecordType::ResetRequest,
        Effect::PutSchedule { .. } => RecordType::ScheduleState,
        Effect::ScheduleCommand(_) => RecordType::ScheduleCommand,
        Effect::Correlation(_) => RecordType::CorrelationCommand,
        Effect::PutCorrelation { .. } => RecordType::CorrelationState,
        Effect::PutRemembered { .. } => RecordType::RememberedEvent,
        Effect::ForwardEvent(_) | Effect::ReturnEvent(_) => RecordType::Event,
        Effect::WriteStub(_) => RecordType::StubWrite,
        Effect::Slot(_) => RecordType::SlotCommand,
        Effect::PutSlot { .. } => RecordType::SlotState,
        Effect::DeadLetter { .. } | Effect::DeadLetterState(_) => RecordType::DlqEnvelope,
        Effect::PutBatch(_) => RecordType::BatchState,
        Effect::PutBatchOutcomes { .. } => RecordType::BatchOutcomes,
        Effect::BatchRequest(crate::batch::BatchRequest::Pause(_)) => RecordType::PauseRequest,
        Effect::BatchRequest(crate::batch::BatchRequest::Cancel(_)) => RecordType::CancelRequest,
        Effect::BatchRequest(crate::batch::BatchRequest::Reset(_)) => RecordType::ResetRequest,
    })
}

#[test]
fn what_is_written_reads_back_as_what_it_is() {
    for effect in examples::one_of_each(at()) {
        let address = address(&effect).expect("an address");
        let expected = written(&effect);
        assert_eq!(address.is_some(), expected.is_some(), "{effect:?}");
        if let (Some(address), Some(expected)) = (address, expected) {
            assert_eq!(
                record_type(address.role(), address.kind),
                Ok(expected),
                "{effect:?}"
            );
        }
    }
}

/// What a test compares of an address: role, key, kind and the names of its headers.
type Shape = (TopicRole, Key, Option<RecordKind>, Vec<&'static str>);

#[test]
fn the_routing_of_every_effect() {
    use examples::*;
    let shape: Vec<Option<Shape>> = one_of_each(at())
        .iter()
        .map(|effect| {
            address(effect).expect("an address").map(|a| {
                let headers = a.headers.iter().map(|(name, _)| *name).collect();
                (a.role(), a.key, a.kind, headers)
            })
        })
        .collect();
    let exactly = |key: &str| Key::Exactly(key.to_owned());
    let remembered = || Key::Within {
        key: format!("weir:seen:{CORRELATION_KEY} ev-1"),
        partition_of: CORRELATION_KEY.to_owned(),
    };
    use RecordKind as K;
    use TopicRole as R;
    assert_eq!(
        shape,
        vec![
            Some((R::History, exactly(PARENT), None, vec![])),
            Some((R::Submissions, exactly(WRITER), None, vec![])),
            Some((R::Activity, exactly(ACTIVITY), None, vec![])),
            Some((
                R::Activity,
                exactly(ACTIVITY),
                None,
                vec![NOT_BEFORE_HEADER]
            )),
            Some((R::Responses, exactly(PARENT), None, vec![])),
            Some((R::Results, exactly(PARENT), None, vec![])),
            None,
            None,
            Some((R::Activity, exactly(ACTIVITY), Some(K::Cancel), vec![])),
            Some((
                R::Activity,
                exactly(ACTIVITY),
                Some(K::RetryActivity),
                vec![]
            )),
            Some((R::Answers, exactly(PARENT), None, vec![])),
            Some((
                R::Submissions,
                exactly(ACTIVITY),
                Some(K::CancelExecution),
                vec![]
            )),
            Some((R::State, exactly("schedule:nightly"), None, vec![])),
            Some((
                R::Responses,
                exactly("schedule:nightly"),
                Some(K::Schedule),
                vec![]
            )),
            Some((
                R::Responses,
                exactly(CORRELATION_KEY),
                Some(K::Correlation),
                vec![]
            )),
            Some((
                R::State,
                exactly(CORRELATION_KEY),
                Some(K::Correlation),
                vec![]
            )),
            Some((
                R::State,
                exactly(CORRELATION_KEY),
                Some(K::Correlation),
                vec![]
            )),
            // An id the key remembers: keyed by both, on the key's partition (tombstone too).
            Some((R::State, remembered(), Some(K::Remembered), vec![])),
            Some((R::State, remembered(), Some(K::Remembered), vec![])),
            Some((R::Events, exactly(PARENT), None, vec![])),
            Some((R::Events, exactly(CORRELATION_KEY), None, vec![])),
            Some((
                R::Responses,
                exactly(PARENT),
                Some(K::StubWrite),
                vec![STUB_REQUEST_HEADER, STUB_FUNCTION_HEADER]
            )),
            Some((R::Dlq, Key::OfInput(0), None, vec![])),
            // A corrupt state's copy, keyed by the state's key.
            Some((R::Dlq, exactly(CORRELATION_KEY), None, vec![])),
            // A reset's start, for the new execution's owner; a reset request sent back.
            Some((
                R::Submissions,
                exactly(RESET_TO),
                Some(K::ResetStart),
                vec![]
            )),
            Some((
                R::Responses,
                exactly(PARENT),
                Some(K::ResetExecution),
                vec![]
            )),
            // An acquisition keyed by its slot, a grant by its execution; the slot's state.
            Some((
                R::Responses,
                exactly("weir:slot:key:customer-42"),
                Some(K::Concurrency),
                vec![]
            )),
            Some((R::Responses, exactly(WRITER), Some(K::Concurrency), vec![])),
            Some((
                R::State,
                exactly("weir:slot:key:customer-42"),
                Some(K::Concurrency),
                vec![]
            )),
            Some((
                R::State,
                exactly("weir:slot:key:customer-42"),
                Some(K::Concurrency),
                vec![]
            )),
            // A batch's state and a turn's outcomes, on the batch's partition; the pause it
            // sends, for the execution's owner.
            Some((
                R::State,
                exactly("weir:batch:pause-fibo"),
                Some(K::Batch),
                vec![]
            )),
            Some((
                R::State,
                Key::Within {
                    key: "weir:batch:pause-fibo:1".to_owned(),
                    partition_of: "weir:batch:pause-fibo".to_owned(),
                },
                Some(K::BatchOutcomes),
                vec![]
            )),
            Some((
                R::Responses,
                exactly(PARENT),
                Some(K::PauseExecution),
                vec![]
            )),
        ]
    );
}

#[test]
fn a_retry_says_when_and_a_stub_write_says_whose() {
    let effects = examples::one_of_each(at());
    let headers = |v: usize| -> Vec<(&'static str, Vec<u8>)> {
        let effect = effects.iter().find(|e| variant(e) == v).expect("one");
        let address = address(effect).expect("an address").expect("a record");
        address
            .all_headers()
            .map(|(name, value)| (name, value.to_vec()))
            .collect()
    };
    assert_eq!(
        headers(3),
        vec![(NOT_BEFORE_HEADER, b"1767225600000".to_vec())]
    );
    assert_eq!(
        headers(16),
        vec![
            (KIND_HEADER, b"stub-write".to_vec()),
            (
                STUB_REQUEST_HEADER,
                examples::WRITE_REQUEST.as_bytes().to_vec()
            ),
            (
                STUB_FUNCTION_HEADER,
                b"weir-examples:approval/approval.decide".to_vec()
            ),
        ]
    );
}

#[test]
fn a_stub_write_of_a_top_level_execution_has_no_address() {
    let write = Effect::WriteStub(crate::processor::StubWrite {
        request: examples::WRITE_REQUEST.parse().expect("an id"),
        target: examples::PARENT.parse().expect("an id"),
        ffqn: "weir-examples:approval/approval.decide"
            .parse()
            .expect("a name"),
        result: crate::model::ExecutionResult::Ok(serde_json::Value::Null),
    });
    assert!(matches!(
        address(&write),
        Err(AddressError::StubWithoutParent { .. })
    ));
}

#[test]
fn kinds_read_as_they_are_written_and_others_are_refused() {
    for kind in RecordKind::ALL {
        assert_eq!(
            RecordKind::of_header(Some(kind.header_value())),
            Ok(Some(kind))
        );
    }
    assert_eq!(RecordKind::of_header(None), Ok(None));
    assert_eq!(
        RecordKind::of_header(Some(b"telepathy")),
        Err(KindError::Unknown {
            value: "telepathy".into()
        })
    );
    // Every role has its own type; a kind is read on the topics that carry it only, and
    // one kind never means two types on one topic (the table is a function).
    for role in TopicRole::ALL {
        assert!(record_type(role, None).is_ok(), "{role}");
    }
    assert_eq!(
        record_type(TopicRole::Events, Some(RecordKind::Correlation)),
        Err(KindError::OffTopic {
            role: TopicRole::Events,
            kind: RecordKind::Correlation
        })
    );
    assert_eq!(
        record_type(TopicRole::Submissions, Some(RecordKind::Schedule)),
        Err(KindError::OffTopic {
            role: TopicRole::Submissions,
            kind: RecordKind::Schedule
        })
    );
    assert_eq!(
        KindError::Unknown { value: "x".into() }.to_string(),
        "header `weir.kind` = `x` names no kind of record Weir knows"
    );
}
