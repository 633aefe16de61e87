//! Plain-HTTP calls to pods (prepare-downscale and delayed-downscale endpoints), shared by the
//! admission webhook and the rollout-operator: a timeout per call, at most 32 in flight, and a
//! test-only override that sends every call to one local address.

use std::time::Duration;

use futures::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::http_metrics::{ClusterValidationLabels, PodCallMetrics};

/// Most calls in flight at once (the anchor's cap).
pub const MAX_IN_FLIGHT: usize = 32;

/// What a pod answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodResponse {
    pub status: u16,
    pub body: Bytes,
}

impl PodResponse {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The HTTP client for pod endpoints.
#[derive(Clone)]
pub struct PodHttp {
    client: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
    address_override: Option<String>,
    metrics: Option<PodCallMetrics>,
    /// Sent as `X-Cluster` (`--cluster-validation-label`).
    cluster: Option<String>,
}

impl std::fmt::Debug for PodHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodHttp")
            .field("timeout", &self.timeout)
            .field("address_override", &self.address_override)
            .finish()
    }
}

impl PodHttp {
    /// `address_override` (tests only): send every call to this `host:port`, keeping the path
    /// and sending the original host in the `Host` header.
    pub fn new(timeout: Duration, address_override: Option<String>) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            timeout,
            address_override,
            metrics: None,
            cluster: None,
        }
    }

    /// Times every call in `metrics` and sends `cluster` (if any) as the `X-Cluster` header.
    pub fn instrumented(mut self, metrics: PodCallMetrics, cluster: Option<String>) -> Self {
        self.metrics = Some(metrics);
        self.cluster = cluster.filter(|c| !c.is_empty());
        self
    }

    /// The URL actually called for `url` (the override applied).
    pub fn target(&self, url: &str) -> String {
        match (&self.address_override, url.strip_prefix("http://")) {
            (Some(addr), Some(rest)) => match rest.split_once('/') {
                Some((_, path)) => format!("http://{addr}/{path}"),
                None => format!("http://{addr}/"),
            },
            _ => url.to_string(),
        }
    }

    /// Sends `method url` with no body; the status and body, or a transport error message.
    pub async fn call(&self, method: &str, url: &str) -> Result<PodResponse, String> {
        let target = self.target(url);
        let mut request = http::Request::builder()
            .method(method)
            .uri(&target)
            .header(http::header::CONTENT_TYPE, "application/json");
        // Redirected calls still say which pod they were meant for (test stand-ins read it).
        if target != url
            && let Some(authority) = url
                .split_once("://")
                .and_then(|(_, rest)| rest.split(['/', '?']).next())
        {
            request = request.header(http::header::HOST, authority);
        }
        if let Some(cluster) = &self.cluster {
            request = request.header(crate::api_client::CLUSTER_HEADER, cluster);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let path = request.uri().path().to_string();
        let started = std::time::Instant::now();
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>(PodResponse { status, body })
        };
        let result = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{method} {url}: timed out"))
            .and_then(|r| r.map_err(|e| format!("{method} {url}: {e}")));
        if let Some(metrics) = &self.metrics {
            let status = result.as_ref().ok().map(|r| r.status);
            metrics.observe(&path, method, status, started.elapsed().as_secs_f64());
        }
        let response = result?;
        // A cluster-validating server refuses callers from another cluster with 511.
        if response.status == 511
            && let Some(cluster) = &self.cluster
            && let Some(message) = serde_json::from_slice::<serde_json::Value>(&response.body)
                .ok()
                .and_then(|v| {
                    v.get("cluster_validation_error_message")
                        .and_then(|m| m.as_str())
                        .map(str::to_string)
                })
        {
            if let Some(metrics) = &self.metrics {
                metrics
                    .invalid_cluster_label
                    .get_or_create(&ClusterValidationLabels {
                        method: method.to_string(),
                        protocol: "http".into(),
                        request_cluster: cluster.clone(),
                    })
                    .inc();
            }
            tracing::warn!(%url, %cluster, %message, "pod refused the request: cluster validation label mismatch");
            return Err(format!(
                "{method} {url}: request rejected by the server: {message}"
            ));
        }
        Ok(response)
    }

    /// Calls every URL (at most [`MAX_IN_FLIGHT`] at once); results in the order of `urls`.
    pub async fn call_all(
        &self,
        method: &'static str,
        urls: &[String],
    ) -> Vec<Result<PodResponse, String>> {
        // Owned futures: borrowed ones trip axum handlers' higher-ranked bounds.
        let calls = urls.iter().cloned().map(|url| {
            let http = self.clone();
            async move { http.call(method, &url).await }
        });
        futures::stream::iter(calls)
            .buffered(MAX_IN_FLIGHT)
            .collect()
            .await
    }
}

/// The reason of a failed [`PodHttp::call`], without the `METHOD URL: ` its error starts with
/// (for messages that name the pod already).
pub fn failure_reason<'a>(error: &'a str, method: &str, url: &str) -> &'a str {
    error
        .strip_prefix(method)
        .and_then(|rest| rest.strip_prefix(' '))
        .and_then(|rest| rest.strip_prefix(url))
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(error)
}

/// The endpoint of one pod: `template` with its host replaced by the pod's own address
/// (`status.podIP`; an IPv6 address in brackets), scheme, port, path and query kept.
///
/// FIX (the Grafana operator calls `<pod>.<service>.<namespace>.svc.<cluster domain>`): the
/// pod's IP needs no cluster DNS, and the call reaches exactly the pod object whose owner was
/// checked, not whatever a DNS name resolves to at that moment.
pub fn pod_url(template: &str, pod_ip: &str) -> Result<String, String> {
    let ip: std::net::IpAddr = pod_ip
        .parse()
        .map_err(|_| format!("{pod_ip:?} is not a pod IP address"))?;
    let host = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let (scheme, rest) = template
        .split_once("://")
        .ok_or_else(|| format!("{template:?} is not an absolute URL"))?;
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return Err(format!("{template:?} has no host"));
    }
    // A port follows the last ':' unless it is inside an IPv6 literal.
    let port = match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host_port.starts_with('[') => {
            if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() {
                format!(":{port}")
            } else {
                String::new()
            }
        }
        _ => String::new(),
    };
    Ok(format!("{scheme}://{host}{port}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_urls_replace_only_the_host() {
        let cases = [
            (
                "http://pod:8080/ingester/prepare-delayed-downscale",
                "10.250.0.12",
                "http://10.250.0.12:8080/ingester/prepare-delayed-downscale",
            ),
            (
                "http://x/prepare?force=1",
                "10.250.0.12",
                "http://10.250.0.12/prepare?force=1",
            ),
            (
                "https://user@h:443",
                "10.250.0.12",
                "https://10.250.0.12:443",
            ),
            (
                "http://[fd00::1]:8080/p",
                "fd00::12",
                "http://[fd00::12]:8080/p",
            ),
        ];
        for (template, ip, want) in cases {
            assert_eq!(pod_url(template, ip).unwrap(), want, "{template}");
        }
        assert!(pod_url("/relative", "10.0.0.1").is_err());
        assert!(pod_url("http:///path", "10.0.0.1").is_err());
        assert!(pod_url("http://h/p", "").is_err());
        assert!(pod_url("http://h/p", "pod-0.svc").is_err());
    }

    #[test]
    fn failure_reasons_drop_the_call() {
        let url = "http://pod-0.svc.ns.svc.cluster.local.:80/prepare";
        assert_eq!(
            failure_reason(&format!("POST {url}: timed out"), "POST", url),
            "timed out"
        );
        // Another call's error is kept whole.
        assert_eq!(
            failure_reason("DELETE x: refused", "POST", url),
            "DELETE x: refused"
        );
    }

    #[test]
    fn the_override_keeps_path_and_query() {
        let http = PodHttp::new(Duration::from_secs(1), Some("127.0.0.1:9".into()));
        assert_eq!(
            http.target("http://p.s.n.svc.cluster.local.:8080/a/b?c=1"),
            "http://127.0.0.1:9/a/b?c=1"
        );
        let plain = PodHttp::new(Duration::from_secs(1), None);
        assert_eq!(plain.target("http://h/x"), "http://h/x");
    }

    #[tokio::test]
    async fn calls_report_status_body_and_transport_errors_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/{code}",
            axum::routing::any(
                |axum::extract::Path(code): axum::extract::Path<u16>| async move {
                    (
                        axum::http::StatusCode::from_u16(code).unwrap(),
                        format!("{{\"timestamp\": {code}}}"),
                    )
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = PodHttp::new(Duration::from_secs(2), None);
        let urls = vec![
            format!("http://{addr}/200"),
            format!("http://{addr}/409"),
            "http://127.0.0.1:1/refused".to_string(),
        ];
        let results = http.call_all("POST", &urls).await;
        let first = results[0].as_ref().unwrap();
        assert!(first.is_success());
        assert_eq!(first.body.as_ref(), b"{\"timestamp\": 200}");
        assert_eq!(results[1].as_ref().unwrap().status, 409);
        assert!(
            results[2]
                .as_ref()
                .unwrap_err()
                .starts_with("POST http://127.0.0.1:1/refused")
        );
    }

    #[tokio::test]
    async fn calls_carry_the_cluster_label_and_a_refusal_for_it_is_an_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Stands in for a Mimir pod with cluster validation: only cluster "mimir" is served.
        let app = axum::Router::new().fallback(|headers: axum::http::HeaderMap| async move {
            match headers.get("x-cluster").and_then(|v| v.to_str().ok()) {
                Some("mimir") => (axum::http::StatusCode::OK, "{}".to_string()),
                other => (
                    axum::http::StatusCode::from_u16(511).unwrap(),
                    format!("{{\"cluster_validation_error_message\": \"rejected request with wrong cluster validation label {}\"}}", other.unwrap_or("none")),
                ),
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = PodCallMetrics::register("svc", &mut registry);
        let right = PodHttp::new(Duration::from_secs(2), None)
            .instrumented(metrics.clone(), Some("mimir".into()));
        let url = format!("http://{addr}/ingester/prepare-shutdown");
        assert_eq!(right.call("POST", &url).await.unwrap().status, 200);
        let wrong =
            PodHttp::new(Duration::from_secs(2), None).instrumented(metrics, Some("loki".into()));
        let err = wrong.call("POST", &url).await.unwrap_err();
        assert!(err.contains("request rejected by the server: rejected request with wrong cluster validation label loki"), "{err}");
        let text = crate::metrics::encode(&registry).unwrap();
        for line in [
            "svc_pod_http_client_request_duration_seconds_count{path=\"/ingester/prepare-shutdown\",method=\"POST\",status_code=\"200\"} 1",
            "svc_pod_http_client_request_duration_seconds_count{path=\"/ingester/prepare-shutdown\",method=\"POST\",status_code=\"511\"} 1",
            "svc_client_invalid_cluster_validation_label_requests_total{method=\"POST\",protocol=\"http\",request_cluster=\"loki\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
