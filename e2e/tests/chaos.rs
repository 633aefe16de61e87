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
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde_json::Value;
use strata_e2e::flux::{
    ArtifactServer, configmap_layer, configmap_yaml, create_gitrepository, gitrepository_layer,
    install_layer_crds, inventory_names, layer_status, ready_reason, set_artifact,
};
use strata_e2e::rollout_watch::{judge_operator_deletions, rollout_finished, up, watch_rollout};
use strata_e2e::services::{
    ServiceProcess, chart_identity, delete_layers_then_stop, start_layer_service, start_service,
    start_service_with, two_replicas,
};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually, rollout_zone};

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

    // Good revision n: `keep` and `prev-<n>`. Bad revision n drops `prev-<n>` and adds a valid
    // new `fresh-<n>` beside its fault: a failure that applied anything would show `fresh-<n>`,
    // one that pruned anything would lose `prev-<n>`.
    let keep = cm(&ns, "keep");
    let good = |n: usize| {
        let prev = cm(&ns, &format!("prev-{n}"));
        server.publish(
            &format!("good-{n}.tar.gz"),
            &[
                ("app/keep.yaml", keep.as_str()),
                ("app/prev.yaml", prev.as_str()),
            ],
        )
    };
    let (url, digest) = good(0);
    set_artifact(&client, &ns, "main@sha1:good0", &url, &digest).await?;
    deployed_at(&client, &layer, "main@sha1:good0")
        .await
        .with_context(|| controller.logs())?;

    let evil = cm(&ns, "evil");
    let bomb_text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: evil, namespace: {ns}}}\ndata: {{k: {}}}\n",
        "a".repeat(1 << 20)
    );
    let invalid_yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: evil\n";
    let unknown_kind = format!(
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {{name: evil, namespace: {ns}}}\n"
    );
    // Incompressible, so an archive holding it is over the 64 KiB limit.
    let noise = strata_e2e::support::incompressible(140_000, 11);
    let padding = format!("# {noise}\n");
    // (what, what the condition must say)
    let faults = [
        ("truncated", "ArtifactFailed"),
        ("wrong digest", "digest mismatch"),
        ("path traversal", "escapes the archive root"),
        ("absolute path", "absolute path"),
        (
            "decompression bomb",
            "unpacked content exceeds 262144 bytes",
        ),
        ("oversized", "65536"),
        ("invalid YAML", "bad.yaml"),
        ("a kind the cluster does not serve", "Gizmo"),
    ];
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (n, (what, needle)) in faults.into_iter().enumerate() {
        let fresh = cm(&ns, &format!("fresh-{n}"));
        let with_fresh = |extra: &[(&str, &str)]| {
            let mut files = vec![
                ("app/keep.yaml", keep.as_str()),
                ("app/fresh.yaml", fresh.as_str()),
            ];
            files.extend_from_slice(extra);
            ArtifactServer::archive(&files)
        };
        let (bytes, digest_override) = match what {
            "truncated" => {
                let whole = with_fresh(&[]);
                (whole[..whole.len() / 2].to_vec(), None)
            }
            "wrong digest" => (with_fresh(&[]), Some(format!("sha256:{}", "0".repeat(64)))),
            "path traversal" => (with_fresh(&[("app/../../evil.yaml", evil.as_str())]), None),
            "absolute path" => (with_fresh(&[("/etc/evil.yaml", evil.as_str())]), None),
            "decompression bomb" => {
                let bomb = with_fresh(&[("app/evil.yaml", bomb_text.as_str())]);
                assert!(
                    bomb.len() < 65536,
                    "the bomb itself is small: {} bytes",
                    bomb.len()
                );
                (bomb, None)
            }
            "oversized" => {
                let big = with_fresh(&[("app/padding.yaml", padding.as_str())]);
                assert!(
                    big.len() > 65536,
                    "the archive is over the limit: {} bytes",
                    big.len()
                );
                (big, None)
            }
            "invalid YAML" => (with_fresh(&[("app/bad.yaml", invalid_yaml)]), None),
            _ => (
                with_fresh(&[("app/gizmo.yaml", unknown_kind.as_str())]),
                None,
            ),
        };
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
        failed_with(&client, &layer, needle)
            .await
            .with_context(|| format!("{what}: {}", controller.logs()))?;
        // Looked at once more, the failed revision still changes nothing.
        let status = strata_e2e::flux::reconciled(&client, &layer, Duration::from_secs(30)).await?;
        let prev = format!("prev-{n}");
        assert!(
            maps.get_opt(&format!("fresh-{n}")).await?.is_none()
                && maps.get_opt("evil").await?.is_none(),
            "{what}: something of it applied"
        );
        assert!(
            maps.get_opt(&prev).await?.is_some() && maps.get_opt("keep").await?.is_some(),
            "{what}: an object of the last good revision was pruned"
        );
        assert!(
            inventory_names(&status).contains(&prev),
            "{what}: {prev} left the inventory: {status}"
        );
        assert_eq!(
            layer_status(&client, &neighbour).await?["state"],
            "Deployed",
            "{what}: the neighbour layer is unaffected"
        );
        // And the next good revision deploys again, pruning `prev-<n>` as it should: the
        // check above could have seen it go.
        let (url, digest) = good(n + 1);
        let revision = format!("main@sha1:good{}", n + 1);
        set_artifact(&client, &ns, &revision, &url, &digest).await?;
        deployed_at(&client, &layer, &revision)
            .await
            .with_context(|| format!("recovering from {what}: {}", controller.logs()))?;
        eventually(
            &format!("{prev} pruned"),
            Duration::from_secs(30),
            || async { Ok(maps.get_opt(&prev).await?.is_none().then_some(())) },
        )
        .await?;
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

    let watch = watch_rollout(pods.clone(), GROUP, ZONES, REPLICAS);
    let mut deletions = watch.deletions.clone();
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
    let seen = watch.finish().await?;
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
    // Who deleted which pod: from the API server's audit log where the plane writes one (the
    // fake kubelet sometimes deletes a pod's replacement by name: not the operator's doing),
    // else from the watch.
    match cluster().audit_log() {
        Some(log) => {
            let deletions = strata_e2e::plane::pod_deletions(&log)?;
            let summary = judge_operator_deletions(&deletions, &ns.name, GROUP, &old, total)?;
            eprintln!("{summary}");
        }
        None => {
            let on_a_new_revision: Vec<_> = seen
                .deleted
                .iter()
                .filter(|(_, _, revision)| !old.contains(revision))
                .collect();
            assert!(
                on_a_new_revision.is_empty(),
                "deleted on a new revision: {on_a_new_revision:#?}"
            );
            let uids: BTreeSet<&String> = seen.deleted.iter().map(|(_, uid, _)| uid).collect();
            assert_eq!(
                (seen.deleted.len(), uids.len()),
                (total, total),
                "each old pod deleted exactly once: {:?}",
                seen.deleted
            );
        }
    }
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
    let watch =
        strata_e2e::deletion_watch::DeletionWatch::start(maps.clone(), "strata-e2e/chaos=item");
    let mut created = watch.created();
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
    // Every event up to now processed (a sentinel created after the layer was Deployed is
    // seen), then judged, before the teardown prunes everything.
    apply_yaml(
        &client,
        &ns.name,
        &configmap_yaml(&ns.name, "sentinel", ", labels: {strata-e2e/chaos: item}"),
    )
    .await?;
    watch.wait_seen("sentinel", Duration::from_secs(30)).await?;
    let deleted = watch.deleted();
    drop(watch);
    delete_layers_then_stop(&[&layer], standby);
    assert_eq!(present, ITEMS, "every object of the layer exists");
    assert_eq!(
        inventory.iter().filter(|n| n.contains("item-")).count(),
        ITEMS,
        "the inventory holds every object: {inventory:?}"
    );
    assert!(deleted.is_empty(), "objects deleted: {deleted:?}");
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
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos-throttle").await?;
    install_layer_crds(&client, &ns.name).await?;
    let logs = std::env::temp_dir().join("strata-e2e-logs");
    // One proxy per service, forwarding as that service's chart ServiceAccount: the faults
    // land on requests made with the rights the chart grants, nothing more.
    let mut proxies = Vec::new();
    let mut start = async |service: &str, extra: &[&str]| -> Result<ServiceProcess> {
        let mut args = vec!["--leader-elect=false", "--lease-namespace", &ns.name];
        args.extend_from_slice(extra);
        let identity = chart_identity(cluster().kubeconfig(), service, &args)?;
        let as_service = core_k8s::client::client_from(Some(&identity), None).await?;
        let proxy = FaultProxy::start(
            as_service,
            Faults {
                throttle_every: 3,
                retry_after_seconds: 1,
                conflict_every: 7,
                failing_reads: "",
                failing_writes: "",
            },
        )
        .await?;
        let process = start_service_with(service, &proxy.kubeconfig(&logs)?, &args)?;
        proxies.push(proxy);
        Ok(process)
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
    )
    .await?;
    let rollout = start("rollout-operator", &["--watch-namespace", &ns.name]).await?;
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
    // Each proxy's requests in order; a throttled request is only ever retried through the
    // same proxy (the same service).
    let by_proxy: Vec<Vec<_>> = proxies.iter().map(|p| p.seen()).collect();
    let seen: Vec<_> = by_proxy.iter().flatten().cloned().collect();
    let quiet = seen.iter().filter(|s| s.at >= quiet_from).count();
    let mut quiet_by_target: BTreeMap<String, usize> = BTreeMap::new();
    for s in seen.iter().filter(|s| s.at >= quiet_from) {
        let path = s.target.split('?').next().unwrap_or_default();
        *quiet_by_target
            .entry(format!("{} {path} {}", s.method, s.status))
            .or_default() += 1;
    }
    let throttled: Vec<_> = by_proxy
        .iter()
        .flat_map(|seen| {
            seen.iter()
                .enumerate()
                .filter(|(_, s)| s.injected && s.status == 429)
                .map(move |(i, s)| (seen, i, s))
        })
        .collect();
    let conflicts = seen
        .iter()
        .filter(|s| s.injected && s.status == 409)
        .count();
    let mut early = Vec::new();
    for (seen, i, first) in &throttled {
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

/// Two admission-webhook replicas behind one Service, as the chart deploys them (the processes
/// run on this host, so the test writes the Service's EndpointSlices as the EndpointSlice
/// controller would for two pods); kube-apiserver reaches them through the Service. 300 reviews a second
/// are sent for 20 s: dry-run updates of a StatefulSet labelled no-downscale, every other one a
/// downscale that must be refused and the rest upscales that must be allowed. After 6 s the
/// replica carrying the traffic is terminated as happens to a deleted pod: its endpoint marked
/// terminating (not ready) and SIGTERM sent at the same moment. Invariant: zero failed admissions
/// (every downscale refused by the policy, every upscale allowed, no call failing on a closed
/// connection), the terminated replica exits 0, and the survivor takes the traffic.
#[tokio::test]
async fn webhook_replica_terminated_under_300_reviews_per_second_fails_nothing() -> Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::api::{Patch, PatchParams};
    use strata_e2e::support::{
        DeleteOnDrop, guarded_stateful_set, host_address, no_downscale_configuration,
    };
    // What this 2-core machine sustains with the whole suite around it, through kube-apiserver
    // (it once carried 500/s alone, and 373–427/s when busy): asserted below, not just offered.
    const RATE: u64 = 300;
    const SECONDS: u64 = 25;
    const TERMINATE_AFTER: Duration = Duration::from_secs(6);
    const SERVICE: &str = "webhook";
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos-webhook-ha").await?;
    let ns = ns.name.clone();
    let host = host_address()?;
    let ports = [
        strata_e2e::plane::free_port()?,
        strata_e2e::plane::free_port()?,
    ];
    // The negative control (docs/reliability.md): E2E_WEBHOOK_SHUTDOWN_DELAY=0s makes the
    // terminated replica stop accepting at once, and this test fails (every time: the probe
    // of the terminated replica is refused, whether or not a review happened to hit it).
    let shutdown_delay =
        std::env::var("E2E_WEBHOOK_SHUTDOWN_DELAY").unwrap_or_else(|_| "2s".into());
    let mut replicas = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let tls = format!("{host}:{port}");
        let identity = format!("replica-{n}");
        replicas.push(start_service(
            "admission-webhook",
            cluster().kubeconfig(),
            &[
                "--lease-namespace",
                &ns,
                "--identity",
                &identity,
                "--tls-address",
                &tls,
                "--service-name",
                SERVICE,
                "--shutdown-delay",
                &shutdown_delay,
            ],
        )?);
    }
    // One EndpointSlice per replica, as the EndpointSlice controller writes them for two pods;
    // `terminating` as it marks the endpoint of a pod being deleted.
    let slice = |n: usize, terminating: bool| {
        format!(
            r#"apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {SERVICE}-replica-{n}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {SERVICE}, endpointslice.kubernetes.io/managed-by: strata-e2e}}
addressType: IPv4
ports: [{{name: https, port: {port}, protocol: TCP}}]
endpoints:
- addresses: ["{host}"]
  conditions: {{ready: {ready}, serving: true, terminating: {terminating}}}
"#,
            port = ports[n],
            ready = !terminating,
        )
    };
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {SERVICE}, namespace: {ns}}}\nspec:\n  ports: [{{name: https, port: 443, targetPort: https, protocol: TCP}}]\n"
        ),
    )
    .await?;
    for n in 0..2 {
        apply_yaml(&client, &ns, &slice(n, false)).await?;
    }
    let config = no_downscale_configuration(
        &format!("no-downscale-{ns}"),
        &ns,
        &format!(
            "{{service: {{name: {SERVICE}, namespace: {ns}, port: 443, path: /admission/no-downscale}}}}"
        ),
    );
    apply_yaml(&client, &ns, &config).await?;
    let _registered = DeleteOnDrop {
        resource: "validatingwebhookconfiguration",
        name: format!("no-downscale-{ns}"),
    };
    apply_yaml(&client, &ns, &guarded_stateful_set(3)).await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let dry_run = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let to = |n: i32| Patch::Merge(serde_json::json!({"spec": {"replicas": n}}));
    eventually(
        "the webhook refuses a downscale through the Service",
        Duration::from_secs(60),
        || async {
            match sts.patch("guarded", &dry_run, &to(1)).await {
                Err(e) if e.to_string().contains("is not allowed") => Ok(Some(())),
                // Not called yet (configuration not active, CA not injected): say why.
                Err(e) => Err(e.into()),
                Ok(_) => Ok(None),
            }
        },
    )
    .await
    .with_context(|| {
        replicas
            .iter()
            .map(|r| r.logs())
            .collect::<Vec<_>>()
            .join("\n")
    })?;

    let started = std::time::Instant::now();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut calls = tokio::task::JoinSet::new();
    let mut terminated: Option<(usize, std::time::Instant)> = None;
    let mut survivor_at_termination = 0.0;
    let mut probe = None;
    let mut sent = 0u64;
    while sent < RATE * SECONDS {
        tick.tick().await;
        if terminated.is_none() && started.elapsed() >= TERMINATE_AFTER {
            let counts = [served(&replicas[0]).await?, served(&replicas[1]).await?];
            let busy = usize::from(counts[1] > counts[0]);
            // The kubelet's part and the endpoints controller's, at the same moment.
            apply_yaml(&client, &ns, &slice(busy, true)).await?;
            replicas[busy].signal("TERM");
            eprintln!("terminated replica {busy} after it served {counts:?} reviews");
            terminated = Some((busy, std::time::Instant::now()));
            // The exposure window measured directly: kube-apiserver may still open connections
            // to the terminated replica until it sees the endpoint change, so the replica must
            // keep accepting for its shutdown delay. New connections every 100 ms for the first
            // second: with `--shutdown-delay 0s` the first is refused, every time.
            let address = format!("{host}:{}", ports[busy]);
            probe = Some(tokio::spawn(async move {
                let mut refused = Vec::new();
                let since = std::time::Instant::now();
                while since.elapsed() < Duration::from_secs(1) {
                    if let Err(e) = tokio::net::TcpStream::connect(&address).await {
                        refused.push(format!("{:?} after SIGTERM: {e}", since.elapsed()));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                refused
            }));
            survivor_at_termination = counts[1 - busy];
        }
        let permit = semaphore.clone().acquire_owned().await?;
        let (sts, dry_run) = (sts.clone(), dry_run.clone());
        let downscale = sent % 2 == 1;
        calls.spawn(async move {
            let at = std::time::Instant::now();
            let result = sts
                .patch("guarded", &dry_run, &to(if downscale { 1 } else { 4 }))
                .await;
            drop(permit);
            (at, downscale, result.map(|_| ()).map_err(|e| e.to_string()))
        });
        sent += 1;
    }
    let sending = started.elapsed().as_secs_f64();
    let mut failures = Vec::new();
    let mut after_termination = 0usize;
    // Calls started in each second of the run: the rate held, through the termination too.
    let mut per_second = vec![0u64; SECONDS as usize + 2];
    let (busy, terminated_at) = terminated.context("no replica was terminated")?;
    while let Some(joined) = calls.join_next().await {
        let (at, downscale, result) = joined?;
        if at >= terminated_at {
            after_termination += 1;
        }
        let second = at.duration_since(started).as_secs() as usize;
        if let Some(count) = per_second.get_mut(second) {
            *count += 1;
        }
        match (downscale, result) {
            (true, Err(e)) if e.contains("is not allowed because it has the label") => {}
            (false, Ok(())) => {}
            (downscale, outcome) => failures.push(format!(
                "{} at {:.2} s: {outcome:?}",
                if downscale { "downscale" } else { "upscale" },
                at.duration_since(started).as_secs_f64()
            )),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let survivor_count = served(&replicas[1 - busy]).await?;
    let exit = replicas[busy].wait_exit_blocking(Duration::from_secs(10));
    eprintln!(
        "{sent} reviews in {elapsed:.1} s ({:.0}/s), {after_termination} sent after the termination, the survivor served {survivor_count}; {} failed",
        sent as f64 / elapsed,
        failures.len()
    );
    let refused = probe.context("no probe of the terminated replica")?.await?;
    assert!(
        refused.is_empty(),
        "the terminated replica refused connections within its shutdown delay: {refused:#?}"
    );
    assert!(failures.is_empty(), "failed admissions: {failures:#?}");
    assert!(
        exit.is_some_and(|s| s.success()),
        "the terminated replica exits 0 within 10 s: {exit:?}"
    );
    assert!(
        after_termination > 1000,
        "traffic went on after the termination: {after_termination}"
    );
    // No stall: no full second (the termination's included) under 40 % of the run's own
    // median second. And the load was real: overall at least half the rate offered. The
    // sender waits when 256 calls are in flight, so both measure what the chain answered;
    // fixed shares of 300/s (90 % overall, half in every second) failed on this machine with
    // nothing failed or stalled: it answered 210-255/s, alone or with the suite around it.
    eprintln!("calls started per second: {per_second:?}");
    let full_seconds = &per_second[..(sending.floor() as usize).min(per_second.len())];
    let mut sorted = full_seconds.to_vec();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default() as f64;
    assert!(
        full_seconds.iter().all(|n| *n as f64 >= 0.4 * median),
        "a second under 40 % of the median second ({median}): {per_second:?}"
    );
    let rate = sent as f64 / sending;
    assert!(
        rate >= 0.5 * RATE as f64,
        "sent at {rate:.0}/s, under half of {RATE}/s"
    );
    // And the survivor took the traffic: it answered most of what was sent after the
    // termination (kube-apiserver sends a few more to the terminating replica until its
    // endpoint update arrives, which the server answers while it drains).
    let survivor_took = survivor_count - survivor_at_termination;
    assert!(
        survivor_took >= 0.8 * after_termination as f64,
        "the survivor answered {survivor_took} of the {after_termination} reviews sent after the termination"
    );
    Ok(())
}

/// How many no-downscale reviews a webhook replica has answered.
async fn served(replica: &ServiceProcess) -> Result<f64> {
    replica
        .metric(
            "admission_webhook_request_duration_seconds_count",
            &["admission_no_downscale"],
        )
        .await
}
