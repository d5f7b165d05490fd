//! Kafka: clients, murmur2 partitioner, topic administration.
