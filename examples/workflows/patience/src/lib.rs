//! `patience`: an activity (`slow.sleep`) raced against a delay in one join set; closing the
//! join set cancels whichever lost. With `linger-ms`, the workflow sleeps after closing, so
//! that the answer of a cancelled activity is journalled while it still runs.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/patience",
    generate_all,
});

use exports::weir_examples::workflows::patience::Guest;
use weir::workflow::host::{log, sleep, JoinSet};
use weir::workflow::types::{Duration, LogLevel, Response, ScheduleAt};
use weir_examples::slow_ext::sleeper::sleep_submit;

struct Patience;

impl Guest for Patience {
    fn race(sleep_ms: u64, deadline_ms: u64, linger_ms: u64) -> Result<String, String> {
        let join_set = JoinSet::create();
        let child = sleep_submit(&join_set, sleep_ms);
        let delay = join_set.submit_delay(ScheduleAt::In(Duration::Milliseconds(deadline_ms)));
        log(
            LogLevel::Info,
            &format!("race in {}: activity {} vs delay {}", join_set.id(), child.id, delay.id),
        );
        let winner = match join_set.join_next() {
            Ok(Response::ChildFinished(_)) => "activity",
            Ok(Response::DelayFinished(_)) => "deadline",
            Ok(other) => return Err(format!("unexpected response {other:?}")),
            Err(e) => return Err(format!("join-next failed: {e:?}")),
        };
        // Cancels whichever request is still pending.
        JoinSet::close(join_set);
        if linger_ms > 0 {
            sleep(ScheduleAt::In(Duration::Milliseconds(linger_ms)));
        }
        Ok(winner.to_owned())
    }
}

export!(Patience);
