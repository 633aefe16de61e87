//! What wakes a layer: a change its owner made, a change of a layer it depends on (or, while
//! it is being deleted, of one depending on it), a change of a source it reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use core_k8s::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef as LayerKey;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::crd::{AddonsLayer, AddonsLayerStatus};
use crate::keys::SOURCE_LABEL;
use crate::lock;
use crate::plan::{self, SourceRef};
use crate::source::{CONFIGMAP_KIND, FLUX_KINDS};
use crate::source_cache::SourceCache;

use super::Shared;
use super::index::LayerIndex;

/// A hash of what a layer's owner controls (see [`run`](super::run)): everything but its status.
pub(super) fn layer_intent(layer: &AddonsLayer) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    layer.metadata.generation.hash(&mut hasher);
    layer.labels().hash(&mut hasher);
    layer.annotations().hash(&mut hasher);
    layer.finalizers().hash(&mut hasher);
    layer
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Whether a layer changed in a way its dependents' gates can see: spec, state, deployed
/// revision, version, generations, deletion, or its first blocker. Message-only status
/// updates do not wake dependents: otherwise every status write would ripple down the whole
/// chain (each dependent's message quotes its dependency's), O(n²) reconciles for a chain of n.
///
/// `seen` keeps, per layer, a 128-bit fingerprint of those fields rather than their text (a
/// few hundred bytes a layer, the spec included).
pub(super) fn gate_relevant_change(
    changed: &AddonsLayer,
    seen: &Mutex<HashMap<String, (u64, u64)>>,
) -> bool {
    let empty = AddonsLayerStatus::default();
    let status = changed.status.as_ref().unwrap_or(&empty);
    let key = serde_json::json!([
        changed.metadata.generation,
        changed.metadata.deletion_timestamp.is_some(),
        changed.spec,
        status.state,
        status.revision,
        status.version,
        status.observed_generation,
        status.blocked_by.first().map(|b| (&b.name, &b.reason)),
        status
            .inventory
            .iter()
            .filter(|e| e.status != "Current")
            .count(),
    ])
    .to_string();
    let key = core_k8s::hashing::fingerprint128(&key);
    let previous = lock(seen).insert(changed.name_any(), key);
    previous != Some(key) || changed.metadata.deletion_timestamp.is_some()
}

/// The dependents index: a change of `changed` wakes every layer that depends on it, and,
/// while `changed` is being deleted, the layers it depends on (their teardown waits for it).
pub(super) fn wake_on_layer_change(
    changed: &AddonsLayer,
    index: &LayerIndex,
) -> Vec<LayerKey<AddonsLayer>> {
    let mut wake: Vec<LayerKey<AddonsLayer>> = index
        .dependents(&changed.name_any())
        .iter()
        .map(|n| LayerKey::new(n))
        .collect();
    if changed.metadata.deletion_timestamp.is_some() {
        wake.extend(
            plan::dependencies_of(changed)
                .iter()
                .map(|d| LayerKey::new(d)),
        );
    }
    wake
}

/// Where source changes are sent: the layers reading a changed source are reconciled.
#[derive(Clone)]
struct SourceWakeups {
    index: Arc<LayerIndex>,
    tx: mpsc::Sender<LayerKey<AddonsLayer>>,
}

impl SourceWakeups {
    /// Forwards every touched object of a source kind until shutdown.
    async fn forward<K, S>(
        self,
        kind: &'static str,
        events: S,
        shutdown: tokio_util::sync::CancellationToken,
    ) where
        K: Resource,
        S: futures::Stream<Item = std::result::Result<K, watcher::Error>>,
    {
        let forward = events.for_each(|event| {
            let this = self.clone();
            async move {
                let Ok(object) = event else { return };
                let source = SourceRef {
                    kind: kind.into(),
                    namespace: object.meta().namespace.clone().unwrap_or_default(),
                    name: object.meta().name.clone().unwrap_or_default(),
                };
                for layer in this.index.readers(&source) {
                    let _ = this.tx.send(LayerKey::new(&layer)).await;
                }
            }
        });
        tokio::select! {
            () = forward => {}
            () = shutdown.cancelled() => {}
        }
    }
}

pub(super) fn spawn_source_watchers(
    ctx: &Arc<Context>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<LayerKey<AddonsLayer>>,
) {
    let wakeups = SourceWakeups {
        index: shared.index.clone(),
        tx,
    };
    // ConfigMap sources: only labelled ones are watched (watching every ConfigMap of a
    // cluster would cost more than the feature is worth).
    let api: Api<ConfigMap> = Api::all(ctx.client.clone());
    let events = core_k8s::controller::watch_backoff(watcher(
        api,
        watcher::Config::default().labels(SOURCE_LABEL),
    ))
    .touched_objects();
    tokio::spawn(
        wakeups
            .clone()
            .forward(CONFIGMAP_KIND, events, ctx.shutdown.clone()),
    );
    for kind in FLUX_KINDS {
        // Registered before the kind is even resolved: a reconcile at start-up waits for the
        // first list instead of reading with a GET.
        let cache = Arc::new(SourceCache::default());
        shared.reader.cache_sources(kind, cache.clone());
        let ctx = ctx.clone();
        let wakeups = wakeups.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            // Flux may be installed after us: look for the kind until it is served.
            let resolved = loop {
                if let Some(resolved) = shared.reader.resolve_flux_kind(kind).await {
                    break resolved;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(15)) => {}
                    () = ctx.shutdown.cancelled() => return,
                }
            };
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resolved.resource);
            // The watch that wakes a source's readers also keeps what reads need of each
            // source (`SourceCache`), updated before the wake-up is sent: reconciles read
            // sources there, never with a GET (the first list wakes every reader).
            let events = core_k8s::controller::watch_backoff(
                // Listed 50 at a time: a page is held whole while it is read.
                watcher(api, watcher::Config::default().page_size(50)).inspect(move |event| {
                    if let Ok(event) = event {
                        cache.apply(event);
                    }
                }),
            )
            .touched_objects();
            wakeups.forward(kind, events, ctx.shutdown.clone()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::keys::{FINALIZER, RECONCILE_REQUESTED_AT};
    use jiff::Timestamp;
    use serde_json::json;

    fn layer() -> AddonsLayer {
        serde_json::from_value(json!({
            "apiVersion": "strata.dev/v1alpha1",
            "kind": "AddonsLayer",
            "metadata": {"name": "apps", "generation": 3, "labels": {"a": "b"}},
            "spec": {"version": "1.0.0", "source": {"name": "repo", "path": "./apps"}},
            "status": {"state": "Deployed"},
        }))
        .unwrap()
    }

    #[test]
    fn only_what_the_owner_controls_wakes_a_layer() {
        let base = layer_intent(&layer());
        // Our own status writes do not.
        let mut status_only = layer();
        status_only.status = Some(AddonsLayerStatus {
            state: Some("Applying".into()),
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("99".into());
        assert_eq!(layer_intent(&status_only), base);
        // Spec, labels, a reconcile request, finalizers and deletion do.
        let mut changes: Vec<AddonsLayer> = Vec::new();
        let mut spec = layer();
        spec.metadata.generation = Some(4);
        changes.push(spec);
        let mut labels = layer();
        labels.labels_mut().insert("c".into(), "d".into());
        changes.push(labels);
        let mut requested = layer();
        requested
            .annotations_mut()
            .insert(RECONCILE_REQUESTED_AT.into(), "now".into());
        changes.push(requested);
        let mut finalized = layer();
        finalized.finalizers_mut().push(FINALIZER.into());
        changes.push(finalized);
        let mut deleted = layer();
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        changes.push(deleted);
        for changed in &changes {
            assert_ne!(layer_intent(changed), base, "{:?}", changed.metadata);
        }
    }

    #[test]
    fn dependents_wake_on_what_their_gates_see_not_on_messages() {
        let seen = Mutex::default();
        let with = |state: &str, message: &str| {
            let mut this = layer();
            this.status = Some(AddonsLayerStatus {
                state: Some(state.into()),
                blocked_by: vec![crate::crd::Blocker {
                    name: "base".into(),
                    reason: "NotDeployed".into(),
                    message: message.into(),
                }],
                ..Default::default()
            });
            this
        };
        assert!(
            gate_relevant_change(&with("Applying", "a"), &seen),
            "first sight"
        );
        assert!(
            !gate_relevant_change(&with("Applying", "a"), &seen),
            "the same again"
        );
        assert!(
            !gate_relevant_change(&with("Applying", "b"), &seen),
            "a message alone"
        );
        assert!(
            gate_relevant_change(&with("Deployed", "b"), &seen),
            "the state"
        );
        let mut other = with("Deployed", "b");
        other.metadata.name = Some("other".into());
        assert!(
            gate_relevant_change(&other, &seen),
            "another layer's first sight"
        );
        assert!(
            !gate_relevant_change(&with("Deployed", "b"), &seen),
            "kept per layer"
        );
    }
}
