//! `docs/cli.md`'s configuration tables (`| flag | variable | default | meaning |`) against the
//! command line clap really builds, and the library's defaults against clap's. Every default is
//! defined once, in `weir::options`; a default changed in one place only (`docs/cli.md`, a clap
//! attribute, `WorkerConfig::new`, `EngineConfig::default`) fails here.
//!
//! How `docs/cli.md` is read: in its `## Configuration` section, a table under the section heading
//! holds the settings every subcommand that talks to the cluster (has `--brokers`) shares, a table under ``### `weir <command>` `` those of
//! that command. A flag cell is `` `--name` `` (anything after the name, like `k=v`, is
//! ignored), a variable cell `` `WEIR_…` `` or empty; a default cell is `` `value` `` (clap's
//! default, exactly), `empty` (the empty string) or anything else (`none`, prose): no default.
//! A row without a flag is a variable the command line reads outside clap (`WEIR_LOG`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::CommandFactory;
use weir::cli::Cli;
use weir::kafka::KafkaConfig;
use weir::kafka::member::WorkerConfig;
use weir::options;
use weir::wasm::EngineConfig;

/// Variables the command line reads itself (not through clap), with their defaults.
const OUTSIDE_CLAP: [(&str, &str); 1] = [("WEIR_LOG", options::DEFAULT_LOG_FILTER)];

/// One row of a configuration table.
#[derive(Debug)]
struct Row {
    /// 1-based line in `docs/cli.md`, for messages.
    line: usize,
    /// The command the table is about (`["worker"]`); empty: every subcommand.
    command: Vec<String>,
    /// The long flag without `--`.
    flag: Option<String>,
    variable: Option<String>,
    /// `None`: `docs/cli.md` says there is no default value.
    default: Option<String>,
}

fn cli_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of a table line, trimmed; `None` if the line is not a table line.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// The text of a cell that is one code span, `` `text` ``.
fn code(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?
        .strip_suffix('`')
        .filter(|inner| !inner.contains('`'))
}

/// ``### `weir worker` `` → `["worker"]`; `None` if the heading names no command.
fn heading_command(heading: &str) -> Option<Vec<String>> {
    let text = heading.trim_start_matches('#').trim();
    let mut words = code(text)?.split_whitespace();
    (words.next() == Some("weir")).then(|| words.map(str::to_owned).collect())
}

/// The rows of the configuration tables of `text` (`docs/cli.md`).
fn parse_rows(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_configuration = false;
    // The command of the current heading; `None` under a heading that names none.
    let mut command: Option<Vec<String>> = None;
    let mut in_table = false;
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        if let Some(heading) = line.strip_prefix("## ") {
            in_configuration = heading.trim() == "Configuration";
            command = Some(Vec::new());
            in_table = false;
            continue;
        }
        if line.starts_with("###") {
            command = heading_command(line);
            in_table = false;
            continue;
        }
        if !in_configuration {
            continue;
        }
        let Some(cells) = cells(line) else {
            in_table = false;
            continue;
        };
        if cells == ["flag", "variable", "default", "meaning"] {
            in_table = true;
            continue;
        }
        if !in_table
            || cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        assert_eq!(
            cells.len(),
            4,
            "docs/cli.md:{line_no}: a configuration row has four cells: {line}"
        );
        let command = command.clone().unwrap_or_else(|| {
            panic!("docs/cli.md:{line_no}: a configuration table under a heading that names no `weir` command")
        });
        let flag = (!cells[0].is_empty()).then(|| {
            let flag = code(cells[0])
                .and_then(|c| c.split_whitespace().next())
                .and_then(|c| c.strip_prefix("--"))
                .unwrap_or_else(|| panic!("docs/cli.md:{line_no}: flag cell `{}`", cells[0]));
            flag.to_owned()
        });
        let variable = (!cells[1].is_empty()).then(|| {
            code(cells[1])
                .unwrap_or_else(|| panic!("docs/cli.md:{line_no}: variable cell `{}`", cells[1]))
                .to_owned()
        });
        let default = match cells[2] {
            "empty" => Some(String::new()),
            cell => code(cell).map(str::to_owned),
        };
        rows.push(Row {
            line: line_no,
            command,
            flag,
            variable,
            default,
        });
    }
    rows
}

/// Every subcommand that takes arguments (no subcommands of its own), by path.
fn leaf_commands() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(
        path: Vec<String>,
        command: &clap::Command,
        out: &mut Vec<(Vec<String>, clap::Command)>,
    ) {
        let mut subcommands = command.get_subcommands().peekable();
        if subcommands.peek().is_none() {
            out.push((path, command.clone()));
            return;
        }
        for sub in subcommands {
            let mut path = path.clone();
            path.push(sub.get_name().to_owned());
            walk(path, sub, out);
        }
    }
    let mut out = Vec::new();
    walk(Vec::new(), &Cli::command(), &mut out);
    out
}

fn env_of(arg: &clap::Arg) -> Option<String> {
    arg.get_env().map(|e| e.to_string_lossy().into_owned())
}

fn default_of(arg: &clap::Arg) -> Option<String> {
    let values = arg.get_default_values();
    (!values.is_empty()).then(|| {
        values
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// Everything on which `docs/cli.md` and clap disagree, one message each.
fn disagreements(rows: &[Row]) -> Vec<String> {
    let leaves = leaf_commands();
    let mut errors = Vec::new();
    let talks_to_the_cluster: BTreeSet<Vec<String>> = leaves
        .iter()
        .filter(|(_, command)| {
            command
                .get_arguments()
                .any(|a| a.get_long() == Some("brokers"))
        })
        .map(|(path, _)| path.clone())
        .collect();
    let covers = |row: &Row, path: &[String]| {
        if row.command.is_empty() {
            talks_to_the_cluster.contains(path)
        } else {
            path.starts_with(&row.command)
        }
    };
    let mut seen = BTreeSet::new();
    for row in rows {
        let at = format!("docs/cli.md:{}", row.line);
        let Some(flag) = &row.flag else {
            // A variable the command line reads itself.
            let variable = row.variable.as_deref().unwrap_or("");
            match OUTSIDE_CLAP.iter().find(|(name, _)| *name == variable) {
                None => errors.push(format!(
                    "{at}: `{variable}` has no flag and is not one the command line reads \
                     outside clap ({OUTSIDE_CLAP:?})"
                )),
                Some((_, default)) if row.default.as_deref() != Some(default) => {
                    errors.push(format!(
                        "{at}: `{variable}` defaults to `{default}`, docs/cli.md says {:?}",
                        row.default
                    ))
                }
                Some(_) => {}
            }
            continue;
        };
        if !seen.insert((row.command.clone(), flag.clone())) {
            errors.push(format!("{at}: `--{flag}` is documented twice"));
        }
        let covered: Vec<_> = leaves
            .iter()
            .filter(|(path, _)| covers(row, path))
            .collect();
        if covered.is_empty() {
            errors.push(format!("{at}: no `weir {}` command", row.command.join(" ")));
        }
        for (path, command) in covered {
            let name = format!("weir {}", path.join(" "));
            let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(flag)) else {
                errors.push(format!("{at}: `{name}` has no `--{flag}`"));
                continue;
            };
            if env_of(arg) != row.variable {
                errors.push(format!(
                    "{at}: `{name} --{flag}` reads {:?}, docs/cli.md says {:?}",
                    env_of(arg),
                    row.variable
                ));
            }
            if default_of(arg) != row.default {
                errors.push(format!(
                    "{at}: `{name} --{flag}` defaults to {:?}, docs/cli.md says {:?}",
                    default_of(arg),
                    row.default
                ));
            }
        }
    }
    // The other way round: every variable clap reads is documented for its command.
    for (path, command) in &leaves {
        for arg in command.get_arguments() {
            let Some(variable) = env_of(arg) else {
                continue;
            };
            let documented = rows
                .iter()
                .any(|row| covers(row, path) && row.flag.as_deref() == arg.get_long());
            if !documented {
                errors.push(format!(
                    "`weir {} --{}` ({variable}) is in no configuration table of docs/cli.md",
                    path.join(" "),
                    arg.get_long().unwrap_or(arg.get_id().as_str()),
                ));
            }
        }
        for (variable, _) in OUTSIDE_CLAP {
            if command
                .get_arguments()
                .any(|a| env_of(a).as_deref() == Some(variable))
            {
                errors.push(format!(
                    "`weir {}` declares {variable}, which the test takes as read outside clap",
                    path.join(" ")
                ));
            }
        }
    }
    errors
}

#[test]
fn the_cli_doc_tables_are_what_clap_declares() {
    let rows = parse_rows(&cli_doc());
    assert!(
        rows.iter().any(|r| r.command.is_empty()) && rows.iter().any(|r| r.command == ["worker"]),
        "the configuration tables of docs/cli.md were not found: {rows:#?}"
    );
    let errors = disagreements(&rows);
    assert!(
        errors.is_empty(),
        "the configuration tables of docs/cli.md and the command line disagree:\n{}",
        errors.join("\n")
    );
}

/// The check itself: a default changed in `docs/cli.md` only, or a flag left out, is caught.
#[test]
fn a_default_changed_in_one_place_is_caught() {
    let text = cli_doc();
    let row = "| `--cache-size` | `WEIR_CACHE_SIZE` | `100000` |";
    assert!(text.contains(row), "docs/cli.md has no row `{row}`");
    let changed = text.replace(row, "| `--cache-size` | `WEIR_CACHE_SIZE` | `10000` |");
    let errors = disagreements(&parse_rows(&changed));
    assert!(
        errors.len() == 1 && errors[0].contains("--cache-size"),
        "{errors:?}"
    );
    let dropped: String = text
        .lines()
        .filter(|line| !line.starts_with("| `--max-instances`"))
        .map(|line| format!("{line}\n"))
        .collect();
    let errors = disagreements(&parse_rows(&dropped));
    assert!(
        errors.len() == 1
            && errors[0].contains("--max-instances")
            && errors[0].contains("no configuration table"),
        "{errors:?}"
    );
}

/// The default of `weir worker --<flag>`, as clap has it.
fn worker_default(flag: &str) -> String {
    let command = Cli::command();
    let worker = command.find_subcommand("worker").expect("weir worker");
    let arg = worker
        .get_arguments()
        .find(|a| a.get_long() == Some(flag))
        .unwrap_or_else(|| panic!("weir worker has no --{flag}"));
    default_of(arg).unwrap_or_else(|| panic!("--{flag} has no default"))
}

fn number<T: std::str::FromStr>(flag: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    worker_default(flag).parse().expect("a number")
}

fn millis(flag: &str) -> Duration {
    Duration::from_millis(number(flag))
}

#[test]
fn library_defaults_are_the_command_lines() {
    let config = WorkerConfig::new(
        KafkaConfig::new(options::DEFAULT_BROKERS),
        "group",
        "instance",
    );
    assert_eq!(config.commit_interval, millis("commit-interval-ms"));
    assert_eq!(config.max_batch_records, number::<usize>("max-batch"));
    assert_eq!(config.cache_bytes, number::<u64>("cache-bytes"));
    assert_eq!(config.cache_size, number::<usize>("cache-size"));
    assert_eq!(config.max_record_bytes, number::<usize>("max-record-bytes"));
    assert_eq!(config.materialise_linger, millis("materialise-linger-ms"));
    assert_eq!(config.transaction_timeout, millis("transaction-timeout-ms"));
    assert_eq!(config.session_timeout, millis("session-timeout-ms"));
    assert_eq!(config.inline.budget, millis("inline-budget-ms"));
    assert_eq!(
        config.inline.enabled,
        worker_default("inline-activities") == "on"
    );
    assert_eq!(
        config.timer_horizon,
        Duration::from_secs(options::DEFAULT_TIMER_HORIZON_SECS)
    );

    let engine = EngineConfig::default();
    assert_eq!(engine.max_instances, number::<u32>("max-instances"));
    assert_eq!(
        engine.cache_dir,
        Some(PathBuf::from(worker_default("compiled-dir")))
    );
}

/// Issue 33 F14 at the edge: a grace past any sensible wait is refused when the worker starts,
/// with the flag and the bound named (the core's arithmetic is checked too, but nothing should
/// reach it).
#[test]
fn the_unknown_activity_grace_is_bounded() {
    use clap::Parser;
    let parse = |value: &str| {
        Cli::try_parse_from(["weir", "worker", "--unknown-activity-grace-secs", value])
    };
    let too_long = (options::MAX_UNKNOWN_ACTIVITY_GRACE_SECS + 1).to_string();
    let error = parse(&too_long).expect_err("a grace over the bound is refused");
    let text = error.to_string();
    assert!(text.contains("--unknown-activity-grace-secs"), "{text}");
    assert!(
        text.contains(&options::MAX_UNKNOWN_ACTIVITY_GRACE_SECS.to_string()),
        "{text}"
    );
    assert!(parse(&u64::MAX.to_string()).is_err());
    assert!(parse(&options::MAX_UNKNOWN_ACTIVITY_GRACE_SECS.to_string()).is_ok());
}
