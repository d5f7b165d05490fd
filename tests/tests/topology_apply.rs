//! `weir topology apply` against the real stack: creates what is missing, is idempotent, and
//! reports drift — a topic with another partition count, a table with other columns — as errors.

use std::process::Command;

use weir::kafka::admin::{AdminError, TopicDrift, TopicOutcome, apply_topics};
use weir::store::schema::{self, TableOutcome};
use weir::store::{StoreError, connect};
use weir::topology::{TopicRole, Topology};
use weir_e2e::{
    brokers, cql_config, cql_contact_points, create_topics, kafka_config, repo_root, unique_name,
};

fn load_topology(namespace: &str) -> Topology {
    Topology::load(&repo_root().join("topology"))
        .and_then(|t| t.with_namespace(namespace))
        .expect("topology")
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_creates_topics_once_and_reports_partition_drift() {
    let namespace = unique_name("apply");
    let topology = load_topology(&namespace);
    let first = apply_topics(&kafka_config(), &topology.topics, true)
        .await
        .expect("first apply");
    assert_eq!(first.len(), topology.topics.len());
    assert!(
        first.iter().all(|(_, o)| *o == TopicOutcome::Created),
        "{first:?}"
    );
    let second = apply_topics(&kafka_config(), &topology.topics, true)
        .await
        .expect("second apply");
    assert!(
        second.iter().all(|(_, o)| *o == TopicOutcome::Unchanged),
        "{second:?}"
    );

    // Someone created the history topic of another namespace by hand with 2 partitions.
    let other = load_topology(&unique_name("drift"));
    let history = other.topic(TopicRole::History);
    create_topics(&[(&history.name, 2)]);
    let err = apply_topics(&kafka_config(), &other.topics, true)
        .await
        .unwrap_err();
    let AdminError::Drift(drift) = &err else {
        panic!("expected drift, got {err}")
    };
    assert!(
        drift.contains(&TopicDrift::Partitions {
            topic: history.name.clone(),
            expected: history.partitions,
            actual: 2
        }),
        "{drift:?}"
    );
    // …and its retention differs from the topology's too.
    assert!(
        drift
            .iter()
            .any(|d| matches!(d, TopicDrift::Config { key, .. } if key == "retention.ms")),
        "{drift:?}"
    );
    assert!(
        err.to_string()
            .contains("has 2 partitions, the topology says 6"),
        "{err}"
    );
}

#[tokio::test]
async fn apply_creates_the_schema_once_and_reports_column_drift() {
    let keyspace = unique_name("schema");
    let tables = schema::parse_tables(schema::TABLES_CQL).expect("schema");
    let session = connect(&cql_config(&keyspace)).await.expect("connect");
    let check_only = schema::apply(&session, &keyspace, 1, &tables, false)
        .await
        .unwrap_err();
    assert!(
        check_only.to_string().contains("does not exist"),
        "{check_only}"
    );

    let first = schema::apply(&session, &keyspace, 1, &tables, true)
        .await
        .expect("first apply");
    assert!(
        first.iter().all(|(_, o)| *o == TableOutcome::Created),
        "{first:?}"
    );
    let second = schema::apply(&session, &keyspace, 1, &tables, true)
        .await
        .expect("second apply");
    assert!(
        second.iter().all(|(_, o)| *o == TableOutcome::Unchanged),
        "{second:?}"
    );

    // A checkpoints table from an older, different layout: IF NOT EXISTS keeps it; apply must not.
    let drifted = unique_name("schema_drift");
    session
        .query_unpaged(format!("CREATE KEYSPACE {drifted} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"), ())
        .await
        .expect("keyspace");
    session
        .query_unpaged(format!("CREATE TABLE {drifted}.checkpoints (topic text, kafka_partition int, materialised_offset int, legacy text, PRIMARY KEY ((topic, kafka_partition)))"), ())
        .await
        .expect("table");
    let err = schema::apply(&session, &drifted, 1, &tables, true)
        .await
        .unwrap_err();
    let StoreError::Drift { drift, .. } = &err else {
        panic!("expected drift, got {err}")
    };
    let text = drift.join("\n");
    assert!(
        text.contains("`checkpoints.materialised_offset` is int")
            || text.contains(".checkpoints.materialised_offset` is int"),
        "{text}"
    );
    assert!(text.contains("column `legacy`"), "{text}");
    assert!(text.contains("lacks column `owner`"), "{text}");
}

#[test]
fn the_cli_applies_and_exits_3_on_drift() {
    let weir = &weir_e2e::weir_binary();
    let namespace = unique_name("cli");
    let keyspace = unique_name("cli");
    let run = |subcommand: &str, namespace: &str| {
        Command::new(weir)
            .args(["topology", subcommand])
            .env("WEIR_BROKERS", brokers())
            .env("WEIR_CQL", cql_contact_points().join(","))
            .env("WEIR_KEYSPACE", &keyspace)
            .env("WEIR_NAMESPACE", namespace)
            .env("WEIR_TOPOLOGY", repo_root().join("topology"))
            .output()
            .expect("run weir")
    };
    let check = run("check", &namespace);
    assert_eq!(
        check.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let apply = run("apply", &namespace);
    let stdout = String::from_utf8_lossy(&apply.stdout);
    assert_eq!(
        apply.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&apply.stderr)
    );
    assert!(
        stdout.contains(&format!("{namespace}.weir.submissions")) && stdout.contains("created"),
        "{stdout}"
    );
    let check = run("check", &namespace);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A test's deployment takes its keyspace and topics with it when it ends: a suite of about
/// sixty deployments that left theirs behind (some 600 tables) ran the test node's Cassandra out
/// of heap, and the last test's `topology apply` timed out.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_removes_its_keyspace_and_topics_when_it_ends() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let deployment = weir_e2e::deployment::Deployment::new("removed");
    let (namespace, keyspace) = (deployment.namespace.clone(), deployment.keyspace.clone());
    let session = connect(&cql_config(&keyspace)).await.expect("connect");
    let keyspaces = async || -> Vec<String> {
        session
            .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", ())
            .await
            .expect("keyspaces")
            .into_rows_result()
            .expect("rows")
            .rows::<(String,)>()
            .expect("typed rows")
            .map(|row| row.expect("row").0)
            .collect()
    };
    let consumer: BaseConsumer = kafka_config()
        .consumer(&unique_name("removed_reader"))
        .create()
        .expect("consumer");
    let topics = || -> Vec<String> {
        consumer
            .fetch_metadata(None, std::time::Duration::from_secs(10))
            .expect("metadata")
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|name| name.starts_with(&format!("{namespace}.")))
            .collect()
    };
    assert!(keyspaces().await.contains(&keyspace));
    assert_eq!(topics().len(), deployment.topology.topics.len());

    drop(deployment);

    assert!(!keyspaces().await.contains(&keyspace), "{keyspace} is left");
    // Kafka deletes a topic's partitions after it acknowledges the deletion.
    weir_e2e::wait_for(
        "the deployment's topics to be deleted",
        std::time::Duration::from_secs(30),
        || {
            let left = topics();
            async move { left.is_empty().then_some(()) }
        },
    )
    .await;
}
