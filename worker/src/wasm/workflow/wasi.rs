//! The deterministic WASI of workflow components (`docs/design/deterministic-wasi.md`).
//!
//! Interpreted guests (StarlingMonkey under `componentize-js`, CPython under
//! `componentize-py`) import `wasi:clocks`, `wasi:random`, `wasi:cli`, `wasi:io` and probe
//! `wasi:filesystem` and `wasi:sockets`, whatever the workflow itself does. A workflow gets
//! them here, such that nothing it can read differs between a run, a cold rebuild and a
//! replay from the journal, and nothing it reads is recorded (a build that reads the clock
//! replays a history recorded by one that never does):
//! - `wasi:clocks`: the execution's recorded time, from the replay engine
//!   ([`Replay::recorded_time`], the rule is in `core/src/replay/guest.rs`). Time stands
//!   still within a step, so a pollable of the monotonic clock is ready at once: a workflow
//!   waits with `sleep`, which is durable, never by holding its partition.
//! - `wasi:random`: the engine's entropy stream of the current step ([`Replay::entropy_u64`]).
//! - `wasi:cli`: no environment, no arguments, empty stdin; stdout and stderr are lines of
//!   the execution's log (`tracing`, target `weir::workflow::stdout` / `…::stderr`, inside the
//!   run's span), not logged again while recorded events replay. `exit` ends the run as a trap.
//! - `wasi:filesystem`: no preopened directory: every path is refused.
//! - `wasi:sockets`: TCP, UDP and name lookups are refused. Reaching the outside is an
//!   activity's job.
//!
//! Other WASI interfaces (`wasi:http`, …) are not linked: a workflow importing one fails to
//! load with an error naming it. A workflow importing no WASI pays nothing: its instances never
//! build the state below.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliCtxView};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sockets};
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult, subscribe};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsCtxView};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::replay::Replay;

use super::WorkflowState;

/// The WASI packages a workflow may import (any 0.2 version up to what wasmtime implements,
/// 0.2.12): every interface of them is linked.
const PROVIDED: &[&str] = &[
    "wasi:io/",
    "wasi:clocks/wall-clock@",
    "wasi:clocks/monotonic-clock@",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

/// The most bytes one `get-random-bytes` may ask for; more traps (an interpreter seeds itself
/// with a few dozen).
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// The longest line of stdout or stderr logged as one; a longer one is logged in pieces.
const MAX_LINE: usize = 16 << 10;

/// Whether the workflow host provides WASI import `import` (`wasi:…/…@0.2.x`).
pub(crate) fn provides(import: &str) -> bool {
    PROVIDED.iter().any(|p| import.starts_with(p))
}

/// The WASI state of one instance, built at its first WASI call.
pub(crate) struct GuestWasi {
    ctx: WasiCtx,
    table: ResourceTable,
    /// Whether recorded events are being replayed, as of the last WASI call: stdout and
    /// stderr are not logged then (the run that recorded them logged them).
    replaying: Arc<AtomicBool>,
}

impl GuestWasi {
    fn new() -> Self {
        let replaying = Arc::new(AtomicBool::new(false));
        let output = |stream| GuestOutput {
            stream,
            replaying: replaying.clone(),
        };
        let mut builder = WasiCtxBuilder::new();
        // The context's own clocks and random generators are never linked (ours below are);
        // no environment, arguments, preopened directories or network.
        builder
            .stdout(output(Stream::Stdout))
            .stderr(output(Stream::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        GuestWasi {
            ctx: builder.build(),
            table: ResourceTable::new(),
            replaying,
        }
    }
}

impl WorkflowState {
    /// The engine and the instance's WASI state (built now if this is its first WASI call).
    fn wasi(&mut self) -> (&mut Replay, &mut GuestWasi) {
        let wasi = self.wasi.get_or_insert_with(|| Box::new(GuestWasi::new()));
        wasi.replaying
            .store(self.replay.is_replaying(), Ordering::Relaxed);
        (&mut self.replay, wasi)
    }
}

/// Links every interface of [`PROVIDED`] (call it once, for a component importing any).
pub(crate) fn add_to_linker(l: &mut Linker<WorkflowState>) -> wasmtime::Result<()> {
    use wasmtime_wasi_io::bindings::wasi::io;
    io::error::add_to_linker::<_, Table>(l, |s| &mut s.wasi().1.table)?;
    io::poll::add_to_linker::<_, Table>(l, |s| &mut s.wasi().1.table)?;
    io::streams::add_to_linker::<_, Table>(l, |s| &mut s.wasi().1.table)?;

    clocks::wall_clock::add_to_linker::<_, Clocks>(l, clocks_view)?;
    clocks::monotonic_clock::add_to_linker::<_, Clocks>(l, clocks_view)?;
    random::random::add_to_linker::<_, Entropy>(l, |s| EntropyView(&mut s.replay))?;
    random::insecure::add_to_linker::<_, Entropy>(l, |s| EntropyView(&mut s.replay))?;
    random::insecure_seed::add_to_linker::<_, Entropy>(l, |s| EntropyView(&mut s.replay))?;

    cli::exit::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::environment::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::stdin::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::stdout::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::stderr::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::terminal_input::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::terminal_output::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::terminal_stdin::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::terminal_stdout::add_to_linker::<_, WasiCli>(l, cli_view)?;
    cli::terminal_stderr::add_to_linker::<_, WasiCli>(l, cli_view)?;

    filesystem::types::add_to_linker::<_, WasiFilesystem>(l, filesystem_view)?;
    filesystem::preopens::add_to_linker::<_, WasiFilesystem>(l, filesystem_view)?;

    sockets::tcp::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    sockets::tcp_create_socket::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    sockets::udp::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    sockets::udp_create_socket::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    sockets::instance_network::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    sockets::network::add_to_linker::<_, WasiSockets>(l, &Default::default(), sockets_view)?;
    sockets::ip_name_lookup::add_to_linker::<_, WasiSockets>(l, sockets_view)?;
    Ok(())
}

fn cli_view(s: &mut WorkflowState) -> WasiCliCtxView<'_> {
    let (_, wasi) = s.wasi();
    WasiCliCtxView {
        ctx: wasi.ctx.cli(),
        table: &mut wasi.table,
    }
}

fn filesystem_view(s: &mut WorkflowState) -> WasiFilesystemCtxView<'_> {
    let (_, wasi) = s.wasi();
    WasiFilesystemCtxView {
        ctx: wasi.ctx.filesystem(),
        table: &mut wasi.table,
    }
}

fn sockets_view(s: &mut WorkflowState) -> WasiSocketsCtxView<'_> {
    let (_, wasi) = s.wasi();
    WasiSocketsCtxView {
        ctx: wasi.ctx.sockets(),
        table: &mut wasi.table,
    }
}

fn clocks_view(s: &mut WorkflowState) -> ClocksView<'_> {
    let (replay, wasi) = s.wasi();
    ClocksView {
        replay,
        table: &mut wasi.table,
    }
}

struct Table;

impl HasData for Table {
    type Data<'a> = &'a mut ResourceTable;
}

// ------------------------------------------------------------------------------- clocks

struct Clocks;

impl HasData for Clocks {
    type Data<'a> = ClocksView<'a>;
}

struct ClocksView<'a> {
    replay: &'a Replay,
    table: &'a mut ResourceTable,
}

impl ClocksView<'_> {
    /// A pollable that is ready at once: time does not pass within a step.
    fn ready(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.table.push(Ready)?;
        subscribe(self.table, ready)
    }
}

impl clocks::wall_clock::Host for ClocksView<'_> {
    fn now(&mut self) -> wasmtime::Result<clocks::wall_clock::Datetime> {
        let now = self.replay.recorded_time();
        Ok(clocks::wall_clock::Datetime {
            // Before 1970 cannot be recorded (creation times are Kafka timestamps).
            seconds: u64::try_from(now.timestamp()).unwrap_or(0),
            nanoseconds: now.timestamp_subsec_nanos(),
        })
    }

    fn resolution(&mut self) -> wasmtime::Result<clocks::wall_clock::Datetime> {
        Ok(clocks::wall_clock::Datetime {
            seconds: 0,
            nanoseconds: 1_000,
        })
    }
}

impl clocks::monotonic_clock::Host for ClocksView<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(self.replay.recorded_monotonic_nanos())
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(1_000)
    }

    fn subscribe_instant(&mut self, _when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready()
    }

    fn subscribe_duration(&mut self, _duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready()
    }
}

/// Ready at once.
struct Ready;

#[async_trait::async_trait]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

// ------------------------------------------------------------------------------- random

struct Entropy;

impl HasData for Entropy {
    type Data<'a> = EntropyView<'a>;
}

struct EntropyView<'a>(&'a mut Replay);

impl EntropyView<'_> {
    fn bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        if len > MAX_RANDOM_BYTES {
            wasmtime::bail!(
                "the workflow asked for {len} random bytes at once; at most {MAX_RANDOM_BYTES} are given"
            );
        }
        let mut bytes = vec![0; len as usize];
        self.0.fill_entropy(&mut bytes);
        Ok(bytes)
    }
}

impl random::random::Host for EntropyView<'_> {
    fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.bytes(len)
    }

    fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.0.entropy_u64())
    }
}

impl random::insecure::Host for EntropyView<'_> {
    fn get_insecure_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.bytes(len)
    }

    fn get_insecure_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.0.entropy_u64())
    }
}

impl random::insecure_seed::Host for EntropyView<'_> {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        Ok((self.0.entropy_u64(), self.0.entropy_u64()))
    }
}

// ------------------------------------------------------------------------ stdout, stderr

#[derive(Clone, Copy, Debug)]
enum Stream {
    Stdout,
    Stderr,
}

/// Stdout or stderr of a workflow: each line is a line of the execution's log.
struct GuestOutput {
    stream: Stream,
    replaying: Arc<AtomicBool>,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.lines())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.lines())
    }
}

impl GuestOutput {
    fn lines(&self) -> Lines {
        Lines {
            stream: self.stream,
            replaying: self.replaying.clone(),
            line: Vec::new(),
        }
    }
}

/// Splits what is written into lines and logs each.
struct Lines {
    stream: Stream,
    replaying: Arc<AtomicBool>,
    line: Vec<u8>,
}

impl Lines {
    fn write_bytes(&mut self, mut bytes: &[u8]) {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&bytes[..end]);
            self.emit();
            bytes = &bytes[end + 1..];
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() >= MAX_LINE {
            self.emit();
        }
    }

    fn emit(&mut self) {
        if self.replaying.load(Ordering::Relaxed) {
            self.line.clear();
            return;
        }
        let line = String::from_utf8_lossy(&self.line);
        let line = line.trim_end_matches('\r');
        match self.stream {
            Stream::Stdout => tracing::info!(target: "weir::workflow::stdout", "{line}"),
            Stream::Stderr => tracing::warn!(target: "weir::workflow::stderr", "{line}"),
        }
        self.line.clear();
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.emit();
        }
    }
}

#[async_trait::async_trait]
impl Pollable for Lines {
    async fn ready(&mut self) {}
}

impl OutputStream for Lines {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

impl tokio::io::AsyncWrite for Lines {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
