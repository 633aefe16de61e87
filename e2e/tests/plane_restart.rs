//! Fault injection on a control plane of its own: kube-apiserver, then etcd, is SIGKILLed
//! (as a crash or an OOM kill would) while the rollout-operator is mid-rollout and the
//! layer-controller mid-apply, left down a few seconds, and started again with the same data.
//!
//! Invariants, for each restart: the rollout finishes without breaking its budget (checked on
//! every pod event by a watch that itself resumes: never two zones down, never more than
//! max-unavailable in a zone; and from the API server's audit log: the operator deleted
//! exactly the old-revision pods, each once, whatever the fake kubelet did); the layer
//! ends Deployed with all of its objects and no object is ever deleted; and every service's
//! watches resumed — a layer created after the restart deploys (the layer-controller runs
//! with a one-hour sync period, so only its watch can see it), an object edited by hand is
//! healed (drift-observer's watch, then the layer-controller's heal), a second rollout is
//! carried out, the admission-webhook still refuses a downscale it must refuse (a decision
//! that needs no watch), and a webhook configuration created after the restart shows in the
//! admission-webhook's failure-policy metric (its one watch).
//!
//! Its own plane because restarting the shared one would break every other test running on
//! it; docs/reliability.md records the scenario and its results.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use strata_e2e::flux::{
    configmap_layer, configmap_yaml, install_layer_crds, inventory_names, layer_status,
};
use strata_e2e::plane::{Plane, free_port};
use strata_e2e::rollout_watch::{judge_operator_deletions, rollout_finished, up, watch_rollout};
use strata_e2e::services::{ServiceProcess, start_service};
use strata_e2e::support::{
    apply_yaml, eventually, guarded_stateful_set, no_downscale_configuration, rollout_zone,
};

const NS: &str = "restart";
const GROUP: &str = "store";
const ZONES: &[&str] = &["a", "b", "c"];
const REPLICAS: usize = 3;
const MAX_UNAVAILABLE: usize = 1;
const BULK: usize = 150;

/// Starts one service against the plane with leader election on (Leases in [`NS`]): a
/// restart also takes its Lease renewals away.
fn start(kubeconfig: &Path, service: &str, extra: &[&str]) -> Result<ServiceProcess> {
    let mut args = vec!["--lease-namespace", NS];
    args.extend_from_slice(extra);
    start_service(service, kubeconfig, &args)
}

/// Whether the admission-webhook refuses to scale the guarded StatefulSet down. Until its
/// configuration is active (`strict` false) an allowed downscale is undone and asked again;
/// once it is, an allowed downscale is a lost decision.
async fn downscale_refused(client: &Client, strict: bool) -> Result<Option<()>> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let replicas = |n: i32| Patch::Merge(serde_json::json!({"spec": {"replicas": n}}));
    match api
        .patch("guarded", &PatchParams::default(), &replicas(1))
        .await
    {
        Err(e) if e.to_string().contains("is not allowed") => Ok(Some(())),
        Err(_) => Ok(None),
        Ok(_) if strict => anyhow::bail!("the guarded StatefulSet was scaled down"),
        Ok(_) => {
            api.patch("guarded", &PatchParams::default(), &replicas(2))
                .await?;
            Ok(None)
        }
    }
}

fn zone(z: &str, image: &str) -> String {
    rollout_zone(
        GROUP,
        z,
        REPLICAS as i32,
        image,
        MAX_UNAVAILABLE as u32,
        false,
    )
}

fn bulk_layer(name: &str) -> String {
    let items: Vec<String> = (0..BULK)
        .map(|i| {
            configmap_yaml(
                NS,
                &format!("{name}-{i:03}"),
                ", labels: {strata-e2e/restart: bulk}",
            )
        })
        .collect();
    configmap_layer(NS, name, "120s", &[("items.yaml", items.join("---\n"))])
}

async fn deployed(client: &Client, layer: &str, within: Duration) -> Result<serde_json::Value> {
    eventually(&format!("layer {layer} Deployed"), within, || async {
        let s = layer_status(client, layer).await?;
        Ok((s["state"] == "Deployed").then_some(s))
    })
    .await
}

/// The revisions the pods of the group run now, once every pod is up on one revision.
async fn settled_revisions(pods: &Api<Pod>) -> Result<BTreeSet<String>> {
    eventually("every pod up", Duration::from_secs(120), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("rollout-group={GROUP}")))
            .await?
            .items;
        let hashes: BTreeSet<String> = list
            .iter()
            .filter_map(|p| p.labels().get("controller-revision-hash").cloned())
            .collect();
        Ok(
            (list.iter().filter(|p| up(p)).count() == ZONES.len() * REPLICAS
                && hashes.len() == ZONES.len())
            .then_some(hashes),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_and_etcd_restarts_lose_and_duplicate_nothing() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("strata-plane-restart-{}", std::process::id()));
    let mut plane = tokio::task::block_in_place(|| Plane::start(&dir))?;
    eprintln!("own plane up in {:.1} s", plane.startup.as_secs_f64());
    let kubeconfig = plane.kubeconfig().to_path_buf();
    let client = core_k8s::client::client_from(Some(&kubeconfig), None).await?;

    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    eventually(
        "default ServiceAccount",
        Duration::from_secs(30),
        || async { Ok(accounts.get_opt("default").await?.map(|_| ())) },
    )
    .await?;
    install_layer_crds(&client, NS).await?;

    // Every service, each with leader election on.
    let selector = format!("strata-e2e/suite={NS}");
    let layer_args = [
        "--layer-selector",
        selector.as_str(),
        "--default-source-namespace",
        NS,
    ];
    let mut controller_args = layer_args.to_vec();
    // Only the watch can bring a new layer within the test; a heal request is an annotation.
    controller_args.extend(["--sync-period", "1h"]);
    let layers = start(&kubeconfig, "layer-controller", &controller_args)?;
    let observer = start(&kubeconfig, "drift-observer", &layer_args)?;
    let rollouts = start(&kubeconfig, "rollout-operator", &["--watch-namespace", NS])?;
    let tls_port = free_port()?;
    let tls = format!("127.0.0.1:{tls_port}");
    let webhook = start(
        &kubeconfig,
        "admission-webhook",
        &["--tls-address", &tls, "--tls-extra-names", "127.0.0.1"],
    )?;
    let logs = || {
        format!(
            "layer-controller:\n{}\ndrift-observer:\n{}\nrollout-operator:\n{}\nadmission-webhook:\n{}",
            layers.logs(),
            observer.logs(),
            rollouts.logs(),
            webhook.logs()
        )
    };

    // The guarded StatefulSet and its webhook; a layer the drift-observer watches.
    apply_yaml(&client, NS, &guarded_stateful_set(2)).await?;
    apply_yaml(
        &client,
        NS,
        &no_downscale_configuration(
            "no-downscale-restart",
            NS,
            &format!("{{url: \"https://127.0.0.1:{tls_port}/admission/no-downscale\"}}"),
        ),
    )
    .await?;
    eventually("downscale refused", Duration::from_secs(60), || {
        downscale_refused(&client, false)
    })
    .await
    .with_context(logs)?;
    let steady = format!("{NS}-steady");
    apply_yaml(
        &client,
        NS,
        &configmap_layer(
            NS,
            "steady",
            "60s",
            &[("watched.yaml", configmap_yaml(NS, "watched", ""))],
        ),
    )
    .await?;
    deployed(&client, &steady, Duration::from_secs(60))
        .await
        .with_context(logs)?;

    // The rollout group, every pod up on its first revision.
    for z in ZONES {
        apply_yaml(&client, NS, &zone(z, "example.invalid/store:1")).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);

    // Every ConfigMap of the bulk layers created and never deleted, watched throughout (a
    // deletion while the API server was down shows as a difference between two lists).
    let map_watch =
        strata_e2e::deletion_watch::DeletionWatch::start(maps.clone(), "strata-e2e/restart=bulk");
    let created = map_watch.created();

    // Audit-log entries of earlier rounds, already judged.
    let mut counted = 0;
    for (round, component) in ["kube-apiserver", "etcd"].into_iter().enumerate() {
        let old = settled_revisions(&pods).await.with_context(logs)?;
        let watch = watch_rollout(pods.clone(), GROUP, ZONES, REPLICAS);
        let mut deletions = watch.deletions.clone();
        // Mid-action: a rollout and a layer of BULK ConfigMaps at once. The layer is created
        // once the rollout has deleted its first pod: created together, the layer could be
        // fully applied before the rollout's first deletion (seen once for etcd), and the kill
        // would no longer be mid-apply.
        let image = format!("example.invalid/store:{}", round + 2);
        for z in ZONES {
            apply_yaml(&client, NS, &zone(z, &image)).await?;
        }
        tokio::time::timeout(Duration::from_secs(60), deletions.wait_for(|n| *n > 0))
            .await
            .context("no pod deleted within 60 s")??;
        let bulk = format!("bulk-{round}");
        let mut created = created.clone();
        // The watch may still be backing off after the previous round's kill: once it relists,
        // the earlier rounds' ConfigMaps would count as this layer's. Wait until it holds them.
        tokio::time::timeout(
            Duration::from_secs(60),
            created.wait_for(|n| *n >= round * BULK),
        )
        .await
        .context("the watch never caught up with the earlier rounds' ConfigMaps")??;
        let before = *created.borrow();
        apply_yaml(&client, NS, &bulk_layer(&bulk)).await?;
        tokio::time::timeout(Duration::from_secs(60), created.wait_for(|n| *n > before))
            .await
            .context("no ConfigMap of the layer applied within 60 s")??;
        let deleted_at_kill = *deletions.borrow();
        let applied_at_kill = *created.borrow() - before;
        let unreachable =
            tokio::task::block_in_place(|| plane.restart(component, Duration::from_secs(3)))?;
        eprintln!(
            "{component}: killed after {deleted_at_kill} pod deletion(s) and {applied_at_kill} of {BULK} ConfigMaps, serving again {:.1} s later",
            unreachable.as_secs_f64()
        );

        rollout_finished(
            &pods,
            &old,
            ZONES.len() * REPLICAS,
            Duration::from_secs(180),
        )
        .await
        .with_context(logs)?;
        let layer = format!("{NS}-{bulk}");
        let status = deployed(&client, &layer, Duration::from_secs(120))
            .await
            .with_context(logs)?;
        let seen = watch.finish().await?;
        ensure!(
            seen.violations.is_empty(),
            "{component}: {:#?}",
            seen.violations
        );
        ensure!(
            seen.most_down_in_a_zone <= MAX_UNAVAILABLE,
            "{component}: {} pods down in a zone",
            seen.most_down_in_a_zone
        );
        // Who deleted what, from the API server's audit log (entries of this round only).
        let deletions = tokio::task::block_in_place(|| plane.pod_deletions())?;
        let summary = judge_operator_deletions(
            &deletions[counted..],
            NS,
            GROUP,
            &old,
            ZONES.len() * REPLICAS,
        )
        .with_context(|| component.to_string())?;
        counted = deletions.len();
        eprintln!(
            "{component}: {summary}; most down in a zone {}",
            seen.most_down_in_a_zone
        );
        ensure!(
            applied_at_kill < BULK,
            "{component}: the layer was fully applied before the kill: not mid-apply"
        );
        ensure!(
            inventory_names(&status)
                .iter()
                .filter(|n| n.starts_with(&format!("{bulk}-")))
                .count()
                == BULK,
            "{component}: the inventory holds every object: {status}"
        );

        // Every watch resumed.
        let after = format!("after-{round}");
        apply_yaml(
            &client,
            NS,
            &configmap_layer(
                NS,
                &after,
                "60s",
                &[("a.yaml", configmap_yaml(NS, &format!("{after}-map"), ""))],
            ),
        )
        .await?;
        // Watches that failed while the API server was away, then 403 while its RBAC cache
        // warms, retry with a backoff that doubles to 30 s: recovery can take that long (seen
        // once past 60 s). The one-hour sync period still means only a watch can see it.
        deployed(&client, &format!("{NS}-{after}"), Duration::from_secs(120))
            .await
            .with_context(|| {
                format!("{component}: a layer created after the restart: {}", logs())
            })?;
        maps.patch(
            "watched",
            &PatchParams::apply("by-hand").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "watched", "namespace": NS},
                "data": {"k": "forged"},
            })),
        )
        .await?;
        eventually(
            &format!("{component}: the edited ConfigMap healed"),
            Duration::from_secs(120),
            || async {
                let data = maps.get("watched").await?.data.unwrap_or_default();
                Ok((data.get("k").map(String::as_str) == Some("v")).then_some(()))
            },
        )
        .await
        .with_context(logs)?;
        eventually(
            &format!("{component}: downscale still refused"),
            Duration::from_secs(30),
            || downscale_refused(&client, true),
        )
        .await
        .with_context(logs)?;
        // The admission-webhook's own watch (webhook configurations labelled with its
        // namespace, exported as their failure policies): a configuration created after the
        // restart shows in its metrics only if that watch resumed. Its rule matches nothing.
        let probe = format!("restart-probe-{round}");
        let hook = format!("{probe}.strata.dev");
        let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let configuration: ValidatingWebhookConfiguration =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": probe, "labels": {"grafana.com/namespace": NS}},
                "webhooks": [{
                    "name": hook,
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": format!("https://127.0.0.1:{tls_port}/unused")},
                    "rules": [{"apiGroups": ["example.invalid"], "apiVersions": ["v1"],
                               "operations": ["CREATE"], "resources": ["nothing"]}],
                }],
            }))?;
        configurations
            .create(&PostParams::default(), &configuration)
            .await?;
        let series = format!("webhook=\"{hook}\"");
        eventually(
            &format!("{component}: the webhook's configuration watch resumed"),
            Duration::from_secs(120),
            || async {
                let ignore = webhook
                    .metric(
                        "kube_validating_webhook_failure_policy",
                        &[&series, "policy=\"Ignore\""],
                    )
                    .await?;
                Ok((ignore == 1.0).then_some(()))
            },
        )
        .await
        .with_context(logs)?;
        configurations.delete(&probe, &Default::default()).await?;
    }

    let deleted = map_watch.deleted();
    drop(map_watch);
    ensure!(
        *created.borrow() == 2 * BULK,
        "every ConfigMap of both layers created: {}",
        *created.borrow()
    );
    ensure!(deleted.is_empty(), "ConfigMaps deleted: {deleted:?}");
    let present = maps
        .list(&ListParams::default().labels("strata-e2e/restart=bulk"))
        .await?
        .items
        .len();
    ensure!(present == 2 * BULK, "{present} ConfigMaps present");
    for service in [&layers, &observer, &rollouts, &webhook] {
        eventually(
            "every service leads again",
            Duration::from_secs(30),
            || async { Ok((service.leader().await? == 1.0).then_some(())) },
        )
        .await
        .with_context(logs)?;
    }
    drop((layers, observer, rollouts, webhook));
    tokio::task::block_in_place(move || plane.stop());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
