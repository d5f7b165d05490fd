//! Execution ids and delay ids.
//!
//! A child's id is derived from its parent's id, the join set it was submitted into and its
//! position in that join set, so the parent (and the join set a response belongs to) is read
//! off the id alone, and a replay regenerates exactly the same ids. Grammar (join-set-id is
//! defined in [`super::join_set`]):
//!
//! ```text
//! execution-id = "E_" ulid *( "." step )          ; E_01J…  E_01J….g:1_1  E_01J….g:1_1.o:1-x_1
//! delay-id     = "Delay_" ulid *( "." step ) "." step
//!                                                 ; Delay_01J….o:1-sleep_1 (delay of E_01J…)
//! event-req-id = "Event_" ulid *( "." step ) "." step
//!                                                 ; Event_01J….o:1-await-event_1
//! step         = join-set-id "_" index
//! index        = %x31-39 *DIGIT                   ; 1-based position of the request in its
//!                                                 ; join set (children, delays and event
//!                                                 ; requests share it)
//! ulid         = 26 Crockford base-32 characters, canonical (upper case) spelling
//! ```
//!
//! Only canonical spellings parse (upper-case ULID, no leading zeros): an id is a Kafka key
//! hashed by murmur2 and a CQL key, so two spellings of one id would be two executions.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use ulid::Ulid;

use super::join_set::{JoinSetId, JoinSetIdError};

const EXECUTION_PREFIX: &str = "E_";
const DELAY_PREFIX: &str = "Delay_";
const EVENT_REQUEST_PREFIX: &str = "Event_";

/// One level of derivation: the join set a request was submitted into and its 1-based index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Step {
    pub join_set_id: JoinSetId,
    pub index: u64,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.join_set_id, self.index)
    }
}

/// Why an id did not parse. `input` is the whole id as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid id `{input}`: {kind}")]
pub struct ParseIdError {
    pub input: String,
    pub kind: ParseIdErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseIdErrorKind {
    #[error("expected the prefix `{0}`")]
    MissingPrefix(&'static str),
    #[error("`{ulid}` is not a ULID: {reason}")]
    InvalidUlid { ulid: String, reason: String },
    #[error("ULID `{0}` is not in its canonical upper-case spelling")]
    NonCanonicalUlid(String),
    #[error("empty step (two dots in a row or a trailing dot)")]
    EmptyStep,
    #[error("step `{0}` has no `_<index>` suffix")]
    MissingIndex(String),
    #[error("step `{0}` has an index that is not a positive decimal without leading zeros")]
    InvalidIndex(String),
    #[error("step `{step}`: {source}")]
    InvalidJoinSet {
        step: String,
        #[source]
        source: JoinSetIdError,
    },
    #[error("a delay or event request id needs at least one `.<join-set>_<index>` step")]
    MissingDelayStep,
}

/// The id of an execution: top-level (`E_<ulid>`) or derived from its parent.
///
/// The derivation path is shared (`Arc<[Step]>`) because the engine clones child ids into
/// events, outputs and indexes on the replay hot path.
#[derive(Clone, PartialOrd, Ord)]
pub struct ExecutionId {
    root: Ulid,
    path: Arc<[Step]>,
}

impl PartialEq for ExecutionId {
    fn eq(&self, other: &Self) -> bool {
        // Clones share the path; comparing the pointer first skips walking it.
        self.root == other.root
            && (Arc::ptr_eq(&self.path, &other.path) || self.path[..] == other.path[..])
    }
}

impl Eq for ExecutionId {}

impl std::hash::Hash for ExecutionId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // By value, as `eq` compares; the pointer shortcut there does not change equality.
        self.root.hash(state);
        self.path[..].hash(state);
    }
}

impl ExecutionId {
    /// A top-level id.
    pub fn top_level(ulid: Ulid) -> Self {
        ExecutionId {
            root: ulid,
            path: Arc::from(Vec::new()),
        }
    }

    /// The top-level id whose ULID is the first 16 bytes of `digest` (a SHA-256): an id
    /// derived from what it stands for (an idempotency key, a trigger's record, a schedule's
    /// tick), so the same thing always names the same execution.
    pub fn from_digest(digest: &[u8; 32]) -> Self {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        ExecutionId::top_level(Ulid::from_bytes(bytes))
    }

    /// The id of the `index`-th request (1-based) of join set `join_set_id` of this execution.
    pub fn child(&self, join_set_id: &JoinSetId, index: u64) -> ExecutionId {
        let step = Step {
            join_set_id: join_set_id.clone(),
            index,
        };
        // An exact-size iterator: one allocation for the shared path.
        let path = self
            .path
            .iter()
            .cloned()
            .chain(std::iter::once(step))
            .collect();
        ExecutionId {
            root: self.root,
            path,
        }
    }

    /// The id of the `index`-th request (1-based) of join set `join_set_id`, being a delay.
    pub fn delay(&self, join_set_id: &JoinSetId, index: u64) -> DelayId {
        self.request(join_set_id, index)
    }

    /// The id of the `index`-th request (1-based) of join set `join_set_id`, being a wait
    /// for an event.
    pub fn event_request(&self, join_set_id: &JoinSetId, index: u64) -> EventRequestId {
        self.request(join_set_id, index)
    }

    fn request<K: RequestKind>(&self, join_set_id: &JoinSetId, index: u64) -> RequestId<K> {
        RequestId {
            execution_id: self.clone(),
            step: Step {
                join_set_id: join_set_id.clone(),
                index,
            },
            kind: PhantomData,
        }
    }

    /// This id with the top-level ancestor `from` replaced by `to`: the same derivation
    /// under another top-level execution (a reset copies an execution's history under a new
    /// id, [`crate::reset`]). An id under another top-level execution is returned as it is.
    pub fn rebased(&self, from: Ulid, to: Ulid) -> ExecutionId {
        if self.root != from {
            return self.clone();
        }
        ExecutionId {
            root: to,
            path: self.path.clone(),
        }
    }

    /// The ULID of the top-level ancestor (the execution itself when top-level).
    pub fn root(&self) -> Ulid {
        self.root
    }

    /// The derivation steps from the top-level ancestor; empty for a top-level id.
    pub fn path(&self) -> &[Step] {
        &self.path
    }

    pub fn is_top_level(&self) -> bool {
        self.path.is_empty()
    }

    /// The parent's id, or `None` for a top-level id.
    pub fn parent(&self) -> Option<ExecutionId> {
        let (_, rest) = self.path.split_last()?;
        Some(ExecutionId {
            root: self.root,
            path: Arc::from(rest),
        })
    }

    /// The last derivation step (the join set in the parent and the index), or `None` for a
    /// top-level id.
    pub fn step(&self) -> Option<&Step> {
        self.path.last()
    }

    /// The join set of the parent this child was submitted into.
    pub fn join_set_id(&self) -> Option<&JoinSetId> {
        self.step().map(|s| &s.join_set_id)
    }

    /// Whether `self` is a direct child of `parent`; no allocation.
    pub fn is_child_of(&self, parent: &ExecutionId) -> bool {
        self.root == parent.root
            && self.path.len() == parent.path.len() + 1
            && self.path[..parent.path.len()] == parent.path[..]
    }

    /// A stable 64-bit digest of the id's text (FNV-1a). Used as the seed of the execution's
    /// deterministic draws; std's hashers are not stable across Rust releases, this is.
    pub fn stable_hash(&self) -> u64 {
        let mut h = Fnv1a::new();
        fmt::write(&mut h, format_args!("{self}")).expect("hashing cannot fail");
        h.0
    }
}

struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl fmt::Write for Fnv1a {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Ok(())
    }
}

fn write_ulid_and_path(f: &mut fmt::Formatter<'_>, root: Ulid, path: &[Step]) -> fmt::Result {
    let mut buf = [0u8; ulid::ULID_LEN];
    f.write_str(root.array_to_str(&mut buf))?;
    for step in path {
        write!(f, ".{step}")?;
    }
    Ok(())
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXECUTION_PREFIX)?;
        write_ulid_and_path(f, self.root, &self.path)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Parses `<ulid>(.<step>)*`, the part after the prefix.
fn parse_ulid_and_path(input: &str, body: &str) -> Result<(Ulid, Vec<Step>), ParseIdError> {
    let err = |kind| ParseIdError {
        input: input.to_string(),
        kind,
    };
    let mut parts = body.split('.');
    let ulid_str = parts.next().unwrap_or_default();
    let root = Ulid::from_string(ulid_str).map_err(|e| {
        err(ParseIdErrorKind::InvalidUlid {
            ulid: ulid_str.to_string(),
            reason: e.to_string(),
        })
    })?;
    if root.to_string() != ulid_str {
        return Err(err(ParseIdErrorKind::NonCanonicalUlid(
            ulid_str.to_string(),
        )));
    }
    let mut path = Vec::new();
    for part in parts {
        if part.is_empty() {
            return Err(err(ParseIdErrorKind::EmptyStep));
        }
        let (js, index) = part
            .rsplit_once('_')
            .ok_or_else(|| err(ParseIdErrorKind::MissingIndex(part.to_string())))?;
        let index_ok = !index.is_empty()
            && !index.starts_with('0')
            && index.bytes().all(|b| b.is_ascii_digit());
        let index = index
            .parse::<u64>()
            .ok()
            .filter(|_| index_ok)
            .ok_or_else(|| err(ParseIdErrorKind::InvalidIndex(part.to_string())))?;
        let join_set_id = js.parse::<JoinSetId>().map_err(|source| {
            err(ParseIdErrorKind::InvalidJoinSet {
                step: part.to_string(),
                source,
            })
        })?;
        path.push(Step { join_set_id, index });
    }
    Ok((root, path))
}

impl FromStr for ExecutionId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let body = s
            .strip_prefix(EXECUTION_PREFIX)
            .ok_or_else(|| ParseIdError {
                input: s.to_string(),
                kind: ParseIdErrorKind::MissingPrefix(EXECUTION_PREFIX),
            })?;
        let (root, path) = parse_ulid_and_path(s, body)?;
        Ok(ExecutionId {
            root,
            path: path.into(),
        })
    }
}

/// What a [`RequestId`] names: a delay or an event request. Only the prefix differs.
pub trait RequestKind: Clone + PartialEq + Eq + std::hash::Hash + PartialOrd + Ord {
    const PREFIX: &'static str;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DelayKind;

impl RequestKind for DelayKind {
    const PREFIX: &'static str = DELAY_PREFIX;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventRequestKind;

impl RequestKind for EventRequestKind {
    const PREFIX: &'static str = EVENT_REQUEST_PREFIX;
}

/// The id of a request that is not a child execution: the owning execution plus the step
/// (join set, index) of the request, spelled with the kind's prefix.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId<K: RequestKind> {
    execution_id: ExecutionId,
    step: Step,
    kind: PhantomData<K>,
}

/// The id of a delay: `Delay_<ulid>.o:1-sleep_1`.
pub type DelayId = RequestId<DelayKind>;

/// The id of a wait for an event: `Event_<ulid>.o:1-await-event_1`.
pub type EventRequestId = RequestId<EventRequestKind>;

impl<K: RequestKind> RequestId<K> {
    /// This id with its execution [rebased](ExecutionId::rebased).
    pub fn rebased(&self, from: Ulid, to: Ulid) -> Self {
        RequestId {
            execution_id: self.execution_id.rebased(from, to),
            step: self.step.clone(),
            kind: PhantomData,
        }
    }

    /// The execution that made the request.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }

    pub fn join_set_id(&self) -> &JoinSetId {
        &self.step.join_set_id
    }

    pub fn index(&self) -> u64 {
        self.step.index
    }

    pub fn step(&self) -> &Step {
        &self.step
    }
}

impl<K: RequestKind> fmt::Display for RequestId<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(K::PREFIX)?;
        write_ulid_and_path(f, self.execution_id.root, &self.execution_id.path)?;
        write!(f, ".{}", self.step)
    }
}

impl<K: RequestKind> fmt::Debug for RequestId<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<K: RequestKind> FromStr for RequestId<K> {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let body = s.strip_prefix(K::PREFIX).ok_or_else(|| ParseIdError {
            input: s.to_string(),
            kind: ParseIdErrorKind::MissingPrefix(K::PREFIX),
        })?;
        let (root, mut path) = parse_ulid_and_path(s, body)?;
        let step = path.pop().ok_or_else(|| ParseIdError {
            input: s.to_string(),
            kind: ParseIdErrorKind::MissingDelayStep,
        })?;
        Ok(RequestId {
            execution_id: ExecutionId {
                root,
                path: path.into(),
            },
            step,
            kind: PhantomData,
        })
    }
}

impl<K: RequestKind> Serialize for RequestId<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de, K: RequestKind> Deserialize<'de> for RequestId<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

macro_rules! serde_via_string {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_via_string!(ExecutionId);

#[cfg(test)]
mod tests {
    use super::*;

    const ULID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    fn top() -> ExecutionId {
        format!("E_{ULID}").parse().unwrap()
    }

    #[test]
    fn top_level_round_trip() {
        let id = top();
        assert!(id.is_top_level());
        assert_eq!(id.to_string(), format!("E_{ULID}"));
        assert_eq!(id.root().to_string(), ULID);
        assert_eq!(id.parent(), None);
        assert_eq!(id.join_set_id(), None);
        assert_eq!(ExecutionId::top_level(id.root()), id);
    }

    #[test]
    fn children_and_grandchildren_are_derived_and_recovered() {
        let parent = top();
        let g1 = JoinSetId::generated(1).unwrap();
        let child = parent.child(&g1, 1);
        assert_eq!(child.to_string(), format!("E_{ULID}.g:1_1"));
        let charge = JoinSetId::one_off(2, "charge").unwrap();
        assert_eq!(
            parent.child(&charge, 1).to_string(),
            format!("E_{ULID}.o:2-charge_1")
        );
        let x = JoinSetId::one_off(1, "x").unwrap();
        let grandchild = child.child(&x, 1);
        assert_eq!(grandchild.to_string(), format!("E_{ULID}.g:1_1.o:1-x_1"));

        let parsed: ExecutionId = grandchild.to_string().parse().unwrap();
        assert_eq!(parsed, grandchild);
        assert_eq!(parsed.parent(), Some(child.clone()));
        assert_eq!(parsed.join_set_id(), Some(&x));
        assert_eq!(parsed.step().unwrap().index, 1);
        assert!(parsed.is_child_of(&child));
        assert!(!parsed.is_child_of(&parent));
        assert!(child.is_child_of(&parent));
        assert_eq!(child.parent(), Some(parent.clone()));
        assert_eq!(child.join_set_id(), Some(&g1));

        let named = parent.child(&JoinSetId::named("batch").unwrap(), 12);
        assert_eq!(named.to_string(), format!("E_{ULID}.n:batch_12"));
        assert_eq!(named.to_string().parse::<ExecutionId>().unwrap(), named);
    }

    #[test]
    fn delay_ids_round_trip_and_name_their_execution() {
        let sleep = JoinSetId::one_off(1, "sleep").unwrap();
        let delay = top().delay(&sleep, 1);
        assert_eq!(delay.to_string(), format!("Delay_{ULID}.o:1-sleep_1"));
        let parsed: DelayId = delay.to_string().parse().unwrap();
        assert_eq!(parsed, delay);
        assert_eq!(parsed.execution_id(), &top());
        assert_eq!(parsed.join_set_id(), &sleep);
        assert_eq!(parsed.index(), 1);

        let child = top().child(&JoinSetId::generated(1).unwrap(), 1);
        let nested = child.delay(&JoinSetId::generated(3).unwrap(), 2);
        assert_eq!(nested.to_string(), format!("Delay_{ULID}.g:1_1.g:3_2"));
        let parsed: DelayId = nested.to_string().parse().unwrap();
        assert_eq!(parsed.execution_id(), &child);
    }

    fn kind_of(s: &str) -> ParseIdErrorKind {
        s.parse::<ExecutionId>().unwrap_err().kind
    }

    #[test]
    fn malformed_execution_ids_are_rejected() {
        assert_eq!(
            kind_of(ULID),
            ParseIdErrorKind::MissingPrefix(EXECUTION_PREFIX)
        );
        assert!(matches!(
            kind_of("E_notaulid"),
            ParseIdErrorKind::InvalidUlid { .. }
        ));
        assert!(matches!(
            kind_of("E_"),
            ParseIdErrorKind::InvalidUlid { .. }
        ));
        assert_eq!(
            kind_of(&format!("E_{}", ULID.to_lowercase())),
            ParseIdErrorKind::NonCanonicalUlid(ULID.to_lowercase())
        );
        assert_eq!(
            kind_of(&format!("E_{ULID}.g:1_1.")),
            ParseIdErrorKind::EmptyStep
        );
        assert_eq!(
            kind_of(&format!("E_{ULID}..g:1_1")),
            ParseIdErrorKind::EmptyStep
        );
        assert_eq!(
            kind_of(&format!("E_{ULID}.g:1")),
            ParseIdErrorKind::MissingIndex("g:1".into())
        );
        for bad in ["g:1_0", "g:1_01", "g:1_", "g:1_x", "g:1_-1"] {
            assert_eq!(
                kind_of(&format!("E_{ULID}.{bad}")),
                ParseIdErrorKind::InvalidIndex(bad.into()),
                "{bad}"
            );
        }
        assert!(matches!(
            kind_of(&format!("E_{ULID}.q:1_1")),
            ParseIdErrorKind::InvalidJoinSet {
                source: JoinSetIdError::UnknownKind(_),
                ..
            }
        ));
        let err = format!("E_{ULID}.g:x_1")
            .parse::<ExecutionId>()
            .unwrap_err();
        assert!(err.to_string().contains("g:x_1"), "{err}");
        // A delay id is not an execution id and vice versa.
        assert_eq!(
            kind_of(&format!("Delay_{ULID}.o:1-sleep_1")),
            ParseIdErrorKind::MissingPrefix(EXECUTION_PREFIX)
        );
        assert_eq!(
            format!("E_{ULID}.o:1-sleep_1")
                .parse::<DelayId>()
                .unwrap_err()
                .kind,
            ParseIdErrorKind::MissingPrefix(DELAY_PREFIX)
        );
        assert_eq!(
            format!("Delay_{ULID}").parse::<DelayId>().unwrap_err().kind,
            ParseIdErrorKind::MissingDelayStep
        );
        // An event request id is neither, though it has the same shape.
        let event = top().event_request(&JoinSetId::generated(1).unwrap(), 2);
        assert_eq!(event.to_string(), format!("Event_{ULID}.g:1_2"));
        assert_eq!(event.to_string().parse::<EventRequestId>().unwrap(), event);
        assert_eq!(
            event.to_string().parse::<DelayId>().unwrap_err().kind,
            ParseIdErrorKind::MissingPrefix(DELAY_PREFIX)
        );
    }

    #[test]
    fn serde_as_strings() {
        let child = top().child(&JoinSetId::generated(2).unwrap(), 3);
        let json = serde_json::to_string(&child).unwrap();
        assert_eq!(json, format!("\"E_{ULID}.g:2_3\""));
        assert_eq!(serde_json::from_str::<ExecutionId>(&json).unwrap(), child);
        let delay = child.delay(&JoinSetId::generated(1).unwrap(), 1);
        let json = serde_json::to_string(&delay).unwrap();
        assert_eq!(serde_json::from_str::<DelayId>(&json).unwrap(), delay);
        assert!(serde_json::from_str::<ExecutionId>("\"E_bad\"").is_err());
    }

    #[test]
    fn stable_hash_differs_between_parent_and_child() {
        let parent = top();
        let child = parent.child(&JoinSetId::generated(1).unwrap(), 1);
        assert_ne!(parent.stable_hash(), child.stable_hash());
        assert_eq!(parent.stable_hash(), top().stable_hash());
    }
}
