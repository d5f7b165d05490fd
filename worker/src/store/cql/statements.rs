//! Every CQL statement of the store, prepared once per store against its keyspace (whose
//! tables `weir topology apply` created from `schemas/cql/`).

use std::sync::Arc;

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

use super::PAGE_SIZE;
use crate::store::StoreError;

/// The prepared statements, by what they do.
pub(super) struct Statements {
    pub(super) insert_history: PreparedStatement,
    pub(super) select_history: PreparedStatement,
    pub(super) select_history_after: PreparedStatement,
    pub(super) insert_execution: PreparedStatement,
    pub(super) select_execution: PreparedStatement,
    pub(super) insert_timer: PreparedStatement,
    pub(super) delete_timer: PreparedStatement,
    pub(super) drop_timer_bucket: PreparedStatement,
    pub(super) select_timers: PreparedStatement,
    pub(super) insert_checkpoint: PreparedStatement,
    pub(super) select_checkpoint: PreparedStatement,
    pub(super) insert_watermark: PreparedStatement,
    pub(super) select_watermark: PreparedStatement,
    pub(super) insert_by_function: PreparedStatement,
    pub(super) insert_by_parent: PreparedStatement,
    pub(super) select_by_function: PreparedStatement,
    pub(super) select_by_parent: PreparedStatement,
    pub(super) select_by_parent_after: PreparedStatement,
    pub(super) insert_function: PreparedStatement,
    pub(super) select_functions: PreparedStatement,
    pub(super) insert_build_chunk: PreparedStatement,
    pub(super) insert_build_header: PreparedStatement,
    pub(super) select_build_header: PreparedStatement,
    pub(super) select_build_chunk: PreparedStatement,
}

impl Statements {
    /// Prepares every statement against `keyspace`.
    pub(super) async fn prepare(
        session: &Arc<Session>,
        keyspace: &str,
    ) -> Result<Self, StoreError> {
        let prepare = |cql: String| {
            let session = Arc::clone(session);
            async move {
                let mut statement =
                    session
                        .prepare(cql.clone())
                        .await
                        .map_err(|e| StoreError::Result {
                            context: format!("prepare `{cql}`"),
                            reason: e.to_string(),
                        })?;
                statement.set_page_size(PAGE_SIZE);
                Ok::<_, StoreError>(statement)
            }
        };
        let ks = keyspace;
        Ok(Statements {
        insert_history: prepare(format!(
            "INSERT INTO {ks}.history (execution_id, seq, kind, record, kafka_partition, \
             kafka_offset, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
        ))
        .await?,
        select_history: prepare(format!(
            "SELECT seq, kind, record, kafka_partition, kafka_offset, recorded_at \
             FROM {ks}.history WHERE execution_id = ?"
        ))
        .await?,
        select_history_after: prepare(format!(
            "SELECT seq, kind, record, kafka_partition, kafka_offset, recorded_at \
             FROM {ks}.history WHERE execution_id = ? AND seq > ? LIMIT ?"
        ))
        .await?,
        insert_execution: prepare(format!(
            "INSERT INTO {ks}.executions (execution_id, ffqn, parent_id, params, state, result, \
             history_version, kafka_partition, created_at, updated_at, finished_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
        ))
        .await?,
        select_execution: prepare(format!(
            "SELECT ffqn, parent_id, params, state, result, history_version, kafka_partition, \
             created_at, updated_at, finished_at FROM {ks}.executions WHERE execution_id = ?"
        ))
        .await?,
        insert_timer: prepare(format!(
            "INSERT INTO {ks}.timers (kafka_partition, time_bucket, due_at, timer_id, \
             execution_id, kind) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ))
        .await?,
        delete_timer: prepare(format!(
            "DELETE FROM {ks}.timers USING TIMESTAMP ? WHERE kafka_partition = ? \
             AND time_bucket = ? \
             AND due_at = ? AND timer_id = ?"
        ))
        .await?,
        drop_timer_bucket: prepare(format!(
            "DELETE FROM {ks}.timers USING TIMESTAMP ? WHERE kafka_partition = ? \
             AND time_bucket = ?"
        ))
        .await?,
        select_timers: prepare(format!(
            "SELECT due_at, timer_id, execution_id, kind FROM {ks}.timers \
             WHERE kafka_partition = ? AND time_bucket = ? AND due_at >= ? AND due_at < ?"
        ))
        .await?,
        insert_checkpoint: prepare(format!(
            "INSERT INTO {ks}.checkpoints (topic, kafka_partition, materialised_offset, owner, \
             updated_at) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ))
        .await?,
        select_checkpoint: prepare(format!(
            "SELECT materialised_offset, owner, updated_at FROM {ks}.checkpoints \
             WHERE topic = ? AND kafka_partition = ?"
        ))
        .await?,
        insert_watermark: prepare(format!(
            "INSERT INTO {ks}.timer_watermarks (kafka_partition, fired_before, owner, \
             updated_at) VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
        ))
        .await?,
        select_watermark: prepare(format!(
            "SELECT fired_before, owner, updated_at FROM {ks}.timer_watermarks \
             WHERE kafka_partition = ?"
        ))
        .await?,
        insert_by_function: prepare(format!(
            "INSERT INTO {ks}.executions_by_function (ffqn, created_day, created_at, \
             execution_id, parent_id, state, outcome, finished_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
        ))
        .await?,
        insert_by_parent: prepare(format!(
            "INSERT INTO {ks}.executions_by_parent (parent_id, created_at, execution_id, \
             ffqn, state, outcome, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
             USING TIMESTAMP ? AND TTL ?"
        ))
        .await?,
        select_by_function: prepare(format!(
            "SELECT created_at, execution_id, parent_id, state, outcome, finished_at \
             FROM {ks}.executions_by_function WHERE ffqn = ? AND created_day = ? \
             AND created_at >= ? AND created_at <= ?"
        ))
        .await?,
        select_by_parent: prepare(format!(
            "SELECT created_at, execution_id, ffqn, state, outcome, finished_at \
             FROM {ks}.executions_by_parent WHERE parent_id = ?"
        ))
        .await?,
        select_by_parent_after: prepare(format!(
            "SELECT created_at, execution_id, ffqn, state, outcome, finished_at \
             FROM {ks}.executions_by_parent WHERE parent_id = ? \
             AND (created_at, execution_id) < (?, ?)"
        ))
        .await?,
        insert_function: prepare(format!(
            "INSERT INTO {ks}.functions (catalogue, ffqn) VALUES (?, ?)"
        ))
        .await?,
        select_functions: prepare(format!(
            "SELECT ffqn FROM {ks}.functions WHERE catalogue = ?"
        ))
        .await?,
        insert_build_chunk: prepare(format!(
            "INSERT INTO {ks}.component_builds (digest, chunk, bytes) VALUES (?, ?, ?)"
        ))
        .await?,
        insert_build_header: prepare(format!(
            "INSERT INTO {ks}.component_builds (digest, name, size, chunks, registered_at) \
             VALUES (?, ?, ?, ?, ?)"
        ))
        .await?,
        select_build_header: prepare(format!(
            "SELECT name, size, chunks, registered_at FROM {ks}.component_builds \
             WHERE digest = ? LIMIT 1"
        ))
        .await?,
        select_build_chunk: prepare(format!(
            "SELECT bytes FROM {ks}.component_builds WHERE digest = ? AND chunk = ?"
        ))
        .await?,
    })
    }
}
