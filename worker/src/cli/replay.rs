//! `weir replay`: replays recorded executions, read from the store, against a build of their
//! workflow, without side effects ([`crate::wasm::verify`]), and says per execution whether it
//! replays cleanly and, where not, the history version and both sides of the first mismatch.
//! Exit code 0 when every one replays, 5 when any does not (so a CI can gate a deploy on it),
//! 1 when one cannot be replayed at all.
//!
//! With `--upgrade` it also moves every execution that replays cleanly and is pinned to
//! another build onto the build it was replayed on: the build is stored (as `weir deploy`
//! does), then an `UpgradeRequest` names the changelog length that was replayed, so the
//! execution's owner takes it only if nothing happened since (else it is refused, and the
//! replay is to be run again). It then waits for each to be journalled, and names (exit code
//! 1) those that are not.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::Utc;
use clap::Args;
use serde_json::json;

use super::ClusterArgs;
use super::RegistryArgs;
use crate::codec::Codec;
use crate::model::ExecutionId;
use crate::store::{CqlStore, Store, connect};
use crate::wasm::verify::{Verdict, verify};

/// Exit code of a replay that found a mismatch.
pub const MISMATCH_EXIT: u8 = 5;

/// Executions listed a page at a time for `--function` / `--parent`.
const LIST_PAGE: usize = 500;

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Replay against this build of a component instead of the registry's file,
    /// `NAME=PATH.wasm` (repeatable): the deploy candidate.
    #[arg(long = "build", value_parser = super::parse_key_value)]
    pub builds: Vec<(String, String)>,
    /// Executions to replay (`E_<ulid>…`); or every execution `--function` / `--parent` and
    /// the filters list (as `weir list` does).
    pub execution_ids: Vec<String>,
    #[command(flatten)]
    pub filter: crate::store::list::ListFilter,
    /// One JSON object per execution instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Move each execution that replays cleanly (and runs on another build) onto the build
    /// it was replayed on.
    #[arg(long)]
    pub upgrade: bool,
}

pub async fn run(args: ReplayArgs) -> ExitCode {
    match replay(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let mut specs = args.registry.specs()?;
    for (name, path) in &args.builds {
        let spec = specs.iter_mut().find(|s| s.name == *name).ok_or_else(|| {
            anyhow::anyhow!(
                "--build {name}=…: no component `{name}` in {}",
                args.registry.components.display()
            )
        })?;
        spec.path = path.into();
        // The recorded digest is the deployed file's, not the candidate's.
        spec.digest = None;
    }
    let host = Arc::new(super::offline_host(specs)?);
    let session = connect(&args.cluster.cql()?).await?;
    let store = CqlStore::new(Arc::new(session), &args.cluster.keyspace).await?;

    let ids: Vec<ExecutionId> = if args.execution_ids.is_empty() {
        // Every execution the filter lists, a page at a time.
        let mut query = args.filter.query(LIST_PAGE, None, chrono::Utc::now())?;
        let mut ids = Vec::new();
        loop {
            let page = store.list_executions(&query).await?;
            ids.extend(page.executions.into_iter().map(|e| e.execution_id));
            eprint!("\rlisted {} executions", ids.len());
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        eprintln!();
        ids
    } else {
        anyhow::ensure!(
            args.filter.function.is_none() && args.filter.parent.is_none(),
            "name executions or --function / --parent, not both"
        );
        args.execution_ids
            .iter()
            .map(|id| id.parse().map_err(|e| anyhow::anyhow!("`{id}`: {e}")))
            .collect::<anyhow::Result<_>>()?
    };

    let upgrade = match args.upgrade {
        false => None,
        true => {
            // The builds replayed on must be where every worker can fetch them.
            super::deploy::store_builds(host.registry(), &store).await?;
            let topology = super::client::topology(&args.cluster)?;
            let topic = topology
                .topic(crate::topology::TopicRole::Responses)
                .name
                .clone();
            let producer: rdkafka::producer::FutureProducer =
                args.cluster.kafka()?.producer().create()?;
            Some((producer, topic))
        }
    };
    let codec = Codec::single_object();
    let now = Utc::now();
    let (mut clean, mut mismatched, mut failed) = (0usize, 0usize, 0usize);
    // Upgrades sent: the execution and the build it is to move to.
    let mut requested: Vec<(ExecutionId, String)> = Vec::new();
    let mut out = std::io::stdout().lock();
    for (n, id) in ids.iter().enumerate() {
        let verdict = match recorded(&store, &codec, id).await {
            Ok(rebuilt) => {
                let (pinned, length, ffqn) = (
                    rebuilt.view.component.clone(),
                    rebuilt.view.next_seq,
                    rebuilt.view.created.ffqn.clone(),
                );
                let verdict = verify(&host, rebuilt, now).await;
                match (&upgrade, &verdict, host.component_of(&ffqn)) {
                    (Some((producer, topic)), Verdict::Clean { note }, Some(target))
                        if pinned.as_ref() != Some(&target) =>
                    {
                        let request = crate::codec::UpgradeRequest {
                            execution_id: id.clone(),
                            component: target.clone(),
                            expected_seq: length,
                            requested_at: Utc::now(),
                        };
                        crate::kafka::submit::send_upgrade(producer, &codec, topic, &request)
                            .await?;
                        requested.push((id.clone(), target.clone()));
                        Verdict::Clean {
                            note: format!("{note}; upgrade to {target} requested"),
                        }
                    }
                    _ => verdict,
                }
            }
            Err(e) => Verdict::Failed {
                reason: format!("{e:#}"),
            },
        };
        let (label, text) = match &verdict {
            Verdict::Clean { note } => {
                clean += 1;
                ("clean", note)
            }
            Verdict::Mismatch { reason } => {
                mismatched += 1;
                ("MISMATCH", reason)
            }
            Verdict::Failed { reason } => {
                failed += 1;
                ("FAILED", reason)
            }
        };
        let line = if args.json {
            json!({"execution_id": id.to_string(), "verdict": label.to_lowercase(), "detail": text})
                .to_string()
        } else {
            format!("{id}  {label:<8}  {text}")
        };
        writeln!(out, "{line}")?;
        if ids.len() > 20 && (n + 1) % 20 == 0 {
            eprintln!("replayed {}/{}", n + 1, ids.len());
        }
    }
    eprintln!(
        "replayed {}: {clean} clean, {mismatched} mismatched, {failed} could not be replayed",
        ids.len()
    );
    let mut unconfirmed = 0;
    if args.upgrade {
        eprintln!("upgrades requested: {}", requested.len());
        for (id, target) in confirm_upgrades(&store, &codec, requested).await? {
            unconfirmed += 1;
            writeln!(
                out,
                "{id}  NOT UPGRADED  no `upgraded` entry to {target} within {}s: it moved on \
                 since it was read (the request is in the DLQ as `conflict`), or the store \
                 lags; replay it again",
                CONFIRM_WITHIN.as_secs()
            )?;
        }
    }
    Ok(if failed > 0 || unconfirmed > 0 {
        ExitCode::FAILURE
    } else if mismatched > 0 {
        ExitCode::from(MISMATCH_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}

/// How long `--upgrade` waits for each requested upgrade to be journalled.
const CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until the store shows each requested upgrade journalled (an `upgraded` entry to its
/// build); returns those it does not show within [`CONFIRM_WITHIN`].
async fn confirm_upgrades(
    store: &CqlStore,
    codec: &Codec,
    mut pending: Vec<(ExecutionId, String)>,
) -> anyhow::Result<Vec<(ExecutionId, String)>> {
    let deadline = std::time::Instant::now() + CONFIRM_WITHIN;
    while !pending.is_empty() && std::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for (id, target) in pending {
            let rows = store.history(&id).await?;
            let journalled = crate::present::decode_history(codec, &rows)?
                .into_iter()
                .any(|(_, r)| {
                    matches!(&r.entry, crate::codec::HistoryEntry::Upgraded { to, .. } if *to == target)
                });
            if !journalled {
                still.push((id, target));
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    eprintln!("upgrades journalled: all but {}", pending.len());
    Ok(pending)
}

/// `id` rebuilt from its history in the store, as a worker rebuilds it.
async fn recorded(
    store: &CqlStore,
    codec: &Codec,
    id: &ExecutionId,
) -> anyhow::Result<weir_core::projection::Rebuilt> {
    let rows = store.history(id).await?;
    let Some(first) = rows.first() else {
        anyhow::bail!("no history for {id} in the store");
    };
    let partition = first.kafka_partition;
    let records = crate::present::decode_history(codec, &rows)?
        .into_iter()
        .map(|(row, record)| (record, row.recorded_at));
    Ok(weir_core::projection::rebuild(id, partition, records)?)
}
