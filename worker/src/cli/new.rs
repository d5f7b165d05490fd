//! `weir new NAME --lang rust|ts|python`: a runnable project of a workflow and an activity,
//! which `bash build.sh && weir test` turns green in a fresh directory.
//!
//! The project holds its WIT (with Weir's host package), one workflow and one activity in
//! the language, a `components.toml`, a `tests.toml` for `weir test`, a README and a build
//! script. The build script is a thin wrapper over the very script that builds Weir's own
//! examples in that language (`examples/build.sh`, `examples/ts/build.sh`,
//! `examples/python/build.sh`, with their pinned toolchains), copied into `toolchain/`: one
//! recipe per language, in one place. The templates are in `new/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Args)]
pub struct NewArgs {
    /// The project's name: its directory and its WIT package (`NAME:app`); lowercase
    /// letters, digits and dashes, starting with a letter.
    pub name: String,
    /// The language of its workflow and activity.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// Where to create the project's directory.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Ts,
    Python,
}

/// Why no project was made.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error(
        "`{0}` cannot name a project: use lowercase letters, digits and single dashes, starting \
         with a letter (it becomes the WIT package `{0}:app`)"
    )]
    Name(String),
    #[error("`{0}` is reserved (the WIT namespaces of Weir and WASI)")]
    Reserved(String),
    #[error("{0} exists already: choose another name or --dir")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A file of the project: its path in the project, its text, and whether it is executable.
struct File {
    path: String,
    text: String,
    executable: bool,
}

const WORLD: &str = include_str!("new/common/world.wit");
const COMPONENTS: &str = include_str!("new/common/components.toml");
const TESTS: &str = include_str!("new/common/tests.toml");
const README: &str = include_str!("new/common/README.md");
const GITIGNORE: &str = include_str!("new/common/gitignore");
const HOST_WIT: &str = include_str!("../../../schemas/wit/host.wit");
const TYPES_WIT: &str = include_str!("../../../schemas/wit/types.wit");

pub fn run(args: NewArgs) -> ExitCode {
    match create(&args) {
        Ok(dir) => {
            println!(
                "created {} ({:?}): cd {} && bash build.sh && weir test",
                dir.display(),
                args.lang,
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the project; its directory.
pub fn create(args: &NewArgs) -> Result<PathBuf, NewError> {
    check_name(&args.name)?;
    let dir = args.dir.join(&args.name);
    if dir.exists() {
        return Err(NewError::Exists(dir));
    }
    for file in files(&args.name, args.lang) {
        write(&dir.join(&file.path), &file.text, file.executable)?;
    }
    Ok(dir)
}

fn check_name(name: &str) -> Result<(), NewError> {
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        return Err(NewError::Name(name.to_owned()));
    }
    if ["weir", "wasi"].contains(&name) {
        return Err(NewError::Reserved(name.to_owned()));
    }
    Ok(())
}

/// Every file of a project `name` in `lang`.
fn files(name: &str, lang: Lang) -> Vec<File> {
    let (language, suffix, layout) = match lang {
        Lang::Rust => (
            "Rust",
            "",
            "`workflows/NAME-workflow/` and `activities/NAME-activity/`: the two crates \
             (`wit-bindgen`).",
        ),
        Lang::Ts => (
            "TypeScript",
            "-ts",
            "`workflows/NAME-workflow.ts` and `activities/NAME-activity.ts`, type-checked \
             against the WIT (`jco guest-types`) and built with `jco componentize`.",
        ),
        Lang::Python => (
            "Python",
            "-py",
            "`workflows/NAME-workflow/app.py` and `activities/NAME-activity/app.py`, built with \
             `componentize-py`.",
        ),
    };
    let fill = |template: &str| {
        template
            .replace("{{layout}}", layout)
            .replace("NAME", name)
            .replace("{{name}}", name)
            .replace("{{name_snake}}", &name.replace('-', "_"))
            .replace("{{suffix}}", suffix)
            .replace("{{language}}", language)
    };
    let file = |path: &str, template: &str| File {
        path: path.replace("NAME", name),
        text: fill(template),
        executable: false,
    };
    let script = |path: &str, template: &str| File {
        executable: true,
        ..file(path, template)
    };
    // Files of Weir's own, copied as they are.
    let copy = |path: &str, text: &str, executable: bool| File {
        path: path.to_owned(),
        text: text.to_owned(),
        executable,
    };
    let mut files = vec![
        file("wit/world.wit", WORLD),
        copy("wit/deps/weir-workflow/host.wit", HOST_WIT, false),
        copy("wit/deps/weir-workflow/types.wit", TYPES_WIT, false),
        file("components.toml", COMPONENTS),
        file("tests.toml", TESTS),
        file("README.md", README),
        file(".gitignore", GITIGNORE),
    ];
    match lang {
        Lang::Rust => {
            let crate_toml = |crate_name: &str| {
                include_str!("new/rust/crate.toml").replace("{{crate}}", crate_name)
            };
            files.extend([
                script("build.sh", include_str!("new/rust/build.sh")),
                copy(
                    "toolchain/build-rust.sh",
                    include_str!("../../../examples/build.sh"),
                    true,
                ),
                file("Cargo.toml", include_str!("new/rust/Cargo.toml")),
                file(
                    "workflows/NAME-workflow/Cargo.toml",
                    &crate_toml(&format!("{name}-workflow")),
                ),
                file(
                    "workflows/NAME-workflow/src/lib.rs",
                    include_str!("new/rust/workflow.rs"),
                ),
                file(
                    "activities/NAME-activity/Cargo.toml",
                    &crate_toml(&format!("{name}-activity")),
                ),
                file(
                    "activities/NAME-activity/src/lib.rs",
                    include_str!("new/rust/activity.rs"),
                ),
            ]);
        }
        Lang::Ts => files.extend([
            script("build.sh", include_str!("new/ts/build.sh")),
            copy(
                "toolchain/build-ts.sh",
                include_str!("../../../examples/ts/build.sh"),
                true,
            ),
            copy(
                "toolchain/package.json",
                include_str!("../../../examples/ts/toolchain/package.json"),
                false,
            ),
            copy(
                "toolchain/package-lock.json",
                include_str!("../../../examples/ts/toolchain/package-lock.json"),
                false,
            ),
            copy(
                "toolchain/preopen.mjs",
                include_str!("../../../examples/ts/toolchain/preopen.mjs"),
                false,
            ),
            copy(
                "tsconfig.json",
                include_str!("../../../examples/ts/tsconfig.json"),
                false,
            ),
            file(
                "workflows/NAME-workflow.ts",
                include_str!("new/ts/workflow.ts"),
            ),
            file(
                "activities/NAME-activity.ts",
                include_str!("new/ts/activity.ts"),
            ),
        ]),
        Lang::Python => files.extend([
            script("build.sh", include_str!("new/python/build.sh")),
            copy(
                "toolchain/build-python.sh",
                include_str!("../../../examples/python/build.sh"),
                true,
            ),
            copy(
                "requirements.txt",
                include_str!("../../../examples/python/requirements.txt"),
                false,
            ),
            file(
                "workflows/NAME-workflow/app.py",
                include_str!("new/python/workflow.py"),
            ),
            file(
                "activities/NAME-activity/app.py",
                include_str!("new/python/activity.py"),
            ),
        ]),
    }
    files
}

fn write(path: &Path, text: &str, executable: bool) -> Result<(), NewError> {
    let failed = |source| NewError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(path, text).map_err(failed)?;
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kebab_case_wit_identifiers() {
        for ok in ["greeter", "order-flow", "a1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Greeter", "1a", "a--b", "a-", "a_b", "a b"] {
            assert!(matches!(check_name(bad), Err(NewError::Name(_))), "{bad}");
        }
        assert!(matches!(check_name("wasi"), Err(NewError::Reserved(_))));
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::Ts, Lang::Python] {
            for file in files("order-flow", lang) {
                let unfilled = !file.path.starts_with("toolchain/") && file.text.contains("{{");
                assert!(
                    !unfilled && !file.path.contains("NAME"),
                    "{lang:?} {}: {}",
                    file.path,
                    file.text
                );
            }
        }
    }
}
