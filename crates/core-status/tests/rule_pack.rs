//! The built-in rule pack (`crates/core-status/rules/`) against its golden cases
//! (`tests/rule-pack/<group>.yaml`): every case gets its expected status under `--strict`, every
//! kind has Current, InProgress and (where its rule has a `failed` expression) Failed cases and
//! one without any status, and docs/core-status.md lists every kind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use core_status::Status;
use core_status::health::HealthRules;
use core_status::policy::{Policy, Rules};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Case {
    name: String,
    expect: String,
    object: Value,
}

fn strict() -> Rules {
    Rules {
        policy: Policy::strict(),
        health: HealthRules::pack(),
    }
}

fn golden_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rule-pack")
}

fn group_kind(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    format!("{group}/{}", object["kind"].as_str().unwrap_or(""))
}

#[test]
fn every_golden_case_gets_its_status_under_strict() {
    let rules = strict();
    let now = jiff::Timestamp::UNIX_EPOCH;
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut without_status: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    let mut count = 0;
    for (file, _) in HealthRules::pack_files() {
        let path = golden_dir().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: every rule file needs golden cases: {e}",
                path.display()
            )
        });
        let cases: Vec<Case> = serde_saphyr::from_str(&text).expect(file);
        for case in cases {
            count += 1;
            let got = rules.evaluate(&case.object, now);
            let kind = group_kind(&case.object);
            if got.status.to_string() != case.expect {
                failures.push(format!(
                    "{file}: {}: want {}, got {} ({})",
                    case.name, case.expect, got.status, got.message
                ));
            }
            if got.status == Status::Unknown {
                failures.push(format!("{file}: {}: Unknown: {}", case.name, got.message));
            }
            if case.object.get("status").is_none() {
                without_status.insert(kind.clone());
            }
            seen.entry(kind).or_default().insert(case.expect);
        }
    }
    assert!(
        failures.is_empty(),
        "{count} cases:\n{}",
        failures.join("\n")
    );
    let kinds = HealthRules::pack().kinds();
    assert!(kinds.len() >= 20, "the pack covers {} kinds", kinds.len());
    for kind in &kinds {
        let expects = seen.get(kind).cloned().unwrap_or_default();
        assert!(
            expects.contains("Current"),
            "{kind}: no Current case ({expects:?})"
        );
        assert!(
            expects.contains("InProgress") || kind == "apiextensions.crossplane.io/Composition",
            "{kind}: no InProgress case ({expects:?})"
        );
        assert!(
            without_status.contains(kind),
            "{kind}: no case without a status"
        );
    }
}

#[test]
fn kinds_with_a_failed_rule_have_a_failed_case() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    let rules = strict();
    let mut failed_kinds = BTreeSet::new();
    for (file, _) in HealthRules::pack_files() {
        let text = std::fs::read_to_string(golden_dir().join(file)).unwrap();
        let cases: Vec<Case> = serde_saphyr::from_str(&text).unwrap();
        for case in cases.iter().filter(|c| c.expect == "Failed") {
            assert_eq!(rules.evaluate(&case.object, now).status, Status::Failed);
            failed_kinds.insert(group_kind(&case.object));
        }
    }
    for (file, text) in HealthRules::pack_files() {
        let entries: Vec<Value> = serde_saphyr::from_str(text).unwrap();
        for entry in entries.iter().filter(|e| e.get("failed").is_some()) {
            let kind = group_kind(entry);
            assert!(
                failed_kinds.contains(&kind),
                "{file}: {kind} has no Failed case"
            );
        }
    }
}

#[test]
fn the_pack_is_only_on_under_strict_and_a_users_file_overrides_it() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    // An Argo Rollout: kstatus cannot read its string observedGeneration.
    let rollout: Value = serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "generation": 2},
        "status": {"phase": "Degraded", "observedGeneration": "2"}});
    assert_eq!(
        Rules::default().evaluate(&rollout, now).status,
        Status::Unknown
    );
    assert_eq!(strict().evaluate(&rollout, now).status, Status::Failed);
    let own = HealthRules::from_yaml(
        "own.yaml",
        "- apiVersion: argoproj.io/v1alpha1\n  kind: Rollout\n  current: \"true\"\n",
    )
    .unwrap();
    let overridden = Rules {
        policy: Policy::strict(),
        health: HealthRules::pack().overridden_by(own),
    };
    assert_eq!(overridden.evaluate(&rollout, now).status, Status::Current);
    // A whole-group entry replaces every pack entry of the group.
    let group = HealthRules::from_yaml(
        "group.yaml",
        "- apiVersion: argoproj.io/v1alpha1\n  current: \"false\"\n",
    )
    .unwrap();
    let pack = HealthRules::pack().overridden_by(group);
    assert!(!pack.kinds().iter().any(|k| k.starts_with("argoproj.io/")));
}

#[test]
fn the_docs_list_every_kind() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/core-status.md"),
    )
    .unwrap();
    for kind in HealthRules::pack().kinds() {
        let (group, kind) = kind.split_once('/').unwrap();
        let row = docs
            .lines()
            .any(|l| l.starts_with('|') && l.contains(group) && l.contains(&format!(" {kind} ")));
        assert!(row, "docs/core-status.md has no row for {group} {kind}");
    }
}

/// The pack is compiled lazily at run time (a kind's expressions when first met), so a
/// broken expression would only show as Unknown on that kind: every file must compile here.
#[test]
fn every_pack_file_compiles() {
    for (file, text) in HealthRules::pack_files() {
        if let Err(e) = HealthRules::from_yaml(file, text) {
            panic!("{file}: {e}");
        }
    }
}
