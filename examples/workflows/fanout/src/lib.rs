//! `fanout`: fan-out / fan-in over the `compute` activity with the generated extension
//! functions (`fibonacci-submit`, `fibonacci-await-next`, `fibonacci-get`), plus a race of a
//! child against a delay with the untyped `join-next` and an explicit `close`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/fanout",
    generate_all,
});

use exports::weir_examples::workflows::fanout::{FanoutResult, Guest, RaceOutcome};
use weir::workflow::host::{log, JoinSet};
use weir::workflow::types::{
    AwaitNextError, DelayOutcome, Duration, ExecutionId, JoinSetCreateError, LogLevel, Response,
    ScheduleAt,
};
use weir_examples::compute_ext::math::{fibonacci_await_next, fibonacci_get, fibonacci_submit};

struct Fanout;

fn get_fibonacci(id: &ExecutionId) -> Result<u64, String> {
    match fibonacci_get(id) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("child {} failed: {e}", id.id)),
        Err(e) => Err(format!("fibonacci-get({}) failed: {e:?}", id.id)),
    }
}

impl Guest for Fanout {
    fn fibonacci_sum(ns: Vec<u8>) -> Result<FanoutResult, String> {
        let join_set = JoinSet::create_named("fibonacci")
            .map_err(|e| format!("create-named(fibonacci) failed: {e:?}"))?;
        let named_conflict = matches!(
            JoinSet::create_named("fibonacci"),
            Err(JoinSetCreateError::Conflict)
        );
        log(
            LogLevel::Info,
            &format!("submitting {} children into {}", ns.len(), join_set.id()),
        );

        let ids: Vec<ExecutionId> = ns.iter().map(|&n| fibonacci_submit(&join_set, n)).collect();

        let mut sum: u64 = 0;
        let mut arrival_order = Vec::with_capacity(ids.len());
        for _ in 0..ids.len() {
            match fibonacci_await_next(&join_set) {
                Ok((id, Ok(value))) => {
                    sum = sum
                        .checked_add(value)
                        .ok_or_else(|| "the sum does not fit a u64".to_string())?;
                    arrival_order.push(id.id);
                }
                Ok((id, Err(e))) => return Err(format!("child {} failed: {e}", id.id)),
                Err(e) => return Err(format!("fibonacci-await-next failed: {e:?}")),
            }
        }
        let extra_await_all_processed = matches!(
            fibonacci_await_next(&join_set),
            Err(AwaitNextError::AllProcessed)
        );

        // Read the values back in input order (the responses above came in arrival order).
        let values = ids.iter().map(get_fibonacci).collect::<Result<Vec<u64>, String>>()?;

        Ok(FanoutResult {
            values,
            sum,
            arrival_order,
            named_conflict,
            extra_await_all_processed,
        })
    }

    fn race(n: u8, deadline_ms: u64) -> Result<RaceOutcome, String> {
        let join_set = JoinSet::create();
        let child = fibonacci_submit(&join_set, n);
        let delay = join_set.submit_delay(ScheduleAt::In(Duration::Milliseconds(deadline_ms)));
        log(
            LogLevel::Info,
            &format!("race in {}: child {} vs delay {}", join_set.id(), child.id, delay.id),
        );

        let outcome = match join_set.join_next() {
            Ok(Response::ChildFinished(finished)) => {
                RaceOutcome::Child(get_fibonacci(&finished.id)?)
            }
            Ok(Response::DelayFinished(finished)) => match finished.outcome {
                DelayOutcome::Expired(at) => RaceOutcome::Deadline(
                    at.seconds * 1000 + u64::from(at.nanoseconds / 1_000_000),
                ),
                DelayOutcome::Cancelled => {
                    return Err(format!("delay {} was cancelled", finished.id.id))
                }
            },
            Ok(other) => return Err(format!("unexpected response {other:?}")),
            Err(e) => return Err(format!("join-next failed: {e:?}")),
        };
        // Cancels whichever request is still pending.
        JoinSet::close(join_set);
        Ok(outcome)
    }
}

export!(Fanout);
