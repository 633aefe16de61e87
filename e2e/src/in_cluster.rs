//! The in-cluster tier: Strata as a user installs it — the images `scripts/images.sh` builds,
//! run by the plane's real node (`crate::node`) from the chart's own Deployments, each service
//! with the token kubelet mounts, kube-apiserver calling the webhooks through the chart's
//! Service. No host process, no test hook.
//!
//! One release at a time ([`serial`]): each test installs the chart into a namespace of its own
//! ([`Release::install`]) and uninstalls it when done, so no test sees another's leftovers, and
//! the cluster-scoped webhook configurations never outlive the test binary.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::node::{NODE_NAME, namespace_annotations};
use crate::release::Kubectl;
use crate::support::{TestNamespace, cluster, eventually, pod_ready};

/// The four services, as the chart names their Deployments, ServiceAccounts and images.
pub const SERVICES: [&str; 4] = [
    "layer-controller",
    "drift-observer",
    "rollout-operator",
    "admission-webhook",
];

/// The label a namespace carries to be guarded by the admission webhooks (the chart's default
/// `admissionWebhook.webhooks.namespaceSelector`).
pub const WEBHOOK_OPT_IN: (&str, &str) = ("strata.dev/admission-webhook", "enabled");

/// Held by each in-cluster test for its whole run: one release at a time.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// The test cluster's real node, Ready; an error saying how to get one otherwise.
pub async fn real_node(client: &Client) -> Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get_opt(NODE_NAME).await?.ok_or_else(|| {
        anyhow!(
            "the cluster has no real node {NODE_NAME}: the in-cluster tier runs on `strata-plane up --real-node` (scripts/with-plane.sh starts one; `make e2e` runs it)"
        )
    })?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        bail!("the real node {NODE_NAME} is not Ready");
    }
    ensure_images()?;
    Ok(node)
}

/// Where `scripts/images.sh --profile image-test` leaves the images' OCI archives.
fn image_archives() -> Result<PathBuf> {
    Ok(crate::plane::cache_dir()
        .context("no cache directory ($STRATA_CACHE or $HOME)")?
        .join("images/image-test"))
}

/// The version the images are tagged with (the workspace's).
pub fn image_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Makes sure the node's containerd holds every image (the chart's pull policy `Never`): those
/// missing are imported from the archives `scripts/images.sh` made.
pub fn ensure_images() -> Result<()> {
    let socket = std::env::var("STRATA_NODE_CONTAINERD").map_err(|_| {
        anyhow!(
            "STRATA_NODE_CONTAINERD is not set: run under scripts/with-plane.sh with the real node"
        )
    })?;
    let ctr = std::env::var("STRATA_NODE_CTR").unwrap_or_else(|_| "ctr".into());
    import_images(std::path::Path::new(&socket), std::path::Path::new(&ctr))
}

/// Whether the image archives [`import_images`] reads exist (`make images-test` makes them).
pub fn image_archives_built() -> bool {
    image_archives().is_ok_and(|dir| {
        SERVICES
            .iter()
            .all(|s| dir.join(format!("{s}.oci.tar")).is_file())
    })
}

/// Imports into the containerd at `socket` (with `ctr`) every image it lacks, from the archives
/// `scripts/images.sh --profile image-test` made.
pub fn import_images(socket: &std::path::Path, ctr: &std::path::Path) -> Result<()> {
    let socket = socket.display().to_string();
    let ctr = |args: &[&str]| {
        Command::new(ctr)
            .args(["--address", &socket, "--namespace", "k8s.io"])
            .args(args)
            .output()
    };
    let listed = String::from_utf8_lossy(&ctr(&["images", "list", "-q"])?.stdout).into_owned();
    for image in SERVICES.iter().chain(&["strata-test-pod"]) {
        let reference = format!("localhost/strata/{image}:{}", image_version());
        if listed.lines().any(|l| l.trim() == reference) {
            continue;
        }
        let archive = image_archives()?.join(format!("{image}.oci.tar"));
        if !archive.is_file() {
            bail!(
                "image {reference} is not on the real node and {} does not exist: run `scripts/images.sh --profile image-test` (make e2e does)",
                archive.display()
            );
        }
        let out = ctr(&["images", "import", &archive.display().to_string()])?;
        if !out.status.success() {
            bail!(
                "importing {} into the real node failed: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// The workload image of the in-cluster tests (`e2e/test-pod`).
pub fn test_pod_image() -> String {
    format!("localhost/strata/strata-test-pod:{}", image_version())
}

/// A namespace of its own whose pods run on the real node (see `node::namespace_annotations`),
/// with `labels` (e.g. [`WEBHOOK_OPT_IN`]).
pub async fn node_namespace(
    client: &Client,
    prefix: &str,
    labels: &[(&str, &str)],
) -> Result<TestNamespace> {
    let ns = TestNamespace::create(client, prefix).await?;
    let annotations: serde_json::Map<String, Value> = namespace_annotations()
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect();
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations, "labels": labels}})),
        )
        .await
        .with_context(|| format!("sending namespace {}'s pods to the real node", ns.name))?;
    Ok(ns)
}

/// The helm binary the plane build made (`$HELM` when set).
fn helm_binary() -> Result<PathBuf> {
    crate::plane::cached_tool("HELM", "HELM_VERSION", "helm")
}

/// The chart in this checkout.
pub fn chart_dir() -> PathBuf {
    crate::plane::e2e_dir().join("../helm/strata")
}

/// A release of the chart on the real node, uninstalled (and its namespace deleted) on drop.
#[derive(Debug)]
pub struct Release {
    pub name: String,
    namespace: TestNamespace,
    kubectl: Kubectl,
    helm: PathBuf,
}

impl Release {
    /// `helm install`s the chart — unchanged, but for the image pull policy `Never` (the images
    /// are imported into the node, never pulled) and `values` (`key=value` for `--set`) — into
    /// a new namespace on the real node, then waits until every Deployment is Available.
    pub async fn install(client: &Client, values: &[&str]) -> Result<Release> {
        Self::install_within(client, values, Duration::from_secs(120)).await
    }

    /// [`Release::install`], waiting at most `timeout` for the Deployments.
    pub async fn install_within(
        client: &Client,
        values: &[&str],
        timeout: Duration,
    ) -> Result<Release> {
        real_node(client).await?;
        let namespace = node_namespace(client, "ic", &[]).await?;
        let kubectl = Kubectl {
            binary: crate::support::kubectl_binary(),
            kubeconfig: cluster().kubeconfig().to_path_buf(),
        };
        let release = Release {
            name: "strata".into(),
            namespace,
            kubectl,
            helm: helm_binary()?,
        };
        // CRDs other tests applied from manifests/crds/ become the release's (docs/install.md).
        let mut args = vec![
            "install".to_string(),
            release.name.clone(),
            chart_dir().display().to_string(),
            "--take-ownership".into(),
            "--set".into(),
            "global.image.pullPolicy=Never".into(),
        ];
        for value in values {
            args.push("--set".into());
            args.push(value.to_string());
        }
        release.helm(&args)?;
        release.wait_available(client, timeout).await?;
        Ok(release)
    }

    /// The release's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace.name
    }

    /// `helm upgrade --reuse-values` with `values` set (`key=value`).
    pub fn upgrade(&self, values: &[&str]) -> Result<()> {
        let mut args = vec![
            "upgrade".to_string(),
            self.name.clone(),
            chart_dir().display().to_string(),
            "--reuse-values".into(),
        ];
        for value in values {
            args.push("--set".into());
            args.push(value.to_string());
        }
        self.helm(&args).map(drop)
    }

    fn helm(&self, args: &[String]) -> Result<String> {
        let out = Command::new(&self.helm)
            .args(args)
            .arg("--namespace")
            .arg(self.namespace())
            .arg("--kubeconfig")
            .arg(&self.kubectl.kubeconfig)
            .output()
            .with_context(|| format!("running {}", self.helm.display()))?;
        if !out.status.success() {
            bail!(
                "helm {}: {}",
                args.first().map(String::as_str).unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until every Deployment of the release has all its replicas updated and Ready
    /// (by their readiness probes) and is Available, and the webhook's Service lists each of its
    /// pods as a ready endpoint (what kube-apiserver dials); on timeout the error names every
    /// pod that is not Ready with its container's state, last state and last log lines.
    pub async fn wait_available(&self, client: &Client, timeout: Duration) -> Result<()> {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), self.namespace());
        let waited = eventually(
            "every Deployment of the release Available and its webhook endpoints ready",
            timeout,
            || async {
                let webhook = deployments.get_opt("admission-webhook").await?;
                if let Some(webhook) = webhook {
                    let want = webhook.spec.and_then(|s| s.replicas).unwrap_or(1);
                    if ready_endpoints(client, self.namespace(), "admission-webhook").await?
                        != usize::try_from(want)?
                    {
                        return Ok(None);
                    }
                }
                let list = deployments.list(&ListParams::default()).await?.items;
                let all = !list.is_empty()
                    && list.iter().all(|d| {
                        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        let status = d.status.clone().unwrap_or_default();
                        let available = status
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Available" && c.status == "True");
                        status.observed_generation == d.metadata.generation
                            && status.updated_replicas == Some(want)
                            && status.ready_replicas == Some(want)
                            && status.replicas == Some(want)
                            && available
                    });
                Ok(all.then_some(()))
            },
        )
        .await;
        match waited {
            Ok(()) => Ok(()),
            Err(e) => bail!("{e:#}\n{}", self.diagnose(client).await),
        }
    }

    /// Every pod of the release that is not Ready: name, phase, each container's state and last
    /// state, and its last log lines.
    pub async fn diagnose(&self, client: &Client) -> String {
        let pods: Api<Pod> = Api::namespaced(client.clone(), self.namespace());
        let Ok(list) = pods.list(&ListParams::default()).await else {
            return "(the pods could not be listed)".into();
        };
        let mut out = String::new();
        for pod in list.items.iter().filter(|p| !pod_ready(p)) {
            let status = pod.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "pod {}/{} on {}: {}\n",
                self.namespace(),
                pod.name_any(),
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "no node".into()),
                status.phase.unwrap_or_default()
            ));
            for c in status.container_statuses.iter().flatten() {
                out.push_str(&format!(
                    "  container {}: state {} last state {}\n",
                    c.name,
                    serde_json::to_string(&c.state).unwrap_or_default(),
                    serde_json::to_string(&c.last_state).unwrap_or_default()
                ));
            }
            let logs = self
                .kubectl
                .run(
                    &["logs", "-n", self.namespace(), &pod.name_any(), "--tail=10"],
                    None,
                )
                .unwrap_or_else(|e| format!("(no logs: {e})"));
            for line in logs.lines() {
                out.push_str(&format!("  | {line}\n"));
            }
        }
        out
    }

    /// The release's pods of `service`, by the chart's `app.kubernetes.io/name` label.
    pub async fn pods(&self, client: &Client, service: &str) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), self.namespace());
        Ok(pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={service}")))
            .await?
            .items)
    }

    pub fn kubectl(&self) -> &Kubectl {
        &self.kubectl
    }

    /// The last `lines` log lines of every pod of `service`, for a failure message.
    pub fn logs(&self, service: &str, lines: u32) -> String {
        self.kubectl
            .run(
                &[
                    "logs",
                    "-n",
                    self.namespace(),
                    "-l",
                    &format!("app.kubernetes.io/name={service}"),
                    "--prefix",
                    &format!("--tail={lines}"),
                ],
                None,
            )
            .unwrap_or_else(|e| format!("(no logs of {service}: {e})"))
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        // The webhook configurations are cluster-scoped: they must not outlive the test.
        let _ = Command::new(&self.helm)
            .args(["uninstall", &self.name, "--wait", "--timeout", "60s"])
            .arg("--namespace")
            .arg(self.namespace())
            .arg("--kubeconfig")
            .arg(&self.kubectl.kubeconfig)
            .output();
    }
}

/// How many ready endpoints Service `service` of `namespace` has (its EndpointSlices):
/// kube-apiserver calls a webhook only at those.
pub async fn ready_endpoints(client: &Client, namespace: &str, service: &str) -> Result<usize> {
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), namespace);
    let listed = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await?;
    Ok(listed
        .items
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| {
            e.conditions
                .as_ref()
                .is_some_and(|c| c.ready == Some(true) && c.terminating != Some(true))
        })
        .count())
}

/// One plain HTTP/1.1 call to a pod at `ip:port` (the host reaches pod addresses on the
/// plane's bridge): `(status, body)`.
pub async fn pod_call(ip: &str, port: u16, method: &str, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = format!("{ip}:{port}");
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(&address),
    )
    .await
    .with_context(|| format!("connecting to {address}"))??;
    stream
        .write_all(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .with_context(|| format!("reading from {address}"))??;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP response from {address}: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The calls a test pod recorded (`GET /calls`): `(method, path)` in order.
pub async fn recorded_calls(pod: &Pod) -> Result<Vec<(String, String)>> {
    let ip = pod_ip(pod)?;
    let (status, body) = pod_call(&ip, 8080, "GET", "/calls").await?;
    if status != 200 {
        bail!("GET /calls on pod {} answered {status}", pod.name_any());
    }
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let call: Value = serde_json::from_str(l)?;
            Ok((
                call["method"].as_str().unwrap_or_default().to_string(),
                call["path"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// A pod's IP, or an error naming it.
pub fn pod_ip(pod: &Pod) -> Result<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| anyhow!("pod {} has no IP", pod.name_any()))
}

/// One container the real node runs for a namespace, as the kernel sees it.
#[derive(Clone, Debug)]
pub struct ContainerProcess {
    pub pod: String,
    pub container: String,
    /// The container's first process on this host.
    pub pid: u32,
}

impl ContainerProcess {
    /// `/proc/<pid>/status` lines `Uid:`, `Gid:`, `CapEff:`, `NoNewPrivs:` (the values).
    pub fn status_field(&self, field: &str) -> Result<String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .ok_or_else(|| anyhow!("no {field} in /proc/{}/status", self.pid))
    }

    /// The mount options of the container's root filesystem, as its own mount namespace shows.
    pub fn root_mount_options(&self) -> Result<String> {
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid))?;
        info.lines()
            .find(|l| l.split(' ').nth(4) == Some("/"))
            .and_then(|l| l.split(' ').nth(5))
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no root mount in /proc/{}/mountinfo", self.pid))
    }
}

/// Every running container of `namespace` on the real node, through the CRI (crictl).
pub fn container_processes(namespace: &str) -> Result<Vec<ContainerProcess>> {
    let socket = std::env::var("STRATA_NODE_CONTAINERD")
        .map_err(|_| anyhow!("STRATA_NODE_CONTAINERD is not set"))?;
    let crictl = std::env::var("STRATA_NODE_CRICTL").unwrap_or_else(|_| "crictl".into());
    let run = |args: &[&str]| -> Result<Value> {
        let out = Command::new(&crictl)
            .arg(format!("--runtime-endpoint=unix://{socket}"))
            .args(args)
            .output()
            .with_context(|| format!("running {crictl}"))?;
        if !out.status.success() {
            bail!(
                "crictl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let listed = run(&[
        "ps",
        "--state",
        "Running",
        "--label",
        &format!("io.kubernetes.pod.namespace={namespace}"),
        "-o",
        "json",
    ])?;
    let mut found = Vec::new();
    for c in listed["containers"].as_array().into_iter().flatten() {
        let id = c["id"].as_str().unwrap_or_default();
        let inspected = run(&["inspect", id])?;
        let pid = inspected["info"]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| anyhow!("crictl inspect {id} shows no pid"))?;
        found.push(ContainerProcess {
            pod: c["labels"]["io.kubernetes.pod.name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            container: c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            pid,
        });
    }
    Ok(found)
}
