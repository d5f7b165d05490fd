//! Kafka: client configuration, the Java-compatible murmur2 partitioner and topic
//! administration (`weir topology apply`). The partition processor joins here later.

pub mod admin;
pub mod config;
pub mod partitioner;
pub mod transaction;

pub use config::KafkaConfig;
