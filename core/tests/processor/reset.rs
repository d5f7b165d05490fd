//! Resetting an execution (issue 35 item 2): a new execution from an execution's history up
//! to a point.

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use serde_json::json;
use weir_core::model::{ExecutionId, ExecutionResult};
use weir_core::processor::{Batch, Body, Effect, Input, Processor};
use weir_core::records::{
    DlqReason, HistoryEntry, HistoryRecord, ResetPoint, ResetRequest, ResetStart, ResetThen,
};
use weir_core::rows::ExecutionState;
use weir_core::sim::exec::block_on;
use weir_core::sim::{SimRunner, Workflow};

type History = Vec<(HistoryRecord, DateTime<Utc>)>;

fn reset_input(id: &ExecutionId, to_seq: u64, new: &ExecutionId, then: ResetThen) -> Input {
    reset_to(id, ResetPoint::Seq(to_seq), new, then)
}

fn reset_to(id: &ExecutionId, to: ResetPoint, new: &ExecutionId, then: ResetThen) -> Input {
    input_of(
        id,
        Body::Reset(ResetRequest {
            execution_id: id.clone(),
            to,
            new_execution_id: new.clone(),
            then,
            reason: "a bad deploy".into(),
            requested_at: now(),
        }),
    )
}

/// Steps `input` alone in a batch as the driver does: the history [`Processor::reads`] asks
/// for is read from `history` (what the store holds) first.
fn step_reading(
    processor: &mut Processor<SimRunner>,
    input: Input,
    history: &History,
) -> Vec<Effect> {
    let mut batch = Batch::new(now());
    if let Some((id, _)) = processor.reads(&batch, &input) {
        let stored = history
            .iter()
            .filter(|(r, _)| r.execution_id == id)
            .cloned()
            .collect::<Vec<_>>();
        processor.provide(id, (!stored.is_empty()).then_some(stored));
    }
    block_on(processor.step(&mut batch, input)).expect("no processor error");
    batch.effects
}

fn requests(effects: &[Effect]) -> Vec<(ExecutionId, serde_json::Value)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestActivity(r) => Some((r.execution_id.clone(), r.params.clone())),
            _ => None,
        })
        .collect()
}

fn dead_letters(effects: &[Effect]) -> Vec<(DlqReason, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeadLetter { reason, error, .. } => Some((*reason, error.clone())),
            _ => None,
        })
        .collect()
}

fn reset_start(effects: &[Effect]) -> Option<ResetStart> {
    effects.iter().find_map(|e| match e {
        Effect::StartReset(start) => Some(start.clone()),
        _ => None,
    })
}

/// `Seq [2, 5]` run to its end: two activities one after the other (answered 6 and 7), its
/// history as the store holds it, and the seq of the answer to the first.
fn finished_seq(processor: &mut Processor<SimRunner>, id: &ExecutionId) -> (History, u64) {
    let created = step(
        processor,
        submission_input(id, Workflow::Seq, json!([2, 5])),
    );
    let mut history = stored(id, &created, now());
    let first = requests(&created);
    assert_eq!(first.len(), 1, "{created:?}");
    let answered = step(
        processor,
        answer(id, &first[0].0, ExecutionResult::Ok(json!(6))),
    );
    let first_answer = appended(&answered)
        .iter()
        .find(|(_, e)| matches!(e, HistoryEntry::ResponseAppended(_)))
        .map(|(seq, _)| *seq)
        .expect("the first answer journalled");
    history.extend(stored(id, &answered, now()));
    let second = requests(&answered);
    assert_eq!(second.len(), 1, "{answered:?}");
    let done = step(
        processor,
        answer(id, &second[0].0, ExecutionResult::Ok(json!(7))),
    );
    history.extend(stored(id, &done, now()));
    assert_eq!(
        processor.row(id).map(|r| r.state),
        Some(ExecutionState::Finished)
    );
    (history, first_answer)
}

/// A finished execution reset to the point after its first activity's answer: its history
/// gets the link (`Reset`, after `Finished`), and the new execution is created from the kept
/// entries, its ids its own: it does not ask for the first activity again, asks for the
/// second under its own id, and finishes with what that answers.
#[test]
fn a_reset_starts_a_new_execution_from_the_history_up_to_its_point() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let (history, point) = finished_seq(&mut processor, &id);
    let new = ExecutionId::top_level(ulid::Ulid::new());
    // The points, in one pass, are the seqs the cut allows one by one: the first answer's
    // among them, the finish not.
    let points = weir_core::reset::points(&id, &history);
    let one_by_one: Vec<u64> = (0..history.len() as u64)
        .filter(|seq| weir_core::reset::cut(&id, &history, *seq, &new).is_ok())
        .collect();
    assert_eq!(points, one_by_one);
    assert!(
        points.contains(&point) && !points.contains(&(history.len() as u64 - 1)),
        "{points:?}"
    );

    let reset = step_reading(
        &mut processor,
        reset_input(&id, point, &new, ResetThen::Cancel),
        &history,
    );
    assert!(dead_letters(&reset).is_empty(), "{reset:?}");
    let linked = appended(&reset);
    assert!(
        matches!(linked.as_slice(), [(seq, HistoryEntry::Reset { new_execution_id, to_seq, .. })]
            if *seq == history.len() as u64 && *new_execution_id == new && *to_seq == point),
        "only the link, after Finished (a finished execution is not cancelled): {reset:?}"
    );
    let start = reset_start(&reset).expect("the new execution's start");
    assert_eq!(start.submission.execution_id, new);
    assert_eq!(start.reset_of.execution_id, id);
    assert_eq!(start.reset_of.seq, point);
    let kept = history[1..=point as usize]
        .iter()
        .filter(|(r, _)| {
            matches!(
                r.entry,
                HistoryEntry::Event { .. } | HistoryEntry::ResponseAppended(_)
            )
        })
        .count();
    assert_eq!(start.entries.len(), kept, "{:?}", start.entries);
    let old_root = id.root().to_string();
    assert!(
        start
            .entries
            .iter()
            .all(|e| !format!("{e:?}").contains(&old_root)),
        "no id of the old execution in the new one's entries: {:?}",
        start.entries
    );

    let again = step_reading(
        &mut processor,
        reset_input(&id, point, &new, ResetThen::Cancel),
        &history,
    );
    assert!(
        again.is_empty(),
        "the same request again changes nothing: {again:?}"
    );

    let created = step(
        &mut processor,
        input_of(&new, Body::ResetStart(start.clone())),
    );
    let entries = appended(&created);
    assert!(
        matches!(&entries[0], (0, HistoryEntry::Created(c)) if c.reset_of.as_ref().is_some_and(|r| r.execution_id == id && r.seq == point)),
        "{entries:?}"
    );
    assert_eq!(
        &entries[1..=start.entries.len()]
            .iter()
            .map(|(_, e)| e.clone())
            .collect::<Vec<_>>(),
        &start.entries
    );
    let asked = requests(&created);
    assert_eq!(
        asked.len(),
        1,
        "only the second activity is asked for: {created:?}"
    );
    assert!(asked[0].0.is_child_of(&new), "{asked:?}");
    assert_eq!(
        asked[0].1,
        json!([6]),
        "its params come from the kept answer: {asked:?}"
    );

    let again = step(&mut processor, input_of(&new, Body::ResetStart(start)));
    assert!(
        appended(&again).is_empty() && requests(&again).is_empty(),
        "a start read twice creates nothing: {again:?}"
    );

    // Seq sums its answers: the kept first answer (6) and the new second one (70).
    let done = step(
        &mut processor,
        answer(&new, &asked[0].0, ExecutionResult::Ok(json!(70))),
    );
    let finished = appended(&done);
    assert!(
        matches!(finished.last(), Some((_, HistoryEntry::Finished { result: ExecutionResult::Ok(v), .. })) if *v == json!(76)),
        "{done:?}"
    );
}

/// A running execution reset with `then = cancel`: the link, then its cancellation.
#[test]
fn a_reset_that_cancels_the_old_execution_appends_the_link_then_the_cancellation() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let history = stored(&id, &created, now());
    let new = ExecutionId::top_level(ulid::Ulid::new());
    let reset = step_reading(
        &mut processor,
        reset_input(&id, 0, &new, ResetThen::Cancel),
        &history,
    );
    let kinds: Vec<&str> = appended(&reset)
        .iter()
        .map(|(_, e)| match e {
            HistoryEntry::Reset { .. } => "reset",
            HistoryEntry::CancelRequested { .. } => "cancel-requested",
            HistoryEntry::ResponseAppended(_) => "response",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds.first(), Some(&"reset"), "{reset:?}");
    assert!(kinds.contains(&"cancel-requested"), "{reset:?}");
    let start = reset_start(&reset).expect("the start");
    assert!(
        start.entries.is_empty(),
        "a reset to seq 0 keeps only Created"
    );
}

/// Bad input changes nothing and is dead-lettered with why.
#[test]
fn a_reset_the_history_cannot_take_is_refused_with_why() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    );
    let history = stored(&id, &created, now());
    let last = history.len() as u64 - 1;
    let new = ExecutionId::top_level(ulid::Ulid::new());

    let cases: Vec<(Input, DlqReason, &str)> = vec![
        // The last entry is the first activity's request: it waits for it.
        (
            reset_input(&id, last, &new, ResetThen::Keep),
            DlqReason::Refused,
            "waits for",
        ),
        (
            reset_input(&id, last + 5, &new, ResetThen::Keep),
            DlqReason::Refused,
            "outside the history",
        ),
        (
            reset_input(&id, 0, &id, ResetThen::Keep),
            DlqReason::Refused,
            "top-level id other than",
        ),
        (
            reset_input(
                &ExecutionId::top_level(ulid::Ulid::new()),
                0,
                &new,
                ResetThen::Keep,
            ),
            DlqReason::Other,
            "does not exist",
        ),
    ];
    for (input, reason, says) in cases {
        let effects = step_reading(&mut processor, input, &history);
        let letters = dead_letters(&effects);
        assert!(
            matches!(letters.as_slice(), [(r, e)] if *r == reason && e.contains(says)),
            "expected {reason:?} saying {says:?}: {effects:?}"
        );
        assert!(
            appended(&effects).is_empty() && reset_start(&effects).is_none(),
            "{effects:?}"
        );
    }
}

/// A request taken by a batch that changed its execution cannot read that batch's entries
/// from the store: it is sent back, and changes nothing now.
#[test]
fn a_reset_in_a_batch_that_changed_its_execution_is_sent_back() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let new = ExecutionId::top_level(ulid::Ulid::new());
    let mut batch = Batch::new(now());
    block_on(processor.step(
        &mut batch,
        submission_input(&id, Workflow::Seq, json!([2, 5])),
    ))
    .expect("created");
    let input = reset_input(&id, 0, &new, ResetThen::Keep);
    assert_eq!(
        processor.reads(&batch, &input),
        None,
        "nothing to read: the store lacks this batch"
    );
    let from = batch.effects.len();
    block_on(processor.step(&mut batch, input)).expect("stepped");
    let effects = &batch.effects[from..];
    assert!(
        matches!(effects, [Effect::ResendReset(r)] if r.execution_id == id && r.new_execution_id == new),
        "{effects:?}"
    );
}

/// A child execution cannot be reset: its parent awaits it by its id.
#[test]
fn a_child_execution_cannot_be_reset() {
    let mut processor = processor(1 << 20);
    let parent = ExecutionId::top_level(ulid::Ulid::new());
    let created = step(
        &mut processor,
        submission_input(&parent, Workflow::Parent, json!([1, 5])),
    );
    let child = created
        .iter()
        .find_map(|e| match e {
            Effect::Submit(s) => Some(s.clone()),
            _ => None,
        })
        .expect("the child's submission");
    let child_created = step(
        &mut processor,
        input_of(&child.execution_id, Body::Submission(child.clone())),
    );
    let history = stored(&child.execution_id, &child_created, now());
    let new = ExecutionId::top_level(ulid::Ulid::new());
    let effects = step_reading(
        &mut processor,
        reset_input(&child.execution_id, 0, &new, ResetThen::Keep),
        &history,
    );
    assert!(
        matches!(dead_letters(&effects).as_slice(), [(DlqReason::Refused, e)] if e.contains("child execution")),
        "{effects:?}"
    );
}

/// A reset to the latest point (what a batch reset sends) cuts where the owner's history
/// last allows: for a finished `Seq`, right before the finish (after the second answer),
/// whatever the client read; the new execution keeps both answers and asks for nothing.
#[test]
fn a_reset_to_the_latest_point_cuts_at_the_last_point_the_rule_allows() {
    let mut processor = processor(1 << 20);
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let (history, _) = finished_seq(&mut processor, &id);
    let latest = *weir_core::reset::points(&id, &history)
        .last()
        .expect("a point");
    assert_eq!(latest, history.len() as u64 - 2, "right before Finished");
    let new = ExecutionId::top_level(ulid::Ulid::new());
    let reset = step_reading(
        &mut processor,
        reset_to(&id, ResetPoint::Latest, &new, ResetThen::Keep),
        &history,
    );
    assert!(dead_letters(&reset).is_empty(), "{reset:?}");
    assert!(
        matches!(appended(&reset).as_slice(), [(_, HistoryEntry::Reset { to_seq, .. })] if *to_seq == latest),
        "{reset:?}"
    );
    let start = reset_start(&reset).expect("the new execution's start");
    assert_eq!(start.reset_of.seq, latest);
    let created = step(&mut processor, input_of(&new, Body::ResetStart(start)));
    assert!(requests(&created).is_empty(), "{created:?}");
}
