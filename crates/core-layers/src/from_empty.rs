//! What would break if the cluster were rebuilt from nothing (`strata layers plan
//! --from-empty`): an order that works in a cluster that already holds everything can fail on
//! an empty one, where a layer finds neither the CRD nor the namespace another layer creates
//! unless it waits for that layer. Pure: the layers and the objects each one applies in, the
//! findings out, one line each naming both layers and the object.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::{cycle_through, parse_dependency};
use crate::objects::ObjectRef;

/// One layer as an empty cluster would see it.
#[derive(Clone, Debug)]
pub struct LayerContents {
    pub name: String,
    pub version: String,
    /// `spec.prereqs.dependsOn`, as written.
    pub depends_on: Vec<String>,
    /// Every object the layer applies, with the fields read here: for a
    /// CustomResourceDefinition its `spec.group` and `spec.names.kind`.
    pub objects: Vec<(ObjectRef, serde_json::Value)>,
}

/// Namespaces every cluster has before any layer runs.
const BUILT_IN_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The findings, sorted, one line each; empty when the layers deploy from an empty cluster.
pub fn findings(layers: &[LayerContents]) -> Vec<String> {
    let by_name: BTreeMap<&str, &LayerContents> =
        layers.iter().map(|l| (l.name.as_str(), l)).collect();
    let mut found = BTreeSet::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for layer in layers {
        let edges = graph.entry(layer.name.clone()).or_default();
        for (i, entry) in layer.depends_on.iter().enumerate() {
            let dependency = match parse_dependency(entry) {
                Ok(dependency) => dependency,
                Err(why) => {
                    found.insert(format!(
                        "layer {}: spec.prereqs.dependsOn[{i}] {entry:?}: {why}",
                        layer.name
                    ));
                    continue;
                }
            };
            match by_name.get(dependency.layer.as_str()) {
                None => {
                    found.insert(format!(
                        "layer {} depends on layer {}, which no layer is: it would wait forever",
                        layer.name, dependency.layer
                    ));
                }
                Some(target) if !dependency.accepts(&target.version) => {
                    found.insert(format!(
                        "layer {} depends on {entry}, but layer {} is version {}: no layer satisfies it",
                        layer.name, target.name, target.version
                    ));
                }
                Some(_) => {}
            }
            edges.insert(dependency.layer);
        }
    }
    // Each cycle once, named from its smallest member.
    for name in graph.keys() {
        if let Some(cycle) = cycle_through(name, &graph)
            && cycle.iter().all(|member| member >= name)
        {
            found.insert(format!(
                "layers {} form a dependency cycle: none of them would ever apply",
                cycle.join(" -> ")
            ));
        }
    }
    let reaches = |from: &str, to: &str| -> bool {
        let mut seen = BTreeSet::new();
        let mut next = vec![from.to_string()];
        while let Some(layer) = next.pop() {
            for dependency in graph.get(&layer).into_iter().flatten() {
                if dependency == to {
                    return true;
                }
                if seen.insert(dependency.clone()) {
                    next.push(dependency.clone());
                }
            }
        }
        false
    };
    // Who creates each CRD's kind and each namespace.
    let mut kinds: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    let mut namespaces: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for layer in layers {
        for (object, value) in &layer.objects {
            if object.group == "apiextensions.k8s.io" && object.kind == "CustomResourceDefinition" {
                let group = value.pointer("/spec/group").and_then(|v| v.as_str());
                let kind = value.pointer("/spec/names/kind").and_then(|v| v.as_str());
                if let (Some(group), Some(kind)) = (group, kind) {
                    kinds
                        .entry((group.to_string(), kind.to_string()))
                        .or_default()
                        .push(&layer.name);
                }
            }
            if object.group.is_empty() && object.kind == "Namespace" {
                namespaces
                    .entry(&object.name)
                    .or_default()
                    .push(&layer.name);
            }
        }
    }
    for layer in layers {
        for (object, _) in &layer.objects {
            let key = (object.group.clone(), object.kind.clone());
            if let Some(providers) = kinds.get(&key)
                && !providers.contains(&layer.name.as_str())
                && !providers.iter().any(|p| reaches(&layer.name, p))
            {
                found.insert(format!(
                    "layer {} applies {object}, a {} whose CustomResourceDefinition only layer {} installs, and does not depend on it: on an empty cluster the kind is not served yet",
                    layer.name,
                    if object.group.is_empty() {
                        object.kind.clone()
                    } else {
                        format!("{}.{}", object.kind, object.group)
                    },
                    providers.join(" or layer ")
                ));
            }
            let Some(namespace) = object.namespace.as_deref() else {
                continue;
            };
            if BUILT_IN_NAMESPACES.contains(&namespace) {
                continue;
            }
            if let Some(providers) = namespaces.get(namespace)
                && !providers.contains(&layer.name.as_str())
                && !providers.iter().any(|p| reaches(&layer.name, p))
            {
                found.insert(format!(
                    "layer {} applies {object} into namespace {namespace}, which only layer {} creates, and does not depend on it: on an empty cluster the namespace does not exist yet",
                    layer.name,
                    providers.join(" or layer ")
                ));
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn layer(
        name: &str,
        version: &str,
        deps: &[&str],
        objects: &[serde_json::Value],
    ) -> LayerContents {
        LayerContents {
            name: name.into(),
            version: version.into(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            objects: objects
                .iter()
                .map(|o| {
                    let meta = &o["metadata"];
                    (
                        ObjectRef::new(
                            o["apiVersion"].as_str().unwrap(),
                            o["kind"].as_str().unwrap(),
                            meta["namespace"].as_str(),
                            meta["name"].as_str().unwrap(),
                        ),
                        o.clone(),
                    )
                })
                .collect(),
        }
    }

    fn crd() -> serde_json::Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "certificates.cert-manager.io"},
               "spec": {"group": "cert-manager.io", "names": {"kind": "Certificate"}}})
    }

    fn certificate(ns: &str) -> serde_json::Value {
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
               "metadata": {"name": "web", "namespace": ns}})
    }

    fn namespace(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    }

    fn config_map(ns: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns}})
    }

    #[test]
    fn findings_table() {
        // (name, layers, the findings' distinguishing parts; empty: none)
        let cases: Vec<(&str, Vec<LayerContents>, Vec<&str>)> = vec![
            (
                "ordered: the CRD and the namespace come from a dependency",
                vec![
                    layer("crds", "1.0.0", &[], &[crd(), namespace("apps")]),
                    layer(
                        "web",
                        "1.0.0",
                        &["crds@^1"],
                        &[certificate("apps"), config_map("apps")],
                    ),
                ],
                vec![],
            ),
            (
                "transitive dependency is enough",
                vec![
                    layer("crds", "1.0.0", &[], &[crd()]),
                    layer("base", "1.0.0", &["crds"], &[]),
                    layer("web", "1.0.0", &["base"], &[certificate("default")]),
                ],
                vec![],
            ),
            (
                "a kind whose CRD another layer installs, without depending on it",
                vec![
                    layer("crds", "1.0.0", &[], &[crd()]),
                    layer("web", "1.0.0", &[], &[certificate("default")]),
                ],
                vec![
                    "layer web applies Certificate default/web, a Certificate.cert-manager.io whose CustomResourceDefinition only layer crds installs, and does not depend on it",
                ],
            ),
            (
                "depending on another layer is not depending on the CRD's",
                vec![
                    layer("crds", "1.0.0", &[], &[crd()]),
                    layer("base", "1.0.0", &[], &[]),
                    layer("web", "1.0.0", &["base"], &[certificate("default")]),
                ],
                vec![
                    "layer web applies Certificate default/web, a Certificate.cert-manager.io whose CustomResourceDefinition only layer crds installs",
                ],
            ),
            (
                "the CRD in the same layer",
                vec![layer("all", "1.0.0", &[], &[crd(), certificate("default")])],
                vec![],
            ),
            (
                "a namespace another layer creates",
                vec![
                    layer("namespaces", "1.0.0", &[], &[namespace("apps")]),
                    layer("web", "1.0.0", &[], &[config_map("apps")]),
                ],
                vec![
                    "layer web applies ConfigMap apps/settings into namespace apps, which only layer namespaces creates, and does not depend on it",
                ],
            ),
            (
                "built-in and unknown namespaces are not findings",
                vec![layer(
                    "web",
                    "1.0.0",
                    &[],
                    &[config_map("kube-system"), config_map("made-by-hand")],
                )],
                vec![],
            ),
            (
                "a cycle, named once",
                vec![
                    layer("a", "1.0.0", &["b"], &[]),
                    layer("b", "1.0.0", &["a"], &[]),
                ],
                vec!["layers a -> b -> a form a dependency cycle"],
            ),
            (
                "a constraint no version satisfies, and a missing layer",
                vec![
                    layer("base", "1.4.0", &[], &[]),
                    layer("web", "1.0.0", &["base@>=2", "ghost"], &[]),
                ],
                vec![
                    "layer web depends on base@>=2, but layer base is version 1.4.0",
                    "layer web depends on layer ghost, which no layer is",
                ],
            ),
            (
                "an entry that does not parse",
                vec![layer("web", "1.0.0", &["base@>=two"], &[])],
                vec!["layer web: spec.prereqs.dependsOn[0] \"base@>=two\""],
            ),
        ];
        for (name, layers, want) in cases {
            let got = findings(&layers);
            assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
            for part in want {
                assert!(
                    got.iter().any(|line| line.contains(part)),
                    "{name}: {part:?} in {got:#?}"
                );
            }
        }
    }
}
