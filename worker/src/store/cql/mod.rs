//! The [`Store`] on a CQL database (ScyllaDB, Apache Cassandra): prepared statements, one
//! unlogged batch per execution for what a batch materialises (its history rows and its
//! execution row share the partition key: one round trip, applied as one mutation), paged
//! reads. No lightweight transactions on this path.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use futures::{StreamExt as _, TryStreamExt};
use scylla::client::session::Session;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use self::statements::Statements;
use super::rows::{
    Checkpoint, DroppedTimerBucket, ExecutionRow, HistoryRow, TimerRow, TimerWatermark, WriteStamp,
};
use super::session::validate_keyspace;
use super::{ComponentBuild, Retention, Store, StoreError, buckets_between, timer_bucket};
use crate::model::ids::ExecutionId;

/// Rows per page when reading a history or a timer bucket.
mod builds;
mod statements;

const PAGE_SIZE: i32 = 1000;

/// Record bytes per request when materialising. One request's rows of an execution are one
/// mutation, and a mutation over half a commit-log segment is refused (16 MiB with the default
/// 32 MiB segments, 4 MiB on the local stack's 8 MiB): more record bytes go in more requests.
const MAX_REQUEST_RECORD_BYTES: usize = 1024 * 1024;

/// Timer buckets read at once by one scan. A partition taken over reads its timers from its
/// watermark (a day back for one that has none) to the horizon: about 1,500 one-minute
/// buckets, most of them empty. One after the other that was 2.3 s per take-over of a fresh
/// deployment's six partitions on the local stack, before its first execution ran.
const TIMER_BUCKETS_IN_FLIGHT: usize = 32;

/// Checkpoints per unlogged batch: Cassandra warns about unlogged batches over more than ten
/// partitions (`unlogged_batch_across_partitions_warn_threshold`).
const CHECKPOINTS_PER_BATCH: usize = 10;

/// The real store. Cheap to clone: clones share the session and the prepared statements.
#[derive(Clone)]
pub struct CqlStore {
    session: Arc<Session>,
    statements: Arc<Statements>,
    /// The functions this process has written to the `functions` catalogue: each is
    /// written once per process, not once per execution.
    catalogued: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    retention: Retention,
}

/// The one partition of the `functions` table.
const CATALOGUE: i32 = 0;

type HistoryColumns = (i64, String, Vec<u8>, i32, i64, DateTime<Utc>);
type ExecutionColumns = (
    String,
    Option<String>,
    String,
    String,
    Option<String>,
    i64,
    i32,
    DateTime<Utc>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);
type TimerColumns = (DateTime<Utc>, String, String, String);

/// The bind values of `insert_history`.
#[allow(clippy::type_complexity)]
fn history_values<'a>(
    id: &'a str,
    row: &'a HistoryRow,
    ttl: i32,
) -> (
    &'a str,
    i64,
    &'a str,
    &'a [u8],
    i32,
    i64,
    DateTime<Utc>,
    i32,
) {
    (
        id,
        row.seq,
        row.kind.as_str(),
        row.record.as_slice(),
        row.kafka_partition,
        row.kafka_offset,
        row.recorded_at,
        ttl,
    )
}

/// The bind values of `insert_execution` (`id` and `parent` are the row's ids as text).
#[allow(clippy::type_complexity)]
fn execution_values<'a>(
    id: &'a str,
    parent: Option<&'a str>,
    row: &'a ExecutionRow,
    ttl: i32,
) -> (
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
    &'a str,
    Option<&'a str>,
    i64,
    i32,
    DateTime<Utc>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    i64,
    i32,
) {
    (
        id,
        row.ffqn.as_str(),
        parent,
        row.params.as_str(),
        row.state.as_str(),
        row.result.as_deref(),
        row.history_version,
        row.kafka_partition,
        row.created_at,
        row.updated_at,
        row.finished_at,
        // The write timestamp (see `WriteStamp`): an older row never overwrites a newer one.
        WriteStamp::history_version(row.history_version).0,
        ttl,
    )
}

/// The partitions of the list tables an execution row is written to.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ListPartition {
    Function(String, i64),
    Parent(String),
}

/// Writes the list tables' rows of `rows` (`executions_by_function`, and
/// `executions_by_parent` for children) with their execution rows' write timestamps, in one
/// unlogged batch per partition.
async fn write_list_rows(
    session: &Session,
    statements: &Statements,
    retention: Retention,
    rows: &[&ExecutionRow],
) -> Result<(), StoreError> {
    let now = Utc::now();
    let mut partitions: BTreeMap<ListPartition, Vec<&ExecutionRow>> = BTreeMap::new();
    for row in rows {
        let day = weir_core::rows::created_day(row.created_at);
        partitions
            .entry(ListPartition::Function(row.ffqn.clone(), day))
            .or_default()
            .push(row);
        if let Some(parent) = &row.parent_id {
            partitions
                .entry(ListPartition::Parent(parent.to_string()))
                .or_default()
                .push(row);
        }
    }
    try_join_all(partitions.into_iter().map(|(partition, rows)| async move {
        let mut batch = Batch::new(BatchType::Unlogged);
        let mut values: Vec<Box<dyn SerializeRow + Send + Sync>> = Vec::with_capacity(rows.len());
        for row in &rows {
            let id = row.execution_id.to_string();
            let outcome = row.result.as_deref().and_then(weir_core::rows::outcome_of);
            let stamp = WriteStamp::history_version(row.history_version).0;
            let ttl = retention.ttl_secs(row, now);
            let state = row.state.as_str();
            match &partition {
                ListPartition::Function(ffqn, day) => {
                    batch.append_statement(statements.insert_by_function.clone());
                    values.push(Box::new((
                        ffqn.clone(),
                        *day,
                        row.created_at,
                        id,
                        row.parent_id.as_ref().map(ToString::to_string),
                        state,
                        outcome,
                        row.finished_at,
                        stamp,
                        ttl,
                    )));
                }
                ListPartition::Parent(parent) => {
                    batch.append_statement(statements.insert_by_parent.clone());
                    values.push(Box::new((
                        parent.clone(),
                        row.created_at,
                        id,
                        row.ffqn.clone(),
                        state,
                        outcome,
                        row.finished_at,
                        stamp,
                        ttl,
                    )));
                }
            }
        }
        session
            .batch(&batch, values)
            .await
            .map_err(execute_error(format!(
                "write the list rows of {} executions",
                rows.len()
            )))
    }))
    .await?;
    Ok(())
}

/// The bind values of `insert_checkpoint`.
fn checkpoint_values(
    c: &Checkpoint,
    stamp: WriteStamp,
) -> (&str, i32, i64, &str, DateTime<Utc>, i64) {
    (
        c.topic.as_str(),
        c.kafka_partition,
        c.materialised_offset,
        c.owner.as_str(),
        c.updated_at,
        stamp.0,
    )
}

impl CqlStore {
    /// Finished executions expire after `retention` (see [`Retention`]).
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Writes the list rows of `rows`, and adds their functions to the `functions`
    /// catalogue unless this process already did.
    async fn write_listing(&self, rows: &[&ExecutionRow]) -> Result<(), StoreError> {
        write_list_rows(&self.session, &self.statements, self.retention, rows).await?;
        let new: std::collections::BTreeSet<&str> = {
            let catalogued = self.catalogued.lock().unwrap_or_else(|e| e.into_inner());
            rows.iter()
                .map(|row| row.ffqn.as_str())
                .filter(|ffqn| !catalogued.contains(*ffqn))
                .collect()
        };
        for ffqn in new {
            self.session
                .execute_unpaged(&self.statements.insert_function, (CATALOGUE, ffqn))
                .await
                .map_err(execute_error(format!("catalogue function {ffqn}")))?;
            let mut catalogued = self.catalogued.lock().unwrap_or_else(|e| e.into_inner());
            catalogued.insert(ffqn.to_owned());
        }
        Ok(())
    }

    /// Reads the rows of a list table's `statement` in order, and appends to `found` those
    /// `query` matches, until it holds one more than a page. A row is `(created_at,
    /// execution_id, <a text column>, state, outcome, finished_at)`; `names` turns that text
    /// column (and the id) into the row's function and parent.
    async fn take_listed(
        &self,
        statement: PreparedStatement,
        bind: impl SerializeRow,
        scan: &mut weir_core::list::ListScan<'_>,
        names: impl Fn(Option<String>, &str) -> Result<(String, Option<String>), StoreError>,
    ) -> Result<(), StoreError> {
        type Columns = (
            DateTime<Utc>,
            String,
            Option<String>,
            String,
            Option<String>,
            Option<DateTime<Utc>>,
        );
        let context = "list executions";
        let mut rows = self
            .session
            .execute_iter(statement, bind)
            .await
            .map_err(|e| result_error(context, e))?
            .rows_stream::<Columns>()
            .map_err(|e| result_error(context, e))?;
        while let Some((created_at, id, text, state, outcome, finished_at)) = rows
            .try_next()
            .await
            .map_err(|e| result_error(context, e))?
        {
            let (ffqn, parent) = names(text, &id)?;
            let listed = weir_core::rows::ListedExecution {
                execution_id: parse_id(&id, &id)?,
                ffqn,
                parent_id: parent.map(|p| parse_id(&p, &id)).transpose()?,
                state: parse_name(&state, &id)?,
                outcome,
                created_at,
                finished_at,
            };
            if !scan.offer(listed) {
                break;
            }
        }
        Ok(())
    }

    /// One unlogged batch on one partition key: history rows of an execution, and its
    /// execution row if given.
    async fn write_rows(
        &self,
        id: &str,
        rows: Vec<&HistoryRow>,
        execution: Option<&ExecutionRow>,
        ttl: i32,
    ) -> Result<(), StoreError> {
        let parent = execution.and_then(|e| e.parent_id.as_ref().map(ToString::to_string));
        let mut batch = Batch::new(BatchType::Unlogged);
        let mut values: Vec<Box<dyn SerializeRow + Send + Sync + '_>> =
            Vec::with_capacity(rows.len() + 1);
        for row in &rows {
            batch.append_statement(self.statements.insert_history.clone());
            values.push(Box::new(history_values(id, row, ttl)));
        }
        if let Some(execution) = execution {
            batch.append_statement(self.statements.insert_execution.clone());
            values.push(Box::new(execution_values(
                id,
                parent.as_deref(),
                execution,
                ttl,
            )));
        }
        let what = if execution.is_some() {
            " and the execution row"
        } else {
            ""
        };
        self.session
            .batch(&batch, values)
            .await
            .map_err(execute_error(format!(
                "write {} history rows{what} of {id}",
                rows.len()
            )))?;
        Ok(())
    }

    /// Prepares every statement against `keyspace` (whose tables `topology apply` created).
    pub async fn new(session: Arc<Session>, keyspace: &str) -> Result<Self, StoreError> {
        validate_keyspace(keyspace)?;
        let statements = Statements::prepare(&session, keyspace).await?;
        Ok(CqlStore {
            session,
            statements: Arc::new(statements),
            catalogued: Arc::default(),
            retention: Retention::FOREVER,
        })
    }
}

fn execute_error(
    context: impl Into<String>,
) -> impl FnOnce(scylla::errors::ExecutionError) -> StoreError {
    let context = context.into();
    move |source| StoreError::Execute {
        context,
        source: Box::new(source),
    }
}

fn result_error(context: &str, reason: impl ToString) -> StoreError {
    StoreError::Result {
        context: context.to_owned(),
        reason: reason.to_string(),
    }
}

fn parse_id(raw: &str, owner: &str) -> Result<ExecutionId, StoreError> {
    ExecutionId::from_str(raw).map_err(|e| StoreError::Corrupt {
        execution_id: owner.to_owned(),
        reason: format!("stored id `{raw}` does not parse: {e}"),
    })
}

/// A state or kind column, typed.
fn parse_name<T: FromStr<Err = weir_core::rows::UnknownName>>(
    raw: &str,
    owner: &str,
) -> Result<T, StoreError> {
    raw.parse()
        .map_err(|e: weir_core::rows::UnknownName| StoreError::Corrupt {
            execution_id: owner.to_owned(),
            reason: e.to_string(),
        })
}

impl CqlStore {
    /// The history rows of `execution_id` that `statement` selects with `values`, in seq
    /// order (the clustering order), every page of them.
    async fn read_history(
        &self,
        execution_id: &ExecutionId,
        context: &str,
        statement: PreparedStatement,
        values: impl SerializeRow,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        let id = execution_id.to_string();
        let pager = self
            .session
            .execute_iter(statement, values)
            .await
            .map_err(|e| result_error(context, e))?;
        let rows: Vec<HistoryColumns> = pager
            .rows_stream::<HistoryColumns>()
            .map_err(|e| result_error(context, e))?
            .try_collect()
            .await
            .map_err(|e| result_error(context, e))?;
        rows.into_iter()
            .map(
                |(seq, kind, record, kafka_partition, kafka_offset, recorded_at)| {
                    Ok(HistoryRow {
                        execution_id: execution_id.clone(),
                        seq,
                        kind: parse_name(&kind, &id)?,
                        record,
                        kafka_partition,
                        kafka_offset,
                        recorded_at,
                    })
                },
            )
            .collect()
    }
}

impl Store for CqlStore {
    async fn put_component_build(&self, build: &ComponentBuild) -> Result<(), StoreError> {
        self.write_build(build).await
    }

    async fn component_build(&self, digest: &str) -> Result<Option<ComponentBuild>, StoreError> {
        self.read_build(digest).await
    }

    async fn has_component_build(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(self.build_header(digest).await?.is_some())
    }

    async fn append_history(&self, rows: &[HistoryRow]) -> Result<(), StoreError> {
        self.materialise(rows, &[]).await
    }

    async fn history(&self, execution_id: &ExecutionId) -> Result<Vec<HistoryRow>, StoreError> {
        let id = execution_id.to_string();
        let context = format!("read history of {id}");
        let statement = self.statements.select_history.clone();
        self.read_history(execution_id, &context, statement, (id.as_str(),))
            .await
    }

    async fn history_after(
        &self,
        execution_id: &ExecutionId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        // CQL refuses `LIMIT 0`; the contract's answer is no rows.
        if limit == 0 {
            return Ok(Vec::new());
        }
        let id = execution_id.to_string();
        let context = format!("read history of {id} after seq {after_seq}");
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let statement = self.statements.select_history_after.clone();
        self.read_history(
            execution_id,
            &context,
            statement,
            (id.as_str(), after_seq, limit),
        )
        .await
    }

    async fn put_execution(&self, row: &ExecutionRow) -> Result<(), StoreError> {
        let ttl = self.retention.ttl_secs(row, Utc::now());
        if ttl > 0 {
            // Its history expires with it: the materialiser's path rewrites it.
            return self.materialise(&[], std::slice::from_ref(row)).await;
        }
        let id = row.execution_id.to_string();
        let parent = row.parent_id.as_ref().map(ToString::to_string);
        self.session
            .execute_unpaged(
                &self.statements.insert_execution,
                execution_values(&id, parent.as_deref(), row, 0),
            )
            .await
            .map_err(execute_error(format!("write execution {id}")))?;
        self.write_listing(&[row]).await
    }

    async fn list_executions(
        &self,
        query: &weir_core::rows::ListQuery,
    ) -> Result<weir_core::rows::ListPage, StoreError> {
        use weir_core::rows::{ListBy, created_day};
        let query = query.bounded(Utc::now());
        let mut scan = weir_core::list::ListScan::new(&query);
        match &query.by {
            ListBy::Function(ffqn) => {
                // `bounded` gave both ends; the cursor lowers the upper one.
                let until = query.created_until.unwrap_or_else(Utc::now);
                let from = query.created_from.unwrap_or(until);
                let top = query
                    .after
                    .as_ref()
                    .map_or(until, |c| c.created_at.min(until));
                let mut day = created_day(top);
                while day >= created_day(from) && scan.wants_more() {
                    let statement = self.statements.select_by_function.clone();
                    let bind = (ffqn.as_str(), day, from, top);
                    self.take_listed(statement, bind, &mut scan, |parent, _| {
                        Ok((ffqn.clone(), parent))
                    })
                    .await?;
                    day -= 1;
                }
            }
            ListBy::Parent(parent) => {
                // This table's fourth column is the function.
                let names = |ffqn: Option<String>, _: &str| {
                    Ok((ffqn.unwrap_or_default(), Some(parent.to_string())))
                };
                let parent = parent.to_string();
                match &query.after {
                    None => {
                        let statement = self.statements.select_by_parent.clone();
                        self.take_listed(statement, (parent,), &mut scan, names)
                            .await?;
                    }
                    // The cursor is in the query: a page reads from where the last ended.
                    Some(after) => {
                        let statement = self.statements.select_by_parent_after.clone();
                        let bind = (parent, after.created_at, after.execution_id.to_string());
                        self.take_listed(statement, bind, &mut scan, names).await?;
                    }
                }
            }
        }
        Ok(scan.page())
    }

    async fn functions(&self) -> Result<Vec<String>, StoreError> {
        let context = "read the functions catalogue";
        let rows = self
            .session
            .execute_iter(self.statements.select_functions.clone(), (CATALOGUE,))
            .await
            .map_err(|e| result_error(context, e))?
            .rows_stream::<(String,)>()
            .map_err(|e| result_error(context, e))?
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| result_error(context, e))?;
        Ok(rows.into_iter().map(|(ffqn,)| ffqn).collect())
    }

    async fn execution(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionRow>, StoreError> {
        let id = execution_id.to_string();
        let context = format!("read execution {id}");
        let result = self
            .session
            .execute_unpaged(&self.statements.select_execution, (id.as_str(),))
            .await
            .map_err(execute_error(context.clone()))?;
        let rows = result
            .into_rows_result()
            .map_err(|e| result_error(&context, e))?;
        let Some(columns) = rows
            .maybe_first_row::<ExecutionColumns>()
            .map_err(|e| result_error(&context, e))?
        else {
            return Ok(None);
        };
        let (
            ffqn,
            parent,
            params,
            state,
            result,
            history_version,
            kafka_partition,
            created_at,
            updated_at,
            finished_at,
        ) = columns;
        Ok(Some(ExecutionRow {
            execution_id: execution_id.clone(),
            ffqn,
            parent_id: parent.map(|p| parse_id(&p, &id)).transpose()?,
            params,
            state: parse_name(&state, &id)?,
            result,
            history_version,
            kafka_partition,
            created_at,
            updated_at,
            finished_at,
        }))
    }

    async fn put_timers(&self, timers: &[TimerRow], stamp: WriteStamp) -> Result<(), StoreError> {
        try_join_all(timers.iter().map(|t| async move {
            let execution_id = t.execution_id.to_string();
            self.session
                .execute_unpaged(
                    &self.statements.insert_timer,
                    (
                        t.kafka_partition,
                        timer_bucket(t.due_at),
                        t.due_at,
                        t.timer_id.as_str(),
                        execution_id.as_str(),
                        t.kind.as_str(),
                        stamp.0,
                    ),
                )
                .await
                .map_err(execute_error(format!(
                    "write timer {} of {execution_id}",
                    t.timer_id
                )))
        }))
        .await?;
        Ok(())
    }

    async fn delete_timer(
        &self,
        kafka_partition: i32,
        due_at: DateTime<Utc>,
        timer_id: &str,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(
                &self.statements.delete_timer,
                (
                    stamp.0,
                    kafka_partition,
                    timer_bucket(due_at),
                    due_at,
                    timer_id,
                ),
            )
            .await
            .map_err(execute_error(format!(
                "delete timer {timer_id} of partition {kafka_partition}"
            )))?;
        Ok(())
    }

    async fn drop_timer_bucket(
        &self,
        dropped: DroppedTimerBucket,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        let DroppedTimerBucket {
            kafka_partition,
            bucket,
        } = dropped;
        self.session
            .execute_unpaged(
                &self.statements.drop_timer_bucket,
                (stamp.0, kafka_partition, bucket),
            )
            .await
            .map_err(execute_error(format!(
                "drop timer bucket {bucket} of partition {kafka_partition}"
            )))?;
        Ok(())
    }

    async fn timers_between(
        &self,
        kafka_partition: i32,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<TimerRow>, StoreError> {
        let context = format!("read timers of partition {kafka_partition} from {from} to {until}");
        let context = &context;
        // The buckets in order (`buffered` keeps it), so the rows come in due order.
        let buckets: Vec<Vec<TimerColumns>> = futures::stream::iter(buckets_between(from, until)?)
            .map(|bucket| async move {
                self.session
                    .execute_iter(
                        self.statements.select_timers.clone(),
                        (kafka_partition, bucket, from, until),
                    )
                    .await
                    .map_err(|e| result_error(context, e))?
                    .rows_stream::<TimerColumns>()
                    .map_err(|e| result_error(context, e))?
                    .try_collect()
                    .await
                    .map_err(|e| result_error(context, e))
            })
            .buffered(TIMER_BUCKETS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut timers = Vec::new();
        for (due_at, timer_id, execution_id, kind) in buckets.into_iter().flatten() {
            timers.push(TimerRow {
                kafka_partition,
                due_at,
                execution_id: parse_id(&execution_id, &execution_id)?,
                kind: parse_name(&kind, &execution_id)?,
                timer_id,
            });
        }
        Ok(timers)
    }

    async fn checkpoint(
        &self,
        topic: &str,
        kafka_partition: i32,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let context = format!("read checkpoint of {topic}/{kafka_partition}");
        let result = self
            .session
            .execute_unpaged(&self.statements.select_checkpoint, (topic, kafka_partition))
            .await
            .map_err(execute_error(context.clone()))?;
        let rows = result
            .into_rows_result()
            .map_err(|e| result_error(&context, e))?;
        Ok(rows
            .maybe_first_row::<(i64, String, DateTime<Utc>)>()
            .map_err(|e| result_error(&context, e))?
            .map(|(materialised_offset, owner, updated_at)| Checkpoint {
                topic: topic.to_owned(),
                kafka_partition,
                materialised_offset,
                owner,
                updated_at,
            }))
    }

    async fn timer_watermark(
        &self,
        kafka_partition: i32,
    ) -> Result<Option<TimerWatermark>, StoreError> {
        let context = format!("read the timer watermark of partition {kafka_partition}");
        let result = self
            .session
            .execute_unpaged(&self.statements.select_watermark, (kafka_partition,))
            .await
            .map_err(execute_error(context.clone()))?;
        let rows = result
            .into_rows_result()
            .map_err(|e| result_error(&context, e))?;
        Ok(rows
            .maybe_first_row::<(DateTime<Utc>, String, DateTime<Utc>)>()
            .map_err(|e| result_error(&context, e))?
            .map(|(fired_before, owner, updated_at)| TimerWatermark {
                kafka_partition,
                fired_before,
                owner,
                updated_at,
            }))
    }

    async fn put_timer_watermark(
        &self,
        w: &TimerWatermark,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(
                &self.statements.insert_watermark,
                (
                    w.kafka_partition,
                    w.fired_before,
                    w.owner.as_str(),
                    w.updated_at,
                    stamp.0,
                ),
            )
            .await
            .map_err(execute_error(format!(
                "write the timer watermark of partition {}",
                w.kafka_partition
            )))?;
        Ok(())
    }

    async fn put_checkpoint(
        &self,
        checkpoint: &Checkpoint,
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        self.session
            .execute_unpaged(
                &self.statements.insert_checkpoint,
                checkpoint_values(checkpoint, stamp),
            )
            .await
            .map_err(execute_error(format!(
                "write checkpoint of {}/{}",
                checkpoint.topic, checkpoint.kafka_partition
            )))?;
        Ok(())
    }

    /// One unlogged batch per execution, over two tables on one partition key: its new
    /// history rows and its execution row reach the database as one request, which applies
    /// them as one mutation.
    async fn materialise(
        &self,
        history: &[HistoryRow],
        executions: &[ExecutionRow],
    ) -> Result<(), StoreError> {
        type Rows<'a> = (Vec<&'a HistoryRow>, Option<&'a ExecutionRow>);
        let now = Utc::now();
        let ttl_of = |row: &ExecutionRow| self.retention.ttl_secs(row, now);
        // An execution that finishes with a retention takes its whole history with it: the
        // rows written while it ran (without a TTL) are written again with the TTL.
        let expiring: Vec<&ExecutionRow> = executions.iter().filter(|e| ttl_of(e) > 0).collect();
        let stored: Vec<Vec<HistoryRow>> =
            try_join_all(expiring.iter().map(|e| self.history(&e.execution_id))).await?;
        let mut per_execution: BTreeMap<String, Rows<'_>> = BTreeMap::new();
        for row in history {
            per_execution
                .entry(row.execution_id.to_string())
                .or_default()
                .0
                .push(row);
        }
        for rows in &stored {
            for row in rows {
                let entry = per_execution
                    .entry(row.execution_id.to_string())
                    .or_default();
                if !entry.0.iter().any(|new| new.seq == row.seq) {
                    entry.0.push(row);
                }
            }
        }
        for row in executions {
            per_execution
                .entry(row.execution_id.to_string())
                .or_default()
                .1 = Some(row);
        }
        // An execution with more record bytes than one request should carry is split; its
        // earlier rows are written first, and the execution row goes with its last rows, so
        // that a reader who sees the row (its state, its history version) sees the history.
        let mut earlier: Vec<(&str, Rows<'_>, i32)> = Vec::new();
        let mut last: Vec<(&str, Rows<'_>, i32)> = Vec::with_capacity(per_execution.len());
        for (id, (rows, execution)) in &per_execution {
            let ttl = execution.map_or(0, ttl_of);
            let mut chunk: Vec<&HistoryRow> = Vec::new();
            let mut bytes = 0;
            for &row in rows {
                if !chunk.is_empty() && bytes + row.record.len() > MAX_REQUEST_RECORD_BYTES {
                    earlier.push((id, (std::mem::take(&mut chunk), None), ttl));
                    bytes = 0;
                }
                bytes += row.record.len();
                chunk.push(row);
            }
            last.push((id, (chunk, *execution), ttl));
        }
        for requests in [earlier, last] {
            try_join_all(
                requests
                    .into_iter()
                    .map(|(id, (rows, execution), ttl)| self.write_rows(id, rows, execution, ttl)),
            )
            .await?;
        }
        let rows: Vec<&ExecutionRow> = executions.iter().collect();
        self.write_listing(&rows).await
    }

    /// Unlogged batches of up to [`CHECKPOINTS_PER_BATCH`] partitions each.
    async fn put_checkpoints(
        &self,
        checkpoints: &[Checkpoint],
        stamp: WriteStamp,
    ) -> Result<(), StoreError> {
        try_join_all(
            checkpoints
                .chunks(CHECKPOINTS_PER_BATCH)
                .map(|chunk| async move {
                    let mut batch = Batch::new(BatchType::Unlogged);
                    let values: Vec<_> = chunk
                        .iter()
                        .map(|c| {
                            batch.append_statement(self.statements.insert_checkpoint.clone());
                            checkpoint_values(c, stamp)
                        })
                        .collect();
                    self.session
                        .batch(&batch, values)
                        .await
                        .map_err(execute_error(format!(
                            "write the checkpoints of {}",
                            chunk
                                .iter()
                                .map(|c| format!("{}/{}", c.topic, c.kafka_partition))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )))
                }),
        )
        .await?;
        Ok(())
    }
}
