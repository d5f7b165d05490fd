//! The store conformance suite against the real CQL store (Cassandra of the local stack), in a
//! keyspace of its own created by the same code path as `weir topology apply`. The in-memory
//! store runs the same suite in the weir crate's unit tests.

use std::sync::Arc;

use weir::store::schema::{self, TABLES_CQL};
use weir::store::{CqlStore, Retention, conformance, connect};
use weir_e2e::{cql_config, unique_name};

#[tokio::test]
async fn the_cql_store_passes_the_store_conformance_suite() {
    let keyspace = unique_name("store");
    let session = connect(&cql_config(&keyspace)).await.expect("connect");
    let tables = schema::parse_tables(TABLES_CQL).expect("schema");
    schema::apply(&session, &keyspace, 1, &tables, true)
        .await
        .expect("apply schema");
    let store = CqlStore::new(Arc::new(session), &keyspace)
        .await
        .expect("prepare statements");
    conformance::run_all(&store).await;
    // The same keyspace, through a store that expires finished executions.
    let retention = Retention::after(chrono::TimeDelta::seconds(
        conformance::EXPIRY_CHECK_RETENTION_SECS,
    ))
    .expect("retention");
    conformance::finished_executions_expire(&store.with_retention(retention)).await;
}
