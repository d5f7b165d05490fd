//! `weir query`: ask a running execution a query and print the answer (the feature:
//! [`weir_core::query`]; the client: [`crate::kafka::query_client`]).
//!
//! Exit codes: 0 with the value as JSON on stdout; [`ERROR_ANSWER`] when the answer is an error
//! (`<kind>: <message>` on stderr); [`NO_ANSWER`] when no answer came by the deadline; 1 for
//! anything else (a bad argument, Kafka unreachable).

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use rdkafka::producer::FutureProducer;
use serde_json::Value;

use super::ClusterArgs;
use super::client::{fail, topology};
use crate::codec::Codec;
use crate::kafka::query_client::{QueryClient, QueryClientError, request};
use crate::model::ExecutionId;

/// The exit code of an answer that is an error (`unknown-query`, `finished`, …).
pub const ERROR_ANSWER: u8 = 4;
/// The exit code when no answer came by the deadline.
pub const NO_ANSWER: u8 = 5;

#[derive(Debug, Clone, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The execution, `E_<ulid>…`.
    #[arg(value_name = "EXECUTION")]
    pub execution_id: String,
    /// The query function, as its component declares it in `queries` (`status`).
    pub name: String,
    /// Its arguments as a JSON array, one element per parameter.
    #[arg(value_name = "PARAMS_JSON", default_value = "[]")]
    pub params: String,
    /// How long to wait for the answer (`500ms`, `10s`, `1m`), or an RFC 3339 instant; an
    /// owner that takes the query later answers `deadline-exceeded` without running it.
    #[arg(long, default_value = "10s")]
    pub deadline: String,
}

pub async fn run(args: QueryArgs) -> ExitCode {
    let run = async {
        let id: ExecutionId = args
            .execution_id
            .parse()
            .map_err(|e| anyhow::anyhow!("execution `{}`: {e}", args.execution_id))?;
        let params: Value = serde_json::from_str(&args.params)
            .map_err(|e| anyhow::anyhow!("params `{}` are not JSON: {e}", args.params))?;
        let now = chrono::Utc::now();
        let deadline = crate::kafka::submit::parse_deadline(&args.deadline, now)?;
        let wait = (deadline - now).to_std().unwrap_or_default();
        let request = request(id, &args.name, params, wait)?;
        let topology = topology(&args.cluster)?;
        let kafka = args.cluster.kafka()?;
        let producer: FutureProducer = kafka.producer().create()?;
        let client = QueryClient::new(
            &kafka,
            Arc::new(Codec::single_object()),
            &topology,
            producer,
        );
        anyhow::Ok(client.ask(&request).await)
    };
    match run.await {
        Ok(Ok(answer)) => match answer.outcome {
            Ok(value) => {
                println!("{value}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{}: {}", error.kind, error.message);
                ExitCode::from(ERROR_ANSWER)
            }
        },
        Ok(Err(e @ QueryClientError::NoAnswer { .. })) => {
            eprintln!("error: {e}");
            ExitCode::from(NO_ANSWER)
        }
        Ok(Err(e)) => fail(e),
        Err(e) => fail(e),
    }
}
