//! The suite's checks of an execution's history: written in any order and again, read whole
//! however long, and read after a seq (what a live view has not seen yet).

use super::{Store, history_row, new_id};
use crate::store::rows::HistoryRow;
use crate::store::to_store_precision;

pub async fn history_is_ordered_and_idempotent<S: Store>(store: &S) {
    let id = new_id();
    let other = new_id();
    let rows: Vec<HistoryRow> = (0..6).map(|seq| history_row(&id, seq)).collect();
    // Out of order and split over two calls, with another execution in between.
    store
        .append_history(&[rows[3].clone(), rows[0].clone(), history_row(&other, 0)])
        .await
        .expect("append");
    store
        .append_history(&[
            rows[5].clone(),
            rows[1].clone(),
            rows[2].clone(),
            rows[4].clone(),
        ])
        .await
        .expect("append");
    // Re-materialising the same records after a crash changes nothing.
    store.append_history(&rows[1..4]).await.expect("re-append");

    let read = store.history(&id).await.expect("history");
    let expected: Vec<HistoryRow> = rows
        .iter()
        .map(|r| HistoryRow {
            recorded_at: to_store_precision(r.recorded_at),
            ..r.clone()
        })
        .collect();
    assert_eq!(
        read, expected,
        "history of {id}: ordered by seq, no duplicates, ms timestamps"
    );
    assert_eq!(store.history(&other).await.expect("history").len(), 1);
    assert!(store.history(&new_id()).await.expect("history").is_empty());
}

pub async fn long_histories_are_read_whole<S: Store>(store: &S) {
    let id = new_id();
    let rows: Vec<HistoryRow> = (0..2_500).map(|seq| history_row(&id, seq)).collect();
    for chunk in rows.chunks(500) {
        store.append_history(chunk).await.expect("append");
    }
    let read = store.history(&id).await.expect("history");
    assert_eq!(
        read.len(),
        2_500,
        "every row of a history longer than a page"
    );
    assert!(
        read.windows(2).all(|w| w[0].seq + 1 == w[1].seq),
        "in seq order"
    );
}

/// `history_after` (what a live view has not seen yet): the rows past a seq, in seq order, at
/// most `limit` of them — the trait's rule, which a store that reads them otherwise (CQL:
/// `seq > ? LIMIT ?`) must give too, including no rows for a limit of 0 (CQL refuses
/// `LIMIT 0`) and past the end.
pub async fn history_after_reads_what_follows_a_seq<S: Store>(store: &S) {
    let id = new_id();
    let rows: Vec<HistoryRow> = (0..30).map(|seq| history_row(&id, seq)).collect();
    store
        .append_history(&[rows[20..].to_vec(), rows[..20].to_vec()].concat())
        .await
        .expect("append");
    store
        .append_history(&[history_row(&new_id(), 0)])
        .await
        .expect("append another");
    let seqs = |read: Vec<HistoryRow>| read.iter().map(|r| r.seq).collect::<Vec<_>>();
    for (after, limit, expected) in [
        (-1, 10, (0..10).collect::<Vec<i64>>()),
        (9, 100, (10..30).collect()),
        (14, 3, vec![15, 16, 17]),
        (28, 5, vec![29]),
        (29, 5, vec![]),
        (100, 5, vec![]),
        (5, 0, vec![]),
    ] {
        let read = store
            .history_after(&id, after, limit)
            .await
            .unwrap_or_else(|e| panic!("history of {id} after {after}, limit {limit}: {e}"));
        if let Some(row) = read.first() {
            let original = &rows[usize::try_from(row.seq).expect("seq")];
            assert_eq!(
                row,
                &HistoryRow {
                    recorded_at: to_store_precision(original.recorded_at),
                    ..original.clone()
                },
                "a row read after a seq is the row written"
            );
        }
        assert_eq!(seqs(read), expected, "after seq {after}, limit {limit}");
    }
    assert!(
        store
            .history_after(&new_id(), -1, 10)
            .await
            .expect("unknown")
            .is_empty()
    );
}
