//! admission-webhook on the local control plane, called by kube-apiserver over TLS with the CA
//! it injected itself.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use strata_e2e::admission::{
    configuration, configuration_name, kubectl_scale, register, register_pod_eviction,
    register_yaml, start_behind_faults, stateful_set,
};
use strata_e2e::plane::free_port;
use strata_e2e::services::{ServiceProcess, start_admission_webhook};
use strata_e2e::support::{
    DeleteOnDrop, STATEFULSET_UPDATE_RULES, TestNamespace, apply_shipped_crd, apply_yaml, cluster,
    eventually, pod_ready,
};

fn start(ns: &str, tls_port: u16, extra: &[&str]) -> Result<ServiceProcess> {
    let mut args = vec!["--tls-extra-names", "127.0.0.1"];
    args.extend_from_slice(extra);
    start_admission_webhook(ns, &format!("127.0.0.1:{tls_port}"), &args)
}

/// A local stand-in for the pods' prepare-downscale endpoint (reached through the webhook's
/// test-only `--pod-address-override`): counts POSTs, each answered after `delay`, and DELETEs.
struct StandInPods {
    address: String,
    posts: Arc<AtomicUsize>,
    deletes: Arc<AtomicUsize>,
}

impl StandInPods {
    async fn start(delay: Duration) -> Result<Self> {
        let (posts, deletes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (p, d) = (posts.clone(), deletes.clone());
        let app = axum::Router::new().route(
            "/ingester/prepare-shutdown",
            axum::routing::post(move || {
                p.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(delay).await;
                    "ok"
                }
            })
            .delete(move || {
                d.fetch_add(1, Ordering::SeqCst);
                async { "ok" }
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self {
            address,
            posts,
            deletes,
        })
    }
}

/// The entries of the zone-tracker ConfigMap (default name) in `ns`.
async fn zone_tracker_data(
    client: &kube::Client,
    ns: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let found = api.get("rollout-operator-zone-tracker").await?;
    Ok(found.data.unwrap_or_default())
}

#[tokio::test]
async fn no_downscale_zpdb_validation_and_ca_injection_over_tls() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "webhook").await?;
    let port = free_port()?;
    let server = start(&ns.name, port, &[])?;
    let admin = server.admin.unwrap();
    eventually("webhook ready", Duration::from_secs(30), || async {
        Ok(matches!(
            strata_e2e::support::http_get(admin, "/readyz").await,
            Ok((200, _))
        )
        .then_some(()))
    })
    .await?;

    // Created after start-up: the CA still gets injected.
    let _hook = register(
        &client,
        &ns.name,
        "ValidatingWebhookConfiguration",
        port,
        "/admission/no-downscale",
        STATEFULSET_UPDATE_RULES,
    )
    .await?;

    apply_yaml(
        &client,
        &ns.name,
        &stateful_set("ingester", r#""grafana.com/no-downscale": "true""#, ""),
    )
    .await?;
    let message = format!(
        "downscale of statefulsets/ingester in {} from 3 to 2 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'",
        ns.name
    );
    // The /scale subresource (kubectl scale), once the configuration is active: the CA
    // injected, then seen by the API server's webhook informer (once over 30 s during a full
    // suite on two cores).
    eventually("scale down denied", Duration::from_secs(60), || async {
        let out = kubectl_scale(&ns.name, "ingester", 2)?;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        Ok((!out.status.success() && err.contains(&message)).then_some(()))
    })
    .await?;
    assert!(
        kubectl_scale(&ns.name, "ingester", 4)?.status.success(),
        "upscale allowed"
    );
    // The object itself.
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let err = api
        .patch(
            "ingester",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("from 4 to 1 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"), "{err}");
    api.patch(
        "ingester",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
    )
    .await?;

    // ZPDB validation.
    apply_shipped_crd(&client, &ns.name, "zone-aware-pod-disruption-budget.yaml").await?;
    let zrules = "  - apiGroups: [rollout-operator.grafana.com]\n    apiVersions: [v1]\n    operations: [CREATE, UPDATE]\n    resources: [zoneawarepoddisruptionbudgets]";
    let _hook = register(
        &client,
        &ns.name,
        "ValidatingWebhookConfiguration",
        port,
        "/admission/zpdb-validation",
        zrules,
    )
    .await?;
    let bad = "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: bad}\nspec: {maxUnavailable: 1, selector: {matchLabels: {a: b}}, crossZoneEvictionDelay: 1m}\n";
    let denied = eventually("invalid ZPDB rejected", Duration::from_secs(30), || async {
        match apply_yaml(&client, &ns.name, bad).await {
            Ok(_) => {
                let _ = cluster()
                    .kubectl()
                    .args(["-n", &ns.name, "delete", "zpdb", "bad"])
                    .output();
                Ok(None)
            }
            Err(e) => Ok(Some(format!("{e:#}"))),
        }
    })
    .await?;
    assert!(
        denied.contains(
            "invalid value: crossZoneEvictionDelay requires podNamePartitionRegex to be set"
        ),
        "{denied}"
    );

    // What kube-apiserver's calls left in the metrics: the denied downscales of both kinds of
    // request, and the self-managed certificate's expiry (a year from now by default).
    let (_, metrics) = strata_e2e::support::http_get(admin, "/metrics").await?;
    let sample = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let denied =
        sample(r#"admission_webhook_reviews_total{webhook="no-downscale",outcome="denied"}"#);
    assert!(
        denied >= 2.0,
        "{denied} denied no-downscale reviews:\n{metrics}"
    );
    assert!(
        sample(r#"admission_webhook_reviews_total{webhook="zpdb-validation",outcome="denied"}"#)
            >= 1.0,
        "{metrics}"
    );
    let expiry = sample("admission_webhook_certificate_expiry_timestamp_seconds");
    let now = jiff::Timestamp::now().as_second() as f64;
    assert!(
        expiry > now + 300.0 * 86_400.0,
        "certificate expiry {expiry} (now {now})"
    );
    Ok(())
}

// Multi-threaded: the stand-in pod server must answer while these tests block on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_downscale_calls_the_pods_and_records_the_time() -> Result<()> {
    prepare_downscale(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_downscale_with_the_zone_tracker_records_in_a_config_map() -> Result<()> {
    prepare_downscale(true).await
}

/// The pods cannot be listed (the API server answers 500 to that read alone): the downscale
/// is refused with a 500 that names the read, and no pod is called. A decision on the empty
/// list would have allowed it with nothing prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_downscale_refuses_when_it_cannot_read_the_pods() -> Result<()> {
    use strata_e2e::fault_proxy::Faults;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "blind").await?;
    let pods = StandInPods::start(Duration::ZERO).await?;
    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let args = [
        "--lease-namespace",
        &ns.name,
        "--leader-elect=false",
        "--tls-address",
        &tls,
        "--tls-extra-names",
        "127.0.0.1",
        "--pod-address-override",
        pods.address.as_str(),
    ];
    let faults = Faults {
        throttle_every: 0,
        retry_after_seconds: 0,
        conflict_every: 0,
        failing_reads: "/pods",
        failing_writes: "",
    };
    let (_server, proxy) = start_behind_faults(&args, faults).await?;
    let _hook = register_prepare_downscale(&client, &ns.name, port).await?;
    let out = kubectl_scale(&ns.name, "store", 1)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the downscale went through: {stderr}"
    );
    assert!(
        stderr.contains(&format!("listing the pods of {} failed", ns.name)),
        "{stderr}"
    );
    assert_eq!(pods.posts.load(Ordering::SeqCst), 0, "a pod was called");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let replicas = sets.get("store").await?.spec.and_then(|s| s.replicas);
    assert_eq!(replicas, Some(3));
    assert!(
        proxy
            .seen()
            .iter()
            .any(|r| r.injected && r.target.contains("/pods")),
        "the pod list never failed"
    );
    Ok(())
}

/// Registers prepare-downscale at `port` for namespace `ns` and creates the StatefulSet
/// `store` (3 replicas) that opts in, its pods' endpoint on port 80.
async fn register_prepare_downscale(
    client: &kube::Client,
    ns: &str,
    port: u16,
) -> Result<DeleteOnDrop> {
    let hook = strata_e2e::admission::register_prepare_downscale(client, ns, port).await?;
    apply_yaml(
        client,
        ns,
        &stateful_set("store", r#""grafana.com/prepare-downscale": "true""#, r#""grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown", "grafana.com/prepare-downscale-http-port": "80""#),
    )
    .await?;
    // prepare-downscale calls only pods the StatefulSet owns: wait until it has all three.
    store_settled(client, ns, 3).await?;
    Ok(hook)
}

/// Waits until StatefulSet `store` runs exactly `replicas` ready pods, none of them on its way
/// out, and its controller has caught up with them: prepare-downscale calls only pods that
/// exist, so a pod still being replaced would be skipped, and few status writes then race the
/// downscale.
async fn store_settled(client: &kube::Client, ns: &str, replicas: usize) -> Result<()> {
    strata_e2e::support::stateful_set_settled(client, ns, "store", replicas).await
}

/// Scales StatefulSet `store` of `ns` to `replicas`, retried until prepare-downscale admits it.
async fn downscaled_through_the_webhook(ns: &str, replicas: u32) -> Result<()> {
    eventually("downscale prepared", Duration::from_secs(30), || async {
        let out = kubectl_scale(ns, "store", replicas)?;
        anyhow::ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Some(()))
    })
    .await
}

async fn prepare_downscale(zone_tracker: bool) -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, if zone_tracker { "zones" } else { "prepare" }).await?;
    let pods = StandInPods::start(Duration::ZERO).await?;
    let port = free_port()?;
    let mut args = vec!["--pod-address-override", pods.address.as_str()];
    if zone_tracker {
        args.push("--use-zone-tracker");
    }
    let _server = start(&ns.name, port, &args)?;
    let _hook = register_prepare_downscale(&client, &ns.name, port).await?;
    downscaled_through_the_webhook(&ns.name, 1).await?;
    let made = pods.posts.load(Ordering::SeqCst);
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let stamp = if zone_tracker {
        let annotations = api
            .get("store")
            .await?
            .metadata
            .annotations
            .unwrap_or_default();
        // The StatefulSet is left alone during admission: no annotation, and the ConfigMap
        // holds only this zone. Two pods (ordinals 2 and 1) per admission round; a status
        // write by the StatefulSet controller during admission makes the API server retry the
        // update, and run admission again: whole rounds of two.
        assert!(made >= 2 && made.is_multiple_of(2), "{made} prepare calls");
        assert!(!annotations.contains_key("grafana.com/last-downscale"));
        let data = zone_tracker_data(&client, &ns.name).await?;
        assert_eq!(data.len(), 1, "only the downscaled zone: {data:?}");
        let entry: serde_json::Value = serde_json::from_str(&data["store"])?;
        entry["lastDownscaled"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        // Two pods (ordinals 2 and 1) per admission round; a status write by the StatefulSet
        // controller during admission can make the API server run it again, whole rounds of
        // two. The time is written once the downscale has landed, not during its admission
        // (where it would make the admitted update conflict, the anchor's issue #303).
        assert!(made >= 2 && made.is_multiple_of(2), "{made} prepare calls");
        eventually(
            "last-downscale written",
            Duration::from_secs(10),
            || async {
                Ok(api
                    .get("store")
                    .await?
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .get("grafana.com/last-downscale")
                    .cloned())
            },
        )
        .await?
    };
    assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
    if zone_tracker {
        // A later downscale of the same zone updates the ConfigMap that now exists: back up
        // to 3 (an upscale asks nothing), then down to 2 (ordinal 2 prepared). Not to 0: a
        // `/scale` request to 0 carries no replica count at all (omitted as a Go zero value).
        let up = kubectl_scale(&ns.name, "store", 3)?;
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        store_settled(&client, &ns.name, 3).await?;
        let before = pods.posts.load(Ordering::SeqCst);
        let out = kubectl_scale(&ns.name, "store", 2)?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            pods.posts.load(Ordering::SeqCst) > before,
            "ordinal 2 prepared"
        );
        let data = zone_tracker_data(&client, &ns.name).await?;
        let entry: serde_json::Value = serde_json::from_str(&data["store"])?;
        let again = entry["lastDownscaled"].as_str().unwrap_or_default();
        assert!(
            again.parse::<jiff::Timestamp>()? >= stamp.parse::<jiff::Timestamp>()?,
            "{again} after {stamp}"
        );
    }
    Ok(())
}

/// The pods are told to prepare, then the request's deadline passes before they answer: the
/// API server gets "timed out" (under `failurePolicy: Fail` the downscale is denied), so once
/// the request is settled (`--prepare-downscale-undo-after`) and the StatefulSet still wants
/// the pods, they must be told to undo — even though the handler that made the calls was
/// dropped at the deadline — and no downscale time is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_prepared_past_the_deadline_are_told_to_undo() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "undo").await?;
    // Each POST is taken at once and answered after 4 s; the decision deadline is 1.8 s.
    let pods = StandInPods::start(Duration::from_secs(4)).await?;
    let port = free_port()?;
    let args = [
        "--pod-address-override",
        pods.address.as_str(),
        "--request-timeout",
        "2s",
        "--pod-timeout",
        "8s",
        "--prepare-downscale-undo-after",
        "3s",
    ];
    let _server = start(&ns.name, port, &args)?;
    let _hook = register_prepare_downscale(&client, &ns.name, port).await?;
    // Until the webhook serves, the scale fails for other reasons; then it must be the deadline.
    let message = eventually("a deadline denial", Duration::from_secs(30), || async {
        let out = kubectl_scale(&ns.name, "store", 1)?;
        anyhow::ensure!(!out.status.success(), "the downscale went through");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Ok(stderr.contains("timed out deciding").then_some(stderr))
    })
    .await?;
    let posts = pods.posts.load(Ordering::SeqCst);
    assert!(
        posts >= 2,
        "the pods were called: {posts} POSTs ({message})"
    );
    eventually(
        "every prepared pod told to undo",
        Duration::from_secs(20),
        || async {
            Ok(
                (pods.deletes.load(Ordering::SeqCst) >= pods.posts.load(Ordering::SeqCst))
                    .then_some(()),
            )
        },
    )
    .await?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let store = api.get("store").await?;
    assert_eq!(
        store.spec.and_then(|s| s.replicas),
        Some(3),
        "not scaled down"
    );
    let annotations = store.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("grafana.com/last-downscale"),
        "no downscale time recorded for a denied downscale: {annotations:?}"
    );
    Ok(())
}

/// Two zones of one rollout group scaled down at the same moment, each through a different
/// replica of the webhook in zone-tracker mode. The pods take 3 s to prepare, so both
/// decisions read the ConfigMap before either records its downscale: without the conditional
/// write both would pass the minimum-time check. Exactly one downscale must win; the other is
/// denied and its pod un-prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_zone_downscales_through_two_replicas_let_exactly_one_through() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "race").await?;
    let pods = StandInPods::start(Duration::from_secs(3)).await?;
    let args = [
        "--pod-address-override",
        pods.address.as_str(),
        "--use-zone-tracker",
    ];
    // Two replicas sharing the certificate Secret; each zone's downscale goes to its own one.
    let (port_a, port_b) = (free_port()?, free_port()?);
    let _replica_a = start(&ns.name, port_a, &args)?;
    let _replica_b = start(&ns.name, port_b, &args)?;
    // One configuration (the chart's name, the one the server may inject into) with a
    // webhook per zone, each calling its own replica and seeing only its zone (by the
    // StatefulSet's labels, so the downscales below patch the object, not its /scale).
    let kind = "MutatingWebhookConfiguration";
    let path = "/admission/prepare-downscale";
    let mut yaml = String::new();
    for (zone, port) in [("a", port_a), ("b", port_b)] {
        let mut one = configuration(kind, &ns.name, port, path, STATEFULSET_UPDATE_RULES).replace(
            "- name: prepare-downscale.strata.dev",
            &format!("- name: prepare-downscale-{zone}.strata.dev"),
        );
        one.push_str(&format!(
            "  objectSelector: {{matchLabels: {{zone: \"{zone}\"}}}}\n"
        ));
        if yaml.is_empty() {
            yaml = one;
        } else {
            let second = one
                .split_once("webhooks:\n")
                .map(|(_, w)| w)
                .unwrap_or_default();
            yaml.push_str(second);
        }
    }
    let hooks = [register_yaml(
        &client,
        &ns.name,
        kind,
        &configuration_name(&ns.name, path),
        &yaml,
    )
    .await?];
    for zone in ["a", "b"] {
        apply_yaml(
            &client,
            &ns.name,
            &stateful_set(
                &format!("store-zone-{zone}"),
                &format!(
                    r#"zone: "{zone}", rollout-group: store, "grafana.com/prepare-downscale": "true", "grafana.com/min-time-between-zones-downscale": 1h"#
                ),
                r#""grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown", "grafana.com/prepare-downscale-http-port": "80""#,
            ),
        )
        .await?;
    }
    // The zone rules only allow a downscale while the other zone is fully Ready.
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    eventually("both zones ready", Duration::from_secs(60), || async {
        for zone in ["a", "b"] {
            let status = api
                .get(&format!("store-zone-{zone}"))
                .await?
                .status
                .unwrap_or_default();
            if status.ready_replicas != Some(3) || status.updated_replicas != Some(3) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let scale = |zone: &'static str| {
        let ns = ns.name.clone();
        std::thread::spawn(move || {
            cluster()
                .kubectl()
                .args([
                    "-n",
                    &ns,
                    "patch",
                    "statefulset",
                    &format!("store-zone-{zone}"),
                ])
                .args(["--type=merge", "-p", r#"{"spec":{"replicas":2}}"#])
                .output()
                .unwrap()
        })
    };
    let (a, b) = (scale("a"), scale("b"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let won: Vec<&str> = [("store-zone-a", &a), ("store-zone-b", &b)]
        .iter()
        .filter(|(_, out)| out.status.success())
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one downscale may pass: a: {}, b: {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let loser = if a.status.success() { &b } else { &a };
    let message = String::from_utf8_lossy(&loser.stderr);
    assert!(
        message.contains(
            "is not allowed because setting downscale timestamp in the zone ConfigMap failed."
        ),
        "the loser must lose the conditional write, not a later check: {message}"
    );
    assert_eq!(
        pods.posts.load(Ordering::SeqCst),
        2,
        "one pod prepared per zone"
    );
    assert_eq!(
        pods.deletes.load(Ordering::SeqCst),
        1,
        "the loser's pod un-prepared"
    );
    let data = zone_tracker_data(&client, &ns.name).await?;
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        won,
        "the ConfigMap records the winner only"
    );
    for (name, out) in [("store-zone-a", &a), ("store-zone-b", &b)] {
        let replicas = api.get(name).await?.spec.and_then(|s| s.replicas);
        let expected = if out.status.success() { 2 } else { 3 };
        assert_eq!(replicas, Some(expected), "{name}");
    }
    drop(hooks);
    Ok(())
}

/// Starts a webhook with `flags` in a fresh namespace, registers no-downscale for it, and
/// changes a StatefulSet's replicas every 50 ms for `run`, handing the certificate Secret and
/// the webhook configuration to `sample` after each request. Returns how many requests were
/// admitted, the errors of the others, and how many no-downscale reviews the server answered
/// meanwhile (its own count: proof the admitted requests went through it).
async fn under_traffic(
    prefix: &str,
    flags: &[&str],
    run: Duration,
    mut sample: impl FnMut(
        Option<&k8s_openapi::api::core::v1::Secret>,
        Option<&k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>,
    ),
) -> Result<(usize, Vec<String>, usize)> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    let port = free_port()?;
    let server = start(&ns.name, port, flags)?;
    // Every no-downscale review the server answered, whatever its outcome.
    let reviews = || async {
        server
            .metric(
                "admission_webhook_reviews_total",
                &["webhook=\"no-downscale\""],
            )
            .await
            .unwrap_or(0.0)
    };
    let reviewed_before = reviews().await;
    let name = configuration_name(&ns.name, "/admission/no-downscale");
    let _hook = register(
        &client,
        &ns.name,
        "ValidatingWebhookConfiguration",
        port,
        "/admission/no-downscale",
        STATEFULSET_UPDATE_RULES,
    )
    .await?;
    apply_yaml(&client, &ns.name, &stateful_set("traffic", "", "")).await?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let configs: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let (mut ok, mut failed) = (0, Vec::new());
    let deadline = tokio::time::Instant::now() + run;
    let mut replicas = 3;
    while tokio::time::Instant::now() < deadline {
        replicas += 1;
        match api
            .patch(
                "traffic",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas % 5 + 1}})),
            )
            .await
        {
            Ok(_) => ok += 1,
            Err(e) => failed.push(e.to_string()),
        }
        let secret = secrets
            .get_opt("strata-admission-webhook-certificate")
            .await?;
        let config = configs.get_opt(&name).await?;
        sample(secret.as_ref(), config.as_ref());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reviewed = (reviews().await - reviewed_before).max(0.0) as usize;
    Ok((ok, failed, reviewed))
}

#[track_caller]
fn assert_all_admitted(ok: usize, failed: &[String], reviewed: usize) {
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(ok > 0, "no request was made");
    // Each admitted change was reviewed by the server (kube-apiserver may retry one, so
    // at least as many).
    assert!(
        reviewed >= ok,
        "{ok} changes admitted but the server answered {reviewed} reviews"
    );
}

fn annotation(secret: Option<&k8s_openapi::api::core::v1::Secret>, key: &str) -> Option<String> {
    secret?.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn certificates_rotate_under_traffic_without_failures() -> Result<()> {
    // A 9 s certificate renewed 3 s before expiry, checked every second: several rotations.
    let mut seen = std::collections::BTreeSet::new();
    let flags = ["--cert-validity", "9s", "--cert-check-interval", "1s"];
    let (ok, failed, reviewed) =
        under_traffic("rotate", &flags, Duration::from_secs(20), |secret, _| {
            seen.extend(annotation(secret, "strata.dev/not-after"));
        })
        .await?;
    assert_all_admitted(ok, &failed, reviewed);
    assert!(
        seen.len() >= 3,
        "the certificate should have rotated at least twice: {seen:?}"
    );
    Ok(())
}

/// The CA itself rotates under traffic: a 30 s CA is announced (trusted, not signing) 20 s in,
/// signs 5 s later, and the old one leaves the injected caBundle when it expires. Every request
/// in between is admitted, and the caBundle carries two CAs at some point.
#[tokio::test]
async fn the_ca_rotates_under_traffic_without_failures() -> Result<()> {
    let (mut ca_names, mut most_cas) = (std::collections::BTreeSet::new(), 0);
    let flags = [
        "--cert-validity",
        "9s",
        "--ca-validity",
        "30s",
        "--cert-check-interval",
        "1s",
    ];
    let (ok, failed, reviewed) = under_traffic(
        "carotate",
        &flags,
        Duration::from_secs(35),
        |secret, config| {
            ca_names.extend(annotation(secret, "strata.dev/ca-name"));
            let bundle = config.and_then(|c| {
                c.webhooks
                    .as_ref()?
                    .first()?
                    .client_config
                    .ca_bundle
                    .clone()
            });
            if let Some(bundle) = bundle {
                let pem = String::from_utf8_lossy(&bundle.0).into_owned();
                most_cas = most_cas.max(pem.matches("BEGIN CERTIFICATE").count());
            }
        },
    )
    .await?;
    assert_all_admitted(ok, &failed, reviewed);
    assert!(
        ca_names.len() >= 2,
        "the CA should have rotated: {ca_names:?}"
    );
    assert!(
        most_cas >= 2,
        "old and new CA trusted together at some point"
    );
    Ok(())
}

/// The certificate Secret deleted under traffic (twice) is written back with the CA being
/// served, not replaced by a new one the API server does not trust yet: no failed admission.
#[tokio::test]
async fn a_deleted_certificate_secret_is_restored_without_failures() -> Result<()> {
    let client = cluster().client().await?;
    let (mut ca_names, mut gone) = (std::collections::BTreeSet::new(), 0);
    let deleter = tokio::spawn(async move {
        let mut deleted = 0;
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(4)).await;
            // Whichever namespace the traffic runs in: its certificate Secret.
            let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(client.clone());
            let listed = secrets
                .list(
                    &kube::api::ListParams::default()
                        .fields("metadata.name=strata-admission-webhook-certificate"),
                )
                .await?;
            for secret in listed.items {
                let ns = secret.metadata.namespace.clone().unwrap_or_default();
                if ns.contains("restore") {
                    let api: Api<k8s_openapi::api::core::v1::Secret> =
                        Api::namespaced(client.clone(), &ns);
                    api.delete("strata-admission-webhook-certificate", &Default::default())
                        .await?;
                    deleted += 1;
                }
            }
        }
        anyhow::Ok(deleted)
    });
    let flags = ["--cert-check-interval", "1s"];
    let (ok, failed, reviewed) = under_traffic(
        "restore",
        &flags,
        Duration::from_secs(12),
        |secret, _| match annotation(secret, "strata.dev/ca-name") {
            Some(name) => {
                ca_names.insert(name);
            }
            None => gone += 1,
        },
    )
    .await?;
    assert_eq!(deleter.await??, 2, "the Secret was deleted twice");
    assert_all_admitted(ok, &failed, reviewed);
    assert_eq!(ca_names.len(), 1, "the same CA throughout: {ca_names:?}");
    Ok(())
}

#[tokio::test]
async fn an_eviction_that_would_disrupt_two_zones_is_denied_with_429() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "evict").await?;
    apply_shipped_crd(&client, &ns.name, "zone-aware-pod-disruption-budget.yaml").await?;
    let zpdb = "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: ingester}\nspec: {maxUnavailable: 1, selector: {matchLabels: {rollout-group: ingester}}}\n";
    eventually("ZPDB served", Duration::from_secs(30), || async {
        Ok(apply_yaml(&client, &ns.name, zpdb).await.ok())
    })
    .await?;
    for zone in ["a", "b", "c"] {
        let yaml = format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: ingester-zone-{zone}, labels: {{rollout-group: ingester}}}}\nspec:\n  replicas: 2\n  serviceName: ingester\n  podManagementPolicy: Parallel\n  selector: {{matchLabels: {{name: ingester-zone-{zone}}}}}\n  template:\n    metadata: {{labels: {{name: ingester-zone-{zone}, rollout-group: ingester}}}}\n    spec: {{nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}, containers: [{{name: c, image: x}}]}}\n"
        );
        apply_yaml(&client, &ns.name, &yaml).await?;
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns.name);
    eventually("6 ready pods", Duration::from_secs(60), || async {
        let list = pods.list(&Default::default()).await?;
        let ready = list.items.iter().filter(|p| pod_ready(p)).count();
        Ok((ready == 6).then_some(()))
    })
    .await?;
    // Zone b is already disrupted.
    pods.patch("ingester-zone-b-1", &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"labels": {strata_e2e::plane::FAKE_READY_LABEL: "false"}}}))).await?;
    eventually("zone b pod NotReady", Duration::from_secs(20), || async {
        let p = pods.get("ingester-zone-b-1").await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
            .then_some(()))
    })
    .await?;

    let port = free_port()?;
    let _server = start(&ns.name, port, &[])?;
    let _hook = register_pod_eviction(&client, &ns.name, port).await?;
    // Through kubectl: kube-client retries 429 answers with backoff, kubectl reports them.
    let evict = |pod: &str| {
        let body = format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{}"}}}}"#,
            ns.name
        );
        let file = std::env::temp_dir().join(format!("eviction-{}-{pod}.json", ns.name));
        std::fs::write(&file, body).unwrap();
        cluster()
            .kubectl()
            .args([
                "-v=6",
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{}/pods/{pod}/eviction", ns.name),
                "-f",
            ])
            .arg(&file)
            .output()
            .unwrap()
    };
    let denial = eventually("eviction denied", Duration::from_secs(30), || async {
        let out = evict("ingester-zone-a-0");
        anyhow::ensure!(
            !out.status.success(),
            "an eviction that disrupts a second zone was allowed"
        );
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        Ok(err
            .contains("1 pod not ready in ingester-zone-b")
            .then_some(err))
    })
    .await?;
    // kubectl's -v=6 line reads `status="429 Too Many Requests"` or `... eviction 429 Too
    // Many Requests in N milliseconds` depending on its logging backend; either is the code.
    assert!(
        denial.contains("429 Too Many Requests") && denial.contains("\"code\": 429"),
        "the denial carries HTTP 429: {denial}"
    );
    // The NotReady pod itself may go: that disrupts nothing more.
    let out = evict("ingester-zone-b-1");
    assert!(
        out.status.success(),
        "evicting the NotReady pod: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn an_addonslayer_closing_a_dependency_cycle_is_rejected() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "layers").await?;
    apply_shipped_crd(&client, &ns.name, "addonslayers.yaml").await?;
    let port = free_port()?;
    let _server = start(&ns.name, port, &[])?;
    let rules = "  - apiGroups: [strata.dev]\n    apiVersions: [v1alpha1]\n    operations: [CREATE, UPDATE]\n    resources: [addonslayers]";
    // Layers are cluster-scoped, so the namespace selector does not narrow this webhook; the
    // object selector (a sibling of `rules`) keeps it off other tests' layers.
    let rules = format!(
        "{rules}\n  objectSelector: {{matchLabels: {{strata-e2e/suite: {}}}}}",
        ns.name
    );
    let _hook = register(
        &client,
        &ns.name,
        "ValidatingWebhookConfiguration",
        port,
        "/admission/addonslayer-validation",
        &rules,
    )
    .await?;
    // Layers are cluster-scoped: prefix them with the test's namespace.
    let p = ns.name.clone();
    let layer = |n: &str, deps: &str| {
        format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {p}-{n}, labels: {{strata-e2e/suite: {p}}}}}\nspec: {{version: 1.0.0, source: {{name: repo, path: ./{n}}}, prereqs: {{dependsOn: [{deps}]}}}}\n"
        )
    };
    eventually("AddonsLayer served", Duration::from_secs(30), || async {
        apply_yaml(&client, &ns.name, &layer("bootstrap", "")).await?;
        Ok(Some(()))
    })
    .await?;
    apply_yaml(
        &client,
        &ns.name,
        &layer("base", &format!("{p}-bootstrap@>=1.0")),
    )
    .await?;
    // Closing the cycle bootstrap -> base -> bootstrap is refused with the cycle named.
    let err = eventually("cycle rejected", Duration::from_secs(30), || async {
        match apply_yaml(&client, &ns.name, &layer("bootstrap", &format!("{p}-base"))).await {
            Ok(_) => Ok(None),
            Err(e) => Ok(Some(format!("{e:#}"))),
        }
    })
    .await?;
    assert!(
        err.contains(&format!(
            "dependency cycle: {p}-bootstrap -> {p}-base -> {p}-bootstrap"
        )),
        "{err}"
    );
    for l in ["base", "bootstrap"] {
        let _ = cluster()
            .kubectl()
            .args(["delete", "addonslayer", &format!("{p}-{l}"), "--wait=false"])
            .output();
    }
    Ok(())
}

/// no-downscale guards Deployments and ReplicaSets as well as StatefulSets. A `/scale`
/// request carries no labels, so the server reads the object by name (its `get` on them):
/// scaling down a labelled one is refused, scaling it up is not.
#[tokio::test]
async fn no_downscale_guards_deployments_and_replicasets_through_scale() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "scale-kinds").await?;
    let port = free_port()?;
    let _server = start(&ns.name, port, &[])?;
    let rules = "  - apiGroups: [apps]\n    apiVersions: [v1]\n    operations: [UPDATE]\n    resources: [deployments, deployments/scale, replicasets, replicasets/scale]";
    let _hook = register(
        &client,
        &ns.name,
        "ValidatingWebhookConfiguration",
        port,
        "/admission/no-downscale",
        rules,
    )
    .await?;
    for kind in ["Deployment", "ReplicaSet"] {
        let name = kind.to_lowercase();
        apply_yaml(
            &client,
            &ns.name,
            &format!(
                "apiVersion: apps/v1\nkind: {kind}\nmetadata: {{name: {name}, labels: {{grafana.com/no-downscale: \"true\"}}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: x}}]}}\n"
            ),
        )
        .await?;
        let scale = |replicas: u32| {
            cluster()
                .kubectl()
                .args([
                    "-n",
                    &ns.name,
                    "scale",
                    &format!("{name}/{name}"),
                    &format!("--replicas={replicas}"),
                ])
                .output()
        };
        let refused = eventually(
            &format!("the {kind}'s downscale refused"),
            Duration::from_secs(30),
            || async {
                let out = scale(1)?;
                anyhow::ensure!(!out.status.success(), "a labelled {kind} was scaled down");
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                Ok(stderr
                    .contains("grafana.com/no-downscale=true")
                    .then_some(stderr))
            },
        )
        .await?;
        assert!(refused.contains(&format!("{name}s/{name}")), "{refused}");
        let up = scale(3)?;
        assert!(
            up.status.success(),
            "{kind} upscale: {}",
            String::from_utf8_lossy(&up.stderr)
        );
    }
    Ok(())
}

/// In zone-tracker mode the tracker lives in the server's own namespace, whatever namespace
/// the StatefulSet is in (#55: one install acting in many namespaces may write ConfigMaps only
/// in its own): a downscale in another namespace is recorded in
/// `rollout-operator-zone-tracker-<namespace>` there, and nothing is written where the
/// StatefulSet lives (the chart's identity could not: its ConfigMap rights are a Role in its
/// own namespace). Multi-threaded: the stand-in pods answer while the test waits on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zone_tracker_of_another_namespace_lives_in_the_servers_own() -> Result<()> {
    let client = cluster().client().await?;
    let home = TestNamespace::create(&client, "tracker-home").await?;
    let ns = TestNamespace::create(&client, "tracker-sts").await?;
    let pods = StandInPods::start(Duration::ZERO).await?;
    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let _server = strata_e2e::services::start_service(
        "admission-webhook",
        cluster().kubeconfig(),
        &[
            "--lease-namespace",
            &home.name,
            "--leader-elect=false",
            "--tls-address",
            &tls,
            "--tls-extra-names",
            "127.0.0.1",
            "--pod-address-override",
            &pods.address,
            "--use-zone-tracker",
        ],
    )?;
    // Named and labelled for the server's namespace (the only configuration it may inject
    // into), acting in the StatefulSet's.
    let kind = "MutatingWebhookConfiguration";
    let path = "/admission/prepare-downscale";
    let yaml = configuration(kind, &home.name, port, path, STATEFULSET_UPDATE_RULES).replace(
        &format!("kubernetes.io/metadata.name: {}}}", home.name),
        &format!("kubernetes.io/metadata.name: {}}}", ns.name),
    );
    assert!(yaml.contains(&ns.name), "{yaml}");
    let _hook = register_yaml(
        &client,
        &home.name,
        kind,
        &configuration_name(&home.name, path),
        &yaml,
    )
    .await?;
    apply_yaml(
        &client,
        &ns.name,
        &stateful_set("store", r#""grafana.com/prepare-downscale": "true""#, r#""grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown", "grafana.com/prepare-downscale-http-port": "80""#),
    )
    .await?;
    store_settled(&client, &ns.name, 3).await?;
    downscaled_through_the_webhook(&ns.name, 2).await?;
    assert!(
        pods.posts.load(Ordering::SeqCst) >= 1,
        "no pod was prepared"
    );
    let maps = |namespace: &str| -> Api<k8s_openapi::api::core::v1::ConfigMap> {
        Api::namespaced(client.clone(), namespace)
    };
    let tracker = maps(&home.name)
        .get(&format!("rollout-operator-zone-tracker-{}", ns.name))
        .await?;
    let data = tracker.data.unwrap_or_default();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["store"],
        "the tracker holds the downscaled StatefulSet: {data:?}"
    );
    let elsewhere = maps(&ns.name)
        .get_opt("rollout-operator-zone-tracker")
        .await?;
    assert!(
        elsewhere.is_none(),
        "a tracker was written in the StatefulSet's namespace: {elsewhere:?}"
    );
    assert!(
        maps(&home.name)
            .get_opt("rollout-operator-zone-tracker")
            .await?
            .is_none(),
        "the server's own namespace's tracker holds only its own StatefulSets"
    );
    Ok(())
}
