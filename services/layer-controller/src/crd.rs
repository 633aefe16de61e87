//! The `AddonsLayer` API (`strata.dev/v1alpha1`, cluster-scoped, short name `al`). Field names
//! are Kraan's, so a Kraan user moves by changing the apiVersion; Strata adds version
//! constraints in `dependsOn`, standard conditions, an inventory, every blocker and a history.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the layer's manifests come from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// `GitRepository`, `OCIRepository`, `Bucket` (Flux sources) or `ConfigMap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    /// Namespace of the source; defaults to the controller's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Directory inside the source, starting with `./`.
    #[schemars(regex(pattern = r"^\./"))]
    pub path: String,
}

/// What must hold before the layer is applied.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Prereqs {
    /// Minimum Kubernetes version (`v1.29`, `1.30.2`; vendor suffixes are ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_version: Option<String>,
    /// Layers that must be Deployed first: `name`, `name@1.2.0` (exact, as Kraan), or
    /// `name@>=1.2,<2` (constraints).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

/// An ordered, dependency-aware layer of addons.
#[derive(
    CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq,
)]
#[kube(
    group = "strata.dev",
    version = "v1alpha1",
    kind = "AddonsLayer",
    plural = "addonslayers",
    shortname = "al",
    status = "AddonsLayerStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.name"}"#,
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".spec.source.path"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AddonsLayerSpec {
    /// Free-form version of the layer; dependents refer to it.
    pub version: String,
    pub source: Source,
    #[serde(default)]
    pub prereqs: Prereqs,
    /// Freeze the layer and its objects.
    #[serde(default)]
    pub hold: bool,
    /// How often the layer is checked even without a change (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// How long applying may take before the layer is Failed (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// One applied object and its computed status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// kstatus status: Current, InProgress, Failed, ...
    pub status: String,
}

/// An unmet prerequisite.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// The layer (or object) waited for.
    pub name: String,
    /// Missing, WrongVersion, NotDeployed, Unhealthy, SourceNotReady, OnHold, Cycle, K8sVersion.
    pub reason: String,
    pub message: String,
}

/// A deployed revision.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub revision: String,
    pub version: String,
    pub deployed_at: String,
}

/// A standard condition (metav1.Condition's shape): Ready, Reconciling, Stalled.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AddonsLayerStatus {
    /// Kraan's state names: Pending, K8sVersion, ApplyPending, Applying, Deployed, Failed, Hold,
    /// Pruning; plus Deleting while dependents are torn down first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Source revision of the last apply attempt (deployed or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<Blocker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

/// Every CRD this crate owns, with the file name `make crds` writes it to.
pub fn crds() -> Vec<(
    &'static str,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
)> {
    use kube::CustomResourceExt;
    vec![("addonslayers.yaml", AddonsLayer::crd())]
}
