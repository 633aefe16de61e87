//! rollout-operator on the local control plane: three zones roll one at a time within
//! max-unavailable, a NotReady pod halts the rollout until it recovers, and of two operator
//! replicas only the leader deletes pods.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use strata_e2e::plane::FAKE_READY_LABEL;
use strata_e2e::services::{ServiceProcess, start_service};
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, http_get, parse_openmetrics,
    pod_ready, rollout_zone,
};

const ZONES: [&str; 3] = ["a", "b", "c"];

fn zone_yaml(zone: &str, image: &str, paused: bool) -> String {
    rollout_zone("ingester", zone, 3, image, 2, paused)
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && pod_ready(pod)
}

/// Per zone: (pods not ready or missing, ready pods on a revision other than `old[zone]`).
/// Comparing with the known old revision, not `status.updateRevision`, keeps the view right
/// while the controller-manager has not yet published the new revision.
async fn snapshot(
    client: &kube::Client,
    ns: &str,
    old: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, (usize, usize)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let all = pods.list(&ListParams::default()).await?.items;
    let mut out = BTreeMap::new();
    for zone in ZONES {
        let old_rev = old.get(zone).cloned().unwrap_or_default();
        let name = format!("ingester-zone-{zone}");
        let mine: Vec<&Pod> = all
            .iter()
            .filter(|p| p.labels().get("name") == Some(&name))
            .collect();
        let not_ready =
            mine.iter().filter(|p| !ready(p)).count() + 3usize.saturating_sub(mine.len());
        let updated = mine
            .iter()
            .filter(|p| ready(p) && p.labels().get("controller-revision-hash") != Some(&old_rev))
            .count();
        out.insert(zone.to_string(), (not_ready, updated));
    }
    Ok(out)
}

/// The published update revision of every zone.
async fn revisions(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, String>> {
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let mut out = BTreeMap::new();
    for zone in ZONES {
        let st = sts_api
            .get(&format!("ingester-zone-{zone}"))
            .await?
            .status
            .unwrap_or_default();
        out.insert(zone.to_string(), st.update_revision.unwrap_or_default());
    }
    Ok(out)
}

async fn deleted_by(process: &ServiceProcess) -> f64 {
    let Ok((200, body)) = http_get(process.admin.unwrap(), "/metrics").await else {
        return -1.0;
    };
    parse_openmetrics(&body)
        .unwrap()
        .iter()
        .find(|(s, _)| s == "rollout_operator_pods_deleted_total")
        .map_or(0.0, |(_, v)| *v)
}

#[tokio::test]
async fn zones_roll_one_at_a_time_and_a_not_ready_pod_halts_the_rollout() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "rollout").await?;
    for zone in ZONES {
        apply_yaml(
            &client,
            &ns.name,
            &zone_yaml(zone, "example.invalid/ingester:1", false),
        )
        .await?;
    }
    let none = BTreeMap::new();
    eventually("9 ready pods", Duration::from_secs(60), || async {
        let s = snapshot(&client, &ns.name, &none).await?;
        Ok(s.values()
            .all(|(nr, up)| *nr == 0 && *up == 3)
            .then_some(()))
    })
    .await?;
    let old = eventually("revisions published", Duration::from_secs(30), || async {
        let r = revisions(&client, &ns.name).await?;
        Ok(r.values().all(|v| !v.is_empty()).then_some(r))
    })
    .await?;

    let start = |identity: &str| {
        start_service(
            "rollout-operator",
            cluster().kubeconfig(),
            &[
                "--watch-namespace",
                &ns.name,
                "--lease-namespace",
                &ns.name,
                "--identity",
                identity,
            ],
        )
    };
    let one = start("op-1")?;
    let two = start("op-2")?;

    // Roll zone a only (b and c paused), then make a pod of the finished zone NotReady.
    for zone in ZONES {
        apply_yaml(
            &client,
            &ns.name,
            &zone_yaml(zone, "example.invalid/ingester:2", zone != "a"),
        )
        .await?;
    }
    let mut max_zones_busy = 0;
    let mut max_not_ready = 0;
    eventually("zone a rolled", Duration::from_secs(60), || async {
        let s = snapshot(&client, &ns.name, &old).await?;
        Ok((s["a"] == (0, 3)).then_some(()))
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let flip = |value: Option<&str>| json_label(value);
    pods.patch(
        "ingester-zone-a-0",
        &PatchParams::default(),
        &Patch::Merge(flip(Some("false"))),
    )
    .await?;
    eventually("zone a pod NotReady", Duration::from_secs(20), || async {
        Ok((!ready(&pods.get("ingester-zone-a-0").await?)).then_some(()))
    })
    .await?;
    for zone in ["b", "c"] {
        apply_yaml(
            &client,
            &ns.name,
            &zone_yaml(zone, "example.invalid/ingester:2", false),
        )
        .await?;
    }
    // Halted: once the new revisions of b and c are published, the operator reconciles the
    // group (its own counter for the group moves past a poke made after them) and still
    // deletes nothing in b or c.
    eventually(
        "b and c revisions published",
        Duration::from_secs(30),
        || async {
            let r = revisions(&client, &ns.name).await?;
            Ok((r["b"] != old["b"] && r["c"] != old["c"]).then_some(()))
        },
    )
    .await?;
    let group_reconciles = || async {
        let mut total = 0.0;
        for operator in [&one, &two] {
            total += operator.group_reconciles("ingester").await.unwrap_or(0.0);
        }
        total
    };
    let deletions_before = deleted_by(&one).await + deleted_by(&two).await;
    let reconciles_before = group_reconciles().await;
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    sts_api
        .patch(
            "ingester-zone-b",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"e2e/poke": "halted"}}})),
        )
        .await?;
    eventually(
        "the group reconciled after the poke",
        Duration::from_secs(30),
        || async { Ok((group_reconciles().await > reconciles_before).then_some(())) },
    )
    .await?;
    let s = snapshot(&client, &ns.name, &old).await?;
    assert_eq!(
        (s["b"], s["c"]),
        ((0, 0), (0, 0)),
        "zones b and c must wait for zone a: {s:?}"
    );
    assert_eq!(
        deleted_by(&one).await + deleted_by(&two).await,
        deletions_before,
        "a pod was deleted while zone a has a pod not ready"
    );
    // Recover: the rollout resumes and finishes, one zone at a time, within the budget.
    pods.patch(
        "ingester-zone-a-0",
        &PatchParams::default(),
        &Patch::Merge(flip(None)),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let s = snapshot(&client, &ns.name, &old).await?;
        let busy = s.values().filter(|(nr, _)| *nr > 0).count();
        max_zones_busy = max_zones_busy.max(busy);
        max_not_ready = max_not_ready.max(s.values().map(|(nr, _)| *nr).max().unwrap_or(0));
        if s.values().all(|v| *v == (0, 3)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout did not finish: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(max_zones_busy <= 1, "two zones were unavailable at once");
    assert!(
        max_not_ready <= 2,
        "more than max-unavailable pods down in a zone: {max_not_ready}"
    );

    // currentRevision advanced on every zone.
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        "currentRevision advanced",
        Duration::from_secs(30),
        || async {
            let mut done = true;
            for zone in ZONES {
                let st = sts_api
                    .get(&format!("ingester-zone-{zone}"))
                    .await?
                    .status
                    .unwrap_or_default();
                done &= st.current_revision.is_some() && st.current_revision == st.update_revision;
            }
            Ok(done.then_some(()))
        },
    )
    .await?;

    // Only the leader acted.
    let (d1, d2) = (deleted_by(&one).await, deleted_by(&two).await);
    assert!(d1 >= 0.0 && d2 >= 0.0);
    assert!(
        (d1 == 0.0) != (d2 == 0.0),
        "exactly one replica deletes pods: {d1} vs {d2}"
    );
    assert!(
        d1 + d2 >= 9.0,
        "every pod was replaced by the operator: {d1} + {d2}"
    );
    Ok(())
}

fn json_label(value: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"labels": {FAKE_READY_LABEL: value}}})
}

fn start_operator(ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    strata_e2e::services::start_rollout_operator(ns, extra)
}

fn plain_zone(zone: &str, group: &str, replicas: i32, labels: &str, annotations: &str) -> String {
    strata_e2e::support::group_stateful_set(
        &format!("{group}-zone-{zone}"),
        group,
        replicas,
        labels,
        annotations,
    )
}

async fn replicas(api: &Api<StatefulSet>, name: &str) -> Result<i32> {
    Ok(api
        .get(name)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1))
}

#[tokio::test]
async fn a_follower_zone_scales_down_only_after_the_minimum_time() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "follower").await?;
    let recorded = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())?;
    let just_now = recorded.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let follow = r#""grafana.com/rollout-downscale-leader": store-zone-a"#;
    apply_yaml(&client, &ns.name, &plain_zone("a", "store", 3, "", "")).await?;
    // Zone b must wait 8 s after zone c's last downscale; zone c has no such constraint.
    apply_yaml(
        &client,
        &ns.name,
        &plain_zone(
            "b",
            "store",
            3,
            r#", "grafana.com/min-time-between-zones-downscale": 8s"#,
            follow,
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns.name,
        &plain_zone(
            "c",
            "store",
            3,
            "",
            &format!(r#"{follow}, "grafana.com/last-downscale": "{just_now}""#),
        ),
    )
    .await?;
    let _operator = start_operator(&ns.name, &[])?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    sts.patch(
        "store-zone-a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
    )
    .await?;
    eventually(
        "zone c follows at once",
        Duration::from_secs(20),
        || async { Ok((replicas(&sts, "store-zone-c").await? == 1).then_some(())) },
    )
    .await?;
    assert_eq!(
        replicas(&sts, "store-zone-b").await?,
        3,
        "zone b must still wait"
    );
    eventually(
        "zone b follows after the minimum time",
        Duration::from_secs(30),
        || async { Ok((replicas(&sts, "store-zone-b").await? == 1).then_some(())) },
    )
    .await?;
    // The product's promise, on the annotation's own clock: zone b went down no sooner than
    // 8 s after zone c's recorded downscale. Seen after the fact, so a correct operator is
    // always seen at or past that time, however slow the machine (no margin needed).
    let seen = jiff::Timestamp::now();
    let earliest = recorded.checked_add(jiff::SignedDuration::from_secs(8))?;
    assert!(
        seen >= earliest,
        "zone b scaled down before its minimum time: seen at {seen}, 8 s after {just_now} is {earliest}"
    );
    Ok(())
}

/// Installs the ReplicaTemplate CRD and creates template `name` with `replicas`, selecting
/// the pods of `name`-zone-a.
async fn replica_template(
    client: &kube::Client,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    apply_shipped_crd(client, ns, "replica-templates.yaml").await?;
    let template = format!(
        "apiVersion: rollout-operator.grafana.com/v1\nkind: ReplicaTemplate\nmetadata: {{name: {name}}}\nspec: {{replicas: {replicas}, labelSelector: name={name}-zone-a}}\n"
    );
    eventually(
        "ReplicaTemplate served",
        Duration::from_secs(30),
        || async { Ok(apply_yaml(client, ns, &template).await.ok()) },
    )
    .await?;
    Ok(())
}

/// Scales template `name` through its scale subresource, as an HPA would.
fn scale_template(ns: &str, name: &str, replicas: i32) -> Result<()> {
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            ns,
            "scale",
            &format!("replicatemplates.rollout-operator.grafana.com/{name}"),
            &format!("--replicas={replicas}"),
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn replicas_mirror_a_replica_template_and_are_written_back() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "mirror").await?;
    replica_template(&client, &ns.name, "querier", 2).await?;
    let mirror = r#""grafana.com/rollout-mirror-replicas-from-resource-name": querier, "grafana.com/rollout-mirror-replicas-from-resource-kind": ReplicaTemplate, "grafana.com/rollout-mirror-replicas-from-resource-api-version": rollout-operator.grafana.com/v1"#;
    apply_yaml(
        &client,
        &ns.name,
        &plain_zone("a", "querier", 1, "", mirror),
    )
    .await?;
    let _operator = start_operator(&ns.name, &[])?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    eventually("mirrored to 2", Duration::from_secs(30), || async {
        Ok((replicas(&sts, "querier-zone-a").await? == 2).then_some(()))
    })
    .await?;
    scale_template(&ns.name, "querier", 4)?;
    eventually("mirrored to 4", Duration::from_secs(30), || async {
        Ok((replicas(&sts, "querier-zone-a").await? == 4).then_some(()))
    })
    .await?;
    // The StatefulSet's replicas are written back to the template's status.
    eventually("written back", Duration::from_secs(30), || async {
        let out = cluster()
            .kubectl()
            .args([
                "-n",
                &ns.name,
                "get",
                "replicatemplates.rollout-operator.grafana.com",
                "querier",
                "-o",
                "jsonpath={.status.replicas}",
            ])
            .output()?;
        Ok((String::from_utf8_lossy(&out.stdout) == "4").then_some(()))
    })
    .await?;
    Ok(())
}

/// Stand-in for the pods' delayed-downscale endpoints (the operator reaches it through its
/// test-only address override; the `Host` header names the pod): answers POST with the
/// preparation time set for the pod and records every call.
#[derive(Clone)]
struct DelayEndpoints {
    prepared_at: std::sync::Arc<std::sync::Mutex<BTreeMap<String, i64>>>,
    calls: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    /// The test namespace's pods, to name the pod behind a call's address.
    pods: Api<k8s_openapi::api::core::v1::Pod>,
    namespace: String,
}

impl DelayEndpoints {
    fn new(client: &kube::Client, namespace: &str) -> Self {
        Self {
            prepared_at: Default::default(),
            calls: Default::default(),
            pods: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_string(),
        }
    }

    async fn start(&self) -> Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let me = self.clone();
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method, headers: axum::http::HeaderMap| {
                let me = me.clone();
                async move {
                    let host = headers
                        .get(axum::http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or_default();
                    let pod = strata_e2e::pod_endpoints::pod_behind(&me.pods, &me.namespace, host)
                        .await
                        .unwrap_or_default();
                    me.calls
                        .lock()
                        .unwrap()
                        .push((method.to_string(), pod.clone()));
                    let at = me.prepared_at.lock().unwrap().get(&pod).copied();
                    match (method.as_str(), at) {
                        ("POST", Some(at)) => (
                            axum::http::StatusCode::OK,
                            format!("{{\"timestamp\": {at}}}"),
                        ),
                        ("POST", None) => {
                            (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new())
                        }
                        _ => (axum::http::StatusCode::OK, String::new()),
                    }
                }
            },
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(address)
    }

    fn prepare(&self, pod: &str, ago: Duration) {
        let at = jiff::Timestamp::now().as_second() - ago.as_secs() as i64;
        self.prepared_at.lock().unwrap().insert(pod.to_string(), at);
    }

    fn called(&self, method: &str, pod: &str) -> bool {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .any(|(m, p)| m == method && p == pod)
    }
}

/// Zone a of group ingester (3 replicas) mirroring ReplicaTemplate `ingester`, with a 1 h
/// delayed downscale negotiated at its pods' `:8080/ingester/prepare-delayed-downscale`.
async fn apply_delayed_zone(client: &kube::Client, ns: &str) -> Result<()> {
    let annotations = r#""grafana.com/rollout-mirror-replicas-from-resource-name": ingester, "grafana.com/rollout-mirror-replicas-from-resource-kind": ReplicaTemplate, "grafana.com/rollout-mirror-replicas-from-resource-api-version": rollout-operator.grafana.com/v1, "grafana.com/rollout-delayed-downscale": 1h, "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod:8080/ingester/prepare-delayed-downscale""#;
    apply_yaml(client, ns, &plain_zone("a", "ingester", 3, "", annotations)).await?;
    Ok(())
}

#[tokio::test]
async fn a_delayed_downscale_removes_only_pods_prepared_long_enough_ago() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "delayed").await?;
    replica_template(&client, &ns.name, "ingester", 3).await?;
    let endpoints = DelayEndpoints::new(&client, &ns.name);
    let address = endpoints.start().await?;
    // Pod 2 prepared two hours ago, pod 1 only now: with a 1h delay only pod 2 may go.
    endpoints.prepare("ingester-zone-a-2", Duration::from_secs(7200));
    endpoints.prepare("ingester-zone-a-1", Duration::ZERO);
    apply_delayed_zone(&client, &ns.name).await?;
    let address = address.to_string();
    let operator = start_operator(&ns.name, &["--pod-address-override", &address])?;
    // Stable at start-up: the surviving pods' stale preparations are cancelled once.
    eventually("start-up cancel sweep", Duration::from_secs(30), || async {
        Ok((0..3)
            .all(|i| endpoints.called("DELETE", &format!("ingester-zone-a-{i}")))
            .then_some(()))
    })
    .await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    scale_template(&ns.name, "ingester", 1)?;
    eventually(
        "partial downscale to 2",
        Duration::from_secs(30),
        || async { Ok((replicas(&sts, "ingester-zone-a").await? == 2).then_some(())) },
    )
    .await?;
    assert!(endpoints.called("POST", "ingester-zone-a-1"));
    assert!(endpoints.called("POST", "ingester-zone-a-2"));
    assert!(
        !endpoints.called("POST", "ingester-zone-a-0"),
        "the surviving pod is never asked to prepare"
    );
    // The operator looks at the group again (an unrelated change to the StatefulSet wakes it;
    // the group's own reconcile counter shows it ran) and still keeps pod 1.
    let before = operator.group_reconciles("ingester").await?;
    sts.patch(
        "ingester-zone-a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"e2e/poke": "1"}}})),
    )
    .await?;
    eventually(
        "the operator reconciled the group again",
        Duration::from_secs(30),
        || async { Ok((operator.group_reconciles("ingester").await? > before).then_some(())) },
    )
    .await?;
    assert_eq!(
        replicas(&sts, "ingester-zone-a").await?,
        2,
        "pod 1 was prepared too recently"
    );
    // Pod 1's preparation is now old enough; any change to the group makes the operator ask
    // again (the resync would too, later).
    endpoints.prepare("ingester-zone-a-1", Duration::from_secs(7200));
    sts.patch(
        "ingester-zone-a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"touch": "1"}}})),
    )
    .await?;
    eventually("downscale to 1", Duration::from_secs(30), || async {
        Ok((replicas(&sts, "ingester-zone-a").await? == 1).then_some(()))
    })
    .await?;
    Ok(())
}

/// The pods a ZoneAwarePodDisruptionBudget covers carry `grafana.com/ready-time` (what its
/// `crossZoneEvictionDelay` reads), written by the operator's leader once a pod is ready and
/// removed while it is not; pods outside every budget are left alone.
#[tokio::test]
async fn pods_covered_by_a_zpdb_carry_their_ready_time() -> Result<()> {
    const READY_TIME: &str = "grafana.com/ready-time";
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "ready-time").await?;
    apply_shipped_crd(&client, &ns.name, "zone-aware-pod-disruption-budget.yaml").await?;
    let zpdb = "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: store}\nspec: {maxUnavailable: 1, selector: {matchLabels: {rollout-group: store}}}\n";
    eventually("ZPDB served", Duration::from_secs(30), || async {
        Ok(apply_yaml(&client, &ns.name, zpdb).await.ok())
    })
    .await?;
    apply_yaml(
        &client,
        &ns.name,
        &rollout_zone("store", "a", 2, "example.invalid/store:1", 1, false),
    )
    .await?;
    // Outside every budget: same namespace, no rollout-group label.
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: loner}\nspec: {containers: [{name: c, image: x}]}\n",
    )
    .await?;
    let _operator = start_operator(&ns.name, &[])?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let stamp = |pod: &Pod| pod.annotations().get(READY_TIME).cloned();
    eventually("both pods stamped", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels("rollout-group=store"))
            .await?;
        let stamped = list
            .items
            .iter()
            .filter(|p| ready(p) && stamp(p).is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()))
            .count();
        Ok((stamped == 2).then_some(()))
    })
    .await?;
    let first = stamp(&pods.get("store-zone-a-0").await?);
    pods.patch(
        "store-zone-a-1",
        &PatchParams::default(),
        &Patch::Merge(json_label(Some("false"))),
    )
    .await?;
    eventually(
        "the NotReady pod unstamped",
        Duration::from_secs(60),
        || async {
            let pod = pods.get("store-zone-a-1").await?;
            Ok((!pod_ready(&pod) && stamp(&pod).is_none()).then_some(()))
        },
    )
    .await?;
    // A stamp already there is never moved.
    assert_eq!(stamp(&pods.get("store-zone-a-0").await?), first);
    assert_eq!(
        stamp(&pods.get("loner").await?),
        None,
        "a pod outside every budget"
    );
    Ok(())
}

/// A batch of two with an old pod already terminating (held by a finalizer): that pod holds one
/// slot and is never deleted again, and the other slot goes to the next old pod — the anchor's
/// rule. The held pod is released at the end and the zone finishes.
#[tokio::test]
async fn a_terminating_pod_holds_one_slot_of_the_batch_and_the_next_pod_takes_the_other()
-> Result<()> {
    const HOLD: &str = "e2e.strata.dev/hold";
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "rollout-held").await?;
    let zone = |image: &str| rollout_zone("ingester", "a", 3, image, 2, false);
    apply_yaml(&client, &ns.name, &zone("example.invalid/ingester:1")).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let old = eventually(
        "3 ready pods, revision published",
        Duration::from_secs(60),
        || async {
            let ready_pods = pods.list(&ListParams::default()).await?.items;
            let revision = sts
                .get("ingester-zone-a")
                .await?
                .status
                .and_then(|s| s.update_revision)
                .unwrap_or_default();
            Ok(
                (ready_pods.iter().filter(|p| ready(p)).count() == 3 && !revision.is_empty())
                    .then_some(revision),
            )
        },
    )
    .await?;
    // Pod 0 starts terminating and stays so: the finalizer holds it.
    pods.patch(
        "ingester-zone-a-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await?;
    pods.delete("ingester-zone-a-0", &Default::default())
        .await?;
    apply_yaml(&client, &ns.name, &zone("example.invalid/ingester:2")).await?;
    let operator = start_operator(&ns.name, &[])?;

    let updated = |p: &Pod| {
        ready(p)
            && p.labels()
                .get("controller-revision-hash")
                .map(String::as_str)
                != Some(&old)
    };
    eventually(
        "pods 1 and 2 replaced while pod 0 is held terminating",
        Duration::from_secs(60),
        || async {
            let now = pods.list(&ListParams::default()).await?.items;
            let held = now.iter().any(|p| {
                p.name_any() == "ingester-zone-a-0" && p.metadata.deletion_timestamp.is_some()
            });
            assert!(held, "pod 0 must still be held: {:?}", names(&now));
            let done = ["ingester-zone-a-1", "ingester-zone-a-2"]
                .iter()
                .all(|n| now.iter().any(|p| p.name_any() == *n && updated(p)));
            Ok(done.then_some(()))
        },
    )
    .await?;
    assert_eq!(
        deleted_by(&operator).await,
        2.0,
        "the operator deleted pods 1 and 2 only, never the terminating pod 0"
    );

    // Released, pod 0 comes back on the new revision and the zone finishes.
    pods.patch(
        "ingester-zone-a-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually("zone a finished", Duration::from_secs(60), || async {
        let st = sts.get("ingester-zone-a").await?.status.unwrap_or_default();
        let now = pods.list(&ListParams::default()).await?.items;
        Ok((now.iter().filter(|p| updated(p)).count() == 3
            && st.current_revision == st.update_revision)
            .then_some(()))
    })
    .await?;
    assert_eq!(
        deleted_by(&operator).await,
        2.0,
        "pod 0 was never deleted by us"
    );
    Ok(())
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| {
            format!(
                "{}{}",
                p.name_any(),
                if p.metadata.deletion_timestamp.is_some() {
                    " (terminating)"
                } else {
                    ""
                }
            )
        })
        .collect()
}

/// The notes of the `DelayedDownscale` Events on StatefulSet `name`.
async fn delayed_notes(client: &kube::Client, ns: &str, name: &str) -> Result<Vec<String>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("DelayedDownscale")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .filter_map(|e| e.note)
        .collect())
}

/// With a 1 h delayed downscale from 3 to 1, pod 2 prepared two hours ago and pod 1 answering
/// its prepare call too late, with a body without a timestamp, with garbage, or not at all:
/// the downscale never proceeds early, and each decision (the pod, why it holds) is an Event
/// on the StatefulSet. Once pod 1 reports an old enough time, the zone goes to 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_downscale_never_goes_early_on_a_late_invalid_or_missing_answer() -> Result<()> {
    use strata_e2e::pod_endpoints::{Answer, PodEndpoints};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "delayed-faults").await?;
    replica_template(&client, &ns.name, "ingester", 3).await?;
    let pods = PodEndpoints::start(&ns.name).await?;
    let long_ago = jiff::Timestamp::now().as_second() - 7200;
    let prepared = format!("{{\"timestamp\": {long_ago}}}");
    pods.set("ingester-zone-a-2", "POST", Answer::Ok(prepared.clone()));
    apply_delayed_zone(&client, &ns.name).await?;
    let _operator = start_operator(
        &ns.name,
        &[
            "--pod-address-override",
            &pods.address,
            "--pod-timeout",
            "1s",
        ],
    )?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    // (case, the pod that answers badly, its answer, the reason the decision names); the
    // other pod going away answers with its time of two hours ago.
    let cases = [
        (
            "late",
            "ingester-zone-a-1",
            Answer::Late(Duration::from_secs(3), prepared.clone()),
            "timed out",
        ),
        (
            "no timestamp",
            "ingester-zone-a-1",
            Answer::Ok(r#"{"timestamp": "soon"}"#.into()),
            "response has no non-zero timestamp",
        ),
        (
            "garbage",
            "ingester-zone-a-1",
            Answer::Ok("<html>busy</html>".into()),
            "unparsable response",
        ),
        ("no answer", "ingester-zone-a-2", Answer::Hang, "timed out"),
    ];
    for (case, bad, answer, reason) in cases {
        for pod in ["ingester-zone-a-1", "ingester-zone-a-2"] {
            pods.set(pod, "POST", Answer::Ok(prepared.clone()));
        }
        pods.set(bad, "POST", answer);
        scale_template(&ns.name, "ingester", 1)?;
        let held = format!("held: pod {bad}: {reason}");
        let note = eventually(
            &format!("{case}: a held decision published"),
            Duration::from_secs(45),
            || async {
                let notes = delayed_notes(&client, &ns.name, "ingester-zone-a").await?;
                Ok(notes.into_iter().find(|n| n.contains(&held)))
            },
        )
        .await?;
        let good = if bad.ends_with('1') {
            "ingester-zone-a-2"
        } else {
            "ingester-zone-a-1"
        };
        assert!(
            note.contains(&format!("{good} prepared at")),
            "{case}: the prepared pod is listed with its time: {note}"
        );
        assert_eq!(
            replicas(&sts, "ingester-zone-a").await?,
            3,
            "{case}: nothing goes while {bad} holds ({note})"
        );
        // Back to stable before the next case.
        scale_template(&ns.name, "ingester", 3)?;
    }
    // The "garbage" decision once more: folded into the first Event's series, not a new Event.
    pods.set("ingester-zone-a-2", "POST", Answer::Ok(prepared.clone()));
    pods.set(
        "ingester-zone-a-1",
        "POST",
        Answer::Ok("<html>busy</html>".into()),
    );
    scale_template(&ns.name, "ingester", 1)?;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let garbage = eventually(
        "the repeated decision folded into one Event",
        Duration::from_secs(45),
        || async {
            let garbage: Vec<_> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.note.as_deref().is_some_and(|n| {
                        n.contains("held: pod ingester-zone-a-1: unparsable response")
                    })
                })
                .collect();
            let folded = garbage
                .iter()
                .any(|e| e.series.as_ref().is_some_and(|s| s.count == 2));
            Ok(folded.then_some(garbage))
        },
    )
    .await?;
    assert_eq!(garbage.len(), 1, "one Event for one decision: {garbage:?}");
    assert_eq!(replicas(&sts, "ingester-zone-a").await?, 3);
    pods.set("ingester-zone-a-1", "POST", Answer::Ok(prepared));
    scale_template(&ns.name, "ingester", 1)?;
    eventually("downscale to 1", Duration::from_secs(45), || async {
        Ok((replicas(&sts, "ingester-zone-a").await? == 1).then_some(()))
    })
    .await?;
    // The decision's Event is published after the scale itself: wait for it too.
    let went = eventually(
        "the downscale's decision published",
        Duration::from_secs(15),
        || async {
            let notes = delayed_notes(&client, &ns.name, "ingester-zone-a").await?;
            Ok(notes.into_iter().find(|n| {
                n.contains("scale 3 -> 1: every pod going away prepared at least 1h ago")
            }))
        },
    )
    .await;
    assert!(
        went.is_ok(),
        "{:?}",
        delayed_notes(&client, &ns.name, "ingester-zone-a").await?
    );
    Ok(())
}

/// The uid of every pod of `ns`, by name.
async fn pod_uids(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.metadata.uid.unwrap_or_default()))
        .collect())
}

/// The three zones of group `ingester` on image `:1`, Ready, in each of `namespaces`; their
/// revisions by namespace.
async fn ready_groups(
    client: &kube::Client,
    namespaces: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let none = BTreeMap::new();
    let mut old = BTreeMap::new();
    for ns in namespaces {
        for zone in ZONES {
            apply_yaml(
                client,
                ns,
                &zone_yaml(zone, "example.invalid/ingester:1", false),
            )
            .await?;
        }
        eventually(
            &format!("9 ready pods in {ns}"),
            Duration::from_secs(60),
            || async {
                let s = snapshot(client, ns, &none).await?;
                Ok(s.values()
                    .all(|(nr, up)| *nr == 0 && *up == 3)
                    .then_some(()))
            },
        )
        .await?;
        let revisions = eventually("revisions published", Duration::from_secs(30), || async {
            let r = revisions(client, ns).await?;
            Ok(r.values().all(|v| !v.is_empty()).then_some(r))
        })
        .await?;
        old.insert(ns.to_string(), revisions);
    }
    Ok(old)
}

/// Moves every zone of `namespaces` to image `:2`.
async fn change_templates(client: &kube::Client, namespaces: &[&str]) -> Result<()> {
    for ns in namespaces {
        for zone in ZONES {
            apply_yaml(
                client,
                ns,
                &zone_yaml(zone, "example.invalid/ingester:2", false),
            )
            .await?;
        }
    }
    Ok(())
}

/// Waits until the group of each of `namespaces` rolled; fails if at any look two zones of
/// one group were down at once.
async fn all_rolled(
    client: &kube::Client,
    namespaces: &[&str],
    old: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<()> {
    let busiest = std::sync::atomic::AtomicUsize::new(0);
    eventually("the groups rolled", Duration::from_secs(180), || async {
        let mut done = true;
        for ns in namespaces {
            let s = snapshot(client, ns, &old[*ns]).await?;
            let down = s.values().filter(|(nr, _)| *nr > 0).count();
            busiest.fetch_max(down, std::sync::atomic::Ordering::Relaxed);
            done &= s.values().all(|(nr, up)| *nr == 0 && *up == 3);
        }
        Ok(done.then_some(()))
    })
    .await?;
    let busiest = busiest.into_inner();
    anyhow::ensure!(
        busiest <= 1,
        "{busiest} zones of one group were down at once"
    );
    Ok(())
}

/// The namespace the operator must leave alone: the same pods as `before`, none updated.
async fn untouched(
    client: &kube::Client,
    ns: &str,
    before: &BTreeMap<String, String>,
    old: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<()> {
    anyhow::ensure!(
        &pod_uids(client, ns).await? == before,
        "pods of {ns} replaced"
    );
    let s = snapshot(client, ns, &old[ns]).await?;
    anyhow::ensure!(s.values().all(|(_, up)| *up == 0), "{ns} updated: {s:?}");
    Ok(())
}

/// Each namespace's group series are named by namespace; `absent` appears in none.
async fn metrics_by_namespace(
    operator: &ServiceProcess,
    present: &[&str],
    absent: &str,
) -> Result<()> {
    let (200, body) = http_get(operator.admin.unwrap(), "/metrics").await? else {
        anyhow::bail!("no metrics");
    };
    for ns in present {
        let series = format!(
            "rollout_operator_group_reconciles_total{{rollout_group=\"ingester\",namespace=\"{ns}\"}}"
        );
        anyhow::ensure!(body.contains(&series), "{series} missing");
    }
    anyhow::ensure!(!body.contains(absent), "metrics name {absent}");
    Ok(())
}

/// One install, many namespaces (#55 item 2): one operator given two namespaces rolls the
/// three-zone group of each at once, one zone at a time per group; a third namespace with the
/// same group, not listed, is never touched; its group metrics name each group's namespace.
#[tokio::test]
async fn one_operator_rolls_every_listed_namespace_and_touches_no_other() -> Result<()> {
    let client = cluster().client().await?;
    let listed = [
        TestNamespace::create(&client, "multi-a").await?,
        TestNamespace::create(&client, "multi-b").await?,
    ];
    let unlisted = TestNamespace::create(&client, "multi-x").await?;
    let names = [
        listed[0].name.as_str(),
        listed[1].name.as_str(),
        unlisted.name.as_str(),
    ];
    let old = ready_groups(&client, &names).await?;
    let before = pod_uids(&client, &unlisted.name).await?;
    let watch = format!("{},{}", listed[0].name, listed[1].name);
    let operator = start_service(
        "rollout-operator",
        cluster().kubeconfig(),
        &[
            "--watch-namespace",
            &watch,
            "--lease-namespace",
            &listed[0].name,
            "--leader-elect=false",
        ],
    )?;
    change_templates(&client, &names).await?;
    all_rolled(&client, &names[..2], &old).await?;
    untouched(&client, &unlisted.name, &before, &old).await?;
    metrics_by_namespace(&operator, &names[..2], &unlisted.name).await
}

/// Namespaces chosen by label (`--watch-namespace-selector`, #55 item 2): the operator rolls
/// the groups of the labelled namespaces and leaves an unlabelled one alone — though the chart
/// granted it the same rights there, so the selector is what holds it back; labelled later,
/// that namespace's group is rolled too.
#[tokio::test]
async fn a_namespace_selector_picks_where_the_operator_acts_and_follows_new_labels() -> Result<()> {
    let client = cluster().client().await?;
    let labelled = [
        TestNamespace::create(&client, "select-a").await?,
        TestNamespace::create(&client, "select-b").await?,
    ];
    let later = TestNamespace::create(&client, "select-x").await?;
    let names = [
        labelled[0].name.as_str(),
        labelled[1].name.as_str(),
        later.name.as_str(),
    ];
    // A value of this test's own: other tests' namespaces never match.
    let value = labelled[0].name.clone();
    let label = |ns: &str| {
        cluster()
            .kubectl()
            .args([
                "label",
                "namespace",
                ns,
                &format!("strata-e2e/rollouts={value}"),
            ])
            .output()
    };
    for ns in &names[..2] {
        anyhow::ensure!(label(ns)?.status.success(), "labelling {ns}");
    }
    let old = ready_groups(&client, &names).await?;
    let before = pod_uids(&client, &later.name).await?;
    let selector = format!("strata-e2e/rollouts={value}");
    let bound = format!("rolloutOperator.watchNamespaces={{{}}}", names.join(","));
    let args = [
        "--watch-namespace-selector",
        selector.as_str(),
        "--lease-namespace",
        names[0],
        "--leader-elect=false",
    ];
    let kubeconfig = strata_e2e::services::chart_identity_with(
        cluster().kubeconfig(),
        "rollout-operator",
        &args,
        &[bound.as_str()],
    )?;
    let operator =
        strata_e2e::services::start_service_with("rollout-operator", &kubeconfig, &args)?;
    change_templates(&client, &names).await?;
    all_rolled(&client, &names[..2], &old).await?;
    untouched(&client, &later.name, &before, &old).await?;
    metrics_by_namespace(&operator, &names[..2], &later.name).await?;
    // Labelled now: its group is rolled without anything else changing.
    anyhow::ensure!(
        label(&later.name)?.status.success(),
        "labelling {}",
        later.name
    );
    all_rolled(&client, &names[2..], &old).await?;
    Ok(())
}

/// A listed namespace that does not exist stops the operator at start with one line naming it
/// (run with the plane's admin identity: the chart's ServiceAccount may not read namespaces,
/// and then the check is skipped).
#[test]
fn a_namespace_that_does_not_exist_is_named_and_nothing_starts() -> Result<()> {
    let out = std::process::Command::new(strata_e2e::services::bin_dir().join("rollout-operator"))
        // As a user runs it: no backtrace under the error line.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .args([
            "--kubeconfig",
            &cluster().kubeconfig().to_string_lossy(),
            "--leader-elect=false",
            "--admin-address",
            "127.0.0.1:0",
            "--watch-namespace",
            "default,no-such-namespace-e2e",
        ])
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--watch-namespace")
            && stderr.contains("\"no-such-namespace-e2e\" does not exist"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    Ok(())
}
