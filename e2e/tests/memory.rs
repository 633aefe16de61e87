//! Memory with 5,000 watched objects: every service's peak resident memory stays under the
//! limit the Helm chart documents for it (`helm/strata/values.yaml`,
//! `<service>.resources.limits.memory`) while it watches 5,000 objects of its own kind:
//!
//! - rollout-operator: 5,000 pods in its namespace (its pod watch caches every one of them, shown
//!   by its own `rollout_operator_cached_objects{kind="Pod"}` before the memory is read);
//! - layer-controller: five layers of 1,000 ConfigMaps each, applied, inventoried and
//!   health-checked (5,000 objects it owns);
//! - drift-observer: the same 5,000 objects, each compared with its manifest;
//! - admission-webhook: it watches only its own labelled webhook configurations, whatever the
//!   cluster holds; measured here under the same cluster, and under hostile load in
//!   `webhook_robustness.rs`.
//!
//! Peak is `VmHWM` of `/proc/<pid>/status`: the most the process ever held, not a sample.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use strata_e2e::flux::{configmap_layer, configmap_yaml, install_layer_crds, layer_status};
use strata_e2e::plane::free_port;
use strata_e2e::services::{
    ServiceProcess, delete_layers_then_stop, start_admission_webhook, start_layer_service,
    start_service,
};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

const OBJECTS: usize = 5_000;
const LAYERS: usize = 5;

/// Peak and current resident memory of a process, in bytes (`VmHWM`, `VmRSS`).
fn memory(process: &ServiceProcess) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.pid()))?;
    let field = |name: &str| -> Result<u64> {
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("{name} of {}", process.pid()))?;
        Ok(kib * 1024)
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

fn pod(ns: &str, i: usize) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("watched-{i:04}"),
            "namespace": ns,
            "labels": {"app": "watched", "rollout-group": "watched", "index": i.to_string()},
        },
        "spec": {
            // No scheduler takes it: the pod stays Pending, only its object matters.
            "schedulerName": "strata-e2e-nobody",
            "containers": [{"name": "app", "image": "example.invalid/watched:1"}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn every_service_stays_under_its_documented_limit_with_5000_watched_objects() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "memory").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;

    let layers = start_layer_service("layer-controller", &ns, &[])?;
    let observer = start_layer_service("drift-observer", &ns, &[])?;
    let rollouts = start_service(
        "rollout-operator",
        cluster().kubeconfig(),
        &["--leader-elect=false", "--watch-namespace", &ns],
    )?;
    let tls = format!("127.0.0.1:{}", free_port()?);
    let webhook = start_admission_webhook(&ns, &tls, &[])?;

    // 5,000 pods for the rollout-operator's watch, 32 creations at a time.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let pods = pods.clone();
            let pod = pod(&ns, i);
            async move { pods.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;

    // 5,000 ConfigMaps in five layers for the layer-controller and the drift-observer.
    let per_layer = OBJECTS / LAYERS;
    let names: Vec<String> = (0..LAYERS).map(|l| format!("{ns}-many-{l}")).collect();
    for l in 0..LAYERS {
        let items: Vec<String> = (0..per_layer)
            .map(|i| configmap_yaml(&ns, &format!("many-{l}-{i:04}"), ""))
            .collect();
        apply_yaml(
            &client,
            &ns,
            &configmap_layer(
                &ns,
                &format!("many-{l}"),
                "300s",
                &[("items.yaml", items.join("---\n"))],
            ),
        )
        .await?;
    }
    for name in &names {
        eventually(
            &format!("{name} Deployed"),
            Duration::from_secs(300),
            || async {
                Ok((layer_status(&client, name).await?["state"] == "Deployed").then_some(()))
            },
        )
        .await
        .with_context(|| layers.logs())?;
    }
    // The observer has compared every object; the operator has every pod in its cache (it
    // reports each group it sees; the pods carry one).
    eventually(
        "the observer observes every object",
        Duration::from_secs(120),
        || async {
            let observed = observer
                .metric("drift_observer_objects_observed", &[])
                .await?;
            Ok((observed >= OBJECTS as f64).then_some(()))
        },
    )
    .await
    .with_context(|| observer.logs())?;
    let listed = pods
        .list(&ListParams::default().labels("app=watched"))
        .await?
        .items
        .len();
    ensure!(listed == OBJECTS, "{listed} pods");
    // Every service works once more with everything in place, each shown by its own signal
    // (not a pause): each layer reconciled again on request; the observer checks a managed
    // object edited by hand; the operator reconciles the group the 5,000 pods belong to
    // (reading them from its cache).
    for name in &names {
        strata_e2e::flux::reconciled(&client, name, Duration::from_secs(120)).await?;
    }
    let checks_before = observer.metric("drift_observer_checks_total", &[]).await?;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.patch(
        "many-0-0000",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"data": {"k": "edited"}})),
    )
    .await?;
    eventually(
        "the observer checked the edit",
        Duration::from_secs(60),
        || async {
            let checks = observer.metric("drift_observer_checks_total", &[]).await?;
            Ok((checks > checks_before).then_some(()))
        },
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &strata_e2e::support::group_stateful_set("watched", "watched", 0, "", ""),
    )
    .await?;
    eventually(
        "the operator reconciled the pods' group",
        Duration::from_secs(60),
        || async {
            let reconciles = rollouts.group_reconciles("watched").await?;
            Ok((reconciles > 0.0).then_some(()))
        },
    )
    .await?;

    // The operator's claim, from its own metric: every one of the pods is in its watch cache
    // when its memory is read.
    eventually(
        "the operator's pod cache holds every pod",
        Duration::from_secs(60),
        || async {
            let cached = rollouts
                .metric("rollout_operator_cached_objects", &["kind=\"Pod\""])
                .await?;
            Ok((cached == OBJECTS as f64).then_some(()))
        },
    )
    .await?;

    let mut report = Vec::new();
    let mut over = Vec::new();
    for (service, key, process) in [
        ("layer-controller", "layerController", &layers),
        ("drift-observer", "driftObserver", &observer),
        ("rollout-operator", "rolloutOperator", &rollouts),
        ("admission-webhook", "admissionWebhook", &webhook),
    ] {
        let limit = strata_e2e::chart::documented_memory_limit(key)?;
        let (peak, now) = memory(process)?;
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        report.push(format!(
            "{service}: peak {:.1} MiB, now {:.1} MiB, limit {:.0} MiB",
            mib(peak),
            mib(now),
            mib(limit)
        ));
        if peak >= limit {
            over.push(service);
        }
    }
    eprintln!("with {OBJECTS} watched objects:\n{}", report.join("\n"));
    drop(rollouts);
    drop(webhook);
    drop(observer);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    delete_layers_then_stop(&refs, layers);
    ensure!(
        over.is_empty(),
        "over the documented limit: {over:?}\n{}",
        report.join("\n")
    );
    Ok(())
}
