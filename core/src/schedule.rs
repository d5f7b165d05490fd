//! Recurring schedules: what a schedule is, when it ticks, and the pure rules that fold its
//! commands and its ticks into its state. The partition processor owns the states of its
//! partitions' schedules and calls these rules; it adds nothing to them.
//!
//! A schedule is named (`nightly-report`) and owned like an execution: by the partition
//! murmur2 gives its key, `schedule:<name>`, on the co-partitioned topics. Its whole state is
//! one record of the compacted topic `weir.state` under that key, written in the same
//! transaction as the submissions its ticks make, and read back by a new owner at take-over.
//! So a tick is fired once per committed state: a tick whose submission committed has its
//! state committed with it, and one whose batch aborted is fired again with the same
//! execution id ([`tick_execution_id`]), which the processor would take once anyway.
//!
//! Ticks are computed in the schedule's time zone ([`Cron::next_after`]): a local time that a
//! daylight-saving gap skips does not fire; a local time the clocks pass twice fires once, at
//! its first pass.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, TimeZone, Utc};
use chrono_tz::Tz;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{ExecutionId, Ffqn};
use crate::records::{CancelRequest, Submission};

/// Metadata of an execution a schedule started: the schedule's name.
pub const METADATA_SCHEDULE: &str = "weir.schedule";
/// Metadata of an execution a schedule started: its tick (RFC 3339).
pub const METADATA_TICK: &str = "weir.schedule.tick";

/// The time zone when a declaration gives none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// The catch-up window when a declaration gives none: ticks owed for longer than this (the
/// workers were down) are counted as missed, not started. Longer than a take-over after a
/// kill -9 with the worker's default session and transaction timeouts (45 s + 30 s), with
/// room to spare, so a crash alone never makes a tick missed (issue 33 F12; the worker's
/// `options` test holds the two together).
pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::minutes(5);

/// The longest catch-up window a schedule may have, in days: every duration a user gives is
/// bounded where it enters (a window of 300 000 years made `now - window` overflow and
/// panicked every owner of the partition).
pub const MAX_CATCHUP_WINDOW_DAYS: i64 = 366;

/// At most this many ticks are taken per schedule and batch (the rest in the next batches).
pub const MAX_TICKS_PER_STEP: usize = 100;

/// Missed ticks (beyond the catch-up window) are counted one by one up to this many per
/// step; beyond, the schedule jumps to the window and counts no further.
pub const MAX_MISSED_COUNTED: u64 = 10_000;

/// At most this many unfinished runs are remembered per schedule (`allow` may start more:
/// the oldest are forgotten, and `cancel-previous` would not cancel those).
pub const MAX_TRACKED_RUNS: usize = 100;

/// Why a schedule, or a command about one, is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule name `{0}`: 1 to 128 of A-Z a-z 0-9 _ . -")]
    Name(String),
    #[error(
        "schedule `{name}`: cron expression `{cron}`: {reason} (six or seven fields, seconds first: `sec min hour day-of-month month day-of-week [year]`)"
    )]
    Cron {
        name: String,
        cron: String,
        reason: String,
    },
    #[error(
        "schedule `{name}`: time zone `{timezone}` is not an IANA time zone name (e.g. `Europe/Prague`, `UTC`)"
    )]
    Timezone { name: String, timezone: String },
    #[error(
        "schedule `{name}`: params must be a JSON array, one element per parameter, not {params}"
    )]
    Params { name: String, params: String },
    #[error("schedule `{name}`: overlap `{overlap}`: one of skip, allow, cancel-previous")]
    Overlap { name: String, overlap: String },
    #[error(
        "schedule `{name}`: the catch-up window {window} is not between 0 and {MAX_CATCHUP_WINDOW_DAYS} days"
    )]
    CatchupWindow { name: String, window: String },
}

/// Checks a schedule name: 1 to 128 of `[A-Za-z0-9_.-]`.
pub fn check_name(name: &str) -> Result<(), ScheduleError> {
    if crate::model::is_plain_name(name, 128) {
        Ok(())
    } else {
        Err(ScheduleError::Name(name.to_owned()))
    }
}

/// What a tick does while the previous tick's execution is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// The tick is skipped (counted); no execution starts.
    #[default]
    Skip,
    /// The tick starts its execution anyway.
    Allow,
    /// The running executions are cancelled, then the tick starts its own.
    CancelPrevious,
}

impl Overlap {
    pub const ALL: [Overlap; 3] = [Overlap::Skip, Overlap::Allow, Overlap::CancelPrevious];

    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
            Overlap::CancelPrevious => "cancel-previous",
        }
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Overlap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Overlap::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| s.to_owned())
    }
}

/// What a schedule starts, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    /// Six or seven fields, seconds first (`0 30 9 * * Mon-Fri`).
    pub cron: String,
    /// An IANA time zone name the cron fields are read in.
    pub timezone: String,
    pub ffqn: Ffqn,
    /// A JSON array, one element per parameter: the params of every tick's execution.
    pub params: Value,
    pub overlap: Overlap,
    /// Ticks owed longer than this are missed, not started.
    pub catchup_window: Duration,
}

impl ScheduleSpec {
    /// The compiled cron expression of the schedule `name`, or why it does not compile.
    pub fn compile(&self, name: &str) -> Result<Cron, ScheduleError> {
        check_name(name)?;
        let schedule = cron::Schedule::from_str(&self.cron).map_err(|e| ScheduleError::Cron {
            name: name.to_owned(),
            cron: self.cron.clone(),
            reason: e.to_string(),
        })?;
        let tz = Tz::from_str(&self.timezone).map_err(|_| ScheduleError::Timezone {
            name: name.to_owned(),
            timezone: self.timezone.clone(),
        })?;
        if !self.params.is_array() {
            return Err(ScheduleError::Params {
                name: name.to_owned(),
                params: self.params.to_string(),
            });
        }
        if self.catchup_window < Duration::zero()
            || self.catchup_window > Duration::days(MAX_CATCHUP_WINDOW_DAYS)
        {
            return Err(ScheduleError::CatchupWindow {
                name: name.to_owned(),
                window: format!("{} s", self.catchup_window.num_seconds()),
            });
        }
        Ok(Cron { schedule, tz })
    }
}

/// A compiled cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct Cron {
    schedule: cron::Schedule,
    tz: Tz,
}

/// How many candidates [`Cron::next_after`] looks at before giving up: a local time passed
/// twice is skipped at its second pass, and at one tick a second the second pass of an hour
/// is 3 600 candidates.
const MAX_CANDIDATES: usize = 10_000;

impl Cron {
    /// The first tick strictly after `after`, `None` if there is none (a year field in the
    /// past). A local time the clocks pass twice fires at its first pass only.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // The crate matches fields on local times but steps through them as instants, which
        // loops at the end of a repeated hour: so the walk is over naive local times (given
        // to the crate as if they were UTC), each mapped to its first instant here.
        let mut local = after.with_timezone(&self.tz).naive_local().and_utc();
        for _ in 0..MAX_CANDIDATES {
            let candidate = self.schedule.after(&local).next()?;
            local = candidate;
            // A local time in a gap does not exist: no tick. One passed twice: its first.
            let Some(instant) = self
                .tz
                .from_local_datetime(&candidate.naive_utc())
                .earliest()
            else {
                continue;
            };
            let instant = instant.with_timezone(&Utc);
            // In the second pass of a repeated local time, its first pass was ticked already.
            if instant > after {
                return Some(instant);
            }
        }
        None
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }
}

/// Whether a schedule's ticks start executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Paused,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
        }
    }
}

/// The whole state of a schedule: the value of its record on `weir.state`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleState {
    pub name: String,
    /// The id of the `create` command that set the spec: part of every tick's execution id,
    /// so a schedule defined again never reuses an id of its former definition.
    pub generation: String,
    pub spec: ScheduleSpec,
    pub status: Status,
    /// The last tick taken (started, skipped or missed).
    pub last_tick: Option<DateTime<Utc>>,
    /// The next tick to take (`None`: the expression has no more).
    pub next_tick: Option<DateTime<Utc>>,
    /// Executions started by ticks that have not finished, oldest first.
    pub running: Vec<ExecutionId>,
    /// Ticks that started an execution, ticks skipped for an overlap, ticks missed (owed for
    /// longer than the catch-up window), since the schedule was created.
    pub started: u64,
    pub skipped: u64,
    pub missed: u64,
    pub updated_at: DateTime<Utc>,
}

/// What is asked of a schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleAction {
    /// Define the schedule. The same spec again changes nothing (so a declaration can be
    /// applied again); another spec replaces it from the next tick after now, keeping the
    /// status, the last tick and the runs.
    Create(ScheduleSpec),
    Pause,
    /// Ticks while paused are not owed: the schedule goes on from the next tick after now.
    Resume,
    Delete,
    /// An execution a tick started has finished (sent by its owner).
    RunFinished(ExecutionId),
}

impl ScheduleAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            ScheduleAction::Create(_) => "create",
            ScheduleAction::Pause => "pause",
            ScheduleAction::Resume => "resume",
            ScheduleAction::Delete => "delete",
            ScheduleAction::RunFinished(_) => "run-finished",
        }
    }
}

/// A command about a schedule. Topic `weir.responses`, key `schedule:<name>`, Kafka header
/// `weir.kind = schedule`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleCommand {
    pub name: String,
    /// The sender's id of the command (a `create`'s becomes the schedule's generation).
    pub command_id: String,
    pub action: ScheduleAction,
    pub sent_at: DateTime<Utc>,
}

/// What a command does to a schedule's state.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The new state, to write.
    Put(Box<ScheduleState>),
    /// The schedule is gone (a tombstone).
    Delete,
    /// Nothing changes (a create with the same spec, a pause of a paused schedule, a finished
    /// run the schedule does not remember, a delete of nothing).
    Unchanged,
    /// The command is refused: why (it goes to the DLQ).
    Refused(String),
}

/// Folds `command` into the current state (`None`: no such schedule) at `now`.
pub fn apply(
    current: Option<&ScheduleState>,
    command: &ScheduleCommand,
    now: DateTime<Utc>,
) -> Applied {
    let name = &command.name;
    match (&command.action, current) {
        (ScheduleAction::Create(spec), current) => {
            let cron = match spec.compile(name) {
                Ok(cron) => cron,
                Err(e) => return Applied::Refused(e.to_string()),
            };
            match current {
                Some(state) if state.spec == *spec => Applied::Unchanged,
                Some(state) => Applied::Put(Box::new(ScheduleState {
                    generation: command.command_id.clone(),
                    spec: spec.clone(),
                    next_tick: cron.next_after(now),
                    updated_at: now,
                    ..state.clone()
                })),
                None => Applied::Put(Box::new(ScheduleState {
                    name: name.clone(),
                    generation: command.command_id.clone(),
                    spec: spec.clone(),
                    status: Status::Active,
                    last_tick: None,
                    next_tick: cron.next_after(now),
                    running: Vec::new(),
                    started: 0,
                    skipped: 0,
                    missed: 0,
                    updated_at: now,
                })),
            }
        }
        (ScheduleAction::Delete, None) | (ScheduleAction::RunFinished(_), None) => {
            Applied::Unchanged
        }
        (action, None) => Applied::Refused(format!(
            "{} of schedule `{name}`: the schedule does not exist",
            action.as_str()
        )),
        (ScheduleAction::Delete, Some(_)) => Applied::Delete,
        (ScheduleAction::Pause, Some(state)) => match state.status {
            Status::Paused => Applied::Unchanged,
            Status::Active => Applied::Put(Box::new(ScheduleState {
                status: Status::Paused,
                updated_at: now,
                ..state.clone()
            })),
        },
        (ScheduleAction::Resume, Some(state)) => match state.status {
            Status::Active => Applied::Unchanged,
            Status::Paused => {
                let next_tick = match state.spec.compile(name) {
                    Ok(cron) => cron.next_after(now),
                    Err(e) => return Applied::Refused(e.to_string()),
                };
                Applied::Put(Box::new(ScheduleState {
                    status: Status::Active,
                    next_tick,
                    updated_at: now,
                    ..state.clone()
                }))
            }
        },
        (ScheduleAction::RunFinished(id), Some(state)) => {
            if !state.running.contains(id) {
                return Applied::Unchanged;
            }
            let mut state = state.clone();
            state.running.retain(|r| r != id);
            state.updated_at = now;
            Applied::Put(Box::new(state))
        }
    }
}

/// The execution id of a schedule's tick: `E_<ulid>` of SHA-256 over the schedule's name, its
/// generation and the tick, so the same tick always makes the same submission.
pub fn tick_execution_id(name: &str, generation: &str, tick: DateTime<Utc>) -> ExecutionId {
    let mut hasher = Sha256::new();
    for part in [
        "weir-schedule",
        name,
        generation,
        &tick.timestamp_micros().to_string(),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    ExecutionId::from_digest(&hasher.finalize().into())
}

/// What the due ticks of a schedule do.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// The state after them, to write.
    pub state: ScheduleState,
    /// A submission per tick that starts an execution, in tick order.
    pub starts: Vec<Submission>,
    /// Cancellations of the runs a `cancel-previous` tick replaced.
    pub cancels: Vec<CancelRequest>,
    pub skipped: u64,
    pub missed: u64,
}

/// Whether `state` has a tick due at `now`.
pub fn is_due(state: &ScheduleState, now: DateTime<Utc>) -> bool {
    state.status == Status::Active && state.next_tick.is_some_and(|t| t <= now)
}

/// Takes the ticks of `state` due at `now` (at most [`MAX_TICKS_PER_STEP`]); `None` if none
/// is due (paused, or the next tick is later).
pub fn fire(state: &ScheduleState, now: DateTime<Utc>) -> Option<Fired> {
    if !is_due(state, now) {
        return None;
    }
    let mut state = state.clone();
    let cron = match state.spec.compile(&state.name) {
        Ok(cron) => cron,
        // A state is written only from a spec that compiled: one that does not (a time zone
        // a newer worker knew) is kept, not fired.
        Err(e) => {
            tracing::error!(schedule = %state.name, error = %e, "a schedule's spec does not compile here; it does not tick");
            return None;
        }
    };
    // Checked: a window from a record (not from `compile`) may be anything.
    let window_start = now
        .checked_sub_signed(state.spec.catchup_window)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let mut fired = Fired {
        state: state.clone(),
        starts: Vec::new(),
        cancels: Vec::new(),
        skipped: 0,
        missed: 0,
    };
    let mut tick = state.next_tick;
    let mut taken = 0;
    while let Some(t) = tick.filter(|&t| t <= now) {
        if taken == MAX_TICKS_PER_STEP {
            break;
        }
        if t < window_start {
            fired.missed += 1;
            state.last_tick = Some(t);
            tick = if fired.missed >= MAX_MISSED_COUNTED {
                // Jump to the window: the first tick at or after its start.
                cron.next_after(window_start - Duration::microseconds(1))
            } else {
                cron.next_after(t)
            };
            continue;
        }
        taken += 1;
        state.last_tick = Some(t);
        tick = cron.next_after(t);
        match state.spec.overlap {
            Overlap::Skip if !state.running.is_empty() => {
                fired.skipped += 1;
                continue;
            }
            Overlap::CancelPrevious => {
                for running in state.running.drain(..) {
                    fired.cancels.push(CancelRequest {
                        execution_id: running,
                        reason: format!(
                            "schedule `{}`: the tick of {} replaces it (overlap cancel-previous)",
                            state.name,
                            t.to_rfc3339()
                        ),
                        terminate: false,
                        waited_until: None,
                        requested_at: now,
                    });
                }
            }
            Overlap::Skip | Overlap::Allow => {}
        }
        let id = tick_execution_id(&state.name, &state.generation, t);
        fired.starts.push(Submission {
            execution_id: id.clone(),
            ffqn: state.spec.ffqn.clone(),
            params: state.spec.params.clone(),
            parent: None,
            scheduled_at: None,
            correlation_id: None,
            metadata: BTreeMap::from([
                (METADATA_SCHEDULE.to_owned(), state.name.clone()),
                (METADATA_TICK.to_owned(), t.to_rfc3339()),
            ]),
            deadline: None,
            concurrency: None,
            tenant: None,
        });
        state.running.push(id);
        if state.running.len() > MAX_TRACKED_RUNS {
            let extra = state.running.len() - MAX_TRACKED_RUNS;
            state.running.drain(..extra);
        }
    }
    state.next_tick = tick;
    state.started += fired.starts.len() as u64;
    state.skipped += fired.skipped;
    state.missed += fired.missed;
    state.updated_at = now;
    fired.state = state;
    Some(fired)
}

/// The instant `local` (a naive local time) in `tz`, its first pass if the clocks pass it
/// twice; for tests and tools that write ticks as local times.
pub fn local_instant(tz: Tz, local: chrono::NaiveDateTime) -> Option<DateTime<Utc>> {
    tz.from_local_datetime(&local)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .with_timezone(&Utc)
    }

    fn spec(cron: &str, timezone: &str, overlap: Overlap) -> ScheduleSpec {
        ScheduleSpec {
            cron: cron.to_owned(),
            timezone: timezone.to_owned(),
            ffqn: Ffqn::from_str("app:report/jobs.nightly").expect("ffqn"),
            params: serde_json::json!([]),
            overlap,
            catchup_window: Duration::minutes(1),
        }
    }

    /// The next tick after an instant: every second, monthly, a time zone, daylight saving
    /// gaps (skipped) and repeats (fired once).
    #[test]
    fn next_tick_table() {
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            // every second
            (
                "* * * * * *",
                "UTC",
                "2026-03-01T10:00:00Z",
                Some("2026-03-01T10:00:01Z"),
            ),
            (
                "* * * * * *",
                "UTC",
                "2026-03-01T10:00:00.5Z",
                Some("2026-03-01T10:00:01Z"),
            ),
            // every 15 minutes on the quarter
            (
                "0 */15 * * * *",
                "UTC",
                "2026-03-01T10:07:00Z",
                Some("2026-03-01T10:15:00Z"),
            ),
            // monthly, on the 31st: skips months without one
            (
                "0 0 12 31 * *",
                "UTC",
                "2026-04-01T00:00:00Z",
                Some("2026-05-31T12:00:00Z"),
            ),
            // 09:30 on weekdays in Prague (CET, UTC+1): Saturday -> Monday
            (
                "0 30 9 * * Mon-Fri",
                "Europe/Prague",
                "2026-01-03T12:00:00Z",
                Some("2026-01-05T08:30:00Z"),
            ),
            // ... and in summer time (CEST, UTC+2)
            (
                "0 30 9 * * Mon-Fri",
                "Europe/Prague",
                "2026-07-04T12:00:00Z",
                Some("2026-07-06T07:30:00Z"),
            ),
            // 02:30 does not exist on 29 March 2026 in Prague (02:00 -> 03:00): skipped
            (
                "0 30 2 * * *",
                "Europe/Prague",
                "2026-03-28T12:00:00Z",
                Some("2026-03-30T00:30:00Z"),
            ),
            // 02:30 happens twice on 25 October 2026 in Prague: fired at its first pass (CEST)
            (
                "0 30 2 * * *",
                "Europe/Prague",
                "2026-10-24T12:00:00Z",
                Some("2026-10-25T00:30:00Z"),
            ),
            // ... and not again at its second pass (CET): the next is the day after
            (
                "0 30 2 * * *",
                "Europe/Prague",
                "2026-10-25T00:30:00Z",
                Some("2026-10-26T01:30:00Z"),
            ),
            // every second through the repeated hour: from the second pass of 02:00:30 the
            // next tick is 03:00:00 (the second pass of 02:xx was ticked at its first)
            (
                "* * * * * *",
                "Europe/Prague",
                "2026-10-25T01:00:30Z",
                Some("2026-10-25T02:00:00Z"),
            ),
            // ... and from the end of the first pass (02:59:59 CEST) it is 03:00:00 CET too
            (
                "* * * * * *",
                "Europe/Prague",
                "2026-10-25T00:59:59Z",
                Some("2026-10-25T02:00:00Z"),
            ),
            // New York's spring gap (02:00 -> 03:00 on 8 March 2026)
            (
                "0 0 2 * * *",
                "America/New_York",
                "2026-03-07T12:00:00Z",
                Some("2026-03-09T06:00:00Z"),
            ),
            // a year in the past: no tick
            ("0 0 0 1 1 * 2020", "UTC", "2026-01-01T00:00:00Z", None),
        ];
        for &(cron, tz, after, expected) in cases {
            let compiled = spec(cron, tz, Overlap::Skip)
                .compile("t")
                .unwrap_or_else(|e| panic!("{cron}: {e}"));
            let got = compiled.next_after(utc(after));
            assert_eq!(
                got,
                expected.map(utc),
                "`{cron}` in {tz} after {after}: {got:?}"
            );
        }
    }

    #[test]
    fn bad_specs_are_refused_with_why() {
        let e = spec("every minute", "UTC", Overlap::Skip).compile("t");
        assert!(matches!(e, Err(ScheduleError::Cron { .. })), "{e:?}");
        let e = spec("* * * * * *", "Mars/Olympus", Overlap::Skip).compile("t");
        assert!(matches!(e, Err(ScheduleError::Timezone { .. })), "{e:?}");
        let e = spec("* * * * * *", "UTC", Overlap::Skip).compile("bad name");
        assert!(matches!(e, Err(ScheduleError::Name(_))), "{e:?}");
        let mut s = spec("* * * * * *", "UTC", Overlap::Skip);
        s.params = serde_json::json!({"a": 1});
        assert!(matches!(s.compile("t"), Err(ScheduleError::Params { .. })));
    }

    fn command(action: ScheduleAction, id: &str, at: &str) -> ScheduleCommand {
        ScheduleCommand {
            name: "every-second".to_owned(),
            command_id: id.to_owned(),
            action,
            sent_at: utc(at),
        }
    }

    fn created(overlap: Overlap, at: &str) -> ScheduleState {
        let create = command(
            ScheduleAction::Create(spec("* * * * * *", "UTC", overlap)),
            "c1",
            at,
        );
        match apply(None, &create, utc(at)) {
            Applied::Put(state) => *state,
            other => panic!("create: {other:?}"),
        }
    }

    #[test]
    fn commands_fold_into_the_state() {
        let state = created(Overlap::Skip, "2026-03-01T10:00:00.2Z");
        assert_eq!(state.status, Status::Active);
        assert_eq!(state.next_tick, Some(utc("2026-03-01T10:00:01Z")));
        // The same spec again: nothing.
        let again = command(
            ScheduleAction::Create(state.spec.clone()),
            "c2",
            "2026-03-01T10:00:05Z",
        );
        assert_eq!(
            apply(Some(&state), &again, utc("2026-03-01T10:00:05Z")),
            Applied::Unchanged
        );
        // Another spec: a new generation, from the next tick after now.
        let other = command(
            ScheduleAction::Create(spec("0 * * * * *", "UTC", Overlap::Skip)),
            "c3",
            "2026-03-01T10:00:05Z",
        );
        let Applied::Put(changed) = apply(Some(&state), &other, utc("2026-03-01T10:00:05Z")) else {
            panic!("a new spec replaces the old")
        };
        assert_eq!(changed.generation, "c3");
        assert_eq!(changed.next_tick, Some(utc("2026-03-01T10:01:00Z")));
        // Pause, pause again, resume from the next tick after now.
        let now = utc("2026-03-01T10:00:03Z");
        let Applied::Put(paused) = apply(
            Some(&state),
            &command(ScheduleAction::Pause, "p", "2026-03-01T10:00:03Z"),
            now,
        ) else {
            panic!("pause")
        };
        assert_eq!(paused.status, Status::Paused);
        assert!(fire(&paused, utc("2026-03-01T10:00:09Z")).is_none());
        assert_eq!(
            apply(
                Some(&paused),
                &command(ScheduleAction::Pause, "p", "2026-03-01T10:00:04Z"),
                now
            ),
            Applied::Unchanged
        );
        let Applied::Put(resumed) = apply(
            Some(&paused),
            &command(ScheduleAction::Resume, "r", "2026-03-01T10:00:09.5Z"),
            utc("2026-03-01T10:00:09.5Z"),
        ) else {
            panic!("resume")
        };
        assert_eq!(resumed.next_tick, Some(utc("2026-03-01T10:00:10Z")));
        // Delete; delete again is nothing; pause of nothing is refused.
        assert_eq!(
            apply(
                Some(&state),
                &command(ScheduleAction::Delete, "d", "2026-03-01T10:00:03Z"),
                now
            ),
            Applied::Delete
        );
        assert_eq!(
            apply(
                None,
                &command(ScheduleAction::Delete, "d", "2026-03-01T10:00:03Z"),
                now
            ),
            Applied::Unchanged
        );
        assert!(matches!(
            apply(
                None,
                &command(ScheduleAction::Pause, "p", "2026-03-01T10:00:03Z"),
                now
            ),
            Applied::Refused(_)
        ));
        // A create with a bad spec is refused.
        let bad = command(
            ScheduleAction::Create(spec("* * *", "UTC", Overlap::Skip)),
            "c4",
            "2026-03-01T10:00:05Z",
        );
        assert!(matches!(apply(None, &bad, now), Applied::Refused(_)));
    }

    #[test]
    fn each_tick_has_one_id_and_skip_waits_for_the_run() {
        let state = created(Overlap::Skip, "2026-03-01T10:00:00.2Z");
        assert!(fire(&state, utc("2026-03-01T10:00:00.9Z")).is_none());
        let fired = fire(&state, utc("2026-03-01T10:00:01.01Z")).expect("due");
        assert_eq!(fired.starts.len(), 1);
        let id = fired.starts[0].execution_id.clone();
        assert_eq!(
            id,
            tick_execution_id("every-second", "c1", utc("2026-03-01T10:00:01Z"))
        );
        assert_eq!(
            fired.starts[0]
                .metadata
                .get(METADATA_SCHEDULE)
                .map(String::as_str),
            Some("every-second")
        );
        assert_eq!(fired.state.running, vec![id.clone()]);
        assert_eq!(fired.state.next_tick, Some(utc("2026-03-01T10:00:02Z")));
        // The same tick fired from the same state again makes the same submission.
        assert_eq!(
            fire(&state, utc("2026-03-01T10:00:01.5Z"))
                .expect("due")
                .starts,
            fired.starts
        );
        // While it runs, the next tick is skipped.
        let second = fire(&fired.state, utc("2026-03-01T10:00:02Z")).expect("due");
        assert!(second.starts.is_empty());
        assert_eq!(second.skipped, 1);
        // Once it finished, the next tick starts again.
        let finish = command(
            ScheduleAction::RunFinished(id),
            "f",
            "2026-03-01T10:00:02.5Z",
        );
        let Applied::Put(done) = apply(Some(&second.state), &finish, utc("2026-03-01T10:00:02.5Z"))
        else {
            panic!("run finished")
        };
        assert!(done.running.is_empty());
        let third = fire(&done, utc("2026-03-01T10:00:03Z")).expect("due");
        assert_eq!(third.starts.len(), 1);
        assert_eq!((third.state.started, third.state.skipped), (2, 1));
    }

    #[test]
    fn allow_and_cancel_previous() {
        let state = created(Overlap::Allow, "2026-03-01T10:00:00.2Z");
        let one = fire(&state, utc("2026-03-01T10:00:01Z")).expect("due");
        let two = fire(&one.state, utc("2026-03-01T10:00:02Z")).expect("due");
        assert_eq!(two.starts.len(), 1);
        assert_eq!(two.state.running.len(), 2);
        assert!(two.cancels.is_empty());

        let state = created(Overlap::CancelPrevious, "2026-03-01T10:00:00.2Z");
        let one = fire(&state, utc("2026-03-01T10:00:01Z")).expect("due");
        let two = fire(&one.state, utc("2026-03-01T10:00:02Z")).expect("due");
        assert_eq!(two.cancels.len(), 1);
        assert_eq!(two.cancels[0].execution_id, one.starts[0].execution_id);
        assert_eq!(two.state.running, vec![two.starts[0].execution_id.clone()]);
    }

    #[test]
    fn catch_up_within_the_window_and_missed_beyond() {
        let state = created(Overlap::Allow, "2026-03-01T10:00:00.2Z");
        // Down for 90 s: the 30 ticks before the 60 s window are missed, the 61 within it
        // start (10:00:31 ..= 10:01:31).
        let now = utc("2026-03-01T10:01:31Z");
        let mut state = state;
        let (mut started, mut missed) = (0, 0);
        while let Some(fired) = fire(&state, now) {
            started += fired.starts.len();
            missed += fired.missed;
            state = fired.state;
        }
        assert_eq!((started, missed), (61, 30));
        assert_eq!(state.last_tick, Some(now));
        assert_eq!(state.next_tick, Some(utc("2026-03-01T10:01:32Z")));
        // With skip, a catch-up starts the first owed tick and skips the rest.
        let mut state = created(Overlap::Skip, "2026-03-01T10:00:00.2Z");
        let (mut started, mut skipped) = (0, 0);
        while let Some(fired) = fire(&state, utc("2026-03-01T10:00:10Z")) {
            started += fired.starts.len();
            skipped += fired.skipped;
            state = fired.state;
        }
        assert_eq!((started, skipped), (1, 9));
    }

    /// Issue 33 F5: a catch-up window of 300 000 years made `now - window` overflow: the
    /// owner of the schedule's partition panicked at every batch. Such a window is refused
    /// where it enters (every edge compiles the spec), and a state that carries one anyway
    /// (a record written by hand) is kept without ticking, as any spec that does not compile.
    #[test]
    fn a_catch_up_window_beyond_the_bound_is_refused_and_never_overflows() {
        let mut huge = spec("* * * * * *", "UTC", Overlap::Allow);
        huge.catchup_window = Duration::days(365 * 300_000);
        let error = huge.compile("nightly").expect_err("beyond the bound");
        assert!(
            matches!(error, ScheduleError::CatchupWindow { .. }),
            "{error}"
        );
        huge.catchup_window = Duration::days(MAX_CATCHUP_WINDOW_DAYS);
        huge.compile("nightly")
            .expect("the bound itself is a window");
        let mut state = created(Overlap::Allow, "2026-03-01T10:00:00.2Z");
        state.spec.catchup_window = Duration::MAX;
        assert!(fire(&state, utc("2026-03-01T10:00:05Z")).is_none());
    }

    #[test]
    fn a_long_outage_jumps_to_the_window() {
        let state = created(Overlap::Allow, "2026-03-01T10:00:00.2Z");
        let now = utc("2026-03-02T10:00:00Z");
        let mut state = state;
        let mut steps = 0;
        let mut started = 0;
        while let Some(fired) = fire(&state, now) {
            started += fired.starts.len();
            state = fired.state;
            steps += 1;
            assert!(
                steps < 1_000,
                "a day's outage takes a bounded number of steps"
            );
        }
        assert_eq!(started, 61);
        assert_eq!(state.missed, MAX_MISSED_COUNTED);
    }
}
