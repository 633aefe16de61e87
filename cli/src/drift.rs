//! `strata drift`: what drifted in a layer (from the drift-observer's report in its status),
//! or a live comparison of local manifests with the cluster through the observer's own code.
//! Exit 0 without drift, 1 with drift (as `kubectl diff`), 2 on bad input.

use std::process::ExitCode;

use core_k8s::apply::Applier;
use core_layers::crd::{AddonsLayer, DriftEntry};
use core_layers::keys::condition;
use core_layers::objects::ObjectRef;
use core_layers::source::{self, Files, Limits};
use kube::Api;
use layer_reader::read::Reader;
use serde::Serialize;
use serde_json::Value;

use crate::cli::{ClusterArgs, DriftOutput, input_error};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// The layer, or the directory compared.
    source: String,
    drifted: bool,
    /// The observer's `Drifted` / `FightDetected` messages (layer reports only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<String>,
    drift: Vec<DriftEntry>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// `strata drift LAYER`.
pub fn layer(name: &str, output: DriftOutput, cluster: &ClusterArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let api: Api<AddonsLayer> = Api::all(client);
        let Some(layer) = api.get_opt(name).await? else {
            eprintln!("strata drift: AddonsLayer {name} not found");
            return Ok(ExitCode::from(1));
        };
        let status = layer.status.unwrap_or_default();
        let conditions: Vec<String> = status
            .conditions
            .iter()
            .filter(|c| condition::DRIFT_OBSERVER.contains(&c.type_.as_str()))
            .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
            .collect();
        if conditions.is_empty() {
            eprintln!(
                "strata drift: layer {name} has no drift report (is the drift-observer running?)"
            );
        }
        print_report(
            Report {
                source: name.to_string(),
                drifted: !status.drift.is_empty(),
                conditions,
                drift: status.drift,
            },
            output,
        )
    })
}

/// Reads every file under `path` (a file or a directory, recursively).
pub(crate) fn read_files(path: &std::path::Path) -> std::io::Result<Files> {
    let mut files = Files::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(next) = stack.pop() {
        if next.is_dir() {
            for entry in std::fs::read_dir(&next)? {
                stack.push(entry?.path());
            }
        } else {
            let relative = next
                .strip_prefix(path)
                .ok()
                .filter(|r| !r.as_os_str().is_empty())
                .unwrap_or(next.as_path());
            files.insert(
                relative
                    .to_string_lossy()
                    .trim_start_matches('/')
                    .to_string(),
                std::fs::read(&next)?,
            );
        }
    }
    Ok(files)
}

/// `strata drift -f DIR`: every manifest compared with the live object, every declared field
/// observed, through a dry run as the layer-controller (what its apply would change).
pub fn files(
    path: &std::path::Path,
    output: DriftOutput,
    field_manager: &str,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    let files = match read_files(path) {
        Ok(files) => files,
        Err(e) => return Ok(input_error(&format!("{}: {e}", path.display()))),
    };
    let manifests = match source::layer_manifests(&files, "./") {
        Ok(manifests) => manifests,
        Err(e) => return Ok(input_error(&format!("{}: {e}", path.display()))),
    };
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let applier = Applier::new(client.clone(), field_manager);
        let reader = Reader::new(client, applier.clone(), Limits::default(), "default".into());
        let now = core_status::augment::format_time(jiff::Timestamp::now());
        let mut drift = Vec::new();
        for manifest in &manifests {
            let object: ObjectRef = reader.identity(manifest).await;
            let resolved = reader
                .resolve(&manifest.api_version, &object.kind)
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", manifest.origin))?;
            let mut value = manifest.value.clone();
            if let (true, Some(ns)) = (resolved.namespaced, &object.namespace)
                && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.insert("namespace".into(), ns.clone().into());
            }
            let live = reader
                .api(&resolved, object.namespace.as_deref())
                .get_opt(&object.name)
                .await?
                .map(|o| serde_json::to_value(o).unwrap_or_default());
            let rules = core_drift::rules::object_rules(None, &object, &value);
            let (found, _) =
                core_drift::check::drift_of(&applier, &object.kind, &value, live.as_ref(), &rules)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}: {e}", manifest.origin))?;
            drift.extend(found.into_iter().map(|f| DriftEntry {
                object: object.to_string(),
                api_version: manifest.api_version.clone(),
                path: f.path,
                expected: f.expected,
                actual: f.actual,
                manager: f.manager,
                since: now.clone(),
            }));
        }
        print_report(
            Report {
                source: path.display().to_string(),
                drifted: !drift.is_empty(),
                conditions: Vec::new(),
                drift,
            },
            output,
        )
    })
}

fn print_report(report: Report, output: DriftOutput) -> anyhow::Result<ExitCode> {
    match output {
        DriftOutput::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        DriftOutput::Table => print!("{}", table(&report)),
    }
    Ok(if report.drifted {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    for line in &report.conditions {
        out.push_str(line);
        out.push('\n');
    }
    if report.drift.is_empty() {
        out.push_str(&format!("no drift in {}\n", report.source));
        return out;
    }
    let rows: Vec<[String; 6]> = report
        .drift
        .iter()
        .map(|e| {
            [
                e.object.clone(),
                if e.path.is_empty() {
                    "(object)".into()
                } else {
                    e.path.clone()
                },
                e.expected.clone(),
                e.actual.clone(),
                e.manager.clone().unwrap_or_else(|| "-".into()),
                e.since.clone(),
            ]
        })
        .collect();
    let header = [
        "OBJECT",
        "PATH",
        "EXPECTED",
        "ACTUAL",
        "CHANGED BY",
        "SINCE",
    ]
    .map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
