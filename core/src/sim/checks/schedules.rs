//! Schedules (`Faults::schedules`), from their committed states on `weir.state`, the tick
//! submissions and the runs' histories and results: `schedule-state`, `schedule-ticks`,
//! `schedule-runs`, `schedule-liveness` (see [`check_schedules`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::records::HistoryEntry;
use crate::sim::cluster::{Payload, Producer, SimTime, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::SimSchedule;
use crate::sim::workflows::{Workflow, parse_params};
use crate::sim::world::World;

use super::{Logged, describe};

/// How close to the time its end was applied an active schedule must have ticked.
const SCHEDULE_SLACK_MS: i64 = 5_000;

/// A committed record of `weir.state` of one schedule: when it was written, and the state
/// (`None`: a tombstone).
type StateRecord<'a> = (SimTime, Option<&'a crate::schedule::ScheduleState>);

/// What one generation of a schedule (from its create to its delete) committed.
#[derive(Default)]
struct Generation {
    /// The ticks its committed states say started an execution.
    started: BTreeSet<SimTime>,
    /// While it was paused: (paused at, resumed at).
    paused: Vec<(SimTime, Option<SimTime>)>,
}

/// The ticks of `cron` from `from` to `to`, both included (at most `limit`).
fn ticks_between(
    cron: &crate::schedule::Cron,
    from: Option<SimTime>,
    to: SimTime,
    limit: usize,
) -> Vec<SimTime> {
    let mut out = Vec::new();
    let mut tick = from;
    while let Some(t) = tick.filter(|t| *t <= to) {
        if out.len() >= limit {
            break;
        }
        out.push(t);
        tick = cron.next_after(t);
    }
    out
}

/// How the committed state `cur` follows the committed state `prev` of the same generation:
/// by the ticks due at its time ([`crate::schedule::fire`]: `Some` of what they did), or by a
/// pause, a resume or a finished run applied at its time (`None`); `Err` if by nothing.
fn explain(
    prev: &crate::schedule::ScheduleState,
    cur: &crate::schedule::ScheduleState,
) -> Result<Option<crate::schedule::Fired>, String> {
    use crate::schedule::{Applied, ScheduleAction, ScheduleCommand, apply, fire};
    let at = cur.updated_at;
    if at < prev.updated_at {
        return Err(format!(
            "written at {at}, before the state it follows ({})",
            prev.updated_at
        ));
    }
    if cur.last_tick != prev.last_tick {
        return match fire(prev, at) {
            Some(fired) if fired.state == *cur => Ok(Some(fired)),
            Some(fired) => Err(format!(
                "the ticks due at {at} make {:?}, not what is committed",
                fired.state
            )),
            None => Err(format!("its last tick moved, but no tick was due at {at}")),
        };
    }
    let mut actions = vec![ScheduleAction::Pause, ScheduleAction::Resume];
    actions.extend(
        prev.running
            .iter()
            .cloned()
            .map(ScheduleAction::RunFinished),
    );
    for action in actions {
        let command = ScheduleCommand {
            name: prev.name.clone(),
            command_id: String::new(),
            action,
            sent_at: at,
        };
        if apply(Some(prev), &command, at) == Applied::Put(Box::new(cur.clone())) {
            return Ok(None);
        }
    }
    Err(format!(
        "no tick, pause, resume or finished run at {at} explains it"
    ))
}

/// Schedules (`Faults::schedules`), from the committed records only: the states on
/// `weir.state` (each schedule's committed history, a chain from its create to its delete),
/// the submissions its ticks made, the histories and results of their executions.
/// - `schedule-state`: every committed state follows the one before by a tick step, a pause,
///   a resume or a finished run at its own time (a new owner went on from the last committed
///   state, nothing was lost or taken twice); a generation begins with its create (the
///   generations are the client's creates after deletes, a create of the same spec again
///   changes nothing) and ends with its delete; the end the client asked for was applied.
/// - `schedule-ticks`: every tick submission carries the id of its tick
///   ([`crate::schedule::tick_execution_id`]) and is committed once; the submissions are
///   exactly the ticks the committed states started; for `allow` the ticks a step took are
///   every tick from the state's next one to its new last one (counted: started + skipped +
///   missed), missed exactly if owed longer than the catch-up window, none while paused.
/// - `schedule-runs` (once the run settled): each tick's execution has one history that
///   starts with its `Created`, one result on `weir.results` (its workflow's, or `cancelled`
///   if `cancel-previous` may have cancelled it), and one `RunFinished` sent to its schedule;
///   no schedule command is dead-lettered.
/// - `schedule-liveness`: once the faults stopped, an active schedule had ticked up to a few
///   seconds before its end (delete or pause) was applied: its partition was not stuck.
pub(super) fn check_schedules(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    results: &BTreeMap<ExecutionId, Vec<ExecutionResult>>,
    schedules: &[SimSchedule],
    settled: bool,
) {
    use crate::schedule::{
        MAX_MISSED_COUNTED, METADATA_SCHEDULE, METADATA_TICK, Overlap, ScheduleAction, Status,
        tick_execution_id,
    };

    // Tick submissions, by schedule; finished runs told to schedules, by execution.
    let mut submissions: BTreeMap<&str, Vec<&crate::records::Submission>> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Submissions) {
        if let (Producer::Worker { .. }, Some(Payload::Submission(s))) = (r.producer, &r.payload)
            && let Some(name) = s.metadata.get(METADATA_SCHEDULE)
        {
            submissions.entry(name.as_str()).or_default().push(s);
        }
    }
    let mut finished_told: BTreeMap<&ExecutionId, usize> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Responses) {
        if let Some(Payload::ScheduleCommand(c)) = &r.payload
            && let ScheduleAction::RunFinished(id) = &c.action
        {
            if !matches!(r.producer, Producer::Worker { .. }) {
                add(
                    Invariant::ScheduleRuns,
                    format!("a RunFinished of {id} not written by a worker"),
                );
            }
            *finished_told.entry(id).or_default() += 1;
        }
    }
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload
            // A corrupt schedule state's copy is `check_corrupt_states`'.
            && e.original_topic != Topic::State.name()
            && e.key
                .as_deref()
                .and_then(|k| std::str::from_utf8(k).ok())
                .is_some_and(|k| {
                    matches!(
                        crate::state_key::StateKey::parse(k),
                        Ok(crate::state_key::StateKey::Schedule(_))
                    )
                })
        {
            add(
                Invariant::ScheduleRuns,
                format!(
                    "a schedule command at {}/{}@{} was dead-lettered ({:?}): {}",
                    e.original_topic, e.original_partition, e.original_offset, e.reason, e.error
                ),
            );
        }
    }
    // The states, by key, in log order (a key's records are all on its partition).
    let mut states: BTreeMap<&str, Vec<StateRecord<'_>>> = BTreeMap::new();
    for (partition, r) in w.cluster.committed_records(Topic::State) {
        if matches!(
            &r.payload,
            Some(Payload::Correlation(_) | Payload::Remembered(_))
        ) {
            continue; // `check_correlation`'s
        }
        if matches!(&r.payload, Some(Payload::Slot(_))) {
            continue; // `check_concurrency`'s
        }
        if matches!(
            &r.payload,
            Some(Payload::Batch(_) | Payload::BatchOutcomes(_))
        ) {
            continue; // `check_batches`'
        }
        if matches!(&r.payload, Some(Payload::Garbage(_))) {
            continue; // `check_corrupt_states`'
        }
        let (Some(key), Some(Payload::Schedule(state))) = (&r.key, &r.payload) else {
            add(
                Invariant::ScheduleState,
                format!(
                    "weir.state/{partition}@{}: not a schedule's state",
                    r.offset
                ),
            );
            continue;
        };
        let home = w.cluster.partition_for(Topic::State, key);
        if home != partition {
            add(
                Invariant::ScheduleState,
                format!(
                    "the state of `{key}` on weir.state/{partition}@{} (murmur2 says {home})",
                    r.offset
                ),
            );
        }
        states
            .entry(key.as_str())
            .or_default()
            .push((r.timestamp, state.as_ref()));
    }
    for name in submissions.keys() {
        if !schedules.iter().any(|s| s.name == *name) {
            add(
                Invariant::ScheduleTicks,
                format!("tick submissions of `{name}`, a schedule nobody created"),
            );
        }
    }

    for sched in schedules {
        let name = sched.name.as_str();
        let key = crate::state_key::StateKey::schedule(name).to_string();
        let cron = match sched.spec.compile(name) {
            Ok(cron) => cron,
            Err(e) => {
                add(Invariant::ScheduleState, format!("`{name}`: {e}"));
                continue;
            }
        };
        let records = states
            .get(key.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        // The generations: the records between tombstones.
        let mut segments: Vec<(Vec<&crate::schedule::ScheduleState>, Option<SimTime>)> = Vec::new();
        let mut open = false;
        for (at, state) in records {
            match state {
                Some(state) => {
                    if !open {
                        segments.push((Vec::new(), None));
                        open = true;
                    }
                    segments.last_mut().expect("a segment").0.push(state);
                }
                None if open => {
                    segments.last_mut().expect("a segment").1 = Some(*at);
                    open = false;
                }
                // A delete of nothing changes nothing: no tombstone.
                None => add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: a tombstone at +{}ms with nothing to delete",
                        (*at - w.start).num_milliseconds()
                    ),
                ),
            }
        }
        if segments.len() > sched.generations.len()
            || (settled && segments.len() != sched.generations.len())
        {
            add(
                Invariant::ScheduleState,
                format!(
                    "`{name}`: {} generations committed, {} created",
                    segments.len(),
                    sched.generations.len()
                ),
            );
        }
        let mut generations: BTreeMap<&str, Generation> = BTreeMap::new();
        for ((chain, deleted_at), generation) in segments.iter().zip(&sched.generations) {
            let first = chain[0];
            let fresh = first.generation == *generation
                && first.status == Status::Active
                && first.last_tick.is_none()
                && first.running.is_empty()
                && (first.started, first.skipped, first.missed) == (0, 0, 0)
                && first.next_tick == cron.next_after(first.updated_at);
            if !fresh {
                add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: generation {generation} begins with {first:?}, not its create"
                    ),
                );
            }
            let g = generations.entry(generation.as_str()).or_default();
            for state in chain {
                if state.name != name || state.spec != sched.spec || state.generation != *generation
                {
                    add(
                        Invariant::ScheduleState,
                        format!("`{name}`: generation {generation} holds {state:?}"),
                    );
                }
            }
            for pair in chain.windows(2) {
                let (prev, cur) = (pair[0], pair[1]);
                let fired = match explain(prev, cur) {
                    Ok(fired) => fired,
                    Err(why) => {
                        add(
                            Invariant::ScheduleState,
                            format!("`{name}`: the state {cur:?} after {prev:?}: {why}"),
                        );
                        continue;
                    }
                };
                match (prev.status, cur.status) {
                    (Status::Active, Status::Paused) => g.paused.push((cur.updated_at, None)),
                    (Status::Paused, Status::Active) => {
                        if let Some(last) = g.paused.last_mut() {
                            last.1 = Some(cur.updated_at);
                        }
                    }
                    _ => {}
                }
                let Some(fired) = fired else {
                    continue;
                };
                // The ticks the step took: every tick from the next one to the new last.
                let Some(last) = cur.last_tick else {
                    continue;
                };
                let taken = ticks_between(&cron, prev.next_tick, last, 100_000);
                let counted = (cur.started - prev.started)
                    + (cur.skipped - prev.skipped)
                    + (cur.missed - prev.missed);
                if cur.missed - prev.missed < MAX_MISSED_COUNTED && taken.len() as u64 != counted {
                    add(
                        Invariant::ScheduleTicks,
                        format!(
                            "`{name}`: a step at {} took {} ticks ({:?} ..= {last}), but counts {counted}",
                            cur.updated_at,
                            taken.len(),
                            prev.next_tick
                        ),
                    );
                }
                let mut started: Vec<SimTime> = Vec::new();
                for s in &fired.starts {
                    match s.metadata.get(METADATA_TICK).and_then(|t| {
                        chrono::DateTime::parse_from_rfc3339(t)
                            .ok()
                            .map(|t| t.with_timezone(&chrono::Utc))
                    }) {
                        Some(t) => started.push(t),
                        None => add(
                            Invariant::ScheduleTicks,
                            format!("`{name}`: a tick's submission without its tick: {s:?}"),
                        ),
                    }
                }
                if sched.spec.overlap == Overlap::Allow {
                    // Missed exactly when owed longer than the window; every other started.
                    let window_start = cur.updated_at - sched.spec.catchup_window;
                    let (missed, owed): (Vec<SimTime>, Vec<SimTime>) =
                        taken.iter().partition(|t| **t < window_start);
                    if cur.missed - prev.missed < MAX_MISSED_COUNTED
                        && (missed.len() as u64 != cur.missed - prev.missed
                            || owed != started
                            || cur.skipped != prev.skipped)
                    {
                        add(
                            Invariant::ScheduleTicks,
                            format!(
                                "`{name}`: a step at {} with a window of {} s: {} ticks missed and {:?} owed, but it missed {} and started {started:?}",
                                cur.updated_at,
                                sched.spec.catchup_window.num_seconds(),
                                missed.len(),
                                owed,
                                cur.missed - prev.missed
                            ),
                        );
                    }
                }
                g.started.extend(started);
            }
            // A tick after the delete would be of a schedule that is gone.
            if let (Some(deleted_at), Some(last)) =
                (deleted_at, chain.last().and_then(|s| s.last_tick))
                && last > *deleted_at
            {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: generation {generation} ticked at {last}, after its delete at {deleted_at}"
                    ),
                );
            }
        }

        // The submissions: one per started tick, with the tick's id, none other.
        let mut seen: BTreeMap<(&str, SimTime), usize> = BTreeMap::new();
        for s in submissions.get(name).map(Vec::as_slice).unwrap_or_default() {
            let id = &s.execution_id;
            let Some(tick) = s.metadata.get(METADATA_TICK).and_then(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.with_timezone(&chrono::Utc))
            }) else {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: the tick submission {id} names no tick: {:?}",
                        s.metadata
                    ),
                );
                continue;
            };
            let Some(generation) = sched
                .generations
                .iter()
                .find(|g| tick_execution_id(name, g, tick) == *id)
            else {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: the submission of tick {tick} is {id}, not the tick's id of any generation ({:?})",
                        sched.generations
                    ),
                );
                continue;
            };
            if s.ffqn != sched.spec.ffqn || s.params != sched.spec.params || s.parent.is_some() {
                add(
                    Invariant::ScheduleTicks,
                    format!("`{name}`: the submission of tick {tick} is {s:?}"),
                );
            }
            *seen.entry((generation.as_str(), tick)).or_default() += 1;
            let g = generations.get(generation.as_str());
            if !g.is_some_and(|g| g.started.contains(&tick)) {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: {id} was submitted for tick {tick} of generation {generation}, which no committed state started"
                    ),
                );
            }
            if let Some(g) = g
                && let Some((from, to)) = g
                    .paused
                    .iter()
                    .find(|(from, to)| tick > *from && to.is_none_or(|to| tick <= to))
            {
                add(
                    Invariant::ScheduleTicks,
                    format!(
                        "`{name}`: tick {tick} started {id}, though paused from {from} to {to:?}"
                    ),
                );
            }
        }
        for ((generation, tick), n) in &seen {
            if *n > 1 {
                add(
                    Invariant::ScheduleTicks,
                    format!("`{name}`: tick {tick} of generation {generation} submitted {n} times"),
                );
            }
        }
        for (generation, g) in &generations {
            for tick in &g.started {
                if !seen.contains_key(&(*generation, *tick)) {
                    add(
                        Invariant::ScheduleTicks,
                        format!(
                            "`{name}`: tick {tick} of generation {generation} started, but no submission of it is committed"
                        ),
                    );
                }
            }
        }

        // The runs of the ticks.
        let cancellable = sched.spec.overlap == Overlap::CancelPrevious;
        let expected = Workflow::of(&sched.spec.ffqn).and_then(|wf| {
            parse_params(wf, &sched.spec.params)
                .ok()
                .map(|p| wf.expected(&p))
        });
        if settled {
            for s in submissions.get(name).map(Vec::as_slice).unwrap_or_default() {
                let id = &s.execution_id;
                let mut first: BTreeMap<u64, &HistoryEntry> = BTreeMap::new();
                for e in logs.get(id).map(Vec::as_slice).unwrap_or_default() {
                    first.entry(e.record.seq).or_insert(&e.record.entry);
                }
                let created: Vec<&HistoryEntry> = first
                    .values()
                    .copied()
                    .filter(|e| matches!(e, HistoryEntry::Created(_)))
                    .collect();
                let starts_created = matches!(first.get(&0), Some(HistoryEntry::Created(c))
                    if c.metadata.get(METADATA_SCHEDULE) == s.metadata.get(METADATA_SCHEDULE)
                        && c.metadata.get(METADATA_TICK) == s.metadata.get(METADATA_TICK));
                if !starts_created || created.len() != 1 {
                    add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} has {} history entries, {} Created, the first {:?}",
                            first.len(),
                            created.len(),
                            first.get(&0).map(|e| describe(e))
                        ),
                    );
                    continue;
                }
                let finished = first
                    .values()
                    .any(|e| matches!(e, HistoryEntry::Finished { .. }));
                let answers = results.get(id).map(Vec::as_slice).unwrap_or_default();
                let fits = |r: &ExecutionResult| {
                    Some(r) == expected.as_ref()
                        || (cancellable
                            && matches!(r, ExecutionResult::ExecutionError(e)
                                if e.kind == ExecutionErrorKind::Cancelled))
                };
                match answers {
                    [one] if finished && fits(one) => {}
                    _ => add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} (finished: {finished}) has results {answers:?}; expected one {expected:?}"
                        ),
                    ),
                }
                let told = finished_told.get(id).copied().unwrap_or(0);
                if told != usize::from(finished) {
                    add(
                        Invariant::ScheduleRuns,
                        format!(
                            "`{name}`: the tick execution {id} told its schedule it finished {told} times"
                        ),
                    );
                }
            }
        }

        // The end the client asked for was applied, and the schedule kept up until then.
        let (Some(end), true) = (sched.end, settled) else {
            continue;
        };
        let Some((chain, deleted_at)) = segments.last() else {
            continue;
        };
        let last = chain.last().copied();
        let before_end = if end.deleted {
            match deleted_at {
                None => {
                    add(
                        Invariant::ScheduleState,
                        format!(
                            "`{name}`: deleted at +{}ms, yet its last committed state is {last:?}",
                            (end.sent_at - w.start).num_milliseconds()
                        ),
                    );
                    continue;
                }
                Some(at) => last.map(|s| (s, *at)),
            }
        } else {
            if deleted_at.is_some() || last.is_none_or(|s| s.status != Status::Paused) {
                add(
                    Invariant::ScheduleState,
                    format!(
                        "`{name}`: paused at +{}ms, yet its last committed state is {last:?} (deleted: {deleted_at:?})",
                        (end.sent_at - w.start).num_milliseconds()
                    ),
                );
                continue;
            }
            // The last pause is the end's.
            chain
                .windows(2)
                .rev()
                .find(|p| p[0].status == Status::Active && p[1].status == Status::Paused)
                .map(|p| (p[0], p[1].updated_at))
        };
        if end.was_paused {
            continue;
        }
        if let Some((state, applied)) = before_end
            && state.status == Status::Active
            && state
                .next_tick
                .is_some_and(|t| t <= applied - chrono::Duration::milliseconds(SCHEDULE_SLACK_MS))
        {
            add(
                Invariant::ScheduleLiveness,
                format!(
                    "`{name}`: its end was applied at +{}ms, but it had ticked only up to {:?} (next tick +{}ms): its partition fell behind after the faults stopped",
                    (applied - w.start).num_milliseconds(),
                    state.last_tick.map(|t| (t - w.start).num_milliseconds()),
                    state
                        .next_tick
                        .map_or(0, |t| (t - w.start).num_milliseconds())
                ),
            );
        }
    }
}
