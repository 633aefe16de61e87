//! `strata completion SHELL`: a completion script for each shell, naming the subcommands.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::process::Command;

#[test]
fn prints_a_completion_script_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _strata"),
        ("zsh", "#compdef strata"),
        ("fish", "complete -c strata"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for word in ["layers", "reconcile", "suspend", "rollout"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// `make dist` packs the CLI for krew: an archive with `kubectl-strata` (this very binary)
/// and the licence, and the repository's krew manifest rendered with the archive's URL and
/// SHA-256; the plugin it describes runs.
#[test]
fn make_dist_renders_a_krew_manifest_for_its_archive() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::env::temp_dir().join(format!("strata-dist-{}", std::process::id()));
    let status = Command::new(root.join("scripts/dist.sh"))
        .env("STRATA_CLI_BINARY", env!("CARGO_BIN_EXE_strata"))
        .env("DIST_DIR", &out)
        .env("DIST_URL", "https://downloads.example.com/v@VERSION@")
        .status()
        .unwrap();
    assert!(status.success());
    let version = env!("CARGO_PKG_VERSION");
    let archive = out.join(format!("kubectl-strata_v{version}_linux_amd64.tar.gz"));
    let manifest = std::fs::read_to_string(out.join("strata.yaml")).unwrap();
    let sum = Command::new("sha256sum").arg(&archive).output().unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    let sum = sum.split_whitespace().next().unwrap();
    for line in [
        "apiVersion: krew.googlecontainertools.github.com/v1alpha2".to_string(),
        "kind: Plugin".to_string(),
        format!("version: v{version}"),
        format!(
            "uri: https://downloads.example.com/v{version}/kubectl-strata_v{version}_linux_amd64.tar.gz"
        ),
        format!("sha256: {sum}"),
        "bin: kubectl-strata".to_string(),
    ] {
        assert!(manifest.contains(&line), "{line:?} missing:\n{manifest}");
    }
    assert!(!manifest.contains('@'), "a placeholder left:\n{manifest}");
    // The archive holds what the manifest's `files` name, and the plugin answers.
    let unpacked = out.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(tar.success());
    assert!(unpacked.join("LICENSE").is_file());
    let help = Command::new(unpacked.join("kubectl-strata"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("layers"));
    std::fs::remove_dir_all(&out).ok();
}
