//! Drift metrics (`drift_observer_*`), on top of the shared reconcile metrics. Labels stay
//! bounded: layer and kind, never an object name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerKindLabels {
    pub layer: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerLabels {
    pub layer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    /// `unchanged` (the live object matches the manifest: no API call), `dry_run` (compared
    /// through a server-side apply dry run), `missing` (the object is gone).
    pub outcome: String,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    pub objects_observed: Gauge,
    pub watched_kinds: Gauge,
    pub drifted_objects: Family<LayerLabels, Gauge>,
    pub drift_detected: Family<LayerKindLabels, Counter>,
    pub drift_healed: Family<LayerKindLabels, Counter>,
    pub heal_requests: Family<LayerLabels, Counter>,
    pub fights: Family<LayerKindLabels, Counter>,
    pub checks: Family<CheckLabels, Counter>,
    /// From the watch event that showed a change to the drift being in the layer's status.
    pub detection_seconds: Histogram,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            objects_observed: Gauge::default(),
            watched_kinds: Gauge::default(),
            drifted_objects: Family::default(),
            drift_detected: Family::default(),
            drift_healed: Family::default(),
            heal_requests: Family::default(),
            fights: Family::default(),
            checks: Family::default(),
            // 1 ms .. ~65 s
            detection_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
        };
        registry.register(
            "drift_observer_objects_observed",
            "Objects applied by layers that the observer compares with their manifests",
            metrics.objects_observed.clone(),
        );
        registry.register(
            "drift_observer_watched_kinds",
            "Kinds with a running watch (one shared watch per kind)",
            metrics.watched_kinds.clone(),
        );
        registry.register(
            "drift_observer_drifted_objects",
            "Objects of a layer whose observed fields differ from what the layer applies",
            metrics.drifted_objects.clone(),
        );
        registry.register(
            "drift_observer_drift_detected",
            "Fields found drifted (each new drift once), by layer and kind",
            metrics.drift_detected.clone(),
        );
        registry.register(
            "drift_observer_drift_healed",
            "Drifted objects found clean again after a heal request, by layer and kind",
            metrics.drift_healed.clone(),
        );
        registry.register(
            "drift_observer_heal_requests",
            "Heal requests sent to the layer-controller (reconcile-requested-at annotations)",
            metrics.heal_requests.clone(),
        );
        registry.register(
            "drift_observer_fights",
            "Fields found changed back and forth by another writer, by layer and kind",
            metrics.fights.clone(),
        );
        registry.register(
            "drift_observer_checks",
            "Object checks by outcome (unchanged needs no API call)",
            metrics.checks.clone(),
        );
        registry.register(
            "drift_observer_detection_seconds",
            "From the watch event showing a change to the drift being written to the layer's status",
            metrics.detection_seconds.clone(),
        );
        metrics
    }

    pub fn count_check(&self, outcome: &str) {
        self.checks
            .get_or_create(&CheckLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn layer_kind(layer: &str, kind: &str) -> LayerKindLabels {
        LayerKindLabels {
            layer: layer.to_string(),
            kind: kind.to_string(),
        }
    }

    pub fn layer(layer: &str) -> LayerLabels {
        LayerLabels {
            layer: layer.to_string(),
        }
    }

    /// Removes a deleted layer's series.
    pub fn forget(&self, layer: &str) {
        self.drifted_objects.remove(&Self::layer(layer));
    }
}
