//! Issue 35 item 4 on the real stack: fairness by tenant (`docs/design/fairness.md`).
//!
//! Tenant `a` submits a burst of 600 `hello.greet`, tenant `b` 20 right after, before any
//! worker runs; a worker with a small cache (admission closes at once, so it reads ahead and
//! holds the burst) starts, is killed (`kill -9`) while it works through the burst, and a
//! second one takes over from the committed offsets and their metadata (the records taken
//! beyond the committed offset: `weir_core::fairness::Taken`).
//!
//! - Exactly once: every execution has exactly one result, with its value
//!   (`Deployment::results` fails on a second one) and one `Created` record.
//! - Fairness: most of `b`'s executions are created before the last of `a`'s on their
//!   partition of `weir.history` (in log order every `b` would come after every `a` of its
//!   partition).
//!
//! The rules are `core/src/fairness` (its unit tests) and the simulation's class `fairness`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use weir::codec::HistoryEntry;
use weir::model::{ExecutionId, ExecutionResult};
use weir::store::Store;
use weir::topology::TopicRole;
use weir_e2e::deployment::Deployment;
use weir_e2e::wait_for;

const GREET: &str = "weir-examples:workflows/hello.greet";
const TIMEOUT: Duration = Duration::from_secs(300);
const BURST: usize = 600;
const FEW: usize = 20;

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_one_tenant_does_not_hold_another_behind_it_and_nothing_runs_twice() {
    let deployment = Deployment::new("fairness");
    let producer = deployment.producer();
    let mut a = Vec::new();
    for i in 0..BURST {
        a.push(
            deployment
                .submit_for_tenant(&producer, "a", GREET, json!([format!("a{i}")]))
                .await,
        );
    }
    let mut b = Vec::new();
    for i in 0..FEW {
        b.push(
            deployment
                .submit_for_tenant(&producer, "b", GREET, json!([format!("b{i}")]))
                .await,
        );
    }
    let first = deployment.start_worker("first", &["--cache-size", "64"]);
    let store = deployment.store().await;
    // Killed while it works through the burst: some finished, most not.
    wait_for("some executions finished", TIMEOUT, || async {
        let mut finished = 0;
        for id in a.iter().take(200) {
            if store
                .execution(id)
                .await
                .ok()
                .flatten()
                .is_some_and(|row| row.state == weir::store::ExecutionState::Finished)
            {
                finished += 1;
            }
        }
        (finished >= 20).then_some(())
    })
    .await;
    first.signal("KILL");
    let _second = deployment.start_worker("second", &["--cache-size", "64"]);

    let all: Vec<ExecutionId> = a.iter().chain(&b).cloned().collect();
    let results = deployment.results(&all, TIMEOUT);
    for (ids, tenant) in [(&a, "a"), (&b, "b")] {
        for (i, id) in ids.iter().enumerate() {
            let greeting = match &results[id] {
                ExecutionResult::Ok(value) => value.to_string(),
                other => panic!("{id} of tenant {tenant}: {other:?}"),
            };
            assert!(
                greeting.contains(&format!("{tenant}{i}")),
                "{id}: {greeting}"
            );
        }
    }

    // One `Created` each, and where in its partition of `weir.history` (the creations of one
    // batch share a time: their order is the log's).
    let history = deployment.topic(TopicRole::History);
    let mut created: HashMap<ExecutionId, Vec<(i32, i64)>> = HashMap::new();
    for read in deployment.read_records_to_end::<weir::codec::HistoryRecord>(&history, TIMEOUT) {
        if matches!(read.record.entry, HistoryEntry::Created(_)) {
            created
                .entry(read.record.execution_id.clone())
                .or_default()
                .push((read.partition, read.offset));
        }
    }
    let at = |id: &ExecutionId| {
        let found = created.get(id).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(found.len(), 1, "{id}: {} Created records", found.len());
        found[0]
    };
    let mut last_a: HashMap<i32, i64> = HashMap::new();
    for id in &a {
        let (partition, offset) = at(id);
        let last = last_a.entry(partition).or_insert(offset);
        *last = (*last).max(offset);
    }
    let ahead = b
        .iter()
        .filter(|id| {
            let (partition, offset) = at(id);
            last_a.get(&partition).is_some_and(|last| offset < *last)
        })
        .count();
    assert!(
        ahead * 4 >= FEW * 3,
        "only {ahead} of {FEW} executions of tenant b were created before the last of tenant a's on their partition"
    );
}
