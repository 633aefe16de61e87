//! Layer metrics (`layer_controller_*`), on top of the shared reconcile metrics. Labels stay
//! bounded: one series per (layer, state), no per-object labels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::keys::state;
use crate::lock;

/// `layer_controller_layer_state`: per layer, one series for each of [`state::ALL`], 1 for the
/// state it is in and 0 for the others. Kept as the state's index per layer and written out
/// at each scrape: a `Family` of gauges held twelve labelled series per layer, ~2 KB each
/// layer (20 MB at 10,000 layers) for what is one byte.
#[derive(Debug, Default)]
pub struct LayerStates(Mutex<HashMap<Box<str>, u8>>);

impl LayerStates {
    const NAME: &str = "layer_controller_layer_state";
    const HELP: &str = "1 for the state each AddonsLayer is in";

    fn set(&self, layer: &str, current: &str) {
        // A state outside the list (none today) shows as 0 in every series.
        let index = state::ALL
            .iter()
            .position(|s| *s == current)
            .map_or(u8::MAX, |i| i as u8);
        let mut states = lock(&self.0);
        match states.get_mut(layer) {
            Some(known) => *known = index,
            None => {
                states.insert(layer.into(), index);
            }
        }
    }

    fn forget(&self, layer: &str) {
        lock(&self.0).remove(layer);
    }
}

impl Collector for LayerStates {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(Self::NAME, Self::HELP, None, MetricType::Gauge)?;
        for (layer, current) in lock(&self.0).iter() {
            for (i, s) in state::ALL.iter().enumerate() {
                let labels = [("layer", &**layer), ("state", *s)];
                let value = i64::from(usize::from(*current) == i);
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerLabels {
    pub layer: String,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    /// 1 for the layer's current state, 0 for the others (Kraan's `reconcile_condition`,
    /// with the labels in the right order).
    pub layer_state: Arc<LayerStates>,
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
            layer_state: Arc::default(),
            applied_objects: Family::default(),
            unchanged_objects: Family::default(),
            pruned_objects: Family::default(),
            dependency_wait_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 18))
            }),
            rollout_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 16)),
        };
        registry.register_collector(Box::new(metrics.layer_state.clone()));
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
        self.layer_state.set(layer, current);
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
        self.layer_state.forget(layer);
        let labels = LayerLabels {
            layer: layer.to_string(),
        };
        self.applied_objects.remove(&labels);
        self.unchanged_objects.remove(&labels);
        self.pruned_objects.remove(&labels);
        self.dependency_wait_seconds.remove(&labels);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scrape(registry: &Registry) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("layer_controller_layer_state"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn the_state_gauge_is_one_hot_per_layer_and_a_forgotten_layer_leaves() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.set_state("web", state::APPLYING);
        metrics.set_state("db", state::FAILED);
        metrics.set_state("web", state::DEPLOYED);
        let lines = scrape(&registry);
        assert_eq!(lines.len(), 2 * state::ALL.len(), "{lines:#?}");
        let ones: Vec<&String> = lines.iter().filter(|l| l.ends_with(" 1")).collect();
        assert_eq!(
            ones,
            [
                r#"layer_controller_layer_state{layer="db",state="Failed"} 1"#,
                r#"layer_controller_layer_state{layer="web",state="Deployed"} 1"#,
            ],
        );
        assert!(lines.contains(
            &r#"layer_controller_layer_state{layer="web",state="Applying"} 0"#.to_string()
        ));
        let text = {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        assert!(
            text.contains("# TYPE layer_controller_layer_state gauge"),
            "{text}"
        );
        metrics.forget("web");
        let lines = scrape(&registry);
        assert_eq!(lines.len(), state::ALL.len(), "{lines:#?}");
        assert!(lines.iter().all(|l| l.contains(r#"layer="db""#)));
    }
}
