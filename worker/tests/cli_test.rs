//! `weir test` (issue 34): an author's tests run on the in-memory bus, hot, cold and
//! replayed; a wrong expectation, an execution that never finishes and a bad file are
//! reported as such, with the exit codes of docs/cli.md.

mod wasm_common;

use std::path::Path;
use std::process::Command;

use wasm_common::{components_toml, examples_dir};

/// Runs `weir test` over the repository's components with `tests` (a path) and `args`.
fn weir_test(tests: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("test")
        .arg("--components")
        .arg(components_toml())
        .arg("--components-dir")
        .arg(examples_dir())
        .arg("--tests")
        .arg(tests)
        .args(args)
        .env_remove("WEIR_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run weir test");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn tests_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_examples_tests_pass_hot_cold_and_replayed() {
    let tests = components_toml().with_file_name("tests.toml");
    let (code, stdout, stderr) = weir_test(&tests, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let count = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(count >= 7, "{stdout}");
    assert!(
        stdout.contains("hot = cold = replayed")
            && stdout.contains(&format!("{count} passed, 0 failed")),
        "{stdout}"
    );
    // A filter runs only the matching tests.
    let (code, stdout, _) = weir_test(&tests, &["order:"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("2 passed, 0 failed, {} filtered out", count - 2)),
        "{stdout}"
    );
}

#[test]
fn a_wrong_result_and_an_execution_that_never_finishes_fail_with_why() {
    let tests = tests_file(
        "failing.toml",
        r#"
[[test]]
name = "wrong"
function = "weir-examples:workflows/hello.greet"
params = ["ann"]
expect = { ok = "hi, ann" }

[[test]]
name = "never"
function = "weir-examples:workflows/approval-event.collect"
params = [1, 0]
expect = { ok = [] }

[[test]]
name = "right"
function = "weir-examples:workflows/hello.greet"
params = ["ann"]
expect = { ok = "hello, ann" }
"#,
    );
    let (code, stdout, stderr) = weir_test(&tests, &[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(r#"FAIL wrong: expected ok("hi, ann"), got ok("hello, ann")"#),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAIL never: the execution did not finish"),
        "{stdout}"
    );
    assert!(stdout.contains("PASS right"), "{stdout}");
    assert!(stdout.contains("1 passed, 2 failed"), "{stdout}");
}

#[test]
fn a_bad_tests_file_is_refused_naming_it() {
    for (name, text, says) in [
        ("empty.toml", "", "holds no [[test]]"),
        (
            "unknown.toml",
            "[[test]]\nname = \"x\"\nfunction = \"a:b/c.d\"\nexpect = { ok = 1 }\nwhen = 3\n",
            "unknown field `when`",
        ),
        (
            "function.toml",
            "[[test]]\nname = \"x\"\nfunction = \"greet\"\nexpect = { ok = 1 }\n",
            "test `x`: `greet` is not a function name",
        ),
    ] {
        let tests = tests_file(name, text);
        let (code, stdout, stderr) = weir_test(&tests, &[]);
        assert_eq!(code, Some(2), "{name}: {stdout}{stderr}");
        assert!(
            stderr.contains(says) && stderr.contains(name),
            "{name}: {stderr}"
        );
    }
}
