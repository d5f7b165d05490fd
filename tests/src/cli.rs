//! Running `weir` against a deployment and reading what it said, for the e2e tests of the
//! CLI's commands.

use std::process::Output;

use crate::deployment::Deployment;

/// `weir ARGS…` against `deployment`, to its end.
pub fn weir(deployment: &Deployment, args: &[&str]) -> Output {
    deployment.command().args(args).output().expect("run weir")
}

/// What a run that must have succeeded printed on stdout.
pub fn succeeded(output: &Output) -> String {
    assert_succeeded(output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What a run that must have succeeded printed, stdout then stderr (where progress goes).
pub fn succeeded_with_stderr(output: &Output) -> String {
    assert_succeeded(output);
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn assert_succeeded(output: &Output) {
    assert!(
        output.status.success(),
        "weir failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What a run that must have failed printed on stderr (why).
pub fn failed(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "weir succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}
