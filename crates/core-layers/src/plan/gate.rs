//! Whether a layer may apply now: every unmet prerequisite (source, Kubernetes version,
//! dependencies, objects), cycles, and the dependency graph they are read from.

use std::collections::{BTreeMap, BTreeSet};

use core_k8s::labels::LabelSelector;
use core_status::Status;

use crate::crd::{AddonsLayer, Blocker, LayerSet};
use crate::deps::{self, parse_dependency};
use crate::keys::{blocker, condition, state};

use super::{ObjectRef, SourceRef, SourceState, spec_errors};

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
    /// The shard this controller reconciles, when it runs with `--layer-selector`; `None`
    /// when it reconciles every layer (or the caller is not a controller, e.g. the CLI).
    pub shard: Option<ShardScope<'a>>,
}

/// Which layers a sharded controller reconciles, and the label that names their shard.
#[derive(Clone, Copy, Debug)]
pub struct ShardScope<'a> {
    /// The label naming a layer's shard (`sharding.fluxcd.io/key`).
    pub key: &'a str,
    /// The controller's `--layer-selector`.
    pub selector: &'a LabelSelector,
}

impl ShardScope<'_> {
    /// Whether this controller reconciles `layer`.
    pub fn owns(&self, layer: &AddonsLayer) -> bool {
        self.selector.matches(
            layer
                .metadata
                .labels
                .as_ref()
                .unwrap_or(&Default::default()),
        )
    }
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
    /// A dependency is reconciled by another shard: the chain cannot be followed, so the
    /// layer stalls until both are labelled alike. The message names both shards.
    CrossShard {
        message: String,
        blockers: Vec<Blocker>,
    },
    /// Something is missing; `state` is Pending, K8sVersion or ApplyPending.
    Blocked {
        state: &'static str,
        blockers: Vec<Blocker>,
    },
    Proceed,
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

/// The layers that name `dependency` in their `dependsOn`, by name (what `strata layers graph`
/// shows; the controller keeps an index of them instead of walking the fleet per change).
pub fn dependents<'a>(
    dependency: &str,
    layers: impl IntoIterator<Item = &'a AddonsLayer>,
) -> Vec<String> {
    let mut found: Vec<String> = layers
        .into_iter()
        .filter(|layer| dependencies_of(layer).contains(dependency))
        .map(|layer| name(layer).to_string())
        .collect();
    found.sort();
    found
}

/// Adds to `near` every layer its members reach through `dependsOn` that `lookup` finds: all
/// a gate reads (the dependencies, and any cycle through the layer or through them). Called
/// with the layer alone, then again once the dependencies the cache lacks were read, so a
/// reconcile costs what its dependency chain holds, not what the whole fleet holds.
pub fn close_over_dependencies(
    near: &mut LayerSet,
    lookup: impl Fn(&str) -> Option<std::sync::Arc<AddonsLayer>>,
) {
    let mut next: Vec<String> = near
        .values()
        .flat_map(|layer| dependencies_of(layer))
        .collect();
    while let Some(dependency) = next.pop() {
        if near.contains_key(&dependency) {
            continue;
        }
        if let Some(layer) = lookup(&dependency) {
            next.extend(dependencies_of(&layer));
            near.insert(dependency, layer);
        }
    }
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

    if let Some(scope) = inputs.shard
        && let Some(cross) = cross_shard(layer, layers, scope)
    {
        return cross;
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

/// The dependencies of `layer` that exist but are not this controller's (another shard's, or
/// outside its selector): the layer would wait on a chain no controller follows as a whole.
fn cross_shard(layer: &AddonsLayer, layers: &LayerSet, scope: ShardScope<'_>) -> Option<Gate> {
    let own = layer.shard(scope.key);
    let mut messages = Vec::new();
    let mut blockers = Vec::new();
    for (i, entry) in layer.spec.prereqs.depends_on.iter().enumerate() {
        let Ok(dependency) = parse_dependency(entry) else {
            continue;
        };
        let Some(dep) = layers.get(&dependency.layer) else {
            continue;
        };
        if scope.owns(dep) {
            continue;
        }
        let theirs = dep.shard(scope.key);
        let name = &dependency.layer;
        let message = if theirs == own {
            format!(
                "spec.prereqs.dependsOn[{i}]: layer {name} is not selected by this shard's --layer-selector {:?} (both are in shard {own:?}): a dependency chain cannot leave its shard",
                scope.selector.as_str()
            )
        } else {
            format!(
                "spec.prereqs.dependsOn[{i}]: layer {name} is in shard {theirs:?} and this layer in shard {own:?} (label {}): a dependency chain cannot cross shards; give both the same shard",
                scope.key
            )
        };
        blockers.push(Blocker {
            name: name.clone(),
            reason: blocker::OTHER_SHARD.into(),
            message: message.clone(),
        });
        messages.push(message);
    }
    (!blockers.is_empty()).then(|| Gate::CrossShard {
        message: messages.join("; "),
        blockers,
    })
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
                match &e.reason {
                    Some(reason) => format!("{object} is {} ({reason})", e.status),
                    None => format!("{object} is {}", e.status),
                }
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

#[cfg(test)]
mod object_prereq_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::ObjectPrereq;
    use crate::plan::test_support::{crd, layer};

    fn secret() -> ObjectPrereq {
        ObjectPrereq {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "db".into(),
            namespace: Some("shop".into()),
            ready_expr: None,
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
                shard: None,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AddonsLayerSpec, AddonsLayerStatus, InventoryEntry, Prereqs, Source};

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
            shard: None,
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
                message: None,
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
                Gate::CrossShard { .. } => "CrossShard".into(),
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
    fn a_gate_decides_from_its_dependency_chain_as_from_the_whole_fleet() {
        let ready = SourceState::Ready {
            revision: REV.into(),
        };
        let mut on_hold = deployed(layer("held", "1", &[]), REV);
        on_hold.spec.hold = true;
        let fleet = set(vec![
            // A chain, deployed at its base.
            deployed(layer("base", "2.0.0", &[]), REV),
            layer("mid", "1", &["base@>=2.0.0"]),
            layer("top", "1", &["mid", "base"]),
            // A cycle, and a layer hanging off it.
            layer("x", "1", &["y"]),
            layer("y", "1", &["x"]),
            layer("off-cycle", "1", &["y"]),
            // Missing, wrong version, on hold.
            layer("orphan", "1", &["nowhere"]),
            layer("too-new", "1", &["base@>=3.0.0"]),
            layer("waits-on-hold", "1", &["held"]),
            on_hold,
            // Independent, and one whose name starts another's.
            layer("b", "1", &[]),
            layer("ba", "1", &["b"]),
            layer("bab", "1", &["ba"]),
        ]);
        let lookup = |name: &str| fleet.get(name).cloned();
        // (layer, its chain)
        let chains: &[(&str, &[&str])] = &[
            ("base", &["base"]),
            ("top", &["base", "mid", "top"]),
            ("x", &["x", "y"]),
            ("off-cycle", &["off-cycle", "x", "y"]),
            ("orphan", &["orphan"]),
            ("too-new", &["base", "too-new"]),
            ("waits-on-hold", &["held", "waits-on-hold"]),
            ("bab", &["b", "ba", "bab"]),
        ];
        for (name, chain) in chains {
            let mut near = LayerSet::from([(name.to_string(), fleet[*name].clone())]);
            close_over_dependencies(&mut near, lookup);
            assert_eq!(near.keys().collect::<Vec<_>>(), *chain, "chain of {name}");
        }
        for (name, l) in &fleet {
            let mut near = LayerSet::from([(name.clone(), l.clone())]);
            close_over_dependencies(&mut near, lookup);
            assert_eq!(
                gate(l, &near, &inputs(&ready)),
                gate(l, &fleet, &inputs(&ready)),
                "the gate of {name}"
            );
        }
        // A dependency read from the API server (another shard's) brings its own chain from
        // the cache when closed over again.
        let mut near = LayerSet::from([("top".to_string(), fleet["top"].clone())]);
        near.insert("mid".into(), fleet["mid"].clone());
        close_over_dependencies(&mut near, |name: &str| {
            (name != "mid").then(|| fleet.get(name).cloned()).flatten()
        });
        assert_eq!(near.keys().collect::<Vec<_>>(), ["base", "mid", "top"]);
        // Dependents by exact name: `ba` is not a dependent of `b`'s prefix-sharing sibling.
        let all = || fleet.values().map(|l| l.as_ref());
        assert_eq!(dependents("b", all()), ["ba"]);
        assert_eq!(dependents("ba", all()), ["bab"]);
        assert_eq!(dependents("base", all()), ["mid", "too-new", "top"]);
        assert!(dependents("bab", all()).is_empty());
    }

    fn in_shard(mut l: AddonsLayer, shard: &str) -> AddonsLayer {
        l.metadata.labels = Some(BTreeMap::from([(
            crate::keys::SHARD_LABEL.to_string(),
            shard.to_string(),
        )]));
        l
    }

    #[test]
    fn dependency_chains_cannot_cross_shards() {
        #![allow(clippy::unwrap_used)]
        let ready = SourceState::Ready {
            revision: REV.into(),
        };
        let key = crate::keys::SHARD_LABEL;
        let layers = set(vec![
            deployed(in_shard(layer("base-a", "1", &[]), "a"), REV),
            deployed(layer("base-default", "1", &[]), REV),
            in_shard(layer("app-a", "1", &["base-a"]), "a"),
            in_shard(layer("app-a-on-default", "1", &["base-default"]), "a"),
            layer("app-default-on-a", "1", &["base-a", "base-default"]),
            in_shard(layer("app-a-on-missing", "1", &["nowhere"]), "a"),
        ]);
        let shard_a = LabelSelector::parse("sharding.fluxcd.io/key=a").unwrap();
        let default_shard = LabelSelector::parse("!sharding.fluxcd.io/key").unwrap();
        let gate_in = |name: &str, selector: &LabelSelector| {
            let mut inputs = inputs(&ready);
            inputs.shard = Some(ShardScope { key, selector });
            gate(&layers[name], &layers, &inputs)
        };
        // Within one shard: nothing changes.
        assert_eq!(gate_in("app-a", &shard_a), Gate::Proceed);
        // A missing dependency is still only missing (it may be created in this shard).
        assert_eq!(
            reasons(&gate_in("app-a-on-missing", &shard_a)),
            vec![("nowhere".into(), blocker::MISSING.into())]
        );
        // Across shards, either way: stalled, both shards named, each crossing listed.
        let Gate::CrossShard { message, blockers } = gate_in("app-a-on-default", &shard_a) else {
            panic!("app-a-on-default: not stalled");
        };
        assert!(
            message.contains(
                "layer base-default is in shard \"default\" and this layer in shard \"a\""
            ),
            "{message}"
        );
        assert!(message.contains("spec.prereqs.dependsOn[0]"), "{message}");
        assert_eq!(blockers.len(), 1);
        assert_eq!(blockers[0].reason, blocker::OTHER_SHARD);
        let Gate::CrossShard { message, blockers } = gate_in("app-default-on-a", &default_shard)
        else {
            panic!("app-default-on-a: not stalled");
        };
        assert!(
            message.contains("layer base-a is in shard \"a\" and this layer in shard \"default\""),
            "{message}"
        );
        assert_eq!(
            blockers.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
            vec!["base-a"],
            "base-default is in the same shard"
        );
        // An unsharded controller follows every chain.
        assert_eq!(
            gate(&layers["app-a-on-default"], &layers, &inputs(&ready)),
            Gate::Proceed
        );
        // A selector that leaves a same-shard dependency out says so.
        let team = LabelSelector::parse("sharding.fluxcd.io/key=a,team=x").unwrap();
        let mut app = in_shard(layer("app", "1", &["base-a"]), "a");
        app.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "x".into());
        let mut with_app = layers.clone();
        with_app.insert("app".into(), std::sync::Arc::new(app));
        let mut inputs = inputs(&ready);
        inputs.shard = Some(ShardScope {
            key,
            selector: &team,
        });
        let Gate::CrossShard { message, .. } = gate(&with_app["app"], &with_app, &inputs) else {
            panic!("app: not stalled");
        };
        assert!(
            message.contains("not selected by this shard's --layer-selector"),
            "{message}"
        );
    }
}
