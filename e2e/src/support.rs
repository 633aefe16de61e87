//! What every end-to-end test needs: the shared cluster, a namespace of its own, applying YAML
//! and waiting for conditions.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::Value;

/// The cluster the tests run against.
#[derive(Debug)]
pub struct TestCluster {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    /// Set when this process started the plane: closing its stdin (at exit) stops it.
    _plane: Option<Mutex<(Child, ChildStdin)>>,
}

static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();

/// The shared cluster: `E2E_KUBECONFIG` if set (the plane `make e2e` started, or kind, k3d, a
/// real cluster), else a plane started once for this test binary by `strata-plane up`.
pub fn cluster() -> &'static TestCluster {
    let cluster = CLUSTER.get_or_init(|| start_or_reuse().map_err(|e| format!("{e:#}")));
    match cluster {
        Ok(cluster) => cluster,
        Err(e) => panic!("no test cluster: {e}"),
    }
}

fn start_or_reuse() -> Result<TestCluster> {
    let kubectl = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"));
    if let Some(kubeconfig) = std::env::var_os("E2E_KUBECONFIG") {
        return Ok(TestCluster {
            kubeconfig: PathBuf::from(kubeconfig),
            kubectl,
            _plane: None,
        });
    }
    let plane_bin = crate::services::bin_dir().join("strata-plane");
    let dir = std::env::temp_dir().join(format!("strata-plane-{}", std::process::id()));
    let mut child = Command::new(&plane_bin)
        .args(["up", "--exit-on-stdin-close", "--dir"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", plane_bin.display()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("plane stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let kubeconfig = line
        .trim()
        .strip_prefix("ready ")
        .ok_or_else(|| anyhow!("strata-plane did not become ready (said {line:?})"))?;
    let stdin = child.stdin.take().ok_or_else(|| anyhow!("plane stdin"))?;
    let env = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
    let kubectl = env
        .lines()
        .find_map(|l| l.strip_prefix("KUBECTL="))
        .map(PathBuf::from)
        .unwrap_or(kubectl);
    Ok(TestCluster {
        kubeconfig: PathBuf::from(kubeconfig),
        kubectl,
        _plane: Some(Mutex::new((child, stdin))),
    })
}

/// The API server the first cluster of `kubeconfig` names (`https://host:port`).
pub fn kubeconfig_server(kubeconfig: &Path) -> Result<String> {
    kube::config::Kubeconfig::read_from(kubeconfig)?
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .context("the kubeconfig names no server")
}

/// The kubectl binary the tests use (`$KUBECTL`, the plane's, else `kubectl` on `PATH`).
pub fn kubectl_binary() -> PathBuf {
    cluster().kubectl.clone()
}

impl TestCluster {
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new client (each test has its own runtime, so clients are not shared).
    pub async fn client(&self) -> Result<Client> {
        Ok(core_k8s::client::client_from(Some(&self.kubeconfig), None).await?)
    }

    /// The API server's audit log when the cluster is a local plane (it lives next to the
    /// kubeconfig, see `plane::AUDIT_POLICY`); `None` for any other cluster.
    pub fn audit_log(&self) -> Option<PathBuf> {
        let log = self.kubeconfig.parent()?.join("logs").join("audit.log");
        log.exists().then_some(log)
    }

    /// kubectl pointed at the cluster.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        cmd
    }
}

/// A namespace for one test, deleted when dropped.
#[derive(Debug)]
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<random>` and waits for its default ServiceAccount (pods are not
    /// admitted before it exists).
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let name = format!("e2e-{prefix}-{}", core_k8s::args::random_suffix());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        eventually(
            &format!("default service account in {name}"),
            Duration::from_secs(30),
            || {
                let accounts = accounts.clone();
                async move { Ok(accounts.get_opt("default").await?.map(|_| ())) }
            },
        )
        .await?;
        Ok(Self { name })
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot be async; kubectl does the delete without waiting for finalization.
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The cluster-scoped RBAC of services the test ran as their chart ServiceAccounts
        // (`services::chart_identity`: the release is named after the namespace).
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                "clusterroles,clusterrolebindings",
                "-l",
                &format!("app.kubernetes.io/instance={}", self.name),
                "--ignore-not-found",
                "--wait=false",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A cluster-scoped object a test created, deleted when dropped (also when the test fails
/// half-way: a leftover webhook configuration, say, would guard a namespace nobody serves).
#[derive(Debug)]
pub struct DeleteOnDrop {
    /// The resource as kubectl names it (`validatingwebhookconfiguration`, …).
    pub resource: &'static str,
    pub name: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let _ = cluster()
            .kubectl()
            .args(["delete", self.resource, &self.name, "--ignore-not-found"])
            .output();
    }
}

/// Waits until every CRD named is Established (30 s at most), through the API: `kubectl wait`
/// right after a create fails outright while the CRD has no conditions yet.
pub async fn crds_established(client: &Client, names: &[&str]) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        eventually(
            &format!("CRD {name} Established"),
            std::time::Duration::from_secs(30),
            || async {
                let crd = crds.get(name).await?;
                let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                Ok(established.then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

/// Parses multi-document YAML into JSON values, skipping empty documents.
pub fn parse_yaml(yaml: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).context("parsing YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Applies every document with server-side apply (field manager `strata-e2e`); namespaced
/// objects without a namespace go to `namespace`.
pub async fn apply_yaml(
    client: &Client,
    namespace: &str,
    yaml: &str,
) -> Result<Vec<DynamicObject>> {
    let applier = core_k8s::apply::Applier::new(client.clone(), "strata-e2e");
    let mut applied = Vec::new();
    for doc in parse_yaml(yaml)? {
        applied.push(applier.apply_dynamic(&doc, Some(namespace)).await?);
    }
    Ok(applied)
}

/// Whether a pod reports Ready=True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Applies one of the CRDs the project ships (`manifests/crds/<file>`).
pub async fn apply_shipped_crd(client: &Client, namespace: &str, file: &str) -> Result<()> {
    let path = crate::plane::e2e_dir().join("../manifests/crds").join(file);
    let yaml = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    apply_yaml(client, namespace, &yaml).await?;
    Ok(())
}

/// Polls `check` every 250 ms until it yields `Some`, failing after `timeout` with the last
/// error. `what` names the condition in the failure message.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A plain HTTP/1.0 GET against a local admin port: `(status, body)`.
pub async fn http_get(address: std::net::SocketAddr, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP response {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Checks the shape of an OpenMetrics text exposition: every line a `# HELP`/`# TYPE`/`# UNIT`
/// comment or a `name{labels} value` sample whose family was declared, ending in `# EOF`.
/// Returns the sample lines.
pub fn parse_openmetrics(text: &str) -> Result<Vec<(String, f64)>> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.last() != Some(&"# EOF") {
        bail!("OpenMetrics exposition must end with '# EOF'");
    }
    let mut families = std::collections::HashSet::new();
    let mut samples = Vec::new();
    for (i, line) in lines[..lines.len() - 1].iter().enumerate() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let keyword = parts.next().unwrap_or_default();
            let family = parts
                .next()
                .ok_or_else(|| anyhow!("line {}: comment without a metric name", i + 1))?;
            if !matches!(keyword, "HELP" | "TYPE" | "UNIT") {
                bail!("line {}: unknown comment {keyword:?}", i + 1);
            }
            families.insert(family.to_string());
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| anyhow!("line {}: sample without a value: {line:?}", i + 1))?;
        let value: f64 = value
            .parse()
            .map_err(|_| anyhow!("line {}: value {value:?} is not a number", i + 1))?;
        let name = series.split('{').next().unwrap_or_default();
        let declared = families.contains(name)
            || ["_total", "_bucket", "_count", "_sum", "_created", "_info"]
                .iter()
                .any(|suffix| {
                    name.strip_suffix(suffix)
                        .is_some_and(|f| families.contains(f))
                });
        if !declared {
            bail!("line {}: sample {name:?} has no # TYPE", i + 1);
        }
        samples.push((series.to_string(), value));
    }
    Ok(samples)
}

/// Where `e2e/plane/build.sh` put the upstream CRDs (Argo CD's Application, Flux's
/// Kustomization and source kinds), keyed by the versions pinned in `versions.env`.
pub fn upstream_crds() -> Result<std::path::PathBuf> {
    let get = |key: &str| {
        crate::plane::pinned_version(key).with_context(|| format!("{key} in versions.env"))
    };
    let cache = crate::plane::cache_dir().context("neither STRATA_CACHE nor HOME is set")?;
    let dir = cache.join("crds").join(format!(
        "argocd-{}-kustomize-{}-source-{}",
        get("ARGO_CD_VERSION")?,
        get("KUSTOMIZE_CONTROLLER_API_VERSION")?,
        get("SOURCE_CONTROLLER_API_VERSION")?
    ));
    let wanted = [
        "application-crd.yaml",
        "kustomization-crd.yaml",
        "gitrepository-crd.yaml",
        "ocirepository-crd.yaml",
        "bucket-crd.yaml",
    ];
    anyhow::ensure!(
        wanted.iter().all(|f| dir.join(f).is_file()),
        "upstream CRDs missing in {} (run e2e/plane/build.sh)",
        dir.display()
    );
    Ok(dir)
}

/// Applies one of the upstream CRDs (see [`upstream_crds`]).
pub async fn apply_upstream_crd(client: &Client, file: &str) -> Result<()> {
    let path = upstream_crds()?.join(file);
    let yaml = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    apply_yaml(client, "default", &yaml).await?;
    Ok(())
}

/// Waits up to 90 s until StatefulSet `name` runs exactly `replicas` ready pods, none on its
/// way out (its pods are labelled `name=<name>`), and its status caught up: as many ready and
/// available, the current generation observed.
pub async fn stateful_set_settled(
    client: &kube::Client,
    ns: &str,
    name: &str,
    replicas: usize,
) -> Result<()> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("{replicas} {name} pods ready"),
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&kube::api::ListParams::default().labels(&format!("name={name}")))
                .await?;
            let ready = list
                .items
                .iter()
                .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                .count();
            let sts = sets.get(name).await?;
            let status = sts.status.unwrap_or_default();
            let want = Some(replicas as i32);
            Ok((list.items.len() == replicas
                && ready == replicas
                && status.ready_replicas == want
                && status.available_replicas == want
                && status.observed_generation == sts.metadata.generation)
                .then_some(()))
        },
    )
    .await
}

/// An OnDelete StatefulSet `name` of rollout group `group` (its Service name too), pods
/// labelled `name: <name>`. `labels` and `annotations` are extra flow-map entries (`labels`
/// starting with `, `), the way the rollout tests spell the anchor's keys.
pub fn group_stateful_set(
    name: &str,
    group: &str,
    replicas: i32,
    labels: &str,
    annotations: &str,
) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  labels: {{rollout-group: {group}{labels}}}
  annotations: {{{annotations}}}
spec:
  replicas: {replicas}
  serviceName: {group}
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: {name}}}}}
  template:
    metadata: {{labels: {{name: {name}}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
"#
    )
}

/// Zone `zone` of rollout group `group`: StatefulSet `<group>-zone-<zone>` with `replicas` pods
/// of `image` (OnDelete, created in parallel) on the nodes of `zone-<zone>`, at most
/// `max_unavailable` of them down at a time, paused or not.
pub fn rollout_zone(
    group: &str,
    zone: &str,
    replicas: i32,
    image: &str,
    max_unavailable: u32,
    paused: bool,
) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {group}-zone-{zone}
  labels: {{rollout-group: {group}}}
  annotations:
    rollout-max-unavailable: "{max_unavailable}"
    grafana.com/rollout-paused: "{paused}"
spec:
  replicas: {replicas}
  serviceName: {group}
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: {group}-zone-{zone}}}}}
  template:
    metadata: {{labels: {{name: {group}-zone-{zone}, rollout-group: {group}}}}}
    spec:
      nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}
      containers: [{{name: {group}, image: "{image}"}}]
"#
    )
}

/// A kubeconfig that acts as ServiceAccount `account` of `namespace` (a TokenRequest token,
/// the plane's server and CA), for tests of what a least-privileged user can do.
pub fn service_account_kubeconfig(namespace: &str, account: &str) -> Result<PathBuf> {
    let kubectl = crate::release::Kubectl {
        binary: kubectl_binary(),
        kubeconfig: cluster().kubeconfig().to_path_buf(),
    };
    kubectl.token_kubeconfig(
        namespace,
        account,
        "2h",
        &std::env::temp_dir().join(format!("{namespace}-{account}.kubeconfig")),
    )
}

/// A client acting as whoever `kubeconfig` names (a ServiceAccount's token, say).
pub async fn kube_client(kubeconfig: &Path) -> Result<Client> {
    Ok(core_k8s::client::client_from(Some(kubeconfig), None).await?)
}

/// A ServiceAccount `name` in `ns` with a Role of the same name holding `rules` (YAML flow
/// mappings, one per line, e.g. `{apiGroups: [""], resources: [pods], verbs: [list]}`), bound
/// to it: a least-privileged identity for a test.
pub fn service_account_with_role(ns: &str, name: &str, rules: &[&str]) -> String {
    let rules: String = rules.iter().map(|r| format!("- {r}\n")).collect();
    format!(
        "apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {ns}}}
rules:
{rules}---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: {ns}}}]
"
    )
}

/// This host's first non-loopback IPv4 address (endpoints may not be loopback).
pub fn host_address() -> Result<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // No packet is sent: connecting a UDP socket only picks the outgoing interface.
    socket.connect("192.0.2.1:9")?;
    let ip = socket.local_addr()?.ip();
    anyhow::ensure!(!ip.is_loopback(), "no non-loopback address on this host");
    Ok(ip.to_string())
}

/// A webhook configuration of `kind` (Validating or Mutating) with one webhook
/// `<hook>.strata.dev` called at `client_config` (a `clientConfig` in flow style: `{url: ...}`
/// or `{service: {...}}`) for the `rules` (YAML list items indented by two spaces) in
/// namespace `ns` only, `failurePolicy: Fail`, labelled for the admission-webhook's CA
/// injection in `ns` and created without a caBundle.
pub fn webhook_configuration(
    kind: &str,
    name: &str,
    ns: &str,
    hook: &str,
    client_config: &str,
    rules: &str,
) -> String {
    let side_effects = if kind == "MutatingWebhookConfiguration" {
        "NoneOnDryRun"
    } else {
        "None"
    };
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}
  labels:
    grafana.com/inject-rollout-operator-ca: "true"
    grafana.com/namespace: {ns}
webhooks:
- name: {hook}.strata.dev
  admissionReviewVersions: ["v1"]
  sideEffects: {side_effects}
  failurePolicy: Fail
  timeoutSeconds: 10
  clientConfig: {client_config}
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: {ns}}}
  rules:
{rules}
"#
    )
}

/// StatefulSet updates (the object and its `/scale`), as webhook rules.
pub const STATEFULSET_UPDATE_RULES: &str = r#"  - apiGroups: [apps]
    apiVersions: [v1]
    operations: [UPDATE]
    resources: [statefulsets, statefulsets/scale]"#;

/// The no-downscale webhook for StatefulSet updates in `ns`, at `client_config` (see
/// [`webhook_configuration`]).
pub fn no_downscale_configuration(name: &str, ns: &str, client_config: &str) -> String {
    webhook_configuration(
        "ValidatingWebhookConfiguration",
        name,
        ns,
        "no-downscale",
        client_config,
        STATEFULSET_UPDATE_RULES,
    )
}

/// StatefulSet `guarded`, labelled no-downscale, whose pods never schedule (no node matches
/// them): only its replica count matters to the tests that use it.
pub fn guarded_stateful_set(replicas: i32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: guarded
  labels: {{grafana.com/no-downscale: "true"}}
spec:
  replicas: {replicas}
  serviceName: guarded
  selector: {{matchLabels: {{name: guarded}}}}
  template:
    metadata: {{labels: {{name: guarded}}}}
    spec:
      nodeSelector: {{strata-e2e/no-such-node: "true"}}
      containers: [{{name: c, image: example.invalid/guarded:1}}]
"#
    )
}

/// `len` pseudo-random lower-case letters from `seed` (the same every run): text that gzip
/// cannot shrink much (about 4.7 bits a letter), for archives that must be large.
pub fn incompressible(len: usize, seed: u64) -> String {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            char::from(b'a' + ((state >> 33) % 26) as u8)
        })
        .collect()
}

/// A workload whose pods cannot start, labelled for the plane's `strata-pod-cannot-start`
/// kwok stage (or, for `Unschedulable`, matching no node so the real scheduler refuses it).
pub fn cannot_start(kind: &str, name: &str, ns: &str, reason: &str) -> String {
    let (labels, placement) = if reason == "Unschedulable" {
        (
            format!("{{app: {name}}}"),
            "nodeSelector: {strata.dev/no-such-node: \"true\"}",
        )
    } else {
        (
            format!("{{app: {name}, strata.dev/fake-waiting: {reason}}}"),
            "",
        )
    };
    let pod_spec = format!(
        "metadata: {{labels: {labels}}}
    spec:
      {restart}
      {placement}
      containers: [{{name: app, image: registry.invalid/{name}:1}}]",
        restart = if kind == "Job" {
            "restartPolicy: OnFailure"
        } else {
            ""
        },
    );
    let (api_version, extra) = match kind {
        "Job" => ("batch/v1", "backoffLimit: 6".to_string()),
        "DaemonSet" => (
            "apps/v1",
            format!("selector: {{matchLabels: {{app: {name}}}}}"),
        ),
        "StatefulSet" => (
            "apps/v1",
            format!(
                "replicas: 1\n  serviceName: {name}\n  selector: {{matchLabels: {{app: {name}}}}}"
            ),
        ),
        _ => (
            "apps/v1",
            format!("replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}"),
        ),
    };
    format!(
        "apiVersion: {api_version}
kind: {kind}
metadata: {{name: {name}, namespace: {ns}}}
spec:
  {extra}
  template:
    {pod_spec}
"
    )
}

/// The message of a ValidatingAdmissionPolicy's refusal of `outcome`, or why it was not one
/// (`what`: the write, for the error).
pub fn policy_refusal<T: std::fmt::Debug>(
    outcome: kube::Result<T>,
    what: &str,
) -> anyhow::Result<String> {
    match outcome {
        Err(kube::Error::Api(e)) if e.message.contains("ValidatingAdmissionPolicy") => {
            Ok(e.message)
        }
        other => anyhow::bail!("{what}: not refused by the policy: {other:?}"),
    }
}
