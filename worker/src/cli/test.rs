//! `weir test`: an author's tests of their workflows, without Kafka or a store.
//!
//! Each `[[test]]` of a tests file (`tests.toml` beside `components.toml` by default) runs one
//! execution on the in-memory bus ([`crate::wasm::memory`]: the partition processor and the
//! WASM host of a worker, activities run for real, timers fired at once) three ways, which
//! must agree, and then checks what it expects:
//!
//! 1. **hot**: the instance stays in memory while it waits, as on a worker;
//! 2. **cold**: rebuilt from its recorded history at every step, as after a rebalance;
//! 3. **replayed**: its recorded history and journal replayed on the build, which must give
//!    the same result and record nothing new.
//!
//! A difference between them is a nondeterministic workflow, reported as such. Every test
//! starts at [`TEST_START`], so that its execution ids and clock (and so its result) are the
//! same at every run. The workflows' logs are shown with `WEIR_LOG=info`. The file:
//!
//! ```toml
//! [[test]]
//! name = "a greeting"
//! function = "acme:greeter/workflows.greet"   # the FFQN of a workflow
//! params = ["world"]                           # its parameters, as JSON (default [])
//! expect = { ok = "hello, world" }             # or { err = … }, or { error = "trap" }
//!
//! [[test.events]]                              # sent once the execution waits (optional)
//! name = "approved"
//! payload = "ann"
//! # key = "payment:o1"                         # to a correlation key instead of the execution
//! ```
//!
//! Exit code 0 when every test passes, 1 when one fails, 2 when the files cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use clap::Args;
use serde::Deserialize;
use serde_json::Value;

use crate::model::{ExecutionId, ExecutionResult, Ffqn, HistoryEvent, Response};
use crate::replay::Execution;
use crate::wasm::memory::{InMemoryBus, Record};
use crate::wasm::{RunStep, WasmHost};

#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// The component registry (a `weir new` project's, by default).
    #[arg(long, env = "WEIR_COMPONENTS", default_value = crate::options::DEFAULT_PROJECT_COMPONENTS)]
    pub components: PathBuf,
    /// Where the registry's relative component paths are resolved (where a `weir new`
    /// project's build.sh puts them, by default).
    #[arg(
        long,
        env = "WEIR_COMPONENTS_DIR",
        default_value = crate::options::DEFAULT_PROJECT_COMPONENTS_DIR
    )]
    pub components_dir: PathBuf,
    /// The tests file (default: `tests.toml` beside the components file).
    #[arg(long)]
    pub tests: Option<PathBuf>,
    /// Run only the tests whose name contains this.
    pub filter: Option<String>,
}

/// When every test's execution is created: a fixed instant, so that ids and the recorded
/// clock a workflow reads are the same at every run (2026-01-01T00:00:00Z).
pub const TEST_START: DateTime<Utc> = DateTime::from_timestamp(1_767_225_600, 0).unwrap();

/// Why the tests file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TestFileError {
    #[error("cannot read the tests file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the tests file {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("the tests file {path} holds no [[test]]")]
    Empty { path: PathBuf },
    #[error("{path}: test `{test}`: `{function}` is not a function name: {reason}")]
    Function {
        path: PathBuf,
        test: String,
        function: String,
        reason: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestsFile {
    #[serde(default)]
    test: Vec<TestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    function: String,
    #[serde(default = "no_params")]
    params: Value,
    expect: Expect,
    #[serde(default)]
    events: Vec<TestEvent>,
}

fn no_params() -> Value {
    Value::Array(Vec::new())
}

/// What a test expects of its execution's result.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum Expect {
    /// `ok(value)`.
    Ok(Value),
    /// `err(value)`.
    Err(Value),
    /// An execution error of this kind (`trap`, `nondeterminism-detected`, …).
    Error(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestEvent {
    name: String,
    #[serde(default)]
    payload: Value,
    /// A correlation key to send it to, instead of the execution.
    key: Option<String>,
}

impl TestsFile {
    fn read(path: &Path) -> Result<Vec<(TestCase, Ffqn)>, TestFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TestFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file: TestsFile = toml::from_str(&text).map_err(|source| TestFileError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        if file.test.is_empty() {
            return Err(TestFileError::Empty {
                path: path.to_owned(),
            });
        }
        file.test
            .into_iter()
            .map(|case| {
                let ffqn = case
                    .function
                    .parse()
                    .map_err(|e: crate::model::FfqnError| TestFileError::Function {
                        path: path.to_owned(),
                        test: case.name.clone(),
                        function: case.function.clone(),
                        reason: e.to_string(),
                    })?;
                Ok((case, ffqn))
            })
            .collect()
    }
}

/// What an execution left on the bus.
#[derive(Debug, PartialEq)]
struct Outcome {
    result: Option<ExecutionResult>,
    history: Vec<HistoryEvent>,
    responses: Vec<Response>,
}

pub async fn run(args: TestArgs) -> ExitCode {
    let registry = super::RegistryArgs {
        components: args.components.clone(),
        components_dir: args.components_dir.clone(),
    };
    let tests_path = args.tests.clone().unwrap_or_else(|| {
        args.components
            .parent()
            .unwrap_or(Path::new("."))
            .join("tests.toml")
    });
    let cases = match TestsFile::read(&tests_path) {
        Ok(cases) => cases,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let host = match registry
        .specs()
        .map_err(|e| e.to_string())
        .and_then(|specs| {
            super::offline_host(specs)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let selected: Vec<_> = cases
        .iter()
        .filter(|(case, _)| args.filter.as_deref().is_none_or(|f| case.name.contains(f)))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (case, ffqn) in &selected {
        let started = Instant::now();
        match run_case(&host, case, ffqn).await {
            Ok(summary) => {
                passed += 1;
                println!(
                    "PASS {} ({summary}, {} ms)",
                    case.name,
                    started.elapsed().as_millis()
                );
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {}: {why}", case.name);
            }
        }
    }
    println!(
        "{passed} passed, {failed} failed{}",
        match selected.len() < cases.len() {
            true => format!(", {} filtered out", cases.len() - selected.len()),
            false => String::new(),
        }
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs one test hot, cold and replayed; `Ok` with a summary, or why it failed.
async fn run_case(host: &Arc<WasmHost>, case: &TestCase, ffqn: &Ffqn) -> Result<String, String> {
    let start = TEST_START;
    let (id, hot) = run_on_bus(host, case, ffqn, start, true).await?;
    let (_, cold) = run_on_bus(host, case, ffqn, start, false).await?;
    if hot != cold {
        return Err(nondeterministic(
            "run in memory and rebuilt at every step",
            &hot,
            &cold,
        ));
    }
    let result = hot
        .result
        .clone()
        .ok_or("the execution did not finish: it waits for something the test does not send")?;
    let execution = Execution {
        id,
        ffqn: ffqn.clone(),
        params: case.params.clone(),
        created_at: start,
        component: None,
        trace: None,
    };
    let (_run, step) = host
        .start_workflow(execution, hot.history.clone(), hot.responses.clone(), start)
        .await
        .map_err(|e| format!("the replay of its history failed: {e}"))?;
    match step {
        RunStep::Finished {
            result: replayed,
            effects,
        } if replayed == result && effects.events.is_empty() => {}
        other => {
            return Err(format!(
                "nondeterministic: its recorded history replays differently: {other:?}"
            ));
        }
    }
    check(&case.expect, &result)?;
    Ok(format!(
        "{} history events, {} responses, hot = cold = replayed",
        hot.history.len(),
        hot.responses.len()
    ))
}

fn nondeterministic(how: &str, hot: &Outcome, cold: &Outcome) -> String {
    let first = hot
        .history
        .iter()
        .zip(&cold.history)
        .position(|(a, b)| a != b)
        .unwrap_or(hot.history.len().min(cold.history.len()));
    format!(
        "nondeterministic: {how} differ at history version {first}: {} / {} (results {} / {})",
        hot.history
            .get(first)
            .map_or("(end)".into(), ToString::to_string),
        cold.history
            .get(first)
            .map_or("(end)".into(), ToString::to_string),
        show(&hot.result),
        show(&cold.result),
    )
}

fn show(result: &Option<ExecutionResult>) -> String {
    result
        .as_ref()
        .map_or("not finished".into(), ToString::to_string)
}

/// Submits the test's execution, sends its events once it waits, fires every timer.
async fn run_on_bus(
    host: &Arc<WasmHost>,
    case: &TestCase,
    ffqn: &Ffqn,
    start: DateTime<Utc>,
    hot: bool,
) -> Result<(ExecutionId, Outcome), String> {
    let mut bus = InMemoryBus::new(host.clone(), start);
    bus.set_hot(hot);
    let id = bus
        .submit(ffqn, case.params.clone())
        .map_err(|e| format!("refused: {e}"))?;
    let fail = |e: crate::wasm::memory::BusError| format!("the bus failed: {e}");
    bus.run_until_idle().await.map_err(fail)?;
    for (n, event) in case.events.iter().enumerate() {
        let received = weir_core::records::ReceivedEvent {
            event_id: format!("{}-{n}", case.name),
            name: event.name.clone(),
            payload: event.payload.clone(),
        };
        bus.send(match &event.key {
            Some(key) => Record::KeyedEvent(weir_core::correlation::KeyedEvent {
                event: received,
                key: key.clone(),
                sent_at: bus.now(),
                returned_by: None,
            }),
            None => Record::Event(weir_core::records::InboundEvent {
                event: received,
                target: id.clone(),
                sent_at: bus.now(),
                correlation_key: None,
                waited_until: None,
            }),
        });
        bus.run_until_idle().await.map_err(fail)?;
    }
    bus.fire_all_timers().await.map_err(fail)?;
    let stored = bus
        .execution(&id)
        .ok_or_else(|| format!("{id} was never created"))?;
    Ok((
        id,
        Outcome {
            result: stored.result.clone(),
            history: stored.history.clone(),
            responses: stored.responses.clone(),
        },
    ))
}

fn check(expect: &Expect, result: &ExecutionResult) -> Result<(), String> {
    let matches = match (expect, result) {
        (Expect::Ok(want), ExecutionResult::Ok(got)) => want == got,
        (Expect::Err(want), ExecutionResult::Err(got)) => want == got,
        (Expect::Error(kind), ExecutionResult::ExecutionError(e)) => e.kind.to_string() == *kind,
        _ => false,
    };
    if matches {
        Ok(())
    } else {
        Err(format!("expected {}, got {result}", describe(expect)))
    }
}

fn describe(expect: &Expect) -> String {
    match expect {
        Expect::Ok(v) => format!("ok({v})"),
        Expect::Err(v) => format!("err({v})"),
        Expect::Error(kind) => format!("an execution error of kind {kind}"),
    }
}
