//! The flags (and environment variables) of authentication and encryption towards Kafka and
//! the CQL store, shared by every subcommand. Passwords come from a file or the environment
//! (a flag works too, but shows in the process list); none is ever printed: clap hides their
//! environment values, and they are held as [`SecretString`] (no `Debug` of the value).

use std::path::{Path, PathBuf};

use clap::{ArgAction, Args};
use secrecy::SecretString;

use crate::kafka::config::{KafkaSecurity, SaslLogin, SaslMechanism, SecurityProtocol, TlsFiles};
use crate::store::{CqlLogin, CqlTls};

/// Kafka: TLS and SASL of every client Weir makes (workers, catch-up, admin, CLI).
#[derive(Debug, Clone, Args)]
pub struct KafkaSecurityArgs {
    /// librdkafka's `security.protocol`.
    #[arg(
        long,
        env = "WEIR_KAFKA_SECURITY_PROTOCOL",
        value_enum,
        default_value_t
    )]
    pub kafka_security_protocol: SecurityProtocol,
    /// SASL mechanism (with sasl-ssl / sasl-plaintext).
    #[arg(long, env = "WEIR_KAFKA_SASL_MECHANISM", value_enum, default_value_t)]
    pub kafka_sasl_mechanism: SaslMechanism,
    /// SASL user name.
    #[arg(long, env = "WEIR_KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,
    /// File holding the SASL password (a trailing newline is ignored).
    #[arg(
        long,
        env = "WEIR_KAFKA_SASL_PASSWORD_FILE",
        conflicts_with = "kafka_sasl_password"
    )]
    pub kafka_sasl_password_file: Option<PathBuf>,
    /// The SASL password itself; prefer the file or the environment variable (a flag's value
    /// shows in the process list).
    #[arg(long, env = "WEIR_KAFKA_SASL_PASSWORD", hide_env_values = true, value_parser = secret)]
    pub kafka_sasl_password: Option<SecretString>,
    /// PEM file of the CAs that sign the brokers' certificates (default: the system's).
    #[arg(long, env = "WEIR_KAFKA_TLS_CA")]
    pub kafka_tls_ca: Option<PathBuf>,
    /// PEM client certificate, for brokers that require mutual TLS.
    #[arg(long, env = "WEIR_KAFKA_TLS_CERT")]
    pub kafka_tls_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(long, env = "WEIR_KAFKA_TLS_KEY")]
    pub kafka_tls_key: Option<PathBuf>,
    /// Check that a broker's certificate names the host it was reached at.
    #[arg(long, env = "WEIR_KAFKA_TLS_VERIFY_HOSTNAME", action = ArgAction::Set, default_value_t = true)]
    pub kafka_tls_verify_hostname: bool,
}

/// The CQL store: password authentication and TLS.
#[derive(Debug, Clone, Args)]
pub struct CqlSecurityArgs {
    /// User name for the store's `PasswordAuthenticator`.
    #[arg(long, env = "WEIR_CQL_USERNAME")]
    pub cql_username: Option<String>,
    /// File holding the store password (a trailing newline is ignored).
    #[arg(long, env = "WEIR_CQL_PASSWORD_FILE", conflicts_with = "cql_password")]
    pub cql_password_file: Option<PathBuf>,
    /// The store password itself; prefer the file or the environment variable.
    #[arg(long, env = "WEIR_CQL_PASSWORD", hide_env_values = true, value_parser = secret)]
    pub cql_password: Option<SecretString>,
    /// Connect to the store over TLS (implied by --cql-tls-ca).
    #[arg(long, env = "WEIR_CQL_TLS")]
    pub cql_tls: bool,
    /// PEM file of the CAs that sign the store nodes' certificates (default: the Mozilla roots).
    #[arg(long, env = "WEIR_CQL_TLS_CA")]
    pub cql_tls_ca: Option<PathBuf>,
    /// PEM client certificate, for nodes that ask for one.
    #[arg(long, env = "WEIR_CQL_TLS_CERT")]
    pub cql_tls_cert: Option<PathBuf>,
    /// PEM key (PKCS#8, PKCS#1 or SEC1) of the client certificate.
    #[arg(long, env = "WEIR_CQL_TLS_KEY")]
    pub cql_tls_key: Option<PathBuf>,
    /// Check that a node's certificate names the address it was reached at.
    #[arg(long, env = "WEIR_CQL_TLS_VERIFY_HOSTNAME", action = ArgAction::Set, default_value_t = true)]
    pub cql_tls_verify_hostname: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SecurityArgsError {
    #[error("cannot read the {what} from {path}: {source}")]
    PasswordFile {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Kafka(#[from] crate::kafka::config::SecurityError),
    #[error("a CQL password is given without --cql-username")]
    CqlPasswordWithoutUser,
    #[error(
        "--cql-username `{0}` is given without a password (--cql-password-file or WEIR_CQL_PASSWORD)"
    )]
    CqlUserWithoutPassword(String),
    #[error(
        "a CQL client certificate needs its key, and a key its certificate (--cql-tls-cert, --cql-tls-key)"
    )]
    CqlHalfAPair,
}

fn secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_owned()))
}

/// The password of a file or a flag: the file's content without its trailing newline.
fn password(
    what: &'static str,
    file: &Option<PathBuf>,
    value: &Option<SecretString>,
) -> Result<Option<SecretString>, SecurityArgsError> {
    match file {
        Some(path) => read_password(what, path).map(Some),
        None => Ok(value.clone()),
    }
}

fn read_password(what: &'static str, path: &Path) -> Result<SecretString, SecurityArgsError> {
    read_secret_file(path).map_err(|source| SecurityArgsError::PasswordFile {
        what,
        path: path.to_owned(),
        source,
    })
}

/// A file's content without one trailing newline (`\n` or `\r\n`): how a password or a
/// secret is kept in a file.
fn read_secret_file(path: &Path) -> Result<SecretString, std::io::Error> {
    let text = std::fs::read_to_string(path)?;
    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
    let trimmed = trimmed.strip_suffix('\r').unwrap_or(trimmed);
    Ok(SecretString::from(trimmed.to_owned()))
}

impl KafkaSecurityArgs {
    pub fn security(&self) -> Result<KafkaSecurity, SecurityArgsError> {
        let password = password(
            "Kafka SASL password",
            &self.kafka_sasl_password_file,
            &self.kafka_sasl_password,
        )?;
        let sasl = match (&self.kafka_sasl_username, password) {
            (Some(username), Some(password)) => Some(SaslLogin {
                mechanism: self.kafka_sasl_mechanism,
                username: username.clone(),
                password,
            }),
            (None, None) => None,
            // Half a login: `validate` names what is missing.
            _ => {
                return Err(crate::kafka::config::SecurityError::HalfALogin.into());
            }
        };
        let security = KafkaSecurity {
            protocol: self.kafka_security_protocol,
            sasl,
            tls: TlsFiles {
                ca: self.kafka_tls_ca.clone(),
                cert: self.kafka_tls_cert.clone(),
                key: self.kafka_tls_key.clone(),
            },
            verify_hostname: self.kafka_tls_verify_hostname,
        };
        security.validate()?;
        Ok(security)
    }
}

impl CqlSecurityArgs {
    pub fn login(&self) -> Result<Option<CqlLogin>, SecurityArgsError> {
        let password = password("CQL password", &self.cql_password_file, &self.cql_password)?;
        match (&self.cql_username, password) {
            (Some(username), Some(password)) => Ok(Some(CqlLogin {
                username: username.clone(),
                password,
            })),
            (None, None) => Ok(None),
            (None, Some(_)) => Err(SecurityArgsError::CqlPasswordWithoutUser),
            (Some(user), None) => Err(SecurityArgsError::CqlUserWithoutPassword(user.clone())),
        }
    }

    pub fn tls(&self) -> Result<Option<CqlTls>, SecurityArgsError> {
        if !self.cql_tls && self.cql_tls_ca.is_none() {
            return Ok(None);
        }
        let client = match (&self.cql_tls_cert, &self.cql_tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(SecurityArgsError::CqlHalfAPair),
        };
        Ok(Some(CqlTls {
            ca: self.cql_tls_ca.clone(),
            client,
            verify_hostname: self.cql_tls_verify_hostname,
        }))
    }
}

/// Where an activity secret's value comes from: `NAME=file:PATH` or `NAME=env:VARIABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretArg {
    pub name: String,
    pub source: SecretSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Env(String),
}

/// Parses `NAME=file:PATH` / `NAME=env:VARIABLE` (the value is read at start, not here).
pub fn parse_secret_arg(s: &str) -> Result<SecretArg, String> {
    let (name, source) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not `NAME=file:PATH` or `NAME=env:VARIABLE`"))?;
    let source = if let Some(path) = source.strip_prefix("file:") {
        SecretSource::File(PathBuf::from(path))
    } else if let Some(var) = source.strip_prefix("env:") {
        SecretSource::Env(var.to_owned())
    } else {
        return Err(format!(
            "secret `{name}`: the source must be `file:PATH` or `env:VARIABLE` (a value on the \
             command line would show in the process list)"
        ));
    };
    if !crate::wasm::secrets::valid_name(name) {
        return Err(format!(
            "secret name `{name}` must be an environment variable name (ASCII letters, digits, `_`)"
        ));
    }
    Ok(SecretArg {
        name: name.to_owned(),
        source,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum SecretArgError {
    #[error("secret `{name}`: cannot read {path}: {source}")]
    File {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("secret `{name}`: the environment variable `{variable}` is not set (or not UTF-8)")]
    Env { name: String, variable: String },
    #[error(transparent)]
    Invalid(#[from] crate::wasm::secrets::SecretError),
}

/// Reads every secret's value (files lose one trailing newline, as passwords do).
pub fn load_secrets(args: &[SecretArg]) -> Result<crate::wasm::secrets::Secrets, SecretArgError> {
    let mut secrets = crate::wasm::secrets::Secrets::default();
    for arg in args {
        let (value, origin) = match &arg.source {
            SecretSource::File(path) => {
                let value = read_secret_file(path).map_err(|source| SecretArgError::File {
                    name: arg.name.clone(),
                    path: path.clone(),
                    source,
                })?;
                (value, format!("file {}", path.display()))
            }
            SecretSource::Env(variable) => {
                let value = std::env::var(variable).map_err(|_| SecretArgError::Env {
                    name: arg.name.clone(),
                    variable: variable.clone(),
                })?;
                (
                    SecretString::from(value),
                    format!("environment variable {variable}"),
                )
            }
        };
        secrets.insert(&arg.name, value, &origin)?;
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn a_secret_comes_from_a_file_or_a_variable_never_from_the_command_line() {
        assert_eq!(
            parse_secret_arg("API_KEY=file:/run/secrets/api").unwrap(),
            SecretArg {
                name: "API_KEY".into(),
                source: SecretSource::File("/run/secrets/api".into())
            }
        );
        assert_eq!(
            parse_secret_arg("API_KEY=env:PAYMENTS_KEY").unwrap().source,
            SecretSource::Env("PAYMENTS_KEY".into())
        );
        assert!(
            parse_secret_arg("API_KEY=hunter2")
                .unwrap_err()
                .contains("process list")
        );
        assert!(parse_secret_arg("API-KEY=env:X").is_err());
        assert!(parse_secret_arg("API_KEY").is_err());
    }

    #[test]
    fn a_password_file_loses_its_trailing_newline_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("weir-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (content, expected) in [
            ("s3cret\n", "s3cret"),
            ("s3cret\r\n", "s3cret"),
            (" a b ", " a b "),
        ] {
            let path = dir.join("pw");
            std::fs::write(&path, content).unwrap();
            let read = read_password("test password", &path).unwrap();
            assert_eq!(read.expose_secret(), expected);
        }
        let missing = read_password("test password", &dir.join("absent")).unwrap_err();
        assert!(missing.to_string().contains("absent"), "{missing}");
    }
}
