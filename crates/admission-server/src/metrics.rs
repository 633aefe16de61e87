//! What the admission server reports besides the shared controller metrics: every review by
//! webhook and outcome, how long deciding took, and when the serving certificate expires (the
//! anchor exports none of the latter; an expired certificate fails every admission call).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::webhooks::Webhook;

/// How a review ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values as Prometheus users write them
pub enum Outcome {
    allowed,
    denied,
    /// The body was not an AdmissionReview (HTTP 400).
    invalid,
    /// Deciding took longer than the handler timeout (denied with code 500).
    timeout,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub webhook: &'static str,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
}

/// How an undo call to a pod prepared for a downscale that did not happen ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UndoLabels {
    /// `answered`, `gone` (nothing left to undo) or `failed` (retried).
    pub result: &'static str,
}

/// How a check of the certificate files ended when they had changed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `reloaded`, or `failed` (the last good certificate still serves).
    pub result: &'static str,
}

#[derive(Clone, Debug)]
pub struct Metrics {
    pub reviews: Family<ReviewLabels, Counter>,
    pub review_duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    pub certificate_expiry: Gauge,
    pub zpdb: ZpdbMetrics,
    /// The calls to pods (prepare-downscale), registered by the caller with `zpdb` (the
    /// rollout-operator's delayed downscale calls pods too).
    pub pod_calls: core_k8s::http_metrics::PodCallMetrics,
    pub failure_policy: Family<PolicyLabels, Gauge>,
    pub prepare_undo: Family<UndoLabels, Counter>,
    pub certificate_reloads: Family<ReloadLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    pub reason: &'static str,
    pub status: String,
}

/// One series per webhook entry and policy: 1 for the entry's policy, 0 for the other.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// `ValidatingWebhook` or `MutatingWebhook`.
    pub r#type: &'static str,
    pub webhook: String,
    pub policy: &'static str,
}

/// The anchor's zone-aware budget metrics, under the service's prefix
/// (`rollout_operator_zpdb_*` in the rollout-operator): the Mimir mixin's ZPDB panels and
/// its bad-configuration and in-flight alerts read them.
#[derive(Clone, Debug, Default)]
pub struct ZpdbMetrics {
    /// Eviction decisions, webhook and rollout alike, by the anchor's reason and status.
    pub eviction_requests: Family<EvictionLabels, Counter>,
    pub inflight_evictions: Gauge,
}

impl ZpdbMetrics {
    pub fn register(prefix: &str, registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            format!("{prefix}_zpdb_eviction_requests"),
            "Pod eviction requests decided against a zone-aware pod disruption budget, by reason and status",
            metrics.eviction_requests.clone(),
        );
        registry.register(
            format!("{prefix}_zpdb_inflight_eviction_requests"),
            "Pod eviction requests being decided",
            metrics.inflight_evictions.clone(),
        );
        metrics
    }

    pub fn observe_eviction(&self, reason: &'static str, status: u16) {
        self.eviction_requests
            .get_or_create(&EvictionLabels {
                reason,
                status: status.to_string(),
            })
            .inc();
    }
}

/// 0.1 ms to about 13 s: a decision from the request alone takes well under a millisecond,
/// prepare-downscale waits for pods (up to `--pod-timeout`), and nothing outlasts the 9 s
/// handler timeout.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reviews: Family::default(),
            review_duration: Family::new_with_constructor(duration_histogram),
            certificate_expiry: Gauge::default(),
            zpdb: ZpdbMetrics::default(),
            pod_calls: core_k8s::http_metrics::PodCallMetrics::default(),
            failure_policy: Family::default(),
            prepare_undo: Family::default(),
            certificate_reloads: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers the server's metrics; `zpdb` and `pod_calls` are registered by the caller
    /// (the rollout-operator counts its own deletions and pod calls in them too).
    pub fn register(
        registry: &mut Registry,
        zpdb: ZpdbMetrics,
        pod_calls: core_k8s::http_metrics::PodCallMetrics,
    ) -> Self {
        let metrics = Self {
            zpdb,
            pod_calls,
            ..Self::default()
        };
        // No prefix: the name kube-state-metrics' custom-resource config gives it, which the
        // anchor's mixin alert on an `Ignore` failure policy queries.
        registry.register(
            "kube_validating_webhook_failure_policy",
            "FailurePolicy setting of Kubernetes ValidatingWebhooks and MutatingWebhooks",
            metrics.failure_policy.clone(),
        );
        registry.register(
            "admission_webhook_reviews",
            "AdmissionReviews the handler answered, by webhook and outcome",
            metrics.reviews.clone(),
        );
        registry.register(
            "admission_webhook_review_duration_seconds",
            "Time from receiving an AdmissionReview to answering it",
            metrics.review_duration.clone(),
        );
        registry.register(
            "admission_webhook_certificate_expiry_timestamp_seconds",
            "Unix time at which the serving certificate expires (0 until one is loaded)",
            metrics.certificate_expiry.clone(),
        );
        registry.register(
            "admission_webhook_prepare_downscale_undo",
            "Undo calls to pods prepared for a downscale that did not happen, by result (answered, gone, failed and retried)",
            metrics.prepare_undo.clone(),
        );
        registry.register(
            "admission_webhook_certificate_reloads",
            "Changes of the certificate files (--tls-cert-file) loaded, or refused with the last good certificate still serving, by result",
            metrics.certificate_reloads.clone(),
        );
        // Every result at 0 from the start, so rate() and the panels have a series to show.
        for result in ["answered", "gone", "failed"] {
            let _ = metrics.prepare_undo.get_or_create(&UndoLabels { result });
        }
        for result in ["reloaded", "failed"] {
            let _ = metrics
                .certificate_reloads
                .get_or_create(&ReloadLabels { result });
        }
        metrics
    }

    pub fn observe(&self, webhook: Webhook, outcome: Outcome, seconds: f64) {
        let name = webhook.name();
        self.reviews
            .get_or_create(&ReviewLabels {
                webhook: name,
                outcome,
            })
            .inc();
        self.review_duration
            .get_or_create(&WebhookLabels { webhook: name })
            .observe(seconds);
    }
}
