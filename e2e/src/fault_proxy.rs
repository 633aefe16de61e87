//! A fault-injecting proxy in front of kube-apiserver, for the throttling and conflict
//! scenario of `make chaos`. A service under test gets a kubeconfig naming the proxy (plain
//! HTTP on 127.0.0.1, no credentials of its own); the proxy forwards each request with the
//! plane's admin client, except that it answers some requests itself: every
//! `throttle_every`-th write with 429 and `Retry-After`, every `conflict_every`-th with 409,
//! and chosen reads with 500.
//! Every request is recorded, so a test can bound the request rate and check that a throttled
//! request did not come back before it was told to.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use axum::body::Body;
use axum::http::{self, Method, Response, StatusCode};

/// One request that reached the proxy.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    /// Path and query.
    pub target: String,
    pub status: u16,
    /// Answered by the proxy, not by the API server.
    pub injected: bool,
}

/// Which writes the proxy answers itself (0 turns a fault off).
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub throttle_every: usize,
    pub retry_after_seconds: u64,
    /// Lease writes are never answered with a conflict: on a Lease a 409 means another replica
    /// took it, which the failover scenarios cover with real replicas.
    pub conflict_every: usize,
    /// Every read (GET) of a path ending in this is answered 500, an error no client retries
    /// by itself (`""`: none).
    pub failing_reads: &'static str,
    /// Every write (POST, PUT, PATCH, DELETE) of a path ending in this is answered 500
    /// (`""`: none).
    pub failing_writes: &'static str,
}

#[derive(Debug)]
pub struct FaultProxy {
    pub address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    client: kube::Client,
    faults: Faults,
    seen: Arc<Mutex<Vec<Seen>>>,
    writes: Arc<AtomicUsize>,
}

impl FaultProxy {
    /// Serves on a free port of 127.0.0.1, forwarding through `client`.
    pub async fn start(client: kube::Client, faults: Faults) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let shared = Shared {
            client,
            faults,
            seen: seen.clone(),
            writes: Arc::default(),
        };
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let shared = shared.clone();
            async move { forward(&shared, request).await }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            address,
            seen,
            task,
        })
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writes a kubeconfig that reaches the API server only through this proxy.
    pub fn kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("fault-proxy-{}.kubeconfig", self.address.port()));
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": format!("http://{}", self.address)}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        Ok(path)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_write(method: &Method) -> bool {
    [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(method)
}

/// The fault for a read or write of `target` (path and query) chosen by path, if any.
fn path_fault(method: &Method, faults: &Faults, target: &str) -> Option<StatusCode> {
    let path = target.split('?').next().unwrap_or_default();
    let failing = |suffix: &str| !suffix.is_empty() && path.ends_with(suffix);
    ((*method == Method::GET && failing(faults.failing_reads))
        || (is_write(method) && failing(faults.failing_writes)))
    .then_some(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The fault for the `n`-th write (1-based), if any.
fn fault_for(n: usize, faults: &Faults, target: &str) -> Option<StatusCode> {
    let every = |k: usize| k > 0 && n.is_multiple_of(k);
    if every(faults.throttle_every) {
        Some(StatusCode::TOO_MANY_REQUESTS)
    } else if every(faults.conflict_every) && !target.contains("/leases") {
        Some(StatusCode::CONFLICT)
    } else {
        None
    }
}

async fn forward(shared: &Shared, request: axum::extract::Request) -> Response<Body> {
    let method = request.method().clone();
    let target = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_string(), |p| p.to_string());
    let at = Instant::now();
    let record = |status: u16, injected: bool| {
        shared
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Seen {
                at,
                method: method.to_string(),
                target: target.clone(),
                status,
                injected,
            });
    };
    let fault = is_write(&method)
        .then(|| shared.writes.fetch_add(1, Ordering::SeqCst) + 1)
        .and_then(|n| fault_for(n, &shared.faults, &target))
        .or_else(|| path_fault(&method, &shared.faults, &target));
    if let Some(code) = fault {
        record(code.as_u16(), true);
        let reason = match code {
            StatusCode::CONFLICT => "Conflict",
            StatusCode::INTERNAL_SERVER_ERROR => "InternalError",
            _ => "TooManyRequests",
        };
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("injected by the fault proxy: {reason}"),
            "reason": reason, "code": code.as_u16(),
        });
        let mut response = Response::new(Body::from(status.to_string()));
        *response.status_mut() = code;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        if code == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from(shared.faults.retry_after_seconds),
            );
        }
        return response;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable request body"),
    };
    let mut upstream = http::Request::builder().method(parts.method).uri(&target);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(bytes.to_vec())) else {
        return plain(StatusCode::BAD_REQUEST, "unforwardable request");
    };
    match shared.client.send(upstream).await {
        Ok(response) => {
            record(response.status().as_u16(), false);
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            record(502, false);
            plain(StatusCode::BAD_GATEWAY, &e.to_string())
        }
    }
}

fn plain(code: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(message.to_string()));
    *response.status_mut() = code;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_fall_on_their_writes() {
        let faults = Faults {
            throttle_every: 3,
            retry_after_seconds: 1,
            conflict_every: 4,
            failing_reads: "/pods",
            failing_writes: "",
        };
        let path = "/api/v1/namespaces/a/configmaps/b";
        let got: Vec<Option<u16>> = (1..=12)
            .map(|n| fault_for(n, &faults, path).map(|c| c.as_u16()))
            .collect();
        assert_eq!(
            got,
            [
                None,
                None,
                Some(429),
                Some(409),
                None,
                Some(429),
                None,
                Some(409),
                Some(429),
                None,
                None,
                Some(429)
            ]
        );
        let lease = "/apis/coordination.k8s.io/v1/namespaces/a/leases/x";
        assert_eq!(fault_for(4, &faults, lease), None);
        assert_eq!(
            fault_for(3, &faults, lease),
            Some(StatusCode::TOO_MANY_REQUESTS)
        );
        // Reads: only GETs of the chosen resource, whatever the query.
        let pods = "/api/v1/namespaces/a/pods?labelSelector=x";
        assert_eq!(
            path_fault(&Method::GET, &faults, pods),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(path_fault(&Method::POST, &faults, pods), None);
        assert_eq!(path_fault(&Method::GET, &faults, path), None);
        let off = Faults {
            failing_reads: "",
            failing_writes: "",
            ..faults
        };
        assert_eq!(path_fault(&Method::GET, &off, pods), None);
        // Writes: any write method to the chosen object, never its reads.
        let writes = Faults {
            failing_reads: "",
            failing_writes: "/statefulsets/store",
            ..faults
        };
        let store = "/apis/apps/v1/namespaces/a/statefulsets/store";
        for method in [Method::PATCH, Method::PUT, Method::DELETE] {
            assert_eq!(
                path_fault(&method, &writes, store),
                Some(StatusCode::INTERNAL_SERVER_ERROR)
            );
        }
        assert_eq!(path_fault(&Method::GET, &writes, store), None);
        assert_eq!(path_fault(&Method::PATCH, &writes, pods), None);
    }
}
