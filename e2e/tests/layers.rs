//! layer-controller on the local control plane, with Flux-style artifacts served by a local
//! HTTP server (a minimal GitRepository CRD whose status the test sets, as source-controller
//! would): ordered deploys, a timeout naming the unready object and the dependent's blocker,
//! recovery, prune, a move between layers keeping the uid, re-creation after a manual delete,
//! a digest mismatch applying nothing; then cycles, hold and the k8sVersion gate on a
//! ConfigMap source.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use layer_controller::crd::AddonsLayer;
use layer_controller::source::sha256_digest;
use serde_json::{Value, json};
use strata_e2e::flux::{
    ArtifactServer, create_gitrepository, install_layer_crds, inventory_names, layer_status,
    set_artifact, source_configmap,
};
use strata_e2e::services::{ServiceProcess, bin_dir, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

fn start_controller(ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    let mut args = vec!["--orphan-grace", "2s", "--health-poll", "500ms"];
    args.extend_from_slice(extra);
    start_layer_service("layer-controller", ns, &args)
}

fn layer_yaml(ns: &str, name: &str, extra_spec: &str, deps: &[&str], kind: &str) -> String {
    let deps: Vec<String> = deps.iter().map(|d| format!("{ns}-{d}")).collect();
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 10s
  timeout: 8s
  source: {{kind: {kind}, name: {src}, namespace: {ns}, path: ./{path}}}
  prereqs: {{dependsOn: [{deps}]}}
{extra_spec}",
        src = if kind == "ConfigMap" {
            format!("src-{name}")
        } else {
            "repo".into()
        },
        path = if kind == "ConfigMap" { "" } else { name },
        deps = deps.join(", "),
    )
}

async fn state_of(client: &Client, name: &str) -> String {
    layer_status(client, name)
        .await
        .ok()
        .and_then(|s| s["state"].as_str().map(str::to_string))
        .unwrap_or_default()
}

async fn wait_state(client: &Client, name: &str, want: &str, within: Duration) -> Result<Value> {
    eventually(&format!("layer {name} {want}"), within, || async {
        let status = layer_status(client, name).await?;
        Ok((status["state"] == want).then_some(status))
    })
    .await
}

async fn configmap(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<k8s_openapi::api::core::v1::ConfigMap> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.ok().flatten()
}

fn as_refs<'a>(files: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    files.iter().map(|(p, t)| (*p, t.as_str())).collect()
}

fn cm(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{k: v}}\n"
    )
}

/// A ConfigMap `gate` in `ns` with `data.ready: <ready>`: a prerequisite the tests open
/// ("yes") and close.
fn gate_cm(ns: &str, ready: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: gate, namespace: {ns}}}\ndata: {{ready: \"{ready}\"}}\n"
    )
}

/// A layer's `prereqs` (appended to its spec): the ConfigMap `gate` of [`gate_cm`], ready
/// when open.
fn gated(ns: &str) -> String {
    format!(
        "  prereqs:\n    objects:\n    - {{apiVersion: v1, kind: ConfigMap, name: gate, namespace: {ns}, readyExpr: \"dep.data.ready == 'yes'\"}}\n"
    )
}

/// Until `layer` reports itself blocked by the ConfigMap `gate`.
async fn wait_blocked_by_gate(client: &Client, layer: &str, what: &str) -> Result<()> {
    eventually(what, Duration::from_secs(30), || async {
        let status = layer_status(client, layer).await?;
        Ok(status["blockedBy"]
            .to_string()
            .contains("gate")
            .then_some(()))
    })
    .await
}

/// A user's edit of the ConfigMap `settings` in `ns` (`data.k: edited`, as another field
/// manager); returns the ConfigMaps of `ns`.
async fn edit_settings(
    client: &Client,
    ns: &str,
) -> Result<Api<k8s_openapi::api::core::v1::ConfigMap>> {
    let configmaps = Api::namespaced(client.clone(), ns);
    configmaps
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "edited"}})),
        )
        .await?;
    Ok(configmaps)
}

fn deployment(ns: &str, name: &str, ready: bool) -> String {
    let fake = if ready {
        ""
    } else {
        ", strata.dev/fake-ready: \"false\""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}{fake}}}}}
    spec: {{containers: [{{name: c, image: example/app:1}}]}}
"
    )
}

type Seen = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>;

/// Records, from watches, the resourceVersion at which each layer of a test was first seen
/// Deployed and each ConfigMap of its namespace was first seen.
struct Order {
    deployed: Seen,
    created: Seen,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Order {
    fn watch(client: &Client, ns: &str) -> Self {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let deployed = Seen::default();
        let created = Seen::default();
        let rv_of = |meta: &kube::api::ObjectMeta| {
            meta.resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        };
        let layers: Api<AddonsLayer> = Api::all(client.clone());
        let config = watcher::Config::default().labels(&format!("strata-e2e/suite={ns}"));
        let seen = deployed.clone();
        let layer_task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(layers, config).applied_objects());
            while let Some(Ok(layer)) = stream.next().await {
                let state = layer.status.as_ref().and_then(|s| s.state.clone());
                if state.as_deref() == Some("Deployed") {
                    seen.lock()
                        .unwrap()
                        .entry(layer.name_any())
                        .or_insert(rv_of(&layer.metadata));
                }
            }
        });
        let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
        let seen = created.clone();
        let map_task = tokio::spawn(async move {
            let mut stream =
                std::pin::pin!(watcher(maps, watcher::Config::default()).applied_objects());
            while let Some(Ok(map)) = stream.next().await {
                seen.lock()
                    .unwrap()
                    .entry(map.name_any())
                    .or_insert(rv_of(&map.metadata));
            }
        });
        Self {
            deployed,
            created,
            tasks: vec![layer_task, map_task],
        }
    }

    fn snapshot(
        &self,
    ) -> (
        std::collections::BTreeMap<String, u64>,
        std::collections::BTreeMap<String, u64>,
    ) {
        (
            self.deployed.lock().unwrap().clone(),
            self.created.lock().unwrap().clone(),
        )
    }

    fn stop(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn cleanup(client: &Client, ns: &str, layers: &[&str], mut controller: ServiceProcess) {
    // Dependents first: the controller's own teardown order is exercised here too.
    for name in layers.iter().rev() {
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                "addonslayer",
                &format!("{ns}-{name}"),
                "--wait=false",
            ])
            .output();
    }
    let api: Api<AddonsLayer> = Api::all(client.clone());
    let _ = eventually("layers torn down", Duration::from_secs(60), || async {
        let left = api
            .list(&kube::api::ListParams::default().labels(&format!("strata-e2e/suite={ns}")))
            .await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await;
    let _ = controller.terminate_blocking();
}

#[tokio::test]
async fn layers_deploy_in_order_fail_recover_prune_and_move() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "layers").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    let r1_files = [
        ("bootstrap/boot.yaml", cm(&ns, "boot")),
        (
            "base/base.yaml",
            format!("{}---\n{}", cm(&ns, "base"), cm(&ns, "base-extra")),
        ),
        ("base/web.yaml", deployment(&ns, "web", true)),
        (
            "apps/app.yaml",
            format!("{}---\n{}", cm(&ns, "app"), cm(&ns, "mover")),
        ),
    ];
    let r1: Vec<(&str, String)> = r1_files.to_vec();
    let (url, digest) = server.publish("r1.tar.gz", &as_refs(&r1));
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "main@sha1:r1", &url, &digest).await?;
    // Order is proven from the API server's own sequence: the resourceVersion at which each
    // layer was first seen Deployed and each ConfigMap first seen at all (one etcd orders both
    // watches; timestamps have only second resolution).
    let order = Order::watch(&client, &ns);
    let controller = start_controller(&ns, &[])?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(&ns, "apps", "", &["base"], "GitRepository"),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(&ns, "base", "", &["bootstrap@>=1.0"], "GitRepository"),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(&ns, "bootstrap", "", &[], "GitRepository"),
    )
    .await?;

    // bootstrap → base → apps, in order.
    let apps = format!("{ns}-apps");
    let base = format!("{ns}-base");
    let boot = format!("{ns}-bootstrap");
    let deployed = wait_state(&client, &apps, "Deployed", Duration::from_secs(60))
        .await
        .with_context(|| controller.logs())?;
    // Dependency order on the cluster itself: each layer Deployed after the one it depends
    // on, and each layer's objects created only after that dependency was Deployed.
    let (deployed_at, created_at) = order.snapshot();
    order.stop();
    let rv = |map: &std::collections::BTreeMap<String, u64>, key: &str| {
        *map.get(key)
            .unwrap_or_else(|| panic!("{key} never seen: {map:?}"))
    };
    assert!(
        rv(&deployed_at, &boot) < rv(&deployed_at, &base),
        "{deployed_at:?}"
    );
    assert!(
        rv(&deployed_at, &base) < rv(&deployed_at, &apps),
        "{deployed_at:?}"
    );
    assert!(
        rv(&deployed_at, &boot) < rv(&created_at, "base"),
        "{deployed_at:?} {created_at:?}"
    );
    assert!(
        rv(&deployed_at, &base) < rv(&created_at, "app"),
        "{deployed_at:?} {created_at:?}"
    );
    assert!(
        rv(&created_at, "boot") < rv(&deployed_at, &boot),
        "{created_at:?}"
    );
    assert_eq!(
        deployed["inventory"].as_array().unwrap().len(),
        2,
        "{deployed}"
    );
    let labels = configmap(&client, &ns, "app")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(labels.get("strata.dev/layer"), Some(&apps));

    // r2: a Deployment that never becomes ready fails base after its timeout, naming it,
    // and apps lists it in blockedBy.
    let mut r2 = r1.clone();
    r2[2] = ("base/web.yaml", deployment(&ns, "web", false));
    let (url, digest) = server.publish("r2.tar.gz", &as_refs(&r2));
    set_artifact(&client, &ns, "main@sha1:r2", &url, &digest).await?;
    let failed = wait_state(&client, &base, "Failed", Duration::from_secs(40)).await?;
    let message = failed["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("Deployment {ns}/web")),
        "{message}"
    );
    let blocked = eventually("apps blocked by base", Duration::from_secs(20), || async {
        let status = layer_status(&client, &apps).await?;
        let hit = status["blockedBy"].as_array().and_then(|b| {
            b.iter()
                .find(|b| {
                    b["name"] == base.as_str()
                        && b["message"]
                            .as_str()
                            .unwrap_or("")
                            .contains(&format!("Deployment {ns}/web"))
                })
                .cloned()
        });
        Ok(hit)
    })
    .await?;
    assert_eq!(blocked["reason"], "Unhealthy");
    assert_eq!(state_of(&client, &apps).await, "ApplyPending");

    // r3: the fix recovers both.
    let mut r3 = r1.clone();
    r3[1] = (
        "base/base.yaml",
        format!("{}---\n{}", cm(&ns, "base"), cm(&ns, "base-extra")),
    );
    let (url, digest) = server.publish("r3.tar.gz", &as_refs(&r3));
    set_artifact(&client, &ns, "main@sha1:r3", &url, &digest).await?;
    wait_state(&client, &base, "Deployed", Duration::from_secs(40)).await?;
    let recovered = wait_state(&client, &apps, "Deployed", Duration::from_secs(20)).await?;
    assert_eq!(recovered["revision"], "main@sha1:r3");
    assert!(recovered["blockedBy"].is_null(), "{recovered}");

    // r4: base-extra leaves the source (pruned after the grace window); mover moves from
    // apps to base in the same revision and keeps its uid.
    let mover_uid = configmap(&client, &ns, "mover")
        .await
        .unwrap()
        .uid()
        .unwrap();
    let r4 = vec![
        ("bootstrap/boot.yaml", cm(&ns, "boot")),
        (
            "base/base.yaml",
            format!("{}---\n{}", cm(&ns, "base"), cm(&ns, "mover")),
        ),
        ("base/web.yaml", deployment(&ns, "web", true)),
        ("apps/app.yaml", cm(&ns, "app")),
    ];
    let (url, digest) = server.publish("r4.tar.gz", &as_refs(&r4));
    // Every state base passes through, from a watch (each status write is an event).
    let base_states = {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let api: Api<AddonsLayer> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={base}"));
        let out = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config).applied_objects());
            while let Some(Ok(layer)) = stream.next().await {
                if let Some(state) = layer.status.and_then(|s| s.state) {
                    seen.lock().unwrap().push(state);
                }
            }
        });
        (out, task)
    };
    // The watch is up once it delivered base's current state.
    eventually(
        "the watch on base is established",
        Duration::from_secs(10),
        || async { Ok((!base_states.0.lock().unwrap().is_empty()).then_some(())) },
    )
    .await?;
    set_artifact(&client, &ns, "main@sha1:r4", &url, &digest).await?;
    eventually("base-extra pruned", Duration::from_secs(40), || async {
        Ok(configmap(&client, &ns, "base-extra")
            .await
            .is_none()
            .then_some(()))
    })
    .await
    .with_context(|| controller.logs())?;
    wait_state(&client, &base, "Deployed", Duration::from_secs(20)).await?;
    let states = base_states.0.lock().unwrap().clone();
    base_states.1.abort();
    assert!(
        states.iter().any(|s| s == "Pruning"),
        "base reports Pruning while base-extra waits out the grace window: {states:?}"
    );
    let moved = eventually("mover owned by base", Duration::from_secs(30), || async {
        Ok(configmap(&client, &ns, "mover")
            .await
            .filter(|c| c.labels().get("strata.dev/layer") == Some(&base)))
    })
    .await?;
    assert_eq!(
        moved.uid().unwrap(),
        mover_uid,
        "the moved object was re-created"
    );
    let apps_status = wait_state(&client, &apps, "Deployed", Duration::from_secs(20)).await?;
    eventually(
        "apps inventory without mover",
        Duration::from_secs(20),
        || async {
            let status = layer_status(&client, &apps).await?;
            let names = inventory_names(&status);
            Ok((names == vec!["app".to_string()]).then_some(()))
        },
    )
    .await
    .with_context(|| format!("{apps_status}"))?;
    // The object stayed all along: same uid, never deleted.
    assert_eq!(
        configmap(&client, &ns, "mover")
            .await
            .unwrap()
            .uid()
            .unwrap(),
        mover_uid
    );

    // A manual delete is undone by the next reconcile (interval 10s).
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.delete("boot", &Default::default()).await?;
    eventually("boot re-created", Duration::from_secs(30), || async {
        Ok(configmap(&client, &ns, "boot").await)
    })
    .await?;

    // r5 with a digest that does not match: the layers fail and nothing of r5 is applied.
    let mut r5 = r4.clone();
    r5[0] = (
        "bootstrap/boot.yaml",
        format!("{}---\n{}", cm(&ns, "boot"), cm(&ns, "tampered")),
    );
    let (url, _) = server.publish("r5.tar.gz", &as_refs(&r5));
    set_artifact(
        &client,
        &ns,
        "main@sha1:r5",
        &url,
        &sha256_digest(b"something else"),
    )
    .await?;
    let failed = wait_state(&client, &boot, "Failed", Duration::from_secs(30)).await?;
    assert!(failed.to_string().contains("digest mismatch"), "{failed}");
    // Nothing applied, not even after the controller looked at this layer again.
    strata_e2e::flux::reconciled(&client, &boot, Duration::from_secs(40)).await?;
    assert!(configmap(&client, &ns, "tampered").await.is_none());

    cleanup(&client, &ns, &["bootstrap", "base", "apps"], controller).await;
    // Teardown removed what the layers applied.
    assert!(configmap(&client, &ns, "app").await.is_none());
    assert!(configmap(&client, &ns, "boot").await.is_none());
    Ok(())
}

#[tokio::test]
async fn cycles_stall_members_only_hold_freezes_and_k8s_version_gates() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "layers-gates").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    // One ConfigMap source per layer (`src-<layer>`), each holding ConfigMaps `objects`.
    let source = |layer: &str, objects: &[&str]| {
        let data: String = objects
            .iter()
            .map(|o| {
                format!(
                    "  {o}.yaml: |\n{}",
                    cm(&ns, o)
                        .lines()
                        .map(|l| format!("    {l}\n"))
                        .collect::<String>()
                )
            })
            .collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: src-{layer}, namespace: {ns}, labels: {{strata.dev/layer-source: \"true\"}}}}\ndata:\n{data}"
        )
    };
    for (layer, objects) in [
        ("c1", ["c1-obj"]),
        ("c2", ["c2-obj"]),
        ("solo", ["x"]),
        ("future", ["f"]),
    ] {
        apply_yaml(&client, &ns, &source(layer, &objects)).await?;
    }
    let controller = start_controller(&ns, &[])?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(&ns, "c1", "", &["c2"], "ConfigMap"),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(&ns, "c2", "", &["c1"], "ConfigMap"),
    )
    .await?;
    apply_yaml(&client, &ns, &layer_yaml(&ns, "solo", "", &[], "ConfigMap")).await?;
    apply_yaml(
        &client,
        &ns,
        &layer_yaml(
            &ns,
            "future",
            "  prereqs:\n    k8sVersion: v1.99\n",
            &[],
            "ConfigMap",
        )
        .replace("  prereqs: {dependsOn: []}\n", ""),
    )
    .await?;

    let c1 = format!("{ns}-c1");
    let stalled = wait_state(&client, &c1, "Failed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let stalled_condition = stalled["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .cloned()
        .unwrap();
    assert_eq!(stalled_condition["status"], "True");
    assert!(
        stalled_condition["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{ns}-c1 -> {ns}-c2 -> {ns}-c1")),
        "{stalled_condition}"
    );
    wait_state(
        &client,
        &format!("{ns}-c2"),
        "Failed",
        Duration::from_secs(10),
    )
    .await?;
    // The unrelated layer deploys; nothing of the cycle's members was applied.
    let solo = format!("{ns}-solo");
    wait_state(&client, &solo, "Deployed", Duration::from_secs(30)).await?;
    assert_eq!(
        configmap(&client, &ns, "x")
            .await
            .unwrap()
            .labels()
            .get("strata.dev/layer"),
        Some(&solo)
    );
    assert!(configmap(&client, &ns, "c1-obj").await.is_none());

    // A k8sVersion above the cluster's blocks with a blocker naming it.
    let future = wait_state(
        &client,
        &format!("{ns}-future"),
        "K8sVersion",
        Duration::from_secs(30),
    )
    .await?;
    assert_eq!(future["blockedBy"][0]["reason"], "K8sVersion", "{future}");
    assert!(
        future["blockedBy"][0]["message"]
            .as_str()
            .unwrap()
            .contains("v1.99"),
        "{future}"
    );

    // Hold freezes: a source change is not applied until the hold is lifted. The hold is set
    // with `kubectl strata layers suspend`: the CLI as a kubectl plugin (`kubectl-strata` on
    // PATH, the kubeconfig from the environment as kubectl passes it).
    let plugins = std::env::temp_dir().join(format!("strata-kubectl-plugin-{ns}"));
    std::fs::create_dir_all(&plugins)?;
    let plugin = plugins.join("kubectl-strata");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(bin_dir().join("strata"), &plugin)?;
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(strata_e2e::support::kubectl_binary())
        .args(["strata", "layers", "suspend", &solo])
        .env("PATH", &path)
        .env("KUBECONFIG", cluster().kubeconfig())
        .output()?;
    assert!(
        out.status.success(),
        "kubectl strata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("addonslayer/{solo}: suspended (spec.hold: true)")
    );
    wait_state(&client, &solo, "Hold", Duration::from_secs(20)).await?;
    apply_yaml(&client, &ns, &source("solo", &["x", "later"])).await?;
    // A reconcile of the held layer after the source change, which holds.
    let held = strata_e2e::flux::reconciled(&client, &solo, Duration::from_secs(40)).await?;
    assert_eq!(held["state"], "Hold", "{held}");
    assert!(
        configmap(&client, &ns, "later").await.is_none(),
        "a held layer applied a change"
    );
    // `strata layers plan` answers "what would it do once released?"; `graph` shows the DAG.
    let strata = |args: &[&str]| {
        std::process::Command::new(bin_dir().join("strata"))
            .args(args)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .output()
            .unwrap()
    };
    let out = strata(&[
        "layers",
        "plan",
        &solo,
        "-o",
        "json",
        "--default-source-namespace",
        &ns,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(plan["gate"], "Hold", "{plan}");
    assert_eq!(
        plan["create"],
        json!([format!("ConfigMap {ns}/later")]),
        "{plan}"
    );
    assert_eq!(
        plan["unchanged"],
        json!([format!("ConfigMap {ns}/x")]),
        "{plan}"
    );
    let out = strata(&["layers", "graph", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let graph: Value = serde_json::from_slice(&out.stdout)?;
    let cycle = json!([format!("{ns}-c1"), format!("{ns}-c2"), format!("{ns}-c1")]);
    assert!(
        graph["cycles"].as_array().unwrap().contains(&cycle),
        "{graph}"
    );
    let solo_node = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == solo.as_str())
        .unwrap();
    assert_eq!(solo_node["state"], "Hold");
    let out = strata(&["layers", "graph", "-o", "dot"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("\"{ns}-c1\" -> \"{ns}-c2\"")));

    let out = strata(&["layers", "resume", &solo]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(
        "y applied after the hold",
        Duration::from_secs(30),
        || async { Ok(configmap(&client, &ns, "later").await) },
    )
    .await?;
    // `strata layers reconcile --wait` returns once the controller handled that very request.
    let out = strata(&["layers", "reconcile", &solo, "--wait", "--timeout", "60s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("addonslayer/{solo}: reconciled: Deployed")),
        "{stdout}"
    );
    let requested = stdout
        .lines()
        .next()
        .and_then(|l| l.rsplit_once("requested at "))
        .map(|(_, at)| at.to_string())
        .unwrap();
    assert_eq!(
        layer_status(&client, &solo).await?["lastHandledReconcileAt"],
        json!(requested)
    );
    let missing = strata(&["layers", "suspend", "no-such-layer"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("addonslayer no-such-layer not found"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let layers: Api<AddonsLayer> = Api::all(client.clone());

    // Breaking the cycle releases its members.
    layers
        .patch(
            &format!("{ns}-c2"),
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"prereqs": {"dependsOn": []}}})),
        )
        .await?;
    wait_state(&client, &c1, "Deployed", Duration::from_secs(30)).await?;
    assert!(configmap(&client, &ns, "c1-obj").await.is_some());

    cleanup(&client, &ns, &["future", "solo", "c2", "c1"], controller).await;
    Ok(())
}

/// `spec.health.policy: strict`: a layer whose Deployment's pods cannot pull their image is
/// Failed within the grace (+5 s), its Ready condition and `status.inventory[]` naming the
/// object and the reason, its dependent blocked by it; a neighbour layer deploys meanwhile;
/// the same layer under the default (kstatus) policy is still Applying. A malformed
/// expression stalls its layer naming the field and the expression.
#[tokio::test]
async fn strict_layers_fail_fast_when_pods_cannot_start() -> Result<()> {
    use strata_e2e::flux::{configmap_layer, configmap_yaml};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "layers-health").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &["--default-source-namespace", &ns])?;
    let stuck =
        |name: &str| strata_e2e::support::cannot_start("Deployment", name, &ns, "ImagePullBackOff");
    let health = "  health: {policy: strict, failureGrace: 5s}\n";
    let started = std::time::Instant::now();
    apply_yaml(
        &client,
        &ns,
        &format!(
            "{}{health}",
            configmap_layer(&ns, "strict", "5m", &[("web.yaml", stuck("web"))])
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "lenient", "5m", &[("api.yaml", stuck("api"))]),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "{}  prereqs: {{dependsOn: [{ns}-strict]}}\n",
            configmap_layer(
                &ns,
                "dependent",
                "5m",
                &[("d.yaml", configmap_yaml(&ns, "d", ""))]
            )
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(
            &ns,
            "neighbour",
            "5m",
            &[("n.yaml", configmap_yaml(&ns, "near", ""))],
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "{}  health:\n    exprs:\n    - {{apiVersion: example.com/v1, kind: Widget, current: \"status.ready ==\"}}\n",
            configmap_layer(&ns, "badexpr", "5m", &[("b.yaml", configmap_yaml(&ns, "b", ""))])
        ),
    )
    .await?;

    let strict = format!("{ns}-strict");
    let failed = wait_state(&client, &strict, "Failed", Duration::from_secs(60))
        .await
        .with_context(|| controller.logs())?;
    let elapsed = started.elapsed();
    eprintln!("strict layer Failed {elapsed:?} after it was created");
    let ready = failed["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    let message = ready["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&format!("Deployment {ns}/web is Failed: web-"))
            && message.contains("/app: ImagePullBackOff: image \"registry.invalid/web:1\""),
        "the Ready condition must name the object, pod, container and reason: {ready}"
    );
    let entry = failed["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "Deployment" && e["name"] == "web")
        .cloned()
        .unwrap();
    assert_eq!(entry["status"], "Failed", "{entry}");
    assert_eq!(entry["reason"], "ImagePullBackOff", "{entry}");
    // The promise is the failure grace (5 s), far inside the layer's 5 m timeout. The clock
    // here starts before the layer exists, so the 5 s margin holds what precedes the grace:
    // kube-controller-manager making the pod, kwok reporting its waiting reason, the health
    // watch delivering it. A layer that waited for its timeout instead fails the 60 s wait
    // above, whatever the margin.
    assert!(
        elapsed <= Duration::from_secs(5 + 5),
        "Failed after {elapsed:?}: beyond the grace (5s) + 5s"
    );
    let dependent = format!("{ns}-dependent");
    eventually(
        "the dependent blocked by the strict layer",
        Duration::from_secs(10),
        || async {
            let status = layer_status(&client, &dependent).await?;
            Ok(status["blockedBy"]
                .as_array()
                .is_some_and(|b| {
                    b.iter().any(|b| {
                        b["name"] == strict.as_str()
                            && b["message"]
                                .as_str()
                                .unwrap_or("")
                                .contains("ImagePullBackOff")
                    })
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("the dependent layer {dependent}"))?;
    // `strata layers why` follows the dependent's blocker down to the object; `plan` lists
    // the strict layer's not-ready objects with their reasons.
    let strata = |args: &[&str]| {
        let out = std::process::Command::new(bin_dir().join("strata"))
            .args(args)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let why = strata(&["layers", "why", &dependent]);
    let lines: Vec<&str> = why.lines().collect();
    assert!(
        lines.len() >= 4
            && lines[0].starts_with(&format!("{dependent} is ApplyPending for "))
            && lines[1].starts_with(&format!("  waits for {strict} (Unhealthy): "))
            && lines[2].starts_with(&format!("    {strict} is Failed for "))
            && lines[3].starts_with(&format!(
                "      on Deployment {ns}/web: Failed (ImagePullBackOff): web-"
            )),
        "{why}"
    );
    let plan = strata(&["layers", "plan", &strict, "--default-source-namespace", &ns]);
    assert!(
        plan.contains(&format!(
            "not ready  Deployment {ns}/web: Failed (ImagePullBackOff): web-"
        )),
        "{plan}"
    );
    let neighbour = format!("{ns}-neighbour");
    if let Err(e) = wait_state(&client, &neighbour, "Deployed", Duration::from_secs(10)).await {
        let status = layer_status(&client, &neighbour).await?;
        anyhow::bail!("{e}: the neighbour layer: {status}");
    }
    // kstatus' policy has no opinion on pods: the same Deployment keeps its layer Applying.
    assert_eq!(
        state_of(&client, &format!("{ns}-lenient")).await,
        "Applying"
    );
    let lenient = layer_status(&client, &format!("{ns}-lenient")).await?;
    let lenient_entry = lenient["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "api")
        .cloned()
        .unwrap();
    assert_eq!(lenient_entry["status"], "InProgress", "{lenient_entry}");
    let bad = layer_status(&client, &format!("{ns}-badexpr")).await?;
    let stalled = bad["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Stalled")
        .cloned()
        .unwrap_or_default();
    assert!(
        stalled["status"] == "True"
            && stalled["message"].as_str().unwrap_or("").contains(
                "spec.health.exprs[0]: health expression \"status.ready ==\" for example.com/Widget"
            ),
        "a malformed expression stalls the layer, naming it: {bad}"
    );
    cleanup(
        &client,
        &ns,
        &["strict", "lenient", "dependent", "neighbour", "badexpr"],
        controller,
    )
    .await;
    Ok(())
}

/// One replica of `service` (layer-controller, drift-observer) as the chart deploys it with
/// `sharding.shards={a}`: the default Deployment (`shard` None) or shard `a`'s, with the
/// chart's own arguments (its `--layer-selector`, Lease and shard key), narrowed to this
/// test's layers.
fn start_shard(
    service: &str,
    ns: &str,
    rendered: &strata_e2e::release::Rendered,
    shard: Option<&str>,
) -> Result<ServiceProcess> {
    let pod = format!("{service}-{}-0", shard.unwrap_or("default"));
    let command = match shard {
        Some(shard) => rendered.shard_container_command(service, shard, &pod, &bin_dir())?,
        None => rendered.container_command(service, &pod, &bin_dir())?,
    };
    let mut args: Vec<String> = command
        .args
        .iter()
        .filter(|a| !a.starts_with("--admin-address="))
        .map(|a| match a.strip_prefix("--layer-selector=") {
            Some(selector) => format!("--layer-selector={selector},strata-e2e/suite={ns}"),
            None => a.clone(),
        })
        .collect();
    anyhow::ensure!(
        args.iter().any(|a| a.starts_with("--layer-selector=")),
        "the chart gives {pod} no --layer-selector: {args:?}"
    );
    args.extend(["--lease-namespace".into(), ns.into()]);
    if service == "layer-controller" {
        args.extend(["--health-poll".into(), "500ms".into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The Role grants each shard's Lease by name: both shards' identities come from the same
    // `sharding.shards` the Deployments were rendered with.
    let kubeconfig = strata_e2e::services::chart_identity_with(
        cluster().kubeconfig(),
        service,
        &args,
        &["sharding.shards={a}"],
    )?;
    strata_e2e::services::start_service_with(service, &kubeconfig, &args)
}

/// #29 item 4: two shards from the chart's `sharding.shards`, each reconciling exactly its own
/// layers; a dependency across shards stalls its dependent naming both; relabelling a layer
/// hands it to the other shard with no gap in its status and a single apply.
#[tokio::test]
async fn shards_split_the_fleet_and_hand_layers_over_on_relabel() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "layers-shards").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let key = layer_controller::keys::SHARD_LABEL;
    let render = |service: &str| {
        let mut sets = strata_e2e::release::alone(service);
        sets.push("sharding.shards={a}".into());
        strata_e2e::release::Rendered::template(&strata_e2e::chart::helm(), &ns, &ns, &sets)
    };
    let (rendered, rendered_observer) = (render("layer-controller")?, render("drift-observer")?);
    // (layer, shard label, depends on)
    let layers: [(&str, Option<&str>, &[&str]); 4] = [
        ("base", Some("a"), &[]),
        ("app", Some("a"), &["base"]),
        ("mover", None, &[]),
        ("stray", None, &["base"]),
    ];
    for (layer, shard, deps) in layers {
        apply_yaml(
            &client,
            &ns,
            &source_configmap(
                &ns,
                layer,
                &[(&format!("{layer}.yaml"), cm(&ns, &format!("{layer}-obj")))],
            ),
        )
        .await?;
        let shard_label = shard.map(|s| format!(", {key}: {s}")).unwrap_or_default();
        let deps: Vec<String> = deps.iter().map(|d| format!("{ns}-{d}")).collect();
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{layer}, labels: {{strata-e2e/suite: {ns}{shard_label}}}}}
spec:
  version: 1.0.0
  interval: 1h
  source: {{kind: ConfigMap, name: src-{layer}, path: ./}}
  prereqs: {{dependsOn: [{}]}}
",
                deps.join(", ")
            ),
        )
        .await?;
    }
    let default_shard = start_shard("layer-controller", &ns, &rendered, None)?;
    let shard_a = start_shard("layer-controller", &ns, &rendered, Some("a"))?;
    let default_observer = start_shard("drift-observer", &ns, &rendered_observer, None)?;
    let observer_a = start_shard("drift-observer", &ns, &rendered_observer, Some("a"))?;
    let logs = || {
        format!(
            "default shard:\n{}\nshard a:\n{}\ndefault observer:\n{}\nobserver a:\n{}",
            default_shard.logs(),
            shard_a.logs(),
            default_observer.logs(),
            observer_a.logs()
        )
    };
    // The drift-observer of each shard watches exactly its shard's applied objects.
    let observed = async |want_default: f64, want_a: f64| -> Result<()> {
        eventually(
            &format!("observers watching {want_default} and {want_a} objects"),
            Duration::from_secs(30),
            || async {
                let d = default_observer
                    .metric("drift_observer_objects_observed", &[])
                    .await?;
                let a = observer_a
                    .metric("drift_observer_objects_observed", &[])
                    .await?;
                Ok((d == want_default && a == want_a).then_some(()))
            },
        )
        .await
        .map(drop)
    };
    for layer in ["base", "app", "mover"] {
        wait_state(
            &client,
            &format!("{ns}-{layer}"),
            "Deployed",
            Duration::from_secs(60),
        )
        .await
        .with_context(logs)?;
    }

    // base and app in shard a; mover in the default shard; stray applied nothing.
    observed(1.0, 2.0).await.with_context(logs)?;

    // A chain across shards stalls, naming both.
    let stray = wait_state(
        &client,
        &format!("{ns}-stray"),
        "Failed",
        Duration::from_secs(30),
    )
    .await
    .with_context(logs)?;
    let stalled = stray["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .cloned()
        .unwrap_or_default();
    assert_eq!(stalled["status"], "True", "{stray}");
    assert_eq!(stalled["reason"], "CrossShardDependency", "{stray}");
    let message = stalled["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "layer {ns}-base is in shard \"a\" and this layer in shard \"default\""
        )),
        "{message}"
    );
    assert_eq!(stray["blockedBy"][0]["reason"], "OtherShard", "{stray}");

    // Each layer is reported by exactly one shard: the one its label names.
    let state_series = |layer: &str| format!("layer=\"{ns}-{layer}\"");
    for (layer, in_a) in [
        ("base", true),
        ("app", true),
        ("mover", false),
        ("stray", false),
    ] {
        let series = state_series(layer);
        let a = shard_a
            .metric("layer_controller_layer_state", &[&series])
            .await?;
        let d = default_shard
            .metric("layer_controller_layer_state", &[&series])
            .await?;
        assert_eq!(
            (a, d),
            if in_a { (1.0, 0.0) } else { (0.0, 1.0) },
            "{layer}"
        );
    }
    // One applier per object, whichever shard applied it.
    for layer in ["base", "app", "mover"] {
        let object = cluster()
            .kubectl()
            .args([
                "get",
                "configmap",
                &format!("{layer}-obj"),
                "-n",
                &ns,
                "--show-managed-fields",
                "-o",
                "json",
            ])
            .output()?;
        let object: Value = serde_json::from_slice(&object.stdout)?;
        let appliers: Vec<&str> = object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["operation"] == "Apply")
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert_eq!(
            appliers,
            vec!["strata-layer-controller"],
            "{layer}: {object}"
        );
    }

    // `strata layers graph` shows the shards and the crossing edge.
    let graph = std::process::Command::new(bin_dir().join("strata"))
        .args(["layers", "graph", "-o", "json", "--kubeconfig"])
        .arg(cluster().kubeconfig())
        .output()?;
    let graph: Value = serde_json::from_slice(&graph.stdout)
        .with_context(|| String::from_utf8_lossy(&graph.stderr).into_owned())?;
    let node = |name: &str| {
        graph["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == format!("{ns}-{name}"))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(node("base")["shard"], "a", "{graph}");
    assert_eq!(node("stray")["shard"], "default", "{graph}");
    let crossing: Vec<&Value> = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["from"].as_str().is_some_and(|f| f.starts_with(&ns)) && e["crossShard"] == true
        })
        .collect();
    assert_eq!(crossing.len(), 1, "{graph}");
    assert_eq!(crossing[0]["from"], format!("{ns}-stray"));

    // Hand-over: `mover` relabelled into shard a. Its status never leaves Deployed/Ready, the
    // default shard stops reporting it, shard a takes it with exactly one apply of its object.
    let mover = format!("{ns}-mover");
    let mover_series = state_series("mover");
    async fn applied(p: &ServiceProcess, series: &str) -> Result<f64> {
        p.metric("layer_controller_applied_objects_total", &[series])
            .await
    }
    assert_eq!(applied(&default_shard, &mover_series).await?, 1.0);
    assert_eq!(applied(&shard_a, &mover_series).await?, 0.0);
    let api: Api<AddonsLayer> = Api::all(client.clone());
    api.patch(
        &mover,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {key: "a"}}})),
    )
    .await?;
    let watched = eventually("shard a reports mover", Duration::from_secs(30), || async {
        let status = layer_status(&client, &mover).await?;
        let ready = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"].clone());
        anyhow::ensure!(
            status["state"] == "Deployed" && ready == Some(json!("True")),
            "a gap in the hand-over: {status}"
        );
        anyhow::ensure!(
            applied(&default_shard, &mover_series).await? <= 1.0,
            "the default shard applied mover again after it left"
        );
        let series = state_series("mover");
        let a = shard_a
            .metric("layer_controller_layer_state", &[&series])
            .await?;
        let d = default_shard
            .metric("layer_controller_layer_state", &[&series])
            .await?;
        Ok((a == 1.0 && d == 0.0).then_some(()))
    })
    .await;
    watched.with_context(logs)?;
    // One apply by the new shard, none after the move by the old one: counted now, and again
    // after `stray`'s relabelling below (seconds later, two more observed reports), so that a
    // late second apply by either shard shows without a settling sleep.
    let one_apply_of_mover = async || -> Result<()> {
        assert_eq!(applied(&shard_a, &mover_series).await?, 1.0, "{}", logs());
        assert_eq!(
            applied(&default_shard, &mover_series).await?,
            0.0,
            "{}",
            logs()
        );
        Ok(())
    };
    one_apply_of_mover().await?;
    assert_eq!(state_of(&client, &mover).await, "Deployed");
    observed(0.0, 3.0).await.with_context(logs)?;

    // `stray` relabelled into shard a: same shard as its dependency, it deploys.
    api.patch(
        &format!("{ns}-stray"),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {key: "a"}}})),
    )
    .await?;
    wait_state(
        &client,
        &format!("{ns}-stray"),
        "Deployed",
        Duration::from_secs(30),
    )
    .await
    .with_context(logs)?;
    observed(0.0, 4.0).await.with_context(logs)?;
    one_apply_of_mover().await?;

    // Teardown while both shards run.
    for layer in ["stray", "app", "mover", "base"] {
        let _ = api
            .delete(&format!("{ns}-{layer}"), &Default::default())
            .await;
    }
    let _ = eventually("layers torn down", Duration::from_secs(60), || async {
        let left = api
            .list(&kube::api::ListParams::default().labels(&format!("strata-e2e/suite={ns}")))
            .await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await;
    for mut p in [default_shard, shard_a, default_observer, observer_a] {
        let _ = p.terminate_blocking();
    }
    Ok(())
}

/// A layer waiting for an object is woken by the object's change, not by a poll: with
/// `--health-poll 1h`, an applied GitRepository (InProgress until its controller writes
/// status) that the test marks Ready moves the layer to Deployed within seconds. Nothing else
/// wakes it: the layer re-applies hourly, and the GitRepository is no layer's source.
#[tokio::test]
async fn a_layer_waiting_on_an_object_wakes_when_it_changes() -> Result<()> {
    use strata_e2e::flux::{configmap_layer, set_source_artifact, source_yaml_in};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "healthwake").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "1h"])?;
    let inner = source_yaml_in("GitRepository", "inner", &ns);
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "waits", "10m", &[("inner.yaml", inner)]),
    )
    .await?;
    let layer = format!("{ns}-waits");
    let status = wait_state(&client, &layer, "Applying", Duration::from_secs(30)).await?;
    assert_eq!(inventory_names(&status), ["inner"], "{status}");
    assert_eq!(status["inventory"][0]["status"], "InProgress", "{status}");
    let marked = std::time::Instant::now();
    set_source_artifact(
        &client,
        &ns,
        "GitRepository",
        "inner",
        "main@sha1:1",
        "http://127.0.0.1:1/a.tar.gz",
        "sha256:0",
    )
    .await?;
    let status = wait_state(&client, &layer, "Deployed", Duration::from_secs(15)).await?;
    assert_eq!(status["inventory"][0]["status"], "Current", "{status}");
    eprintln!(
        "deployed {:?} after the object became Ready",
        marked.elapsed()
    );
    cleanup(&client, &ns, &["waits"], controller).await;
    Ok(())
}

/// A waiting layer's re-check reads only what may have changed. Its objects already Current
/// are registered with the health wake-ups too: one that no watch event has touched since it
/// was judged is not read again when the layer wakes (the controller's GETs of
/// ServiceAccounts stay flat across the wake-up), while one deleted as the layer waits wakes
/// it at once and is re-applied, long before the hourly poll, and is never counted Current
/// while it is gone.
#[tokio::test]
async fn a_waiting_layer_rereads_only_the_objects_that_changed() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use strata_e2e::flux::{configmap_layer, set_source_artifact, source_yaml_in};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "reread").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "1h"])?;
    let accounts_api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let account_gets = || {
        controller.metric(
            "layer_controller_kubernetes_api_client_request_duration_seconds_count",
            &["method=\"GET\"", "path=\"core/v1/serviceaccounts object\""],
        )
    };
    let waiting_layer = |layer: &'static str, accounts: &[&str]| {
        let inner = source_yaml_in("GitRepository", layer, &ns);
        let accounts: String = accounts
            .iter()
            .map(|a| format!("---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {a}, namespace: {ns}}}\n"))
            .collect();
        configmap_layer(
            &ns,
            layer,
            "10m",
            &[("inner.yaml", inner), ("accounts.yaml", accounts)],
        )
    };
    let ready = |source: &'static str| {
        set_source_artifact(
            &client,
            &ns,
            "GitRepository",
            source,
            "main@sha1:1",
            "http://127.0.0.1:1/a.tar.gz",
            "sha256:0",
        )
    };

    // Three accounts Current at apply, one GitRepository the layer waits on.
    apply_yaml(&client, &ns, &waiting_layer("quiet", &["a", "b", "c"])).await?;
    let layer = format!("{ns}-quiet");
    let status = wait_state(&client, &layer, "Applying", Duration::from_secs(30)).await?;
    assert_eq!(inventory_names(&status).len(), 4, "{status}");
    // The ServiceAccount watch the registration started is live before the layer is woken:
    // its LIST and then its WATCH are GETs of the collection, each counted when its response
    // headers arrive, and the WATCH is only sent once the LIST's end has been handed to the
    // wake-ups (which marks the kind live). The LIST comes in pages of 500 (kube's watcher).
    let all_accounts: Api<ServiceAccount> = Api::all(client.clone());
    let pages = all_accounts
        .list_metadata(&Default::default())
        .await?
        .items
        .len()
        / 500
        + 1;
    eventually(
        "the ServiceAccount watch",
        Duration::from_secs(20),
        || async {
            let collection = controller
                .metric(
                    "layer_controller_kubernetes_api_client_request_duration_seconds_count",
                    &[
                        "method=\"GET\"",
                        "path=\"core/v1/serviceaccounts collection\"",
                    ],
                )
                .await?;
            Ok((collection >= pages as f64 + 1.0).then_some(()))
        },
    )
    .await?;
    let before = account_gets().await?;
    ready("quiet").await?;
    let status = wait_state(&client, &layer, "Deployed", Duration::from_secs(15)).await?;
    assert!(
        status["inventory"]
            .as_array()
            .is_some_and(|i| i.iter().all(|e| e["status"] == "Current")),
        "{status}"
    );
    let reread = account_gets().await? - before;
    assert_eq!(
        reread, 0.0,
        "the wake-up re-read {reread} ServiceAccounts that no event had touched since they were judged Current"
    );

    // An account deleted while the layer waits: re-applied at once, the layer still waiting.
    apply_yaml(&client, &ns, &waiting_layer("edited", &["d"])).await?;
    let layer = format!("{ns}-edited");
    wait_state(&client, &layer, "Applying", Duration::from_secs(30)).await?;
    let original = accounts_api.get("d").await?.uid();
    accounts_api.delete("d", &Default::default()).await?;
    let recreated = eventually(
        "the deleted account re-applied",
        Duration::from_secs(15),
        || async {
            Ok(accounts_api
                .get_opt("d")
                .await?
                .filter(|a| a.uid() != original && a.metadata.deletion_timestamp.is_none()))
        },
    )
    .await?;
    let status = layer_status(&client, &layer).await?;
    assert_eq!(status["state"], "Applying", "{status}");
    ready("edited").await?;
    wait_state(&client, &layer, "Deployed", Duration::from_secs(15)).await?;
    assert_eq!(accounts_api.get("d").await?.uid(), recreated.uid());
    cleanup(&client, &ns, &["quiet", "edited"], controller).await;
    Ok(())
}

/// A layer waiting on a Deployment judges it from the watch's events, not by reading it: with
/// `--health-poll 1h`, a Deployment rolled out by kube-controller-manager and kwok (several
/// status writes on its way to Current) takes its layer to Deployed with no GET of a
/// Deployment by the controller. A first layer has the Deployment watch listed beforehand.
#[tokio::test]
async fn a_waiting_layer_judges_its_deployment_from_the_watch() -> Result<()> {
    use strata_e2e::flux::configmap_layer;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "judged").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "1h"])?;
    let deployment_gets = || {
        controller.metric(
            "layer_controller_kubernetes_api_client_request_duration_seconds_count",
            &["method=\"GET\"", "path=\"apps/v1/deployments object\""],
        )
    };
    let layer_of = |layer: &'static str| {
        configmap_layer(
            &ns,
            layer,
            "10m",
            &[("app.yaml", deployment(&ns, layer, true))],
        )
    };
    apply_yaml(&client, &ns, &layer_of("warm")).await?;
    wait_state(
        &client,
        &format!("{ns}-warm"),
        "Deployed",
        Duration::from_secs(60),
    )
    .await?;

    let before = deployment_gets().await?;
    apply_yaml(&client, &ns, &layer_of("web")).await?;
    let layer = format!("{ns}-web");
    let status = wait_state(&client, &layer, "Deployed", Duration::from_secs(60)).await?;
    assert_eq!(status["inventory"][0]["status"], "Current", "{status}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    let web = deployments.get("web").await?;
    assert_eq!(
        web.status.and_then(|s| s.ready_replicas),
        Some(1),
        "the layer was Deployed before its Deployment rolled out"
    );
    let reads = deployment_gets().await? - before;
    assert_eq!(
        reads, 0.0,
        "the layer read its Deployment {reads} times instead of judging the watch's events"
    );
    cleanup(&client, &ns, &["warm", "web"], controller).await;
    Ok(())
}

/// A new revision sends only the applies that change something. The layer holds a
/// Deployment, a ConfigMap and a ServiceAccount; each revision changes only the Deployment.
/// Once the controller has applied them while watching their kinds (the second revision), a
/// third leaves the ServiceAccount as it stands, but re-applies the ConfigMap that a user edited
/// in between (once the ConfigMap watch has shown the edit): the edit is undone, as every
/// apply undoes it.
#[tokio::test]
async fn a_new_revision_applies_only_the_objects_it_changes() -> Result<()> {
    use strata_e2e::flux::configmap_layer;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "unchanged").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "1h"])?;
    let layer = format!("{ns}-app");
    let by_layer = format!("layer=\"{layer}\"");
    let by_layer = [by_layer.as_str()];
    let applied = || controller.metric("layer_controller_applied_objects_total", &by_layer);
    let unchanged = || controller.metric("layer_controller_unchanged_objects_total", &by_layer);
    let revision_of = |release: &str| {
        let files = [
            (
                "account.yaml",
                format!(
                    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: app, namespace: {ns}}}\n"
                ),
            ),
            ("config.yaml", cm(&ns, "settings")),
            (
                "app.yaml",
                format!(
                    "apiVersion: apps/v1
kind: Deployment
metadata: {{name: app, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}, annotations: {{release: {release}}}}}
    spec: {{containers: [{{name: c, image: example/app:1}}]}}
"
                ),
            ),
        ];
        // Every revision has the gate as a prerequisite (open until r3).
        format!(
            "{}{}",
            configmap_layer(&ns, "app", "10m", &files),
            gated(&ns)
        )
    };
    let gate = |ready: &str| gate_cm(&ns, ready);
    apply_yaml(&client, &ns, &gate("yes")).await?;
    // Until the layer is Deployed at another revision than in `before` (its status then).
    let deployed_after = |release: &'static str, before: serde_json::Value| {
        let (client, layer) = (client.clone(), layer.clone());
        async move {
            eventually(
                &format!("layer {layer} Deployed at {release}"),
                Duration::from_secs(60),
                || async {
                    let status = layer_status(&client, &layer).await?;
                    let new = status["revision"] != before["revision"];
                    Ok((status["state"] == "Deployed" && new).then_some(status))
                },
            )
            .await
        }
    };
    let deploy = |release: &'static str| {
        let (client, layer, yaml) = (client.clone(), layer.clone(), revision_of(release));
        let ns = ns.clone();
        let deployed_after = &deployed_after;
        async move {
            let before = layer_status(&client, &layer).await.unwrap_or_default();
            apply_yaml(&client, &ns, &yaml).await?;
            deployed_after(release, before).await
        }
    };
    deploy("r1").await?;
    // Applied while their kinds are watched (the first wait started the watches).
    deploy("r2").await?;

    // A user edits the ConfigMap before the next revision applies, and the watch must have
    // shown the edit by then. The gate closes, so r3 waits on it (read once, then known only
    // from the ConfigMap watch: `--health-poll 1h` and the kind is live); it opens after the
    // edit. Both changes come down the one ordered stream of ConfigMap events, so the gate's
    // release, and with it r3's apply, comes after the watch showed the edit. (The layer's
    // spec stays as it was: only the source changes, so no attempt can start before the
    // gate is read.)
    apply_yaml(&client, &ns, &gate("no")).await?;
    let (applied_before, unchanged_before) = (applied().await?, unchanged().await?);
    let before = layer_status(&client, &layer).await?;
    apply_yaml(&client, &ns, &revision_of("r3")).await?;
    wait_blocked_by_gate(&client, &layer, "r3 blocked by its gate").await?;
    let configmaps = edit_settings(&client, &ns).await?;
    apply_yaml(&client, &ns, &gate("yes")).await?;
    deployed_after("r3", before).await?;
    let sent = applied().await? - applied_before;
    let left = unchanged().await? - unchanged_before;
    assert_eq!(
        (sent, left),
        (2.0, 1.0),
        "expected the Deployment and the edited ConfigMap applied, the ServiceAccount left as it \
         stands; {sent} applied, {left} left unapplied"
    );
    let settings = configmaps.get("settings").await?;
    assert_eq!(
        settings
            .data
            .unwrap_or_default()
            .get("k")
            .map(String::as_str),
        Some("v"),
        "the edited ConfigMap was not applied again"
    );
    cleanup(&client, &ns, &["app"], controller).await;
    Ok(())
}

/// A Deployed layer's re-apply for `--sync-period` (1 s here) sends only the objects its
/// watches do not know unchanged since this controller applied them: none while nobody edits
/// them, the edited one after an edit (which it heals). Its own interval still sends every
/// object (the account's rights and the admission chain asked again).
#[tokio::test]
async fn a_sync_re_apply_sends_only_what_changed() -> Result<()> {
    use strata_e2e::flux::configmap_layer;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "resync").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_layer_service(
        "layer-controller",
        &ns,
        &["--health-poll", "1h", "--sync-period", "1s"],
    )?;
    let layer = format!("{ns}-app");
    let by_layer = format!("layer=\"{layer}\"");
    let by_layer = [by_layer.as_str()];
    let applied = || controller.metric("layer_controller_applied_objects_total", &by_layer);
    let unchanged = || controller.metric("layer_controller_unchanged_objects_total", &by_layer);
    // Until `unchanged` has counted `syncs` more re-applies that left both ConfigMaps unsent.
    let syncs_leaving_both = |syncs: f64| async move {
        let from = unchanged().await?;
        eventually(
            &format!("{syncs} sync re-applies leaving both ConfigMaps unsent"),
            Duration::from_secs(30),
            || async { Ok((unchanged().await? >= from + 2.0 * syncs).then_some(())) },
        )
        .await
    };
    let gate = |ready: &str| gate_cm(&ns, ready);
    // The layer first waits on a closed gate, which starts the ConfigMap watch: its own
    // ConfigMaps are then applied while their kind is watched, and remembered as applied.
    apply_yaml(&client, &ns, &gate("no")).await?;
    let files = [
        ("a.yaml", cm(&ns, "settings")),
        ("b.yaml", cm(&ns, "extra")),
    ];
    let yaml = format!(
        "{}{}",
        configmap_layer(&ns, "app", "10m", &files),
        gated(&ns)
    );
    apply_yaml(&client, &ns, &yaml).await?;
    wait_blocked_by_gate(&client, &layer, "the layer blocked by its gate").await?;
    apply_yaml(&client, &ns, &gate("yes")).await?;
    wait_state(&client, &layer, "Deployed", Duration::from_secs(60)).await?;

    // Nobody edits them: three syncs send nothing.
    let sent = applied().await?;
    syncs_leaving_both(3.0).await?;
    assert_eq!(
        applied().await? - sent,
        0.0,
        "a sync re-apply sent an object nobody changed since it was applied"
    );

    // A user edits one: the next sync sends it (healing the edit), and only it.
    let configmaps = edit_settings(&client, &ns).await?;
    eventually("the edit healed", Duration::from_secs(30), || async {
        let settings = configmaps.get("settings").await?;
        let k = settings.data.unwrap_or_default().get("k").cloned();
        Ok((k.as_deref() == Some("v")).then_some(()))
    })
    .await?;
    eventually(
        "the healing apply counted",
        Duration::from_secs(10),
        || async { Ok((applied().await? > sent).then_some(())) },
    )
    .await?;
    // Healed and remembered as applied: later syncs leave it unsent again.
    syncs_leaving_both(2.0).await?;
    assert_eq!(
        applied().await? - sent,
        1.0,
        "expected the edited ConfigMap alone sent again"
    );

    // Its own interval (3 s now, a new attempt) sends every object, sync or not.
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    layers
        .patch(
            &layer,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"interval": "3s"}})),
        )
        .await?;
    let before = applied().await?;
    eventually(
        "two interval re-applies sending both ConfigMaps",
        Duration::from_secs(30),
        || async { Ok((applied().await? >= before + 4.0).then_some(())) },
    )
    .await?;
    cleanup(&client, &ns, &["app"], controller).await;
    Ok(())
}

/// The reasons of the Events about layer `name`, oldest first.
async fn layer_event_reasons(client: &Client, name: &str) -> Result<Vec<String>> {
    let events = strata_e2e::flux::layer_events(client, name).await?;
    Ok(events.into_iter().filter_map(|e| e.reason).collect())
}

/// A new layer's first state waits for its first attempt to settle (`--first-report-grace`,
/// long here so that the window is certain). One whose Deployment rolls out meanwhile reports
/// `Deployed` alone: no `Applying` status write or Event before it. One that does not settle
/// has no state for the grace, yet what it applied is its own all the same: another layer
/// wanting one of its objects is refused, naming it, and deleting it deletes its objects,
/// also when the controller that held its report restarted in between.
#[tokio::test]
async fn a_new_layer_reports_its_first_state_when_its_first_attempt_settles() -> Result<()> {
    use strata_e2e::flux::configmap_layer;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "first-report").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &["--first-report-grace", "10m"])?;

    let quick = format!("{ns}-quick");
    let files = [("app.yaml", deployment(&ns, "quick", true))];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "quick", "5m", &files)).await?;
    wait_state(&client, &quick, "Deployed", Duration::from_secs(60))
        .await
        .with_context(|| controller.logs())?;
    let reasons = eventually("the Deployed event", Duration::from_secs(20), || async {
        let reasons = layer_event_reasons(&client, &quick).await?;
        Ok(reasons.iter().any(|r| r == "Deployed").then_some(reasons))
    })
    .await?;
    assert_eq!(
        reasons,
        ["Deployed"],
        "a layer deployed within the grace reported another state first"
    );

    // Its pods never become ready: the layer does not settle.
    let held = format!("{ns}-held");
    let files = [
        ("app.yaml", deployment(&ns, "held", false)),
        ("shared.yaml", cm(&ns, "shared")),
    ];
    // With variables: what such a layer wants is read from its inventory, not written yet.
    let with_variables = format!(
        "{}  postBuild: {{substitute: {{release: one}}}}\n",
        configmap_layer(&ns, "held", "5m", &files)
    );
    apply_yaml(&client, &ns, &with_variables).await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    // Whether both objects of the held layer are `present`, or both absent.
    let held_objects = |present: bool| {
        let (deployments, client, ns) = (&deployments, &client, &ns);
        async move {
            let deployment = deployments.get_opt("held").await?.is_some();
            let map = configmap(client, ns, "shared").await.is_some();
            Ok((deployment == present && map == present).then_some(()))
        }
    };
    eventually(
        "the held layer's objects applied",
        Duration::from_secs(30),
        || held_objects(true),
    )
    .await
    .with_context(|| controller.logs())?;

    let rival = format!("{ns}-rival");
    let files = [("shared.yaml", cm(&ns, "shared"))];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "rival", "5m", &files)).await?;
    let status = wait_state(&client, &rival, "Failed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let message = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("is also in layer {held}")),
        "the rival was not refused the object the held layer applied: {status}"
    );
    assert_eq!(
        state_of(&client, &held).await,
        "",
        "the unsettled layer reported a state within the grace"
    );
    assert_eq!(
        layer_event_reasons(&client, &held).await?,
        Vec::<String>::new()
    );

    // Deleted before its first report: its objects go with it.
    cleanup_layer(&client, &rival).await?;
    cleanup_layer(&client, &held).await?;
    eventually(
        "the held layer's objects deleted",
        Duration::from_secs(30),
        || held_objects(false),
    )
    .await
    .with_context(|| controller.logs())?;

    // Deleted while no controller runs, after a restart lost the held report, and with a
    // dependent to wait for first (whose teardown writes a state, with no inventory): the
    // objects its source renders go, those still labelled with it.
    let lost = format!("{ns}-lost");
    let child = format!("{ns}-child");
    let files = [("app.yaml", deployment(&ns, "lost", false))];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "lost", "5m", &files)).await?;
    let files = [("child.yaml", cm(&ns, "child"))];
    let child_yaml = format!(
        "{}  prereqs: {{dependsOn: [{lost}]}}\n",
        configmap_layer(&ns, "child", "5m", &files)
    );
    apply_yaml(&client, &ns, &child_yaml).await?;
    eventually(
        "the lost layer's Deployment",
        Duration::from_secs(30),
        || async { Ok(deployments.get_opt("lost").await?) },
    )
    .await
    .with_context(|| controller.logs())?;
    wait_state(&client, &child, "ApplyPending", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let mut controller = controller;
    controller
        .terminate_blocking()
        .context("the layer-controller did not stop")?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    layers.delete(&lost, &Default::default()).await?;
    let copy = layers.get(&lost).await?;
    assert_eq!(
        copy.status.and_then(|s| s.state),
        None,
        "the lost layer reported a state"
    );
    let controller = start_controller(&ns, &["--first-report-grace", "10m"])?;
    wait_state(&client, &lost, "Deleting", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    cleanup_layer(&client, &child).await?;
    eventually(
        "the lost layer torn down",
        Duration::from_secs(40),
        || async {
            let done = deployments.get_opt("lost").await?.is_none()
                && layers.get_opt(&lost).await?.is_none();
            Ok(done.then_some(()))
        },
    )
    .await
    .with_context(|| controller.logs())?;
    cleanup(&client, &ns, &["quick"], controller).await;
    Ok(())
}

/// Deletes layer `name` and waits until it is gone.
async fn cleanup_layer(client: &Client, name: &str) -> Result<()> {
    let api: Api<AddonsLayer> = Api::all(client.clone());
    api.delete(name, &Default::default()).await?;
    eventually(
        &format!("layer {name} deleted"),
        Duration::from_secs(30),
        || async { Ok(api.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
}

/// A prerequisite object judged by a CEL expression (`readyExpr`, Flux's semantics: `dep` the
/// object, `self` the layer) instead of kstatus: a ConfigMap — Current as soon as it exists —
/// holds the layer back until the expression holds, the wait naming the expression; a
/// `readyExpr` that does not compile fails the layer naming the field, nothing applied.
#[tokio::test]
async fn an_object_prerequisite_is_judged_by_its_ready_expression() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "readyexpr").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    let gate = |ready: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: gate, namespace: {ns}}}\ndata: {{ready: \"{ready}\", version: 1.0.0}}\n"
        )
    };
    apply_yaml(&client, &ns, &gate("no")).await?;
    let layer = |name: &str, expr: &str| {
        format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 10m
  source: {{kind: ConfigMap, name: src-{name}, namespace: {ns}, path: ./}}
  prereqs:
    objects:
    - {{apiVersion: v1, kind: ConfigMap, name: gate, namespace: {ns}, readyExpr: {expr:?}}}
"
        )
    };
    for name in ["gated", "broken"] {
        apply_yaml(
            &client,
            &ns,
            &strata_e2e::flux::source_configmap(
                &ns,
                name,
                &[("cm.yaml", cm(&ns, &format!("{name}-obj")))],
            ),
        )
        .await?;
    }
    apply_yaml(
        &client,
        &ns,
        &layer(
            "gated",
            "dep.data.ready == 'yes' && dep.data.version == self.spec.version",
        ),
    )
    .await?;
    apply_yaml(&client, &ns, &layer("broken", "dep.data.ready ==")).await?;
    let gated = format!("{ns}-gated");
    let waiting = eventually(
        "the layer waits on the expression",
        Duration::from_secs(30),
        || async {
            let status = layer_status(&client, &gated).await?;
            let text = status.to_string();
            Ok(
                (text.contains("is false") && text.contains("dep.data.ready == 'yes'"))
                    .then_some(status),
            )
        },
    )
    .await?;
    assert_ne!(waiting["state"], "Deployed", "{waiting}");
    assert!(
        configmap(&client, &ns, "gated-obj").await.is_none(),
        "applied while waiting"
    );
    apply_yaml(&client, &ns, &gate("yes")).await?;
    wait_state(&client, &gated, "Deployed", Duration::from_secs(30)).await?;
    assert!(configmap(&client, &ns, "gated-obj").await.is_some());

    let broken = format!("{ns}-broken");
    let failed = wait_state(&client, &broken, "Failed", Duration::from_secs(30)).await?;
    let text = failed.to_string();
    assert!(
        text.contains("spec.prereqs.objects[0].readyExpr") && text.contains("does not compile"),
        "{failed}"
    );
    assert!(
        configmap(&client, &ns, "broken-obj").await.is_none(),
        "the broken layer applied"
    );
    cleanup(&client, &ns, &["gated", "broken"], controller).await;
    Ok(())
}

/// A layer blocked on a prerequisite object is woken by the object's change, not by polling
/// it: with `--health-poll 1h` (the safety net), once the object's kind is watched the layer
/// reads it no more while it waits (the audit log shows no GET of it for longer than the old
/// 5 s poll), and the object's change releases the layer at once.
#[tokio::test]
async fn a_layer_blocked_on_an_object_is_woken_by_its_watch() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "prereqwatch").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let Some(audit) = cluster().audit_log() else {
        eprintln!("no audit log (not the local plane): skipped");
        return Ok(());
    };
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "1h"])?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: gate, namespace: {ns}}}\ndata: {{ready: \"no\"}}\n"
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &strata_e2e::flux::source_configmap(&ns, "held", &[("cm.yaml", cm(&ns, "held-obj"))]),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-held, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 1h
  source: {{kind: ConfigMap, name: src-held, namespace: {ns}, path: ./}}
  prereqs:
    objects:
    - {{apiVersion: v1, kind: ConfigMap, name: gate, namespace: {ns}, readyExpr: \"dep.data.ready == 'yes'\"}}
"
        ),
    )
    .await?;
    let user = format!("system:serviceaccount:{ns}:layer-controller");
    let reads = || -> Result<usize> {
        Ok(std::fs::read_to_string(&audit)?
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["user"]["username"] == user.as_str()
                    && e["verb"] == "get"
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && e["objectRef"]["name"] == "gate"
            })
            .count())
    };
    // The first look reads it and starts the kind's watch; the next (the watch not listed
    // yet at the first) registers it as watched.
    eventually(
        "the layer read the gate twice",
        Duration::from_secs(30),
        || async { Ok((reads()? >= 2).then_some(())) },
    )
    .await?;
    let held = format!("{ns}-held");
    assert_ne!(state_of(&client, &held).await, "Deployed");
    // Absence is the claim, so this is an observation window, not a wait for something to
    // happen: longer than the 5 s poll it replaced, so a poll shows as a read within it. A
    // slow machine only lengthens the window; it cannot make the check fail.
    let before = reads()?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        reads()?,
        before,
        "the waiting layer polled its prerequisite"
    );
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: gate, namespace: {ns}}}\ndata: {{ready: \"yes\"}}\n"
        ),
    )
    .await?;
    // Nothing polls within the hour: only the watch can release it.
    wait_state(&client, &held, "Deployed", Duration::from_secs(20)).await?;
    cleanup(&client, &ns, &["held"], controller).await;
    Ok(())
}

/// A new revision replaces the attempt in flight: while a layer waits (up to its 10-minute
/// timeout) for a Deployment that cannot become ready, its source changes to one that can; the
/// new revision is applied and Deployed at once, and the abandoned attempt never reports after
/// it (its wait does not run out and fail the layer later).
#[tokio::test]
async fn a_new_revision_replaces_the_attempt_in_flight() -> Result<()> {
    use strata_e2e::flux::{configmap_layer, source_configmap};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "inflight").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(
            &ns,
            "web",
            "10m",
            &[("web.yaml", deployment(&ns, "web", false))],
        ),
    )
    .await?;
    let layer = format!("{ns}-web");
    let waiting = eventually(
        "the first revision waits on its Deployment",
        Duration::from_secs(30),
        || async {
            let status = layer_status(&client, &layer).await?;
            Ok(
                (status["state"] == "Applying" && status["inventory"][0]["status"] == "InProgress")
                    .then_some(status),
            )
        },
    )
    .await?;
    let first = waiting["lastAttemptedRevision"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    apply_yaml(
        &client,
        &ns,
        &source_configmap(&ns, "web", &[("web.yaml", deployment(&ns, "web", true))]),
    )
    .await?;
    let deployed = wait_state(&client, &layer, "Deployed", Duration::from_secs(60)).await?;
    let second = deployed["revision"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !second.is_empty() && second != first,
        "{first} then {deployed}"
    );
    // The abandoned attempt's wait never reports: the layer stays Deployed at the new
    // revision through several of its health re-checks (500 ms). Absence is the claim: a
    // 5 s observation window (ten re-checks), which a slow machine can only lengthen.
    for _ in 0..10 {
        let status = layer_status(&client, &layer).await?;
        assert_eq!(status["state"], "Deployed", "{status}");
        assert_eq!(status["revision"], second.as_str(), "{status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cleanup(&client, &ns, &["web"], controller).await;
    Ok(())
}
