//! Fault injection for tests (in the spirit of TiKV's failpoints): named points in the code
//! where a test process can be made to pause. The command line installs them from
//! `WEIR_FAILPOINTS` (`weir worker --failpoints`), e.g.
//! `WEIR_FAILPOINTS=before-commit=pause-once(3000)`; this module reads no environment. Not
//! installed, a failpoint costs one atomic load.
//!
//! Actions: `pause(ms)` every time the point is reached, `pause-once(ms)` the first time,
//! `fail-once(ms)` the first time: pause, then make the code at the point fail (the
//! transaction's commit at `before-commit` aborts, as on a broker error). Points:
//! `before-send-offsets` (outputs produced, offsets not sent) and `before-commit` (offsets
//! accepted, the transaction not committed), in `kafka/transaction.rs`; the trigger worker's
//! transactions have them as `trigger-before-send-offsets` and `trigger-before-commit`; the
//! activity worker's commit has `activity-before-offsets` (its answers acknowledged, their
//! progress not committed; `fail-once` makes that commit fail, in `kafka/answers.rs`). A
//! take-over's fetch of the committed offsets (`kafka/group.rs`, `fetch_committed`) has
//! `workflow-fetch-committed`, `activity-fetch-committed` and `trigger-fetch-committed`:
//! `fail-once` makes the first fetch fail as a coordinator that moved does (`NOT_COORDINATOR`);
//! each has a `-fenced` twin (`workflow-fetch-committed-fenced`, …) at which `fail-once` puts
//! the consumer in librdkafka's fatal state (`FENCED_INSTANCE_ID`) before it fetches.
//! Entries are separated by commas; malformed ones are ignored. Reaching a point with an action
//! logs `failpoint <name> reached` at WARN, so that a test can wait for it before acting (e.g.
//! freezing the process with SIGSTOP mid-transaction).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug)]
struct Action {
    pause: Duration,
    once: bool,
    fail: bool,
    fired: AtomicBool,
}

static POINTS: OnceLock<HashMap<String, Action>> = OnceLock::new();

/// Installs the failpoints of `spec` (`name=action(ms),…`) for the rest of the process. The
/// first call wins: later ones are ignored, and return `false`.
pub fn install(spec: &str) -> bool {
    POINTS.set(parse(spec)).is_ok()
}

fn parse(spec: &str) -> HashMap<String, Action> {
    spec.split(',')
        .filter_map(|entry| {
            let (name, action) = entry.trim().split_once('=')?;
            let (kind, rest) = action.split_once('(')?;
            let millis: u64 = rest.strip_suffix(')')?.parse().ok()?;
            let (once, fail) = match kind {
                "pause" => (false, false),
                "pause-once" => (true, false),
                "fail-once" => (true, true),
                _ => return None,
            };
            Some((
                name.to_owned(),
                Action {
                    pause: Duration::from_millis(millis),
                    once,
                    fail,
                    fired: AtomicBool::new(false),
                },
            ))
        })
        .collect()
}

/// Runs the action installed for `name`, if any; `true` when the code at the point must fail.
pub async fn failpoint(name: &str) -> bool {
    let Some(action) = POINTS.get().and_then(|points| points.get(name)) else {
        return false;
    };
    if action.once && action.fired.swap(true, Ordering::SeqCst) {
        return false;
    }
    tracing::warn!("failpoint {name} reached");
    tokio::time::sleep(action.pause).await;
    action.fail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_parsed_and_malformed_entries_are_ignored() {
        let points = parse(
            "before-commit=pause-once(3000), other=pause(5),bad=sleep(1),x=pause,f=fail-once(0)",
        );
        assert_eq!(points.len(), 3, "{points:?}");
        assert!(points["f"].fail && points["f"].once);
        assert!(!points["before-commit"].fail);
        let commit = &points["before-commit"];
        assert_eq!(commit.pause, Duration::from_millis(3000));
        assert!(commit.once);
        let other = &points["other"];
        assert_eq!(other.pause, Duration::from_millis(5));
        assert!(!other.once);
        assert!(parse("").is_empty());
    }
}
