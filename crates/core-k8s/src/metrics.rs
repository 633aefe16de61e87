//! The metrics every controller exposes, named `<service>_<metric>` (dashes become underscores).
//!
//! Each process owns one prometheus-client `Registry`; subsystems register into it before the
//! admin server starts and keep cheap atomic handles.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set of `<service>_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

/// Label set of `<service>_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

/// The workspace version, and the commit when the build stamped one (`STRATA_COMMIT` at
/// compile time: `scripts/images.sh` and `make dist` set it; a plain `cargo build` says
/// `unknown` rather than rebuilding everything whenever HEAD moves).
pub fn build_labels() -> BuildLabels {
    BuildLabels {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: option_env!("STRATA_COMMIT")
            .filter(|c| !c.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    }
}

/// Reconcile and leadership metrics shared by every service.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    pub reconcile_total: Counter,
    pub reconcile_errors_total: Family<ErrorLabels, Counter>,
    pub reconcile_duration_seconds: Histogram,
    pub leader: Gauge,
}

/// `layer-controller` → `layer_controller`.
pub fn metric_prefix(service: &str) -> String {
    service.replace('-', "_")
}

impl ControllerMetrics {
    pub fn register(service: &str, registry: &mut Registry) -> Self {
        let prefix = metric_prefix(service);
        let metrics = Self {
            reconcile_total: Counter::default(),
            reconcile_errors_total: Family::default(),
            // 1 ms .. ~33 s
            reconcile_duration_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            leader: Gauge::default(),
        };
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            format!("{prefix}_reconcile"),
            "Reconciles run, whatever their outcome",
            metrics.reconcile_total.clone(),
        );
        registry.register(
            format!("{prefix}_reconcile_errors"),
            "Reconciles that failed, by error category",
            metrics.reconcile_errors_total.clone(),
        );
        registry.register(
            format!("{prefix}_reconcile_duration_seconds"),
            "Time spent in one reconcile",
            metrics.reconcile_duration_seconds.clone(),
        );
        registry.register(
            format!("{prefix}_leader"),
            "1 while this replica holds the leader lease, else 0",
            metrics.leader.clone(),
        );
        // Always 1: the labels carry what runs, and every replica exports it, leader or not,
        // so dashboards can join other per-replica series (process_*) on it.
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info.get_or_create(&build_labels()).set(1);
        registry.register(
            format!("{prefix}_build_info"),
            "1, labelled with the version and commit this replica runs",
            build_info,
        );
        registry.register_collector(Box::new(crate::process::ProcessCollector::default()));
        registry.register_collector(Box::new(TraceCounters { prefix }));
        metrics
    }

    pub fn observe_error(&self, category: &str) {
        self.reconcile_errors_total
            .get_or_create(&ErrorLabels {
                category: category.to_string(),
            })
            .inc();
    }
}

/// `<service>_traces_exported_total` and `<service>_traces_dropped_total`, read from the
/// exporter's process-wide counters on each scrape (0 while traces are not exported).
#[derive(Debug)]
struct TraceCounters {
    prefix: String,
}

impl prometheus_client::collector::Collector for TraceCounters {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        use std::sync::atomic::Ordering;
        for (name, help, value) in [
            (
                "traces_exported",
                "Spans the OTLP collector accepted",
                &crate::otlp::SPANS_EXPORTED,
            ),
            (
                "traces_dropped",
                "Spans lost: the export queue was full, or the collector failed or refused them",
                &crate::otlp::SPANS_DROPPED,
            ),
        ] {
            let counter = ConstCounter::new(value.load(Ordering::Relaxed));
            let name = format!("{}_{name}", self.prefix);
            counter.encode(encoder.encode_descriptor(
                &name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Renders the registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// The content type of [`encode`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_service() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register("rollout-operator", &mut registry);
        metrics.reconcile_total.inc();
        metrics.observe_error("conflict");
        metrics.leader.set(1);
        metrics.reconcile_duration_seconds.observe(0.02);
        let text = encode(&registry).unwrap();
        for line in [
            "rollout_operator_reconcile_total 1",
            "rollout_operator_reconcile_errors_total{category=\"conflict\"} 1",
            "rollout_operator_leader 1",
            "rollout_operator_reconcile_duration_seconds_count 1",
            "rollout_operator_build_info{version=\"0.1.0\",commit=\"unknown\"} 1",
            "# TYPE process_cpu_seconds counter",
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_open_fds gauge",
            "# EOF",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
