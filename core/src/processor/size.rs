//! Sizes of the values a run's step would put into records: a step with a value larger than
//! a record can carry is not taken (the execution ends `value-too-large`), so that no batch
//! can fail forever on a record the producer refuses.

use crate::model::ExecutionResult;
use crate::replay::Output;
use serde_json::Value;

/// Room a record needs around the largest value it carries (ids, names, framing): a value
/// (params, result) may be `max_record_bytes` less this.
pub const ENVELOPE_ALLOWANCE: usize = 16 * 1024;

/// What is wrong with `output`, if a value of it is larger than `limit` bytes of JSON.
pub(super) fn oversized(output: &Output, limit: usize) -> Option<String> {
    let (what, size) = match output {
        Output::SubmitChild {
            child_execution_id,
            params,
            ..
        } => (
            format!("the params of child {child_execution_id}"),
            json_size(params),
        ),
        Output::Schedule {
            execution_id,
            params,
            ..
        } => (
            format!("the params of scheduled {execution_id}"),
            json_size(params),
        ),
        Output::StubWrite {
            execution_id,
            result,
        } => (
            format!("the stub result of {execution_id}"),
            result_size(result),
        ),
        Output::Finished { result } => ("the result".to_owned(), result_size(result)),
        _ => return None,
    };
    (size > limit)
        .then(|| format!("{what} is {size} bytes of JSON; a record carries at most {limit}"))
}

fn result_size(result: &ExecutionResult) -> usize {
    match result {
        ExecutionResult::Ok(v) | ExecutionResult::Err(v) => json_size(v),
        ExecutionResult::ExecutionError(e) => {
            e.reason.len() + e.detail.as_ref().map_or(0, String::len)
        }
    }
}

/// The length of `value`'s JSON text, without building it.
pub(super) fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
