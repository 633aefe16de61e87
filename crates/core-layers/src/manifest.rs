//! What the layer-controller applies for a manifest: both the controller (to apply it) and
//! the drift-observer (to know what was applied) call this one function.

use serde_json::Value;

/// The manifest as the layer applies it: labelled with the layer and Strata, and with the
/// layer version injected where `updateVersion` asks for it (so a version bump alone rolls
/// the object: Helm values for a HelmRelease, the pod template for workloads, else an
/// annotation).
pub fn prepare_manifest(manifest: &Value, layer: &str, version: &str) -> Value {
    use crate::keys::{
        KRAAN_UPDATE_VERSION_ANNOTATION, KRAAN_VERSION_VALUE, LAYER_LABEL,
        LAYER_VERSION_ANNOTATION, LAYER_VERSION_VALUE, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
        ORPHANED_LABEL, UPDATE_VERSION_ANNOTATIONS,
    };
    let mut out = manifest.clone();
    let asks = |key: &str| {
        core_status::object::lookup(manifest, &["metadata", "annotations", key])
            .and_then(Value::as_str)
            == Some("true")
    };
    let wants_version = UPDATE_VERSION_ANNOTATIONS.iter().any(|key| asks(key));
    // Kraan's annotation injects Kraan's values key, which Kraan users' charts read.
    let kraan_key = asks(KRAAN_UPDATE_VERSION_ANNOTATION);
    let Some(object) = out.as_object_mut() else {
        return out;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(metadata) = metadata.as_object_mut() {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(LAYER_LABEL.into(), layer.into());
            labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
            labels.remove(ORPHANED_LABEL);
        }
    }
    if !wants_version {
        return out;
    }
    let is_helm_release = object.get("kind").and_then(Value::as_str) == Some("HelmRelease");
    let has_template = object
        .get("spec")
        .and_then(|s| s.get("template"))
        .is_some_and(Value::is_object);
    let target: &[&str] = if is_helm_release {
        &["spec", "values"]
    } else if has_template {
        &["spec", "template", "metadata", "annotations"]
    } else {
        &["metadata", "annotations"]
    };
    let mut node = &mut *object;
    for key in target {
        let next = node
            .entry(*key)
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(map) = next.as_object_mut() else {
            return out;
        };
        node = map;
    }
    let key = match (is_helm_release, kraan_key) {
        (true, true) => KRAAN_VERSION_VALUE,
        (true, false) => LAYER_VERSION_VALUE,
        (false, _) => LAYER_VERSION_ANNOTATION,
    };
    node.insert(key.into(), version.into());
    out
}
