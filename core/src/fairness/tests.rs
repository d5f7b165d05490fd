use super::*;

fn held(records: &[(i64, &str, Option<&str>)]) -> Held<i64> {
    let mut held = Held::default();
    held.resume(0, 0, "").expect("no metadata");
    for &(offset, key, tenant) in records {
        assert!(held.push(0, offset, 10, Some(key), tenant.map(str::to_owned), offset));
    }
    held
}

fn drain(held: &mut Held<i64>) -> Vec<i64> {
    std::iter::from_fn(|| held.pop().map(|(_, _, offset)| offset)).collect()
}

#[test]
fn lanes_take_turns_in_the_order_they_were_first_held() {
    // Tenant a's burst of five, then b's two, then a record without a tenant.
    let mut held = held(&[
        (0, "a0", Some("a")),
        (1, "a1", Some("a")),
        (2, "a2", Some("a")),
        (3, "a3", Some("a")),
        (4, "a4", Some("a")),
        (5, "b0", Some("b")),
        (6, "b1", Some("b")),
        (7, "n0", None),
    ]);
    assert_eq!(held.len(), 8);
    assert_eq!(held.bytes(), 80);
    assert_eq!(drain(&mut held), vec![0, 5, 7, 1, 6, 2, 3, 4]);
    assert!(held.is_empty());
    assert_eq!(held.bytes(), 0);
}

#[test]
fn a_record_of_an_execution_already_held_goes_behind_it_whatever_its_tenant() {
    // A cancel (no tenant) and a duplicate under another tenant, of a held submission of a.
    let mut held = held(&[
        (0, "a0", Some("a")),
        (1, "a1", Some("a")),
        (2, "b0", Some("b")),
        (3, "a1", None),
        (4, "a1", Some("b")),
    ]);
    assert_eq!(drain(&mut held), vec![0, 2, 1, 3, 4]);
}

#[test]
fn the_committed_offset_is_the_lowest_held_with_what_was_taken_beyond_it() {
    let mut held = held(&[
        (0, "a0", Some("a")),
        (1, "a1", Some("a")),
        (2, "b0", Some("b")),
    ]);
    assert_eq!(held.commit_position(0, 3), (0, String::new()));
    assert_eq!(held.pop().map(|(_, o, _)| o), Some(0));
    assert_eq!(held.pop().map(|(_, o, _)| o), Some(2));
    assert_eq!(held.commit_position(0, 3), (1, "wf1;1+1".to_owned()));
    assert_eq!(held.pop().map(|(_, o, _)| o), Some(1));
    assert_eq!(held.commit_position(0, 3), (3, String::new()));
    // A partition nothing was read of commits where it is.
    assert_eq!(held.commit_position(7, 42), (42, String::new()));
}

#[test]
fn records_taken_beyond_the_committed_offset_are_not_taken_again() {
    // The first owner takes 0 and 2 of [0, 1, 2, 3] and commits (1, "wf1;1+1").
    let mut first = held(&[
        (0, "a0", Some("a")),
        (1, "a1", Some("a")),
        (2, "b0", Some("b")),
        (3, "b1", Some("b")),
    ]);
    first.pop();
    first.pop();
    let (offset, metadata) = first.commit_position(0, 4);
    assert_eq!((offset, metadata.as_str()), (1, "wf1;1+1"));
    // The next owner reads from 1 again: 2 is skipped, 1 and 3 are taken.
    let mut next = Held::default();
    next.resume(0, offset, &metadata).expect("our metadata");
    assert!(next.push(0, 1, 10, Some("a1"), Some("a".into()), 1));
    assert!(!next.push(0, 2, 10, Some("b0"), Some("b".into()), 2));
    assert!(next.was_taken(0, 2));
    assert!(next.push(0, 3, 10, Some("b1"), Some("b".into()), 3));
    assert_eq!(drain(&mut next), vec![1, 3]);
    assert_eq!(next.commit_position(0, 4), (4, String::new()));
}

#[test]
fn what_a_former_owner_took_is_committed_again_until_it_is_read_past() {
    // Resumed from (1, "wf1;1+1"): record 2 was taken. A batch before the first poll, and
    // one after reading only record 1, must say so again; once 2 is read past, nothing.
    let mut held: Held<i64> = Held::default();
    held.resume(0, 1, "wf1;1+1").expect("our metadata");
    assert_eq!(held.commit_position(0, 1), (1, "wf1;1+1".to_owned()));
    assert!(held.push(0, 1, 10, Some("a1"), None, 1));
    assert_eq!(held.commit_position(0, 2), (1, "wf1;1+1".to_owned()));
    assert_eq!(drain(&mut held), vec![1]);
    assert_eq!(held.commit_position(0, 2), (2, "wf1;0+1".to_owned()));
    assert!(!held.push(0, 2, 10, Some("b0"), None, 2));
    assert_eq!(held.commit_position(0, 3), (3, String::new()));
}

#[test]
fn metadata_that_is_not_ours_is_reported_and_skips_nothing() {
    let mut held: Held<i64> = Held::default();
    let error = held.resume(0, 5, "something else").expect_err("not ours");
    assert_eq!(error.offset, 5);
    assert!(held.push(0, 5, 1, None, None, 5));
    assert!(held.push(0, 6, 1, None, None, 6));
    assert_eq!(drain(&mut held), vec![5, 6]);
}

#[test]
fn no_more_ranges_than_the_limit_are_opened_the_lowest_held_is_taken_instead() {
    // Tenant a holds the even offsets, b the odd ones, and each take of b past an untaken a
    // opens a range: once the limit is reached, a's lowest is taken instead.
    let count = 4 * MAX_TAKEN_RANGES as i64;
    let mut held: Held<i64> = Held::default();
    held.resume(0, 0, "").expect("none");
    for offset in 0..count {
        let tenant = if offset < count / 2 { "a" } else { "b" };
        held.push(0, offset, 1, None, Some(tenant.into()), offset);
    }
    let mut order = Vec::new();
    while let Some((_, offset, _)) = held.pop() {
        order.push(offset);
        let (_, metadata) = held.commit_position(0, count);
        let ranges = Taken::parse(held.commit_position(0, count).0, &metadata)
            .expect("our metadata")
            .ranges();
        assert!(
            ranges <= MAX_TAKEN_RANGES,
            "{ranges} ranges after {order:?}"
        );
    }
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (0..count).collect::<Vec<_>>(),
        "each record taken once"
    );
    // b's records were taken early (round-robin) until the limit, then in log order.
    assert_eq!(&order[..4], &[0, count / 2, 1, count / 2 + 1]);
}

#[test]
fn the_lane_of_a_record_is_its_submissions_tenant() {
    use crate::model::{ExecutionId, Ffqn};
    use crate::records::Submission;
    let id = ExecutionId::from_digest(&[7; 32]);
    let ffqn: Ffqn = "weir-examples:workflows/workflow.fibo"
        .parse()
        .expect("an ffqn");
    let submission = Submission {
        tenant: Some("acme".into()),
        ..Submission::top_level(&id, ffqn, serde_json::json!([1]), Default::default(), None)
    };
    let record = |body| Input::Record {
        index: 0,
        partition: 0,
        key: Some(id.to_string()),
        size: 1,
        body,
        timestamp: None,
    };
    assert_eq!(
        lane(&record(Ok(Body::Submission(submission)))),
        Some("acme".into())
    );
    assert_eq!(
        lane(&record(Err(crate::processor::Undecodable {
            reason: crate::records::DlqReason::Undecodable,
            error: "bad".into()
        }))),
        None
    );
}
