//! `strata rollout plan`: what ONE reconcile of the rollout-operator would do on a saved state.

use std::path::Path;
use std::process::ExitCode;

use core_status::input::read_sources;
use rollout_operator::observed::Observed;

use crate::cli::input_error;
use crate::status::parse_now;

pub fn plan(state: &Path, now: Option<&str>) -> anyhow::Result<ExitCode> {
    let now = match parse_now(now) {
        Ok(now) => now,
        Err(e) => return Ok(input_error(&e)),
    };
    let source = state.display().to_string();
    let documents = match read_sources(std::slice::from_ref(&source)) {
        Ok(documents) => documents,
        Err(e) => return Ok(input_error(&e.to_string())),
    };
    let docs = documents.into_iter().map(|d| (d.index, d.object)).collect();
    let observed = match Observed::from_documents(&source, docs) {
        Ok(observed) => observed,
        Err(e) => return Ok(input_error(&e.to_string())),
    };
    let plan = rollout_operator::plan::plan(&observed, now);
    println!("{}", serde_json::to_string_pretty(&plan)?);
    Ok(ExitCode::SUCCESS)
}
