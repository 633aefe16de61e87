//! The workspace's floors (docs/development.md, docs/architecture.md): `crates/` are the shared
//! libraries (the decisions, and the shells two binaries share) and depend on nothing above
//! them; each of `services/` is a shell built from `crates/` only — never from another service;
//! `cli/` is built from `crates/` only too; nothing depends on `cli/` or `e2e/` (the tests may
//! use any floor). Checked from `cargo metadata` by the test below.

use anyhow::{Context as _, Result};
use serde_json::Value;

/// `cargo metadata --format-version 1 ARGS...` of this workspace, offline (everything it
/// describes is already downloaded by the build that precedes any use).
pub fn cargo_metadata(args: &[&str]) -> Result<Value> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(args)
        .current_dir(crate::chart::repo_root())
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The floor of a workspace package, by its directory: 0 crates, 1 services, 2 cli and e2e.
fn floor(manifest_path: &str, root: &str) -> Option<u8> {
    let relative = manifest_path.strip_prefix(root)?.trim_start_matches('/');
    match relative.split('/').next()? {
        "crates" => Some(0),
        "services" => Some(1),
        "cli" | "e2e" => Some(2),
        _ => None,
    }
}

/// Every dependency between workspace packages that breaks the floors: up a floor, into the top
/// floor, from a service to another service, or from the CLI to a service. `(from, to)` names.
/// Only the end-to-end tests (`strata-e2e`) may use a service: they run them.
pub fn upward_dependencies(metadata: &Value) -> Result<Vec<(String, String)>> {
    let floors = floors(metadata)?;
    let mut wrong = Vec::new();
    for package in packages(metadata) {
        let name = package["name"].as_str().unwrap_or_default();
        let Some(&from) = floors.get(name) else {
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            // Only what ships: tests may use any floor.
            if dep["kind"] == "dev" {
                continue;
            }
            let to_name = dep["name"].as_str().unwrap_or_default();
            let Some(&to) = floors.get(to_name) else {
                continue;
            };
            let into_top = to == 2;
            let service_from_shell = to == 1 && from >= 1 && name != "strata-e2e";
            if to > from || into_top || service_from_shell {
                wrong.push((name.to_string(), to_name.to_string()));
            }
        }
    }
    Ok(wrong)
}

/// The packages `cargo metadata` lists.
fn packages(metadata: &Value) -> impl Iterator<Item = &Value> {
    metadata["packages"].as_array().into_iter().flatten()
}

/// Each workspace member's floor, by package name.
fn floors(metadata: &Value) -> Result<std::collections::BTreeMap<String, u8>> {
    let root = metadata["workspace_root"]
        .as_str()
        .context("no workspace_root")?;
    metadata["packages"].as_array().context("no packages")?;
    Ok(packages(metadata)
        .filter(|p| p["source"].is_null())
        .filter_map(|p| {
            let floor = floor(p["manifest_path"].as_str()?, root)?;
            Some((p["name"].as_str()?.to_string(), floor))
        })
        .collect())
}

/// The workspace's crate graph as a Mermaid flowchart: every member by floor, every normal
/// (shipped) dependency between members. What docs/architecture.md shows between its
/// `crate-graph` markers.
pub fn crate_graph(metadata: &Value) -> Result<String> {
    let floors = floors(metadata)?;
    let id = |name: &str| name.replace('-', "_");
    let mut out = String::from(
        "flowchart BT
",
    );
    for (floor, title) in [
        (0, "crates/ — decisions and shared shells"),
        (1, "services/ — one shell per deployable"),
        (2, "cli/ and e2e/"),
    ] {
        out.push_str(&format!("  subgraph floor{floor}[\"{title}\"]\n"));
        for (name, _) in floors.iter().filter(|(_, f)| **f == floor) {
            out.push_str(&format!("    {}[{name}]\n", id(name)));
        }
        out.push_str("  end\n");
    }
    let mut edges = Vec::new();
    for package in packages(metadata) {
        let from = package["name"].as_str().unwrap_or_default();
        if !floors.contains_key(from) {
            continue;
        }
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let to = dep["name"].as_str().unwrap_or_default();
            if dep["kind"].is_null() && floors.contains_key(to) {
                edges.push(format!("  {} --> {}\n", id(from), id(to)));
            }
        }
    }
    edges.sort();
    edges.dedup();
    out.extend(edges);
    Ok(out)
}

/// docs/architecture.md with its crate graph replaced by `graph`.
pub fn with_crate_graph(page: &str, graph: &str) -> Result<String> {
    const BEGIN: &str = "<!-- crate-graph:begin -->";
    const END: &str = "<!-- crate-graph:end -->";
    let start = page.find(BEGIN).context("no crate-graph:begin marker")? + BEGIN.len();
    let end = page.find(END).context("no crate-graph:end marker")?;
    Ok(format!(
        "{}\n```mermaid\n{graph}```\n{}",
        &page[..start],
        &page[end..]
    ))
}

/// The calls of `function` in the Rust sources under `dir`, as `file:line` (its definition and
/// comments left out): how many places write what `function` writes.
pub fn call_sites(dir: &std::path::Path, function: &str) -> Result<Vec<String>> {
    let mut sites = Vec::new();
    for path in rust_files(dir)? {
        let text = std::fs::read_to_string(&path)?;
        for (line, _) in calls_in(&text, function) {
            sites.push(format!("{}:{line}", path.display()));
        }
    }
    Ok(sites)
}

/// The code lines (comments left out) of the Rust sources under `dir` that name the type
/// `name` as a whole word, as `file:line`.
pub fn mentions(dir: &std::path::Path, name: &str) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for path in rust_files(dir)? {
        let text = std::fs::read_to_string(&path)?;
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let whole = code.match_indices(name).any(|(at, _)| {
                let joined = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !joined(code[..at].chars().last())
                    && !joined(code[at + name.len()..].chars().next())
            });
            if whole {
                found.push(format!("{}:{}", path.display(), i + 1));
            }
        }
    }
    Ok(found)
}

/// The `.rs` files under `dir`, in path order.
fn rust_files(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The lines (1-based) of `text` that call `function`, with the column of the call.
fn calls_in(text: &str, function: &str) -> Vec<(usize, usize)> {
    let call = format!("{function}(");
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let code = line.split("//").next().unwrap_or_default();
            let at = code.find(&call)?;
            // A longer name ending in `function`, or the definition itself.
            let before = &code[..at];
            let joined = before
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            (!joined && !before.trim_end().ends_with("fn")).then_some((i + 1, at))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The graph docs/architecture.md shows is the one `cargo metadata` gives;
    /// `STRATA_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_architecture_page_shows_the_crate_graph() {
        let metadata = cargo_metadata(&["--no-deps"]).unwrap();
        let graph = crate_graph(&metadata).unwrap();
        assert!(
            graph.contains("admission_webhook --> admission_server"),
            "{graph}"
        );
        let path = crate::chart::repo_root().join("docs/architecture.md");
        let page = std::fs::read_to_string(&path).unwrap();
        let want = with_crate_graph(&page, &graph).unwrap();
        if std::env::var_os("STRATA_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &want).unwrap();
        } else {
            assert!(
                page == want,
                "docs/architecture.md's crate graph is stale: run STRATA_UPDATE_DOCS=1 cargo test -p strata-e2e --lib layout"
            );
        }
    }

    #[test]
    fn every_dependency_points_down_a_floor() {
        let metadata = cargo_metadata(&["--no-deps"]).unwrap();
        assert_eq!(
            upward_dependencies(&metadata).unwrap(),
            Vec::<(String, String)>::new()
        );
        // The check sees a library depending on a service.
        let mut broken = metadata.clone();
        let core = broken["packages"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == "core-k8s")
            .unwrap();
        core["dependencies"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "layer-controller", "kind": null}));
        assert_eq!(
            upward_dependencies(&broken).unwrap(),
            vec![("core-k8s".to_string(), "layer-controller".to_string())]
        );
        // A service built from another service, and the CLI built from a service.
        let mut broken = metadata.clone();
        for (from, to) in [
            ("admission-webhook", "layer-controller"),
            ("rollout-operator", "admission-webhook"),
            ("strata-cli", "drift-observer"),
        ] {
            broken["packages"]
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .find(|p| p["name"] == from)
                .unwrap()["dependencies"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"name": to, "kind": null}));
        }
        let mut found = upward_dependencies(&broken).unwrap();
        found.sort();
        assert_eq!(
            found,
            [
                ("admission-webhook", "layer-controller"),
                ("rollout-operator", "admission-webhook"),
                ("strata-cli", "drift-observer"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    /// One pass, one report: a layer's status is written from one place, at the end of the
    /// pass (docs/architecture.md).
    #[test]
    fn a_layer_status_is_written_from_one_place() {
        let dir = crate::chart::repo_root().join("services/layer-controller/src");
        let sites = call_sites(&dir, "write_status").unwrap();
        assert_eq!(sites.len(), 1, "{sites:#?}");
        assert!(sites[0].contains("reconcile/pass.rs"), "{sites:#?}");
        // The count sees a second write, and leaves out definitions, comments and other names.
        let text = "pub(super) async fn write_status(\n    write_status(a).await?;\n    // write_status(b)\n    rewrite_status(c);\n    x.write_status(d);\n";
        assert_eq!(calls_in(text, "write_status"), vec![(2, 4), (5, 6)]);
    }

    /// Decisions take no cluster client (docs/architecture.md): reading and writing is the
    /// shells' and the shared shell crates'.
    #[test]
    fn no_decision_crate_takes_a_cluster_client() {
        let root = crate::chart::repo_root();
        for decisions in [
            "core-layers",
            "core-drift",
            "core-rollout",
            "core-admission",
        ] {
            let dir = root.join("crates").join(decisions).join("src");
            assert_eq!(
                call_sites(&dir, "Client::try_default").unwrap(),
                Vec::<String>::new()
            );
            let uses = mentions(&dir, "Client").unwrap();
            assert_eq!(uses, Vec::<String>::new(), "{decisions} takes a client");
        }
        // The check sees one.
        let reader = root.join("crates/layer-reader/src");
        assert!(!mentions(&reader, "Client").unwrap().is_empty());
    }
}
