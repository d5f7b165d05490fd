//! The client commands: `weir submit` (optionally following it: [`super::follow`]), `weir send-event`,
//! `weir stub`, `weir cancel`, `weir status` and `weir history` (read from the CQL store).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rdkafka::producer::{FutureProducer, Producer as _};
use serde_json::Value;

use super::ClusterArgs;
use crate::codec::Codec;
use crate::model::{ExecutionId, ExecutionResult, Ffqn};
use crate::store::{CqlStore, Store, connect};
use crate::topology::{TopicRole, Topology};

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The function to run, `namespace:package/interface.function`.
    pub ffqn: String,
    /// Its parameters as a JSON array, e.g. `'["alice", 3]'`.
    pub params: String,
    /// Follow it in the store: print each history entry as it is recorded, then the result
    /// (exit code 4 if it is not `ok`).
    #[arg(long)]
    pub follow: bool,
    /// How long `--follow` waits, in seconds.
    #[arg(long, default_value_t = crate::options::DEFAULT_FOLLOW_TIMEOUT_SECS)]
    pub timeout: u64,
    /// Seconds without the execution in the store before `--follow` says why it is likely
    /// not taken (no workflow worker running, the function registered nowhere); it then
    /// keeps following.
    #[arg(long, default_value_t = crate::options::DEFAULT_NOT_TAKEN_AFTER_SECS)]
    pub not_taken_after: u64,
    /// Past this the execution finishes `timed-out` and its children are cancelled: an RFC
    /// 3339 instant or a duration from now (`90s`, `5m`, `1h 30m`). The component's
    /// `deadline_ms`, if earlier, wins.
    #[arg(long)]
    pub deadline: Option<String>,
    /// At most `--concurrency-limit` executions submitted with this key run at once, whatever
    /// their function; the others wait (`queued`) and start in the order they came. 1 to 128
    /// bytes of printable ASCII without spaces.
    #[arg(long, value_name = "KEY")]
    pub concurrency_key: Option<String>,
    /// How many executions with `--concurrency-key` run at once (1 to 1000; default 1).
    #[arg(long, value_name = "N", requires = "concurrency_key")]
    pub concurrency_limit: Option<i64>,
    /// Whose work this is, for fairness: submissions are taken round-robin by tenant within a
    /// partition. 1 to 128 bytes; without it the execution shares the lane of submissions
    /// without a tenant.
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct SendEventArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Where to send it: an execution id (`E_<ulid>…`), or a correlation key (any other
    /// target, e.g. `payment:order-42`: 1 to 128 bytes of printable ASCII without spaces, not
    /// starting with `schedule:` or `weir:`), whose event reaches the execution that
    /// registered the key (`correlate`), or waits in the key until one does.
    #[arg(value_name = "TARGET")]
    pub execution_id: String,
    /// The event's name: what the workflow waits for (`await-event`, `submit-event`).
    pub name: String,
    /// Its payload, JSON text, e.g. `'{"approver": "ann"}'`.
    pub payload: String,
    /// The idempotency key: an event id the execution has seen already is dropped (and a
    /// key keeps one of those it holds for a later execution). A new ULID by default (sending
    /// twice then sends two events).
    #[arg(long)]
    pub event_id: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StubArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The stub child's id, `E_<ulid>….<join set>_<index>` (as its parent's history shows it).
    pub execution_id: String,
    /// Its value: `'{"ok": …}'` or `'{"err": …}'`, of the stub function's result type.
    pub result: String,
    /// How long to wait for the parent to take it, in seconds.
    #[arg(long, default_value_t = crate::options::DEFAULT_FOLLOW_TIMEOUT_SECS)]
    pub timeout: u64,
}

#[derive(Debug, Clone, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The execution to stop, `E_<ulid>…`.
    pub execution_id: String,
    /// Why: kept in its history and its result.
    #[arg(long, default_value = "cancelled from the command line")]
    pub reason: String,
    /// Finish it at once, without letting the workflow react (no compensation runs).
    #[arg(long)]
    pub terminate: bool,
}

/// Exit code of `weir stub` when the stub holds another value (Obelisk's `conflict`).
pub const STUB_CONFLICT: u8 = 6;

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The execution id, `E_<ulid>…`.
    pub execution_id: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Fails with the broker's reason when `topic` cannot be seen (most often a missing ACL: a
/// topic the user may not describe looks absent, and a later call only says "unknown
/// partition").
fn visible<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> anyhow::Result<()> {
    let metadata = client.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    match metadata.topics().first().and_then(|t| t.error()) {
        None => Ok(()),
        Some(code) => anyhow::bail!(
            "cannot use topic `{topic}`: {} (authorization failures mean the Kafka user lacks \
             the client's ACLs: docs/security.md)",
            rdkafka::error::RDKafkaErrorCode::from(code)
        ),
    }
}

pub(super) fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

pub(super) fn topology(cluster: &ClusterArgs) -> anyhow::Result<Topology> {
    Ok(Topology::load(&cluster.topology)?.with_namespace(&cluster.namespace)?)
}

/// `weir send-event`: sends the event and prints its id once the broker has it.
pub async fn send_event(args: SendEventArgs) -> ExitCode {
    let run = async {
        let event = crate::kafka::submit::event(
            &args.execution_id,
            &args.name,
            &args.payload,
            args.event_id.clone(),
            chrono::Utc::now(),
        )?;
        let topology = topology(&args.cluster)?;
        let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
        let topic = &topology.topic(TopicRole::Events).name;
        crate::kafka::submit::send_event(&producer, &Codec::single_object(), topic, &event).await?;
        println!("{}", event.event().event_id);
        anyhow::Ok(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `weir stub`: writes a stub child's value from outside, with Obelisk's answers: `ok` (it
/// holds this value, now or already), `conflict` (it holds another; exit code
/// [`STUB_CONFLICT`]), `not-found` (its parent made no such stub request).
pub async fn stub(args: StubArgs) -> ExitCode {
    use crate::present::{StubState, stub_state};
    let run = async {
        let child: ExecutionId = args.execution_id.parse()?;
        let Some(parent) = child.parent() else {
            anyhow::bail!("not-found: {child} is a top-level execution, nobody's stub");
        };
        let result: ExecutionResult = serde_json::from_str(&args.result).map_err(|e| {
            anyhow::anyhow!(r#"the value is not `{{"ok": …}}` or `{{"err": …}}`: {e}"#)
        })?;
        if let ExecutionResult::ExecutionError(_) = result {
            anyhow::bail!(r#"a stub's value is `{{"ok": …}}` or `{{"err": …}}`"#);
        }
        let store = store(&args.cluster).await?;
        let codec = Codec::single_object();
        let read = || async {
            let rows = store.history(&parent).await?;
            anyhow::Ok(stub_state(&codec, &rows, &child)?)
        };
        match read().await? {
            StubState::NotAStub => anyhow::bail!(
                "not-found: {parent} has made no stub request {child} (in keyspace {})",
                args.cluster.keyspace
            ),
            StubState::Written(held) if held == result => {
                println!("ok: {child} holds this value already");
                return Ok(ExitCode::SUCCESS);
            }
            StubState::Written(held) => return Ok(conflict(&child, &held)),
            StubState::Open => {}
        }
        let topology = topology(&args.cluster)?;
        let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
        let topic = &topology.topic(TopicRole::Responses).name;
        crate::kafka::submit::send_stub(&producer, &codec, topic, &child, result.clone()).await?;
        let deadline = Instant::now() + Duration::from_secs(args.timeout);
        loop {
            match read().await? {
                StubState::Written(held) if held == result => {
                    println!("ok: {child} = {result}");
                    return Ok(ExitCode::SUCCESS);
                }
                // Another writer came first.
                StubState::Written(held) => return Ok(conflict(&child, &held)),
                _ if Instant::now() > deadline => anyhow::bail!(
                    "{parent} has not taken the value within {} s: see weir.dlq (a value that \
                     does not fit the stub function's result type is refused)",
                    args.timeout
                ),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    match run.await {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn conflict(child: &ExecutionId, held: &ExecutionResult) -> ExitCode {
    eprintln!("conflict: {child} holds {held}");
    ExitCode::from(STUB_CONFLICT)
}

/// `weir cancel`: asks an execution to stop (with `--terminate`, to finish at once).
pub async fn cancel(args: CancelArgs) -> ExitCode {
    let run = async {
        let id: ExecutionId = args.execution_id.parse()?;
        let store = store(&args.cluster).await?;
        match store.execution(&id).await? {
            None => anyhow::bail!(
                "no execution {id} in keyspace {} (an execution submitted an instant ago is \
                 not in the store yet: try again)",
                args.cluster.keyspace
            ),
            Some(row) if row.state == crate::store::ExecutionState::Finished => {
                println!("{id} has finished already: nothing to cancel");
                return Ok(());
            }
            Some(_) => {}
        }
        let request = crate::codec::CancelRequest {
            execution_id: id.clone(),
            reason: args.reason.clone(),
            terminate: args.terminate,
            requested_at: chrono::Utc::now(),
            waited_until: None,
        };
        let topology = topology(&args.cluster)?;
        let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
        let topic = &topology.topic(TopicRole::Responses).name;
        crate::kafka::submit::send_cancel(&producer, &Codec::single_object(), topic, &request)
            .await?;
        println!(
            "{id}: {} requested (`weir status {id}` shows when it has finished)",
            if args.terminate {
                "termination"
            } else {
                "cancellation"
            }
        );
        anyhow::Ok(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

pub async fn submit(args: SubmitArgs) -> ExitCode {
    match submit_inner(args).await {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

async fn submit_inner(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let ffqn: Ffqn = args.ffqn.parse()?;
    let params: Value = serde_json::from_str(&args.params)
        .map_err(|e| anyhow::anyhow!("params are not JSON: {e}"))?;
    if !params.is_array() {
        anyhow::bail!("params must be a JSON array, one element per parameter");
    }
    let deadline = args
        .deadline
        .as_deref()
        .map(|d| crate::kafka::submit::parse_deadline(d, chrono::Utc::now()))
        .transpose()?;
    let concurrency = crate::kafka::submit::concurrency_key(
        args.concurrency_key.as_deref(),
        args.concurrency_limit,
    )?;
    if let Some(tenant) = &args.tenant {
        crate::kafka::submit::validate_tenant(tenant)?;
    }
    let topology = topology(&args.cluster)?;
    let kafka = args.cluster.kafka()?;
    let codec = Codec::single_object();
    let id = ExecutionId::top_level(ulid::Ulid::new());
    let submissions = &topology.topic(TopicRole::Submissions).name;
    let producer: FutureProducer = kafka.producer().create()?;
    // Following reads the store: connect before submitting, so that a store out of reach
    // fails before anything runs.
    let store = if args.follow {
        // A topic the user may not use fails here with the broker's reason, not later with
        // a timeout.
        visible(producer.client(), submissions)?;
        Some(store(&args.cluster).await?)
    } else {
        None
    };
    let submission = crate::codec::Submission {
        concurrency,
        tenant: args.tenant,
        ..crate::codec::Submission::top_level(
            &id,
            ffqn.clone(),
            params,
            Default::default(),
            deadline,
        )
    };
    crate::kafka::submit::submit(&producer, &codec, submissions, &submission).await?;
    println!("{id}");
    let Some(store) = store else {
        return Ok(ExitCode::SUCCESS);
    };
    let settings = super::follow::FollowSettings {
        timeout: Duration::from_secs(args.timeout),
        not_taken_after: Duration::from_secs(args.not_taken_after),
    };
    super::follow::follow(&store, &kafka, &id, &ffqn.to_string(), settings).await
}

pub(super) async fn store(cluster: &ClusterArgs) -> anyhow::Result<CqlStore> {
    let session = connect(&cluster.cql()?).await?;
    Ok(CqlStore::new(Arc::new(session), &cluster.keyspace).await?)
}

pub async fn status(args: ShowArgs) -> ExitCode {
    let run = async {
        let id: ExecutionId = args.execution_id.parse()?;
        let store = store(&args.cluster).await?;
        let Some(row) = store.execution(&id).await? else {
            anyhow::bail!("no execution {id} in keyspace {}", args.cluster.keyspace);
        };
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&crate::present::execution_json(&row))?
            );
        } else {
            println!("execution  {id}");
            println!("function   {}", row.ffqn);
            println!("state      {}", row.state);
            // Why it is paused: its last `Paused` entry's reason (an operator's, or the
            // activity whose attempts were exhausted under `on_exhausted = "pause"`).
            if row.state == crate::store::ExecutionState::Paused {
                let rows = store.history(&id).await?;
                let entries = crate::present::decode_history(&Codec::single_object(), &rows)?;
                if let Some(reason) = crate::present::paused_because(&entries) {
                    println!("paused     {reason}");
                }
            }
            println!("params     {}", row.params);
            if let Some(parent) = &row.parent_id {
                println!("parent     {parent}");
            }
            println!("history    {} records", row.history_version);
            println!("created    {}", row.created_at.to_rfc3339());
            if let Some(finished) = row.finished_at {
                println!("finished   {}", finished.to_rfc3339());
            }
            if let Some(result) = &row.result {
                println!("result     {result}");
            }
        }
        Ok(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

pub async fn history(args: ShowArgs) -> ExitCode {
    let run = async {
        let id: ExecutionId = args.execution_id.parse()?;
        let store = store(&args.cluster).await?;
        let rows = store.history(&id).await?;
        if rows.is_empty() {
            anyhow::bail!("no history for {id} in keyspace {}", args.cluster.keyspace);
        }
        let entries = crate::present::decode_history(&Codec::single_object(), &rows)?;
        if args.json {
            let json: Vec<Value> = entries
                .iter()
                .map(|(row, record)| crate::present::history_entry_json(row, record))
                .collect();
            println!("{}", serde_json::to_string_pretty(&json)?);
        } else {
            for line in crate::present::history_lines(&entries) {
                println!("{line}");
            }
        }
        Ok(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};
    use super::*;

    fn submit_args(args: &[&str]) -> SubmitArgs {
        let cli = Cli::try_parse_from(
            [
                "weir",
                "submit",
                "weir-examples:workflows/hello.greet",
                "[\"ann\"]",
            ]
            .into_iter()
            .chain(args.iter().copied()),
        )
        .expect("the flags parse");
        match cli.command {
            Command::Submit(args) => args,
            other => panic!("not a submit: {other:?}"),
        }
    }

    /// `--tenant` is taken as given; one out of bounds is refused with why before anything
    /// is sent (nor the topology read: no cluster is needed to hear it).
    #[tokio::test]
    async fn submit_takes_a_tenant_and_refuses_a_bad_one_before_sending() {
        assert_eq!(submit_args(&[]).tenant, None);
        assert_eq!(
            submit_args(&["--tenant", "acme"]).tenant.as_deref(),
            Some("acme")
        );
        let long = "t".repeat(129);
        for (tenant, why) in [("", "the tenant is empty"), (long.as_str(), "129 bytes")] {
            let mut args = submit_args(&["--tenant", tenant]);
            args.cluster.topology = "/nonexistent/topics.toml".into();
            let error = submit_inner(args).await.expect_err("refused").to_string();
            assert!(error.contains(why) && error.contains("1 to 128"), "{error}");
        }
    }
}
