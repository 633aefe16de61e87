//! `strata status`: offline status of every object in the input (DESIGN.md §4).

use std::process::ExitCode;

use core_status::Evaluation;
use std::io::Write;

use core_status::Observed;
use core_status::input::{Document, parse, parse_compact, parse_json_documents, read_texts};
use jiff::Timestamp;
use serde::Serialize;

use crate::cli::{StatusArgs, StatusOutput};

/// One element of `-o json`, fields in the documented order.
#[derive(Debug, Serialize)]
pub struct StatusLine {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub status: String,
    pub message: String,
    pub reason: Option<String>,
}

impl StatusLine {
    fn new(
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        evaluation: Evaluation,
    ) -> Self {
        StatusLine {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            status: evaluation.status.to_string(),
            reason: evaluation.reason().map(str::to_string),
            message: evaluation.message.into_owned(),
        }
    }
}

impl StatusLine {
    fn from_observed(o: &Observed<'_>, now: Timestamp) -> Self {
        StatusLine::new(
            o.api_version(),
            o.kind(),
            o.namespace(),
            o.name(),
            o.evaluate(now),
        )
    }
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
    let texts = match read_texts(&args.files) {
        Ok(texts) => texts,
        Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
    };
    // JSON input, and block-style YAML (what `kubectl get -o yaml` prints) once turned into
    // JSON, are decoded straight into the compact form when the rules allow it: much faster
    // and smaller on large inputs. Each input text is dropped as soon as it is converted.
    let compact_ok = rules.is_kstatus();
    let mut lines = Vec::new();
    for (source, text) in texts {
        let converted = (compact_ok && !looks_like_json(&text))
            .then(|| core_status::block_yaml::to_json_documents(&text))
            .flatten();
        let documents = match converted {
            Some((json, indices)) => {
                drop(text);
                // One document is decoded as itself (a `List` is flattened on the way).
                let one = match indices.len() {
                    1 => &json[1..json.len() - 1],
                    _ => &json[..],
                };
                if let Some(objects) = parse_compact(one) {
                    lines.extend(objects.iter().map(|o| StatusLine::from_observed(o, now)));
                    continue;
                }
                match parse_json_documents(&source, &json, &indices) {
                    Some(documents) => documents,
                    None => return Ok(crate::cli::input_error(&format!("{source}: unreadable"))),
                }
            }
            None => {
                if compact_ok && let Some(objects) = parse_compact(&text) {
                    lines.extend(objects.iter().map(|o| StatusLine::from_observed(o, now)));
                    continue;
                }
                parse(&source, &text)
            }
        };
        let documents = match documents {
            Ok(documents) => documents,
            Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
        };
        lines.extend(documents.iter().map(|d: &Document| {
            StatusLine::new(
                d.api_version(),
                d.kind(),
                d.namespace(),
                d.name(),
                rules.evaluate(&d.object, now),
            )
        }));
    }
    match args.output {
        StatusOutput::Json => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &lines)?;
            writeln!(out)?;
            out.flush()?;
        }
        StatusOutput::Table => print!("{}", table(&lines)),
    }
    Ok(ExitCode::SUCCESS)
}

fn looks_like_json(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('{') || trimmed.starts_with('[')
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
            l.reason.clone().unwrap_or_default(),
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
