//! `sleepy`: sleeps, and returns the recorded expiry of its sleep.
//!
//! Built with the `v2` feature (the `sleepy-v2` crate), it first takes a 1 ms nap: a second
//! build of the same workflow whose history differs from the first's at its first event, as
//! a changed workflow's would (`tests/tests/versions_e2e.rs`). Built with `patched` (the
//! `sleepy-patched` crate), it fixes a bug of the first build: that one returns the expiry
//! with the clock's noise below the millisecond, which its callers (who read milliseconds)
//! do not expect; the patched build returns it to the millisecond. Only its result and its
//! log line on waking differ, so the first build's histories replay cleanly on it (an
//! execution may be upgraded onto it, or reset on it: `tests/tests/reset_e2e.rs`).

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/sleepy",
    generate_all,
});

use exports::weir_examples::workflows::sleepy::{Guest, Instant};
use weir::workflow::host::{log, sleep};
use weir::workflow::types::{Duration, LogLevel, ScheduleAt};

struct Sleepy;

impl Guest for Sleepy {
    fn sleep_for(millis: u64) -> Result<Instant, String> {
        if cfg!(feature = "v2") {
            sleep(ScheduleAt::In(Duration::Milliseconds(1)));
        }
        log(LogLevel::Info, &format!("sleeping {millis} ms"));
        let expiry = sleep(ScheduleAt::In(Duration::Milliseconds(millis)));
        let build = if cfg!(feature = "patched") {
            " (patched build)"
        } else {
            ""
        };
        log(
            LogLevel::Info,
            &format!("woke up, expiry {}s{build}", expiry.seconds),
        );
        let nanoseconds = if cfg!(feature = "patched") {
            expiry.nanoseconds - expiry.nanoseconds % 1_000_000
        } else {
            expiry.nanoseconds
        };
        Ok(Instant {
            seconds: expiry.seconds,
            nanoseconds,
        })
    }
}

export!(Sleepy);
