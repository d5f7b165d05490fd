//! The executions of a fault run: a seeded mix of the example workflows, each with the result
//! it must finish with, computed here from its inputs (the example activities are pure
//! functions of their inputs, see `examples/activities/compute`).
//!
//! | kind | workflow | steps |
//! |---|---|---|
//! | `order` | `order.checkout`, shipped | price, reserve, charge, ship |
//! | `order-declined` | `order.checkout`, the charge declined | price, reserve, charge, release |
//! | `order-unshippable` | `order.checkout`, no address | price, reserve, charge, ship, refund, release |
//! | `chain` | `steps.fibonacci-chain(n, count)` | `count` sequential activity calls |
//! | `fanout` | `fanout.fibonacci-sum(ns)` | `ns.len()` activity children in one join set |
//! | `race` | `fanout.race(n, 5 min)` | an activity against a delay beyond the timer horizon, closed |
//! | `sleep` | `sleepy.sleep-for(ms)` | a delay (timer) |
//! | `child-sleep` | `random-schedule.call-sleepy(ms)` | a child workflow, which sleeps |
//! | `long-sleep` | `sleepy.sleep-for(65..80 s)` | a delay beyond the 60 s timer horizon |

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use weir::codec::{HistoryEntry, HistoryRecord};
use weir::model::{ExecutionId, ExecutionResult, HistoryEvent, JoinSetRequest};

pub const CHECKOUT: &str = "weir-examples:workflows/order.checkout";
pub const CHAIN: &str = "weir-examples:workflows/steps.fibonacci-chain";
pub const FANOUT: &str = "weir-examples:workflows/fanout.fibonacci-sum";
pub const RACE: &str = "weir-examples:workflows/fanout.race";
pub const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
pub const CALL_SLEEPY: &str = "weir-examples:workflows/random-schedule.call-sleepy";

/// A small seeded PRNG (splitmix64): the same seed gives the same workload.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high` (`high > low`).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low)
    }
}

/// What an execution must finish with.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Exactly this result.
    Exact(ExecutionResult),
    /// `fanout.fibonacci-sum`: these values in input order, their sum, both flags true, and
    /// an arrival order that is a permutation of the children of the join set.
    Fanout { values: Vec<u64> },
    /// A sleep of `millis` (in the execution itself, or in its first child with `child`):
    /// `ok` with the expiry recorded in the history of the sleeping execution, no earlier
    /// than the submission plus `millis`.
    Sleep { millis: u64, child: bool },
}

/// One execution of the run.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: ExecutionId,
    pub kind: &'static str,
    pub ffqn: &'static str,
    pub params: Value,
    pub expect: Expect,
}

fn fibonacci(n: u8) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        let next = a + b;
        a = b;
        b = next;
    }
    a
}

/// The jobs of a run: `executions` of them, `long_sleeps` of which (the first ones, so that
/// they sleep through the faults) sleep past the 60 s timer horizon.
pub fn plan(seed: u64, executions: usize, long_sleeps: usize) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    (0..executions)
        .map(|i| {
            let id = ExecutionId::top_level(ulid::Ulid::new());
            if i < long_sleeps.min(executions) {
                let millis = rng.range(65_000, 80_000);
                return Job {
                    id,
                    kind: "long-sleep",
                    ffqn: SLEEP_FOR,
                    params: json!([millis]),
                    expect: Expect::Sleep {
                        millis,
                        child: false,
                    },
                };
            }
            job(&mut rng, id, i)
        })
        .collect()
}

fn job(rng: &mut Rng, id: ExecutionId, i: usize) -> Job {
    let order_id = format!("o{i}");
    let roll = rng.range(0, 100);
    match roll {
        0..40 => {
            let (sku, unit) =
                [("widget", 250u64), ("gadget", 1999), ("gizmo", 5000)][rng.range(0, 3) as usize];
            let quantity = rng.range(1, 6);
            Job {
                id,
                kind: "order",
                ffqn: CHECKOUT,
                params: json!([{ "id": order_id, "customer": "alice", "sku": sku,
                                 "quantity": quantity, "address": "1 Main St" }]),
                expect: Expect::Exact(ExecutionResult::Ok(json!({
                    "order-id": order_id,
                    "amount-cents": unit * quantity,
                    "reservation-id": format!("R-{order_id}-{sku}"),
                    "payment-id": format!("P-{order_id}"),
                    "tracking-number": format!("T-{order_id}"),
                }))),
            }
        }
        40..45 => {
            let customer = format!("declined-{i}");
            Job {
                id,
                kind: "order-declined",
                ffqn: CHECKOUT,
                params: json!([{ "id": order_id, "customer": customer, "sku": "widget",
                                 "quantity": 1, "address": "1 Main St" }]),
                expect: Expect::Exact(ExecutionResult::Err(json!({
                    "payment-failed": format!("payment declined: card of {customer} declined")
                }))),
            }
        }
        45..50 => Job {
            id,
            kind: "order-unshippable",
            ffqn: CHECKOUT,
            params: json!([{ "id": order_id, "customer": "bob", "sku": "gadget",
                             "quantity": 2, "address": "" }]),
            expect: Expect::Exact(ExecutionResult::Err(json!({
                "shipping-failed": "no address to ship 2 x gadget to"
            }))),
        },
        50..65 => {
            let n = rng.range(10, 41) as u8;
            let count = rng.range(3, 9);
            Job {
                id,
                kind: "chain",
                ffqn: CHAIN,
                params: json!([n, count]),
                expect: Expect::Exact(ExecutionResult::Ok(json!(fibonacci(n) * count))),
            }
        }
        65..75 => {
            let ns: Vec<u8> = (0..rng.range(2, 7))
                .map(|_| rng.range(1, 60) as u8)
                .collect();
            Job {
                id,
                kind: "fanout",
                ffqn: FANOUT,
                params: json!([ns]),
                expect: Expect::Fanout {
                    values: ns.iter().map(|&n| fibonacci(n)).collect(),
                },
            }
        }
        75..80 => {
            let n = rng.range(5, 50) as u8;
            Job {
                id,
                kind: "race",
                ffqn: RACE,
                // The delay (5 min) loses to any activity unless the run stalls that long.
                params: json!([n, 300_000]),
                expect: Expect::Exact(ExecutionResult::Ok(json!({ "child": fibonacci(n) }))),
            }
        }
        80..90 => {
            let millis = rng.range(200, 3_000);
            Job {
                id,
                kind: "sleep",
                ffqn: SLEEP_FOR,
                params: json!([millis]),
                expect: Expect::Sleep {
                    millis,
                    child: false,
                },
            }
        }
        _ => {
            let millis = rng.range(200, 3_000);
            Job {
                id,
                kind: "child-sleep",
                ffqn: CALL_SLEEPY,
                params: json!([millis]),
                expect: Expect::Sleep {
                    millis,
                    child: true,
                },
            }
        }
    }
}

/// The expiry recorded by the first `DelayRequest` of a history.
fn recorded_expiry(history: &[HistoryRecord]) -> Option<chrono::DateTime<chrono::Utc>> {
    history.iter().find_map(|r| match &r.entry {
        HistoryEntry::Event {
            event:
                HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::DelayRequest { expires_at, .. },
                    ..
                },
            ..
        } => Some(*expires_at),
        _ => None,
    })
}

/// The id of the first child an execution requested, from its history.
fn first_child(history: &[HistoryRecord]) -> Option<ExecutionId> {
    history.iter().find_map(|r| match &r.entry {
        HistoryEntry::Event {
            event:
                HistoryEvent::JoinSetRequest {
                    request:
                        JoinSetRequest::ChildExecutionRequest {
                            child_execution_id, ..
                        },
                    ..
                },
            ..
        } => Some(child_execution_id.clone()),
        _ => None,
    })
}

impl Job {
    /// Checks `result` against what the job must finish with; `histories` (from
    /// `weir.history`) give the recorded values a result depends on (a sleep's expiry),
    /// `submitted_at` when the client sent it.
    pub fn check(
        &self,
        result: &ExecutionResult,
        histories: &HashMap<ExecutionId, Vec<HistoryRecord>>,
        submitted_at: Option<SystemTime>,
    ) -> Result<(), String> {
        match &self.expect {
            Expect::Exact(expected) => (result == expected)
                .then_some(())
                .ok_or_else(|| format!("expected {expected}, got {result}")),
            Expect::Fanout { values } => {
                let ExecutionResult::Ok(value) = result else {
                    return Err(format!("expected ok, got {result}"));
                };
                let sum: u64 = values.iter().sum();
                let arrival: Vec<String> = value["arrival-order"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut sorted = arrival.clone();
                sorted.sort();
                sorted.dedup();
                let prefix = format!("{}.n:fibonacci_", self.id);
                let children_ok = sorted.len() == values.len()
                    && arrival.len() == values.len()
                    && arrival.iter().all(|c| c.starts_with(&prefix));
                (value["values"] == json!(values)
                    && value["sum"] == json!(sum)
                    && value["named-conflict"] == json!(true)
                    && value["extra-await-all-processed"] == json!(true)
                    && children_ok)
                    .then_some(())
                    .ok_or_else(|| format!("expected values {values:?}, sum {sum}, got {value}"))
            }
            Expect::Sleep { millis, child } => {
                let ExecutionResult::Ok(value) = result else {
                    return Err(format!("expected ok, got {result}"));
                };
                let (Some(seconds), Some(nanos)) =
                    (value["seconds"].as_u64(), value["nanoseconds"].as_u64())
                else {
                    return Err(format!("expected an instant, got {value}"));
                };
                let got = UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_nanos(nanos);
                let own = histories.get(&self.id).map(Vec::as_slice).unwrap_or(&[]);
                let sleeper = if *child {
                    let child = first_child(own).ok_or("no child request in the history")?;
                    histories.get(&child).map(Vec::as_slice).unwrap_or(&[])
                } else {
                    own
                };
                let recorded = recorded_expiry(sleeper).ok_or("no DelayRequest recorded")?;
                let recorded = SystemTime::from(recorded);
                if got != recorded {
                    return Err(format!(
                        "returned expiry {got:?}, the history recorded {recorded:?}"
                    ));
                }
                if let Some(submitted) = submitted_at
                    && got < submitted + Duration::from_millis(*millis)
                {
                    return Err(format!(
                        "expiry {got:?} earlier than the submission ({submitted:?}) + {millis} ms"
                    ));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_a_function_of_the_seed() {
        let kinds = |seed| {
            plan(seed, 200, 3)
                .into_iter()
                .map(|j| (j.kind, j.params))
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(7), kinds(7));
        assert_ne!(kinds(7), kinds(8));
        let jobs = plan(7, 200, 3);
        assert!(jobs[..3].iter().all(|j| j.kind == "long-sleep"));
        for kind in ["order", "chain", "fanout", "sleep", "child-sleep", "race"] {
            assert!(jobs.iter().any(|j| j.kind == kind), "{kind}");
        }
    }

    #[test]
    fn fibonacci_is_the_activity_s() {
        assert_eq!(
            (0..8).map(fibonacci).collect::<Vec<_>>(),
            [0, 1, 1, 2, 3, 5, 8, 13]
        );
        assert_eq!(fibonacci(59), 956_722_026_041);
    }
}
