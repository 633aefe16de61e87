//! The anchor's two CRDs, as Rust types: `rollout-operator.grafana.com/v1`
//! ZoneAwarePodDisruptionBudget and ReplicaTemplate. `make crds` writes their YAML to
//! `manifests/crds/`, and a test fails when the committed YAML is stale.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label selector of a ZoneAwarePodDisruptionBudget: pods and the StatefulSets of every zone.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ZpdbSelector {
    pub match_labels: BTreeMap<String, String>,
}

/// A disruption budget counted per zone (or per partition across zones).
#[derive(
    CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq,
)]
#[kube(
    group = "rollout-operator.grafana.com",
    version = "v1",
    kind = "ZoneAwarePodDisruptionBudget",
    plural = "zoneawarepoddisruptionbudgets",
    shortname = "zpdb",
    namespaced,
    status = "ZoneAwarePodDisruptionBudgetStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ZoneAwarePodDisruptionBudgetSpec {
    /// Pods that may be unavailable in one zone (or, with a partition regex, in one partition
    /// across the other zones). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_unavailable: Option<i64>,
    /// Like maxUnavailable, as a percentage of the owning StatefulSet's replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub max_unavailable_percentage: Option<i64>,
    pub selector: ZpdbSelector,
    /// Regular expression over pod names whose capture group names the partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name_partition_regex: Option<String>,
    /// Which capture group of podNamePartitionRegex names the partition (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pod_name_regex_group: Option<i64>,
    /// How long a pod must have been Ready before a pod of its partition in another zone may
    /// be evicted (a Go duration, e.g. "5m"). Needs podNamePartitionRegex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_zone_eviction_delay: Option<String>,
}

/// Declared for compatibility; the anchor never writes it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ZoneAwarePodDisruptionBudgetStatus {}

/// A replica count with a `scale` subresource, for an HPA (or a person) to drive StatefulSets
/// that mirror it.
#[derive(
    CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq,
)]
#[kube(
    group = "rollout-operator.grafana.com",
    version = "v1",
    kind = "ReplicaTemplate",
    plural = "replicatemplates",
    namespaced,
    status = "ReplicaTemplateStatus",
    category = "all",
    printcolumn = r#"{"name":"StatusReplicas","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"SpecReplicas","type":"integer","jsonPath":".spec.replicas"}"#,
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".spec.labelSelector"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaTemplateSpec {
    /// Desired replicas of the mirroring StatefulSets. Defaults to 1 as in the anchor's CRD:
    /// Mimir's jsonnet leaves it out so that an HPA owns it, and a new template must then
    /// read as one replica, not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Label selector string of the pods, as an HPA needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ReplicaTemplateStatus {
    /// Replicas of the StatefulSets, written back by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// Every CRD this crate owns, with the file name `make crds` writes it to.
pub fn crds() -> Vec<(
    &'static str,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
)> {
    use kube::CustomResourceExt;
    vec![
        (
            "zone-aware-pod-disruption-budget.yaml",
            ZoneAwarePodDisruptionBudget::crd(),
        ),
        ("replica-templates.yaml", ReplicaTemplate::crd()),
    ]
}
