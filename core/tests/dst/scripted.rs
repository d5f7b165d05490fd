//! Scripted scenarios: a deployment stepped by hand through one story each, with the
//! invariants checked at its end.

use super::*;

// ---- scripted scenarios ----

/// A deployment with activity workers (`Faults::activity_workers`), no random faults.
pub(crate) fn activity_deployment() -> Sim {
    let mut faults = Faults::none();
    faults.activity_workers = true;
    deployment_with(
        SimConfig {
            partitions: 2,
            workers: 1,
            activity_partitions: 2,
            ..SimConfig::default()
        },
        faults,
    )
}

/// An activity worker frozen inside a commit that carries an answer (produced, its offsets
/// not committed yet) past its session: the other worker takes the partition over, runs the
/// request again and answers it again; the zombie, back, has its offsets refused. The answer
/// is on `weir.responses` twice; the parent journals one.
#[test]
pub(crate) fn a_zombie_activity_workers_answer_is_a_duplicate_the_parent_drops() {
    let mut sim = activity_deployment();
    sim.add_activity_worker();
    step(&mut sim, 10);
    sim.submit(Workflow::Seq, &[1, 5]);
    let answering = |p: &weir_core::sim::activity::ActProc| {
        p.producing
            .as_ref()
            .is_some_and(|c| c.records.iter().any(|r| r.answered().is_some()))
    };
    let mut zombie = None;
    'find: for _ in 0..300 {
        for slot in sim.slots() {
            sim.run(slot, 20);
        }
        sim.materialise_all();
        for slot in sim.act_slots() {
            if sim.act_run_until(slot, 2, answering) {
                zombie = Some(slot);
                break 'find;
            }
        }
    }
    let zombie = zombie.expect("an activity worker commits the answer");
    sim.act_freeze(zombie, 15_000);
    step(&mut sim, 250);
    assert_invariants(&mut sim);
    let report = sim.report(true, Vec::new());
    assert!(
        report.activity.refused_commits >= 1 && report.activity.produced_twice >= 1,
        "{:?}",
        report.activity
    );
    assert_eq!(sim.results(), 1);
}

/// The activity workers answer every request once, through failed attempts and retries.
#[test]
pub(crate) fn activity_workers_answer_with_retries() {
    let mut sim = activity_deployment();
    let ids: Vec<_> = (0..4)
        .map(|i| sim.submit(Workflow::Fanout, &[3, 10 * i]))
        .collect();
    step(&mut sim, 100);
    assert_invariants(&mut sim);
    let report = sim.report(true, Vec::new());
    assert!(report.activity.failures > 0, "{:?}", report.activity);
    assert_eq!(sim.results(), ids.len());
}

/// A deployment of `workers` worker slots over `partitions` partitions, no random faults.
pub(crate) fn deployment(partitions: i32, workers: u32) -> Sim {
    deployment_with(
        SimConfig {
            partitions,
            workers,
            activity_partitions: 1,
            ..SimConfig::default()
        },
        Faults::none(),
    )
}

pub(crate) fn deployment_with(config: SimConfig, faults: Faults) -> Sim {
    let mut sim = Sim::new(1, config, faults);
    // Everyone joins and takes over.
    step(&mut sim, 5);
    sim
}

/// `rounds` rounds of: every worker runs, every writer writes, the activity service
/// answers, 100 ms pass.
pub(crate) fn step(sim: &mut Sim, rounds: usize) {
    for _ in 0..rounds {
        for slot in sim.slots() {
            sim.run(slot, 20);
        }
        sim.materialise_all();
        sim.activities();
        sim.act_all(5);
        sim.advance(100);
    }
}

/// Like [`step`], only for `slots`, and without any writer writing.
pub(crate) fn step_only(sim: &mut Sim, slots: &[u32], rounds: usize, materialise: bool) {
    for _ in 0..rounds {
        for &slot in slots {
            sim.run(slot, 20);
            if materialise {
                sim.materialise(slot, 32);
            }
        }
        sim.activities();
        sim.advance(100);
    }
}

/// Like `sim.run_until(slot, at, max)`, with `slot`'s writer writing after every poll (a
/// take-over waits for it).
pub(crate) fn run_until_writing(sim: &mut Sim, slot: u32, at: &str, max: usize) -> bool {
    for _ in 0..max {
        if sim.run_until(slot, at, 1) {
            return true;
        }
        sim.materialise(slot, 32);
    }
    false
}

/// The slot whose process owns `partition`.
pub(crate) fn owner(sim: &Sim, partition: i32) -> u32 {
    sim.slots()
        .into_iter()
        .find(|s| sim.owned(*s).contains(&partition))
        .unwrap_or_else(|| panic!("nobody owns partition {partition}"))
}

/// Asserts a step of a scenario; prints the trace so far if it does not hold.
#[track_caller]
pub(crate) fn ensure(sim: &Sim, ok: bool, what: &str) {
    if !ok {
        let report = sim.report(false, Vec::new());
        panic!("{what}\n{}", report.render(Some(120)));
    }
}

/// Runs everything to quiescence and asserts every invariant; prints the report if not.
pub(crate) fn assert_invariants(sim: &mut Sim) {
    let settled = sim.quiesce(15 * 60 * 1_000);
    let violations = sim.check(settled);
    if !violations.is_empty() {
        let report = sim.report(settled, violations);
        panic!("{}", report.render(trace_lines()));
    }
}

#[test]
pub(crate) fn every_workflow_finishes_once_without_faults() {
    let mut sim = deployment(4, 2);
    sim.submit(Workflow::Seq, &[3, 10]);
    sim.submit(Workflow::Sleepy, &[2, 1_500, 20]);
    sim.submit(Workflow::Fanout, &[4, 30]);
    sim.submit(Workflow::Mixed, &[3, 2_000, 40]);
    sim.submit(Workflow::Parent, &[2, 50]);
    let at = sim.now() + chrono::Duration::seconds(5);
    sim.submit_at(Workflow::Seq, &[1, 60], Some(at));
    assert_invariants(&mut sim);
}

/// The cold path: with a cache of one parked run, every delivery rebuilds from the store.
#[test]
pub(crate) fn a_cache_of_one_rebuilds_from_the_store() {
    let mut sim = deployment_with(
        SimConfig {
            partitions: 2,
            workers: 1,
            cache_size: 1,
            max_batch: 3,
            ..SimConfig::default()
        },
        Faults::none(),
    );
    for i in 0..8 {
        sim.submit(Workflow::Fanout, &[3, i * 10]);
        sim.submit(Workflow::Sleepy, &[2, 700, i * 10]);
        step(&mut sim, 2);
    }
    assert_invariants(&mut sim);
}

/// kill -9 after the commit, before the materialiser wrote the batch: the next owner
/// catches up from the log.
#[test]
pub(crate) fn a_kill_between_commit_and_materialisation_loses_nothing() {
    let mut sim = deployment(1, 2);
    sim.submit(Workflow::Seq, &[2, 0]);
    let owner = owner(&sim, 0);
    let reached = sim.run_until(owner, "materialiser: submit", 500);
    ensure(
        &sim,
        reached,
        "sim.run_until(owner, materialiser: submit, 500)",
    );
    sim.crash(owner);
    assert_invariants(&mut sim);
}

/// kill -9 after the offsets went into the transaction: the next owner's rewind waits for
/// that transaction (KIP-447) until the broker aborts it, then reads the inputs again.
#[test]
pub(crate) fn a_rewind_waits_for_a_dead_owners_transaction() {
    let mut sim = deployment(1, 2);
    sim.submit(Workflow::Seq, &[1, 0]);
    let owner = owner(&sim, 0);
    let reached = sim.run_until(owner, "commit: offsets sent", 500);
    ensure(
        &sim,
        reached,
        "sim.run_until(owner, commit: offsets sent, 500)",
    );
    sim.crash(owner);
    let other = sim.slots().into_iter().find(|s| *s != owner).unwrap();
    let mut waited = false;
    for _ in 0..400 {
        step(&mut sim, 1);
        waited |= sim.at(other) == Some("rewind: waiting for an open transaction");
    }
    assert!(
        waited,
        "the new owner never waited for the open transaction"
    );
    assert_eq!(sim.world().stats.timed_out_txns, 1);
    assert_invariants(&mut sim);
}

/// A frozen owner whose offsets were not sent yet is fenced by the group generation when it
/// comes back: its transaction aborts, nothing it did is visible.
#[test]
pub(crate) fn a_zombie_sending_offsets_after_the_rebalance_is_fenced() {
    let mut sim = deployment(1, 2);
    sim.submit(Workflow::Seq, &[1, 0]);
    let owner = owner(&sim, 0);
    let other = sim.slots().into_iter().find(|s| *s != owner).unwrap();
    let reached = sim.run_until(owner, "commit: produced", 500);
    ensure(&sim, reached, "sim.run_until(owner, commit: produced, 500)");
    sim.freeze(owner, 15_000);
    step_only(&mut sim, &[other], 130, true); // the other worker takes over meanwhile
    assert_eq!(sim.owned(other), vec![0]);
    sim.advance(2_500); // the zombie resumes, before its transaction times out
    let reached = run_until_writing(&mut sim, owner, "poll", 50);
    ensure(&sim, reached, "run_until_writing(owner, poll, 50)"); // refused, aborted, rejoins
    assert!(sim.world().stats.refused_generation >= 1);
    assert_invariants(&mut sim);
}

/// Store outages longer than the patience: reads and writes are retried, then given up (the
/// worker exits, its supervisor restarts it).
#[test]
pub(crate) fn store_outages_restart_workers_and_lose_nothing() {
    let mut sim = deployment_with(
        SimConfig {
            partitions: 2,
            workers: 2,
            activity_partitions: 1,
            store_patience_ms: 2_000,
            ..SimConfig::default()
        },
        Faults::none(),
    );
    for i in 0..4 {
        sim.submit(Workflow::Seq, &[2, i * 10]);
        sim.submit(Workflow::Mixed, &[2, 1_200, i * 10]);
    }
    step(&mut sim, 4);
    sim.store_outage(6_000);
    step(&mut sim, 80);
    step(&mut sim, 10);
    sim.store_outage(2_000);
    step(&mut sim, 30);
    assert!(
        sim.world().stats.exits >= 1,
        "a worker stopped on a store error"
    );
    assert_invariants(&mut sim);
}

/// `docs/faults.md` finding 3: a store outage of 30 s (within the patience) while cached
/// executions run — activities answered, short sleeps firing, a sleep beyond the timer horizon
/// and a race's long delay in the store — must not stop the hot path: batches commit and
/// executions finish while the store is down, and afterwards nothing is lost or doubled.
/// Before the fix, the first timer refill (~5 s in) waited for the materialiser's queue,
/// which cannot be written while the store is down: nothing committed for the rest of the
/// outage.
#[test]
pub(crate) fn the_hot_path_commits_through_a_store_outage() {
    let mut sim = deployment(2, 1);
    for i in 0..6 {
        sim.submit(Workflow::Seq, &[12, i * 10]);
        sim.submit(Workflow::Sleepy, &[5, 2_000, i * 10 + 5]);
        sim.submit(Workflow::Mixed, &[3, 1_500, i * 10 + 7]);
    }
    step(&mut sim, 20); // every execution started and cached, its first steps committed
    // A timer beyond the horizon, committed and not yet in the store when it goes away.
    sim.submit(Workflow::LongSleep, &[75]);
    step_only(&mut sim, &[1], 3, false);
    let pid = sim.pid(1).unwrap();
    let horizon = sim.now() + chrono::Duration::seconds(60);
    let queued = sim.world().procs[&pid]
        .mat
        .queue
        .iter()
        .any(|(_, job)| job.new_timers.iter().any(|t| t.due_at > horizon));
    ensure(
        &sim,
        queued,
        "the long sleep's timer is committed and still queued",
    );
    let finished_before = sim.results();
    let commits_before = sim.world().stats.commits;
    sim.store_outage(30_000);
    step(&mut sim, 295); // 29.5 s, the store down throughout
    let w = sim.world();
    let (commits, down) = (
        w.stats.commits - commits_before,
        w.stats.commits_while_store_down,
    );
    drop(w);
    let finished = sim.results() - finished_before;
    ensure(
        &sim,
        down >= 20 && down == commits && finished >= 6,
        &format!(
            "during the outage: {commits} commits ({down} while the store was down), {finished} executions finished"
        ),
    );
    assert_invariants(&mut sim);
}

/// `docs/faults.md` finding 4, issue 11 item 0: a zombie whose commit is refused (the group
/// moved on while it was frozen) must not write for the partitions it had before the log
/// reports its membership again — the world flags any job it queues meanwhile
/// (`seam-contract`). Before the fix, the driver took over the assignment the log still
/// reported (the old one) at once: catch-up rows, checkpoints and watermarks for a partition
/// the other worker owns.
#[test]
pub(crate) fn a_refused_zombie_writes_nothing_until_it_is_assigned_again() {
    let mut sim = deployment(2, 2);
    for i in 0..4 {
        sim.submit(Workflow::Seq, &[2, i * 10]);
    }
    step(&mut sim, 10);
    sim.submit(Workflow::Seq, &[1, 90]);
    let zombie = owner(&sim, 0);
    let other = sim.slots().into_iter().find(|s| *s != zombie).unwrap();
    let reached = run_until_writing(&mut sim, zombie, "commit: produced", 500);
    ensure(&sim, reached, "the owner is inside a commit");
    sim.freeze(zombie, 15_000);
    step_only(&mut sim, &[other], 130, true); // the other worker takes everything over
    ensure(
        &sim,
        sim.owned(other) == vec![0, 1],
        "the other worker took over every partition",
    );
    sim.advance(2_500); // the zombie resumes, before its transaction times out
    let refused = sim.world().stats.refused_generation;
    for _ in 0..50 {
        sim.run(zombie, 1);
        sim.materialise(zombie, 32);
        if sim.world().stats.refused_generation > refused {
            break;
        }
    }
    ensure(
        &sim,
        sim.world().stats.refused_generation > refused,
        "the zombie's commit is refused",
    );
    step(&mut sim, 30); // it rejoins and gets partitions again
    let violations = sim.check(false);
    ensure(
        &sim,
        violations
            .iter()
            .all(|v| v.invariant != weir_core::sim::invariant::Invariant::SeamContract),
        &format!("{violations:?}"),
    );
    assert_invariants(&mut sim);
}

/// The holders of `key` as its last committed state on `weir.state` lists them.
pub(crate) fn key_holders(sim: &Sim, key: &str) -> Vec<weir_core::model::ExecutionId> {
    use weir_core::sim::cluster::{Payload, Topic};
    let w = sim.world();
    let mut holders = Vec::new();
    for (_, r) in w.cluster.committed_records(Topic::State) {
        if let (Some(k), Some(Payload::Correlation(state))) = (&r.key, &r.payload)
            && k == key
        {
            holders = state.as_ref().map_or_else(Vec::new, |s| s.holders.clone());
        }
    }
    holders
}

/// Two `order`s register `order:0`, the first holds it, the second waits its turn; batches
/// of at most `max_batch` records.
pub(crate) fn two_holders(
    max_batch: usize,
) -> (
    Sim,
    weir_core::model::ExecutionId,
    weir_core::model::ExecutionId,
) {
    let mut sim = deployment_with(
        SimConfig {
            partitions: 2,
            workers: 1,
            activity_partitions: 1,
            max_batch,
            ..SimConfig::default()
        },
        Faults::none(),
    );
    let first = sim.submit(Workflow::Order, &[0, 0, 0]);
    step(&mut sim, 10);
    let second = sim.submit(Workflow::Order, &[0, 0, 0]);
    step(&mut sim, 10);
    let holders = key_holders(&sim, "order:0");
    ensure(
        &sim,
        holders == vec![first.clone(), second.clone()],
        &format!("both registered, the first holds the key: {holders:?}"),
    );
    (sim, first, second)
}

/// Without faults: an event sent before any registration waits in the key's buffer and goes
/// to the first registrant (which takes it once its activity answered); the next goes to
/// the next registrant once the first finished; an event for a key nobody registers stays
/// buffered.
#[test]
pub(crate) fn correlation_keys_forward_buffer_and_queue() {
    let (mut sim, first, second) = two_holders(500);
    sim.send_keyed_event("order:1", "kev-1".into(), 1);
    step(&mut sim, 5);
    let third = sim.submit(Workflow::Order, &[1, 0, 1]);
    sim.send_keyed_event("order:0", "kev-2".into(), 2);
    step(&mut sim, 20);
    let holders = key_holders(&sim, "order:0");
    ensure(
        &sim,
        holders == vec![second.clone()],
        &format!("{first} took kev-2 and finished, {second} holds the key: {holders:?}"),
    );
    sim.send_keyed_event("order:0", "kev-3".into(), 3);
    sim.send_keyed_event("order:9", "kev-4".into(), 4);
    assert_invariants(&mut sim);
    let results: Vec<(weir_core::model::ExecutionId, serde_json::Value)> = {
        use weir_core::sim::cluster::{Payload, Topic};
        let w = sim.world();
        w.cluster
            .committed_records(Topic::Results)
            .filter_map(|(_, r)| match &r.payload {
                Some(Payload::Result(f)) => match &f.result {
                    weir_core::model::ExecutionResult::Ok(v) => {
                        Some((f.execution_id.clone(), v.clone()))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect()
    };
    for (id, value) in [(first, 2), (second, 3), (third, 1)] {
        assert!(
            results.contains(&(id.clone(), serde_json::json!(value))),
            "{id} finished with {value}: {results:?}"
        );
    }
    let c = sim.report(true, Vec::new()).correlation;
    assert_eq!((c.taken, c.buffered, c.queued), (3, 2, 1), "{c:?}");
}

/// An event sent twice at once (a producer's retry) to a key held by `first`, `second`
/// waiting its turn: the key forwards both copies to `first`, which takes the first and
/// finishes; the second copy finds it finished. It must not go back to the key
/// (`returned_by`), which has dropped `first` by then and would forward it to `second` (one
/// event, taken by two executions: `correlation-once`): `first` has its id
/// (`events_seen`), so it is a duplicate to drop (`Processor::receive_event`).
#[test]
pub(crate) fn correlation_duplicate_at_once_stays_with_its_holder() {
    // One record per batch: the holder takes the first copy and finishes before it reads
    // the second (in one batch, the second is dropped as a duplicate).
    let (mut sim, _, _) = two_holders(1);
    sim.send_keyed_event("order:0", "kev-1".into(), 1);
    sim.send_keyed_event("order:0", "kev-1".into(), 1);
    step(&mut sim, 30);
    // Lets the second finish if kev-1 did not reach it.
    sim.send_keyed_event("order:0", "kev-2".into(), 2);
    assert_invariants(&mut sim);
}

/// An event sent again after its holder took it and finished (a client retrying after a
/// time-out): the key remembers the id it forwarded and drops the copy. Without that (the
/// bug `dst_correlation_duplicates` found) the copy reached the next holder (or waited for the
/// next registrant): taken twice (`correlation-once`); also for two copies sent at once (the
/// key reads `weir.events` and `weir.responses` in no fixed order, so the second copy may come
/// after the first holder's `Unregister`), and for a copy sent back by a finished holder that
/// never had it.
#[test]
pub(crate) fn correlation_duplicate_later_does_not_reach_the_next_holder() {
    let (mut sim, first, second) = two_holders(500);
    sim.send_keyed_event("order:0", "kev-1".into(), 1);
    step(&mut sim, 30);
    let holders = key_holders(&sim, "order:0");
    ensure(
        &sim,
        holders == vec![second.clone()],
        &format!("{first} took kev-1 and finished, {second} holds the key: {holders:?}"),
    );
    sim.send_keyed_event("order:0", "kev-1".into(), 1);
    step(&mut sim, 30);
    sim.send_keyed_event("order:0", "kev-2".into(), 2);
    assert_invariants(&mut sim);
}

/// The results on `weir.results`, by execution.
pub(crate) fn results_of(
    sim: &Sim,
) -> Vec<(
    weir_core::model::ExecutionId,
    weir_core::model::ExecutionResult,
)> {
    use weir_core::sim::cluster::{Payload, Topic};
    let w = sim.world();
    w.cluster
        .committed_records(Topic::Results)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Result(f)) => Some((f.execution_id.clone(), f.result.clone())),
            _ => None,
        })
        .collect()
}

/// The stub of `parent`, once its request is committed.
pub(crate) fn stub_of(
    sim: &Sim,
    parent: &weir_core::model::ExecutionId,
) -> weir_core::model::ExecutionId {
    sim.stub_requests()
        .into_iter()
        .find(|(_, p)| p == parent)
        .map(|(stub, _)| stub)
        .unwrap_or_else(|| panic!("no stub request of {parent} is committed"))
}

/// Stubs written by `stub-writer`s and from outside, one step at a time (so that the order
/// the owner takes them in is known): the first value is taken and the parent finishes with
/// it; the same value again is `ok` (from outside: nothing); another is `conflict` (from
/// outside: DLQ `conflict`); a value that does not fit, while the stub has none, is refused;
/// a write of an id that is no stub is `not-found`; a stub cancelled by its race's delay
/// keeps the cancellation.
#[test]
pub(crate) fn stubs_written_by_workflows_and_from_outside_follow_the_rules() {
    use serde_json::json;
    use weir_core::model::{ExecutionId, ExecutionResult, JoinSetId};
    let mut sim = deployment(2, 1);
    let p = sim.submit(Workflow::Stubbed, &[]);
    let q = sim.submit(Workflow::Stubbed, &[]);
    let r = sim.submit(Workflow::StubRace, &[200]);
    step(&mut sim, 20);
    let (sp, sq, sr) = (stub_of(&sim, &p), stub_of(&sim, &q), stub_of(&sim, &r));
    let first = sim.submit_stub_writer(&sp, 7, false, false);
    step(&mut sim, 20);
    let again = sim.submit_stub_writer(&sp, 7, false, true);
    step(&mut sim, 20);
    sim.write_stub(&sp, ExecutionResult::Ok(json!(7)), true);
    sim.write_stub(&sp, ExecutionResult::Ok(json!(8)), true);
    let other = sim.submit_stub_writer(&sp, 9, false, true);
    let nobody =
        ExecutionId::top_level(ulid::Ulid::new()).child(&JoinSetId::generated(1).unwrap(), 1);
    let nobodys = sim.submit_stub_writer(&nobody, 1, false, false);
    let top = sim.submit_stub_writer(&ExecutionId::top_level(ulid::Ulid::new()), 1, false, false);
    let late = sim.submit_stub_writer(&sr, 5, false, true);
    sim.write_stub(&sq, ExecutionResult::Ok(json!("three")), false);
    step(&mut sim, 5);
    sim.write_stub(&sq, ExecutionResult::Ok(json!(3)), false);
    assert_invariants(&mut sim);
    let results = results_of(&sim);
    let ok = ExecutionResult::Ok(serde_json::Value::Null);
    let conflict = ExecutionResult::Err(json!("conflict"));
    let not_found = ExecutionResult::Err(json!("not-found"));
    for (id, result) in [
        (&first, ok.clone()),
        (&again, ok),
        (&other, conflict.clone()),
        (&nobodys, not_found.clone()),
        (&top, not_found),
        (&late, conflict),
        (&p, ExecutionResult::Ok(json!(7))),
        (&q, ExecutionResult::Ok(json!(3))),
        (&r, ExecutionResult::Ok(json!(-1))),
    ] {
        assert!(
            results.contains(&(id.clone(), result.clone())),
            "{id} finished with {result}: {results:?}"
        );
    }
    let c = sim.report(true, Vec::new()).stubs;
    assert_eq!(
        (c.ok, c.ok_again, c.conflicts, c.not_found),
        (1, 1, 2, 2),
        "{c:?}"
    );
    assert_eq!(
        (
            c.outside_taken,
            c.outside_again,
            c.outside_conflicts,
            c.outside_refused
        ),
        (1, 1, 1, 1),
        "{c:?}"
    );
    assert_eq!((c.stubs, c.written, c.cancelled), (3, 2, 1), "{c:?}");
}

/// A write through another function than the stub's names no stub request of that function:
/// `not-found` by the rules (`StubWriteOutcome::NotFound`, "no execution made such a stub
/// request (of this function)"), before the stub holds a value and after. `Processor::write_stub`
/// compared the function only in its arm for a stub without a value: once the stub held
/// one, the write was answered by the value alone, `ok` for the value held and `conflict`
/// for another (`stub-answer`). Seeded: `dst_stub_wrong_function`.
#[test]
pub(crate) fn a_stub_written_through_another_function_is_not_found() {
    let mut sim = deployment(2, 1);
    let p = sim.submit(Workflow::Stubbed, &[]);
    step(&mut sim, 20);
    let stub = stub_of(&sim, &p);
    // While the stub waits: not-found.
    sim.submit_stub_writer(&stub, 6, true, false);
    step(&mut sim, 20);
    sim.submit_stub_writer(&stub, 7, false, false);
    step(&mut sim, 20);
    // The value it holds, and another, through another function: not-found too.
    sim.submit_stub_writer(&stub, 7, true, true);
    sim.submit_stub_writer(&stub, 8, true, true);
    assert_invariants(&mut sim);
}

/// Answers sent twice (after the parent journalled the first, or after it finished) and a
/// submission sent twice are each journalled once.
#[test]
pub(crate) fn duplicate_answers_and_submissions_are_ignored() {
    let mut sim = deployment(2, 2);
    let id = sim.submit(Workflow::Fanout, &[4, 0]);
    sim.submit(Workflow::Seq, &[3, 100]);
    sim.resubmit(&id);
    step(&mut sim, 12);
    let again: Vec<_> = sim
        .world()
        .activities
        .sent
        .values()
        .flatten()
        .cloned()
        .collect();
    assert!(!again.is_empty());
    for answer in &again {
        sim.world().send_answer(answer.clone());
    }
    step(&mut sim, 40);
    for answer in again {
        sim.world().send_answer(answer);
    }
    sim.resubmit(&id);
    assert_invariants(&mut sim);
}

/// Undecodable records and unknown functions: one DLQ copy each; the unknown function's
/// caller gets `unknown-function`.
#[test]
pub(crate) fn poison_records_are_dead_lettered_once() {
    let mut sim = deployment(2, 2);
    sim.submit_poison();
    sim.submit_unknown();
    sim.submit(Workflow::Seq, &[1, 0]);
    sim.submit_poison();
    assert_invariants(&mut sim);
}

/// Issue 11 items 3 and 4. A resubmission of a finished execution with the same function and
/// params is answered again with its result (and runs nothing); one with other params is
/// dead-lettered and answered with a `conflict` error naming the execution, which is left as
/// it was; a submission on a partition other than its key's is dead-lettered and never runs.
#[test]
pub(crate) fn resubmissions_are_answered_conflicts_and_misrouted_records_refused() {
    use weir_core::model::{ExecutionErrorKind, ExecutionResult};
    use weir_core::sim::cluster::{Payload, Topic};

    let mut sim = deployment(2, 2);
    let id = sim.submit(Workflow::Seq, &[2, 0]);
    assert!(sim.quiesce(60_000));
    sim.resubmit(&id);
    sim.submit_conflicting(&id);
    sim.submit_misrouted();
    assert!(sim.quiesce(60_000));
    let results: Vec<ExecutionResult> = sim
        .world()
        .cluster
        .committed_records(Topic::Results)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Result(f)) if f.execution_id == id => Some(f.result.clone()),
            _ => None,
        })
        .collect();
    let (conflicts, answers): (Vec<_>, Vec<_>) = results.iter().partition(|r| {
        matches!(r, ExecutionResult::ExecutionError(e) if e.kind == ExecutionErrorKind::Conflict)
    });
    assert_eq!(
        answers.len(),
        2,
        "answered once per submission: {results:?}"
    );
    assert_eq!(answers[0], answers[1]);
    assert_eq!(conflicts.len(), 1, "{results:?}");
    assert!(
        conflicts[0]
            .to_string()
            .contains(&format!("execution {id} exists")),
        "{}",
        conflicts[0]
    );
    assert_invariants(&mut sim); // every poison record (the conflict, the misrouted) once in the DLQ
}

/// Issue 11 item 11. One execution's stored history stops decoding (a corrupt row). Its
/// inputs are dead-lettered with the reason; the worker does not stop, and the other
/// executions of the partition finish. (Before, the load error stopped the worker, and every
/// worker that took the partition after it: a crash loop.)
#[test]
pub(crate) fn an_unreadable_stored_history_fails_its_execution_only() {
    use weir_core::records::DlqReason;
    use weir_core::sim::cluster::{Payload, Topic};

    let mut sim = deployment(1, 1);
    let broken = sim.submit(Workflow::Seq, &[2, 0]);
    let fine = sim.submit(Workflow::Seq, &[2, 10]);
    step(&mut sim, 5); // both wait for their first answer; their rows are in the store
    for ((id, _), row) in sim.world().store.history.iter_mut() {
        if *id == broken {
            row.record = b"not a history record".to_vec();
        }
    }
    sim.crash(1); // the restarted worker rebuilds every execution from the store
    sim.quiesce(120_000);
    let w = sim.world();
    assert_eq!(w.stats.exits, 0, "no worker stopped on the bad row");
    let results: Vec<_> = w
        .cluster
        .committed_records(Topic::Results)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Result(f)) => Some(f.execution_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![fine], "only the readable execution finished");
    let dead: Vec<_> = w
        .cluster
        .committed_records(Topic::Dlq)
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::Dlq(e)) => Some((e.reason, e.error.clone())),
            _ => None,
        })
        .collect();
    assert!(
        !dead.is_empty()
            && dead
                .iter()
                .all(|(reason, error)| *reason == DlqReason::Other
                    && error.contains(&format!("the stored history of {broken} is unreadable"))),
        "{dead:?}"
    );
}

/// Workers join and leave (graceful shutdown) while executions run: partitions move,
/// nothing is lost or done twice.
#[test]
pub(crate) fn rebalances_move_partitions_without_loss() {
    let mut sim = deployment(4, 1);
    for i in 0..6 {
        sim.submit(Workflow::Sleepy, &[3, 900, i * 10]);
        sim.submit(Workflow::Parent, &[2, i * 10]);
    }
    step(&mut sim, 10);
    let second = sim.add_worker();
    step(&mut sim, 15);
    sim.add_worker();
    step(&mut sim, 15);
    sim.remove_worker(second);
    step(&mut sim, 15);
    sim.remove_worker(1);
    assert_invariants(&mut sim);
}

/// kill -9 of every worker at once, repeatedly.
#[test]
pub(crate) fn repeated_kills_of_every_worker_lose_nothing() {
    let mut sim = deployment(3, 3);
    for i in 0..5 {
        sim.submit(Workflow::Fanout, &[3, i * 10]);
        sim.submit(Workflow::Sleepy, &[2, 2_500, i * 10]);
    }
    for _ in 0..4 {
        step(&mut sim, 6);
        for slot in sim.slots() {
            sim.run_until_no_transaction(slot, 50);
            sim.crash(slot);
        }
    }
    assert_invariants(&mut sim);
}
