//! Pauses (`Faults::pause_resume`), over each execution's committed history and the requests
//! clients sent ([`PauseSend`]):
//!
//! - `pause`: between a `Paused` entry and the next `Resumed`, the execution takes no step —
//!   no `Event` entry (the run's events are the only way its code acts: a child submitted, an
//!   activity requested, a delay asked, a result returned all come with one) — and finishes
//!   only cancelled (a termination, or a cancellation before its start) or timed out by its
//!   deadline; a cancellation journalled while paused resumes it (a termination finishes it)
//!   in the same step; no `Resumed` at or past its deadline (it times out instead); once a
//!   settled run ends, nothing is left paused.
//! - `pause-requests`: `Paused` and `Resumed` alternate, never after `Finished`; each
//!   `Paused` / `Resumed` is a request's of that execution (its reason), journalled once, in
//!   the order of the requests on the partition; a `Resumed` that is no request's is a
//!   cancellation's, with a `CancelRequested` since the pause. A request is dead-lettered
//!   only as the rules say: `refused` for an execution whose history finished, as unknown
//!   only if the client had not seen its `Created` (and always for an id nobody submitted);
//!   one sent after the client saw its `Finished` is refused. In a settled run, a pause
//!   neither journalled nor dead-lettered found its execution paused by an earlier request,
//!   and a resume read while its execution was surely paused (paused by an earlier request,
//!   and nothing between that could have ended it) was journalled.
//!
//! And the tally of a run ([`PauseCounts`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ExecutionErrorKind, ExecutionId, ExecutionResult};
use crate::records::{DlqReason, HistoryEntry, PauseAction};
use crate::sim::cluster::{Payload, Topic};
use crate::sim::invariant::Invariant;
use crate::sim::sent::{PauseSeen, PauseSend};
use crate::sim::world::World;

use super::{Logged, describe};

/// The start of the reason of a `Resumed` a cancellation of a paused execution appends.
const CANCEL_RESUME: &str = "to handle its cancellation";

/// Pauses and resumes: see the module docs.
pub(super) fn check_pauses(
    add: &mut impl FnMut(Invariant, String),
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    sends: &[PauseSend],
    settled: bool,
) {
    let (violations, _) = analyse(w, logs, sends, settled);
    for (invariant, detail) in violations {
        add(invariant, detail);
    }
}

/// What the pauses and resumes of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PauseCounts {
    /// Pause requests sent (an id nobody submitted included).
    pub pauses_sent: u64,
    pub resumes_sent: u64,
    /// `Paused` entries journalled.
    pub paused: u64,
    /// `Resumed` entries of resume requests.
    pub resumed: u64,
    /// `Resumed` entries of cancellations of paused executions.
    pub resumed_to_cancel: u64,
    /// Requests dead-lettered: refused (the execution had finished)…
    pub refused: u64,
    /// …or for an execution that does not exist (not created yet, or never submitted).
    pub unknown: u64,
    /// Requests neither journalled nor dead-lettered (a pause of a paused execution, a resume
    /// of one not paused).
    pub ignored: u64,
    /// Answers and events journalled while their execution was paused.
    pub journalled_while_paused: u64,
    /// Executions that finished while paused (terminated, or past their deadline).
    pub finished_while_paused: u64,
    /// Pauses for parked activities their executions no longer waited for: the activity
    /// cancelled instead (among `ignored`).
    pub parked_cancelled: u64,
}

impl PauseCounts {
    pub fn of(w: &World, sends: &[PauseSend]) -> Self {
        let logs = super::committed_histories(w);
        analyse(w, &logs, sends, false).1
    }
}

impl std::ops::AddAssign for PauseCounts {
    fn add_assign(&mut self, o: Self) {
        self.pauses_sent += o.pauses_sent;
        self.resumes_sent += o.resumes_sent;
        self.paused += o.paused;
        self.resumed += o.resumed;
        self.resumed_to_cancel += o.resumed_to_cancel;
        self.refused += o.refused;
        self.unknown += o.unknown;
        self.ignored += o.ignored;
        self.journalled_while_paused += o.journalled_while_paused;
        self.finished_while_paused += o.finished_while_paused;
        self.parked_cancelled += o.parked_cancelled;
    }
}

/// What, of an execution's history, changes whether it is paused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Item {
    /// A `Paused` or `Resumed` entry of the request at this offset of `weir.responses`.
    Request(PauseAction, i64),
    /// A `Resumed` of a cancellation, or `Finished`: no longer paused.
    Ended,
}

fn verb(action: PauseAction) -> &'static str {
    match action {
        PauseAction::Pause => "pause",
        PauseAction::Resume => "resume",
    }
}

/// Whether `result` ends a paused execution as the rules allow: a cancellation (terminated,
/// or before its start) or a time-out by its deadline.
fn ends_paused(result: &ExecutionResult) -> bool {
    matches!(result, ExecutionResult::ExecutionError(e)
        if matches!(e.kind, ExecutionErrorKind::Cancelled | ExecutionErrorKind::TimedOut))
}

/// The violations and the tally (`settled`: the run settled, so every request was read).
fn analyse(
    w: &World,
    logs: &BTreeMap<ExecutionId, Vec<Logged<'_>>>,
    sends: &[PauseSend],
    settled: bool,
) -> (Vec<(Invariant, String)>, PauseCounts) {
    let mut out: Vec<(Invariant, String)> = Vec::new();
    let mut counts = PauseCounts::default();
    // The activities cancelled by a committed record on a route topic.
    let cancelled: std::collections::BTreeSet<&ExecutionId> = Topic::ROUTES
        .into_iter()
        .flat_map(|t| w.cluster.committed_records(t))
        .filter_map(|(_, r)| match &r.payload {
            Some(Payload::ActivityCancel(c)) => Some(&c.execution_id),
            _ => None,
        })
        .collect();
    // By reason and execution: a batch's requests share its reason (`batch <id>: …`).
    let by_reason: BTreeMap<(&str, &ExecutionId), &PauseSend> = sends
        .iter()
        .map(|s| ((s.reason.as_str(), &s.execution_id), s))
        .collect();
    // The DLQ copies of records of `weir.responses`, by (partition, offset).
    let mut dead: BTreeMap<(i32, i64), Vec<DlqReason>> = BTreeMap::new();
    for (_, r) in w.cluster.committed_records(Topic::Dlq) {
        if let Some(Payload::Dlq(e)) = &r.payload
            && e.original_topic == Topic::Responses.name()
        {
            dead.entry((e.original_partition, e.original_offset))
                .or_default()
                .push(e.reason);
        }
    }
    let mut journalled: BTreeSet<(&str, &ExecutionId)> = BTreeSet::new();
    let mut items: BTreeMap<&ExecutionId, Vec<Item>> = BTreeMap::new();
    let mut finished: BTreeSet<&ExecutionId> = BTreeSet::new();

    for (id, entries) in logs {
        // The first record of each seq, as a reader folding the log takes it.
        let mut firsts: BTreeMap<u64, &Logged<'_>> = BTreeMap::new();
        for e in entries {
            firsts.entry(e.record.seq).or_insert(e);
        }
        let its = items.entry(id).or_default();
        let deadline = match firsts.values().next().map(|e| &e.record.entry) {
            Some(HistoryEntry::Created(c)) => c.deadline,
            _ => None,
        };
        let mut paused: Option<(u64, &str)> = None;
        let mut cancelled_since = false;
        // A `CancelRequested` while paused, at this seq: resumed (or finished) in its step.
        let mut cancel_while_paused: Option<u64> = None;
        let mut ended = false;
        // The last request journalled: its offset and the seq of its entry.
        let mut last: Option<(i64, u64)> = None;
        for e in firsts.values() {
            let seq = e.record.seq;
            let entry = &e.record.entry;
            if let Some(cancelled) = cancel_while_paused {
                let resumes = match entry {
                    HistoryEntry::Resumed { reason } => reason.starts_with(CANCEL_RESUME),
                    HistoryEntry::Finished { .. } => true,
                    _ => false,
                };
                if resumes {
                    cancel_while_paused = None;
                } else if !matches!(entry, HistoryEntry::ResponseAppended(_)) {
                    out.push((
                        Invariant::Pause,
                        format!(
                            "{id}: CancelRequested at seq {cancelled} while paused, then {} at \
                             seq {seq}: a cancellation resumes a paused execution (a \
                             termination finishes it) in the step that journals it",
                            describe(entry)
                        ),
                    ));
                    cancel_while_paused = None;
                }
            }
            let request = match entry {
                HistoryEntry::Paused { reason } => Some((PauseAction::Pause, reason)),
                HistoryEntry::Resumed { reason } if !reason.starts_with(CANCEL_RESUME) => {
                    Some((PauseAction::Resume, reason))
                }
                _ => None,
            };
            if let Some((action, reason)) = request {
                match by_reason.get(&(reason.as_str(), id)) {
                    Some(s) if s.execution_id == *id && s.action == action => {
                        if !journalled.insert((&s.reason, &s.execution_id)) {
                            out.push((
                                Invariant::PauseRequests,
                                format!(
                                    "{id}: {} at seq {seq}: its {} request \
                                     (responses/{}@{}) is journalled twice",
                                    describe(entry),
                                    verb(action),
                                    s.at.0,
                                    s.at.1
                                ),
                            ));
                        }
                        if let Some((offset, before)) = last
                            && offset >= s.at.1
                        {
                            out.push((
                                Invariant::PauseRequests,
                                format!(
                                    "{id}: {} at seq {seq} is the request at responses/{}@{}, \
                                     journalled after the one at offset {offset} (seq {before})",
                                    describe(entry),
                                    s.at.0,
                                    s.at.1
                                ),
                            ));
                        }
                        last = Some((s.at.1, seq));
                        its.push(Item::Request(action, s.at.1));
                    }
                    _ => out.push((
                        Invariant::PauseRequests,
                        format!(
                            "{id}: {} at seq {seq}, which no {} request of it asked for",
                            describe(entry),
                            verb(action)
                        ),
                    )),
                }
            }
            match entry {
                HistoryEntry::Paused { reason } => {
                    counts.paused += 1;
                    if ended {
                        out.push((
                            Invariant::PauseRequests,
                            format!("{id}: {} at seq {seq}, after its Finished", describe(entry)),
                        ));
                    }
                    if let Some((since, _)) = paused {
                        out.push((
                            Invariant::PauseRequests,
                            format!(
                                "{id}: {} at seq {seq}, paused already since seq {since}",
                                describe(entry)
                            ),
                        ));
                    }
                    paused = Some((seq, reason));
                    cancelled_since = false;
                }
                HistoryEntry::Resumed { reason } => {
                    if ended {
                        out.push((
                            Invariant::PauseRequests,
                            format!("{id}: {} at seq {seq}, after its Finished", describe(entry)),
                        ));
                    }
                    if paused.is_none() {
                        out.push((
                            Invariant::PauseRequests,
                            format!("{id}: {} at seq {seq}, not paused", describe(entry)),
                        ));
                    }
                    if let (Some(deadline), Some(at)) = (deadline, e.record.at)
                        && at >= deadline
                    {
                        out.push((
                            Invariant::Pause,
                            format!(
                                "{id}: {} at seq {seq} at +{}ms, at or past its deadline +{}ms: \
                                 a paused execution times out at its deadline",
                                describe(entry),
                                (at - w.start).num_milliseconds(),
                                (deadline - w.start).num_milliseconds()
                            ),
                        ));
                    }
                    if reason.starts_with(CANCEL_RESUME) {
                        counts.resumed_to_cancel += 1;
                        its.push(Item::Ended);
                        if !cancelled_since {
                            out.push((
                                Invariant::PauseRequests,
                                format!(
                                    "{id}: {} at seq {seq}, with no CancelRequested since its \
                                     pause",
                                    describe(entry)
                                ),
                            ));
                        }
                    } else {
                        counts.resumed += 1;
                    }
                    paused = None;
                }
                HistoryEntry::CancelRequested { .. } => {
                    cancelled_since = true;
                    if paused.is_some() {
                        cancel_while_paused = Some(seq);
                    }
                }
                HistoryEntry::Event { .. } => {
                    if let Some((since, why)) = paused {
                        out.push((
                            Invariant::Pause,
                            format!(
                                "{id}: {} at seq {seq}, while paused since seq {since} ({why})",
                                describe(entry)
                            ),
                        ));
                    }
                }
                HistoryEntry::ResponseAppended(_) | HistoryEntry::EventReceived(_) => {
                    if paused.is_some() {
                        counts.journalled_while_paused += 1;
                    }
                }
                HistoryEntry::Finished { result, .. } => {
                    ended = true;
                    finished.insert(id);
                    its.push(Item::Ended);
                    if let Some((since, why)) = paused.take() {
                        counts.finished_while_paused += 1;
                        if !ends_paused(result) {
                            out.push((
                                Invariant::Pause,
                                format!(
                                    "{id}: {} at seq {seq}, while paused since seq {since} \
                                     ({why}): only a termination or its deadline ends a paused \
                                     execution",
                                    describe(entry)
                                ),
                            ));
                        }
                    }
                }
                HistoryEntry::Created(_)
                | HistoryEntry::Upgraded { .. }
                | HistoryEntry::Reset { .. }
                | HistoryEntry::SlotGranted { .. } => {}
            }
        }
        if let Some(cancelled) = cancel_while_paused {
            out.push((
                Invariant::Pause,
                format!(
                    "{id}: CancelRequested at seq {cancelled} while paused, and nothing after it: \
                     a cancellation resumes a paused execution (a termination finishes it) in \
                     the step that journals it"
                ),
            ));
        }
        if settled && let Some((since, why)) = paused {
            out.push((
                Invariant::Pause,
                format!(
                    "{id}: paused since seq {since} ({why}) when the run settled: every pause \
                     was followed by a resume"
                ),
            ));
        }
    }

    for s in sends {
        let id = &s.execution_id;
        let verb = verb(s.action);
        match s.action {
            PauseAction::Pause => counts.pauses_sent += 1,
            PauseAction::Resume => counts.resumes_sent += 1,
        }
        let copies = dead.get(&s.at).map(Vec::as_slice).unwrap_or_default();
        let taken = journalled.contains(&(s.reason.as_str(), id));
        let (p, o) = s.at;
        for reason in copies {
            match reason {
                DlqReason::Refused => {
                    counts.refused += 1;
                    if !finished.contains(id) {
                        out.push((
                            Invariant::PauseRequests,
                            format!(
                                "{id}: its {verb} (responses/{p}@{o}) was refused, yet its \
                                 history has no Finished"
                            ),
                        ));
                    }
                }
                DlqReason::Other => {
                    counts.unknown += 1;
                    if s.seen != PauseSeen::Nothing {
                        out.push((
                            Invariant::PauseRequests,
                            format!(
                                "{id}: its {verb} (responses/{p}@{o}) was dead-lettered as for \
                                 an execution that does not exist, though its Created was \
                                 committed before it was sent"
                            ),
                        ));
                    }
                }
                other => out.push((
                    Invariant::PauseRequests,
                    format!(
                        "{id}: its {verb} (responses/{p}@{o}) was dead-lettered `{}`",
                        other.symbol()
                    ),
                )),
            }
        }
        if taken && !copies.is_empty() {
            out.push((
                Invariant::PauseRequests,
                format!("{id}: its {verb} (responses/{p}@{o}) was journalled and dead-lettered"),
            ));
        }
        if !taken && copies.is_empty() {
            counts.ignored += 1;
        }
        if !settled {
            continue;
        }
        if s.stray && (copies != [DlqReason::Other] || logs.contains_key(id)) {
            out.push((
                Invariant::PauseRequests,
                format!(
                    "{id}: a {verb} of an id nobody submitted (responses/{p}@{o}) was \
                     dead-lettered {copies:?}{}; once, `other`, and nothing else",
                    if logs.contains_key(id) {
                        ", and it has a history"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if s.seen == PauseSeen::Finished && copies != [DlqReason::Refused] {
            out.push((
                Invariant::PauseRequests,
                format!(
                    "{id}: a {verb} sent after its Finished was committed (responses/{p}@{o}) \
                     was dead-lettered {copies:?}{}; once, `refused`",
                    if taken { " and journalled" } else { "" }
                ),
            ));
        }
        if taken || !copies.is_empty() || s.stray {
            continue;
        }
        if s.parked.as_ref().is_some_and(|a| cancelled.contains(a)) {
            // A parked activity's pause, taken by an execution that no longer waited for it:
            // answered by cancelling the activity (committed). Else it was ignored as any
            // pause, which what follows checks.
            counts.parked_cancelled += 1;
            continue;
        }
        // Ignored: its owner read it while the execution was paused (a pause), or was not
        // (a resume). The requests journalled before it (their offsets are lower) tell.
        let its = items.get(id).map(Vec::as_slice).unwrap_or_default();
        let before = its
            .iter()
            .rposition(|i| matches!(i, Item::Request(_, at) if *at < o));
        match s.action {
            PauseAction::Pause if s.seen == PauseSeen::Running => {
                let paused_before =
                    before.is_some_and(|i| matches!(its[i], Item::Request(PauseAction::Pause, _)));
                if !paused_before {
                    out.push((
                        Invariant::PauseRequests,
                        format!(
                            "{id}: its pause (responses/{p}@{o}) was neither journalled nor \
                             dead-lettered (ignored: paused already), yet the last request of \
                             it journalled before it was no pause"
                        ),
                    ));
                }
            }
            PauseAction::Resume => {
                // Paused by an earlier request, and nothing up to the next request's entry (a
                // later one's) could have ended the pause: it was paused when read.
                // (The requests journalled after it are later ones: their offsets are higher.)
                let surely_paused = before.is_some_and(|i| {
                    matches!(its[i], Item::Request(PauseAction::Pause, _))
                        && its.get(i + 1) != Some(&Item::Ended)
                });
                if surely_paused {
                    out.push((
                        Invariant::PauseRequests,
                        format!(
                            "{id}: its resume (responses/{p}@{o}) was read while it was \
                             paused (and nothing had ended the pause), yet neither journalled \
                             nor dead-lettered"
                        ),
                    ));
                }
            }
            PauseAction::Pause => {}
        }
    }
    (out, counts)
}
