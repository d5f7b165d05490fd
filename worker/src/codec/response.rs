//! [`Response`](crate::model::Response) (`response.avsc`) and the workflow worker's reading of
//! it, [`ResponseInput`]; an activity's [`ActivityRequest`] (`activity_request.avsc`) and
//! [`ActivityCancel`] (`activity_cancel.avsc`), whose answer comes back as a `Response`.
//!
//! A history's `ResponseAppended` entry holds a `Response`: `response` and
//! `read_response` serve `history.rs` too.

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_branch, bad_symbol, branch, enum_value, instant, json, optional,
    prefix, read_branch, read_instant, read_int, read_json, read_long, read_optional, read_params,
    read_parsed, read_result_with, read_string, read_symbol, record, result, string,
};
use super::error::FieldError;
use super::records::{ActivityCancel, ActivityRequest};
use crate::model::{
    DelayOutcome, EventOutcome, ExecutionError, ExecutionErrorKind, ExecutionResult, Ran, Response,
};

impl AvroRecord for Response {
    const NAME: &'static str = "Response";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(response(self))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        read_response(value)
    }
}

/// A `Response` as the workflow worker reads it: a child's answer whose value is not JSON
/// text does not fail the record, because its child id is readable: it becomes that child's
/// `invalid-response` error, and `value_error` says why (issue 11 item 15).
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseInput {
    pub response: Response,
    pub value_error: Option<String>,
}

impl AvroRecord for ResponseInput {
    const NAME: &'static str = "Response";

    fn to_avro(&self) -> Result<Value, FieldError> {
        self.response.to_avro()
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut value_error = None;
        let response = read_response_with(value, |v| {
            let text = read_string(v)?;
            Ok(serde_json::from_str(&text).unwrap_or_else(|e| {
                value_error = Some(format!(
                    "the value is not JSON text ({e}): `{}`",
                    prefix(&text, 200)
                ));
                serde_json::Value::Null
            }))
        })?;
        let response = match (response, &value_error) {
            (
                Response::ChildExecutionFinished {
                    child_execution_id,
                    ran,
                    ..
                },
                Some(error),
            ) => Response::ChildExecutionFinished {
                result: ExecutionResult::ExecutionError(ExecutionError {
                    kind: ExecutionErrorKind::InvalidResponse,
                    reason: format!("the answer for {child_execution_id} was not taken: {error}"),
                    detail: None,
                }),
                child_execution_id,
                ran,
            },
            (response, _) => response,
        };
        Ok(ResponseInput {
            response,
            value_error,
        })
    }
}

impl AvroRecord for ActivityRequest {
    const NAME: &'static str = "ActivityRequest";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let attempt = i32::try_from(self.attempt)
            .map_err(|_| FieldError::new("attempt", "exceeds i32::MAX"))?;
        let timeout = self
            .timeout_millis
            .map(i64::try_from)
            .transpose()
            .map_err(|_| FieldError::new("timeout_millis", "exceeds i64::MAX"))?;
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("parent_execution_id", string(&self.parent_execution_id)),
            ("ffqn", string(&self.ffqn)),
            ("params", json(&self.params)),
            ("attempt", Value::Int(attempt)),
            ("timeout_millis", optional(timeout, Value::Long)),
            ("deadline", optional(self.deadline.as_ref(), instant)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ActivityRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            parent_execution_id: f.get("parent_execution_id", read_parsed)?,
            ffqn: f.get("ffqn", read_parsed)?,
            params: f.get("params", read_params)?,
            attempt: f.get("attempt", |v| {
                u32::try_from(read_int(v)?).map_err(|_| FieldError::new("", "negative attempt"))
            })?,
            timeout_millis: f.get("timeout_millis", |v| {
                read_optional(v, |v| {
                    u64::try_from(read_long(v)?)
                        .map_err(|_| FieldError::new("", "negative timeout"))
                })
            })?,
            deadline: f.get("deadline", |v| read_optional(v, read_instant))?,
        })
    }
}

impl AvroRecord for ActivityCancel {
    const NAME: &'static str = "ActivityCancel";

    /// `<topic>-dev.weir.v1.ActivityCancel` (TopicRecordNameStrategy): a route's topic carries
    /// `ActivityRequest`s under `<topic>-value`, and a second record type under that subject
    /// would fail the registry's compatibility check.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("parent_execution_id", string(&self.parent_execution_id)),
            ("cancelled_at", instant(&self.cancelled_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(ActivityCancel {
            execution_id: f.get("execution_id", read_parsed)?,
            parent_execution_id: f.get("parent_execution_id", read_parsed)?,
            cancelled_at: f.get("cancelled_at", read_instant)?,
        })
    }
}

fn ran(r: &Ran) -> Value {
    record(vec![
        ("started_at", instant(&r.started_at)),
        ("finished_at", instant(&r.finished_at)),
    ])
}

fn read_ran(v: Value) -> Result<Ran, FieldError> {
    let mut f = Fields::of(v)?;
    Ok(Ran {
        started_at: f.get("started_at", read_instant)?,
        finished_at: f.get("finished_at", read_instant)?,
    })
}

pub(super) fn response(r: &Response) -> Value {
    let body = match r {
        Response::ChildExecutionFinished {
            child_execution_id,
            result: res,
            ran: r,
        } => branch(
            0,
            record(vec![
                ("child_execution_id", string(child_execution_id)),
                ("result", result(res)),
                ("ran", optional(r.as_ref(), ran)),
            ]),
        ),
        Response::DelayFinished { delay_id, outcome } => branch(
            1,
            record(vec![
                ("delay_id", string(delay_id)),
                (
                    "outcome",
                    match outcome {
                        DelayOutcome::Ok => enum_value(0, "OK"),
                        DelayOutcome::Cancelled => enum_value(1, "CANCELLED"),
                    },
                ),
            ]),
        ),
        // Only in history (`weir.responses` never carries one).
        Response::EventDelivered {
            event_request_id,
            outcome,
        } => branch(
            2,
            record(vec![
                ("event_request_id", string(event_request_id)),
                (
                    "event",
                    match outcome {
                        EventOutcome::Received { event_id, payload } => branch(
                            1,
                            record(vec![
                                ("event_id", string(event_id)),
                                ("payload", json(payload)),
                            ]),
                        ),
                        EventOutcome::Cancelled => branch(0, Value::Null),
                    },
                ),
            ]),
        ),
    };
    record(vec![("response", body)])
}

pub(super) fn read_response(v: Value) -> Result<Response, FieldError> {
    read_response_with(v, read_json)
}

/// A response whose result value (JSON text), if it has one, is read by `value`.
fn read_response_with(
    v: Value,
    value: impl FnMut(Value) -> Result<serde_json::Value, FieldError>,
) -> Result<Response, FieldError> {
    let mut f = Fields::of(v)?;
    f.get("response", |v| {
        let (i, v) = read_branch(v)?;
        let mut b = Fields::of(v)?;
        match i {
            0 => Ok(Response::ChildExecutionFinished {
                child_execution_id: b.get("child_execution_id", read_parsed)?,
                result: b.get("result", |v| read_result_with(v, value))?,
                ran: b.get("ran", |v| read_optional(v, read_ran))?,
            }),
            1 => Ok(Response::DelayFinished {
                delay_id: b.get("delay_id", read_parsed)?,
                outcome: b.get("outcome", |v| match read_symbol(v)?.as_str() {
                    "OK" => Ok(DelayOutcome::Ok),
                    "CANCELLED" => Ok(DelayOutcome::Cancelled),
                    s => Err(bad_symbol(s)),
                })?,
            }),
            2 => Ok(Response::EventDelivered {
                event_request_id: b.get("event_request_id", read_parsed)?,
                outcome: b.get("event", |v| {
                    Ok(match read_optional(v, Fields::of)? {
                        None => EventOutcome::Cancelled,
                        Some(mut e) => EventOutcome::Received {
                            event_id: e.get("event_id", read_string)?,
                            payload: e.get("payload", read_json)?,
                        },
                    })
                })?,
            }),
            i => Err(bad_branch(i)),
        }
    })
}
