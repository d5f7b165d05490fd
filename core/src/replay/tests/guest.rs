//! The clock and entropy a guest reads through WASI (`guest.rs`): the same at the same points
//! hot, cold and replayed (every scenario compares the three), moved only by consumed
//! responses, and never recorded.

use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use super::harness::{now, scenario};
use crate::model::{ChildKind, ScheduleAt};

#[test]
fn the_clock_starts_at_creation_and_moves_to_what_consumed_responses_tell() {
    let created = crate::replay::tests::harness::execution().created_at;
    let out = scenario(|run| {
        let start = run.read_guest()?;
        // A child that ran until now + 30 min moves the clock there.
        run.call("timed-a", json!(30), ChildKind::Workflow)?;
        let after_child = run.read_guest()?;
        // A delay that expired moves it to the recorded expiry (now + 2 h).
        run.sleep(ScheduleAt::In(Duration::from_secs(7200)))?
            .expect("not cancelled");
        let after_delay = run.read_guest()?;
        // A child that finished earlier than the clock does not move it back; one that does
        // not say when it ran leaves it.
        run.call("timed-b", json!(5), ChildKind::Workflow)?;
        run.call("untimed", json!(600), ChildKind::Workflow)?;
        let after_old = run.read_guest()?;
        Ok((start, after_child, after_delay, after_old))
    });
    let (start, after_child, after_delay, after_old) = out.value;
    assert_eq!(
        start.0, created,
        "the clock starts at the execution's creation"
    );
    assert_eq!(start.1, 0);
    assert_eq!(after_child.0, now() + TimeDelta::minutes(30));
    assert_eq!(after_delay.0, now() + TimeDelta::hours(2));
    assert_eq!(after_old.0, after_delay.0, "the clock never goes back");
    assert_eq!(
        after_delay.1,
        u64::try_from((after_delay.0 - created).num_nanoseconds().unwrap()).unwrap(),
        "the monotonic clock counts from creation"
    );
    // Reads recorded nothing: the history is the calls' alone.
    assert!(
        out.trace
            .iter()
            .filter(|t| t.starts_with("read_guest"))
            .count()
            == 4
            && out.history.len() == 4 * 3,
        "history: {:?}",
        out.history
    );
}

#[test]
fn the_entropy_stream_restarts_at_each_consumed_response_and_differs_between_steps() {
    let out = scenario(|run| {
        let a = run.read_guest()?;
        let b = run.read_guest()?;
        run.call("untimed", json!(1), ChildKind::Workflow)?;
        let c = run.read_guest()?;
        Ok((a, b, c))
    });
    let (a, b, c) = out.value;
    assert_ne!(a.2, b.2, "draws within a step continue the stream");
    assert_ne!(a.3, b.3);
    assert_ne!(a.2, c.2, "the next step draws from another stream");
    // Two draws at the start of an execution are the same whenever they are made.
    let again = scenario(|run| run.read_guest());
    assert_eq!(again.value.2, a.2);
}
