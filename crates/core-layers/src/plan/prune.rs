//! Ownership conflicts between layers, and the fate of objects that left a layer: hand-over,
//! orphaning, the grace window and deletion in reverse apply order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::{ObjectRef, Stage, apply_key};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
