//! `weir deploy`, and the workflow builds a deployment keeps in the store.
//!
//! Executions are pinned to the build they started with (`wasm/versions.rs`); so that every
//! worker can still run them after newer builds are deployed, each workflow build is stored
//! under its digest. `weir deploy` stores the builds of a registry (having loaded and linked
//! them, so a broken one is refused before any worker gets it), and every workflow worker does
//! the same at start, so a deploy that only ships new files loses nothing either. A build
//! already stored is not written again.

use std::process::ExitCode;
use std::sync::Arc;

use chrono::Utc;
use clap::Args;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::store::{ComponentBuild, CqlStore, Store, connect};
use crate::wasm::engine::{component_digest, read_component};
use crate::wasm::registry::{ComponentKind, Registry};
use crate::wasm::versions::{BuildSource, NamedBuild};

#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    pub cluster: super::ClusterArgs,
    #[command(flatten)]
    pub registry: super::RegistryArgs,
}

/// One workflow build of a registry, and whether this call stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    pub name: String,
    pub digest: String,
    pub stored_now: bool,
}

/// Stores every workflow build of `registry` the store does not hold yet.
pub async fn store_builds<S: Store>(
    registry: &Registry,
    store: &S,
) -> anyhow::Result<Vec<Deployed>> {
    let mut deployed = Vec::new();
    for component in registry.components() {
        if component.spec.kind != ComponentKind::Workflow {
            continue;
        }
        let name = component.spec.name.clone();
        let digest = component.digest.clone();
        let stored_now = !store.has_component_build(&digest).await?;
        if stored_now {
            let bytes = read_component(&component.spec.path)?;
            // The file is read again: it must still be the build that was loaded.
            let found = component_digest(&bytes);
            anyhow::ensure!(
                found == digest,
                "component `{name}`: {} changed since it was loaded ({digest}, now {found})",
                component.spec.path.display()
            );
            store
                .put_component_build(&ComponentBuild {
                    digest: digest.clone(),
                    name: name.clone(),
                    bytes,
                    registered_at: Utc::now(),
                })
                .await?;
        }
        deployed.push(Deployed {
            name,
            digest,
            stored_now,
        });
    }
    Ok(deployed)
}

/// The store as the host's source of older builds.
pub struct StoredBuilds<S>(pub Arc<S>);

impl<S: Store + 'static> BuildSource for StoredBuilds<S> {
    fn fetch<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Option<NamedBuild>, String>> {
        async move {
            let build = self
                .0
                .component_build(digest)
                .await
                .map_err(|e| e.to_string())?;
            Ok(build.map(|b| (b.name, b.bytes)))
        }
        .boxed()
    }
}

pub async fn run(args: DeployArgs) -> ExitCode {
    match deploy(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    // Loading links every workflow against the registry.
    let host = super::offline_host(args.registry.specs()?)?;
    let session = connect(&args.cluster.cql()?).await?;
    let store = CqlStore::new(Arc::new(session), &args.cluster.keyspace).await?;
    for d in store_builds(host.registry(), &store).await? {
        let what = if d.stored_now {
            "stored"
        } else {
            "already stored"
        };
        println!("{:<20} {}  {what}", d.name, d.digest);
    }
    Ok(())
}
