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

#[derive(Clone, Debug)]
pub struct Metrics {
    pub reviews: Family<ReviewLabels, Counter>,
    pub review_duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    pub certificate_expiry: Gauge,
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
        }
    }
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
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
