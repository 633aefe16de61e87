//! `strata-sbom SERVICE [--target TRIPLE]`: prints the CycloneDX SBOM of a service binary
//! (`strata_e2e::sbom`), from `cargo metadata` and `Cargo.lock` of the workspace it runs in.
//! `scripts/images.sh` writes one beside each image.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "strata-sbom",
    about = "CycloneDX SBOM of a Strata service binary"
)]
struct Cli {
    /// The service (a workspace package with a binary).
    service: String,
    /// The platform the binary is built for: dependencies of other platforms are left out.
    #[arg(long, default_value = "x86_64-unknown-linux-gnu")]
    target: String,
}

fn run(cli: &Cli) -> Result<String> {
    let bom = strata_e2e::sbom::for_service(&cli.service, &cli.target)?;
    Ok(serde_json::to_string_pretty(&bom)? + "\n")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(bom) => {
            print!("{bom}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata-sbom: {e:#}");
            ExitCode::FAILURE
        }
    }
}
