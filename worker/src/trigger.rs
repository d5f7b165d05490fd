//! Triggers: existing topics that start executions or wake them (`topology/triggers.toml`).
//!
//! This module reads and checks the declarations ([`TriggersFile`]) into
//! [`weir_core::trigger::Trigger`]s; what a record becomes — the mapping, the derived
//! identities that make a record read again the same submission, the size gate — is the pure
//! [`weir_core::trigger`], which the simulation runs too. The Kafka loop that reads the topics
//! and commits their offsets in the transaction of what they produce is
//! [`crate::kafka::trigger_worker`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::check_event_name;
pub use weir_core::trigger::{
    Action, Format, MapError, Mapped, Source, SourceRecord, Trigger, oversize,
};

/// The parsed `triggers.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggersFile {
    #[serde(default, rename = "trigger")]
    pub triggers: Vec<TriggerEntry>,
}

/// One `[[trigger]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerEntry {
    pub name: String,
    pub topic: String,
    #[serde(default)]
    pub format: Format,
    /// Start an execution of this function per record.
    pub function: Option<String>,
    /// Where each parameter comes from (see [`Source`]); starts only.
    #[serde(default)]
    pub params: Vec<String>,
    /// Deliver an event of this name per record, instead of starting an execution.
    pub event: Option<String>,
    /// Events: where the target execution's id comes from.
    pub target: Option<String>,
    /// Events: where the payload comes from (default: the whole value).
    pub payload: Option<String>,
    /// Where a record's identity comes from (default: its topic, partition and offset).
    pub id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TriggerSpecError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid triggers file: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{path}: trigger `{trigger}`: {reason}")]
    Invalid {
        path: PathBuf,
        trigger: String,
        reason: String,
    },
}

impl TriggersFile {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<Vec<Trigger>, TriggerSpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| TriggerSpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks `text` (read from `path`, for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Vec<Trigger>, TriggerSpecError> {
        let file: TriggersFile =
            toml::from_str(text).map_err(|source| TriggerSpecError::Parse {
                path: path.to_owned(),
                source,
            })?;
        let mut names = std::collections::BTreeSet::new();
        let mut topics = std::collections::BTreeSet::new();
        file.triggers
            .into_iter()
            .map(|entry| {
                let invalid = |reason: String| TriggerSpecError::Invalid {
                    path: path.to_owned(),
                    trigger: entry.name.clone(),
                    reason,
                };
                let trigger = entry.check().map_err(invalid)?;
                if !names.insert(trigger.name.clone()) {
                    return Err(invalid("a second trigger of this name".to_owned()));
                }
                if !topics.insert(trigger.topic.clone()) {
                    return Err(invalid(format!(
                        "topic `{}` is bound by another trigger: one trigger per topic",
                        trigger.topic
                    )));
                }
                Ok(trigger)
            })
            .collect()
    }
}

impl TriggerEntry {
    fn check(&self) -> Result<Trigger, String> {
        let name_ok = (1..=64).contains(&self.name.len())
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Err("a name is 1–64 of [a-z0-9-]".to_owned());
        }
        if self.topic.is_empty() {
            return Err("`topic` is empty".to_owned());
        }
        if self.topic.starts_with("weir.") || self.topic.contains(".weir.") {
            return Err(format!(
                "`{}` is one of Weir's own topics: a trigger reads a topic of another system",
                self.topic
            ));
        }
        let action = match (&self.function, &self.event) {
            (Some(function), None) => {
                if self.target.is_some() || self.payload.is_some() {
                    return Err("`target` and `payload` are for event triggers".to_owned());
                }
                let ffqn = function
                    .parse()
                    .map_err(|e| format!("function `{function}`: {e}"))?;
                let params = self
                    .params
                    .iter()
                    .map(|p| Source::parse(p))
                    .collect::<Result<_, _>>()?;
                Action::Start { ffqn, params }
            }
            (None, Some(name)) => {
                check_event_name(name).map_err(|e| e.to_string())?;
                if !self.params.is_empty() {
                    return Err("`params` are for triggers that start executions".to_owned());
                }
                let target = self
                    .target
                    .as_deref()
                    .ok_or("an event trigger needs `target`: where the execution id is")?;
                Action::Event {
                    name: name.clone(),
                    target: Source::parse(target)?,
                    payload: Source::parse(self.payload.as_deref().unwrap_or(""))?,
                }
            }
            _ => return Err("exactly one of `function` and `event`".to_owned()),
        };
        Ok(Trigger {
            name: self.name.clone(),
            topic: self.topic.clone(),
            format: self.format,
            action,
            identity: self.id.as_deref().map(Source::parse).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn triggers(text: &str) -> Result<Vec<Trigger>, TriggerSpecError> {
        TriggersFile::parse(text, Path::new("triggers.toml"))
    }

    const START: &str = r#"
[[trigger]]
name = "orders"
topic = "shop.orders"
function = "weir-examples:workflows/hello.greet"
params = ["/customer/name"]
id = "/order_id"

[[trigger]]
name = "raw"
topic = "shop.raw"
function = "weir-examples:workflows/hello.greet"
params = ["$header.who"]

[[trigger]]
name = "approvals"
topic = "shop.approvals"
event = "approved"
target = "$key"
payload = "/by"
"#;

    fn record<'a>(
        topic: &'a str,
        offset: i64,
        key: Option<&'a [u8]>,
        value: &'a [u8],
        headers: &'a [(String, Option<Vec<u8>>)],
    ) -> SourceRecord<'a> {
        SourceRecord {
            topic,
            partition: 2,
            offset,
            key,
            value: Some(value),
            headers,
        }
    }

    #[test]
    fn records_map_to_submissions_and_events_with_derived_identities() {
        let t = triggers(START).expect("valid");
        let now = chrono::Utc::now();
        let order = br#"{"order_id": 42, "customer": {"name": "ann"}}"#;
        let submission = |offset| match t[0]
            .map("ns", &record("shop.orders", offset, None, order, &[]), now)
            .expect("maps")
        {
            Mapped::Submission(s) => s,
            other => panic!("{other:?}"),
        };
        let (a, b) = (submission(7), submission(8));
        assert_eq!(a.params, json!(["ann"]));
        // The identity is the order id: the same order at another offset is the same
        // execution; another namespace or trigger, another.
        assert_eq!(a.execution_id, b.execution_id);
        assert!(a.execution_id.is_top_level());
        assert_eq!(a.metadata["weir.trigger"], "orders");
        let elsewhere = t[0]
            .map("other", &record("shop.orders", 7, None, order, &[]), now)
            .expect("maps");
        assert!(matches!(elsewhere, Mapped::Submission(s) if s.execution_id != a.execution_id));
        // Without an identity field: topic, partition and offset.
        let headers = [("who".to_owned(), Some(b"bob".to_vec()))];
        let by_offset = |offset| match t[1]
            .map(
                "ns",
                &record("shop.raw", offset, None, b"{}", &headers),
                now,
            )
            .expect("maps")
        {
            Mapped::Submission(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(by_offset(1).params, json!(["bob"]));
        assert_eq!(by_offset(1).execution_id, by_offset(1).execution_id);
        assert_ne!(by_offset(1).execution_id, by_offset(2).execution_id);
        // An event for the execution the key names, its id derived like an execution's.
        let target = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let event = t[2]
            .map(
                "ns",
                &record(
                    "shop.approvals",
                    3,
                    Some(target.as_bytes()),
                    br#"{"by": "ann"}"#,
                    &[],
                ),
                now,
            )
            .expect("maps");
        match event {
            Mapped::Event(e) => {
                assert_eq!(e.target.to_string(), target);
                assert_eq!(e.event.name, "approved");
                assert_eq!(e.event.payload, json!("ann"));
                assert!(e.event.event_id.starts_with("trigger-"));
                crate::model::check_event_id(&e.event.event_id).expect("a valid event id");
            }
            other => panic!("{other:?}"),
        }
        // A target that is no execution id is a correlation key; one that breaks the key
        // rules does not map.
        let keyed = |key: &str| {
            t[2].map(
                "ns",
                &record(
                    "shop.approvals",
                    3,
                    Some(key.as_bytes()),
                    br#"{"by": "ann"}"#,
                    &[],
                ),
                now,
            )
        };
        match keyed("payment:order-42").expect("maps") {
            Mapped::KeyedEvent(e) => {
                assert_eq!(e.key, "payment:order-42");
                assert_eq!(e.event.payload, json!("ann"));
                assert_eq!(e.returned_by, None);
            }
            other => panic!("{other:?}"),
        }
        let refused = keyed("schedule:nightly").expect_err("a reserved prefix");
        assert!(refused.to_string().contains("correlation key"), "{refused}");
    }

    #[test]
    fn records_that_do_not_map_say_why() {
        let t = triggers(START).expect("valid");
        let now = chrono::Utc::now();
        type Case<'a> = (&'a Trigger, &'a [u8], Option<&'a [u8]>, &'a str);
        let cases: [Case<'_>; 4] = [
            (&t[0], b"not json", None, "not JSON"),
            (
                &t[0],
                br#"{"order_id": 1}"#,
                None,
                "value `/customer/name` is missing",
            ),
            (&t[1], b"{}", None, "$header.who is missing"),
            (
                &t[2],
                br#"{"by": "x"}"#,
                Some(b"E_nobody"),
                "not an execution id",
            ),
        ];
        for (trigger, value, key, needle) in cases {
            let error = trigger
                .map("ns", &record(&trigger.topic, 5, key, value, &[]), now)
                .expect_err("does not map");
            let text = error.to_string();
            assert!(text.contains(needle), "{text}");
            assert!(text.contains("offset 5"), "{text}");
        }
    }

    #[test]
    fn the_declared_triggers_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/triggers.toml");
        let declared = TriggersFile::read(&path).expect("topology/triggers.toml is valid");
        assert_eq!(declared.len(), 2);
    }

    #[test]
    fn declarations_are_checked() {
        let table = [
            (
                "name = \"Bad\"\ntopic = \"t\"\nfunction = \"a:b/c.d\"",
                "[a-z0-9-]",
            ),
            (
                "name = \"x\"\ntopic = \"weir.submissions\"\nfunction = \"a:b/c.d\"",
                "Weir's own",
            ),
            ("name = \"x\"\ntopic = \"t\"", "exactly one of"),
            (
                "name = \"x\"\ntopic = \"t\"\nfunction = \"nope\"",
                "function `nope`",
            ),
            (
                "name = \"x\"\ntopic = \"t\"\nevent = \"e\"",
                "needs `target`",
            ),
            (
                "name = \"x\"\ntopic = \"t\"\nfunction = \"a:b/c.d\"\nparams = [\"field\"]",
                "JSON pointer",
            ),
            (
                "name = \"x\"\ntopic = \"t\"\nfunction = \"a:b/c.d\"\nretries = 1",
                "unknown field",
            ),
        ];
        for (entry, needle) in table {
            let error = triggers(&format!("[[trigger]]\n{entry}\n")).expect_err("refused");
            assert!(error.to_string().contains(needle), "{entry}: {error}");
        }
        let twice = "[[trigger]]\nname = \"x\"\ntopic = \"t\"\nfunction = \"a:b/c.d\"\n\
                     [[trigger]]\nname = \"y\"\ntopic = \"t\"\nfunction = \"a:b/c.d\"\n";
        assert!(
            triggers(twice)
                .expect_err("refused")
                .to_string()
                .contains("one trigger per topic")
        );
    }
}
