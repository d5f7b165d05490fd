//! `sleepy`: sleeps, and returns the recorded expiry of its sleep.

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
        log(LogLevel::Info, &format!("sleeping {millis} ms"));
        let expiry = sleep(ScheduleAt::In(Duration::Milliseconds(millis)));
        log(LogLevel::Info, &format!("woke up, expiry {}s", expiry.seconds));
        Ok(Instant {
            seconds: expiry.seconds,
            nanoseconds: expiry.nanoseconds,
        })
    }
}

export!(Sleepy);
