//! Fault injection for tests (in the spirit of TiKV's failpoints): named points in the code
//! where a test process can be made to pause, configured by the environment variable
//! `WEIR_FAILPOINTS`, e.g. `WEIR_FAILPOINTS=before-commit=pause-once(3000)`. Unset, a failpoint
//! costs one atomic load.
//!
//! Actions: `pause(ms)` every time the point is reached, `pause-once(ms)` the first time.
//! Reaching a point with an action logs `failpoint <name> reached` at WARN, so that a test can
//! wait for it before acting (e.g. freezing the process with SIGSTOP mid-transaction).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

struct Action {
    pause: Duration,
    once: bool,
    fired: AtomicBool,
}

fn configured() -> &'static HashMap<String, Action> {
    static POINTS: OnceLock<HashMap<String, Action>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let spec = std::env::var("WEIR_FAILPOINTS").unwrap_or_default();
        spec.split(',')
            .filter_map(|entry| {
                let (name, action) = entry.trim().split_once('=')?;
                let (kind, rest) = action.split_once('(')?;
                let millis: u64 = rest.strip_suffix(')')?.parse().ok()?;
                let once = match kind {
                    "pause" => false,
                    "pause-once" => true,
                    _ => return None,
                };
                Some((
                    name.to_owned(),
                    Action {
                        pause: Duration::from_millis(millis),
                        once,
                        fired: AtomicBool::new(false),
                    },
                ))
            })
            .collect()
    })
}

/// Runs the action configured for `name`, if any.
pub async fn failpoint(name: &str) {
    let Some(action) = configured().get(name) else {
        return;
    };
    if action.once && action.fired.swap(true, Ordering::SeqCst) {
        return;
    }
    tracing::warn!("failpoint {name} reached");
    tokio::time::sleep(action.pause).await;
}
