//! The four service binaries on the real runtime: `/readyz` turns 200 once caches sync,
//! `/metrics` is OpenMetrics with `<service>_leader`, only one of two replicas leads, the
//! standby takes over within 15 s when the leader is killed, and SIGTERM exits 0 within 10 s
//! releasing the Lease.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use strata_e2e::flux::install_layer_crds;
use strata_e2e::services::{SERVICES, ServiceProcess, start_replica as start};
use strata_e2e::support::{
    TestNamespace, apply_yaml, cluster, eventually, http_get, parse_openmetrics,
};

fn admin(process: &ServiceProcess) -> Result<SocketAddr> {
    process
        .admin
        .ok_or_else(|| anyhow!("{} has no admin address", process.name))
}

/// The value of the `<service>_leader` gauge, once `/metrics` answers.
async fn leader_gauge(process: &ServiceProcess) -> Result<Option<f64>> {
    let Ok((200, body)) = http_get(admin(process)?, "/metrics").await else {
        return Ok(None);
    };
    let samples = parse_openmetrics(&body)?;
    let name = format!("{}_leader", process.name.replace('-', "_"));
    Ok(samples
        .iter()
        .find(|(series, _)| *series == name)
        .map(|(_, v)| *v))
}

/// The spec of `service`'s leader Lease, if it exists.
async fn lease_spec(
    leases: &Api<Lease>,
    service: &str,
) -> Result<Option<k8s_openapi::api::coordination::v1::LeaseSpec>> {
    Ok(leases
        .get_opt(&format!("{service}-leader"))
        .await?
        .and_then(|l| l.spec))
}

async fn holder(leases: &Api<Lease>, service: &str) -> Result<Option<String>> {
    Ok(lease_spec(leases, service)
        .await?
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// When the Lease was last renewed.
async fn renewed_at(leases: &Api<Lease>, service: &str) -> Result<Option<jiff::Timestamp>> {
    Ok(lease_spec(leases, service)
        .await?
        .and_then(|s| s.renew_time)
        .map(|t| t.0))
}

#[tokio::test]
async fn every_service_gets_ready_exposes_metrics_and_leads() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "services").await?;
    // The layer services' caches sync only once their CRD is served: never rely on another
    // test having installed it first.
    install_layer_crds(&client, &ns.name).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut processes = Vec::new();
    for service in SERVICES {
        processes.push(start(service, &ns.name, "solo")?);
    }
    for process in &processes {
        let address = admin(process)?;
        eventually(
            &format!("{} /readyz 200", process.name),
            Duration::from_secs(60),
            || async {
                Ok(matches!(http_get(address, "/readyz").await, Ok((200, _))).then_some(()))
            },
        )
        .await?;
        let (status, _) = http_get(address, "/livez").await?;
        assert_eq!(status, 200, "{} /livez", process.name);
        // The Lease says who leads; once it has renewed it (so it has led for a while), the
        // process must report leading too.
        let held_by = eventually(
            &format!("{} holds its Lease", process.name),
            Duration::from_secs(30),
            || async { holder(&leases, &process.name).await },
        )
        .await?;
        assert!(
            held_by.starts_with("solo-"),
            "{} lease held by {held_by:?}",
            process.name
        );
        let first = renewed_at(&leases, &process.name).await?;
        eventually(
            &format!("{} renews its Lease", process.name),
            Duration::from_secs(30),
            || async { Ok((renewed_at(&leases, &process.name).await? > first).then_some(())) },
        )
        .await?;
        assert_eq!(
            leader_gauge(process).await?,
            Some(1.0),
            "{}: holds the Lease but does not report leading",
            process.name
        );
        // Reconcile metrics exist from the start, so dashboards have a series to show.
        let (_, body) = http_get(address, "/metrics").await?;
        let prefix = process.name.replace('-', "_");
        assert!(
            body.contains(&format!("{prefix}_reconcile_total")),
            "{body}"
        );
        assert!(
            body.contains(&format!("{prefix}_reconcile_duration_seconds_bucket")),
            "{body}"
        );
        // What the dashboards' version, CPU and memory panels join on: this very process.
        let samples = parse_openmetrics(&body)?;
        let value = |name: &str| {
            samples
                .iter()
                .find(|(series, _)| series.split('{').next() == Some(name))
                .map(|(_, v)| *v)
                .with_context(|| format!("{}: no {name} in\n{body}", process.name))
        };
        assert_eq!(value(&format!("{prefix}_build_info"))?, 1.0);
        let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(body.contains(&version), "{}: {version}", process.name);
        let rss = value("process_resident_memory_bytes")?;
        let cpu = value("process_cpu_seconds_total")?;
        let fds = value("process_open_fds")?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", process.pid()))?;
        let vm_rss_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("VmRSS")?;
        // The same process, read a moment apart: within a factor of two.
        let ratio = rss / (vm_rss_kib * 1024.0);
        assert!(
            (0.5..2.0).contains(&ratio),
            "{}: rss {rss} vs VmRSS {vm_rss_kib} kB",
            process.name
        );
        assert!(
            cpu > 0.0 && fds >= 3.0,
            "{}: cpu {cpu} fds {fds}",
            process.name
        );
    }
    for mut process in processes {
        let status = process.terminate_blocking();
        assert!(
            status.is_some_and(|s| s.success()),
            "{} exit status {status:?}",
            process.name
        );
    }
    Ok(())
}

/// Leader election, failover and clean hand-over, for every service.
async fn failover(service: &str) -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, &format!("ha-{service}")).await?;
    install_layer_crds(&client, &ns.name).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut a = start(service, &ns.name, "replica-a")?;
    let mut b = start(service, &ns.name, "replica-b")?;

    // Exactly one leads, and it is the Lease's holder. Both are read in turn, so right after
    // start-up (or a first renewal race) they may disagree for a moment: wait for a settled
    // view rather than judging one snapshot.
    let leader_identity = eventually(
        "one leader, holding the Lease",
        Duration::from_secs(30),
        || async {
            let (ga, gb) = (leader_gauge(&a).await?, leader_gauge(&b).await?);
            let leader = match (ga, gb) {
                (Some(1.0), Some(0.0)) => "replica-a-",
                (Some(0.0), Some(1.0)) => "replica-b-",
                _ => return Ok(None),
            };
            let held_by = holder(&leases, service).await?.unwrap_or_default();
            Ok(held_by.starts_with(leader).then_some(leader))
        },
    )
    .await?;
    // Both replicas are Ready: readiness follows caches, not leadership.
    for p in [&a, &b] {
        let address = admin(p)?;
        eventually("standby ready too", Duration::from_secs(30), || async {
            Ok(matches!(http_get(address, "/readyz").await, Ok((200, _))).then_some(()))
        })
        .await?;
    }
    let (leader, standby) = if leader_identity == "replica-a-" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    // Kill -9 the leader: no chance to release; the standby takes over when the Lease expires.
    leader.signal("KILL");
    let killed = Instant::now();
    eventually("standby takes over", Duration::from_secs(15), || async {
        Ok(leader_gauge(standby).await?.filter(|v| *v == 1.0))
    })
    .await?;
    let takeover = killed.elapsed();
    // The Lease names the standby (an empty holder would also "not be the dead leader").
    let standby_identity = if leader_identity == "replica-a-" {
        "replica-b-"
    } else {
        "replica-a-"
    };
    eventually(
        "the standby holds the Lease",
        Duration::from_secs(10),
        || async {
            let held_by = holder(&leases, service).await?.unwrap_or_default();
            Ok(held_by.starts_with(standby_identity).then_some(()))
        },
    )
    .await
    .with_context(|| format!("{service}: the Lease does not name the new leader"))?;
    eprintln!(
        "{service}: takeover after kill -9 in {:.1}s",
        takeover.as_secs_f64()
    );
    // The new leader really acts: a change made after the kill is carried out by it alone.
    acts_after_takeover(service, &client, &ns.name, standby)
        .await
        .with_context(|| format!("{service}: the new leader does not act"))?;

    // SIGTERM the new leader: exit 0 within 10 s and the Lease is released.
    standby.signal("TERM");
    let status = standby.wait_exit_blocking(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status after SIGTERM: {status:?}"
    );
    assert_eq!(
        holder(&leases, service).await?,
        None,
        "lease released on shutdown"
    );
    Ok(())
}

/// What "acting" means per service, checked after the leader was killed: the follower zone
/// follows a downscale (rollout-operator), a new layer is applied (layer-controller), a new
/// layer is reconciled (drift-observer: its reconcile counter moves, the only effect it has on a
/// layer nobody deployed), and the CA is injected into a webhook configuration created after
/// the kill (admission-webhook).
async fn acts_after_takeover(
    service: &str,
    client: &kube::Client,
    ns: &str,
    leader: &ServiceProcess,
) -> Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::api::{Patch, PatchParams};
    let within = Duration::from_secs(30);
    match service {
        "rollout-operator" => {
            let zone = |name: &str, annotations: &str| {
                strata_e2e::support::group_stateful_set(name, "store", 2, "", annotations)
            };
            apply_yaml(client, ns, &zone("store-zone-a", "")).await?;
            apply_yaml(
                client,
                ns,
                &zone(
                    "store-zone-b",
                    r#""grafana.com/rollout-downscale-leader": store-zone-a"#,
                ),
            )
            .await?;
            let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
            sts.patch(
                "store-zone-a",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
            )
            .await?;
            eventually("the follower zone follows", within, || async {
                let replicas = sts.get("store-zone-b").await?.spec.and_then(|s| s.replicas);
                Ok((replicas == Some(1)).then_some(()))
            })
            .await
        }
        "layer-controller" | "drift-observer" => {
            let layer = format!("{ns}-after");
            let before = leader.reconciles().await?;
            let after = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n"
            );
            apply_yaml(
                client,
                ns,
                &strata_e2e::flux::configmap_layer(ns, "after", "60s", &[("c.yaml", after)]),
            )
            .await?;
            let result = if service == "layer-controller" {
                let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
                    Api::namespaced(client.clone(), ns);
                eventually("the new layer applied", within, || async {
                    Ok(maps.get_opt("after").await?.map(drop))
                })
                .await
            } else {
                // The replicas observe only this test's layers (their selector), and this
                // is the only one: the counter moving is this layer's reconcile.
                eventually("the new layer reconciled", within, || async {
                    Ok((leader.reconciles().await? > before).then_some(()))
                })
                .await
            };
            // The layer-controller's finalizer goes with it: delete while it still runs.
            let _ = cluster()
                .kubectl()
                .args([
                    "delete",
                    "addonslayer",
                    &layer,
                    "--wait=true",
                    "--timeout=30s",
                ])
                .output();
            result
        }
        _ => {
            // Named as the chart names a configuration: the only names the server may inject into.
            let name = format!("no-downscale-{ns}");
            let config = format!(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\n  labels: {{grafana.com/inject-rollout-operator-ca: \"true\", grafana.com/namespace: {ns}}}\nwebhooks:\n- name: after.strata.dev\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  clientConfig: {{url: \"https://127.0.0.1:9/none\"}}\n  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]\n"
            );
            apply_yaml(client, ns, &config).await?;
            let configs: Api<
                k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
            > = Api::all(client.clone());
            let injected = eventually("the CA injected by the new leader", within, || async {
                let bundle = configs
                    .get(&name)
                    .await?
                    .webhooks
                    .and_then(|w| w.into_iter().next())
                    .and_then(|w| w.client_config.ca_bundle);
                Ok(bundle.filter(|b| !b.0.is_empty()).map(drop))
            })
            .await;
            let _ = configs.delete(&name, &Default::default()).await;
            injected
        }
    }
}

#[tokio::test]
async fn rollout_operator_fails_over_and_hands_over() -> Result<()> {
    failover("rollout-operator").await
}

#[tokio::test]
async fn layer_controller_fails_over_and_hands_over() -> Result<()> {
    failover("layer-controller").await
}

#[tokio::test]
async fn drift_observer_fails_over_and_hands_over() -> Result<()> {
    failover("drift-observer").await
}

#[tokio::test]
async fn admission_webhook_fails_over_and_hands_over() -> Result<()> {
    failover("admission-webhook").await
}
