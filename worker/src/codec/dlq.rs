//! The dead-letter record, [`DlqEnvelope`] (`dlq_envelope.avsc`).

use apache_avro::types::Value;

use super::convert::{
    AvroRecord, Fields, bad_symbol, enum_value, instant, optional, read_bytes, read_instant,
    read_int, read_long, read_optional, read_string, read_symbol, record, string, unexpected,
};
use super::error::FieldError;
use super::records::{DlqEnvelope, DlqHeader, DlqReason};

impl AvroRecord for DlqEnvelope {
    const NAME: &'static str = "DlqEnvelope";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let reason_index = DlqReason::ALL
            .iter()
            .position(|r| *r == self.reason)
            .expect("every reason is in ALL") as u32;
        Ok(record(vec![
            ("original_topic", string(&self.original_topic)),
            ("original_partition", Value::Int(self.original_partition)),
            ("original_offset", Value::Long(self.original_offset)),
            (
                "original_timestamp_millis",
                optional(self.original_timestamp_millis, Value::Long),
            ),
            ("key", optional(self.key.clone(), Value::Bytes)),
            ("value", optional(self.value.clone(), Value::Bytes)),
            (
                "original_headers",
                Value::Array(
                    self.original_headers
                        .iter()
                        .map(|h| {
                            record(vec![
                                ("key", string(&h.key)),
                                ("value", optional(h.value.clone(), Value::Bytes)),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("reason", enum_value(reason_index, self.reason.symbol())),
            ("error", string(&self.error)),
            ("failed_at", instant(&self.failed_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(DlqEnvelope {
            original_topic: f.get("original_topic", read_string)?,
            original_partition: f.get("original_partition", read_int)?,
            original_offset: f.get("original_offset", read_long)?,
            original_timestamp_millis: f
                .get("original_timestamp_millis", |v| read_optional(v, read_long))?,
            key: f.get("key", |v| read_optional(v, read_bytes))?,
            value: f.get("value", |v| read_optional(v, read_bytes))?,
            original_headers: f.get("original_headers", |v| match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|h| {
                        let mut h = Fields::of(h)?;
                        Ok(DlqHeader {
                            key: h.get("key", read_string)?,
                            value: h.get("value", |v| read_optional(v, read_bytes))?,
                        })
                    })
                    .collect(),
                other => Err(unexpected("an array", &other)),
            })?,
            reason: f.get("reason", |v| {
                let s = read_symbol(v)?;
                DlqReason::from_symbol(&s).ok_or_else(|| bad_symbol(&s))
            })?,
            error: f.get("error", read_string)?,
            failed_at: f.get("failed_at", read_instant)?,
        })
    }
}
