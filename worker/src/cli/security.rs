//! The flags (and environment variables) of authentication and encryption towards Kafka, the
//! CQL store and the schema registry, shared by the subcommands that reach them. Passwords come from a file or the environment
//! (a flag works too, but shows in the process list); none is ever printed: clap hides their
//! environment values, and they are held as [`SecretString`] (no `Debug` of the value).

use std::path::{Path, PathBuf};

use clap::{ArgAction, Args};
use secrecy::SecretString;

use crate::codec::{HttpRegistry, RegistryError};
use crate::kafka::config::{KafkaSecurity, SaslLogin, SaslMechanism, SecurityProtocol, TlsFiles};
use crate::store::{CqlLogin, CqlTls};
use crate::tls::ClientTls;

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

/// The schema registry: where it is, HTTP basic authentication and TLS.
#[derive(Debug, Clone, Args)]
pub struct SchemaRegistryArgs {
    /// Confluent-compatible schema registry, `http://` or `https://`; without it records use
    /// Avro single-object encoding.
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY")]
    pub schema_registry: Option<String>,
    /// User name for the registry's HTTP basic authentication.
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY_USERNAME")]
    pub schema_registry_username: Option<String>,
    /// File holding the registry password (a trailing newline is ignored).
    #[arg(
        long,
        env = "WEIR_SCHEMA_REGISTRY_PASSWORD_FILE",
        conflicts_with = "schema_registry_password"
    )]
    pub schema_registry_password_file: Option<PathBuf>,
    /// The registry password itself; prefer the file or the environment variable.
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY_PASSWORD", hide_env_values = true, value_parser = secret)]
    pub schema_registry_password: Option<SecretString>,
    /// PEM file of the CAs that sign an `https://` registry's certificate (default: the
    /// Mozilla roots).
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY_TLS_CA")]
    pub schema_registry_tls_ca: Option<PathBuf>,
    /// PEM client certificate, for a registry that asks for one.
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY_TLS_CERT")]
    pub schema_registry_tls_cert: Option<PathBuf>,
    /// PEM key (PKCS#8, PKCS#1 or SEC1) of the client certificate.
    #[arg(long, env = "WEIR_SCHEMA_REGISTRY_TLS_KEY")]
    pub schema_registry_tls_key: Option<PathBuf>,
    /// Check that the registry's certificate names the host of its URL.
    #[arg(
        long,
        env = "WEIR_SCHEMA_REGISTRY_TLS_VERIFY_HOSTNAME",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub schema_registry_tls_verify_hostname: bool,
}

impl SchemaRegistryArgs {
    /// The registry client these flags describe (`None`: no registry). A TLS flag for an
    /// `http://` URL, half a login or half a key pair is an error, never ignored.
    pub fn registry(&self) -> Result<Option<HttpRegistry>, SecurityArgsError> {
        let Some(url) = &self.schema_registry else {
            return match self.is_set() {
                true => Err(SecurityArgsError::RegistryFlagsWithoutUrl),
                false => Ok(None),
            };
        };
        let password = password(
            "schema registry password",
            &self.schema_registry_password_file,
            &self.schema_registry_password,
        )?;
        let client = match (
            &self.schema_registry_tls_cert,
            &self.schema_registry_tls_key,
        ) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(SecurityArgsError::RegistryHalfAPair),
        };
        let tls = (self.schema_registry_tls_ca.is_some()
            || client.is_some()
            || !self.schema_registry_tls_verify_hostname)
            .then(|| ClientTls {
                ca: self.schema_registry_tls_ca.clone(),
                client,
                verify_hostname: self.schema_registry_tls_verify_hostname,
            });
        let registry = HttpRegistry::with_tls(url, tls.as_ref())?;
        match (&self.schema_registry_username, password) {
            (Some(user), Some(password)) => Ok(Some(registry.with_basic_auth(user, password))),
            (None, None) => Ok(Some(registry)),
            (None, Some(_)) => Err(SecurityArgsError::RegistryPasswordWithoutUser),
            (Some(user), None) => Err(SecurityArgsError::RegistryUserWithoutPassword(user.clone())),
        }
    }

    /// Whether any flag besides the URL is given.
    fn is_set(&self) -> bool {
        self.schema_registry_username.is_some()
            || self.schema_registry_password_file.is_some()
            || self.schema_registry_password.is_some()
            || self.schema_registry_tls_ca.is_some()
            || self.schema_registry_tls_cert.is_some()
            || self.schema_registry_tls_key.is_some()
            || !self.schema_registry_tls_verify_hostname
    }
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
    #[error("schema registry flags are given without --schema-registry")]
    RegistryFlagsWithoutUrl,
    #[error("a schema registry password is given without --schema-registry-username")]
    RegistryPasswordWithoutUser,
    #[error(
        "--schema-registry-username `{0}` is given without a password \
         (--schema-registry-password-file or WEIR_SCHEMA_REGISTRY_PASSWORD)"
    )]
    RegistryUserWithoutPassword(String),
    #[error(
        "a schema registry client certificate needs its key, and a key its certificate \
         (--schema-registry-tls-cert, --schema-registry-tls-key)"
    )]
    RegistryHalfAPair,
    #[error("{0}")]
    Registry(#[from] RegistryError),
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

    /// The registry's flags as `weir worker` parses them.
    fn registry_args(args: &[&str]) -> SchemaRegistryArgs {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            registry: SchemaRegistryArgs,
        }
        let parsed = <Command as clap::Parser>::try_parse_from(
            std::iter::once("weir").chain(args.iter().copied()),
        );
        parsed.expect("the flags parse").registry
    }

    /// Half a setting is an error that names what is missing, never a registry reached
    /// without the login or the TLS the operator asked for.
    #[test]
    fn registry_flags_are_whole_or_refused() {
        let refused = |args: &[&str]| registry_args(args).registry().err().map(|e| e.to_string());
        assert!(registry_args(&[]).registry().unwrap().is_none());
        let url = "https://registry.internal:8081";
        assert!(
            registry_args(&["--schema-registry", url])
                .registry()
                .unwrap()
                .is_some()
        );
        assert!(
            refused(&["--schema-registry-username", "weir"])
                .unwrap()
                .contains("without --schema-registry")
        );
        assert!(
            refused(&[
                "--schema-registry",
                url,
                "--schema-registry-username",
                "weir"
            ])
            .unwrap()
            .contains("without a password")
        );
        assert!(
            refused(&["--schema-registry", url, "--schema-registry-password", "p"])
                .unwrap()
                .contains("without --schema-registry-username")
        );
        assert!(
            refused(&[
                "--schema-registry",
                url,
                "--schema-registry-tls-cert",
                "c.pem"
            ])
            .unwrap()
            .contains("needs its key")
        );
        let plain = refused(&[
            "--schema-registry",
            "http://registry.internal:8081",
            "--schema-registry-tls-verify-hostname",
            "false",
        ])
        .unwrap();
        assert!(plain.contains("not https://"), "{plain}");
        let missing_ca = refused(&[
            "--schema-registry",
            url,
            "--schema-registry-tls-ca",
            "/nonexistent/ca.pem",
        ])
        .unwrap();
        assert!(missing_ca.contains("/nonexistent/ca.pem"), "{missing_ca}");
    }
}
