//! TLS of the clients Weir builds on rustls (the CQL store, the schema registry): the CAs, the
//! client certificate and the hostname check an operator gives, read from PEM files, with
//! errors that name the file. One rule for both; Kafka's TLS is librdkafka's own (OpenSSL,
//! `kafka::config`).

use std::path::PathBuf;
use std::sync::Arc;

/// TLS towards a server; files are PEM.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// CAs that sign the servers' certificates; `None`: the Mozilla roots (`webpki-roots`).
    pub ca: Option<PathBuf>,
    /// Client certificate and its key, for servers that ask for one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Check that a server's certificate names the address it is reached at.
    pub verify_hostname: bool,
}

/// Why a TLS client configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read, or does not hold what it should.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// rustls refused the configuration.
    #[error("{0}")]
    Config(String),
}

/// Makes ring the process's default rustls crypto provider, if none is yet. reqwest is built
/// with rustls and no provider of its own (`rustls-no-provider`: the registry's client is
/// given [`client_config`]'s), so a client built without a configuration (the OTLP
/// exporter's, an HTTP client of the tests) panics unless a process default is installed: the
/// `weir` binary does it first thing, and so must every other process that builds one.
pub fn install_crypto_provider() {
    // An error means a default is installed already: that one serves.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The rustls client configuration of `tls` (ring as the crypto provider).
pub fn client_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let file_error = |path: &PathBuf, reason: String| TlsError::File {
        path: path.clone(),
        reason,
    };
    let certificates = |path: &PathBuf| -> Result<Vec<CertificateDer<'static>>, TlsError> {
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
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = if tls.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let chain =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
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

/// A verifier that checks a server's chain of trust, but not that the certificate names the
/// address (`--cql-tls-verify-hostname false`, `--schema-registry-tls-verify-hostname false`:
/// servers reached at addresses their certificates do not list, as behind some proxies).
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

/// The errors of `error`'s chain, `error` first. Through an `io::Error` the chain goes to its
/// inner error (whose own `source` skips it): that is how rustls's error reaches a caller
/// through the CQL driver, reqwest or hyper.
pub fn error_chain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as _).or_else(|| e.source()),
        None => e.source(),
    })
}

/// The rustls error somewhere in `error`'s chain: a handshake that failed (a certificate not
/// trusted, not naming the host, a TLS/plaintext mismatch).
pub fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    error_chain(error).find_map(|e| e.downcast_ref::<rustls::Error>())
}
