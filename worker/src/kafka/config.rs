//! librdkafka client configuration shared by every Weir client: brokers, extra properties, and
//! the settings the design depends on (murmur2 partitioning, read_committed, manual commits).

use rdkafka::ClientConfig;

/// How to reach Kafka, plus extra librdkafka properties (`security.protocol`, SASL, …).
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// Extra librdkafka properties applied to every client, after Weir's own.
    pub properties: Vec<(String, String)>,
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
        config.set("transactional.id", transactional_id);
        self.finish(config)
    }

    /// A consumer in `group` that sees only committed records and never commits by itself:
    /// its offsets are committed inside the producer's transactions.
    pub fn consumer(&self, group: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest");
        self.finish(config)
    }

    fn producer_settings(config: &mut ClientConfig) {
        config
            .set("partitioner", "murmur2_random")
            .set("enable.idempotence", "true");
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
