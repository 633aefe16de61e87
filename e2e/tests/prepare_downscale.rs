//! prepare-downscale leaves no pod prepared: whenever a downscale does not go through after
//! pods were told to prepare — a later call fails, the replicas go back up before the pods are
//! removed — every pod called gets the undo DELETE, retried until it answers. A downscale
//! whose time cannot be written yet still goes through, and holds the other zones. The pods are stand-ins that keep a real pod's state (prepared
//! from a POST until a DELETE they answered).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use strata_e2e::admission::{
    kubectl_scale, namespace_args, register_prepare_downscale, start_behind_faults,
};
use strata_e2e::fault_proxy::{FaultProxy, Faults};
use strata_e2e::plane::{FAKE_READY_LABEL, free_port};
use strata_e2e::pod_endpoints::{Answer, PodEndpoints};
use strata_e2e::services::{ServiceProcess, start_service};
use strata_e2e::support::{
    DeleteOnDrop, TestNamespace, apply_yaml, cluster, eventually, pod_ready, stateful_set_settled,
};

const MARK: &str = "strata.dev/prepared-for-downscale";

/// A StatefulSet of rollout group `store` opted into prepare-downscale, its pods' endpoint on
/// port 80, with a minimum time of 1 h between its zones' downscales. `OrderedReady` keeps the
/// controller from removing pods while one of them is not ready.
fn zone(name: &str, replicas: u32, policy: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  labels:
    grafana.com/prepare-downscale: "true"
    rollout-group: store
    grafana.com/min-time-between-zones-downscale: 1h
  annotations:
    grafana.com/prepare-downscale-http-path: ingester/prepare-shutdown
    grafana.com/prepare-downscale-http-port: "80"
spec:
  replicas: {replicas}
  serviceName: {name}
  podManagementPolicy: {policy}
  selector: {{matchLabels: {{name: {name}}}}}
  template:
    metadata: {{labels: {{name: {name}}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
"#
    )
}

/// Waits until StatefulSet `name` runs exactly `replicas` ready pods and its status caught up
/// (prepare-downscale calls only pods that exist).
async fn settled(client: &kube::Client, ns: &str, name: &str, replicas: usize) -> Result<()> {
    stateful_set_settled(client, ns, name, replicas).await
}

/// The pods of `ns` that carry the prepared mark.
async fn marked(client: &kube::Client, ns: &str) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(&format!("{MARK}=true")))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Ends when no stand-in pod is prepared and no pod carries the mark.
async fn nothing_left_prepared(
    client: &kube::Client,
    ns: &str,
    pods: &PodEndpoints,
    within: Duration,
) -> Result<()> {
    eventually("no pod left prepared", within, || async {
        Ok((pods.prepared().is_empty() && marked(client, ns).await?.is_empty()).then_some(()))
    })
    .await
}

struct Setup {
    client: kube::Client,
    ns: TestNamespace,
    pods: PodEndpoints,
    _server: ServiceProcess,
    _hook: DeleteOnDrop,
    _proxy: Option<FaultProxy>,
}

/// A webhook server for the test's namespace (through a fault proxy when `faults` is given),
/// its prepare-downscale configuration, and the StatefulSets given, settled.
async fn setup(prefix: &str, faults: Option<Faults>, zones: &[(&str, u32, &str)]) -> Result<Setup> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    let pods = PodEndpoints::start(&ns.name).await?;
    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let mut args = namespace_args(&ns.name, &tls, &pods.address);
    args.extend([
        "--prepare-downscale-undo-after",
        "3s",
        "--pod-timeout",
        "2s",
    ]);
    let (server, proxy) = match faults {
        None => (
            start_service("admission-webhook", cluster().kubeconfig(), &args)?,
            None,
        ),
        Some(faults) => {
            let (server, proxy) = start_behind_faults(&args, faults).await?;
            (server, Some(proxy))
        }
    };
    let hook = register_prepare_downscale(&client, &ns.name, port).await?;
    for (name, replicas, policy) in zones {
        apply_yaml(&client, &ns.name, &zone(name, *replicas, policy)).await?;
    }
    for (name, replicas, _) in zones {
        settled(&client, &ns.name, name, *replicas as usize).await?;
    }
    Ok(Setup {
        client,
        ns,
        pods,
        _server: server,
        _hook: hook,
        _proxy: proxy,
    })
}

fn denial(out: &std::process::Output) -> String {
    assert!(
        !out.status.success(),
        "the downscale went through: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn replicas(client: &kube::Client, ns: &str, name: &str) -> Result<Option<i32>> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    Ok(sets.get(name).await?.spec.and_then(|s| s.replicas))
}

/// 3→1: store-2 prepares, store-1 answers 500, so the downscale is denied. Both pods were
/// called, so both get the undo; store-2 refuses it at first (unreachable) and keeps its mark,
/// is asked again with back-off, and is undone once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prepare_call_undoes_every_pod_called_even_one_unreachable_at_first() -> Result<()>
{
    let s = setup("undo-failed", None, &[("store", 3, "Parallel")]).await?;
    s.pods.set("store-1", "POST", Answer::Status(500));
    s.pods.set("store-2", "DELETE", Answer::Status(503));
    let stderr = denial(&kubectl_scale(&s.ns.name, "store", 1)?);
    assert!(
        stderr.contains(
            "is not allowed because one or more pods failed to prepare for shutdown. Failed: store-1 answered HTTP 500."
        ),
        "{stderr}"
    );
    assert_eq!(s.pods.count("POST", "store-2"), 1);
    assert_eq!(s.pods.count("POST", "store-1"), 1);
    assert_eq!(
        s.pods.count("POST", "store-0"),
        0,
        "the staying pod is never called"
    );
    eventually(
        "store-2 asked to undo again and again",
        Duration::from_secs(20),
        || async { Ok((s.pods.count("DELETE", "store-2") >= 3).then_some(())) },
    )
    .await?;
    assert_eq!(s.pods.prepared(), vec!["store-2".to_string()]);
    assert_eq!(
        marked(&s.client, &s.ns.name).await?,
        vec!["store-2".to_string()],
        "the pod not yet undone keeps its mark"
    );
    s.pods.set("store-2", "DELETE", Answer::Ok("ok".into()));
    nothing_left_prepared(&s.client, &s.ns.name, &s.pods, Duration::from_secs(90)).await?;
    assert_eq!(replicas(&s.client, &s.ns.name, "store").await?, Some(3));

    // A pod that hangs costs one call's timeout (2 s, inside the request's deadline) and is
    // named in the denial; it got the POST, so it is undone too.
    s.pods.set("store-1", "POST", Answer::Ok("ok".into()));
    s.pods.set("store-2", "POST", Answer::Hang);
    let stderr = denial(&kubectl_scale(&s.ns.name, "store", 1)?);
    assert!(
        stderr.contains(
            "one or more pods failed to prepare for shutdown. Failed: store-2: timed out"
        ),
        "{stderr}"
    );
    nothing_left_prepared(&s.client, &s.ns.name, &s.pods, Duration::from_secs(30)).await?;
    assert_eq!(replicas(&s.client, &s.ns.name, "store").await?, Some(3));
    Ok(())
}

/// 3→2 with every pod answering, but recording `grafana.com/last-downscale` on the
/// StatefulSet keeps failing. The time is recorded after the downscale lands (never during
/// its admission, where the write would make the admitted request conflict), so the downscale
/// goes through with its pod prepared; the server keeps the time it admitted it at, and the
/// other zone's downscale within the hour is refused on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downscale_whose_time_cannot_be_recorded_yet_still_holds_the_other_zones() -> Result<()> {
    let faults = Faults {
        throttle_every: 0,
        retry_after_seconds: 0,
        conflict_every: 0,
        failing_reads: "",
        failing_writes: "/statefulsets/store",
    };
    let s = setup(
        "undo-record",
        Some(faults),
        &[("store", 3, "Parallel"), ("zone-b", 1, "Parallel")],
    )
    .await?;
    let out = kubectl_scale(&s.ns.name, "store", 2)?;
    assert!(
        out.status.success(),
        "3→2 refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.pods.count("POST", "store-2") >= 1, "{:?}", s.pods.calls());
    assert_eq!(replicas(&s.client, &s.ns.name, "store").await?, Some(2));
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.ns.name);
    let recorded = sets
        .get("store")
        .await?
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key("grafana.com/last-downscale");
    assert!(!recorded, "the write was meant to fail");
    let stderr = denial(&kubectl_scale(&s.ns.name, "zone-b", 0)?);
    assert!(
        stderr.contains("statefulset store was downscaled at")
            && stderr.contains("between zone downscales"),
        "{stderr}"
    );
    assert_eq!(s.pods.count("POST", "zone-b-0"), 0);
    Ok(())
}

/// 10→9→10→9→10 while the controller cannot remove pods (one pod not ready, OrderedReady):
/// each downscale is allowed and prepares store-9, then the replicas go back up before store-9
/// is removed. The undo loop tells store-9 to undo each time; a downscale of the other zone
/// meanwhile is refused by the minimum time between zones without calling any pod. It ends
/// with no pod prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_going_back_up_before_the_pods_are_removed_leave_nothing_prepared() -> Result<()> {
    let s = setup(
        "undo-oscillate",
        None,
        &[("store", 10, "OrderedReady"), ("store-b", 1, "Parallel")],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns.name);
    let hold = |value: Option<&str>| {
        Patch::Merge(serde_json::json!({"metadata": {"labels": {FAKE_READY_LABEL: value}}}))
    };
    pods.patch("store-0", &PatchParams::default(), &hold(Some("false")))
        .await?;
    eventually("store-0 not ready", Duration::from_secs(30), || async {
        Ok((!pod_ready(&pods.get("store-0").await?)).then_some(()))
    })
    .await?;
    for round in 1..=2 {
        let (posts, deletes) = (
            s.pods.count("POST", "store-9"),
            s.pods.count("DELETE", "store-9"),
        );
        let out = kubectl_scale(&s.ns.name, "store", 9)?;
        assert!(
            out.status.success(),
            "round {round}: 10→9 refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // At least one more call: kube-apiserver runs the webhook again when another write
        // (the StatefulSet controller's status update) conflicts with the scale in between.
        assert!(
            s.pods.count("POST", "store-9") > posts,
            "round {round}: {:?}",
            s.pods.calls()
        );
        assert_eq!(
            s.pods.prepared(),
            vec!["store-9".to_string()],
            "round {round}"
        );
        let out = kubectl_scale(&s.ns.name, "store", 10)?;
        assert!(out.status.success(), "round {round}: 9→10 refused");
        let store_9 = pods.get("store-9").await?;
        assert!(
            store_9.metadata.deletion_timestamp.is_none(),
            "round {round}: store-9 was never on its way out"
        );
        nothing_left_prepared(&s.client, &s.ns.name, &s.pods, Duration::from_secs(45)).await?;
        assert!(s.pods.count("DELETE", "store-9") > deletes, "round {round}");
    }
    // The other zone within the hour: refused before any call.
    let stderr = denial(&kubectl_scale(&s.ns.name, "store-b", 0)?);
    assert!(
        stderr.contains("statefulset store was downscaled at")
            && stderr.contains("between zone downscales"),
        "{stderr}"
    );
    assert_eq!(s.pods.count("POST", "store-b-0"), 0);
    assert!(s.pods.prepared().is_empty());
    assert!(marked(&s.client, &s.ns.name).await?.is_empty());
    pods.patch("store-0", &PatchParams::default(), &hold(None))
        .await?;
    Ok(())
}
