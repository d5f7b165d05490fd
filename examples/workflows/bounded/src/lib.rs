//! `bounded`: a workflow with a default deadline (`deadline_ms = 5000` in
//! topology/components.toml). It waits for a child workflow (`sleepy.sleep-for`) and a slow
//! activity (`slow.sleep`) of `millis` each, then for both. Short enough, it returns; past its
//! deadline (5 s from its creation, or the earlier one its submission carries) it finishes
//! `timed-out` without running again: the activity's attempt is interrupted, the child
//! workflow is terminated, and the child never had a later deadline than this execution.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/bounded",
    generate_all,
});

use exports::weir_examples::workflows::bounded::Guest;
use weir::workflow::host::{log, JoinSet};
use weir::workflow::types::{LogLevel, Response};
use weir_examples::slow_ext::sleeper::sleep_submit;
use weir_examples::workflows_ext::sleepy::sleep_for_submit;

struct Bounded;

impl Guest for Bounded {
    fn run(millis: u64) -> Result<String, String> {
        let join_set = JoinSet::create();
        let child = sleep_for_submit(&join_set, millis);
        let activity = sleep_submit(&join_set, millis);
        log(
            LogLevel::Info,
            &format!("waiting for child workflow {} and activity {}", child.id, activity.id),
        );
        for _ in 0..2 {
            match join_set.join_next() {
                Ok(Response::ChildFinished(_)) => {}
                Ok(other) => return Err(format!("unexpected response {other:?}")),
                Err(e) => return Err(format!("join-next failed: {e:?}")),
            }
        }
        Ok(format!("the child and the activity answered within {millis} ms each"))
    }
}

export!(Bounded);
