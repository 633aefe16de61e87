//! A new layer's first report, held back while its first attempt settles.
//!
//! A layer that has never had a state gets its first one when its first attempt settles
//! (`Deployed`, `Failed`, …) or `--first-report-grace` (3 s) after it was applied, whichever
//! comes first. Most new layers settle within a second or two of their applies, and the `Applying`
//! report in between was a status write and an Event per layer (and the watch events they
//! caused): in a fleet created at once, about a tenth of what kube-apiserver did for each
//! layer, at a time when it is the bottleneck. Until the first report the layer looks as it did
//! before this controller acted on it: no state, which dependents wait on like any state but
//! `Deployed`, and which `strata wait --strict` judges InProgress (a custom resource whose
//! controller has not written its status yet, see `core_status::policy`); kstatus' own rules
//! call it Current, as they did while its objects were applied. A layer that already has a
//! state is never held back: its status must not claim the previous attempt's verdict while
//! a new one is applied.
//!
//! What the held report carries that others rely on is its inventory, kept here until it is
//! written: the layer's next pass re-checks it instead of applying again, a teardown deletes
//! what it lists, and other layers' ownership checks count it (see `apply`). A process that
//! restarts loses it: the layer, still without a state, is applied again (changing nothing)
//! and held anew, or, deleted meanwhile, torn down from what its source renders (see
//! `prune::teardown`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::crd::{AddonsLayer, InventoryEntry};
use crate::keys::ORPHANED_STATUS;
use crate::lock;
use crate::plan::ObjectRef;

/// An attempt: the revision applied and the layer's generation.
pub(super) type AttemptKey = (String, Option<i64>);

/// A first report not written yet.
#[derive(Clone, Debug)]
pub(super) struct Held {
    /// The layer's uid: a layer deleted and created again under its name is another layer.
    uid: Option<String>,
    /// The attempt whose objects were applied.
    pub(super) attempt: AttemptKey,
    /// What the report would have recorded.
    pub(super) inventory: Vec<InventoryEntry>,
    /// When the first report was first held back.
    since: Instant,
}

/// The held first reports of the layers this process reconciles.
#[derive(Debug)]
pub(super) struct FirstReports {
    /// Longest a new layer goes without a state once its objects are applied.
    grace: Duration,
    held: Mutex<HashMap<String, Held>>,
}

impl FirstReports {
    pub(super) fn new(grace: Duration) -> Self {
        Self {
            grace,
            held: Mutex::default(),
        }
    }

    /// The report held back for `layer`, while the layer has no state of its own.
    pub(super) fn held(&self, layer: &AddonsLayer) -> Option<Held> {
        if has_state(layer) {
            return None;
        }
        let name = layer.metadata.name.as_deref()?;
        lock(&self.held)
            .get(name)
            .filter(|h| h.uid == layer.metadata.uid)
            .cloned()
    }

    /// Holds back the first report of `layer` (no state yet) for `attempt`. Returns how much
    /// longer it may be held, or `None` when it must be written now: the layer has a state,
    /// or the grace has run out since its first report was first held back.
    pub(super) fn hold(
        &self,
        layer: &AddonsLayer,
        attempt: AttemptKey,
        inventory: &[InventoryEntry],
        now: Instant,
    ) -> Option<Duration> {
        if has_state(layer) {
            return None;
        }
        let name = layer.metadata.name.clone()?;
        let mut held = lock(&self.held);
        let since = held
            .get(&name)
            .filter(|h| h.uid == layer.metadata.uid)
            .map_or(now, |h| h.since);
        let left = self
            .grace
            .checked_sub(now.saturating_duration_since(since))?;
        if left.is_zero() {
            return None;
        }
        held.insert(
            name,
            Held {
                uid: layer.metadata.uid.clone(),
                attempt,
                inventory: inventory.to_vec(),
                since,
            },
        );
        Some(left)
    }

    /// Forgets the report of `name`: written, or no longer this process's to write.
    pub(super) fn release(&self, name: &str) {
        lock(&self.held).remove(name);
    }

    /// The layers other than `layer` whose held report lists `object` (not as orphaned),
    /// with the uid each was held for. A report may outlive its layer's first state (written
    /// by another replica, or the layer gone): the caller checks each against its copy.
    pub(super) fn owners(&self, object: &ObjectRef, layer: &str) -> Vec<(String, Option<String>)> {
        lock(&self.held)
            .iter()
            .filter(|(name, held)| {
                name.as_str() != layer
                    && held
                        .inventory
                        .iter()
                        .any(|e| e.status != ORPHANED_STATUS && object.is_entry(e))
            })
            .map(|(name, held)| (name.clone(), held.uid.clone()))
            .collect()
    }

    /// Whether `layer` (its current copy) is still the one whose report was held for `uid`:
    /// the same layer, with no state yet and not being deleted.
    pub(super) fn still_held_by(layer: &AddonsLayer, uid: Option<&str>) -> bool {
        !has_state(layer)
            && layer.metadata.deletion_timestamp.is_none()
            && layer.metadata.uid.as_deref() == uid
    }
}

/// Whether the layer's status has a state (written by this controller, now or before).
fn has_state(layer: &AddonsLayer) -> bool {
    layer.status.as_ref().is_some_and(|s| s.state.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::AddonsLayerStatus;

    fn layer(name: &str, state: Option<&str>) -> AddonsLayer {
        let mut layer = AddonsLayer::new(name, Default::default());
        layer.status = state.map(|s| AddonsLayerStatus {
            state: Some(s.into()),
            ..Default::default()
        });
        layer
    }

    fn entry(kind: &str, namespace: &str, name: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: Some(namespace.into()),
            name: name.into(),
            status: "Current".into(),
            reason: None,
            message: None,
        }
    }

    const GRACE: Duration = Duration::from_secs(3);

    fn attempt(revision: &str) -> AttemptKey {
        (revision.into(), Some(1))
    }

    #[test]
    fn a_new_layer_is_held_back_for_the_grace_counted_from_the_first_hold() {
        let reports = FirstReports::new(GRACE);
        let new = layer("a", None);
        let start = Instant::now();
        let inventory = [entry("Service", "a", "web")];
        assert_eq!(
            reports.hold(&new, attempt("r1"), &inventory, start),
            Some(GRACE)
        );
        let held = reports.held(&new).expect("held");
        assert_eq!(held.attempt, attempt("r1"));
        assert_eq!(held.inventory, inventory.to_vec());
        // A later attempt does not restart the clock: a new layer's first state is never
        // later than the grace after its first apply.
        let later = start + Duration::from_secs(1);
        assert_eq!(
            reports.hold(&new, attempt("r2"), &inventory, later),
            Some(GRACE - Duration::from_secs(1))
        );
        assert_eq!(reports.held(&new).unwrap().attempt, attempt("r2"));
        assert_eq!(
            reports.hold(&new, attempt("r2"), &inventory, start + GRACE),
            None
        );
    }

    #[test]
    fn no_grace_holds_nothing_back() {
        let reports = FirstReports::new(Duration::ZERO);
        let new = layer("a", None);
        assert_eq!(reports.hold(&new, attempt("r1"), &[], Instant::now()), None);
        assert!(reports.held(&new).is_none());
    }

    #[test]
    fn a_layer_created_again_under_the_name_does_not_inherit_the_report() {
        let reports = FirstReports::new(GRACE);
        let mut old = layer("a", None);
        old.metadata.uid = Some("1".into());
        let start = Instant::now();
        let inventory = [entry("Service", "a", "web")];
        reports.hold(&old, attempt("r1"), &inventory, start);
        let mut new = layer("a", None);
        new.metadata.uid = Some("2".into());
        assert!(reports.held(&new).is_none());
        // Its own clock: the whole grace from its own first hold.
        let later = start + GRACE;
        assert_eq!(reports.hold(&new, attempt("r1"), &[], later), Some(GRACE));
    }

    #[test]
    fn orphaned_entries_and_other_layers_copies_do_not_own() {
        let reports = FirstReports::new(GRACE);
        let mut orphaned = entry("Service", "shared", "old");
        orphaned.status = ORPHANED_STATUS.into();
        let mut held = layer("a", None);
        held.metadata.uid = Some("1".into());
        reports.hold(&held, attempt("r1"), &[orphaned.clone()], Instant::now());
        assert!(
            reports
                .owners(&ObjectRef::of_entry(&orphaned), "b")
                .is_empty()
        );
        assert!(FirstReports::still_held_by(&held, Some("1")));
        assert!(!FirstReports::still_held_by(&held, Some("2")));
        assert!(!FirstReports::still_held_by(
            &layer("a", Some("Deployed")),
            None
        ));
        let mut deleting = held.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(!FirstReports::still_held_by(&deleting, Some("1")));
    }

    #[test]
    fn a_layer_with_a_state_is_never_held_back() {
        let reports = FirstReports::new(GRACE);
        let new = layer("a", None);
        reports.hold(&new, attempt("r1"), &[], Instant::now());
        let deployed = layer("a", Some("Deployed"));
        assert!(reports.held(&deployed).is_none());
        assert_eq!(
            reports.hold(&deployed, attempt("r2"), &[], Instant::now()),
            None
        );
    }

    #[test]
    fn a_held_inventory_names_its_layer_as_owner_to_the_others() {
        let reports = FirstReports::new(GRACE);
        let web = entry("Service", "shared", "web");
        reports.hold(
            &layer("a", None),
            attempt("r1"),
            std::slice::from_ref(&web),
            Instant::now(),
        );
        let object = ObjectRef::of_entry(&web);
        assert_eq!(reports.owners(&object, "b"), vec![("a".to_string(), None)]);
        assert!(reports.owners(&object, "a").is_empty());
        let other = ObjectRef::of_entry(&entry("Service", "shared", "api"));
        assert!(reports.owners(&other, "b").is_empty());
        reports.release("a");
        assert!(reports.owners(&object, "b").is_empty());
        assert!(reports.held(&layer("a", None)).is_none());
    }
}
