//! Reading `weir.state`: kinds, last records, corrupt and unknown states, remembered ids.

use weir_core::correlation::CorrelationState;
use weir_core::schedule::{ScheduleSpec, ScheduleState, Status};

use super::*;

/// A schedule's state with every field set (the dlq tests encode it too).
pub(crate) fn schedule(name: &str) -> ScheduleState {
    let at = DateTime::from_timestamp(1_790_000_000, 123_456_789).expect("a time");
    ScheduleState {
        name: name.into(),
        generation: "g".into(),
        spec: ScheduleSpec {
            cron: "0 0 2 * * *".into(),
            timezone: "UTC".into(),
            ffqn: "app:p/i.f".parse().expect("ffqn"),
            params: serde_json::json!([]),
            overlap: weir_core::schedule::Overlap::Skip,
            catchup_window: weir_core::schedule::DEFAULT_CATCHUP_WINDOW,
        },
        status: Status::Active,
        last_tick: None,
        next_tick: Some(at),
        running: Vec::new(),
        started: 0,
        skipped: 0,
        missed: 0,
        updated_at: at,
    }
}

fn correlation(key: &str) -> CorrelationState {
    CorrelationState {
        key: key.into(),
        holders: vec!["E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("an id")],
        buffered: Vec::new(),
        waits_until: None,
        cancel: None,
    }
}

/// `weir.state` holds both schedules and correlation keys: the header tells them apart,
/// the last record of a key wins, a tombstone forgets it, and a listing of schedules
/// skips the keys.
#[test]
fn the_state_topic_is_read_as_schedules_and_correlation_keys() {
    let codec = Codec::single_object();
    let topic = "weir.state";
    let nightly = codec.encode(topic, &schedule("nightly")).expect("encodes");
    let weekly = codec.encode(topic, &schedule("weekly")).expect("encodes");
    let held = codec
        .encode(topic, &StoredCorrelation::of(correlation("payment:1")))
        .expect("encodes");
    let gone = codec
        .encode(topic, &StoredCorrelation::of(correlation("payment:2")))
        .expect("encodes");
    let schedule_kind = Ok(RecordType::ScheduleState);
    let correlation_kind = || Ok(RecordType::CorrelationState);
    let feed = |records: &mut StateRecords<'_>| {
        records.take(
            b"schedule:nightly",
            0,
            0,
            Some(&nightly),
            schedule_kind.clone(),
        );
        records.take(b"payment:1", 0, 1, Some(&held), correlation_kind());
        records.take(b"payment:2", 1, 0, Some(&gone), correlation_kind());
        records.take(
            b"schedule:weekly",
            1,
            1,
            Some(&weekly),
            schedule_kind.clone(),
        );
        records.take(b"payment:2", 1, 2, None, correlation_kind());
        records.take(b"schedule:weekly", 1, 3, None, schedule_kind.clone());
        // A correlation key's state that does not decode at all is corrupt.
        records.take(b"payment:3", 2, 0, Some(b"not avro"), correlation_kind());
        // A schedule's bytes under the correlation header do not decode as a key's: a
        // known writer schema that is not a key's, left out (not corrupt).
        records.take(b"payment:4", 2, 1, Some(&nightly), correlation_kind());
        // A record of no kind Weir knows is left out.
        records.take(
            b"payment:5",
            2,
            2,
            Some(&held),
            Err(KindError::Unknown {
                value: "telepathy".into(),
            }),
        );
    };
    let corrupt_keys = |state: &KeyedState| -> Vec<Vec<u8>> {
        state.corrupt.iter().filter_map(|c| c.key.clone()).collect()
    };
    let mut all = StateRecords::new(&codec, topic, Wanted::All);
    feed(&mut all);
    let state = all.finish().expect("read");
    assert_eq!(state.schedules, vec![schedule("nightly")]);
    assert_eq!(state.correlations, vec![correlation("payment:1")]);
    assert_eq!(corrupt_keys(&state), vec![b"payment:3".to_vec()]);
    let corrupt = &state.corrupt[0];
    assert_eq!((corrupt.partition, corrupt.offset), (2, 0));
    assert_eq!(corrupt.of, weir_core::processor::StateOf::Correlation);
    assert_eq!(corrupt.value, b"not avro");
    let mut listing = StateRecords::new(&codec, topic, Wanted::Schedules);
    feed(&mut listing);
    let state = listing.finish().expect("read");
    assert_eq!(state.schedules.len(), 1);
    assert!(state.correlations.is_empty());
    assert!(state.corrupt.is_empty());
    let mut keys = StateRecords::new(&codec, topic, Wanted::Correlations);
    feed(&mut keys);
    let state = keys.finish().expect("read");
    assert!(state.schedules.is_empty());
    assert_eq!(state.correlations, vec![correlation("payment:1")]);
    assert_eq!(corrupt_keys(&state), vec![b"payment:3".to_vec()]);
}

/// Corrupt bytes are told from a good state of another version: broken framing, a cut
/// header, a body that breaks under its own (known) writer schema, trailing bytes are
/// corrupt; a writer schema this worker does not know (a newer Weir's fingerprint) is
/// left out and in place; a later good record of the key replaces a corrupt one.
#[test]
fn corrupt_state_is_told_from_a_state_of_an_unknown_schema() {
    let codec = Codec::single_object();
    let topic = "weir.state";
    let good = codec
        .encode(topic, &StoredCorrelation::of(correlation("payment:1")))
        .expect("encodes");
    // Single-object: 0xC3 0x01, the 8-byte fingerprint, the body.
    let mut newer = good.clone();
    newer[2..10].copy_from_slice(&[0xAB; 8]);
    let mut broken_body = good[..10].to_vec();
    broken_body.extend_from_slice(&[0xFF; 3]);
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"extra");
    let kind = || Ok(RecordType::CorrelationState);
    let mut records = StateRecords::new(&codec, topic, Wanted::All);
    records.take(b"k-newer", 0, 0, Some(&newer), kind());
    records.take(b"k-framing", 0, 1, Some(b"\x07garbage"), kind());
    records.take(b"k-header", 0, 2, Some(&good[..5]), kind());
    records.take(b"k-body", 0, 3, Some(&broken_body), kind());
    records.take(b"k-trailing", 0, 4, Some(&trailing), kind());
    records.take(b"k-empty", 0, 5, Some(b""), kind());
    records.take(b"k-mended", 0, 6, Some(b"\x07garbage"), kind());
    records.take(b"k-mended", 0, 7, Some(&good), kind());
    let state = records.finish().expect("read");
    let mut corrupt: Vec<&[u8]> = state
        .corrupt
        .iter()
        .filter_map(|c| c.key.as_deref())
        .collect();
    corrupt.sort();
    assert_eq!(
        corrupt,
        vec![
            &b"k-body"[..],
            b"k-empty",
            b"k-framing",
            b"k-header",
            b"k-trailing"
        ]
    );
    assert_eq!(state.correlations, vec![correlation("payment:1")]);
}

/// The ids a key remembers are records of their own (a tombstone forgets one); ids an
/// earlier Weir kept in the key's own record are returned too, with the key named as
/// unrecorded (its new owner moves them out).
#[test]
fn remembered_ids_are_read_from_their_records_and_from_an_old_key_record() {
    use weir_core::correlation::{Forwarded, RememberedEvent};
    let codec = Codec::single_object();
    let topic = "weir.state";
    let at = DateTime::from_timestamp(1_790_000_000, 0).expect("a time");
    let remembered = |event_id: &str| RememberedEvent {
        key: "payment:1".into(),
        forwarded: Forwarded {
            event_id: event_id.into(),
            at,
        },
    };
    let kind = || Ok(RecordType::RememberedEvent);
    let record = |id: &str| codec.encode(topic, &remembered(id)).expect("encodes");
    let old = codec
        .encode(
            topic,
            &StoredCorrelation {
                state: correlation("payment:2"),
                forwarded: vec![Forwarded {
                    event_id: "old-1".into(),
                    at,
                }],
            },
        )
        .expect("encodes");
    let mut records = StateRecords::new(&codec, topic, Wanted::All);
    records.take(
        b"weir:seen:payment:1 ev-1",
        0,
        0,
        Some(&record("ev-1")),
        kind(),
    );
    records.take(
        b"weir:seen:payment:1 ev-2",
        0,
        1,
        Some(&record("ev-2")),
        kind(),
    );
    records.take(b"weir:seen:payment:1 ev-2", 0, 2, None, kind());
    records.take(
        b"payment:2",
        0,
        3,
        Some(&old),
        Ok(RecordType::CorrelationState),
    );
    let state = records.finish().expect("read");
    let ids: Vec<(&str, &str)> = state
        .remembered
        .iter()
        .map(|r| (r.key.as_str(), r.forwarded.event_id.as_str()))
        .collect();
    assert_eq!(ids, [("payment:2", "old-1"), ("payment:1", "ev-1")]);
    assert_eq!(state.unrecorded, ["payment:2"]);
    assert_eq!(state.correlations, vec![correlation("payment:2")]);
    let mut listing = StateRecords::new(&codec, topic, Wanted::Schedules);
    listing.take(
        b"weir:seen:payment:1 ev-1",
        0,
        0,
        Some(&record("ev-1")),
        kind(),
    );
    assert!(listing.finish().expect("read").remembered.is_empty());
}

/// A registry that was reachable when the states were written and is not any more.
struct Flaky {
    inner: crate::codec::InMemoryRegistry,
    down: std::sync::atomic::AtomicBool,
}

impl crate::codec::SchemaRegistry for Flaky {
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<u32, crate::codec::RegistryError>> {
        self.inner.register(subject, schema)
    }

    fn schema_by_id(
        &self,
        id: u32,
    ) -> futures::future::BoxFuture<'_, Result<String, crate::codec::RegistryError>> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async move {
                Err(crate::codec::RegistryError::Transport {
                    method: "GET",
                    url: format!("http://registry/schemas/ids/{id}"),
                    message: "connection refused".into(),
                })
            });
        }
        self.inner.schema_by_id(id)
    }
}

/// A key's state written by another worker in the registry's framing (a schema id this
/// worker's codec has not seen) is read with the schema fetched from the registry: it
/// used to be left out, and its events lost at the key's next write. With the registry
/// out of reach the read fails (the take-over is tried again) instead of leaving it out.
#[test]
fn a_state_of_a_schema_id_not_seen_is_fetched_and_an_unreachable_registry_fails_the_read() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let topic = "weir.state";
    let registry = std::sync::Arc::new(Flaky {
        inner: crate::codec::InMemoryRegistry::new(),
        down: false.into(),
    });
    let writer = Codec::new(Some(registry.clone()));
    runtime
        .block_on(writer.register::<StoredCorrelation>(topic))
        .expect("registers");
    let mut state = correlation("payment:9");
    state.buffered.push(weir_core::correlation::BufferedEvent {
        event: weir_core::records::ReceivedEvent {
            event_id: "ev-1".into(),
            name: "paid".into(),
            payload: serde_json::json!(42),
        },
        sent_at: DateTime::from_timestamp(1_790_000_000, 0).expect("a time"),
    });
    let bytes = writer
        .encode(topic, &StoredCorrelation::of(state.clone()))
        .expect("encodes");
    assert_eq!(bytes[0], 0, "the registry's framing");
    let read = |reader: &Codec| {
        let _inside = runtime.enter();
        let mut records = StateRecords::new(reader, topic, Wanted::All);
        records.take(
            b"payment:9",
            0,
            7,
            Some(&bytes),
            Ok(RecordType::CorrelationState),
        );
        records.finish()
    };
    let reader = Codec::new(Some(registry.clone()));
    let restored = read(&reader).expect("read");
    assert_eq!(restored.correlations, vec![state.clone()]);
    registry
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let unreachable = read(&Codec::new(Some(registry.clone())));
    assert!(
        matches!(
            unreachable,
            Err(HistoryReadError::StateUnavailable {
                partition: 0,
                offset: 7,
                ..
            })
        ),
        "{unreachable:?}"
    );
}
