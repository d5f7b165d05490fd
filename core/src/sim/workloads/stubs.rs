//! Stubs (`Faults::stub_writes`): values written for the stub requests committed so far,
//! from outside (a response on `weir.responses`) or by `stub-writer` executions — new
//! values, the same again, misfits, after the parent finished, and writes that name no stub
//! request; and, once the run settled, the writes that let every waiting `stubbed` finish.

use indexmap::IndexMap;
use serde_json::json;

use crate::model::{ExecutionId, ExecutionResult};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::scheduler::Sim;
use crate::sim::sent::StubSend;
use crate::sim::workflows::Workflow;
use crate::sim::world::lock;

/// A stub request committed to `weir.history`, as the scheduler finds it.
#[derive(Debug, Clone)]
struct SeenStub {
    stub: ExecutionId,
    parent: ExecutionId,
    /// A value for it is committed.
    valued: bool,
    /// Its parent's `Finished` is committed.
    parent_finished: bool,
}

impl Sim {
    /// The stub requests committed to `weir.history` so far, in log order: (stub, parent).
    pub fn stub_requests(&self) -> Vec<(ExecutionId, ExecutionId)> {
        let (stubs, _) = self.committed_stubs();
        stubs.into_iter().map(|s| (s.stub, s.parent)).collect()
    }

    /// Whether a `stubbed` or `stub-race` execution was submitted.
    pub(in crate::sim) fn stubbing(&self) -> bool {
        self.submitted.values().any(|s| {
            matches!(
                Workflow::of(&s.ffqn),
                Some(Workflow::Stubbed | Workflow::StubRace)
            )
        })
    }

    /// The stub requests committed to `weir.history` so far, in log order, and a few ids of
    /// activity requests (children that are no stubs).
    fn committed_stubs(&self) -> (Vec<SeenStub>, Vec<ExecutionId>) {
        use crate::model::{ChildKind, HistoryEvent, JoinSetRequest, Response};
        use crate::records::HistoryEntry;
        let w = self.world();
        let mut stubs: IndexMap<ExecutionId, SeenStub> = IndexMap::new();
        let mut finished = std::collections::BTreeSet::new();
        let mut activities = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (_, r) in w.cluster.committed_records(Topic::History) {
            let Some(Payload::History(record)) = &r.payload else {
                continue;
            };
            if !seen.insert((&record.execution_id, record.seq)) {
                continue;
            }
            match &record.entry {
                HistoryEntry::Event {
                    event:
                        HistoryEvent::JoinSetRequest {
                            request:
                                JoinSetRequest::ChildExecutionRequest {
                                    child_execution_id,
                                    child_kind,
                                    ..
                                },
                            ..
                        },
                    ..
                } => match child_kind {
                    ChildKind::Stub => {
                        stubs.insert(
                            child_execution_id.clone(),
                            SeenStub {
                                stub: child_execution_id.clone(),
                                parent: record.execution_id.clone(),
                                valued: false,
                                parent_finished: false,
                            },
                        );
                    }
                    ChildKind::Activity if activities.len() < 20 => {
                        activities.push(child_execution_id.clone());
                    }
                    _ => {}
                },
                HistoryEntry::ResponseAppended(Response::ChildExecutionFinished {
                    child_execution_id,
                    ..
                }) => {
                    if let Some(s) = stubs.get_mut(child_execution_id) {
                        s.valued = true;
                    }
                }
                HistoryEntry::Finished { .. } => {
                    finished.insert(record.execution_id.clone());
                }
                _ => {}
            }
        }
        let stubs = stubs
            .into_values()
            .map(|s| SeenStub {
                parent_finished: finished.contains(&s.parent),
                ..s
            })
            .collect();
        (stubs, activities)
    }

    fn new_stub_value(&mut self) -> i64 {
        self.next_stub_value += 1;
        self.next_stub_value
    }

    /// A client writes `result` as the value of stub `stub` from outside: a `Response` on
    /// `weir.responses`, keyed by the stub's parent (what `weir stub` sends).
    pub fn write_stub(&mut self, stub: &ExecutionId, result: ExecutionResult, after_finish: bool) {
        let Some(parent) = stub.parent() else {
            return;
        };
        let response = crate::model::Response::child_finished(stub.clone(), result.clone());
        let (partition, offset) = lock(&self.world).client_append(
            Topic::Responses,
            parent.to_string(),
            None,
            Payload::Response(response),
        );
        let sent_at = self.now();
        self.stub_sends.push(StubSend {
            target: stub.clone(),
            result: result.clone(),
            writer: None,
            wrong_function: false,
            after_finish,
            sent_at,
        });
        self.note(format!(
            "stub {stub} = {result} from outside{} -> responses/{partition}@{offset}",
            if after_finish {
                " (its parent finished)"
            } else {
                ""
            }
        ));
    }

    /// A client submits a `stub-writer` that writes `ok(value)` as the value of `target`
    /// (through another function than `double` if `wrong_function`).
    pub fn submit_stub_writer(
        &mut self,
        target: &ExecutionId,
        value: i64,
        wrong_function: bool,
        after_finish: bool,
    ) -> ExecutionId {
        let id = self.new_id();
        let params = json!([target.to_string(), value, i64::from(wrong_function)]);
        let expected = Workflow::StubWriter.expected(&[]);
        let sent_at = self.now();
        self.stub_sends.push(StubSend {
            target: target.clone(),
            result: ExecutionResult::Ok(json!(value)),
            writer: Some(id.clone()),
            wrong_function,
            after_finish,
            sent_at,
        });
        self.submit_execution(
            id.clone(),
            Workflow::StubWriter.ffqn(),
            params,
            (None, None),
            expected,
        );
        id
    }

    /// A random write of a stub: mostly of a committed stub request (a new value, or one
    /// written for it before: the same value again), by a `stub-writer` or from outside
    /// (some twice at once, a few that do not fit), whether its parent still waits or has
    /// finished; some by writers naming no stub request (`not-found`): a top-level id, a
    /// child of nobody, an activity, a stub through another function
    /// (`Faults::stub_wrong_function`).
    pub(in crate::sim) fn random_stub_write(&mut self) {
        let writers = self.submitted.len() - self.workload();
        if writers >= 4 * self.config.executions + 8 {
            return;
        }
        let (stubs, activities) = self.committed_stubs();
        // Before the first stub request, mostly nothing to write.
        let none = if stubs.is_empty() {
            self.rng.chance(40)
        } else {
            self.rng.chance(120)
        };
        if stubs.is_empty() && !none {
            return;
        }
        if none {
            let value = self.new_stub_value();
            let js = crate::model::JoinSetId::generated(1).expect("a join set id");
            let (target, wrong, after) = match self.rng.below(4) {
                0 => (self.new_id(), false, false),
                2 if !activities.is_empty() => (self.rng.pick(&activities).clone(), false, false),
                3 if !stubs.is_empty() && self.faults.stub_wrong_function => {
                    let s = self.rng.pick(&stubs).clone();
                    (s.stub, true, s.parent_finished)
                }
                _ => (self.new_id().child(&js, 1), false, false),
            };
            self.submit_stub_writer(&target, value, wrong, after);
            return;
        }
        // Some of the stubs whose parent finished: the value they hold stays theirs.
        let done: Vec<&SeenStub> = stubs.iter().filter(|s| s.parent_finished).collect();
        let s = if !done.is_empty() && self.rng.chance(150) {
            (*self.rng.pick(&done)).clone()
        } else {
            self.rng.pick(&stubs).clone()
        };
        let earlier: Vec<i64> = self
            .stub_sends
            .iter()
            .filter(|x| x.target == s.stub && !x.wrong_function)
            .filter_map(|x| match &x.result {
                ExecutionResult::Ok(v) => v.as_i64(),
                _ => None,
            })
            .collect();
        let value = if !earlier.is_empty() && self.rng.chance(400) {
            *self.rng.pick(&earlier)
        } else {
            self.new_stub_value()
        };
        if self.rng.chance(350) {
            let result = if self.rng.chance(120) {
                ExecutionResult::Ok(json!(format!("v{value}")))
            } else {
                ExecutionResult::Ok(json!(value))
            };
            // A value that does not fit before one that does, while the stub has none yet
            // (as far as the client knows): refused, then taken.
            if !s.valued && self.rng.chance(300) {
                let misfit = ExecutionResult::Ok(json!(format!("v{value}")));
                self.write_stub(&s.stub, misfit, s.parent_finished);
            }
            self.write_stub(&s.stub, result.clone(), s.parent_finished);
            if self.rng.chance(200) {
                self.write_stub(&s.stub, result, s.parent_finished);
            }
        } else {
            self.submit_stub_writer(&s.stub, value, false, s.parent_finished);
        }
    }

    /// Writes the stub of every `stubbed` execution without a result whose stub holds no
    /// value (by a writer or from outside) and settles again, round after round until none
    /// is left; returns whether the last round settled.
    pub fn answer_stubs(&mut self, budget_ms: i64) -> bool {
        let mut settled = true;
        for _ in 0..3 {
            let waiting: std::collections::BTreeSet<ExecutionId> =
                self.unanswered(Workflow::Stubbed).into_iter().collect();
            if waiting.is_empty() {
                break;
            }
            let (stubs, _) = self.committed_stubs();
            let open: Vec<ExecutionId> = stubs
                .into_iter()
                .filter(|s| !s.valued && waiting.contains(&s.parent))
                .map(|s| s.stub)
                .collect();
            if open.is_empty() {
                break;
            }
            for stub in open {
                let value = self.new_stub_value();
                if self.rng.chance(500) {
                    self.write_stub(&stub, ExecutionResult::Ok(json!(value)), false);
                } else {
                    self.submit_stub_writer(&stub, value, false, false);
                }
            }
            settled = self.quiesce(budget_ms);
            if !settled {
                break;
            }
        }
        settled
    }
}
