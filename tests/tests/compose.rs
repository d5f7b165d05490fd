//! There is no Docker engine on the machines that run the tests, so the compose stack is checked
//! by reading it: its services, ports and environment must agree with `topology/`, the Dockerfile
//! and the flags and variables the `weir` command line really declares.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use serde_yaml::Value;
use weir::cli::Cli;
use weir::topology::Topology;
use weir_e2e::repo_root;

fn compose() -> Value {
    let path = repo_root().join("docker/docker-compose.yml");
    let text = std::fs::read_to_string(&path).expect("docker-compose.yml");
    let mut value: Value = serde_yaml::from_str(&text).expect("valid YAML");
    value.apply_merge().expect("YAML merge keys resolve");
    value
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    compose["services"]
        .get(name)
        .unwrap_or_else(|| panic!("compose has no service `{name}`"))
}

fn environment(service: &Value) -> BTreeMap<String, String> {
    let env = service["environment"]
        .as_mapping()
        .expect("environment is a mapping");
    env.iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => panic!("unexpected environment value {other:?}"),
            };
            (k.as_str().expect("string key").to_owned(), value)
        })
        .collect()
}

fn command(service: &Value) -> Vec<String> {
    service["command"]
        .as_sequence()
        .expect("command is a list")
        .iter()
        .map(|v| v.as_str().expect("string").to_owned())
        .collect()
}

/// The environment variables the `weir` subcommand at `path` declares (walking clap's tree).
fn declared_env(path: &[String]) -> Option<BTreeSet<String>> {
    let mut command = Cli::command();
    for name in path {
        command = command.find_subcommand(name)?.clone();
    }
    Some(
        command
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect(),
    )
}

#[test]
fn services_and_images_are_the_documented_ones() {
    let compose = compose();
    // The default stack, and what the `monitoring` profile adds.
    let in_profile = |profile: Option<&str>| -> BTreeSet<&str> {
        compose["services"]
            .as_mapping()
            .expect("services")
            .iter()
            .filter(|(_, s)| {
                let profiles: Vec<&str> = s["profiles"]
                    .as_sequence()
                    .map(|p| p.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match profile {
                    None => profiles.is_empty(),
                    Some(p) => profiles == [p],
                }
            })
            .map(|(k, _)| k.as_str().expect("name"))
            .collect()
    };
    assert_eq!(
        in_profile(None),
        BTreeSet::from(["kafka", "scylla", "topology", "worker"])
    );
    assert_eq!(
        in_profile(Some("monitoring")),
        BTreeSet::from(["grafana", "prometheus"])
    );
    assert_eq!(
        compose["services"].as_mapping().expect("services").len(),
        6,
        "every service is in the default stack or the monitoring profile"
    );
    // Prometheus finds the workers on the port their metrics are served at.
    let prometheus = repo_root().join("docker/monitoring/prometheus.yml");
    let prometheus: Value =
        serde_yaml::from_str(&std::fs::read_to_string(prometheus).expect("prometheus.yml"))
            .expect("valid YAML");
    let weir_job = prometheus["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs")
        .iter()
        .find(|job| job["job_name"].as_str() == Some("weir"))
        .expect("a scrape job `weir`");
    let worker_env = environment(service(&compose, "worker"));
    let metrics_port = worker_env
        .get("WEIR_METRICS_ADDR")
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse::<u64>().ok())
        .expect("the worker serves its metrics on WEIR_METRICS_ADDR");
    assert_eq!(
        weir_job["dns_sd_configs"][0]["port"].as_u64(),
        Some(metrics_port),
        "{weir_job:?}"
    );
    let kafka_image = service(&compose, "kafka")["image"].as_str().expect("image");
    assert!(kafka_image.starts_with("apache/kafka:4."), "{kafka_image}");
    let scylla = service(&compose, "scylla");
    assert!(
        scylla["image"]
            .as_str()
            .expect("image")
            .starts_with("scylladb/scylla:")
    );
    let args = command(scylla);
    let developer_mode = args.iter().position(|a| a == "--developer-mode");
    assert_eq!(developer_mode.map(|i| args[i + 1].as_str()), Some("1"));
    assert_eq!(
        service(&compose, "worker")["deploy"]["replicas"].as_u64(),
        Some(2)
    );
    assert_eq!(
        command(service(&compose, "topology")),
        ["topology", "apply"]
    );
}

#[test]
fn weir_services_reach_kafka_and_scylla_where_they_listen() {
    let compose = compose();
    let kafka = environment(service(&compose, "kafka"));
    let advertised: Vec<&str> = kafka["KAFKA_ADVERTISED_LISTENERS"].split(',').collect();
    for name in ["topology", "worker"] {
        let env = environment(service(&compose, name));
        let brokers = &env["WEIR_BROKERS"];
        assert!(
            advertised
                .iter()
                .any(|l| l.ends_with(&format!("://{brokers}"))),
            "{name}: WEIR_BROKERS={brokers} is not an advertised listener {advertised:?}"
        );
        assert_eq!(env["WEIR_CQL"], "scylla:9042", "{name}");
        assert_eq!(env["WEIR_KEYSPACE"], "weir", "{name}");
    }
    let scylla_ports = service(&compose, "scylla")["ports"]
        .as_sequence()
        .expect("ports");
    assert!(scylla_ports.iter().any(|p| p.as_str() == Some("9042:9042")));
    // The host listener is published on the port it advertises.
    let host_listener = advertised
        .iter()
        .find(|l| l.starts_with("HOST://localhost:"))
        .expect("a listener for clients on the Docker host");
    let port = host_listener.rsplit(':').next().expect("port");
    let kafka_ports = service(&compose, "kafka")["ports"]
        .as_sequence()
        .expect("ports");
    assert!(
        kafka_ports
            .iter()
            .any(|p| p.as_str() == Some(&format!("{port}:{port}")))
    );
}

#[test]
fn broker_settings_fit_the_topology() {
    let compose = compose();
    let kafka = environment(service(&compose, "kafka"));
    let brokers = kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(',').count() as i32;
    let topology = Topology::load(&repo_root().join("topology")).expect("topology");
    for topic in &topology.topics {
        assert!(
            topic.replication <= brokers,
            "topic {} wants {} replicas, compose runs {brokers} broker(s)",
            topic.name,
            topic.replication
        );
    }
    // Weir's exactly-once model needs the transaction log and group offsets to be writable.
    for key in [
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ] {
        let value: i32 = kafka[key].parse().expect("a number");
        assert!(
            (1..=brokers).contains(&value),
            "{key}={value} with {brokers} broker(s)"
        );
    }
    assert_eq!(kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"], "false");
}

#[test]
fn every_weir_variable_is_one_the_cli_declares() {
    let compose = compose();
    let dockerfile =
        std::fs::read_to_string(repo_root().join("docker/Dockerfile")).expect("Dockerfile");
    for name in ["topology", "worker"] {
        let svc = service(&compose, name);
        let path = command(svc);
        // `weir worker` arrives with the Kafka worker; until then its service is held to the
        // cluster settings it will share with `topology apply`.
        let declared = declared_env(&path)
            .or_else(|| {
                (name == "worker")
                    .then(|| declared_env(&["topology".into(), "apply".into()]))
                    .flatten()
            })
            .unwrap_or_else(|| panic!("`weir {}` is not a command", path.join(" ")));
        let env = environment(svc);
        for key in env.keys().filter(|k| k.starts_with("WEIR_")) {
            assert!(
                declared.contains(key) || key == "WEIR_LOG",
                "{name}: {key} is not read by `weir {}` (declared: {declared:?})",
                path.join(" ")
            );
        }
        // The topology folder the services point at is the one the image ships.
        let topology = &env["WEIR_TOPOLOGY"];
        assert!(
            dockerfile.contains(&format!("COPY topology {topology}")),
            "{name}: the image does not ship the topology at {topology}"
        );
    }
    // The worker's components are where the image puts them, and its metrics port is exposed.
    let worker = environment(service(&compose, "worker"));
    let components_dir = &worker["WEIR_COMPONENTS_DIR"];
    assert!(
        dockerfile.contains(&format!(
            "COPY --from=examples /components {components_dir}"
        )),
        "the image does not ship the components at {components_dir}"
    );
    assert!(worker["WEIR_COMPONENTS"].starts_with(&worker["WEIR_TOPOLOGY"]));
    let metrics_port = worker["WEIR_METRICS_ADDR"]
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let exposed = service(&compose, "worker")["expose"]
        .as_sequence()
        .expect("expose");
    assert!(
        exposed
            .iter()
            .any(|p| p.as_str() == Some(metrics_port.as_str()))
    );
}
