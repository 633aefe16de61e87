//! Start-up and shutdown of a service: everything between `main` and the service's controllers.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Readiness};
use crate::api_client::ApiClientMetrics;
use crate::api_client::{Instrumentation, InstrumentationLayer, RateLimiter};
use crate::apply::Applier;
use crate::events::EventPublisher;
use crate::http_metrics::HttpMetrics;
use crate::leader::{self, Leadership, LeaseConfig};
use crate::metrics::ControllerMetrics;
use crate::shutdown::{self, Sequence, Stage};
use crate::telemetry::{self, Telemetry};
use crate::{CommonArgs, Error, Result};

/// What a service's controllers share.
pub struct Context {
    /// The service name, e.g. `rollout-operator`.
    pub service: String,
    pub client: Client,
    pub args: CommonArgs,
    pub metrics: ControllerMetrics,
    pub leadership: Leadership,
    pub readiness: Readiness,
    /// Cancelled when the process is asked to stop; controllers stop on it.
    pub shutdown: CancellationToken,
    pub applier: Applier,
    pub events: EventPublisher,
    /// The HTTP server and pod-call metrics, shared by every server of the process.
    pub http_metrics: HttpMetrics,
    /// What [`Context::dedicated_client`] builds from.
    client_parts: ClientParts,
    /// Impersonating clients of the users acted as most recently (see
    /// [`Context::impersonating_client`]).
    impersonating: std::sync::Mutex<Recent<Client>>,
}

/// How many impersonating clients are kept. Each holds a request queue of its own (about
/// 10 KiB: kube's client buffers requests for its service), so a client per account of a
/// thousand-layer fleet was 11 MiB of the drift-observer's heap and as much of the
/// layer-controller's. Far more than the users in use at once (`--concurrent` reconciles,
/// the observer's workers): a user acted as again soon finds its client.
const IMPERSONATING_CLIENTS: usize = 64;

/// The values of the `capacity` keys used most recently; the least recently used is dropped
/// to make room.
#[derive(Debug)]
struct Recent<V> {
    entries: std::collections::HashMap<String, (V, u64)>,
    tick: u64,
    capacity: usize,
}

impl<V: Clone> Recent<V> {
    fn new(capacity: usize) -> Self {
        Self {
            entries: Default::default(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    /// The value of `key`, made by `make` when it is not kept.
    fn get_or_make<E>(&mut self, key: &str, make: impl FnOnce() -> Result<V, E>) -> Result<V, E> {
        self.tick += 1;
        if let Some((value, used)) = self.entries.get_mut(key) {
            *used = self.tick;
            return Ok(value.clone());
        }
        let value = make()?;
        if self.entries.len() >= self.capacity
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
        self.entries
            .insert(key.to_string(), (value.clone(), self.tick));
        Ok(value)
    }
}

/// A client's configuration and the instrumentation of its requests.
#[derive(Clone)]
struct ClientParts {
    config: kube::Config,
    metrics: ApiClientMetrics,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("service", &self.service)
            .field("leader", &self.leadership.is_leader())
            .finish()
    }
}

impl Context {
    /// The field manager for server-side apply and the Events' reporting controller.
    pub fn field_manager(&self) -> String {
        field_manager(&self.service)
    }
}

/// `rollout-operator` → `strata-rollout-operator`.
pub fn field_manager(service: &str) -> String {
    format!("strata-{service}")
}

/// A started service: telemetry, client, admin server and (optionally) the leader election.
#[derive(Debug)]
pub struct Runtime {
    parts: StartParts,
    telemetry: Telemetry,
}

impl Runtime {
    /// Starts the shared runtime. `registry` already holds the service's own metrics.
    pub async fn start(service: &str, args: CommonArgs, mut registry: Registry) -> Result<Self> {
        let mut telemetry = telemetry::init(service, args.log_format, &args.log_filter)?;
        match Self::start_inner(service, args, &mut registry).await {
            Ok(parts) => Ok(Self { parts, telemetry }),
            Err(e) => {
                tracing::error!(error = %e, "start-up failed");
                telemetry.shutdown();
                Err(e)
            }
        }
    }

    async fn start_inner(
        service: &str,
        args: CommonArgs,
        registry: &mut Registry,
    ) -> Result<StartParts> {
        if args.client_qps > 0.0 && args.client_burst < 1 {
            return Err(Error::InvalidFlag {
                flag: "--client-burst",
                reason: "must be at least 1 when --client-qps is greater than 0, since each request consumes one token".into(),
            });
        }
        let prefix = crate::metrics::metric_prefix(service);
        let mut config = crate::client::config(&args).await?;
        // Named in the API server's audit log and request metrics as `strata-<service>/<version>`
        // (client-go names its binaries the same way); without it every request is anonymous.
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(&user_agent(service)).map_err(|_| Error::InvalidFlag {
                flag: "service",
                reason: format!("{service:?} is not a valid User-Agent"),
            })?,
        ));
        let client_parts = ClientParts {
            config,
            metrics: ApiClientMetrics::register(&prefix, registry),
        };
        let client = client_parts.build(&args)?;
        let http_metrics = HttpMetrics::register(&prefix, registry);
        let metrics = ControllerMetrics::register(service, registry);
        let registry = Arc::new(std::mem::take(registry));
        let readiness = Readiness::default();
        let shutdown = CancellationToken::new();
        shutdown::cancel_on_signal(shutdown.clone());

        let admin_stop = CancellationToken::new();
        let (admin_address, admin_task) = admin::serve(
            args.admin_address,
            registry,
            http_metrics.clone(),
            readiness.clone(),
            admin_stop.clone(),
        )
        .await?;

        let identity = args.identity();
        let lease_stop = CancellationToken::new();
        let (leadership, lease_task) = if args.leader_elect {
            let config = LeaseConfig {
                service: service.to_string(),
                lease: args
                    .lease_name
                    .clone()
                    .filter(|name| !name.is_empty())
                    .unwrap_or_else(|| leader::lease_name(service)),
                namespace: args.lease_namespace(),
                identity: identity.clone(),
                duration: args.lease_duration,
            };
            tracing::info!(lease = %config.lease, namespace = %config.namespace, %identity, "contending for leadership");
            let (leadership, task) = leader::elect(
                client.clone(),
                config,
                metrics.leader.clone(),
                lease_stop.clone(),
            )
            .await?;
            (leadership, Some(task))
        } else {
            metrics.leader.set(1);
            (Leadership::always(), None)
        };

        let manager = field_manager(service);
        let ctx = Context {
            service: service.to_string(),
            applier: Applier::new(client.clone(), manager.clone()),
            events: EventPublisher::new(client.clone(), &manager, &identity),
            client,
            args,
            metrics,
            leadership,
            readiness,
            shutdown,
            http_metrics,
            client_parts,
            impersonating: std::sync::Mutex::new(Recent::new(IMPERSONATING_CLIENTS)),
        };
        Ok(StartParts {
            ctx: Arc::new(ctx),
            admin_address,
            admin_task,
            admin_stop,
            lease_task,
            lease_stop,
        })
    }

    pub fn context(&self) -> Arc<Context> {
        self.parts.ctx.clone()
    }

    pub fn admin_address(&self) -> SocketAddr {
        self.parts.admin_address
    }

    /// Runs the service's controllers until a shutdown signal, then stops in order:
    /// controllers, Lease, admin server, traces. Returns an error if the controllers ended on
    /// their own (a service must run until asked to stop).
    pub async fn run(self, controllers: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let Runtime {
            parts:
                StartParts {
                    ctx,
                    admin_address,
                    admin_task,
                    admin_stop,
                    lease_task,
                    lease_stop,
                },
            mut telemetry,
        } = self;
        let mut controllers = tokio::spawn(controllers);
        // `biased`: when both are ready (the signal stopped the controllers already), the
        // signal wins, so a requested shutdown is never reported as an early end.
        let ended_early = tokio::select! {
            biased;
            _ = ctx.shutdown.cancelled() => false,
            _ = &mut controllers => true,
        };
        ctx.shutdown.cancel();

        let mut sequence = Sequence::default();
        if !ended_early {
            sequence.add(Stage::StopControllers, "controllers", async move {
                let _ = controllers.await;
            });
        }
        if let Some(task) = lease_task {
            sequence.add(Stage::ReleaseLease, "lease", async move {
                lease_stop.cancel();
                let _ = task.await;
            });
        }
        sequence.add(Stage::DrainHttp, "admin", async move {
            admin_stop.cancel();
            let _ = admin_task.await;
        });
        let outcomes = sequence.run().await;
        for outcome in outcomes.iter().filter(|o| !o.finished) {
            tracing::warn!(stage = ?outcome.stage, step = outcome.name, "abandoned at shutdown");
        }
        tracing::info!(service = %ctx.service, admin = %admin_address, "stopped");
        // Flushing traces last, so the shutdown itself is traced.
        let _ = tokio::time::timeout(
            Stage::FlushTelemetry.budget(),
            tokio::task::spawn_blocking(move || telemetry.shutdown()),
        )
        .await;
        if ended_early {
            return Err(Error::Admin {
                address: admin_address.to_string(),
                reason: "controllers stopped before shutdown was requested".into(),
            });
        }
        Ok(())
    }
}

#[derive(Debug)]
struct StartParts {
    ctx: Arc<Context>,
    admin_address: SocketAddr,
    admin_task: JoinHandle<()>,
    admin_stop: CancellationToken,
    lease_task: Option<JoinHandle<()>>,
    lease_stop: CancellationToken,
}

/// The User-Agent of a service's requests: `strata-<service>/<version>`.
fn user_agent(service: &str) -> String {
    format!("strata-{service}/{}", env!("CARGO_PKG_VERSION"))
}

impl ClientParts {
    /// A client whose requests are rate-limited by their own token buckets, labelled and
    /// timed (see [`crate::api_client`]).
    fn build(&self, args: &CommonArgs) -> Result<Client> {
        let cluster = match args.cluster_validation_label.as_deref() {
            None | Some("") => None,
            Some(label) => {
                Some(
                    http::HeaderValue::from_str(label).map_err(|_| Error::InvalidFlag {
                        flag: "--cluster-validation-label",
                        reason: format!("{label:?} is not a valid HTTP header value"),
                    })?,
                )
            }
        };
        let layer = InstrumentationLayer(Arc::new(Instrumentation {
            metrics: self.metrics.clone(),
            limiter: RateLimiter::new(args.client_qps, args.client_burst),
            cluster,
            // One cap per client: the impersonating clients send through the main one.
            in_flight: (args.client_max_in_flight > 0)
                .then(|| Arc::new(tokio::sync::Semaphore::new(args.client_max_in_flight))),
        }));
        // One retry mechanism, ours: it takes a token per attempt and counts it.
        let mut config = self.config.clone();
        config.default_retry = false;
        let builder = kube::client::ClientBuilder::try_from(config)
            .map_err(|e| Error::Kubeconfig(format!("building client: {e}")))?;
        Ok(builder
            .with_layer(&tower::buffer::BufferLayer::new(1024))
            .with_layer(&layer)
            .build())
    }
}

impl Context {
    /// A client with its own rate-limit buckets (same flags, same metrics): work that must
    /// not queue behind the controllers' requests, such as admission decisions, uses one.
    pub fn dedicated_client(&self) -> Result<Client> {
        self.client_parts.build(&self.args)
    }

    /// A client that acts as `user` through Kubernetes impersonation: every request carries
    /// `Impersonate-User`, so the API server authorizes it as that user. It sends through the
    /// process's own client — one connection pool, one set of rate-limit buckets and request
    /// metrics for every user — so a thousand layers acting as a thousand accounts hold the
    /// connections of one client, not of a thousand. The clients of the users acted as most
    /// recently are kept ([`IMPERSONATING_CLIENTS`]). The process's own identity needs the
    /// `impersonate` verb on that user.
    pub fn impersonating_client(&self, user: &str) -> Result<Client> {
        self.impersonating
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_make(user, || impersonating(&self.client, user))
    }

    /// The HTTP client for pod endpoints, timed in `metrics` (which the service registered:
    /// only services that call pods have them) and carrying `--cluster-validation-label`.
    pub fn pod_http(
        &self,
        timeout: std::time::Duration,
        address_override: Option<String>,
        metrics: crate::http_metrics::PodCallMetrics,
    ) -> crate::pod_http::PodHttp {
        crate::pod_http::PodHttp::new(timeout, address_override)
            .instrumented(metrics, self.args.cluster_validation_label.clone())
    }

    /// One Api per namespace of `--watch-namespace` for a namespaced kind, or one for all
    /// namespaces when none is set; each with its namespace (`None`: all).
    pub fn watched_apis<K>(&self) -> Vec<(Option<String>, kube::Api<K>)>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        self.scoped(|ns| match ns {
            Some(ns) => kube::Api::namespaced(self.client.clone(), ns),
            None => kube::Api::all(self.client.clone()),
        })
    }

    /// [`Context::watched_apis`] for a kind known only at run time.
    pub fn watched_apis_with(
        &self,
        resource: &kube::core::ApiResource,
    ) -> Vec<(Option<String>, kube::Api<kube::api::DynamicObject>)> {
        self.scoped(|ns| match ns {
            Some(ns) => kube::Api::namespaced_with(self.client.clone(), ns, resource),
            None => kube::Api::all_with(self.client.clone(), resource),
        })
    }

    fn scoped<T>(&self, make: impl Fn(Option<&str>) -> T) -> Vec<(Option<String>, T)> {
        match self.args.watch_namespaces().as_slice() {
            [] => vec![(None, make(None))],
            namespaces => namespaces
                .iter()
                .map(|ns| (Some(ns.to_string()), make(Some(ns))))
                .collect(),
        }
    }
}

/// A client sending every request through `base` as `user` (the `Impersonate-User` header,
/// replacing any the request carried).
pub fn impersonating(base: &Client, user: &str) -> Result<Client> {
    let value = http::HeaderValue::from_str(user).map_err(|_| Error::InvalidFlag {
        flag: "impersonated user",
        reason: format!("{user:?} is not a valid HTTP header value"),
    })?;
    let base = base.clone();
    let default_namespace = base.default_namespace().to_string();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let base = base.clone();
        request
            .headers_mut()
            .insert("impersonate-user", value.clone());
        async move { base.send(request).await }
    });
    Ok(Client::new(service, default_namespace))
}

/// The whole life of a service binary: start the runtime with the service's metrics, run the
/// controllers `body` builds from the context, stop gracefully on SIGTERM/SIGINT.
pub async fn run_service<F, Fut>(
    service: &str,
    args: CommonArgs,
    registry: Registry,
    body: F,
) -> Result<()>
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runtime = Runtime::start(service, args, registry).await?;
    let controllers = body(runtime.context());
    runtime.run(controllers).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A base client over a stand-in API server that answers every request with the
    /// `Impersonate-User` it received, counting requests.
    fn recording_base(seen: Arc<std::sync::atomic::AtomicUsize>) -> Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let user = request
                .headers()
                .get_all("impersonate-user")
                .iter()
                .map(|v| v.to_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
                .join(",");
            let body =
                serde_json::json!({"major": "1", "minor": "34", "gitVersion": user}).to_string();
            async move {
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    body.into_bytes(),
                )))
            }
        });
        Client::new(service, "default")
    }

    #[test]
    fn only_the_most_recently_used_clients_are_kept() {
        let mut recent: Recent<u32> = Recent::new(2);
        let mut made = 0;
        let mut get = |recent: &mut Recent<u32>, key: &str| {
            recent
                .get_or_make(key, || {
                    made += 1;
                    Ok::<_, ()>(made)
                })
                .unwrap()
        };
        assert_eq!(get(&mut recent, "a"), 1);
        assert_eq!(get(&mut recent, "b"), 2);
        assert_eq!(get(&mut recent, "a"), 1, "kept: not made again");
        assert_eq!(get(&mut recent, "c"), 3);
        assert_eq!(recent.entries.len(), 2);
        // b was the least recently used: dropped; a and c stay.
        assert_eq!(get(&mut recent, "a"), 1);
        assert_eq!(get(&mut recent, "c"), 3);
        assert_eq!(get(&mut recent, "b"), 4, "made again");
        assert!(!recent.entries.contains_key("a"), "a was then the oldest");
        // A failure to make keeps nothing.
        assert!(recent.get_or_make("d", || Err::<u32, _>("no")).is_err());
        assert!(!recent.entries.contains_key("d"));
    }

    #[tokio::test]
    async fn impersonating_clients_send_through_the_base_client_as_their_user() {
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let base = recording_base(seen.clone());
        let alice = impersonating(&base, "system:serviceaccount:team:alice").unwrap();
        let bob = impersonating(&base, "system:serviceaccount:team:bob").unwrap();
        assert_eq!(
            alice.apiserver_version().await.unwrap().git_version,
            "system:serviceaccount:team:alice"
        );
        assert_eq!(
            bob.apiserver_version().await.unwrap().git_version,
            "system:serviceaccount:team:bob"
        );
        // The base itself still acts as the process.
        assert_eq!(base.apiserver_version().await.unwrap().git_version, "");
        // Every request went through the one base service (its pool, its limits).
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 3);
        // A request that already names a user is sent as the client's user alone.
        let forged = http::Request::get("/version")
            .header("impersonate-user", "system:admin")
            .body(kube::client::Body::empty())
            .unwrap();
        let answer = alice.send(forged).await.unwrap();
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .unwrap()
            .to_bytes();
        let info: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(info["gitVersion"], "system:serviceaccount:team:alice");
        assert!(impersonating(&base, "bad\nuser").is_err());
    }
}
