//! `weir new` (issue 34 item 4): a project generated in each language builds with its own
//! `build.sh` (the pinned toolchain of Weir's examples in that language, installed if
//! missing) and its `weir test` is green in its directory, with the defaults it relies on.
//!
//! The components a project's build made are kept in `$WEIR_CACHE/weir-new-builds/<lang>`
//! and put back into the next fresh project's `build/`: its build script then rebuilds only
//! what changed (its stamps are of the sources' contents), as it does for an author. A change
//! to a template, the WIT or a toolchain builds for real.

use std::path::Path;
use std::process::{Command, Output};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn run(what: &str, command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Generates, builds and tests a project in `lang` under a fresh directory.
fn generate_build_and_test(lang: &str) {
    let root = std::env::temp_dir().join(format!("weir-new-{lang}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let name = format!("hello-{lang}");
    run(
        &format!("weir new {name} --lang {lang}"),
        Command::new(WEIR)
            .args(["new", &name, "--lang", lang, "--dir"])
            .arg(&root),
    );
    let project = root.join(&name);
    // A second project of the same name is refused, the first left as it is.
    let again = Command::new(WEIR)
        .args(["new", &name, "--lang", lang, "--dir"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists"),
        "{again:?}"
    );
    let kept = Path::new(&std::env::var("WEIR_CACHE").unwrap_or_else(|_| "/var/cache/weir".into()))
        .join("weir-new-builds")
        .join(lang);
    copy_files(&kept, &project.join("build"));
    run(
        &format!("{name}: bash build.sh"),
        Command::new("bash").arg("build.sh").current_dir(&project),
    );
    copy_files(&project.join("build"), &kept);
    let tested = run(
        &format!("{name}: weir test"),
        Command::new(WEIR)
            .arg("test")
            .current_dir(&project)
            .env_remove("WEIR_COMPONENTS")
            .env_remove("WEIR_COMPONENTS_DIR"),
    );
    let stdout = String::from_utf8_lossy(&tested.stdout);
    assert!(stdout.contains("2 passed, 0 failed"), "{name}: {stdout}");
    assert!(
        Path::new(&project).join("README.md").is_file(),
        "{name} has its README"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Copies the files of `from` (if it exists) into `to`.
fn copy_files(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    std::fs::create_dir_all(to).unwrap();
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn a_rust_project_builds_and_its_tests_pass() {
    generate_build_and_test("rust");
}

#[test]
fn a_typescript_project_builds_and_its_tests_pass() {
    generate_build_and_test("ts");
}

#[test]
fn a_python_project_builds_and_its_tests_pass() {
    generate_build_and_test("python");
}
