//! The GitOps objects that deploy the rendered tree: an Argo CD `Application` or a Flux
//! `Kustomization` per release, or a Strata `AddonsLayer` per course layer.
//!
//! The course's templates (`gitops.argocd` etc., release merged over course) are kept whole —
//! every field a user writes survives, unlike Reckoner's typed subset — and only missing
//! fields are filled in. The few fields render owns (the path to the files, the destination
//! namespace, dependsOn) are computed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::course::{NamespaceMetadata, ReleasePlan, deep_merge, k8s_name};

pub const ARGO_API_VERSION: &str = "argoproj.io/v1alpha1";
pub const FLUX_API_VERSION: &str = "kustomize.toolkit.fluxcd.io/v1";
pub const STRATA_API_VERSION: &str = "strata.dev/v1alpha1";
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";

/// The GitOps tool the output is laid out for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Argocd,
    Flux,
    Strata,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Argocd => "argocd",
            Tool::Flux => "flux",
            Tool::Strata => "strata",
        }
    }
}

/// The directory of a release's files, relative to the output directory.
pub fn release_dir(tool: Tool, release: &ReleasePlan) -> PathBuf {
    match tool {
        Tool::Strata => Path::new("layers").join(&release.layer).join(&release.name),
        Tool::Argocd | Tool::Flux => Path::new("releases").join(&release.name),
    }
}

/// The directory of a layer's files (`--gitops strata`).
pub fn layer_dir(layer: &str) -> PathBuf {
    Path::new("layers").join(layer)
}

/// Where a GitOps object's file goes, relative to the output directory.
pub fn app_path(tool: Tool, name: &str) -> PathBuf {
    Path::new("apps")
        .join(tool.name())
        .join(format!("{name}.yaml"))
}

/// `prefix/dir` with forward slashes: paths inside the Git repository the tool reads.
pub fn repo_path(prefix: &str, dir: &Path) -> String {
    let dir: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let dir = dir.join("/");
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() || prefix == "." {
        dir
    } else {
        format!("{prefix}/{dir}")
    }
}

/// Fills `path` of `object` with `value` unless present, creating parents.
fn default_at(object: &mut Value, path: &[&str], value: Value) {
    let mut at = object;
    for (i, key) in path.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i + 1 == path.len() {
            map.entry(key.to_string()).or_insert(value);
            return;
        }
        at = map.entry(key.to_string()).or_insert_with(|| json!({}));
    }
}

fn set_at(object: &mut Value, path: &[&str], value: Value) {
    let mut at = object;
    for (i, key) in path.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i + 1 == path.len() {
            map.insert(key.to_string(), value);
            return;
        }
        at = map.entry(key.to_string()).or_insert_with(|| json!({}));
    }
}

/// The Argo CD Application of a release, or a note saying why there is none.
pub fn application(release: &ReleasePlan, prefix: &str) -> Result<Value, String> {
    let mut app = release.gitops.argocd.clone().unwrap_or_else(|| json!({}));
    let repo_url = app["spec"]["source"]["repoURL"]
        .as_str()
        .filter(|s| !s.is_empty());
    if repo_url.is_none() && app["spec"]["sources"].is_null() {
        return Err(format!(
            "release {}: no Argo CD Application written: set gitops.argocd.spec.source.repoURL in the course",
            release.name
        ));
    }
    default_at(&mut app, &["apiVersion"], json!(ARGO_API_VERSION));
    default_at(&mut app, &["kind"], json!("Application"));
    default_at(
        &mut app,
        &["metadata", "name"],
        json!(k8s_name(&release.name)),
    );
    default_at(&mut app, &["metadata", "namespace"], json!("argocd"));
    default_at(&mut app, &["spec", "project"], json!("default"));
    if app["spec"]["sources"].is_null() {
        default_at(
            &mut app,
            &["spec", "source", "targetRevision"],
            json!("HEAD"),
        );
        let path = repo_path(prefix, &release_dir(Tool::Argocd, release));
        default_at(&mut app, &["spec", "source", "path"], json!(path));
        // A plugin source (argocd-vault-plugin) and a directory source exclude each other.
        let source = &app["spec"]["source"];
        if source["plugin"].is_null() && source["helm"].is_null() && source["kustomize"].is_null() {
            default_at(
                &mut app,
                &["spec", "source", "directory", "recurse"],
                json!(true),
            );
        }
    }
    if app["spec"]["destination"]["name"].is_null() {
        default_at(
            &mut app,
            &["spec", "destination", "server"],
            json!(IN_CLUSTER),
        );
    }
    // Reckoner's rule: the destination namespace is always the release's.
    set_at(
        &mut app,
        &["spec", "destination", "namespace"],
        json!(release.namespace),
    );
    let mut options: Vec<Value> = app["spec"]["syncPolicy"]["syncOptions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !options.iter().any(|o| {
        o.as_str()
            .is_some_and(|o| o.starts_with("CreateNamespace="))
    }) {
        options.push(json!("CreateNamespace=true"));
    }
    set_at(
        &mut app,
        &["spec", "syncPolicy", "syncOptions"],
        json!(options),
    );
    if !release.namespace_metadata.is_empty() {
        let managed = namespace_metadata_value(&release.namespace_metadata);
        let existing = app["spec"]["syncPolicy"]["managedNamespaceMetadata"].clone();
        let merged = if existing.is_object() {
            deep_merge(managed, &existing)
        } else {
            managed
        };
        set_at(
            &mut app,
            &["spec", "syncPolicy", "managedNamespaceMetadata"],
            merged,
        );
    }
    Ok(app)
}

fn namespace_metadata_value(metadata: &NamespaceMetadata) -> Value {
    let mut value = json!({});
    if !metadata.labels.is_empty() {
        value["labels"] = json!(metadata.labels);
    }
    if !metadata.annotations.is_empty() {
        value["annotations"] = json!(metadata.annotations);
    }
    value
}

/// A Namespace object carrying the course's namespace metadata (Flux and the layer-controller
/// cannot create namespaces themselves).
pub fn namespace_object(name: &str, metadata: &NamespaceMetadata) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    if !metadata.labels.is_empty() {
        object["metadata"]["labels"] = json!(metadata.labels);
    }
    if !metadata.annotations.is_empty() {
        object["metadata"]["annotations"] = json!(metadata.annotations);
    }
    object
}

/// The Flux Kustomization of a release; it depends on the release before it in the course.
pub fn kustomization(release: &ReleasePlan, previous: Option<&ReleasePlan>, prefix: &str) -> Value {
    let mut object = release.gitops.flux.clone().unwrap_or_else(|| json!({}));
    default_at(&mut object, &["apiVersion"], json!(FLUX_API_VERSION));
    default_at(&mut object, &["kind"], json!("Kustomization"));
    default_at(
        &mut object,
        &["metadata", "name"],
        json!(k8s_name(&release.name)),
    );
    default_at(
        &mut object,
        &["metadata", "namespace"],
        json!("flux-system"),
    );
    default_at(&mut object, &["spec", "interval"], json!("10m"));
    default_at(&mut object, &["spec", "prune"], json!(true));
    default_at(&mut object, &["spec", "wait"], json!(true));
    default_at(
        &mut object,
        &["spec", "sourceRef"],
        json!({"kind": "GitRepository", "name": "flux-system"}),
    );
    let path = format!("./{}", repo_path(prefix, &release_dir(Tool::Flux, release)));
    default_at(&mut object, &["spec", "path"], json!(path));
    if let Some(previous) = previous {
        default_at(
            &mut object,
            &["spec", "dependsOn"],
            json!([{"name": k8s_name(&previous.name)}]),
        );
    }
    object
}

/// The AddonsLayers of `--gitops strata`: one per course layer, in order of first appearance,
/// each depending on the one before it. `versions` holds a digest of each layer's files, so the
/// version changes exactly when its content does.
pub fn addons_layers(
    releases: &[ReleasePlan],
    versions: &BTreeMap<String, String>,
    prefix: &str,
) -> Vec<Value> {
    let mut layers: Vec<(&str, &ReleasePlan)> = Vec::new();
    for release in releases {
        if !layers.iter().any(|(name, _)| *name == release.layer) {
            layers.push((&release.layer, release));
        }
    }
    let mut out = Vec::with_capacity(layers.len());
    for (i, (layer, first)) in layers.iter().enumerate() {
        let mut object = first.gitops.strata.clone().unwrap_or_else(|| json!({}));
        default_at(&mut object, &["apiVersion"], json!(STRATA_API_VERSION));
        default_at(&mut object, &["kind"], json!("AddonsLayer"));
        set_at(&mut object, &["metadata", "name"], json!(layer));
        let version = versions.get(*layer).cloned().unwrap_or_default();
        default_at(&mut object, &["spec", "version"], json!(version));
        default_at(
            &mut object,
            &["spec", "source", "kind"],
            json!("GitRepository"),
        );
        default_at(
            &mut object,
            &["spec", "source", "name"],
            json!("flux-system"),
        );
        default_at(
            &mut object,
            &["spec", "source", "namespace"],
            json!("flux-system"),
        );
        let path = format!("./{}", repo_path(prefix, &layer_dir(layer)));
        set_at(&mut object, &["spec", "source", "path"], json!(path));
        if i > 0 {
            default_at(
                &mut object,
                &["spec", "prereqs", "dependsOn"],
                json!([layers[i - 1].0]),
            );
        }
        out.push(object);
    }
    out
}

/// FNV-1a, 64 bits: a short stable digest for layer versions (not a security boundary).
pub fn digest(parts: &[(&str, &str)]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (a, b) in parts {
        for byte in a.bytes().chain([0]).chain(b.bytes()).chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::course::{ChartSource, GitOpsTemplates};

    fn release(name: &str, layer: &str) -> ReleasePlan {
        ReleasePlan {
            name: name.into(),
            index: 0,
            namespace: "apps".into(),
            chart_name: "c".into(),
            chart: ChartSource::Local("c".into()),
            version: None,
            values: None,
            files: vec![],
            set: vec![],
            helm_args: vec![],
            namespace_metadata: NamespaceMetadata::default(),
            namespace_overwrite: false,
            gitops: GitOpsTemplates::default(),
            layer: layer.into(),
        }
    }

    #[test]
    fn application_defaults_and_passthrough() {
        let mut web = release("Web_App", "web");
        web.namespace_metadata
            .labels
            .insert("team".into(), "a".into());
        web.gitops.argocd = Some(json!({
            "metadata": {"finalizers": ["resources-finalizer.argocd.argoproj.io"]},
            "spec": {
                "source": {"repoURL": "https://git.invalid/x"},
                "destination": {"namespace": "elsewhere"},
                "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["ServerSideApply=true"]},
            }
        }));
        let app = application(&web, "deploy/manifests").unwrap();
        let want = json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "web-app", "namespace": "argocd", "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
            "spec": {
                "project": "default",
                "source": {
                    "repoURL": "https://git.invalid/x",
                    "targetRevision": "HEAD",
                    "path": "deploy/manifests/releases/Web_App",
                    "directory": {"recurse": true},
                },
                "destination": {"namespace": "apps", "server": "https://kubernetes.default.svc"},
                "syncPolicy": {
                    "automated": {"prune": true, "selfHeal": true},
                    "syncOptions": ["ServerSideApply=true", "CreateNamespace=true"],
                    "managedNamespaceMetadata": {"labels": {"team": "a"}},
                },
            }
        });
        assert_eq!(app, want);
    }

    #[test]
    fn application_with_plugin_has_no_directory() {
        let mut web = release("web", "web");
        web.gitops.argocd = Some(
            json!({"spec": {"source": {"repoURL": "https://git.invalid/x", "plugin": {"name": "argocd-vault-plugin"}}}}),
        );
        let app = application(&web, "").unwrap();
        assert!(app["spec"]["source"]["directory"].is_null());
        assert_eq!(app["spec"]["source"]["path"], "releases/web");
    }

    #[test]
    fn application_needs_a_repo_url() {
        let error = application(&release("web", "web"), "").unwrap_err();
        assert!(
            error.contains("gitops.argocd.spec.source.repoURL"),
            "{error}"
        );
    }

    #[test]
    fn kustomizations_chain_in_course_order() {
        let a = release("a", "a");
        let b = release("b", "b");
        let first = kustomization(&a, None, "");
        let second = kustomization(&b, Some(&a), "out");
        assert!(first["spec"]["dependsOn"].is_null());
        assert_eq!(second["spec"]["dependsOn"], json!([{"name": "a"}]));
        assert_eq!(second["spec"]["path"], "./out/releases/b");
        assert_eq!(second["spec"]["sourceRef"]["kind"], "GitRepository");
    }

    #[test]
    fn layers_group_releases_and_chain() {
        let releases = [
            release("a", "base"),
            release("b", "base"),
            release("c", "apps"),
        ];
        let versions = BTreeMap::from([("base".to_string(), "v1".to_string())]);
        let layers = addons_layers(&releases, &versions, "m");
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0]["metadata"]["name"], "base");
        assert_eq!(layers[0]["spec"]["version"], "v1");
        assert_eq!(layers[0]["spec"]["source"]["path"], "./m/layers/base");
        assert!(layers[0]["spec"]["prereqs"].is_null());
        assert_eq!(layers[1]["spec"]["prereqs"]["dependsOn"], json!(["base"]));
    }

    #[test]
    fn digest_is_stable_and_sensitive() {
        assert_eq!(digest(&[("a", "b")]), digest(&[("a", "b")]));
        assert_ne!(digest(&[("a", "b")]), digest(&[("ab", "")]));
    }
}
