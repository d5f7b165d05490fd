//! librdkafka client configuration shared by every Weir client: brokers, extra properties, and
//! the settings the design depends on (murmur2 partitioning, read_committed, manual commits).

use rdkafka::ClientConfig;

/// The compression codecs of Kafka. A client built without one of them cannot read a batch
/// another client compressed with it: librdkafka reports the batch as undecompressable and
/// fetches it again, forever (issue 11 item 8). Weir's build has all of them
/// (`rdkafka` feature `zstd`; gzip through libz; snappy and lz4 are built into librdkafka).
pub const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

/// First retry backoff of the transactional producers' requests (librdkafka's default is 100
/// ms; see [`KafkaConfig::transactional_producer`]). Later retries still back off
/// exponentially up to `retry.backoff.max.ms` (1 s).
pub const TRANSACTIONAL_RETRY_BACKOFF_MS: &str = "5";

/// The largest record Weir's producers send (librdkafka's `message.max.bytes`, set explicitly
/// to its default; within the broker's default `max.message.bytes`, 1 048 588). Every record
/// Weir makes is kept within it where it is made: input records are refused above
/// `--max-record-bytes` (which must leave room for the envelope of what they become), and a DLQ
/// copy keeps a prefix of a value too large for it.
pub const MAX_PRODUCED_RECORD_BYTES: usize = 1_000_000;

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

/// How to reach Kafka, plus extra librdkafka properties (`security.protocol`, SASL, …).
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// Extra librdkafka properties applied to every client, after Weir's own.
    pub properties: Vec<(String, String)>,
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
            properties: Vec::new(),
        }
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
        config.set("retry.backoff.ms", TRANSACTIONAL_RETRY_BACKOFF_MS);
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
            .set("enable.idempotence", "true")
            .set("message.max.bytes", MAX_PRODUCED_RECORD_BYTES.to_string());
    }

    /// Brokers, then the user's properties last so that they can override Weir's defaults.
    fn finish(&self, mut config: ClientConfig) -> ClientConfig {
        config.set("bootstrap.servers", &self.brokers);
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
}
