//! The declarative description of a deployment, read from the `topology/` folder: the Kafka
//! topics (`topics.toml`) and the routes from activity interfaces to their request topics
//! (`routes.toml`). Pure configuration: loading and validation here, creation of the topics in
//! [`crate::kafka::admin`], of the CQL schema in [`crate::store::schema`]. The recurring
//! schedules (`schedules.toml`) are read by [`schedules`].
//!
//! A route may limit the rate of its activities' attempts (`rate`, [`RouteRate`]): the limit
//! is its request topic's — every interface routed to the topic shares it — and is enforced by
//! each activity worker process (`weir_core::activity::rate`). A topology loads only if every
//! limit is one ([`weir_core::activity::RateLimit::validate`]), is on a topic Weir serves, and
//! the routes of a topic that give one give the same ([`RouteRateError`]).

pub mod schedules;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use weir_core::activity::{RateLimit, RateLimitError};

/// What a topic is used for: the core's, one table with the records' addresses.
pub use weir_core::wire::TopicRole;

/// A topic as it must exist in Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub role: TopicRole,
    pub partitions: i32,
    pub replication: i32,
    /// Topic-level configs that `apply` sets on creation and checks afterwards.
    pub configs: BTreeMap<String, String>,
    /// Part of the co-partitioned group (submissions, responses, history).
    pub co_partitioned: bool,
}

/// Where the requests of the activities of one interface go.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// `namespace:package/interface`, with `@version` when the interface is versioned.
    pub interface: String,
    pub topic: String,
    /// Served by a Kafka client outside Weir rather than the built-in activity worker.
    #[serde(default)]
    pub external: bool,
    /// External routes: the consumer group the service reads the topic with (namespaced like
    /// the topics). Weir's activity worker then answers `timed-out` at a request's deadline
    /// only if that group has not committed past it; without it, at every deadline (the parent
    /// ignores an answer after the first).
    #[serde(default)]
    pub service_group: Option<String>,
    /// External routes: the service is told of a cancelled activity with an `ActivityCancel`
    /// record on the route's topic (`weir.kind = cancel`, keyed by the activity, after its
    /// request). Off by default: a service written before this reads requests only. Weir's
    /// own routes always are.
    #[serde(default)]
    pub cancel_notices: bool,
    /// Routes Weir serves: the rate limit of the route's topic (shared by every interface
    /// routed to it), enforced by each activity worker process.
    #[serde(default)]
    pub rate: Option<RouteRate>,
}

/// A route's rate limit, `rate = { per_second = 50.0, burst = 10 }`: each activity worker
/// process starts at most `burst` attempts of the topic at once and `per_second` a second on
/// average (a token bucket; retries are attempts too).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRate {
    /// Attempts a second, at least one a day (`0.5`, `50`, …).
    pub per_second: f64,
    /// Attempts that may start at once after a quiet spell (1 if not given).
    #[serde(default = "RouteRate::default_burst")]
    pub burst: u32,
}

impl RouteRate {
    fn default_burst() -> u32 {
        1
    }

    /// The limit the activity core enforces.
    pub fn limit(&self) -> RateLimit {
        RateLimit {
            per_second: self.per_second,
            burst: self.burst,
        }
    }
}

impl fmt::Display for RouteRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{ per_second = {}, burst = {} }}",
            self.per_second, self.burst
        )
    }
}

/// Why a route's `rate` cannot be (the topology does not load).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouteRateError {
    #[error("route of `{interface}` (topic `{topic}`): rate {rate}: {error}")]
    Invalid {
        interface: String,
        topic: String,
        rate: RouteRate,
        error: RateLimitError,
    },
    #[error(
        "route of `{interface}` (topic `{topic}`) is external: Weir's activity workers run none \
         of its requests, so they cannot limit their rate (limit the service that serves them)"
    )]
    External { interface: String, topic: String },
    #[error(
        "topic `{topic}` has two rate limits: the route of `{first}` gives {first_rate}, the \
         route of `{second}` {second_rate}; the interfaces routed to a topic share its one \
         limit (give it once, or the same on each)"
    )]
    Conflict {
        topic: String,
        first: String,
        first_rate: RouteRate,
        second: String,
        second_rate: RouteRate,
    },
}

impl Route {
    /// Who serves it, as the wire table reads it ([`weir_core::wire::RouteService`]).
    pub fn service(&self) -> weir_core::wire::RouteService {
        weir_core::wire::RouteService {
            external: self.external,
            cancel_notices: self.cancel_notices,
        }
    }
}

/// The whole topology of a deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    pub topics: Vec<TopicSpec>,
    pub routes: Vec<Route>,
    /// The namespace every topic name is prefixed with ([`Topology::with_namespace`]; empty:
    /// none).
    pub namespace: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid topology file: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("invalid topology: {0}")]
    Invalid(String),
    #[error("invalid topology: {0}")]
    Rate(#[from] RouteRateError),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicsFile {
    defaults: TopicDefaults,
    #[serde(rename = "topic")]
    topics: Vec<TopicEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicDefaults {
    partitions: i32,
    replication: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicEntry {
    name: String,
    role: TopicRole,
    partitions: Option<i32>,
    replication: Option<i32>,
    #[serde(default)]
    co_partitioned: bool,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RoutesFile {
    #[serde(rename = "route", default)]
    routes: Vec<Route>,
}

impl Topology {
    /// Reads `topics.toml` and `routes.toml` from `dir` and validates them together.
    pub fn load(dir: &Path) -> Result<Self, TopologyError> {
        let topics: TopicsFile = read_toml(&dir.join("topics.toml"))?;
        let routes_path = dir.join("routes.toml");
        let routes: RoutesFile = if routes_path.exists() {
            read_toml(&routes_path)?
        } else {
            RoutesFile::default()
        };
        Self::from_parts(topics, routes)
    }

    fn from_parts(file: TopicsFile, routes: RoutesFile) -> Result<Self, TopologyError> {
        let defaults = file.defaults;
        let mut topics: Vec<TopicSpec> = file
            .topics
            .into_iter()
            .map(|t| TopicSpec {
                name: t.name,
                role: t.role,
                partitions: t.partitions.unwrap_or(defaults.partitions),
                replication: t.replication.unwrap_or(defaults.replication),
                configs: t.configs,
                co_partitioned: t.co_partitioned,
            })
            .collect();
        // Every route's topic is a topic of the deployment; routes may share one topic.
        for route in &routes.routes {
            if !topics.iter().any(|t| t.name == route.topic) {
                topics.push(TopicSpec {
                    name: route.topic.clone(),
                    role: TopicRole::Activity,
                    partitions: defaults.partitions,
                    replication: defaults.replication,
                    configs: BTreeMap::new(),
                    co_partitioned: false,
                });
            }
        }
        let topology = Topology {
            topics,
            routes: routes.routes,
            namespace: String::new(),
        };
        topology.validate()?;
        Ok(topology)
    }

    fn validate(&self) -> Result<(), TopologyError> {
        let invalid = |msg: String| Err(TopologyError::Invalid(msg));
        let mut names = HashSet::new();
        for topic in &self.topics {
            validate_topic_name(&topic.name).map_err(TopologyError::Invalid)?;
            if !names.insert(topic.name.as_str()) {
                return invalid(format!("topic `{}` is declared twice", topic.name));
            }
            if topic.partitions < 1 || topic.replication < 1 {
                return invalid(format!(
                    "topic `{}` needs at least one partition and one replica (has {} and {})",
                    topic.name, topic.partitions, topic.replication
                ));
            }
        }
        for role in TopicRole::REQUIRED {
            let count = self.topics.iter().filter(|t| t.role == role).count();
            if count != 1 {
                return invalid(format!(
                    "exactly one topic must have role {role:?}, found {count}"
                ));
            }
        }
        let co: Vec<&TopicSpec> = self.topics.iter().filter(|t| t.co_partitioned).collect();
        for role in [
            TopicRole::Submissions,
            TopicRole::Responses,
            TopicRole::Events,
            TopicRole::History,
            TopicRole::State,
        ] {
            if !co.iter().any(|t| t.role == role) {
                return invalid(format!(
                    "the {role:?} topic must be marked co_partitioned = true"
                ));
            }
        }
        if let Some(first) = co.first()
            && let Some(other) = co.iter().find(|t| t.partitions != first.partitions)
        {
            return invalid(format!(
                "co-partitioned topics must have the same partition count: `{}` has {}, `{}` has {}",
                first.name, first.partitions, other.name, other.partitions
            ));
        }
        let mut interfaces = HashSet::new();
        for route in &self.routes {
            if !interfaces.insert(route.interface.as_str()) {
                return invalid(format!("interface `{}` is routed twice", route.interface));
            }
            if !route.interface.contains(':') || !route.interface.contains('/') {
                return invalid(format!(
                    "route interface `{}` must look like `namespace:package/interface`",
                    route.interface
                ));
            }
            if route.cancel_notices && !route.external {
                return invalid(format!(
                    "route of `{}`: `cancel_notices` is for external routes (Weir's own activity worker always hears of a cancellation)",
                    route.interface
                ));
            }
            if route.service_group.is_some() && !route.external {
                return invalid(format!(
                    "route of `{}`: only an external route names its service's consumer group",
                    route.interface
                ));
            }
            if let Some(other) = self
                .routes
                .iter()
                .find(|r| r.topic == route.topic && r.external != route.external)
            {
                return invalid(format!(
                    "topic `{}` has the external route `{}` and the route `{}` served by Weir: a topic is served by one or the other",
                    route.topic,
                    if route.external {
                        &route.interface
                    } else {
                        &other.interface
                    },
                    if route.external {
                        &other.interface
                    } else {
                        &route.interface
                    },
                ));
            }
        }
        self.validate_rates()?;
        Ok(())
    }

    /// Each `rate` is a limit, on a route Weir serves, the same as any other of its topic.
    fn validate_rates(&self) -> Result<(), RouteRateError> {
        let mut by_topic: BTreeMap<&str, &Route> = BTreeMap::new();
        for route in &self.routes {
            let Some(rate) = route.rate else {
                continue;
            };
            if route.external {
                return Err(RouteRateError::External {
                    interface: route.interface.clone(),
                    topic: route.topic.clone(),
                });
            }
            rate.limit()
                .validate()
                .map_err(|error| RouteRateError::Invalid {
                    interface: route.interface.clone(),
                    topic: route.topic.clone(),
                    rate,
                    error,
                })?;
            match by_topic.get(route.topic.as_str()) {
                Some(first) if first.rate != Some(rate) => {
                    return Err(RouteRateError::Conflict {
                        topic: route.topic.clone(),
                        first: first.interface.clone(),
                        first_rate: first.rate.unwrap_or(rate),
                        second: route.interface.clone(),
                        second_rate: rate,
                    });
                }
                Some(_) => {}
                None => {
                    by_topic.insert(&route.topic, route);
                }
            }
        }
        Ok(())
    }

    /// The same topology with every topic name prefixed by `namespace.` ([`namespaced`]) — isolates deployments
    /// (or tests) that share one Kafka cluster, as Kafka Streams' `application.id` does.
    pub fn with_namespace(mut self, namespace: &str) -> Result<Self, TopologyError> {
        if namespace.is_empty() {
            return Ok(self);
        }
        let rename = |name: &str| namespaced(namespace, name);
        self.namespace = if self.namespace.is_empty() {
            namespace.to_owned()
        } else {
            rename(&self.namespace)
        };
        for topic in &mut self.topics {
            topic.name = rename(&topic.name);
        }
        for route in &mut self.routes {
            route.topic = rename(&route.topic);
            if let Some(group) = &mut route.service_group {
                *group = rename(group);
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// The topic with a given role. Panics never: `validate` guarantees each required role once.
    pub fn topic(&self, role: TopicRole) -> &TopicSpec {
        self.topics
            .iter()
            .find(|t| t.role == role)
            .expect("validated topology has every required role")
    }

    /// The route of an activity interface, if any.
    pub fn route(&self, interface: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.interface == interface)
    }

    /// The request topic of the route `name` names — an interface, or a route's topic, with
    /// or without the deployment's namespace — that Weir's activity workers serve (what
    /// `weir route pause` pauses: a topic, with every interface routed to it).
    pub fn served_route_topic(&self, name: &str) -> Result<&str, RouteLookupError> {
        let bare = namespaced(&self.namespace, name);
        let named = |r: &&Route| r.interface == name || r.topic == name || r.topic == bare;
        let route = self
            .routes
            .iter()
            .find(named)
            .ok_or_else(|| RouteLookupError::Unknown {
                name: name.to_owned(),
                known: self.route_topics().join(", "),
            })?;
        if self
            .routes
            .iter()
            .any(|r| r.external && r.topic == route.topic)
        {
            return Err(RouteLookupError::External {
                topic: route.topic.clone(),
            });
        }
        Ok(&route.topic)
    }

    /// The rate-limited request topics, each with its limit (what every activity worker
    /// process enforces on its own: `docs/design/activities.md#rate-limits`).
    pub fn rate_limits(&self) -> BTreeMap<String, RateLimit> {
        self.routes
            .iter()
            .filter_map(|r| Some((r.topic.clone(), r.rate?.limit())))
            .collect()
    }

    /// The rate limit of the topic `interface` is routed to, if it has one (a route of another
    /// interface of the topic may give it).
    pub fn rate_limit_of(&self, interface: &str) -> Option<RateLimit> {
        let topic = &self.route(interface)?.topic;
        self.routes
            .iter()
            .filter(|r| r.topic == *topic)
            .find_map(|r| r.rate)
            .map(|rate| rate.limit())
    }

    /// The interfaces routed to `topic`.
    pub fn interfaces_of(&self, topic: &str) -> Vec<&str> {
        self.routes
            .iter()
            .filter(|r| r.topic == topic)
            .map(|r| r.interface.as_str())
            .collect()
    }

    /// Every activity request topic (routes may share one), sorted, each once.
    pub fn route_topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.routes.iter().map(|r| r.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        topics
    }

    /// The request topics that Weir's activity workers serve, sorted, each once: the topics
    /// a cancelled activity's `ActivityCancel` may go to. A topic with an external route is
    /// left out (its service reads `ActivityRequest`s only; external activities are not
    /// cancelled, see the external contract in `docs/design/external-activities.md`).
    pub fn cancellation_topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self
            .routes
            .iter()
            .filter(|r| !r.external)
            .map(|r| r.topic.clone())
            .filter(|t| !self.routes.iter().any(|r| r.external && r.topic == *t))
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }
}

/// Why a name names no route that can be paused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteLookupError {
    #[error("no route is named `{name}` (an interface or a request topic; the topics: {known})")]
    Unknown { name: String, known: String },
    #[error(
        "the route topic `{topic}` is served by a service outside Weir: Weir runs none of its \
         requests, so pausing it here would hold nothing (pause that service instead)"
    )]
    External { topic: String },
}

/// Kafka's own rule for topic names (legal characters and length).
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." {
        return Err(format!(
            "topic name `{name}` must be 1 to 249 characters and not `.` or `..`"
        ));
    }
    if let Some(c) = name.chars().find(|&c| !legal(c)) {
        return Err(format!(
            "topic name `{name}` contains `{c}`; only ASCII letters, digits, `.`, `_` and `-` are allowed"
        ));
    }
    Ok(())
}

fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, TopologyError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| TopologyError::Parse {
        path: path.to_owned(),
        source: Box::new(source),
    })
}

/// `name` in deployment `namespace`: `<namespace>.<name>`, or `name` itself in the empty
/// namespace. The one rule for topics, consumer groups and transactional ids alike.
pub fn namespaced(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_topology() -> Topology {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        Topology::load(&dir).expect("the repository's topology is valid")
    }

    fn parse(topics: &str, routes: &str) -> Result<Topology, TopologyError> {
        Topology::from_parts(
            toml::from_str(topics).unwrap(),
            toml::from_str(routes).unwrap(),
        )
    }

    #[test]
    fn a_topic_is_served_by_weir_or_by_an_external_service_which_names_its_group() {
        let mixed = parse(
            MINIMAL,
            r#"
            [[route]]
            interface = "a:b/c"
            topic = "shared"
            [[route]]
            interface = "a:b/d"
            topic = "shared"
            external = true
        "#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            mixed.contains("topic `shared` has the external route `a:b/d`"),
            "{mixed}"
        );
        let group_of_weir = parse(
            MINIMAL,
            r#"
            [[route]]
            interface = "a:b/c"
            topic = "t"
            service_group = "svc"
        "#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            group_of_weir.contains("only an external route"),
            "{group_of_weir}"
        );
        let notices_of_weir = parse(
            MINIMAL,
            r#"
            [[route]]
            interface = "a:b/c"
            topic = "t"
            cancel_notices = true
        "#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            notices_of_weir.contains("`cancel_notices` is for external routes"),
            "{notices_of_weir}"
        );
        let external = parse(
            MINIMAL,
            r#"
            [[route]]
            interface = "a:b/c"
            topic = "t"
            external = true
            service_group = "svc"
        "#,
        )
        .unwrap()
        .with_namespace("ns")
        .unwrap();
        assert_eq!(external.routes[0].service_group.as_deref(), Some("ns.svc"));
        assert_eq!(external.routes[0].topic, "ns.t");
    }

    const MINIMAL: &str = r#"
        [defaults]
        partitions = 3
        replication = 1
        [[topic]]
        name = "s"
        role = "submissions"
        co_partitioned = true
        [[topic]]
        name = "r"
        role = "responses"
        co_partitioned = true
        [[topic]]
        name = "e"
        role = "events"
        co_partitioned = true
        [[topic]]
        name = "h"
        role = "history"
        co_partitioned = true
        [[topic]]
        name = "st"
        role = "state"
        co_partitioned = true
        [[topic]]
        name = "res"
        role = "results"
        [[topic]]
        name = "d"
        role = "dlq"
        partitions = 1
        [[topic]]
        name = "c"
        role = "control"
        partitions = 1
        [[topic]]
        name = "a"
        role = "answers"
    "#;

    #[test]
    fn repository_topology_has_every_role_and_route_topics() {
        let topology = repo_topology();
        for role in TopicRole::REQUIRED {
            assert!(topology.topic(role).name.starts_with("weir."));
        }
        let history = topology.topic(TopicRole::History);
        assert_eq!(
            history.configs.get("retention.ms").map(String::as_str),
            Some("-1")
        );
        for route in &topology.routes {
            let topic = topology.topics.iter().find(|t| t.name == route.topic);
            assert_eq!(
                topic.map(|t| t.role),
                Some(TopicRole::Activity),
                "{route:?}"
            );
        }
    }

    #[test]
    fn defaults_apply_and_route_topics_are_added() {
        let t = parse(
            MINIMAL,
            r#"[[route]]
               interface = "a:b/c"
               topic = "act.c""#,
        )
        .unwrap();
        assert_eq!(t.topic(TopicRole::Submissions).partitions, 3);
        assert_eq!(t.topic(TopicRole::Dlq).partitions, 1);
        assert_eq!(t.topics.len(), 10);
        assert_eq!(t.route("a:b/c").unwrap().topic, "act.c");
        assert!(t.route("a:b/d").is_none());
    }

    /// `weir route pause` names a route by an interface or its topic (with or without the
    /// namespace); a name of no route, or a topic served outside Weir, is refused.
    #[test]
    fn a_route_to_pause_is_named_by_interface_or_topic() {
        let t = parse(
            MINIMAL,
            r#"[[route]]
               interface = "a:b/c"
               topic = "act.c"
               [[route]]
               interface = "a:b/d"
               topic = "act.c"
               [[route]]
               interface = "x:y/z"
               topic = "act.x"
               external = true"#,
        )
        .unwrap()
        .with_namespace("ns")
        .unwrap();
        for name in ["a:b/c", "a:b/d", "act.c", "ns.act.c"] {
            assert_eq!(t.served_route_topic(name), Ok("ns.act.c"), "{name}");
        }
        assert_eq!(t.interfaces_of("ns.act.c"), ["a:b/c", "a:b/d"]);
        assert!(matches!(
            t.served_route_topic("x:y/z"),
            Err(RouteLookupError::External { topic }) if topic == "ns.act.x"
        ));
        for name in ["act", "c", "other.act.c"] {
            assert!(
                matches!(
                    t.served_route_topic(name),
                    Err(RouteLookupError::Unknown { .. })
                ),
                "{name}"
            );
        }
    }

    fn route_with_rate(rate: &str) -> String {
        format!(
            r#"[[route]]
               interface = "a:b/c"
               topic = "act.c"
               rate = {rate}"#
        )
    }

    /// `rate` limits the route's topic: `per_second` (an integer or a float) and `burst` (1 if
    /// not given); every interface of the topic shares it, namespaced with the topic.
    #[test]
    fn a_rate_limits_the_topic_of_its_route() {
        let t = parse(
            MINIMAL,
            r#"[[route]]
               interface = "a:b/c"
               topic = "act.c"
               rate = { per_second = 50, burst = 10 }
               [[route]]
               interface = "a:b/d"
               topic = "act.c"
               [[route]]
               interface = "a:b/e"
               topic = "act.c"
               rate = { per_second = 50.0, burst = 10 }
               [[route]]
               interface = "a:b/s"
               topic = "act.s"
               rate = { per_second = 0.5 }
               [[route]]
               interface = "a:b/f"
               topic = "act.f""#,
        )
        .unwrap()
        .with_namespace("ns")
        .unwrap();
        let fifty = RateLimit {
            per_second: 50.0,
            burst: 10,
        };
        let slow = RateLimit {
            per_second: 0.5,
            burst: 1,
        };
        assert_eq!(
            t.rate_limits(),
            BTreeMap::from([
                ("ns.act.c".to_owned(), fifty),
                ("ns.act.s".to_owned(), slow)
            ])
        );
        assert_eq!(t.rate_limit_of("a:b/d"), Some(fifty), "the topic's limit");
        assert_eq!(t.rate_limit_of("a:b/s"), Some(slow));
        assert_eq!(t.rate_limit_of("a:b/f"), None);
        assert_eq!(t.rate_limit_of("x:y/z"), None, "no route");
        assert!(repo_topology().rate_limits().is_empty());
    }

    /// A rate that is not one, one on an external route, and two of one topic that differ are
    /// typed errors naming the route and its topic; a key a rate does not have is a parse error.
    #[test]
    fn bad_rates_are_refused_naming_the_route_and_topic() {
        for (rate, error) in [
            ("{ per_second = 0 }", RateLimitError::NotPositive(0.0)),
            ("{ per_second = -3.5 }", RateLimitError::NotPositive(-3.5)),
            (
                "{ per_second = inf }",
                RateLimitError::NotFinite(f64::INFINITY),
            ),
            ("{ per_second = 1e-9 }", RateLimitError::TooSlow(1e-9)),
            ("{ per_second = 5, burst = 0 }", RateLimitError::NoBurst),
        ] {
            let err = parse(MINIMAL, &route_with_rate(rate)).expect_err(rate);
            match &err {
                TopologyError::Rate(RouteRateError::Invalid {
                    interface,
                    topic,
                    error: found,
                    ..
                }) => {
                    assert_eq!((interface.as_str(), topic.as_str()), ("a:b/c", "act.c"));
                    assert_eq!(*found, error, "{rate}");
                }
                other => panic!("{rate}: {other:?}"),
            }
            let message = err.to_string();
            assert!(
                message.starts_with("invalid topology: route of `a:b/c` (topic `act.c`): rate {"),
                "{message}"
            );
        }
        let nan = parse(MINIMAL, &route_with_rate("{ per_second = nan }")).unwrap_err();
        assert!(
            matches!(
                nan,
                TopologyError::Rate(RouteRateError::Invalid {
                    error: RateLimitError::NotFinite(_),
                    ..
                })
            ),
            "{nan:?}"
        );
        let external = parse(
            MINIMAL,
            r#"[[route]]
               interface = "x:y/z"
               topic = "act.x"
               external = true
               rate = { per_second = 5 }"#,
        )
        .unwrap_err();
        assert!(
            matches!(&external, TopologyError::Rate(RouteRateError::External { interface, topic })
                if interface == "x:y/z" && topic == "act.x"),
            "{external:?}"
        );
        assert!(external.to_string().contains("is external"), "{external}");
        let conflict = parse(
            MINIMAL,
            r#"[[route]]
               interface = "a:b/c"
               topic = "act.c"
               rate = { per_second = 5 }
               [[route]]
               interface = "a:b/d"
               topic = "act.c"
               [[route]]
               interface = "a:b/e"
               topic = "act.c"
               rate = { per_second = 5, burst = 2 }"#,
        )
        .unwrap_err();
        assert!(
            matches!(&conflict, TopologyError::Rate(RouteRateError::Conflict { topic, first, second, .. })
                if topic == "act.c" && first == "a:b/c" && second == "a:b/e"),
            "{conflict:?}"
        );
        assert!(
            conflict.to_string().contains(
                "topic `act.c` has two rate limits: the route of `a:b/c` gives { per_second = 5, burst = 1 }, the route of `a:b/e` { per_second = 5, burst = 2 }"
            ),
            "{conflict}"
        );
        for bad in [
            "{ per_minute = 5 }",
            "{ burst = 3 }",
            "{ per_second = 5, burst = -1 }",
        ] {
            let err = toml::from_str::<RoutesFile>(&route_with_rate(bad)).err();
            assert!(err.is_some(), "{bad} parsed");
        }
    }

    #[test]
    fn co_partitioned_topics_must_agree_on_partition_count() {
        let topics = MINIMAL.replace(
            "name = \"h\"\n        role = \"history\"",
            "name = \"h\"\n        partitions = 4\n        role = \"history\"",
        );
        let err = parse(&topics, "").unwrap_err().to_string();
        assert!(err.contains("same partition count"), "{err}");
        assert!(err.contains("`h` has 4"), "{err}");
    }

    #[test]
    fn a_missing_role_is_rejected() {
        let topics = MINIMAL.replace("role = \"dlq\"", "role = \"results\"");
        let err = parse(&topics, "").unwrap_err().to_string();
        assert!(err.contains("Results"), "{err}");
    }

    #[test]
    fn bad_topic_names_and_duplicate_routes_are_rejected() {
        let err = parse(&MINIMAL.replace("name = \"s\"", "name = \"s/x\""), "")
            .unwrap_err()
            .to_string();
        assert!(err.contains("contains `/`"), "{err}");
        let routes = r#"
            [[route]]
            interface = "a:b/c"
            topic = "x"
            [[route]]
            interface = "a:b/c"
            topic = "y"
        "#;
        let err = parse(MINIMAL, routes).unwrap_err().to_string();
        assert!(err.contains("routed twice"), "{err}");
    }

    #[test]
    fn namespace_prefixes_every_topic_and_route() {
        let t = repo_topology().with_namespace("t42").unwrap();
        assert!(
            t.topics
                .iter()
                .all(|topic| topic.name.starts_with("t42.weir."))
        );
        assert!(
            t.routes
                .iter()
                .all(|r| r.topic.starts_with("t42.weir.activity."))
        );
    }

    #[test]
    fn unknown_keys_are_errors_not_ignored() {
        let err = toml::from_str::<TopicsFile>(&MINIMAL.replace("replication = 1", "replicas = 1"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("replicas"), "{err}");
    }
}
