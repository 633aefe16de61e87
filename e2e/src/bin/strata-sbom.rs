//! `strata-sbom SERVICE [--target TRIPLE]`: prints the CycloneDX SBOM of a service binary
//! (`strata_e2e::sbom`), from `cargo metadata` and `Cargo.lock` of the workspace it runs in.
//! `scripts/images.sh` writes one beside each image.

use std::process::{Command, ExitCode};

use anyhow::{Context as _, Result, bail};
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
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
        ])
        .arg(&cli.target)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let root = metadata["workspace_root"]
        .as_str()
        .context("no workspace_root")?;
    let lock =
        std::fs::read_to_string(format!("{root}/Cargo.lock")).context("reading Cargo.lock")?;
    let bom = strata_e2e::sbom::cyclonedx(
        &metadata,
        &strata_e2e::sbom::lock_checksums(&lock),
        &cli.service,
    )?;
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
