//! `strata rollout plan`: what ONE reconcile of the rollout-operator would do on a saved state.

use std::path::Path;
use std::process::ExitCode;

use core_rollout::observed::Observed;
use core_status::input::read_sources;

use crate::cli::input_error;
use crate::status::parse_now;

/// Reads a `--state`/`-f` dump (`kubectl get -o yaml` output) into the observed state.
pub fn read_state(path: &Path) -> Result<Observed, String> {
    let source = path.display().to_string();
    let documents = read_sources(std::slice::from_ref(&source)).map_err(|e| e.to_string())?;
    let docs = documents.into_iter().map(|d| (d.index, d.object)).collect();
    Observed::from_documents(&source, docs).map_err(|e| e.to_string())
}

/// `--prepared POD=TIME`: the preparation time (unix seconds) a pod would report.
pub fn parse_prepared(value: &str) -> Result<(String, i64), String> {
    let invalid = |why: &str| format!("--prepared {value:?}: {why}");
    let (pod, time) = value
        .split_once('=')
        .filter(|(pod, time)| !pod.is_empty() && !time.is_empty())
        .ok_or_else(|| invalid("expected POD=TIME"))?;
    let seconds = match time.parse::<i64>() {
        Ok(seconds) => seconds,
        Err(_) => time
            .parse::<jiff::Timestamp>()
            .map_err(|_| invalid("TIME is neither RFC 3339 nor unix seconds"))?
            .as_second(),
    };
    if seconds <= 0 {
        return Err(invalid("TIME must be after 1970"));
    }
    Ok((pod.to_string(), seconds))
}

pub fn plan(state: &Path, now: Option<&str>, prepared: &[String]) -> anyhow::Result<ExitCode> {
    let now = match parse_now(now) {
        Ok(now) => now,
        Err(e) => return Ok(input_error(&e)),
    };
    let mut observed = match read_state(state) {
        Ok(observed) => observed,
        Err(e) => return Ok(input_error(&e)),
    };
    for value in prepared {
        match parse_prepared(value) {
            Ok((pod, at)) => {
                observed.prepared_at.insert(pod, at);
            }
            Err(e) => return Ok(input_error(&e)),
        }
    }
    let plan = core_rollout::plan::plan(&observed, now);
    println!("{}", serde_json::to_string_pretty(&plan)?);
    Ok(ExitCode::SUCCESS)
}
