//! Connecting to the CQL store: contact points, password authentication and TLS (rustls, with
//! the CA, client certificate and hostname check the operator gives), and errors that say which
//! of them failed.

use std::path::PathBuf;
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
    /// User and password for the store's `PasswordAuthenticator`; `None`: no authentication.
    pub login: Option<CqlLogin>,
    /// TLS to every node; `None`: plaintext.
    pub tls: Option<CqlTls>,
}

impl CqlConfig {
    /// A plaintext, unauthenticated connection (a local stack).
    pub fn new(contact_points: Vec<String>, keyspace: impl Into<String>) -> Self {
        CqlConfig {
            contact_points,
            keyspace: keyspace.into(),
            replication_factor: 1,
            login: None,
            tls: None,
        }
    }
}

/// A store login. `Debug` never shows the password.
#[derive(Clone, Debug)]
pub struct CqlLogin {
    pub username: String,
    pub password: secrecy::SecretString,
}

/// TLS towards the store's nodes (files are PEM): the CA, client certificate and hostname
/// check, as for every rustls client of Weir's ([`crate::tls`]). The driver connects to the
/// addresses nodes advertise, so with the hostname check their certificates must name those.
pub type CqlTls = crate::tls::ClientTls;

/// Why a connection to the store failed, as far as can be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectFailure {
    /// The node refused the user name or password.
    Credentials,
    /// The node asks for authentication and none was configured.
    NoCredentials,
    /// The node's certificate is not signed by a trusted CA (or is otherwise invalid).
    Certificate,
    /// The node's certificate is valid but does not name the address it was reached at.
    Hostname,
    /// TLS was configured and the node does not speak it (or the reverse).
    TlsMismatch,
    /// Anything else (unreachable, timed out, …).
    Other,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnectFailure::Credentials => "the store refused the credentials",
            ConnectFailure::NoCredentials => {
                "the store requires authentication (--cql-username and a password)"
            }
            ConnectFailure::Certificate => {
                "the store's certificate is not trusted (not signed by --cql-tls-ca, or invalid)"
            }
            ConnectFailure::Hostname => {
                "the store's certificate does not name the address it was reached at \
                 (hostname verification; see --cql-tls-verify-hostname)"
            }
            ConnectFailure::TlsMismatch => {
                "TLS handshake failed: does the store expect TLS (--cql-tls) or plaintext?"
            }
            ConnectFailure::Other => "connection failed",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to the CQL store at {contact_points}{}: {failure}: {source}", user.as_ref().map(|u| format!(" as `{u}`")).unwrap_or_default())]
    Connect {
        contact_points: String,
        user: Option<String>,
        failure: ConnectFailure,
        source: Box<scylla::errors::NewSessionError>,
    },
    #[error("CQL TLS setup: {path}: {reason}")]
    TlsFile { path: PathBuf, reason: String },
    #[error("CQL TLS setup: {0}")]
    Tls(String),
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
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.contact_points)
        .connection_timeout(Duration::from_secs(10));
    if let Some(login) = &config.login {
        use secrecy::ExposeSecret;
        builder = builder.user(&login.username, login.password.expose_secret());
    }
    if let Some(tls) = &config.tls {
        builder = builder.tls_context(Some(scylla::client::session::TlsContext::Rustls023(
            crate::tls::client_config(tls)?,
        )));
    }
    builder.build().await.map_err(|source| StoreError::Connect {
        contact_points: config.contact_points.join(","),
        user: config.login.as_ref().map(|l| l.username.clone()),
        failure: classify(&source),
        source: Box::new(source),
    })
}

impl From<crate::tls::TlsError> for StoreError {
    fn from(error: crate::tls::TlsError) -> Self {
        match error {
            crate::tls::TlsError::File { path, reason } => StoreError::TlsFile { path, reason },
            crate::tls::TlsError::Config(reason) => StoreError::Tls(reason),
        }
    }
}

/// What a failed session says about its cause. The driver wraps rustls's error in an
/// `io::Error` and reports authentication as a message, so this looks for rustls's error in
/// the chain ([`crate::tls::error_chain`]), and falls back on the messages Cassandra and
/// ScyllaDB give.
pub fn classify(error: &scylla::errors::NewSessionError) -> ConnectFailure {
    if let Some(tls) = crate::tls::rustls_error(error) {
        return match tls {
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => ConnectFailure::Hostname,
            rustls::Error::InvalidCertificate(_) => ConnectFailure::Certificate,
            _ => ConnectFailure::TlsMismatch,
        };
    }
    let texts: Vec<String> = crate::tls::error_chain(error)
        .map(ToString::to_string)
        .collect();
    let text = texts.join(" | ");
    // The driver keeps only the message of the connection's error past its pool.
    if text.contains("invalid peer certificate") {
        return if text.contains("NotValidForName") || text.contains("not valid for name") {
            ConnectFailure::Hostname
        } else {
            ConnectFailure::Certificate
        };
    }
    if text.contains("Provided username")
        || text.contains("Authentication failed")
        || text.contains("and/or password are incorrect")
    {
        ConnectFailure::Credentials
    } else if text.contains("requires authentication")
        || text.contains("Authentication is required")
        || text.contains("authenticator")
    {
        ConnectFailure::NoCredentials
    } else if text.contains("InvalidContentType")
        || text.contains("CorruptMessage")
        || text.contains("received corrupt message")
        || text.contains("tls handshake eof")
    {
        ConnectFailure::TlsMismatch
    } else {
        ConnectFailure::Other
    }
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
