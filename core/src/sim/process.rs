//! Where a simulated process (a workflow worker, an activity worker) stands.

use super::cluster::SimTime;

/// Where a process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Running,
    /// SIGSTOP'd until then: neither its loop nor its materialiser runs, it sends no
    /// heartbeats.
    Frozen {
        until: SimTime,
    },
    /// Exited or killed.
    Dead,
}
