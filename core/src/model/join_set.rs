//! Join set ids: `<kind>:<name>`, e.g. `o:2-charge`, `g:1`, `n:payments`.
//!
//! Grammar (the characters `.`, `:` and `_` are delimiters of the execution id grammar and so
//! never appear inside a name):
//!
//! ```text
//! join-set-id = kind ":" name
//! kind        = "o" / "g" / "n"            ; one-off, generated, named
//! o-name      = counter "-" label          ; counter: the join set's creation number
//! g-name      = counter
//! n-name      = label                      ; chosen by the workflow
//! counter     = %x31-39 *DIGIT             ; decimal, no leading zero
//! label       = 1*( ALPHA / DIGIT / "-" )
//! ```
//!
//! A name is at most [`MAX_NAME_LEN`] characters long.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest join set name accepted. Ids are Kafka keys and CQL partition keys; bounding every
/// segment keeps a deep child id within a few hundred bytes.
pub const MAX_NAME_LEN: usize = 64;

/// How a join set came to be; decides the shape of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JoinSetKind {
    /// Created implicitly by a direct call or `sleep`; holds exactly one request.
    OneOff,
    /// Created by the workflow without a name; numbered by creation order.
    Generated,
    /// Created by the workflow with a name of its choice; a name is usable once.
    Named,
}

impl JoinSetKind {
    /// The one-letter tag used in ids.
    pub const fn tag(self) -> char {
        match self {
            JoinSetKind::OneOff => 'o',
            JoinSetKind::Generated => 'g',
            JoinSetKind::Named => 'n',
        }
    }

    fn from_tag(tag: &str) -> Option<Self> {
        match tag {
            "o" => Some(JoinSetKind::OneOff),
            "g" => Some(JoinSetKind::Generated),
            "n" => Some(JoinSetKind::Named),
            _ => None,
        }
    }
}

/// Why a join set id or name was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinSetIdError {
    #[error("join set id `{0}` has no `<kind>:` prefix")]
    MissingKind(String),
    #[error("join set id `{0}` has an unknown kind (expected `o`, `g` or `n`)")]
    UnknownKind(String),
    #[error("join set name is empty")]
    EmptyName,
    #[error("join set name `{name}` is {len} characters long, the limit is {MAX_NAME_LEN}")]
    NameTooLong { name: String, len: usize },
    #[error(
        "join set name `{name}` contains `{ch}`; only ASCII letters, digits and `-` are allowed"
    )]
    InvalidChar { name: String, ch: char },
    #[error("generated join set name `{0}` must be a decimal counter without leading zeros")]
    InvalidGenerated(String),
    #[error("one-off join set name `{0}` must be `<counter>-<label>`")]
    InvalidOneOff(String),
}

/// The id of a join set, unique within its execution.
///
/// The name is shared (`Arc<str>`): join set ids are copied into every child id, delay id and
/// history event of the set, and replay clones them on the hot path.
#[derive(Clone, PartialOrd, Ord)]
pub struct JoinSetId {
    kind: JoinSetKind,
    name: Arc<str>,
}

impl PartialEq for JoinSetId {
    fn eq(&self, other: &Self) -> bool {
        // Clones share the name; comparing the pointer first skips the string comparison.
        self.kind == other.kind && (Arc::ptr_eq(&self.name, &other.name) || self.name == other.name)
    }
}

impl Eq for JoinSetId {}

impl std::hash::Hash for JoinSetId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // By value, as `eq` compares; the pointer shortcut there does not change equality.
        self.kind.hash(state);
        self.name.hash(state);
    }
}

impl JoinSetId {
    /// A join set id of the given kind; the name is validated against the kind's grammar.
    pub fn new(kind: JoinSetKind, name: &str) -> Result<Self, JoinSetIdError> {
        validate_name(kind, name)?;
        Ok(JoinSetId {
            kind,
            name: Arc::from(name),
        })
    }

    /// `o:<counter>-<label>`, the join set of a direct call (label = function name) or of
    /// `sleep` (label = `sleep`).
    pub fn one_off(counter: u64, label: &str) -> Result<Self, JoinSetIdError> {
        Self::new(JoinSetKind::OneOff, &format!("{counter}-{label}"))
    }

    /// `g:<counter>`.
    pub fn generated(counter: u64) -> Result<Self, JoinSetIdError> {
        Self::new(JoinSetKind::Generated, &counter.to_string())
    }

    /// `n:<name>`; the name is the workflow's choice and is validated.
    pub fn named(name: &str) -> Result<Self, JoinSetIdError> {
        Self::new(JoinSetKind::Named, name)
    }

    pub fn kind(&self) -> JoinSetKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Checks `name` against the grammar of `kind` (see the module doc).
pub fn validate_name(kind: JoinSetKind, name: &str) -> Result<(), JoinSetIdError> {
    if name.is_empty() {
        return Err(JoinSetIdError::EmptyName);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(JoinSetIdError::NameTooLong {
            name: name.to_string(),
            len: name.len(),
        });
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(JoinSetIdError::InvalidChar {
            name: name.to_string(),
            ch,
        });
    }
    match kind {
        JoinSetKind::Named => Ok(()),
        JoinSetKind::Generated if is_counter(name) => Ok(()),
        JoinSetKind::Generated => Err(JoinSetIdError::InvalidGenerated(name.to_string())),
        JoinSetKind::OneOff => match name.split_once('-') {
            Some((counter, label)) if is_counter(counter) && !label.is_empty() => Ok(()),
            _ => Err(JoinSetIdError::InvalidOneOff(name.to_string())),
        },
    }
}

/// Decimal without a leading zero, so that every counter has exactly one spelling (ids are
/// compared and hashed as strings by Kafka and the store).
fn is_counter(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit())
}

impl fmt::Display for JoinSetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.tag(), self.name)
    }
}

impl fmt::Debug for JoinSetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for JoinSetId {
    type Err = JoinSetIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (tag, name) = s
            .split_once(':')
            .ok_or_else(|| JoinSetIdError::MissingKind(s.to_string()))?;
        let kind =
            JoinSetKind::from_tag(tag).ok_or_else(|| JoinSetIdError::UnknownKind(s.to_string()))?;
        JoinSetId::new(kind, name)
    }
}

impl Serialize for JoinSetId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JoinSetId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_display_and_parse() {
        for (id, kind, name) in [
            ("o:2-charge", JoinSetKind::OneOff, "2-charge"),
            ("o:1-sleep", JoinSetKind::OneOff, "1-sleep"),
            ("g:17", JoinSetKind::Generated, "17"),
            ("n:payments-2024", JoinSetKind::Named, "payments-2024"),
        ] {
            let parsed: JoinSetId = id.parse().unwrap();
            assert_eq!(parsed.kind(), kind);
            assert_eq!(parsed.name(), name);
            assert_eq!(parsed.to_string(), id);
        }
        assert_eq!(JoinSetId::one_off(3, "x").unwrap().to_string(), "o:3-x");
        assert_eq!(JoinSetId::generated(4).unwrap().to_string(), "g:4");
        assert_eq!(JoinSetId::named("a").unwrap().to_string(), "n:a");
    }

    #[test]
    fn invalid_names_are_rejected() {
        assert_eq!(JoinSetId::named(""), Err(JoinSetIdError::EmptyName));
        assert!(matches!(
            JoinSetId::named("a.b"),
            Err(JoinSetIdError::InvalidChar { ch: '.', .. })
        ));
        assert!(matches!(
            JoinSetId::named("a_b"),
            Err(JoinSetIdError::InvalidChar { ch: '_', .. })
        ));
        assert!(matches!(
            JoinSetId::named("a:b"),
            Err(JoinSetIdError::InvalidChar { ch: ':', .. })
        ));
        assert!(matches!(
            JoinSetId::named("né"),
            Err(JoinSetIdError::InvalidChar { ch: 'é', .. })
        ));
        assert!(matches!(
            JoinSetId::named(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(JoinSetIdError::NameTooLong { len: 65, .. })
        ));
        assert!(JoinSetId::named(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(matches!(
            "g:01".parse::<JoinSetId>(),
            Err(JoinSetIdError::InvalidGenerated(_))
        ));
        assert!(matches!(
            "g:x".parse::<JoinSetId>(),
            Err(JoinSetIdError::InvalidGenerated(_))
        ));
        assert!(matches!(
            "o:charge".parse::<JoinSetId>(),
            Err(JoinSetIdError::InvalidOneOff(_))
        ));
        assert!(matches!(
            "o:1-".parse::<JoinSetId>(),
            Err(JoinSetIdError::InvalidOneOff(_))
        ));
        assert!(matches!(
            "x:1".parse::<JoinSetId>(),
            Err(JoinSetIdError::UnknownKind(_))
        ));
        assert!(matches!(
            "g1".parse::<JoinSetId>(),
            Err(JoinSetIdError::MissingKind(_))
        ));
    }

    #[test]
    fn serde_as_string() {
        let id = JoinSetId::named("abc").unwrap();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"n:abc\"");
        assert_eq!(serde_json::from_str::<JoinSetId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<JoinSetId>("\"n:a.b\"").is_err());
    }
}
