//! `weir topology apply|check`: create (or only check) the Kafka topics of `topology/` and the
//! CQL schema of `schemas/cql/`, and report drift; `apply` also sends a `create` for each
//! schedule `topology/schedules.toml` declares.

use std::process::ExitCode;

use clap::Subcommand;

use super::ClusterArgs;
use crate::kafka::admin::{AdminError, TopicOutcome, apply_topics};
use crate::store::schema::{self, TableOutcome};
use crate::store::{CqlConfig, StoreError, connect};
use crate::topology::Topology;

#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Create what is missing, then check everything; drift is an error (exit code 3).
    Apply(ClusterArgs),
    /// Create nothing; report what is missing or different (exit code 3 if anything is).
    Check(ClusterArgs),
}

pub async fn run(command: TopologyCommand) -> ExitCode {
    let (args, create) = match command {
        TopologyCommand::Apply(args) => (args, true),
        TopologyCommand::Check(args) => (args, false),
    };
    let topology =
        match Topology::load(&args.topology).and_then(|t| t.with_namespace(&args.namespace)) {
            Ok(topology) => topology,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
    let mut drift = false;
    let mut failed = false;
    let kafka = match args.kafka() {
        Ok(kafka) => kafka,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };

    match apply_topics(&kafka, &topology.topics, create).await {
        Ok(outcomes) => {
            for (topic, outcome) in outcomes {
                let verb = match outcome {
                    TopicOutcome::Created => "created",
                    TopicOutcome::Unchanged => "ok",
                };
                println!("topic  {topic:<40} {verb}");
            }
        }
        Err(e @ AdminError::Drift(_)) => {
            eprintln!("drift: {e}");
            drift = true;
        }
        Err(e) => {
            eprintln!("error: {e}");
            failed = true;
        }
    }

    let cql = match args.cql() {
        Ok(cql) => cql,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match apply_schema(&cql, create).await {
        Ok(outcomes) => {
            for (table, outcome) in outcomes {
                let verb = match outcome {
                    TableOutcome::Created => "created",
                    TableOutcome::Unchanged => "ok",
                };
                println!("table  {:<40} {verb}", format!("{}.{table}", args.keyspace));
            }
        }
        Err(e @ StoreError::Drift { .. }) => {
            eprintln!("drift: {e}");
            drift = true;
        }
        Err(e) => {
            eprintln!("error: {e}");
            failed = true;
        }
    }

    // The declared schedules: checked either way, a `create` sent for each by `apply` (the
    // same spec again changes nothing).
    match crate::topology::schedules::load(&args.topology) {
        Err(e) => {
            eprintln!("error: {e}");
            failed = true;
        }
        Ok(declared) if create && !failed => {
            if let Err(e) = send_schedules(&kafka, &topology, &declared).await {
                eprintln!("error: {e:#}");
                failed = true;
            }
        }
        Ok(declared) => {
            for schedule in declared {
                println!("schedule  {:<37} declared", schedule.name);
            }
        }
    }

    if failed {
        ExitCode::FAILURE
    } else if drift {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

async fn send_schedules(
    kafka: &crate::kafka::KafkaConfig,
    topology: &Topology,
    declared: &[crate::topology::schedules::Declared],
) -> anyhow::Result<()> {
    if declared.is_empty() {
        return Ok(());
    }
    let producer: rdkafka::producer::FutureProducer = kafka.producer().create()?;
    let codec = crate::codec::Codec::single_object();
    for schedule in declared {
        let command = crate::kafka::schedules::command(
            &schedule.name,
            weir_core::schedule::ScheduleAction::Create(schedule.spec.clone()),
        );
        crate::kafka::schedules::send(&producer, &codec, topology, &command).await?;
        println!("schedule  {:<37} create sent", schedule.name);
    }
    Ok(())
}

async fn apply_schema(
    config: &CqlConfig,
    create: bool,
) -> Result<Vec<(String, TableOutcome)>, StoreError> {
    let tables = schema::parse_tables(schema::TABLES_CQL)?;
    let session = connect(config).await?;
    schema::apply(
        &session,
        &config.keyspace,
        config.replication_factor,
        &tables,
        create,
    )
    .await
}
