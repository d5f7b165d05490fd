//! Tests of the replay engine.
