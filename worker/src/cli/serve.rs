//! `weir serve`: the HTTP API ([`crate::api`]) on an address, with its tokens read from files.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tracing::{info, warn};

use super::ClusterArgs;
use crate::api::{Access, Api, Scope, Tokens};
use crate::codec::Codec;
use crate::options;
use crate::topology::Topology;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Address the API listens on.
    #[arg(long, env = "WEIR_API_LISTEN", default_value = options::DEFAULT_API_LISTEN)]
    pub listen: SocketAddr,
    /// File of read tokens (get, history, list), one a line (`#` comments and blank lines
    /// ignored).
    #[arg(long, env = "WEIR_API_READ_TOKENS_FILE")]
    pub read_tokens_file: Option<PathBuf>,
    /// File of admin tokens (read, and submit), one a line.
    #[arg(long, env = "WEIR_API_ADMIN_TOKENS_FILE")]
    pub admin_tokens_file: Option<PathBuf>,
    /// Serve without any authentication: anyone who reaches the address may submit. Logged
    /// as a warning at start.
    #[arg(long)]
    pub api_insecure_no_auth: bool,
    /// A host name requests may name (their `Host`) besides IP addresses and `localhost`,
    /// e.g. the name the API is reached by behind a proxy; repeatable, `*` allows any. Others
    /// are refused: a page could rebind its own name to the API's address.
    #[arg(
        long = "api-allowed-host",
        env = "WEIR_API_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub api_allowed_hosts: Vec<String>,
}

fn read_tokens(tokens: &mut Tokens, scope: Scope, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the {scope:?} tokens file {}: {e}",
            path.display()
        )
    })?;
    let mut added = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        anyhow::ensure!(
            line.len() >= 16,
            "{}: a token must be at least 16 characters",
            path.display()
        );
        tokens.add(scope, line);
        added += 1;
    }
    anyhow::ensure!(added > 0, "{} holds no token", path.display());
    Ok(())
}

pub async fn run(args: ServeArgs) -> ExitCode {
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut tokens = Tokens::default();
    if let Some(path) = &args.read_tokens_file {
        read_tokens(&mut tokens, Scope::Read, path)?;
    }
    if let Some(path) = &args.admin_tokens_file {
        read_tokens(&mut tokens, Scope::Admin, path)?;
    }
    let access = match (tokens.is_empty(), args.api_insecure_no_auth) {
        (true, false) => anyhow::bail!(
            "the API needs tokens (--read-tokens-file, --admin-tokens-file), or \
             --api-insecure-no-auth to serve anyone who reaches {}",
            args.listen
        ),
        (false, true) => anyhow::bail!("tokens and --api-insecure-no-auth exclude each other"),
        (true, true) => {
            warn!(listen = %args.listen, "the API runs WITHOUT authentication (--api-insecure-no-auth): anyone who reaches it may submit executions and read every one");
            Access::Anyone
        }
        (false, false) => Access::Tokens(tokens),
    };
    let cluster = &args.cluster;
    let topology = Topology::load(&cluster.topology)?.with_namespace(&cluster.namespace)?;
    let kafka = cluster.kafka()?;
    let producer: rdkafka::producer::FutureProducer = kafka.producer().create()?;
    let queries = crate::kafka::query_client::QueryClient::new(
        &kafka,
        Arc::new(Codec::single_object()),
        &topology,
        producer.clone(),
    );
    let api = Arc::new(Api {
        access,
        producer,
        topology,
        codec: Codec::single_object(),
        store: super::client::store(cluster).await?,
        namespace: cluster.namespace.clone(),
        kafka: kafka.clone(),
        allowed_hosts: crate::api::guard::AllowedHosts::new(
            args.api_allowed_hosts.iter().map(String::as_str),
        ),
        state_reads: Default::default(),
        streams: Default::default(),
        queries,
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    info!(listen = %listener.local_addr()?, "API serving");
    // SIGTERM (docker stop, Kubernetes) and SIGINT alike: finish the requests in flight.
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let router = crate::api::router(Arc::clone(&api));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            info!("API stopping");
            // Live views never end by themselves: end them, or the shutdown waits for them.
            api.streams.stop();
        })
        .await?;
    Ok(())
}
