//! Flux sources for layer tests and benchmarks: Flux's real source CRDs (generated from its API
//! types by `e2e/plane/build.sh`), a GitRepository whose status the test writes exactly as
//! source-controller does (the controller itself cannot be built here), and an HTTP server
//! for the artifacts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use layer_controller::source::{pack, sha256_digest};
use serde_json::json;

use crate::support::{apply_shipped_crd, apply_upstream_crd, apply_yaml};

/// Size of every artifact published in this process, by URL (`status.artifact.size`).
static SIZES: std::sync::LazyLock<Mutex<HashMap<String, u64>>> =
    std::sync::LazyLock::new(Mutex::default);

fn published_size(url: &str) -> u64 {
    SIZES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(url)
        .copied()
        .unwrap_or_default()
}

/// Serves `/<name>` from a map the test fills, like source-controller's artifact server.
#[derive(Debug)]
pub struct ArtifactServer {
    pub address: SocketAddr,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
}

impl ArtifactServer {
    pub async fn start() -> Result<Self> {
        let files: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let served = files.clone();
        let app = axum::Router::new().route(
            "/{name}",
            axum::routing::get(
                move |axum::extract::Path(name): axum::extract::Path<String>| {
                    let served = served.clone();
                    async move {
                        match served.lock().unwrap_or_else(|p| p.into_inner()).get(&name) {
                            Some(bytes) => (axum::http::StatusCode::OK, bytes.clone()),
                            None => (axum::http::StatusCode::NOT_FOUND, Vec::new()),
                        }
                    }
                },
            ),
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { address, files })
    }

    /// A tar.gz of `files` as `publish` serves it; names are written raw, so hostile ones
    /// (`../x`, `/etc/x`) can be built.
    pub fn archive(files: &[(&str, &str)]) -> Vec<u8> {
        pack(files)
    }

    /// Publishes a revision; returns (url, digest).
    pub fn publish(&self, name: &str, files: &[(&str, &str)]) -> (String, String) {
        self.publish_bytes(name, pack(files))
    }

    /// Publishes an artifact built elsewhere (e.g. `git archive`); returns (url, digest).
    pub fn publish_bytes(&self, name: &str, bytes: Vec<u8>) -> (String, String) {
        let digest = sha256_digest(&bytes);
        let url = format!("http://{}/{name}", self.address);
        SIZES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url.clone(), bytes.len() as u64);
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.into(), bytes);
        (url, digest)
    }
}

pub fn gitrepo_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    source_api(client, ns, "GitRepository")
}

/// The API of a Flux source kind (`GitRepository`, `OCIRepository`, `Bucket`; all `v1`).
pub fn source_api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "Bucket" => "buckets".to_string(),
        // GitRepository → gitrepositories, OCIRepository → ocirepositories.
        _ => format!("{}ies", kind.to_lowercase().trim_end_matches('y')),
    };
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", kind),
        &plural,
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The API of Flux's Kustomizations (`kustomize.toolkit.fluxcd.io/v1`) in `ns`.
pub fn kustomization_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Sets the GitRepository's status as source-controller would after fetching a commit.
pub async fn set_artifact(
    client: &Client,
    ns: &str,
    revision: &str,
    url: &str,
    digest: &str,
) -> Result<()> {
    set_source_artifact(client, ns, "GitRepository", "repo", revision, url, digest).await
}

/// A Flux source object of `kind` named `name`, with the spec fields its schema requires.
pub fn source_yaml(kind: &str, name: &str) -> String {
    let spec = match kind {
        "GitRepository" => "{url: https://example.com/repo, interval: 1m}",
        "OCIRepository" => {
            "{url: oci://registry.example.com/addons, interval: 1m, ref: {tag: latest}}"
        }
        _ => "{bucketName: addons, endpoint: storage.example.com, interval: 1m}",
    };
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

/// [`source_yaml`] with the source in namespace `ns`.
pub fn source_yaml_in(kind: &str, name: &str, ns: &str) -> String {
    source_yaml(kind, name).replacen(
        &format!("metadata: {{name: {name}}}"),
        &format!("metadata: {{name: {name}, namespace: {ns}}}"),
        1,
    )
}

/// Creates the source `kind/name` in `ns` ([`source_yaml`]) and, once the API server serves
/// it, gives it the artifact `url` (`digest`) of `revision` ([`set_source_artifact`]).
pub async fn create_source_with_artifact(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    revision: &str,
    url: &str,
    digest: &str,
) -> Result<()> {
    apply_yaml(client, ns, &source_yaml(kind, name)).await?;
    // A source is created before its status can be written.
    crate::support::eventually(
        &format!("{kind} {name} served"),
        std::time::Duration::from_secs(20),
        || async { Ok(source_api(client, ns, kind).get_opt(name).await?.map(drop)) },
    )
    .await?;
    set_source_artifact(client, ns, kind, name, revision, url, digest).await
}

/// Sets the status of source `kind/name` as source-controller would after storing an
/// artifact of `revision`.
pub async fn set_source_artifact(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    revision: &str,
    url: &str,
    digest: &str,
) -> Result<()> {
    let api = source_api(client, ns, kind);
    let repo = api.get(name).await?;
    let generation = repo.metadata.generation.unwrap_or(1);
    // Exactly the fields of source-controller's v1 types: Artifact {path, url, revision,
    // digest, lastUpdateTime, size} and a metav1.Condition with observedGeneration; the real
    // schema prunes anything else.
    let size = published_size(url);
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_default()
        .to_string();
    let status = json!({"status": {
        "observedGeneration": generation,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
            "message": format!("stored artifact for revision '{revision}'"),
            "observedGeneration": generation,
            "lastTransitionTime": now}],
        "artifact": {"url": url, "revision": revision, "digest": digest,
            "path": format!("{}/{ns}/{name}/{}", kind.to_lowercase(), url.rsplit('/').next().unwrap_or("artifact.tar.gz")),
            "lastUpdateTime": now, "size": size}
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Installs the AddonsLayer CRD and Flux's GitRepository, OCIRepository and Bucket CRDs, and
/// waits until they are Established (so the next create does not race the API server's
/// discovery). Only through `client`: it works on any cluster, a test's own plane too.
pub async fn install_layer_crds(client: &Client, ns: &str) -> Result<()> {
    apply_shipped_crd(client, ns, "addonslayers.yaml").await?;
    for file in [
        "gitrepository-crd.yaml",
        "ocirepository-crd.yaml",
        "bucket-crd.yaml",
    ] {
        apply_upstream_crd(client, file).await?;
    }
    crate::support::crds_established(
        client,
        &[
            "addonslayers.strata.dev",
            "gitrepositories.source.toolkit.fluxcd.io",
            "ocirepositories.source.toolkit.fluxcd.io",
            "buckets.source.toolkit.fluxcd.io",
        ],
    )
    .await
}

/// Creates the GitRepository `repo` (its status is set by [`set_artifact`]).
pub async fn create_gitrepository(client: &Client, ns: &str) -> Result<()> {
    let yaml = format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {{name: repo, namespace: {ns}}}\nspec: {{url: https://example.com/repo, interval: 1m}}\n"
    );
    apply_yaml(client, ns, &yaml).await?;
    Ok(())
}

/// A ConfigMap source `src-<layer>` in `ns` holding `files` (each a key at the source's root),
/// labelled as a layer source.
pub fn source_configmap(ns: &str, layer: &str, files: &[(&str, String)]) -> String {
    let data: String = files
        .iter()
        .map(|(file, text)| {
            let body: String = text.lines().map(|l| format!("    {l}\n")).collect();
            format!("  {file}: |\n{body}")
        })
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: src-{layer}, namespace: {ns}, labels: {{strata.dev/layer-source: \"true\"}}}}\ndata:\n{data}"
    )
}

/// [`source_configmap`] and the layer `<ns>-<layer>` reading it (version 1.0.0, interval 1h so
/// only changes re-apply, `timeout`), labelled `strata-e2e/suite=<ns>`. The layer names no
/// source namespace: the controller's `--default-source-namespace` must point at `ns`.
pub fn configmap_layer(ns: &str, layer: &str, timeout: &str, files: &[(&str, String)]) -> String {
    format!(
        "{}---
apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{layer}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: {timeout}
  source: {{kind: ConfigMap, name: src-{layer}, path: ./}}
",
        source_configmap(ns, layer, files)
    )
}

/// A Deployment `name` in `ns`: one replica of `image` in container `app`, pods labelled
/// `app: <name>`.
pub fn deployment_yaml(ns: &str, name: &str, image: &str) -> String {
    deployment_yaml_ready(ns, name, image, true)
}

/// [`deployment_yaml`], whose pod kwok never makes ready unless `ready` (the pod label
/// `strata.dev/fake-ready: "false"`).
pub fn deployment_yaml_ready(ns: &str, name: &str, image: &str, ready: bool) -> String {
    let fake = if ready {
        ""
    } else {
        ", strata.dev/fake-ready: \"false\""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}{fake}}}}}
    spec: {{containers: [{{name: app, image: \"{image}\"}}]}}
"
    )
}

/// A ConfigMap `name` in `ns` with one key; `extra_meta` is appended inside `metadata`
/// (e.g. `, labels: {a: b}`).
pub fn configmap_yaml(ns: &str, name: &str, extra_meta: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}{extra_meta}}}\ndata: {{k: v}}\n"
    )
}

/// The status of a layer as JSON (empty when it has none yet).
pub async fn layer_status(client: &Client, layer: &str) -> Result<serde_json::Value> {
    let api: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    Ok(serde_json::to_value(
        api.get(layer).await?.status.unwrap_or_default(),
    )?)
}

/// Asks the layer-controller to reconcile `layer` now (the `strata.dev/reconcile-requested-at`
/// annotation, a value never used before) and waits until the layer's own status says that
/// request was handled (`status.lastHandledReconcileAt`): a signal only a reconcile of this
/// layer, begun after the call, can give.
pub async fn reconciled(
    client: &Client,
    layer: &str,
    timeout: std::time::Duration,
) -> Result<serde_json::Value> {
    let api: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    let token = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    api.patch(
        layer,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"strata.dev/reconcile-requested-at": token}}}),
        ),
    )
    .await?;
    crate::support::eventually(
        &format!("{layer} reconciled after request {token}"),
        timeout,
        || async {
            let status = layer_status(client, layer).await?;
            Ok((status["lastHandledReconcileAt"] == token.as_str()).then_some(status))
        },
    )
    .await
}

/// The names of the objects in a layer status's inventory, in order.
pub fn inventory_names(status: &serde_json::Value) -> Vec<String> {
    status["inventory"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `reason message` of a layer status's Ready condition.
pub fn ready_reason(status: &serde_json::Value) -> String {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| format!("{} {}", c["reason"], c["message"]))
        .unwrap_or_default()
}

/// The layer `<ns>-<layer>` reading `path` of the GitRepository `repo` in `ns` (version 1.0.0,
/// interval 1h, timeout 30s), labelled `strata-e2e/suite=<ns>`.
pub fn gitrepository_layer(ns: &str, layer: &str, path: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{layer}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: 30s
  source: {{kind: GitRepository, name: repo, namespace: {ns}, path: {path}}}
"
    )
}

/// The Events about AddonsLayer `layer`, oldest first.
pub async fn layer_events(
    client: &Client,
    layer: &str,
) -> Result<Vec<k8s_openapi::api::events::v1::Event>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let mut about: Vec<_> = events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("AddonsLayer") && r.name.as_deref() == Some(layer)
            })
        })
        .collect();
    about.sort_by_key(|e| e.metadata.creation_timestamp.clone());
    Ok(about)
}

/// Waits up to 90 s until the status of layer `layer` satisfies `pred`, and returns it.
pub async fn wait_layer(
    client: &Client,
    layer: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    crate::support::eventually(what, std::time::Duration::from_secs(90), || async {
        let status = layer_status(client, layer).await?;
        Ok(pred(&status).then_some(status))
    })
    .await
}
