//! The HTTPS admission server: every replica serves, no leadership needed. Decisions come
//! from [`crate::webhooks`]; this shell reads what they need from the API server, performs
//! the prepare-downscale calls and patch, and answers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use core_k8s::apply::typed_value;
use core_k8s::labels::LabelSelector;
use core_k8s::pod_http::PodHttp;
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use serde_json::Value;

use crate::downscale_record;
use crate::evictions;
use crate::metrics::{Metrics, Outcome};
use crate::prepared::{self, PreparedPod};
use crate::review::{Decision, Review};
use crate::webhooks::{Cluster, Webhook, ZoneTracker, decide};
use core_rollout::observed::Observed;

/// How long a handler may take by default: under kube-apiserver's default 10 s webhook timeout.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(9);

/// The decision deadline for a request budget: 90 % of it, as the anchor does, leaving time
/// to answer before the caller gives up.
pub fn handler_timeout(request_timeout: Duration) -> Duration {
    request_timeout.mul_f64(0.9)
}

/// Shared by the handlers.
#[derive(Clone)]
pub struct App {
    pub client: Client,
    /// Pod calls (with the test-only address override, if any).
    pub http: PodHttp,
    /// Zone-tracker mode: where the ConfigMaps holding downscale times live.
    pub zone_tracker: Option<core_admission::webhooks::ZoneTrackerPlace>,
    pub metrics: Metrics,
    /// Decision deadline ([`handler_timeout`]); past it the request is denied with code 500.
    pub handler_timeout: Duration,
    /// Request counts, latencies and sizes by route (shared with the admin server).
    pub http_metrics: core_k8s::http_metrics::HttpMetrics,
    /// The layer-controller's defaults (who an AddonsLayer acts as).
    pub layer_defaults: crate::webhooks::LayerDefaults,
    /// `--namespace-selector`: the namespaces each listed webhook acts in.
    pub namespace_selectors: BTreeMap<Webhook, LabelSelector>,
    /// Every AddonsLayer, from a watch the first layer review starts (an install without the
    /// CRD never watches it).
    pub layers: tokio::sync::OnceCell<(Store<DynamicObject>, tokio::sync::watch::Receiver<bool>)>,
    /// Downscales admitted whose time is not recorded on their StatefulSet yet.
    pub pending_downscales: downscale_record::PendingDownscales,
    /// What eviction decisions read, from watches.
    pub eviction_cache: crate::eviction_cache::EvictionCache,
}

/// How long a layer review waits for the layer cache's first full list before it is answered
/// 500 (a watch that keeps failing must not hold every review until kube-apiserver's timeout).
const LAYER_CACHE_WAIT: Duration = Duration::from_secs(3);

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("zone_tracker", &self.zone_tracker)
            .finish_non_exhaustive()
    }
}

/// HTTP 400: the body is not an AdmissionReview.
fn bad_request(message: String) -> (Response, Outcome) {
    (
        (StatusCode::BAD_REQUEST, message).into_response(),
        Outcome::invalid,
    )
}

async fn handle(app: Arc<App>, webhook: Webhook, headers: HeaderMap, body: Bytes) -> Response {
    use tracing::Instrument as _;
    use tracing::field::Empty;
    let started = Instant::now();
    // One span per review, with what users search by: the webhook, the object, the decision.
    let span = tracing::info_span!(
        "admission.review",
        webhook = webhook.name(),
        object = Empty,
        operation = Empty,
        decision = Empty,
        reason = Empty,
    );
    let (response, outcome) = answer(&app, webhook, &headers, &body)
        .instrument(span.clone())
        .await;
    span.record("decision", format!("{outcome:?}"));
    app.metrics
        .observe(webhook, outcome, started.elapsed().as_secs_f64());
    response
}

/// `Kind namespace/name` of a review's object, for its span.
fn reviewed_object(request: &serde_json::Value) -> String {
    let field = |path: &[&str]| {
        path.iter()
            .try_fold(request, |v, k| v.get(*k))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let kind = field(&["kind", "kind"]);
    let name = field(&["name"]);
    match field(&["namespace"]) {
        ns if ns.is_empty() => format!("{kind} {name}"),
        ns => format!("{kind} {ns}/{name}"),
    }
}

async fn answer(
    app: &App,
    webhook: Webhook,
    headers: &HeaderMap,
    body: &[u8],
) -> (Response, Outcome) {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type != "application/json" {
        return bad_request(format!(
            "wrong content type {content_type:?}, expected application/json"
        ));
    }
    let review = match Review::parse_reading(body, webhook.reads()) {
        Ok(review) => review,
        Err(e) => return bad_request(format!("invalid AdmissionReview: {e}")),
    };
    let span = tracing::Span::current();
    span.record("object", reviewed_object(&review.request));
    if let Some(operation) = review.request.get("operation").and_then(|o| o.as_str()) {
        span.record("operation", operation);
    }
    let (decision, outcome) =
        match tokio::time::timeout(app.handler_timeout, review_live(app, webhook, &review)).await {
            Ok(decision) if decision.allowed => (decision, Outcome::allowed),
            Ok(decision) => (decision, Outcome::denied),
            Err(_) => {
                if webhook == Webhook::PodEviction {
                    app.metrics.zpdb.observe_eviction("timeout", 500);
                }
                (
                    Decision::deny_with_code(500, "timed out deciding"),
                    Outcome::timeout,
                )
            }
        };
    if let Some(message) = &decision.message {
        span.record("reason", message.as_str());
    }
    (
        axum::Json(review.respond(&decision)).into_response(),
        outcome,
    )
}

/// Reads what the webhook needs, decides, and performs its side effects.
async fn review_live(app: &App, webhook: Webhook, review: &Review) -> Decision {
    // In flight from here until answered or abandoned at the deadline.
    struct InFlight<'a>(Option<&'a prometheus_client::metrics::gauge::Gauge>);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if let Some(gauge) = self.0 {
                gauge.dec();
            }
        }
    }
    let _in_flight = InFlight((webhook == Webhook::PodEviction).then(|| {
        app.metrics.zpdb.inflight_evictions.inc();
        &app.metrics.zpdb.inflight_evictions
    }));
    let namespace = review.field("namespace").to_string();
    // kube-apiserver calls a webhook only for namespaces its configuration selects; a review
    // for another one is forged, and gets no read, call or record.
    if let Some(selector) = app.namespace_selectors.get(&webhook)
        && !namespace.is_empty()
    {
        match namespace_selected(app, &namespace, selector).await {
            Ok(true) => {}
            Ok(false) => {
                return Decision::allow_with_message(format!(
                    "namespace {namespace} is not selected by the {} webhook ({selector}): nothing checked, called or recorded",
                    webhook.name()
                ));
            }
            Err(why) => {
                return Decision::deny_with_code(
                    500,
                    format!("{why}; nothing was decided, try again"),
                );
            }
        }
    }
    // `Some` for a downscale: the start of every no-downscale/prepare-downscale message.
    let downscale = crate::webhooks::downscale_prefix(review);
    // The downscales admitted but not yet recorded, taken before the cluster is read: an entry
    // is dropped only after its time was written, so either it is here or the read below
    // already shows the written time. Taken after the read, a time written in between would
    // be in neither.
    let pending = (webhook == Webhook::PrepareDownscale && app.zone_tracker.is_none())
        .then(|| app.pending_downscales.in_namespace(&namespace));
    let state = match read_state(app, webhook, review, downscale.is_some()).await {
        Ok(state) => state,
        // Fail closed: a decision on a partial read (no pods listed, say) would skip the very
        // checks or calls the webhook exists for. 500 tells the caller to retry.
        Err(why) => {
            tracing::warn!(webhook = webhook.name(), error = %why, "reading the cluster failed");
            if webhook == Webhook::PodEviction {
                app.metrics
                    .zpdb
                    .observe_eviction("err: sts-pod-status-not-determined", 500);
            }
            return Decision::deny_with_code(
                500,
                format!(
                    "{} {namespace}/{}: {why}; nothing was decided, try again",
                    review
                        .request
                        .pointer("/kind/kind")
                        .and_then(Value::as_str)
                        .unwrap_or("object"),
                    review.field("name")
                ),
            );
        }
    };
    let mut cluster = Cluster::new(state);
    cluster.layer_defaults = app.layer_defaults.clone();
    if webhook == Webhook::AddonsLayerValidation
        && let Some(account) = crate::webhooks::impersonation_asked(review, &app.layer_defaults)
    {
        match may_impersonate(app, review, &account).await {
            Ok(answer) => cluster.impersonation = Some(answer),
            // Unknown is not allowed: the layer would act as an account nobody vouched for.
            Err(e) => {
                return Decision::deny_with_code(
                    500,
                    format!(
                        "AddonsLayer {}: could not check whether the author may act as {account}: {e}",
                        review.field("name")
                    ),
                );
            }
        }
    }
    let mut tracked = None;
    if let Some(place) = &app.zone_tracker
        && webhook == Webhook::PrepareDownscale
        && let Some(prefix) = &downscale
    {
        let config_map = place.config_map_for(&namespace);
        let api: Api<ConfigMap> = Api::namespaced(app.client.clone(), &place.namespace);
        match api.get_opt(&config_map).await {
            Ok(found) => {
                cluster.zone_tracker = Some(ZoneTracker {
                    namespace: place.namespace.clone(),
                    config_map,
                    data: found.as_ref().map(|c| c.data.clone().unwrap_or_default()),
                });
                tracked = Some(found);
            }
            Err(e) => {
                tracing::warn!(error = %e, config_map = %format!("{}/{config_map}", place.namespace), "reading the zone-tracker ConfigMap failed");
                return Decision::deny(format!(
                    "{prefix} is not allowed because reading the zone ConfigMap failed."
                ));
            }
        }
    }
    if webhook == Webhook::PodEviction {
        let (decision, reason) =
            crate::webhooks::pod_eviction_with_reason(review, &cluster, jiff::Timestamp::now());
        let (decision, reason) = if decision.allowed {
            // Allowed on what was read; now decided again against every eviction recorded
            // by anyone, and recorded, so concurrent evictions cannot both use one budget.
            // This server's claims in a namespace go one at a time, each deciding on the
            // holders as its predecessors' writes left them: a burst of reviews for one budget
            // then costs one write for the eviction allowed, not a conflict and a re-read for
            // each of the others (under a client-side rate limit those queue until
            // kube-apiserver gives up on the webhook).
            let pod = review.field("name");
            let mut claims = app.eviction_cache.claims(&namespace).await;
            claims.overlay(&mut cluster.state.stateful_sets);
            match evictions::claim(&app.client, &namespace, pod, cluster.state, None, &[]).await {
                Ok((_, written)) => {
                    claims.wrote(written);
                    (decision, reason)
                }
                Err(refusal) => {
                    let denial = refusal.into_denial();
                    (
                        Decision::deny_with_code(denial.code, denial.message),
                        denial.reason,
                    )
                }
            }
        } else {
            (decision, reason)
        };
        app.metrics
            .zpdb
            .observe_eviction(reason, decision.code.unwrap_or(200));
        return decision;
    }
    if let Some(pending) = pending {
        cluster.pending_downscales = pending;
    }
    let decision = decide(webhook, review, &cluster, jiff::Timestamp::now());
    if webhook == Webhook::PrepareDownscale
        && decision.allowed
        && !decision.side_effects.is_empty()
        && let Some(prefix) = &downscale
    {
        return prepare_detached(app, review, prefix, decision, tracked).await;
    }
    decision
}

/// Reads what `webhook` decides on, fresh from the API server. `Err` names what could not be
/// read; a missing object is not an error (the decision says what it means).
async fn read_state(
    app: &App,
    webhook: Webhook,
    review: &Review,
    is_downscale: bool,
) -> Result<Observed, String> {
    let namespace = review.field("namespace");
    let name = review.field("name");
    let mut state = Observed::default();
    match webhook {
        // Not a downscale (an upscale, or no replica change): decided from the request alone,
        // so none of the reads below are paid for it.
        Webhook::NoDownscale | Webhook::PrepareDownscale if !is_downscale => {}
        // A downscale of the object itself carries its labels in `oldObject`; only a `/scale`
        // request needs its parent, read by name (never a LIST per review).
        Webhook::NoDownscale if !crate::webhooks::needs_parent(review) => {}
        Webhook::NoDownscale => {
            let resource = review
                .request
                .pointer("/resource/resource")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let failed =
                |e: kube::Error| format!("reading {resource} {namespace}/{name} failed: {e}");
            if resource == "statefulsets" {
                let sts: Api<StatefulSet> = Api::namespaced(app.client.clone(), namespace);
                state
                    .stateful_sets
                    .extend(sts.get_opt(name).await.map_err(failed)?);
            } else if let Some(kind) = crate::webhooks::scaled_kind(resource) {
                let ar = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("apps", "v1", kind),
                    resource,
                );
                let api: Api<DynamicObject> =
                    Api::namespaced_with(app.client.clone(), namespace, &ar);
                if let Some(object) = api.get_opt(name).await.map_err(failed)?
                    && let Some(value) = typed_value(&object, &ar)
                {
                    state.references.push(value);
                }
            }
        }
        Webhook::PrepareDownscale => {
            // Every StatefulSet (the rollout group's zones) and every pod (only pods the
            // StatefulSet owns are called): without either list the decision would be blind.
            let sts: Api<StatefulSet> = Api::namespaced(app.client.clone(), namespace);
            state.stateful_sets = sts
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the StatefulSets of {namespace} failed: {e}"))?
                .items;
            let pods: Api<Pod> = Api::namespaced(app.client.clone(), namespace);
            state.pods = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the pods of {namespace} failed: {e}"))?
                .items;
        }
        // Pods, StatefulSets and budgets from the namespace's watches, or read fresh while
        // they cannot be trusted (see `eviction_cache`).
        Webhook::PodEviction => {
            state = match app.eviction_cache.observed(&app.client, namespace).await {
                Some(watched) => watched,
                None => evictions::list(&app.client, namespace).await?,
            }
        }
        Webhook::ZpdbValidation => {}
        Webhook::AddonsLayerValidation => {
            // Every layer (a dependency cycle through a layer left out would pass), from the
            // watch's cache: a LIST of every layer per review would let anyone able to send
            // reviews make kube-apiserver serve the whole set again and again.
            let ar = ApiResource::erase::<core_layers::crd::AddonsLayer>(&());
            state.references = layer_cache(app)
                .await?
                .state()
                .iter()
                .filter_map(|l| typed_value(l, &ar))
                .collect();
        }
    }
    Ok(state)
}

/// Whether `namespace`'s labels match `selector` (a namespace that does not exist matches
/// nothing: kube-apiserver has no object there to review).
async fn namespace_selected(
    app: &App,
    namespace: &str,
    selector: &LabelSelector,
) -> Result<bool, String> {
    let api: Api<Namespace> = Api::all(app.client.clone());
    let found = api
        .get_opt(namespace)
        .await
        .map_err(|e| format!("reading namespace {namespace} failed: {e}"))?;
    Ok(found.is_some_and(|n| selector.matches(&n.metadata.labels.unwrap_or_default())))
}

/// The AddonsLayer cache, started on first use and awaited until it holds the first list.
async fn layer_cache(app: &App) -> Result<&Store<DynamicObject>, String> {
    let (store, listed) = app
        .layers
        .get_or_init(|| async { watch_layers(app.client.clone()) })
        .await;
    let mut listed = listed.clone();
    match tokio::time::timeout(LAYER_CACHE_WAIT, listed.wait_for(|done| *done)).await {
        Ok(Ok(_)) => Ok(store),
        _ => Err(format!(
            "the AddonsLayer cache holds no full list yet (watching AddonsLayers: see the server's log) after {LAYER_CACHE_WAIT:?}"
        )),
    }
}

/// Watches every AddonsLayer into a store, for as long as the process runs; the receiver
/// turns true once the first list is in (`when_synced`: reviews waiting on the store itself
/// would all but one sit out the whole wait, and be answered 500).
fn watch_layers(client: Client) -> (Store<DynamicObject>, tokio::sync::watch::Receiver<bool>) {
    let ar = ApiResource::erase::<core_layers::crd::AddonsLayer>(&());
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let events = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(events.for_each(|event| {
        if let Err(e) = event {
            tracing::warn!(error = %e, "watching AddonsLayers (retrying)");
        }
        std::future::ready(())
    }));
    let listed = core_k8s::controller::when_synced(reader.clone());
    (reader, listed)
}

/// Asks the API server (a SubjectAccessReview) whether the user who sent `review` may
/// impersonate `account` — the right the layer would exercise on their behalf.
async fn may_impersonate(
    app: &App,
    review: &Review,
    account: &core_layers::objects::ActingAccount,
) -> Result<crate::webhooks::Impersonation, kube::Error> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let requester = crate::webhooks::Requester::of(review);
    let request = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(requester.username),
            uid: Some(requester.uid).filter(|u| !u.is_empty()),
            groups: Some(requester.groups),
            extra: Some(requester.extra),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(account.namespace.clone()),
                verb: Some("impersonate".into()),
                resource: Some("serviceaccounts".into()),
                name: Some(account.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(app.client.clone());
    let answer = api.create(&PostParams::default(), &request).await?;
    let status = answer.status.unwrap_or_default();
    Ok(crate::webhooks::Impersonation {
        allowed: status.allowed,
        reason: status.reason.unwrap_or_default(),
    })
}

/// Runs [`prepare`] in a task of its own. The handler's deadline drops the handler's future
/// and answers "timed out"; a dropped future would stop half-way. The task outlives the
/// handler: it sees that nobody waits for its decision any more and skips recording the
/// downscale. Its pods stay marked, and the undo loop ([`prepared::run`]) tells them to undo
/// once the request is settled if their StatefulSet still wants them (under `failurePolicy:
/// Ignore` a timed-out downscale still happens, and then they must stay prepared).
async fn prepare_detached(
    app: &App,
    review: &Review,
    prefix: &str,
    decision: Decision,
    tracked: Option<Option<ConfigMap>>,
) -> Decision {
    let (answer, decided) = tokio::sync::oneshot::channel();
    let (app, review, prefix) = (app.clone(), review.clone(), prefix.to_string());
    tokio::spawn(async move {
        let decision = prepare(&app, &review, &prefix, decision, tracked, &|| {
            answer.is_closed()
        })
        .await;
        if let Err(decision) = answer.send(decision)
            && decision.allowed
        {
            // Prepared and recorded just as the deadline passed. Whether the downscale happens
            // now depends on the configuration's failurePolicy (Ignore lets it through), so
            // the pods keep their marks and the undo loop judges by the replicas it sees.
            tracing::warn!(
                "prepare-downscale answered too late; the undo loop will tell the pods to undo if the downscale does not happen"
            );
        }
    });
    decided
        .await
        .unwrap_or_else(|_| Decision::deny_with_code(500, "prepare-downscale stopped"))
}

/// Marks every pod going away, then POSTs to each; on any failure denies and tells them all
/// to undo (retried until they answer, see [`prepared::undo_now`]). Then records the
/// downscale time: in zone-tracker mode in the ConfigMap as it was read (`tracked`:
/// `Some(None)` when it did not exist), a failed record being a denial with the same undo;
/// otherwise on the StatefulSet once the downscale has landed ([`downscale_record`]).
/// `abandoned` says the request was already answered (deadline passed): then nothing is
/// recorded and the undo loop decides.
async fn prepare(
    app: &App,
    review: &Review,
    prefix: &str,
    decision: Decision,
    tracked: Option<Option<ConfigMap>>,
    abandoned: &(dyn Fn() -> bool + Send + Sync),
) -> Decision {
    let denied = |why: &str| Decision::deny(format!("{prefix} is not allowed because {why}"));
    let namespace = review.field("namespace");
    let pods: Vec<PreparedPod> = decision
        .pod_calls
        .iter()
        .map(|(name, url)| PreparedPod {
            namespace: namespace.to_string(),
            name: name.clone(),
            url: url.clone(),
        })
        .collect();
    let urls: Vec<String> = pods.iter().map(|p| p.url.clone()).collect();
    // Marked before they are called: whatever becomes of this request, they are found again.
    if let Err(e) = prepared::mark(app, &pods).await {
        tracing::warn!(error = %e, "prepare-downscale could not mark the pods; nothing was called");
        return denied(&format!("{e}; no pod was prepared."));
    }
    let results = app.http.call_all("POST", &urls).await;
    if abandoned() {
        // The API server was told "timed out"; with failurePolicy Ignore it may still scale
        // down, so the undo loop decides from the replicas once the request is settled.
        tracing::warn!(
            "prepare-downscale passed its deadline while calling the pods; the undo loop takes over"
        );
        return denied("the pods did not answer before the request deadline.");
    }
    // Each pod that failed, with why: the anchor's sentence stays first (users match on it),
    // the pods follow, so the denial says which pod to look at.
    let failed: Vec<String> = pods
        .iter()
        .zip(&results)
        .filter_map(|(pod, result)| match result {
            Ok(r) if r.is_success() => None,
            Ok(r) => Some(format!("{} answered HTTP {}", pod.name, r.status)),
            Err(e) => Some(format!(
                "{}: {}",
                pod.name,
                core_k8s::pod_http::failure_reason(e, "POST", &pod.url)
            )),
        })
        .collect();
    if !failed.is_empty() {
        for why in &failed {
            tracing::warn!(failure = %why, "prepare-downscale call failed");
        }
        prepared::undo_now(app, &pods).await;
        return denied(&format!(
            "one or more pods failed to prepare for shutdown. Failed: {}.",
            failed.join(", ")
        ));
    }
    if let (Some(tracked), Some(place)) = (tracked, &app.zone_tracker) {
        if let Err(e) = record_in_zone_tracker(app, review, place, tracked).await {
            let config_map = format!("{}/{}", place.namespace, place.config_map_for(namespace));
            tracing::warn!(error = %e, %config_map, "recording the downscale in the zone ConfigMap failed");
            prepared::undo_now(app, &pods).await;
            // The anchor's sentence first (users match on it), then which ConfigMap and why.
            return denied(&format!(
                "setting downscale timestamp in the zone ConfigMap failed. ConfigMap {config_map}: {e}"
            ));
        }
        return decision;
    }
    // Annotation mode: recorded on the StatefulSet once the downscale has landed, and counted
    // by this server's decisions from now on (see `downscale_record`).
    let Some(replicas) = crate::webhooks::replica_target(review) else {
        return decision;
    };
    downscale_record::record_when_landed(
        app.client.clone(),
        app.pending_downscales.clone(),
        downscale_record::Admitted {
            namespace: namespace.to_string(),
            name: review.field("name").to_string(),
            // The uid the decision verified: were the StatefulSet replaced under the same
            // name since, nothing is recorded on the other object.
            uid: review
                .request
                .pointer("/oldObject/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            replicas,
            // Whole seconds, as the annotation has it: a decision counting the remembered
            // time must agree with one (the operator's) reading the written one.
            at: jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                .unwrap_or_else(|_| jiff::Timestamp::now()),
        },
    );
    decision
}

/// Writes this StatefulSet's entry into the zone-tracker ConfigMap. The write is conditional
/// on the ConfigMap being unchanged since the decision read it (its resourceVersion, or its
/// absence for a create), so two downscales decided at once — by this replica or another —
/// cannot both pass the minimum-time check: the second write conflicts and is denied.
/// FIX (a Grafana operator bug: its in-progress marker lived in one request only, so two
/// replicas could both pass).
async fn record_in_zone_tracker(
    app: &App,
    review: &Review,
    place: &core_admission::webhooks::ZoneTrackerPlace,
    tracked: Option<ConfigMap>,
) -> Result<(), kube::Error> {
    let config_map = &place.config_map_for(review.field("namespace"));
    let api: Api<ConfigMap> = Api::namespaced(app.client.clone(), &place.namespace);
    let entry = ZoneTracker::entry(jiff::Timestamp::now());
    match tracked {
        Some(mut existing) => {
            existing
                .data
                .get_or_insert_with(Default::default)
                .insert(review.field("name").to_string(), entry);
            api.replace(config_map, &PostParams::default(), &existing)
                .await
                .map(drop)
        }
        None => {
            let created = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(config_map.to_string()),
                    ..Default::default()
                },
                data: Some([(review.field("name").to_string(), entry)].into()),
                ..Default::default()
            };
            api.create(&PostParams::default(), &created).await.map(drop)
        }
    }
}

/// Largest AdmissionReview body read: the object and its old version, each at most etcd's
/// 1.5 MiB, plus the envelope, with room to spare. A body announced larger is answered 413
/// before a byte of it is read; one without a length (chunked) is cut off at this size, so a
/// client cannot make the server hold more than this per request.
pub const MAX_REVIEW_BYTES: usize = 6 * 1024 * 1024;

/// Answers 413 at once to a request whose `Content-Length` is over [`MAX_REVIEW_BYTES`]
/// (the body limit alone would read it up to the limit first).
async fn refuse_announced_oversize(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = announced.filter(|n| *n > MAX_REVIEW_BYTES as u64) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body of {length} bytes is over the {MAX_REVIEW_BYTES}-byte limit"),
        )
            .into_response();
    }
    next.run(request).await
}

/// The routes.
pub fn router(app: Arc<App>) -> Router {
    let route = |webhook: Webhook| {
        let app = app.clone();
        post(move |headers: HeaderMap, body: Bytes| handle(app.clone(), webhook, headers, body))
    };
    let routes = Webhook::ALL
        .iter()
        .fold(Router::new(), |router, webhook| {
            router.route(webhook.path(), route(*webhook))
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(axum::middleware::from_fn(refuse_announced_oversize))
        .with_state(());
    core_k8s::http_metrics::instrument(routes, app.http_metrics.clone())
}

/// What a client's connection may take. Without them a client that stalls (slowloris: a
/// handshake never finished, headers or a body sent a byte at a time, a connection opened and
/// left) holds a socket for ever, and enough of them starve kube-apiserver's calls.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// The TLS handshake, and each request from its first byte to its answer, however slowly
    /// it arrives ([`crate::idle`] for the headers, [`request_deadline`] once they are in).
    pub request: Duration,
    /// Nothing read or written on a connection this long: closed ([`crate::idle`]).
    pub idle: Duration,
}

/// Answers 408 to a request not received and answered within `limit`; an HTTP/1.1 connection
/// is then closed (its body may be half read).
async fn request_deadline(
    limit: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let http1 = request.version() < axum::http::Version::HTTP_2;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::debug!(?limit, "a request was not received and answered in time");
            let mut response = (
                StatusCode::REQUEST_TIMEOUT,
                format!("request not received and answered within {limit:?}"),
            )
                .into_response();
            if http1 {
                close_after(&mut response);
            }
            response
        }
    }
}

/// Makes `response` the last on its HTTP/1.1 connection.
fn close_after(response: &mut Response) {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
}

/// Serves until `stop`, draining in-flight requests for up to 2 s. Once `draining` fires
/// (the shutdown signal, before `stop`), every HTTP/1.1 answer says `Connection: close`: the
/// client (kube-apiserver keeps a pool of keep-alive connections to each webhook) closes that
/// connection after reading it and dials again, through the endpoints, which no longer list this
/// replica. Closing idle connections only at `stop` instead would race a request sent on one
/// at that instant, which fails as a broken pipe (a POST is not resent).
pub async fn serve(
    address: SocketAddr,
    tls: RustlsConfig,
    timeouts: Timeouts,
    app: Arc<App>,
    draining: tokio_util::sync::CancellationToken,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        shutdown.graceful_shutdown(Some(Duration::from_secs(2)));
    });
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(timeouts.request)
        .acceptor(crate::idle::IdleCutoff {
            limits: crate::idle::Limits {
                idle: timeouts.idle,
                // A second past the request deadline, so a request it stops is told so (408)
                // before its connection is cut.
                answer: timeouts.request + Duration::from_secs(1),
            },
        });
    axum_server::from_tcp(core_k8s::net::listen(address)?)?
        .acceptor(acceptor)
        .handle(handle)
        .serve(
            router(app)
                .layer(axum::middleware::from_fn(move |request, next| {
                    request_deadline(timeouts.request, request, next)
                }))
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        let draining = draining.clone();
                        async move {
                            let http1 = request.version() < axum::http::Version::HTTP_2;
                            let mut response = next.run(request).await;
                            if http1 && draining.is_cancelled() {
                                close_after(&mut response);
                            }
                            response
                        }
                    },
                ))
                .into_make_service(),
        )
        .await
}
