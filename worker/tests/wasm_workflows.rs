//! Workflow examples end to end through the wasmtime host and the in-memory bus: results,
//! histories, replay from the recorded history, hot vs cold path, nondeterminism.

mod wasm_common;

use serde_json::{Value, json};
use wasm_common::*;
use weir::model::{
    ChildKind, DelayOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult, HistoryEvent,
    JoinSetRequest, Response,
};
use weir::replay::Execution;
use weir::wasm::memory::{BUS_PARTITIONS, InMemoryBus, Record};
use weir::wasm::{RunStep, WasmHost};
use weir_core::processor::ProcessorConfig;
use weir_core::records::{DlqReason, HistoryEntry};

const CHECKOUT: &str = "weir-examples:workflows/order.checkout";

fn order(customer: &str, address: &str) -> Value {
    json!([{"id": "o1", "customer": customer, "sku": "widget", "quantity": 2, "address": address}])
}

fn kinds(history: &[HistoryEvent]) -> Vec<String> {
    history.iter().map(|e| e.to_string()).collect()
}

/// Replays an execution from its recorded history and journalled responses on `host` and
/// returns the step (must finish).
async fn replay(host: &WasmHost, bus: &InMemoryBus, id: &ExecutionId) -> RunStep {
    let e = bus.execution(id).unwrap();
    let execution = Execution {
        id: id.clone(),
        ffqn: e.ffqn.clone(),
        params: e.params.clone(),
        created_at: e.created_at,
        component: None,
        trace: None,
    };
    let (_run, step) = host
        .start_workflow(execution, e.history.clone(), e.responses.clone(), bus.now())
        .await
        .unwrap();
    step
}

/// A replay of a finished execution gives the same result and records nothing new.
async fn assert_replays_identically(host: &WasmHost, bus: &InMemoryBus, id: &ExecutionId) {
    let step = replay(host, bus, id).await;
    let RunStep::Finished { result, effects } = step else {
        panic!("replay of {id} did not finish: {step:?}");
    };
    assert_eq!(Some(&result), bus.result(id), "replayed result of {id}");
    assert!(
        effects.events.is_empty(),
        "replay recorded new events: {:?}",
        effects.events
    );
}

#[tokio::test]
async fn order_saga_success_with_history_and_replay() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus
        .submit(&ffqn(CHECKOUT), order("alice", "1 Main St"))
        .unwrap();
    bus.run_until_idle().await.unwrap();
    assert_eq!(
        bus.result(&id),
        Some(&ExecutionResult::Ok(json!({
            "order-id": "o1", "amount-cents": 500, "reservation-id": "R-o1-widget",
            "payment-id": "P-o1", "tracking-number": "T-o1"
        })))
    );
    let history = &bus.execution(&id).unwrap().history;
    // Four direct calls: one-off join set, child request, join-next each.
    assert_eq!(history.len(), 12, "{:#?}", kinds(history));
    let text = kinds(history).join("\n");
    for f in ["o:1-price", "o:2-reserve", "o:3-charge", "o:4-ship"] {
        assert!(text.contains(&format!("JoinSetCreate({f})")), "{text}");
    }
    assert!(
        text.contains(r#"weir-examples:shop/payment.charge ["o1","alice",500] Activity"#),
        "{text}"
    );
    assert_replays_identically(&host, &bus, &id).await;
}

#[tokio::test]
async fn order_saga_compensates_a_declined_charge_and_a_failed_shipment() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let declined = bus
        .submit(&ffqn(CHECKOUT), order("declined-bob", "1 Main St"))
        .unwrap();
    let unshippable = bus.submit(&ffqn(CHECKOUT), order("carol", "  ")).unwrap();
    bus.run_until_idle().await.unwrap();

    let Some(ExecutionResult::Err(e)) = bus.result(&declined) else {
        panic!("{:?}", bus.result(&declined));
    };
    assert!(
        e["payment-failed"].as_str().unwrap().contains("declined"),
        "{e}"
    );
    let text = kinds(&bus.execution(&declined).unwrap().history).join("\n");
    assert!(
        text.contains("inventory.release [\"R-o1-widget\"]"),
        "{text}"
    );
    assert!(!text.contains("shipping.ship"), "{text}");

    let Some(ExecutionResult::Err(e)) = bus.result(&unshippable) else {
        panic!("{:?}", bus.result(&unshippable));
    };
    assert!(e.get("shipping-failed").is_some(), "{e}");
    let text = kinds(&bus.execution(&unshippable).unwrap().history).join("\n");
    let refund = text.find("payment.refund").expect("refund");
    let release = text.find("inventory.release").expect("release");
    assert!(refund < release, "refund before release: {text}");

    assert_replays_identically(&host, &bus, &declined).await;
    assert_replays_identically(&host, &bus, &unshippable).await;
}

#[tokio::test]
async fn order_swapped_replayed_against_order_history_is_nondeterministic() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus
        .submit(&ffqn(CHECKOUT), order("alice", "1 Main St"))
        .unwrap();
    bus.run_until_idle().await.unwrap();

    // The same deployment with `order` replaced by the build that swaps two calls.
    let swapped =
        host_with(|t| t.replace("path = \"order.wasm\"", "path = \"order-swapped.wasm\"")).unwrap();
    let step = replay(&swapped, &bus, &id).await;
    let RunStep::Finished {
        result: ExecutionResult::ExecutionError(e),
        effects,
    } = step
    else {
        panic!("expected a nondeterminism error, got {step:?}");
    };
    assert_eq!(e.kind, ExecutionErrorKind::NondeterminismDetected, "{e}");
    assert!(
        e.reason.contains("history version 0"),
        "names the version: {e}"
    );
    assert!(
        e.reason.contains("o:1-price") && e.reason.contains("reserve"),
        "{e}"
    );
    assert!(effects.events.is_empty());
}

#[tokio::test]
async fn params_are_type_checked_at_submission() {
    let host = host();
    let mut bus = InMemoryBus::new(host, t0());
    let bad =
        json!([{"id": "o1", "customer": "a", "sku": "widget", "quantity": "two", "address": "x"}]);
    let err = bus.submit(&ffqn(CHECKOUT), bad).unwrap_err().to_string();
    assert!(err.contains("parameter `order`"), "{err}");
    assert!(err.contains("record { id: string"), "{err}");
    assert!(err.contains(".quantity") && err.contains("u32"), "{err}");
    let err = bus
        .submit(&ffqn(CHECKOUT), json!([]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes 1 parameter"), "{err}");
    assert!(bus.executions().is_empty(), "refused before it was sent");
}

/// What a client that does not check sends: the processor dead-letters it and finishes the
/// execution with `invalid-params` or `unknown-function`, so that the caller hears. (The bus
/// used to finish an unknown function as `trap`, without a DLQ copy; the worker's rule is
/// this one.) A response for an execution that does not exist is dead-lettered too.
#[tokio::test]
async fn refused_submissions_are_dead_lettered_and_finished_with_an_error() {
    let host = host();
    for hot in [true, false] {
        let mut bus = InMemoryBus::new(host.clone(), t0());
        bus.set_hot(hot);
        let bad = json!([{"id": "o1", "customer": "a", "sku": "widget", "quantity": "two", "address": "x"}]);
        let invalid = bus.submit_unchecked(&ffqn(CHECKOUT), bad);
        let unknown =
            bus.submit_unchecked(&ffqn("weir-examples:nowhere/nothing.at-all"), json!([]));
        let nobody: ExecutionId = format!("E_01KA{:022}", 9).parse().unwrap();
        let stray = Response::ChildExecutionFinished {
            child_execution_id: format!("{nobody}.g:1_1").parse().unwrap(),
            result: ExecutionResult::Ok(json!(1)),
            ran: None,
        };
        bus.send(Record::Response {
            to: nobody.clone(),
            response: stray,
        });
        bus.run_until_idle().await.unwrap();

        let Some(ExecutionResult::ExecutionError(e)) = bus.result(&invalid) else {
            panic!("{:?}", bus.result(&invalid));
        };
        assert_eq!(e.kind, ExecutionErrorKind::InvalidParams, "{e}");
        assert!(e.reason.contains("parameter `order`"), "{e}");
        assert!(
            e.reason.contains(".quantity") && e.reason.contains("u32"),
            "{e}"
        );
        let Some(ExecutionResult::ExecutionError(e)) = bus.result(&unknown) else {
            panic!("{:?}", bus.result(&unknown));
        };
        assert_eq!(e.kind, ExecutionErrorKind::UnknownFunction, "{e}");
        // Created, then Finished: the run never started.
        for id in [&invalid, &unknown] {
            let changelog = bus.changelog(id).unwrap();
            assert_eq!(changelog.len(), 2, "{changelog:?}");
            assert!(matches!(changelog[0].0.entry, HistoryEntry::Created(_)));
            assert!(matches!(
                changelog[1].0.entry,
                HistoryEntry::Finished { .. }
            ));
        }
        let published: Vec<&ExecutionId> =
            bus.published().iter().map(|f| &f.execution_id).collect();
        assert_eq!(published, [&invalid, &unknown]);
        let dlq: Vec<DlqReason> = bus.dead_letters().iter().map(|d| d.reason).collect();
        assert_eq!(
            dlq,
            [
                DlqReason::InvalidParams,
                DlqReason::UnknownFfqn,
                DlqReason::Other
            ],
            "{:?}",
            bus.dead_letters()
        );
        assert!(
            matches!(&bus.dead_letters()[2].record, Record::Response { to, .. } if *to == nobody)
        );
        assert!(bus.execution(&nobody).is_none());
        assert_eq!(bus.stats().starts, 0, "{:?}", bus.stats());
    }
}

#[tokio::test]
async fn unsatisfied_and_wasi_imports_fail_at_load_naming_the_import() {
    // Without `compute`, order's imports of compute/shop interfaces are unsatisfied.
    let err = host_with(|t| {
        let start = t.find("[[component]]\nname = \"compute\"").unwrap();
        let end = start + 1 + t[start + 1..].find("[[component]]").unwrap();
        format!("{}{}", &t[..start], &t[end..])
    })
    .err()
    .expect("load must fail")
    .to_string();
    assert!(err.contains("imports `weir-examples:"), "{err}");
    assert!(err.contains("no registered component exports"), "{err}");
    // A workflow cannot have `allowed_hosts`: no network at all.
    let as_workflow = |t: String| {
        t.replace(
            "name = \"http-get\"\nkind = \"activity\"\npath = \"http-get.wasm\"\nroute = \"http\"",
            "name = \"http-get\"\nkind = \"workflow\"\npath = \"http-get.wasm\"",
        )
    };
    let err = host_with(as_workflow)
        .err()
        .expect("load must fail")
        .to_string();
    assert!(err.contains("workflows have no network"), "{err}");
    // A component importing WASI a workflow does not get (`wasi:http`) cannot be a workflow
    // (without the egress lines, which would fail first).
    let err = host_with(|t| {
        as_workflow(t)
            .lines()
            .filter(|line| !line.starts_with("allowed_hosts"))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .err()
    .expect("load must fail")
    .to_string();
    assert!(
        err.contains("imports `wasi:http/") && err.contains("WASI that workflows do not get"),
        "{err}"
    );
}

/// What a workflow reads through WASI: `clock-random` reads the clocks and random numbers
/// twice a round and sleeps between rounds.
#[tokio::test]
async fn a_workflow_reads_the_recorded_clock_and_step_entropy_through_wasi() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus
        .submit(
            &ffqn("weir-examples:workflows/clock-random.run"),
            json!([3, 60_000]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();
    bus.fire_all_timers().await.unwrap();
    let Some(ExecutionResult::Ok(readings)) = bus.result(&id).cloned() else {
        panic!("{:?}", bus.result(&id));
    };
    let readings = readings.as_array().unwrap();
    assert_eq!(readings.len(), 6, "{readings:?}");
    let created = bus.execution(&id).unwrap().created_at;
    let nanos = |r: &Value, field: &str| r[field].as_u64().unwrap();
    for (round, pair) in readings.chunks(2).enumerate() {
        let (first, second) = (&pair[0], &pair[1]);
        // Round k reads the execution's creation time moved by k recorded expiries.
        let expected = created + chrono::TimeDelta::minutes(round as i64);
        assert_eq!(
            nanos(first, "wall-nanos"),
            expected.timestamp_nanos_opt().unwrap() as u64,
            "round {round}: {first}"
        );
        assert_eq!(
            nanos(first, "monotonic-nanos"),
            round as u64 * 60_000_000_000
        );
        // Time stands still within a step; the entropy goes on.
        assert_eq!(first["wall-nanos"], second["wall-nanos"]);
        assert_eq!(first["monotonic-nanos"], second["monotonic-nanos"]);
        assert_ne!(first["random"], second["random"]);
        assert_ne!(first["bytes"], second["bytes"]);
        assert_ne!(first["seed"], second["seed"]);
    }
    assert_ne!(
        readings[0]["random"], readings[2]["random"],
        "steps draw apart"
    );
    // Reads recorded nothing: the history is the three sleeps'.
    let history = &bus.execution(&id).unwrap().history;
    assert_eq!(history.len(), 3 * 3, "{:?}", kinds(history));
    // A rebuild from the recorded history and journal reads the same values.
    assert_replays_identically(&host, &bus, &id).await;
}

#[tokio::test]
async fn fanout_sums_children_and_races_a_child_against_a_delay() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let sum = bus
        .submit(
            &ffqn("weir-examples:workflows/fanout.fibonacci-sum"),
            json!([[10, 20, 30, 1]]),
        )
        .unwrap();
    let race = bus
        .submit(
            &ffqn("weir-examples:workflows/fanout.race"),
            json!([10, 60_000]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();

    let Some(ExecutionResult::Ok(r)) = bus.result(&sum) else {
        panic!("{:?}", bus.result(&sum));
    };
    assert_eq!(r["values"], json!([55, 6765, 832040, 1]));
    assert_eq!(r["sum"], json!(55 + 6765 + 832040 + 1));
    assert_eq!(r["named-conflict"], json!(true));
    assert_eq!(r["extra-await-all-processed"], json!(true));
    let arrival: Vec<&str> = r["arrival-order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(arrival.len(), 4);
    assert!(
        arrival.iter().all(|a| a.contains(".n:fibonacci_")),
        "{arrival:?}"
    );
    let history = kinds(&bus.execution(&sum).unwrap().history).join("\n");
    assert!(history.contains("JoinNextTooMany(n:fibonacci"), "{history}");

    assert_eq!(
        bus.result(&race),
        Some(&ExecutionResult::Ok(json!({"child": 55})))
    );
    // The losing delay's join set was closed: the race journals the delay's cancellation
    // itself (`DelayFinished{cancelled}`, issue 11 item 13), right after the child's answer,
    // and its timer is gone with it.
    assert!(
        bus.pending_timers().is_empty(),
        "{:?}",
        bus.pending_timers()
    );
    let responses = &bus.execution(&race).unwrap().responses;
    assert!(
        matches!(
            responses.as_slice(),
            [
                Response::ChildExecutionFinished { .. },
                Response::DelayFinished {
                    outcome: DelayOutcome::Cancelled,
                    ..
                }
            ]
        ),
        "{responses:?}"
    );

    assert_replays_identically(&host, &bus, &sum).await;
    assert_replays_identically(&host, &bus, &race).await;
}

/// `race` with the delay winning: closing the join set cancels the unawaited activity child:
/// the race journals its `cancelled` end before its own `Finished`, and `CancelActivity` stops
/// it as the activity worker does (its request, still queued, is dropped and its parent
/// answered `cancelled` — a duplicate the finished race ignores). (Before issue 11 item 13
/// the activity ran anyway, and the race's history did not say it was cancelled.) Hot and
/// cold give the same changelogs.
#[tokio::test]
async fn a_delay_that_wins_the_race_cancels_the_activity_as_the_worker_does() {
    let host = host();
    let mut changelogs = Vec::new();
    for hot in [true, false] {
        let mut bus = InMemoryBus::new(host.clone(), t0());
        bus.set_hot(hot);
        let race = bus
            .submit(
                &ffqn("weir-examples:workflows/fanout.race"),
                json!([10, 60_000]),
            )
            .unwrap();
        // The race starts and parks; its activity request is queued, its delay is a timer.
        assert!(bus.run_next().await.unwrap());
        let child = match bus.queued().collect::<Vec<_>>().as_slice() {
            [Record::ActivityRequest(request)] => request.execution_id.clone(),
            queued => panic!("{queued:?}"),
        };
        assert_eq!(bus.pending_timers().len(), 1);
        // The delay fires before the activity has run.
        assert!(bus.fire_next_timer().await.unwrap());
        let deadline = t0() + chrono::Duration::milliseconds(60_000);
        assert_eq!(
            bus.result(&race),
            Some(&ExecutionResult::Ok(
                json!({"deadline": deadline.timestamp_millis()})
            ))
        );
        let cancelled: Vec<(&ExecutionId, &ExecutionId)> = bus
            .cancelled_activities()
            .iter()
            .map(|c| (&c.parent, &c.child))
            .collect();
        assert_eq!(cancelled, [(&race, &child)]);
        // The activity never ran: answered `cancelled`, an answer the finished race ignored.
        let activity = bus.execution(&child).unwrap();
        assert_eq!(activity.attempts, 0);
        let Some(ExecutionResult::ExecutionError(e)) = &activity.result else {
            panic!("{:?}", activity.result);
        };
        assert_eq!(e.kind, ExecutionErrorKind::Cancelled, "{e}");
        assert!(e.reason.contains("had not started"), "{e}");
        // The race's history says what it cancelled: the child ends `cancelled`, journalled
        // before the race's `Finished`; the bus's own `cancelled` answer came after, ignored.
        let responses = &bus.execution(&race).unwrap().responses;
        match responses.as_slice() {
            [
                Response::DelayFinished { .. },
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result: ExecutionResult::ExecutionError(e),
                    ..
                },
            ] => {
                assert_eq!(child_execution_id, &child);
                assert_eq!(e.kind, ExecutionErrorKind::Cancelled, "{e}");
                assert!(e.reason.contains("join set was closed"), "{e}");
            }
            _ => panic!("{responses:?}"),
        }
        assert!(bus.dead_letters().is_empty(), "{:?}", bus.dead_letters());
        assert!(bus.pending_timers().is_empty());
        assert_replays_identically(&host, &bus, &race).await;
        changelogs.push(bus.changelogs().clone());
    }
    assert_eq!(changelogs[0], changelogs[1], "hot and cold differ");
}

/// An activity request for a function no component exports (what a workflow worker of a newer
/// deploy can send): the bus answers its parent `unknown-function` at once (there is no other
/// worker to wait for), instead of dead-lettering it and leaving the parent unanswered.
#[tokio::test]
async fn an_unknown_activity_is_answered_with_unknown_function() {
    let mut bus = InMemoryBus::new(host(), t0());
    let parent = ExecutionId::top_level(ulid::Ulid::from_parts(1, 1));
    let child = parent.child(&weir::model::JoinSetId::one_off(1, "gone").unwrap(), 1);
    bus.send(Record::ActivityRequest(
        weir_core::records::ActivityRequest {
            execution_id: child.clone(),
            parent_execution_id: parent.clone(),
            ffqn: ffqn("weir-examples:gone/away.gone"),
            params: json!([]),
            attempt: 1,
            timeout_millis: None,
            deadline: None,
        },
    ));
    bus.run_until_idle().await.unwrap();
    // The answer went to the parent (which does not exist here, so the processor refused it).
    let answered = bus.dead_letters().iter().find_map(|d| match &d.record {
        Record::Response {
            to,
            response:
                Response::ChildExecutionFinished {
                    child_execution_id,
                    result: ExecutionResult::ExecutionError(e),
                    ..
                },
        } if *to == parent && *child_execution_id == child => Some(e.clone()),
        _ => None,
    });
    let e = answered.unwrap_or_else(|| panic!("{:?}", bus.dead_letters()));
    assert_eq!(e.kind, ExecutionErrorKind::UnknownFunction, "{e}");
    assert!(e.reason.contains("weir-examples:gone/away.gone"), "{e}");
}

/// `patience.race` lingering after the close: the cancelled activity's answer reaches the
/// parent while it still runs, and its history records what was cancelled (journalled, then
/// ignored by the closed join set); replay and hot/cold agree.
#[tokio::test]
async fn a_cancelled_activitys_answer_is_journalled_by_a_parent_still_running() {
    let host = host();
    let mut changelogs = Vec::new();
    for hot in [true, false] {
        let mut bus = InMemoryBus::new(host.clone(), t0());
        bus.set_hot(hot);
        let race = bus
            .submit(
                &ffqn("weir-examples:workflows/patience.race"),
                json!([60_000, 100, 1_000]),
            )
            .unwrap();
        assert!(bus.run_next().await.unwrap());
        let child = match bus.queued().collect::<Vec<_>>().as_slice() {
            [Record::ActivityRequest(request)] => request.execution_id.clone(),
            queued => panic!("{queued:?}"),
        };
        // The deadline fires first; closing the join set cancels the queued activity, whose
        // answer is journalled during the linger; then the linger ends.
        assert!(bus.fire_next_timer().await.unwrap());
        bus.fire_all_timers().await.unwrap();
        assert_eq!(
            bus.result(&race),
            Some(&ExecutionResult::Ok(json!("deadline")))
        );
        let responses = &bus.execution(&race).unwrap().responses;
        let cancelled = responses.iter().find_map(|r| match r {
            Response::ChildExecutionFinished {
                child_execution_id,
                result: ExecutionResult::ExecutionError(e),
                ..
            } if *child_execution_id == child => Some(e.clone()),
            _ => None,
        });
        let cancelled = cancelled.unwrap_or_else(|| panic!("no cancelled answer: {responses:?}"));
        assert_eq!(cancelled.kind, ExecutionErrorKind::Cancelled, "{cancelled}");
        assert_eq!(bus.execution(&child).unwrap().attempts, 0);
        assert!(bus.dead_letters().is_empty(), "{:?}", bus.dead_letters());
        assert_replays_identically(&host, &bus, &race).await;
        changelogs.push(bus.changelogs().clone());
    }
    assert_eq!(changelogs[0], changelogs[1], "hot and cold differ");
}

#[tokio::test]
async fn hello_finishes_in_one_run_without_history() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let greet = ffqn("weir-examples:workflows/hello.greet");
    let ok = bus.submit(&greet, json!(["weir"])).unwrap();
    let err = bus.submit(&greet, json!([""])).unwrap();
    bus.run_until_idle().await.unwrap();
    assert_eq!(
        bus.result(&ok),
        Some(&ExecutionResult::Ok(json!("hello, weir")))
    );
    assert_eq!(
        bus.result(&err),
        Some(&ExecutionResult::Err(json!("a name is required")))
    );
    assert!(bus.execution(&ok).unwrap().history.is_empty());
    assert_replays_identically(&host, &bus, &ok).await;
}

#[tokio::test]
async fn sleepy_parks_until_the_bus_fires_its_delay() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus
        .submit(
            &ffqn("weir-examples:workflows/sleepy.sleep-for"),
            json!([1500]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();
    assert_eq!(bus.result(&id), None, "still sleeping");
    assert_eq!(bus.pending_timers().len(), 1);
    assert_eq!(
        bus.pending_timers()[0].due_at,
        t0() + chrono::Duration::milliseconds(1500)
    );
    assert!(bus.fire_next_timer().await.unwrap());
    let expiry = t0() + chrono::Duration::milliseconds(1500);
    assert_eq!(
        bus.result(&id),
        Some(&ExecutionResult::Ok(
            json!({"seconds": expiry.timestamp(), "nanoseconds": 500_000_000})
        ))
    );
    assert_eq!(
        bus.stats().hot_deliveries,
        1,
        "the parked instance was resumed"
    );
    assert_replays_identically(&host, &bus, &id).await;

    // The same with the parked run evicted before the delay fires: rebuilt from the store.
    let mut evicted = InMemoryBus::new(host.clone(), t0());
    let again = evicted
        .submit(
            &ffqn("weir-examples:workflows/sleepy.sleep-for"),
            json!([1500]),
        )
        .unwrap();
    evicted.run_until_idle().await.unwrap();
    evicted.evict_all();
    assert!(evicted.fire_next_timer().await.unwrap());
    let stats = evicted.stats();
    assert_eq!(
        (
            stats.starts,
            stats.cold_starts,
            stats.hot_deliveries,
            stats.cold_deliveries
        ),
        (2, 1, 0, 1),
        "{stats:?}"
    );
    assert_eq!(again, id, "ids come from the counter and the clock");
    assert_eq!(evicted.changelogs(), bus.changelogs());
    assert_eq!(evicted.result(&id), bus.result(&id));
}

#[tokio::test]
async fn random_schedule_persists_draws_and_schedules_a_top_level_execution() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let id = bus
        .submit(
            &ffqn("weir-examples:workflows/random-schedule.run"),
            json!([100, 5000, 10]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();
    let Some(ExecutionResult::Ok(r)) = bus.result(&id).cloned() else {
        panic!("{:?}", bus.result(&id));
    };
    assert!(r["number"].as_u64().unwrap() < 100);
    let token = r["token"].as_str().unwrap();
    assert!((8..=16).contains(&token.len()) && token.chars().all(|c| c.is_ascii_alphanumeric()));
    let scheduled: ExecutionId = r["scheduled-id"].as_str().unwrap().parse().unwrap();
    assert!(scheduled.is_top_level());
    assert_replays_identically(&host, &bus, &id).await;

    // The schedule fires at t0 + 5 s, then the scheduled sleepy sleeps 10 ms.
    assert!(bus.fire_next_timer().await.unwrap());
    assert_eq!(bus.execution(&scheduled).unwrap().parent, None);
    bus.fire_all_timers().await.unwrap();
    assert!(
        matches!(bus.result(&scheduled), Some(ExecutionResult::Ok(_))),
        "{:?}",
        bus.result(&scheduled)
    );

    // A child workflow called directly.
    let call = bus
        .submit(
            &ffqn("weir-examples:workflows/random-schedule.call-sleepy"),
            json!([20]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();
    bus.fire_all_timers().await.unwrap();
    let Some(ExecutionResult::Ok(instant)) = bus.result(&call) else {
        panic!("{:?}", bus.result(&call));
    };
    assert!(instant["seconds"].as_u64().unwrap() >= t0().timestamp() as u64);
    assert_replays_identically(&host, &bus, &call).await;
}

#[tokio::test]
async fn approval_writes_the_stub_result_idempotently() {
    let host = host();
    let mut bus = InMemoryBus::new(host.clone(), t0());
    let ok = bus
        .submit(
            &ffqn("weir-examples:workflows/approval.auto-approve"),
            json!(["o1", 5000]),
        )
        .unwrap();
    let rejected = bus
        .submit(
            &ffqn("weir-examples:workflows/approval.auto-approve"),
            json!(["o2", 50_000]),
        )
        .unwrap();
    bus.run_until_idle().await.unwrap();
    for (id, approved) in [(&ok, true), (&rejected, false)] {
        let Some(ExecutionResult::Ok(r)) = bus.result(id) else {
            panic!("{:?}", bus.result(id));
        };
        assert_eq!(r["same-value-again-ok"], json!(true), "{r}");
        assert_eq!(r["different-value-conflict"], json!(true), "{r}");
        let decision = r["decision"].as_str().unwrap();
        assert_eq!(decision.starts_with("approved"), approved, "{decision}");
        let history = kinds(&bus.execution(id).unwrap().history).join("\n");
        assert!(history.contains("Conflict)"), "{history}");
        // The stub's value reached the workflow as a response to itself, journalled once. The
        // stub child is never submitted (as with the worker; the bus used to store it as an
        // execution of its own).
        let responses = &bus.execution(id).unwrap().responses;
        let [
            Response::ChildExecutionFinished {
                child_execution_id: stub,
                ..
            },
        ] = responses.as_slice()
        else {
            panic!("{responses:?}");
        };
        assert!(stub.is_child_of(id), "{stub}");
        assert!(bus.execution(stub).is_none(), "{stub}");
        assert_replays_identically(&host, &bus, id).await;
    }
}

/// A workflow's own stub write and an outside writer's for the same stub at the same moment:
/// the outside value is read first (queued before the workflow's submission is stepped), yet
/// the workflow has already been told `ok` by its `stub` call. Its own write is taken in the
/// batch of the call, so the stub holds the value the workflow was told it wrote, and the
/// outside value is the conflict. (Before, the own write went through `weir.responses` behind
/// the outside one: the stub took the outside value and the workflow finished "approved by
/// mallory" after its call had answered `ok` for "auto-approver".)
#[tokio::test]
async fn a_workflows_own_stub_write_wins_over_an_outside_write_read_after_it() {
    let host = host();
    let approve = ffqn("weir-examples:workflows/approval.auto-approve");
    // The stub's id, from a run alone (the bus numbers executions deterministically).
    let mut alone = InMemoryBus::new(host.clone(), t0());
    let id = alone.submit(&approve, json!(["o1", 5000])).unwrap();
    alone.run_until_idle().await.unwrap();
    let stub = alone
        .execution(&id)
        .unwrap()
        .history
        .iter()
        .find_map(|e| match e {
            HistoryEvent::JoinSetRequest {
                request:
                    JoinSetRequest::ChildExecutionRequest {
                        child_execution_id,
                        child_kind: ChildKind::Stub,
                        ..
                    },
                ..
            } => Some(child_execution_id.clone()),
            _ => None,
        })
        .expect("the stub request");

    let mut bus = InMemoryBus::new(host.clone(), t0());
    assert_eq!(bus.submit(&approve, json!(["o1", 5000])).unwrap(), id);
    let outside = Record::Response {
        to: id.clone(),
        response: Response::ChildExecutionFinished {
            child_execution_id: stub.clone(),
            result: ExecutionResult::Ok(json!("mallory")),
            ran: None,
        },
    };
    bus.send(outside.clone());
    bus.run_until_idle().await.unwrap();
    let Some(ExecutionResult::Ok(report)) = bus.result(&id) else {
        panic!("{:?}", bus.result(&id));
    };
    assert_eq!(
        report["decision"],
        json!("approved by auto-approver"),
        "{report}"
    );
    let dead = bus.dead_letters();
    assert!(
        matches!(dead, [d] if d.reason == DlqReason::Conflict && d.record == outside),
        "the outside value is the conflict: {dead:?}"
    );
    let responses = &bus.execution(&id).unwrap().responses;
    assert!(
        matches!(responses.as_slice(), [Response::ChildExecutionFinished { result, .. }]
            if *result == ExecutionResult::Ok(json!("auto-approver"))),
        "{responses:?}"
    );
    assert_replays_identically(&host, &bus, &id).await;
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// Runs stay parked.
    Hot,
    /// The processor forgets everything after every step.
    Cold,
    /// A cache of one parked run: the processor's LRU eviction mixes both paths.
    OneParkedRun,
}

/// The same scenario on a bus that keeps instances parked (hot), one that rebuilds every
/// execution by replay at every step (cold), and one whose cache evicts all but one parked
/// run, yields identical stores: changelogs (every entry, seq and time), histories, responses
/// and results, and the same results published, records dead-lettered and activities
/// cancelled.
#[tokio::test]
async fn hot_and_cold_paths_give_identical_histories_and_results() {
    let host = host();
    let mut stores = Vec::new();
    let mut logs = Vec::new();
    for path in [Path::Hot, Path::Cold, Path::OneParkedRun] {
        let mut bus = match path {
            Path::OneParkedRun => InMemoryBus::with_config(
                host.clone(),
                t0(),
                ProcessorConfig {
                    cache_bytes: weir::options::DEFAULT_CACHE_BYTES,
                    cache_size: 1,
                    max_record_bytes: weir::options::DEFAULT_MAX_RECORD_BYTES,
                    partitions: BUS_PARTITIONS,
                    early_event_wait: weir_core::correlation::EARLY_EVENT_WAIT,
                },
            ),
            Path::Hot | Path::Cold => InMemoryBus::new(host.clone(), t0()),
        };
        bus.set_hot(path != Path::Cold);
        bus.submit(&ffqn(CHECKOUT), order("alice", "1 Main St"))
            .unwrap();
        bus.submit(&ffqn(CHECKOUT), order("declined-x", "1 Main St"))
            .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/fanout.fibonacci-sum"),
            json!([[5, 6, 7]]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/fanout.race"),
            json!([3, 1000]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/sleepy.sleep-for"),
            json!([250]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/random-schedule.run"),
            json!([1000, 100, 10]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/random-schedule.call-sleepy"),
            json!([30]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/approval.auto-approve"),
            json!(["o9", 10]),
        )
        .unwrap();
        bus.submit(
            &ffqn("weir-examples:workflows/clock-random.run"),
            json!([3, 500]),
        )
        .unwrap();
        // What the processor refuses: dead-lettered and finished with an error.
        bus.submit_unchecked(&ffqn(CHECKOUT), json!([]));
        bus.submit_unchecked(&ffqn("weir-examples:nowhere/nothing.at-all"), json!([]));
        bus.run_until_idle().await.unwrap();
        bus.fire_all_timers().await.unwrap();
        let stats = bus.stats();
        match path {
            Path::Hot => assert!(
                stats.hot_deliveries > 0 && stats.cold_starts == 0 && stats.cold_deliveries == 0,
                "{stats:?}"
            ),
            Path::Cold => assert!(
                stats.hot_deliveries == 0 && stats.cold_starts > 0 && stats.cold_deliveries > 0,
                "{stats:?}"
            ),
            Path::OneParkedRun => assert!(
                stats.hot_deliveries > 0 && stats.cold_starts > 0 && stats.cold_deliveries > 0,
                "{stats:?}"
            ),
        }
        assert!(
            bus.pending_timers().is_empty(),
            "{:?}",
            bus.pending_timers()
        );
        assert_eq!(bus.dead_letters().len(), 2, "{:?}", bus.dead_letters());
        logs.push((
            bus.changelogs().clone(),
            bus.published().to_vec(),
            bus.dead_letters().to_vec(),
            bus.cancelled_activities().to_vec(),
        ));
        let executions = bus.executions();
        assert!(
            executions.values().all(|e| e.result.is_some()),
            "all finished"
        );
        let dump: Vec<(String, String, String, String)> = executions
            .iter()
            .map(|(id, e)| {
                (
                    id.to_string(),
                    serde_json::to_string(&e.history).unwrap(),
                    serde_json::to_string(&e.responses).unwrap(),
                    serde_json::to_string(&e.result).unwrap(),
                )
            })
            .collect();
        stores.push(dump);
    }
    for (other, name) in [(1, "cold"), (2, "one parked run")] {
        assert_eq!(stores[0].len(), stores[other].len());
        for (hot, cold) in stores[0].iter().zip(&stores[other]) {
            assert_eq!(hot, cold, "hot and {name} differ for {}", hot.0);
        }
        let (hot, cold) = (&logs[0], &logs[other]);
        assert_eq!(hot.0.len(), cold.0.len());
        for (id, changelog) in &hot.0 {
            assert_eq!(
                Some(changelog),
                cold.0.get(id),
                "changelogs differ for {id} (hot and {name})"
            );
        }
        assert_eq!(hot.1, cold.1, "published results differ (hot and {name})");
        assert_eq!(hot.2, cold.2, "dead letters differ (hot and {name})");
        assert_eq!(
            hot.3, cold.3,
            "cancelled activities differ (hot and {name})"
        );
    }
}

async fn start(host: &std::sync::Arc<WasmHost>, function: &str, params: Value) -> RunStep {
    let execution = Execution {
        id: format!("E_01KA{:022}", 7).parse().unwrap(),
        ffqn: ffqn(function),
        params,
        created_at: t0(),
        component: None,
        trace: None,
    };
    let (_run, step) = host
        .start_workflow(execution, vec![], vec![], t0())
        .await
        .unwrap();
    step
}

/// `spin` runs out of fuel and `hog-memory` hits the memory limit, each with a clear error,
/// while an order saga on the same host completes meanwhile.
#[tokio::test]
async fn misbehaving_workflows_fail_clearly_while_the_host_serves_others() {
    let host = host();
    for (function, params, kind, needle) in [
        (
            "weir-examples:workflows/misbehave.spin",
            json!([]),
            ExecutionErrorKind::OutOfFuel,
            "fuel",
        ),
        (
            "weir-examples:workflows/misbehave.hog-memory",
            json!([256]),
            ExecutionErrorKind::OutOfMemory,
            "memory limit of 33554432 bytes exceeded",
        ),
    ] {
        let h = host.clone();
        let bad = tokio::spawn(async move { start(&h, function, params).await });
        let mut bus = InMemoryBus::new(host.clone(), t0());
        let good = bus
            .submit(&ffqn(CHECKOUT), order("alice", "1 Main St"))
            .unwrap();
        bus.run_until_idle().await.unwrap();
        assert!(matches!(bus.result(&good), Some(ExecutionResult::Ok(_))));
        let step = bad.await.unwrap();
        let RunStep::Finished {
            result: ExecutionResult::ExecutionError(e),
            ..
        } = step
        else {
            panic!("{function}: {step:?}");
        };
        assert_eq!(e.kind, kind, "{function}: {e}");
        assert!(e.reason.contains(needle), "{function}: {e}");
    }
}

/// Issue 11 item 17, the host's part for workflows: a run that finds the instance pool full
/// (here its one slot held by a running activity) runs none of the workflow's code and says
/// so with `RunError::NoCapacity`, instead of finishing the execution with `trap`. (The
/// processor still turns any failed start into `trap`: the retry is the workflow side's.)
#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_that_finds_the_pool_full_is_not_failed_by_the_host() {
    let dir = examples_dir();
    let text = std::fs::read_to_string(components_toml()).unwrap();
    let file = weir::wasm::ComponentsFile::parse(&text, &components_toml()).unwrap();
    let config = weir::wasm::EngineConfig {
        max_instances: 1,
        ..engine_config()
    };
    let host = std::sync::Arc::new(WasmHost::load(config, file.resolve(&dir).unwrap()).unwrap());
    let holder = host.clone();
    let activity = tokio::spawn(async move {
        holder
            .run_activity(
                &ffqn("weir-examples:slow/sleeper.sleep"),
                &json!([2_000]),
                weir::wasm::Cancellation::never(),
            )
            .await
            .unwrap()
    });
    let refused = wait_for_no_capacity(&host).await;
    assert!(refused.contains("no room to run it"), "{refused}");
    assert!(refused.contains("component instances"), "{refused}");
    // Once the slot is free again, the same start succeeds.
    assert_eq!(
        activity.await.unwrap().result,
        ExecutionResult::Ok(json!(2_000))
    );
    let step = start(
        &host,
        "weir-examples:workflows/hello.greet",
        json!(["pool"]),
    )
    .await;
    assert!(matches!(step, RunStep::Finished { .. }));
}

/// Starts `hello` until a start is refused for want of a slot (the activity holding it may
/// not have started yet); the refusal's text.
async fn wait_for_no_capacity(host: &std::sync::Arc<WasmHost>) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let execution = Execution {
            id: format!("E_01KA{:022}", 8).parse().unwrap(),
            ffqn: ffqn("weir-examples:workflows/hello.greet"),
            params: json!(["pool"]),
            created_at: t0(),
            component: None,
            trace: None,
        };
        match host.start_workflow(execution, vec![], vec![], t0()).await {
            Err(e @ weir::wasm::RunError::NoCapacity { .. }) => return e.to_string(),
            Err(e) => panic!("{e}"),
            Ok(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the pool was never full"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Issue 12 goal 3: a pool of N instances parks N runs of a component whose modules define
/// two tables (`steps`: its shim module has one of its own). The pool had tables for 1.125 per
/// instance, so it parked half its instances' worth of such runs (3 224 of a 5 733-instance
/// pool in the 20 000-execution bench): admission's limit, computed from the instances, was
/// far above what the pool held, and thousands of starts were deferred and dropped runs of
/// executions in flight for room before the limit was learnt.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_parks_a_run_per_instance_of_a_component_with_two_tables() {
    let dir = examples_dir();
    let text = std::fs::read_to_string(components_toml()).unwrap();
    let file = weir::wasm::ComponentsFile::parse(&text, &components_toml()).unwrap();
    let instances = 8;
    let config = weir::wasm::EngineConfig {
        max_instances: instances,
        ..engine_config()
    };
    let host = std::sync::Arc::new(WasmHost::load(config, file.resolve(&dir).unwrap()).unwrap());
    let mut parked = Vec::new();
    for n in 0..instances {
        let execution = Execution {
            id: format!("E_01KB{n:022}").parse().unwrap(),
            ffqn: ffqn("weir-examples:workflows/steps.fibonacci-chain"),
            params: json!([5, 3]),
            created_at: t0(),
            component: None,
            trace: None,
        };
        match host.start_workflow(execution, vec![], vec![], t0()).await {
            Ok((run, RunStep::Parked { .. })) => parked.push(run),
            Ok((_, step)) => panic!("run {n}: waits for its first step, not {step:?}"),
            Err(e) => panic!("run {n} of {instances} has no room: {e}"),
        }
    }
    assert_eq!(parked.len(), instances as usize);
}

/// Issue 15 item 6: a component whose `components.toml` entry records a content digest is
/// loaded only if its file has that digest: the right one loads, a file swapped on disk (the
/// entry pointed at another component's file) is refused naming both digests, and a
/// malformed digest is refused at parse.
#[tokio::test]
async fn a_component_loads_only_if_its_file_has_the_recorded_digest() {
    let hello = std::fs::read(examples_dir().join("hello.wasm")).unwrap();
    let recorded = weir::wasm::engine::component_digest(&hello);
    let entry = "name = \"hello\"\nkind = \"workflow\"\npath = \"hello.wasm\"";
    let with = |path: &str, digest: &str| {
        let (entry, path, digest) = (entry.to_owned(), path.to_owned(), digest.to_owned());
        move |t: String| {
            assert!(t.contains(&entry), "components.toml changed: {entry}");
            t.replace(
                &entry,
                &format!("name = \"hello\"\nkind = \"workflow\"\npath = \"{path}\"\ndigest = \"{digest}\""),
            )
        }
    };
    let host = host_with(with("hello.wasm", &recorded)).expect("the recorded file loads");
    let step = start(
        &std::sync::Arc::new(host),
        "weir-examples:workflows/hello.greet",
        json!(["digest"]),
    )
    .await;
    assert!(matches!(step, RunStep::Finished { .. }), "{step:?}");

    let swapped = std::fs::read(examples_dir().join("compute.wasm")).unwrap();
    let err = host_with(with("compute.wasm", &recorded))
        .err()
        .expect("a swapped file must be refused")
        .to_string();
    assert!(err.contains("component `hello`"), "{err}");
    assert!(err.contains(&recorded), "{err}");
    assert!(
        err.contains(&weir::wasm::engine::component_digest(&swapped)),
        "{err}"
    );

    let err = host_with(with("hello.wasm", "sha256:1234"))
        .err()
        .expect("a malformed digest must be refused")
        .to_string();
    assert!(err.contains("64 lower-case hex"), "{err}");
}

/// Builds found by digest in memory, as the store serves them to a worker.
struct Builds(std::collections::HashMap<String, (String, Vec<u8>)>);

impl weir::wasm::versions::BuildSource for Builds {
    fn fetch<'a>(
        &'a self,
        digest: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<weir::wasm::versions::NamedBuild>, String>>
    {
        Box::pin(async move { Ok(self.0.get(digest).cloned()) })
    }
}

/// The delay the first request of a parked `sleepy` run asks for, in ms after `t0`.
fn first_delay_ms(step: &RunStep) -> i64 {
    step.effects()
        .events
        .iter()
        .find_map(|e| match &e.event {
            HistoryEvent::JoinSetRequest {
                request: weir::model::JoinSetRequest::DelayRequest { expires_at, .. },
                ..
            } => Some((*expires_at - t0()).num_milliseconds()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no delay requested: {step:?}"))
}

/// Issue 14 item 1: on a host whose registry has the second build of `sleepy` (which naps
/// 1 ms first), an execution pinned to the first build runs that build, fetched by digest;
/// pinned to the registry's build or to none, the registry's; pinned to a build nowhere to be
/// had, or stored under a digest its bytes do not have, it is `VersionUnavailable` — parked
/// and tried again, never run on another build.
#[tokio::test]
async fn a_pinned_execution_runs_on_its_build_and_parks_without_it() {
    use weir::wasm::engine::component_digest;
    const SLEEP_FOR: &str = "weir-examples:workflows/sleepy.sleep-for";
    let first = std::fs::read(examples_dir().join("sleepy.wasm")).unwrap();
    let second = std::fs::read(examples_dir().join("sleepy-v2.wasm")).unwrap();
    let (v1, v2) = (component_digest(&first), component_digest(&second));
    let forged = format!("sha256:{}", "0".repeat(64));
    let builds = Builds(
        [
            (v1.clone(), ("sleepy".to_owned(), first)),
            (forged.clone(), ("sleepy".to_owned(), second.clone())),
        ]
        .into_iter()
        .collect(),
    );
    let host = host_with(|t| t.replace("path = \"sleepy.wasm\"", "path = \"sleepy-v2.wasm\""))
        .unwrap()
        .with_build_source(std::sync::Arc::new(builds));
    assert_eq!(host.component_of(&ffqn(SLEEP_FOR)), Some(v2.clone()));
    let run = |component: Option<&str>| {
        let execution = Execution {
            id: format!("E_01KA{:022}", 9).parse().unwrap(),
            ffqn: ffqn(SLEEP_FOR),
            params: json!([5_000]),
            created_at: t0(),
            component: component.map(str::to_owned),
            trace: None,
        };
        host.start_workflow(execution, vec![], vec![], t0())
    };
    let (_, step) = run(Some(&v1)).await.expect("the first build runs");
    assert_eq!(
        first_delay_ms(&step),
        5_000,
        "the first build sleeps at once"
    );
    for pin in [Some(v2.as_str()), None] {
        let (_, step) = run(pin).await.expect("the registry's build runs");
        assert_eq!(
            first_delay_ms(&step),
            1,
            "the second build naps first ({pin:?})"
        );
    }
    let unknown = format!("sha256:{}", "1".repeat(64));
    for (pin, reason) in [
        (&unknown, "no build with that digest"),
        (&forged, "refusing to run it"),
    ] {
        match run(Some(pin)).await {
            Err(e @ weir::wasm::RunError::VersionUnavailable { .. }) => {
                assert!(e.is_retryable(false), "{e}");
                let text = e.to_string();
                assert!(
                    text.contains(pin.as_str()) && text.contains(reason),
                    "{text}"
                );
            }
            Err(e) => panic!("pinned to {pin}: {e}"),
            Ok((_, step)) => panic!("pinned to {pin}, it ran: {step:?}"),
        }
    }
}

/// Issue 13 item 6, the declaration's part: a workflow's `deadline_ms` is its executions'
/// default deadline (`bounded` declares 5 s; `hello` none), and an activity's is refused at
/// load (its attempts are bounded by `limits.timeout_ms`), as is a zero one.
#[test]
fn a_workflow_declares_a_default_deadline_and_an_activity_cannot() {
    let text = std::fs::read_to_string(components_toml()).unwrap();
    let specs = weir::wasm::ComponentsFile::parse(&text, &components_toml())
        .unwrap()
        .resolve(&examples_dir())
        .unwrap();
    let deadline_of = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} is declared"))
            .deadline
    };
    assert_eq!(
        deadline_of("bounded"),
        Some(std::time::Duration::from_secs(5))
    );
    assert_eq!(deadline_of("hello"), None);
    for (entry, needle) in [
        (
            "kind = \"activity\"\nroute = \"compute\"\ndeadline_ms = 10",
            "workflow's",
        ),
        ("kind = \"workflow\"\ndeadline_ms = 0", "at least 1"),
    ] {
        let text = format!("[[component]]\nname = \"x\"\npath = \"x.wasm\"\n{entry}\n");
        let error = weir::wasm::ComponentsFile::parse(&text, &components_toml())
            .unwrap()
            .resolve(&examples_dir())
            .expect_err("refused");
        assert!(error.to_string().contains(needle), "{entry}: {error}");
    }
}

const AWAIT_PAYMENT: &str = "weir-examples:workflows/approval-event.await-payment";

fn paid(key: &str, event_id: &str, amount: u32) -> Record {
    Record::KeyedEvent(weir::correlation::KeyedEvent {
        event: weir::codec::ReceivedEvent {
            event_id: event_id.into(),
            name: "paid".into(),
            payload: json!({"amount": amount}),
        },
        key: key.into(),
        sent_at: t0(),
        returned_by: None,
    })
}

fn payment(bus: &InMemoryBus, id: &ExecutionId) -> Option<Value> {
    match bus.result(id)? {
        ExecutionResult::Ok(Value::String(text)) => Some(serde_json::from_str(text).unwrap()),
        other => panic!("{id}: {other:?}"),
    }
}

/// Events sent to a correlation key reach the execution that registered it, through the
/// bus's routing of the key's records (its commands, its state, forwarded and returned
/// events): one sent before the registration waits in the key; a key held by one execution
/// goes to the next when the first finishes, and an event forwarded to the first after it
/// finished comes back to the key and reaches the next. Hot and cold alike.
#[tokio::test]
async fn correlation_keys_route_events_to_the_execution_that_registered_them() {
    let host = host();
    for hot in [true, false] {
        let mut bus = InMemoryBus::new(host.clone(), t0());
        bus.set_hot(hot);
        // Sent before any execution registered the key: it waits there.
        bus.send(paid("payment:order-1", "ev-1", 100));
        bus.run_until_idle().await.unwrap();
        let waiting = bus.correlation("payment:order-1").expect("kept");
        assert!(waiting.holders.is_empty());
        assert_eq!(waiting.buffered.len(), 1);
        let first = bus
            .submit(&ffqn(AWAIT_PAYMENT), json!(["order-1", 60]))
            .unwrap();
        bus.run_until_idle().await.unwrap();
        assert_eq!(
            payment(&bus, &first),
            Some(json!({"amount": 100})),
            "hot: {hot}"
        );
        assert!(
            bus.execution(&first)
                .unwrap()
                .history
                .contains(&HistoryEvent::Correlate {
                    key: "payment:order-1".into()
                }),
            "hot: {hot}"
        );
        // Finished: the key holds nobody (a tombstone), and remembers the id it forwarded (a
        // resend is a duplicate) until the deduplication window passes.
        assert_eq!(bus.correlation("payment:order-1"), None, "hot: {hot}");
        assert_eq!(bus.remembered("payment:order-1"), ["ev-1"], "hot: {hot}");

        // Two executions register one key: the first holds it, the second waits its turn.
        let a = bus
            .submit(&ffqn(AWAIT_PAYMENT), json!(["order-2", 60]))
            .unwrap();
        let b = bus
            .submit(&ffqn(AWAIT_PAYMENT), json!(["order-2", 60]))
            .unwrap();
        bus.run_until_idle().await.unwrap();
        let key = bus.correlation("payment:order-2").expect("held");
        assert_eq!(key.holders, vec![a.clone(), b.clone()], "hot: {hot}");
        // Both reach `a` (its holder): `a` takes the first and finishes; the second, which
        // finds it finished, goes back to the key, which gives it to `b`.
        bus.send(paid("payment:order-2", "ev-2", 200));
        bus.send(paid("payment:order-2", "ev-3", 300));
        bus.run_until_idle().await.unwrap();
        assert_eq!(
            payment(&bus, &a),
            Some(json!({"amount": 200})),
            "hot: {hot}"
        );
        assert_eq!(
            payment(&bus, &b),
            Some(json!({"amount": 300})),
            "hot: {hot}"
        );
        assert_eq!(bus.correlation("payment:order-2"), None, "hot: {hot}");
        assert_eq!(
            bus.remembered("payment:order-2"),
            ["ev-2", "ev-3"],
            "remembers what it forwarded, hot: {hot}"
        );
        assert!(bus.dead_letters().is_empty(), "{:?}", bus.dead_letters());
        let stats = bus.processor_stats();
        assert_eq!(stats.keyed_events_buffered, 1, "hot: {hot}");
        assert_eq!(stats.keyed_events_returned, 1, "hot: {hot}");
        assert_eq!(stats.keyed_events_forwarded, 4, "hot: {hot}: {stats:?}");
        for id in [&first, &a, &b] {
            assert_replays_identically(&host, &bus, id).await;
        }
    }
}
