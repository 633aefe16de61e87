//! Moving from Flux: converts a `kustomize.toolkit.fluxcd.io` Kustomization into an
//! AddonsLayer (`strata layers import`), saying what changed and why, and refusing what the
//! layer-controller would do differently (a kustomize overlay feature it does not build).
//! Pure: a document in, a document and notes out.

use serde_json::{Map, Value, json};

use crate::kraan::{Imported, STRATA_API_VERSION};

/// The API group of Flux's Kustomization.
pub const FLUX_KUSTOMIZE_GROUP: &str = "kustomize.toolkit.fluxcd.io";

/// Whether `document` is a Flux Kustomization.
pub fn is_kustomization(document: &Value) -> bool {
    document.get("kind").and_then(Value::as_str) == Some("Kustomization")
        && document
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with(&format!("{FLUX_KUSTOMIZE_GROUP}/")))
}

/// Kustomization fields that change what is applied and that the layer-controller does not
/// do: converting them silently would deploy something else.
const UNSUPPORTED: [(&str, &str); 10] = [
    ("targetNamespace", "set the namespace in the manifests"),
    ("patches", "commit the patched manifests"),
    ("images", "commit the manifests with their images"),
    ("components", "commit the rendered manifests"),
    ("namePrefix", "commit the renamed manifests"),
    ("nameSuffix", "commit the renamed manifests"),
    (
        "commonMetadata",
        "commit the manifests with their labels and annotations",
    ),
    ("decryption", "SOPS decryption is not supported"),
    ("kubeConfig", "a layer applies to the cluster it runs in"),
    ("force", "the layer-controller never recreates objects"),
];

/// Converts one Flux Kustomization.
pub fn import(document: &Value) -> Imported {
    let text = |pointer: &str| document.pointer(pointer).and_then(Value::as_str);
    let name = text("/metadata/name").unwrap_or("<no name>").to_string();
    let namespace = text("/metadata/namespace")
        .unwrap_or("flux-system")
        .to_string();
    let empty = Map::new();
    let spec = document
        .get("spec")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut notes = vec![format!(
        "{name}: Kustomization {namespace}/{name} -> AddonsLayer {name} (cluster-scoped)"
    )];
    let mut errors = Vec::new();
    let source_ref = spec.get("sourceRef").cloned().unwrap_or(Value::Null);
    let source_kind = source_ref
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("GitRepository");
    let source_name = source_ref
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if source_name.is_empty() {
        errors.push(format!(
            "Kustomization {name}: spec.sourceRef.name is empty"
        ));
    }
    let source_namespace = source_ref
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or(&namespace)
        .to_string();
    let path = spec.get("path").and_then(Value::as_str).unwrap_or("./");
    let mut layer_spec = Map::new();
    layer_spec.insert("version".into(), "1.0.0".into());
    notes.push(format!(
        "{name}: spec.version set to 1.0.0 (a Kustomization has none; dependents may constrain it)"
    ));
    layer_spec.insert(
        "source".into(),
        json!({"kind": source_kind, "name": source_name, "namespace": source_namespace, "path": path}),
    );
    for field in ["interval", "timeout", "serviceAccountName", "postBuild"] {
        if let Some(value) = spec.get(field) {
            layer_spec.insert(field.into(), value.clone());
        }
    }
    if source_namespace != namespace {
        for field in ["serviceAccountName", "postBuild"] {
            if spec.contains_key(field) {
                notes.push(format!(
                    "{name}: spec.{field} is read in the source's namespace {source_namespace} (Flux: the Kustomization's, {namespace})"
                ));
            }
        }
    }
    if spec.get("suspend").and_then(Value::as_bool) == Some(true) {
        layer_spec.insert("hold".into(), true.into());
        notes.push(format!("{name}: spec.suspend -> spec.hold"));
    }
    let depends_on: Vec<Value> = spec
        .get("dependsOn")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("name").and_then(Value::as_str))
        .map(|d| Value::String(d.to_string()))
        .collect();
    if !depends_on.is_empty() {
        notes.push(format!(
            "{name}: spec.dependsOn -> spec.prereqs.dependsOn (by layer name; namespaces dropped)"
        ));
        layer_spec.insert("prereqs".into(), json!({"dependsOn": depends_on}));
    }
    if spec.get("prune").and_then(Value::as_bool) == Some(false) {
        notes.push(format!(
            "{name}: spec.prune false dropped: a layer always prunes what left its source"
        ));
    }
    if let Some(exprs) = spec
        .get("healthCheckExprs")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
    {
        // The same entries, field for field; the layer judges with the strict policy, as the
        // expressions are there to be stricter than kstatus about these kinds.
        notes.push(format!(
            "{name}: spec.healthCheckExprs -> spec.health.exprs (with policy: strict)"
        ));
        layer_spec.insert("health".into(), json!({"policy": "strict", "exprs": exprs}));
    }
    if spec.contains_key("wait") || spec.contains_key("healthChecks") {
        notes.push(format!(
            "{name}: spec.wait/healthChecks dropped: a layer always waits until every object it applies is Current"
        ));
    }
    if spec.contains_key("retryInterval") {
        notes.push(format!(
            "{name}: spec.retryInterval dropped: a failed layer is retried with back-off"
        ));
    }
    if let Some(strategy) = spec
        .get("postBuild")
        .and_then(|p| p.get("substituteStrategy"))
        .and_then(Value::as_str)
        .filter(|s| *s != "WithVariables")
    {
        errors.push(format!(
            "Kustomization {name}: spec.postBuild.substituteStrategy {strategy:?} is not supported (a layer substitutes only when it has variables)"
        ));
    }
    for (field, instead) in UNSUPPORTED {
        if spec.contains_key(field) {
            errors.push(format!(
                "Kustomization {name}: spec.{field} is not supported: {instead}"
            ));
        }
    }
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.clone().into());
    for field in ["labels", "annotations"] {
        if let Some(value) = document.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.into(), value.clone());
        }
    }
    let mut object = json!({
        "apiVersion": STRATA_API_VERSION,
        "kind": "AddonsLayer",
        "metadata": metadata,
        "spec": layer_spec,
    });
    if let Some(post_build) = object
        .pointer_mut("/spec/postBuild")
        .and_then(Value::as_object_mut)
    {
        post_build.remove("substituteStrategy");
    }
    match serde_json::from_value::<crate::crd::AddonsLayer>(object.clone()) {
        Ok(layer) => errors.extend(
            crate::plan::spec_errors(&layer)
                .into_iter()
                .map(|e| format!("AddonsLayer {name}: {e}")),
        ),
        Err(e) => errors.push(format!("AddonsLayer {name}: spec: {e}")),
    }
    Imported {
        object,
        notes,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kustomization_becomes_a_layer() {
        let kustomization = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "podinfo", "namespace": "apps", "labels": {"team": "a"}, "resourceVersion": "9"},
            "spec": {
                "interval": "10m", "timeout": "2m", "path": "./deploy", "prune": true, "wait": true,
                "sourceRef": {"kind": "OCIRepository", "name": "podinfo"},
                "serviceAccountName": "deployer",
                "dependsOn": [{"name": "infra", "namespace": "flux-system"}],
                "postBuild": {
                    "substitute": {"cluster_env": "prod"},
                    "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}],
                },
            },
            "status": {"lastAppliedRevision": "x"},
        });
        assert!(is_kustomization(&kustomization));
        let imported = import(&kustomization);
        assert_eq!(imported.errors, Vec::<String>::new());
        assert_eq!(
            imported.object,
            json!({
                "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
                "metadata": {"name": "podinfo", "labels": {"team": "a"}},
                "spec": {
                    "version": "1.0.0", "interval": "10m", "timeout": "2m",
                    "source": {"kind": "OCIRepository", "name": "podinfo", "namespace": "apps", "path": "./deploy"},
                    "serviceAccountName": "deployer",
                    "prereqs": {"dependsOn": ["infra"]},
                    "postBuild": {
                        "substitute": {"cluster_env": "prod"},
                        "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}],
                    },
                },
            })
        );
        assert!(
            imported
                .notes
                .iter()
                .any(|n| n.contains("spec.wait/healthChecks dropped")),
            "{:?}",
            imported.notes
        );
    }

    #[test]
    fn health_check_exprs_move_over() {
        let entry = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "current": "status.ready == true", "failed": "has(status.error)"});
        let kustomization = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "apps"},
            "spec": {"path": "./", "sourceRef": {"kind": "GitRepository", "name": "repo"},
                "healthCheckExprs": [entry.clone()]},
        });
        let imported = import(&kustomization);
        assert_eq!(imported.errors, Vec::<String>::new());
        assert_eq!(
            imported.object["spec"]["health"],
            json!({"policy": "strict", "exprs": [entry]})
        );
        let mut broken = kustomization.clone();
        broken["spec"]["healthCheckExprs"][0]["current"] = json!("status.ready ==");
        let errors = import(&broken).errors.join("\n");
        assert!(
            errors.contains(
                "AddonsLayer app: spec.health.exprs[0]: health expression \"status.ready ==\""
            ),
            "{errors}"
        );
    }

    #[test]
    fn what_a_layer_would_do_differently_is_refused() {
        let kustomization = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "flux-system"},
            "spec": {
                "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "sources"},
                "targetNamespace": "prod", "patches": [], "suspend": true,
                "postBuild": {"substitute": {"bad-name": "x"}, "substituteStrategy": "Always"},
            },
        });
        let imported = import(&kustomization);
        assert_eq!(imported.object["spec"]["hold"], true);
        let errors = imported.errors.join("\n");
        for want in [
            "spec.targetNamespace is not supported",
            "spec.patches is not supported",
            "substituteStrategy \"Always\" is not supported",
            "variable name \"bad-name\" is invalid",
        ] {
            assert!(errors.contains(want), "{want}: {errors}");
        }
        // Variables are read where the source lives, which is not where Flux read them.
        assert!(
            imported
                .notes
                .iter()
                .any(|n| n.contains("spec.postBuild is read in the source's namespace sources")),
            "{:?}",
            imported.notes
        );
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert!(!is_kustomization(&other));
    }
}
