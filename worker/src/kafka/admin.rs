//! Topic administration: create the topics of a [`Topology`] that are missing and report drift
//! of the ones that exist. Drift is never repaired silently: another partition count would
//! re-home executions, another replication factor or config changes durability, so each is an
//! error for an operator to resolve.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::KafkaConfig;
use crate::topology::TopicSpec;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a topic created by someone else may take to show up in metadata.
const METADATA_PROPAGATION: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot create a Kafka admin client for {brokers}: {source}")]
    Client { brokers: String, source: KafkaError },
    #[error("cannot read cluster metadata from {brokers}: {source}")]
    Metadata { brokers: String, source: KafkaError },
    #[error("cannot create topic `{topic}`: {code}")]
    Create {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("cannot describe the configs of topic `{topic}`: {reason}")]
    DescribeConfigs { topic: String, reason: String },
    #[error("the Kafka topics differ from the topology:\n{}", .0.iter().map(|d| format!("  - {d}")).collect::<Vec<_>>().join("\n"))]
    Drift(Vec<TopicDrift>),
}

/// One difference between a topic in Kafka and its [`TopicSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicDrift {
    Missing {
        topic: String,
    },
    Partitions {
        topic: String,
        expected: i32,
        actual: i32,
    },
    Replication {
        topic: String,
        expected: i32,
        actual: i32,
    },
    Config {
        topic: String,
        key: String,
        expected: String,
        actual: Option<String>,
    },
}

impl fmt::Display for TopicDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicDrift::Missing { topic } => write!(f, "topic `{topic}` does not exist"),
            TopicDrift::Partitions {
                topic,
                expected,
                actual,
            } => write!(
                f,
                "topic `{topic}` has {actual} partitions, the topology says {expected} \
                 (changing the count re-homes executions: migrate, do not alter)"
            ),
            TopicDrift::Replication {
                topic,
                expected,
                actual,
            } => write!(
                f,
                "topic `{topic}` has replication factor {actual}, the topology says {expected}"
            ),
            TopicDrift::Config {
                topic,
                key,
                expected,
                actual,
            } => write!(
                f,
                "topic `{topic}` has {key}={}, the topology says {key}={expected}",
                actual.as_deref().unwrap_or("<unset>")
            ),
        }
    }
}

/// What `apply` did for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicOutcome {
    Created,
    Unchanged,
}

/// Creates the topics of `specs` that do not exist (when `create` is set) and checks every
/// existing one against its spec. Returns the outcome per topic, or every drift found.
pub async fn apply_topics(
    config: &KafkaConfig,
    specs: &[TopicSpec],
    create: bool,
) -> Result<Vec<(String, TopicOutcome)>, AdminError> {
    let admin: Arc<AdminClient<DefaultClientContext>> = Arc::new(
        config
            .client()
            .create()
            .map_err(|source| AdminError::Client {
                brokers: config.brokers.clone(),
                source,
            })?,
    );
    let metadata_error = |source| AdminError::Metadata {
        brokers: config.brokers.clone(),
        source,
    };
    let existing = describe_topics(&admin, &config.brokers).await?;
    let options = AdminOptions::new()
        .request_timeout(Some(REQUEST_TIMEOUT))
        .operation_timeout(Some(REQUEST_TIMEOUT));

    let missing: Vec<&TopicSpec> = specs
        .iter()
        .filter(|s| !existing.contains_key(&s.name))
        .collect();
    let mut drift = Vec::new();
    let mut outcomes = Vec::new();
    if !create {
        drift.extend(missing.iter().map(|s| TopicDrift::Missing {
            topic: s.name.clone(),
        }));
    } else if !missing.is_empty() {
        let new_topics: Vec<NewTopic> = missing
            .iter()
            .map(|spec| {
                let replication = TopicReplication::Fixed(spec.replication);
                let topic = NewTopic::new(&spec.name, spec.partitions, replication);
                spec.configs
                    .iter()
                    .fold(topic, |topic, (k, v)| topic.set(k, v))
            })
            .collect();
        let results = admin
            .create_topics(&new_topics, &options)
            .await
            .map_err(metadata_error)?;
        for result in results {
            match result {
                Ok(topic) => outcomes.push((topic, TopicOutcome::Created)),
                // A concurrent `apply` created it first: it is checked below like any other.
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(AdminError::Create { topic, code }),
            }
        }
    }

    // Check every topic that was not created by this call. One that "already exists" although
    // the first metadata lacked it was created concurrently: wait for it to become visible.
    let to_check: Vec<&TopicSpec> = specs
        .iter()
        .filter(|s| !outcomes.iter().any(|(created, _)| created == &s.name))
        .filter(|s| create || existing.contains_key(&s.name))
        .collect();
    let mut existing = existing;
    let deadline = std::time::Instant::now() + METADATA_PROPAGATION;
    while to_check.iter().any(|s| !existing.contains_key(&s.name))
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        existing = describe_topics(&admin, &config.brokers).await?;
    }
    let (to_check, invisible): (Vec<&TopicSpec>, Vec<&TopicSpec>) = to_check
        .into_iter()
        .partition(|s| existing.contains_key(&s.name));
    drift.extend(invisible.iter().map(|s| TopicDrift::Missing {
        topic: s.name.clone(),
    }));
    let resources: Vec<ResourceSpecifier> = to_check
        .iter()
        .map(|s| ResourceSpecifier::Topic(&s.name))
        .collect();
    let described = if resources.is_empty() {
        Vec::new()
    } else {
        admin
            .describe_configs(&resources, &options)
            .await
            .map_err(metadata_error)?
    };
    for (spec, configs) in to_check.iter().zip(described) {
        let (partitions, replication) = existing[&spec.name];
        if partitions != spec.partitions {
            drift.push(TopicDrift::Partitions {
                topic: spec.name.clone(),
                expected: spec.partitions,
                actual: partitions,
            });
        }
        if replication != spec.replication {
            drift.push(TopicDrift::Replication {
                topic: spec.name.clone(),
                expected: spec.replication,
                actual: replication,
            });
        }
        let configs = configs.map_err(|code| AdminError::DescribeConfigs {
            topic: spec.name.clone(),
            reason: code.to_string(),
        })?;
        for (key, expected) in &spec.configs {
            let actual = configs.get(key).and_then(|e| e.value.clone());
            if actual.as_deref() != Some(expected.as_str()) {
                drift.push(TopicDrift::Config {
                    topic: spec.name.clone(),
                    key: key.clone(),
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        outcomes.push((spec.name.clone(), TopicOutcome::Unchanged));
    }
    if drift.is_empty() {
        Ok(outcomes)
    } else {
        Err(AdminError::Drift(drift))
    }
}

/// Partition count and replication factor of every topic in the cluster.
async fn describe_topics(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    brokers: &str,
) -> Result<HashMap<String, (i32, i32)>, AdminError> {
    // librdkafka's metadata call blocks; keep it off the async workers.
    let client = Arc::clone(admin);
    let metadata = tokio::task::spawn_blocking(move || {
        client.inner().fetch_metadata(None::<&str>, REQUEST_TIMEOUT)
    })
    .await
    .expect("metadata task does not panic")
    .map_err(|source| AdminError::Metadata {
        brokers: brokers.to_owned(),
        source,
    })?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| {
            let replication = t
                .partitions()
                .first()
                .map_or(0, |p| p.replicas().len() as i32);
            (
                t.name().to_owned(),
                (t.partitions().len() as i32, replication),
            )
        })
        .collect())
}
