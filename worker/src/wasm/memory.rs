//! An in-memory bus and store for running executions through [`WasmHost`] without Kafka or
//! a database: what the tests and benchmarks of the host use. It plays the worker's part in
//! miniature — submissions are routed to the registry's components, responses back to the
//! parents (journalled in arrival order), delays and schedules wait in a timer list that the
//! test fires, stub results come from `StubWrite` outputs — and it keeps every execution's
//! history, responses and result for inspection.
//!
//! It is single-threaded and deterministic: the clock is logical (advanced only by firing
//! timers), top-level ids come from a counter, and messages are processed FIFO. With
//! [`InMemoryBus::set_hot`]`(false)` every run is discarded after each step, so every
//! response is processed by a cold rebuild from the stored history: running the same
//! scenario both ways must give identical histories and results.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use ulid::Ulid;

use crate::model::{
    ChildKind, DelayId, DelayOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn,
    HistoryEvent, Response,
};
use crate::replay::{Effects, Execution, Output};

use super::activity::Cancellation;
use super::host::WasmHost;
use super::registry::{ComponentKind, SubmitError};
use super::workflow::{RunError, RunStep, WorkflowRun};

/// One execution as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredExecution {
    pub ffqn: Ffqn,
    pub params: Value,
    pub parent: Option<ExecutionId>,
    pub kind: ChildKind,
    pub history: Vec<HistoryEvent>,
    /// Responses in arrival order (the journal replay depends on).
    pub responses: Vec<Response>,
    pub result: Option<ExecutionResult>,
    /// Activity attempts made.
    pub attempts: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the store is inconsistent: {0}")]
    Inconsistent(String),
}

enum Message {
    Submit {
        id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        parent: Option<ExecutionId>,
        kind: ChildKind,
    },
    Respond {
        to: ExecutionId,
        response: Response,
    },
    Cancel {
        id: ExecutionId,
    },
}

#[derive(Clone, Debug)]
enum TimerKind {
    Delay(DelayId),
    Schedule {
        id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
    },
}

/// A pending timer: a delay or a scheduled execution.
#[derive(Clone, Debug)]
pub struct Timer {
    pub due: DateTime<Utc>,
    kind: TimerKind,
}

/// Counters of what the bus did, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusStats {
    /// Runs started from scratch (fresh or cold rebuild).
    pub starts: u64,
    /// Of those, starts that replayed a recorded history (cold path).
    pub cold_starts: u64,
    /// Responses delivered to a parked instance (hot path).
    pub hot_deliveries: u64,
}

/// See the module docs.
pub struct InMemoryBus {
    host: Arc<WasmHost>,
    now: DateTime<Utc>,
    next_id: u64,
    hot: bool,
    store: BTreeMap<ExecutionId, StoredExecution>,
    queue: VecDeque<Message>,
    timers: Vec<Timer>,
    active: HashMap<ExecutionId, WorkflowRun>,
    stats: BusStats,
}

impl InMemoryBus {
    /// A bus over `host`, its logical clock starting at `now`.
    pub fn new(host: Arc<WasmHost>, now: DateTime<Utc>) -> Self {
        InMemoryBus {
            host,
            now,
            next_id: 0,
            hot: true,
            store: BTreeMap::new(),
            queue: VecDeque::new(),
            timers: Vec::new(),
            active: HashMap::new(),
            stats: BusStats::default(),
        }
    }

    /// Hot (instances stay parked, the default) or cold (every step rebuilds by replay).
    pub fn set_hot(&mut self, hot: bool) {
        self.hot = hot;
        if !hot {
            self.active.clear();
        }
    }

    pub fn host(&self) -> &Arc<WasmHost> {
        &self.host
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    pub fn stats(&self) -> BusStats {
        self.stats
    }

    pub fn execution(&self, id: &ExecutionId) -> Option<&StoredExecution> {
        self.store.get(id)
    }

    pub fn executions(&self) -> &BTreeMap<ExecutionId, StoredExecution> {
        &self.store
    }

    pub fn result(&self, id: &ExecutionId) -> Option<&ExecutionResult> {
        self.store.get(id).and_then(|e| e.result.as_ref())
    }

    pub fn pending_timers(&self) -> &[Timer] {
        &self.timers
    }

    /// Discards every parked instance (as an eviction or a restart would).
    pub fn evict_all(&mut self) {
        self.active.clear();
    }

    fn fresh_id(&mut self) -> ExecutionId {
        self.next_id += 1;
        let millis = u64::try_from(self.now.timestamp_millis()).unwrap_or(0);
        ExecutionId::top_level(Ulid::from_parts(millis, u128::from(self.next_id)))
    }

    /// Submits a top-level execution after type-checking its params; run it with
    /// [`InMemoryBus::run_until_idle`].
    pub fn submit(&mut self, ffqn: &Ffqn, params: Value) -> Result<ExecutionId, BusError> {
        self.host.check_submission(ffqn, &params)?;
        let id = self.fresh_id();
        let kind = self
            .host
            .registry()
            .function(ffqn)
            .map_or(ChildKind::Activity, |f| f.child_kind());
        self.queue.push_back(Message::Submit {
            id: id.clone(),
            ffqn: ffqn.clone(),
            params,
            parent: None,
            kind,
        });
        Ok(id)
    }

    /// Processes messages until none is left (timers are left pending).
    pub async fn run_until_idle(&mut self) -> Result<(), BusError> {
        while let Some(message) = self.queue.pop_front() {
            match message {
                Message::Submit {
                    id,
                    ffqn,
                    params,
                    parent,
                    kind,
                } => self.on_submit(id, ffqn, params, parent, kind).await?,
                Message::Respond { to, response } => self.on_response(to, response).await?,
                Message::Cancel { id } => self.on_cancel(id),
            }
        }
        Ok(())
    }

    /// Fires the earliest pending timer (advancing the clock to it, never backwards) and
    /// runs until idle. `false` when there was no timer.
    pub async fn fire_next_timer(&mut self) -> Result<bool, BusError> {
        let Some(i) = (0..self.timers.len()).min_by_key(|&i| self.timers[i].due) else {
            return Ok(false);
        };
        let timer = self.timers.remove(i);
        self.now = self.now.max(timer.due);
        match timer.kind {
            TimerKind::Delay(delay_id) => {
                let to = delay_id.execution_id().clone();
                self.queue.push_back(Message::Respond {
                    to,
                    response: Response::DelayFinished {
                        delay_id,
                        outcome: DelayOutcome::Ok,
                    },
                });
            }
            TimerKind::Schedule { id, ffqn, params } => {
                let kind = self
                    .host
                    .registry()
                    .function(&ffqn)
                    .map_or(ChildKind::Activity, |f| f.child_kind());
                self.queue.push_back(Message::Submit {
                    id,
                    ffqn,
                    params,
                    parent: None,
                    kind,
                });
            }
        }
        self.run_until_idle().await?;
        Ok(true)
    }

    /// Fires timers until none is left.
    pub async fn fire_all_timers(&mut self) -> Result<(), BusError> {
        while self.fire_next_timer().await? {}
        Ok(())
    }

    async fn on_submit(
        &mut self,
        id: ExecutionId,
        ffqn: Ffqn,
        params: Value,
        parent: Option<ExecutionId>,
        kind: ChildKind,
    ) -> Result<(), BusError> {
        if let Some(existing) = self.store.get_mut(&id) {
            // A stub written before its submission was processed: complete the record.
            existing.ffqn = ffqn;
            existing.params = params;
            existing.kind = kind;
            return Ok(());
        }
        self.store
            .entry(id.clone())
            .or_insert_with(|| StoredExecution {
                ffqn: ffqn.clone(),
                params: params.clone(),
                parent: parent.clone(),
                kind,
                history: Vec::new(),
                responses: Vec::new(),
                result: None,
                attempts: 0,
            });
        let component_kind = self.host.registry().function(&ffqn).map(|f| f.kind);
        match (kind, component_kind) {
            // Registered for its result, written by the parent's `-stub` call.
            (ChildKind::Stub, _) => Ok(()),
            (_, Some(ComponentKind::Workflow)) => self.start(id, Vec::new(), Vec::new()).await,
            (_, Some(ComponentKind::Activity)) => {
                let outcome = self
                    .host
                    .run_activity(&ffqn, &params, Cancellation::never())
                    .await
                    .map_err(|e| BusError::Inconsistent(e.to_string()))?;
                if let Some(e) = self.store.get_mut(&id) {
                    e.attempts = outcome.attempts;
                }
                self.finish(&id, outcome.result);
                Ok(())
            }
            (_, None) => {
                // What the real worker dead-letters; here the parent gets an error.
                self.finish(
                    &id,
                    ExecutionResult::error(
                        ExecutionErrorKind::Trap,
                        format!("no registered component exports {ffqn}"),
                    ),
                );
                Ok(())
            }
        }
    }

    /// Records a result and answers the parent.
    fn finish(&mut self, id: &ExecutionId, result: ExecutionResult) {
        let Some(e) = self.store.get_mut(id) else {
            return;
        };
        if e.result.is_some() {
            return;
        }
        e.result = Some(result.clone());
        if let Some(parent) = e.parent.clone() {
            self.queue.push_back(Message::Respond {
                to: parent,
                response: Response::ChildExecutionFinished {
                    child_execution_id: id.clone(),
                    result,
                },
            });
        }
    }

    fn on_cancel(&mut self, id: ExecutionId) {
        // Activities here run to completion when submitted, so only children still queued
        // or stubs without a result can be cancelled.
        self.queue
            .retain(|m| !matches!(m, Message::Submit { id: i, .. } if *i == id));
        if self.store.get(&id).is_some_and(|e| e.result.is_none()) {
            self.finish(
                &id,
                ExecutionResult::error(ExecutionErrorKind::Cancelled, "cancelled by the parent"),
            );
        }
    }

    async fn on_response(&mut self, to: ExecutionId, response: Response) -> Result<(), BusError> {
        let Some(stored) = self.store.get_mut(&to) else {
            return Err(BusError::Inconsistent(format!("response for unknown {to}")));
        };
        if stored.result.is_some() {
            return Ok(()); // e.g. a cancelled delay answering a finished workflow
        }
        stored.responses.push(response.clone());
        let now = self.now;
        if let Some(run) = self.active.get_mut(&to) {
            self.stats.hot_deliveries += 1;
            let step = run.deliver(response, now).await?;
            self.apply(&to, step)
        } else {
            let (history, responses) = (stored.history.clone(), stored.responses.clone());
            self.start(to, history, responses).await
        }
    }

    async fn start(
        &mut self,
        id: ExecutionId,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
    ) -> Result<(), BusError> {
        let stored = self
            .store
            .get(&id)
            .ok_or_else(|| BusError::Inconsistent(format!("no execution {id}")))?;
        let execution = Execution {
            id: id.clone(),
            ffqn: stored.ffqn.clone(),
            params: stored.params.clone(),
        };
        self.stats.starts += 1;
        if !history.is_empty() {
            self.stats.cold_starts += 1;
        }
        let (run, step) = self
            .host
            .start_workflow(execution, history, responses, self.now)
            .await?;
        if self.hot {
            self.active.insert(id.clone(), run);
        }
        self.apply(&id, step)
    }

    fn apply(&mut self, id: &ExecutionId, step: RunStep) -> Result<(), BusError> {
        let finished = matches!(step, RunStep::Finished { .. });
        let (RunStep::Parked { effects, .. } | RunStep::Finished { effects, .. }) = step;
        let Effects { events, outputs } = effects;
        let stored = self
            .store
            .get_mut(id)
            .ok_or_else(|| BusError::Inconsistent(format!("no execution {id}")))?;
        for e in events {
            if e.version.0 as usize != stored.history.len() {
                return Err(BusError::Inconsistent(format!(
                    "{id}: event at version {} but the history has {} events",
                    e.version,
                    stored.history.len()
                )));
            }
            stored.history.push(e.event);
        }
        if finished || !self.hot {
            self.active.remove(id);
        }
        for output in outputs {
            match output {
                Output::SubmitChild {
                    child_execution_id,
                    ffqn,
                    params,
                    kind,
                } => self.queue.push_back(Message::Submit {
                    id: child_execution_id,
                    ffqn,
                    params,
                    parent: Some(id.clone()),
                    kind,
                }),
                Output::RequestDelay {
                    delay_id,
                    expires_at,
                } => self.timers.push(Timer {
                    due: expires_at,
                    kind: TimerKind::Delay(delay_id),
                }),
                Output::Schedule {
                    execution_id,
                    ffqn,
                    params,
                    at,
                } => self.timers.push(Timer {
                    due: at,
                    kind: TimerKind::Schedule {
                        id: execution_id,
                        ffqn,
                        params,
                    },
                }),
                Output::StubWrite {
                    execution_id,
                    result,
                } => {
                    // The stub child may not be registered yet (its submission is queued).
                    let entry =
                        self.store
                            .entry(execution_id.clone())
                            .or_insert_with(|| StoredExecution {
                                ffqn: Ffqn::new("weir", "unknown", "stub", None, "stub")
                                    .expect("a valid constant ffqn"),
                                params: Value::Array(vec![]),
                                parent: Some(id.clone()),
                                kind: ChildKind::Stub,
                                history: Vec::new(),
                                responses: Vec::new(),
                                result: None,
                                attempts: 0,
                            });
                    entry.parent = Some(id.clone());
                    self.finish(&execution_id, result);
                }
                Output::CancelChild { child_execution_id } => {
                    self.queue.push_back(Message::Cancel {
                        id: child_execution_id,
                    })
                }
                Output::CancelDelay { delay_id } => {
                    self.timers
                        .retain(|t| !matches!(&t.kind, TimerKind::Delay(d) if *d == delay_id));
                    self.queue.push_back(Message::Respond {
                        to: delay_id.execution_id().clone(),
                        response: Response::DelayFinished {
                            delay_id,
                            outcome: DelayOutcome::Cancelled,
                        },
                    });
                }
                Output::Finished { result } => self.finish(id, result),
            }
        }
        Ok(())
    }
}
