//! What every request to the Kubernetes API goes through on its way out: a per-API-group
//! token bucket (`--client-qps`/`--client-burst`), the `X-Cluster` header
//! (`--cluster-validation-label`), a latency histogram by resource, method and status, and the
//! answer to a throttled or overloaded API server: a 429 or 5xx carrying `Retry-After` is sent
//! again after that many seconds, a 429/503/504 without it after an exponential back-off
//! ([`retry_delay`]), at most [`MAX_RETRIES`] times, each attempt taking its own token and
//! counted, instead of failing the caller's reconcile. kube's own retry layer is turned off
//! for our clients, so there is exactly one.
//!
//! Requests in flight are capped (`--client-max-in-flight`, watches excepted): kube's HTTP/1.1
//! pool opens one connection per concurrent request, so without a cap a controller with a
//! thousand objects to reconcile at once opened a thousand connections, each with its TLS
//! state and read buffers. A request holds its place until its answer's body is read or
//! dropped, when the connection goes back to the pool; so the pool never holds more
//! connections than the cap plus the open watches.
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
    pub retried: Family<GroupLabels, Counter>,
}

impl ApiClientMetrics {
    pub fn register(prefix: &str, registry: &mut Registry) -> Self {
        let metrics = Self {
            request_duration: Family::new_with_constructor(dskit_histogram),
            rate_limited: Family::default(),
            retried: Family::default(),
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
        registry.register(
            format!("{prefix}_kubernetes_api_client_retried_requests"),
            "Requests to the Kubernetes API sent again because the API server answered 429 or 5xx with Retry-After",
            metrics.retried.clone(),
        );
        metrics
    }
}

/// How many times one request is sent again on `Retry-After` (client-go's default).
pub const MAX_RETRIES: u32 = 10;

/// The longest `Retry-After` honoured as given; a longer one is shortened to this, so a
/// misbehaving proxy cannot park a controller for hours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// When to send a request again after its `attempt`-th answer (0 for the first): a 429 or
/// any 5xx that says when (`Retry-After` in whole seconds; an HTTP date is not honoured) after
/// that, as client-go does; a 429, 503 or 504 that does not say, after an exponential back-off
/// from 200 ms to 5 s (what kube's own retry did, which this replaces so that every attempt
/// takes a token and is counted). Anything else is the caller's to handle.
pub fn retry_delay(status: u16, header: Option<&HeaderValue>, attempt: u32) -> Option<Duration> {
    let told = header
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.trim().parse::<u64>().ok());
    match (status, told) {
        (429 | 500..=599, Some(seconds)) => Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER)),
        (429 | 503 | 504, None) => Some(
            (Duration::from_millis(200) * 2u32.saturating_pow(attempt.min(8)))
                .min(Duration::from_secs(5)),
        ),
        _ => None,
    }
}

/// A copy of `request` to send again, when its body can be copied (kube's bodies are bytes).
fn resend_copy(request: &Request<kube::client::Body>) -> Option<Request<kube::client::Body>> {
    let mut copy = Request::new(request.body().try_clone()?);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
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
    /// Places for requests in flight (watches take none); `None`: no cap.
    pub in_flight: Option<Arc<tokio::sync::Semaphore>>,
}

/// Whether a request is a watch: a long-lived stream that holds its connection for as long
/// as it runs, so it must not hold one of the capped places.
pub fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// A response body that holds a place among the requests in flight until it has been read
/// to its end or dropped: until then its connection is busy.
#[derive(Debug)]
pub struct HeldBody<B> {
    inner: B,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<B> http_body::Body for HeldBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.place = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
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

impl<S, ResBody> tower::Service<Request<kube::client::Body>> for Instrumented<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: http_body::Body + Unpin + Send + 'static,
{
    type Response = Response<HeldBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<kube::client::Body>) -> Self::Future {
        use tower::ServiceExt as _;
        // The clone is not ready yet; keep it and send through the one that is.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let path = request.uri().path().to_string();
            let group = api_group(&path);
            if let Some(cluster) = &shared.cluster {
                request
                    .headers_mut()
                    .insert(CLUSTER_HEADER, cluster.clone());
            }
            let method = request.method().to_string();
            let capped = shared.in_flight.clone().filter(|_| !is_watch(&request));
            let mut sent = 0;
            loop {
                let again = if sent < MAX_RETRIES {
                    resend_copy(&request)
                } else {
                    None
                };
                if let Some(limiter) = &shared.limiter {
                    limiter.acquire(&group, &shared.metrics).await;
                }
                let place = match &capped {
                    // The semaphore is never closed.
                    Some(places) => places.clone().acquire_owned().await.ok(),
                    None => None,
                };
                if sent > 0 {
                    // The first attempt went through the service made ready by the caller.
                    inner.ready().await?;
                }
                let started = Instant::now();
                let result = inner
                    .call(request)
                    .await
                    .map(|response| response.map(|inner| HeldBody { inner, place }));
                let status_code = match &result {
                    Ok(response) => response.status().as_u16().to_string(),
                    Err(_) => "error".to_string(),
                };
                shared
                    .metrics
                    .request_duration
                    .get_or_create(&RequestLabels {
                        path: resource_description(&path),
                        method: method.clone(),
                        status_code,
                    })
                    .observe(started.elapsed().as_secs_f64());
                let wait = result.as_ref().ok().and_then(|response| {
                    retry_delay(
                        response.status().as_u16(),
                        response.headers().get(http::header::RETRY_AFTER),
                        sent,
                    )
                });
                match (wait, again) {
                    (Some(wait), Some(next)) => {
                        shared
                            .metrics
                            .retried
                            .get_or_create(&GroupLabels {
                                api_group: group.clone(),
                            })
                            .inc();
                        tracing::debug!(%path, %method, ?wait, "API server asked to retry later");
                        drop(result);
                        tokio::time::sleep(wait).await;
                        request = next;
                        sent += 1;
                    }
                    _ => return result,
                }
            }
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

    #[test]
    fn retry_delay_follows_client_go_then_backs_off() {
        let value = |v: &str| HeaderValue::from_str(v).unwrap();
        let two = value("2");
        let ms = Duration::from_millis;
        for (status, header, attempt, want) in [
            (429, Some(&two), 0, Some(Duration::from_secs(2))),
            (503, Some(&two), 3, Some(Duration::from_secs(2))),
            (500, Some(&two), 0, Some(Duration::from_secs(2))),
            // Not told when: back off, doubling, capped.
            (429, None, 0, Some(ms(200))),
            (503, None, 1, Some(ms(400))),
            (504, None, 2, Some(ms(800))),
            (429, None, 9, Some(ms(5000))),
            // Not a status to retry.
            (500, None, 0, None),
            (409, Some(&two), 0, None),
            (404, Some(&two), 0, None),
            (200, Some(&two), 0, None),
        ] {
            assert_eq!(
                retry_delay(status, header, attempt),
                want,
                "{status} {header:?} {attempt}"
            );
        }
        // A header that is not whole seconds counts as not told.
        assert_eq!(retry_delay(429, Some(&value("junk")), 0), Some(ms(200)));
        assert_eq!(
            retry_delay(429, Some(&value("Wed, 21 Oct 2015 07:28:00 GMT")), 0),
            Some(ms(200))
        );
        assert_eq!(
            retry_delay(429, Some(&value("86400")), 0),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(retry_delay(429, Some(&value("0")), 0), Some(Duration::ZERO));
    }

    /// A scripted answer: status and `Retry-After`.
    type Answer = (u16, Option<&'static str>);
    /// When a request arrived, and its body.
    type Arrival = (tokio::time::Instant, Vec<u8>);

    /// An inner service answering from a script and recording each request's arrival.
    #[derive(Clone)]
    struct Scripted {
        answers: Arc<Mutex<Vec<Answer>>>,
        seen: Arc<Mutex<Vec<Arrival>>>,
    }

    impl tower::Service<Request<kube::client::Body>> for Scripted {
        type Response = Response<String>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Result<Response<String>, std::convert::Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
            let this = self.clone();
            Box::pin(async move {
                let body = request.into_body().collect_bytes().await.unwrap().to_vec();
                this.seen
                    .lock()
                    .unwrap()
                    .push((tokio::time::Instant::now(), body));
                let (status, after) = {
                    let mut answers = this.answers.lock().unwrap();
                    if answers.is_empty() {
                        (200, None)
                    } else {
                        answers.remove(0)
                    }
                };
                let mut response = Response::new(String::new());
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                if let Some(after) = after {
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, HeaderValue::from_static(after));
                }
                Ok(response)
            })
        }
    }

    async fn send_through(answers: Vec<Answer>) -> (u16, Vec<Arrival>, String) {
        use tower::{Layer as _, Service as _, ServiceExt as _};
        let mut registry = Registry::default();
        let metrics = ApiClientMetrics::register("svc", &mut registry);
        let scripted = Scripted {
            answers: Arc::new(Mutex::new(answers)),
            seen: Arc::default(),
        };
        let mut service = InstrumentationLayer(Arc::new(Instrumentation {
            metrics,
            limiter: None,
            cluster: None,
            in_flight: None,
        }))
        .layer(scripted.clone());
        let request = Request::builder()
            .method("PATCH")
            .uri("/apis/apps/v1/namespaces/m/statefulsets/a")
            .body(kube::client::Body::from(b"{\"spec\":{}}".to_vec()))
            .unwrap();
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        let seen = scripted.seen.lock().unwrap().clone();
        let text = crate::metrics::encode(&registry).unwrap();
        (response.status().as_u16(), seen, text)
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_request_is_sent_again_after_retry_after() {
        let started = tokio::time::Instant::now();
        let (status, seen, text) =
            send_through(vec![(429, Some("1")), (503, Some("2")), (200, None)]).await;
        assert_eq!(status, 200);
        let at: Vec<Duration> = seen.iter().map(|(t, _)| *t - started).collect();
        assert_eq!(
            at,
            [
                Duration::ZERO,
                Duration::from_secs(1),
                Duration::from_secs(3)
            ]
        );
        assert!(
            seen.iter().all(|(_, body)| body == b"{\"spec\":{}}"),
            "every attempt carries the whole body"
        );
        assert!(
            text.contains("svc_kubernetes_api_client_retried_requests_total{api_group=\"apps\"} 2"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_throttling_and_overload_are_retried_and_never_more_than_the_limit() {
        // A conflict is the caller's to resolve; a 500 without Retry-After is returned.
        for answer in [(409, Some("1")), (500, None)] {
            let (status, seen, _) = send_through(vec![answer]).await;
            assert_eq!((status, seen.len()), (answer.0, 1));
        }
        // Unavailable without saying when: sent again after the back-off.
        let started = tokio::time::Instant::now();
        let (status, seen, _) = send_through(vec![(503, None), (503, None)]).await;
        let at: Vec<Duration> = seen.iter().map(|(t, _)| *t - started).collect();
        assert_eq!(status, 200);
        assert_eq!(
            at,
            [
                Duration::ZERO,
                Duration::from_millis(200),
                Duration::from_millis(600)
            ]
        );
        // Throttled for good: the first send and MAX_RETRIES more, then the 429 is returned.
        let (status, seen, _) = send_through(vec![(429, Some("0")); 50]).await;
        assert_eq!((status, seen.len()), (429, MAX_RETRIES as usize + 1));
    }

    #[test]
    fn watches_are_told_from_other_requests() {
        let request = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&request(
            "/api/v1/pods?watch=true&resourceVersion=1"
        )));
        assert!(is_watch(&request("/api/v1/pods?labelSelector=a&watch=1")));
        assert!(!is_watch(&request("/api/v1/pods")));
        assert!(!is_watch(&request("/api/v1/pods?watch=false")));
        assert!(!is_watch(&request(
            "/api/v1/pods?labelSelector=watch%3Dtrue"
        )));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_are_capped_until_their_answers_are_read() {
        use tower::{Layer as _, ServiceExt as _};
        let mut registry = Registry::default();
        let scripted = Scripted {
            answers: Arc::default(),
            seen: Arc::default(),
        };
        let service = InstrumentationLayer(Arc::new(Instrumentation {
            metrics: ApiClientMetrics::register("svc", &mut registry),
            limiter: None,
            cluster: None,
            in_flight: Some(Arc::new(tokio::sync::Semaphore::new(2))),
        }))
        .layer(scripted.clone());
        let send = |uri: &'static str| {
            let service = service.clone();
            tokio::spawn(async move {
                let request = Request::get(uri).body(kube::client::Body::empty()).unwrap();
                service.oneshot(request).await.unwrap()
            })
        };
        let arrived = || scripted.seen.lock().unwrap().len();
        let (first, second) = (send("/api/v1/pods"), send("/api/v1/pods"));
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        // Two answers held unread: a third request waits for a place, a watch does not.
        let third = send("/api/v1/pods");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(arrived(), 2, "the third request went out past the cap");
        let watch = send("/api/v1/pods?watch=true");
        drop(watch.await.unwrap());
        assert_eq!(arrived(), 3, "a watch waited for a place");
        // One answer read to its end frees its place.
        http_body_util::BodyExt::collect(first.into_body())
            .await
            .unwrap();
        drop(third.await.unwrap());
        assert_eq!(arrived(), 4);
        // A dropped answer frees its place too.
        drop(second);
        drop(send("/api/v1/pods").await.unwrap());
        drop(send("/api/v1/pods").await.unwrap());
        assert_eq!(arrived(), 6);
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
