//! The fault run of issue 11 on the real stack (see `weir_e2e::faults`). Run it through
//! `bash tests/faults/run.sh [scenario…] [options]`, which starts a private stack (the broker
//! and Cassandra scenarios kill it), builds what it needs and stops the stack at the end.
//!
//! Prints each scenario's account as it ends and a summary table at the end; exits 1 when an
//! invariant was broken (the account says which, with examples and the logs' folder).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use weir_e2e::faults::{Options, Report, Scenario, run};

/// Faults under load on the real stack: every execution must finish exactly once with the
/// right result, no output twice, the log and the store agree; stalls measured.
#[derive(Parser, Debug)]
#[command(name = "fault_run")]
struct Args {
    /// Scenarios, in order: kill9, kill9-dynamic, freeze, broker-kill, cassandra-kill,
    /// cassandra-stop, or `all` (the default).
    scenarios: Vec<String>,
    /// Executions per scenario.
    #[arg(long, default_value_t = 2_000)]
    executions: usize,
    /// Unfinished executions at most at a time.
    #[arg(long, default_value_t = 200)]
    in_flight: usize,
    /// Submissions per second at most.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Faults per scenario (default: 6 kills, 3 of the others).
    #[arg(long)]
    faults: Option<usize>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Executions sleeping 65–80 s, past the timer horizon (the first ones submitted).
    #[arg(long, default_value_t = 20)]
    long_sleeps: usize,
    /// The workers' --session-timeout-ms.
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// The workers' --transaction-timeout-ms (default: the session timeout; three times it
    /// for `freeze`).
    #[arg(long)]
    transaction_timeout_ms: Option<u64>,
    /// The stall after a worker kill (kill9) must be at most the session timeout plus this.
    #[arg(long, default_value_t = 10)]
    stall_margin_secs: u64,
    /// How long Cassandra stays frozen in cassandra-stop.
    #[arg(long, default_value_t = 10)]
    cassandra_stop_secs: u64,
    /// How long to wait for progress before giving up.
    #[arg(long, default_value_t = 300)]
    patience_secs: u64,
    /// More `weir worker` arguments (repeatable; e.g. `--worker-arg=--max-batch=100`).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
}

/// On SIGINT or SIGTERM, the workers the run started are killed before the process exits
/// (they would outlive it otherwise).
fn clean_up_on_signals() {
    std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("[fault run] interrupted: killing the workers it started");
            weir_e2e::faults::cluster::kill_started_workers();
            std::process::exit(130);
        });
    });
}

fn main() -> ExitCode {
    let args = Args::parse();
    clean_up_on_signals();
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() || args.scenarios == ["all"] {
        Scenario::ALL.to_vec()
    } else {
        let mut scenarios = Vec::new();
        for name in &args.scenarios {
            match Scenario::parse(name) {
                Some(s) => scenarios.push(s),
                None => {
                    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                    eprintln!("unknown scenario {name:?}; one of {}", names.join(", "));
                    return ExitCode::from(2);
                }
            }
        }
        scenarios
    };
    let options = Options {
        executions: args.executions,
        in_flight: args.in_flight,
        rate: args.rate,
        faults: args.faults,
        seed: args.seed,
        long_sleeps: args.long_sleeps,
        session_timeout: Duration::from_millis(args.session_timeout_ms),
        transaction_timeout: args.transaction_timeout_ms.map(Duration::from_millis),
        stall_margin: Duration::from_secs(args.stall_margin_secs),
        cassandra_stop: Duration::from_secs(args.cassandra_stop_secs),
        patience: Duration::from_secs(args.patience_secs),
        worker_args: args.worker_args,
        ..Options::default()
    };
    let mut reports: Vec<Report> = Vec::new();
    for scenario in scenarios {
        let report = run(scenario, &options);
        println!("{}", report.text());
        reports.push(report);
    }
    println!("{}", Report::HEADER);
    for report in &reports {
        println!("{}", report.row());
    }
    if reports.iter().all(Report::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
