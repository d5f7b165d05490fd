//! The short version of the fault run (issue 11's acceptance; the full one is
//! `bash tests/faults/run.sh`, figures in `docs/faults.md`): two real workers, a few hundred
//! multi-step executions, repeated `kill -9` of a worker restarted with its instance id, then a
//! workflow worker frozen at its commit (records produced, offsets sent) past its session and
//! resumed inside the window (after the other was given its partitions, before its
//! transaction times out).
//! Every execution must finish exactly once with its expected result, no output may be
//! visible twice, the log and the store must agree, and the stall after a kill must stay
//! within the session timeout plus a margin. Only the workers are faulted: the stack is shared
//! with the rest of the suite.

use std::time::Duration;

use weir_e2e::faults::{Options, Report, Scenario, run};

fn short(executions: usize, faults: usize) -> Options {
    Options {
        executions,
        in_flight: 100,
        faults: Some(faults),
        seed: 11,
        long_sleeps: 0,
        // The broker's floor is 6 s; short so that the freeze's window comes quickly.
        session_timeout: Duration::from_secs(6),
        // Generous: CI machines are slow and shared.
        stall_margin: Duration::from_secs(14),
        patience: Duration::from_secs(120),
        ..Options::default()
    }
}

fn assert_passed(report: &Report) {
    println!("{}\n{}\n{}", report.text(), Report::HEADER, report.row());
    assert!(report.passed(), "{}", report.text());
    assert_eq!(report.finished(), report.executions);
    assert_eq!(
        report.faults.len(),
        report.options.faults.unwrap_or_default(),
        "every fault was injected"
    );
}

#[test]
fn kill9_and_freeze_keep_every_promise() {
    let kills = run(Scenario::Kill9, &short(300, 3));
    assert_passed(&kills);
    let freeze = run(Scenario::FreezeWorkflow, &short(200, 1));
    assert_passed(&freeze);
    // The zombie was frozen with its workflow transaction open and resumed inside the window
    // (the run counts resuming outside it as a violation, checked above).
    let detail = &freeze.faults[0].detail;
    assert!(
        detail.contains("the workflow worker's transaction open"),
        "{detail}"
    );
}
