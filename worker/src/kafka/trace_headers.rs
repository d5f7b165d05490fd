//! The W3C trace context in Kafka headers (`traceparent`, `tracestate`), the edge of
//! [`weir_core::trace`]: a submission's headers are adopted into its metadata (where the
//! execution journals them), and every record Weir writes for an execution carries the
//! execution's `traceparent`. Any Kafka client can so start an execution inside its own trace,
//! and any consumer of Weir's topics can continue it.

use rdkafka::message::{Headers, Message, OwnedMessage};
use weir_core::records::Submission;
use weir_core::trace::{TRACEPARENT, TRACESTATE, TraceParent};

fn header<'a>(message: &'a OwnedMessage, key: &str) -> Option<&'a [u8]> {
    let headers = message.headers()?;
    headers.iter().find(|h| h.key == key).and_then(|h| h.value)
}

/// The valid `traceparent` header of `message`, if it has one. An unreadable one is logged
/// and ignored (the W3C rule: the receiver starts a trace of its own).
pub fn traceparent(message: &OwnedMessage) -> Option<TraceParent> {
    let value = header(message, TRACEPARENT)?;
    let parsed = std::str::from_utf8(value)
        .map_err(|_| "not UTF-8".to_owned())
        .and_then(|text| TraceParent::parse(text).map_err(|e| e.to_string()));
    match parsed {
        Ok(trace) => Some(trace),
        Err(error) => {
            tracing::warn!(topic = message.topic(), partition = message.partition(), offset = message.offset(), %error, "traceparent header ignored");
            None
        }
    }
}

/// Puts the trace headers of a submission record into its metadata, unless the metadata
/// (what the submitter wrote in the record itself) has a `traceparent` already.
pub fn adopt(submission: &mut Submission, message: &OwnedMessage) {
    if submission.metadata.contains_key(TRACEPARENT) {
        return;
    }
    let Some(trace) = traceparent(message) else {
        return;
    };
    submission
        .metadata
        .insert(TRACEPARENT.to_owned(), trace.to_string());
    if let Some(state) = header(message, TRACESTATE).and_then(|v| std::str::from_utf8(v).ok()) {
        submission
            .metadata
            .insert(TRACESTATE.to_owned(), state.to_owned());
    }
}

/// The header a record of `trace` carries.
pub fn header_of(trace: &TraceParent) -> (String, Vec<u8>) {
    (TRACEPARENT.to_owned(), trace.to_string().into_bytes())
}
