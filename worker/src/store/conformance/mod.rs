//! The behaviour every [`Store`] must have, as one suite run against each implementation: the
//! in-memory store in unit tests, the CQL store in the end-to-end tests on the real Cassandra.
//! Each check panics with a message naming what differs. Run it on an empty store.

use chrono::{DateTime, Duration, TimeZone, Utc};
use ulid::Ulid;

use super::rows::{
    Checkpoint, EntryKind, ExecutionRow, ExecutionState, HistoryRow, TimerKind, TimerRow,
    TimerWatermark, WriteStamp,
};
use super::{COMPONENT_CHUNK_BYTES, ComponentBuild, Store, to_store_precision};
use crate::model::ids::ExecutionId;

mod history;
mod timers;
pub use history::*;
pub use timers::*;

/// Runs every check of the suite.
pub async fn run_all<S: Store>(store: &S) {
    history_is_ordered_and_idempotent(store).await;
    long_histories_are_read_whole(store).await;
    history_after_reads_what_follows_a_seq(store).await;
    executions_round_trip(store).await;
    timers_are_found_by_partition_and_time(store).await;
    a_day_of_timers_is_scanned_whole_and_in_order(store).await;
    a_dropped_timer_bucket_shadows_older_writes(store).await;
    checkpoints_round_trip(store).await;
    batches_of_executions_are_materialised_together(store).await;
    large_histories_are_materialised_whole(store).await;
    many_checkpoints_are_written_at_once(store).await;
    timer_watermarks_round_trip(store).await;
    older_writes_never_win(store).await;
    executions_are_listed_by_function_and_parent(store).await;
    component_builds_round_trip(store).await;
    functions_are_catalogued(store).await;
}

/// `functions`: every function an execution row was written for, once, sorted, whether the
/// row came through `put_execution` or `materialise`, and however many executions it has.
pub async fn functions_are_catalogued<S: Store>(store: &S) {
    let suffix = Ulid::new();
    let (first, second) = (
        format!("weir-examples:catalogue/c{suffix}.a"),
        format!("weir-examples:catalogue/c{suffix}.b"),
    );
    let row = |ffqn: &str| ExecutionRow {
        execution_id: new_id(),
        ffqn: ffqn.to_owned(),
        parent_id: None,
        params: "[]".to_owned(),
        state: ExecutionState::Running,
        result: None,
        history_version: 1,
        kafka_partition: 0,
        created_at: base_time(),
        updated_at: base_time(),
        finished_at: None,
    };
    assert!(
        !store
            .functions()
            .await
            .expect("functions")
            .contains(&second),
        "not catalogued before it has an execution"
    );
    store.put_execution(&row(&second)).await.expect("write");
    store.put_execution(&row(&second)).await.expect("write");
    store
        .materialise(&[], &[row(&first), row(&second)])
        .await
        .expect("materialise");
    let functions = store.functions().await.expect("functions");
    let ours: Vec<&String> = functions
        .iter()
        .filter(|f| f.contains(&suffix.to_string()))
        .collect();
    assert_eq!(ours, [&first, &second], "once each, sorted");
    assert!(functions.is_sorted(), "{functions:?}");
}

/// A build is found by its digest, byte for byte, whatever its size (several chunks, one,
/// none); writing it again changes nothing; an unknown digest is `None`.
pub async fn component_builds_round_trip<S: Store>(store: &S) {
    let tag = Ulid::new().to_string();
    let sizes = [0, 17, COMPONENT_CHUNK_BYTES, 2 * COMPONENT_CHUNK_BYTES + 5];
    for size in sizes {
        let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let build = ComponentBuild {
            digest: format!("sha256:{tag}-{size}"),
            name: format!("flow-{size}"),
            bytes,
            registered_at: base_time(),
        };
        assert!(
            !store.has_component_build(&build.digest).await.unwrap(),
            "{}: found before it was written",
            build.digest
        );
        store.put_component_build(&build).await.unwrap();
        store.put_component_build(&build).await.unwrap();
        assert!(
            store.has_component_build(&build.digest).await.unwrap(),
            "{}: not found after it was written",
            build.digest
        );
        let read = store
            .component_build(&build.digest)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{}: not read back", build.digest));
        assert_eq!(read.name, build.name);
        assert_eq!(read.registered_at, to_store_precision(base_time()));
        assert!(
            read.bytes == build.bytes,
            "{}: {} bytes read back, {} written (or different ones)",
            build.digest,
            read.bytes.len(),
            build.bytes.len()
        );
    }
    assert_eq!(
        store
            .component_build(&format!("sha256:{tag}-unknown"))
            .await
            .unwrap(),
        None
    );
}

/// The stamp of a write by the owner of group generation `generation`, `secs` into the run.
fn stamp(generation: u64, secs: i64) -> WriteStamp {
    WriteStamp::owner(generation, base_time() + Duration::seconds(secs))
}

fn new_id() -> ExecutionId {
    ExecutionId::top_level(Ulid::new())
}

/// A time with sub-millisecond digits, which every store must cut to milliseconds.
fn base_time() -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000, 123_456_789)
        .single()
        .expect("valid time")
}

/// A timer of a new execution.
fn timer_row(partition: i32, due_at: DateTime<Utc>, id: &str, kind: TimerKind) -> TimerRow {
    TimerRow {
        kafka_partition: partition,
        due_at,
        timer_id: id.to_owned(),
        execution_id: new_id(),
        kind,
    }
}

fn history_row(id: &ExecutionId, seq: i64) -> HistoryRow {
    HistoryRow {
        execution_id: id.clone(),
        seq,
        kind: if seq == 0 {
            EntryKind::Created
        } else {
            EntryKind::Event
        },
        record: format!("record {seq} of {id}").into_bytes(),
        kafka_partition: 3,
        kafka_offset: 1000 + seq,
        recorded_at: base_time() + Duration::milliseconds(seq),
    }
}

fn execution_row(id: &ExecutionId, history_version: i64) -> ExecutionRow {
    ExecutionRow {
        execution_id: id.clone(),
        ffqn: "weir-examples:workflows/steps.fibonacci-chain".to_owned(),
        parent_id: None,
        params: "[30,20]".to_owned(),
        state: ExecutionState::Running,
        result: None,
        history_version,
        kafka_partition: 3,
        created_at: to_store_precision(base_time()),
        updated_at: to_store_precision(base_time()),
        finished_at: None,
    }
}

/// What the materialiser writes after a batch: some executions with new rows and a new
/// execution row, one with rows only, one with its execution row only.
pub async fn batches_of_executions_are_materialised_together<S: Store>(store: &S) {
    let (both, rows_only, row_only) = (new_id(), new_id(), new_id());
    let history = [
        history_row(&both, 0),
        history_row(&rows_only, 0),
        history_row(&both, 1),
        history_row(&rows_only, 1),
    ];
    let executions = [execution_row(&both, 2), execution_row(&row_only, 9)];
    store
        .materialise(&history, &executions)
        .await
        .expect("materialise");
    // Again, as after a crash before the checkpoint: nothing changes.
    store
        .materialise(&history, &executions)
        .await
        .expect("materialise again");
    for (id, rows) in [(&both, 2), (&rows_only, 2), (&row_only, 0)] {
        let read = store.history(id).await.expect("history");
        assert_eq!(
            read.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (0..rows).collect::<Vec<i64>>(),
            "history of {id}"
        );
    }
    assert_eq!(
        store.execution(&both).await.expect("read"),
        Some(executions[0].clone())
    );
    assert_eq!(store.execution(&rows_only).await.expect("read"), None);
    assert_eq!(
        store.execution(&row_only).await.expect("read"),
        Some(executions[1].clone())
    );
    store.materialise(&[], &[]).await.expect("nothing to write");
}

/// More record bytes in one execution's rows than one database mutation may carry.
pub async fn large_histories_are_materialised_whole<S: Store>(store: &S) {
    let id = new_id();
    let rows: Vec<HistoryRow> = (0..6)
        .map(|seq| HistoryRow {
            record: vec![seq as u8; 900 * 1024],
            ..history_row(&id, seq)
        })
        .collect();
    let execution = execution_row(&id, 6);
    store
        .materialise(&rows, std::slice::from_ref(&execution))
        .await
        .expect("materialise 5.4 MB of records of one execution");
    let read = store.history(&id).await.expect("history");
    assert_eq!(read.len(), 6, "every large row of {id}");
    assert!(
        read.iter()
            .zip(&rows)
            .all(|(read, written)| read.record == written.record),
        "the records of {id} read back as written"
    );
    assert_eq!(
        store.execution(&id).await.expect("read"),
        Some(execution),
        "the execution row of {id}"
    );
}

/// More checkpoints than one request may carry in some backends.
pub async fn many_checkpoints_are_written_at_once<S: Store>(store: &S) {
    let topic = format!("weir.history.{}", Ulid::new());
    let checkpoints: Vec<Checkpoint> = (0..25)
        .map(|partition| Checkpoint {
            topic: topic.clone(),
            kafka_partition: partition,
            materialised_offset: 1000 + i64::from(partition),
            owner: "worker-a".to_owned(),
            updated_at: to_store_precision(base_time()),
        })
        .collect();
    store
        .put_checkpoints(&checkpoints, stamp(1, 0))
        .await
        .expect("write");
    store
        .put_checkpoints(&[], stamp(1, 0))
        .await
        .expect("nothing to write");
    for expected in &checkpoints {
        assert_eq!(
            store
                .checkpoint(&topic, expected.kafka_partition)
                .await
                .expect("read")
                .as_ref(),
            Some(expected)
        );
    }
}

pub async fn executions_round_trip<S: Store>(store: &S) {
    let parent = new_id();
    let id = new_id();
    let mut row = ExecutionRow {
        execution_id: id.clone(),
        ffqn: "weir-examples:workflows/order.place".to_owned(),
        parent_id: Some(parent),
        params: r#"["alice",{"sku":"widget"}]"#.to_owned(),
        state: ExecutionState::Running,
        result: None,
        history_version: 7,
        kafka_partition: 2,
        created_at: base_time(),
        updated_at: base_time() + Duration::seconds(1),
        finished_at: None,
    };
    assert_eq!(store.execution(&id).await.expect("read"), None);
    store.put_execution(&row).await.expect("write");
    let normalized = |r: &ExecutionRow| ExecutionRow {
        created_at: to_store_precision(r.created_at),
        updated_at: to_store_precision(r.updated_at),
        finished_at: r.finished_at.map(to_store_precision),
        ..r.clone()
    };
    assert_eq!(
        store.execution(&id).await.expect("read"),
        Some(normalized(&row))
    );

    row.state = ExecutionState::Finished;
    row.result = Some(r#"{"ok":"shipped"}"#.to_owned());
    row.history_version = 12;
    row.parent_id = None;
    row.finished_at = Some(base_time() + Duration::seconds(5));
    store.put_execution(&row).await.expect("overwrite");
    assert_eq!(
        store.execution(&id).await.expect("read"),
        Some(normalized(&row))
    );

    // A late write of an older version (a fenced worker's materialiser) changes nothing, alone
    // or in a batch with history rows.
    let newer = row.clone();
    let mut older = row.clone();
    older.state = ExecutionState::Running;
    older.result = None;
    older.history_version = 9;
    older.finished_at = None;
    store.put_execution(&older).await.expect("late write");
    store
        .materialise(&[history_row(&id, 9)], std::slice::from_ref(&older))
        .await
        .expect("late batch");
    assert_eq!(
        store.execution(&id).await.expect("read"),
        Some(normalized(&newer))
    );
}

pub async fn checkpoints_round_trip<S: Store>(store: &S) {
    let topic = format!("weir.history.{}", Ulid::new());
    assert_eq!(store.checkpoint(&topic, 0).await.expect("read"), None);
    let mut checkpoint = Checkpoint {
        topic: topic.clone(),
        kafka_partition: 0,
        materialised_offset: 42,
        owner: "worker-a".to_owned(),
        updated_at: base_time(),
    };
    store
        .put_checkpoint(&checkpoint, stamp(1, 0))
        .await
        .expect("write");
    checkpoint.kafka_partition = 1;
    checkpoint.materialised_offset = 7;
    store
        .put_checkpoint(&checkpoint, stamp(1, 0))
        .await
        .expect("write");
    checkpoint.materialised_offset = 99;
    checkpoint.owner = "worker-b".to_owned();
    store
        .put_checkpoint(&checkpoint, stamp(2, 0))
        .await
        .expect("overwrite");

    let p0 = store
        .checkpoint(&topic, 0)
        .await
        .expect("read")
        .expect("present");
    assert_eq!(
        (p0.materialised_offset, p0.owner.as_str()),
        (42, "worker-a")
    );
    let p1 = store
        .checkpoint(&topic, 1)
        .await
        .expect("read")
        .expect("present");
    assert_eq!(
        (p1.materialised_offset, p1.owner.as_str()),
        (99, "worker-b")
    );
    assert_eq!(p1.updated_at, to_store_precision(base_time()));
}

/// What a former owner wrote late — a zombie's queued job, a revoked worker's lagging writer
/// — never replaces what a later owner wrote, whatever the order of arrival: a fired timer
/// stays deleted, a checkpoint and a watermark keep the newer owner's value. Within one
/// owner, a later write wins; at equal stamps a delete wins.
pub async fn older_writes_never_win<S: Store>(store: &S) {
    // Partitions no other check uses.
    let partition = 9_002;
    let topic = format!("weir.history.{}", Ulid::new());
    let due = base_time() + Duration::seconds(30);
    let timer = |id: &str| timer_row(partition, due, id, TimerKind::Delay);
    let ids = |found: Vec<TimerRow>| found.into_iter().map(|t| t.timer_id).collect::<Vec<_>>();
    let scan = || store.timers_between(partition, base_time(), base_time() + Duration::hours(1));

    // The new owner (generation 8) fires a delay the old one (7) requested; the old one's
    // queued put of the same timer arrives afterwards.
    store
        .delete_timer(partition, due, "fired", stamp(8, 0))
        .await
        .expect("delete");
    store
        .put_timers(&[timer("fired")], stamp(7, 100))
        .await
        .expect("late put");
    // A timer the new owner puts, deleted late by nobody: an older delete loses too.
    store
        .put_timers(&[timer("kept")], stamp(8, 1))
        .await
        .expect("put");
    store
        .delete_timer(partition, due, "kept", stamp(7, 200))
        .await
        .expect("late delete");
    // One owner's later delete wins over its put; at equal stamps too.
    store
        .put_timers(&[timer("same-second")], stamp(8, 2))
        .await
        .expect("put");
    store
        .delete_timer(partition, due, "same-second", stamp(8, 2))
        .await
        .expect("delete");
    assert_eq!(ids(scan().await.expect("scan")), ["kept"]);

    let checkpoint = |offset: i64, owner: &str| Checkpoint {
        topic: topic.clone(),
        kafka_partition: partition,
        materialised_offset: offset,
        owner: owner.to_owned(),
        updated_at: to_store_precision(base_time()),
    };
    store
        .put_checkpoint(&checkpoint(500, "new-owner"), stamp(8, 0))
        .await
        .expect("write");
    store
        .put_checkpoints(&[checkpoint(450, "old-owner")], stamp(7, 100))
        .await
        .expect("late write");
    let read = store.checkpoint(&topic, partition).await.expect("read");
    assert_eq!(read, Some(checkpoint(500, "new-owner")));
    store
        .put_checkpoint(&checkpoint(600, "new-owner"), stamp(8, 5))
        .await
        .expect("write");
    let read = store.checkpoint(&topic, partition).await.expect("read");
    assert_eq!(read.map(|c| c.materialised_offset), Some(600));

    let watermark = |secs: i64, owner: &str| TimerWatermark {
        kafka_partition: partition,
        fired_before: to_store_precision(base_time() + Duration::seconds(secs)),
        owner: owner.to_owned(),
        updated_at: to_store_precision(base_time()),
    };
    store
        .put_timer_watermark(&watermark(10, "new-owner"), stamp(8, 0))
        .await
        .expect("write");
    // The old owner's idle watermark, written later and further ahead: past a timer the new
    // owner requested, which the old one never knew of.
    store
        .put_timer_watermark(&watermark(90, "old-owner"), stamp(7, 100))
        .await
        .expect("late write");
    assert_eq!(
        store.timer_watermark(partition).await.expect("read"),
        Some(watermark(10, "new-owner"))
    );
}

/// `list_executions`: newest first, paged by cursor, filtered by state, outcome and time, by
/// function or by parent; a late older write changes nothing listed.
pub async fn executions_are_listed_by_function_and_parent<S: Store>(store: &S) {
    use weir_core::rows::{ListBy, ListQuery};
    let ffqn = format!("weir-examples:list/l{}.f", Ulid::new());
    let parent = new_id();
    let row = |id: &ExecutionId, secs: i64, child: bool| ExecutionRow {
        execution_id: id.clone(),
        ffqn: ffqn.clone(),
        parent_id: child.then(|| parent.clone()),
        params: "[]".to_owned(),
        state: ExecutionState::Running,
        result: None,
        history_version: 1,
        kafka_partition: 0,
        created_at: base_time() + Duration::seconds(secs),
        updated_at: base_time() + Duration::seconds(secs),
        finished_at: None,
    };
    // Five executions a day apart (so over several day buckets), the newest two children.
    let ids: Vec<ExecutionId> = (0..5).map(|_| new_id()).collect();
    for (i, id) in ids.iter().enumerate() {
        store
            .put_execution(&row(id, i as i64 * 86_400, i >= 3))
            .await
            .expect("write");
    }
    // One finished ok, one finished with a trap, through the materialiser's path.
    let mut ok = row(&ids[1], 86_400, false);
    ok.state = ExecutionState::Finished;
    ok.result = Some(r#"{"ok":1}"#.to_owned());
    ok.history_version = 5;
    ok.finished_at = Some(base_time() + Duration::seconds(86_400 + 10));
    let mut trapped = row(&ids[2], 2 * 86_400, false);
    trapped.state = ExecutionState::Finished;
    trapped.result = Some(r#"{"execution_error":{"kind":"trap","reason":"x"}}"#.to_owned());
    trapped.history_version = 5;
    trapped.finished_at = Some(base_time() + Duration::seconds(2 * 86_400 + 10));
    store
        .materialise(&[], &[ok.clone(), trapped])
        .await
        .expect("materialise");
    // A late, older write of the finished one changes nothing.
    store
        .put_execution(&row(&ids[1], 86_400, false))
        .await
        .expect("late");

    let query = |limit: usize| ListQuery {
        by: ListBy::Function(ffqn.clone()),
        state: None,
        outcome: None,
        created_from: Some(base_time() - Duration::days(1)),
        created_until: Some(base_time() + Duration::days(10)),
        finished_from: None,
        finished_until: None,
        limit,
        after: None,
    };
    let ids_of = |page: &weir_core::rows::ListPage| -> Vec<ExecutionId> {
        page.executions
            .iter()
            .map(|e| e.execution_id.clone())
            .collect()
    };
    let newest_first: Vec<ExecutionId> = ids.iter().rev().cloned().collect();
    let all = store.list_executions(&query(10)).await.expect("list");
    assert_eq!(ids_of(&all), newest_first);
    assert_eq!(all.next, None);
    // Pages of two.
    let mut paged = Vec::new();
    let mut q = query(2);
    loop {
        let page = store.list_executions(&q).await.expect("page");
        assert!(page.executions.len() <= 2);
        paged.extend(ids_of(&page));
        match page.next {
            Some(next) => q.after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, newest_first);
    // Filters.
    let finished = store
        .list_executions(&ListQuery {
            state: Some(ExecutionState::Finished),
            ..query(10)
        })
        .await
        .expect("finished");
    assert_eq!(ids_of(&finished), vec![ids[2].clone(), ids[1].clone()]);
    assert_eq!(finished.executions[1].outcome.as_deref(), Some("ok"));
    assert_eq!(
        finished.executions[1].finished_at,
        ok.finished_at.map(to_store_precision)
    );
    let traps = store
        .list_executions(&ListQuery {
            outcome: Some("trap".to_owned()),
            ..query(10)
        })
        .await
        .expect("traps");
    assert_eq!(ids_of(&traps), vec![ids[2].clone()]);
    let recent = store
        .list_executions(&ListQuery {
            created_from: Some(to_store_precision(base_time()) + Duration::days(3)),
            ..query(10)
        })
        .await
        .expect("recent");
    assert_eq!(ids_of(&recent), vec![ids[4].clone(), ids[3].clone()]);
    let children = store
        .list_executions(&ListQuery {
            by: ListBy::Parent(parent.clone()),
            ..query(10)
        })
        .await
        .expect("children");
    assert_eq!(ids_of(&children), vec![ids[4].clone(), ids[3].clone()]);
    assert!(children.executions.iter().all(|e| e.ffqn == ffqn));
    // Children a page at a time: the next page starts after the cursor.
    let first = store
        .list_executions(&ListQuery {
            by: ListBy::Parent(parent.clone()),
            ..query(1)
        })
        .await
        .expect("first child");
    assert_eq!(ids_of(&first), vec![ids[4].clone()]);
    let second = store
        .list_executions(&ListQuery {
            by: ListBy::Parent(parent.clone()),
            after: first.next.clone(),
            ..query(1)
        })
        .await
        .expect("second child");
    assert_eq!(ids_of(&second), vec![ids[3].clone()]);
    assert_eq!(second.next, None);
}

/// The retention the [`finished_executions_expire`] check expects of its store.
pub const EXPIRY_CHECK_RETENTION_SECS: i64 = 2;

/// Run on a store with a retention of [`EXPIRY_CHECK_RETENTION_SECS`]: a finished execution
/// expires whole (its row, its list row and its history, also the records written while it
/// ran), one finished long ago expires at once when written late, and a running one stays
/// (however old).
pub async fn finished_executions_expire<S: Store>(store: &S) {
    let ffqn = format!("weir-examples:retention/r{}.f", Ulid::new());
    let now = Utc::now();
    let row = |id: &ExecutionId, finished: Option<DateTime<Utc>>| ExecutionRow {
        execution_id: id.clone(),
        ffqn: ffqn.clone(),
        parent_id: None,
        params: "[]".to_owned(),
        state: if finished.is_some() {
            ExecutionState::Finished
        } else {
            ExecutionState::Running
        },
        result: finished.map(|_| r#"{"ok":1}"#.to_owned()),
        history_version: if finished.is_some() { 3 } else { 2 },
        kafka_partition: 0,
        created_at: now - Duration::hours(1),
        updated_at: now,
        finished_at: finished,
    };
    let (done, old, running) = (new_id(), new_id(), new_id());
    // While `done` runs, its first records are written without a finish.
    store
        .materialise(
            &[history_row(&done, 0), history_row(&done, 1)],
            &[row(&done, None), row(&running, None)],
        )
        .await
        .expect("materialise the running ones");
    store
        .append_history(&[history_row(&running, 0), history_row(&running, 1)])
        .await
        .expect("history");
    // Then it finishes; `old` is materialised late, a year after it finished.
    store
        .materialise(
            &[history_row(&done, 2), history_row(&old, 0)],
            &[
                row(&done, Some(now)),
                row(&old, Some(now - Duration::days(365))),
            ],
        )
        .await
        .expect("materialise the finish");
    let query = weir_core::rows::ListQuery {
        by: weir_core::rows::ListBy::Function(ffqn.clone()),
        state: None,
        outcome: None,
        created_from: Some(now - Duration::days(1)),
        created_until: Some(now),
        finished_from: None,
        finished_until: None,
        limit: 10,
        after: None,
    };
    // Gone once the retention has passed (and the store's clock with it): wait, bounded.
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_secs(EXPIRY_CHECK_RETENTION_SECS as u64 + 30);
    loop {
        let listed = store.list_executions(&query).await.expect("list");
        let left = [
            store.execution(&done).await.expect("read").is_some(),
            !store.history(&done).await.expect("read").is_empty(),
            store.execution(&old).await.expect("read").is_some(),
            !store.history(&old).await.expect("read").is_empty(),
            listed
                .executions
                .iter()
                .any(|e| e.execution_id == done || e.execution_id == old),
        ];
        if !left.contains(&true) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still there {EXPIRY_CHECK_RETENTION_SECS} s + 30 s after the finish: \
             [done row, done history, old row, old history, listed] = {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The running one stays, with its history and its list row.
    assert!(store.execution(&running).await.expect("read").is_some());
    assert_eq!(store.history(&running).await.expect("read").len(), 2);
    let listed = store.list_executions(&query).await.expect("list");
    assert_eq!(listed.executions.len(), 1, "only the running one is listed");
    assert_eq!(listed.executions[0].execution_id, running);
}
