//! Scripted workflows, written against the replay engine as a WASM guest's host calls would
//! drive it, and the [`SimRunner`] that runs them behind the processor's [`WorkflowRunner`]
//! seam.
//!
//! The runner is the simplest correct one: every `start` and every `deliver` builds a fresh
//! [`Replay`] from the recorded events and every response so far and runs the program from
//! its beginning until it blocks or finishes — exactly the cold path, and deterministic.
//! (A blocked call stops the program; the next run replays up to it and retries it.)
//!
//! Every program's result is a function of its params, so the invariants can check it:
//! activities are `sim:act/math.double`, answering `2x + 1` for params `[x]`.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::model::{
    ChildKind, DelayId, EventOutcome, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, JoinSetId,
    Response, ScheduleAt,
};
use crate::query::{QueryError, QueryErrorKind};
use crate::replay::{AllProcessed, Execution, Joined, Progress, Replay, ReplayError};
use crate::runner::{Rejection, RunError, RunStep, WorkflowRun, WorkflowRunner};

/// The activity every workflow calls.
pub fn double_ffqn() -> Ffqn {
    "sim:act/math.double".parse().expect("a valid ffqn")
}

/// What the activity answers for `[x]`.
pub fn double(x: i64) -> i64 {
    2 * x + 1
}

/// The activity's answer for a request's params.
pub fn activity_result(params: &Value) -> ExecutionResult {
    match params.get(0).and_then(Value::as_i64) {
        Some(x) => ExecutionResult::Ok(json!(double(x))),
        None => ExecutionResult::Err(json!("params must be [integer]")),
    }
}

/// The function of the external route (`Faults::activity_workers`): an outside service
/// answers it (`2x + 1`, like [`double`]) — or not, or late, or twice; the activity workers
/// answer `timed-out` at its deadline unless the service's group committed past it.
pub fn external_ffqn() -> Ffqn {
    "sim:ext/service.double".parse().expect("a valid ffqn")
}

/// A function no component exports.
pub fn unknown_ffqn() -> Ffqn {
    "sim:wf/flows.nope".parse().expect("a valid ffqn")
}

/// The scripted workflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workflow {
    /// `[n, base]`: `n` activities one after another, summed.
    Seq,
    /// `[n, ms, base]`: like `Seq`, sleeping `ms` before each step.
    Sleepy,
    /// `[k, base]`: `k` activities submitted into one join set, joined in arrival order.
    Fanout,
    /// `[k, ms, base]`: a delay and `k` activities in one join set; every response joined.
    Mixed,
    /// `[n, base]`: a child workflow `Seq [n, base]`, then one activity `[base + 1000]`.
    Parent,
    /// `[secs]`: sleeps `secs` seconds (beyond the timer horizon), returns `secs`.
    LongSleep,
    /// `[k, ms, base]`: a join set with a delay of `ms`, `k` activities and a child workflow
    /// `Seq [1, base]`, closed at once (the activities and the delay are cancelled, the child
    /// awaited); then one activity `[base]`, whose value it returns.
    Abandon,
    /// `[ms]`: waits for an event `approved` and returns its payload (a number); with `ms`
    /// above 0 the wait races a delay of `ms` in one join set (a timeout: -1), and the join
    /// set is closed after the first response (cancelling the other). Not in [`Self::ALL`]:
    /// it finishes only when sent an event or given time.
    Approval,
    /// `[]`: a direct call of a stub child (`double`, never run): returns the value written
    /// for it from outside or by a [`Workflow::StubWriter`]. Not in [`Self::ALL`]: it
    /// finishes only when someone writes it.
    Stubbed,
    /// `[ms]`: a stub child (`double`) and a delay of `ms` in one join set, closed after the
    /// first response, then one activity `[ms]`: returns the value written for the stub, or
    /// -1 if the delay came first (the stub then ends `cancelled`: a value written later is a
    /// conflict). Not in [`Self::ALL`]: its result is the value someone wrote.
    StubRace,
    /// `[target, value, how]`, `target` a string (an execution id, the one param that is not
    /// an integer): writes `ok(value)` as the value of `target`, another execution's stub
    /// child, through the function `double` (`how` 0) or another one (`how` 1: no stub
    /// request of that function, so `not-found`), a blocking `StubWrite` request; returns
    /// the answer: `ok(null)`, `err("conflict")` or `err("not-found")`. Not in
    /// [`Self::ALL`]: its result depends on the other writers.
    StubWriter,
    /// `[n, ms, steps]`: registers the correlation key [`order_key`]`(n)`, calls the activity
    /// `steps` times (events of the key that come meanwhile wait in its history), then waits
    /// for an event `paid` and returns its payload (a number): with `ms` 0 for as long as it
    /// takes, with `ms` above 0 racing a delay of `ms` (a timeout: -1) in one join set closed
    /// after the first response; with `ms` below 0 it does not wait at all (-2: what the key
    /// forwards to it stays unclaimed, or comes back once it finished). Not in
    /// [`Self::ALL`]: it finishes only when sent an event or given time.
    Order,
    /// `[x]`: calls the external route's function ([`external_ffqn`]) with `[x]`: returns
    /// its value (`2x + 1`), or -1 if it failed (timed out: the service did not answer by the
    /// deadline). Not in [`Self::ALL`]: only with `Faults::activity_workers`.
    Watched,
}

/// The correlation key of an `order` with params `[n, ..]`.
pub fn order_key(n: i64) -> String {
    format!("order:{n}")
}

/// The name of the event an `order` waits for.
pub const ORDER_EVENT: &str = "paid";

impl Workflow {
    pub const ALL: [Workflow; 7] = [
        Workflow::Seq,
        Workflow::Sleepy,
        Workflow::Fanout,
        Workflow::Mixed,
        Workflow::Parent,
        Workflow::LongSleep,
        Workflow::Abandon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workflow::Seq => "seq",
            Workflow::Sleepy => "sleepy",
            Workflow::Fanout => "fanout",
            Workflow::Mixed => "mixed",
            Workflow::Parent => "parent",
            Workflow::LongSleep => "long-sleep",
            Workflow::Abandon => "abandon",
            Workflow::Approval => "approval",
            Workflow::Stubbed => "stubbed",
            Workflow::StubRace => "stub-race",
            Workflow::StubWriter => "stub-writer",
            Workflow::Order => "order",
            Workflow::Watched => "watched",
        }
    }

    pub fn ffqn(self) -> Ffqn {
        format!("sim:wf/flows.{}", self.name())
            .parse()
            .expect("a valid ffqn")
    }

    pub fn of(ffqn: &Ffqn) -> Option<Workflow> {
        if ffqn.ifc_fqn() != "sim:wf/flows" {
            return None;
        }
        Workflow::ALL
            .into_iter()
            .chain([
                Workflow::Approval,
                Workflow::Stubbed,
                Workflow::StubRace,
                Workflow::StubWriter,
                Workflow::Order,
                Workflow::Watched,
            ])
            .find(|w| w.name() == ffqn.function())
    }

    fn arity(self) -> usize {
        match self {
            Workflow::Seq | Workflow::Fanout | Workflow::Parent => 2,
            Workflow::Sleepy
            | Workflow::Mixed
            | Workflow::Abandon
            | Workflow::Order
            | Workflow::StubWriter => 3,
            Workflow::LongSleep | Workflow::Approval | Workflow::StubRace | Workflow::Watched => 1,
            Workflow::Stubbed => 0,
        }
    }

    /// The result an execution with `params` must finish with.
    pub fn expected(self, params: &[i64]) -> ExecutionResult {
        let sum = |n: i64, base: i64| (0..n).map(|i| double(base + i)).sum::<i64>();
        let value = match (self, params) {
            (Workflow::Seq, [n, base]) | (Workflow::Fanout, [n, base]) => sum(*n, *base),
            (Workflow::Sleepy, [n, _, base]) | (Workflow::Mixed, [n, _, base]) => sum(*n, *base),
            (Workflow::Parent, [n, base]) => sum(*n, *base) + double(base + 1000),
            (Workflow::LongSleep, [secs]) => *secs,
            (Workflow::Abandon, [_, _, base]) => double(*base),
            (Workflow::Watched, [x]) => double(*x),
            _ => return ExecutionResult::Err(json!("bad params")),
        };
        ExecutionResult::Ok(json!(value))
    }

    fn program(self, ctx: &mut Ctx, p: &[i64]) -> Result<ExecutionResult, Halt> {
        match (self, p) {
            (Workflow::Seq, [n, base]) => {
                let mut sum = 0;
                for i in 0..*n {
                    sum += ctx.activity(base + i)?;
                }
                Ok(ok(sum))
            }
            (Workflow::Sleepy, [n, ms, base]) => {
                let mut sum = 0;
                for i in 0..*n {
                    ctx.sleep_ms(*ms as u64)?;
                    sum += ctx.activity(base + i)?;
                }
                Ok(ok(sum))
            }
            (Workflow::Fanout, [k, base]) => {
                let js = ctx.engine.create_join_set()?;
                for i in 0..*k {
                    ctx.submit_activity(&js, base + i)?;
                }
                let mut sum = 0;
                while let Ok(joined) = ctx.join_next(&js)? {
                    sum += child_value(&joined)?;
                }
                Ok(ok(sum))
            }
            (Workflow::Mixed, [k, ms, base]) => {
                let js = ctx.engine.create_join_set()?;
                ctx.engine
                    .submit_delay(&js, ScheduleAt::In(Duration::from_millis(*ms as u64)))?;
                for i in 0..*k {
                    ctx.submit_activity(&js, base + i)?;
                }
                let mut sum = 0;
                while let Ok(joined) = ctx.join_next(&js)? {
                    if let Joined::Child { .. } = joined {
                        sum += child_value(&joined)?;
                    }
                }
                Ok(ok(sum))
            }
            (Workflow::Parent, [n, base]) => {
                let child = ready(ctx.engine.call(
                    &Workflow::Seq.ffqn(),
                    &json!([n, base]),
                    ChildKind::Workflow,
                ))?;
                let child = value_of(&child)?;
                let last = ctx.activity(base + 1000)?;
                Ok(ok(child + last))
            }
            (Workflow::LongSleep, [secs]) => {
                ctx.sleep_ms(*secs as u64 * 1000)?;
                Ok(ok(*secs))
            }
            (Workflow::Abandon, [k, ms, base]) => {
                let js = ctx.engine.create_join_set()?;
                ctx.engine
                    .submit_delay(&js, ScheduleAt::In(Duration::from_millis(*ms as u64)))?;
                for i in 0..*k {
                    ctx.submit_activity(&js, base + i)?;
                }
                ctx.engine.submit(
                    &js,
                    &Workflow::Seq.ffqn(),
                    &json!([1, base]),
                    ChildKind::Workflow,
                )?;
                ready(ctx.engine.close(&js))?;
                Ok(ok(ctx.activity(*base)?))
            }
            (Workflow::Stubbed, []) => {
                let result = ready(
                    ctx.engine
                        .call(&double_ffqn(), &json!([0]), ChildKind::Stub),
                )?;
                Ok(ok(value_of(&result)?))
            }
            (Workflow::StubRace, [ms]) => {
                let js = ctx.engine.create_join_set()?;
                ctx.engine
                    .submit(&js, &double_ffqn(), &json!([0]), ChildKind::Stub)?;
                ctx.submit_delay_ms(&js, *ms as u64)?;
                let first = ctx.join_next(&js)?;
                ready(ctx.engine.close(&js))?;
                let value = match first {
                    Ok(joined @ Joined::Child { .. }) => child_value(&joined)?,
                    Ok(Joined::Delay { .. }) => -1,
                    other => return Err(Halt::Unexpected(format!("stub-race: {other:?}"))),
                };
                // Still running: later writes find the stub's value held while it waits.
                ctx.activity(*ms)?;
                Ok(ok(value))
            }
            (Workflow::StubWriter, [value, how]) => {
                let target = ctx.engine.execution().params.get(0).cloned();
                let ffqn = if *how == 0 {
                    double_ffqn()
                } else {
                    Workflow::Seq.ffqn()
                };
                let value = serde_json::to_value(ExecutionResult::Ok(json!(value)))
                    .map_err(|e| Halt::Unexpected(e.to_string()))?;
                Ok(ready(ctx.engine.call(
                    &ffqn,
                    &json!([target, value]),
                    ChildKind::StubWrite,
                ))?)
            }
            (Workflow::Watched, [x]) => {
                let result = ready(ctx.engine.call(
                    &external_ffqn(),
                    &json!([x]),
                    ChildKind::Activity,
                ))?;
                Ok(ok(value_of(&result).unwrap_or(-1)))
            }
            (Workflow::Approval, [0]) => ctx.await_event("approved"),
            (Workflow::Approval, [ms]) => ctx.race_event("approved", *ms as u64),
            (Workflow::Order, [n, ms, steps]) => {
                ctx.engine.correlate(&order_key(*n))?;
                for i in 0..*steps {
                    ctx.activity(n * 100 + i)?;
                }
                match *ms {
                    ms if ms < 0 => Ok(ok(-2)),
                    0 => ctx.await_event(ORDER_EVENT),
                    ms => ctx.race_event(ORDER_EVENT, ms as u64),
                }
            }
            _ => Ok(ExecutionResult::Err(json!("bad params"))),
        }
    }
}

fn ok(v: i64) -> ExecutionResult {
    ExecutionResult::Ok(json!(v))
}

/// Why a program stopped before returning.
#[derive(Debug)]
pub enum Halt {
    /// A call blocked on this join set: the run parks.
    Blocked(JoinSetId),
    Engine(ReplayError),
    /// A child answered something the program cannot use (a bug the invariants will see as
    /// a wrong result).
    Unexpected(String),
}

impl From<ReplayError> for Halt {
    fn from(e: ReplayError) -> Self {
        Halt::Engine(e)
    }
}

fn ready<T>(progress: Result<Progress<T>, ReplayError>) -> Result<T, Halt> {
    match progress? {
        Progress::Ready(v) => Ok(v),
        Progress::Blocked(b) => Err(Halt::Blocked(b.join_set_id)),
    }
}

fn value_of(result: &ExecutionResult) -> Result<i64, Halt> {
    match result {
        ExecutionResult::Ok(v) => v
            .as_i64()
            .ok_or_else(|| Halt::Unexpected(format!("not a number: {v}"))),
        other => Err(Halt::Unexpected(format!("a child failed: {other}"))),
    }
}

fn child_value(joined: &Joined) -> Result<i64, Halt> {
    match joined {
        Joined::Child { result, .. } => value_of(result),
        Joined::Delay { .. } | Joined::Event { .. } => Ok(0),
    }
}

/// What a program calls: the engine, with blocking calls turned into [`Halt::Blocked`].
pub struct Ctx {
    pub engine: Replay,
}

impl Ctx {
    /// A direct call of the activity with `[x]`; its value.
    pub fn activity(&mut self, x: i64) -> Result<i64, Halt> {
        let result = ready(
            self.engine
                .call(&double_ffqn(), &json!([x]), ChildKind::Activity),
        )?;
        value_of(&result)
    }

    pub fn sleep_ms(&mut self, ms: u64) -> Result<DateTime<Utc>, Halt> {
        match ready(self.engine.sleep(ScheduleAt::In(Duration::from_millis(ms))))? {
            Ok(at) => Ok(at),
            Err(cancelled) => Err(Halt::Unexpected(format!("sleep: {cancelled}"))),
        }
    }

    pub fn submit_activity(&mut self, js: &JoinSetId, x: i64) -> Result<ExecutionId, Halt> {
        Ok(self
            .engine
            .submit(js, &double_ffqn(), &json!([x]), ChildKind::Activity)?)
    }

    pub fn submit_delay_ms(&mut self, js: &JoinSetId, ms: u64) -> Result<DelayId, Halt> {
        Ok(self
            .engine
            .submit_delay(js, ScheduleAt::In(Duration::from_millis(ms)))?)
    }

    pub fn join_next(&mut self, js: &JoinSetId) -> Result<Result<Joined, AllProcessed>, Halt> {
        ready(self.engine.join_next(js))
    }

    /// Blocks until event `name` comes; its payload is the result.
    pub fn await_event(&mut self, name: &str) -> Result<ExecutionResult, Halt> {
        match ready(self.engine.await_event(name))? {
            Ok((_, payload)) => Ok(ExecutionResult::Ok(payload)),
            Err(cancelled) => Err(Halt::Unexpected(format!("await-event: {cancelled}"))),
        }
    }

    /// Waits for event `name` racing a delay of `ms`: the event's payload, or `-1` if the
    /// delay came first (the join set is closed either way).
    pub fn race_event(&mut self, name: &str, ms: u64) -> Result<ExecutionResult, Halt> {
        let js = self.engine.create_join_set()?;
        self.engine.submit_event(&js, name)?;
        self.submit_delay_ms(&js, ms)?;
        let first = ready(self.engine.join_next(&js))?;
        ready(self.engine.close(&js))?;
        match first {
            Ok(Joined::Event {
                outcome: EventOutcome::Received { payload, .. },
                ..
            }) => Ok(ExecutionResult::Ok(payload)),
            Ok(Joined::Delay { .. }) => Ok(ok(-1)),
            other => Err(Halt::Unexpected(format!("{name}: {other:?}"))),
        }
    }
}

/// The params of a workflow: a JSON array of integers of its arity; for a
/// [`Workflow::StubWriter`] the first is a string (its target, which its program reads from
/// the execution's params) and the integers after it are what this returns.
pub fn parse_params(workflow: Workflow, params: &Value) -> Result<Vec<i64>, String> {
    let items = params
        .as_array()
        .ok_or_else(|| format!("params of {} must be an array", workflow.name()))?;
    if items.len() != workflow.arity() {
        return Err(format!(
            "{} takes {} params, got {}",
            workflow.name(),
            workflow.arity(),
            items.len()
        ));
    }
    let skip = usize::from(workflow == Workflow::StubWriter);
    if skip == 1 && !items[0].is_string() {
        return Err(format!("param 1 of {} must be a string", workflow.name()));
    }
    items
        .iter()
        .enumerate()
        .skip(skip)
        .map(|(i, v)| {
            v.as_i64()
                .ok_or_else(|| format!("param {} of {} must be an integer", i + 1, workflow.name()))
        })
        .collect()
}

/// Runs `workflow` on a fresh engine over `history` and `responses` until it blocks or
/// finishes. Returns the step and the whole history after it.
pub fn run_fresh(
    execution: &Execution,
    workflow: Workflow,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
    now: DateTime<Utc>,
) -> Result<(RunStep, Vec<HistoryEvent>), RunError> {
    let params = parse_params(workflow, &execution.params).map_err(|reason| RunError::Stopped {
        execution: execution.id.to_string(),
        reason,
    })?;
    let engine = Replay::new(execution.clone(), history, responses, now).map_err(|source| {
        RunError::Delivery {
            execution: execution.id.to_string(),
            source,
        }
    })?;
    let mut ctx = Ctx { engine };
    let halted = workflow.program(&mut ctx, &params);
    let engine = &mut ctx.engine;
    let step = match halted {
        Ok(result) => match engine.finish(result) {
            Ok(Progress::Ready(result)) => Ok(RunStep::Finished {
                result,
                effects: engine.take_effects(),
            }),
            Ok(Progress::Blocked(b)) => Ok(RunStep::Parked {
                effects: engine.take_effects(),
                blocked_on: b.join_set_id,
            }),
            Err(e) => engine_error(execution, engine, e),
        },
        Err(Halt::Blocked(js)) => Ok(RunStep::Parked {
            effects: engine.take_effects(),
            blocked_on: js,
        }),
        Err(Halt::Engine(e)) => engine_error(execution, engine, e),
        Err(Halt::Unexpected(reason)) => Err(RunError::Stopped {
            execution: execution.id.to_string(),
            reason,
        }),
    }?;
    Ok((step, engine.history().to_vec()))
}

/// After nondeterminism the engine has finished the execution itself: commit that.
fn engine_error(
    execution: &Execution,
    engine: &mut Replay,
    e: ReplayError,
) -> Result<RunStep, RunError> {
    match engine.finished().cloned() {
        Some(result) => Ok(RunStep::Finished {
            result,
            effects: engine.take_effects(),
        }),
        None => Err(RunError::Engine {
            execution: execution.id.to_string(),
            source: e,
        }),
    }
}

/// The scripted [`WorkflowRunner`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SimRunner;

/// A parked run: what a fresh engine needs to continue it.
#[derive(Debug)]
pub struct SimRun {
    execution: Execution,
    workflow: Workflow,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
}

impl SimRun {
    fn run(&mut self, now: DateTime<Utc>) -> Result<RunStep, RunError> {
        let (step, history) = run_fresh(
            &self.execution,
            self.workflow,
            self.history.clone(),
            self.responses.clone(),
            now,
        )?;
        self.history = history;
        Ok(step)
    }
}

impl WorkflowRun for SimRun {
    fn deliver(
        &mut self,
        response: Response,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<RunStep, RunError>> + Send {
        self.responses.push(response);
        let step = self.run(now);
        std::future::ready(step)
    }

    /// The scripted runs' one query, `progress`: how many events the run has recorded and
    /// responses it has taken (what the `queries` check compares with the history at the
    /// answer's version). `effectful` stands for a query function that calls the host for
    /// something recorded, which a WASM host traps; any other name is not declared.
    fn query(
        &self,
        name: &str,
        _params: &Value,
    ) -> impl Future<Output = Result<Value, QueryError>> + Send {
        let answer = match name {
            "progress" => Ok(json!({
                "events": self.history.len(),
                "responses": self.responses.len(),
            })),
            "effectful" => Err(QueryError::new(
                QueryErrorKind::SideEffect,
                "the query function asked for a delay",
            )),
            other => Err(QueryError::new(
                QueryErrorKind::UnknownQuery,
                format!("{} declares no query `{other}`", self.execution.ffqn),
            )),
        };
        std::future::ready(answer)
    }

    /// As a WASM run: a fixed part (its instance) and a part per event and response.
    fn resident_bytes(&self) -> usize {
        2048 + 256 * (self.history.len() + self.responses.len())
    }
}

impl WorkflowRunner for SimRunner {
    type Run = SimRun;

    fn check_submission(&self, ffqn: &Ffqn, params: &Value) -> Result<(), Rejection> {
        let workflow = Workflow::of(ffqn)
            .ok_or_else(|| Rejection::UnknownFunction(format!("no component exports {ffqn}")))?;
        parse_params(workflow, params).map_err(Rejection::InvalidParams)?;
        Ok(())
    }

    /// `double` returns a number: an `ok` of anything else does not fit (a stub value written
    /// from outside that is not a number is refused). The activity service only ever answers
    /// numbers or errors.
    fn check_answer(&self, ffqn: &Ffqn, result: &ExecutionResult) -> Result<(), String> {
        match result {
            ExecutionResult::Ok(v) if *ffqn == double_ffqn() && !v.is_i64() => {
                Err(format!("{v} is not a number"))
            }
            _ => Ok(()),
        }
    }

    fn start(
        &self,
        execution: Execution,
        history: Vec<HistoryEvent>,
        responses: Vec<Response>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(SimRun, RunStep), RunError>> + Send {
        let started = match Workflow::of(&execution.ffqn) {
            None => Err(RunError::UnknownFunction {
                execution: execution.id.to_string(),
                function: execution.ffqn.to_string(),
            }),
            Some(workflow) => {
                let mut run = SimRun {
                    execution,
                    workflow,
                    history,
                    responses,
                };
                run.run(now).map(|step| (run, step))
            }
        };
        std::future::ready(started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::exec::block_on;

    fn exec(workflow: Workflow, params: Value) -> Execution {
        Execution {
            id: "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().unwrap(),
            ffqn: workflow.ffqn(),
            params,
            created_at: chrono::DateTime::UNIX_EPOCH,
            component: None,
            trace: None,
        }
    }

    /// Answers every request at once, in order, through `deliver`: each program finishes
    /// with its expected result.
    #[test]
    fn programs_compute_their_expected_results() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let cases = [
            (Workflow::Seq, json!([3, 5])),
            (Workflow::Sleepy, json!([2, 100, 1])),
            (Workflow::Fanout, json!([4, 2])),
            (Workflow::Mixed, json!([2, 50, 7])),
            (Workflow::LongSleep, json!([90])),
            (Workflow::Abandon, json!([2, 50, 3])),
        ];
        for (workflow, params) in cases {
            let execution = exec(workflow, params.clone());
            let (mut run, mut step) =
                block_on(SimRunner.start(execution, Vec::new(), Vec::new(), now)).unwrap();
            let mut outstanding: Vec<Response> = Vec::new();
            let result = loop {
                for output in step.effects().outputs.clone() {
                    match output {
                        crate::replay::Output::SubmitChild {
                            child_execution_id,
                            params,
                            ..
                        } => outstanding.push(Response::ChildExecutionFinished {
                            child_execution_id,
                            result: activity_result(&params),
                            ran: None,
                        }),
                        crate::replay::Output::RequestDelay { delay_id, .. } => {
                            outstanding.push(Response::DelayFinished {
                                delay_id,
                                outcome: crate::model::DelayOutcome::Ok,
                            })
                        }
                        _ => {}
                    }
                }
                if let RunStep::Finished { result, .. } = &step {
                    break result.clone();
                }
                let response = outstanding.remove(0);
                step = block_on(run.deliver(response, now)).unwrap();
            };
            let p = parse_params(workflow, &params).unwrap();
            assert_eq!(result, workflow.expected(&p), "{workflow:?}");
        }
    }
}
