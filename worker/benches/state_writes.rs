//! What a correlation key's forward writes to `weir.state` (issue 33 F10), before and after
//! the ids it remembers became records of their own.
//!
//! `cargo bench -p weir --bench state_writes` prints, for a key held by one execution that
//! remembers N forwarded ids: the bytes a forward wrote before (the key's whole record, every
//! remembered id in it: what `StoredCorrelation` with N ids encodes to, as the producer
//! counts a record: key, value, headers) and writes now (one `RememberedEvent` record), and
//! the ratio; and the processor's time per forward now (a key event stepped through
//! [`Processor::step`], its effects encoded), best of 5 samples. Before, a key remembered at
//! most 1,000 ids (the record had to fit); now up to 100,000. Environment:
//! `WEIR_STATE_BENCH_SIZES` (e.g. `1,1000`).

use std::hint::black_box;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use weir::codec::{Codec, StoredCorrelation};
use weir::correlation::{CorrelationState, Forwarded, KeyedEvent, RememberedEvent};
use weir::kafka::outgoing::OutgoingRecord;
use weir::model::ExecutionId;
use weir::wire::{KIND_HEADER, RecordKind};
use weir_core::processor::{Batch, Body, Effect, Input, Processor, ProcessorConfig};
use weir_core::records::ReceivedEvent;
use weir_core::sim::SimRunner;
use weir_core::sim::exec::block_on;

const KEY: &str = "payment:order-42";

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("valid time")
}

fn id(n: usize) -> String {
    // An event id as a client makes one: a ULID.
    ulid::Ulid::from_parts(n as u64, n as u128).to_string()
}

fn record(key: &str, kind: RecordKind, value: Vec<u8>) -> OutgoingRecord {
    OutgoingRecord {
        topic: "weir.state".into(),
        partition: None,
        key: key.into(),
        value: Some(value),
        headers: vec![(KIND_HEADER.into(), kind.header_value().to_vec())],
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("WEIR_STATE_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100, 1_000, 100_000]);
    let codec = Codec::single_object();
    let holder = ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
    let state = CorrelationState {
        holders: vec![holder],
        ..CorrelationState::new(KEY)
    };
    println!(
        "| ids remembered | bytes per forward, before | bytes per forward, now | before / now | processor per forward, now (µs) |"
    );
    println!("|---|---|---|---|---|");
    for n in sizes {
        let remembered: Vec<Forwarded> = (0..n)
            .map(|i| Forwarded {
                event_id: id(i),
                at: start() + Duration::seconds(i as i64),
            })
            .collect();
        let before = (n <= weir::correlation::MAX_REMEMBERED.min(1_000)).then(|| {
            let whole = StoredCorrelation {
                state: state.clone(),
                forwarded: remembered.clone(),
            };
            let value = codec.encode("weir.state", &whole).expect("encodes");
            record(KEY, RecordKind::Correlation, value).size()
        });
        let last = RememberedEvent {
            key: KEY.into(),
            forwarded: remembered.last().cloned().expect("one id at least"),
        };
        let value = codec.encode("weir.state", &last).expect("encodes");
        let now = record(
            &format!("weir:seen:{KEY} {}", last.forwarded.event_id),
            RecordKind::Remembered,
            value,
        )
        .size();

        // The processor's step of one more event for the key, with its effects encoded.
        let mut p = Processor::new(
            SimRunner,
            ProcessorConfig {
                cache_bytes: 1 << 30,
                cache_size: 16,
                max_record_bytes: 1 << 20,
                partitions: 1,
                early_event_wait: weir::correlation::EARLY_EVENT_WAIT,
            },
        );
        p.restore_correlations([state.clone()]);
        p.restore_remembered(
            remembered.iter().map(|f| RememberedEvent {
                key: KEY.into(),
                forwarded: f.clone(),
            }),
            Vec::<String>::new(),
        );
        let at = start() + Duration::seconds(n as i64 + 1);
        let mut next = n;
        let step = (0..5)
            .map(|_| {
                let calls = 200;
                let t = Instant::now();
                for _ in 0..calls {
                    next += 1;
                    let input = Input::Record {
                        index: 0,
                        partition: 0,
                        key: Some(KEY.into()),
                        size: 100,
                        body: Ok(Body::KeyedEvent(KeyedEvent {
                            event: ReceivedEvent {
                                event_id: id(next),
                                name: "paid".into(),
                                payload: serde_json::json!({"amount": next}),
                            },
                            key: KEY.into(),
                            sent_at: at,
                            returned_by: None,
                        })),
                        timestamp: None,
                    };
                    let mut batch = Batch::new(at);
                    block_on(p.step(&mut batch, input)).expect("steps");
                    for effect in &batch.effects {
                        if let Effect::PutRemembered {
                            key,
                            event_id,
                            at: Some(at),
                        } = effect
                        {
                            let r = RememberedEvent {
                                key: key.clone(),
                                forwarded: Forwarded {
                                    event_id: event_id.clone(),
                                    at: *at,
                                },
                            };
                            black_box(codec.encode("weir.state", &r).expect("encodes"));
                        }
                    }
                    black_box(batch.effects.len());
                }
                t.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
            })
            .fold(f64::INFINITY, f64::min);
        match before {
            Some(before) => println!(
                "| {n} | {before} | {now} | {:.0}× | {step:.1} |",
                before as f64 / now as f64
            ),
            None => println!("| {n} | — (at most 1,000 ids) | {now} | — | {step:.1} |"),
        }
    }
}
