//! Kafka: client configuration, the Java-compatible murmur2 partitioner, topic administration
//! (`weir topology apply`), transactional batches, and the workflow worker (the partition
//! processor) with its store catch-up.

mod activity_tasks;
pub mod activity_worker;
pub mod admin;
pub mod answers;
pub mod batches;
pub mod config;
pub mod control;
pub mod correlations;
pub mod dlq;
pub mod encode;
pub mod group;
pub mod headers;
pub mod history_reader;
pub mod lag;
pub mod materialiser;
pub mod member;
pub mod outgoing;
pub mod producer;
pub mod query_client;
pub mod recovery;
pub mod registry_hold;
pub mod schedules;
pub mod submit;
pub mod trace_headers;
/// The murmur2 partitioner lives in the core (the processor needs it); re-exported here.
pub use weir_core::partitioner;
pub mod transaction;
pub mod trigger_worker;
pub mod unfetchable;
pub mod workflow_worker;

pub use config::KafkaConfig;
