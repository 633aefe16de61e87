//! [`ObservedFields`]: the fields compared, observed from a manifest ([`default_fields`]) or
//! from text paths ([`selector_fields`]), and merged.

use serde_json::Value;

use super::{FieldPath, SchemaError, Segment, selector_value};

/// A bound on a list's length, from a Krake observer schema.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListBound {
    pub path: FieldPath,
    pub min: usize,
    /// `None`: unlimited.
    pub max: Option<usize>,
}

/// The fields compared between the dry-run prediction and the live object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedFields {
    /// Each is compared whole: a path to an object or list compares the subtree.
    pub leaves: Vec<FieldPath>,
    pub list_bounds: Vec<ListBound>,
}

impl ObservedFields {
    /// Both sets, sorted and without repeats.
    pub fn merge(mut self, other: ObservedFields) -> ObservedFields {
        self.leaves.extend(other.leaves);
        self.list_bounds.extend(other.list_bounds);
        self.normalised()
    }

    pub(super) fn normalised(mut self) -> ObservedFields {
        self.leaves.sort();
        self.leaves.dedup();
        self.list_bounds.sort();
        self.list_bounds.dedup();
        self
    }
}

/// Members tried in order as a list's merge key when observing a manifest: the keys the
/// Kubernetes API declares for its associative lists (containers, ports, volume mounts,
/// devices, host aliases, affinity terms, service ports, tolerations/items).
const MERGE_KEYS: [&str; 8] = [
    "name",
    "containerPort",
    "mountPath",
    "devicePath",
    "ip",
    "topologyKey",
    "port",
    "key",
];

/// The member that identifies each element of `items`: present as a string or number in every
/// element, with no two alike.
fn merge_key(items: &[Value]) -> Option<&'static str> {
    MERGE_KEYS.into_iter().find(|key| {
        let mut seen = std::collections::BTreeSet::new();
        items.iter().all(|item| {
            item.get(key)
                .and_then(selector_value)
                .is_some_and(|value| seen.insert(value))
        })
    })
}

/// "Observe every field the manifest declares" (Krake's default observer schema): every leaf
/// (scalar, null, empty object, empty list) except `apiVersion`, `kind`, `status` and, in
/// `metadata`, anything but `labels` and `annotations` entries (the API server owns the rest).
/// Elements of a list of objects with a merge key are addressed by selector, so a sidecar a
/// webhook inserts ahead of ours shifts nothing. Unlike Krake, no list length bounds: an
/// injected sidecar is not drift.
pub fn default_fields(manifest: &Value) -> ObservedFields {
    let mut leaves = Vec::new();
    if let Some(members) = manifest.as_object() {
        for (key, value) in members {
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    let metadata = FieldPath::root().key(key);
                    for observed in ["labels", "annotations"] {
                        if let Some(entries) = value.get(observed) {
                            collect_leaves(entries, metadata.key(observed), &mut leaves);
                        }
                    }
                }
                _ => collect_leaves(value, FieldPath::root().key(key), &mut leaves),
            }
        }
    }
    ObservedFields {
        leaves,
        list_bounds: Vec::new(),
    }
    .normalised()
}

fn collect_leaves(value: &Value, path: FieldPath, leaves: &mut Vec<FieldPath>) {
    match value {
        Value::Object(members) if !members.is_empty() => {
            for (key, member) in members {
                collect_leaves(member, path.key(key), leaves);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let key = items
                .iter()
                .all(Value::is_object)
                .then(|| merge_key(items))
                .flatten();
            for (index, item) in items.iter().enumerate() {
                let segment =
                    match key.and_then(|k| Some((k, item.get(k).and_then(selector_value)?))) {
                        Some((key, value)) => Segment::Select {
                            key: key.to_string(),
                            value,
                        },
                        None => Segment::Index(index),
                    };
                collect_leaves(item, path.child(segment), leaves);
            }
        }
        _ => leaves.push(path),
    }
}

/// Observes each text path whole (a path to an object or list compares its subtree).
pub fn selector_fields(paths: &[String]) -> Result<ObservedFields, SchemaError> {
    let leaves = paths
        .iter()
        .map(|path| path.parse())
        .collect::<Result<Vec<FieldPath>, _>>()?;
    Ok(ObservedFields {
        leaves,
        list_bounds: Vec::new(),
    }
    .normalised())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_support::{bound, path, texts};
    use serde_json::json;

    fn deployment_manifest() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/name": "web"},
                "annotations": {"strata.dev/layer": "apps"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": "nginx:1.27",
                            "args": ["--port", "80"],
                            "env": [
                                {"name": "MODE", "value": "prod"},
                                {"name": "EMPTY", "value": ""},
                            ],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        }],
                        "volumes": [{"name": "cache", "emptyDir": {}}],
                        "tolerations": [],
                        "nodeSelector": null,
                    },
                },
            },
            "status": {"replicas": 2},
        })
    }

    #[test]
    fn default_fields_table() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "deployment",
                deployment_manifest(),
                vec![
                    r#"metadata.annotations["strata.dev/layer"]"#,
                    r#"metadata.labels["app.kubernetes.io/name"]"#,
                    "spec.replicas",
                    "spec.selector.matchLabels.app",
                    "spec.template.metadata.labels.app",
                    "spec.template.spec.containers[name=app].args[0]",
                    "spec.template.spec.containers[name=app].args[1]",
                    "spec.template.spec.containers[name=app].env[name=EMPTY].name",
                    "spec.template.spec.containers[name=app].env[name=EMPTY].value",
                    "spec.template.spec.containers[name=app].env[name=MODE].name",
                    "spec.template.spec.containers[name=app].env[name=MODE].value",
                    "spec.template.spec.containers[name=app].image",
                    "spec.template.spec.containers[name=app].name",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].containerPort",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].protocol",
                    "spec.template.spec.containers[name=app].volumeMounts[name=cache].mountPath",
                    "spec.template.spec.containers[name=app].volumeMounts[name=cache].name",
                    "spec.template.spec.nodeSelector",
                    "spec.template.spec.tolerations",
                    "spec.template.spec.volumes[name=cache].emptyDir",
                    "spec.template.spec.volumes[name=cache].name",
                ],
            ),
            (
                "repeated names fall back to the next merge key",
                json!({"spec": {"ports": [
                    {"name": "http", "port": 80},
                    {"name": "http", "port": 8080},
                ]}}),
                vec![
                    "spec.ports[port=80].name",
                    "spec.ports[port=80].port",
                    "spec.ports[port=8080].name",
                    "spec.ports[port=8080].port",
                ],
            ),
            (
                "no unique merge key: by position",
                json!({"spec": {"rules": [{"host": "a"}, {"host": "b"}]}}),
                vec!["spec.rules[0].host", "spec.rules[1].host"],
            ),
            (
                "a key missing from one element: by position",
                json!({"spec": {"items": [{"name": "a"}, {"other": 1}]}}),
                vec!["spec.items[0].name", "spec.items[1].other"],
            ),
            (
                "mixed elements: by position",
                json!({"spec": {"items": [{"name": "a"}, "b"]}}),
                vec!["spec.items[0].name", "spec.items[1]"],
            ),
            (
                "tolerations keyed by key",
                json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
                vec![
                    "spec.tolerations[key=gpu].key",
                    "spec.tolerations[key=gpu].operator",
                ],
            ),
            (
                "metadata other than labels and annotations is the server's",
                json!({"metadata": {"name": "x", "finalizers": ["a"], "labels": {}}}),
                vec!["metadata.labels"],
            ),
            ("not an object", json!(["a"]), vec![]),
            (
                "only identification",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
                vec![],
            ),
        ];
        for (name, manifest, want) in cases {
            let fields = default_fields(&manifest);
            assert_eq!(texts(&fields.leaves), want, "{name}");
            assert_eq!(fields.list_bounds, vec![], "{name}: no list bounds");
        }
    }

    #[test]
    fn selector_fields_table() {
        // name, paths → leaves or the error
        type Case = (
            &'static str,
            Vec<&'static str>,
            Result<Vec<&'static str>, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "sorted, repeats dropped",
                vec![
                    "spec.template.spec.containers[name=app]",
                    "spec.replicas",
                    "spec.replicas",
                ],
                Ok(vec![
                    "spec.replicas",
                    "spec.template.spec.containers[name=app]",
                ]),
            ),
            ("none", vec![], Ok(vec![])),
            (
                "a bad path",
                vec!["spec.replicas", "spec..x"],
                Err("field path \"spec..x\": empty key at character 6"),
            ),
        ];
        for (name, paths, want) in cases {
            let paths: Vec<String> = paths.into_iter().map(String::from).collect();
            let got = selector_fields(&paths)
                .map(|f| {
                    assert_eq!(f.list_bounds, vec![], "{name}");
                    texts(&f.leaves)
                })
                .map_err(|e| e.to_string());
            let want = want
                .map(|w| w.into_iter().map(String::from).collect::<Vec<_>>())
                .map_err(String::from);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn merging() {
        let a = ObservedFields {
            leaves: vec![path("spec.replicas"), path("spec.b")],
            list_bounds: vec![bound("spec.ports", 1, None)],
        };
        let b = ObservedFields {
            leaves: vec![path("spec.a"), path("spec.replicas")],
            list_bounds: vec![
                bound("spec.ports", 1, None),
                bound("spec.ports", 0, Some(2)),
            ],
        };
        let merged = a.merge(b);
        assert_eq!(texts(&merged.leaves), ["spec.a", "spec.b", "spec.replicas"]);
        assert_eq!(
            merged.list_bounds,
            [
                bound("spec.ports", 0, Some(2)),
                bound("spec.ports", 1, None)
            ]
        );
    }
}
