//! Kafka: client configuration, the Java-compatible murmur2 partitioner, topic administration
//! (`weir topology apply`), transactional batches, and the workflow worker (the partition
//! processor) with its store catch-up.

pub mod activity_worker;
pub mod admin;
pub mod catchup;
pub mod config;
pub mod dlq;
pub mod executions;
pub mod group;
pub mod materialiser;
pub mod partitioner;
pub mod transaction;
pub mod workflow_worker;

pub use config::KafkaConfig;
