//! Connecting to the CQL store: contact points, password authentication and TLS (rustls, with
//! the CA, client certificate and hostname check the operator gives), and errors that say which
//! of them failed.

use std::path::PathBuf;
use std::sync::Arc;
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

/// TLS towards the store's nodes; files are PEM.
#[derive(Clone, Debug)]
pub struct CqlTls {
    /// CAs that sign the nodes' certificates; `None`: the Mozilla roots (`webpki-roots`).
    pub ca: Option<PathBuf>,
    /// Client certificate and its key, for nodes that ask for one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Check that a node's certificate names the address it is reached at (the driver
    /// connects to the addresses nodes advertise, so the certificate must name those).
    pub verify_hostname: bool,
}

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
            tls_config(tls)?,
        )));
    }
    builder.build().await.map_err(|source| StoreError::Connect {
        contact_points: config.contact_points.join(","),
        user: config.login.as_ref().map(|l| l.username.clone()),
        failure: classify(&source),
        source: Box::new(source),
    })
}

/// The rustls client configuration of `tls`.
fn tls_config(tls: &CqlTls) -> Result<Arc<rustls::ClientConfig>, StoreError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let file_error = |path: &PathBuf, reason: String| StoreError::TlsFile {
        path: path.clone(),
        reason,
    };
    let certificates = |path: &PathBuf| -> Result<Vec<CertificateDer<'static>>, StoreError> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|e| file_error(path, e.to_string()))?;
        if certs.is_empty() {
            return Err(file_error(path, "holds no PEM certificate".into()));
        }
        Ok(certs)
    };
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca {
        Some(path) => {
            for cert in certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|e| file_error(path, format!("not a usable CA certificate: {e}")))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Tls(e.to_string()))?;
    let builder = if tls.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let chain =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| StoreError::Tls(e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName(chain)))
    };
    let config = match &tls.client {
        Some((cert, key)) => {
            let chain = certificates(cert)?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| file_error(cert, format!("unusable client certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// A verifier that checks a node's chain of trust, but not that the certificate names the
/// address (`--cql-tls-verify-hostname false`: nodes reached at addresses their certificates
/// do not list, as behind some proxies).
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// What a failed session says about its cause. The driver wraps rustls's error in an
/// `io::Error` and reports authentication as a message, so this walks the error chain (through
/// `io::Error`'s inner error) for a typed cause, and falls back on the messages Cassandra and
/// ScyllaDB give.
pub fn classify(error: &scylla::errors::NewSessionError) -> ConnectFailure {
    let mut texts = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return match tls {
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                ) => ConnectFailure::Hostname,
                rustls::Error::InvalidCertificate(_) => ConnectFailure::Certificate,
                _ => ConnectFailure::TlsMismatch,
            };
        }
        texts.push(e.to_string());
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _).or_else(|| e.source()),
            None => e.source(),
        };
    }
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
