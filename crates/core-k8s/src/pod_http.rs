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
        }
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
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("{method} {url}: {e}"))?;
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
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{method} {url}: timed out"))?
            .map_err(|e| format!("{method} {url}: {e}"))
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

/// The endpoint of one pod: `template` with its host replaced by the pod's stable DNS name
/// `<pod>.<service>.<namespace>.svc.<cluster domain>` (scheme, port, path and query kept).
pub fn pod_url(
    template: &str,
    pod: &str,
    service: &str,
    namespace: &str,
    cluster_domain: &str,
) -> Result<String, String> {
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
    Ok(format!(
        "{scheme}://{pod}.{service}.{namespace}.svc.{cluster_domain}{port}{tail}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_urls_replace_only_the_host() {
        let cases = [
            (
                "http://pod:8080/ingester/prepare-delayed-downscale",
                "http://ingester-zone-a-2.ingester-zone-a.mimir.svc.cluster.local.:8080/ingester/prepare-delayed-downscale",
            ),
            (
                "http://x/prepare?force=1",
                "http://ingester-zone-a-2.ingester-zone-a.mimir.svc.cluster.local./prepare?force=1",
            ),
            (
                "https://user@h:443",
                "https://ingester-zone-a-2.ingester-zone-a.mimir.svc.cluster.local.:443",
            ),
        ];
        for (template, want) in cases {
            let got = pod_url(
                template,
                "ingester-zone-a-2",
                "ingester-zone-a",
                "mimir",
                "cluster.local.",
            )
            .unwrap();
            assert_eq!(got, want, "{template}");
        }
        assert!(pod_url("/relative", "p", "s", "n", "d").is_err());
        assert!(pod_url("http:///path", "p", "s", "n", "d").is_err());
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
}
