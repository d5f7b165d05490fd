//! Correlation keys at scale (issue 33 F10): what 1,000, 10,000 and 100,000 live keys cost a
//! partition's owner in memory and in its loop.
//!
//! `cargo bench -p weir-core --features test-util --bench correlation_keys` prints, per
//! number of keys: the heap the processor holds for them (bytes per key, counted by this
//! bench's allocator), the loop's question "has a key something to expire now?"
//! ([`Processor::correlation_due`], asked at every turn of an idle worker) and a batch's
//! expiry pass ([`Processor::expire_correlations`]) when nothing is due, in nanoseconds; and,
//! measured in the same run, the walk over every key the loop made before the index (each
//! key's `expires_at` and remembered ids), with the ratio. Each key is held by one execution
//! and remembers one forwarded event id (what a key keeps for the dedup window). Environment:
//! `WEIR_KEYS_BENCH_SIZES` (e.g. `1000,100000`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use weir_core::correlation::{
    self, Applied, CorrelationAction, CorrelationCommand, CorrelationState, Forwarded, KeyedEvent,
    Received, RememberedEvent,
};
use weir_core::model::ExecutionId;
use weir_core::processor::{Batch, Processor, ProcessorConfig};
use weir_core::records::ReceivedEvent;
use weir_core::sim::SimRunner;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("valid time")
}

/// Key `n`, held by one execution, having forwarded one event (remembered for the dedup
/// window), its last change at `when`.
fn key_state(n: u64, when: DateTime<Utc>) -> (CorrelationState, RememberedEvent) {
    let key = format!("order:{n}");
    let register = CorrelationCommand {
        key: key.clone(),
        execution_id: ExecutionId::top_level(ulid::Ulid::from_parts(n, u128::from(n))),
        action: CorrelationAction::Register,
        sent_at: when,
    };
    let Applied::Changed(registered) = correlation::apply(None, &register) else {
        panic!("a first registration changes the key");
    };
    let registered = registered.state.expect("a state");
    let event = KeyedEvent {
        event: ReceivedEvent {
            event_id: format!("payment-{n}"),
            name: "paid".to_owned(),
            payload: serde_json::json!({"amount": n}),
        },
        key,
        sent_at: when,
        returned_by: None,
    };
    let Received::Changed(forwarded) = correlation::receive(Some(&registered), None, event) else {
        panic!("an event for a held key is forwarded");
    };
    let remembered = RememberedEvent {
        key: registered.key.clone(),
        forwarded: Forwarded {
            event_id: forwarded.forwards[0].event.event_id.clone(),
            at: when,
        },
    };
    (forwarded.state.expect("a state"), remembered)
}

fn processor() -> Processor<SimRunner> {
    Processor::new(
        SimRunner,
        ProcessorConfig {
            cache_bytes: 1 << 30,
            cache_size: 16,
            max_record_bytes: 1 << 20,
            partitions: 1,
            early_event_wait: correlation::EARLY_EVENT_WAIT,
        },
    )
}

/// Nanoseconds per call of `f`, best of 5 samples of `calls` calls.
fn per_call(calls: u32, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(calls)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let sizes: Vec<u64> = std::env::var("WEIR_KEYS_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    println!(
        "| live keys | heap per key (bytes) | loop: due? index (ns) | loop: due? walk, before (ns) | walk / index | batch expiry pass, nothing due (ns) |"
    );
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let before = LIVE.load(Ordering::Relaxed);
        // Spread over the last day: none is due for six more days.
        let (states, remembered): (Vec<CorrelationState>, Vec<RememberedEvent>) = (0..n)
            .map(|i| key_state(i, start() + Duration::seconds((i % 86_400) as i64)))
            .unzip();
        let mut p = processor();
        p.restore_correlations(states);
        p.restore_remembered(remembered, Vec::<String>::new());
        let heap = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        let now = start() + Duration::days(1);
        let index = per_call(10_000, || {
            black_box(p.correlation_due(black_box(now)));
        });
        let walk_calls = if n >= 100_000 { 20 } else { 200 };
        let walk = per_call(walk_calls, || {
            black_box(
                p.correlations()
                    .any(|c| c.expires_at().is_some_and(|at| at <= black_box(now)))
                    || p.remembered()
                        .any(|r| r.forwarded.at + correlation::DEDUP_WINDOW <= black_box(now)),
            );
        });
        let pass = per_call(1_000, || {
            let mut batch = Batch::new(now);
            p.expire_correlations(&mut batch);
            black_box(batch.effects.len());
        });
        println!(
            "| {n} | {:.0} | {index:.1} | {walk:.0} | {:.0}× | {pass:.1} |",
            heap as f64 / n as f64,
            walk / index.max(0.1)
        );
        assert!(!p.correlation_due(now), "nothing is due yet");
    }
}
