//! The admin HTTP server: `/livez`, `/readyz` and `/metrics`, on its own port.
//!
//! `/readyz` answers 200 only when every registered cache has synced — never based on
//! leadership, so a standby replica is Ready and rolling updates are not blocked by it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::http_metrics::HttpMetrics;
use crate::metrics::{OPENMETRICS_CONTENT_TYPE, encode};
use crate::{Error, Result};

/// Readiness of a process: a set of named components, each ready once its cache has synced.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    components: Arc<Mutex<BTreeMap<String, bool>>>,
}

/// Marks one component ready. Dropping it without calling [`ReadyHandle::ready`] keeps the
/// component not ready.
#[derive(Debug)]
pub struct ReadyHandle {
    name: String,
    readiness: Readiness,
}

impl ReadyHandle {
    pub fn ready(&self) {
        self.readiness.set(&self.name, true);
    }

    pub fn not_ready(&self) {
        self.readiness.set(&self.name, false);
    }
}

impl Readiness {
    /// Registers a component that starts not ready.
    pub fn register(&self, name: impl Into<String>) -> ReadyHandle {
        let name = name.into();
        self.set(&name, false);
        ReadyHandle {
            name,
            readiness: self.clone(),
        }
    }

    fn set(&self, name: &str, ready: bool) {
        if let Ok(mut components) = self.components.lock() {
            components.insert(name.to_string(), ready);
        }
    }

    /// Names of the components that are not ready yet. A process with no component
    /// registered is not ready either: it has not started its caches.
    pub fn pending(&self) -> Vec<String> {
        match self.components.lock() {
            Ok(components) if components.is_empty() => vec!["starting".to_string()],
            Ok(components) => components
                .iter()
                .filter(|(_, ready)| !**ready)
                .map(|(name, _)| name.clone())
                .collect(),
            Err(_) => vec!["poisoned".to_string()],
        }
    }

    pub fn is_ready(&self) -> bool {
        self.pending().is_empty()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// The admin routes, separate from serving so tests can call them without a socket.
pub fn router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        // The Grafana rollout-operator's readiness path, so its manifests' probes keep working.
        .route("/ready", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState {
            registry,
            readiness,
        })
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let pending = state.readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches to sync: {}\n", pending.join(", ")),
        )
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    match encode(&state.registry) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}\n"),
        )
            .into_response(),
    }
}

/// Binds the admin address now (so a port conflict fails start-up) and serves until `stop`
/// is cancelled, then drains in-flight requests.
pub async fn serve(
    address: SocketAddr,
    registry: Arc<Registry>,
    http_metrics: HttpMetrics,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = crate::net::listen(address)
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| Error::Admin {
            address: address.to_string(),
            reason: e.to_string(),
        })?;
    let bound = listener.local_addr().map_err(|e| Error::Admin {
        address: address.to_string(),
        reason: e.to_string(),
    })?;
    let app = crate::http_metrics::instrument(router(registry, readiness), http_metrics);
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    tracing::info!(address = %bound, "admin server listening");
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_every_component() {
        let readiness = Readiness::default();
        assert_eq!(readiness.pending(), vec!["starting"]);
        let pods = readiness.register("pods");
        let sts = readiness.register("statefulsets");
        assert_eq!(readiness.pending(), vec!["pods", "statefulsets"]);
        pods.ready();
        assert!(!readiness.is_ready());
        sts.ready();
        assert!(readiness.is_ready());
        sts.not_ready();
        assert_eq!(readiness.pending(), vec!["statefulsets"]);
    }

    #[tokio::test]
    async fn endpoints_answer() {
        let mut registry = Registry::default();
        let metrics = crate::metrics::ControllerMetrics::register("svc", &mut registry);
        let http_metrics = HttpMetrics::register("svc", &mut registry);
        metrics.leader.set(1);
        let readiness = Readiness::default();
        let handle = readiness.register("cache");
        let stop = CancellationToken::new();
        let (addr, task) = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(registry),
            http_metrics,
            readiness,
            stop.clone(),
        )
        .await
        .unwrap();

        assert_eq!(http_get(addr, "/livez").await.0, 200);
        let (code, body) = http_get(addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(body.contains("cache"), "{body}");
        handle.ready();
        assert_eq!(http_get(addr, "/readyz").await.0, 200);
        let (code, body) = http_get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("svc_leader 1"), "{body}");
        // The admin server's own requests are measured too.
        assert!(
            body.contains("svc_request_duration_seconds_count{method=\"GET\",route=\"readyz\",status_code=\"503\",ws=\"false\"} 1"),
            "{body}"
        );
        assert_eq!(http_get(addr, "/nope").await.0, 404);

        stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    /// A minimal HTTP/1.0 GET so the test needs no client crate.
    async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let code = response[9..12].parse().unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }
}
