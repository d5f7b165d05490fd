//! Connecting to the CQL store.

use std::time::Duration;

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

/// How to reach the CQL store and which keyspace Weir owns there.
#[derive(Debug, Clone)]
pub struct CqlConfig {
    /// `host:port` contact points.
    pub contact_points: Vec<String>,
    pub keyspace: String,
    /// Replication factor of the keyspace when `topology apply` creates it (3 in production).
    pub replication_factor: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to the CQL store at {contact_points}: {source}")]
    Connect {
        contact_points: String,
        source: Box<scylla::errors::NewSessionError>,
    },
    #[error("CQL statement failed ({context}): {source}")]
    Execute {
        context: String,
        source: Box<scylla::errors::ExecutionError>,
    },
    #[error("unexpected CQL result ({context}): {reason}")]
    Result { context: String, reason: String },
    #[error(
        "invalid keyspace name `{0}`: use 1 to 48 ASCII letters, digits or `_`, starting with a letter"
    )]
    KeyspaceName(String),
    #[error("stored data of execution `{execution_id}` is corrupt: {reason}")]
    Corrupt {
        execution_id: String,
        reason: String,
    },
    #[error("timer scan from {from} to {until} spans more than {max_buckets} buckets")]
    TimerRange {
        from: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
        max_buckets: i64,
    },
    #[error("schemas/cql is malformed: {0}")]
    SchemaFile(String),
    #[error("the CQL schema of keyspace `{keyspace}` differs from schemas/cql:\n{}", .drift.iter().map(|d| format!("  - {d}")).collect::<Vec<_>>().join("\n"))]
    Drift {
        keyspace: String,
        drift: Vec<String>,
    },
}

/// Opens a session (not bound to a keyspace: statements name theirs).
pub async fn connect(config: &CqlConfig) -> Result<Session, StoreError> {
    SessionBuilder::new()
        .known_nodes(&config.contact_points)
        .connection_timeout(Duration::from_secs(10))
        .build()
        .await
        .map_err(|source| StoreError::Connect {
            contact_points: config.contact_points.join(","),
            source: Box::new(source),
        })
}

/// Keyspace names are interpolated into CQL, so only plain identifiers are accepted.
pub fn validate_keyspace(name: &str) -> Result<(), StoreError> {
    let mut chars = name.chars();
    let valid = name.len() <= 48
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(StoreError::KeyspaceName(name.to_owned()))
    }
}
