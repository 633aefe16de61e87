//! What every request to the Kubernetes API goes through on its way out: a per-API-group
//! token bucket (`--client-qps`/`--client-burst`), the `X-Cluster` header
//! (`--cluster-validation-label`), and a latency histogram by resource, method and status.
//!
//! The names, labels and buckets are the Grafana rollout-operator's (with the service's
//! prefix), so its dashboards read ours unchanged. As there, the clock starts after the
//! token is granted: time spent throttled is not API latency, and a request given up while
//! waiting for a token is counted in `…_rate_limited_requests_total` and never sent.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// dskit's default buckets, which the anchor's request histograms use: 5 ms to 100 s.
pub const DSKIT_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
];

/// The header a Grafana cluster-validation server checks.
pub const CLUSTER_HEADER: &str = "x-cluster";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub path: String,
    pub method: String,
    pub status_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub api_group: String,
}

/// A histogram on [`DSKIT_BUCKETS`].
pub fn dskit_histogram() -> Histogram {
    Histogram::new(DSKIT_BUCKETS)
}

/// `<prefix>_kubernetes_api_client_*`.
#[derive(Clone, Debug)]
pub struct ApiClientMetrics {
    pub request_duration: Family<RequestLabels, Histogram, fn() -> Histogram>,
    pub rate_limited: Family<GroupLabels, Counter>,
}

impl ApiClientMetrics {
    pub fn register(prefix: &str, registry: &mut Registry) -> Self {
        let metrics = Self {
            request_duration: Family::new_with_constructor(dskit_histogram),
            rate_limited: Family::default(),
        };
        registry.register(
            format!("{prefix}_kubernetes_api_client_request_duration_seconds"),
            "Time (in seconds) spent waiting for requests to the Kubernetes API",
            metrics.request_duration.clone(),
        );
        registry.register(
            format!("{prefix}_kubernetes_api_client_rate_limited_requests"),
            "Requests to the Kubernetes API given up while waiting for a client-side token of their API group, never sent",
            metrics.rate_limited.clone(),
        );
        metrics
    }
}

/// The resource a request path addresses, as the anchor labels it:
/// `core/v1/pods object`, `apps/v1/statefulsets collection`,
/// `core/v1/pods object eviction subresource`; any other path as it is.
pub fn resource_description(path: &str) -> String {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    // `/api/<v>/…` or `/apis/<group>/<v>/…`
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("core", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return path.to_string(),
    };
    if group.is_empty() || version.is_empty() || rest.iter().any(|s| s.is_empty()) {
        return path.to_string();
    }
    // A namespaced path first (as the anchor tries it first), then a cluster-scoped one.
    let addressed = match rest {
        ["namespaces", _, kind, tail @ ..] if tail.len() <= 2 => Some((*kind, tail)),
        _ => None,
    }
    .or(match rest {
        [kind, tail @ ..] if tail.len() <= 2 => Some((*kind, tail)),
        _ => None,
    });
    match addressed {
        Some((kind, [])) => format!("{group}/{version}/{kind} collection"),
        Some((kind, [_name])) => format!("{group}/{version}/{kind} object"),
        Some((kind, [_name, sub])) => format!("{group}/{version}/{kind} object {sub} subresource"),
        _ => path.to_string(),
    }
}

/// The rate-limit bucket of a request: `core` for `/api/…`, the group for `/apis/<group>/…`,
/// `apis` for discovery of groups, `/<first segment>` for anything else (`/version`).
pub fn api_group(path: &str) -> String {
    let mut segments = path.strip_prefix('/').unwrap_or(path).splitn(3, '/');
    match segments.next().unwrap_or_default() {
        "api" => "core".to_string(),
        "apis" => match segments.next() {
            Some(group) if !group.is_empty() => group.to_string(),
            _ => "apis".to_string(),
        },
        other => format!("/{other}"),
    }
}

/// A token bucket: `burst` tokens, refilled at `qps` per second. Each request reserves one
/// token up front (so waiters are served in order) and waits until its token is due.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// How long a request arriving `now` waits for its token.
    fn reserve(&mut self, now: Instant, qps: f64, burst: f64) -> Duration {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * qps;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now.max(self.at);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / qps)
        }
    }

    /// A reservation given up before its token was used goes back.
    fn cancel(&mut self, burst: f64) {
        self.tokens = (self.tokens + 1.0).min(burst);
    }
}

/// Per-API-group token buckets. `qps <= 0` or `burst == 0` means no limit, as in the anchor.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        (qps > 0.0 && burst > 0).then(|| Self {
            qps,
            burst: f64::from(burst),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    fn reserve(&self, group: &str, now: Instant) -> Duration {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry(group.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        bucket.reserve(now, self.qps, self.burst)
    }

    fn cancel(&self, group: &str) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = buckets.get_mut(group) {
            bucket.cancel(self.burst);
        }
    }

    /// Waits for a token of `group`. If the caller gives up first (the future is dropped,
    /// e.g. by a handler's deadline), the token is returned and the request counted as
    /// rate-limited.
    pub async fn acquire(&self, group: &str, metrics: &ApiClientMetrics) {
        let wait = self.reserve(group, Instant::now());
        if wait.is_zero() {
            return;
        }
        struct Pending<'a> {
            limiter: &'a RateLimiter,
            group: &'a str,
            metrics: &'a ApiClientMetrics,
            granted: bool,
        }
        impl Drop for Pending<'_> {
            fn drop(&mut self) {
                if !self.granted {
                    self.limiter.cancel(self.group);
                    self.metrics
                        .rate_limited
                        .get_or_create(&GroupLabels {
                            api_group: self.group.to_string(),
                        })
                        .inc();
                }
            }
        }
        let mut pending = Pending {
            limiter: self,
            group,
            metrics,
            granted: false,
        };
        tokio::time::sleep(wait).await;
        pending.granted = true;
    }
}

/// What the layer adds to every request.
#[derive(Debug)]
pub struct Instrumentation {
    pub metrics: ApiClientMetrics,
    pub limiter: Option<RateLimiter>,
    pub cluster: Option<HeaderValue>,
}

/// The tower layer of [`Instrumentation`]; its inner service must be `Clone` (put a
/// `tower::buffer::Buffer` under it).
#[derive(Clone, Debug)]
pub struct InstrumentationLayer(pub Arc<Instrumentation>);

impl<S> tower::Layer<S> for InstrumentationLayer {
    type Service = Instrumented<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Instrumented {
            inner,
            shared: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Instrumented<S> {
    inner: S,
    shared: Arc<Instrumentation>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for Instrumented<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The clone is not ready yet; keep it and send through the one that is.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let path = request.uri().path().to_string();
            if let Some(limiter) = &shared.limiter {
                limiter.acquire(&api_group(&path), &shared.metrics).await;
            }
            if let Some(cluster) = &shared.cluster {
                request
                    .headers_mut()
                    .insert(CLUSTER_HEADER, cluster.clone());
            }
            let method = request.method().to_string();
            let started = Instant::now();
            let result = inner.call(request).await;
            let status_code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            shared
                .metrics
                .request_duration
                .get_or_create(&RequestLabels {
                    path: resource_description(&path),
                    method,
                    status_code,
                })
                .observe(started.elapsed().as_secs_f64());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_described_as_the_anchor_does() {
        for (path, want) in [
            (
                "/api/v1/namespaces/m/pods/ingester-0",
                "core/v1/pods object",
            ),
            ("/api/v1/namespaces/m/pods", "core/v1/pods collection"),
            (
                "/api/v1/namespaces/m/pods/ingester-0/eviction",
                "core/v1/pods object eviction subresource",
            ),
            (
                "/apis/apps/v1/namespaces/m/statefulsets",
                "apps/v1/statefulsets collection",
            ),
            (
                "/apis/apps/v1/namespaces/m/statefulsets/a/status",
                "apps/v1/statefulsets object status subresource",
            ),
            (
                "/apis/apps/v1/statefulsets",
                "apps/v1/statefulsets collection",
            ),
            ("/api/v1/pods", "core/v1/pods collection"),
            ("/api/v1/namespaces/m", "core/v1/namespaces object"),
            (
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/x",
                "admissionregistration.k8s.io/v1/validatingwebhookconfigurations object",
            ),
            // Neither pattern: kept as it is.
            ("/version", "/version"),
            ("/apis", "/apis"),
            ("/api/v1", "/api/v1"),
            (
                "/api/v1/namespaces/m/pods/a/b/c",
                "/api/v1/namespaces/m/pods/a/b/c",
            ),
        ] {
            assert_eq!(resource_description(path), want, "{path}");
        }
    }

    #[test]
    fn requests_are_bucketed_by_api_group() {
        for (path, want) in [
            ("/api/v1/namespaces/m/pods", "core"),
            ("/api", "core"),
            ("/apis/apps/v1/statefulsets", "apps"),
            (
                "/apis/rollout-operator.grafana.com/v1",
                "rollout-operator.grafana.com",
            ),
            ("/apis", "apis"),
            ("/apis/", "apis"),
            ("/version", "/version"),
            ("/healthz", "/healthz"),
        ] {
            assert_eq!(api_group(path), want, "{path}");
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = Bucket {
            tokens: 2.0,
            at: start,
        };
        assert_eq!(bucket.reserve(start, 5.0, 2.0), Duration::ZERO);
        assert_eq!(bucket.reserve(start, 5.0, 2.0), Duration::ZERO);
        // Third and fourth at once: one token every 200 ms.
        let third = bucket.reserve(start, 5.0, 2.0);
        let fourth = bucket.reserve(start, 5.0, 2.0);
        assert!((third.as_secs_f64() - 0.2).abs() < 1e-9, "{third:?}");
        assert!((fourth.as_secs_f64() - 0.4).abs() < 1e-9, "{fourth:?}");
        // A second later the two reserved tokens are paid and three more accrued, capped
        // at the burst.
        let later = start + Duration::from_secs(1);
        assert_eq!(bucket.reserve(later, 5.0, 2.0), Duration::ZERO);
        bucket.cancel(2.0);
        assert_eq!(bucket.tokens, 2.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_while_throttled_is_counted_and_its_token_returned() {
        let mut registry = Registry::default();
        let metrics = ApiClientMetrics::register("svc", &mut registry);
        let limiter = RateLimiter::new(1.0, 1).unwrap();
        limiter.acquire("apps", &metrics).await;
        // The next token is a second away; give up after 100 ms.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(100),
            limiter.acquire("apps", &metrics),
        )
        .await;
        assert!(gave_up.is_err());
        // Another group has its own bucket.
        tokio::time::timeout(Duration::from_millis(1), limiter.acquire("core", &metrics))
            .await
            .expect("core is not throttled by apps");
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(
            text.contains(
                "svc_kubernetes_api_client_rate_limited_requests_total{api_group=\"apps\"} 1"
            ),
            "{text}"
        );
        assert!(RateLimiter::new(0.0, 10).is_none());
        assert!(RateLimiter::new(5.0, 0).is_none());
    }
}
