//! `weir submit --follow`: follows an execution in the store through the same reading as the
//! HTTP API's live view ([`crate::api::stream::Follower`]), printing each history entry as it
//! arrives (in the form of `weir history`: its header, a line per entry, how long it took),
//! then the result.
//!
//! When the store has not got the execution after a while, it says once why it is likely not
//! taken, and keeps following:
//! - the workflow workers' consumer group has no members: no workflow worker is running;
//! - else, when the functions catalogue (`GET /v1/functions`) lists others but not this one:
//!   no execution of it ever ran, so likely no worker has it among its components;
//! - else no worker has taken it yet (busy, its partition moving, or a new deployment whose
//!   workers are still taking their partitions over: the catalogue is empty until a first
//!   execution runs, so it tells nothing then).

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
    let catalogue = store.functions().await;
    if let Err(e) = &catalogue {
        tracing::debug!(error = %e, "cannot read the functions catalogue");
    }
    not_taken_by_running_workers(catalogue.ok().as_deref(), ffqn)
}

/// Why an execution of `ffqn` is not taken while workflow workers run, by the functions
/// catalogue (`None`: it could not be read). An empty catalogue tells nothing: it is empty
/// until a first execution runs, as on a new deployment whose workers are still taking their
/// partitions over.
fn not_taken_by_running_workers(catalogue: Option<&[String]>, ffqn: &str) -> String {
    match catalogue {
        Some([]) => "no worker has taken it yet (nothing has run in this deployment yet: its \
                     workers may still be taking their partitions over)"
            .to_owned(),
        Some(functions) if !functions.iter().any(|f| f == ffqn) => format!(
            "no execution of {ffqn} ever ran here (the functions catalogue lists {} other{}): \
             is it among a worker's components?",
            functions.len(),
            if functions.len() == 1 { "" } else { "s" }
        ),
        _ => "no worker has taken it yet".to_owned(),
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

#[cfg(test)]
mod tests {
    use super::not_taken_by_running_workers as why;

    const ORDER: &str = "weir-examples:workflows/order.checkout";

    #[test]
    fn an_empty_catalogue_does_not_say_the_function_is_missing() {
        let said = why(Some(&[]), ORDER);
        assert!(said.starts_with("no worker has taken it yet"), "{said}");
        assert!(
            said.contains("nothing has run in this deployment yet"),
            "{said}"
        );
        assert!(!said.contains(ORDER), "{said}");
    }

    #[test]
    fn a_catalogue_without_the_function_says_so() {
        let others = ["weir-examples:workflows/hello.greet".to_owned()];
        let said = why(Some(&others), ORDER);
        assert_eq!(
            said,
            format!(
                "no execution of {ORDER} ever ran here (the functions catalogue lists 1 other): \
                 is it among a worker's components?"
            )
        );
    }

    #[test]
    fn a_catalogue_with_the_function_or_none_read_says_it_is_not_taken_yet() {
        let listed = [ORDER.to_owned()];
        assert_eq!(why(Some(&listed), ORDER), "no worker has taken it yet");
        assert_eq!(why(None, ORDER), "no worker has taken it yet");
    }
}
