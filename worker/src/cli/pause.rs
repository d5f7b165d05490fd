//! `weir pause` and `weir resume`: send a [`PauseRequest`](crate::codec::PauseRequest) for an
//! execution and wait until the store shows it taken (the rules: [`crate::pause`]).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use rdkafka::producer::FutureProducer;

use super::ClusterArgs;
use super::client::{fail, store, topology};
use crate::codec::{Codec, PauseAction};
use crate::model::ExecutionId;
use crate::pause::{PauseStep, check, done, request, taken};
use crate::store::Store;
use crate::topology::TopicRole;

/// How often the store is read while waiting for the request to be taken.
const POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The execution, `E_<ulid>…`.
    pub execution_id: String,
    /// Why: kept in its history.
    #[arg(long)]
    pub reason: Option<String>,
    /// How long to wait, in seconds, until the store shows it taken (0: do not wait).
    #[arg(long, default_value_t = crate::options::DEFAULT_FOLLOW_TIMEOUT_SECS)]
    pub timeout: u64,
}

/// `weir pause` (`action` Pause) or `weir resume` (Resume).
pub async fn run(args: PauseArgs, action: PauseAction) -> ExitCode {
    let run = async {
        let id: ExecutionId = args.execution_id.parse()?;
        let store = store(&args.cluster).await?;
        let row = store.execution(&id).await?;
        if check(&id, row.as_ref(), action)? == PauseStep::AlreadyThere {
            let state = row.map(|r| r.state.to_string()).unwrap_or_default();
            println!("{id} is {state}: nothing to do");
            return Ok(());
        }
        let reason = args
            .reason
            .clone()
            .unwrap_or_else(|| format!("{} from the command line", done(action)));
        let topology = topology(&args.cluster)?;
        let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
        let topic = &topology.topic(TopicRole::Responses).name;
        let request = request(&id, action, reason);
        crate::kafka::submit::send_pause(&producer, &Codec::single_object(), topic, &request)
            .await?;
        if args.timeout == 0 {
            println!("{id}: {} requested", verb(action));
            return Ok(());
        }
        let until = Instant::now() + Duration::from_secs(args.timeout);
        loop {
            let row = store.execution(&id).await?;
            match row {
                Some(row) if taken(&row, action) => {
                    println!("{id} {} (now {})", done(action), row.state);
                    return Ok(());
                }
                _ if Instant::now() >= until => anyhow::bail!(
                    "{id}: {} requested, not taken within {} s (is a worker running? a request \
                     the owner refuses goes to the DLQ with why)",
                    verb(action),
                    args.timeout
                ),
                _ => tokio::time::sleep(POLL).await,
            }
        }
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn verb(action: PauseAction) -> &'static str {
    match action {
        PauseAction::Pause => "pause",
        PauseAction::Resume => "resume",
    }
}
