//! The records of a reset (`weir reset`; [`weir_core::reset`]): [`ResetRequest`]
//! (`reset_request.avsc`) and [`ResetStart`] (`reset_start.avsc`), and the link a reset
//! execution's `Created` keeps ([`ResetOf`], in `history_record.avsc`, is the history's:
//! `history.rs`).
//!
//! A `ResetStart` carries the new execution's entries after `Created` as the records
//! `weir.history` will hold: each a `HistoryRecord` of the new execution (seq 1, 2, …, no
//! `at`) in Avro single-object encoding, written and read by this codec's own
//! `HistoryRecord` conversion ([`super::nested_bytes`], [`super::read_nested`]), so that any
//! Kafka client reads them with `history_record.avsc` and nothing new.

use apache_avro::types::Value;

use super::concurrency::{concurrency_key, read_concurrency_key};
use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, json, read_bool, read_bytes, read_instant,
    read_params, read_parsed, read_string, read_string_map, read_symbol, read_u64_bits, record,
    string, string_map, u64_bits, unexpected,
};
use super::convert::{optional, read_optional};
use super::error::FieldError;
use super::records::{
    HistoryRecord, ResetOf, ResetPoint, ResetRequest, ResetStart, ResetThen, Submission,
};
use crate::model::ExecutionId;

impl AvroRecord for ResetRequest {
    const NAME: &'static str = "ResetRequest";

    /// `<topic>-dev.weir.v1.ResetRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let (to_seq, to_latest) = match self.to {
            ResetPoint::Seq(seq) => (seq, false),
            ResetPoint::Latest => (0, true),
        };
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("to_seq", u64_bits(to_seq)),
            ("to_latest", Value::Boolean(to_latest)),
            ("new_execution_id", string(&self.new_execution_id)),
            ("then", reset_then(self.then)),
            ("reason", string(&self.reason)),
            ("requested_at", instant(&self.requested_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let execution_id = f.get("execution_id", read_parsed)?;
        let to_seq = f.get("to_seq", read_u64_bits)?;
        let to = if f.get("to_latest", read_bool)? {
            ResetPoint::Latest
        } else {
            ResetPoint::Seq(to_seq)
        };
        Ok(ResetRequest {
            execution_id,
            to,
            new_execution_id: f.get("new_execution_id", read_parsed)?,
            then: f.get("then", read_reset_then)?,
            reason: f.get("reason", read_string)?,
            requested_at: f.get("requested_at", read_instant)?,
        })
    }
}

/// `ResetThen` (`reset_request.avsc`, and a batch's spec).
pub(super) fn reset_then(then: ResetThen) -> Value {
    match then {
        ResetThen::Keep => enum_value(0, "KEEP"),
        ResetThen::Cancel => enum_value(1, "CANCEL"),
        ResetThen::Terminate => enum_value(2, "TERMINATE"),
    }
}

pub(super) fn read_reset_then(v: Value) -> Result<ResetThen, FieldError> {
    match read_symbol(v)?.as_str() {
        "KEEP" => Ok(ResetThen::Keep),
        "CANCEL" => Ok(ResetThen::Cancel),
        "TERMINATE" => Ok(ResetThen::Terminate),
        other => Err(bad_symbol(other)),
    }
}

impl AvroRecord for ResetStart {
    const NAME: &'static str = "ResetStart";

    /// `<topic>-dev.weir.v1.ResetStart` (TopicRecordNameStrategy): the submissions topic
    /// carries `Submission`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    /// Refuses a submission that is not a plain top-level one (a parent, a schedule, a
    /// correlation id or a deadline): the record has no room for them, and a reset's start
    /// never has them; dropping them would start another execution than the one asked.
    fn to_avro(&self) -> Result<Value, FieldError> {
        let s = &self.submission;
        let extra = [
            ("parent", s.parent.is_some()),
            ("scheduled_at", s.scheduled_at.is_some()),
            ("correlation_id", s.correlation_id.is_some()),
            ("deadline", s.deadline.is_some()),
        ];
        if let Some((field, _)) = extra.iter().find(|(_, set)| *set) {
            return Err(FieldError::new(
                format!("submission.{field}"),
                format!(
                    "a reset's start is a top-level submission without {field}: {} has one",
                    s.execution_id
                ),
            ));
        }
        let history = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let record = HistoryRecord {
                    execution_id: s.execution_id.clone(),
                    seq: i as u64 + 1,
                    entry: entry.clone(),
                    at: None,
                };
                super::nested_bytes(&record)
                    .map(Value::Bytes)
                    .map_err(|e| e.within(&format!("history[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(record(vec![
            ("execution_id", string(&s.execution_id)),
            ("ffqn", string(&s.ffqn)),
            ("params", json(&s.params)),
            ("metadata", string_map(&s.metadata)),
            ("reset_of_execution_id", string(&self.reset_of.execution_id)),
            ("reset_of_seq", u64_bits(self.reset_of.seq)),
            ("history", Value::Array(history)),
            (
                "concurrency",
                optional(s.concurrency.as_ref(), concurrency_key),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let execution_id: ExecutionId = f.get("execution_id", read_parsed)?;
        let ffqn = f.get("ffqn", read_parsed)?;
        let params = f.get("params", read_params)?;
        let metadata = f.get("metadata", read_string_map)?;
        let reset_of = ResetOf {
            execution_id: f.get("reset_of_execution_id", read_parsed)?,
            seq: f.get("reset_of_seq", read_u64_bits)?,
        };
        let items = f.get("history", |v| match v {
            Value::Array(items) => Ok(items),
            other => Err(unexpected("an array", &other)),
        })?;
        let entries = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                read_entry(item, &execution_id, i as u64 + 1)
                    .map_err(|e| e.within(&format!("history[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let concurrency = f.get("concurrency", |v| read_optional(v, read_concurrency_key))?;
        Ok(ResetStart {
            submission: Submission {
                execution_id,
                ffqn,
                params,
                parent: None,
                scheduled_at: None,
                correlation_id: None,
                metadata,
                deadline: None,
                concurrency,
                // Not carried: the new execution takes the shared lane (the core's rule).
                tenant: None,
            },
            reset_of,
            entries,
        })
    }
}

/// One of a `ResetStart`'s history records: the single-object bytes of a `HistoryRecord`
/// of `execution` at `seq`, whose entry it returns.
fn read_entry(
    item: Value,
    execution: &ExecutionId,
    seq: u64,
) -> Result<weir_core::records::HistoryEntry, FieldError> {
    let bytes = read_bytes(item)?;
    let record: HistoryRecord = super::read_nested(&bytes)?;
    if &record.execution_id != execution {
        return Err(FieldError::new(
            "execution_id",
            format!(
                "a record of {}, not of the execution started ({execution})",
                record.execution_id
            ),
        ));
    }
    if record.seq != seq {
        return Err(FieldError::new(
            "seq",
            format!(
                "{} where {seq} was due (the records go 1, 2, … in order)",
                record.seq
            ),
        ));
    }
    Ok(record.entry)
}
