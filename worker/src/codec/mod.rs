//! Wire formats of the records on every topic (Avro; Confluent or single-object encoding).
