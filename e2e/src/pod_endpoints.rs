//! Stand-in pods for the endpoints the webhooks and the rollout-operator call on pods
//! (prepare-downscale's prepare/undo, delayed downscale's prepare/cancel), reached through the
//! services' test-only `--pod-address-override`. The pod is named by the Host header the
//! caller sends: the pod's IP (Strata calls pods at their own address), found among the pods of
//! the namespace, or a DNS name `<pod>.<service>.<namespace>.svc…` (the anchor's form); calls
//! for pods of another namespace (a test running beside) are answered 404 and not recorded.
//!
//! Each pod answers as it is told ([`Answer`], per method) and keeps the state a real pod
//! would: prepared from the moment a POST reaches it until a DELETE it answered with 2xx.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::http::{HeaderMap, Method, StatusCode};

/// How a stand-in pod answers one method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200 with this body.
    Ok(String),
    /// This status, empty body.
    Status(u16),
    /// 200 with this body, after a delay.
    Late(Duration, String),
    /// Never answers (the caller's timeout ends the call).
    Hang,
    /// 200 with `{"timestamp": <unix seconds>}`: when this pod was prepared, as a pod's
    /// delayed-downscale endpoint answers (a POST to a prepared pod keeps its first time).
    PreparedAt,
}

#[derive(Debug, Default)]
struct State {
    /// Per pod and method; missing: 200 "ok".
    answers: BTreeMap<(String, String), Answer>,
    /// Per method, for pods without an answer of their own; missing: 200 "ok".
    defaults: BTreeMap<String, Answer>,
    /// Every call received: (method, pod, when).
    calls: Vec<(String, String, Instant)>,
    prepared: BTreeMap<String, bool>,
    /// When each prepared pod was prepared (unix seconds), until a DELETE it answered.
    prepared_at: BTreeMap<String, i64>,
}

/// The stand-in server; clones share it.
#[derive(Clone, Debug)]
pub struct PodEndpoints {
    namespace: String,
    state: Arc<Mutex<State>>,
    /// Reads the namespace's pods, to name the pod behind an IP.
    pods: kube::Api<k8s_openapi::api::core::v1::Pod>,
    /// `host:port` to give `--pod-address-override`.
    pub address: String,
}

impl PodEndpoints {
    /// Serves on a free port of 127.0.0.1 for the pods of `namespace`.
    pub async fn start(namespace: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        let client = crate::support::cluster().client().await?;
        let me = Self {
            namespace: namespace.to_string(),
            state: Arc::default(),
            pods: kube::Api::namespaced(client, namespace),
            address,
        };
        let server = me.clone();
        let app = axum::Router::new().fallback(move |method: Method, headers: HeaderMap| {
            let server = server.clone();
            async move { server.answer(method, headers).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(me)
    }

    async fn answer(&self, method: Method, headers: HeaderMap) -> (StatusCode, String) {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let Some(pod) = self.pod_behind(host).await else {
            return (StatusCode::NOT_FOUND, String::new());
        };
        let answer = {
            let mut state = self.state();
            state
                .calls
                .push((method.to_string(), pod.clone(), Instant::now()));
            if method == Method::POST {
                // The pod acts on the call as soon as it gets it, however it answers.
                state.prepared.insert(pod.clone(), true);
                let now = jiff::Timestamp::now().as_second();
                state.prepared_at.entry(pod.clone()).or_insert(now);
            }
            state
                .answers
                .get(&(pod.clone(), method.to_string()))
                .or_else(|| state.defaults.get(method.as_str()))
                .cloned()
                .unwrap_or_else(|| Answer::Ok("ok".into()))
        };
        let (status, body) = match answer {
            Answer::Ok(body) => (StatusCode::OK, body),
            Answer::Status(code) => (
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                String::new(),
            ),
            Answer::Late(delay, body) => {
                tokio::time::sleep(delay).await;
                (StatusCode::OK, body)
            }
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                (StatusCode::OK, String::new())
            }
            Answer::PreparedAt => {
                let at = self.state().prepared_at.get(&pod).copied().unwrap_or(0);
                (StatusCode::OK, format!("{{\"timestamp\": {at}}}"))
            }
        };
        if method == Method::DELETE && status.is_success() {
            let mut state = self.state();
            state.prepared.insert(pod.clone(), false);
            state.prepared_at.remove(&pod);
        }
        (status, body)
    }

    async fn pod_behind(&self, host: &str) -> Option<String> {
        pod_behind(&self.pods, &self.namespace, host).await
    }

    /// The shared state; a test that panicked while holding it leaves it usable.
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How `pod` answers `method` from now on.
    pub fn set(&self, pod: &str, method: &str, answer: Answer) {
        self.state()
            .answers
            .insert((pod.to_string(), method.to_string()), answer);
    }

    /// How every pod without an answer of its own answers `method` from now on.
    pub fn set_default(&self, method: &str, answer: Answer) {
        self.state().defaults.insert(method.to_string(), answer);
    }

    /// The pods prepared now (POST received, no answered DELETE since).
    pub fn prepared(&self) -> Vec<String> {
        let state = self.state();
        state
            .prepared
            .iter()
            .filter(|(_, p)| **p)
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// How many times `method` reached `pod`.
    pub fn count(&self, method: &str, pod: &str) -> usize {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|(m, p, _)| m == method && p == pod)
            .count()
    }

    /// When `method` first reached a pod whose name starts with `prefix`.
    pub fn first_call(&self, method: &str, prefix: &str) -> Option<Instant> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|(m, p, _)| m == method && p.starts_with(prefix))
            .map(|(_, _, at)| *at)
            .min()
    }

    /// Every call so far: (method, pod).
    pub fn calls(&self) -> Vec<(String, String)> {
        self.state()
            .calls
            .iter()
            .map(|(m, p, _)| (m.clone(), p.clone()))
            .collect()
    }
}

/// The pod of `namespace` a call's Host header names: by its IP (looked up among the namespace's
/// pods now: Strata calls pods at their own address), or by a DNS name
/// `<pod>.<service>.<namespace>.svc…` (the anchor's form). `None` for another namespace's.
pub async fn pod_behind(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    namespace: &str,
    host: &str,
) -> Option<String> {
    let bare = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        let listed = pods.list(&Default::default()).await.ok()?;
        return listed.items.into_iter().find_map(|p| {
            let pod_ip: std::net::IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            (ip == pod_ip).then(|| p.metadata.name.clone().unwrap_or_default())
        });
    }
    let mut labels = host.split('.');
    let pod = labels.next().unwrap_or_default().to_string();
    (labels.nth(1) == Some(namespace)).then_some(pod)
}
