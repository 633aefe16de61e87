//! drift-observer on the local control plane, next to a real layer-controller: two layers
//! from ConfigMap sources, one healing (default fields) and one only warning (a Krake observer
//! schema plus a merge-key selector). Checked: `kubectl set image` reported with the exact
//! path, both values and the manager, then healed (Heal) or left alone (Warn); a field outside
//! the schema ignored; defaulted fields never drift; an injected sidecar is not drift; a
//! deleted object is re-created; a fighting writer gives `FightDetected` naming it while heal
//! requests back off; a Secret's values never shown; an observer restart keeps its drift.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use layer_controller::crd::AddonsLayer;
use serde_json::{Value, json};
use strata_e2e::flux::{install_layer_crds, layer_status, source_configmap};
use strata_e2e::services::{ServiceProcess, bin_dir, delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

const SECRET_VALUE: &str = "hunter2-very-secret";
const FORGED_VALUE: &str = "forged-by-hand-value";

fn start_layer_controller(ns: &str) -> Result<ServiceProcess> {
    // Only heal requests re-apply within the test (the layers' interval is 1h too).
    start_layer_service(
        "layer-controller",
        ns,
        &["--health-poll", "500ms", "--sync-period", "1h"],
    )
}

fn start_observer(ns: &str) -> Result<ServiceProcess> {
    start_layer_service("drift-observer", ns, &[])
}

fn deployment(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: 1
  revisionHistoryLimit: 5
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: app, image: \"nginx:1.25\"}}]}}
"
    )
}

fn secret(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\nstringData: {{password: {SECRET_VALUE}}}\n"
    )
}

fn layer(ns: &str, name: &str, drift: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  # Long: only heal requests re-apply within the test, never the periodic interval.
  interval: 1h
  timeout: 60s
  source: {{kind: ConfigMap, name: src-{name}, namespace: {ns}, path: ./}}
{drift}"
    )
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until the observer has written its `Drifted` condition with `want` status.
async fn wait_drifted(client: &Client, layer: &str, want: &str, within: Duration) -> Result<Value> {
    eventually(&format!("{layer} Drifted={want}"), within, || async {
        let status = layer_status(client, layer).await?;
        Ok(condition(&status, "Drifted")
            .is_some_and(|c| c["status"] == want)
            .then_some(status))
    })
    .await
}

fn drift_entries(status: &Value) -> Vec<Value> {
    status["drift"].as_array().cloned().unwrap_or_default()
}

fn image_of(deployment: &Deployment) -> String {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == "app"))
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn kubectl(args: &[&str]) -> Result<()> {
    let out = cluster().kubectl().args(args).output()?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Warning events the observer published on an object.
async fn drift_events(client: &Client, ns: &str, object: &str) -> Result<Vec<String>> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("DriftDetected")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
        })
        .filter_map(|e| e.note)
        .collect())
}

#[tokio::test]
async fn drift_is_reported_healed_and_fights_back_off() -> Result<()> {
    let c = cluster();
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "drift").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let heal = format!("{ns}-heal");
    let warn = format!("{ns}-warn");

    // Heal layer: default fields (everything the manifests declare).
    let heal_files = vec![
        ("web.yaml", deployment(&ns, "web-h")),
        // Declared with stringData, which the API server folds into data.
        ("secret.yaml", secret(&ns, "creds-h")),
        (
            "settings.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings-h, namespace: {ns}}}\ndata: {{a: \"1\"}}\n"
            ),
        ),
    ];
    // Warn layer: a Krake schema observing replicas and one Secret key, and a merge-key
    // selector for the app container's image.
    let warn_files = vec![
        ("web.yaml", deployment(&ns, "web-w")),
        ("secret.yaml", secret(&ns, "creds-w")),
        // Named by no schema: every field its manifest declares is observed.
        ("secret2.yaml", secret(&ns, "creds-w2")),
    ];
    let warn_drift = format!(
        "  drift:
    mode: Warn
    observerSchema:
    - apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: web-w, namespace: {ns}}}
      spec: {{replicas: null}}
    - apiVersion: v1
      kind: Secret
      metadata: {{name: creds-w}}
      data: {{password: null}}
    observe:
    - kind: Deployment
      name: web-w
      paths: [\"spec.template.spec.containers[name=app].image\"]
"
    );
    apply_yaml(&client, &ns, &source_configmap(&ns, "heal", &heal_files)).await?;
    apply_yaml(&client, &ns, &source_configmap(&ns, "warn", &warn_files)).await?;
    let controller = start_layer_controller(&ns)?;
    let mut observer = start_observer(&ns)?;
    apply_yaml(&client, &ns, &layer(&ns, "heal", "")).await?;
    apply_yaml(&client, &ns, &layer(&ns, "warn", &warn_drift)).await?;

    // Deployed, and after the controllers defaulted and filled everything in, no drift:
    // defaulted fields (strategy, progressDeadlineSeconds, terminationGracePeriodSeconds,
    // status...) are never drift.
    for name in [&heal, &warn] {
        eventually(
            &format!("{name} Deployed"),
            Duration::from_secs(60),
            || async {
                Ok((layer_status(&client, name).await?["state"] == "Deployed").then_some(()))
            },
        )
        .await?;
        let s = wait_drifted(&client, name, "False", Duration::from_secs(30)).await?;
        ensure!(drift_entries(&s).is_empty(), "{name}: {s}");
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    eventually("web-h available", Duration::from_secs(60), || async {
        let d = deployments.get("web-h").await?;
        Ok((d.status.and_then(|s| s.available_replicas) == Some(1)).then_some(()))
    })
    .await?;
    ensure!(
        observer.metric("drift_observer_checks_total", &[]).await? >= 4.0,
        "the observer saw the objects"
    );
    let s = layer_status(&client, &heal).await?;
    ensure!(
        condition(&s, "Drifted").unwrap()["status"] == "False",
        "{s}"
    );

    // --- Warn: `kubectl set image` is reported with path, both values and the manager, and
    // stays as the user left it.
    kubectl(&[
        "-n",
        &ns,
        "set",
        "image",
        "deployment/web-w",
        "app=nginx:1.26",
    ])?;
    let s = wait_drifted(&client, &warn, "True", Duration::from_secs(20)).await?;
    let entries = drift_entries(&s);
    let image = entries
        .iter()
        .find(|e| e["path"] == "spec.template.spec.containers[name=app].image")
        .with_context(|| format!("image drift in {entries:?}"))?;
    ensure!(image["expected"] == "nginx:1.25", "{image}");
    ensure!(image["actual"] == "nginx:1.26", "{image}");
    ensure!(image["manager"] == "kubectl-set", "{image}");
    ensure!(
        image["object"] == format!("Deployment {ns}/web-w"),
        "{image}"
    );
    let since = image["since"].as_str().unwrap_or_default().to_string();
    ensure!(!since.is_empty());

    // --- The CLI: the layer's report, and local manifests compared through the same code.
    let strata = |args: &[&str]| -> Result<(Option<i32>, String)> {
        let out = std::process::Command::new(bin_dir().join("strata"))
            .args(args)
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .output()?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    let (code, json_out) = strata(&["drift", &warn, "-o", "json"])?;
    ensure!(code == Some(1), "drift found exits 1: {code:?} {json_out}");
    let report: Value = serde_json::from_str(&json_out)?;
    ensure!(report["drifted"] == true, "{report}");
    ensure!(
        report["drift"].as_array().is_some_and(|d| d
            .iter()
            .any(|e| e["actual"] == "nginx:1.26" && e["manager"] == "kubectl-set")),
        "{report}"
    );
    let (_, table) = strata(&["drift", &warn])?;
    ensure!(
        table.contains("CHANGED BY")
            && table.contains("kubectl-set")
            && table.contains("Drifted=True"),
        "{table}"
    );
    let dir = std::env::temp_dir().join(format!("drift-cli-{ns}"));
    std::fs::create_dir_all(dir.join("apps"))?;
    std::fs::write(dir.join("apps/web.yaml"), deployment(&ns, "web-w"))?;
    let (code, json_out) = strata(&["drift", "-f", &dir.to_string_lossy(), "-o", "json"])?;
    ensure!(code == Some(1), "{code:?} {json_out}");
    let report: Value = serde_json::from_str(&json_out)?;
    let found: Vec<&Value> = report["drift"]
        .as_array()
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    ensure!(
        found.iter().any(
            |e| e["path"] == "spec.template.spec.containers[name=app].image"
                && e["expected"] == "nginx:1.25"
                && e["actual"] == "nginx:1.26"
                && e["manager"] == "kubectl-set"
        ),
        "{report}"
    );
    ensure!(found.len() == 1, "only the image drifted: {report}");
    std::fs::write(dir.join("apps/web.yaml"), deployment(&ns, "web-h"))?;
    let (code, out) = strata(&["drift", "-f", &dir.to_string_lossy()])?;
    ensure!(
        code == Some(0) && out.contains("no drift"),
        "{code:?} {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // --- A field the manifest declares but the schema does not observe is ignored; a field
    // the schema observes is not.
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "deployment",
        "web-w",
        "--type=merge",
        "-p",
        r#"{"spec":{"revisionHistoryLimit":7}}"#,
    ])?;
    kubectl(&["-n", &ns, "scale", "deployment", "web-w", "--replicas=2"])?;
    let s = eventually(
        "replicas drift on web-w",
        Duration::from_secs(20),
        || async {
            let s = layer_status(&client, &warn).await?;
            Ok(drift_entries(&s)
                .iter()
                .any(|e| e["path"] == "spec.replicas")
                .then_some(s))
        },
    )
    .await?;
    // Warn: the observer has since handled later edits of the same layer and written its
    // status again, so a heal request for the image would have gone out by now.
    ensure!(
        image_of(&deployments.get("web-w").await?) == "nginx:1.26",
        "Warn must not heal"
    );
    let warn_layer = Api::<AddonsLayer>::all(client.clone()).get(&warn).await?;
    ensure!(
        !warn_layer
            .annotations()
            .contains_key("strata.dev/reconcile-requested-at"),
        "no heal request in Warn mode"
    );
    ensure!(
        !drift_entries(&s).iter().any(|e| e["path"]
            .as_str()
            .unwrap_or_default()
            .contains("revisionHistoryLimit")),
        "field outside the schema reported: {s}"
    );

    // --- An injected sidecar, even in front of the app container, is not drift with a
    // merge-key selector (Krake's positions would see a different image at index 0).
    let before = drift_entries(&layer_status(&client, &warn).await?);
    let sidecar = json!([{"op": "add", "path": "/spec/template/spec/containers/0",
        "value": {"name": "istio-proxy", "image": "istio/proxyv2:1.22"}}]);
    deployments
        .patch(
            "web-w",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(sidecar)?),
        )
        .await?;
    // Positive signal: a later edit of an observed field is reported, so the sidecar's
    // event was processed before it.
    kubectl(&["-n", &ns, "scale", "deployment", "web-w", "--replicas=3"])?;
    let s = eventually("replicas 3 reported", Duration::from_secs(20), || async {
        let s = layer_status(&client, &warn).await?;
        Ok(drift_entries(&s)
            .iter()
            .any(|e| e["path"] == "spec.replicas" && e["actual"] == "3")
            .then_some(s))
    })
    .await?;
    let paths = |entries: &[Value]| -> Vec<String> {
        entries
            .iter()
            .map(|e| e["path"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    ensure!(
        paths(&drift_entries(&s)) == paths(&before),
        "sidecar changed the drift: {s}"
    );

    // --- A Secret's drift never shows its value (status, conditions, events).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let forged = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(FORGED_VALUE)
    };
    let hand_edit = PatchParams {
        field_manager: Some("hand-edit".into()),
        ..Default::default()
    };
    secrets
        .patch(
            "creds-w",
            &hand_edit,
            &Patch::Merge(json!({"data": {"password": forged}})),
        )
        .await?;
    let s = eventually("secret drift", Duration::from_secs(20), || async {
        let s = layer_status(&client, &warn).await?;
        Ok(drift_entries(&s)
            .iter()
            .any(|e| e["object"] == format!("Secret {ns}/creds-w"))
            .then_some(s))
    })
    .await?;
    let secret_entry = drift_entries(&s)
        .into_iter()
        .find(|e| e["object"] == format!("Secret {ns}/creds-w"))
        .unwrap();
    ensure!(secret_entry["path"] == "data.password", "{secret_entry}");
    ensure!(
        secret_entry["expected"] == "(masked)" && secret_entry["actual"] == "(masked)",
        "{secret_entry}"
    );
    ensure!(secret_entry["manager"] == "hand-edit", "{secret_entry}");
    let events = drift_events(&client, &ns, "creds-w").await?;
    ensure!(!events.is_empty(), "a Warning event on the Secret");
    let everything = format!("{s}{events:?}");
    for value in [SECRET_VALUE, FORGED_VALUE] {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        ensure!(
            !everything.contains(value) && !everything.contains(&b64),
            "secret value leaked: {everything}"
        );
    }

    // --- stringData: a Secret declared with it drifts by the data it became, in both modes
    // (the API server never returns stringData: compared as written, it never drifted).
    let kept = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(SECRET_VALUE)
    };
    let password =
        |name: &'static str| {
            let secrets = secrets.clone();
            async move {
                let secret = secrets.get(name).await?;
                Ok::<_, anyhow::Error>(secret.data.and_then(|d| d.get("password").cloned()).map(
                    |v| {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD.encode(v.0)
                    },
                ))
            }
        };
    for (layer_name, object, heals) in [(&heal, "creds-h", true), (&warn, "creds-w2", false)] {
        secrets
            .patch(
                object,
                &hand_edit,
                &Patch::Merge(json!({"data": {"password": forged}})),
            )
            .await?;
        // The Warning Event stays after a heal clears the status.
        let notes = eventually(
            &format!("{object}: stringData drift reported"),
            Duration::from_secs(20),
            || async {
                let notes = drift_events(&client, &ns, object).await?;
                Ok((!notes.is_empty()).then_some(notes))
            },
        )
        .await?;
        ensure!(
            notes.iter().any(|n| n.contains("data.password")),
            "{object}: {notes:?}"
        );
        let everything = format!("{notes:?}{}", layer_status(&client, layer_name).await?);
        ensure!(
            !everything.contains(&kept) && !everything.contains(&forged),
            "{object}: a value leaked: {everything}"
        );
        if heals {
            eventually(
                &format!("{object} healed"),
                Duration::from_secs(30),
                || async { Ok((password(object).await? == Some(kept.clone())).then_some(())) },
            )
            .await?;
        } else {
            eventually(
                &format!("{object}: in the status"),
                Duration::from_secs(20),
                || async {
                    let s = layer_status(&client, layer_name).await?;
                    Ok(drift_entries(&s)
                        .iter()
                        .any(|e| {
                            e["object"] == format!("Secret {ns}/{object}")
                                && e["path"] == "data.password"
                        })
                        .then_some(()))
                },
            )
            .await?;
            ensure!(
                password(object).await? == Some(forged.clone()),
                "Warn mode healed {object}"
            );
        }
    }

    // Nor in either service's log, after the drift of Secrets declared with data and with
    // stringData was found (and, in Heal mode, healed).
    for (service, log) in [
        ("drift-observer", observer.logs()),
        ("layer-controller", controller.logs()),
    ] {
        ensure!(!log.is_empty(), "{service} logged nothing");
        for value in [SECRET_VALUE, FORGED_VALUE] {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(value);
            ensure!(
                !log.contains(value) && !log.contains(&b64),
                "a Secret value in the {service}'s log"
            );
        }
    }

    // --- Observer restart: nothing lost, `since` kept; drift made while it was down found.
    observer.signal("KILL");
    observer.wait_exit_blocking(Duration::from_secs(10));
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let s = layer_status(&client, &warn).await?;
    ensure!(
        !drift_entries(&s).is_empty(),
        "status kept while the observer is down"
    );
    // An observed field edited while nobody watches.
    kubectl(&["-n", &ns, "scale", "deployment", "web-w", "--replicas=5"])?;
    observer = start_observer(&ns)?;
    eventually(
        "the edit made while the observer was down reported",
        Duration::from_secs(30),
        || async {
            let s = layer_status(&client, &warn).await?;
            Ok(drift_entries(&s)
                .iter()
                .any(|e| e["path"] == "spec.replicas" && e["actual"] == "5")
                .then_some(()))
        },
    )
    .await?;
    let after = layer_status(&client, &warn).await?;
    let image_after = drift_entries(&after)
        .into_iter()
        .find(|e| e["path"] == "spec.template.spec.containers[name=app].image")
        .with_context(|| format!("image drift lost after restart: {after}"))?;
    ensure!(
        image_after["since"] == since.as_str(),
        "since changed: {image_after} vs {since}"
    );

    // --- Heal: `kubectl set image` is reported (event: path, both values, manager) and undone.
    let heal_requests = observer
        .metric("drift_observer_heal_requests_total", &[&heal])
        .await?;
    kubectl(&[
        "-n",
        &ns,
        "set",
        "image",
        "deployment/web-h",
        "app=nginx:1.26",
    ])?;
    eventually("web-h healed", Duration::from_secs(20), || async {
        Ok((image_of(&deployments.get("web-h").await?) == "nginx:1.25").then_some(()))
    })
    .await?;
    let events = drift_events(&client, &ns, "web-h").await?;
    ensure!(
        events.iter().any(|e| e.contains("spec.template.spec.containers[name=app].image: expected nginx:1.25, found nginx:1.26 (changed by kubectl-set)")),
        "drift event: {events:?}"
    );
    ensure!(
        observer
            .metric("drift_observer_heal_requests_total", &[&heal])
            .await?
            > heal_requests
    );
    wait_drifted(&client, &heal, "False", Duration::from_secs(20)).await?;

    // --- A deleted object is re-created.
    let old_uid = configmaps.get("settings-h").await?.uid();
    configmaps
        .delete("settings-h", &DeleteParams::default())
        .await?;
    eventually("settings-h re-created", Duration::from_secs(20), || async {
        Ok(configmaps
            .get_opt("settings-h")
            .await?
            .filter(|c| c.uid() != old_uid)
            .map(|_| ()))
    })
    .await?;

    // --- A second writer fighting over replicas: FightDetected names it, heals back off.
    let fight_started = Instant::now();
    let mut writes = 0;
    let fighter = PatchParams {
        field_manager: Some("fighter".into()),
        ..Default::default()
    };
    let requests_before = observer
        .metric("drift_observer_heal_requests_total", &[&heal])
        .await?;
    let mut fight_condition = None;
    while fight_started.elapsed() < Duration::from_secs(40) {
        deployments
            .patch(
                "web-h",
                &fighter,
                &Patch::Merge(json!({"spec": {"replicas": 4}})),
            )
            .await?;
        writes += 1;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let s = layer_status(&client, &heal).await?;
        if let Some(c) = condition(&s, "FightDetected").filter(|c| c["status"] == "True") {
            fight_condition = Some(c.clone());
            if fight_started.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
    }
    let fight_condition = fight_condition.context("FightDetected never became True")?;
    ensure!(
        fight_condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("\"fighter\""),
        "{fight_condition}"
    );
    let requests = observer
        .metric("drift_observer_heal_requests_total", &[&heal])
        .await?
        - requests_before;
    ensure!(
        requests >= 2.0 && requests * 3.0 < f64::from(writes),
        "heal requests must back off: {requests} requests for {writes} writes"
    );
    ensure!(
        observer
            .metric("drift_observer_fights_total", &[&heal])
            .await?
            >= 1.0
    );

    observer.terminate_blocking();
    delete_layers_then_stop(&[&heal, &warn], controller);
    Ok(())
}

/// A value a layer substitutes from a Secret (`spec.postBuild.substituteFrom`) is as secret as
/// the Secret: the observer reads it as the account the layer acts as (here, a layer with no
/// account: the release's dry-run identity, never the observer itself), and it shows in no
/// status, Event or log line, while the drift of the field that holds it is still reported.
#[tokio::test]
async fn a_secret_variable_is_read_as_the_layer_and_never_shown() -> Result<()> {
    const PASSWORD: &str = "pw-from-a-secret-5187";
    const TAMPERED: &str = "postgres://app:tampered@db";
    let c = cluster();
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "drift-vars").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let name = format!("{ns}-vars");
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: vars, namespace: {ns}}}\nstringData: {{DB_PASSWORD: {PASSWORD}}}\n"
        ),
    )
    .await?;
    let files = vec![(
        "config.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-config, namespace: {ns}}}\ndata: {{url: \"postgres://app:${{DB_PASSWORD}}@db\", plain: \"visible\"}}\n"
        ),
    )];
    apply_yaml(&client, &ns, &source_configmap(&ns, "vars", &files)).await?;
    let controller = start_layer_controller(&ns)?;
    let observer = start_observer(&ns)?;
    apply_yaml(
        &client,
        &ns,
        &layer(
            &ns,
            "vars",
            // Warn: the drift stays in the status to be read (a heal would clear it).
            "  drift: {mode: Warn}\n  postBuild: {substituteFrom: [{kind: Secret, name: vars}]}\n",
        ),
    )
    .await?;
    wait_drifted(&client, &name, "False", Duration::from_secs(60)).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let applied = configmaps.get("app-config").await?;
    ensure!(
        applied
            .data
            .as_ref()
            .and_then(|d| d.get("url"))
            .map(String::as_str)
            == Some(&format!("postgres://app:{PASSWORD}@db")[..]),
        "the variable was substituted: {:?}",
        applied.data
    );

    // Both fields edited by hand: the substituted one shows masked, the plain one as is.
    configmaps
        .patch(
            "app-config",
            &PatchParams {
                field_manager: Some("hand-edit".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"url": TAMPERED, "plain": "edited"}})),
        )
        .await?;
    let status = eventually("both fields reported", Duration::from_secs(30), || async {
        let s = layer_status(&client, &name).await?;
        Ok((drift_entries(&s).len() >= 2).then_some(s))
    })
    .await?;
    let entry = |path: &str| {
        drift_entries(&status)
            .into_iter()
            .find(|e| e["path"] == path)
            .with_context(|| format!("{path} in {status}"))
    };
    let url = entry("data.url")?;
    ensure!(
        url["expected"] == "(masked)" && url["actual"] == TAMPERED,
        "the substituted value masked, the live one shown: {url}"
    );
    let plain = entry("data.plain")?;
    ensure!(
        plain["expected"] == "visible" && plain["actual"] == "edited",
        "{plain}"
    );
    let events = eventually("the drift Event", Duration::from_secs(20), || async {
        let notes = drift_events(&client, &ns, "app-config").await?;
        Ok(notes
            .iter()
            .any(|n| n.contains("data.url"))
            .then_some(notes))
    })
    .await?;
    let shown = [
        ("the status", status.to_string()),
        ("the Events", format!("{events:?}")),
        ("the observer's log", observer.logs()),
        ("the layer-controller's log", controller.logs()),
    ];
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(PASSWORD)
    };
    for (where_, text) in &shown {
        ensure!(
            !text.contains(PASSWORD) && !text.contains(&b64),
            "the Secret's value shows in {where_}: {text}"
        );
    }

    // Read as the layer acts: every read of the Secret by the observer was made as the
    // release's dry-run identity (the observer's own role could read it too).
    if let Some(audit) = c.audit_log() {
        let observer_user = format!("system:serviceaccount:{ns}:drift-observer");
        let reads = eventually(
            "the observer's read of the variables' Secret audited",
            Duration::from_secs(10),
            || async {
                let reads: Vec<Value> = std::fs::read_to_string(&audit)?
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|e| {
                        e["user"]["username"] == observer_user.as_str()
                            && e["objectRef"]["resource"] == "secrets"
                            && e["objectRef"]["namespace"] == ns.as_str()
                            && e["objectRef"]["name"] == "vars"
                    })
                    .collect();
                Ok((!reads.is_empty()).then_some(reads))
            },
        )
        .await?;
        let identity = format!("system:serviceaccount:{ns}:drift-observer-dry-run");
        for read in &reads {
            ensure!(
                read["impersonatedUser"]["username"] == identity.as_str(),
                "the observer read the layer's Secret as itself: {read}"
            );
        }
    }
    delete_layers_then_stop(&[&name], controller);
    Ok(())
}
