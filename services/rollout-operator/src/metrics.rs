//! The anchor's per-group metrics, same names and labels, so dashboards and alerts built for
//! Grafana's operator keep working.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub rollout_group: String,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    pub group_reconciles: Family<GroupLabels, Counter>,
    pub group_reconciles_failed: Family<GroupLabels, Counter>,
    pub group_reconcile_duration: Family<GroupLabels, Histogram>,
    pub last_successful_group_reconcile:
        Family<GroupLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pods_deleted: Counter,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            group_reconciles: Family::default(),
            group_reconciles_failed: Family::default(),
            group_reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            last_successful_group_reconcile: Family::default(),
            pods_deleted: Counter::default(),
        };
        registry.register(
            "rollout_operator_group_reconciles",
            "Reconciles of a rollout group",
            metrics.group_reconciles.clone(),
        );
        registry.register(
            "rollout_operator_group_reconciles_failed",
            "Failed reconciles of a rollout group",
            metrics.group_reconciles_failed.clone(),
        );
        registry.register(
            "rollout_operator_group_reconcile_duration_seconds",
            "Time to reconcile a rollout group",
            metrics.group_reconcile_duration.clone(),
        );
        registry.register(
            "rollout_operator_last_successful_group_reconcile_timestamp_seconds",
            "Unix time of the last successful reconcile of a rollout group",
            metrics.last_successful_group_reconcile.clone(),
        );
        registry.register(
            "rollout_operator_pods_deleted",
            "Pods deleted to roll them to the update revision",
            metrics.pods_deleted.clone(),
        );
        metrics
    }

    pub fn labels(group: &str) -> GroupLabels {
        GroupLabels {
            rollout_group: group.to_string(),
        }
    }
}
