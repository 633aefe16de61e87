//! The anchor's per-group metrics, same names and labels, so dashboards and alerts built for
//! Grafana's operator keep working.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A rollout group: the anchor's `rollout_group`, and the group's `namespace` when the
/// operator watches more than one namespace (two namespaces may each run an `ingester` group).
/// Watching one namespace, as the anchor always does, there is no namespace label: the
/// anchor's series, unchanged.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct GroupLabels {
    pub rollout_group: String,
    pub namespace: Option<String>,
}

impl EncodeLabelSet for GroupLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("rollout_group", self.rollout_group.as_str()).encode(encoder.encode_label())?;
        if let Some(namespace) = &self.namespace {
            ("namespace", namespace.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    pub group_reconciles: Family<GroupLabels, Counter>,
    pub group_reconciles_failed: Family<GroupLabels, Counter>,
    pub group_reconcile_duration: Family<GroupLabels, Histogram>,
    pub last_successful_group_reconcile:
        Family<GroupLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pods_deleted: Counter,
    /// The anchor's zone-aware budget metrics (`rollout_operator_zpdb_*`), shared with the
    /// webhooks this process serves in compatibility mode.
    pub zpdb: admission_server::metrics::ZpdbMetrics,
    /// Calls to pods (delayed downscale), shared with the webhooks this process serves in
    /// compatibility mode (prepare-downscale).
    pub pod_calls: core_k8s::http_metrics::PodCallMetrics,
    /// ZPDB changes seen: `updated`, `ignored` (generation not newer), `invalid`, `deleted`,
    /// `delete-ignored` (the anchor's labels).
    pub zpdb_configurations_observed: Family<ResultLabels, Counter>,
    /// Objects held in the operator's watch caches, by kind (`Pod`, `StatefulSet`): what its
    /// memory grows with.
    pub cached_objects: Family<KindLabels, Gauge>,
    /// Label group series with their namespace (set when more than one namespace, or every
    /// namespace, is watched).
    pub namespace_label: bool,
}

/// Prometheus' default buckets, which the anchor's group histogram uses: 5 ms to 10 s.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            group_reconciles: Family::default(),
            group_reconciles_failed: Family::default(),
            group_reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(DEFAULT_BUCKETS)
            }),
            last_successful_group_reconcile: Family::default(),
            pods_deleted: Counter::default(),
            zpdb: admission_server::metrics::ZpdbMetrics::register(
                &core_k8s::metrics::metric_prefix(crate::SERVICE),
                registry,
            ),
            pod_calls: core_k8s::http_metrics::PodCallMetrics::register(
                &core_k8s::metrics::metric_prefix(crate::SERVICE),
                registry,
            ),
            zpdb_configurations_observed: Family::default(),
            cached_objects: Family::default(),
            namespace_label: false,
        };
        registry.register(
            "rollout_operator_cached_objects",
            "Objects held in the watch caches, by kind",
            metrics.cached_objects.clone(),
        );
        registry.register(
            "rollout_operator_zpdb_configurations_observed",
            "Zone-aware pod disruption budget configurations observed, by result",
            metrics.zpdb_configurations_observed.clone(),
        );
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

    /// Records how many objects of `kind` the watch cache holds.
    pub fn cached(&self, kind: &'static str, objects: usize) {
        self.cached_objects
            .get_or_create(&KindLabels { kind })
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    pub fn observe_zpdb_configuration(&self, result: &'static str) {
        self.zpdb_configurations_observed
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The labels of `group` in `namespace`; the namespace only when several are watched.
    pub fn labels(&self, group: &str, namespace: &str) -> GroupLabels {
        GroupLabels {
            rollout_group: group.to_string(),
            namespace: self.namespace_label.then(|| namespace.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(namespace_label: bool) -> String {
        let mut registry = Registry::default();
        let mut metrics = Metrics::register(&mut registry);
        metrics.namespace_label = namespace_label;
        metrics
            .group_reconciles
            .get_or_create(&metrics.labels("ingester", "mimir"))
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        text
    }

    /// Watching one namespace, the anchor's series exactly; several, each names its namespace.
    #[test]
    fn group_series_name_their_namespace_only_when_several_are_watched() {
        assert!(
            exposition(false)
                .contains("rollout_operator_group_reconciles_total{rollout_group=\"ingester\"} 1"),
            "{}",
            exposition(false)
        );
        assert!(
            exposition(true).contains(
                "rollout_operator_group_reconciles_total{rollout_group=\"ingester\",namespace=\"mimir\"} 1"
            ),
            "{}",
            exposition(true)
        );
    }
}
