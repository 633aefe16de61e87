//! Where each rendered object goes and what its file holds: one resource per file, in a tree
//! that is deterministic and collision-free, every file starting with the generated-file header.
//!
//! ```text
//! <out>/releases/<release>/<namespace>/<kind>[.<group>]_<name>.yaml   namespaced objects
//! <out>/releases/<release>/_cluster/<kind>[.<group>]_<name>.yaml      cluster-scoped objects
//! <out>/layers/<layer>/<release>/...                                  the same, --gitops strata
//! <out>/apps/<tool>/<name>.yaml                                       Applications, Kustomizations, AddonsLayers
//! ```
//!
//! Namespaces are DNS labels, so `_cluster` can never be one; kinds hold no `.` or `_` and groups
//! no `_`, so the file name splits back into kind, group and name, and the name is
//! percent-encoded outside `[a-z0-9.-]`: two different objects never share a file.

use std::path::{Path, PathBuf};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::error::{RenderError, Result};
use crate::keys::{CLUSTER_DIR, HEADER, RENDERED_FROM};
use crate::split::{Scopes, group_of, kind_of, name_of};

/// A file to write, its path relative to the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    pub path: PathBuf,
    pub content: String,
}

/// `<kind>[.<group>]_<name>.yaml`, lower-case kind, encoded name.
pub fn file_name(object: &Value) -> String {
    let kind = kind_of(object).to_ascii_lowercase();
    let group = group_of(object);
    let name = encode_name(name_of(object).unwrap_or_default());
    if group.is_empty() {
        format!("{kind}_{name}.yaml")
    } else {
        format!("{kind}.{group}_{name}.yaml")
    }
}

/// Keeps `[a-z0-9.-]` (every DNS-subdomain name) and percent-encodes any other byte, so names
/// with upper case, `:` or `/` (allowed for some kinds) stay distinct on case-insensitive
/// file systems and never climb out of their directory.
pub fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let plain = byte.is_ascii_lowercase()
            || byte.is_ascii_digit()
            || byte == b'-'
            || (byte == b'.' && i > 0);
        if plain {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The path of an object's file inside its release directory.
pub fn object_path(release_dir: &Path, object: &Value, scopes: &Scopes) -> PathBuf {
    let namespace = if scopes.is_namespaced(object) {
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        CLUSTER_DIR.to_string()
    };
    release_dir.join(namespace).join(file_name(object))
}

/// Adds `strata.dev/rendered-from`, keeping every Helm label and annotation.
pub fn annotate(object: &mut Value, rendered_from: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if !annotations.is_object() {
        *annotations = Value::Object(Default::default());
    }
    if let Some(map) = annotations.as_object_mut() {
        map.insert(RENDERED_FROM.into(), Value::String(rendered_from.into()));
    }
}

/// The value of `strata.dev/rendered-from`.
pub fn rendered_from(release: &str, chart: &str, version: &str) -> String {
    format!("release={release},chart={chart},version={version}")
}

/// A file's text: the header, one provenance comment, then the object as YAML with
/// `apiVersion`, `kind` and `metadata` first (the rest in key order, so output is stable).
pub fn file_content(provenance: &str, object: &Value) -> Result<String> {
    let yaml = serde_saphyr::to_string(&Top(object)).map_err(|e| RenderError::Layout {
        path: name_of(object).unwrap_or_default().to_string(),
        message: format!("cannot write as YAML: {e}"),
    })?;
    let provenance: String = provenance
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Ok(format!("{HEADER}\n# {provenance}\n{yaml}"))
}

/// The object with its well-known keys first.
struct Top<'a>(&'a Value);
/// `metadata` with name and namespace first.
struct Metadata<'a>(&'a Value);

const TOP_FIRST: &[&str] = &["apiVersion", "kind", "metadata"];
const METADATA_FIRST: &[&str] = &["name", "generateName", "namespace", "labels", "annotations"];

fn serialize_ordered<S: Serializer>(
    value: &Value,
    first: &[&str],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let Some(map) = value.as_object() else {
        return value.serialize(serializer);
    };
    let mut out = serializer.serialize_map(Some(map.len()))?;
    for key in first {
        if let Some(item) = map.get(*key) {
            out.serialize_entry(key, item)?;
        }
    }
    for (key, item) in map {
        if !first.contains(&key.as_str()) {
            out.serialize_entry(key, item)?;
        }
    }
    out.end()
}

impl Serialize for Top<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(map) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut out = serializer.serialize_map(Some(map.len()))?;
        for key in TOP_FIRST {
            match map.get(*key) {
                Some(item) if *key == "metadata" => out.serialize_entry(key, &Metadata(item))?,
                Some(item) => out.serialize_entry(key, item)?,
                None => {}
            }
        }
        for (key, item) in map {
            if !TOP_FIRST.contains(&key.as_str()) {
                out.serialize_entry(key, item)?;
            }
        }
        out.end()
    }
}

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_ordered(self.0, METADATA_FIRST, serializer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn file_names() {
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a.b-c"}}),
                "configmap_a.b-c.yaml",
            ),
            (
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
                "deployment.apps_web.yaml",
            ),
            (
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:aggregate/View"}}),
                "clusterrole.rbac.authorization.k8s.io_system%3Aaggregate%2F%56iew.yaml",
            ),
            (
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "migrate-"}}),
                "job.batch_migrate-.yaml",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ".."}}),
                "configmap_%2E..yaml",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "100%"}}),
                "configmap_100%25.yaml",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(file_name(&object), want, "{object}");
        }
    }

    #[test]
    fn same_kind_and_name_in_two_groups_do_not_collide() {
        let a =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}});
        let b =
            json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "x"}});
        assert_ne!(file_name(&a), file_name(&b));
    }

    #[test]
    fn paths_split_by_scope() {
        let scopes = Scopes::builtin();
        let dir = Path::new("releases/web");
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "apps"}}),
                "releases/web/apps/service_a.yaml",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
                "releases/web/_cluster/namespace_apps.yaml",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(object_path(dir, &object, &scopes), Path::new(want));
        }
    }

    #[test]
    fn content_has_header_and_stable_order() {
        let mut object = json!({
            "spec": {"b": 1, "a": "yes"},
            "metadata": {"labels": {"x": "1"}, "name": "web", "namespace": "apps"},
            "kind": "ConfigMap",
            "apiVersion": "v1",
        });
        annotate(&mut object, &rendered_from("web", "podinfo", "1.0.0"));
        let text = file_content("web podinfo@1.0.0: podinfo/templates/cm.yaml", &object).unwrap();
        let want = "\
# Code generated by strata render; DO NOT EDIT.
# web podinfo@1.0.0: podinfo/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
  namespace: apps
  labels:
    x: \"1\"
  annotations:
    strata.dev/rendered-from: release=web,chart=podinfo,version=1.0.0
spec:
  a: \"yes\"
  b: 1
";
        assert_eq!(text, want);
    }
}
