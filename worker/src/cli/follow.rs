//! `weir submit --follow`: follows an execution in the store through the same reading as the
//! HTTP API's live view ([`crate::api::stream::Follower`]), printing each history entry as it
//! arrives (in the form of `weir history`: its header, a line per entry, how long it took),
//! then the result.
//!
//! When the store has not got the execution after a while, it says once why it is likely not
//! taken, and keeps following:
//! - the workflow workers' consumer group has no members: no workflow worker is running;
//! - else the function is not in the functions catalogue (`GET /v1/functions`): no worker has
//!   taken an execution of it, so none is likely to have registered it;
//! - else no worker has taken it yet (busy, or its partition is moving).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use serde_json::Value;

use crate::api::stream::{Follower, POLL_INTERVAL, Update};
use crate::codec::{Codec, HistoryEntry};
use crate::kafka::KafkaConfig;
use crate::model::{ExecutionId, ExecutionResult};
use crate::present;
use crate::store::{CqlStore, Store};

/// Exit code of `weir submit --follow` when the execution finished, but not `ok`.
pub const NOT_OK: u8 = 4;

/// How long `--follow` waits, and when it says why the execution is not taken.
#[derive(Debug, Clone, Copy)]
pub struct FollowSettings {
    /// Give up (exit 1) without a result after this.
    pub timeout: Duration,
    /// Say why it is likely not taken when the store does not have it after this.
    pub not_taken_after: Duration,
}

/// Follows `id` (of function `ffqn`) to its result: prints each entry, then the result;
/// [`ExitCode::SUCCESS`] when it finished `ok`, [`NOT_OK`] otherwise.
#[tracing::instrument(skip_all, fields(execution = %id))]
pub async fn follow(
    store: &CqlStore,
    kafka: &KafkaConfig,
    id: &ExecutionId,
    ffqn: &str,
    settings: FollowSettings,
) -> anyhow::Result<ExitCode> {
    let codec = Codec::single_object();
    let mut follower = Follower::new(id.clone(), None);
    let started = Instant::now();
    let mut explained = false;
    let mut created = None;
    loop {
        for update in follower.poll(store, &codec).await? {
            match update {
                Update::Entry(entry) => {
                    let (row, record) = *entry;
                    if row.seq == 0 {
                        println!("{}", present::history_header());
                    }
                    if let HistoryEntry::Created(c) = &record.entry {
                        created = Some(c.clone());
                    }
                    let start = created.as_ref().map(|c| c.created_at);
                    println!("{}", present::history_line(start, &row, &record));
                    if let (Some(c), HistoryEntry::Finished { finished_at, .. }) =
                        (&created, &record.entry)
                    {
                        println!("{}", present::history_took(c, *finished_at));
                    }
                }
                Update::Finished(row) => return print_result(row.result.as_deref()),
                Update::Gone => {
                    anyhow::bail!("{id} is no longer in the store (its retention ended)")
                }
                Update::Waiting | Update::Status(_) => {}
            }
        }
        if !follower.seen() && !explained && started.elapsed() >= settings.not_taken_after {
            explained = true;
            let why = why_not_taken(store, kafka, ffqn).await;
            eprintln!(
                "{id} is not in the store after {} s: {why}; still following",
                started.elapsed().as_secs()
            );
        }
        if started.elapsed() >= settings.timeout {
            anyhow::bail!("no result for {id} after {} s", settings.timeout.as_secs());
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Prints the result (pretty JSON) and says how `weir` exits.
fn print_result(result: Option<&str>) -> anyhow::Result<ExitCode> {
    let text = result.ok_or_else(|| anyhow::anyhow!("the finished execution has no result"))?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("the stored result is not JSON: {e}"))?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    let ok = matches!(
        serde_json::from_value::<ExecutionResult>(value),
        Ok(ExecutionResult::Ok(_))
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_OK)
    })
}

/// Why an execution of `ffqn` is likely not taken (see the module docs).
#[tracing::instrument(skip(store, kafka))]
pub async fn why_not_taken(store: &CqlStore, kafka: &KafkaConfig, ffqn: &str) -> String {
    let group = kafka.group_id(super::worker::WORKFLOW_WORKERS_GROUP);
    match group_members(kafka, &group).await {
        Ok(Some(0)) => {
            return format!(
                "no workflow worker is running (consumer group {group} has no members)"
            );
        }
        Ok(_) => {}
        // An ACL without DESCRIBE on the group, a broker away: go on without it.
        Err(e) => {
            tracing::debug!(%group, error = %e, "cannot describe the workflow workers' group")
        }
    }
    match store.functions().await {
        Ok(functions) if !functions.iter().any(|f| f == ffqn) => {
            format!(
                "no worker has registered {ffqn} (no execution of it is in the functions catalogue)"
            )
        }
        Ok(_) => "no worker has taken it yet".to_owned(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the functions catalogue");
            "no worker has taken it yet".to_owned()
        }
    }
}

/// The members of consumer group `group`: `Some(0)` when it has none (empty, or never
/// created), `None` when the broker's answer does not say (e.g. the group could not be
/// described).
async fn group_members(kafka: &KafkaConfig, group: &str) -> anyhow::Result<Option<usize>> {
    let consumer: BaseConsumer = kafka.client().create()?;
    let group = group.to_owned();
    tokio::task::spawn_blocking(move || {
        let list = consumer.fetch_group_list(Some(&group), Duration::from_secs(10))?;
        let found = list.groups().iter().find(|g| g.name() == group);
        tracing::debug!(
            %group,
            state = found.map(|g| g.state()),
            members = found.map(|g| g.members().len()),
            "workflow workers' group"
        );
        Ok(match found {
            None => Some(0),
            Some(g) if !g.members().is_empty() => Some(g.members().len()),
            // A group that exists without members, or that the coordinator does not know.
            Some(g) if matches!(g.state(), "Empty" | "Dead") => Some(0),
            Some(_) => None,
        })
    })
    .await?
}
