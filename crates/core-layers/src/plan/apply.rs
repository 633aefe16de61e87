//! Apply stages and the order of kinds inside them (prune deletes in the reverse order).

use super::ObjectRef;

/// Apply stages: definitions first (waited on until established), then the rest of the
/// cluster-scoped objects, then namespaced ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Definitions = 0,
    ClusterScoped = 1,
    Namespaced = 2,
}

/// Whether an object belongs to the first stage (decided from its kind alone, before any
/// CRD of the layer exists).
pub fn is_definition(api_version: &str, kind: &str) -> bool {
    matches!(
        (core_status::object::api_group(api_version), kind),
        ("apiextensions.k8s.io", "CustomResourceDefinition") | ("", "Namespace")
    )
}

pub fn stage_of(api_version: &str, kind: &str, namespaced: bool) -> Stage {
    if is_definition(api_version, kind) {
        Stage::Definitions
    } else if namespaced {
        Stage::Namespaced
    } else {
        Stage::ClusterScoped
    }
}

/// Order of kinds inside a stage: what others refer to first; webhooks last so they cannot
/// block the objects applied with them.
pub fn kind_rank(kind: &str) -> usize {
    const ORDER: [&str; 24] = [
        "CustomResourceDefinition",
        "Namespace",
        "ClusterRole",
        "PriorityClass",
        "StorageClass",
        "IngressClass",
        "ClusterRoleBinding",
        "ResourceQuota",
        "LimitRange",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "PersistentVolumeClaim",
        "Service",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "CronJob",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    const UNLISTED: usize = 21; // after workloads, before PDBs and webhooks
    ORDER
        .iter()
        .position(|k| *k == kind)
        .map(|i| if i >= UNLISTED { i + 1 } else { i })
        .unwrap_or(UNLISTED)
}

/// The sort key that orders applies; prune deletes in the reverse of it.
pub fn apply_key(object: &ObjectRef, stage: Stage) -> (Stage, usize, ObjectRef) {
    (stage, kind_rank(&object.kind), object.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::prepare_manifest;

    #[test]
    fn stages_and_order() {
        let objects = [
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                false,
            ),
            ("apps/v1", "Deployment", true),
            ("v1", "Namespace", false),
            ("example.com/v1", "Widget", true),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", false),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition", false),
            ("v1", "ConfigMap", true),
            ("policy/v1", "PodDisruptionBudget", true),
        ];
        let mut keys: Vec<_> = objects
            .iter()
            .map(|(av, kind, namespaced)| {
                let ns = namespaced.then_some("ns");
                apply_key(
                    &ObjectRef::new(av, kind, ns, "x"),
                    stage_of(av, kind, *namespaced),
                )
            })
            .collect();
        keys.sort();
        let order: Vec<&str> = keys.iter().map(|(_, _, o)| o.kind.as_str()).collect();
        assert_eq!(
            order,
            vec![
                "CustomResourceDefinition",
                "Namespace",
                "ClusterRole",
                "ValidatingWebhookConfiguration",
                "ConfigMap",
                "Deployment",
                "Widget",
                "PodDisruptionBudget",
            ]
        );
    }

    #[test]
    fn manifests_are_labelled_and_versioned() {
        use serde_json::json;
        let cases = [
            (
                "plain object: labels only",
                json!({"kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app": "x", "strata.dev/orphaned": "t"}}}),
                json!({"kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app": "x",
                    "strata.dev/layer": "base", "app.kubernetes.io/managed-by": "strata"}}}),
            ),
            (
                "HelmRelease values: Kraan's annotation injects Kraan's key",
                json!({"kind": "HelmRelease", "metadata": {"name": "h", "annotations": {"kraan.updateVersion": "true"}},
                    "spec": {"values": {"a": 1}}}),
                json!({"kind": "HelmRelease", "metadata": {"name": "h", "annotations": {"kraan.updateVersion": "true"},
                    "labels": {"strata.dev/layer": "base", "app.kubernetes.io/managed-by": "strata"}},
                    "spec": {"values": {"a": 1, "kraanVersion": "1.2.0"}}}),
            ),
            (
                "HelmRelease values: Strata's annotation injects layerVersion",
                json!({"kind": "HelmRelease", "metadata": {"name": "h", "annotations": {"strata.dev/update-version": "true"}},
                    "spec": {"values": {"a": 1}}}),
                json!({"kind": "HelmRelease", "metadata": {"name": "h", "annotations": {"strata.dev/update-version": "true"},
                    "labels": {"strata.dev/layer": "base", "app.kubernetes.io/managed-by": "strata"}},
                    "spec": {"values": {"a": 1, "layerVersion": "1.2.0"}}}),
            ),
            (
                "workload pod template",
                json!({"kind": "Job", "metadata": {"name": "t", "annotations": {"strata.dev/update-version": "true"}},
                    "spec": {"template": {"spec": {}}}}),
                json!({"kind": "Job", "metadata": {"name": "t", "annotations": {"strata.dev/update-version": "true"},
                    "labels": {"strata.dev/layer": "base", "app.kubernetes.io/managed-by": "strata"}},
                    "spec": {"template": {"metadata": {"annotations": {"strata.dev/layer-version": "1.2.0"}}, "spec": {}}}}),
            ),
            (
                "other objects: an annotation",
                json!({"kind": "Secret", "metadata": {"name": "s", "annotations": {"strata.dev/update-version": "true"}}}),
                json!({"kind": "Secret", "metadata": {"name": "s", "annotations": {"strata.dev/update-version": "true",
                    "strata.dev/layer-version": "1.2.0"},
                    "labels": {"strata.dev/layer": "base", "app.kubernetes.io/managed-by": "strata"}}}),
            ),
        ];
        for (case, input, want) in cases {
            assert_eq!(prepare_manifest(&input, "base", "1.2.0"), want, "{case}");
        }
    }
}
