//! The helm binary the render tests run (shared by `render` and `strata-cli` tests with
//! `#[path]`): `$HELM`, else the one the local plane build caches — its version read from
//! `e2e/plane/versions.env`, under `$STRATA_CACHE` or `~/.cache/strata` — else `helm` on
//! `PATH`. Without one a test fails, naming how to get one; `STRATA_SKIP_HELM_TESTS=1` skips
//! them instead (each says so).

use std::path::{Path, PathBuf};

/// The workspace root, from this test crate's manifest directory.
fn workspace_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("Cargo.lock").is_file() {
        if !dir.pop() {
            break;
        }
    }
    dir
}

/// The helm the plane build caches, if it is there.
fn plane_helm(root: &Path) -> Option<PathBuf> {
    let versions = std::fs::read_to_string(root.join("e2e/plane/versions.env")).ok()?;
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION="))?
        .trim()
        .to_string();
    let cache = std::env::var_os("STRATA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/strata")))?;
    let helm = cache.join(format!("bin/helm-{version}/helm"));
    helm.is_file().then_some(helm)
}

/// The helm binary, or `None` when the tests are told to skip without one.
pub fn helm() -> Option<PathBuf> {
    if let Some(helm) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(helm));
    }
    if let Some(helm) = plane_helm(&workspace_root()) {
        return Some(helm);
    }
    let on_path = std::process::Command::new("helm").arg("version").output();
    if on_path.is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("helm"));
    }
    assert!(
        std::env::var_os("STRATA_SKIP_HELM_TESTS").is_some(),
        "no helm binary: set $HELM, or build the local plane (`make plane-build` caches the \
         helm of e2e/plane/versions.env), or put helm on PATH; STRATA_SKIP_HELM_TESTS=1 skips \
         these tests instead"
    );
    eprintln!("SKIPPED (STRATA_SKIP_HELM_TESTS): no helm binary");
    None
}
