//! A CycloneDX software bill of materials for one service binary, from `cargo metadata` (the
//! resolved dependency graph, for the image's target platform) and `Cargo.lock` (each crate's
//! SHA-256). `make images` writes one beside each image.
//!
//! Only normal dependencies are followed from the service's package: build scripts' and tests'
//! crates are not in the binary. Features are the workspace's resolution, so a crate another
//! service alone enables may be listed too (never one that is missing).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

/// `name@version` → the checksum `Cargo.lock` records (registry crates only).
pub fn lock_checksums(cargo_lock: &str) -> BTreeMap<String, String> {
    let mut sums = BTreeMap::new();
    for block in cargo_lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim_start().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_string())
            })
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name "), field("version "), field("checksum "))
        {
            sums.insert(format!("{name}@{version}"), sum);
        }
    }
    sums
}

/// The SBOM of `service` built for `target` (a target triple), from this workspace's
/// `cargo metadata` and `Cargo.lock`.
pub fn for_service(service: &str, target: &str) -> Result<Value> {
    let metadata = crate::layout::cargo_metadata(&["--locked", "--filter-platform", target])?;
    let root = metadata["workspace_root"]
        .as_str()
        .context("cargo metadata: no workspace_root")?;
    let lock = std::fs::read_to_string(std::path::Path::new(root).join("Cargo.lock"))
        .context("reading Cargo.lock")?;
    cyclonedx(&metadata, &lock_checksums(&lock), service)
}

/// The package URL of a crate: `pkg:cargo/NAME@VERSION`.
fn purl(name: &str, version: &str) -> String {
    format!("pkg:cargo/{name}@{version}")
}

/// The CycloneDX 1.5 document of `service`'s binary: `metadata` from `cargo metadata
/// --format-version 1 --filter-platform TARGET`, `checksums` from [`lock_checksums`].
pub fn cyclonedx(
    metadata: &Value,
    checksums: &BTreeMap<String, String>,
    service: &str,
) -> Result<Value> {
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata: no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|id| packages.get(id).is_some_and(|p| p["name"] == service))
        .with_context(|| format!("{service} is not a workspace member"))?;

    // Normal dependencies reachable from the service, with their edges.
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if edges.contains_key(id) {
            continue;
        }
        let node = nodes
            .get(id)
            .with_context(|| format!("{id}: not in the resolve graph"))?;
        let mut deps = BTreeSet::new();
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            if let (true, Some(pkg)) = (normal, dep["pkg"].as_str()) {
                deps.insert(pkg);
                todo.push(pkg);
            }
        }
        edges.insert(id, deps);
    }

    let reference = |id: &str| -> Result<String> {
        let p = packages
            .get(id)
            .with_context(|| format!("{id}: no package"))?;
        Ok(purl(
            p["name"].as_str().unwrap_or_default(),
            p["version"].as_str().unwrap_or_default(),
        ))
    };
    let component = |id: &str, kind: &str| -> Result<Value> {
        let p = packages
            .get(id)
            .with_context(|| format!("{id}: no package"))?;
        let (name, version) = (
            p["name"].as_str().unwrap_or_default(),
            p["version"].as_str().unwrap_or_default(),
        );
        let mut c = json!({
            "type": kind,
            "bom-ref": purl(name, version),
            "name": name,
            "version": version,
            "purl": purl(name, version),
        });
        if let Some(license) = p["license"].as_str() {
            c["licenses"] = json!([{"expression": license}]);
        }
        if let Some(sum) = checksums.get(&format!("{name}@{version}")) {
            c["hashes"] = json!([{"alg": "SHA-256", "content": sum}]);
        } else if p["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("registry+"))
        {
            bail!("{name}@{version}: a registry crate without a checksum in Cargo.lock");
        }
        Ok(c)
    };

    let mut components = Vec::new();
    let mut dependencies = Vec::new();
    for (id, deps) in &edges {
        if *id != root {
            components.push(component(id, "library")?);
        }
        let mut on: Vec<String> = deps.iter().map(|d| reference(d)).collect::<Result<_>>()?;
        on.sort();
        dependencies.push(json!({"ref": reference(id)?, "dependsOn": on}));
    }
    components.sort_by(|a, b| a["bom-ref"].as_str().cmp(&b["bom-ref"].as_str()));
    dependencies.sort_by(|a, b| a["ref"].as_str().cmp(&b["ref"].as_str()));
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "strata-sbom"}]},
            "component": component(root, "application")?,
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const LOCK: &str = r#"
version = 4

[[package]]
name = "app"
version = "0.1.0"
dependencies = ["lib-a", "lib-b"]

[[package]]
name = "lib-a"
version = "1.2.3"
source = "registry+https://example.invalid/index"
checksum = "aaaa"

[[package]]
name = "lib-b"
version = "0.9.0"
source = "registry+https://example.invalid/index"
checksum = "bbbb"

[[package]]
name = "builder"
version = "2.0.0"
source = "registry+https://example.invalid/index"
checksum = "cccc"
"#;

    fn metadata() -> Value {
        let reg = "registry+https://example.invalid/index";
        let pkg = |name: &str, version: &str, source: Option<&str>| json!({"id": format!("{name}@{version}"), "name": name, "version": version, "license": "MIT", "source": source});
        let dep = |pkg: &str, kind: Value| json!({"pkg": pkg, "dep_kinds": [{"kind": kind, "target": null}]});
        json!({
            "packages": [
                pkg("app", "0.1.0", None), pkg("lib-a", "1.2.3", Some(reg)),
                pkg("lib-b", "0.9.0", Some(reg)), pkg("builder", "2.0.0", Some(reg)),
            ],
            "workspace_members": ["app@0.1.0"],
            "resolve": {"nodes": [
                {"id": "app@0.1.0", "deps": [dep("lib-a@1.2.3", Value::Null), dep("builder@2.0.0", json!("build"))]},
                {"id": "lib-a@1.2.3", "deps": [dep("lib-b@0.9.0", Value::Null)]},
                {"id": "lib-b@0.9.0", "deps": []},
                {"id": "builder@2.0.0", "deps": []},
            ]},
        })
    }

    /// Normal dependencies, transitively, each with its lock checksum and license; build
    /// dependencies are not in the binary.
    #[test]
    fn lists_what_the_binary_links_with_checksums() {
        let sums = lock_checksums(LOCK);
        assert_eq!(sums.get("lib-a@1.2.3").map(String::as_str), Some("aaaa"));
        assert!(!sums.contains_key("app@0.1.0"));
        let bom = cyclonedx(&metadata(), &sums, "app").unwrap();
        assert_eq!(bom["metadata"]["component"]["purl"], "pkg:cargo/app@0.1.0");
        let names: Vec<&str> = bom["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["lib-a", "lib-b"]);
        assert_eq!(bom["components"][1]["hashes"][0]["content"], "bbbb");
        assert_eq!(bom["components"][0]["licenses"][0]["expression"], "MIT");
        let app = bom["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["ref"] == "pkg:cargo/app@0.1.0")
            .unwrap();
        assert_eq!(app["dependsOn"], json!(["pkg:cargo/lib-a@1.2.3"]));
    }

    #[test]
    fn a_registry_crate_without_a_checksum_is_an_error() {
        let mut sums = lock_checksums(LOCK);
        sums.remove("lib-b@0.9.0");
        let err = cyclonedx(&metadata(), &sums, "app")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lib-b@0.9.0"), "{err}");
        assert!(cyclonedx(&metadata(), &lock_checksums(LOCK), "nope").is_err());
    }

    /// The real workspace: the rollout-operator's SBOM lists the client it links with, its
    /// lock checksum, and none of the crates only tests or build scripts use.
    #[test]
    fn the_rollout_operator_bill_of_materials() {
        let bom = for_service("rollout-operator", "x86_64-unknown-linux-gnu").unwrap();
        let find = |name: &str| {
            bom["components"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .cloned()
        };
        let kube = find("kube").expect("kube is linked");
        assert_eq!(kube["hashes"][0]["alg"], "SHA-256");
        assert!(find("core-rollout").is_some(), "workspace crates too");
        // `cc` builds C code in build scripts; `strata-e2e` is a dev-dependency at most.
        assert!(find("cc").is_none());
        assert!(find("strata-e2e").is_none());
        assert_eq!(bom["metadata"]["component"]["license"], Value::Null);
        assert_eq!(
            bom["metadata"]["component"]["licenses"][0]["expression"],
            "Apache-2.0"
        );
    }
}
