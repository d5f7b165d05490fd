//! `weir digest`: the content digest of every component of a registry, beside the one
//! `components.toml` records, so that an operator can record them at deploy (and a worker
//! with `--require-digests` refuses any component without one). Exit code 1 when a recorded
//! digest does not match its file, or a file cannot be read.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use crate::wasm::engine::{component_digest, read_component};

#[derive(Debug, Clone, Args)]
pub struct DigestArgs {
    #[command(flatten)]
    pub registry: super::RegistryArgs,
}

pub fn run(args: DigestArgs) -> ExitCode {
    let specs = match args.registry.specs() {
        Ok(specs) => specs,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    let mut out = std::io::stdout().lock();
    for spec in specs {
        let found = match read_component(&spec.path) {
            Ok(bytes) => component_digest(&bytes),
            Err(e) => {
                eprintln!("error: component `{}`: {e}", spec.name);
                failed = true;
                continue;
            }
        };
        let recorded = match &spec.digest {
            None => "not recorded",
            Some(d) if *d == found => "recorded, matches",
            Some(_) => {
                failed = true;
                "RECORDED DIGEST DIFFERS"
            }
        };
        // A closed pipe (`| head`) ends the listing, not in a panic.
        if writeln!(out, "{:<20} digest = \"{found}\"  # {recorded}", spec.name).is_err() {
            break;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
