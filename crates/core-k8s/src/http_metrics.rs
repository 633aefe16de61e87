//! Metrics of the HTTP servers a service runs (admin and, where there is one, the webhook
//! server) and of its plain-HTTP calls to pods, with the Grafana rollout-operator's names,
//! labels and buckets under the service's prefix: `<prefix>_request_duration_seconds`,
//! `…_request_message_bytes`, `…_response_message_bytes`, `…_inflight_requests`; and, only in
//! the services that call pods ([`PodCallMetrics`]), `…_pod_http_client_request_duration_seconds`
//! and `…_client_invalid_cluster_validation_label_requests_total`.

use std::time::Instant;

use axum::body::HttpBody as _;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api_client::{RequestLabels, dskit_histogram};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub method: String,
    pub route: String,
    pub status_code: String,
    pub ws: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterValidationLabels {
    pub method: String,
    pub protocol: String,
    pub request_cluster: String,
}

/// 4 B to 4 GiB in powers of 4, the anchor's message-size buckets.
fn size_histogram() -> Histogram {
    Histogram::new(exponential_buckets(4.0, 4.0, 15))
}

/// One set for every server of the process, as in the anchor.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    pub request_duration: Family<ServerLabels, Histogram, fn() -> Histogram>,
    pub request_bytes: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub response_bytes: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub inflight: Family<RouteLabels, Gauge>,
}

/// The metrics of a service's calls to pods (prepare-downscale, delayed downscale), registered
/// by the services that make such calls (the rollout-operator and the admission-webhook) and
/// by no other: a service that never calls a pod exports no such series, and its dashboard
/// has no panel for them.
#[derive(Clone, Debug)]
pub struct PodCallMetrics {
    pub request_duration: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// Pod calls a cluster-validating server refused (HTTP 511): the pod belongs to another
    /// cluster than `--cluster-validation-label` says.
    pub invalid_cluster_label: Family<ClusterValidationLabels, Counter>,
}

impl Default for PodCallMetrics {
    fn default() -> Self {
        Self {
            request_duration: Family::new_with_constructor(dskit_histogram),
            invalid_cluster_label: Family::default(),
        }
    }
}

impl PodCallMetrics {
    pub fn register(prefix: &str, registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            format!("{prefix}_pod_http_client_request_duration_seconds"),
            "Time (in seconds) spent waiting for HTTP requests to pods",
            metrics.request_duration.clone(),
        );
        registry.register(
            format!("{prefix}_client_invalid_cluster_validation_label_requests"),
            "Requests to pods rejected because of a cluster validation label mismatch",
            metrics.invalid_cluster_label.clone(),
        );
        metrics
    }

    /// Records one call to a pod; `status` is `None` when no answer came.
    pub fn observe(&self, path: &str, method: &str, status: Option<u16>, seconds: f64) {
        self.request_duration
            .get_or_create(&RequestLabels {
                path: path.to_string(),
                method: method.to_string(),
                status_code: status.map_or_else(|| "error".to_string(), |s| s.to_string()),
            })
            .observe(seconds);
    }
}

impl HttpMetrics {
    pub fn register(prefix: &str, registry: &mut Registry) -> Self {
        let metrics = Self {
            request_duration: Family::new_with_constructor(dskit_histogram),
            request_bytes: Family::new_with_constructor(size_histogram),
            response_bytes: Family::new_with_constructor(size_histogram),
            inflight: Family::default(),
        };
        registry.register(
            format!("{prefix}_request_duration_seconds"),
            "Time (in seconds) spent serving HTTP requests",
            metrics.request_duration.clone(),
        );
        registry.register(
            format!("{prefix}_request_message_bytes"),
            "Size (in bytes) of messages received in the request",
            metrics.request_bytes.clone(),
        );
        registry.register(
            format!("{prefix}_response_message_bytes"),
            "Size (in bytes) of messages sent in response",
            metrics.response_bytes.clone(),
        );
        registry.register(
            format!("{prefix}_inflight_requests"),
            "Current number of inflight requests",
            metrics.inflight.clone(),
        );
        metrics
    }
}

/// The route label of a path template: lower case, every run of other characters than
/// letters and digits one `_`, none at the ends (`/admission/pod-eviction` →
/// `admission_pod_eviction`).
pub fn route_name(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut gap = false;
    for c in template.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.push(c.to_ascii_lowercase());
        } else {
            gap = true;
        }
    }
    out
}

/// axum middleware (`axum::middleware::from_fn_with_state(metrics, track)` as a
/// `Router::layer`): counts, times and sizes every request by method and route; a request
/// no route matched is `other`.
pub async fn track(State(metrics): State<HttpMetrics>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| route_name(p.as_str()))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "other".to_string());
    let method = request.method().to_string();
    let ws = request
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let received = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let labels = RouteLabels { method, route };
    let inflight = metrics.inflight.get_or_create(&labels).clone();
    inflight.inc();
    let started = Instant::now();
    let response = next.run(request).await;
    inflight.dec();
    let sent = response.body().size_hint().exact().unwrap_or(0);
    metrics
        .request_duration
        .get_or_create(&ServerLabels {
            method: labels.method.clone(),
            route: labels.route.clone(),
            status_code: response.status().as_u16().to_string(),
            ws: ws.to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
    metrics
        .request_bytes
        .get_or_create(&labels)
        .observe(received as f64);
    metrics
        .response_bytes
        .get_or_create(&labels)
        .observe(sent as f64);
    response
}

/// `router` with [`track`] on every route.
pub fn instrument(router: axum::Router, metrics: HttpMetrics) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(metrics, track))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tower::ServiceExt as _;

    #[test]
    fn routes_are_named_as_the_anchor_names_them() {
        for (template, want) in [
            ("/admission/pod-eviction", "admission_pod_eviction"),
            ("/admission/zpdb-validation", "admission_zpdb_validation"),
            ("/metrics", "metrics"),
            ("/ready", "ready"),
            ("/debug/pprof/", "debug_pprof"),
            ("/Foo--Bar/{id}", "foo_bar_id"),
            ("/", ""),
        ] {
            assert_eq!(route_name(template), want, "{template}");
        }
    }

    #[tokio::test]
    async fn requests_are_counted_by_route_and_status() {
        let mut registry = Registry::default();
        let metrics = HttpMetrics::register("svc", &mut registry);
        let router = instrument(
            axum::Router::new()
                .route("/admission/no-downscale", post(|| async { "allowed" }))
                .route("/ready", get(|| async { "ok\n" })),
            metrics.clone(),
        );
        for (method, path, body) in [
            ("POST", "/admission/no-downscale", "{}"),
            ("GET", "/ready", ""),
            ("GET", "/nowhere", ""),
        ] {
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-length", body.len())
                .body(axum::body::Body::from(body))
                .unwrap();
            router.clone().oneshot(request).await.unwrap();
        }
        PodCallMetrics::register("svc", &mut registry).observe(
            "/prepare-shutdown",
            "POST",
            None,
            0.2,
        );
        let text = crate::metrics::encode(&registry).unwrap();
        for line in [
            "svc_request_duration_seconds_count{method=\"POST\",route=\"admission_no_downscale\",status_code=\"200\",ws=\"false\"} 1",
            "svc_request_duration_seconds_count{method=\"GET\",route=\"ready\",status_code=\"200\",ws=\"false\"} 1",
            "svc_request_duration_seconds_count{method=\"GET\",route=\"other\",status_code=\"404\",ws=\"false\"} 1",
            "svc_request_duration_seconds_bucket{le=\"100.0\",method=\"GET\",route=\"ready\",status_code=\"200\",ws=\"false\"} 1",
            "svc_request_message_bytes_sum{method=\"POST\",route=\"admission_no_downscale\"} 2.0",
            "svc_response_message_bytes_sum{method=\"GET\",route=\"ready\"} 3.0",
            "svc_inflight_requests{method=\"GET\",route=\"ready\"} 0",
            "svc_pod_http_client_request_duration_seconds_count{path=\"/prepare-shutdown\",method=\"POST\",status_code=\"error\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
