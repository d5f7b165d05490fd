//! The wasmtime [`Engine`] shared by every component of a host, and the on-disk cache of
//! compiled components.
//!
//! - Fuel is on: a workflow or activity that loops without calling the host is stopped when
//!   its fuel runs out, and stores yield to the async executor every
//!   [`EngineConfig::fuel_yield_interval`] units, so one busy instance never starves the
//!   others on the same thread. Fuel (unlike epochs) is deterministic, so the same code on the
//!   same history fails at the same point on every replay.
//! - The pooling allocator keeps memories, tables and stacks pre-reserved, which with
//!   `InstancePre` is what makes instantiation cost microseconds.
//! - Compiling a component takes tens of milliseconds; [`WasmEngine::load`] keeps the
//!   serialized artifact in a directory, keyed by the SHA-256 of the component bytes and the
//!   engine's compatibility hash (wasmtime version + settings), so a restart loads it in well
//!   under a millisecond instead of recompiling.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::options;

/// Settings of the engine. Per-component limits are in the registry.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Instances the pooling allocator can hold at once (parked workflows count).
    pub max_instances: u32,
    /// Upper bound of one linear memory in the pool; per-component memory limits are
    /// enforced below it by the store limiter.
    pub max_memory_bytes: usize,
    /// Fuel units between two yields to the async executor.
    pub fuel_yield_interval: u64,
}

/// The defaults of `weir worker`'s flags ([`crate::options`]): `--compiled-dir` and
/// `--max-instances`.
impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: Some(PathBuf::from(options::DEFAULT_COMPILED_DIR)),
            max_instances: options::DEFAULT_MAX_INSTANCES,
            max_memory_bytes: 256 << 20,
            fuel_yield_interval: 100_000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot configure the wasmtime engine: {0}")]
    Config(String),
    #[error("cannot read component {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Compile { path: PathBuf, reason: String },
}

/// How a component was obtained, for logs and tests of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadedFrom {
    /// Deserialized from the cache directory.
    Cache,
    /// Compiled now (and written to the cache if there is one).
    Compiled,
}

/// The engine and its compile cache.
#[derive(Clone)]
pub struct WasmEngine {
    engine: Engine,
    config: EngineConfig,
    /// Hex digest of the engine's compatibility hash; part of every cache key.
    engine_key: String,
}

impl WasmEngine {
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(config.max_instances)
            // A Rust component has a few core instances and usually one memory. A memory slot
            // reserves ~4.3 GiB of address space: an eighth of headroom, not twice as many, so
            // that a pool as large as `MAX_POOLED_INSTANCES` fits a process.
            .total_core_instances(config.max_instances.saturating_mul(4))
            .total_memories(
                config
                    .max_instances
                    .saturating_add(config.max_instances / 8),
            )
            // Tables, though, come one per core module that defines one: a component whose
            // imports need lowering has a shim module with a table of its own (`steps`: two
            // tables, one memory). With 1.125 tables an instance, a pool parked half its
            // instances' worth of such runs, below what admission counted on. A table slot
            // reserves only `table_elements` pointers (160 KiB), so four per instance.
            .total_tables(config.max_instances.saturating_mul(4))
            .total_stacks(config.max_instances)
            .max_memory_size(config.max_memory_bytes)
            // Keep the first pages of a released slot mapped: the next instance reuses them
            // without page faults (the pool zeroes them either way).
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            // Reset only the pages an instance actually touched (Linux >= 6.7; ignored
            // elsewhere) instead of memsetting the whole resident 1 MiB on every release:
            // that memset was ~20% of a short workflow run.
            .pagemap_scan(Enabled::Auto);
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            // Weir's hosts use no component-model-async API. With concurrency support on (the
            // default), every Store carries the concurrent task state and, when dropped,
            // disposes of its idle fibers by resuming each with an error, capturing a
            // backtrace when RUST_BACKTRACE is set (~10% of a short run's CPU).
            .concurrency_support(false)
            .consume_fuel(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(|e| EngineError::Config(format!("{e:#}")))?;
        let mut hasher = StableHasher::default();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());
        Ok(WasmEngine {
            engine,
            config,
            engine_key,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Loads the component at `path`: from the cache when its artifact is there, else by
    /// compiling it (and caching the result).
    pub fn load(&self, path: &Path) -> Result<(Component, LoadedFrom), EngineError> {
        self.load_bytes(path, &read_component(path)?)
    }

    /// As [`WasmEngine::load`], from bytes already read; `path` is for messages.
    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Component, LoadedFrom), EngineError> {
        let cached = self.cache_path(bytes);
        // Loads of one artifact in this process take turns: the first compiles and caches
        // it, the others then read it (an interpreted guest takes seconds to compile).
        let turn = cached.as_deref().map(artifact_turn);
        let _turn = turn
            .as_ref()
            .map(|t| t.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if let Some(cached) = &cached
            && cached.exists()
        {
            // SAFETY: the file was written by `Component::serialize` of an engine with the
            // same compatibility hash (it is in the file name), into a directory this host
            // owns; wasmtime also checks the header and refuses incompatible artifacts.
            match unsafe { Component::deserialize_file(&self.engine, cached) } {
                Ok(component) => return Ok((component, LoadedFrom::Cache)),
                Err(e) => {
                    // A truncated or foreign file: recompile and overwrite it.
                    tracing::warn!(path = %cached.display(), error = %e, "ignoring a bad compiled artifact");
                }
            }
        }
        let component = Component::new(&self.engine, bytes).map_err(|e| EngineError::Compile {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        })?;
        if let Some(cached) = &cached {
            // The cache is an optimisation: failing to write it must not fail the load.
            if let Err(e) = write_atomically(cached, &component) {
                tracing::warn!(path = %cached.display(), error = %e, "cannot cache a compiled component");
            }
        }
        Ok((component, LoadedFrom::Compiled))
    }

    fn cache_path(&self, bytes: &[u8]) -> Option<PathBuf> {
        let dir = self.config.cache_dir.as_ref()?;
        let hex = sha256_hex(bytes);
        Some(dir.join(format!("{hex}-{}.cwasm", self.engine_key)))
    }
}

/// The lock that loads of the compiled artifact at `path` take in turn.
fn artifact_turn(path: &Path) -> Arc<Mutex<()>> {
    static TURNS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    TURNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(path.to_owned())
        .or_default()
        .clone()
}

/// The bytes of the component file at `path`.
pub fn read_component(path: &Path) -> Result<Vec<u8>, EngineError> {
    std::fs::read(path).map_err(|source| EngineError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A component file's content digest as `components.toml` records it: `sha256:<hex>` (the
/// hex is what `sha256sum` prints).
pub fn component_digest(bytes: &[u8]) -> String {
    format!("{DIGEST_PREFIX}{}", sha256_hex(bytes))
}

/// The prefix of [`component_digest`].
pub const DIGEST_PREFIX: &str = "sha256:";

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes to a temporary file and renames it, so a concurrent reader (another worker on the
/// same machine) never sees a partial artifact.
fn write_atomically(path: &Path, component: &Component) -> std::io::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// FNV-1a: stable across processes and Rust versions, unlike `DefaultHasher`, which the
/// cache key needs (the artifact must be found again after a restart).
struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
