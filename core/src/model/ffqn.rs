//! Fully qualified function names: `namespace:package/interface.function`, with an optional
//! `@version` on the interface: `namespace:package/interface@1.2.0.function`.
//!
//! ```text
//! ffqn       = namespace ":" package "/" interface [ "@" version ] "." function
//! namespace, package, interface, function = identifier
//! identifier = ALPHA *( ALPHA / DIGIT / "-" )   ; no "--", no trailing "-" (WIT kebab-case)
//! version    = 1*( ALPHA / DIGIT / "." / "-" / "+" )   ; semver, may contain dots
//! ```
//!
//! The function name follows the *last* dot, so versions with dots stay unambiguous.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why an FFQN did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid function name `{input}`: {kind}")]
pub struct FfqnError {
    pub input: String,
    pub kind: FfqnErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FfqnErrorKind {
    #[error("expected `namespace:package/interface.function`")]
    Shape,
    #[error("{part} `{value}` is not a kebab-case identifier")]
    InvalidIdentifier { part: &'static str, value: String },
    #[error("version `{0}` is empty or has characters other than letters, digits, `.`, `-`, `+`")]
    InvalidVersion(String),
    #[error("{0} bytes long, the limit is {MAX_FFQN_LEN}")]
    TooLong(usize),
}

/// A function's fully qualified name.
///
/// Stored as one shared string with the positions of its delimiters: FFQNs are cloned into
/// every child request and compared on every replayed event, so a clone is a reference count
/// and a comparison is one string comparison.
#[derive(Clone)]
pub struct Ffqn {
    text: Arc<str>,
    /// Byte offsets of `:`, `/`, `@` (or the last `.` when there is no version) and the last
    /// `.`; `u16` keeps an FFQN at 24 bytes inline (names are at most [`MAX_FFQN_LEN`]).
    colon: u16,
    slash: u16,
    at: u16,
    dot: u16,
}

/// Longest FFQN accepted, in bytes.
pub const MAX_FFQN_LEN: usize = u16::MAX as usize;

impl Ffqn {
    /// Builds an FFQN from its parts, validating each.
    pub fn new(
        namespace: &str,
        package: &str,
        interface: &str,
        version: Option<&str>,
        function: &str,
    ) -> Result<Self, FfqnError> {
        let text = match version {
            Some(v) => format!("{namespace}:{package}/{interface}@{v}.{function}"),
            None => format!("{namespace}:{package}/{interface}.{function}"),
        };
        text.parse()
    }

    pub fn namespace(&self) -> &str {
        &self.text[..usize::from(self.colon)]
    }

    pub fn package(&self) -> &str {
        &self.text[usize::from(self.colon) + 1..usize::from(self.slash)]
    }

    pub fn interface(&self) -> &str {
        &self.text[usize::from(self.slash) + 1..usize::from(self.at)]
    }

    pub fn version(&self) -> Option<&str> {
        (self.at < self.dot).then(|| &self.text[usize::from(self.at) + 1..usize::from(self.dot)])
    }

    pub fn function(&self) -> &str {
        &self.text[usize::from(self.dot) + 1..]
    }

    /// `namespace:package/interface[@version]`, the name of the interface the function is in.
    pub fn ifc_fqn(&self) -> &str {
        &self.text[..usize::from(self.dot)]
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn is_identifier(s: &str) -> bool {
    let mut prev_dash = true; // forbids a leading dash as well as "--"
    for (i, c) in s.chars().enumerate() {
        match c {
            '-' if prev_dash => return false,
            '-' => prev_dash = true,
            c if i == 0 && !c.is_ascii_alphabetic() => return false,
            c if c.is_ascii_alphanumeric() => prev_dash = false,
            _ => return false,
        }
    }
    !s.is_empty() && !prev_dash
}

fn is_version(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
}

impl FromStr for Ffqn {
    type Err = FfqnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |kind| FfqnError {
            input: s.to_string(),
            kind,
        };
        if s.len() > MAX_FFQN_LEN {
            return Err(err(FfqnErrorKind::TooLong(s.len())));
        }
        let colon = s.find(':').ok_or_else(|| err(FfqnErrorKind::Shape))?;
        let slash = s.find('/').ok_or_else(|| err(FfqnErrorKind::Shape))?;
        let dot = s.rfind('.').ok_or_else(|| err(FfqnErrorKind::Shape))?;
        if !(colon < slash && slash < dot) {
            return Err(err(FfqnErrorKind::Shape));
        }
        let at = s[slash..dot].find('@').map_or(dot, |i| slash + i);
        let parts = [
            ("namespace", &s[..colon]),
            ("package", &s[colon + 1..slash]),
            ("interface", &s[slash + 1..at]),
            ("function", &s[dot + 1..]),
        ];
        for (part, value) in parts {
            if !is_identifier(value) {
                return Err(err(FfqnErrorKind::InvalidIdentifier {
                    part,
                    value: value.to_string(),
                }));
            }
        }
        if at < dot && !is_version(&s[at + 1..dot]) {
            return Err(err(FfqnErrorKind::InvalidVersion(
                s[at + 1..dot].to_string(),
            )));
        }
        // All offsets are below `MAX_FFQN_LEN`, checked above.
        let offset = |i: usize| i as u16;
        Ok(Ffqn {
            text: Arc::from(s),
            colon: offset(colon),
            slash: offset(slash),
            at: offset(at),
            dot: offset(dot),
        })
    }
}

impl PartialEq for Ffqn {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Ffqn {}

impl Hash for Ffqn {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl PartialOrd for Ffqn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ffqn {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl fmt::Display for Ffqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Ffqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Ffqn {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Ffqn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        let f: Ffqn = "acme:billing/payments.charge".parse().unwrap();
        assert_eq!(f.namespace(), "acme");
        assert_eq!(f.package(), "billing");
        assert_eq!(f.interface(), "payments");
        assert_eq!(f.version(), None);
        assert_eq!(f.function(), "charge");
        assert_eq!(f.ifc_fqn(), "acme:billing/payments");
        assert_eq!(f.to_string(), "acme:billing/payments.charge");
        assert_eq!(
            Ffqn::new("acme", "billing", "payments", None, "charge").unwrap(),
            f
        );
    }

    #[test]
    fn versioned_interface() {
        let text = "acme:billing/payments@1.2.0-rc.1+b5.refund-all";
        let f: Ffqn = text.parse().unwrap();
        assert_eq!(f.interface(), "payments");
        assert_eq!(f.version(), Some("1.2.0-rc.1+b5"));
        assert_eq!(f.function(), "refund-all");
        assert_eq!(f.ifc_fqn(), "acme:billing/payments@1.2.0-rc.1+b5");
        assert_eq!(f.to_string(), text);
        let built = Ffqn::new(
            "acme",
            "billing",
            "payments",
            Some("1.2.0-rc.1+b5"),
            "refund-all",
        );
        assert_eq!(built.unwrap(), f);
        assert_ne!(f, "acme:billing/payments.refund-all".parse().unwrap());
    }

    #[test]
    fn malformed_names_are_rejected() {
        for bad in [
            "",
            "acme",
            "acme:billing",
            "acme:billing/payments",
            "acme.billing/payments:charge",
        ] {
            assert_eq!(
                bad.parse::<Ffqn>().unwrap_err().kind,
                FfqnErrorKind::Shape,
                "{bad}"
            );
        }
        for (bad, part) in [
            (":billing/payments.charge", "namespace"),
            ("acme:/payments.charge", "package"),
            ("acme:billing/.charge", "interface"),
            ("acme:billing/payments.", "function"),
            ("acme:billing/payments.-charge", "function"),
            ("acme:billing/payments.charge-", "function"),
            ("acme:billing/payments.ch--arge", "function"),
            ("acme:billing/payments.1charge", "function"),
            ("acme:bil ling/payments.charge", "package"),
            ("acme:billing/pay_ments.charge", "interface"),
        ] {
            match bad.parse::<Ffqn>().unwrap_err().kind {
                FfqnErrorKind::InvalidIdentifier { part: p, .. } => assert_eq!(p, part, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(
            "acme:billing/payments@.charge"
                .parse::<Ffqn>()
                .unwrap_err()
                .kind,
            FfqnErrorKind::InvalidVersion(String::new())
        );
        assert_eq!(
            "acme:billing/payments@1 0.charge"
                .parse::<Ffqn>()
                .unwrap_err()
                .kind,
            FfqnErrorKind::InvalidVersion("1 0".into())
        );
    }

    #[test]
    fn overlong_names_are_rejected() {
        let long = format!("a:b/c.{}", "d".repeat(MAX_FFQN_LEN));
        assert_eq!(
            long.parse::<Ffqn>().unwrap_err().kind,
            FfqnErrorKind::TooLong(long.len())
        );
        let longest = format!("a:b/c.{}", "d".repeat(MAX_FFQN_LEN - 6));
        assert_eq!(
            longest.parse::<Ffqn>().unwrap().function().len(),
            MAX_FFQN_LEN - 6
        );
    }

    #[test]
    fn serde_as_string() {
        let f: Ffqn = "a:b/c@2.d".parse().unwrap();
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, "\"a:b/c@2.d\"");
        assert_eq!(serde_json::from_str::<Ffqn>(&json).unwrap(), f);
        assert!(serde_json::from_str::<Ffqn>("\"a:b\"").is_err());
    }
}
