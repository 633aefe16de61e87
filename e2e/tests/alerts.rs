//! Strata's Prometheus alert rules checked by Prometheus' own tool: `promtool check rules` on
//! dashboards/alerts.yaml and `promtool test rules` on its unit tests (the hand-written
//! scenarios of alerts-test.yaml and the firing and quiet case of every alert that
//! dashboards/generate.py writes to alerts-test-generated.yaml); every alert must have both.
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

const TEST_FILES: [&str; 2] = ["alerts-test.yaml", "alerts-test-generated.yaml"];

#[test]
fn alert_unit_tests_pass() {
    for file in TEST_FILES {
        let out = run(&["test", "rules", file]);
        assert!(out.contains("SUCCESS"), "{file}: {out}");
    }
}

/// Every alert is made to fire (a case expecting it) and kept quiet (a case expecting none) by
/// some `promtool test rules` case: an alert only checked to load could never fire and pass.
#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    let read = |file: &str| {
        let text = std::fs::read_to_string(repo_root().join("dashboards").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        strata_e2e::support::parse_yaml(&text)
            .unwrap_or_else(|e| panic!("{file}: {e:#}"))
            .remove(0)
    };
    let rules = read("alerts.yaml");
    let alerts: std::collections::BTreeSet<String> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect();
    assert!(alerts.len() >= 40, "{} alerts read", alerts.len());
    let (mut firing, mut quiet) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    for file in TEST_FILES {
        let tests = read(file);
        for case in tests["tests"].as_array().into_iter().flatten() {
            for check in case["alert_rule_test"].as_array().into_iter().flatten() {
                let name = check["alertname"].as_str().unwrap_or_default().to_string();
                if check["exp_alerts"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
                {
                    firing.insert(name);
                } else {
                    quiet.insert(name);
                }
            }
        }
    }
    let missing: Vec<String> = alerts
        .iter()
        .flat_map(|a| {
            [
                (!firing.contains(a)).then(|| format!("{a}: no case makes it fire")),
                (!quiet.contains(a)).then(|| format!("{a}: no case keeps it quiet")),
            ]
        })
        .flatten()
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
