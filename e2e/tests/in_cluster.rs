//! The in-cluster tier (DESIGN.md §5): the chart installed with `helm install` onto the plane's
//! real node, its pods running the images `scripts/images.sh` builds, kube-apiserver calling
//! every webhook through the chart's Service, each service acting with the token kubelet
//! mounts. Needs `strata-plane up --real-node` (scripts/with-plane.sh, `make e2e`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use strata_e2e::in_cluster::{
    Release, SERVICES, WEBHOOK_OPT_IN, container_processes, node_namespace, pod_ip, recorded_calls,
    serial, test_pod_image,
};
use strata_e2e::node::NODE_NAME;
use strata_e2e::rollout_watch;
use strata_e2e::support::{apply_yaml, cluster, eventually};

async fn client() -> Client {
    cluster().client().await.expect("client")
}

/// What kube-apiserver answered a write that an admission webhook refused: its message.
async fn refused(ns: &str, yaml: &str) -> Result<String> {
    let client = client().await;
    match apply_yaml(&client, ns, yaml).await {
        Ok(_) => bail!("the write was admitted:\n{yaml}"),
        Err(e) => Ok(format!("{e:#}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_on_the_real_node_as_a_user_installs_it() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();

    // Every service's pods run on the real node, from our images.
    for service in SERVICES {
        let pods = release.pods(&client, service).await?;
        ensure!(pods.len() == 2, "{service}: {} pods, want 2", pods.len());
        for pod in &pods {
            let spec = pod.spec.as_ref().unwrap();
            ensure!(
                spec.node_name.as_deref() == Some(NODE_NAME),
                "{} runs on {:?}",
                pod.name_any(),
                spec.node_name
            );
            let image = &spec.containers[0].image.clone().unwrap_or_default();
            ensure!(
                image.starts_with(&format!("localhost/strata/{service}:")),
                "{}: image {image}",
                pod.name_any()
            );
        }
    }

    // As the kernel sees each container: the chart's numeric non-root user, no capability, no
    // way to gain privileges, a read-only root filesystem.
    let processes = container_processes(&ns)?;
    ensure!(
        processes.len() == 8,
        "{} containers running in {ns}, want 8: {processes:?}",
        processes.len()
    );
    for p in &processes {
        let uid = p.status_field("Uid")?;
        ensure!(uid == "65532 65532 65532 65532", "{}: Uid {uid}", p.pod);
        let gid = p.status_field("Gid")?;
        ensure!(gid == "65532 65532 65532 65532", "{}: Gid {gid}", p.pod);
        for caps in ["CapEff", "CapPrm", "CapBnd"] {
            let value = p.status_field(caps)?;
            ensure!(
                value.chars().all(|c| c == '0'),
                "{}/{}: {caps} {value}",
                p.pod,
                p.container
            );
        }
        ensure!(
            p.status_field("NoNewPrivs")? == "1",
            "{}: privileges can be gained",
            p.pod
        );
        let root = p.root_mount_options()?;
        ensure!(
            root.split(',').any(|o| o == "ro"),
            "{}: root filesystem mounted {root}",
            p.pod
        );
    }

    // Every webhook configuration of the release sends kube-apiserver to the chart's Service,
    // with the CA the server injected.
    let mut configured = BTreeMap::new();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for c in validating.list(&ListParams::default()).await?.items {
        for w in c.webhooks.unwrap_or_default() {
            configured.insert(w.name.clone(), w.client_config);
        }
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for c in mutating.list(&ListParams::default()).await?.items {
        for w in c.webhooks.unwrap_or_default() {
            configured.insert(w.name.clone(), w.client_config);
        }
    }
    for hook in [
        "no-downscale",
        "prepare-downscale",
        "pod-eviction",
        "zpdb-validation",
        "addonslayer-validation",
    ] {
        let name = format!("{hook}-{ns}.strata.dev");
        let config = configured
            .get(&name)
            .with_context(|| format!("webhook {name} not configured"))?;
        ensure!(config.url.is_none(), "{name} is called at a URL");
        let service = config.service.as_ref().context("no service")?;
        ensure!(
            service.name == "admission-webhook" && service.namespace == ns,
            "{name}: service {}/{}",
            service.namespace,
            service.name
        );
        ensure!(
            config.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()),
            "{name}: no caBundle injected"
        );
    }

    // kube-apiserver calls them through that Service: each refusal below is the webhook's.
    let guarded = node_namespace(&client, "ic-guarded", &[WEBHOOK_OPT_IN]).await?;
    let g = &guarded.name;
    let message = refused(
        g,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {g}-self}}
spec:
  version: 1.0.0
  source: {{kind: ConfigMap, name: src, namespace: {g}, path: ./}}
  prereqs: {{dependsOn: [\"{g}-self@1.0.0\"]}}
"
        ),
    )
    .await?;
    ensure!(
        message.contains(&format!("addonslayer-validation-{ns}.strata.dev"))
            && message.contains("a layer cannot depend on itself"),
        "{message}"
    );
    let message = refused(
        g,
        "apiVersion: rollout-operator.grafana.com/v1
kind: ZoneAwarePodDisruptionBudget
metadata: {name: both}
spec:
  maxUnavailable: 1
  maxUnavailablePercentage: 50
  selector: {matchLabels: {rollout-group: x}}
",
    )
    .await?;
    ensure!(
        message.contains(&format!("zpdb-validation-{ns}.strata.dev")),
        "{message}"
    );
    apply_yaml(
        &client,
        g,
        &format!(
            "apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: guarded, labels: {{grafana.com/no-downscale: \"true\"}}}}
spec:
  replicas: 2
  serviceName: guarded
  selector: {{matchLabels: {{name: guarded}}}}
  template:
    metadata: {{labels: {{name: guarded}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{{name: app, image: {image}, readinessProbe: {{httpGet: {{path: /ready, port: 8080}}, periodSeconds: 1}}}}]
",
            image = test_pod_image()
        ),
    )
    .await?;
    let out = cluster()
        .kubectl()
        .args(["-n", g, "scale", "statefulset", "guarded", "--replicas=1"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && stderr.contains(&format!("no-downscale-{ns}.strata.dev"))
            && stderr.contains("grafana.com/no-downscale"),
        "downscale of a no-downscale StatefulSet: {stderr}"
    );

    // Each service acts with the token kubelet mounted into its pod: kube-apiserver's audit log
    // names the pod a token was bound to, for requests of each service's ServiceAccount.
    let audit = cluster().audit_log().context("the plane's audit log")?;
    let mut pods_by_service: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for service in SERVICES {
        let names = release
            .pods(&client, service)
            .await?
            .iter()
            .map(|p| p.name_any())
            .collect();
        pods_by_service.insert(service, names);
    }
    eventually(
        "requests of every service bound to one of its pods in the audit log",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&audit)?;
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for line in text.lines() {
                let Ok(event) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                for service in SERVICES {
                    if event["user"]["username"] != format!("system:serviceaccount:{ns}:{service}")
                    {
                        continue;
                    }
                    let pod = event["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                        .as_str()
                        .unwrap_or_default();
                    if pods_by_service[service].contains(pod) {
                        seen.insert(service);
                    }
                }
            }
            Ok((seen.len() == SERVICES.len()).then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// A layer deployed by the in-cluster layer-controller, and a hand edit of what it applied
/// reported by the in-cluster drift-observer and healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_deploys_and_its_drift_heals_in_cluster() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();
    let target = node_namespace(&client, "ic-layer", &[]).await?;
    let t = &target.name;
    let layer = format!("{t}-app");
    let settings = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {t}}}\ndata: {{retention: 30d}}\n"
    );
    let body: String = settings.lines().map(|l| format!("    {l}\n")).collect();
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1
kind: ConfigMap
metadata: {{name: src-app, namespace: {ns}}}
data:
  settings.yaml: |
{body}---
apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {layer}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: 60s
  source: {{kind: ConfigMap, name: src-app, namespace: {ns}, path: ./}}
  drift: {{mode: Heal}}
"
        ),
    )
    .await?;
    let layers: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    let _delete_layer = scopeguard(&layer);
    eventually("the layer Deployed", Duration::from_secs(60), || async {
        let status = serde_json::to_value(layers.get(&layer).await?.status)?;
        Ok((status["state"] == "Deployed").then_some(()))
    })
    .await
    .with_context(|| "waiting for the layer".to_string())?;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), t);
    ensure!(
        configmaps.get("settings").await?.data.unwrap_or_default()["retention"] == "30d",
        "the layer's ConfigMap was not applied"
    );
    // A hand edit: reported by the observer, then healed by the controller.
    cluster()
        .kubectl()
        .args([
            "-n",
            t,
            "patch",
            "configmap",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"retention":"1d"}}"#,
        ])
        .output()?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), t);
    let reported = eventually(
        "the drift-observer's DriftDetected event on the edited ConfigMap",
        Duration::from_secs(60),
        || async {
            let found = events.list(&ListParams::default()).await?.items;
            Ok(found
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("DriftDetected")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("settings")
                })
                .map(|e| e.note.unwrap_or_default()))
        },
    )
    .await;
    let note = match reported {
        Ok(note) => note,
        Err(e) => bail!(
            "{e:#}
{}",
            release.logs("drift-observer", 20)
        ),
    };
    ensure!(
        note.contains("retention") && note.contains("30d") && note.contains("1d"),
        "the drift event says: {note}"
    );
    eventually("the edit healed", Duration::from_secs(60), || async {
        let data = configmaps.get("settings").await?.data.unwrap_or_default();
        Ok((data["retention"] == "30d").then_some(()))
    })
    .await?;
    Ok(())
}

/// Zone `zone` of the rollout group `ingester`: `replicas` test pods (Ready by kubelet's probe
/// two seconds after they start), OnDelete, labelled for prepare-downscale at `/prepare-shutdown`
/// on port 8080; every POST to pod `fail_on` fails.
fn ingester_zone(zone: &str, replicas: i32, version: &str, fail_on: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-{zone}
  labels: {{rollout-group: ingester, grafana.com/prepare-downscale: "true"}}
  annotations:
    rollout-max-unavailable: "2"
    grafana.com/prepare-downscale-http-path: prepare-shutdown
    grafana.com/prepare-downscale-http-port: "8080"
spec:
  replicas: {replicas}
  serviceName: ingester
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: ingester-zone-{zone}}}}}
  template:
    metadata: {{labels: {{name: ingester-zone-{zone}, rollout-group: ingester}}}}
    spec:
      # The test pod (PID 1, no signal handler) ignores SIGTERM: a removed pod lingers this long,
      # still answering what it recorded.
      terminationGracePeriodSeconds: 3
      containers:
      - name: ingester
        image: {image}
        env:
        - {{name: VERSION, value: "{version}"}}
        - {{name: READY_AFTER, value: "2"}}
        - {{name: FAIL_PREPARE_ON, value: "{fail_on}"}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        readinessProbe: {{httpGet: {{path: /ready, port: 8080}}, periodSeconds: 1}}
"#,
        image = test_pod_image()
    )
}

/// The in-cluster rollout-operator rolls a three-zone group of real pods one zone at a time,
/// each zone only once the previous one's new pods are Ready by kubelet; the in-cluster
/// prepare-downscale webhook calls the pods going away at their own addresses, and tells them
/// to undo when the downscale is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollout_operator_rolls_real_pods_zone_by_zone() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let group = node_namespace(&client, "ic-rollout", &[WEBHOOK_OPT_IN]).await?;
    let ns = group.name.clone();
    let release = Release::install(&client, &[]).await?;
    // The operator manages one namespace (the anchor's model): this one.
    release.upgrade(&[&format!("rolloutOperator.watchNamespace={ns}")])?;
    release
        .wait_available(&client, Duration::from_secs(120))
        .await?;
    let zones = ["a", "b", "c"];
    for zone in zones {
        apply_yaml(
            &client,
            &ns,
            &ingester_zone(zone, 2, "1", "ingester-zone-b-1"),
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let all_ready = |want: usize| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await?.items;
            let up = list.iter().filter(|p| rollout_watch::up(p)).count();
            Ok((up == want && list.len() == want).then_some(list))
        }
    };
    let before = eventually(
        "six ingester pods Ready by kubelet",
        Duration::from_secs(90),
        || all_ready(6),
    )
    .await?;
    let old: BTreeSet<String> = before
        .iter()
        .filter_map(|p| p.labels().get("controller-revision-hash").cloned())
        .collect();

    // A new version of every zone: the operator deletes old pods zone by zone.
    let watch = rollout_watch::watch_rollout(pods.clone(), "ingester", &["a", "b", "c"], 2);
    for zone in zones {
        apply_yaml(
            &client,
            &ns,
            &ingester_zone(zone, 2, "2", "ingester-zone-b-1"),
        )
        .await?;
    }
    let finished = rollout_watch::rollout_finished(&pods, &old, 6, Duration::from_secs(180)).await;
    let seen = watch.finish().await?;
    if let Err(e) = finished {
        bail!(
            "{e:#}
{}",
            release.logs("rollout-operator", 30)
        );
    }
    ensure!(seen.violations.is_empty(), "{:?}", seen.violations);
    ensure!(
        seen.most_zones_down == 1,
        "zones down at once: {}",
        seen.most_zones_down
    );
    let audit = cluster().audit_log().context("the plane's audit log")?;
    let summary = rollout_watch::judge_operator_deletions(
        &strata_e2e::plane::pod_deletions(&audit)?,
        &ns,
        "ingester",
        &old,
        6,
    )?;
    eprintln!("rollout: {summary}");

    // A downscale: the pod going away is called at its IP before the downscale is admitted.
    let going = pods.get("ingester-zone-a-1").await?;
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            &ns,
            "scale",
            "statefulset",
            "ingester-zone-a",
            "--replicas=1",
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "downscale of zone a: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = recorded_calls(&going).await?;
    // At least once: kube-apiserver re-runs admission when the update conflicts with the
    // webhook's own write of grafana.com/last-downscale (issue #55 is about that write).
    ensure!(
        !calls.is_empty()
            && calls
                .iter()
                .all(|c| *c == ("POST".to_string(), "/prepare-shutdown".to_string())),
        "ingester-zone-a-1 ({}) recorded {calls:?}",
        pod_ip(&going)?
    );
    let staying = recorded_calls(&pods.get("ingester-zone-a-0").await?).await?;
    ensure!(
        staying.is_empty(),
        "ingester-zone-a-0 was called: {staying:?}"
    );
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), &ns);
    let zone_a = sets.get("ingester-zone-a").await?;
    ensure!(
        zone_a
            .annotations()
            .contains_key("grafana.com/last-downscale"),
        "no last-downscale recorded on ingester-zone-a"
    );
    // Zone a settles (its pod gone) before another zone may go down.
    eventually(
        "zone a at one Ready replica",
        Duration::from_secs(60),
        || async {
            let status = sets
                .get("ingester-zone-a")
                .await?
                .status
                .unwrap_or_default();
            Ok((status.replicas == 1
                && status.ready_replicas == Some(1)
                && status.updated_replicas == Some(1))
            .then_some(()))
        },
    )
    .await?;

    // A downscale that one pod cannot prepare for: refused, and the pod that did prepare is told
    // to undo; no pod stays marked.
    let b0 = pods.get("ingester-zone-b-0").await?;
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            &ns,
            "scale",
            "statefulset",
            "ingester-zone-b",
            "--replicas=0",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && stderr.contains("ingester-zone-b-1 answered HTTP 500")
            && stderr.contains("failed to prepare for shutdown"),
        "downscale of zone b: {stderr}"
    );
    eventually(
        "ingester-zone-b-0 told to prepare, then to undo",
        Duration::from_secs(30),
        || async {
            let calls = recorded_calls(&b0).await?;
            let posted = calls.first().is_some_and(|c| c.0 == "POST");
            let undone = calls.last().is_some_and(|c| c.0 == "DELETE");
            Ok(
                (posted && undone && calls.iter().all(|c| c.1 == "/prepare-shutdown"))
                    .then_some(calls),
            )
        },
    )
    .await?;
    eventually(
        "no pod left marked as prepared",
        Duration::from_secs(30),
        || async {
            let marked = pods
                .list(&ListParams::default().labels("strata.dev/prepared-for-downscale=true"))
                .await?
                .items;
            Ok(marked.is_empty().then_some(()))
        },
    )
    .await?;
    ensure!(
        sets.get("ingester-zone-b").await?.spec.unwrap().replicas == Some(2),
        "zone b was scaled down"
    );
    Ok(())
}

/// Deletes an AddonsLayer when dropped (a failed test leaves none behind).
fn scopeguard(layer: &str) -> strata_e2e::support::DeleteOnDrop {
    strata_e2e::support::DeleteOnDrop {
        resource: "addonslayer",
        name: layer.to_string(),
    }
}

#[allow(dead_code)]
fn pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}
