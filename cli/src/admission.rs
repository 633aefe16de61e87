//! `strata admission review`: one AdmissionReview through a webhook, offline. Prints the
//! AdmissionReview response; the calls the webhook would make (HTTP to pods, patches) are
//! listed under a top-level `sideEffects` key instead of being performed.

use std::path::Path;
use std::process::ExitCode;

use core_admission::review::Review;
use core_admission::webhooks::{Cluster, Webhook, decide};

use crate::cli::input_error;
use crate::status::parse_now;

pub fn review(
    file: &Path,
    state: Option<&Path>,
    now: Option<&str>,
    webhook: Webhook,
) -> anyhow::Result<ExitCode> {
    let now = match parse_now(now) {
        Ok(now) => now,
        Err(e) => return Ok(input_error(&e)),
    };
    let body = match std::fs::read(file) {
        Ok(body) => body,
        Err(e) => return Ok(input_error(&format!("{}: {e}", file.display()))),
    };
    let review = match Review::parse_reading(&body, webhook.reads()) {
        Ok(review) => review,
        Err(e) => {
            return Ok(input_error(&format!(
                "{}: not an AdmissionReview: {e}",
                file.display()
            )));
        }
    };
    let observed = match state.map(crate::rollout::read_state).transpose() {
        Ok(observed) => observed.unwrap_or_default(),
        Err(e) => return Ok(input_error(&e)),
    };
    let decision = decide(webhook, &review, &Cluster::new(observed), now);
    let mut out = review.respond(&decision);
    if !decision.side_effects.is_empty() {
        out["sideEffects"] = serde_json::json!(decision.side_effects);
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
