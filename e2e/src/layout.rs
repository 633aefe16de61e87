//! The workspace's floors (docs/development.md): `crates/` are the shared libraries and depend
//! on nothing above them, `services/` depend only on `crates/`, `cli/` is the top floor that
//! nothing depends on. Checked from `cargo metadata` by the test below.

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

/// Every dependency between workspace packages that points up or sideways into the top floor:
/// `(from, to)` names.
pub fn upward_dependencies(metadata: &Value) -> Result<Vec<(String, String)>> {
    let root = metadata["workspace_root"]
        .as_str()
        .context("no workspace_root")?;
    let members: Vec<&Value> = metadata["packages"]
        .as_array()
        .context("no packages")?
        .iter()
        .filter(|p| p["source"].is_null())
        .collect();
    let floor_of = |name: &str| {
        members
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| floor(p["manifest_path"].as_str()?, root))
    };
    let mut wrong = Vec::new();
    for package in &members {
        let name = package["name"].as_str().unwrap_or_default();
        let Some(from) = floor(package["manifest_path"].as_str().unwrap_or_default(), root) else {
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            // Only what ships: tests may use any floor.
            if dep["kind"] == "dev" {
                continue;
            }
            let to_name = dep["name"].as_str().unwrap_or_default();
            let Some(to) = floor_of(to_name) else {
                continue;
            };
            let top = to == 2;
            if to > from || (top && from == 2) {
                wrong.push((name.to_string(), to_name.to_string()));
            }
        }
    }
    Ok(wrong)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
    }
}
