//! librdkafka client configuration shared by every Weir client: brokers, extra properties, and
//! the settings the design depends on (murmur2 partitioning, read_committed, manual commits).

use rdkafka::ClientConfig;

/// The compression codecs of Kafka. A client built without one of them cannot read a batch
/// another client compressed with it: librdkafka reports the batch as undecompressable and
/// fetches it again, forever (issue 11 item 8). Weir's build has all of them
/// (`rdkafka` feature `zstd-pkg-config`; gzip through libz; snappy and lz4 are built into librdkafka).
pub const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

/// First retry backoff of the transactional producers' requests (librdkafka's default is 100
/// ms; see [`KafkaConfig::transactional_producer`]). Later retries back off exponentially ...
pub const TRANSACTIONAL_RETRY_BACKOFF_MS: &str = "5";

/// ... and at most this long (librdkafka's `retry.backoff.max.ms`, default 1 s). With
/// transactions back to back (no linger, [`PRODUCER_LINGER_MS`]) the next one's
/// `AddPartitionsToTxn` / `AddOffsetsToTxn` often meets the previous one still completing
/// (`CONCURRENT_TRANSACTIONS`), several times in a row: doubling from 5 ms up to 1 s made
/// some lone steps through a topic wait 100–200 ms (issue 38's bench, one run: p99 182 ms a
/// step). Runs of the same bench with 20, 100 and 1000 ms (`docs/benchmarks.md`): 20 retried
/// so often that the broker's CPU cut the throughput at 20 and 200 concurrent executions by a
/// fifth; 100 kept the lone steps' p99 at 18 ms and the throughput of 1000.
pub const TRANSACTIONAL_RETRY_BACKOFF_MAX_MS: &str = "100";

/// How long Weir's producers wait for more records before sending a batch (librdkafka's
/// `linger.ms`, whose default is 5 ms). Every producer of Weir sends what a batch of its loop
/// produced and then waits for it (the acknowledgements before a commit, the commit itself):
/// lingering only delayed each hop. Measured on the Kafka floor (`tests/benches/scale.rs`,
/// issue 38): a transactional hop 9.1 ms with 5, 3.5–3.8 ms with 0; a round of two
/// transactional hops 18.8 against 7.3–7.8 ms, and half the broker's CPU a round.
pub const PRODUCER_LINGER_MS: &str = "0";

/// The largest record Weir's producers send, set as librdkafka's `message.max.bytes` (the
/// rule is the wire table's: [`weir_core::wire::MAX_PRODUCED_RECORD_BYTES`]).
pub use weir_core::wire::MAX_PRODUCED_RECORD_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum CodecsError {
    #[error("cannot read librdkafka's builtin.features: {0}")]
    Features(rdkafka::error::KafkaError),
    #[error(
        "this build of librdkafka lacks the compression codec(s) {missing:?} (builtin.features = \
         `{features}`): records compressed with them could never be read"
    )]
    Missing {
        missing: Vec<&'static str>,
        features: String,
    },
}

/// Checks that librdkafka was built with every codec of [`CODECS`]; returns its
/// `builtin.features`.
pub fn check_codecs() -> Result<String, CodecsError> {
    let features = ClientConfig::new()
        .create_native_config()
        .and_then(|native| native.get("builtin.features"))
        .map_err(CodecsError::Features)?;
    let have: Vec<&str> = features.split(',').map(str::trim).collect();
    let missing: Vec<&'static str> = CODECS
        .iter()
        .copied()
        .filter(|codec| !have.contains(codec))
        .collect();
    if missing.is_empty() {
        Ok(features)
    } else {
        Err(CodecsError::Missing { missing, features })
    }
}

/// How to reach Kafka: brokers, how Weir's clients authenticate and encrypt, the namespace
/// their consumer groups live in, and extra librdkafka properties.
#[derive(Clone)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// TLS and SASL of every client (applied before `properties`).
    pub security: KafkaSecurity,
    /// Prefix of every consumer group and transactional id (`<namespace>.`), as of every topic,
    /// so that one set of prefixed ACLs covers a deployment (`docs/security.md`). Empty: none.
    pub namespace: String,
    /// Extra librdkafka properties applied to every client, after Weir's own.
    pub properties: Vec<(String, String)>,
}

/// `security.protocol` of librdkafka.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn property(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// The SASL mechanisms Weir's build of librdkafka has (GSSAPI is not built in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SaslMechanism {
    Plain,
    #[value(name = "scram-sha-256")]
    ScramSha256,
    #[default]
    #[value(name = "scram-sha-512")]
    ScramSha512,
}

impl SaslMechanism {
    fn property(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// A SASL login. The password is never printed (`Debug` shows `[REDACTED]`).
#[derive(Clone, Debug)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: secrecy::SecretString,
}

/// TLS files of a client, all PEM. Without `ca`, the system's trust store is used.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// CA certificates that sign the brokers' certificates.
    pub ca: Option<std::path::PathBuf>,
    /// Client certificate and its key, for brokers that require mutual TLS.
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

/// How every Weir client reaches the brokers: plaintext by default.
#[derive(Clone, Debug)]
pub struct KafkaSecurity {
    pub protocol: SecurityProtocol,
    pub sasl: Option<SaslLogin>,
    pub tls: TlsFiles,
    /// Check that a broker's certificate names the host it was reached at (on by default;
    /// librdkafka's `ssl.endpoint.identification.algorithm=https`).
    pub verify_hostname: bool,
}

impl Default for KafkaSecurity {
    fn default() -> Self {
        KafkaSecurity {
            protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: TlsFiles::default(),
            verify_hostname: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error(
        "--kafka-security-protocol {protocol:?} needs a SASL login (--kafka-sasl-username and a password)"
    )]
    MissingLogin { protocol: SecurityProtocol },
    #[error(
        "a SASL login is given, but --kafka-security-protocol {protocol:?} does not use SASL (use sasl-ssl or sasl-plaintext)"
    )]
    UnusedLogin { protocol: SecurityProtocol },
    #[error(
        "TLS files are given, but --kafka-security-protocol {protocol:?} does not use TLS (use ssl or sasl-ssl)"
    )]
    UnusedTls { protocol: SecurityProtocol },
    #[error(
        "a SASL login needs both --kafka-sasl-username and a password (--kafka-sasl-password-file or WEIR_KAFKA_SASL_PASSWORD)"
    )]
    HalfALogin,
    #[error(
        "a client certificate needs its key, and a key its certificate (--kafka-tls-cert, --kafka-tls-key)"
    )]
    HalfAPair,
    #[error("Kafka TLS file {path}: {source}")]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl KafkaSecurity {
    /// Checks that the settings fit together and that every file named can be read, so that a
    /// mistake is reported at start rather than as a client that never connects.
    pub fn validate(&self) -> Result<(), SecurityError> {
        let protocol = self.protocol;
        match (&self.sasl, protocol.uses_sasl()) {
            (None, true) => return Err(SecurityError::MissingLogin { protocol }),
            (Some(_), false) => return Err(SecurityError::UnusedLogin { protocol }),
            _ => {}
        }
        let tls = &self.tls;
        let files: Vec<&std::path::PathBuf> = [&tls.ca, &tls.cert, &tls.key]
            .into_iter()
            .flatten()
            .collect();
        if !files.is_empty() && !protocol.uses_tls() {
            return Err(SecurityError::UnusedTls { protocol });
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(SecurityError::HalfAPair);
        }
        for path in files {
            std::fs::metadata(path).map_err(|source| SecurityError::File {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn apply(&self, config: &mut ClientConfig) {
        use secrecy::ExposeSecret;
        config.set("security.protocol", self.protocol.property());
        if let Some(login) = &self.sasl {
            config
                .set("sasl.mechanism", login.mechanism.property())
                .set("sasl.username", &login.username)
                .set("sasl.password", login.password.expose_secret());
        }
        if self.protocol.uses_tls() {
            let path = |p: &std::path::PathBuf| p.to_string_lossy().into_owned();
            if let Some(ca) = &self.tls.ca {
                config.set("ssl.ca.location", path(ca));
            }
            if let (Some(cert), Some(key)) = (&self.tls.cert, &self.tls.key) {
                config
                    .set("ssl.certificate.location", path(cert))
                    .set("ssl.key.location", path(key));
            }
            let check = if self.verify_hostname {
                "https"
            } else {
                "none"
            };
            config.set("ssl.endpoint.identification.algorithm", check);
        }
    }
}

/// Keys of librdkafka properties whose values are credentials (librdkafka marks the same ones
/// sensitive and never logs them); [`KafkaConfig`]'s `Debug` hides their values.
fn is_sensitive(key: &str) -> bool {
    key.contains("password")
        || key.contains("secret")
        || key.ends_with(".key.pem")
        || key == "sasl.oauthbearer.config"
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_sensitive(k) {
                        "[REDACTED]"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("security", &self.security)
            .field("namespace", &self.namespace)
            .field("properties", &properties)
            .finish()
    }
}

/// How a consumer is a member of its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberSettings {
    /// `session.timeout.ms`: how long a member that stopped heartbeating (killed, frozen) keeps
    /// its partitions. `None`: librdkafka's default.
    pub session_timeout: Option<std::time::Duration>,
    /// `group.instance.id` (static membership, KIP-345): a member that comes back with the same
    /// id within its session gets its partitions back without a rebalance. Must be unique
    /// among the live members of the group. `None`: a dynamic member.
    pub static_instance_id: Option<String>,
}

impl KafkaConfig {
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            security: KafkaSecurity::default(),
            namespace: String::new(),
            properties: Vec::new(),
        }
    }

    /// `name` in this deployment's namespace: what every consumer group and transactional id
    /// of Weir is called, so that ACLs on the prefix `<namespace>.` cover them all.
    pub fn group_id(&self, name: &str) -> String {
        crate::topology::namespaced(&self.namespace, name)
    }

    /// A plain client (admin, metadata): brokers and the user's extra properties.
    pub fn client(&self) -> ClientConfig {
        self.finish(ClientConfig::new())
    }

    /// A producer that partitions keys as the Java client does (see [`super::partitioner`]).
    pub fn producer(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        Self::producer_settings(&mut config);
        self.finish(config)
    }

    /// A transactional producer (EOS v2: one per worker instance, fenced by its transactional id).
    pub fn transactional_producer(&self, transactional_id: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        Self::producer_settings(&mut config);
        // Under load batches commit back to back (group commit), and a transaction's
        // `AddOffsetsToTxn` often meets the previous one still completing at the coordinator
        // (CONCURRENT_TRANSACTIONS); librdkafka retries it after `retry.backoff.ms`, 100 ms by
        // default (growing to `retry.backoff.max.ms`): a 100 ms stall in every other batch
        // (issue 12's bench: 79 steps/s at 20 concurrent executions, p50 236 ms a step).
        config
            .set("retry.backoff.ms", TRANSACTIONAL_RETRY_BACKOFF_MS)
            .set("retry.backoff.max.ms", TRANSACTIONAL_RETRY_BACKOFF_MAX_MS);
        config.set("transactional.id", transactional_id);
        self.finish(config)
    }

    /// A consumer in `group` that sees only committed records and never commits by itself:
    /// its offsets are committed inside the producer's transactions.
    pub fn consumer(&self, group: &str) -> ClientConfig {
        self.member(group, &MemberSettings::default())
    }

    /// A consumer in `group` (see [`consumer`](Self::consumer)) with `membership`'s session
    /// timeout and, when it has one, its static identity (`group.instance.id`, KIP-345).
    pub fn member(&self, group: &str, membership: &MemberSettings) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest");
        if let Some(session) = membership.session_timeout {
            let millis = session.as_millis().max(1);
            // A third of the session (librdkafka's default ratio), at most its default 3 s.
            let heartbeat = (millis / 3).clamp(1, 3000);
            config
                .set("session.timeout.ms", millis.to_string())
                .set("heartbeat.interval.ms", heartbeat.to_string());
        }
        if let Some(instance) = &membership.static_instance_id {
            config.set("group.instance.id", instance);
        }
        self.finish(config)
    }

    fn producer_settings(config: &mut ClientConfig) {
        config
            .set("partitioner", "murmur2_random")
            .set("linger.ms", PRODUCER_LINGER_MS)
            // As the Java client does (TCP_NODELAY): a small request (a commit, an offset) is
            // not held back behind an unacknowledged one.
            .set("socket.nagle.disable", "true")
            .set("enable.idempotence", "true")
            .set("message.max.bytes", MAX_PRODUCED_RECORD_BYTES.to_string());
    }

    /// Brokers and security, then the user's properties last so that they can override Weir's
    /// defaults.
    fn finish(&self, mut config: ClientConfig) -> ClientConfig {
        config.set("bootstrap.servers", &self.brokers);
        self.security.apply(&mut config);
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 11 item 8: without the `zstd` feature, librdkafka cannot read zstd batches.
    #[test]
    fn librdkafka_is_built_with_every_kafka_codec() {
        let features = check_codecs().unwrap_or_else(|e| panic!("{e}"));
        for codec in CODECS {
            assert!(
                features.split(',').any(|f| f == codec),
                "{codec}: {features}"
            );
        }
    }

    #[test]
    fn a_member_has_the_session_timeout_and_static_identity_it_is_given() {
        let kafka = KafkaConfig::new("localhost:9092");
        let dynamic = kafka.consumer("g");
        assert_eq!(dynamic.get("group.instance.id"), None);
        assert_eq!(dynamic.get("session.timeout.ms"), None);
        let member = kafka.member(
            "g",
            &MemberSettings {
                session_timeout: Some(std::time::Duration::from_secs(6)),
                static_instance_id: Some("worker-0".into()),
            },
        );
        assert_eq!(member.get("group.instance.id"), Some("worker-0"));
        assert_eq!(member.get("session.timeout.ms"), Some("6000"));
        assert_eq!(member.get("heartbeat.interval.ms"), Some("2000"));
        // The user's properties still win.
        let mut kafka = kafka;
        kafka
            .properties
            .push(("heartbeat.interval.ms".into(), "500".into()));
        let member = kafka.member("g", &MemberSettings::default());
        assert_eq!(member.get("heartbeat.interval.ms"), Some("500"));
    }

    /// Issue 38: every producer sends at once (no linger, no Nagle), a transactional one
    /// retries a concurrent transaction within 20 ms; unless the user says otherwise.
    #[test]
    fn producers_do_not_linger_unless_told_to() {
        let mut kafka = KafkaConfig::new("broker:9092");
        for config in [kafka.producer(), kafka.transactional_producer("t")] {
            assert_eq!(config.get("linger.ms"), Some(PRODUCER_LINGER_MS));
            assert_eq!(config.get("socket.nagle.disable"), Some("true"));
        }
        let transactional = kafka.transactional_producer("t");
        assert_eq!(
            transactional.get("retry.backoff.max.ms"),
            Some(TRANSACTIONAL_RETRY_BACKOFF_MAX_MS)
        );
        kafka.properties.push(("linger.ms".into(), "20".into()));
        assert_eq!(kafka.producer().get("linger.ms"), Some("20"));
    }

    #[test]
    fn every_client_gets_the_security_settings_and_debug_never_shows_a_password() {
        let mut kafka = KafkaConfig::new("broker:9093");
        kafka.security = KafkaSecurity {
            protocol: SecurityProtocol::SaslSsl,
            sasl: Some(SaslLogin {
                mechanism: SaslMechanism::ScramSha512,
                username: "worker".into(),
                password: secrecy::SecretString::from("pw-123".to_owned()),
            }),
            tls: TlsFiles {
                ca: Some("/etc/ca.pem".into()),
                ..TlsFiles::default()
            },
            verify_hostname: true,
        };
        kafka
            .properties
            .push(("ssl.key.password".into(), "kp-456".into()));
        for config in [
            kafka.client(),
            kafka.producer(),
            kafka.transactional_producer("t"),
            kafka.consumer("g"),
        ] {
            assert_eq!(config.get("security.protocol"), Some("sasl_ssl"));
            assert_eq!(config.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
            assert_eq!(config.get("sasl.username"), Some("worker"));
            assert_eq!(config.get("sasl.password"), Some("pw-123"));
            assert_eq!(config.get("ssl.ca.location"), Some("/etc/ca.pem"));
            assert_eq!(
                config.get("ssl.endpoint.identification.algorithm"),
                Some("https")
            );
        }
        let shown = format!("{kafka:?}");
        assert!(
            !shown.contains("pw-123") && !shown.contains("kp-456"),
            "{shown}"
        );
        assert!(shown.contains("worker"), "{shown}");
    }

    #[test]
    fn security_settings_that_do_not_fit_together_are_refused() {
        let login = || SaslLogin {
            mechanism: SaslMechanism::Plain,
            username: "u".into(),
            password: secrecy::SecretString::from("p".to_owned()),
        };
        let with = |protocol, sasl: Option<SaslLogin>, ca: Option<&str>| KafkaSecurity {
            protocol,
            sasl,
            tls: TlsFiles {
                ca: ca.map(Into::into),
                ..TlsFiles::default()
            },
            verify_hostname: true,
        };
        assert!(matches!(
            with(SecurityProtocol::SaslSsl, None, None).validate(),
            Err(SecurityError::MissingLogin { .. })
        ));
        assert!(matches!(
            with(SecurityProtocol::Ssl, Some(login()), None).validate(),
            Err(SecurityError::UnusedLogin { .. })
        ));
        assert!(matches!(
            with(SecurityProtocol::SaslPlaintext, Some(login()), Some("/x")).validate(),
            Err(SecurityError::UnusedTls { .. })
        ));
        assert!(matches!(
            with(SecurityProtocol::Ssl, None, Some("/nonexistent/ca.pem")).validate(),
            Err(SecurityError::File { .. })
        ));
        assert!(
            with(SecurityProtocol::SaslPlaintext, Some(login()), None)
                .validate()
                .is_ok()
        );
        assert!(KafkaSecurity::default().validate().is_ok());
        assert_eq!(
            KafkaConfig::new("b").client().get("security.protocol"),
            Some("plaintext")
        );
    }
}
