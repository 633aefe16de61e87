//! Smoke tests of the local control plane itself: pods run and become Ready on kwok nodes in
//! three zones, a pod can be flipped NotReady and back, kube-apiserver calls a webhook on
//! 127.0.0.1 over TLS, CRDs are served, and kubectl works.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use strata_e2e::plane::FAKE_READY_LABEL;
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually, pod_ready};

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Waits until `count` pods matching `selector` are Running and Ready; returns their zones.
async fn ready_pods_zones(
    pods: &Api<Pod>,
    nodes: &Api<k8s_openapi::api::core::v1::Node>,
    selector: &str,
    count: usize,
) -> Result<BTreeSet<String>> {
    let ready = eventually(
        &format!("{count} ready pods {selector}"),
        Duration::from_secs(60),
        || async {
            let list = pods.list(&ListParams::default().labels(selector)).await?;
            let ready: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| pod_phase(p) == "Running" && pod_ready(p))
                .collect();
            Ok((ready.len() == count).then_some(ready))
        },
    )
    .await?;
    let mut zones = BTreeSet::new();
    for pod in ready {
        let node_name = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
        let node = nodes.get(&node_name).await?;
        zones.insert(
            node.labels()
                .get("topology.kubernetes.io/zone")
                .cloned()
                .unwrap_or_default(),
        );
    }
    Ok(zones)
}

const SPREAD: &str = r#"
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: APP}
"#;

#[tokio::test]
async fn deployment_pods_become_ready_across_zones() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "deploy").await?;
    let yaml = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:{spread}      containers:
      - name: web
        image: example.invalid/web:1
"#,
        spread = SPREAD.replace("APP", "web")
    );
    apply_yaml(&client, &ns.name, &yaml).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let zones = ready_pods_zones(&pods, &Api::all(client.clone()), "app=web", 3).await?;
    assert_eq!(
        zones,
        BTreeSet::from(["zone-a".into(), "zone-b".into(), "zone-c".into()])
    );
    Ok(())
}

#[tokio::test]
async fn ondelete_statefulset_runs_and_a_pod_can_be_flipped_not_ready() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "sts").await?;
    let yaml = format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester
spec:
  replicas: 3
  serviceName: ingester
  podManagementPolicy: Parallel
  updateStrategy:
    type: OnDelete
  selector:
    matchLabels: {{app: ingester}}
  template:
    metadata:
      labels: {{app: ingester}}
    spec:{spread}      containers:
      - name: ingester
        image: example.invalid/ingester:1
"#,
        spread = SPREAD.replace("APP", "ingester")
    );
    apply_yaml(&client, &ns.name, &yaml).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let zones = ready_pods_zones(&pods, &Api::all(client.clone()), "app=ingester", 3).await?;
    assert_eq!(zones.len(), 3, "one pod per zone: {zones:?}");

    // Flip ingester-1 NotReady: it stays Running but its Ready condition goes False.
    let params = PatchParams::default();
    let label = |value: Option<&str>| serde_json::json!({"metadata": {"labels": {FAKE_READY_LABEL: value}}});
    pods.patch("ingester-1", &params, &Patch::Merge(label(Some("false"))))
        .await?;
    eventually("ingester-1 NotReady", Duration::from_secs(30), || async {
        let pod = pods.get("ingester-1").await?;
        Ok((pod_phase(&pod) == "Running" && !pod_ready(&pod)).then_some(()))
    })
    .await?;
    for other in ["ingester-0", "ingester-2"] {
        assert!(pod_ready(&pods.get(other).await?), "{other} stays Ready");
    }
    // And back.
    pods.patch("ingester-1", &params, &Patch::Merge(label(None)))
        .await?;
    eventually(
        "ingester-1 Ready again",
        Duration::from_secs(30),
        || async { Ok(pod_ready(&pods.get("ingester-1").await?).then_some(())) },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn crd_is_installed_and_its_resources_served() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "crd").await?;
    let group = format!("{}.e2e.strata.dev", ns.name.replace('-', ""));
    let crd = format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
"#
    );
    apply_yaml(&client, &ns.name, &crd).await?;
    let cr =
        format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n");
    // The CRD must be Established before its kind is served; the apply helper's discovery
    // refreshes on unknown kinds, so retrying is enough.
    let applied = eventually("widget applied", Duration::from_secs(30), || async {
        Ok(apply_yaml(&client, &ns.name, &cr).await.ok())
    })
    .await?;
    assert_eq!(applied[0].data["spec"]["size"], 3);
    let out = cluster()
        .kubectl()
        .args([
            "get",
            &format!("widgets.{group}"),
            "-n",
            &ns.name,
            "-o",
            "name",
        ])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("widget.{group}/w1")
    );
    let _ = cluster()
        .kubectl()
        .args(["delete", "crd", &format!("widgets.{group}"), "--wait=false"])
        .output();
    Ok(())
}

#[tokio::test]
async fn kubectl_works_against_the_plane() -> Result<()> {
    let out = cluster()
        .kubectl()
        .args([
            "get",
            "nodes",
            "-L",
            "topology.kubernetes.io/zone",
            "--no-headers",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for zone in ["zone-a", "zone-b", "zone-c"] {
        assert!(text.contains(zone), "no node in {zone}:\n{text}");
    }
    let version = cluster()
        .kubectl()
        .args(["version", "-o", "json"])
        .output()?;
    let version: serde_json::Value = serde_json::from_slice(&version.stdout)?;
    let server = version["serverVersion"]["gitVersion"]
        .as_str()
        .unwrap_or_default();
    // On the local plane the version comes from the ldflags of our build; on a user's cluster
    // it is whatever they run, as long as it is a real version.
    assert!(server.starts_with("v1."), "server version {server:?}");
    Ok(())
}

mod webhook {
    use super::*;
    use axum::Json;
    use axum::routing::post;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A TLS server on 127.0.0.1 that denies every ConfigMap named `deny-*`.
    async fn start_server(calls: Arc<AtomicUsize>) -> Result<(u16, String)> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse()?));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
            cert.pem().into_bytes(),
            key.serialize_pem().into_bytes(),
        )
        .await?;

        let app = axum::Router::new().route(
            "/validate",
            post(move |Json(review): Json<Value>| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let request = &review["request"];
                    let name = request["name"].as_str().unwrap_or_default();
                    let allowed = !name.starts_with("deny-");
                    let mut response = json!({"uid": request["uid"], "allowed": allowed});
                    if !allowed {
                        response["status"] = json!({"code": 403, "message": format!("strata e2e webhook denies {name}")});
                    }
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                }
            }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let server = axum_server::from_tcp_rustls(listener, tls)?;
        tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
        Ok((port, ca.pem()))
    }

    #[tokio::test]
    async fn api_server_calls_a_webhook_on_loopback_and_its_deny_reaches_the_client() -> Result<()>
    {
        let client = cluster().client().await?;
        let ns = TestNamespace::create(&client, "webhook").await?;
        let calls = Arc::new(AtomicUsize::new(0));
        let (port, ca_pem) = start_server(calls.clone()).await?;
        let ca_bundle = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            ca_pem.as_bytes(),
        );
        let name = format!("{}-deny", ns.name);
        let config = format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {name}
webhooks:
- name: deny.e2e.strata.dev
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  clientConfig:
    url: https://127.0.0.1:{port}/validate
    caBundle: {ca_bundle}
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {ns}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
"#,
            ns = ns.name
        );
        apply_yaml(&client, &ns.name, &config).await?;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
        let make = |n: &str| -> ConfigMap {
            serde_json::from_value(json!({"metadata": {"name": n}})).unwrap_or_default()
        };
        // The configuration takes effect a moment after it is created.
        let err = eventually("webhook denial", Duration::from_secs(30), || async {
            match configmaps
                .create(&PostParams::default(), &make("deny-me"))
                .await
            {
                Ok(_) => {
                    configmaps.delete("deny-me", &Default::default()).await?;
                    Ok(None)
                }
                Err(kube::Error::Api(status)) => Ok(Some(status)),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
        assert_eq!(err.code, 403);
        assert!(
            err.message.contains("strata e2e webhook denies deny-me"),
            "{}",
            err.message
        );
        configmaps
            .create(&PostParams::default(), &make("allowed"))
            .await?;
        assert!(
            calls.load(Ordering::SeqCst) >= 2,
            "the webhook was called for both creates"
        );
        let _ = cluster()
            .kubectl()
            .args(["delete", "validatingwebhookconfiguration", &name])
            .output();
        Ok(())
    }
}

/// Every manifest we ship is accepted by the API server (server-side dry run, so the schemas
/// of the real API server check them, CRDs included), each directory through its own
/// kustomization, as `kubectl apply -k` reads it.
#[tokio::test]
async fn shipped_manifests_pass_a_server_side_dry_run() -> Result<()> {
    let root = std::path::Path::new(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("../manifests");
    // The namespace may exist from an earlier run; either way it exists afterwards.
    let _ = cluster()
        .kubectl()
        .args(["create", "namespace", "strata-system"])
        .output()?;
    let mut applied = 0;
    for dir in [
        "crds",
        "rollout-operator",
        "admission-webhook",
        "layer-controller",
        "drift-observer",
    ] {
        let out = cluster()
            .kubectl()
            .args(["apply", "--server-side", "--dry-run=server", "-k"])
            .arg(root.join(dir))
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "manifests/{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        applied += stdout
            .lines()
            .filter(|l| l.contains("(server dry run)"))
            .count();
    }
    // 3 CRDs, and each service's ServiceAccount, Deployment, Service and RBAC at least.
    assert!(applied >= 3 + 4 * 5, "{applied} objects");
    Ok(())
}
