//! Tests of the replay engine. Behaviour tests run each program through
//! [`harness::scenario`]: fresh (hot), cold with a rebuild at every block, and as a replay of
//! the recorded history, asserting identical events, outputs and outcomes.

mod blocking;
mod children;
mod closing;
mod guest;
mod harness;
mod join_sets;
mod nondeterminism;
mod prop;
mod values;
