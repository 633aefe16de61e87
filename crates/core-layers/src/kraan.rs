//! Moving from Kraan: converts `kraan.io/v1alpha1` AddonsLayers into Strata's, saying what
//! changed and why (`strata layers import`). Pure: documents in, documents and notes out.

use serde_json::{Map, Value};

use crate::crd::AddonsLayer;

/// Kraan's API version.
pub const KRAAN_API_VERSION: &str = "kraan.io/v1alpha1";
/// Strata's API version for AddonsLayers.
pub const STRATA_API_VERSION: &str = "strata.dev/v1alpha1";

/// Metadata the API server sets; a converted object must not carry it (a copied
/// `resourceVersion` would turn the apply into a conflicting update).
const SERVER_METADATA: [&str; 7] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "finalizers",
];

/// `spec` fields both APIs share (Strata's own additions are not in Kraan objects).
const KRAAN_SPEC_FIELDS: [&str; 6] = [
    "version", "hold", "interval", "timeout", "source", "prereqs",
];

/// One converted document and what was changed in it.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    pub object: Value,
    /// `name: what changed and why`, one per change.
    pub notes: Vec<String>,
    /// Problems the layer-controller would refuse (spec errors), after conversion.
    pub errors: Vec<String>,
}

/// Converts one document. Kraan AddonsLayers and Flux Kustomizations become Strata's
/// AddonsLayers; any other document is returned unchanged with a note.
pub fn import(document: &Value) -> Imported {
    if crate::flux_import::is_kustomization(document) {
        return crate::flux_import::import(document);
    }
    let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = document
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = document
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<no name>")
        .to_string();
    let mut notes = Vec::new();
    if kind != "AddonsLayer"
        || !(api_version == KRAAN_API_VERSION || api_version == STRATA_API_VERSION)
    {
        notes.push(format!(
            "{kind} {name}: not a Kraan AddonsLayer ({api_version}), left as it is"
        ));
        return Imported {
            object: document.clone(),
            notes,
            errors: Vec::new(),
        };
    }
    let mut object = document.clone();
    let Some(map) = object.as_object_mut() else {
        return Imported {
            object,
            notes,
            errors: vec![format!("AddonsLayer {name}: not a mapping")],
        };
    };
    if api_version == KRAAN_API_VERSION {
        map.insert("apiVersion".into(), STRATA_API_VERSION.into());
        notes.push(format!(
            "{name}: apiVersion {KRAAN_API_VERSION} -> {STRATA_API_VERSION} (same field names)"
        ));
    }
    if map.remove("status").is_some() {
        notes.push(format!(
            "{name}: status dropped (the layer-controller writes its own)"
        ));
    }
    if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
        let dropped: Vec<&str> = SERVER_METADATA
            .iter()
            .copied()
            .filter(|f| metadata.remove(*f).is_some())
            .collect();
        if !dropped.is_empty() {
            notes.push(format!(
                "{name}: metadata.{} dropped (set by the API server or Kraan's controller)",
                dropped.join(", metadata.")
            ));
        }
        if metadata.remove("namespace").is_some() {
            notes.push(format!(
                "{name}: metadata.namespace dropped (AddonsLayers are cluster-scoped)"
            ));
        }
    }
    if let Some(Value::Object(spec)) = map.get_mut("spec") {
        convert_spec(&name, spec, &mut notes);
    }
    let errors = match serde_json::from_value::<AddonsLayer>(object.clone()) {
        Ok(layer) => crate::plan::spec_errors(&layer),
        Err(e) => vec![format!("spec: {e}")],
    }
    .into_iter()
    .map(|e| format!("AddonsLayer {name}: {e}"))
    .collect();
    Imported {
        object,
        notes,
        errors,
    }
}

fn convert_spec(name: &str, spec: &mut Map<String, Value>, notes: &mut Vec<String>) {
    let unknown: Vec<String> = spec
        .keys()
        .filter(|k| !KRAAN_SPEC_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for field in unknown {
        spec.remove(&field);
        notes.push(format!(
            "{name}: spec.{field} has no Strata equivalent: dropped"
        ));
    }
    if let Some(Value::Object(source)) = spec.get_mut("source")
        && let Some(path) = source.get("path").and_then(Value::as_str)
        && !path.starts_with("./")
    {
        let fixed = format!("./{}", path.trim_start_matches('/'));
        notes.push(format!(
            "{name}: spec.source.path {path:?} -> {fixed:?} (paths are relative to the source root and start with ./)"
        ));
        source.insert("path".into(), fixed.into());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn kraan_layers_convert_with_notes() {
        let kraan = json!({
            "apiVersion": "kraan.io/v1alpha1", "kind": "AddonsLayer",
            "metadata": {"name": "base", "uid": "u-1", "resourceVersion": "42",
                "finalizers": ["finalizers.kraan.io"], "labels": {"team": "platform"}},
            "spec": {"version": "0.1.01", "interval": "1m", "hold": false,
                "source": {"kind": "gitrepositories.source.toolkit.fluxcd.io", "name": "addons-config",
                    "namespace": "gotk-system", "path": "testdata/addons/base"},
                "prereqs": {"k8sVersion": "v1.16", "dependsOn": ["bootstrap@0.1.01"]},
                "legacyField": true},
            "status": {"state": "Deployed"}
        });
        let imported = import(&kraan);
        let want = json!({
            "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
            "metadata": {"name": "base", "labels": {"team": "platform"}},
            "spec": {"version": "0.1.01", "interval": "1m", "hold": false,
                "source": {"kind": "gitrepositories.source.toolkit.fluxcd.io", "name": "addons-config",
                    "namespace": "gotk-system", "path": "./testdata/addons/base"},
                "prereqs": {"k8sVersion": "v1.16", "dependsOn": ["bootstrap@0.1.01"]}}
        });
        assert_eq!(imported.object, want);
        assert!(imported.errors.is_empty(), "{:?}", imported.errors);
        for expected in [
            "apiVersion kraan.io/v1alpha1 -> strata.dev/v1alpha1",
            "status dropped",
            "metadata.uid, metadata.resourceVersion, metadata.finalizers dropped",
            "spec.legacyField has no Strata equivalent",
            "spec.source.path \"testdata/addons/base\" -> \"./testdata/addons/base\"",
        ] {
            assert!(
                imported.notes.iter().any(|n| n.contains(expected)),
                "{expected} not in {:?}",
                imported.notes
            );
        }
    }

    #[test]
    fn other_documents_and_bad_layers() {
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let imported = import(&configmap);
        assert_eq!(imported.object, configmap);
        assert!(imported.notes[0].contains("left as it is"));
        let bad = json!({"apiVersion": "kraan.io/v1alpha1", "kind": "AddonsLayer", "metadata": {"name": "a"},
            "spec": {"version": "1", "source": {"name": "r", "path": "./x"}, "interval": "soon",
                "prereqs": {"dependsOn": ["a"]}}});
        let errors = import(&bad).errors;
        assert!(
            errors.iter().any(|e| e.contains("spec.interval")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.contains("cannot depend on itself")),
            "{errors:?}"
        );
    }
}
