//! The dashboards and alerts against a real Prometheus. It scrapes the four services (and
//! kube-apiserver) while they do what the dashboards show: a layer deployed with a dependent,
//! one pruned object and one failing layer, a drift found and healed, a zone rollout, admission
//! reviews, a prepare-downscale whose pod call is refused once for its cluster label. Then every
//! query of every dashboard panel, its variables resolved, is evaluated: one that returns no
//! series fails the test unless `dashboards/e2e-empty.tsv` (written by the generator) says why
//! it may be empty here (series that exist only once something fails), and its witness query —
//! series exactly when what the reason rules out did happen — is empty too, so a wrong query is
//! never excused by a reason. Last, alerts are driven to fire for real (with every `for` set to
//! 0 s): a failing layer, a webhook stopped under `failurePolicy: Fail` while kube-apiserver
//! keeps calling it, and a service whose every replica is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;
use strata_e2e::admission::{kubectl_scale, register, register_prepare_downscale, stateful_set};
use strata_e2e::chart::repo_root;
use strata_e2e::flux::{
    configmap_layer, configmap_yaml, deployment_yaml, install_layer_crds, layer_status,
    source_configmap,
};
use strata_e2e::plane::free_port;
use strata_e2e::prometheus::{Prometheus, Target};
use strata_e2e::services::{
    ServiceProcess, chart_identity, start_admission_webhook, start_layer_service,
    start_service_with,
};
use strata_e2e::support::{
    STATEFULSET_UPDATE_RULES, TestNamespace, apply_shipped_crd, apply_yaml, cluster,
    crds_established, eventually, kubeconfig_server, pod_ready, rollout_zone, stateful_set_settled,
};

/// `(dashboard uid, panel id, refId)` → (why that query may return nothing in this scenario,
/// the witness query that must then return nothing too).
fn may_be_empty() -> BTreeMap<(String, u64, String), (String, String)> {
    let text = std::fs::read_to_string(repo_root().join("dashboards/e2e-empty.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.splitn(6, '\t').collect();
            assert_eq!(f.len(), 6, "e2e-empty.tsv: {l:?}");
            assert!(!f[4].trim().is_empty(), "e2e-empty.tsv: no reason in {l:?}");
            assert!(
                !f[5].trim().is_empty(),
                "e2e-empty.tsv: no witness in {l:?}"
            );
            (
                (f[0].to_string(), f[1].parse().unwrap(), f[3].to_string()),
                (f[4].to_string(), f[5].to_string()),
            )
        })
        .collect()
}

/// A panel query: dashboard uid, panel id and title, refId, and the expression with the
/// variables resolved as Grafana would for "All" and a 1 s scrape interval.
struct Query {
    uid: String,
    panel: u64,
    title: String,
    ref_id: String,
    expr: String,
}

fn panel_queries() -> Vec<Query> {
    let mut out = Vec::new();
    let dir = repo_root().join("dashboards");
    let mut boards: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    boards.sort();
    for path in boards {
        let board: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let uid = board["uid"].as_str().unwrap().to_string();
        for panel in board["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                out.push(Query {
                    uid: uid.clone(),
                    panel: panel["id"].as_u64().unwrap(),
                    title: panel["title"].as_str().unwrap().to_string(),
                    ref_id: target["refId"].as_str().unwrap().to_string(),
                    expr: target["expr"]
                        .as_str()
                        .unwrap()
                        .replace("$cluster", ".*")
                        .replace("$namespace", ".*")
                        .replace("$__rate_interval", "30s"),
                });
            }
        }
    }
    out
}

async fn deployed(client: &kube::Client, layer: &str) -> Result<()> {
    eventually(
        &format!("{layer} Deployed"),
        Duration::from_secs(60),
        || async { Ok((layer_status(client, layer).await?["state"] == "Deployed").then_some(())) },
    )
    .await
}

fn target(job: &str, process: &ServiceProcess, ns: &str) -> Target {
    Target {
        job: job.to_string(),
        address: process.admin.expect("admin address"),
        labels: vec![
            ("namespace".into(), ns.to_string()),
            ("pod".into(), format!("{job}-0")),
            ("cluster".into(), "e2e".into()),
        ],
    }
}

#[tokio::test]
async fn every_panel_has_data_and_alerts_fire_in_a_real_prometheus() -> Result<()> {
    let c = cluster();
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "observability").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    apply_shipped_crd(&client, &ns, "zone-aware-pod-disruption-budget.yaml").await?;
    crds_established(
        &client,
        &["zoneawarepoddisruptionbudgets.rollout-operator.grafana.com"],
    )
    .await?;

    // The services, each scraped as Kubernetes service discovery would label its pod.
    let mut controller = start_layer_service(
        "layer-controller",
        &ns,
        &["--health-poll", "500ms", "--orphan-grace", "1s"],
    )?;
    let observer = start_layer_service("drift-observer", &ns, &[])?;
    let rollout_args = [
        "--watch-namespace",
        ns.as_str(),
        "--lease-namespace",
        ns.as_str(),
        "--leader-elect=false",
    ];
    let operator = start_service_with(
        "rollout-operator",
        &chart_identity(c.kubeconfig(), "rollout-operator", &rollout_args)?,
        &rollout_args,
    )?;
    let tls_port = free_port()?;
    // The pods prepare-downscale calls, stood in for by a local server (the webhook's
    // test-only `--pod-address-override`): its first call is refused as a cluster-validating
    // server of another cluster refuses it (HTTP 511), every later one answered.
    let pod_calls = Arc::new(AtomicUsize::new(0));
    let pods_address = {
        let calls = pod_calls.clone();
        let app = axum::Router::new().route(
            "/ingester/prepare-shutdown",
            axum::routing::post(move || {
                let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        (
                            axum::http::StatusCode::from_u16(511).unwrap_or_default(),
                            r#"{"cluster_validation_error_message": "rejected request with wrong cluster validation label"}"#,
                        )
                    } else {
                        (axum::http::StatusCode::OK, "{}")
                    }
                }
            })
            .delete(|| async { "{}" }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    };
    let mut webhook = start_admission_webhook(
        &ns,
        &format!("127.0.0.1:{tls_port}"),
        &[
            "--tls-extra-names",
            "127.0.0.1",
            "--pod-address-override",
            pods_address.as_str(),
            "--cluster-validation-label",
            "strata-e2e",
        ],
    )?;
    let server = kubeconfig_server(c.kubeconfig())?;
    let pki = c.kubeconfig().parent().context("plane dir")?.join("pki");
    let rules_text = std::fs::read_to_string(repo_root().join("dashboards/alerts.yaml"))?;
    // Every alert fires as soon as its expression holds: the test cannot wait out `for`.
    let rules: String = rules_text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: \"0s\"", &l[..l.len() - l.trim_start().len()]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let prometheus = Prometheus::start(
        &[
            target("layer-controller", &controller, &ns),
            target("drift-observer", &observer, &ns),
            target("rollout-operator", &operator, &ns),
            target("admission-webhook", &webhook, &ns),
        ],
        Some((&server, &pki)),
        &rules,
    )
    .await?;
    let _hook = register(
        &client,
        &ns,
        "ValidatingWebhookConfiguration",
        tls_port,
        "/admission/no-downscale",
        STATEFULSET_UPDATE_RULES,
    )
    .await?;

    // Layers: a base with a dependent, one object pruned, one layer failing.
    let deployment = deployment_yaml(&ns, "web", "nginx:1.25");
    let settings = configmap_yaml(&ns, "settings", "");
    let extra = configmap_yaml(&ns, "extra", "");
    let broken = format!(
        "apiVersion: example.invalid/v1\nkind: NoSuchKind\nmetadata: {{name: x, namespace: {ns}}}\n"
    );
    let base_files = [
        ("web.yaml", deployment.clone()),
        ("settings.yaml", settings),
    ];
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "base", "30s", &base_files),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "{}  prereqs: {{dependsOn: [{ns}-base]}}\n",
            configmap_layer(&ns, "apps", "30s", &[("extra.yaml", extra)])
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "broken", "30s", &[("x.yaml", broken)]),
    )
    .await?;
    let base = format!("{ns}-base");
    deployed(&client, &base).await?;
    deployed(&client, &format!("{ns}-apps")).await?;
    // Prune: the base's source drops settings.yaml.
    apply_yaml(
        &client,
        &ns,
        &source_configmap(&ns, "base", &[("web.yaml", deployment.clone())]),
    )
    .await?;
    eventually("settings pruned", Duration::from_secs(60), || async {
        let out = c
            .kubectl()
            .args([
                "-n",
                &ns,
                "get",
                "configmap",
                "settings",
                "--ignore-not-found",
                "-o",
                "name",
            ])
            .output()?;
        Ok(out.stdout.is_empty().then_some(()))
    })
    .await?;
    // A revision that leaves the Deployment as the last one applied it: not re-sent.
    let more = configmap_yaml(&ns, "more", "");
    apply_yaml(
        &client,
        &ns,
        &source_configmap(
            &ns,
            "base",
            &[("web.yaml", deployment), ("more.yaml", more)],
        ),
    )
    .await?;
    eventually(
        "the unchanged Deployment left unapplied",
        Duration::from_secs(60),
        || async {
            Ok((controller
                .metric("layer_controller_unchanged_objects_total", &[])
                .await?
                > 0.0)
                .then_some(()))
        },
    )
    .await?;

    // Drift, healed.
    c.kubectl()
        .args([
            "-n",
            &ns,
            "set",
            "image",
            "deployment/web",
            "app=nginx:1.26",
        ])
        .output()?;
    eventually("the drift healed", Duration::from_secs(60), || async {
        Ok((observer
            .metric("drift_observer_drift_healed_total", &[])
            .await?
            > 0.0)
            .then_some(()))
    })
    .await?;

    // A zone rollout under a zone-aware disruption budget (each image change also reviewed
    // by the no-downscale webhook), then an eviction the pod-eviction webhook decides.
    apply_yaml(
        &client,
        &ns,
        "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: ingester}\nspec: {maxUnavailable: 1, selector: {matchLabels: {rollout-group: ingester}}}\n",
    )
    .await?;
    let _eviction_hook = register(
        &client,
        &ns,
        "ValidatingWebhookConfiguration",
        tls_port,
        "/admission/pod-eviction",
        "  - apiGroups: [\"\"]\n    apiVersions: [v1]\n    operations: [CREATE]\n    resources: [pods/eviction]",
    )
    .await?;
    let zone = |z: &str, image: &str| rollout_zone("ingester", z, 1, image, 1, false);
    for z in ["a", "b", "c"] {
        apply_yaml(&client, &ns, &zone(z, "example.invalid/ingester:1")).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    eventually("3 ready ingesters", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels("rollout-group=ingester"))
            .await?
            .items;
        Ok((list.len() == 3 && list.iter().all(pod_ready)).then_some(()))
    })
    .await?;
    for z in ["a", "b", "c"] {
        apply_yaml(&client, &ns, &zone(z, "example.invalid/ingester:2")).await?;
    }
    eventually(
        "pods deleted by the rollout",
        Duration::from_secs(60),
        || async {
            Ok((operator
                .metric("rollout_operator_pods_deleted_total", &[])
                .await?
                > 0.0)
                .then_some(()))
        },
    )
    .await?;
    let eviction = std::env::temp_dir().join(format!("eviction-{ns}.json"));
    std::fs::write(
        &eviction,
        format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"ingester-zone-a-0","namespace":"{ns}"}}}}"#
        ),
    )?;
    eventually("an eviction decided", Duration::from_secs(30), || async {
        // Allowed or refused (429): either way the budget decided it.
        let _ = c
            .kubectl()
            .args([
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{ns}/pods/ingester-zone-a-0/eviction"),
                "-f",
            ])
            .arg(&eviction)
            .output()?;
        Ok((webhook
            .metric("admission_webhook_zpdb_eviction_requests_total", &[])
            .await?
            > 0.0)
            .then_some(()))
    })
    .await?;
    eventually("reviews answered", Duration::from_secs(30), || async {
        Ok((webhook
            .metric("admission_webhook_reviews_total", &[])
            .await?
            > 0.0)
            .then_some(()))
    })
    .await?;

    // Calls to pods: a StatefulSet that opts in to prepare-downscale is scaled down; the first
    // attempt is denied (its pod refused the call for the cluster label), a later one passes.
    let prepare_hook = register_prepare_downscale(&client, &ns, tls_port).await?;
    apply_yaml(
        &client,
        &ns,
        &stateful_set(
            "store",
            r#""grafana.com/prepare-downscale": "true""#,
            r#""grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown", "grafana.com/prepare-downscale-http-port": "80""#,
        ),
    )
    .await?;
    stateful_set_settled(&client, &ns, "store", 3).await?;
    eventually("a downscale prepared", Duration::from_secs(30), || async {
        // Off the test's thread: the stand-in pods answer on this runtime meanwhile.
        let namespace = ns.clone();
        let out =
            tokio::task::spawn_blocking(move || kubectl_scale(&namespace, "store", 2)).await??;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Some(()))
    })
    .await?;
    ensure!(
        pod_calls.load(Ordering::SeqCst) >= 2,
        "the refused call and the answered one"
    );
    // Only the no-downscale webhook is left registered for the alerts below.
    drop(prepare_hook);

    // Every panel query returns series, or says why it may not.
    for job in [
        "layer-controller",
        "drift-observer",
        "rollout-operator",
        "admission-webhook",
        "kube-apiserver",
    ] {
        eventually(
            &format!("{job} scraped"),
            Duration::from_secs(30),
            || async { Ok(prometheus.scraped(job).await?.then_some(())) },
        )
        .await?;
    }
    // A few scrapes after the last event, so rates have two samples of it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let allowed = may_be_empty();
    let queries = panel_queries();
    let mut empty = Vec::new();
    for q in &queries {
        let series = prometheus
            .query(&q.expr)
            .await
            .with_context(|| format!("{} / {} / {}", q.uid, q.title, q.ref_id))?;
        if !series.is_empty() {
            continue;
        }
        match allowed.get(&(q.uid.clone(), q.panel, q.ref_id.clone())) {
            None => empty.push(format!(
                "{}\t{} {}\t{}\t{}",
                q.uid, q.panel, q.title, q.ref_id, q.expr
            )),
            // Excused only when what the reason rules out really did not happen.
            Some((reason, witness)) => {
                let seen = prometheus
                    .query(witness)
                    .await
                    .with_context(|| format!("witness {witness}"))?;
                if !seen.is_empty() {
                    empty.push(format!(
                        "{}\t{} {}\t{}\t{}\t(excused as \"{reason}\", but {witness} has {} series)",
                        q.uid,
                        q.panel,
                        q.title,
                        q.ref_id,
                        q.expr,
                        seen.len()
                    ));
                }
            }
        }
    }
    ensure!(
        empty.is_empty(),
        "panel queries without data (uid, panel, refId, query):\n{}",
        empty.join("\n")
    );
    for (uid, panel, ref_id) in allowed.keys() {
        ensure!(
            queries
                .iter()
                .any(|q| (&q.uid, q.panel, &q.ref_id) == (uid, *panel, ref_id)),
            "e2e-empty.tsv names {uid} panel {panel} {ref_id}, which no dashboard has"
        );
    }

    // Every alert expression evaluated by Prometheus without error, on these series.
    let rules = prometheus.rules().await?;
    let expected: usize = rules_text.matches("- alert: ").count();
    ensure!(
        rules.len() == expected,
        "{} rules loaded, {expected} in alerts.yaml",
        rules.len()
    );
    let unhealthy: Vec<_> = rules
        .iter()
        .filter(|(_, health, _)| health != "ok")
        .collect();
    ensure!(
        unhealthy.is_empty(),
        "rules not evaluated cleanly: {unhealthy:?}"
    );

    // Alerts, for real: a failing layer, a webhook down under Fail, a service gone.
    let _ = webhook.terminate_blocking();
    let sts = format!("{ns}/ingester-zone-a");
    let firing = |name: &'static str| {
        let prometheus = &prometheus;
        async move {
            Ok::<bool, anyhow::Error>(
                prometheus
                    .alerts()
                    .await?
                    .iter()
                    .any(|a| a["labels"]["alertname"] == name && a["state"] == "firing"),
            )
        }
    };
    eventually(
        "AdmissionWebhookUnavailable firing",
        Duration::from_secs(60),
        || async {
            // Each refused update is one more calling_webhook_error at kube-apiserver.
            let _ = c
                .kubectl()
                .args([
                    "-n",
                    &ns,
                    "annotate",
                    "--overwrite",
                    "statefulset",
                    "ingester-zone-a",
                    &format!("e2e/poke={}", core_k8s::args::random_suffix()),
                ])
                .output()?;
            Ok(firing("AdmissionWebhookUnavailable").await?.then_some(()))
        },
    )
    .await
    .with_context(|| {
        format!(
            "AdmissionWebhookUnavailable never fired while kube-apiserver refused updates of {sts}"
        )
    })?;
    eventually(
        "AddonsLayerFailed firing",
        Duration::from_secs(60),
        || async { Ok(firing("AddonsLayerFailed").await?.then_some(())) },
    )
    .await?;
    let _ = controller.terminate_blocking();
    eventually(
        "LayerControllerDown firing",
        Duration::from_secs(60),
        || async { Ok(firing("LayerControllerDown").await?.then_some(())) },
    )
    .await?;
    // And a service still up does not fire.
    ensure!(
        !firing("DriftObserverDown").await?,
        "DriftObserverDown fired while it runs"
    );
    Ok(())
}
