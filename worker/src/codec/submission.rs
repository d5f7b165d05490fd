//! [`Submission`] (`submission.avsc`) and the workflow worker's reading of it,
//! [`SubmissionInput`]; [`CancelRequest`] (`cancel_request.avsc`), which goes to the same
//! topic.

use apache_avro::types::Value;

use super::concurrency::{concurrency_key, read_concurrency_key};
use super::convert::{
    AvroRecord, Fields, instant, json, optional, parent, read_bool, read_instant, read_optional,
    read_params, read_parent, read_parsed, read_string, read_string_map, record, string,
    string_map,
};
use super::error::FieldError;
use super::records::{CancelRequest, Submission};

/// A `Submission` as the workflow worker reads it: every field as [`Submission`] reads them,
/// except that params which are not a JSON array do not fail the record; they are kept as
/// their text (a JSON string) with the reason, so that the execution can still be created
/// and finished with `invalid-params` for its caller to hear (issue 11 item 9). Likewise a
/// function name that does not parse: `ffqn` is then
/// [`unparsable_ffqn`](weir_core::records::unparsable_ffqn) and `ffqn_error`
/// says why, so that the caller hears `unknown-function`.
#[derive(Clone, Debug, PartialEq)]
pub struct SubmissionInput {
    pub submission: Submission,
    pub params_error: Option<String>,
    pub ffqn_error: Option<String>,
}

impl AvroRecord for Submission {
    const NAME: &'static str = "Submission";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("ffqn", string(&self.ffqn)),
            ("params", json(&self.params)),
            ("parent", optional(self.parent.as_ref(), parent)),
            (
                "scheduled_at",
                optional(self.scheduled_at.as_ref(), instant),
            ),
            (
                "correlation_id",
                optional(self.correlation_id.as_ref(), string),
            ),
            ("metadata", string_map(&self.metadata)),
            ("deadline", optional(self.deadline.as_ref(), instant)),
            (
                "concurrency",
                optional(self.concurrency.as_ref(), concurrency_key),
            ),
            ("tenant", optional(self.tenant.as_ref(), string)),
        ]))
    }

    /// Fails on a function name that does not parse and on params that are not a JSON
    /// array ([`SubmissionInput`] keeps those records).
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let (submission, ffqn_error, params_error) = read_submission(value)?;
        if let Some(e) = ffqn_error {
            return Err(e);
        }
        if let Some(e) = params_error {
            return Err(e.within("params"));
        }
        Ok(submission)
    }
}

/// A submission's fields, with a function name that does not parse (`ffqn` is then
/// [`unparsable_ffqn`](weir_core::records::unparsable_ffqn)) and params that are not a JSON
/// array (kept as their text) given back beside it instead of failing the record: the one
/// reading of the record, for [`Submission`] and [`SubmissionInput`].
#[allow(clippy::type_complexity)]
fn read_submission(
    value: Value,
) -> Result<(Submission, Option<FieldError>, Option<FieldError>), FieldError> {
    let mut f = Fields::of(value)?;
    let execution_id = f.get("execution_id", read_parsed)?;
    let name = f.get("ffqn", read_string)?;
    let (ffqn, ffqn_error) = match name.parse() {
        Ok(ffqn) => (ffqn, None),
        Err(e) => (
            weir_core::records::unparsable_ffqn(),
            Some(FieldError::new("ffqn", format!("{e}"))),
        ),
    };
    let text = f.get("params", read_string)?;
    let (params, params_error) = match read_params(Value::String(text.clone())) {
        Ok(params) => (params, None),
        Err(e) => (serde_json::Value::String(text), Some(e)),
    };
    let submission = Submission {
        execution_id,
        ffqn,
        params,
        parent: f.get("parent", |v| read_optional(v, read_parent))?,
        scheduled_at: f.get("scheduled_at", |v| read_optional(v, read_instant))?,
        correlation_id: f.get("correlation_id", |v| read_optional(v, read_string))?,
        metadata: f.get("metadata", read_string_map)?,
        deadline: f.get("deadline", |v| read_optional(v, read_instant))?,
        concurrency: f.get("concurrency", |v| read_optional(v, read_concurrency_key))?,
        // Taken as is: a raw client's tenant is its own (Weir's clients check theirs).
        tenant: f.get("tenant", |v| read_optional(v, read_string))?,
    };
    Ok((submission, ffqn_error, params_error))
}

impl AvroRecord for SubmissionInput {
    const NAME: &'static str = "Submission";

    fn to_avro(&self) -> Result<Value, FieldError> {
        self.submission.to_avro()
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let (submission, ffqn_error, params_error) = read_submission(value)?;
        Ok(SubmissionInput {
            submission,
            params_error: params_error.map(|e| e.to_string()),
            ffqn_error: ffqn_error.map(|e| e.message),
        })
    }
}

impl AvroRecord for CancelRequest {
    const NAME: &'static str = "CancelRequest";

    /// `<topic>-dev.weir.v1.CancelRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("reason", string(&self.reason)),
            ("terminate", Value::Boolean(self.terminate)),
            ("requested_at", instant(&self.requested_at)),
            (
                "waited_until",
                optional(self.waited_until.as_ref(), instant),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(CancelRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            reason: f.get("reason", read_string)?,
            terminate: f.get("terminate", read_bool)?,
            requested_at: f.get("requested_at", read_instant)?,
            waited_until: f.get("waited_until", |v| read_optional(v, read_instant))?,
        })
    }
}
