use super::*;
use std::time::Duration;

#[tokio::test]
async fn the_endpoint_serves_current_values() {
    let metrics = Arc::new(Metrics::default());
    metrics.workflow_batches.committed.add(3);
    metrics.activity_batches.seconds.observe(0.5);
    metrics.partitions_owned.set(2);
    metrics.activity_batches.client_restarts.inc();
    metrics.keyed_events_buffered.add(2);
    let addr = serve(Arc::clone(&metrics), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(
        response.contains("weir_batches_committed_total{worker=\"workflow\"} 3"),
        "{response}"
    );
    assert!(
        response.contains("weir_batches_committed_total{worker=\"activity\"} 0"),
        "{response}"
    );
    assert!(
        response.contains("weir_batch_seconds_count{worker=\"activity\"} 1"),
        "{response}"
    );
    assert_eq!(
        response
            .matches("# TYPE weir_batch_seconds summary")
            .count(),
        1,
        "one family, two series: {response}"
    );
    assert!(response.contains("weir_partitions_owned 2"), "{response}");
    assert!(
        response.contains("weir_keyed_events_total{outcome=\"buffered\"} 2"),
        "{response}"
    );
    assert!(
        response.contains("weir_keyed_events_total{outcome=\"returned\"} 0"),
        "{response}"
    );
    assert!(
        response.contains("weir_kafka_client_restarts_total{worker=\"activity\"} 1"),
        "{response}"
    );
}

/// `weir_activity_rate_limited_total` is there from the start, with a series per topic
/// registered (at 0) or counted.
#[test]
fn the_rate_limited_counter_has_a_series_per_limited_topic() {
    let metrics = Metrics::default();
    let rendered = metrics.render();
    assert!(
        rendered.contains("# TYPE weir_activity_rate_limited_total counter"),
        "{rendered}"
    );
    metrics.activity_rate_limited.register("weir.activity.a");
    metrics.activity_rate_limited.add("weir.activity.b", 2);
    metrics.activity_rate_limited.add("weir.activity.b", 1);
    metrics.activity_rate_held.set(4);
    let rendered = metrics.render();
    for (series, value) in [
        (
            "weir_activity_rate_limited_total{topic=\"weir.activity.a\"}",
            "0",
        ),
        (
            "weir_activity_rate_limited_total{topic=\"weir.activity.b\"}",
            "3",
        ),
        ("weir_activity_rate_held", "4"),
    ] {
        assert_eq!(line(&rendered, series), Some(value), "{rendered}");
    }
}

fn sample(partition: i32, position: Option<i64>, end: Option<i64>) -> PartitionSample {
    PartitionSample {
        topic: "weir.submissions".to_owned(),
        partition,
        position,
        end,
    }
}

fn line<'a>(rendered: &'a str, series: &str) -> Option<&'a str> {
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
}

#[test]
fn every_family_an_alert_names_is_there_before_anything_happened() {
    let rendered = Metrics::default().render();
    for series in [
        "weir_consumer_lag_records{worker=\"workflow\"}",
        "weir_partition_stall_seconds_max{worker=\"trigger\"}",
        "weir_dlq_records_by_reason_total{reason=\"misrouted\"}",
        "weir_store_retries_total{op=\"read\"}",
        "weir_store_retries_total{op=\"write\"}",
        "weir_execution_starts_deferred_total",
    ] {
        assert_eq!(line(&rendered, series), Some("0"), "{series} in {rendered}");
    }
    assert!(!rendered.contains("weir_consumer_lag{"), "{rendered}");
}

#[test]
fn dead_letters_are_counted_by_the_reason_in_their_header() {
    let metrics = Metrics::default();
    metrics.dead_letter(b"misrouted");
    metrics.dead_letter(b"misrouted");
    metrics.dead_letter(b"no-such-reason");
    let rendered = metrics.render();
    assert_eq!(line(&rendered, "weir_dlq_records_total"), Some("3"));
    let by = |reason: &str| {
        line(
            &rendered,
            &format!("weir_dlq_records_by_reason_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(by("misrouted"), Some("2"));
    assert_eq!(by("other"), Some("1"));
    assert_eq!(by("conflict"), Some("0"));
}

#[test]
fn a_partition_with_records_to_read_and_no_progress_stalls() {
    let progress = PartitionProgress::default();
    let start = Instant::now();
    progress.record(start, [sample(0, Some(5), Some(10)), sample(1, None, None)]);
    let (lag, stalled) = {
        let state = progress.state();
        assert_eq!(state.partitions.len(), 1, "nothing fetched of 1: not shown");
        let p0 = state.partitions[&("weir.submissions".to_owned(), 0)];
        (p0.lag(), p0.stalled(start + Duration::from_secs(7)))
    };
    assert_eq!(lag, 5);
    assert_eq!(
        stalled,
        Duration::from_secs(7),
        "no progress since the first sample"
    );
    // Same position, more records: the stall goes on.
    let later = start + Duration::from_secs(10);
    progress.record(later, [sample(0, Some(5), Some(12))]);
    let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
    assert_eq!(p0.stalled(later), Duration::from_secs(10));
    // Moving forward ends it, even with records still to read.
    let moved = later + Duration::from_secs(1);
    progress.record(moved, [sample(0, Some(6), Some(12))]);
    let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
    assert_eq!((p0.lag(), p0.stalled(moved)), (6, Duration::ZERO));
}

#[test]
fn an_unknown_position_keeps_the_last_one_or_counts_as_caught_up() {
    let progress = PartitionProgress::default();
    let now = Instant::now();
    // First sight, nothing taken yet: caught up with the end it has.
    progress.record(now, [sample(0, None, Some(10))]);
    let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
    assert_eq!(p0.lag(), 0);
    // Then records arrive and are not read (a sought or paused partition): they lag.
    progress.record(now, [sample(0, None, Some(14))]);
    let p0 = progress.state().partitions[&("weir.submissions".to_owned(), 0)];
    assert_eq!(p0.lag(), 4);
    // A partition no longer assigned goes.
    progress.record(now, [sample(3, Some(0), Some(0))]);
    let state = progress.state();
    assert_eq!(
        state.partitions.keys().collect::<Vec<_>>(),
        [&("weir.submissions".to_owned(), 3)]
    );
}

#[test]
fn per_partition_series_and_their_aggregates_are_rendered() {
    let metrics = Metrics::default();
    let now = Instant::now();
    metrics.workflow_batches.progress.record(
        now,
        [sample(0, Some(1), Some(4)), sample(1, Some(2), Some(4))],
    );
    let rendered = metrics.render();
    let series =
        "weir_consumer_lag{worker=\"workflow\",topic=\"weir.submissions\",partition=\"0\"}";
    assert_eq!(line(&rendered, series), Some("3"), "{rendered}");
    assert_eq!(
        line(&rendered, "weir_consumer_lag_records{worker=\"workflow\"}"),
        Some("5")
    );
    assert_eq!(
        rendered.matches("# TYPE weir_consumer_lag gauge").count(),
        1,
        "{rendered}"
    );
    assert!(
        rendered.contains(
            "weir_partition_stall_seconds{worker=\"workflow\",topic=\"weir.submissions\",partition=\"1\"}"
        ),
        "{rendered}"
    );
}
