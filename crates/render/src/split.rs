//! Helm's multi-document output → one object per resource: `List`/`*List` flattened, empty
//! documents dropped, every object checked for a kind and a name, and `metadata.namespace` set
//! on namespaced kinds only (Helm's `--namespace` never writes it, helm #3553).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::{RenderError, Result, yaml_message};

/// One object out of `helm template`, with the template it came from (Helm's `# Source:`).
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedObject {
    pub source: String,
    pub object: Value,
}

/// One YAML document of Helm's output and the template that produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub source: String,
    pub text: String,
}

/// Splits on `---` lines. Helm puts every document marker on its own line and a `# Source:`
/// comment after it; a CRD file holding several documents keeps its source for all of them.
pub fn documents(output: &str) -> Vec<Document> {
    let mut docs = Vec::new();
    let mut source = String::new();
    let mut text = String::new();
    let flush = |docs: &mut Vec<Document>, source: &str, text: &mut String| {
        if !text.trim().is_empty() {
            docs.push(Document {
                source: source.to_string(),
                text: std::mem::take(text),
            });
        }
        text.clear();
    };
    for line in output.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") {
            flush(&mut docs, &source, &mut text);
            continue;
        }
        if let Some(path) = bare.strip_prefix("# Source: ") {
            source = path.trim().to_string();
        }
        text.push_str(line);
    }
    flush(&mut docs, &source, &mut text);
    docs
}

/// Parses every document into objects, flattening lists (recursively) and refusing what cannot
/// become a file: a document that is not a mapping, or an object without kind or name.
pub fn objects(release: &str, output: &str) -> Result<Vec<RenderedObject>> {
    let mut out = Vec::new();
    for (index, doc) in documents(output).into_iter().enumerate() {
        let fail = |message: String| RenderError::Manifest {
            release: release.to_string(),
            source_template: doc.source.clone(),
            index,
            message,
        };
        let value: Value = serde_saphyr::from_str(&doc.text).map_err(|e| fail(yaml_message(&e)))?;
        flatten(value, &mut |object| {
            check_object(&object).map_err(&fail)?;
            out.push(RenderedObject {
                source: doc.source.clone(),
                object,
            });
            Ok(())
        })?;
    }
    Ok(out)
}

/// Calls `each` for every object inside `value`, unwrapping `List` and `*List` documents the
/// way `kubectl` and Argo CD do (`items: null` is an empty list). Null documents are skipped.
fn flatten(value: Value, each: &mut dyn FnMut(Value) -> Result<()>) -> Result<()> {
    if value.is_null() {
        return Ok(());
    }
    if is_list(&value) {
        if let Some(Value::Array(items)) = value.get("items").cloned() {
            for item in items {
                flatten(item, each)?;
            }
        }
        return Ok(());
    }
    each(value)
}

/// Kubernetes reserves `*List` kinds for lists, so any such document with `items` is one.
fn is_list(value: &Value) -> bool {
    value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some()
}

fn check_object(object: &Value) -> Result<(), String> {
    if !object.is_object() {
        return Err("not a mapping".into());
    }
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    let kind = object.get("kind").and_then(Value::as_str);
    if api_version.is_none_or(str::is_empty) {
        return Err("apiVersion: missing".into());
    }
    if kind.is_none_or(str::is_empty) {
        return Err("kind: missing".into());
    }
    if name_of(object).is_none() {
        return Err(format!(
            "metadata.name: missing on {}",
            kind.unwrap_or_default()
        ));
    }
    Ok(())
}

/// `metadata.name`, or `metadata.generateName` (hooks may use it; Argo CD supports it).
pub fn name_of(object: &Value) -> Option<&str> {
    let metadata = object.get("metadata")?;
    metadata
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            metadata
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
        })
}

pub fn kind_of(object: &Value) -> &str {
    object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The API group of an object (`""` for the core group).
pub fn group_of(object: &Value) -> &str {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match api_version.rsplit_once('/') {
        Some((group, _)) => group,
        None => "",
    }
}

/// Kinds that live outside namespaces: the built-in table, the profile's list and the CRDs of
/// this render. Anything else is taken as namespaced, as the API server would for a CRD with the
/// default scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scopes {
    cluster: BTreeSet<(String, String)>,
}

/// Cluster-scoped built-in kinds (group, kind) as of Kubernetes 1.34, plus Strata's own.
const BUILTIN_CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "ComponentStatus"),
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("authentication.k8s.io", "SelfSubjectReview"),
    ("authentication.k8s.io", "TokenReview"),
    ("authorization.k8s.io", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "SubjectAccessReview"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("internal.apiserver.k8s.io", "StorageVersion"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("storagemigration.k8s.io", "StorageVersionMigration"),
    ("strata.dev", "AddonsLayer"),
];

impl Scopes {
    pub fn builtin() -> Self {
        let mut scopes = Scopes::default();
        for (group, kind) in BUILTIN_CLUSTER_SCOPED {
            scopes.add(group, kind);
        }
        scopes
    }

    pub fn add(&mut self, group: &str, kind: &str) {
        self.cluster.insert((group.to_string(), kind.to_string()));
    }

    /// Adds the cluster-scoped kinds defined by CRDs among `objects`.
    pub fn add_crds<'a>(&mut self, objects: impl IntoIterator<Item = &'a Value>) {
        for object in objects {
            if kind_of(object) != "CustomResourceDefinition"
                || group_of(object) != "apiextensions.k8s.io"
            {
                continue;
            }
            let spec = &object["spec"];
            if spec["scope"].as_str() == Some("Cluster")
                && let (Some(group), Some(kind)) =
                    (spec["group"].as_str(), spec["names"]["kind"].as_str())
            {
                self.add(group, kind);
            }
        }
    }

    pub fn is_cluster_scoped(&self, group: &str, kind: &str) -> bool {
        self.cluster
            .contains(&(group.to_string(), kind.to_string()))
    }

    pub fn is_namespaced(&self, object: &Value) -> bool {
        !self.is_cluster_scoped(group_of(object), kind_of(object))
    }
}

/// Sets `metadata.namespace` on a namespaced object that has none and removes it from a
/// cluster-scoped one (the API server ignores it there, but a reviewer would be misled).
/// A namespace the chart wrote itself is kept.
pub fn set_namespace(object: &mut Value, namespace: &str, scopes: &Scopes) {
    let namespaced = scopes.is_namespaced(object);
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if namespaced {
        let has_one = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_one {
            metadata.insert("namespace".into(), Value::String(namespace.to_string()));
        }
    } else {
        metadata.remove("namespace");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    const OUTPUT: &str = "\
---
# Source: app/crds/crd.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec: {group: example.com, scope: Cluster, names: {kind: Widget}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec: {group: example.com, scope: Namespaced, names: {kind: Gadget}}
---
# Source: app/templates/empty.yaml
---
# Source: app/templates/list.yaml
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
  - apiVersion: v1
    kind: ConfigMapList
    items: [{apiVersion: v1, kind: ConfigMap, metadata: {name: b}}]
  - {apiVersion: v1, kind: List, items: null}
---
# Source: app/templates/hook.yaml
apiVersion: batch/v1
kind: Job
metadata: {generateName: migrate-}
";

    #[test]
    fn splits_and_flattens() {
        let objects = objects("r", OUTPUT).unwrap();
        let got: Vec<(String, String, String)> = objects
            .iter()
            .map(|o| {
                (
                    o.source.clone(),
                    kind_of(&o.object).to_string(),
                    name_of(&o.object).unwrap().to_string(),
                )
            })
            .collect();
        let want = [
            (
                "app/crds/crd.yaml",
                "CustomResourceDefinition",
                "widgets.example.com",
            ),
            (
                "app/crds/crd.yaml",
                "CustomResourceDefinition",
                "gadgets.example.com",
            ),
            ("app/templates/list.yaml", "ConfigMap", "a"),
            ("app/templates/list.yaml", "ConfigMap", "b"),
            ("app/templates/hook.yaml", "Job", "migrate-"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bad_documents_are_named() {
        let cases: &[(&str, &str)] = &[
            (
                "---\n# Source: c/templates/a.yaml\nkind: ConfigMap\nmetadata: {name: a}\n",
                "release r: c/templates/a.yaml: document 0: apiVersion: missing",
            ),
            (
                "---\n# Source: c/templates/a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
                "release r: c/templates/a.yaml: document 0: metadata.name: missing on ConfigMap",
            ),
            (
                "---\n# Source: c/templates/a.yaml\n- 1\n",
                "release r: c/templates/a.yaml: document 0: not a mapping",
            ),
            (
                "---\n# Source: c/templates/a.yaml\na: [\n",
                "release r: c/templates/a.yaml: document 0: ",
            ),
        ];
        for (given, want) in cases {
            let error = objects("r", given).unwrap_err().to_string();
            assert!(error.starts_with(want), "{given}: {error}");
        }
    }

    #[test]
    fn namespaces_only_on_namespaced_kinds() {
        let mut scopes = Scopes::builtin();
        let parsed = objects("r", OUTPUT).unwrap();
        scopes.add_crds(parsed.iter().map(|o| &o.object));
        scopes.add("example.org", "Thing");
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                Some("apps"),
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "other"}}),
                Some("other"),
            ),
            (
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "a", "namespace": "x"}}),
                None,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}),
                None,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "a"}}),
                Some("apps"),
            ),
            (
                json!({"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "a"}}),
                None,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
                None,
            ),
        ];
        for (mut object, want) in cases {
            set_namespace(&mut object, "apps", &scopes);
            assert_eq!(object["metadata"]["namespace"].as_str(), want, "{object}");
        }
    }
}
