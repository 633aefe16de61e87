//! Staggered zone downscales under a real HorizontalPodAutoscaler (grafana/rollout-operator#303),
//! driven by kube-controller-manager's HPA controller. The plane has no metrics API, so the HPA
//! is moved by its bounds: lowering `maxReplicas` below the target's replicas makes the
//! controller scale the target down to it, raising `minReplicas` scales it up; both go through
//! the target's `/scale` exactly as a metrics-driven rescale does.
//!
//! - HPA on zone a, zones b and c following it (`rollout-downscale-leader`), every zone behind
//!   prepare-downscale: the HPA's downscale goes through without a conflict (the anchor's
//!   webhook writes the StatefulSet during admission, so the HPA's update conflicts), and b and c
//!   follow one minimum time apart; an upscale follows at once.
//! - HPA on a ReplicaTemplate the three zones mirror, with a delayed downscale: the operator
//!   prepares and scales one zone at a time, each its minimum time after the previous one (the
//!   anchor scales all three at once).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use strata_e2e::admission::{namespace_args, register_prepare_downscale};
use strata_e2e::plane::free_port;
use strata_e2e::pod_endpoints::{Answer, PodEndpoints};
use strata_e2e::services::{ServiceProcess, start_service};
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, stateful_set_settled,
};

/// The minimum time between zone downscales the zones are labelled with.
const WINDOW: Duration = Duration::from_secs(10);
/// `grafana.com/last-downscale` has whole seconds, so a zone may follow up to 1 s sooner than
/// WINDOW after the previous zone's actual downscale; the rest is how much later this test's
/// watch may deliver one zone's change than the next one's.
const RESOLUTION: Duration = Duration::from_millis(1500);

const ZONES: [&str; 3] = ["a", "b", "c"];

/// Zone `zone` of group ingester, `replicas` pods, labelled with the minimum time between
/// zone downscales; `labels` and `annotations` add to it.
fn zone(zone: &str, replicas: i32, labels: &str, annotations: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-{zone}
  labels: {{rollout-group: ingester, grafana.com/min-time-between-zones-downscale: {}s{labels}}}
  annotations: {{{annotations}}}
spec:
  replicas: {replicas}
  serviceName: ingester
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: ingester-zone-{zone}}}}}
  template:
    metadata: {{labels: {{name: ingester-zone-{zone}}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
"#,
        WINDOW.as_secs()
    )
}

/// An HPA on `kind`/`name` (`api_version`) between `min` and `max` replicas.
fn hpa(api_version: &str, kind: &str, name: &str, min: i32, max: i32) -> String {
    format!(
        r#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: ingester}}
spec:
  scaleTargetRef: {{apiVersion: {api_version}, kind: {kind}, name: {name}}}
  minReplicas: {min}
  maxReplicas: {max}
  metrics:
  - type: Resource
    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 80}}}}
"#
    )
}

async fn set_bounds(client: &kube::Client, ns: &str, min: i32, max: i32) -> Result<()> {
    let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> =
        Api::namespaced(client.clone(), ns);
    hpas.patch(
        "ingester",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minReplicas": min, "maxReplicas": max}})),
    )
    .await?;
    Ok(())
}

/// Waits until every zone runs `replicas` ready pods and its status caught up.
async fn settled(client: &kube::Client, ns: &str, replicas: usize) -> Result<()> {
    for z in ZONES {
        stateful_set_settled(client, ns, &format!("ingester-zone-{z}"), replicas).await?;
    }
    Ok(())
}

/// When each zone's `spec.replicas` first read `replicas`, as a watch of the StatefulSets
/// delivered it, until all did (or `within` passed, an error naming the zones that did not).
/// A watch, not polling: the API server sends the zones' changes in the order it made them,
/// as they happen, while a poll's sequential GETs on a loaded machine saw one zone up to a
/// loop (three GETs) later than it changed, and a gap between zones 1.5 s shorter than it was.
async fn steps(
    client: &kube::Client,
    ns: &str,
    replicas: i32,
    within: Duration,
) -> Result<BTreeMap<&'static str, Instant>> {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let mut changes = std::pin::pin!(watcher(sets, watcher::Config::default()).applied_objects());
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = BTreeMap::new();
    while seen.len() < ZONES.len() {
        let sts = tokio::time::timeout_at(deadline, changes.try_next())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "after {within:?} only zones {:?} reached {replicas} replicas",
                    seen.keys().collect::<Vec<_>>()
                )
            })??
            .context("the StatefulSet watch ended")?;
        let at = Instant::now();
        let name = sts.metadata.name.unwrap_or_default();
        let zone = ZONES
            .into_iter()
            .find(|z| name == format!("ingester-zone-{z}"));
        if let Some(z) = zone
            && sts.spec.and_then(|s| s.replicas) == Some(replicas)
        {
            seen.entry(z).or_insert(at);
        }
    }
    Ok(seen)
}

/// Zones went `a`, `b`, `c`, each at least the window after the one before.
fn assert_staggered(at: &BTreeMap<&str, Instant>) {
    let (a, b, c) = (at["a"], at["b"], at["c"]);
    assert!(
        b >= a + WINDOW - RESOLUTION,
        "zone b followed zone a after {:?}, less than the {WINDOW:?} between zones",
        b.saturating_duration_since(a)
    );
    assert!(
        c >= b + WINDOW - RESOLUTION,
        "zone c followed zone b after {:?}, less than the {WINDOW:?} between zones",
        c.saturating_duration_since(b)
    );
}

fn start_operator(ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    strata_e2e::services::start_rollout_operator(ns, extra)
}

/// The HPA's events in `ns`, as (reason, message).
async fn hpa_events(client: &kube::Client, ns: &str) -> Result<Vec<(String, String)>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("HorizontalPodAutoscaler"))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

/// Every change of a StatefulSet's `/scale` in `ns` the API server recorded.
fn scale_writes(ns: &str) -> Result<Vec<(String, String, String, i64)>> {
    let audit = cluster()
        .audit_log()
        .context("the plane's audit log (this test needs the local plane)")?;
    strata_e2e::plane::scale_writes(&audit, ns)
}

/// HPA on zone a; zones b and c follow it (b → a, c → b); every zone runs prepare-downscale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_downscales_zone_a_without_conflict_and_the_other_zones_follow_a_window_apart()
-> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "hpa-leader").await?;
    let pods = PodEndpoints::start(&ns.name).await?;
    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let mut args = namespace_args(&ns.name, &tls, &pods.address);
    args.extend(["--pod-timeout", "2s"]);
    let _webhook = start_service("admission-webhook", cluster().kubeconfig(), &args)?;
    let _hook = register_prepare_downscale(&client, &ns.name, port).await?;
    let prepared = r#", grafana.com/prepare-downscale: "true""#;
    let endpoint = r#""grafana.com/prepare-downscale-http-path": ingester/prepare-shutdown, "grafana.com/prepare-downscale-http-port": "80""#;
    for (z, leader) in [("a", None), ("b", Some("a")), ("c", Some("b"))] {
        let annotations = match leader {
            Some(l) => {
                format!(r#"{endpoint}, "grafana.com/rollout-downscale-leader": ingester-zone-{l}"#)
            }
            None => endpoint.to_string(),
        };
        apply_yaml(&client, &ns.name, &zone(z, 3, prepared, &annotations)).await?;
    }
    settled(&client, &ns.name, 3).await?;
    let _operator = start_operator(&ns.name, &[])?;
    apply_yaml(
        &client,
        &ns.name,
        &hpa("apps/v1", "StatefulSet", "ingester-zone-a", 1, 3),
    )
    .await?;

    set_bounds(&client, &ns.name, 1, 2).await?;
    let down = steps(&client, &ns.name, 2, Duration::from_secs(90)).await?;
    assert_staggered(&down);
    // Each zone's pod going away was told to prepare before it went.
    for z in ZONES {
        assert!(
            pods.count("POST", &format!("ingester-zone-{z}-2")) >= 1,
            "zone {z}: {:?}",
            pods.calls()
        );
    }
    // The HPA's own downscale went through at the first try: no /scale write of zone a was
    // answered 409, and the HPA reports no failed rescale.
    let writes = scale_writes(&ns.name)?;
    let hpa_writes: Vec<_> = writes
        .iter()
        .filter(|(agent, _, name, _)| {
            agent.contains("horizontal-pod-autoscaler") && name == "ingester-zone-a"
        })
        .collect();
    assert!(
        !hpa_writes.is_empty(),
        "no /scale write by the HPA: {writes:?}"
    );
    let conflicts: Vec<_> = writes.iter().filter(|w| w.3 == 409).collect();
    assert!(
        conflicts.is_empty(),
        "/scale writes answered 409: {conflicts:?}"
    );
    let events = hpa_events(&client, &ns.name).await?;
    assert!(
        events
            .iter()
            .any(|(reason, message)| reason == "SuccessfulRescale"
                && message.contains("New size: 2")),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(reason, _)| reason == "FailedRescale"),
        "{events:?}"
    );

    // An upscale is never held by the window: zone c went down just now, and all three zones
    // are back up before its window ends.
    set_bounds(&client, &ns.name, 3, 3).await?;
    let up = steps(&client, &ns.name, 3, WINDOW).await?;
    let last_up = up.values().max().copied().unwrap();
    assert!(
        last_up < down["c"] + WINDOW,
        "the upscale waited {:?} after zone c's downscale",
        last_up.saturating_duration_since(down["c"])
    );
    Ok(())
}

/// HPA on ReplicaTemplate `ingester`; zones a, b and c mirror it, each with a 2 s delayed
/// downscale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_on_a_reference_resource_downscales_the_zones_one_at_a_time() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "hpa-reference").await?;
    apply_shipped_crd(&client, &ns.name, "replica-templates.yaml").await?;
    let template = "apiVersion: rollout-operator.grafana.com/v1\nkind: ReplicaTemplate\nmetadata: {name: ingester}\nspec: {replicas: 3, labelSelector: name=ingester-zone-a}\n";
    eventually(
        "ReplicaTemplate served",
        Duration::from_secs(30),
        || async { Ok(apply_yaml(&client, &ns.name, template).await.ok()) },
    )
    .await?;
    // The pods' delayed-downscale endpoints answer when they were first prepared.
    let endpoints = PodEndpoints::start(&ns.name).await?;
    endpoints.set_default("POST", Answer::PreparedAt);
    let mirror = r#""grafana.com/rollout-mirror-replicas-from-resource-name": ingester, "grafana.com/rollout-mirror-replicas-from-resource-kind": ReplicaTemplate, "grafana.com/rollout-mirror-replicas-from-resource-api-version": rollout-operator.grafana.com/v1, "grafana.com/rollout-delayed-downscale": 2s, "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod:8080/ingester/prepare-delayed-downscale""#;
    for z in ZONES {
        apply_yaml(&client, &ns.name, &zone(z, 3, "", mirror)).await?;
    }
    settled(&client, &ns.name, 3).await?;
    let _operator = start_operator(&ns.name, &["--pod-address-override", &endpoints.address])?;
    apply_yaml(
        &client,
        &ns.name,
        &hpa(
            "rollout-operator.grafana.com/v1",
            "ReplicaTemplate",
            "ingester",
            1,
            3,
        ),
    )
    .await?;

    set_bounds(&client, &ns.name, 1, 2).await?;
    // kube-controller-manager discovers the new kind within its 30 s mapper refresh.
    let down = steps(&client, &ns.name, 2, Duration::from_secs(120)).await?;
    assert_staggered(&down);
    // One zone at a time: a zone's pods are asked to prepare only after the zone before it
    // went down, and each zone waited its delay after its first preparation.
    for (before, z) in [("a", "b"), ("b", "c")] {
        let first = endpoints
            .first_call("POST", &format!("ingester-zone-{z}-"))
            .with_context(|| format!("zone {z} was never prepared"))?;
        assert!(
            first >= down[before],
            "zone {z} was prepared {:?} before zone {before} went down",
            down[before].saturating_duration_since(first)
        );
    }
    for z in ZONES {
        let first = endpoints
            .first_call("POST", &format!("ingester-zone-{z}-"))
            .with_context(|| format!("zone {z} was never prepared"))?;
        assert!(
            down[z] >= first + Duration::from_secs(2) - RESOLUTION,
            "zone {z} went down {:?} after its first preparation, within its 2 s delay",
            down[z].saturating_duration_since(first)
        );
    }
    let events = hpa_events(&client, &ns.name).await?;
    assert!(
        !events.iter().any(|(reason, _)| reason == "FailedRescale"),
        "{events:?}"
    );
    Ok(())
}
