//! Issue 15 item 6: `weir digest` prints every component's content digest beside the recorded
//! one (exit 1 on a mismatch), and `weir worker --require-digests` refuses a registry in which
//! a component records none, before it connects to anything.

use std::process::Command;

use weir_e2e::deployment::components_dir;
use weir_e2e::{repo_root, weir_binary};

fn digest(components: &std::path::Path) -> std::process::Output {
    Command::new(weir_binary())
        .args(["digest", "--components"])
        .arg(components)
        .arg("--components-dir")
        .arg(components_dir())
        .output()
        .expect("run weir digest")
}

#[test]
fn digests_are_printed_checked_and_required() {
    let repo_components = repo_root().join("topology/components.toml");
    let listed = digest(&repo_components);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let hello = stdout
        .lines()
        .find(|l| l.starts_with("hello "))
        .unwrap_or_else(|| panic!("hello is listed: {stdout}"));
    let recorded = hello.split('"').nth(1).expect("a quoted digest").to_owned();
    assert!(
        recorded.starts_with("sha256:") && recorded.len() == 7 + 64,
        "{hello}"
    );

    let dir = std::env::temp_dir().join(format!("weir-digest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = std::fs::read_to_string(&repo_components).expect("components");
    let with_digest = |digest: &str| {
        text.replace(
            "path = \"hello.wasm\"\n",
            &format!("path = \"hello.wasm\"\ndigest = \"{digest}\"\n"),
        )
    };
    // The printed digest, recorded: it matches.
    let good = dir.join("good.toml");
    std::fs::write(&good, with_digest(&recorded)).expect("write");
    let checked = digest(&good);
    assert!(checked.status.success());
    assert!(
        String::from_utf8_lossy(&checked.stdout)
            .lines()
            .any(|l| l.starts_with("hello ") && l.contains("recorded, matches")),
        "{}",
        String::from_utf8_lossy(&checked.stdout)
    );
    // Another digest recorded: exit 1, and the line says so.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, with_digest(&format!("sha256:{}", "0".repeat(64)))).expect("write");
    let mismatch = digest(&bad);
    assert_eq!(mismatch.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&mismatch.stdout).contains("RECORDED DIGEST DIFFERS"));

    // A worker that requires digests refuses a registry where some are missing, naming them.
    let refused = Command::new(weir_binary())
        .args([
            "worker",
            "--require-digests",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--components")
        .arg(&good)
        .arg("--components-dir")
        .arg(components_dir())
        .arg("--topology")
        .arg(repo_root().join("topology"))
        .output()
        .expect("run weir worker");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--require-digests")
            && stderr.contains("\"order\"")
            && !stderr.contains("\"hello\""),
        "{stderr}"
    );
}
