//! The pure decisions of the layer-controller: whether a layer may apply now (every blocker,
//! not just the first), cycles, apply stages and order, ownership conflicts, prune and
//! hand-over, readiness with a freshness guard, and the conditions that describe the result.
//! No I/O: the reconcile shell and `strata layers plan|graph` feed it what they read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use core_status::Status;
use jiff::Timestamp;
use serde_json::Value;

use crate::crd::{AddonsLayer, Blocker, Condition, InventoryEntry, LayerSet};
use crate::deps::{self, parse_dependency};
use crate::keys::{blocker, condition, state};
pub use core_layers::manifest::prepare_manifest;
pub use core_layers::objects::{ObjectRef, SOURCE_KINDS, SourceRef, SourceState};

/// How often a layer is re-checked without a change (`spec.interval` default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How long applying may take before the layer is Failed (`spec.timeout` default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Deployed revisions kept in `status.history`.
pub const HISTORY_LIMIT: usize = 10;

/// Everything outside the layer set that gates a layer.
#[derive(Clone, Debug)]
pub struct GateInputs<'a> {
    pub source: &'a SourceState,
    /// `/version` of the API server; `None` when it could not be read.
    pub cluster_version: Option<&'a str>,
    pub default_source_namespace: &'a str,
    /// What the cluster says about each of `spec.prereqs.objects`, in order: `None` when the
    /// object (or its kind) does not exist, else its status and message.
    pub objects: &'a [Option<(Status, String)>],
}

/// Whether a layer may apply now.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// `spec.hold`: touch nothing.
    Hold,
    /// The spec itself is wrong; the message names the field.
    Invalid(String),
    /// The layer is part of a dependency cycle (printed `a -> b -> a`).
    Cycle(Vec<String>),
    /// Something is missing; `state` is Pending, K8sVersion or ApplyPending.
    Blocked {
        state: &'static str,
        blockers: Vec<Blocker>,
    },
    Proceed,
}

/// The first `shown` items joined with `separator`, then `(and N more)`: messages stay
/// short however many objects are involved.
pub fn summarize(items: &[String], shown: usize, separator: &str) -> String {
    let mut text = items
        .iter()
        .take(shown)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(separator);
    let more = items.len().saturating_sub(shown);
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}

/// [`timing`], with the defaults when the spec is invalid (the gate reports that error).
/// Kraan's kind string for HelmReleases in `status.resources`.
pub const KRAAN_HELMRELEASE_KIND: &str = "helmreleases.helm.toolkit.fluxcd.io";

/// Kraan's `status.resources`: one entry per HelmRelease of the inventory, sorted by
/// namespace and name; `lastTransitionTime` kept while an entry's status holds.
pub fn kraan_resources(
    inventory: &[crate::crd::InventoryEntry],
    previous: &[crate::crd::ResourceStatus],
    now: Timestamp,
) -> Vec<crate::crd::ResourceStatus> {
    let now_text = core_status::augment::format_time(now);
    let mut out: Vec<crate::crd::ResourceStatus> = inventory
        .iter()
        .filter(|e| {
            e.kind == "HelmRelease"
                && core_status::object::api_group(&e.api_version) == "helm.toolkit.fluxcd.io"
        })
        .map(|e| {
            let namespace = e.namespace.clone().unwrap_or_default();
            let status = match (e.status.as_str(), e.reason.as_deref()) {
                ("Current", _) => "Deployed".to_string(),
                (_, Some(reason)) if !reason.is_empty() => reason.to_string(),
                _ => "NotDeployed".to_string(),
            };
            let last_transition_time = previous
                .iter()
                .find(|p| p.namespace == namespace && p.name == e.name && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now_text.clone());
            crate::crd::ResourceStatus {
                kind: KRAAN_HELMRELEASE_KIND.into(),
                namespace,
                name: e.name.clone(),
                status,
                last_transition_time,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// An applied object's inventory health: its status and, while it is not Current, the reason
/// of its `Ready` condition.
pub fn inventory_health(object: &Value, now: Timestamp) -> (Status, Option<String>) {
    let (status, _) = object_status(object, now);
    let reason = (status != Status::Current)
        .then(|| ready_reason(object))
        .flatten();
    (status, reason)
}

/// The reason of an object's `Ready` condition, when it has one that is not True.
pub fn ready_reason(object: &Value) -> Option<String> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
        .and_then(|c| c.get("reason")?.as_str().map(str::to_string))
}

/// How often a layer is re-applied: its interval, but at least every `sync_period` (Kraan
/// reprocesses every layer each `syncPeriod`, whatever its interval).
pub fn effective_interval(layer_interval: Duration, sync_period: Duration) -> Duration {
    if sync_period.is_zero() {
        layer_interval
    } else {
        layer_interval.min(sync_period)
    }
}

/// How long an object that left a layer waits, orphaned, for another layer to adopt it: the
/// `--orphan-grace` flag when given, else the interval of the layer it left (Kraan).
pub fn orphan_grace(flag: Option<Duration>, layer_interval: Duration) -> Duration {
    flag.unwrap_or(layer_interval)
}

pub fn timing_or_default(layer: &AddonsLayer) -> (Duration, Duration) {
    timing(layer).unwrap_or((DEFAULT_INTERVAL, DEFAULT_TIMEOUT))
}

/// Parsed `spec.interval` and `spec.timeout` (defaults applied).
pub fn timing(layer: &AddonsLayer) -> Result<(Duration, Duration), String> {
    let parse = |field: &str, value: &Option<String>, default: Duration| match value {
        None => Ok(default),
        Some(text) => core_k8s::args::parse_duration(text)
            .map_err(|_| format!("spec.{field}: {text:?} is not a duration like 30s, 5m or 1h"))
            .and_then(|d| {
                if d.is_zero() {
                    Err(format!("spec.{field} must be greater than zero"))
                } else {
                    Ok(d)
                }
            }),
    };
    Ok((
        parse("interval", &layer.spec.interval, DEFAULT_INTERVAL)?,
        parse("timeout", &layer.spec.timeout, DEFAULT_TIMEOUT)?,
    ))
}

/// Problems in the spec that no retry can fix, naming the field.
pub fn spec_errors(layer: &AddonsLayer) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, entry) in layer.spec.prereqs.depends_on.iter().enumerate() {
        match parse_dependency(entry) {
            Ok(dep) if dep.layer == layer.metadata.name.as_deref().unwrap_or_default() => errors
                .push(format!(
                    "spec.prereqs.dependsOn[{i}]: a layer cannot depend on itself"
                )),
            Ok(_) => {}
            Err(e) => errors.push(format!("spec.prereqs.dependsOn[{i}]: {e}")),
        }
    }
    if let Some(want) = &layer.spec.prereqs.k8s_version
        && !want.is_empty()
        && deps::Version::parse(want).is_none()
    {
        errors.push(format!(
            "spec.prereqs.k8sVersion: {want:?} is not a version like v1.29 or 1.30.2"
        ));
    }
    if let Err(e) = timing(layer) {
        errors.push(e);
    }
    for (i, object) in layer.spec.prereqs.objects.iter().enumerate() {
        for (field, value) in [
            ("apiVersion", &object.api_version),
            ("kind", &object.kind),
            ("name", &object.name),
        ] {
            if value.trim().is_empty() {
                errors.push(format!(
                    "spec.prereqs.objects[{i}].{field}: must not be empty"
                ));
            }
        }
        if core_k8s::apply::parse_api_version(&object.api_version).is_none()
            && !object.api_version.trim().is_empty()
        {
            errors.push(format!(
                "spec.prereqs.objects[{i}].apiVersion: {:?} is not GROUP/VERSION or VERSION",
                object.api_version
            ));
        }
    }
    if let Some(post_build) = &layer.spec.post_build {
        for key in post_build.substitute.keys() {
            if !core_layers::substitute::valid_name(key) {
                errors.push(format!(
                    "spec.postBuild.substitute: variable name {key:?} is invalid: names match [_A-Za-z][_A-Za-z0-9]*"
                ));
            }
        }
        for (i, reference) in post_build.substitute_from.iter().enumerate() {
            if !matches!(reference.kind.as_str(), "ConfigMap" | "Secret") {
                errors.push(format!(
                    "spec.postBuild.substituteFrom[{i}].kind: {:?} is not ConfigMap or Secret",
                    reference.kind
                ));
            }
            if reference.name.trim().is_empty() {
                errors.push(format!(
                    "spec.postBuild.substituteFrom[{i}].name: must not be empty"
                ));
            }
        }
    }
    if let Some(kind) = layer.spec.source.kind.as_deref().filter(|k| !k.is_empty())
        && core_layers::objects::source_kind(kind).is_none()
    {
        errors.push(format!(
            "spec.source.kind: {kind:?} is not one of {} (or their plural.group form, e.g. gitrepositories.source.toolkit.fluxcd.io)",
            SOURCE_KINDS.join(", ")
        ));
    }
    let path = &layer.spec.source.path;
    if !path.starts_with("./") || path.split('/').any(|part| part == "..") {
        errors.push(format!(
            "spec.source.path: {path:?} must start with ./ and stay inside the source"
        ));
    }
    errors
}

fn name(layer: &AddonsLayer) -> &str {
    layer.metadata.name.as_deref().unwrap_or_default()
}

/// `layer → the layers it depends on` (unparsable entries are left out; they are reported
/// by [`spec_errors`] on their own layer).
pub fn dependency_graph<'a>(
    layers: impl IntoIterator<Item = &'a AddonsLayer>,
) -> BTreeMap<String, BTreeSet<String>> {
    layers
        .into_iter()
        .map(|layer| (name(layer).to_string(), dependencies_of(layer)))
        .collect()
}

/// The layers `layer` depends on (unparsable entries left out, as in [`dependency_graph`]).
pub fn dependencies_of(layer: &AddonsLayer) -> BTreeSet<String> {
    layer
        .spec
        .prereqs
        .depends_on
        .iter()
        .filter_map(|entry| parse_dependency(entry).ok())
        .map(|d| d.layer)
        .collect()
}

/// The layers that name `dependency` in their `dependsOn` (the wake-up index).
pub fn dependents<'a>(
    dependency: &str,
    layers: impl IntoIterator<Item = &'a AddonsLayer>,
) -> Vec<String> {
    dependency_graph(layers)
        .into_iter()
        .filter(|(_, deps)| deps.contains(dependency))
        .map(|(name, _)| name)
        .collect()
}

/// Decides whether `layer` may apply, listing every unmet prerequisite.
pub fn gate(layer: &AddonsLayer, layers: &LayerSet, inputs: &GateInputs<'_>) -> Gate {
    if layer.spec.hold {
        return Gate::Hold;
    }
    let errors = spec_errors(layer);
    if !errors.is_empty() {
        return Gate::Invalid(errors.join("; "));
    }
    let graph = dependency_graph(layers.values().map(|l| l.as_ref()));
    if let Some(cycle) = deps::cycle_through(name(layer), &graph) {
        return Gate::Cycle(cycle);
    }

    let mut blockers = Vec::new();
    let mut gate_state = state::APPLY_PENDING;
    let own_source = SourceRef::of(layer, inputs.default_source_namespace);
    let own_revision = match inputs.source {
        SourceState::Ready { revision } => Some(revision.as_str()),
        SourceState::NotReady { message } => {
            blockers.push(Blocker {
                name: own_source.to_string(),
                reason: blocker::SOURCE_NOT_READY.into(),
                message: message.clone(),
            });
            gate_state = state::PENDING;
            None
        }
    };
    if let Some(want) = layer
        .spec
        .prereqs
        .k8s_version
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        let unmet = match inputs.cluster_version {
            Some(have) => match deps::k8s_version_satisfied(want, have) {
                Ok(true) => None,
                Ok(false) => Some(format!("the cluster runs {have}, the layer needs {want}")),
                Err(e) => Some(e),
            },
            None => Some("the API server version could not be read".into()),
        };
        if let Some(message) = unmet {
            blockers.push(Blocker {
                name: "kubernetes".into(),
                reason: blocker::K8S_VERSION.into(),
                message,
            });
            if gate_state == state::APPLY_PENDING {
                gate_state = state::K8S_VERSION;
            }
        }
    }
    for entry in &layer.spec.prereqs.depends_on {
        let Ok(dependency) = parse_dependency(entry) else {
            continue;
        };
        if let Some(b) = dependency_blocker(
            entry,
            &dependency,
            layers,
            &graph,
            &own_source,
            own_revision,
            inputs,
        ) {
            blockers.push(b);
        }
    }
    for (i, wanted) in layer.spec.prereqs.objects.iter().enumerate() {
        let unmet = match inputs.objects.get(i) {
            None | Some(None) => Some((blocker::MISSING, format!("{wanted} does not exist"))),
            Some(Some((Status::Current, _))) => None,
            Some(Some((status, message))) => Some((
                blocker::UNHEALTHY,
                format!("{wanted} is {status}: {message}"),
            )),
        };
        if let Some((reason, message)) = unmet {
            blockers.push(Blocker {
                name: wanted.to_string(),
                reason: reason.into(),
                message,
            });
        }
    }
    if blockers.is_empty() {
        Gate::Proceed
    } else {
        Gate::Blocked {
            state: gate_state,
            blockers,
        }
    }
}

fn dependency_blocker(
    entry: &str,
    dependency: &deps::Dependency,
    layers: &LayerSet,
    graph: &BTreeMap<String, BTreeSet<String>>,
    own_source: &SourceRef,
    own_revision: Option<&str>,
    inputs: &GateInputs<'_>,
) -> Option<Blocker> {
    let dep_name = &dependency.layer;
    let found = |reason: &str, message: String| {
        Some(Blocker {
            name: dep_name.clone(),
            reason: reason.into(),
            message,
        })
    };
    let Some(dep) = layers.get(dep_name) else {
        return found(blocker::MISSING, format!("layer {dep_name} does not exist"));
    };
    if dep.metadata.deletion_timestamp.is_some() {
        return found(
            blocker::MISSING,
            format!("layer {dep_name} is being deleted"),
        );
    }
    if !dependency.accepts(&dep.spec.version) {
        return found(
            blocker::WRONG_VERSION,
            format!(
                "layer {dep_name} is version {}, {entry:?} is required",
                dep.spec.version
            ),
        );
    }
    if dep.spec.hold {
        return found(blocker::ON_HOLD, format!("layer {dep_name} is on hold"));
    }
    if let Some(cycle) = deps::cycle_through(dep_name, graph) {
        return found(
            blocker::CYCLE,
            format!(
                "layer {dep_name} is in a dependency cycle: {}",
                cycle.join(" -> ")
            ),
        );
    }
    let status = dep.status.clone().unwrap_or_default();
    let dep_state = status.state.as_deref().unwrap_or("");
    let observed = status.observed_generation == dep.metadata.generation
        && status.version.as_deref() == Some(dep.spec.version.as_str());
    if dep_state == state::FAILED {
        let unhealthy: Vec<String> = status
            .inventory
            .iter()
            .filter(|e| e.status != Status::Current.to_string())
            .take(3)
            .map(|e| {
                let object = ObjectRef::of_entry(e);
                format!("{object} is {}", e.status)
            })
            .collect();
        let failed_message = status
            .conditions
            .iter()
            .find(|c| c.type_ == condition::READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        if !unhealthy.is_empty() {
            return found(
                blocker::UNHEALTHY,
                format!("layer {dep_name} failed: {}", unhealthy.join(", ")),
            );
        }
        return found(
            blocker::NOT_DEPLOYED,
            format!("layer {dep_name} failed: {failed_message}"),
        );
    }
    if dep_state != state::DEPLOYED || !observed {
        let why = status
            .blocked_by
            .first()
            .map(|b| format!(", waiting for {} ({}: {})", b.name, b.reason, b.message))
            .unwrap_or_default();
        let shown = if dep_state.is_empty() {
            "not reconciled yet".to_string()
        } else if !observed {
            format!("{dep_state} at an older generation or version")
        } else {
            dep_state.to_string()
        };
        return found(
            blocker::NOT_DEPLOYED,
            format!("layer {dep_name} is {shown}{why}"),
        );
    }
    // Same source, same revision: a new commit rolls out dependency-first (Flux's rule).
    if SourceRef::of(dep, inputs.default_source_namespace) == *own_source
        && let Some(revision) = own_revision
        && status.revision.as_deref() != Some(revision)
    {
        return found(
            blocker::NOT_DEPLOYED,
            format!(
                "layer {dep_name} has not deployed revision {revision} of the shared source yet (deployed: {})",
                status.revision.as_deref().unwrap_or("none")
            ),
        );
    }
    None
}

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

/// Objects this layer wants that another layer owns and still wants: `(object, owner)`.
/// `owners` maps objects to the layer whose inventory holds them; `wanted_by` maps objects to
/// every layer whose current source content contains them.
pub fn ownership_conflicts(
    this: &str,
    desired: &[ObjectRef],
    owners: &BTreeMap<ObjectRef, String>,
    wanted_by: &BTreeMap<ObjectRef, BTreeSet<String>>,
) -> Vec<(ObjectRef, String)> {
    desired
        .iter()
        .filter_map(|object| {
            let owner = owners.get(object)?;
            let still_wanted = wanted_by.get(object).is_some_and(|w| w.contains(owner));
            (owner != this && still_wanted).then(|| (object.clone(), owner.clone()))
        })
        .collect()
}

/// What the live cluster says about an object the layer no longer wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleObject {
    pub object: ObjectRef,
    pub stage: Stage,
    /// `None`: already gone.
    pub live: Option<LiveOwnership>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveOwnership {
    /// `strata.dev/layer` on the live object.
    pub layer: Option<String>,
    /// When the object was labelled orphaned, if it was.
    pub orphaned_at: Option<Timestamp>,
}

/// What to do with the objects that left a layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrunePlan {
    /// Wanted by another layer: left in place for it (no delete, same uid).
    pub hand_over: Vec<(ObjectRef, String)>,
    /// Gone already, or relabelled by another layer: dropped from the inventory.
    pub forget: Vec<ObjectRef>,
    /// Label as orphaned now; deleted when the grace window ends.
    pub orphan: Vec<ObjectRef>,
    /// Grace window still running: check again after the shortest wait.
    pub waiting: Vec<(ObjectRef, Duration)>,
    /// Delete now, in this order (reverse apply order).
    pub delete: Vec<ObjectRef>,
}

impl PrunePlan {
    /// Objects that stay in the inventory until a later pass.
    pub fn pending(&self) -> impl Iterator<Item = &ObjectRef> {
        self.orphan
            .iter()
            .chain(self.waiting.iter().map(|(o, _)| o))
            .chain(self.delete.iter())
    }

    pub fn is_done(&self) -> bool {
        self.orphan.is_empty() && self.waiting.is_empty() && self.delete.is_empty()
    }
}

/// Decides the fate of each stale object of layer `this`. `wanted_by` is the global desired
/// state (every layer's current source content), which is what makes moves safe in either
/// reconcile order: the losing layer never deletes what another layer is about to own.
pub fn prune_plan(
    this: &str,
    stale: &[StaleObject],
    wanted_by: &BTreeMap<ObjectRef, BTreeSet<String>>,
    grace: Duration,
    now: Timestamp,
) -> PrunePlan {
    let mut plan = PrunePlan::default();
    let mut deletes = Vec::new();
    for item in stale {
        let Some(live) = &item.live else {
            plan.forget.push(item.object.clone());
            continue;
        };
        if live.layer.as_deref().is_some_and(|l| l != this) {
            plan.forget.push(item.object.clone());
            continue;
        }
        if let Some(new_owner) = wanted_by
            .get(&item.object)
            .and_then(|w| w.iter().find(|l| *l != this))
        {
            plan.hand_over
                .push((item.object.clone(), new_owner.clone()));
            continue;
        }
        match live.orphaned_at {
            None => plan.orphan.push(item.object.clone()),
            Some(since) => {
                let elapsed = now.duration_since(since).unsigned_abs();
                if elapsed >= grace {
                    deletes.push(apply_key(&item.object, item.stage));
                } else {
                    plan.waiting.push((item.object.clone(), grace - elapsed));
                }
            }
        }
    }
    deletes.sort();
    plan.delete = deletes.into_iter().rev().map(|(_, _, o)| o).collect();
    plan
}

/// Encodes a time as an `orphaned` label value (no colons allowed in label values).
pub fn orphaned_label_value(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H.%M.%SZ").to_string()
}

/// Reads an `orphaned` label value; Kraan's format is accepted too (it is the same).
pub fn parse_orphaned_label(value: &str) -> Option<Timestamp> {
    value.replace('.', ":").parse().ok()
}

/// The status of an applied object, refusing stale readiness: a status written for an older
/// generation than the one just applied is InProgress, and Flux objects with no status yet
/// are InProgress (kstatus would call them Current: kc#387).
pub fn object_status(object: &Value, now: Timestamp) -> (Status, String) {
    use core_status::object::{int_or, lookup, str_or};
    let evaluation = core_status::evaluate(object, now);
    let mut result = (evaluation.status, evaluation.message.to_string());
    if result.0 != Status::Current {
        return result;
    }
    let generation = int_or(object, &["metadata", "generation"], 0);
    let stale_condition = lookup(object, &["status", "conditions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            matches!(
                str_or(c, &["type"], ""),
                condition::READY | condition::RECONCILING | condition::STALLED
            )
        })
        .find_map(|c| {
            let observed = c.get("observedGeneration")?.as_i64()?;
            (observed < generation).then_some(observed)
        });
    if let Some(observed) = stale_condition {
        result = (
            Status::InProgress,
            format!(
                "conditions are from generation {observed}, the applied generation is {generation}"
            ),
        );
    } else if str_or(object, &["apiVersion"], "").contains(".toolkit.fluxcd.io/")
        && lookup(object, &["status"]).is_none_or(|s| s.as_object().is_none_or(|m| m.is_empty()))
    {
        result = (Status::InProgress, "no status reported yet".into());
    }
    result
}

/// How an apply attempt stands after checking every object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Deployed,
    /// Still within the timeout; the message names what is not ready.
    Waiting(String),
    Failed(String),
}

/// Judges the inventory: Failed at once on a Failed object (no point waiting), Failed when
/// the timeout has passed with objects still not Current, else Waiting.
pub fn outcome(inventory: &[InventoryEntry], elapsed: Duration, timeout: Duration) -> Outcome {
    let not_current: Vec<&InventoryEntry> = inventory
        .iter()
        .filter(|e| e.status != Status::Current.to_string())
        .collect();
    if not_current.is_empty() {
        return Outcome::Deployed;
    }
    let describe = |entries: &[&InventoryEntry]| {
        let items: Vec<String> = entries
            .iter()
            .map(|e| format!("{} is {}", ObjectRef::of_entry(e), e.status))
            .collect();
        summarize(&items, 5, ", ")
    };
    let failed: Vec<&InventoryEntry> = not_current
        .iter()
        .copied()
        .filter(|e| e.status == Status::Failed.to_string())
        .collect();
    if !failed.is_empty() {
        return Outcome::Failed(describe(&failed));
    }
    if elapsed >= timeout {
        return Outcome::Failed(format!(
            "not ready after {}s: {}",
            timeout.as_secs(),
            describe(&not_current)
        ));
    }
    Outcome::Waiting(describe(&not_current))
}

/// The conditions for a state: Kraan's single state-named condition (so
/// `kubectl wait --for=condition=Deployed` keeps working) plus the standard Ready,
/// Reconciling and Stalled, with `lastTransitionTime` kept when a condition's status holds.
pub fn conditions(
    layer_state: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
    now: Timestamp,
) -> Vec<Condition> {
    let now_text = core_status::augment::format_time(now);
    let make = |type_: &str, status: bool, reason: &str| {
        let status = if status { "True" } else { "False" };
        let last_transition_time = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now_text.clone());
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            last_transition_time,
            observed_generation: generation,
        }
    };
    let deployed = layer_state == state::DEPLOYED;
    let failed = layer_state == state::FAILED;
    let working = matches!(
        layer_state,
        state::PENDING
            | state::K8S_VERSION
            | state::APPLY_PENDING
            | state::APPLYING
            | state::PRUNING
            | state::DELETING
    );
    let mut out = vec![
        make(layer_state, true, layer_state),
        make(condition::READY, deployed, reason),
    ];
    if working {
        out.push(make(condition::RECONCILING, true, reason));
    }
    if failed {
        out.push(make(condition::STALLED, true, reason));
    }
    out
}

/// When the current state was entered (the state condition's transition time).
pub fn state_since(layer: &AddonsLayer, layer_state: &str) -> Option<Timestamp> {
    let status = layer.status.as_ref()?;
    if status.state.as_deref() != Some(layer_state) {
        return None;
    }
    status
        .conditions
        .iter()
        .find(|c| c.type_ == layer_state)
        .and_then(|c| c.last_transition_time.parse().ok())
}

#[cfg(test)]
mod object_prereq_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::{AddonsLayerSpec, ObjectPrereq, Source};

    fn layer(objects: Vec<ObjectPrereq>) -> AddonsLayer {
        let mut spec = AddonsLayerSpec {
            version: "1".into(),
            source: Source {
                name: "r".into(),
                path: "./x".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        spec.prereqs.objects = objects;
        AddonsLayer::new("apps", spec)
    }

    fn crd() -> ObjectPrereq {
        ObjectPrereq {
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            name: "widgets.example.com".into(),
            namespace: None,
        }
    }

    fn secret() -> ObjectPrereq {
        ObjectPrereq {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "db".into(),
            namespace: Some("shop".into()),
        }
    }

    #[test]
    fn every_unmet_object_blocks_and_is_named() {
        let ready = SourceState::Ready {
            revision: "r1".into(),
        };
        // (case, what the cluster says about each object, expected blockers)
        type Case<'a> = (
            &'a str,
            Vec<Option<(Status, String)>>,
            Vec<(&'a str, &'a str)>,
        );
        let cases: Vec<Case> = vec![
            (
                "both Current",
                vec![
                    Some((Status::Current, String::new())),
                    Some((Status::Current, String::new())),
                ],
                vec![],
            ),
            (
                "CRD missing, Secret Current",
                vec![None, Some((Status::Current, String::new()))],
                vec![(
                    "CustomResourceDefinition widgets.example.com",
                    blocker::MISSING,
                )],
            ),
            (
                "CRD not established, Secret missing: both named",
                vec![Some((Status::InProgress, "not Established".into())), None],
                vec![
                    (
                        "CustomResourceDefinition widgets.example.com",
                        blocker::UNHEALTHY,
                    ),
                    ("Secret shop/db", blocker::MISSING),
                ],
            ),
        ];
        for (case, observed, want) in cases {
            let this = layer(vec![crd(), secret()]);
            let all: LayerSet =
                BTreeMap::from([("apps".to_string(), std::sync::Arc::new(this.clone()))]);
            let inputs = GateInputs {
                source: &ready,
                cluster_version: Some("v1.34.4"),
                default_source_namespace: "ns",
                objects: &observed,
            };
            let got: Vec<(String, String)> = match gate(&this, &all, &inputs) {
                Gate::Proceed => vec![],
                Gate::Blocked { state, blockers } => {
                    assert_eq!(state, state::APPLY_PENDING, "{case}");
                    blockers.into_iter().map(|b| (b.name, b.reason)).collect()
                }
                other => panic!("{case}: {other:?}"),
            };
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(n, r)| (n.to_string(), r.to_string()))
                .collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn object_prereqs_are_validated() {
        let mut bad = crd();
        bad.name = String::new();
        bad.api_version = "a/b/c".into();
        let errors = spec_errors(&layer(vec![bad]));
        assert!(
            errors
                .iter()
                .any(|e| e == "spec.prereqs.objects[0].name: must not be empty"),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.prereqs.objects[0].apiVersion")),
            "{errors:?}"
        );
    }

    #[test]
    fn post_build_is_validated() {
        let mut this = layer(vec![]);
        this.spec.post_build = serde_json::from_value(serde_json::json!({
            "substitute": {"GOOD_1": "x", "1BAD": "y", "also-bad": "z"},
            "substituteFrom": [
                {"kind": "ConfigMap", "name": "vars"},
                {"kind": "Secret", "name": " "},
                {"kind": "Deployment", "name": "x", "optional": true},
            ],
        }))
        .unwrap();
        let errors = spec_errors(&this);
        assert_eq!(
            errors,
            vec![
                "spec.postBuild.substitute: variable name \"1BAD\" is invalid: names match [_A-Za-z][_A-Za-z0-9]*",
                "spec.postBuild.substitute: variable name \"also-bad\" is invalid: names match [_A-Za-z][_A-Za-z0-9]*",
                "spec.postBuild.substituteFrom[1].name: must not be empty",
                "spec.postBuild.substituteFrom[2].kind: \"Deployment\" is not ConfigMap or Secret",
            ]
        );
        this.spec.post_build = serde_json::from_value(serde_json::json!({
            "substitute": {"APP": "x"},
            "substituteFrom": [{"kind": "Secret", "name": "s", "optional": true}],
        }))
        .unwrap();
        assert_eq!(spec_errors(&this), Vec::<String>::new());
    }
}

#[cfg(test)]
mod kraan_resources_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::{InventoryEntry, ResourceStatus};
    use serde_json::json;

    fn entry(
        kind: &str,
        api_version: &str,
        name: &str,
        status: &str,
        reason: Option<&str>,
    ) -> InventoryEntry {
        InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some("base".into()),
            name: name.into(),
            status: status.into(),
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn helmreleases_as_kraan_reports_them() {
        let hr = "helm.toolkit.fluxcd.io/v2";
        let inventory = vec![
            entry("HelmRelease", hr, "zeta", "Current", None),
            entry("HelmRelease", hr, "alpha", "InProgress", Some("TestFailed")),
            entry("HelmRelease", hr, "mid", "InProgress", None),
            entry("ConfigMap", "v1", "settings", "Current", None),
            entry(
                "HelmRelease",
                "example.com/v1",
                "lookalike",
                "Current",
                None,
            ),
        ];
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let t1 = Timestamp::from_second(1_800_000_060).unwrap();
        let first = kraan_resources(&inventory, &[], t0);
        let got: Vec<(&str, &str)> = first
            .iter()
            .map(|r| (r.name.as_str(), r.status.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("alpha", "TestFailed"),
                ("mid", "NotDeployed"),
                ("zeta", "Deployed")
            ]
        );
        assert!(
            first
                .iter()
                .all(|r| r.kind == KRAAN_HELMRELEASE_KIND && r.namespace == "base")
        );
        // A minute later alpha recovered: only its transition time moves.
        let mut later = inventory.clone();
        later[1] = entry("HelmRelease", hr, "alpha", "Current", None);
        let second: Vec<ResourceStatus> = kraan_resources(&later, &first, t1);
        let t0_text = core_status::augment::format_time(t0);
        let t1_text = core_status::augment::format_time(t1);
        assert_eq!(
            (
                second[0].status.as_str(),
                second[0].last_transition_time.as_str()
            ),
            ("Deployed", t1_text.as_str())
        );
        assert_eq!(
            second[2].last_transition_time, t0_text,
            "zeta kept its time"
        );
    }

    #[test]
    fn ready_reasons() {
        for (case, object, want) in [
            (
                "not ready with a reason",
                json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "InstallFailed"}]}}),
                Some("InstallFailed"),
            ),
            (
                "ready",
                json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded"}]}}),
                None,
            ),
            ("no conditions", json!({"status": {}}), None),
        ] {
            assert_eq!(ready_reason(&object).as_deref(), want, "{case}");
        }
    }
}

#[cfg(test)]
mod sync_tests {
    use super::*;

    #[test]
    fn sync_period_and_orphan_grace() {
        let s = Duration::from_secs;
        for (case, interval, sync, want) in [
            ("interval shorter than the sync period", s(10), s(60), s(10)),
            ("sync period bounds a long interval", s(300), s(60), s(60)),
            ("zero sync period: interval alone", s(300), s(0), s(300)),
        ] {
            assert_eq!(effective_interval(interval, sync), want, "{case}");
        }
        for (case, flag, interval, want) in [
            (
                "no flag: the layer's interval, as Kraan",
                None,
                s(60),
                s(60),
            ),
            ("the flag wins", Some(s(2)), s(60), s(2)),
        ] {
            assert_eq!(orphan_grace(flag, interval), want, "{case}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AddonsLayerSpec, AddonsLayerStatus, Prereqs, Source};

    fn layer(name: &str, version: &str, deps: &[&str]) -> AddonsLayer {
        let mut l = AddonsLayer::new(
            name,
            AddonsLayerSpec {
                version: version.into(),
                source: Source {
                    kind: None,
                    name: "repo".into(),
                    namespace: Some("flux".into()),
                    path: format!("./{name}"),
                },
                prereqs: Prereqs {
                    k8s_version: None,
                    depends_on: deps.iter().map(|d| d.to_string()).collect(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        l.metadata.generation = Some(1);
        l
    }

    fn deployed(mut l: AddonsLayer, revision: &str) -> AddonsLayer {
        l.status = Some(AddonsLayerStatus {
            state: Some(state::DEPLOYED.into()),
            revision: Some(revision.into()),
            version: Some(l.spec.version.clone()),
            observed_generation: l.metadata.generation,
            ..Default::default()
        });
        l
    }

    fn set(layers: Vec<AddonsLayer>) -> LayerSet {
        layers
            .into_iter()
            .map(|l| {
                (
                    l.metadata.name.clone().unwrap_or_default(),
                    std::sync::Arc::new(l),
                )
            })
            .collect()
    }

    const REV: &str = "main@sha1:abc";

    fn inputs(source: &SourceState) -> GateInputs<'_> {
        GateInputs {
            source,
            cluster_version: Some("v1.34.4"),
            default_source_namespace: "strata-system",
            objects: &[],
        }
    }

    fn reasons(gate: &Gate) -> Vec<(String, String)> {
        match gate {
            Gate::Blocked { blockers, .. } => blockers
                .iter()
                .map(|b| (b.name.clone(), b.reason.clone()))
                .collect(),
            _ => vec![],
        }
    }

    #[test]
    fn every_blocker_is_listed() {
        let ready = SourceState::Ready {
            revision: REV.into(),
        };
        let mut held = deployed(layer("held", "1.0.0", &[]), REV);
        held.spec.hold = true;
        let mut failing = layer("failing", "1.0.0", &[]);
        failing.status = Some(AddonsLayerStatus {
            state: Some(state::FAILED.into()),
            version: Some("1.0.0".into()),
            observed_generation: Some(1),
            inventory: vec![InventoryEntry {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("infra".into()),
                name: "broken".into(),
                status: "InProgress".into(),
                reason: None,
            }],
            ..Default::default()
        });
        let old_rev = deployed(layer("lagging", "1.0.0", &[]), "main@sha1:old");
        let apps = layer(
            "apps",
            "1.0.0",
            &[
                "nope", "base@>=2", "held", "failing", "lagging", "fresh", "ok@1.0.0",
            ],
        );
        let layers = set(vec![
            apps.clone(),
            deployed(layer("base", "1.5.0", &[]), REV),
            held,
            failing,
            old_rev,
            layer("fresh", "1.0.0", &[]),
            deployed(layer("ok", "1.0.0", &[]), REV),
        ]);
        let gate = gate(&apps, &layers, &inputs(&ready));
        assert_eq!(
            reasons(&gate),
            vec![
                ("nope".into(), blocker::MISSING.into()),
                ("base".into(), blocker::WRONG_VERSION.into()),
                ("held".into(), blocker::ON_HOLD.into()),
                ("failing".into(), blocker::UNHEALTHY.into()),
                ("lagging".into(), blocker::NOT_DEPLOYED.into()),
                ("fresh".into(), blocker::NOT_DEPLOYED.into()),
            ]
        );
        let Gate::Blocked { state: s, blockers } = gate else {
            panic!("blocked expected")
        };
        assert_eq!(s, state::APPLY_PENDING);
        assert!(
            blockers[3]
                .message
                .contains("Deployment infra/broken is InProgress"),
            "{}",
            blockers[3].message
        );
        assert!(blockers[4].message.contains(REV), "{}", blockers[4].message);
    }

    #[test]
    fn gates_in_order() {
        let ready = SourceState::Ready {
            revision: REV.into(),
        };
        let not_ready = SourceState::NotReady {
            message: "artifact not ready".into(),
        };
        let base = deployed(layer("base", "1.2.0", &[]), REV);
        let mut held = layer("apps", "1", &["base"]);
        held.spec.hold = true;
        let mut bad = layer("apps", "1", &["base@>=x"]);
        bad.spec.timeout = Some("soon".into());
        let mut too_new = layer("apps", "1", &["base@^1.1"]);
        too_new.spec.prereqs.k8s_version = Some("v1.35".into());
        let mut vendor = layer("apps", "1", &["base@~1.2"]);
        vendor.spec.prereqs.k8s_version = Some("1.34.4".into());
        let cases: Vec<(&str, AddonsLayer, &SourceState, Option<&str>, &str)> = vec![
            ("hold wins", held, &not_ready, None, "Hold"),
            ("invalid spec", bad, &ready, None, "Invalid"),
            (
                "source not ready",
                layer("apps", "1", &["base"]),
                &not_ready,
                None,
                state::PENDING,
            ),
            ("k8s too old", too_new, &ready, None, state::K8S_VERSION),
            (
                "vendor suffix passes",
                vendor,
                &ready,
                Some("v1.34.4-eks-1a2b"),
                "Proceed",
            ),
            (
                "all met",
                layer("apps", "1", &["base@1.2.0"]),
                &ready,
                None,
                "Proceed",
            ),
        ];
        for (case, apps, source, cluster, want) in cases {
            let layers = set(vec![base.clone(), apps.clone()]);
            let mut i = inputs(source);
            if cluster.is_some() {
                i.cluster_version = cluster;
            }
            let got = match gate(&apps, &layers, &i) {
                Gate::Hold => "Hold".to_string(),
                Gate::Invalid(m) => {
                    if case == "invalid spec" {
                        assert!(m.contains("spec.prereqs.dependsOn[0]"), "{m}");
                        assert!(m.contains("spec.timeout"), "{m}");
                    }
                    "Invalid".into()
                }
                Gate::Cycle(_) => "Cycle".into(),
                Gate::Blocked { state, .. } => state.to_string(),
                Gate::Proceed => "Proceed".into(),
            };
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn cycles_stall_members_only() {
        let ready = SourceState::Ready {
            revision: REV.into(),
        };
        let layers = set(vec![
            layer("a", "1", &["b"]),
            layer("b", "1", &["c"]),
            layer("c", "1", &["a"]),
            layer("d", "1", &["a"]),
            deployed(layer("e", "1", &[]), REV),
            layer("f", "1", &["e"]),
        ]);
        let cycle = gate(&layers["a"], &layers, &inputs(&ready));
        assert_eq!(
            cycle,
            Gate::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        // Depending on a cycle blocks, but is not itself a cycle.
        assert_eq!(
            reasons(&gate(&layers["d"], &layers, &inputs(&ready))),
            vec![("a".into(), blocker::CYCLE.into())]
        );
        assert_eq!(gate(&layers["f"], &layers, &inputs(&ready)), Gate::Proceed);
        assert_eq!(
            dependents("a", layers.values().map(|l| l.as_ref())),
            vec!["c", "d"]
        );
    }

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

    fn cm(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "ConfigMap", Some("ns"), name)
    }

    #[test]
    fn conflicts_only_with_a_layer_that_still_wants_the_object() {
        let owners = BTreeMap::from([
            (cm("shared"), "base".to_string()),
            (cm("moved"), "base".into()),
        ]);
        let wanted_by = BTreeMap::from([
            (
                cm("shared"),
                BTreeSet::from(["base".to_string(), "apps".into()]),
            ),
            (cm("moved"), BTreeSet::from(["apps".to_string()])),
        ]);
        let desired = [cm("shared"), cm("moved"), cm("own")];
        assert_eq!(
            ownership_conflicts("apps", &desired, &owners, &wanted_by),
            vec![(cm("shared"), "base".to_string())]
        );
        assert!(ownership_conflicts("base", &desired, &owners, &wanted_by).is_empty());
    }

    #[test]
    fn prune_hands_over_orphans_waits_and_deletes_in_reverse_order() {
        let now: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let grace = Duration::from_secs(60);
        let ours = |orphaned: Option<&str>| {
            Some(LiveOwnership {
                layer: Some("base".into()),
                orphaned_at: orphaned.map(|t| t.parse().unwrap()),
            })
        };
        let ns = ObjectRef::new("v1", "Namespace", None, "old");
        let stale = vec![
            StaleObject {
                object: cm("gone"),
                stage: Stage::Namespaced,
                live: None,
            },
            StaleObject {
                object: cm("taken"),
                stage: Stage::Namespaced,
                live: Some(LiveOwnership {
                    layer: Some("apps".into()),
                    orphaned_at: None,
                }),
            },
            StaleObject {
                object: cm("moving"),
                stage: Stage::Namespaced,
                live: ours(None),
            },
            StaleObject {
                object: cm("fresh"),
                stage: Stage::Namespaced,
                live: ours(None),
            },
            StaleObject {
                object: cm("young"),
                stage: Stage::Namespaced,
                live: ours(Some("2026-11-21T09:59:30Z")),
            },
            StaleObject {
                object: ns.clone(),
                stage: Stage::Definitions,
                live: ours(Some("2026-11-21T09:00:00Z")),
            },
            StaleObject {
                object: cm("old"),
                stage: Stage::Namespaced,
                live: ours(Some("2026-11-21T09:58:00Z")),
            },
        ];
        let wanted_by = BTreeMap::from([(cm("moving"), BTreeSet::from(["apps".to_string()]))]);
        let plan = prune_plan("base", &stale, &wanted_by, grace, now);
        assert_eq!(plan.forget, vec![cm("gone"), cm("taken")]);
        assert_eq!(plan.hand_over, vec![(cm("moving"), "apps".to_string())]);
        assert_eq!(plan.orphan, vec![cm("fresh")]);
        assert_eq!(plan.waiting, vec![(cm("young"), Duration::from_secs(30))]);
        // Namespaced objects before the Namespace that holds them.
        assert_eq!(plan.delete, vec![cm("old"), ns]);
        assert!(!plan.is_done());
    }

    #[test]
    fn orphaned_label_round_trips() {
        let t: Timestamp = "2026-11-21T10:15:30Z".parse().unwrap();
        assert_eq!(orphaned_label_value(t), "2026-11-21T10.15.30Z");
        assert_eq!(parse_orphaned_label("2026-11-21T10.15.30Z"), Some(t));
        assert_eq!(parse_orphaned_label("yesterday"), None);
    }

    #[test]
    fn stale_readiness_is_refused() {
        let now: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let cases = [
            (
                "condition from an older generation",
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w", "generation": 3},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}}),
                Status::InProgress,
            ),
            (
                "condition from this generation",
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w", "generation": 3},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3}]}}),
                Status::Current,
            ),
            (
                "HelmRelease without status",
                serde_json::json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                    "metadata": {"name": "h", "generation": 1}}),
                Status::InProgress,
            ),
            (
                "ConfigMap",
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
                Status::Current,
            ),
            (
                "Deployment at an older observedGeneration",
                serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "d", "generation": 2},
                    "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "replicas": 1}}),
                Status::InProgress,
            ),
        ];
        for (case, object, want) in cases {
            assert_eq!(object_status(&object, now).0, want, "{case}");
        }
    }

    fn entry(name: &str, status: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            status: status.into(),
            reason: None,
        }
    }

    #[test]
    fn outcomes() {
        let t = Duration::from_secs(60);
        let all_current = [entry("a", "Current")];
        assert_eq!(
            outcome(&all_current, Duration::from_secs(500), t),
            Outcome::Deployed
        );
        let slow = [entry("a", "Current"), entry("b", "InProgress")];
        assert_eq!(
            outcome(&slow, Duration::from_secs(10), t),
            Outcome::Waiting("ConfigMap ns/b is InProgress".into())
        );
        assert_eq!(
            outcome(&slow, Duration::from_secs(60), t),
            Outcome::Failed("not ready after 60s: ConfigMap ns/b is InProgress".into())
        );
        let failed = [entry("b", "InProgress"), entry("c", "Failed")];
        assert_eq!(
            outcome(&failed, Duration::from_secs(1), t),
            Outcome::Failed("ConfigMap ns/c is Failed".into())
        );
    }

    #[test]
    fn conditions_keep_transition_times() {
        let t0: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-11-21T10:05:00Z".parse().unwrap();
        let first = conditions(state::APPLYING, "Progressing", "applying", Some(1), &[], t0);
        let types: Vec<(&str, &str)> = first
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            vec![
                ("Applying", "True"),
                ("Ready", "False"),
                ("Reconciling", "True")
            ]
        );
        let again = conditions(state::APPLYING, "Progressing", "still", Some(1), &first, t1);
        assert_eq!(again[0].last_transition_time, "2026-11-21T10:00:00Z");
        let done = conditions(
            state::DEPLOYED,
            "ReconciliationSucceeded",
            "ok",
            Some(1),
            &again,
            t1,
        );
        assert_eq!(
            done.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            vec!["Deployed", "Ready"]
        );
        assert_eq!(done[1].status, "True");
        assert_eq!(done[1].last_transition_time, "2026-11-21T10:05:00Z");
        let failed = conditions(state::FAILED, "HealthCheckFailed", "x", Some(1), &done, t1);
        assert!(
            failed
                .iter()
                .any(|c| c.type_ == "Stalled" && c.status == "True")
        );
    }
}
