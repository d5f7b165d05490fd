//! The result of an execution: the function's own `ok` / `err` value, or an execution error
//! raised by the engine or the host (timeout, trap, nondeterminism, …).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an execution finished with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionResult {
    /// The function returned `ok(value)`.
    Ok(Value),
    /// The function returned `err(value)`; projected into the caller's `err`.
    Err(Value),
    /// The function did not return a value of its own.
    ExecutionError(ExecutionError),
}

impl ExecutionResult {
    pub fn is_ok(&self) -> bool {
        matches!(self, ExecutionResult::Ok(_))
    }

    /// Shorthand for an execution error without detail.
    pub fn error(kind: ExecutionErrorKind, reason: impl Into<String>) -> Self {
        ExecutionResult::ExecutionError(ExecutionError::new(kind, reason))
    }
}

impl fmt::Display for ExecutionResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecutionResult::Ok(v) => write!(f, "ok({v})"),
            ExecutionResult::Err(v) => write!(f, "err({v})"),
            ExecutionResult::ExecutionError(e) => write!(f, "{e}"),
        }
    }
}

/// An execution that ended without a value of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionError {
    pub kind: ExecutionErrorKind,
    /// One line for humans.
    pub reason: String,
    /// More context (e.g. a backtrace or both sides of a nondeterminism), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ExecutionError {
    pub fn new(kind: ExecutionErrorKind, reason: impl Into<String>) -> Self {
        ExecutionError {
            kind,
            reason: reason.into(),
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

impl fmt::Display for ExecutionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.reason)
    }
}

/// Why an execution ended without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionErrorKind {
    /// The execution's deadline passed.
    TimedOut,
    /// The workflow's calls did not match its recorded history.
    NondeterminismDetected,
    /// Cancelled, e.g. an activity whose parent closed its join set.
    Cancelled,
    /// The WASM code trapped (panic, unreachable, …).
    Trap,
    /// The fuel (CPU) limit was exhausted.
    OutOfFuel,
    /// The memory limit was exceeded.
    OutOfMemory,
    /// A child's execution error that the workflow's WIT signature cannot represent reached a
    /// blocking call.
    UnhandledChildExecutionError,
    /// The parameters did not type-check against the function's WIT signature.
    InvalidParams,
    /// The activity's retries are exhausted; the last attempt's reason is given.
    RetriesExhausted,
    /// No registered component exports the submitted function.
    UnknownFunction,
    /// The submission could not create an execution: its id is another execution's (with
    /// another function or other params), or not a top-level id. The reason names it.
    Conflict,
    /// The execution made a value (params of a child, a result) larger than a record can
    /// carry.
    ValueTooLarge,
    /// The answer another client sent for it (an external activity's service) was not JSON,
    /// or did not fit the function's result type. The reason says which, and how.
    InvalidResponse,
}

impl fmt::Display for ExecutionErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExecutionErrorKind::TimedOut => "timed-out",
            ExecutionErrorKind::NondeterminismDetected => "nondeterminism-detected",
            ExecutionErrorKind::Cancelled => "cancelled",
            ExecutionErrorKind::Trap => "trap",
            ExecutionErrorKind::OutOfFuel => "out-of-fuel",
            ExecutionErrorKind::OutOfMemory => "out-of-memory",
            ExecutionErrorKind::UnhandledChildExecutionError => "unhandled-child-execution-error",
            ExecutionErrorKind::InvalidParams => "invalid-params",
            ExecutionErrorKind::RetriesExhausted => "retries-exhausted",
            ExecutionErrorKind::UnknownFunction => "unknown-function",
            ExecutionErrorKind::Conflict => "conflict",
            ExecutionErrorKind::ValueTooLarge => "value-too-large",
            ExecutionErrorKind::InvalidResponse => "invalid-response",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serde_round_trip_and_shape() {
        let cases = [
            (
                ExecutionResult::Ok(json!({"a": 1})),
                json!({"ok": {"a": 1}}),
            ),
            (ExecutionResult::Err(json!("no")), json!({"err": "no"})),
            (
                ExecutionResult::ExecutionError(
                    ExecutionError::new(ExecutionErrorKind::OutOfFuel, "fuel").with_detail("d"),
                ),
                json!({"execution_error": {"kind": "out-of-fuel", "reason": "fuel", "detail": "d"}}),
            ),
            (
                ExecutionResult::error(ExecutionErrorKind::NondeterminismDetected, "x"),
                json!({"execution_error": {"kind": "nondeterminism-detected", "reason": "x"}}),
            ),
        ];
        for (result, expected) in cases {
            let value = serde_json::to_value(&result).unwrap();
            assert_eq!(value, expected);
            assert_eq!(
                serde_json::from_value::<ExecutionResult>(value).unwrap(),
                result
            );
        }
    }

    #[test]
    fn display_uses_wit_style_kind_names() {
        let r = ExecutionResult::error(ExecutionErrorKind::TimedOut, "deadline passed");
        assert_eq!(r.to_string(), "timed-out: deadline passed");
        // Display and serde agree on the kind's spelling.
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
            ExecutionErrorKind::UnknownFunction,
            ExecutionErrorKind::Conflict,
            ExecutionErrorKind::ValueTooLarge,
            ExecutionErrorKind::InvalidResponse,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.to_string()));
        }
    }
}
