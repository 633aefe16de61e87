//! Drop-in: an anchor-style install (written from the anchor's documented manifests: one
//! Deployment's arguments with no `-server.port`, the anchor's Role verbs, Service
//! `rollout-operator` 443→8443, the webhook configurations with `failurePolicy: Fail`) run with
//! Strata's rollout-operator binary as that Deployment's process, under that Role's
//! ServiceAccount token. The process serves the controller and the four webhooks; the API
//! server reaches them through the Service.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use strata_e2e::services::{ServiceProcess, bin_dir};
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, host_address, http_get,
    parse_openmetrics, pod_ready,
};

/// The anchor's ports: admin HTTP (no `-server.port` given) and the webhooks' TLS port.
const ADMIN_PORT: u16 = 8001;

/// The anchor's RBAC (jsonnet), for namespace `ns`.
fn anchor_rbac(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: rollout-operator, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: rollout-operator-role, namespace: {ns}}}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [list, get, watch, delete, patch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [list, get, watch, patch]
- apiGroups: [apps]
  resources: [statefulsets/status]
  verbs: [update]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, update, create]
- apiGroups: [rollout-operator.grafana.com]
  resources: [zoneawarepoddisruptionbudgets]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: rollout-operator-rolebinding, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: rollout-operator-role}}
subjects: [{{kind: ServiceAccount, name: rollout-operator, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: rollout-operator-webhook-cert-secret-role, namespace: {ns}}}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [rollout-operator-self-signed-certificate]
  verbs: [update, get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: rollout-operator-webhook-cert-secret-rolebinding, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: rollout-operator-webhook-cert-secret-role}}
subjects: [{{kind: ServiceAccount, name: rollout-operator, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: rollout-operator-{ns}-webhook-cert-update-role}}
rules:
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations]
  verbs: [list, patch, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: rollout-operator-{ns}-webhook-cert-secret-rolebinding}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rollout-operator-{ns}-webhook-cert-update-role}}
subjects: [{{kind: ServiceAccount, name: rollout-operator, namespace: {ns}}}]
"#
    )
}

/// Service `rollout-operator` 443→8443. The process runs on this host rather than in a pod,
/// so the endpoints are written by hand (the host's address).
fn service(ns: &str, host: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: rollout-operator, namespace: {ns}}}
spec:
  ports: [{{name: https, port: 443, targetPort: 8443, protocol: TCP}}]
---
apiVersion: v1
kind: Endpoints
metadata: {{name: rollout-operator, namespace: {ns}}}
subsets:
- addresses: [{{ip: "{host}"}}]
  ports: [{{name: https, port: 8443, protocol: TCP}}]
"#
    )
}

/// One of the anchor's webhook configurations (jsonnet shape).
fn webhook(
    kind: &str,
    name: &str,
    ns: &str,
    path: &str,
    rules: &str,
    side_effects: &str,
) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}-{ns}
  labels:
    grafana.com/inject-rollout-operator-ca: "true"
    grafana.com/namespace: {ns}
webhooks:
- name: {name}-{ns}.grafana.com
  admissionReviewVersions: [v1]
  clientConfig:
    service: {{name: rollout-operator, namespace: {ns}, port: 443, path: {path}}}
  failurePolicy: Fail
  sideEffects: {side_effects}
  timeoutSeconds: 10
  matchPolicy: Equivalent
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: {ns}}}
  rules:
{rules}
"#
    )
}

const STS_RULES: &str = "  - {apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [statefulsets, statefulsets/scale], scope: Namespaced}";
const EVICTION_RULES: &str = "  - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods/eviction], scope: Namespaced}";
const ZPDB_RULES: &str = "  - {apiGroups: [rollout-operator.grafana.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [zoneawarepoddisruptionbudgets], scope: Namespaced}";

fn zone(zone: &str, image: &str, labels: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-{zone}
  labels: {{rollout-group: ingester{labels}}}
  annotations: {{rollout-max-unavailable: "1"}}
spec:
  replicas: 2
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

/// A StatefulSet prepare-downscale guards: its pods are called before it shrinks.
const PREPARED: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: store
  labels: {grafana.com/prepare-downscale: "true"}
  annotations: {grafana.com/prepare-downscale-http-path: ingester/prepare-shutdown, grafana.com/prepare-downscale-http-port: "80"}
spec:
  replicas: 3
  serviceName: store
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {name: store}}
  template:
    metadata: {labels: {name: store}}
    spec: {containers: [{name: c, image: example.invalid/store:1}]}
"#;

/// Stands in for the pods' prepare-downscale endpoint (reached through the test-only
/// `--pod-address-override`, as pod DNS names do not resolve here): records the `X-Cluster`
/// header of every POST.
async fn stand_in_pods() -> Result<(String, std::sync::Arc<std::sync::Mutex<Vec<String>>>)> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/ingester/prepare-shutdown",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let cluster = headers
                .get("x-cluster")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("<none>")
                .to_string();
            record.lock().unwrap().push(cluster);
            async { "ok" }
        })
        .delete(|| async { "ok" }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let address = listener.local_addr()?.to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((address, seen))
}

/// A kubeconfig for the ServiceAccount's token: the operator runs with the anchor Role's
/// rights only, not as an administrator.
fn token_kubeconfig(ns: &str) -> Result<std::path::PathBuf> {
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            ns,
            "create",
            "token",
            "rollout-operator",
            "--duration=2h",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    let admin = std::fs::read_to_string(cluster().kubeconfig())?;
    let mut config: serde_json::Value = serde_saphyr::from_str(&admin)?;
    for user in config["users"]
        .as_array_mut()
        .context("kubeconfig has no users")?
    {
        user["user"] = serde_json::json!({"token": token});
    }
    let path = std::env::temp_dir().join(format!("{ns}-rollout-operator.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config)?)?;
    Ok(path)
}

async fn revisions_settled(sts: &Api<StatefulSet>) -> Result<bool> {
    let list = sts.list(&ListParams::default()).await?;
    Ok(list.items.len() == 3
        && list.items.iter().all(|s| {
            let status = s.status.clone().unwrap_or_default();
            status.update_revision.is_some() && status.current_revision == status.update_revision
        }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anchor_install_runs_unchanged_with_strata_as_its_process() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "dropin").await?;
    let n = ns.name.as_str();
    apply_shipped_crd(&client, n, "zone-aware-pod-disruption-budget.yaml").await?;
    apply_yaml(&client, n, &anchor_rbac(n)).await?;
    apply_yaml(&client, n, &service(n, &host_address()?)).await?;
    for z in ["a", "b", "c"] {
        apply_yaml(&client, n, &zone(z, "example.invalid/ingester:1", "")).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    eventually("6 ready pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?;
        Ok((list.items.iter().filter(|p| pod_ready(p)).count() == 6).then_some(()))
    })
    .await?;

    // The jsonnet Deployment's arguments, as they are: no -server.port, no Strata flag but the
    // test-only address of the stand-in pods.
    let kubeconfig = token_kubeconfig(n)?;
    let namespace_arg = format!("-kubernetes.namespace={n}");
    let (pods_address, prepared) = stand_in_pods().await?;
    let operator = ServiceProcess::spawn_blocking(
        &bin_dir().join("rollout-operator"),
        &kubeconfig,
        &[
            &namespace_arg,
            "-use-zone-tracker=true",
            "-zone-tracker.config-map-name=rollout-operator-zone-tracker",
            "-zpdb.pod-ready-annotation-patch-timeout=5s",
            "-server-tls.enabled=true",
            "--pod-address-override",
            &pods_address,
        ],
        &std::env::temp_dir().join("strata-e2e-logs"),
    )?;
    let admin: std::net::SocketAddr = ([127, 0, 0, 1], ADMIN_PORT).into();
    eventually(
        "Ready on the anchor's port 8001",
        Duration::from_secs(60),
        || async { Ok(matches!(http_get(admin, "/ready").await, Ok((200, _))).then_some(())) },
    )
    .await
    .with_context(|| operator.logs())?;

    let configurations = [
        webhook(
            "ValidatingWebhookConfiguration",
            "no-downscale",
            n,
            "/admission/no-downscale",
            STS_RULES,
            "None",
        ),
        webhook(
            "MutatingWebhookConfiguration",
            "prepare-downscale",
            n,
            "/admission/prepare-downscale",
            STS_RULES,
            "NoneOnDryRun",
        ),
        webhook(
            "ValidatingWebhookConfiguration",
            "pod-eviction",
            n,
            "/admission/pod-eviction",
            EVICTION_RULES,
            "None",
        ),
        webhook(
            "ValidatingWebhookConfiguration",
            "zpdb-validation",
            n,
            "/admission/zpdb-validation",
            ZPDB_RULES,
            "None",
        ),
    ];
    let _cleanup = Cleanup(n.to_string());
    for yaml in &configurations {
        apply_yaml(&client, n, yaml).await?;
    }
    // The CA reaches every configuration through the anchor's ClusterRole (list/watch/patch).
    eventually(
        "caBundle injected into all four",
        Duration::from_secs(60),
        || async {
            let mut injected = 0;
            for (resource, name) in [
                ("validatingwebhookconfiguration", "no-downscale"),
                ("mutatingwebhookconfiguration", "prepare-downscale"),
                ("validatingwebhookconfiguration", "pod-eviction"),
                ("validatingwebhookconfiguration", "zpdb-validation"),
            ] {
                let out = cluster()
                    .kubectl()
                    .args([
                        "get",
                        resource,
                        &format!("{name}-{n}"),
                        "-o",
                        "jsonpath={.webhooks[0].clientConfig.caBundle}",
                    ])
                    .output()?;
                injected += usize::from(!out.stdout.is_empty());
            }
            Ok((injected == 4).then_some(()))
        },
    )
    .await
    .with_context(|| operator.logs())?;

    // zpdb-validation answers through the Service: a bad ZPDB is refused with the anchor's text.
    let bad = "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: bad}\nspec: {maxUnavailable: 1, maxUnavailablePercentage: 10, selector: {matchLabels: {rollout-group: ingester}}}\n";
    let refused = eventually(
        "zpdb-validation serving",
        Duration::from_secs(30),
        || async { Ok(apply_yaml(&client, n, bad).await.err()) },
    )
    .await?;
    assert!(
        refused
            .to_string()
            .contains("only one of maxUnavailable or maxUnavailablePercentage may be set"),
        "{refused:#}"
    );
    let zpdb = "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {name: ingester}\nspec: {maxUnavailable: 1, selector: {matchLabels: {rollout-group: ingester}}}\n";
    apply_yaml(&client, n, zpdb).await?;

    // The leader writes grafana.com/ready-time on the pods the ZPDB selects.
    eventually("ready-time written", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .all(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("grafana.com/ready-time"))
            })
            .then_some(()))
    })
    .await
    .with_context(|| operator.logs())?;

    // Two concurrent evictions in different zones: exactly one gets through. Through kubectl,
    // which does not retry a 429 (the Rust client would, and then pass once the first pod is
    // back).
    let evict = |pod: &str| {
        let body = format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{n}"}}}}"#
        );
        let file = std::env::temp_dir().join(format!("eviction-{n}-{pod}.json"));
        std::fs::write(&file, body).unwrap();
        cluster()
            .kubectl()
            .args([
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{n}/pods/{pod}/eviction"),
                "-f",
            ])
            .arg(&file)
            .spawn()
            .unwrap()
    };
    let quiet = |mut child: std::process::Child| child.wait().map(|s| s.success());
    let (a, b) = (evict("ingester-zone-a-0"), evict("ingester-zone-b-0"));
    let outcomes = [quiet(a)?, quiet(b)?];
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        1,
        "exactly one of two concurrent evictions in different zones may pass: {outcomes:?}"
    );
    eventually(
        "the evicted pod is back and ready",
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default()).await?;
            Ok((list
                .items
                .iter()
                .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                .count()
                == 6)
                .then_some(()))
        },
    )
    .await?;

    // A zone-by-zone rollout completes, and status.currentRevision is advanced with the only
    // status verb the anchor's Role grants (update).
    for z in ["a", "b", "c"] {
        apply_yaml(&client, n, &zone(z, "example.invalid/ingester:2", "")).await?;
    }
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    eventually(
        "rollout complete, currentRevision advanced",
        Duration::from_secs(240),
        || async { Ok(revisions_settled(&sts).await?.then_some(())) },
    )
    .await
    .with_context(|| operator.logs())?;

    // no-downscale, through the Service: a labelled StatefulSet cannot shrink.
    apply_yaml(
        &client,
        n,
        &zone(
            "a",
            "example.invalid/ingester:2",
            ", grafana.com/no-downscale: \"true\"",
        ),
    )
    .await?;
    let denied = sts
        .patch(
            "ingester-zone-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    assert!(
        denied.to_string().contains("grafana.com/no-downscale=true"),
        "{denied}"
    );

    // prepare-downscale, through the Service: the pods going away are called (with the
    // namespace as X-Cluster, as the anchor sends it) and, in zone-tracker mode, the time is
    // recorded in the ConfigMap the anchor's Role lets it write.
    apply_yaml(&client, n, PREPARED).await?;
    // The calls go to the StatefulSet's own pods only: wait until it has them.
    eventually("3 store pods ready", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels("name=store"))
            .await?;
        Ok((list.items.iter().filter(|p| pod_ready(p)).count() == 3).then_some(()))
    })
    .await?;
    let scaled = cluster()
        .kubectl()
        .args(["-n", n, "scale", "statefulset", "store", "--replicas=1"])
        .output()?;
    assert!(
        scaled.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&scaled.stderr),
        operator.logs()
    );
    let calls = prepared.lock().unwrap().clone();
    assert!(
        calls.len() >= 2 && calls.iter().all(|c| c == n),
        "prepare-shutdown calls (X-Cluster of each): {calls:?}"
    );
    let tracker: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), n);
    let data = tracker
        .get("rollout-operator-zone-tracker")
        .await?
        .data
        .unwrap_or_default();
    assert!(data.contains_key("store"), "zone tracker: {data:?}");

    // The metrics the Mimir mixin's rollout-operator dashboard and alerts query, with the
    // anchor's labels.
    let (_, text) = http_get(admin, "/metrics").await?;
    let samples = parse_openmetrics(&text)?;
    let value = |series: &str| {
        samples
            .iter()
            .find(|(s, _)| s == series)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
    };
    let starts = |prefix: &str| {
        assert!(
            samples.iter().any(|(s, _)| s.starts_with(prefix)),
            "no {prefix}… in\n{text}"
        );
    };
    for metric in [
        "rollout_operator_group_reconciles_total{rollout_group=\"ingester\"}",
        "rollout_operator_last_successful_group_reconcile_timestamp_seconds{rollout_group=\"ingester\"}",
        "rollout_operator_group_reconcile_duration_seconds_bucket{le=\"10.0\",rollout_group=\"ingester\"}",
        "rollout_operator_request_duration_seconds_bucket{le=\"100.0\",method=\"POST\",route=\"admission_pod_eviction\",status_code=\"200\",ws=\"false\"}",
        "rollout_operator_request_duration_seconds_count{method=\"POST\",route=\"admission_zpdb_validation\",status_code=\"200\",ws=\"false\"}",
        "rollout_operator_request_duration_seconds_count{method=\"GET\",route=\"ready\",status_code=\"200\",ws=\"false\"}",
        "rollout_operator_request_message_bytes_count{method=\"POST\",route=\"admission_prepare_downscale\"}",
        "rollout_operator_response_message_bytes_count{method=\"POST\",route=\"admission_no_downscale\"}",
        "rollout_operator_kubernetes_api_client_request_duration_seconds_count{path=\"core/v1/pods object\",method=\"PATCH\",status_code=\"200\"}",
        "rollout_operator_kubernetes_api_client_request_duration_seconds_count{path=\"apps/v1/statefulsets object status subresource\",method=\"PUT\",status_code=\"200\"}",
        "rollout_operator_pod_http_client_request_duration_seconds_count{path=\"/ingester/prepare-shutdown\",method=\"POST\",status_code=\"200\"}",
        "rollout_operator_zpdb_configurations_observed_total{result=\"updated\"}",
    ] {
        assert!(value(metric) >= 1.0, "{metric}");
    }
    // Present from the first reconcile, so rate alerts work; nothing failed here.
    assert_eq!(
        value("rollout_operator_group_reconciles_failed_total{rollout_group=\"ingester\"}"),
        0.0
    );
    // One of the two concurrent evictions allowed, the other denied by the budget.
    assert!(
        value("rollout_operator_zpdb_eviction_requests_total{reason=\"allowed\",status=\"200\"}")
            >= 1.0
    );
    assert!(
        value("rollout_operator_zpdb_eviction_requests_total{reason=\"denied\",status=\"429\"}")
            >= 1.0
    );
    assert_eq!(
        value("rollout_operator_zpdb_inflight_eviction_requests"),
        0.0
    );
    starts("rollout_operator_inflight_requests{");
    let policy = |kind: &str, webhook: &str, policy: &str| {
        value(&format!(
            "kube_validating_webhook_failure_policy{{type=\"{kind}\",webhook=\"{webhook}-{n}.grafana.com\",policy=\"{policy}\"}}"
        ))
    };
    assert_eq!(policy("ValidatingWebhook", "pod-eviction", "Fail"), 1.0);
    assert_eq!(policy("ValidatingWebhook", "pod-eviction", "Ignore"), 0.0);
    assert_eq!(policy("MutatingWebhook", "prepare-downscale", "Fail"), 1.0);
    assert!(
        !operator.logs().contains("forbidden"),
        "a write was forbidden under the anchor's Role:\n{}",
        operator.logs()
    );
    Ok(())
}

/// Deletes the cluster-scoped pieces of the install (the namespace takes the rest).
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let n = &self.0;
        for (resource, name) in [
            (
                "validatingwebhookconfiguration",
                format!("no-downscale-{n}"),
            ),
            (
                "mutatingwebhookconfiguration",
                format!("prepare-downscale-{n}"),
            ),
            (
                "validatingwebhookconfiguration",
                format!("pod-eviction-{n}"),
            ),
            (
                "validatingwebhookconfiguration",
                format!("zpdb-validation-{n}"),
            ),
            (
                "clusterrole",
                format!("rollout-operator-{n}-webhook-cert-update-role"),
            ),
            (
                "clusterrolebinding",
                format!("rollout-operator-{n}-webhook-cert-secret-rolebinding"),
            ),
        ] {
            let _ = cluster()
                .kubectl()
                .args(["delete", resource, &name, "--ignore-not-found"])
                .output();
        }
    }
}
