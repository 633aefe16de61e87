//! The `AddonsLayer` API (`strata.dev/v1alpha1`, cluster-scoped, short name `al`). Field names
//! are Kraan's, so a Kraan user moves by changing the apiVersion; Strata adds version
//! constraints in `dependsOn`, standard conditions, an inventory, every blocker and a history.

use std::collections::BTreeMap;

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
    /// Objects of any kind that must exist and be Current (kstatus) before the layer is
    /// applied: a CRD Established, a Secret present, a HelmRelease Ready elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectPrereq>,
}

/// An object a layer waits for.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectPrereq {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// For namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A CEL expression that decides when the object is ready, instead of kstatus' Current
    /// (Flux's `dependsOn[].readyExpr`): `dep` is the object, `self` this layer; it must return
    /// a boolean, e.g. `dep.status.phase == 'Active'` or
    /// `dep.data.version == self.spec.version`. An expression that does not compile stalls the
    /// layer naming this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_expr: Option<String>,
}

impl std::fmt::Display for ObjectPrereq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
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
    /// What the drift-observer compares and what it does about drift (read only by the
    /// drift-observer; without it every field the manifests declare is observed and healed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSpec>,
    /// ServiceAccount, in the namespace of the layer's source, that the layer applies, reads
    /// and prunes as (impersonation, like Flux's `serviceAccountName`): the layer can do only
    /// what that account's RBAC allows. Default: the controller's `--default-service-account`
    /// if set, else the controller's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Variables substituted into the manifests before they are applied, with Flux's syntax
    /// and rules (`${NAME}`, `${NAME:=default}`; see `core_layers::substitute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,
    /// How the layer judges the health of what it applied (default: kstatus' rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    /// Keep the manifests of the last deployed revisions, and (with `enabled`) go back to
    /// the last one when an attempt at a new revision or spec fails (see docs/layer-controller.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackSpec>,
}

/// `spec.rollback` of an AddonsLayer. Present, the layer keeps the rendered manifests of its
/// last deployed revisions in a Secret next to the controller (so a new leader can roll back
/// too), and `strata layers rollback` can restore one; `enabled` does it on its own when an
/// attempt fails.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSpec {
    /// Roll back to the last deployed revision when an attempt at a new revision or spec
    /// ends Failed (an apply refused, a Failed object, the health timeout).
    #[serde(default)]
    pub enabled: bool,
    /// How many deployed revisions are kept (default 2, at most 10); their rendered
    /// manifests, compressed, share one Secret of at most 768 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u32>,
}

/// `policy` of `spec.health`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum HealthPolicy {
    /// kstatus' rules exactly (what Flux and Kraan wait on).
    #[default]
    Kstatus,
    /// Stricter: workloads whose pods cannot start fail after `failureGrace`, the built-in
    /// rules for popular CRDs apply, stale conditions and unobserved custom resources are
    /// not ready (docs/core-status.md).
    Strict,
}

/// `spec.health` of an AddonsLayer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<HealthPolicy>,
    /// Health expressions in Flux's `healthCheckExprs` format; they win over the built-in
    /// rules kind by kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exprs: Vec<HealthExpr>,
    /// How long the objects may take to become ready before the layer is Failed (default:
    /// `spec.timeout`, else 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Under `strict`: how long a workload's pod may be unable to start before the layer is
    /// Failed (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_grace: Option<String>,
    /// Conditions on what Prometheus measures, judged once the objects are ready: the layer
    /// is Deployed only when every gate has held for its `for`, and a breach within a gate's
    /// `watch` after that fails it (and rolls it back with `spec.rollback.enabled`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<MetricGate>,
    /// The Prometheus the gates query, instead of the controller's `--prometheus-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusRef>,
}

/// One metric gate (`spec.health.gates[]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MetricGate {
    /// Names the gate in the status, Events and `strata layers why`.
    pub name: String,
    /// A PromQL instant query returning one number: a scalar, or a vector of exactly one
    /// series. No series, or NaN, is no data: the gate is unknown, never passed.
    pub query: String,
    /// What the value must be: `< 0.01`, `<= 5`, `> 0`, `>= 1`, `== 0` or `!= 0`.
    pub condition: String,
    /// How long the condition must hold, once the objects are ready, before the layer is
    /// Deployed (default 0s: one passing reading).
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    /// How long after the layer is Deployed the gate is still watched: a breach then fails
    /// the layer (default 0s: not watched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<String>,
}

/// The Prometheus a layer's gates query (`spec.health.prometheus`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusRef {
    /// Its HTTP API's base URL, e.g. `https://prometheus.monitoring:9090`.
    pub url: String,
    /// A Secret in the namespace of the layer's source, read as the layer acts: `token` (a
    /// bearer token) and `ca.crt` (the CA that signed the server's certificate), each
    /// optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
}

/// One health expression entry, as in a Flux Kustomization's `spec.healthCheckExprs`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HealthExpr {
    pub api_version: String,
    /// Absent: every kind of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub current: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// `spec.postBuild`, as a Flux Kustomization has it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PostBuild {
    /// Variables by name; these win over every `substituteFrom` object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub substitute: BTreeMap<String, String>,
    /// ConfigMaps and Secrets, in the namespace of the layer's source, whose data are
    /// variables; a later one wins over an earlier one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub substitute_from: Vec<SubstituteReference>,
}

/// A ConfigMap or Secret holding variables.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SubstituteReference {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    pub name: String,
    /// A missing object is skipped instead of failing the layer.
    #[serde(default)]
    pub optional: bool,
}

/// `Heal` asks the layer-controller to re-apply at once; `Warn` only reports.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum DriftMode {
    #[default]
    Heal,
    Warn,
}

/// Which objects a rule is about: every field given must match (group `""` is the core group).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Fields to observe on matching objects, by path with merge-key selectors:
/// `spec.template.spec.containers[name=app].image`, `spec.ports[0]`,
/// `metadata.labels["app.kubernetes.io/name"]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObserveRule {
    #[serde(flatten)]
    pub target: ObjectSelector,
    pub paths: Vec<String>,
}

/// Fields never counted as drift on matching objects (RFC 6901 JSON pointers, `~1` for `/`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreRule {
    #[serde(flatten)]
    pub target: ObjectSelector,
    pub json_pointers: Vec<String>,
}

/// When correcting the same field again and again means another writer is fighting us.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FightPolicy {
    /// Corrections of one field within `window` that make a fight (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrections: Option<u32>,
    /// The window, a duration such as `10m` (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// `spec.drift` of an AddonsLayer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DriftSpec {
    /// Heal (default) or Warn; an object's `strata.dev/drift-mode` annotation (Heal, Warn,
    /// Ignore) overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DriftMode>,
    /// Krake's observer schema, as-is: one entry per object (`apiVersion`, `kind`,
    /// `metadata.name`), every observed leaf `null`, every list ending with
    /// `{observer_schema_list_min_length, observer_schema_list_max_length}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "free_form_list")]
    pub observer_schema: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe: Vec<ObserveRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<IgnoreRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fight: Option<FightPolicy>,
}

/// A list of arbitrary objects (Krake schema entries mirror any resource's shape).
fn free_form_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// Conditions are a map keyed by type, so each service owns its own entries under
/// server-side apply (the layer-controller Ready/Reconciling/Stalled, the drift-observer
/// Drifted/FightDetected) instead of replacing each other's whole list.
fn condition_map(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

/// One drifted field of one object (`status.drift[]`, written by the drift-observer).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DriftEntry {
    /// `Kind namespace/name` (or `Kind name` for cluster-scoped objects).
    pub object: String,
    pub api_version: String,
    /// Field path with merge-key selectors; empty when the whole object is missing.
    pub path: String,
    /// What the layer applies (`(masked)` for Secret data, `(absent)` when not set).
    pub expected: String,
    /// What the cluster holds.
    pub actual: String,
    /// The field manager that holds the field now (from `metadata.managedFields`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// When this drift was first seen (RFC 3339).
    pub since: String,
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
    /// Why the object is not Current: the reason its health rule gives (e.g. a workload's
    /// `ImagePullBackOff`), else its `Ready` condition's (a HelmRelease's `InstallFailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The health rule's message while the object is not Current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Kraan's `status.resources[]` entry: one per HelmRelease of the layer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// Always `helmreleases.helm.toolkit.fluxcd.io`, as Kraan writes it.
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
    /// `Deployed` (Ready), `NotDeployed`, or the Ready condition's reason (`InstallFailed`,
    /// `TestFailed`, ...).
    pub status: String,
    pub last_transition_time: String,
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

/// One attempt's outcome: a revision deployed, failed, or restored by a rollback (newest
/// first, bounded).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub revision: String,
    pub version: String,
    /// The layer's generation the attempt was made at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `Deployed`, `Failed` or `RolledBack` (this revision restored after a failed one);
    /// absent in entries written before outcomes were recorded, which were all Deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// When a Deployed or RolledBack revision was deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at: Option<String>,
    /// When a Failed attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
    /// Why a Failed attempt failed, or which revision a RolledBack one replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl HistoryEntry {
    /// The entry's outcome (entries without one were written for deployed revisions).
    pub fn outcome(&self) -> &str {
        self.outcome
            .as_deref()
            .unwrap_or(crate::keys::state::DEPLOYED)
    }

    /// Whether the revision ran healthy: deployed, or restored by a rollback.
    pub fn was_good(&self) -> bool {
        matches!(
            self.outcome(),
            crate::keys::state::DEPLOYED | crate::keys::state::ROLLED_BACK
        )
    }
}

/// A revision kept for rollback (`status.keptRevisions[]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KeptRevision {
    pub revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub version: String,
    /// Objects kept.
    pub objects: u32,
    /// Its share of the Secret: the compressed manifests, in bytes.
    pub bytes: u64,
}

/// How one metric gate stands (`status.gates[]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    pub name: String,
    /// `Holding` (the condition is true), `Breached` (false) or `Unknown` (no data, an error,
    /// Prometheus unreachable).
    pub state: String,
    /// The last value read, as Prometheus wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// When the gate entered this state (RFC 3339): how long it has held, or not.
    pub since: String,
    /// When it was last read.
    pub checked_at: String,
    #[serde(default)]
    pub message: String,
}

/// What the last rollback did (`status.rolledBack`): kept while the layer runs the restored
/// revision, cleared when a new attempt deploys.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RolledBack {
    /// The attempt that failed (or that a requested rollback replaced).
    pub failed_revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_generation: Option<i64>,
    /// The kept revision now applied.
    pub restored_revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_generation: Option<i64>,
    pub restored_version: String,
    /// Why: the failed attempt's reason (`ApplyFailed`, `HealthCheckFailed`) or
    /// `RollbackRequested`.
    pub reason: String,
    #[serde(default)]
    pub message: String,
    pub at: String,
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
    #[schemars(schema_with = "condition_map")]
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
    /// Kraan-compatible: the layer's HelmReleases and how each is doing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,
    /// The last `strata.dev/reconcile-requested-at` value the layer-controller acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// Drifted fields (drift-observer; bounded, the `Drifted` condition gives the totals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<DriftEntry>,
    /// The metric gates (`spec.health.gates`) as last read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateStatus>,
    /// The revisions whose manifests are kept for rollback (`spec.rollback`), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_revisions: Vec<KeptRevision>,
    /// Set while the layer runs a revision restored by a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
    /// The last `strata.dev/rollback-requested-at` value the layer-controller acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_rollback_at: Option<String>,
}

/// Every CRD this crate owns, with the file name `make crds` writes it to.
pub fn crds() -> Vec<(
    &'static str,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
)> {
    use kube::CustomResourceExt;
    vec![("addonslayers.yaml", AddonsLayer::crd())]
}

/// Every layer by name, shared with the cache they were read from: a reconcile looks at the
/// whole set without copying a layer (with a thousand layers reconciling at once, copies of
/// the set were most of the controller's memory).
pub type LayerSet = std::collections::BTreeMap<String, std::sync::Arc<AddonsLayer>>;

impl AddonsLayer {
    /// The shard this layer belongs to: the value of its `key` label (Flux's
    /// `sharding.fluxcd.io/key` by default), else [`crate::keys::DEFAULT_SHARD`].
    pub fn shard<'a>(&'a self, key: &str) -> &'a str {
        self.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .map(String::as_str)
            .filter(|shard| !shard.is_empty())
            .unwrap_or(crate::keys::DEFAULT_SHARD)
    }

    /// Whether the layer carries the shard label `key` at all.
    pub fn is_sharded(&self, key: &str) -> bool {
        self.metadata
            .labels
            .as_ref()
            .is_some_and(|labels| labels.contains_key(key))
    }
}
