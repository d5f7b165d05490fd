//! History events: what a workflow's host calls append to its history, replayed in order.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ffqn::Ffqn;
use super::ids::{DelayId, EventRequestId, ExecutionId};
use super::join_set::JoinSetId;
use super::result::ExecutionResult;

/// The position of an event in an execution's history, starting at 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Version(pub u64);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a submitted child is; decides what closing its join set does to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildKind {
    /// A workflow: awaited when its join set is closed.
    Workflow,
    /// An activity (WASM or external): cancelled when its join set is closed.
    Activity,
    /// A stub activity: never executed, its result is written by the workflow's `stub` call;
    /// cancelled like an activity.
    Stub,
    /// A write of the value of *another* execution's stub child (`<f>-stub` naming a stub
    /// request the workflow did not make): never executed; the other execution's owner writes
    /// the value and answers `ok` (`null`), or the error `"conflict"` / `"not-found"`.
    /// Params: `[stub id, value]`. Cancelled like an activity.
    StubWrite,
}

/// When something should happen, as the workflow expressed it. Replay compares this
/// intention, not the resolved time, which depends on when the call first ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleAt {
    Now,
    At(DateTime<Utc>),
    In(Duration),
}

impl ScheduleAt {
    /// The instant this intention means when expressed at `now`. Saturates at the largest
    /// representable time rather than failing: a workflow asking for "in 10^9 years" gets "never".
    pub fn resolve(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            ScheduleAt::Now => now,
            ScheduleAt::At(at) => at,
            ScheduleAt::In(d) => chrono::TimeDelta::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        }
    }
}

impl fmt::Display for ScheduleAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleAt::Now => f.write_str("now"),
            ScheduleAt::At(t) => write!(f, "at {}", t.to_rfc3339()),
            ScheduleAt::In(d) => write!(f, "in {d:?}"),
        }
    }
}

/// A request submitted into a join set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JoinSetRequest {
    ChildExecutionRequest {
        child_execution_id: ExecutionId,
        target_ffqn: Ffqn,
        /// A JSON array, one element per WIT parameter.
        params: Value,
        child_kind: ChildKind,
    },
    DelayRequest {
        delay_id: DelayId,
        timeout: ScheduleAt,
        /// `timeout` resolved when the request was first made; what `sleep` returns.
        expires_at: DateTime<Utc>,
    },
    /// A wait for the next event named `name` sent to the execution (`weir.events`).
    EventRequest {
        event_request_id: EventRequestId,
        name: String,
    },
}

/// A persisted nondeterministic value: drawn on the first run, replayed afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PersistValue {
    RandomU64 {
        min: u64,
        max_exclusive: u64,
        value: u64,
    },
    RandomString {
        min_length: u64,
        max_length_exclusive: u64,
        value: String,
    },
}

/// What a `stub` call found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StubOutcome {
    /// Written now, or the same value was already there.
    Ok,
    /// A different value was already there; nothing was written.
    Conflict,
}

/// One entry of an execution's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryEvent {
    JoinSetCreate {
        join_set_id: JoinSetId,
    },
    JoinSetRequest {
        join_set_id: JoinSetId,
        request: JoinSetRequest,
    },
    /// A blocking wait for the join set's next response.
    JoinNext {
        join_set_id: JoinSetId,
        /// Recorded by closing the join set (explicitly or on return), not by the workflow.
        closing: bool,
        /// Set by `<f>-await-next`: the function whose response the workflow expects.
        requested_ffqn: Option<Ffqn>,
    },
    /// A join-next when every request of the join set had been processed (`all-processed`).
    JoinNextTooMany {
        join_set_id: JoinSetId,
        requested_ffqn: Option<Ffqn>,
    },
    Persist {
        value: PersistValue,
    },
    /// A new top-level execution; `execution_id` is generated deterministically by the engine.
    Schedule {
        execution_id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        intention: ScheduleAt,
        scheduled_at: DateTime<Utc>,
    },
    /// The workflow wrote the result of a stub activity child.
    Stub {
        target_execution_id: ExecutionId,
        result: ExecutionResult,
        outcome: StubOutcome,
    },
    /// The workflow registered a correlation key: events sent to the key reach it (when it
    /// holds the key: one execution at a time, in the order they registered).
    Correlate {
        key: String,
    },
}

impl HistoryEvent {
    /// The variant's name, as used in messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            HistoryEvent::JoinSetCreate { .. } => "JoinSetCreate",
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::ChildExecutionRequest { .. },
                ..
            } => "JoinSetRequest(ChildExecutionRequest)",
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::DelayRequest { .. },
                ..
            } => "JoinSetRequest(DelayRequest)",
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::EventRequest { .. },
                ..
            } => "JoinSetRequest(EventRequest)",
            HistoryEvent::JoinNext { .. } => "JoinNext",
            HistoryEvent::JoinNextTooMany { .. } => "JoinNextTooMany",
            HistoryEvent::Persist {
                value: PersistValue::RandomU64 { .. },
            } => "Persist(RandomU64)",
            HistoryEvent::Persist {
                value: PersistValue::RandomString { .. },
            } => "Persist(RandomString)",
            HistoryEvent::Schedule { .. } => "Schedule",
            HistoryEvent::Stub { .. } => "Stub",
            HistoryEvent::Correlate { .. } => "Correlate",
        }
    }
}

fn opt_ffqn(f: &Option<Ffqn>) -> String {
    f.as_ref().map_or_else(|| "-".to_string(), Ffqn::to_string)
}

impl fmt::Display for HistoryEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryEvent::JoinSetCreate { join_set_id } => {
                write!(f, "JoinSetCreate({join_set_id})")
            }
            HistoryEvent::JoinSetRequest {
                join_set_id,
                request:
                    JoinSetRequest::ChildExecutionRequest {
                        child_execution_id,
                        target_ffqn,
                        params,
                        child_kind,
                    },
            } => write!(
                f,
                "JoinSetRequest({join_set_id}, ChildExecutionRequest {child_execution_id} \
                 {target_ffqn} {params} {child_kind:?})"
            ),
            HistoryEvent::JoinSetRequest {
                join_set_id,
                request:
                    JoinSetRequest::DelayRequest {
                        delay_id,
                        timeout,
                        expires_at,
                    },
            } => write!(
                f,
                "JoinSetRequest({join_set_id}, DelayRequest {delay_id} {timeout} expires {})",
                expires_at.to_rfc3339()
            ),
            HistoryEvent::JoinSetRequest {
                join_set_id,
                request:
                    JoinSetRequest::EventRequest {
                        event_request_id,
                        name,
                    },
            } => write!(
                f,
                "JoinSetRequest({join_set_id}, EventRequest {event_request_id} {name})"
            ),
            HistoryEvent::JoinNext {
                join_set_id,
                closing,
                requested_ffqn,
            } => write!(
                f,
                "JoinNext({join_set_id}, closing: {closing}, requested: {})",
                opt_ffqn(requested_ffqn)
            ),
            HistoryEvent::JoinNextTooMany {
                join_set_id,
                requested_ffqn,
            } => write!(
                f,
                "JoinNextTooMany({join_set_id}, requested: {})",
                opt_ffqn(requested_ffqn)
            ),
            HistoryEvent::Persist {
                value:
                    PersistValue::RandomU64 {
                        min,
                        max_exclusive,
                        value,
                    },
            } => write!(f, "Persist(RandomU64 [{min}, {max_exclusive}) = {value})"),
            HistoryEvent::Persist {
                value:
                    PersistValue::RandomString {
                        min_length,
                        max_length_exclusive,
                        value,
                    },
            } => write!(
                f,
                "Persist(RandomString length [{min_length}, {max_length_exclusive}) = {value:?})"
            ),
            HistoryEvent::Schedule {
                execution_id,
                ffqn,
                params,
                intention,
                ..
            } => write!(f, "Schedule({execution_id} {ffqn} {params} {intention})"),
            HistoryEvent::Stub {
                target_execution_id,
                result,
                outcome,
            } => write!(f, "Stub({target_execution_id} = {result}, {outcome:?})"),
            HistoryEvent::Correlate { key } => write!(f, "Correlate({key})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schedule_at_resolves_against_now() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let later = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(ScheduleAt::Now.resolve(now), now);
        assert_eq!(ScheduleAt::At(later).resolve(now), later);
        assert_eq!(
            ScheduleAt::In(Duration::from_secs(90)).resolve(now),
            DateTime::from_timestamp(1_700_000_090, 0).unwrap()
        );
        assert_eq!(
            ScheduleAt::In(Duration::MAX).resolve(now),
            DateTime::<Utc>::MAX_UTC
        );
    }

    #[test]
    fn every_event_survives_json() {
        let parent: ExecutionId = "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().unwrap();
        let js = JoinSetId::generated(1).unwrap();
        let ffqn: Ffqn = "a:b/c.d".parse().unwrap();
        let now = DateTime::from_timestamp(1_700_000_000, 123_000_000).unwrap();
        let events = vec![
            HistoryEvent::JoinSetCreate {
                join_set_id: js.clone(),
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: js.clone(),
                request: JoinSetRequest::ChildExecutionRequest {
                    child_execution_id: parent.child(&js, 1),
                    target_ffqn: ffqn.clone(),
                    params: json!([1, "x"]),
                    child_kind: ChildKind::Workflow,
                },
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: js.clone(),
                request: JoinSetRequest::DelayRequest {
                    delay_id: parent.delay(&js, 2),
                    timeout: ScheduleAt::In(Duration::from_millis(1500)),
                    expires_at: now,
                },
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: js.clone(),
                request: JoinSetRequest::EventRequest {
                    event_request_id: parent.event_request(&js, 4),
                    name: "approved".into(),
                },
            },
            HistoryEvent::JoinNext {
                join_set_id: js.clone(),
                closing: true,
                requested_ffqn: Some(ffqn.clone()),
            },
            HistoryEvent::JoinNextTooMany {
                join_set_id: js.clone(),
                requested_ffqn: None,
            },
            HistoryEvent::Persist {
                value: PersistValue::RandomU64 {
                    min: 1,
                    max_exclusive: 7,
                    value: 3,
                },
            },
            HistoryEvent::Persist {
                value: PersistValue::RandomString {
                    min_length: 1,
                    max_length_exclusive: 7,
                    value: "abc".into(),
                },
            },
            HistoryEvent::Schedule {
                execution_id: parent.clone(),
                ffqn: ffqn.clone(),
                params: json!([]),
                intention: ScheduleAt::At(now),
                scheduled_at: now,
            },
            HistoryEvent::Stub {
                target_execution_id: parent.child(&js, 3),
                result: ExecutionResult::Err(json!("e")),
                outcome: StubOutcome::Conflict,
            },
            HistoryEvent::Correlate {
                key: "payment:order-42".into(),
            },
        ];
        for e in events {
            let text = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<HistoryEvent>(&text).unwrap(), e);
            assert!(
                e.to_string()
                    .starts_with(e.kind_name().split('(').next().unwrap())
            );
        }
    }
}
