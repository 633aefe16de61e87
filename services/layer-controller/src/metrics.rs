//! Layer metrics (`layer_controller_*`), on top of the shared reconcile metrics. Labels stay
//! bounded: one series per (layer, state), no per-object labels.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::keys::state;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub layer: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerLabels {
    pub layer: String,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    /// 1 for the layer's current state, 0 for the others (Kraan's `reconcile_condition`,
    /// with the labels in the right order).
    pub layer_state: Family<StateLabels, Gauge>,
    pub applied_objects: Family<LayerLabels, Counter>,
    /// Objects a new attempt left unapplied: unchanged since this controller applied them
    /// exactly as the attempt would.
    pub unchanged_objects: Family<LayerLabels, Counter>,
    pub pruned_objects: Family<LayerLabels, Counter>,
    /// From a layer being blocked by its prerequisites to all of them being met, per layer
    /// (one histogram per layer, like the state gauge: bounded by the number of layers).
    pub dependency_wait_seconds: Family<LayerLabels, Histogram, fn() -> Histogram>,
    /// From a new source revision being seen to the layer being Deployed with it.
    pub rollout_seconds: Histogram,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            layer_state: Family::default(),
            applied_objects: Family::default(),
            unchanged_objects: Family::default(),
            pruned_objects: Family::default(),
            dependency_wait_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 18))
            }),
            rollout_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 16)),
        };
        registry.register(
            "layer_controller_layer_state",
            "1 for the state each AddonsLayer is in",
            metrics.layer_state.clone(),
        );
        registry.register(
            "layer_controller_applied_objects",
            "Objects applied with server-side apply",
            metrics.applied_objects.clone(),
        );
        registry.register(
            "layer_controller_unchanged_objects",
            "Objects a new attempt did not apply: unchanged since applied exactly so",
            metrics.unchanged_objects.clone(),
        );
        registry.register(
            "layer_controller_pruned_objects",
            "Objects deleted because they left their layer",
            metrics.pruned_objects.clone(),
        );
        registry.register(
            "layer_controller_dependency_wait_seconds",
            "Time a layer waited for its prerequisites",
            metrics.dependency_wait_seconds.clone(),
        );
        registry.register(
            "layer_controller_rollout_seconds",
            "Time from a layer starting to apply a revision to it being Deployed",
            metrics.rollout_seconds.clone(),
        );
        metrics
    }

    /// Records how long a layer waited for its prerequisites.
    pub fn observe_dependency_wait(&self, layer: &str, seconds: f64) {
        self.dependency_wait_seconds
            .get_or_create(&LayerLabels {
                layer: layer.to_string(),
            })
            .observe(seconds);
    }

    /// Sets the one-hot state gauge of a layer.
    pub fn set_state(&self, layer: &str, current: &str) {
        for s in state::ALL {
            self.layer_state
                .get_or_create(&StateLabels {
                    layer: layer.to_string(),
                    state: s.to_string(),
                })
                .set(i64::from(s == current));
        }
    }

    pub fn count_applied(&self, layer: &str) {
        self.applied_objects
            .get_or_create(&LayerLabels {
                layer: layer.to_string(),
            })
            .inc();
    }

    pub fn count_unchanged(&self, layer: &str) {
        self.unchanged_objects
            .get_or_create(&LayerLabels {
                layer: layer.to_string(),
            })
            .inc();
    }

    pub fn count_pruned(&self, layer: &str, objects: u64) {
        self.pruned_objects
            .get_or_create(&LayerLabels {
                layer: layer.to_string(),
            })
            .inc_by(objects);
    }

    /// Drops the series of a layer this replica no longer reconciles (deleted, or moved to
    /// another shard).
    pub fn forget(&self, layer: &str) {
        for s in state::ALL {
            self.layer_state.remove(&StateLabels {
                layer: layer.to_string(),
                state: s.to_string(),
            });
        }
        let labels = LayerLabels {
            layer: layer.to_string(),
        };
        self.applied_objects.remove(&labels);
        self.unchanged_objects.remove(&labels);
        self.pruned_objects.remove(&labels);
        self.dependency_wait_seconds.remove(&labels);
    }
}
