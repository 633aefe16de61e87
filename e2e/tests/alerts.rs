//! Strata's Prometheus alert rules checked by Prometheus' own tool: `promtool check rules` on
//! dashboards/alerts.yaml and `promtool test rules` on its unit tests (alerts-test.yaml).
//! promtool is built from its Go module by e2e/plane/build.sh (`make plane-build`).

use std::path::PathBuf;
use std::process::Command;

use strata_e2e::chart::repo_root;
use strata_e2e::plane::cached_tool;

/// promtool: `$PROMTOOL`, else the plane build's cache directory for the pinned version.
fn promtool() -> PathBuf {
    cached_tool("PROMTOOL", "PROMETHEUS_VERSION", "promtool").unwrap_or_else(|e| panic!("{e:#}"))
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
