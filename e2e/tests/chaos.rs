//! Fault injection (the subset of `make chaos` that runs in `make test`; docs/reliability.md
//! lists every scenario and its invariant).
//!
//! Hostile artifacts: a layer is Deployed from a good artifact, then the source publishes
//! hostile or broken revisions one after the other. Invariant for each: the layer turns Failed
//! with a condition naming the fault, nothing of the bad revision is applied, nothing of the
//! good one is pruned, a healthy neighbour layer stays Deployed, and the next good revision
//! deploys again.
//!
//! Leaders killed mid-action: the rollout-operator mid-rollout (every pod event checked
//! against the disruption budget) and the layer-controller mid-apply (nothing ever deleted).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::Value;
use strata_e2e::flux::{
    ArtifactServer, configmap_layer, configmap_yaml, create_gitrepository, gitrepository_layer,
    install_layer_crds, inventory_names, layer_status, ready_reason, set_artifact,
};
use strata_e2e::services::{delete_layers_then_stop, start_layer_service, two_replicas};
use strata_e2e::support::{
    TestNamespace, apply_yaml, cluster, eventually, pod_ready, rollout_zone,
};

fn cm(ns: &str, name: &str) -> String {
    configmap_yaml(ns, name, "")
}

/// Waits until the layer is Deployed at `revision`.
async fn deployed_at(client: &Client, layer: &str, revision: &str) -> Result<Value> {
    eventually(
        &format!("layer {layer} Deployed at {revision}"),
        Duration::from_secs(30),
        || async {
            let s = layer_status(client, layer).await?;
            Ok((s["state"] == "Deployed" && s["revision"] == revision).then_some(s))
        },
    )
    .await
}

/// Waits until the layer is Failed with a Ready condition mentioning `needle`.
async fn failed_with(client: &Client, layer: &str, needle: &str) -> Result<String> {
    eventually(
        &format!("layer {layer} Failed naming {needle:?}"),
        Duration::from_secs(30),
        || async {
            let s = layer_status(client, layer).await?;
            let message = ready_reason(&s);
            Ok((s["state"] == "Failed" && message.contains(needle)).then_some(message))
        },
    )
    .await
}

#[tokio::test]
async fn hostile_and_broken_artifacts_fail_precisely_and_change_nothing() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    create_gitrepository(&client, &ns).await?;
    // Archives up to 64 KiB, unpacked content up to 256 KiB.
    let controller = start_layer_service(
        "layer-controller",
        &ns,
        &["--orphan-grace", "1s", "--max-artifact-bytes", "65536"],
    )?;
    let layer = format!("{ns}-app");
    apply_yaml(&client, &ns, &gitrepository_layer(&ns, "app", "./app")).await?;
    // A neighbour layer on its own (ConfigMap) source: faults of the first never touch it.
    let neighbour = format!("{ns}-other");
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "other", "30s", &[("n.yaml", cm(&ns, "neighbour"))]),
    )
    .await?;

    let keep = cm(&ns, "keep");
    let good = |n: usize| {
        let (url, digest) = server.publish(
            &format!("good-{n}.tar.gz"),
            &[("app/keep.yaml", keep.as_str())],
        );
        (url, digest)
    };
    let (url, digest) = good(0);
    set_artifact(&client, &ns, "main@sha1:good0", &url, &digest).await?;
    deployed_at(&client, &layer, "main@sha1:good0")
        .await
        .with_context(|| controller.logs())?;

    let evil = cm(&ns, "evil");
    let valid = ArtifactServer::archive(&[
        ("app/keep.yaml", keep.as_str()),
        ("app/evil.yaml", evil.as_str()),
    ]);
    let bomb_text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: evil, namespace: {ns}}}\ndata: {{k: {}}}\n",
        "a".repeat(1 << 20)
    );
    let bomb = ArtifactServer::archive(&[
        ("app/keep.yaml", keep.as_str()),
        ("app/evil.yaml", bomb_text.as_str()),
    ]);
    assert!(
        bomb.len() < 65536,
        "the bomb itself is small: {} bytes",
        bomb.len()
    );
    let invalid_yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: evil\n";
    let unknown_kind = format!(
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {{name: evil, namespace: {ns}}}\n"
    );
    // (what, archive bytes, digest override, what the condition must say)
    let faults: Vec<(&str, Vec<u8>, Option<String>, String)> = vec![
        (
            "truncated",
            valid[..valid.len() / 2].to_vec(),
            None,
            "ArtifactFailed".into(),
        ),
        (
            "wrong digest",
            valid.clone(),
            Some(format!("sha256:{}", "0".repeat(64))),
            "digest mismatch".into(),
        ),
        (
            "path traversal",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/../../evil.yaml", evil.as_str()),
            ]),
            None,
            "escapes the archive root".into(),
        ),
        (
            "absolute path",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("/etc/evil.yaml", evil.as_str()),
            ]),
            None,
            "absolute path".into(),
        ),
        (
            "decompression bomb",
            bomb,
            None,
            "unpacked content exceeds 262144 bytes".into(),
        ),
        ("oversized", vec![0u8; 70_000], None, "65536".into()),
        (
            "invalid YAML",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/bad.yaml", invalid_yaml),
            ]),
            None,
            "bad.yaml".into(),
        ),
        (
            "a kind the cluster does not serve",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/gizmo.yaml", unknown_kind.as_str()),
            ]),
            None,
            "Gizmo".into(),
        ),
    ];
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (n, (what, bytes, digest_override, needle)) in faults.into_iter().enumerate() {
        let name = format!("bad-{n}.tar.gz");
        let (url, digest) = server.publish_bytes(&name, bytes);
        let revision = format!("main@sha1:bad{n}");
        set_artifact(
            &client,
            &ns,
            &revision,
            &url,
            &digest_override.unwrap_or(digest),
        )
        .await?;
        failed_with(&client, &layer, &needle)
            .await
            .with_context(|| format!("{what}: {}", controller.logs()))?;
        assert!(
            maps.get_opt("evil").await?.is_none(),
            "{what}: nothing of it applied"
        );
        assert!(
            maps.get_opt("keep").await?.is_some(),
            "{what}: nothing pruned"
        );
        assert_eq!(
            layer_status(&client, &neighbour).await?["state"],
            "Deployed",
            "{what}: the neighbour layer is unaffected"
        );
        // And the next good revision deploys again.
        let (url, digest) = good(n + 1);
        let revision = format!("main@sha1:good{}", n + 1);
        set_artifact(&client, &ns, &revision, &url, &digest).await?;
        deployed_at(&client, &layer, &revision)
            .await
            .with_context(|| format!("recovering from {what}: {}", controller.logs()))?;
    }

    // A symbolic link is not followed (nor applied): only regular files are manifests.
    let linked = layer_controller::source::pack_entries(
        &[("app/keep.yaml", keep.as_str())],
        &[("app/link.yaml", "/etc/passwd")],
    );
    let (url, digest) = server.publish_bytes("link.tar.gz", linked);
    set_artifact(&client, &ns, "main@sha1:link", &url, &digest).await?;
    let deployed = deployed_at(&client, &layer, "main@sha1:link")
        .await
        .with_context(|| controller.logs())?;
    assert_eq!(
        inventory_names(&deployed),
        vec!["keep"],
        "only the regular file"
    );
    delete_layers_then_stop(&[&layer, &neighbour], controller);
    Ok(())
}

/// Whether a pod counts as up: Ready and not terminating.
fn up(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && pod_ready(pod)
}

/// Waits until `total` pods are up on a revision other than the `old` ones.
async fn rollout_finished(
    pods: &Api<Pod>,
    old: &BTreeSet<String>,
    total: usize,
    within: Duration,
) -> Result<()> {
    eventually("the rollout finishes", within, || async {
        let list = pods.list(&Default::default()).await?.items;
        let updated = list
            .iter()
            .filter(|p| up(p))
            .filter(|p| {
                p.labels()
                    .get("controller-revision-hash")
                    .is_some_and(|h| !old.contains(h))
            })
            .count();
        Ok((updated == total).then_some(()))
    })
    .await
}

/// What a watch of every pod event saw during a rollout.
#[derive(Debug, Default)]
struct RolloutWatch {
    /// Most zones with a pod down at once, and most pods down in one zone, over every event.
    most_zones_down: usize,
    most_down_in_a_zone: usize,
    /// Every pod deletion seen: (pod name, uid, revision hash).
    deleted: Vec<(String, String, String)>,
    /// Events that broke an invariant, with what the watch saw then.
    violations: Vec<String>,
}

/// Follows every pod event in `ns` until `stop` fires, checking the rollout invariants after
/// each one: pods down per zone of `group` (`replicas` each), and that a pod is deleted only
/// while on one of the `old` revisions. `deletions` counts deletions as they happen.
fn watch_rollout(
    pods: Api<Pod>,
    group: &'static str,
    zones: &'static [&'static str],
    replicas: usize,
    old: BTreeSet<String>,
    deletions: tokio::sync::watch::Sender<usize>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<RolloutWatch> {
    tokio::spawn(async move {
        let mut seen = RolloutWatch::default();
        let mut current: BTreeMap<String, Pod> = BTreeMap::new();
        let mut listing: BTreeMap<String, Pod> = BTreeMap::new();
        let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).boxed());
        loop {
            let event = tokio::select! {
                _ = &mut stop => return seen,
                next = events.next() => match next {
                    Some(Ok(event)) => event,
                    Some(Err(_)) => continue,
                    None => return seen,
                },
            };
            let hash = |p: &Pod| {
                p.labels()
                    .get("controller-revision-hash")
                    .cloned()
                    .unwrap_or_default()
            };
            let record_deletion = |p: &Pod, seen: &mut RolloutWatch| {
                let revision = hash(p);
                if !old.contains(&revision) {
                    seen.violations.push(format!(
                        "{} (uid {}) deleted on the new revision {revision}",
                        p.name_any(),
                        p.uid().unwrap_or_default()
                    ));
                }
                seen.deleted
                    .push((p.name_any(), p.uid().unwrap_or_default(), revision));
                deletions.send_modify(|n| *n += 1);
            };
            match event {
                // A (re)list: judged once complete, not pod by pod (half a list would show
                // whole zones missing).
                watcher::Event::Init => {
                    listing.clear();
                    continue;
                }
                watcher::Event::InitApply(p) => {
                    listing.insert(p.name_any(), p);
                    continue;
                }
                watcher::Event::InitDone => current = std::mem::take(&mut listing),
                watcher::Event::Apply(p) => {
                    let before = current.get(&p.name_any());
                    let same_pod = before.is_some_and(|b| b.uid() == p.uid());
                    let was_terminating =
                        same_pod && before.is_some_and(|b| b.metadata.deletion_timestamp.is_some());
                    if p.metadata.deletion_timestamp.is_some() && !was_terminating {
                        record_deletion(&p, &mut seen);
                    }
                    current.insert(p.name_any(), p);
                }
                watcher::Event::Delete(p) => {
                    let terminating = current.get(&p.name_any()).is_some_and(|b| {
                        b.uid() == p.uid() && b.metadata.deletion_timestamp.is_some()
                    });
                    if !terminating {
                        record_deletion(&p, &mut seen);
                    }
                    current.remove(&p.name_any());
                }
            }
            let down: Vec<usize> = zones
                .iter()
                .map(|zone| {
                    let prefix = format!("{group}-zone-{zone}-");
                    let ready = current
                        .values()
                        .filter(|p| p.name_any().starts_with(&prefix) && up(p))
                        .count();
                    replicas.saturating_sub(ready)
                })
                .collect();
            let zones_down = down.iter().filter(|d| **d > 0).count();
            let most = down.iter().copied().max().unwrap_or(0);
            seen.most_zones_down = seen.most_zones_down.max(zones_down);
            seen.most_down_in_a_zone = seen.most_down_in_a_zone.max(most);
            if zones_down > 1 {
                seen.violations
                    .push(format!("pods down in {zones_down} zones at once: {down:?}"));
            }
        }
    })
}

/// The leader of two rollout-operator replicas is SIGKILLed right after its first pod
/// deletion of a three-zone rollout. Checked on every pod event of a watch opened before the
/// change (not by sampling): never two zones with a pod down, never more than max-unavailable
/// pods down in a zone, every deleted pod was on the old revision and each pod deleted once.
/// The standby takes over within 15 s and finishes the rollout.
#[tokio::test]
async fn rollout_leader_killed_mid_rollout_keeps_the_budget() -> Result<()> {
    const GROUP: &str = "store";
    const ZONES: &[&str] = &["a", "b", "c"];
    const REPLICAS: usize = 4;
    const MAX_UNAVAILABLE: usize = 2;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos-rollout").await?;
    let zone = |z: &str, image: &str| {
        rollout_zone(
            GROUP,
            z,
            REPLICAS as i32,
            image,
            MAX_UNAVAILABLE as u32,
            false,
        )
    };
    for z in ZONES {
        apply_yaml(&client, &ns.name, &zone(z, "example.invalid/store:1")).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let total = ZONES.len() * REPLICAS;
    let old: BTreeSet<String> = eventually("every pod up", Duration::from_secs(90), || async {
        let list = pods.list(&Default::default()).await?.items;
        let hashes: BTreeSet<String> = list
            .iter()
            .filter_map(|p| p.labels().get("controller-revision-hash").cloned())
            .collect();
        Ok((list.iter().filter(|p| up(p)).count() == total).then_some(hashes))
    })
    .await?;

    let (deletions_tx, mut deletions) = tokio::sync::watch::channel(0usize);
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let watch = watch_rollout(
        pods.clone(),
        GROUP,
        ZONES,
        REPLICAS,
        old.clone(),
        deletions_tx,
        stopped,
    );
    let [leader, standby] = two_replicas("rollout-operator", &ns.name).await?;

    for z in ZONES {
        apply_yaml(&client, &ns.name, &zone(z, "example.invalid/store:2")).await?;
    }
    tokio::time::timeout(Duration::from_secs(60), deletions.wait_for(|n| *n > 0))
        .await
        .context("the leader deleted no pod within 60 s")??;
    leader.signal("KILL");
    let killed = std::time::Instant::now();
    eventually("the standby leads", Duration::from_secs(15), || async {
        Ok(standby.leader().await.ok().filter(|v| *v == 1.0))
    })
    .await?;
    eprintln!(
        "takeover {:.1} s after kill -9",
        killed.elapsed().as_secs_f64()
    );
    rollout_finished(&pods, &old, total, Duration::from_secs(180)).await?;
    let _ = stop.send(());
    let seen = watch.await?;
    eprintln!(
        "most zones down {}, most down in a zone {}, {} deletions",
        seen.most_zones_down,
        seen.most_down_in_a_zone,
        seen.deleted.len()
    );
    assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
    assert_eq!(seen.most_zones_down, 1, "one zone at a time");
    assert!(
        seen.most_down_in_a_zone <= MAX_UNAVAILABLE && seen.most_down_in_a_zone > 0,
        "never more than max-unavailable down: {}",
        seen.most_down_in_a_zone
    );
    let uids: BTreeSet<&String> = seen.deleted.iter().map(|(_, uid, _)| uid).collect();
    let names: BTreeSet<&String> = seen.deleted.iter().map(|(name, _, _)| name).collect();
    assert_eq!(
        (seen.deleted.len(), uids.len(), names.len()),
        (total, total, total),
        "each old pod deleted exactly once: {:?}",
        seen.deleted
    );
    Ok(())
}

/// The leader of two layer-controller replicas is SIGKILLed while it applies a layer of 300
/// ConfigMaps: the standby takes over within 15 s, the layer ends Deployed with all 300 in its
/// inventory, and a watch opened before the layer existed sees no ConfigMap deleted, ever.
#[tokio::test]
async fn layer_leader_killed_mid_apply_prunes_nothing() -> Result<()> {
    const ITEMS: usize = 300;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos-layer-ha").await?;
    install_layer_crds(&client, &ns.name).await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let (created_tx, mut created) = tokio::sync::watch::channel(0usize);
    let deleted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watch = {
        let deleted = deleted.clone();
        let config = watcher::Config::default().labels("strata-e2e/chaos=item");
        let mut events = watcher(maps.clone(), config).boxed();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(_)) => created_tx.send_modify(|n| *n += 1),
                    Ok(watcher::Event::Delete(m)) => deleted.lock().unwrap().push(m.name_any()),
                    _ => {}
                }
            }
        })
    };
    let [leader, standby] = two_replicas("layer-controller", &ns.name).await?;
    let items: Vec<String> = (0..ITEMS)
        .map(|i| {
            configmap_yaml(
                &ns.name,
                &format!("item-{i:03}"),
                ", labels: {strata-e2e/chaos: item}",
            )
        })
        .collect();
    let layer = format!("{}-big", ns.name);
    apply_yaml(
        &client,
        &ns.name,
        &configmap_layer(
            &ns.name,
            "big",
            "120s",
            &[("items.yaml", items.join("---\n"))],
        ),
    )
    .await?;
    tokio::time::timeout(Duration::from_secs(60), created.wait_for(|n| *n > 0))
        .await
        .context("the leader applied nothing within 60 s")??;
    leader.signal("KILL");
    let applied_before_kill = *created.borrow();
    eventually("the standby leads", Duration::from_secs(15), || async {
        Ok(standby.leader().await.ok().filter(|v| *v == 1.0))
    })
    .await?;
    let status = eventually("the layer Deployed", Duration::from_secs(90), || async {
        let s = layer_status(&client, &layer).await?;
        Ok((s["state"] == "Deployed").then_some(s))
    })
    .await?;
    eprintln!("{applied_before_kill} ConfigMaps applied when the leader was killed");
    assert!(
        applied_before_kill < ITEMS,
        "the kill came after the apply finished: not a mid-apply kill"
    );
    let inventory = inventory_names(&status);
    let present = maps
        .list(&kube::api::ListParams::default().labels("strata-e2e/chaos=item"))
        .await?
        .items
        .len();
    delete_layers_then_stop(&[&layer], standby);
    watch.abort();
    assert_eq!(present, ITEMS, "every object of the layer exists");
    assert_eq!(
        inventory.iter().filter(|n| n.contains("item-")).count(),
        ITEMS,
        "the inventory holds every object: {inventory:?}"
    );
    assert!(
        deleted.lock().unwrap().is_empty(),
        "objects deleted: {:?}",
        deleted.lock().unwrap()
    );
    Ok(())
}

/// Every third write is answered 429 (`Retry-After: 1`) and every seventh 409 by a proxy in
/// front of kube-apiserver, for a layer-controller and a rollout-operator that reach the API
/// only through it. Invariants: the layer ends Deployed and the rollout finishes; no throttled
/// request is sent again before the second it was told to wait; nothing hot-loops (once both
/// are done, a 20 s window sees at most one request every two seconds through the proxy,
/// although the zone-aware PDB CRD the rollout-operator watches is not installed: its failing
/// list backs off).
#[tokio::test]
async fn api_throttling_and_conflicts_are_retried_without_a_hot_loop() -> Result<()> {
    use strata_e2e::fault_proxy::{FaultProxy, Faults};
    use strata_e2e::services::{ServiceProcess, bin_dir};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos-throttle").await?;
    install_layer_crds(&client, &ns.name).await?;
    let proxy = FaultProxy::start(
        client.clone(),
        Faults {
            throttle_every: 3,
            retry_after_seconds: 1,
            conflict_every: 7,
        },
    )
    .await?;
    let logs = std::env::temp_dir().join("strata-e2e-logs");
    let kubeconfig = proxy.kubeconfig(&logs)?;
    let start = |service: &str, extra: &[&str]| {
        let admin = format!("127.0.0.1:{}", strata_e2e::plane::free_port()?);
        let mut args = vec!["--admin-address", admin.as_str(), "--leader-elect=false"];
        args.extend_from_slice(extra);
        ServiceProcess::spawn_blocking(&bin_dir().join(service), &kubeconfig, &args, &logs)
    };

    // A rollout group of two zones, created directly, Ready before the operator starts.
    const ZONES: &[&str] = &["a", "b"];
    for z in ZONES {
        apply_yaml(
            &client,
            &ns.name,
            &rollout_zone("web", z, 2, "example.invalid/web:1", 1, false),
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let old: BTreeSet<String> = eventually("every pod up", Duration::from_secs(60), || async {
        let list = pods.list(&Default::default()).await?.items;
        let hashes = list
            .iter()
            .filter_map(|p| p.labels().get("controller-revision-hash").cloned())
            .collect();
        Ok((list.iter().filter(|p| up(p)).count() == 4).then_some(hashes))
    })
    .await?;

    let selector = format!("strata-e2e/suite={}", ns.name);
    let layers = start(
        "layer-controller",
        &[
            "--layer-selector",
            &selector,
            "--default-source-namespace",
            &ns.name,
            // The periodic re-apply (default every minute) is intended traffic, not a loop.
            "--sync-period=1h",
        ],
    )?;
    let rollout = start("rollout-operator", &["--watch-namespace", &ns.name])?;
    let items: Vec<String> = (0..20)
        .map(|i| configmap_yaml(&ns.name, &format!("throttled-{i:02}"), ""))
        .collect();
    let layer = format!("{}-throttled", ns.name);
    apply_yaml(
        &client,
        &ns.name,
        &configmap_layer(
            &ns.name,
            "throttled",
            "120s",
            &[("items.yaml", items.join("---\n"))],
        ),
    )
    .await?;
    for z in ZONES {
        apply_yaml(
            &client,
            &ns.name,
            &rollout_zone("web", z, 2, "example.invalid/web:2", 1, false),
        )
        .await?;
    }
    eventually("the layer Deployed", Duration::from_secs(120), || async {
        let s = layer_status(&client, &layer).await?;
        Ok((s["state"] == "Deployed").then_some(()))
    })
    .await?;
    rollout_finished(&pods, &old, 4, Duration::from_secs(120)).await?;

    // Quiet: both are done; whatever they still send is their steady state.
    let quiet_from = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let seen = proxy.seen();
    let quiet = seen.iter().filter(|s| s.at >= quiet_from).count();
    let mut quiet_by_target: BTreeMap<String, usize> = BTreeMap::new();
    for s in seen.iter().filter(|s| s.at >= quiet_from) {
        let path = s.target.split('?').next().unwrap_or_default();
        *quiet_by_target
            .entry(format!("{} {path} {}", s.method, s.status))
            .or_default() += 1;
    }
    let throttled: Vec<_> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.injected && s.status == 429)
        .collect();
    let conflicts = seen
        .iter()
        .filter(|s| s.injected && s.status == 409)
        .count();
    let mut early = Vec::new();
    for (i, first) in &throttled {
        let again = seen[i + 1..]
            .iter()
            .find(|s| s.method == first.method && s.target == first.target);
        if let Some(again) = again
            && again.at.duration_since(first.at) < Duration::from_millis(900)
        {
            early.push(format!(
                "{} {} again after {:?}",
                first.method,
                first.target,
                again.at.duration_since(first.at)
            ));
        }
    }
    eprintln!(
        "{} requests, {} answered 429, {conflicts} answered 409, {quiet} in the 20 s quiet window: {quiet_by_target:#?}",
        seen.len(),
        throttled.len()
    );
    let retried = layers
        .metric(
            "layer_controller_kubernetes_api_client_retried_requests_total",
            &[],
        )
        .await?
        + rollout
            .metric(
                "rollout_operator_kubernetes_api_client_retried_requests_total",
                &[],
            )
            .await?;
    delete_layers_then_stop(&[&layer], layers);
    drop(rollout);
    assert!(
        !throttled.is_empty() && conflicts > 0,
        "the proxy injected both faults"
    );
    assert!(early.is_empty(), "Retry-After not honoured: {early:#?}");
    assert!(retried > 0.0, "the services counted their retries");
    assert!(
        quiet <= 10,
        "{quiet} requests in 20 s once everything was done: a hot loop: {quiet_by_target:#?}"
    );
    Ok(())
}
