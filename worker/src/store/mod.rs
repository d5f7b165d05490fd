//! The CQL store (ScyllaDB / Apache Cassandra).
