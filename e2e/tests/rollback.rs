//! `spec.rollback` on the local control plane: a new revision whose Deployment cannot start,
//! and one whose apply the API server refuses, each end with the layer back on the revision
//! it last deployed — its objects as they were, what the failed revision added pruned, the
//! failure and the restore in the history and in a Warning Event — and it stays there (a
//! reconcile request re-applies the kept revision, not the failed one) until the source
//! changes. A controller killed while rolling back hands over to the next one, which finishes
//! the rollback without applying the failed revision again. `strata layers history` and
//! `strata layers rollback` by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use strata_e2e::flux::{
    deployment_yaml_ready, install_layer_crds, layer_status, source_configmap, wait_layer,
};
use strata_e2e::services::{ServiceProcess, bin_dir, delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

fn start_controller(ns: &str) -> Result<ServiceProcess> {
    start_layer_service(
        "layer-controller",
        ns,
        &["--orphan-grace", "2s", "--health-poll", "500ms"],
    )
}

/// The layer `<ns>-apps` reading ConfigMap `src-apps`, rolling back on failure.
fn layer_yaml(ns: &str) -> String {
    layer_with_timeout(ns, "8s")
}

fn layer_with_timeout(ns: &str, timeout: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-apps, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: {timeout}
  source: {{kind: ConfigMap, name: src-apps, path: ./}}
  rollback: {{enabled: true}}
"
    )
}

fn settings(ns: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{level: {value}}}\n"
    )
}

fn extra(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: extra, namespace: {ns}}}\ndata: {{k: v}}\n"
    )
}

fn deployment(ns: &str, name: &str, image: &str, ready: bool) -> String {
    deployment_yaml_ready(ns, name, image, ready)
}

async fn publish(client: &Client, ns: &str, files: &[(&str, String)]) -> Result<()> {
    apply_yaml(client, ns, &source_configmap(ns, "apps", files)).await?;
    Ok(())
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

async fn level(client: &Client, ns: &str) -> Result<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    Ok(maps
        .get("settings")
        .await?
        .data
        .unwrap_or_default()
        .get("level")
        .cloned()
        .unwrap_or_default())
}

async fn image(client: &Client, ns: &str, name: &str) -> Result<String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deployments.get(name).await?;
    Ok(d.spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default())
}

/// Warning Events about the layer: (reason, note).
async fn warnings(client: &Client, layer: &str) -> Result<Vec<(String, String)>> {
    let events = strata_e2e::flux::layer_events(client, layer).await?;
    Ok(events
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

fn outcomes(status: &Value) -> Vec<(String, String)> {
    status["history"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|h| {
            (
                text(&h["revision"]),
                h["outcome"].as_str().unwrap_or("Deployed").to_string(),
            )
        })
        .collect()
}

fn condition(status: &Value, type_: &str) -> String {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| text(&c["status"]))
        .unwrap_or_default()
}

fn strata(args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin_dir().join("strata"))
        .args(args)
        .env("KUBECONFIG", cluster().kubeconfig())
        .output()
        .expect("running strata")
}

/// Deploys the first revision (settings `one`, web `app:1`) and returns it.
async fn first_revision(client: &Client, ns: &str, layer: &str) -> Result<String> {
    publish(
        client,
        ns,
        &[
            ("settings.yaml", settings(ns, "one")),
            ("web.yaml", deployment(ns, "web", "example/app:1", true)),
        ],
    )
    .await?;
    apply_yaml(client, ns, &layer_yaml(ns)).await?;
    let deployed = wait_layer(client, layer, "the first revision Deployed", |s| {
        s["state"] == "Deployed"
    })
    .await?;
    let kept = &deployed["keptRevisions"];
    assert_eq!(kept[0]["revision"], deployed["revision"], "{deployed}");
    assert!(
        kept[0]["bytes"].as_u64().unwrap_or_default() > 0,
        "{deployed}"
    );
    Ok(text(&deployed["revision"]))
}

#[tokio::test]
async fn a_revision_that_cannot_start_is_rolled_back_and_not_tried_again() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "rollback").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns)?;
    let layer = format!("{ns}-apps");
    let good = first_revision(&client, &ns, &layer).await?;
    // The kept revision is in a Secret next to the controller, owned by the layer.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let store = secrets.get(&format!("strata-revisions.{layer}")).await?;
    assert_eq!(
        store.owner_references()[0].name,
        layer,
        "{:?}",
        store.metadata
    );
    // A dependent layer, deployed on top of it.
    let dependent = format!("{ns}-top");
    apply_yaml(
        &client,
        &ns,
        &source_configmap(
            &ns,
            "top",
            &[(
                "top.yaml",
                settings(&ns, "two").replace("name: settings", "name: top"),
            )],
        ),
    )
    .await?;
    let top_yaml = layer_yaml(&ns)
        .replace(&layer, &dependent)
        .replace("src-apps", "src-top")
        .replace(
            "  rollback: {enabled: true}\n",
            &format!("  prereqs: {{dependsOn: [{layer}]}}\n"),
        );
    apply_yaml(&client, &ns, &top_yaml).await?;
    let top = wait_layer(&client, &dependent, "the dependent Deployed", |s| {
        s["state"] == "Deployed"
    })
    .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let top_version = maps.get("top").await?.metadata.resource_version;

    // The second revision changes the settings, adds an object and cannot start.
    publish(
        &client,
        &ns,
        &[
            ("settings.yaml", settings(&ns, "two")),
            ("extra.yaml", extra(&ns)),
            ("web.yaml", deployment(&ns, "web", "example/app:2", false)),
        ],
    )
    .await?;
    let rolled = wait_layer(&client, &layer, "rolled back", |s| {
        s["state"] == "RolledBack"
    })
    .await?;
    let bad = text(&rolled["lastAttemptedRevision"]);
    assert_ne!(bad, good, "{rolled}");
    assert_eq!(text(&rolled["revision"]), good, "{rolled}");
    assert_eq!(
        rolled["rolledBack"]["failedRevision"],
        bad.as_str(),
        "{rolled}"
    );
    assert_eq!(
        rolled["rolledBack"]["restoredRevision"],
        good.as_str(),
        "{rolled}"
    );
    assert_eq!(
        rolled["rolledBack"]["reason"], "HealthCheckFailed",
        "{rolled}"
    );
    assert_eq!(
        outcomes(&rolled),
        vec![
            (good.clone(), "RolledBack".into()),
            (bad.clone(), "Failed".into()),
            (good.clone(), "Deployed".into()),
        ],
        "{rolled}"
    );
    assert_eq!(condition(&rolled, "RolledBack"), "True", "{rolled}");
    assert_eq!(condition(&rolled, "Ready"), "False", "{rolled}");
    assert_eq!(condition(&rolled, "Stalled"), "True", "{rolled}");
    // Its objects as they were; what the failed revision added is gone.
    assert_eq!(level(&client, &ns).await?, "one");
    assert_eq!(image(&client, &ns, "web").await?, "example/app:1");
    eventually("extra pruned", Duration::from_secs(30), || async {
        Ok(maps.get_opt("extra").await?.is_none().then_some(()))
    })
    .await?;
    // The dependent keeps what it had: not re-applied, its revision unchanged, waiting for
    // its dependency to be Deployed again.
    let held = layer_status(&client, &dependent).await?;
    assert_eq!(held["revision"], top["revision"], "{held}");
    assert_eq!(
        maps.get("top").await?.metadata.resource_version,
        top_version
    );
    assert!(
        held["blockedBy"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["name"] == layer.as_str()),
        "{held}"
    );
    let events = warnings(&client, &layer).await?;
    let event = events
        .iter()
        .find(|(reason, _)| reason == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event: {events:?}"));
    for part in [&bad, &good, &"HealthCheckFailed".to_string()] {
        assert!(event.1.contains(part.as_str()), "{part} not in {event:?}");
    }

    // A reconcile request (a drift heal) re-applies the kept revision, not the failed one.
    let api: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "hand/edit:1"}]}}}})),
        )
        .await?;
    let at = jiff::Timestamp::now().to_string();
    api.patch(
        &layer,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"strata.dev/reconcile-requested-at": at}}}),
        ),
    )
    .await?;
    let healed = wait_layer(&client, &layer, "the request handled", |s| {
        s["lastHandledReconcileAt"] == at.as_str() && s["state"] == "RolledBack"
    })
    .await?;
    assert_eq!(
        image(&client, &ns, "web").await?,
        "example/app:1",
        "{healed}"
    );
    assert_eq!(level(&client, &ns).await?, "one");
    assert!(
        maps.get_opt("extra").await?.is_none(),
        "the failed revision came back"
    );
    assert_eq!(outcomes(&healed).len(), 3, "{healed}");

    // `strata layers history` lists the outcomes, the kept revision marked.
    let history = strata(&["layers", "history", &layer]);
    let out = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&history.stderr)
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with(&good) && lines[1].contains("RolledBack"),
        "{out}"
    );
    assert!(
        lines[2].starts_with(&bad) && lines[2].contains("HealthCheckFailed"),
        "{out}"
    );
    assert!(
        lines[3].contains("Deployed") && lines[3].contains("kept ("),
        "{out}"
    );

    // A new revision that works is applied at once, and the rollback is over.
    publish(
        &client,
        &ns,
        &[
            ("settings.yaml", settings(&ns, "three")),
            ("web.yaml", deployment(&ns, "web", "example/app:3", true)),
        ],
    )
    .await?;
    let fixed = wait_layer(&client, &layer, "the fix Deployed", |s| {
        s["state"] == "Deployed" && s["revision"] != good.as_str()
    })
    .await?;
    assert!(fixed.get("rolledBack").is_none(), "{fixed}");
    assert_eq!(level(&client, &ns).await?, "three");

    // By hand: back to the first revision, which is still kept.
    let by_hand = strata(&[
        "layers",
        "rollback",
        &layer,
        "--to",
        &good,
        "--wait",
        "--timeout",
        "60s",
    ]);
    let said = String::from_utf8_lossy(&by_hand.stdout);
    assert!(
        by_hand.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&by_hand.stderr)
    );
    assert!(said.contains("RolledBack"), "{said}");
    let back = layer_status(&client, &layer).await?;
    assert_eq!(back["rolledBack"]["reason"], "RollbackRequested", "{back}");
    assert_eq!(text(&back["revision"]), good, "{back}");
    assert_eq!(level(&client, &ns).await?, "one");
    let missing = strata(&["layers", "rollback", &layer, "--to", "no-such-revision"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("revision \"no-such-revision\" is not kept"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    delete_layers_then_stop(&[&dependent, &layer], controller);
    Ok(())
}

#[tokio::test]
async fn a_refused_apply_is_rolled_back() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "rollback-refused").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns)?;
    let layer = format!("{ns}-apps");
    let good = first_revision(&client, &ns, &layer).await?;
    // ConfigMaps apply before Deployments: the settings change lands, then the API server
    // refuses the Deployment (replicas cannot be negative).
    let refused =
        deployment(&ns, "web", "example/app:2", true).replace("replicas: 1", "replicas: -1");
    publish(
        &client,
        &ns,
        &[
            ("settings.yaml", settings(&ns, "two")),
            ("web.yaml", refused),
        ],
    )
    .await?;
    let rolled = wait_layer(&client, &layer, "rolled back", |s| {
        s["state"] == "RolledBack"
    })
    .await?;
    assert_eq!(rolled["rolledBack"]["reason"], "ApplyFailed", "{rolled}");
    assert!(
        text(&rolled["rolledBack"]["message"]).contains("web"),
        "{rolled}"
    );
    assert_eq!(text(&rolled["revision"]), good, "{rolled}");
    assert_eq!(level(&client, &ns).await?, "one");
    assert_eq!(image(&client, &ns, "web").await?, "example/app:1");

    // Nothing to roll back to: a new layer whose first revision fails stays Failed, saying so.
    let first = format!("{ns}-first");
    let yaml = layer_yaml(&ns)
        .replace(&layer, &first)
        .replace("src-apps", "src-first")
        .replace("timeout: 8s", "timeout: 3s");
    apply_yaml(
        &client,
        &ns,
        &source_configmap(
            &ns,
            "first",
            &[(
                "web.yaml",
                deployment(&ns, "lonely", "example/app:1", false),
            )],
        ),
    )
    .await?;
    apply_yaml(&client, &ns, &yaml).await?;
    let failed = wait_layer(&client, &first, "failed", |s| s["state"] == "Failed").await?;
    let ready = failed["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "RollbackUnavailable", "{failed}");
    assert!(
        text(&ready["message"])
            .starts_with("spec.rollback: no deployed revision is kept to roll back to"),
        "{failed}"
    );
    delete_layers_then_stop(&[&layer, &first], controller);
    Ok(())
}

/// Records the names of ConfigMaps created in `ns` from now on (from a watch).
fn created_configmaps(
    client: &Client,
    ns: &str,
) -> (Arc<Mutex<BTreeSet<String>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(maps, watcher::Config::default()));
        // Names that exist: one applied that was not is a creation.
        let mut known = BTreeSet::new();
        while let Some(Ok(event)) = stream.next().await {
            match event {
                watcher::Event::InitApply(map) => {
                    known.insert(map.name_any());
                }
                watcher::Event::Apply(map) if known.insert(map.name_any()) => {
                    into.lock().unwrap().insert(map.name_any());
                }
                watcher::Event::Delete(map) => {
                    known.remove(&map.name_any());
                }
                _ => {}
            }
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_controller_killed_while_rolling_back_ends_rolled_back() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "rollback-restart").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let mut controller = start_controller(&ns)?;
    let layer = format!("{ns}-apps");
    publish(
        &client,
        &ns,
        &[
            ("settings.yaml", settings(&ns, "one")),
            ("gate.yaml", deployment(&ns, "gate", "example/gate:1", true)),
            ("web.yaml", deployment(&ns, "web", "example/app:1", true)),
        ],
    )
    .await?;
    // Long enough for the kill and the restart to fit in the rollback's own health wait.
    apply_yaml(&client, &ns, &layer_with_timeout(&ns, "20s")).await?;
    let deployed = wait_layer(&client, &layer, "Deployed", |s| s["state"] == "Deployed").await?;
    let good = text(&deployed["revision"]);
    publish(
        &client,
        &ns,
        &[
            ("settings.yaml", settings(&ns, "two")),
            ("extra.yaml", extra(&ns)),
            ("gate.yaml", deployment(&ns, "gate", "example/gate:1", true)),
            ("web.yaml", deployment(&ns, "web", "example/app:2", false)),
        ],
    )
    .await?;
    wait_layer(&client, &layer, "the second revision applying", |s| {
        s["state"] == "Applying" && s["lastAttemptedRevision"] != good.as_str()
    })
    .await?;
    // Someone else holds `gate` unready (a field the layer does not own): the kept revision
    // cannot become healthy until they let go, so the rollback waits in RollingBack.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let hold = |value: Value| json!({"spec": {"template": {"metadata": {"labels": {"strata.dev/fake-ready": value}}}}});
    deployments
        .patch(
            "gate",
            &PatchParams::default(),
            &Patch::Merge(hold(json!("false"))),
        )
        .await?;
    wait_layer(&client, &layer, "rolling back", |s| {
        s["state"] == "RollingBack"
    })
    .await?;
    controller.signal("KILL");
    controller.wait_exit_blocking(Duration::from_secs(10));
    let (created, watch) = created_configmaps(&client, &ns);
    let controller = start_controller(&ns)?;
    // The new controller carries on the rollback; the hand edit of `gate` is undone.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "gate",
            &PatchParams::default(),
            &Patch::Merge(hold(Value::Null)),
        )
        .await?;
    let rolled = wait_layer(&client, &layer, "rolled back", |s| {
        s["state"] == "RolledBack"
    })
    .await?;
    watch.abort();
    assert_eq!(text(&rolled["revision"]), good, "{rolled}");
    let bad = text(&rolled["lastAttemptedRevision"]);
    assert_eq!(
        outcomes(&rolled),
        vec![
            (good.clone(), "RolledBack".into()),
            (bad, "Failed".into()),
            (good.clone(), "Deployed".into()),
        ],
        "one failure and one restore, whoever finished it: {rolled}"
    );
    assert_eq!(level(&client, &ns).await?, "one");
    assert!(maps.get_opt("extra").await?.is_none(), "{rolled}");
    let created = created.lock().unwrap().clone();
    assert!(
        !created.contains("extra"),
        "the restarted controller applied the failed revision again: {created:?}"
    );
    delete_layers_then_stop(&[&layer], controller);
    Ok(())
}
