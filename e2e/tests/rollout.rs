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
use strata_e2e::plane::{FAKE_READY_LABEL, free_port};
use strata_e2e::services::{ServiceProcess, bin_dir};
use strata_e2e::support::{
    TestNamespace, apply_yaml, cluster, eventually, http_get, parse_openmetrics,
};

const ZONES: [&str; 3] = ["a", "b", "c"];

fn zone_yaml(zone: &str, image: &str, paused: bool) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-{zone}
  labels: {{rollout-group: ingester}}
  annotations:
    rollout-max-unavailable: "2"
    grafana.com/rollout-paused: "{paused}"
spec:
  replicas: 3
  serviceName: ingester
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: ingester-zone-{zone}}}}}
  template:
    metadata: {{labels: {{name: ingester-zone-{zone}, rollout-group: ingester}}}}
    spec:
      nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}
      containers: [{{name: ingester, image: "{image}"}}]
"#
    )
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Per zone: (pods not ready or missing, pods at the update revision and ready).
async fn snapshot(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, (usize, usize)>> {
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let all = pods.list(&ListParams::default()).await?.items;
    let mut out = BTreeMap::new();
    for zone in ZONES {
        let sts = sts_api.get(&format!("ingester-zone-{zone}")).await?;
        let update = sts
            .status
            .as_ref()
            .and_then(|s| s.update_revision.clone())
            .unwrap_or_default();
        let mine: Vec<&Pod> = all
            .iter()
            .filter(|p| {
                p.labels().get("name").map(String::as_str) == Some(&format!("ingester-zone-{zone}"))
            })
            .collect();
        let not_ready =
            mine.iter().filter(|p| !ready(p)).count() + 3usize.saturating_sub(mine.len());
        let updated = mine
            .iter()
            .filter(|p| ready(p) && p.labels().get("controller-revision-hash") == Some(&update))
            .count();
        out.insert(zone.to_string(), (not_ready, updated));
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
    eventually("9 ready pods", Duration::from_secs(60), || async {
        let s = snapshot(&client, &ns.name).await?;
        Ok(s.values()
            .all(|(nr, up)| *nr == 0 && *up == 3)
            .then_some(()))
    })
    .await?;

    let start = |identity: &str| {
        let admin = format!("127.0.0.1:{}", free_port().unwrap());
        ServiceProcess::spawn_blocking(
            &bin_dir().join("rollout-operator"),
            cluster().kubeconfig(),
            &[
                "--admin-address",
                &admin,
                "--watch-namespace",
                &ns.name,
                "--lease-namespace",
                &ns.name,
                "--identity",
                identity,
            ],
            &std::env::temp_dir().join("strata-e2e-logs"),
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
        let s = snapshot(&client, &ns.name).await?;
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
    // Halted: for several seconds nothing in b or c is touched.
    for _ in 0..20 {
        let s = snapshot(&client, &ns.name).await?;
        assert_eq!(
            (s["b"], s["c"]),
            ((0, 0), (0, 0)),
            "zones b and c must wait for zone a: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Recover: the rollout resumes and finishes, one zone at a time, within the budget.
    pods.patch(
        "ingester-zone-a-0",
        &PatchParams::default(),
        &Patch::Merge(flip(None)),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let s = snapshot(&client, &ns.name).await?;
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
