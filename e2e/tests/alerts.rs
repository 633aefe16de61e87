//! Strata's Prometheus alert rules checked by Prometheus' own tool: `promtool check rules` on
//! dashboards/alerts.yaml and `promtool test rules` on its unit tests (alerts-test.yaml).
//! promtool is built from its Go module by e2e/plane/build.sh (`make plane-build`).

use std::path::PathBuf;
use std::process::Command;

use strata_e2e::chart::repo_root;

/// promtool: `$PROMTOOL`, else the plane build's cache directory for the pinned version.
fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let versions =
        std::fs::read_to_string(repo_root().join("e2e/plane/versions.env")).unwrap_or_default();
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("PROMETHEUS_VERSION="))
        .unwrap_or("(PROMETHEUS_VERSION missing from e2e/plane/versions.env)");
    let cache = std::env::var_os("STRATA_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/strata")
        });
    cache.join(format!("bin/promtool-{version}/promtool"))
}

fn run(args: &[&str]) -> String {
    let tool = promtool();
    let out = Command::new(&tool)
        .args(args)
        .current_dir(repo_root().join("dashboards"))
        .output()
        .unwrap_or_else(|e| panic!("{} (run `make plane-build`): {e}", tool.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn alert_rules_pass_promtool_check() {
    let out = run(&["check", "rules", "alerts.yaml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn alert_unit_tests_pass() {
    let out = run(&["test", "rules", "alerts-test.yaml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}
