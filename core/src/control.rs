//! Fleet controls: switches an operator sets for the whole deployment (`weir route pause`), kept
//! on the compacted topic `weir.control` (one partition), which every worker reads whole and
//! follows (`docs/design/pause.md#routes`).
//!
//! A record's key names what it controls (`route:<name>`); its value is the switch's state
//! ([`RoutePause`]); a tombstone (no value) turns it off (the route is resumed). Compaction
//! keeps the last record of each key, so the topic stays as small as the number of switches
//! set. [`Controls::apply`] folds records into what they say, in log order: the one rule the
//! workers, the command line and the simulation read them by.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

/// The prefix of a route's key.
pub const ROUTE_KEY_PREFIX: &str = "route:";

/// A paused activity route: no attempt of its requests starts, and its requests wait in
/// Kafka, until it is resumed.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutePause {
    /// The route's name, as the topology declares it (`topology/routes.toml`).
    pub route: String,
    /// Why, for the operators.
    pub reason: String,
    pub paused_at: DateTime<Utc>,
}

/// What a control record's key names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControlKey {
    Route(String),
}

/// A key of `weir.control` that names nothing Weir controls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a key of weir.control (`route:<name>`)")]
pub struct UnknownControlKey(pub String);

impl ControlKey {
    pub fn parse(key: &str) -> Result<Self, UnknownControlKey> {
        match key.strip_prefix(ROUTE_KEY_PREFIX) {
            Some(route) if !route.is_empty() => Ok(ControlKey::Route(route.to_owned())),
            _ => Err(UnknownControlKey(key.to_owned())),
        }
    }
}

impl std::fmt::Display for ControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlKey::Route(route) => write!(f, "{ROUTE_KEY_PREFIX}{route}"),
        }
    }
}

/// What `weir.control` says, folded in log order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Controls {
    routes: BTreeMap<String, RoutePause>,
}

impl Controls {
    /// Applies one record: `value` is the pause (`None`: a tombstone, resumed). A pause whose
    /// route is not its key's is taken by its key (the key is what compaction keeps).
    pub fn apply(&mut self, key: &ControlKey, value: Option<RoutePause>) {
        match key {
            ControlKey::Route(route) => match value {
                Some(pause) => {
                    self.routes.insert(
                        route.clone(),
                        RoutePause {
                            route: route.clone(),
                            ..pause
                        },
                    );
                }
                None => {
                    self.routes.remove(route);
                }
            },
        }
    }

    /// The paused routes, by name.
    pub fn paused_routes(&self) -> impl Iterator<Item = &RoutePause> {
        self.routes.values()
    }

    pub fn is_route_paused(&self, route: &str) -> bool {
        self.routes.contains_key(route)
    }

    /// The names of the paused routes.
    pub fn paused_route_names(&self) -> BTreeSet<String> {
        self.routes.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(route: &str, reason: &str) -> RoutePause {
        RoutePause {
            route: route.to_owned(),
            reason: reason.to_owned(),
            paused_at: DateTime::from_timestamp(1_800_000_000, 0).expect("a time"),
        }
    }

    #[test]
    fn the_last_record_of_a_key_says_whether_its_route_is_paused() {
        let mut controls = Controls::default();
        let compute = ControlKey::parse("route:compute").expect("a route key");
        let tax = ControlKey::parse("route:tax").expect("a route key");
        controls.apply(&compute, Some(pause("compute", "down")));
        controls.apply(&tax, Some(pause("other", "the key wins")));
        assert!(controls.is_route_paused("compute") && controls.is_route_paused("tax"));
        assert_eq!(
            controls
                .paused_routes()
                .map(|p| p.route.as_str())
                .collect::<Vec<_>>(),
            ["compute", "tax"]
        );
        controls.apply(&compute, None);
        assert!(!controls.is_route_paused("compute"));
        assert_eq!(
            controls.paused_route_names(),
            BTreeSet::from(["tax".to_owned()])
        );
        assert_eq!(tax.to_string(), "route:tax");
    }

    #[test]
    fn a_key_that_names_nothing_is_refused() {
        for key in ["compute", "route:", "function:x"] {
            assert_eq!(
                ControlKey::parse(key),
                Err(UnknownControlKey(key.to_owned()))
            );
        }
    }
}
