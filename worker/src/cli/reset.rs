//! `weir reset`: start a new execution from an execution's history up to a point (its last
//! good step), and wait until the old history shows the link (the rules: [`crate::reset`],
//! `docs/design/reset.md`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use rdkafka::producer::FutureProducer;

use super::ClusterArgs;
use super::client::{fail, store, topology};
use crate::codec::{Codec, ResetThen};
use crate::model::ExecutionId;
use crate::reset::{check, new_id, points, records, request, taken};
use crate::store::Store;
use crate::topology::TopicRole;

/// How often the store is read while waiting for the reset to be taken.
const POLL: Duration = Duration::from_millis(200);

/// What becomes of the execution reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Then {
    /// It goes on as it was.
    Keep,
    /// It is cancelled (it runs its compensations).
    Cancel,
    /// It is terminated at once.
    Terminate,
}

impl From<Then> for ResetThen {
    fn from(then: Then) -> ResetThen {
        match then {
            Then::Keep => ResetThen::Keep,
            Then::Cancel => ResetThen::Cancel,
            Then::Terminate => ResetThen::Terminate,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The execution, `E_<ulid>` (a top-level one).
    pub execution_id: String,
    /// The last seq of its history the new execution keeps (`weir history` shows the seqs;
    /// 0 starts it afresh with the same params). Without it, the points a reset may keep up
    /// to are listed.
    #[arg(long)]
    pub to_seq: Option<u64>,
    /// What becomes of the execution reset.
    #[arg(long, value_enum, default_value_t = Then::Keep)]
    pub then: Then,
    /// Why: kept in both histories.
    #[arg(long)]
    pub reason: Option<String>,
    /// How long to wait, in seconds, until the store shows the reset taken (0: do not wait).
    #[arg(long, default_value_t = crate::options::DEFAULT_FOLLOW_TIMEOUT_SECS)]
    pub timeout: u64,
}

pub async fn run(args: ResetArgs) -> ExitCode {
    let run = async {
        let id: ExecutionId = args.execution_id.parse()?;
        let store = store(&args.cluster).await?;
        let codec = Codec::single_object();
        let rows = store.history(&id).await?;
        let Some(to_seq) = args.to_seq else {
            if rows.is_empty() {
                anyhow::bail!("no execution {id} in the store");
            }
            let points = points(&id, &records(&codec, &rows)?);
            println!(
                "{id}: a reset may keep its history up to seq {} (--to-seq)",
                points
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Ok(());
        };
        let new = new_id();
        check(&codec, &id, &rows, to_seq, &new)?;
        let reason = args
            .reason
            .clone()
            .unwrap_or_else(|| "reset from the command line".to_owned());
        let topology = topology(&args.cluster)?;
        let producer: FutureProducer = args.cluster.kafka()?.producer().create()?;
        let topic = &topology.topic(TopicRole::Responses).name;
        let request = request(&id, to_seq, &new, args.then.into(), reason);
        crate::kafka::submit::send_reset(&producer, &codec, topic, &request).await?;
        if args.timeout == 0 {
            println!("{id}: reset to seq {to_seq} requested: {new}");
            return Ok(());
        }
        let until = Instant::now() + Duration::from_secs(args.timeout);
        loop {
            let rows = store.history(&id).await?;
            if taken(&records(&codec, &rows)?, &new) {
                println!("{id}: reset to seq {to_seq}: {new}");
                return Ok(());
            }
            if Instant::now() >= until {
                anyhow::bail!(
                    "{id}: reset to seq {to_seq} into {new} requested, not taken within {} s (is \
                     a worker running? a request the owner refuses goes to the DLQ with why)",
                    args.timeout
                );
            }
            tokio::time::sleep(POLL).await;
        }
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
