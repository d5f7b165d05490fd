//! A test driver: runs a workflow program (a closure of host calls) against the engine and a
//! simulated outside world, in the three ways an execution can be run:
//!
//! - hot: one engine; when a call blocks, the world delivers a response and the call is retried;
//! - cold at every block: when a call blocks, the world delivers a response and the engine is
//!   thrown away, rebuilt from its history and the response journal, and the program re-run
//!   from the start (what a worker does after eviction or a rebalance);
//! - journal: an engine built from a recorded history and journal (a replay, or a replay of a
//!   prefix continued fresh with the rest of the journal).
//!
//! [`scenario`] runs a program hot and cold and replays the hot run's history, and asserts that
//! all agree: same events, same outputs, same call outcomes, and no new event on replay.

use std::collections::{HashSet, VecDeque};
use std::fmt::Debug;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::model::{
    ChildKind, DelayId, DelayOutcome, ExecutionErrorKind, ExecutionId, ExecutionResult, Ffqn,
    HistoryEvent, JoinSetId, Ran, Response, ScheduleAt,
};
use crate::replay::rng::Draw;
use crate::replay::{
    AllProcessed, AwaitNextError, Cancelled, CreateJoinSetError, Execution, GetError, Joined,
    Output, Progress, Replay, ReplayError, StubError,
};

pub(crate) const ULID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

pub(crate) fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

pub(crate) fn exec_id() -> ExecutionId {
    format!("E_{ULID}").parse().unwrap()
}

/// `test:pkg/ifc.<name>`.
pub(crate) fn f(name: &str) -> Ffqn {
    format!("test:pkg/ifc.{name}").parse().unwrap()
}

pub(crate) fn execution() -> Execution {
    Execution {
        id: exec_id(),
        ffqn: f("main"),
        params: json!([]),
        created_at: chrono::DateTime::UNIX_EPOCH,
        component: None,
        trace: None,
    }
}

/// What the simulated children answer: `fail*` functions return `err`, `trap*` an execution
/// error, everything else `ok({fn, params})`.
pub(crate) fn answer(ffqn: &Ffqn, params: &Value) -> ExecutionResult {
    let name = ffqn.function();
    if name.starts_with("fail") {
        ExecutionResult::Err(json!({ "failed": name }))
    } else if name.starts_with("trap") {
        ExecutionResult::error(ExecutionErrorKind::Trap, "trapped")
    } else {
        ExecutionResult::Ok(json!({ "fn": name, "params": params }))
    }
}

/// When the simulated child ran, as its answerer tells: `timed*` functions given a number
/// `n` ran from [`now`] to `n` minutes later; the others do not say.
pub(crate) fn ran(ffqn: &Ffqn, params: &Value) -> Option<Ran> {
    let minutes = params
        .as_i64()
        .filter(|_| ffqn.function().starts_with("timed"))?;
    Some(Ran {
        started_at: now(),
        finished_at: now() + chrono::TimeDelta::minutes(minutes),
    })
}

/// Why a program stopped without a value.
#[derive(Debug, PartialEq)]
pub(crate) enum Stop {
    Error(ReplayError),
    /// Cold mode: rebuild the engine and run the program again.
    Restart,
    /// Blocked with no response left to deliver.
    Stuck,
}

impl From<ReplayError> for Stop {
    fn from(e: ReplayError) -> Self {
        Stop::Error(e)
    }
}

pub(crate) type R<T> = Result<T, Stop>;

/// A delivered response and the history length when it was delivered.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Arrival {
    pub at_len: usize,
    pub response: Response,
    /// Delivered by the world on its own before op `n` (not because the run was blocked).
    pub spontaneous: Option<usize>,
}

/// The outside world: answers to the requests the engine emitted, not yet delivered.
pub(crate) struct World {
    outstanding: Vec<Response>,
    /// `None`: deliver the oldest outstanding response; `Some`: pick pseudo-randomly.
    seed: Option<u64>,
    picks: u64,
    /// Op indices whose spontaneous arrival has been decided (cold runs re-run ops).
    decided: HashSet<usize>,
}

impl World {
    pub fn fifo() -> Self {
        World::seeded(None)
    }

    pub fn seeded(seed: Option<u64>) -> Self {
        World {
            outstanding: Vec::new(),
            seed,
            picks: 0,
            decided: HashSet::new(),
        }
    }

    fn observe(&mut self, output: &Output) {
        match output {
            Output::SubmitChild {
                child_execution_id,
                ffqn,
                params,
                kind,
            } if *kind != ChildKind::Stub => {
                self.outstanding.push(Response::ChildExecutionFinished {
                    child_execution_id: child_execution_id.clone(),
                    result: answer(ffqn, params),
                    ran: ran(ffqn, params),
                });
            }
            Output::StubWrite {
                execution_id,
                result,
            } => self.outstanding.push(Response::ChildExecutionFinished {
                child_execution_id: execution_id.clone(),
                result: result.clone(),
                ran: None,
            }),
            Output::RequestDelay { delay_id, .. } => {
                self.outstanding.push(Response::DelayFinished {
                    delay_id: delay_id.clone(),
                    outcome: DelayOutcome::Ok,
                })
            }
            Output::CancelChild {
                child_execution_id, ..
            } => {
                for r in &mut self.outstanding {
                    if let Response::ChildExecutionFinished {
                        child_execution_id: id,
                        result,
                        ..
                    } = r
                        && id == child_execution_id
                    {
                        *result =
                            ExecutionResult::error(ExecutionErrorKind::Cancelled, "cancelled");
                    }
                }
            }
            Output::CancelDelay { delay_id } => {
                for r in &mut self.outstanding {
                    if let Response::DelayFinished {
                        delay_id: id,
                        outcome,
                    } = r
                        && id == delay_id
                    {
                        *outcome = DelayOutcome::Cancelled;
                    }
                }
            }
            _ => {}
        }
    }

    fn pick(&mut self) -> Option<Response> {
        if self.outstanding.is_empty() {
            return None;
        }
        let i = match self.seed {
            None => 0,
            Some(seed) => Draw::at(seed, self.picks).below(self.outstanding.len() as u64) as usize,
        };
        self.picks += 1;
        Some(self.outstanding.remove(i))
    }

    fn take(&mut self, pred: impl Fn(&Response) -> bool) -> Option<Response> {
        let i = self.outstanding.iter().position(pred)?;
        Some(self.outstanding.remove(i))
    }
}

pub(crate) enum Mode {
    Hot(World),
    ColdRestarts(World),
    /// Responses come from a recorded journal, in its order.
    Journal(VecDeque<Arrival>),
}

/// State that survives a cold restart.
pub(crate) struct Shared {
    pub mode: Mode,
    pub journal: Vec<Arrival>,
    pub outputs: Vec<Output>,
    pub restarts: usize,
}

pub(crate) struct Run {
    pub engine: Replay,
    pub shared: Shared,
    pub trace: Vec<String>,
}

impl Run {
    fn new(history: Vec<HistoryEvent>, shared: Shared) -> Run {
        let responses: Vec<Response> = shared.journal.iter().map(|a| a.response.clone()).collect();
        Run {
            engine: Replay::new(execution(), history, responses, now()).unwrap(),
            shared,
            trace: Vec::new(),
        }
    }

    fn collect(&mut self) {
        for output in self.engine.take_outputs() {
            if let Mode::Hot(w) | Mode::ColdRestarts(w) = &mut self.shared.mode {
                w.observe(&output);
            }
            self.shared.outputs.push(output);
        }
    }

    fn record<T: Debug>(&mut self, call: String, result: R<T>) -> R<T> {
        self.collect();
        if let Ok(v) = &result {
            self.trace.push(format!("{call} -> {v:?}"));
        }
        result
    }

    fn deliver(&mut self, response: Response, spontaneous: Option<usize>) {
        self.shared.journal.push(Arrival {
            at_len: self.engine.history().len(),
            response: response.clone(),
            spontaneous,
        });
        self.engine.deliver_response(response).unwrap();
    }

    /// The run is blocked: get a response delivered.
    fn unblock(&mut self) -> R<()> {
        let at_len = self.engine.history().len();
        match &mut self.shared.mode {
            Mode::Hot(w) => {
                let r = w.pick().ok_or(Stop::Stuck)?;
                self.deliver(r, None);
                Ok(())
            }
            Mode::ColdRestarts(w) => {
                let response = w.pick().ok_or(Stop::Stuck)?;
                self.shared.journal.push(Arrival {
                    at_len,
                    response,
                    spontaneous: None,
                });
                Err(Stop::Restart)
            }
            Mode::Journal(remaining) => {
                let arrival = remaining.pop_front().ok_or(Stop::Stuck)?;
                self.deliver(arrival.response, arrival.spontaneous);
                Ok(())
            }
        }
    }

    fn blocking<T: Debug>(
        &mut self,
        call: String,
        mut f: impl FnMut(&mut Replay) -> Result<Progress<T>, ReplayError>,
    ) -> R<T> {
        loop {
            match f(&mut self.engine) {
                Ok(Progress::Ready(v)) => return self.record(call, Ok(v)),
                Ok(Progress::Blocked(b)) => {
                    assert_eq!(self.engine.blocked_on(), Some(&b.join_set_id));
                    self.collect();
                    self.unblock()?;
                }
                Err(e) => return self.record(call, Err(e.into())),
            }
        }
    }

    /// Delivers the response to `pred`'s request now, unless it was delivered already
    /// (a cold re-run or a replay passes here again).
    fn arrive(&mut self, pred: impl Fn(&Response) -> bool) {
        if self.shared.journal.iter().any(|a| pred(&a.response)) {
            return;
        }
        let response = match &mut self.shared.mode {
            Mode::Hot(w) | Mode::ColdRestarts(w) => {
                w.take(&pred).expect("the response is outstanding")
            }
            Mode::Journal(remaining) => {
                let arrival = remaining.pop_front().expect("the journal has it");
                assert!(pred(&arrival.response), "journal order differs");
                arrival.response
            }
        };
        self.deliver(response, None);
    }

    pub fn arrive_child(&mut self, id: &ExecutionId) {
        self.arrive(|r| matches!(r, Response::ChildExecutionFinished { child_execution_id, .. } if child_execution_id == id));
    }

    pub fn arrive_delay(&mut self, id: &DelayId) {
        self.arrive(|r| matches!(r, Response::DelayFinished { delay_id, .. } if delay_id == id));
    }

    /// The world may deliver a response on its own before op `op` (seeded worlds only).
    pub fn maybe_arrive(&mut self, op: usize) {
        match &mut self.shared.mode {
            Mode::Hot(w) | Mode::ColdRestarts(w) => {
                let Some(seed) = w.seed else { return };
                if !w.decided.insert(op) || Draw::at(seed ^ 0x5eed, op as u64).below(3) != 0 {
                    return;
                }
                if let Some(r) = w.pick() {
                    self.deliver(r, Some(op));
                }
            }
            Mode::Journal(remaining) => {
                if remaining.front().is_some_and(|a| a.spontaneous == Some(op)) {
                    let a = remaining.pop_front().unwrap();
                    self.deliver(a.response, a.spontaneous);
                }
            }
        }
    }

    // ---- host calls ----

    pub fn create_join_set(&mut self) -> R<JoinSetId> {
        let r = self.engine.create_join_set().map_err(Stop::from);
        self.record("create_join_set".into(), r)
    }

    pub fn create_named(&mut self, name: &str) -> R<Result<JoinSetId, CreateJoinSetError>> {
        let r = self.engine.create_named_join_set(name).map_err(Stop::from);
        self.record(format!("create_named {name}"), r)
    }

    pub fn submit(
        &mut self,
        js: &JoinSetId,
        name: &str,
        params: Value,
        kind: ChildKind,
    ) -> R<ExecutionId> {
        let r = self
            .engine
            .submit(js, &f(name), &params, kind)
            .map_err(Stop::from);
        self.record(format!("submit {js} {name} {params}"), r)
    }

    pub fn submit_delay(&mut self, js: &JoinSetId, timeout: ScheduleAt) -> R<DelayId> {
        let r = self.engine.submit_delay(js, timeout).map_err(Stop::from);
        self.record(format!("submit_delay {js} {timeout}"), r)
    }

    pub fn join_next(&mut self, js: &JoinSetId) -> R<Result<Joined, AllProcessed>> {
        self.blocking(format!("join_next {js}"), |e| e.join_next(js))
    }

    pub fn await_next(
        &mut self,
        js: &JoinSetId,
        name: &str,
    ) -> R<Result<(ExecutionId, ExecutionResult), AwaitNextError>> {
        let ffqn = f(name);
        self.blocking(format!("await_next {js} {name}"), |e| {
            e.await_next(js, &ffqn)
        })
    }

    pub fn get(&mut self, child: &ExecutionId, name: &str) -> R<Result<ExecutionResult, GetError>> {
        let r = Ok(self.engine.get(child, &f(name)));
        self.record(format!("get {child} {name}"), r)
    }

    pub fn call(&mut self, name: &str, params: Value, kind: ChildKind) -> R<ExecutionResult> {
        let ffqn = f(name);
        self.blocking(format!("call {name} {params}"), |e| {
            e.call(&ffqn, &params, kind)
        })
    }

    pub fn sleep(&mut self, timeout: ScheduleAt) -> R<Result<DateTime<Utc>, Cancelled>> {
        self.blocking(format!("sleep {timeout}"), |e| e.sleep(timeout))
    }

    pub fn random_u64(&mut self, min: u64, max: u64) -> R<u64> {
        let r = self.engine.random_u64(min, max).map_err(Stop::from);
        self.record(format!("random_u64 {min} {max}"), r)
    }

    pub fn random_string(&mut self, min: u64, max: u64) -> R<String> {
        let r = self.engine.random_string(min, max).map_err(Stop::from);
        self.record(format!("random_string {min} {max}"), r)
    }

    /// What a guest reads through WASI now: the recorded time, the monotonic clock and two
    /// entropy draws (recorded in the trace, so the three runs are compared on them).
    pub fn read_guest(&mut self) -> R<(DateTime<Utc>, u64, u64, [u8; 5])> {
        let mut bytes = [0; 5];
        let time = self.engine.recorded_time();
        let monotonic = self.engine.recorded_monotonic_nanos();
        let draw = self.engine.entropy_u64();
        self.engine.fill_entropy(&mut bytes);
        self.record("read_guest".into(), Ok((time, monotonic, draw, bytes)))
    }

    pub fn schedule(&mut self, name: &str, params: Value, at: ScheduleAt) -> R<ExecutionId> {
        let r = self
            .engine
            .schedule(&f(name), &params, at)
            .map_err(Stop::from);
        self.record(format!("schedule {name} {params} {at}"), r)
    }

    pub fn stub(
        &mut self,
        target: &ExecutionId,
        result: ExecutionResult,
    ) -> R<Result<(), StubError>> {
        let call = format!("stub {target} {result}");
        let r = self.engine.stub(target, result).map_err(Stop::from);
        self.record(call, r)
    }

    pub fn correlate(&mut self, key: &str) -> R<()> {
        let r = self.engine.correlate(key).map_err(Stop::from);
        self.record(format!("correlate {key}"), r)
    }

    pub fn close(&mut self, js: &JoinSetId) -> R<()> {
        self.blocking(format!("close {js}"), |e| e.close(js))
    }

    pub fn finish(&mut self, result: ExecutionResult) -> R<ExecutionResult> {
        self.blocking(format!("finish {result}"), |e| e.finish(result.clone()))
    }

    pub fn finish_ok(&mut self) -> R<ExecutionResult> {
        self.finish(ExecutionResult::Ok(json!("done")))
    }
}

/// The observable result of running a program to its end.
#[derive(Debug)]
pub(crate) struct Outcome<T> {
    pub value: T,
    pub history: Vec<HistoryEvent>,
    pub journal: Vec<Arrival>,
    pub trace: Vec<String>,
    pub outputs: Vec<Output>,
    pub restarts: usize,
}

/// Runs `program` starting from `history` (and the journal's responses) until it returns,
/// restarting it in cold mode. On an error, returns it with the run.
pub(crate) fn execute<T>(
    mode: Mode,
    history: Vec<HistoryEvent>,
    journal: Vec<Arrival>,
    program: &impl Fn(&mut Run) -> R<T>,
) -> Result<Outcome<T>, (Stop, Box<Run>)> {
    let mut run = Run::new(
        history,
        Shared {
            mode,
            journal,
            outputs: Vec::new(),
            restarts: 0,
        },
    );
    loop {
        match program(&mut run) {
            Ok(value) => {
                run.collect();
                return Ok(Outcome {
                    value,
                    history: run.engine.history().to_vec(),
                    journal: run.shared.journal,
                    trace: run.trace,
                    outputs: run.shared.outputs,
                    restarts: run.shared.restarts,
                });
            }
            Err(Stop::Restart) => {
                let history = run.engine.history().to_vec();
                let mut shared = run.shared;
                shared.restarts += 1;
                run = Run::new(history, shared);
            }
            Err(stop) => {
                run.collect();
                return Err((stop, Box::new(run)));
            }
        }
    }
}

/// Replays a recorded run with `program` (all of its responses known up front).
pub(crate) fn replay<T, U>(
    recorded: &Outcome<U>,
    program: &impl Fn(&mut Run) -> R<T>,
) -> Result<Outcome<T>, (Stop, Box<Run>)> {
    execute(
        Mode::Journal(VecDeque::new()),
        recorded.history.clone(),
        recorded.journal.clone(),
        program,
    )
}

/// Runs `program` hot with `world`, cold-at-every-block with an identical world, and replays
/// the hot history; asserts they agree. Returns the hot outcome.
pub(crate) fn scenario_with<T: PartialEq + Debug>(
    world: impl Fn() -> World,
    program: impl Fn(&mut Run) -> R<T>,
) -> Outcome<T> {
    let hot = execute(Mode::Hot(world()), Vec::new(), Vec::new(), &program)
        .unwrap_or_else(|(stop, run)| panic!("hot run stopped: {stop:?}\ntrace: {:#?}", run.trace));
    let cold = execute(
        Mode::ColdRestarts(world()),
        Vec::new(),
        Vec::new(),
        &program,
    )
    .unwrap_or_else(|(stop, run)| panic!("cold run stopped: {stop:?}\ntrace: {:#?}", run.trace));
    assert_eq!(cold.history, hot.history, "hot and cold histories differ");
    assert_eq!(cold.trace, hot.trace, "hot and cold outcomes differ");
    assert_eq!(cold.outputs, hot.outputs, "hot and cold outputs differ");
    assert_eq!(cold.value, hot.value);
    assert_eq!(
        cold.journal.iter().map(|a| &a.response).collect::<Vec<_>>(),
        hot.journal.iter().map(|a| &a.response).collect::<Vec<_>>()
    );

    let replayed = replay(&hot, &program)
        .unwrap_or_else(|(stop, run)| panic!("replay stopped: {stop:?}\ntrace: {:#?}", run.trace));
    assert_eq!(replayed.history, hot.history, "replay added events");
    assert_eq!(replayed.trace, hot.trace, "replay outcomes differ");
    assert_eq!(replayed.value, hot.value);
    assert_replay_outputs(&hot.outputs, &replayed.outputs);
    hot
}

/// A replay of a finished run emits only what the run emitted after its last recorded event
/// (cancellations by closing and the finish, which have no event of their own): a suffix of
/// the original outputs.
pub(crate) fn assert_replay_outputs(original: &[Output], replayed: &[Output]) {
    assert!(
        original.ends_with(replayed),
        "replay outputs are not the tail of the original ones:\n{replayed:#?}\nvs\n{original:#?}"
    );
    assert!(
        replayed.iter().all(|o| matches!(
            o,
            Output::Finished { .. } | Output::CancelChild { .. } | Output::CancelDelay { .. }
        )),
        "{replayed:#?}"
    );
    assert_eq!(
        replayed
            .iter()
            .filter(|o| matches!(o, Output::Finished { .. }))
            .count(),
        original
            .iter()
            .filter(|o| matches!(o, Output::Finished { .. }))
            .count()
    );
}

/// [`scenario_with`] with a world that answers the oldest request first.
pub(crate) fn scenario<T: PartialEq + Debug>(program: impl Fn(&mut Run) -> R<T>) -> Outcome<T> {
    scenario_with(World::fifo, program)
}

/// The events of a history, as `kind_name`s, for compact assertions.
pub(crate) fn kinds(history: &[HistoryEvent]) -> Vec<&'static str> {
    history.iter().map(HistoryEvent::kind_name).collect()
}
