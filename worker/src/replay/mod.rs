//! The deterministic history engine: turns a workflow's host calls into history events,
//! matches them against recorded history on replay and detects nondeterminism. No I/O.
