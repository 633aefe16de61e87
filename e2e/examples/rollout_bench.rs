//! `make bench` part: the rollout-operator on the local control plane. Measures the
//! operator's RSS idle (nothing to coordinate), then with 100 StatefulSets × 10 pods (34
//! rollout groups of up to three zones), then the latency from a template change to the first
//! pod deletion, for several groups in turn (each group is left to finish rolling before the
//! next sample, and the time that took is reported too). Prints one JSON line.
//!
//! The operator binary is `$ROLLOUT_OPERATOR_BIN` (the bench builds it in release mode).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use strata_e2e::bench::{anchor_style, percentile, rss_kib, spawn_anchor_style, spawn_measured};
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, pod_ready,
};

const STATEFUL_SETS: usize = 100;
const REPLICAS: usize = 10;
const ZONES: [&str; 3] = ["a", "b", "c"];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn group_of(i: usize) -> String {
    format!("g{:02}", i / ZONES.len())
}

fn stateful_set_name(i: usize) -> String {
    format!("{}-zone-{}", group_of(i), ZONES[i % ZONES.len()])
}

fn stateful_set_yaml(i: usize) -> String {
    let (name, group, zone) = (stateful_set_name(i), group_of(i), ZONES[i % ZONES.len()]);
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  labels: {{rollout-group: {group}}}
  annotations: {{rollout-max-unavailable: "2"}}
spec:
  replicas: {REPLICAS}
  serviceName: {group}
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: {name}}}}}
  template:
    metadata: {{labels: {{name: {name}, rollout-group: {group}}}}}
    spec:
      nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}
      containers: [{{name: main, image: "example.invalid/{group}:1"}}]
"#
    )
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && pod_ready(pod)
}

async fn ready_pods(pods: &Api<Pod>, selector: &str) -> Result<usize> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    Ok(list.iter().filter(|p| ready(p)).count())
}

/// What one template change took: until kube-controller-manager published the new
/// `status.updateRevision` of the group's first StatefulSet (what any operator waits for before
/// it can tell old pods from new), and until the first pod of the group was deleted.
struct ChangeLatency {
    /// Until the API server answered the first StatefulSet patch.
    first_patch: Duration,
    update_revision: Option<Duration>,
    first_deletion: Duration,
}

/// Watches the StatefulSet `name` from before the change and reports when its
/// `status.updateRevision` differs from the one it had then.
fn watch_update_revision(
    sts: Api<k8s_openapi::api::apps::v1::StatefulSet>,
    name: String,
    started: std::sync::Arc<std::sync::OnceLock<Instant>>,
) -> tokio::task::JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = std::pin::pin!(watcher(sts, config).boxed());
        let mut before: Option<String> = None;
        while let Some(Ok(event)) = events.next().await {
            let (watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event else {
                continue;
            };
            let revision = s.status.and_then(|st| st.update_revision);
            match (&before, started.get()) {
                (None, _) => before = revision,
                (Some(old), Some(at)) if revision.as_ref() != Some(old) => {
                    return Some(at.elapsed());
                }
                _ => {}
            }
        }
        None
    })
}

/// Changes the template of every zone of `group` and returns the time from just before the
/// first change to the first pod of the group being deleted (deletionTimestamp set, or gone).
async fn template_change_to_first_deletion(
    client: &kube::Client,
    ns: &str,
    group: usize,
) -> Result<ChangeLatency> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("rollout-group={}", group_of(group * ZONES.len()));
    let mut events =
        std::pin::pin!(watcher(pods, watcher::Config::default().labels(&selector)).boxed());
    // The watch is established before the change, so no deletion can be missed.
    loop {
        match events.next().await.context("watch ended")?? {
            watcher::Event::InitDone => break,
            _ => continue,
        }
    }
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), ns);
    let started_at = std::sync::Arc::new(std::sync::OnceLock::new());
    let revision = watch_update_revision(
        sts.clone(),
        stateful_set_name(group * ZONES.len()),
        started_at.clone(),
    );
    // Let that watch see the current revision first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let _ = started_at.set(started);
    let mut first_patch = None;
    for zone in 0..ZONES.len() {
        let i = group * ZONES.len() + zone;
        if i >= STATEFUL_SETS {
            break;
        }
        let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": format!("example.invalid/{}:2", group_of(i))}
        ]}}}});
        sts.patch(
            &stateful_set_name(i),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
        first_patch.get_or_insert_with(|| started.elapsed());
    }
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => anyhow::bail!("no pod of group {group} deleted within 60s"),
            event = events.next() => match event.context("watch ended")?? {
                watcher::Event::Apply(pod) if pod.metadata.deletion_timestamp.is_some() => break,
                watcher::Event::Delete(_) => break,
                _ => {}
            }
        }
    }
    let first_deletion = started.elapsed();
    let update_revision = tokio::time::timeout(Duration::from_secs(5), revision)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
    Ok(ChangeLatency {
        first_patch: first_patch.unwrap_or_default(),
        update_revision,
        first_deletion,
    })
}

/// Waits until kube-controller-manager has posted every Event it queued: nothing new in the
/// namespace's Events for three seconds. Its API client is limited to 20 requests/s, shared
/// with the Events it records, so the 1,000 pod creations of the setup leave about a minute of
/// Event posts queued, and the StatefulSet controller's own writes (the new
/// `status.updateRevision` every operator waits for) queue behind them: measured here, 300 ms
/// instead of 20 ms. Both operators are measured on a settled controller-manager.
async fn controller_manager_settled(client: &kube::Client, ns: &str) -> Result<()> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last = None;
    let mut quiet = 0;
    while quiet < 3 && Instant::now() < deadline {
        let list = events.list(&ListParams::default()).await?.items;
        let signature = (
            list.len(),
            list.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>(),
        );
        quiet = if last == Some(signature) {
            quiet + 1
        } else {
            0
        };
        last = Some(signature);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let samples = env_or("BENCH_ROLLOUT_SAMPLES", 5);
    let idle_seconds = env_or("BENCH_ROLLOUT_IDLE_SECONDS", 10) as u64;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bench-rollout").await?;
    let ns = ns.name.clone();
    apply_shipped_crd(&client, &ns, "zone-aware-pod-disruption-budget.yaml").await?;
    apply_shipped_crd(&client, &ns, "replica-templates.yaml").await?;

    // Strata's flags, or the Grafana operator's command line (its binary, or Strata's in
    // compatibility mode).
    let operator = if anchor_style() {
        spawn_anchor_style("ROLLOUT_OPERATOR_BIN", &ns, &[])?.0
    } else {
        spawn_measured(
            "ROLLOUT_OPERATOR_BIN",
            "rollout-operator",
            &[
                "--watch-namespace",
                &ns,
                "--lease-namespace",
                &ns,
                "--log-filter",
                "warn",
            ],
        )?
    };
    let pid = operator.pid();
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let idle_rss = rss_kib(pid, "VmRSS:");

    let setup = Instant::now();
    for i in 0..STATEFUL_SETS {
        apply_yaml(&client, &ns, &stateful_set_yaml(i)).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let total = STATEFUL_SETS * REPLICAS;
    eventually(
        &format!("{total} ready pods"),
        Duration::from_secs(900),
        || async {
            let n = ready_pods(&pods, "rollout-group").await?;
            Ok((n == total).then_some(()))
        },
    )
    .await?;
    let setup_seconds = setup.elapsed().as_secs_f64();
    controller_manager_settled(&client, &ns).await?;
    // Let the operator observe the settled state (every group reconciled at least once).
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let loaded_rss = rss_kib(pid, "VmRSS:");

    let mut first_deletion_ms = Vec::new();
    let mut update_revision_ms = Vec::new();
    let mut first_patch_ms = Vec::new();
    let mut group_rolled_seconds = Vec::new();
    // An operator that reconciles on a fixed tick (the anchor: every 5 s) answers a change
    // after whatever is left of its interval. The previous group finishes rolling right after
    // one of its ticks, so changing the next group at once would always hit the worst phase;
    // the samples are spread evenly over the interval instead (no effect on an event-driven
    // operator but the wait).
    let interval = env_or("BENCH_ROLLOUT_PHASE_MS", 5000) as f64;
    for group in 0..samples {
        let phase = Duration::from_millis((interval * group as f64 / samples as f64) as u64);
        controller_manager_settled(&client, &ns).await?;
        tokio::time::sleep(phase).await;
        let change = template_change_to_first_deletion(&client, &ns, group).await?;
        let latency = change.first_deletion;
        first_deletion_ms.push(latency.as_secs_f64() * 1000.0);
        update_revision_ms.push(change.update_revision.map(|d| d.as_secs_f64() * 1000.0));
        first_patch_ms.push(change.first_patch.as_secs_f64() * 1000.0);
        let rolled = Instant::now();
        let selector = format!("rollout-group={}", group_of(group * ZONES.len()));
        let members = ZONES.len().min(STATEFUL_SETS - group * ZONES.len()) * REPLICAS;
        eventually(
            &format!("group {group} rolled"),
            Duration::from_secs(600),
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await?
                    .items;
                let updated = list
                    .iter()
                    .filter(|p| {
                        ready(p)
                            && p.spec.as_ref().is_some_and(|s| {
                                s.containers
                                    .iter()
                                    .any(|c| c.image.as_deref().is_some_and(|i| i.ends_with(":2")))
                            })
                    })
                    .count();
                Ok((updated == members).then_some(()))
            },
        )
        .await?;
        group_rolled_seconds.push(rolled.elapsed().as_secs_f64() + latency.as_secs_f64());
        eprintln!(
            "rollout bench: group {group}: first patch answered after {:.0} ms, updateRevision after {:?} ms, first deletion after {:.0} ms, rolled in {:.1} s",
            first_patch_ms[group],
            update_revision_ms[group].map(|ms| ms.round()),
            first_deletion_ms[group],
            group_rolled_seconds[group]
        );
    }
    let mut sorted = first_deletion_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let result = serde_json::json!({
        "stateful_sets": STATEFUL_SETS,
        "replicas": REPLICAS,
        "setup_seconds": setup_seconds,
        "idle_rss_kib": idle_rss,
        "loaded_rss_kib": loaded_rss,
        "after_rollouts_rss_kib": rss_kib(pid, "VmRSS:"),
        "peak_rss_kib": rss_kib(pid, "VmHWM:"),
        "first_deletion_ms": first_deletion_ms,
        "first_deletion_ms_median": percentile(&sorted, 0.5),
        "first_deletion_ms_max": percentile(&sorted, 1.0),
        "group_rolled_seconds": group_rolled_seconds,
        "update_revision_ms": update_revision_ms,
        "first_patch_ms": first_patch_ms,
    });
    println!("{result}");
    drop(operator);
    Ok(())
}
