//! Registering the admission-webhook with kube-apiserver in a test: webhook configurations
//! named and labelled as the chart makes them, pointing at a server on 127.0.0.1, and the
//! kubectl calls the tests make through them.

use std::time::Duration;

use anyhow::Result;

use crate::support::{DeleteOnDrop, apply_yaml, cluster, eventually, webhook_configuration};

/// The name the chart gives the configuration of the webhook at `path` for a server in `ns`:
/// the only name the server's RBAC lets it inject its CA into.
pub fn configuration_name(ns: &str, path: &str) -> String {
    format!("{}-{ns}", path.trim_start_matches("/admission/"))
}

/// A webhook configuration for `path` of the server on `port`, labelled for CA injection,
/// created without a caBundle, named as the chart names it.
pub fn configuration(kind: &str, ns: &str, port: u16, path: &str, rules: &str) -> String {
    configuration_at(kind, ns, "127.0.0.1", port, path, rules)
}

/// [`configuration`] for a server kube-apiserver reaches as `host` (the name its certificate
/// carries).
fn configuration_at(
    kind: &str,
    ns: &str,
    host: &str,
    port: u16,
    path: &str,
    rules: &str,
) -> String {
    webhook_configuration(
        kind,
        &configuration_name(ns, path),
        ns,
        path.trim_start_matches("/admission/"),
        &format!("{{url: \"https://{host}:{port}{path}\"}}"),
        rules,
    )
}

/// Creates the [`configuration`] and waits until the CA is injected into it.
pub async fn register(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    port: u16,
    path: &str,
    rules: &str,
) -> Result<DeleteOnDrop> {
    register_at(client, ns, kind, "127.0.0.1", port, path, rules).await
}

/// [`register`] for a server kube-apiserver reaches as `host`.
async fn register_at(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    host: &str,
    port: u16,
    path: &str,
    rules: &str,
) -> Result<DeleteOnDrop> {
    let yaml = configuration_at(kind, ns, host, port, path, rules);
    register_yaml(client, ns, kind, &configuration_name(ns, path), &yaml).await
}

/// The prepare-downscale webhook of the server on `port`, for StatefulSet updates and their
/// `/scale` in `ns` (see [`register`]).
pub async fn register_prepare_downscale(
    client: &kube::Client,
    ns: &str,
    port: u16,
) -> Result<DeleteOnDrop> {
    register(
        client,
        ns,
        "MutatingWebhookConfiguration",
        port,
        "/admission/prepare-downscale",
        crate::support::STATEFULSET_UPDATE_RULES,
    )
    .await
}

/// Pod evictions, as webhook rules.
const POD_EVICTION_RULES: &str = "  - apiGroups: [\"\"]\n    apiVersions: [v1]\n    operations: [CREATE]\n    resources: [pods/eviction]";

/// The pod-eviction webhook of the server on `port`, for evictions in `ns` (see [`register`]).
pub async fn register_pod_eviction(
    client: &kube::Client,
    ns: &str,
    port: u16,
) -> Result<DeleteOnDrop> {
    register_pod_eviction_at(client, ns, "127.0.0.1", port).await
}

/// [`register_pod_eviction`] for a server kube-apiserver reaches as `host` (`localhost` for
/// the anchor and the drop-in, whose self-issued certificate names one DNS name:
/// `-server-tls.self-signed-cert.dns-name`).
pub async fn register_pod_eviction_at(
    client: &kube::Client,
    ns: &str,
    host: &str,
    port: u16,
) -> Result<DeleteOnDrop> {
    register_at(
        client,
        ns,
        "ValidatingWebhookConfiguration",
        host,
        port,
        "/admission/pod-eviction",
        POD_EVICTION_RULES,
    )
    .await
}

/// Creates a webhook configuration of `kind` written out in `yaml` and waits until the CA is
/// injected into it.
pub async fn register_yaml(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
    yaml: &str,
) -> Result<DeleteOnDrop> {
    apply_yaml(client, ns, yaml).await?;
    let registered = DeleteOnDrop {
        resource: if kind == "MutatingWebhookConfiguration" {
            "mutatingwebhookconfiguration"
        } else {
            "validatingwebhookconfiguration"
        },
        name: name.to_string(),
    };
    eventually(
        &format!("caBundle injected into {name}"),
        Duration::from_secs(30),
        || async {
            let out = cluster()
                .kubectl()
                .args([
                    "get",
                    registered.resource,
                    name,
                    "-o",
                    "jsonpath={.webhooks[0].clientConfig.caBundle}",
                ])
                .output()?;
            Ok((!out.stdout.is_empty()).then_some(()))
        },
    )
    .await?;
    Ok(registered)
}

/// `kubectl scale statefulset NAME --replicas=N` in `ns`.
pub fn kubectl_scale(ns: &str, name: &str, replicas: u32) -> Result<std::process::Output> {
    Ok(cluster()
        .kubectl()
        .args([
            "-n",
            ns,
            "scale",
            "statefulset",
            name,
            &format!("--replicas={replicas}"),
        ])
        .output()?)
}

/// The admission-webhook's arguments for one test namespace: no leader election, serving TLS
/// at `tls` (an address of 127.0.0.1, covered by its certificate), pods called through the
/// stand-in at `pods`.
pub fn namespace_args<'a>(ns: &'a str, tls: &'a str, pods: &'a str) -> Vec<&'a str> {
    let mut args = crate::services::admission_webhook_args(ns, tls);
    args.extend([
        "--tls-extra-names",
        "127.0.0.1",
        "--pod-address-override",
        pods,
    ]);
    args
}

/// Starts the admission-webhook as its chart identity, talking to the API through a
/// [`FaultProxy`](crate::fault_proxy::FaultProxy) that injects `faults`.
pub async fn start_behind_faults(
    args: &[&str],
    faults: crate::fault_proxy::Faults,
) -> Result<(
    crate::services::ServiceProcess,
    crate::fault_proxy::FaultProxy,
)> {
    let identity =
        crate::services::chart_identity(cluster().kubeconfig(), "admission-webhook", args)?;
    let proxy = crate::fault_proxy::FaultProxy::start(
        core_k8s::client::client_from(Some(&identity), None).await?,
        faults,
    )
    .await?;
    let logs = std::env::temp_dir().join("strata-e2e-logs");
    let server =
        crate::services::start_service_with("admission-webhook", &proxy.kubeconfig(&logs)?, args)?;
    Ok((server, proxy))
}

/// A StatefulSet `name` of 3 replicas (`OnDelete`) with `labels` and `annotations` (YAML
/// flow-mapping entries), for webhook traffic: nothing else in it matters.
pub fn stateful_set(name: &str, labels: &str, annotations: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  labels: {{{labels}}}
  annotations: {{{annotations}}}
spec:
  replicas: 3
  serviceName: {name}
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: {name}}}}}
  template:
    metadata: {{labels: {{name: {name}}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
"#
    )
}
