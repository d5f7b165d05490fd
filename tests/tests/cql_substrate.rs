//! The CQL features Weir's store rests on, proven with the `scylla` driver against the real
//! Cassandra of the local stack: prepared statements, batches, paging and lightweight
//! transactions (compare-and-set).

use futures::TryStreamExt;
use scylla::client::session::Session;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::statement::batch::Batch;
use weir_e2e::scratch_keyspace;

async fn session_with_keyspace() -> (Session, String) {
    let (session, keyspace) = scratch_keyspace("cql").await;
    session
        .query_unpaged(
            format!(
                "CREATE TABLE {keyspace}.events (id text, seq bigint, body text, \
                 PRIMARY KEY ((id), seq))"
            ),
            (),
        )
        .await
        .expect("create table");
    (session, keyspace)
}

#[tokio::test]
async fn prepared_statements_batches_and_paging() {
    let (session, ks) = session_with_keyspace().await;
    let insert = session
        .prepare(format!(
            "INSERT INTO {ks}.events (id, seq, body) VALUES (?, ?, ?)"
        ))
        .await
        .expect("prepare insert");
    for seq in 0..250_i64 {
        session
            .execute_unpaged(&insert, ("a", seq, format!("event {seq}")))
            .await
            .expect("insert");
    }
    // A logged batch of 50 upserts, 10 of which overwrite rows written above.
    let mut batch = Batch::default();
    let mut values = Vec::new();
    for seq in 240..290_i64 {
        batch.append_statement(insert.clone());
        values.push(("a", seq, format!("batched {seq}")));
    }
    session.batch(&batch, values).await.expect("batch");

    let mut select = session
        .prepare(format!("SELECT seq, body FROM {ks}.events WHERE id = ?"))
        .await
        .expect("prepare select");
    select.set_page_size(100);

    // One page at a time: 290 rows need three pages of at most 100.
    let mut paging_state = PagingState::start();
    let mut pages = Vec::new();
    loop {
        let (result, next) = session
            .execute_single_page(&select, ("a",), paging_state)
            .await
            .expect("page");
        let rows = result.into_rows_result().expect("rows");
        pages.push(rows.rows_num());
        match next {
            PagingStateResponse::HasMorePages { state } => paging_state = state,
            PagingStateResponse::NoMorePages => break,
        }
    }
    assert_eq!(pages.iter().sum::<usize>(), 290, "{pages:?}");
    assert!(
        pages.len() >= 3 && pages.iter().all(|&n| n <= 100),
        "{pages:?}"
    );

    // The same through the driver's pager, in clustering order.
    let rows: Vec<(i64, String)> = session
        .execute_iter(select, ("a",))
        .await
        .expect("pager")
        .rows_stream::<(i64, String)>()
        .expect("typed rows")
        .try_collect()
        .await
        .expect("all rows");
    let seqs: Vec<i64> = rows.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (0..290).collect::<Vec<_>>());
    assert_eq!(rows[239].1, "event 239");
    assert_eq!(rows[240].1, "batched 240");
    assert_eq!(rows[289].1, "batched 289");
}

#[tokio::test]
async fn lightweight_transactions_compare_and_set() {
    let (session, ks) = session_with_keyspace().await;
    let insert = session
        .prepare(format!(
            "INSERT INTO {ks}.events (id, seq, body) VALUES (?, ?, ?) IF NOT EXISTS"
        ))
        .await
        .expect("prepare");
    let applied = |result: scylla::response::query_result::QueryResult| -> (bool, Option<String>) {
        let rows = result.into_rows_result().expect("LWT returns a row");
        let specs: Vec<String> = rows
            .column_specs()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        assert_eq!(specs[0], "[applied]");
        if specs.len() == 1 {
            let (applied,): (bool,) = rows.single_row().expect("one row");
            (applied, None)
        } else {
            // Not applied: the current row comes back beside the flag.
            let body_index = specs.iter().position(|s| s == "body").expect("body column");
            assert_eq!(body_index, 3, "{specs:?}");
            let (applied, _, _, body): (bool, String, i64, String) =
                rows.single_row().expect("one row");
            (applied, Some(body))
        }
    };

    let first = session
        .execute_unpaged(&insert, ("x", 1_i64, "first"))
        .await
        .expect("first insert");
    assert_eq!(applied(first), (true, None));
    let second = session
        .execute_unpaged(&insert, ("x", 1_i64, "second"))
        .await
        .expect("second insert");
    assert_eq!(applied(second), (false, Some("first".to_owned())));

    let cas = session
        .prepare(format!(
            "UPDATE {ks}.events SET body = ? WHERE id = ? AND seq = ? IF body = ?"
        ))
        .await
        .expect("prepare update");
    let stale = session
        .execute_unpaged(&cas, ("third", "x", 1_i64, "second"))
        .await
        .expect("stale update");
    let rows = stale.into_rows_result().expect("rows");
    let (applied_flag, current): (bool, String) = rows.single_row().expect("row");
    assert!(!applied_flag);
    assert_eq!(current, "first");
    let fresh = session
        .execute_unpaged(&cas, ("third", "x", 1_i64, "first"))
        .await
        .expect("fresh update");
    let (applied_flag,): (bool,) = fresh
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("row");
    assert!(applied_flag);

    let (body,): (String,) = session
        .query_unpaged(
            format!("SELECT body FROM {ks}.events WHERE id = 'x' AND seq = 1"),
            (),
        )
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("row");
    assert_eq!(body, "third");
}
