//! A hand-written single-threaded executor: no async runtime. Every simulated worker process
//! is one pinned, boxed future (its driver's loop); the scheduler polls it with a no-op waker,
//! one step at a time. The simulated seams return `Pending` at their await points
//! ([`yield_now`]) and while they wait for something another part of the simulation must do
//! ([`wait_until`]), so the scheduler decides what happens in between: another worker's turn,
//! a crash (the future is dropped where it stands), a freeze (it is not polled for a while).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::driver::DriverError;

/// A worker process: its driver's loop.
pub type ProcFuture = Pin<Box<dyn Future<Output = Result<(), DriverError>> + Send>>;

/// Polls `future` once with a no-op waker.
pub fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    future.poll(&mut cx)
}

/// Runs a future that needs nothing from the scheduler to completion (tests, helpers).
///
/// # Panics
/// If it is still pending after a million polls.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = poll_once(future.as_mut()) {
            return v;
        }
    }
    panic!("block_on: the future never finished")
}

/// An await point: `Pending` once, then ready.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            Poll::Pending
        }
    }
}

/// Pending until `ready` returns `Some`.
pub fn wait_until<T>(mut ready: impl FnMut() -> Option<T>) -> impl Future<Output = T> {
    std::future::poll_fn(move |_cx| match ready() {
        Some(v) => Poll::Ready(v),
        None => Poll::Pending,
    })
}
