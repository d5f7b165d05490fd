//! The records of batch operations ([`weir_core::batch`]): [`BatchCommand`]
//! (`batch_command.avsc`), [`BatchState`] (`batch_state.avsc`) and [`BatchOutcomes`]
//! (`batch_outcomes.avsc`).

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, optional, read_instant, read_optional,
    read_parsed, read_string, read_symbol, read_u64_bits, record, string, u64_bits, unexpected,
};
use super::error::FieldError;
use weir_core::batch::{
    BatchAction, BatchCommand, BatchCommandAction, BatchCounts, BatchFilter, BatchOutcomes,
    BatchSpec, BatchState, BatchStatus, ExecutionOutcome, Outcome,
};
use weir_core::rows::{ExecutionState, ListBy, ListCursor};

/// `<topic>-dev.weir.v1.<Record>` (TopicRecordNameStrategy): the responses and state topics
/// carry other records under `<topic>-value`.
fn own_subject(topic: &str, name: &str) -> String {
    format!("{topic}-{}.{name}", super::schemas::NAMESPACE)
}

impl AvroRecord for BatchCommand {
    const NAME: &'static str = "BatchCommand";

    fn subject(topic: &str) -> String {
        own_subject(topic, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let (action, spec) = match &self.action {
            BatchCommandAction::Start(spec) => (enum_value(0, "START"), Some(spec)),
            BatchCommandAction::Cancel => (enum_value(1, "CANCEL"), None),
        };
        Ok(record(vec![
            ("requested_at", instant(&self.requested_at)),
            ("id", string(&self.id)),
            ("action", action),
            ("spec", optional(spec, batch_spec)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let requested_at = f.get("requested_at", read_instant)?;
        let id = f.get("id", read_string)?;
        let action = f.get("action", read_symbol)?;
        let spec = f.get("spec", |v| read_optional(v, read_batch_spec))?;
        let action = match (action.as_str(), spec) {
            ("START", Some(spec)) => BatchCommandAction::Start(spec),
            ("START", None) => return Err(FieldError::new("spec", "missing for START")),
            ("CANCEL", _) => BatchCommandAction::Cancel,
            (other, _) => return Err(bad_symbol(other).within("action")),
        };
        Ok(BatchCommand {
            id,
            action,
            requested_at,
        })
    }
}

impl AvroRecord for BatchState {
    const NAME: &'static str = "BatchState";

    fn subject(topic: &str) -> String {
        own_subject(topic, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let status = match self.status {
            BatchStatus::Running => enum_value(0, "RUNNING"),
            BatchStatus::Done => enum_value(1, "DONE"),
            BatchStatus::Cancelled => enum_value(2, "CANCELLED"),
        };
        let cursor = |c: &ListCursor| {
            record(vec![
                ("created_at", instant(&c.created_at)),
                ("execution_id", string(&c.execution_id)),
            ])
        };
        Ok(record(vec![
            ("started_at", instant(&self.started_at)),
            ("id", string(&self.id)),
            ("spec", batch_spec(&self.spec)),
            ("status", status),
            ("ended_at", optional(self.ended_at.as_ref(), instant)),
            ("cursor", optional(self.cursor.as_ref(), cursor)),
            ("acted", u64_bits(self.counts.acted)),
            ("skipped_finished", u64_bits(self.counts.finished)),
            ("skipped_already", u64_bits(self.counts.already)),
            ("tat", optional(self.tat.as_ref(), instant)),
            ("turns", u64_bits(self.turns)),
            ("updated_at", instant(&self.updated_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let started_at = f.get("started_at", read_instant)?;
        let id = f.get("id", read_string)?;
        let spec = f.get("spec", read_batch_spec)?;
        let status = f.get("status", |v| {
            let symbol = read_symbol(v)?;
            BatchStatus::parse(&symbol.to_ascii_lowercase()).ok_or_else(|| bad_symbol(&symbol))
        })?;
        let ended_at = f.get("ended_at", |v| read_optional(v, read_instant))?;
        let cursor = f.get("cursor", |v| {
            read_optional(v, |v| {
                let mut c = Fields::of(v)?;
                Ok(ListCursor {
                    created_at: c.get("created_at", read_instant)?,
                    execution_id: c.get("execution_id", read_parsed)?,
                })
            })
        })?;
        let counts = BatchCounts {
            acted: f.get("acted", read_u64_bits)?,
            finished: f.get("skipped_finished", read_u64_bits)?,
            already: f.get("skipped_already", read_u64_bits)?,
        };
        Ok(BatchState {
            id,
            spec,
            status,
            started_at,
            ended_at,
            cursor,
            counts,
            tat: f.get("tat", |v| read_optional(v, read_instant))?,
            turns: f.get("turns", read_u64_bits)?,
            updated_at: f.get("updated_at", read_instant)?,
        })
    }
}

impl AvroRecord for BatchOutcomes {
    const NAME: &'static str = "BatchOutcomes";

    fn subject(topic: &str) -> String {
        own_subject(topic, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let outcome = |o: &ExecutionOutcome| {
            let kind = match o.outcome {
                Outcome::Acted => enum_value(0, "ACTED"),
                Outcome::Finished => enum_value(1, "SKIPPED_FINISHED"),
                Outcome::AlreadyThere => enum_value(2, "SKIPPED_ALREADY"),
            };
            record(vec![
                ("execution_id", string(&o.execution_id)),
                ("outcome", kind),
            ])
        };
        Ok(record(vec![
            ("batch_id", string(&self.id)),
            ("turn", u64_bits(self.turn)),
            (
                "outcomes",
                Value::Array(self.outcomes.iter().map(outcome).collect()),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let read_outcome = |v: Value| {
            let mut o = Fields::of(v)?;
            let execution_id = o.get("execution_id", read_parsed)?;
            let outcome = o.get("outcome", |v| {
                let symbol = read_symbol(v)?;
                let text = symbol.to_ascii_lowercase().replace('_', "-");
                Outcome::parse(&text).ok_or_else(|| bad_symbol(&symbol))
            })?;
            Ok(ExecutionOutcome {
                execution_id,
                outcome,
            })
        };
        Ok(BatchOutcomes {
            id: f.get("batch_id", read_string)?,
            turn: f.get("turn", read_u64_bits)?,
            outcomes: f.get("outcomes", |v| match v {
                Value::Array(items) => items.into_iter().map(read_outcome).collect(),
                other => Err(unexpected("an array", &other)),
            })?,
        })
    }
}

fn batch_spec(spec: &BatchSpec) -> Value {
    let (function, parent) = match &spec.filter.by {
        ListBy::Function(f) => (Some(f.as_str()), None),
        ListBy::Parent(p) => (None, Some(p.to_string())),
    };
    let action = match spec.action {
        BatchAction::Cancel => enum_value(0, "CANCEL"),
        BatchAction::Terminate => enum_value(1, "TERMINATE"),
        BatchAction::Pause => enum_value(2, "PAUSE"),
        BatchAction::Resume => enum_value(3, "RESUME"),
    };
    let f = &spec.filter;
    record(vec![
        ("function", optional(function, string)),
        ("parent", optional(parent, string)),
        ("state", optional(f.state.map(|s| s.to_string()), string)),
        ("outcome", optional(f.outcome.as_ref(), string)),
        ("created_from", optional(f.created_from.as_ref(), instant)),
        ("created_until", optional(f.created_until.as_ref(), instant)),
        ("action", action),
        ("per_second", Value::Double(spec.per_second)),
        ("reason", string(&spec.reason)),
    ])
}

fn read_batch_spec(v: Value) -> Result<BatchSpec, FieldError> {
    let mut f = Fields::of(v)?;
    let function = f.get("function", |v| read_optional(v, read_string))?;
    let parent = f.get("parent", |v| read_optional(v, read_parsed))?;
    let by = match (function, parent) {
        (Some(function), None) => ListBy::Function(function),
        (None, Some(parent)) => ListBy::Parent(parent),
        _ => {
            return Err(FieldError::new(
                "function",
                "exactly one of function and parent must be given",
            ));
        }
    };
    let state: Option<ExecutionState> = f.get("state", |v| read_optional(v, read_parsed))?;
    let filter = BatchFilter {
        by,
        state,
        outcome: f.get("outcome", |v| read_optional(v, read_string))?,
        created_from: f.get("created_from", |v| read_optional(v, read_instant))?,
        created_until: f.get("created_until", |v| read_optional(v, read_instant))?,
    };
    let action = f.get("action", |v| {
        let symbol = read_symbol(v)?;
        symbol
            .to_ascii_lowercase()
            .parse::<BatchAction>()
            .map_err(|_| bad_symbol(&symbol))
    })?;
    let per_second = f.get("per_second", |v| match v {
        Value::Double(d) => Ok(d),
        other => Err(unexpected("a double", &other)),
    })?;
    Ok(BatchSpec {
        filter,
        action,
        per_second,
        reason: f.get("reason", read_string)?,
    })
}
