//! W3C trace context of executions (<https://www.w3.org/TR/trace-context/>): which trace an
//! execution's records and spans belong to. Pure: the rules, not the export (the worker's
//! `telemetry` module exports spans; its Kafka driver writes the headers).
//!
//! - An execution's context is the `traceparent` its submission carried, kept in its
//!   `Created` metadata under [`TRACEPARENT`] (and [`TRACESTATE`]): journalled, so a replay
//!   on another worker, after a crash or a month later, continues the same trace.
//! - A child (workflow, activity, or an execution the workflow schedules) inherits its
//!   parent's keys, so the whole tree is one trace.
//! - An execution submitted without one has a context derived from its id: the trace id is
//!   the root's ULID (128 bits, like a trace id), so every execution of a tree without a
//!   caller's trace still shares one trace, with nothing stored.
//! - A record Weir writes for an execution carries the execution's trace id, with the
//!   execution's own span id ([`TraceParent::for_execution`]) as its parent id.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::ExecutionId;

/// The metadata key (and Kafka header) of the W3C `traceparent`.
pub const TRACEPARENT: &str = "traceparent";
/// The metadata key (and Kafka header) of the W3C `tracestate`, carried along unread.
pub const TRACESTATE: &str = "tracestate";

/// A `traceparent` value that is not version 00 of the W3C format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{value}` is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): {reason}"
)]
pub struct TraceParentError {
    pub value: String,
    pub reason: &'static str,
}

/// A W3C `traceparent`: version 00, a trace id, a parent (span) id and the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

/// The `sampled` flag.
pub const SAMPLED: u8 = 0x01;

fn hex_into(text: &str, out: &mut [u8]) -> bool {
    if text.len() != out.len() * 2
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return false;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        match u8::from_str_radix(&text[2 * i..2 * i + 2], 16) {
            Ok(value) => *byte = value,
            Err(_) => return false,
        }
    }
    true
}

impl TraceParent {
    /// Parses a `traceparent` header value (lower-case hex, as the spec requires).
    pub fn parse(value: &str) -> Result<Self, TraceParentError> {
        let error = |reason| TraceParentError {
            value: value.chars().take(80).collect(),
            reason,
        };
        let parts: Vec<&str> = value.trim().split('-').collect();
        let [version, trace, parent, flags] = parts[..] else {
            return Err(error("not four fields separated by `-`"));
        };
        if version != "00" {
            return Err(error("only version 00 is known"));
        }
        let mut parsed = TraceParent {
            trace_id: [0; 16],
            parent_id: [0; 8],
            flags: 0,
        };
        if !hex_into(trace, &mut parsed.trace_id) {
            return Err(error("the trace id is not 32 lower-case hex digits"));
        }
        if !hex_into(parent, &mut parsed.parent_id) {
            return Err(error("the parent id is not 16 lower-case hex digits"));
        }
        let mut flag = [0u8; 1];
        if !hex_into(flags, &mut flag) {
            return Err(error("the flags are not 2 lower-case hex digits"));
        }
        parsed.flags = flag[0];
        if parsed.trace_id == [0; 16] {
            return Err(error("the trace id is all zeros"));
        }
        if parsed.parent_id == [0; 8] {
            return Err(error("the parent id is all zeros"));
        }
        Ok(parsed)
    }

    /// The context of an execution submitted without one: the root's ULID as the trace id
    /// and the execution's own span id, sampled.
    pub fn derived(execution_id: &ExecutionId) -> Self {
        TraceParent {
            trace_id: execution_id.root().to_bytes(),
            parent_id: span_id_of(execution_id),
            flags: SAMPLED,
        }
    }

    /// The context of `execution_id` whose `Created` metadata is `metadata`: its recorded
    /// `traceparent`, or one derived from its id if it has none (or an unreadable one).
    pub fn of_execution(execution_id: &ExecutionId, metadata: &BTreeMap<String, String>) -> Self {
        metadata
            .get(TRACEPARENT)
            .and_then(|value| TraceParent::parse(value).ok())
            .unwrap_or_else(|| TraceParent::derived(execution_id))
    }

    /// What the records Weir writes for `execution_id` carry: its trace, with the
    /// execution's own span id as the parent.
    pub fn for_execution(execution_id: &ExecutionId, metadata: &BTreeMap<String, String>) -> Self {
        TraceParent {
            parent_id: span_id_of(execution_id),
            ..TraceParent::of_execution(execution_id, metadata)
        }
    }

    /// What the records of `activity`, a child of `parent` (whose `Created` metadata is
    /// `metadata`), carry: the parent's trace, the activity's own span. The same as
    /// [`for_execution`](Self::for_execution) of the activity with [`inherited`] keys, without
    /// writing them out.
    pub fn for_activity(
        parent: &ExecutionId,
        metadata: &BTreeMap<String, String>,
        activity: &ExecutionId,
    ) -> Self {
        TraceParent {
            parent_id: span_id_of(activity),
            ..TraceParent::of_execution(parent, metadata)
        }
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    pub fn parent_id_hex(&self) -> String {
        hex(&self.parent_id)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An execution's own span id: a stable hash of its id (never zero).
pub fn span_id_of(execution_id: &ExecutionId) -> [u8; 8] {
    execution_id.stable_hash().max(1).to_be_bytes()
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            self.parent_id_hex(),
            self.flags
        )
    }
}

/// The trace keys of a parent's metadata that its children's metadata inherits (the rest
/// of a caller's metadata is the caller's, not the children's). A parent without a
/// `traceparent` passes its derived one, so that a child's context does not depend on how
/// its id was formed.
pub fn inherited(
    parent: &ExecutionId,
    metadata: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    keys.insert(
        TRACEPARENT.to_owned(),
        TraceParent::for_execution(parent, metadata).to_string(),
    );
    if let Some(state) = metadata.get(TRACESTATE) {
        keys.insert(TRACESTATE.to_owned(), state.clone());
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_back_as_written_and_malformed_ones_are_refused() {
        let parsed = TraceParent::parse(VALUE).expect("the spec's example");
        assert_eq!(parsed.to_string(), VALUE);
        assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.flags, SAMPLED);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_tree_shares_one_trace_with_or_without_a_callers() {
        let root: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("id");
        let child: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV.o:1-child_1"
            .parse()
            .expect("id");
        let none = BTreeMap::new();
        // Without a caller's trace: the root's ULID, whoever asks.
        let derived = TraceParent::of_execution(&root, &none);
        assert_eq!(derived.trace_id, root.root().to_bytes());
        let inherited_by_child = inherited(&root, &none);
        assert_eq!(
            TraceParent::of_execution(&child, &inherited_by_child).trace_id,
            derived.trace_id
        );
        assert_eq!(
            TraceParent::of_execution(&child, &none).trace_id,
            derived.trace_id
        );
        // With one: its trace id, through every generation; each execution its own span.
        let caller: BTreeMap<String, String> = [
            (TRACEPARENT.to_owned(), VALUE.to_owned()),
            (TRACESTATE.to_owned(), "vendor=x".to_owned()),
            ("team".to_owned(), "payments".to_owned()),
        ]
        .into();
        let of_root = TraceParent::of_execution(&root, &caller);
        assert_eq!(
            of_root.to_string(),
            VALUE,
            "the caller's span is the parent"
        );
        let keys = inherited(&root, &caller);
        assert_eq!(keys.len(), 2, "only the trace keys: {keys:?}");
        assert_eq!(keys[TRACESTATE], "vendor=x");
        let of_child = TraceParent::of_execution(&child, &keys);
        assert_eq!(of_child.trace_id, of_root.trace_id);
        assert_eq!(of_child.parent_id, span_id_of(&root), "the parent's span");
        let written = TraceParent::for_execution(&child, &keys);
        assert_eq!(written.trace_id, of_root.trace_id);
        assert_eq!(written.parent_id, span_id_of(&child));
        // An activity's, with or without a caller's trace, is what its inherited keys give.
        for metadata in [&caller, &none] {
            assert_eq!(
                TraceParent::for_activity(&root, metadata, &child),
                TraceParent::for_execution(&child, &inherited(&root, metadata))
            );
        }
        assert_ne!(span_id_of(&root), span_id_of(&child));
        // An unreadable recorded value falls back to the derived context.
        let broken: BTreeMap<String, String> =
            [(TRACEPARENT.to_owned(), "garbage".to_owned())].into();
        assert_eq!(TraceParent::of_execution(&root, &broken), derived);
    }
}
