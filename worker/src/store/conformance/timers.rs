//! The suite's checks of timers: found by partition and due time (across many buckets, in due
//! order), a dropped bucket shadowing older writes, and a partition's watermark.

use chrono::{Duration, TimeZone as _, Utc};

use super::{Store, base_time, stamp, timer_row};
use crate::store::rows::{TimerKind, TimerRow, TimerWatermark};
use crate::store::{
    DroppedTimerBucket, MAX_TIMER_BUCKETS_PER_SCAN, StoreError, TIMER_BUCKET_SECONDS, timer_bucket,
    to_store_precision,
};

pub async fn timers_are_found_by_partition_and_time<S: Store>(store: &S) {
    let partition = 5;
    let t0 = base_time();
    let timer = |offset_seconds: i64, id: &str, partition: i32| {
        timer_row(
            partition,
            t0 + Duration::seconds(offset_seconds),
            id,
            TimerKind::Delay,
        )
    };
    // Spread over several buckets, two at the same instant, one on another partition.
    let timers = vec![
        timer(0, "a", partition),
        timer(30, "b", partition),
        timer(90, "c", partition),
        timer(90, "c2", partition),
        timer(3 * TIMER_BUCKET_SECONDS + 1, "d", partition),
        timer(10, "other-partition", partition + 1),
    ];
    store
        .put_timers(&timers, stamp(1, 0))
        .await
        .expect("put timers");
    store
        .put_timers(&timers[..2], stamp(1, 0))
        .await
        .expect("put again is harmless");

    let ids = |found: Vec<TimerRow>| found.into_iter().map(|t| t.timer_id).collect::<Vec<_>>();
    let all = store
        .timers_between(partition, t0, t0 + Duration::hours(1))
        .await
        .expect("scan");
    assert_eq!(
        ids(all.clone()),
        ["a", "b", "c", "c2", "d"],
        "ordered by due time, then id"
    );
    assert_eq!(all[1].due_at, to_store_precision(timers[1].due_at));
    assert_eq!(all[1].execution_id, timers[1].execution_id);
    // `until` is exclusive; `from` is inclusive.
    let window = store
        .timers_between(
            partition,
            t0 + Duration::seconds(30),
            t0 + Duration::seconds(90),
        )
        .await
        .expect("scan");
    assert_eq!(ids(window), ["b"]);

    store
        .delete_timer(partition, timers[2].due_at, "c", stamp(1, 1))
        .await
        .expect("delete");
    store
        .delete_timer(partition, timers[2].due_at, "c", stamp(1, 1))
        .await
        .expect("deleting twice is harmless");
    let after = store
        .timers_between(partition, t0, t0 + Duration::hours(1))
        .await
        .expect("scan");
    assert_eq!(ids(after), ["a", "b", "c2", "d"]);

    let too_far = t0 + Duration::seconds((MAX_TIMER_BUCKETS_PER_SCAN + 2) * TIMER_BUCKET_SECONDS);
    let err = store
        .timers_between(partition, t0, too_far)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::TimerRange { .. }), "{err}");
}

/// `drop_timer_bucket`: every timer of the bucket written at or before the drop's stamp is
/// gone, and so is one written with such a stamp after the drop (a fenced owner's queued
/// `retry` timer landing late); a later stamp's write stands, as do other buckets and
/// partitions.
pub async fn a_dropped_timer_bucket_shadows_older_writes<S: Store>(store: &S) {
    let partition = 9_003;
    let bucket = timer_bucket(base_time());
    let start = Utc
        .timestamp_opt(bucket * TIMER_BUCKET_SECONDS, 0)
        .single()
        .expect("valid time");
    let timer = |offset_seconds: i64, id: &str, partition: i32| {
        timer_row(
            partition,
            start + Duration::seconds(offset_seconds),
            id,
            TimerKind::Retry,
        )
    };
    let first = timer(0, "first", partition);
    let last = timer(TIMER_BUCKET_SECONDS - 1, "last", partition);
    let next_bucket = timer(TIMER_BUCKET_SECONDS, "next-bucket", partition);
    let other_partition = timer(1, "other-partition", partition + 1);
    let all = [&first, &last, &next_bucket, &other_partition].map(Clone::clone);
    store.put_timers(&all, stamp(1, 0)).await.expect("put");
    let dropped = DroppedTimerBucket {
        kafka_partition: partition,
        bucket,
    };
    store
        .drop_timer_bucket(dropped, stamp(2, 0))
        .await
        .expect("drop");
    store
        .drop_timer_bucket(dropped, stamp(2, 0))
        .await
        .expect("dropping twice is harmless");
    let late = timer(30, "late", partition);
    store
        .put_timers(std::slice::from_ref(&late), stamp(1, 9))
        .await
        .expect("a former owner's late write");
    let later = timer(31, "later-owner", partition);
    store
        .put_timers(std::slice::from_ref(&later), stamp(3, 0))
        .await
        .expect("a later owner's write");
    let ids = |found: Vec<TimerRow>| found.into_iter().map(|t| t.timer_id).collect::<Vec<_>>();
    let until = start + Duration::hours(1);
    let found = store
        .timers_between(partition, start, until)
        .await
        .expect("scan");
    assert_eq!(ids(found), ["later-owner", "next-bucket"]);
    let found = store
        .timers_between(partition + 1, start, until)
        .await
        .expect("scan");
    assert_eq!(ids(found), ["other-partition"]);
}

/// A partition's timer watermark: absent, written, overwritten; other partitions untouched.
pub async fn timer_watermarks_round_trip<S: Store>(store: &S) {
    // A partition no other check of the suite uses, so that suites can share a keyspace.
    let partition = 9_001;
    assert_eq!(store.timer_watermark(partition).await.expect("read"), None);
    let mut watermark = TimerWatermark {
        kafka_partition: partition,
        fired_before: base_time(),
        owner: "worker-a".to_owned(),
        updated_at: base_time(),
    };
    store
        .put_timer_watermark(&watermark, stamp(1, 0))
        .await
        .expect("write");
    let stored = |w: &TimerWatermark| TimerWatermark {
        fired_before: to_store_precision(w.fired_before),
        updated_at: to_store_precision(w.updated_at),
        ..w.clone()
    };
    assert_eq!(
        store.timer_watermark(partition).await.expect("read"),
        Some(stored(&watermark))
    );
    watermark.fired_before = base_time() + Duration::minutes(3);
    watermark.owner = "worker-b".to_owned();
    store
        .put_timer_watermark(&watermark, stamp(1, 5))
        .await
        .expect("overwrite");
    assert_eq!(
        store.timer_watermark(partition).await.expect("read"),
        Some(stored(&watermark))
    );
    assert_eq!(
        store.timer_watermark(partition + 1).await.expect("read"),
        None
    );
}

/// A scan of a day (what a take-over without a watermark reads: more buckets than a store
/// reads at once) finds every timer of it, in due order, whatever the order they were
/// written in, and none past its end.
pub async fn a_day_of_timers_is_scanned_whole_and_in_order<S: Store>(store: &S) {
    // A partition no other check of the suite uses.
    let partition = 9_011;
    let t0 = base_time();
    // One every 29 minutes over a day and a bit: about fifty buckets apart, written last first.
    let due: Vec<_> = (0..52).map(|i| t0 + Duration::minutes(29 * i)).collect();
    let timers: Vec<TimerRow> = due
        .iter()
        .enumerate()
        .rev()
        .map(|(i, at)| timer_row(partition, *at, &format!("t{i:02}"), TimerKind::Delay))
        .collect();
    store
        .put_timers(&timers, stamp(1, 0))
        .await
        .expect("put timers");
    let until = t0 + Duration::days(1);
    let found = store
        .timers_between(partition, t0, until)
        .await
        .expect("scan a day");
    let expected: Vec<String> = (0..due.len())
        .filter(|&i| due[i] < until)
        .map(|i| format!("t{i:02}"))
        .collect();
    assert_eq!(
        found.iter().map(|t| t.timer_id.clone()).collect::<Vec<_>>(),
        expected,
        "every timer of the day, in due order, none after it"
    );
    assert!(
        found.windows(2).all(|w| w[0].due_at <= w[1].due_at),
        "in due order"
    );
}
