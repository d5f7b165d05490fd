//! Secrets of activities: values an operator gives the worker (`--secret NAME=file:PATH` or
//! `NAME=env:VAR`), that a component names in `secrets = [...]` in `components.toml`, and that
//! only that component's attempts see, as WASI environment variables.
//!
//! Weir never writes a secret's value anywhere: an attempt's result (ok or err value, and an
//! execution error's reason and detail), every line the guest writes to stderr (logged
//! through `tracing`, one event per line) and the URI of a denied HTTP request are redacted
//! before they leave the attempt, each occurrence of a value replaced by `[secret NAME]`. So
//! history, the results topic, the DLQ, logs and traces only ever hold the redacted form. What
//! the guest sends to the hosts it may reach is its business: that is what secrets are for.
//!
//! Three places where a value could slip through in another shape (issue 33 F13): a stderr
//! line longer than 8 KiB is logged in pieces, so each cut keeps back as many bytes as the
//! longest secret less one for the next piece (a value is never logged in two halves); a URI
//! is redacted percent-decoded ([`ComponentSecrets::redact_uri`]), so that `tok%2D123` is
//! caught as `tok-123` is; and a trap's reason is logged only redacted.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use crate::model::ExecutionResult;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "component `{component}` needs the secret `{name}`, which the worker was not given \
         (--secret {name}=file:PATH or --secret {name}=env:VARIABLE)"
    )]
    Missing { component: String, name: String },
    #[error(
        "secret name `{0}` must be an environment variable name: ASCII letters, digits and \
         `_`, not starting with a digit"
    )]
    Name(String),
    #[error(
        "secret `{name}` is empty ({source_text}): an empty value cannot be told apart from none"
    )]
    Empty { name: String, source_text: String },
}

/// Whether `name` can be a secret's name (it becomes an environment variable of the guest).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every secret the operator gave the worker, by name.
#[derive(Clone, Default)]
pub struct Secrets(BTreeMap<String, SecretString>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Secrets {
    /// Adds `name` with `value`; `origin` (e.g. `file /run/secrets/x`) names where it came from
    /// in errors.
    pub fn insert(
        &mut self,
        name: &str,
        value: SecretString,
        origin: &str,
    ) -> Result<(), SecretError> {
        if !valid_name(name) {
            return Err(SecretError::Name(name.to_owned()));
        }
        if value.expose_secret().is_empty() {
            return Err(SecretError::Empty {
                name: name.to_owned(),
                source_text: origin.to_owned(),
            });
        }
        self.0.insert(name.to_owned(), value);
        Ok(())
    }

    /// The secrets `names` of `component`, or which one is missing.
    pub fn for_component(
        &self,
        component: &str,
        names: &[String],
    ) -> Result<ComponentSecrets, SecretError> {
        let values = names
            .iter()
            .map(|name| {
                self.0
                    .get(name)
                    .map(|value| (name.clone(), value.clone()))
                    .ok_or_else(|| SecretError::Missing {
                        component: component.to_owned(),
                        name: name.clone(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ComponentSecrets {
            component: component.to_owned(),
            values,
        })
    }
}

/// One component's secrets: its guests' environment and the redaction of what they produce.
#[derive(Clone, Default)]
pub struct ComponentSecrets {
    component: String,
    values: Vec<(String, SecretString)>,
}

impl std::fmt::Debug for ComponentSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.values.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ComponentSecrets")
            .field("component", &self.component)
            .field("names", &names)
            .finish()
    }
}

impl ComponentSecrets {
    /// The component's name.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// `(name, value)` of each secret, for the guest's environment.
    pub fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose_secret()))
    }

    /// `text` with every occurrence of a secret's value replaced by `[secret NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let mut out = std::borrow::Cow::Borrowed(text);
        for (name, value) in &self.values {
            let value = value.expose_secret();
            if out.contains(value) {
                out = std::borrow::Cow::Owned(out.replace(value, &format!("[secret {name}]")));
            }
        }
        out
    }

    /// A URI's text, percent-decoded, then redacted: a value encoded in any way is caught.
    pub fn redact_uri(&self, uri: &str) -> String {
        let decoded = percent_encoding::percent_decode_str(uri).decode_utf8_lossy();
        self.redact(&decoded).into_owned()
    }

    /// The length in bytes of the longest value (0 without secrets).
    fn longest(&self) -> usize {
        self.values
            .iter()
            .map(|(_, value)| value.expose_secret().len())
            .max()
            .unwrap_or(0)
    }

    /// Redacts every string (and object key) of `result` in place.
    pub fn redact_result(&self, result: &mut ExecutionResult) {
        if self.values.is_empty() {
            return;
        }
        match result {
            ExecutionResult::Ok(value) | ExecutionResult::Err(value) => self.redact_value(value),
            ExecutionResult::ExecutionError(error) => {
                error.reason = self.redact(&error.reason).into_owned();
                if let Some(detail) = &mut error.detail {
                    *detail = self.redact(detail).into_owned();
                }
            }
        }
    }

    fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let std::borrow::Cow::Owned(redacted) = self.redact(s) {
                    *s = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut v) in entries {
                    self.redact_value(&mut v);
                    map.insert(self.redact(&key).into_owned(), v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// The longest line of guest stderr kept before it is logged in pieces.
const MAX_LINE: usize = 8 * 1024;

/// An activity guest's stderr: each line (redacted) is logged as a `tracing` event of target
/// `weir::guest`, in the span of the attempt, instead of interleaving raw bytes on the
/// worker's stderr.
#[derive(Clone)]
pub struct GuestStderr(pub Arc<ComponentSecrets>);

impl wasmtime_wasi::cli::IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for GuestStderr {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineLog {
            secrets: Arc::clone(&self.0),
            line: Vec::new(),
        })
    }
}

struct LineLog {
    secrets: Arc<ComponentSecrets>,
    line: Vec<u8>,
}

impl LineLog {
    /// Takes `buf` in; returns the redacted lines (or pieces of a long line) to log.
    fn push(&mut self, buf: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in buf {
            self.line.push(b);
            if b == b'\n' {
                out.push(self.take_line());
            } else if self.line.len() >= MAX_LINE {
                out.push(self.take_piece());
            }
        }
        out
    }

    /// The whole line held, redacted.
    fn take_line(&mut self) -> String {
        let bytes = std::mem::take(&mut self.line);
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        self.secrets.redact(text).into_owned()
    }

    /// A piece of a line too long to hold whole: the line held, redacted, but its last bytes
    /// (as many as the longest secret less one, at most half the line) stay for the next
    /// piece, where a value they begin ends.
    fn take_piece(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.line).into_owned();
        let redacted = self.secrets.redact(&text);
        let keep = self.secrets.longest().saturating_sub(1).min(MAX_LINE / 2);
        let mut cut = redacted.len().saturating_sub(keep);
        while !redacted.is_char_boundary(cut) {
            cut -= 1;
        }
        self.line = redacted.as_bytes()[cut..].to_vec();
        redacted[..cut].to_owned()
    }

    fn log(&self, text: &str) {
        tracing::info!(target: "weir::guest", component = self.secrets.component(), "{text}");
    }

    fn flush_line(&mut self) {
        if !self.line.is_empty() {
            let text = self.take_line();
            self.log(&text);
        }
    }
}

impl tokio::io::AsyncWrite for LineLog {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        for text in self.push(buf) {
            self.log(&text);
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.flush_line();
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineLog {
    fn drop(&mut self) {
        self.flush_line();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutionError, ExecutionErrorKind};

    fn secrets() -> ComponentSecrets {
        let mut all = Secrets::default();
        all.insert(
            "API_TOKEN",
            SecretString::from("tok-123".to_owned()),
            "test",
        )
        .unwrap();
        all.insert("OTHER", SecretString::from("zzz".to_owned()), "test")
            .unwrap();
        all.for_component("c", &["API_TOKEN".to_owned()]).unwrap()
    }

    #[test]
    fn every_string_of_a_result_is_redacted_and_nothing_else_changes() {
        let s = secrets();
        let mut ok = ExecutionResult::Ok(serde_json::json!({
            "a": "Bearer tok-123", "tok-123": [1, "x tok-123 y tok-123"], "n": 5, "zzz": "zzz"
        }));
        s.redact_result(&mut ok);
        assert_eq!(
            ok,
            ExecutionResult::Ok(serde_json::json!({
                "a": "Bearer [secret API_TOKEN]",
                "[secret API_TOKEN]": [1, "x [secret API_TOKEN] y [secret API_TOKEN]"],
                "n": 5,
                // Another component's secret is not this one's to know.
                "zzz": "zzz"
            }))
        );
        let mut error = ExecutionResult::ExecutionError(
            ExecutionError::new(ExecutionErrorKind::Trap, "failed with tok-123")
                .with_detail("at tok-123"),
        );
        s.redact_result(&mut error);
        let ExecutionResult::ExecutionError(e) = error else {
            panic!("kind changed")
        };
        assert_eq!(e.reason, "failed with [secret API_TOKEN]");
        assert_eq!(e.detail.as_deref(), Some("at [secret API_TOKEN]"));
    }

    /// Issue 33 F13: a line over 8 KiB was cut every 8 KiB and each piece redacted alone, so a
    /// value across a cut was logged in two halves (`tok-1` then `23`).
    #[test]
    fn a_secret_across_the_cut_of_a_long_stderr_line_is_redacted() {
        let s = Arc::new(secrets());
        for before in MAX_LINE - 8..MAX_LINE + 2 {
            let mut log = LineLog {
                secrets: Arc::clone(&s),
                line: Vec::new(),
            };
            let mut text = "a".repeat(before);
            text.push_str("tok-123 and more\n");
            let mut logged = Vec::new();
            // Written in small chunks, as a guest's stdio may be.
            for chunk in text.as_bytes().chunks(100) {
                logged.extend(log.push(chunk));
            }
            let all = logged.concat();
            assert!(
                !all.contains("tok-"),
                "{before}: {:?}",
                &all[all.len() - 40..]
            );
            assert!(!all.contains("123"), "{before}");
            assert!(all.contains("[secret API_TOKEN]"), "{before}");
            assert_eq!(
                all.len(),
                before + "[secret API_TOKEN] and more".len(),
                "{before}: nothing lost or repeated"
            );
        }
    }

    /// Issue 33 F13: a percent-encoded value in a denied request's URI was logged as is.
    #[test]
    fn a_percent_encoded_secret_in_a_uri_is_redacted() {
        let s = secrets();
        let uri = "https://evil.example/collect?t=tok%2D123&u=%74%6f%6b-123";
        let redacted = s.redact_uri(uri);
        assert!(!redacted.contains("tok"), "{redacted}");
        assert_eq!(
            redacted,
            "https://evil.example/collect?t=[secret API_TOKEN]&u=[secret API_TOKEN]"
        );
    }

    #[test]
    fn a_component_gets_only_the_secrets_it_names_and_a_missing_one_is_an_error() {
        let s = secrets();
        let env: Vec<_> = s.env().collect();
        assert_eq!(env, vec![("API_TOKEN", "tok-123")]);
        let mut all = Secrets::default();
        all.insert("A", SecretString::from("1".to_owned()), "test")
            .unwrap();
        let e = all
            .for_component("pay", &["A".to_owned(), "B".to_owned()])
            .unwrap_err();
        assert!(
            matches!(&e, SecretError::Missing { component, name } if component == "pay" && name == "B"),
            "{e}"
        );
        assert!(
            all.insert("1X", SecretString::from("v".to_owned()), "t")
                .is_err()
        );
        assert!(
            all.insert("X-Y", SecretString::from("v".to_owned()), "t")
                .is_err()
        );
        assert!(
            all.insert("X", SecretString::from(String::new()), "t")
                .is_err()
        );
        // Debug shows names, never values.
        assert_eq!(format!("{all:?}"), "{\"A\"}");
        assert!(!format!("{s:?}").contains("tok-123"));
    }
}
