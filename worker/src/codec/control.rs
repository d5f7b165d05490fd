//! An operator's word to one execution or route: [`UpgradeRequest`] (`upgrade_request.avsc`),
//! [`PauseRequest`] (`pause_request.avsc`) and [`RoutePause`](weir_core::control::RoutePause)
//! (`route_pause.avsc`).

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, optional, read_instant, read_optional,
    read_parsed, read_string, read_symbol, read_u64_bits, record, string, u64_bits,
};
use super::error::FieldError;
use super::records::{PauseAction, PauseRequest, UpgradeRequest};

impl AvroRecord for UpgradeRequest {
    const NAME: &'static str = "UpgradeRequest";

    /// `<topic>-dev.weir.v1.UpgradeRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("component", string(&self.component)),
            ("expected_seq", u64_bits(self.expected_seq)),
            ("requested_at", instant(&self.requested_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(UpgradeRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            component: f.get("component", read_string)?,
            expected_seq: f.get("expected_seq", read_u64_bits)?,
            requested_at: f.get("requested_at", read_instant)?,
        })
    }
}

impl AvroRecord for PauseRequest {
    const NAME: &'static str = "PauseRequest";

    /// `<topic>-dev.weir.v1.PauseRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        let action = match self.action {
            PauseAction::Pause => enum_value(0, "PAUSE"),
            PauseAction::Resume => enum_value(1, "RESUME"),
        };
        Ok(record(vec![
            ("execution_id", string(&self.execution_id)),
            ("action", action),
            ("reason", string(&self.reason)),
            ("requested_at", instant(&self.requested_at)),
            (
                "parked",
                optional(self.parked.as_ref(), |p| {
                    record(vec![
                        ("execution_id", string(&p.execution_id)),
                        ("ffqn", string(&p.ffqn)),
                    ])
                }),
            ),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(PauseRequest {
            execution_id: f.get("execution_id", read_parsed)?,
            action: f.get("action", |v| match read_symbol(v)?.as_str() {
                "PAUSE" => Ok(PauseAction::Pause),
                "RESUME" => Ok(PauseAction::Resume),
                other => Err(bad_symbol(other)),
            })?,
            reason: f.get("reason", read_string)?,
            requested_at: f.get("requested_at", read_instant)?,
            parked: f.get("parked", |v| {
                read_optional(v, |v| {
                    let mut p = Fields::of(v)?;
                    Ok(weir_core::records::ParkedActivity {
                        execution_id: p.get("execution_id", read_parsed)?,
                        ffqn: p.get("ffqn", read_parsed)?,
                    })
                })
            })?,
        })
    }
}

impl AvroRecord for weir_core::control::RoutePause {
    const NAME: &'static str = "RoutePause";

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("route", string(&self.route)),
            ("reason", string(&self.reason)),
            ("paused_at", instant(&self.paused_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(weir_core::control::RoutePause {
            route: f.get("route", read_string)?,
            reason: f.get("reason", read_string)?,
            paused_at: f.get("paused_at", read_instant)?,
        })
    }
}
