//! Per-instance limits: the memory limiter installed in every store, and the mapping of
//! wasmtime's traps to the model's execution error kinds (out-of-fuel, out-of-memory, trap).

use wasmtime::{ResourceLimiter, Trap};

use crate::model::ExecutionErrorKind;

/// Tables are tiny in Rust components; this bound only stops a runaway `table.grow`.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Refuses memory growth beyond `limit` bytes by trapping with [`MemoryLimitExceeded`]
/// (rather than letting `memory.grow` return -1, which a Rust guest turns into an opaque
/// `unreachable` in its OOM handler), and keeps the sizes of the instance's linear memories
/// (wasmtime asks it for each memory's creation and every growth): what a parked run's
/// weight is estimated from.
#[derive(Clone, Debug)]
pub struct MemoryLimiter {
    limit: usize,
    /// The sum of the sizes of the store's linear memories, in bytes.
    memory_bytes: usize,
}

impl MemoryLimiter {
    pub fn new(limit: usize) -> Self {
        MemoryLimiter {
            limit,
            memory_bytes: 0,
        }
    }

    /// The sum of the sizes of the store's linear memories (accessible bytes, not
    /// necessarily touched ones).
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }
}

/// The trap error of a refused memory growth.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "memory limit of {limit} bytes exceeded: the instance asked to grow its memory to {desired} bytes"
)]
pub struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                limit: self.limit,
                desired,
            }));
        }
        self.memory_bytes = (self.memory_bytes + desired).saturating_sub(current);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// The execution error kind and a one-line reason for an error that ended a guest call.
pub fn describe_trap(e: &wasmtime::Error) -> (ExecutionErrorKind, String) {
    if let Some(m) = e.downcast_ref::<MemoryLimitExceeded>() {
        return (ExecutionErrorKind::OutOfMemory, m.to_string());
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => (
            ExecutionErrorKind::OutOfFuel,
            "all fuel consumed: the instance ran longer than its fuel limit allows".into(),
        ),
        // `Trap`'s own text starts with "wasm trap: ".
        Some(trap) => (ExecutionErrorKind::Trap, trap.to_string()),
        None => (ExecutionErrorKind::Trap, e.to_string()),
    }
}

/// Whether `e` says that the pooling allocator had no free slot (instances, memories, tables
/// or stacks): a limit of the host, never the guest's fault.
pub fn is_pool_full(e: &wasmtime::Error) -> bool {
    e.chain()
        .any(|cause| cause.is::<wasmtime::PoolConcurrencyLimitError>())
}
