//! The records of concurrency slots ([`weir_core::concurrency`]): [`SlotCommand`]
//! (`slot_command.avsc`, on `weir.responses`), [`SlotState`] (`slot_state.avsc`, on
//! `weir.state`), and a submission's [`ConcurrencyKey`] and a `Created`'s claims, which
//! `submission.avsc`, `reset_start.avsc` and `history_record.avsc` carry.

use apache_avro::types::Value;
use weir_core::concurrency::{
    ConcurrencyKey, MAX_LIMIT, Slot, SlotAction, SlotClaim, SlotCommand, SlotState,
};

use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, optional, read_instant, read_int,
    read_optional, read_parsed, read_string, read_symbol, record, string, unexpected,
};
use super::error::FieldError;

impl AvroRecord for SlotCommand {
    const NAME: &'static str = "SlotCommand";

    /// `<topic>-dev.weir.v1.SlotCommand` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let (action, limit, reason) = match &self.action {
            SlotAction::Acquire { limit } => (enum_value(0, "ACQUIRE"), Some(*limit), None),
            SlotAction::Release => (enum_value(1, "RELEASE"), None, None),
            SlotAction::Grant => (enum_value(2, "GRANT"), None, None),
            SlotAction::Refuse { reason } => (enum_value(3, "REFUSE"), None, Some(reason)),
        };
        Ok(record(vec![
            ("slot", string(&self.slot)),
            ("execution_id", string(&self.execution_id)),
            ("action", action),
            ("limit", optional(limit, limit_value)),
            ("reason", optional(reason, string)),
            ("sent_at", instant(&self.sent_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let slot = f.get("slot", read_slot)?;
        let execution_id = f.get("execution_id", read_parsed)?;
        let symbol = f.get("action", read_symbol)?;
        let limit = f.get("limit", |v| read_optional(v, read_limit))?;
        let reason = f.get("reason", |v| read_optional(v, read_string))?;
        let action = match symbol.as_str() {
            "ACQUIRE" => SlotAction::Acquire {
                limit: limit.ok_or_else(|| FieldError::new("limit", "an ACQUIRE has a limit"))?,
            },
            "RELEASE" => SlotAction::Release,
            "GRANT" => SlotAction::Grant,
            "REFUSE" => SlotAction::Refuse {
                reason: reason.unwrap_or_default(),
            },
            other => return Err(bad_symbol(other)).map_err(|e| e.within("action")),
        };
        Ok(SlotCommand {
            slot,
            execution_id,
            action,
            sent_at: f.get("sent_at", read_instant)?,
        })
    }
}

impl AvroRecord for SlotState {
    const NAME: &'static str = "SlotState";

    /// `<topic>-dev.weir.v1.SlotState` (TopicRecordNameStrategy): the state topic carries
    /// `ScheduleState`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let ids =
            |ids: &[weir_core::model::ExecutionId]| Value::Array(ids.iter().map(string).collect());
        Ok(record(vec![
            ("slot", string(&self.slot)),
            ("limit", limit_value(self.limit)),
            ("holders", ids(&self.holders)),
            ("waiting", ids(&self.waiting)),
            ("updated_at", instant(&self.updated_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        let ids = |v: Value| match v {
            Value::Array(items) => items.into_iter().map(read_parsed).collect(),
            other => Err(unexpected("an array", &other)),
        };
        Ok(SlotState {
            slot: f.get("slot", read_slot)?,
            limit: f.get("limit", read_limit)?,
            holders: f.get("holders", ids)?,
            waiting: f.get("waiting", ids)?,
            updated_at: f.get("updated_at", read_instant)?,
        })
    }
}

fn limit_value(limit: u32) -> Value {
    // Within `MAX_LIMIT`, far below `i32::MAX` (checked where limits are made).
    Value::Int(i32::try_from(limit).unwrap_or(i32::MAX))
}

fn read_limit(v: Value) -> Result<u32, FieldError> {
    let limit = read_int(v)?;
    u32::try_from(limit)
        .ok()
        .filter(|l| (1..=MAX_LIMIT).contains(l))
        .ok_or_else(|| FieldError::new("", format!("limit {limit} is not 1 to {MAX_LIMIT}")))
}

fn read_slot(v: Value) -> Result<Slot, FieldError> {
    let text = read_string(v)?;
    Slot::parse(&text).map_err(|e| FieldError::new("", e.to_string()))
}

/// A submission's `concurrency` (the `ConcurrencyKey` record).
pub(super) fn concurrency_key(key: &ConcurrencyKey) -> Value {
    record(vec![
        ("key", string(&key.key)),
        ("limit", optional(key.limit, limit_value)),
    ])
}

pub(super) fn read_concurrency_key(v: Value) -> Result<ConcurrencyKey, FieldError> {
    let mut f = Fields::of(v)?;
    let key = f.get("key", read_string)?;
    weir_core::concurrency::check_key(&key).map_err(|e| FieldError::new("key", e.to_string()))?;
    Ok(ConcurrencyKey {
        key,
        limit: f.get("limit", |v| read_optional(v, read_limit))?,
    })
}

/// A `Created`'s `slots` (an array of `SlotClaim` records).
pub(super) fn claims(claims: &[SlotClaim]) -> Value {
    Value::Array(
        claims
            .iter()
            .map(|c| {
                record(vec![
                    ("slot", string(&c.slot)),
                    ("limit", limit_value(c.limit)),
                ])
            })
            .collect(),
    )
}

pub(super) fn read_claims(v: Value) -> Result<Vec<SlotClaim>, FieldError> {
    let Value::Array(items) = v else {
        return Err(unexpected("an array", &v));
    };
    items
        .into_iter()
        .map(|item| {
            let mut f = Fields::of(item)?;
            Ok(SlotClaim {
                slot: f.get("slot", read_slot)?,
                limit: f.get("limit", read_limit)?,
            })
        })
        .collect()
}

pub(super) fn read_slot_field(v: Value) -> Result<Slot, FieldError> {
    read_slot(v)
}
