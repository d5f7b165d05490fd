//! The code's own `tracing` events in a run's trace, on request: [`capture`] is a
//! subscriber that keeps each event line on the thread running the simulation, and the
//! world takes them into the trace (with the sim clock) before its next line of its own or
//! move of the clock, so they sit in order between the scheduler's and the seams' lines.
//!
//! A run is one thread (`exec.rs`), so a thread's lines are its run's. Nothing is kept
//! unless the test installs the subscriber (`tracing::subscriber::with_default`), and the
//! subscriber changes no decision of the code it watches: a seed replays the same with or
//! without it.

use std::cell::RefCell;
use std::io::Write;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

thread_local! {
    static PENDING: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A subscriber writing the events `directives` selects (`EnvFilter` syntax, e.g.
/// `weir_core=debug`) for the run on this thread.
///
/// # Errors
/// Directives `EnvFilter` cannot parse.
pub fn capture(
    directives: &str,
) -> Result<impl tracing::Subscriber + Send + Sync + 'static, tracing_subscriber::filter::ParseError>
{
    let filter = EnvFilter::builder().parse(directives)?;
    Ok(tracing_subscriber::fmt()
        .with_env_filter(filter)
        .without_time()
        .with_ansi(false)
        .with_target(false)
        .with_writer(Pending)
        .finish())
}

/// The lines written since the last call, oldest first.
pub(crate) fn take() -> Vec<String> {
    PENDING.with(|p| {
        let bytes = std::mem::take(&mut *p.borrow_mut());
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

#[derive(Clone, Copy)]
struct Pending;

impl Write for Pending {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        PENDING.with(|p| p.borrow_mut().extend_from_slice(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Pending {
    type Writer = Pending;

    fn make_writer(&'a self) -> Pending {
        Pending
    }
}
