//! JSON presentations of what the store holds, shared by the CLI (`weir status|history|list
//! --json`, `weir schedule list --json`) and the HTTP API, so that both show an execution, its
//! history, a list and a schedule the same way; and the text lines of `weir history`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::codec::{Codec, Created, DecodeError, HistoryEntry, HistoryRecord, RecordPosition};
use crate::model::Response;
use crate::store::list::cursor_text;
use crate::store::rows::{ExecutionRow, HistoryRow, ListPage, ListedExecution};

/// An execution row: params and result as JSON values (the row keeps them as text).
pub fn execution_json(row: &ExecutionRow) -> Value {
    let parse =
        |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::String(text.to_owned()));
    json!({
        "execution_id": row.execution_id.to_string(),
        "ffqn": row.ffqn,
        "state": row.state.as_str(),
        "parent_id": row.parent_id.as_ref().map(ToString::to_string),
        "params": parse(&row.params),
        "history_version": row.history_version,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "finished_at": row.finished_at,
        "result": row.result.as_deref().map(parse),
    })
}

/// Where a stub child stands, read from its parent's history.
#[derive(Debug, Clone, PartialEq)]
pub enum StubState {
    /// The parent made no stub request with that id (Obelisk's `not-found`).
    NotAStub,
    /// Requested, no value yet.
    Open,
    /// The value it holds.
    Written(crate::model::ExecutionResult),
}

/// Where stub child `child` stands in `rows`, its parent's stored changelog (what `weir stub`
/// and the HTTP API answer from).
pub fn stub_state(
    codec: &Codec,
    rows: &[HistoryRow],
    child: &crate::model::ExecutionId,
) -> Result<StubState, DecodeError> {
    use crate::model::{ChildKind, HistoryEvent, JoinSetRequest, Response};
    let history: Vec<HistoryRecord> = decode_history(codec, rows)?
        .into_iter()
        .map(|(_, record)| record)
        .collect();
    let requested = history.iter().any(|r| {
        matches!(&r.entry, HistoryEntry::Event {
            event: HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::ChildExecutionRequest {
                    child_execution_id,
                    child_kind: ChildKind::Stub,
                    ..
                },
                ..
            },
            ..
        } if child_execution_id == child)
    });
    if !requested {
        return Ok(StubState::NotAStub);
    }
    Ok(history
        .iter()
        .find_map(|r| match &r.entry {
            HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            }) if child_execution_id == child => Some(StubState::Written(result.clone())),
            _ => None,
        })
        .unwrap_or(StubState::Open))
}

/// One execution of a list.
pub fn listed_json(e: &ListedExecution) -> Value {
    json!({
        "execution_id": e.execution_id.to_string(),
        "ffqn": e.ffqn,
        "parent_id": e.parent_id.as_ref().map(ToString::to_string),
        "state": e.state.as_str(),
        "outcome": e.outcome,
        "created_at": e.created_at,
        "finished_at": e.finished_at,
    })
}

/// A page of a list: its executions, and the cursor of the next page (`null` on the last).
pub fn page_json(page: &ListPage) -> Value {
    json!({
        "executions": page.executions.iter().map(listed_json).collect::<Vec<_>>(),
        "next": page.next.as_ref().map(cursor_text),
    })
}

/// The history rows of an execution, each with its decoded record.
pub fn decode_history<'a>(
    codec: &Codec,
    rows: &'a [HistoryRow],
) -> Result<Vec<(&'a HistoryRow, HistoryRecord)>, DecodeError> {
    rows.iter()
        .map(|row| {
            let position = RecordPosition::at("history", row.kafka_partition, row.kafka_offset);
            Ok((row, codec.decode(&row.record, &position)?))
        })
        .collect()
}

/// Why an execution is paused: the reason of its last `Paused` entry, if no `Resumed`
/// followed it (an operator's, or an activity's whose attempts were exhausted under
/// `on_exhausted = "pause"`: it names the activity, its function, its attempts and the last
/// error).
pub fn paused_because<'a>(entries: &'a [(&HistoryRow, HistoryRecord)]) -> Option<&'a str> {
    entries
        .iter()
        .rev()
        .find_map(|(_, record)| match &record.entry {
            HistoryEntry::Paused { reason } => Some(Some(reason.as_str())),
            HistoryEntry::Resumed { .. } => Some(None),
            _ => None,
        })
        .flatten()
}

/// One changelog record, with the offset it was committed at on `weir.history` and when it
/// happened (`recorded_at`: the record's own time, or for a record of an earlier Weir when the
/// store materialised it; the UI's timeline). A child's answer carries `ran` (when the work it
/// answers started and ended) if the answerer told.
pub fn history_entry_json(row: &HistoryRow, record: &HistoryRecord) -> Value {
    let body = match &record.entry {
        HistoryEntry::Created(c) => {
            let mut created = json!({
                "kind": "created", "ffqn": c.ffqn.to_string(), "params": c.params,
                "parent": c.parent.as_ref().map(|p| p.execution_id.to_string()),
                "scheduled_at": c.scheduled_at, "created_at": c.created_at,
                "submitted_at": c.submitted_at,
                "component": c.component, "deadline": c.deadline,
            });
            // Started by a reset: where from.
            if let (Some(link), Some(fields)) = (&c.reset_of, created.as_object_mut()) {
                fields.insert(
                    "reset_of".into(),
                    json!({"execution_id": link.execution_id.to_string(), "seq": link.seq}),
                );
            }
            // Holds concurrency slots to run: which, and their limits.
            if let (false, Some(fields)) = (c.slots.is_empty(), created.as_object_mut()) {
                let slots: Vec<Value> = c
                    .slots
                    .iter()
                    .map(|s| json!({"slot": s.slot.to_string(), "limit": s.limit}))
                    .collect();
                fields.insert("slots".into(), Value::Array(slots));
            }
            created
        }
        HistoryEntry::Event { version, event } => {
            json!({"kind": "event", "version": version, "event": event})
        }
        HistoryEntry::ResponseAppended(r) => json!({"kind": "response", "response": r}),
        HistoryEntry::Finished {
            result,
            finished_at,
        } => {
            json!({"kind": "finished", "result": result, "finished_at": finished_at})
        }
        HistoryEntry::Upgraded { from, to } => {
            json!({"kind": "upgraded", "from": from, "to": to})
        }
        HistoryEntry::CancelRequested { reason } => {
            json!({"kind": "cancel_requested", "reason": reason})
        }
        HistoryEntry::Paused { reason } => json!({"kind": "paused", "reason": reason}),
        HistoryEntry::Resumed { reason } => json!({"kind": "resumed", "reason": reason}),
        HistoryEntry::Reset {
            new_execution_id,
            to_seq,
            reason,
        } => json!({
            "kind": "reset", "new_execution_id": new_execution_id.to_string(),
            "to_seq": to_seq, "reason": reason,
        }),
        HistoryEntry::SlotGranted { slot } => {
            json!({"kind": "slot_granted", "slot": slot.to_string()})
        }
        HistoryEntry::EventReceived(e) => json!({
            "kind": "event_received", "event_id": e.event_id, "name": e.name,
            "payload": e.payload,
        }),
    };
    json!({
        "seq": record.seq,
        "offset": row.kafka_offset,
        "recorded_at": record.at.unwrap_or(row.recorded_at),
        "entry": body,
    })
}

/// A schedule's state (`weir schedule list --json`, `GET /v1/schedules`).
pub fn schedule_json(s: &weir_core::schedule::ScheduleState) -> serde_json::Value {
    json!({
        "name": s.name,
        "status": s.status.as_str(),
        "generation": s.generation,
        "cron": s.spec.cron,
        "timezone": s.spec.timezone,
        "function": s.spec.ffqn.to_string(),
        "params": s.spec.params,
        "overlap": s.spec.overlap.as_str(),
        "catchup_window_ms": s.spec.catchup_window.num_milliseconds(),
        "next_tick": s.next_tick.map(|t| t.to_rfc3339()),
        "last_tick": s.last_tick.map(|t| t.to_rfc3339()),
        "running": s.running.iter().map(|id| id.to_string()).collect::<Vec<_>>(),
        "started": s.started,
        "skipped": s.skipped,
        "missed": s.missed,
        "updated_at": s.updated_at.to_rfc3339(),
    })
}

/// A batch operation as JSON (`weir batch status|list --json`, the API): its spec, status,
/// counts and, when given, every execution's outcome.
pub fn batch_json(
    s: &weir_core::batch::BatchState,
    outcomes: Option<&[weir_core::batch::BatchOutcomes]>,
) -> serde_json::Value {
    let f = &s.spec.filter;
    let (function, parent) = match &f.by {
        weir_core::rows::ListBy::Function(function) => (Some(function.clone()), None),
        weir_core::rows::ListBy::Parent(parent) => (None, Some(parent.to_string())),
    };
    let mut json = json!({
        "id": s.id,
        "action": s.spec.action.as_str(),
        "status": s.status.as_str(),
        "rate": s.spec.per_second,
        "reason": s.spec.reason,
        "filter": {
            "function": function,
            "parent": parent,
            "state": f.state.map(|s| s.as_str()),
            "outcome": f.outcome,
            "since": f.created_from.map(|t| t.to_rfc3339()),
            "until": f.created_until.map(|t| t.to_rfc3339()),
        },
        "acted": s.counts.acted,
        "skipped_finished": s.counts.finished,
        "skipped_already": s.counts.already,
        "skipped_child": s.counts.children,
        "reset": (s.spec.action == weir_core::batch::BatchAction::Reset).then(|| json!({
            "to": match s.spec.reset.to {
                weir_core::records::ResetPoint::Seq(seq) => json!(seq),
                weir_core::records::ResetPoint::Latest => json!("latest"),
            },
            "then": s.spec.reset.then.as_str(),
        })),
        "seen": s.counts.seen(),
        "started_at": s.started_at.to_rfc3339(),
        "ended_at": s.ended_at.map(|t| t.to_rfc3339()),
    });
    if let Some(outcomes) = outcomes {
        json["outcomes"] = outcomes
            .iter()
            .flat_map(|turn| &turn.outcomes)
            .map(|o| json!({"execution_id": o.execution_id.to_string(), "outcome": o.outcome.as_str()}))
            .collect();
    }
    json
}

/// A correlation key's state as JSON (`weir correlation list --json`, the API): its holder
/// (`null`: nobody holds it), the executions queued after it in registration order, the
/// events buffered for the next holder, and how many event ids it remembers having forwarded;
/// for the events kept for an execution not created yet (the key is its id), until when.
pub fn correlation_json(listed: &crate::kafka::correlations::ListedKey) -> serde_json::Value {
    let c = &listed.state;
    json!({
        "key": c.key,
        "holder": c.holders.first().map(|id| id.to_string()),
        "queued": c.holders.iter().skip(1).map(|id| id.to_string()).collect::<Vec<_>>(),
        "buffered": c
            .buffered
            .iter()
            .map(|e| json!({
                "event_id": e.event.event_id,
                "name": e.event.name,
                "sent_at": e.sent_at.to_rfc3339(),
            }))
            .collect::<Vec<_>>(),
        "remembered": listed.remembered,
        // Events kept for an execution that does not exist yet (the key is its id): when
        // they stop waiting for its submission.
        "waits_until": c.waits_until.map(|at| at.to_rfc3339()),
        // A cancellation kept for an execution that does not exist yet.
        "cancel": c.cancel.as_ref().map(|k| json!({
            "reason": k.reason,
            "terminate": k.terminate,
            "requested_at": k.requested_at.to_rfc3339(),
        })),
    })
}

/// `weir history`'s table: [`history_header`], a [`history_line`] per record, and once
/// finished [`history_took`]. `weir submit --follow` prints the same lines as they come.
pub fn history_lines(entries: &[(&HistoryRow, HistoryRecord)]) -> Vec<String> {
    let mut lines = vec![history_header()];
    let mut created = None;
    for (row, record) in entries {
        if let HistoryEntry::Created(c) = &record.entry {
            created = Some(c);
        }
        lines.push(history_line(created.map(|c| c.created_at), row, record));
        if let (Some(c), HistoryEntry::Finished { finished_at, .. }) = (created, &record.entry) {
            lines.push(history_took(c, *finished_at));
        }
    }
    lines
}

/// The columns of [`history_line`].
pub fn history_header() -> String {
    format!(
        "{:>4}  {:>8}  {:>10}  {:>9}  {:<9}  detail",
        "seq", "offset", "at", "ran", "kind"
    )
}

/// One record of an execution created at `start`: its seq, offset, when it happened since the
/// creation (`at`), how long the work a child's answer answers ran (`ran`, when it says), its
/// kind and what it says.
pub fn history_line(
    start: Option<DateTime<Utc>>,
    row: &HistoryRow,
    record: &HistoryRecord,
) -> String {
    let happened = record.at.unwrap_or(row.recorded_at);
    let at = start.map_or_else(String::new, |start| {
        format!("+{}", seconds(happened - start))
    });
    let ran = match &record.entry {
        HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
            ran: Some(ran), ..
        }) => seconds(ran.duration()),
        _ => String::new(),
    };
    let (kind, detail) = describe(&record.entry);
    format!(
        "{:>4}  {:>8}  {at:>10}  {ran:>9}  {kind:<9}  {detail}",
        record.seq, row.kafka_offset
    )
}

/// How long an execution created as `created` took to its finish at `finished_at`: from its
/// submission when its creation says when that was, with its wait for a worker.
pub fn history_took(created: &Created, finished_at: DateTime<Utc>) -> String {
    match created.submitted_at {
        Some(submitted) => format!(
            "took {} from its submission ({} waiting for a worker)",
            seconds(finished_at - submitted),
            seconds(created.created_at - submitted)
        ),
        None => format!(
            "took {} from its creation",
            seconds(finished_at - created.created_at)
        ),
    }
}

/// `1.234s`, to the millisecond (a negative span, from clocks that disagree, shows as 0).
fn seconds(span: chrono::Duration) -> String {
    let ms = span.num_milliseconds().max(0);
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

/// A history entry as (kind, one readable line).
pub fn describe(entry: &HistoryEntry) -> (&'static str, String) {
    match entry {
        HistoryEntry::Created(c) => (
            "created",
            format!(
                "{}({}){}{}{}{}",
                c.ffqn,
                c.params,
                c.parent
                    .as_ref()
                    .map(|p| format!(" child of {}", p.execution_id))
                    .unwrap_or_default(),
                c.component
                    .as_ref()
                    .map(|d| format!(" on {d}"))
                    .unwrap_or_default(),
                c.reset_of
                    .as_ref()
                    .map(|r| format!(" reset of {} at seq {}", r.execution_id, r.seq))
                    .unwrap_or_default(),
                c.slots
                    .iter()
                    .map(|s| format!(" in slot {} (limit {})", s.slot, s.limit))
                    .collect::<String>()
            ),
        ),
        HistoryEntry::Event { version, event } => ("event", format!("v{version} {event}")),
        HistoryEntry::ResponseAppended(r) => ("response", r.to_string()),
        HistoryEntry::Finished { result, .. } => ("finished", result.to_string()),
        HistoryEntry::Upgraded { from, to } => (
            "upgraded",
            format!(
                "from {} to {to}",
                from.as_deref().unwrap_or("no pinned build")
            ),
        ),
        HistoryEntry::CancelRequested { reason } => {
            ("cancel", format!("cancel requested: {reason}"))
        }
        HistoryEntry::Paused { reason } => ("paused", format!("paused: {reason}")),
        HistoryEntry::Resumed { reason } => ("resumed", format!("resumed: {reason}")),
        HistoryEntry::Reset {
            new_execution_id,
            to_seq,
            reason,
        } => (
            "reset",
            format!("reset to {new_execution_id} from seq {to_seq}: {reason}"),
        ),
        HistoryEntry::SlotGranted { slot } => ("slot", format!("holds concurrency slot {slot}")),
        HistoryEntry::EventReceived(e) => (
            "event-in",
            format!(
                "{} `{}` {} (kept for a wait)",
                e.event_id, e.name, e.payload
            ),
        ),
    }
}

/// Every route topic of the deployment, with the interfaces routed to it, who serves it and
/// whether it is paused (`weir route list --json`, `GET /v1/routes`).
pub fn routes_json(
    topology: &crate::topology::Topology,
    controls: &weir_core::control::Controls,
) -> Value {
    let paused: std::collections::BTreeMap<&str, &weir_core::control::RoutePause> = controls
        .paused_routes()
        .map(|p| (p.route.as_str(), p))
        .collect();
    let routes: Vec<Value> = topology
        .route_topics()
        .iter()
        .map(|topic| {
            let external = topology.served_route_topic(topic).is_err();
            let interfaces = topology.interfaces_of(topic);
            // A limit is its topic's: every interface routed to it names the same one.
            let rate = interfaces
                .first()
                .and_then(|i| topology.rate_limit_of(i))
                .map(|r| json!({"per_second": r.per_second, "burst": r.burst}));
            json!({
                "topic": topic,
                "interfaces": interfaces,
                "external": external,
                "rate": rate,
                "paused": paused.get(topic.as_str()).map(|p| json!({
                    "reason": p.reason,
                    "paused_at": p.paused_at,
                })),
            })
        })
        .collect();
    Value::Array(routes)
}
