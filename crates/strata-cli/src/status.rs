//! `strata status`: offline status of every object in the input (DESIGN.md §4).

use std::process::ExitCode;

use core_status::Evaluation;
use core_status::input::{Document, read_sources};
use jiff::Timestamp;
use serde::Serialize;

use crate::cli::{StatusArgs, StatusOutput};

/// One element of `-o json`, fields in the documented order.
#[derive(Debug, Serialize)]
pub struct StatusLine<'a> {
    #[serde(rename = "apiVersion")]
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub status: String,
    pub message: &'a str,
    pub reason: Option<&'a str>,
}

/// Parses `--now`, defaulting to the system clock.
pub fn parse_now(now: Option<&str>) -> Result<Timestamp, String> {
    match now {
        None => Ok(Timestamp::now()),
        Some(text) => text
            .parse()
            .map_err(|e| format!("--now {text:?}: not an RFC 3339 time ({e})")),
    }
}

pub fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let now = match parse_now(args.now.as_deref()) {
        Ok(now) => now,
        Err(e) => return Ok(crate::cli::input_error(&e)),
    };
    let rules = match crate::cli::status_rules(args.strict, args.health_exprs.as_deref()) {
        Ok(rules) => rules,
        Err(e) => return Ok(crate::cli::input_error(&e)),
    };
    let documents = match read_sources(&args.files) {
        Ok(documents) => documents,
        Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
    };
    let evaluations: Vec<Evaluation> = documents
        .iter()
        .map(|d| rules.evaluate(&d.object, now))
        .collect();
    let lines: Vec<StatusLine> = documents
        .iter()
        .zip(&evaluations)
        .map(|(d, e): (&Document, &Evaluation)| StatusLine {
            api_version: d.api_version(),
            kind: d.kind(),
            namespace: d.namespace(),
            name: d.name(),
            status: e.status.to_string(),
            message: &e.message,
            reason: e.reason(),
        })
        .collect();
    match args.output {
        StatusOutput::Json => println!("{}", serde_json::to_string_pretty(&lines)?),
        StatusOutput::Table => print!("{}", table(&lines)),
    }
    Ok(ExitCode::SUCCESS)
}

/// A plain aligned table: KIND NAMESPACE NAME STATUS REASON MESSAGE.
pub fn table(lines: &[StatusLine]) -> String {
    let rows: Vec<[String; 6]> = std::iter::once(
        ["KIND", "NAMESPACE", "NAME", "STATUS", "REASON", "MESSAGE"].map(String::from),
    )
    .chain(lines.iter().map(|l| {
        [
            l.kind.to_string(),
            l.namespace.to_string(),
            l.name.to_string(),
            l.status.clone(),
            l.reason.unwrap_or("").to_string(),
            l.message.to_string(),
        ]
    }))
    .collect();
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == 5 {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
