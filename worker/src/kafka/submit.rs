//! Records sent to a deployment from outside a worker: a top-level execution's `Submission`
//! on `weir.submissions` (what `weir submit` and the HTTP API send), an `InboundEvent` on
//! `weir.events` (`weir send-event`, the API), and an `UpgradeRequest` on `weir.responses`
//! (what `weir replay --upgrade` sends), each keyed by the execution's id — an event for a
//! correlation key by the key. Any Kafka client can send the same with only `schemas/avro/`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::producer::{FutureProducer, FutureRecord};
use weir_core::wire::RecordKind;

use crate::codec::{
    AvroRecord, Codec, EncodeError, EventRecord, InboundEvent, ReceivedEvent, Submission,
    UpgradeRequest,
};
use crate::correlation::KeyedEvent;
use crate::model::{EventNameError, ExecutionId, check_event_id, check_event_name};
use weir_core::state_key::{KeyError, StateKey};

/// How long a submission waits for the broker's acknowledgement.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// `target`: the record's Kafka key (an execution id, or an event's correlation key).
    #[error("cannot encode the record for {target}: {source}")]
    Encode { target: String, source: EncodeError },
    #[error("{0} is a top-level execution: a stub is a child of the execution that made it")]
    NotAChild(ExecutionId),
    #[error("cannot send to {topic} for {target}: {source}")]
    Send {
        target: String,
        topic: String,
        source: rdkafka::error::KafkaError,
    },
}

/// Why an event cannot be sent: a field that breaks the rules of `schemas/avro/event.avsc`.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("target `{0}` is neither an execution id (`E_…`) nor a correlation key: {1}")]
    Target(String, KeyError),
    #[error(transparent)]
    Name(#[from] EventNameError),
    #[error("the payload is not JSON: {0}")]
    Payload(serde_json::Error),
}

/// The event `name` with `payload` (JSON text) for `target`, checked; `event_id` is the
/// caller's idempotency key, a new ULID when `None` (then sending twice is two events).
/// `target` is an execution id (`E_…`) or a correlation key ([`weir_core::state_key::check_correlation_key`]):
/// an event for a key reaches the execution that registered it (`correlate`), or waits in
/// the key until one does.
pub fn event(
    target: &str,
    name: &str,
    payload: &str,
    event_id: Option<String>,
    sent_at: chrono::DateTime<chrono::Utc>,
) -> Result<EventRecord, EventError> {
    let execution = StateKey::for_events(target)
        .map_err(|e| EventError::Target(target.to_owned(), e))?
        .execution()
        .cloned();
    check_event_name(name)?;
    let event_id = event_id.unwrap_or_else(|| ulid::Ulid::new().to_string());
    check_event_id(&event_id)?;
    let payload = serde_json::from_str(payload).map_err(EventError::Payload)?;
    let event = ReceivedEvent {
        event_id,
        name: name.to_owned(),
        payload,
    };
    Ok(match execution {
        Some(target) => EventRecord::Execution(InboundEvent {
            event,
            target,
            sent_at,
            correlation_key: None,
            waited_until: None,
        }),
        None => EventRecord::Keyed(KeyedEvent {
            event,
            key: target.to_owned(),
            sent_at,
            returned_by: None,
        }),
    })
}

/// Sends `event` to `topic` (the deployment's `weir.events`), keyed by its target (the
/// execution id, or the correlation key), and waits until the broker has it.
pub async fn send_event(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    event: &EventRecord,
) -> Result<(), SubmitError> {
    let key = event.target();
    match event {
        EventRecord::Execution(e) => send_keyed(producer, codec, topic, &key, e, None).await,
        EventRecord::Keyed(e) => send_keyed(producer, codec, topic, &key, e, None).await,
    }
}

/// Sends `result` as the value of stub child `child` to `topic` (the deployment's
/// `weir.responses`): a `ChildExecutionFinished` keyed by the child's parent, which takes it
/// by the stub rules (`weir_core::processor`: the same value again is nothing new, another is
/// a conflict). Fails for a top-level id, which is nobody's stub.
pub async fn send_stub(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    child: &ExecutionId,
    result: crate::model::ExecutionResult,
) -> Result<(), SubmitError> {
    let parent = child
        .parent()
        .ok_or_else(|| SubmitError::NotAChild(child.clone()))?;
    let response = crate::model::Response::child_finished(child.clone(), result);
    send_keyed(producer, codec, topic, &parent.to_string(), &response, None).await
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), marked with the header
/// `weir.kind = cancel-execution`, and waits until the broker has it.
pub async fn send_cancel(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &crate::codec::CancelRequest,
) -> Result<(), SubmitError> {
    let headers = super::headers::of_kind(RecordKind::CancelExecution);
    let id = request.execution_id.to_string();
    send_keyed(producer, codec, topic, &id, request, Some(headers)).await
}

/// Sends `submission` to `topic` (the deployment's `weir.submissions`), keyed by its id, and
/// waits until the broker has it.
pub async fn submit(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    submission: &Submission,
) -> Result<(), SubmitError> {
    let id = submission.execution_id.to_string();
    send_keyed(producer, codec, topic, &id, submission, None).await
}

/// Why a deadline as given cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum DeadlineError {
    #[error(
        "deadline `{0}` is neither an RFC 3339 instant (2026-12-03T10:00:00Z) nor a duration \
         (90s, 5m, 1h 30m): {1}"
    )]
    Unreadable(String, humantime::DurationError),
    #[error("deadline `{0}` is too far away")]
    TooFar(String),
    #[error("deadline `{given}` ({at}) has passed: it is {now} now")]
    Passed {
        given: String,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    },
}

/// Reads a deadline as `weir submit --deadline` and the HTTP API take it: an RFC 3339 instant,
/// or a duration from `now` in humantime's syntax (`90s`, `5m`, `1h 30m`). One that has
/// passed is refused here (a record from another client that carries one is timed out at
/// once by the worker).
pub fn parse_deadline(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, DeadlineError> {
    let at = match DateTime::parse_from_rfc3339(text) {
        Ok(at) => at.with_timezone(&Utc),
        Err(_) => {
            let after = humantime::parse_duration(text)
                .map_err(|e| DeadlineError::Unreadable(text.to_owned(), e))?;
            chrono::Duration::from_std(after)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| DeadlineError::TooFar(text.to_owned()))?
        }
    };
    if at <= now {
        return Err(DeadlineError::Passed {
            given: text.to_owned(),
            at,
            now,
        });
    }
    Ok(at)
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), marked with the header
/// `weir.kind = upgrade`, and waits until the broker has it.
pub async fn send_upgrade(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &UpgradeRequest,
) -> Result<(), SubmitError> {
    let headers = super::headers::of_kind(RecordKind::Upgrade);
    let id = request.execution_id.to_string();
    send_keyed(producer, codec, topic, &id, request, Some(headers)).await
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), marked with the header
/// `weir.kind = pause-execution`, and waits until the broker has it.
pub async fn send_pause(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &crate::codec::PauseRequest,
) -> Result<(), SubmitError> {
    let headers = super::headers::of_kind(RecordKind::PauseExecution);
    let id = request.execution_id.to_string();
    send_keyed(producer, codec, topic, &id, request, Some(headers)).await
}

/// Sends `request` to `topic` (the deployment's `weir.responses`), keyed by the execution
/// reset, marked with the header `weir.kind = reset-execution`, and waits until the broker
/// has it.
pub async fn send_reset(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    request: &crate::codec::ResetRequest,
) -> Result<(), SubmitError> {
    let headers = super::headers::of_kind(RecordKind::ResetExecution);
    let id = request.execution_id.to_string();
    send_keyed(producer, codec, topic, &id, request, Some(headers)).await
}

/// Encodes `record` for `topic`, sends it keyed by `key` (an execution id, or an event's
/// correlation key; with `headers`), and waits until the broker has it.
pub(crate) async fn send_keyed<R: AvroRecord>(
    producer: &FutureProducer,
    codec: &Codec,
    topic: &str,
    key: &str,
    record: &R,
    headers: Option<rdkafka::message::OwnedHeaders>,
) -> Result<(), SubmitError> {
    let value = codec
        .encode(topic, record)
        .map_err(|source| SubmitError::Encode {
            target: key.to_owned(),
            source,
        })?;
    let mut message = FutureRecord::to(topic).key(key).payload(&value);
    if let Some(headers) = headers {
        message = message.headers(headers);
    }
    producer
        .send(message, SEND_TIMEOUT)
        .await
        .map_err(|(source, _)| SubmitError::Send {
            target: key.to_owned(),
            topic: topic.to_owned(),
            source,
        })?;
    Ok(())
}

/// Reads a concurrency key and its limit as `weir submit --concurrency-key … --concurrency-limit
/// …` and the HTTP API take them (`None`: no key). A limit without a key, a key or a limit
/// out of bounds is refused ([`weir_core::concurrency::claims`]'s rules).
pub fn concurrency_key(
    key: Option<&str>,
    limit: Option<i64>,
) -> Result<Option<weir_core::concurrency::ConcurrencyKey>, weir_core::concurrency::SlotError> {
    use weir_core::concurrency::{ConcurrencyKey, SlotError, check_key, check_limit};
    let Some(key) = key else {
        return match limit {
            Some(limit) => Err(SlotError::Limit {
                limit,
                of: " without a concurrency key".to_owned(),
            }),
            None => Ok(None),
        };
    };
    check_key(key)?;
    let limit = limit
        .map(|l| check_limit(l, &format!("key `{key}`")))
        .transpose()?;
    Ok(Some(ConcurrencyKey {
        key: key.to_owned(),
        limit,
    }))
}

/// The longest tenant Weir's clients send, in bytes.
pub use weir_core::fairness::MAX_TENANT_LEN as MAX_TENANT_BYTES;

/// Why a tenant is refused by `weir submit --tenant` and the HTTP API.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    #[error(
        "the tenant is empty: a tenant is 1 to {MAX_TENANT_BYTES} bytes (leave it out to share the lane of submissions without one)"
    )]
    Empty,
    #[error("the tenant is {0} bytes: a tenant is 1 to {MAX_TENANT_BYTES} bytes")]
    TooLong(usize),
}

/// Checks a submission's tenant as `weir submit --tenant` and the HTTP API take it: 1 to
/// [`MAX_TENANT_BYTES`] bytes of UTF-8. Submissions are taken round-robin by tenant within a
/// partition (`docs/design/fairness.md`). A record from another Kafka client is not checked:
/// its tenant is taken as it is.
pub fn validate_tenant(tenant: &str) -> Result<(), TenantError> {
    match tenant.len() {
        0 => Err(TenantError::Empty),
        len if len > MAX_TENANT_BYTES => Err(TenantError::TooLong(len)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_1_to_128_bytes() {
        assert_eq!(validate_tenant("acme"), Ok(()));
        assert_eq!(validate_tenant(&"t".repeat(128)), Ok(()));
        // Bytes, not characters: 64 two-byte characters fit, 65 do not.
        assert_eq!(validate_tenant(&"é".repeat(64)), Ok(()));
        assert_eq!(
            validate_tenant(&"é".repeat(65)),
            Err(TenantError::TooLong(130))
        );
        assert_eq!(
            validate_tenant(&"t".repeat(129)),
            Err(TenantError::TooLong(129))
        );
        assert_eq!(validate_tenant(""), Err(TenantError::Empty));
        let why = validate_tenant(&"t".repeat(200)).unwrap_err().to_string();
        assert!(
            why.contains("200 bytes") && why.contains("1 to 128"),
            "{why}"
        );
    }

    #[test]
    fn an_event_is_checked_before_it_is_sent() {
        let now = chrono::Utc::now();
        let target = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let event = event(
            target,
            "approved",
            r#"{"by":"ann"}"#,
            Some("k-1".into()),
            now,
        )
        .expect("a valid event");
        let EventRecord::Execution(event) = event else {
            panic!("an event for an execution: {event:?}")
        };
        assert_eq!(event.target.to_string(), target);
        assert_eq!(event.correlation_key, None);
        assert_eq!(event.event.event_id, "k-1");
        assert_eq!(event.event.payload, serde_json::json!({"by": "ann"}));
        let fresh = super::event(target, "approved", "1", None, now).expect("valid");
        assert_eq!(fresh.event().event_id.len(), 26, "a ULID");
        // A target that is not an execution id is a correlation key.
        let keyed = super::event("payment:order-42", "paid", "{}", None, now).expect("a key");
        assert_eq!(keyed.target(), "payment:order-42");
        let EventRecord::Keyed(keyed) = keyed else {
            panic!("an event for a correlation key: {keyed:?}")
        };
        assert_eq!(keyed.key, "payment:order-42");
        assert_eq!(keyed.returned_by, None);
        for (target, name, payload, id, what) in [
            (
                "E_x",
                "approved",
                "1",
                None,
                "target `E_x` is neither an execution id (`E_…`) nor a correlation key: `E_x` starts with `E_` but is not an execution id",
            ),
            (
                "with space",
                "approved",
                "1",
                None,
                "target `with space` is neither an execution id",
            ),
            (
                "schedule:nightly",
                "approved",
                "1",
                None,
                "which Weir keeps for its own state",
            ),
            (
                &"k".repeat(129),
                "approved",
                "1",
                None,
                "not 1 to 128 bytes",
            ),
            ("payment:order-42", "no spaces", "1", None, "event name"),
            (target, "no spaces", "1", None, "event name"),
            (target, "approved", "{", None, "not JSON"),
            (target, "approved", "1", Some(String::new()), "event id"),
        ] {
            let err = super::event(target, name, payload, id, now).unwrap_err();
            assert!(err.to_string().contains(what), "{what}: {err}");
        }
    }

    #[test]
    fn deadlines_read_as_instants_or_durations_and_the_past_is_refused() {
        let now = DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z")
            .expect("an instant")
            .with_timezone(&Utc);
        let at = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .expect("an instant")
                .with_timezone(&Utc)
        };
        let table = [
            ("90s", Some(at("2026-12-03T10:01:30Z"))),
            ("1h 30m", Some(at("2026-12-03T11:30:00Z"))),
            (
                "2026-12-04T00:00:00+01:00",
                Some(at("2026-12-03T23:00:00Z")),
            ),
            ("2026-12-03T09:59:59Z", None),
            ("0s", None),
            ("soon", None),
            ("", None),
        ];
        for (given, expected) in table {
            assert_eq!(parse_deadline(given, now).ok(), expected, "{given}");
        }
        let error = parse_deadline("2026-12-03T09:00:00Z", now).expect_err("passed");
        assert!(error.to_string().contains("has passed"), "{error}");
        let error = parse_deadline("soon", now).expect_err("unreadable");
        assert!(error.to_string().contains("RFC 3339"), "{error}");
    }
}
