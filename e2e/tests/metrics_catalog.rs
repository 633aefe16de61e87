//! The metrics the services register, the ones docs/metrics.md documents, and the ones the
//! Grafana dashboards and alert rules (dashboards/) use are the same set: nothing undocumented,
//! nothing documented but unused, no panel or alert naming a metric that does not exist; and the
//! committed dashboards are exactly what their generator writes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use core_k8s::api_client::{ApiClientMetrics, GroupLabels, RequestLabels};
use core_k8s::http_metrics::{ClusterValidationLabels, HttpMetrics, RouteLabels, ServerLabels};
use core_k8s::metrics::{ControllerMetrics, metric_prefix};
use prometheus_client::registry::Registry;
use serde_json::Value;

const SERVICES: [&str; 4] = [
    "layer-controller",
    "drift-observer",
    "rollout-operator",
    "admission-webhook",
];

/// The one metric without a service prefix: the anchor's name, which its alerts query.
const FAILURE_POLICY: &str = "kube_validating_webhook_failure_policy";

/// Series other programs export that alerts may rely on: Prometheus' own `up` (a service with
/// no reachable replica has no series of its own) and kube-apiserver's account of calling our
/// webhooks.
const EXTERNAL: [&str; 3] = [
    "up",
    "apiserver_admission_webhook_rejection_count",
    "apiserver_admission_webhook_fail_open_count",
];

/// The `## ` headings of docs/runbooks.md as GitHub anchors them (lower case; these are single
/// words).
fn runbook_sections() -> BTreeSet<String> {
    std::fs::read_to_string(repo("docs/runbooks.md"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect()
}

fn repo(path: &str) -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("..")
    .join(path)
}

/// Metric names as queried: counters with `_total`, histograms by their family name.
fn families(registry: &Registry) -> BTreeSet<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("# TYPE ")?.split_whitespace();
            let (name, kind) = (words.next()?, words.next()?);
            Some(match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            })
        })
        .collect()
}

/// What each service registers: its own metrics plus the shared controller metrics the
/// runtime adds. A labelled family is encoded only once it has a series, so each gets one here.
fn registered() -> BTreeSet<String> {
    let mut registry = Registry::default();
    let layers = layer_controller::metrics::Metrics::register(&mut registry);
    layers.set_state("layer", "Deployed");
    layers.count_applied("layer");
    layers.count_unchanged("layer");
    layers.count_pruned("layer", 1);
    layers.observe_dependency_wait("layer", 1.0);
    let rollout = rollout_operator::metrics::Metrics::register(&mut registry);
    let group = rollout.labels("group", "namespace");
    rollout.group_reconciles.get_or_create(&group).inc();
    rollout.group_reconciles_failed.get_or_create(&group).inc();
    rollout
        .group_reconcile_duration
        .get_or_create(&group)
        .observe(0.1);
    rollout
        .last_successful_group_reconcile
        .get_or_create(&group)
        .set(1.0);
    rollout.cached("Pod", 1);
    let drift = drift_observer::metrics::Metrics::register(&mut registry);
    let layer_kind = drift_observer::metrics::Metrics::layer_kind("layer", "Deployment");
    let layer = drift_observer::metrics::Metrics::layer("layer");
    drift.drifted_objects.get_or_create(&layer).set(1);
    drift.drift_detected.get_or_create(&layer_kind).inc();
    drift.drift_healed.get_or_create(&layer_kind).inc();
    drift.heal_requests.get_or_create(&layer).inc();
    drift.fights.get_or_create(&layer_kind).inc();
    drift.count_check("dry_run");
    rollout.observe_zpdb_configuration("updated");
    rollout.zpdb.observe_eviction("allowed", 200);
    let zpdb = admission_server::metrics::ZpdbMetrics::register(
        &metric_prefix("admission-webhook"),
        &mut registry,
    );
    zpdb.observe_eviction("denied", 429);
    // Only the two services that call pods register their pod-call metrics.
    let pod_calls = core_k8s::http_metrics::PodCallMetrics::register(
        &metric_prefix("admission-webhook"),
        &mut registry,
    );
    for calls in [&pod_calls, &rollout.pod_calls] {
        calls.observe("/prepare-shutdown", "POST", Some(200), 0.01);
        calls
            .invalid_cluster_label
            .get_or_create(&ClusterValidationLabels {
                method: "POST".into(),
                protocol: "http".into(),
                request_cluster: "m".into(),
            })
            .inc();
    }
    // In compatibility mode the rollout-operator serves the webhooks with its own ZPDB set.
    let webhook = admission_server::metrics::Metrics::register(&mut registry, zpdb, pod_calls);
    webhook.observe(
        admission_server::webhooks::Webhook::NoDownscale,
        admission_server::metrics::Outcome::allowed,
        0.001,
    );
    admission_server::policy::record(
        &webhook.failure_policy,
        &admission_server::policy::entries("ValidatingWebhook", [("w", None)]),
    );
    for service in SERVICES {
        // What the runtime registers for every service.
        ControllerMetrics::register(service, &mut registry).observe_error("api");
        let prefix = metric_prefix(service);
        let api = ApiClientMetrics::register(&prefix, &mut registry);
        api.request_duration
            .get_or_create(&RequestLabels {
                path: "core/v1/pods object".into(),
                method: "GET".into(),
                status_code: "200".into(),
            })
            .observe(0.01);
        api.rate_limited
            .get_or_create(&GroupLabels {
                api_group: "core".into(),
            })
            .inc();
        api.retried
            .get_or_create(&GroupLabels {
                api_group: "core".into(),
            })
            .inc();
        let http = HttpMetrics::register(&prefix, &mut registry);
        let route = RouteLabels {
            method: "GET".into(),
            route: "metrics".into(),
        };
        http.request_duration
            .get_or_create(&ServerLabels {
                method: "GET".into(),
                route: "metrics".into(),
                status_code: "200".into(),
                ws: "false".into(),
            })
            .observe(0.01);
        http.request_bytes.get_or_create(&route).observe(0.0);
        http.response_bytes.get_or_create(&route).observe(10.0);
        http.inflight.get_or_create(&route).set(0);
    }
    families(&registry)
}

/// The first column of every row of docs/metrics.md's `| metric |` tables, `<service>_`
/// expanded.
fn documented() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(repo("docs/metrics.md")).unwrap();
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in docs.lines() {
        in_table = line.starts_with("| metric |") || (in_table && line.starts_with('|'));
        if !in_table {
            continue;
        }
        let Some(name) = line
            .strip_prefix("| `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name)
        else {
            continue;
        };
        match name.strip_prefix("<service>_") {
            Some(rest) => names.extend(
                SERVICES
                    .iter()
                    .map(|s| format!("{}_{rest}", metric_prefix(s))),
            ),
            None => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Every PromQL expression, with where it comes from.
fn expressions() -> Vec<(String, String)> {
    let mut found = Vec::new();
    let dir = repo("dashboards");
    let mut uids = BTreeSet::new();
    let mut boards: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    boards.sort();
    assert!(boards.len() >= 4, "dashboards: {boards:?}");
    for path in boards {
        let board: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let uid = board["uid"].as_str().unwrap().to_string();
        assert!(
            uids.insert(uid.clone()),
            "{}: uid {uid} twice",
            path.display()
        );
        let variables: Vec<&str> = board["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert!(variables.contains(&"datasource"), "{}", path.display());
        let mut ids = BTreeSet::new();
        for panel in board["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap();
            assert!(
                ids.insert(panel["id"].as_u64().unwrap()),
                "{}: panel id twice",
                path.display()
            );
            if panel["type"] == "row" {
                continue;
            }
            assert!(
                !panel["description"].as_str().unwrap_or_default().is_empty(),
                "{}: panel {title:?} has no description",
                path.display()
            );
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{}: {title:?}", path.display());
            for target in targets {
                found.push((
                    format!("{} / {title}", path.display()),
                    target["expr"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    let rules: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("alerts.yaml")).unwrap()).unwrap();
    let mut alerts = BTreeSet::new();
    let mut runbooks = BTreeSet::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap().to_string();
            assert!(alerts.insert(name.clone()), "alert {name} twice");
            assert!(
                matches!(
                    rule["labels"]["severity"].as_str(),
                    Some("info" | "warning" | "critical")
                ),
                "{name}: severity"
            );
            for key in ["summary", "description"] {
                assert!(
                    !rule["annotations"][key]
                        .as_str()
                        .unwrap_or_default()
                        .is_empty(),
                    "{name}: no {key}"
                );
            }
            assert!(rule["for"].is_string(), "{name}: no `for`");
            let runbook = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no runbook_url"));
            let (page, section) = runbook
                .split_once('#')
                .unwrap_or_else(|| panic!("{name}: runbook_url {runbook} names no section"));
            assert!(
                page.ends_with("/docs/runbooks.md"),
                "{name}: runbook_url {runbook} is not docs/runbooks.md"
            );
            runbooks.insert(section.to_string());
            found.push((
                format!("alert {name}"),
                rule["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    let sections = runbook_sections();
    assert_eq!(
        runbooks.difference(&sections).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "alerts whose runbook section is not in docs/runbooks.md"
    );
    assert_eq!(
        sections.difference(&runbooks).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "docs/runbooks.md sections no alert points at"
    );
    found
}

/// The Strata metrics an expression names (a histogram's `_bucket`/`_sum`/`_count` series
/// count as its family).
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let prefixes: Vec<String> = SERVICES
        .iter()
        .map(|s| format!("{}_", metric_prefix(s)))
        .collect();
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| {
            prefixes.iter().any(|p| word.starts_with(p.as_str()))
                || word.starts_with(FAILURE_POLICY)
                || word.starts_with("process_")
        })
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word)
                .to_string()
        })
        .collect()
}

#[test]
fn registered_documented_and_charted_metrics_are_the_same() {
    let registered = registered();
    let documented = documented();
    assert!(registered.len() >= 20, "{registered:?}");
    assert_eq!(
        registered.difference(&documented).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "registered but not in docs/metrics.md"
    );
    assert_eq!(
        documented.difference(&registered).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "in docs/metrics.md but registered by no service"
    );

    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (place, expr) in expressions() {
        let named = metrics_in(&expr);
        let external = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| EXTERNAL.contains(&word));
        assert!(
            !named.is_empty() || external,
            "{place}: no Strata metric in {expr}"
        );
        for metric in named {
            assert!(
                documented.contains(&metric),
                "{place}: {metric} is not a Strata metric ({expr})"
            );
            used.entry(metric).or_default().push(place.clone());
        }
    }
    let unused: Vec<&String> = documented
        .iter()
        .filter(|m| !used.contains_key(*m))
        .collect();
    assert!(
        unused.is_empty(),
        "documented metrics in no dashboard panel or alert: {unused:?}"
    );
}

#[test]
fn expressions_name_histograms_by_their_series() {
    assert_eq!(
        metrics_in(
            "histogram_quantile(0.99, sum by (le) (rate(admission_webhook_review_duration_seconds_bucket{webhook!=\"x\"}[5m])))"
        ),
        BTreeSet::from(["admission_webhook_review_duration_seconds".to_string()])
    );
    assert_eq!(
        metrics_in(
            "time() - max by (rollout_group) (rollout_operator_last_successful_group_reconcile_timestamp_seconds)"
        ),
        BTreeSet::from([
            "rollout_operator_last_successful_group_reconcile_timestamp_seconds".to_string()
        ])
    );
}

/// The committed dashboards, alert rules, alert tests and empty-panel list are exactly what
/// `dashboards/generate.py` writes: an edit of the output alone (it happened once: a query
/// added to a dashboard's JSON and not to the generator) is lost at the next `make dashboards`.
#[test]
fn dashboards_are_what_the_generator_writes() {
    let dashboards = strata_e2e::chart::repo_root().join("dashboards");
    let out = std::env::temp_dir().join(format!("strata-dashboards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = std::process::Command::new("python3")
        .arg(dashboards.join("generate.py"))
        .arg(&out)
        .output()
        .expect("python3 dashboards/generate.py");
    assert!(
        run.status.success(),
        "generate.py: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut generated: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    generated.sort();
    assert!(generated.len() >= 8, "{generated:?}");
    let stale: Vec<&String> = generated
        .iter()
        .filter(|name| {
            std::fs::read(out.join(name)).ok() != std::fs::read(dashboards.join(name)).ok()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        stale.is_empty(),
        "dashboards/{stale:?} differ from what generate.py writes: edit the generator and run `make dashboards`"
    );
}
