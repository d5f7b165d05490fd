//! Queries (`weir query`; [`weir_core::query`]): [`QueryRequest`] (`query_request.avsc`) on
//! `weir.responses` and [`QueryAnswer`] (`query_answer.avsc`) on `weir.answers`.

use apache_avro::types::Value;
use weir_core::query::{QueryAnswer, QueryError, QueryErrorKind, QueryRequest};

use super::convert::{
    AvroRecord, Fields, bad_branch, branch, enum_value, instant, json, read_branch, read_instant,
    read_json, read_parsed, read_string, read_symbol, read_u64_bits, record, string, u64_bits,
};
use super::error::FieldError;

impl AvroRecord for QueryRequest {
    const NAME: &'static str = "QueryRequest";

    /// `<topic>-dev.weir.v1.QueryRequest` (TopicRecordNameStrategy): the responses topic
    /// carries `Response`s under `<topic>-value`.
    fn subject(topic: &str) -> String {
        format!("{topic}-{}.{}", super::schemas::NAMESPACE, Self::NAME)
    }

    fn to_avro(&self) -> Result<Value, FieldError> {
        Ok(record(vec![
            ("query_id", string(&self.query_id)),
            ("execution_id", string(&self.execution_id)),
            ("name", string(&self.name)),
            ("params", json(&self.params)),
            ("requested_at", instant(&self.requested_at)),
            ("deadline", instant(&self.deadline)),
        ]))
    }

    /// `params` is any JSON text here: one that is not an array is the owner's to answer
    /// (`invalid-request`), so that the caller hears why instead of waiting for nothing.
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(QueryRequest {
            query_id: f.get("query_id", read_string)?,
            execution_id: f.get("execution_id", read_parsed)?,
            name: f.get("name", read_string)?,
            params: f.get("params", read_json)?,
            requested_at: f.get("requested_at", read_instant)?,
            deadline: f.get("deadline", read_instant)?,
        })
    }
}

/// The Avro symbol of `kind`: its spelling in upper snake case (`unknown-execution` is
/// `UNKNOWN_EXECUTION`).
fn symbol(kind: QueryErrorKind) -> String {
    kind.as_str().replace('-', "_").to_ascii_uppercase()
}

/// The kind of `symbol`; one this reader does not know is `Other` (the enum's default does
/// this already when the writer's schema is resolved; this covers a reader schema that knows
/// more symbols than this code).
fn kind_of(symbol: &str) -> QueryErrorKind {
    QueryErrorKind::parse(&symbol.replace('_', "-").to_ascii_lowercase())
}

impl AvroRecord for QueryAnswer {
    const NAME: &'static str = "QueryAnswer";

    fn to_avro(&self) -> Result<Value, FieldError> {
        let outcome = match &self.outcome {
            Ok(value) => branch(0, record(vec![("value", json(value))])),
            Err(error) => {
                let index = QueryErrorKind::ALL
                    .iter()
                    .position(|k| *k == error.kind)
                    .unwrap_or(QueryErrorKind::ALL.len() - 1);
                branch(
                    1,
                    record(vec![
                        (
                            "kind",
                            enum_value(index as u32, &symbol(QueryErrorKind::ALL[index])),
                        ),
                        ("message", string(&error.message)),
                    ]),
                )
            }
        };
        Ok(record(vec![
            ("query_id", string(&self.query_id)),
            ("execution_id", string(&self.execution_id)),
            ("outcome", outcome),
            ("version", u64_bits(self.version)),
            ("answered_at", instant(&self.answered_at)),
        ]))
    }

    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let mut f = Fields::of(value)?;
        Ok(QueryAnswer {
            query_id: f.get("query_id", read_string)?,
            execution_id: f.get("execution_id", read_parsed)?,
            outcome: f.get("outcome", |v| {
                let (index, inner) = read_branch(v)?;
                let mut o = Fields::of(inner)?;
                match index {
                    0 => Ok(Ok(o.get("value", read_json)?)),
                    1 => Ok(Err(QueryError::new(
                        o.get("kind", |v| read_symbol(v).map(|s| kind_of(&s)))?,
                        o.get("message", read_string)?,
                    ))),
                    other => Err(bad_branch(other)),
                }
            })?,
            version: f.get("version", read_u64_bits)?,
            answered_at: f.get("answered_at", read_instant)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The enum's symbols in `query_answer.avsc` are the kinds of [`QueryErrorKind::ALL`], in
    /// that order, with `OTHER` the default: the index written is the symbol's.
    #[test]
    fn the_schema_lists_every_kind_in_order() {
        let schema: serde_json::Value =
            serde_json::from_str(&QueryAnswer::schema().text).expect("JSON");
        let outcome = schema["fields"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["name"] == "outcome"))
            .expect("an outcome");
        let kind = &outcome["type"][1]["fields"][0]["type"];
        let symbols: Vec<String> = kind["symbols"]
            .as_array()
            .expect("symbols")
            .iter()
            .map(|s| s.as_str().expect("a symbol").to_owned())
            .collect();
        let expected: Vec<String> = QueryErrorKind::ALL.into_iter().map(symbol).collect();
        assert_eq!(symbols, expected);
        assert_eq!(kind["default"], "OTHER");
        for k in QueryErrorKind::ALL {
            assert_eq!(kind_of(&symbol(k)), k);
        }
        assert_eq!(kind_of("FROM_THE_FUTURE"), QueryErrorKind::Other);
    }
}
