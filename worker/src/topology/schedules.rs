//! `topology/schedules.toml`: the recurring schedules a deployment declares. `weir topology
//! apply` sends a `create` for each (the same spec again changes nothing, so applying twice is
//! safe); the rules of a schedule are `weir_core::schedule`'s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use weir_core::schedule::{DEFAULT_CATCHUP_WINDOW, DEFAULT_TIMEZONE, Overlap, ScheduleSpec};

use crate::model::Ffqn;

/// Why `schedules.toml` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid schedules file: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{path}: schedule `{schedule}`: {reason}")]
    Invalid {
        path: PathBuf,
        schedule: String,
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulesFile {
    #[serde(rename = "schedule", default)]
    schedules: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    cron: String,
    #[serde(default)]
    timezone: Option<String>,
    function: String,
    /// A TOML array, one element per parameter (read as JSON).
    #[serde(default)]
    params: Vec<toml::Value>,
    #[serde(default)]
    overlap: Option<String>,
    /// A duration, e.g. `1m`, `30s`.
    #[serde(default)]
    catchup_window: Option<String>,
}

/// A declared schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub name: String,
    pub spec: ScheduleSpec,
}

/// Reads and checks `dir/schedules.toml`; none declared if the file does not exist.
pub fn load(dir: &Path) -> Result<Vec<Declared>, ScheduleFileError> {
    let path = dir.join("schedules.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(ScheduleFileError::Read { path, source }),
    }
}

/// Parses and checks a schedules file's text (`path` names it in errors).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Declared>, ScheduleFileError> {
    let file: SchedulesFile = toml::from_str(text).map_err(|source| ScheduleFileError::Parse {
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    let mut names = BTreeSet::new();
    file.schedules
        .into_iter()
        .map(|entry| {
            let invalid = |reason: String| ScheduleFileError::Invalid {
                path: path.to_owned(),
                schedule: entry.name.clone(),
                reason,
            };
            if !names.insert(entry.name.clone()) {
                return Err(invalid("a second schedule of this name".to_owned()));
            }
            let spec = spec(
                &entry.name,
                &entry.cron,
                entry.timezone.as_deref(),
                &entry.function,
                serde_json::to_value(&entry.params).map_err(|e| invalid(e.to_string()))?,
                entry.overlap.as_deref(),
                entry.catchup_window.as_deref(),
            )
            .map_err(invalid)?;
            Ok(Declared {
                name: entry.name,
                spec,
            })
        })
        .collect()
}

/// A schedule's spec from its parts as a user writes them (the file, the command line, the
/// API), checked as the workers will check it; what is not given takes the core's default
/// (`weir_core::schedule`: UTC, `skip`, a minute).
pub fn spec(
    name: &str,
    cron: &str,
    timezone: Option<&str>,
    function: &str,
    params: serde_json::Value,
    overlap: Option<&str>,
    catchup_window: Option<&str>,
) -> Result<ScheduleSpec, String> {
    let ffqn: Ffqn = function
        .parse()
        .map_err(|e| format!("function `{function}`: {e}"))?;
    let overlap = match overlap {
        None => Overlap::default(),
        Some(text) => text
            .parse()
            .map_err(|o| format!("overlap `{o}`: one of skip, allow, cancel-previous"))?,
    };
    let catchup_window = match catchup_window {
        None => DEFAULT_CATCHUP_WINDOW,
        Some(text) => humantime::parse_duration(text)
            .ok()
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .ok_or_else(|| format!("catch-up window `{text}` is not a duration such as `1m`"))?,
    };
    let spec = ScheduleSpec {
        cron: cron.to_owned(),
        timezone: timezone.unwrap_or(DEFAULT_TIMEZONE).to_owned(),
        ffqn,
        params,
        overlap,
        catchup_window,
    };
    spec.compile(name).map_err(|e| e.to_string())?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_schedules_file_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology");
        load(&dir).expect("topology/schedules.toml is valid");
    }

    #[test]
    fn a_schedule_reads_with_its_defaults() {
        let declared = parse(
            r#"
            [[schedule]]
            name = "report"
            cron = "0 0 6 * * *"
            function = "app:report/jobs.daily"
            params = ["eu", 3]
            "#,
            Path::new("schedules.toml"),
        )
        .expect("valid");
        assert_eq!(declared.len(), 1);
        let spec = &declared[0].spec;
        assert_eq!(spec.timezone, DEFAULT_TIMEZONE);
        assert_eq!(spec.overlap, Overlap::Skip);
        assert_eq!(spec.catchup_window, DEFAULT_CATCHUP_WINDOW);
        assert_eq!(spec.params, serde_json::json!(["eu", 3]));
    }

    #[test]
    fn bad_schedules_are_refused_with_why() {
        for (entry, why) in [
            (
                r#"name = "a"
cron = "every day"
function = "app:p/i.f""#,
                "cron expression",
            ),
            (
                r#"name = "a"
cron = "* * * * * *"
timezone = "Europe/Atlantis"
function = "app:p/i.f""#,
                "time zone",
            ),
            (
                r#"name = "a b"
cron = "* * * * * *"
function = "app:p/i.f""#,
                "schedule name",
            ),
            (
                r#"name = "a"
cron = "* * * * * *"
function = "app:p/i.f"
overlap = "queue""#,
                "overlap",
            ),
            (
                r#"name = "a"
cron = "* * * * * *"
function = "app:p/i.f"
catchup_window = "soon""#,
                "catch-up window",
            ),
            (
                r#"name = "a"
cron = "* * * * * *"
function = "not a function""#,
                "function",
            ),
        ] {
            let text = format!("[[schedule]]\n{entry}\n");
            let error = parse(&text, Path::new("schedules.toml"))
                .expect_err("refused")
                .to_string();
            assert!(error.contains(why), "{entry}: {error}");
        }
        let twice =
            "[[schedule]]\nname = \"a\"\ncron = \"* * * * * *\"\nfunction = \"app:p/i.f\"\n"
                .repeat(2);
        assert!(parse(&twice, Path::new("s")).is_err());
    }
}
