//! `strata`: status, wait, render, layers, drift, rollout and admission commands.

mod admission;
mod cli;
mod drift;
mod layers;
mod render;
mod rollout;
mod status;
mod wait;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("strata: {e:#}");
            ExitCode::from(1)
        }
    }
}
