//! `cancellable`: waits on a child workflow (`sleepy.sleep-for`) and a slow activity
//! (`slow.sleep`) in one join set, both long. Cancelled (`weir cancel`), what it waits for is
//! cancelled: the first response it takes is a cancelled one, and it compensates with one
//! more activity (`compute.fibonacci`) before it returns. The execution finishes `cancelled`
//! whatever it returns; the compensation's value is in the error's detail.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/cancellable",
    generate_all,
});

use exports::weir_examples::workflows::cancellable::Guest;
use weir::workflow::host::{log, JoinSet};
use weir::workflow::types::{LogLevel, Response};
use weir_examples::compute::math::fibonacci;
use weir_examples::slow_ext::sleeper::sleep_submit;
use weir_examples::workflows_ext::sleepy::sleep_for_submit;

struct Cancellable;

impl Guest for Cancellable {
    fn run(millis: u64) -> Result<String, String> {
        let join_set = JoinSet::create();
        let child = sleep_for_submit(&join_set, millis);
        let activity = sleep_submit(&join_set, millis);
        log(
            LogLevel::Info,
            &format!("waiting for child workflow {} and activity {}", child.id, activity.id),
        );
        let first = match join_set.join_next() {
            Ok(Response::ChildFinished(finished)) => finished.id.id,
            Ok(other) => format!("{other:?}"),
            Err(e) => return Err(format!("join-next failed: {e:?}")),
        };
        // Compensation: one more step, after whatever came first.
        let compensation = fibonacci(10).map_err(|e| format!("compensation failed: {e}"))?;
        Ok(format!("{first} came first; compensated with fibonacci(10) = {compensation}"))
    }
}

export!(Cancellable);
