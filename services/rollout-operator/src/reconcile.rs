//! The async shell: watch StatefulSets and Pods, reconcile each dirty rollout group one at a
//! time on the leader, execute the pure plan.
//!
//! Unlike the anchor's fixed 5 s tick over every group, a change to a StatefulSet or Pod marks
//! only its own group dirty and is acted on at once; a periodic resync remains as a safety net.
//! Groups are reconciled serially, so two plans never act on one group at the same time.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use core_k8s::Context;
use core_k8s::apply::typed_value;
use core_k8s::controller::report_when_synced;
use core_k8s::events::Severity;
use core_k8s::pod_http::PodHttp;
use core_k8s::scoped_store::ScopedStore;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodStatus};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::flags::go_parse_bool;
use crate::keys;
use crate::metrics::Metrics;
use crate::observed::{Observed, annotation, label, template_name};
use crate::plan::{Plan, delayed_downscale_calls, plan, prepared_at, replica_patch, sts_key};
use crate::ready_time;
use admission_server::evictions;

/// How often every group is reconciled even without a change.
pub const RESYNC: Duration = Duration::from_secs(30);

/// Pods this replica deleted recently, by `namespace/name`: their uid and when. Caches can lag
/// behind a deletion; until the pod is seen replaced (a new uid) it counts as not ready, as the
/// anchor's two-minute recently-evicted memory does.
#[derive(Default)]
struct RecentlyDeleted(std::collections::HashMap<String, (Option<String>, Instant)>);

const RECENT_FOR: Duration = Duration::from_secs(120);

impl RecentlyDeleted {
    fn remember(&mut self, key: String, uid: Option<String>) {
        self.0.insert(key, (uid, Instant::now()));
    }

    /// Names of pods of `namespace` that are still the ones we deleted.
    fn still_visible(&mut self, namespace: &str, pods: &[Pod]) -> Vec<String> {
        self.0.retain(|_, (_, at)| at.elapsed() < RECENT_FOR);
        let mut out = Vec::new();
        for pod in pods {
            let key = format!("{namespace}/{}", pod.name_any());
            match self.0.get(&key) {
                Some((uid, _)) if uid.is_some() && *uid == pod.metadata.uid => {
                    out.push(pod.name_any())
                }
                Some(_) => {
                    self.0.remove(&key);
                }
                None => {}
            }
        }
        out
    }
}

/// The observed stores, one per watched namespace each.
#[derive(Clone)]
struct Stores {
    stateful_sets: ScopedStore<StatefulSet>,
    pods: ScopedStore<Pod>,
    zpdbs: ScopedStore<DynamicObject>,
    zpdb_resource: kube::core::ApiResource,
}

/// Watches `K` through each of `apis` (one per namespace, or one for all) into a store of its
/// own, as one stream of the objects touched.
#[allow(clippy::type_complexity)]
fn watch_scoped<K>(
    apis: Vec<(Option<String>, Api<K>)>,
    config: watcher::Config,
    modify: fn(&mut K),
) -> (
    Vec<(Option<String>, Store<K>)>,
    futures::stream::SelectAll<futures::stream::BoxStream<'static, Result<K, watcher::Error>>>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut stores = Vec::new();
    let mut streams = Vec::new();
    for (namespace, api) in apis {
        let (reader, writer) = reflector::store();
        streams.push(
            core_k8s::controller::watch_backoff(reflector(
                writer,
                watcher(api, config.clone()).modify(modify),
            ))
            .touched_objects()
            .boxed(),
        );
        stores.push((namespace, reader));
    }
    (stores, futures::stream::select_all(streams))
}

/// Registers each store's first sync with /readyz: `kind` alone for a single store, `kind in
/// <namespace>` for each of several.
fn report_scoped<K>(ctx: &Context, kind: &str, stores: &[(Option<String>, Store<K>)])
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    for (namespace, store) in stores {
        let name = match namespace {
            Some(ns) if stores.len() > 1 => format!("{kind} in {ns}"),
            _ => kind.to_string(),
        };
        report_when_synced(&ctx.readiness, &name, store.clone());
    }
}

/// A rollout group: the `rollout-group` label value within one namespace (two namespaces
/// may each run an `ingester` group; they are rolled independently).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    namespace: String,
    group: String,
}

fn group_of(sts: &StatefulSet) -> Option<GroupKey> {
    Some(GroupKey {
        namespace: sts.namespace()?,
        group: label(&sts.metadata.labels, keys::ROLLOUT_GROUP)?.to_string(),
    })
}

/// The group of the StatefulSet owning `pod`.
fn group_of_pod(stores: &Stores, pod: &Pod) -> Option<GroupKey> {
    let owner = pod
        .owner_references()
        .iter()
        .find(|r| r.kind == "StatefulSet")?;
    let key = ObjectRef::new(&owner.name).within(&pod.namespace()?);
    stores.stateful_sets.get(&key).and_then(|s| group_of(&s))
}

/// What the controller keeps between reconciles (this replica only; nothing it needs survives
/// only here: pods are the source of truth for delayed-downscale preparation).
struct State {
    recent: RecentlyDeleted,
    pods: PodHttp,
    /// StatefulSets (`namespace/name`) whose surviving pods hold no preparation we know of;
    /// empty after start-up, so each is swept once.
    settled: HashSet<String>,
    /// The last delayed-downscale decision published per StatefulSet (`namespace/name`): an
    /// Event goes out only when it changes, not on every reconcile.
    delayed_decisions: HashMap<String, String>,
}

/// Runs the rollout controller until shutdown.
pub async fn run(
    ctx: Arc<Context>,
    metrics: Metrics,
    pod_args: crate::PodArgs,
    selector: Option<core_k8s::labels::LabelSelector>,
) {
    let (dirty_tx, mut dirty_rx) = mpsc::unbounded_channel::<GroupKey>();

    let (sts_stores, sts_stream) = watch_scoped(
        ctx.watched_apis(),
        watcher::Config::default().labels(keys::ROLLOUT_GROUP),
        slim_stateful_set,
    );
    let (pod_stores, pod_stream) =
        watch_scoped(ctx.watched_apis(), watcher::Config::default(), slim_pod);
    // ZPDBs are optional: a missing CRD only means no zone-aware budget (the anchor never
    // became ready without it).
    let zpdb_resource =
        kube::core::ApiResource::erase::<crate::crd::ZoneAwarePodDisruptionBudget>(&());
    let mut zpdb_readers = Vec::new();
    let mut zpdb_streams = Vec::new();
    for (_, api) in ctx.watched_apis_with(&zpdb_resource) {
        let writer = reflector::store::Writer::new(zpdb_resource.clone());
        zpdb_readers.push(writer.as_reader());
        // The CRD may not be installed: without it the list fails, and is retried with a
        // growing backoff instead of every second.
        zpdb_streams.push(
            core_k8s::controller::watch_backoff(reflector(
                writer,
                watcher(api, watcher::Config::default()),
            ))
            .boxed(),
        );
    }
    let zpdb_stream = futures::stream::select_all(zpdb_streams);

    // One cache name per kind when one namespace (or all) is watched, as before; one per
    // namespace otherwise, so /readyz says which namespace has not synced.
    report_scoped(&ctx, "statefulsets", &sts_stores);
    report_scoped(&ctx, "pods", &pod_stores);
    let stores = Stores {
        stateful_sets: ScopedStore::new(sts_stores.into_iter().map(|(_, s)| s).collect()),
        pods: ScopedStore::new(pod_stores.into_iter().map(|(_, s)| s).collect()),
        zpdbs: ScopedStore::new(zpdb_readers),
        zpdb_resource: zpdb_resource.clone(),
    };

    // With a namespace selector: a namespace that starts to match has its groups reconciled
    // at once.
    let scope = match &selector {
        None => crate::scope::Scope::Watched,
        Some(selector) => {
            let (tx, sts) = (dirty_tx.clone(), stores.stateful_sets.clone());
            crate::scope::follow(ctx.client.clone(), selector, move |namespace| {
                for group in groups_of(&sts) {
                    if group.namespace == namespace {
                        let _ = tx.send(group);
                    }
                }
            })
        }
    };

    let stop = ctx.shutdown.clone();
    {
        let tx = dirty_tx.clone();
        let stop = stop.clone();
        let metrics = metrics.clone();
        let sts_cache = stores.stateful_sets.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(sts_stream);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(sts)) => {
                            metrics.cached("StatefulSet", sts_cache.len());
                            if let Some(g) = group_of(&sts) { let _ = tx.send(g); }
                        }
                        Some(Err(e)) => tracing::debug!(error = %e, "statefulset watch error"),
                        None => return,
                    }
                }
            }
        });
    }
    // Ready-time patches queue here; a full queue drops the change (the next event or
    // resync of the pod brings it back) rather than holding up the watch.
    let (ready_tx, ready_rx) = mpsc::channel::<ready_time::Patchwork>(1024);
    tokio::spawn(ready_time::patcher(
        ctx.clone(),
        ready_rx,
        pod_args.ready_time_patch_timeout,
    ));
    let track_ready_time = {
        let (ctx, scope) = (ctx.clone(), scope.clone());
        move |pod: &Pod, budgets: &[(Option<String>, crate::zpdb::Zpdb)]| {
            if !ctx.leadership.is_leader() || !scope.allows(&pod.namespace().unwrap_or_default()) {
                return;
            }
            let scoped = ready_time::in_scope(pod, budgets);
            if let Some(change) = ready_time::change(pod, scoped, jiff::Timestamp::now()) {
                let _ = ready_tx.try_send((
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    change,
                ));
            }
        }
    };
    {
        let tx = dirty_tx.clone();
        let stop = stop.clone();
        let stores = stores.clone();
        let metrics = metrics.clone();
        let track_ready_time = track_ready_time.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(pod_stream);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(pod)) => {
                            metrics.cached("Pod", stores.pods.len());
                            track_ready_time(&pod, &ready_time::budgets(&stores.zpdbs));
                            if let Some(g) = group_of_pod(&stores, &pod) { let _ = tx.send(g); }
                        }
                        Some(Err(e)) => tracing::debug!(error = %e, "pod watch error"),
                        None => return,
                    }
                }
            }
        });
    }
    {
        let stop = stop.clone();
        let metrics = metrics.clone();
        let resource = zpdb_resource.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(zpdb_stream);
            let mut seen = crate::zpdb::Observations::default();
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(event)) => event,
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "zoneawarepoddisruptionbudget watch error");
                            continue;
                        }
                        None => return,
                    },
                };
                let key = |z: &DynamicObject| {
                    format!("{}/{}", z.namespace().unwrap_or_default(), z.name_any())
                };
                let result = match &event {
                    watcher::Event::Apply(z) | watcher::Event::InitApply(z) => {
                        let key = key(z);
                        let parsed = typed_value(z, &resource)
                            .ok_or_else(|| "not serialisable".to_string())
                            .and_then(|v| crate::zpdb::parse(&v));
                        if let Err(e) = &parsed {
                            tracing::warn!(zpdb = %key, error = %e, "invalid zone-aware pod disruption budget");
                        }
                        seen.applied(&key, z.metadata.generation.unwrap_or(0), parsed.is_ok())
                    }
                    watcher::Event::Delete(z) => {
                        seen.deleted(&key(z), z.metadata.generation.unwrap_or(0))
                    }
                    watcher::Event::Init | watcher::Event::InitDone => continue,
                };
                metrics.observe_zpdb_configuration(result);
            }
        });
    }

    let mut state = State {
        recent: RecentlyDeleted::default(),
        pods: ctx.pod_http(
            pod_args.pod_timeout,
            pod_args.pod_address_override,
            metrics.pod_calls.clone(),
        ),
        settled: HashSet::new(),
        delayed_decisions: HashMap::new(),
    };
    let mut leadership = ctx.leadership.subscribe();
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        let mut dirty = BTreeSet::new();
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(group) = dirty_rx.recv() => { dirty.insert(group); }
            _ = resync.tick() => {
                dirty.extend(all_groups(&stores));
                // Catches pods a new ZPDB selects, and a new leader's backlog.
                let budgets = ready_time::budgets(&stores.zpdbs);
                for pod in stores.pods.state() {
                    track_ready_time(&pod, &budgets);
                }
            }
            changed = leadership.changed() => {
                if changed.is_err() { break; }
                dirty.extend(all_groups(&stores));
            }
        }
        // Coalesce what is already queued (a pod deletion touches the pod and its StatefulSet),
        // without waiting for more: the first event of a change is acted on at once, and
        // whatever arrives while the groups reconcile is coalesced into the next round. Pods
        // this process deleted count as down until the cache shows it (`RecentlyDeleted`), so
        // acting on a cache a moment behind never exceeds a budget.
        while let Ok(group) = dirty_rx.try_recv() {
            dirty.insert(group);
        }
        if !ctx.leadership.is_leader() {
            continue;
        }
        // Outside the selected namespaces nothing is touched (`--watch-namespace-selector`).
        dirty.retain(|group| scope.allows(&group.namespace));
        for group in dirty {
            if let Some(after) = reconcile_group(&ctx, &metrics, &stores, &mut state, &group).await
            {
                // A decision waits for time to pass: look again right when it may change.
                let tx = dirty_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after.unsigned_abs() + Duration::from_millis(50)).await;
                    let _ = tx.send(group);
                });
            }
        }
    }
    tracing::info!("rollout controller stopped");
}

/// Drops what the planner never reads from a cached pod: its spec, managed fields and most of
/// its status. With a thousand pods these are most of the operator's memory (and of the copies
/// a reconcile takes). Writes are merge patches, never the cached object, so nothing is lost.
fn slim_pod(pod: &mut Pod) {
    drop_bookkeeping(&mut pod.metadata);
    pod.spec = None;
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            phase: status.phase.take(),
            conditions: status.conditions.take(),
            container_statuses: status.container_statuses.take(),
            // Delayed-downscale calls go to the pod's own address.
            pod_ip: status.pod_ip.take(),
            ..PodStatus::default()
        };
    }
}

/// StatefulSets are read whole except for their bookkeeping, dropped for the same reason.
fn slim_stateful_set(sts: &mut StatefulSet) {
    drop_bookkeeping(&mut sts.metadata);
}

/// Managed fields and kubectl's copy of the last applied object: large, never read here.
fn drop_bookkeeping(metadata: &mut kube::api::ObjectMeta) {
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn all_groups(stores: &Stores) -> BTreeSet<GroupKey> {
    groups_of(&stores.stateful_sets)
}

/// Every rollout group the cached StatefulSets form.
fn groups_of(stateful_sets: &ScopedStore<StatefulSet>) -> BTreeSet<GroupKey> {
    stateful_sets
        .state()
        .iter()
        .filter_map(|s| group_of(s))
        .collect()
}

/// Reconciles one group; returns when to look again if a decision is waiting on the clock.
async fn reconcile_group(
    ctx: &Arc<Context>,
    metrics: &Metrics,
    stores: &Stores,
    state: &mut State,
    key: &GroupKey,
) -> Option<jiff::SignedDuration> {
    let group = key.group.as_str();
    let labels = metrics.labels(group, &key.namespace);
    metrics.group_reconciles.get_or_create(&labels).inc();
    // Create the failure series at 0 so alerts on its rate work from the first reconcile.
    let _ = metrics.group_reconciles_failed.get_or_create(&labels);
    ctx.metrics.reconcile_total.inc();
    let started = Instant::now();
    let result = reconcile_group_inner(ctx, metrics, stores, state, key)
        .instrument(tracing::info_span!(
            "rollout.reconcile",
            rollout_group = %group,
            namespace = %key.namespace,
        ))
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    metrics
        .group_reconcile_duration
        .get_or_create(&labels)
        .observe(elapsed);
    ctx.metrics.reconcile_duration_seconds.observe(elapsed);
    match result {
        Ok(recheck) => {
            let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
            metrics
                .last_successful_group_reconcile
                .get_or_create(&labels)
                .set(now);
            recheck
        }
        Err(e) => {
            metrics.group_reconciles_failed.get_or_create(&labels).inc();
            ctx.metrics.observe_error(e.category());
            tracing::warn!(rollout_group = group, namespace = %key.namespace, error = %e, "reconcile failed");
            None
        }
    }
}

async fn reconcile_group_inner(
    ctx: &Arc<Context>,
    metrics: &Metrics,
    stores: &Stores,
    state: &mut State,
    key: &GroupKey,
) -> Result<Option<jiff::SignedDuration>, core_k8s::Error> {
    let members: Vec<Arc<StatefulSet>> = stores
        .stateful_sets
        .state()
        .into_iter()
        .filter(|s| group_of(s).as_ref() == Some(key))
        .collect();
    if members.is_empty() {
        return Ok(None);
    }
    let namespace = key.namespace.clone();
    // The planner reads only the members' pods (`Observed::pods_of`: same namespace, `name`
    // label = a member's template name); copying just those keeps a reconcile's cost and
    // memory proportional to its group, not to the namespace.
    let templates: HashSet<&str> = members.iter().filter_map(|s| template_name(s)).collect();
    let mut observed = Observed {
        stateful_sets: members.iter().map(|s| (**s).clone()).collect(),
        pods: stores
            .pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(&namespace))
            .filter(|p| {
                label(&p.metadata.labels, keys::POD_NAME_LABEL)
                    .is_some_and(|n| templates.contains(n))
            })
            .map(|p| (**p).clone())
            .collect(),
        zpdbs: stores
            .zpdbs
            .state()
            .iter()
            .filter(|z| z.namespace().as_deref() == Some(&namespace))
            .filter_map(|z| typed_value(z, &stores.zpdb_resource))
            .collect(),
        ..Observed::default()
    };
    observed.references = read_references(ctx, &namespace, &observed.stateful_sets).await;
    observed.recently_evicted = state.recent.still_visible(&namespace, &observed.pods);
    call_delayed_downscale(state, &mut observed, &ctx.leadership).await;
    let plan = plan(&observed, jiff::Timestamp::now());
    // What was decided and why, as one span: searchable by pod and zone in a trace backend.
    tracing::info_span!(
        "rollout.decision",
        delete_pods = ?plan.delete_pods,
        replica_changes = ?plan
            .replica_changes
            .iter()
            .map(|c| format!("{}: {} -> {}", c.stateful_set, c.from, c.to))
            .collect::<Vec<_>>(),
        status_updates = plan.status_updates.len(),
        warnings = ?plan.warnings,
        errors = ?plan.errors,
    )
    .in_scope(|| {});
    let acts = !(plan.delete_pods.is_empty()
        && plan.status_updates.is_empty()
        && plan.replica_changes.is_empty());
    // Fencing: only the replica the Lease names may change anything.
    if acts && !ctx.leadership.confirm().await {
        return Ok(None);
    }
    execute(
        ctx,
        metrics,
        &namespace,
        &observed,
        &plan,
        &mut state.recent,
    )
    .await?;
    for warning in &plan.warnings {
        tracing::warn!(namespace = %namespace, group = %key.group, "{warning}");
    }
    publish_delayed_decisions(ctx, &observed, &plan, &mut state.delayed_decisions).await;
    if plan.errors.is_empty() {
        Ok(plan.recheck_after)
    } else {
        Err(core_k8s::Error::InvalidObject {
            object: format!("rollout group {namespace}/{}", key.group),
            field: "metadata",
            reason: plan.errors.join("; "),
        })
    }
}

/// Makes the delayed-downscale calls ([`delayed_downscale_calls`]) and records each prepared
/// pod's answer in `observed.prepared_at`; a pod that fails to answer is simply missing there,
/// which makes the planner hold the downscale (the anchor's rule).
async fn call_delayed_downscale(
    state: &mut State,
    observed: &mut Observed,
    leadership: &core_k8s::leader::Leadership,
) {
    let settled = &state.settled;
    let calls = delayed_downscale_calls(
        observed,
        &|key| settled.contains(key),
        jiff::Timestamp::now(),
    );
    // Fencing: pod calls are actions too; only the replica the Lease names makes them.
    if !calls.is_empty() && !leadership.confirm().await {
        return;
    }
    for call in calls {
        // Cancellations never block anything; 409 means the pod's state is locked (benign).
        let cancelled = state.pods.call_all("DELETE", &call.cancel).await;
        let mut all_cancelled = call.cancel_owed.is_empty();
        for (url, result) in call.cancel.iter().zip(&cancelled) {
            match result {
                Ok(r) if r.is_success() || r.status == 404 || r.status == 409 => {}
                Ok(r) => {
                    all_cancelled = false;
                    tracing::debug!(url = %url, status = r.status, "delayed-downscale cancel refused");
                }
                Err(e) => {
                    all_cancelled = false;
                    tracing::debug!(error = %e, "delayed-downscale cancel failed");
                }
            }
        }
        // A pod that cannot be called holds the downscale as a failed call does.
        for (pod, why) in call.unreachable.iter().cloned() {
            observed.prepare_failures.insert(pod, why);
        }
        if call.prepare.is_empty() && call.unreachable.is_empty() {
            if all_cancelled {
                state.settled.insert(call.stateful_set);
            }
            continue;
        }
        state.settled.remove(&call.stateful_set);
        let urls: Vec<String> = call.prepare.iter().map(|(_, u)| u.clone()).collect();
        let prepared = state.pods.call_all("POST", &urls).await;
        for ((pod, url), result) in call.prepare.into_iter().zip(prepared) {
            match result.and_then(|r| prepared_at(r.status, &r.body)) {
                Ok(at) => {
                    observed.prepared_at.insert(pod, at);
                }
                Err(e) => {
                    tracing::warn!(statefulset = %call.stateful_set, url = %url, error = %e, "delayed-downscale prepare failed");
                    // The planner names the pod and this reason in its decision.
                    let reason = core_k8s::pod_http::failure_reason(&e, "POST", &url);
                    observed.prepare_failures.insert(pod, reason.to_string());
                }
            }
        }
    }
}

/// Publishes each delayed downscale's decision (which pods, when they prepared, what it
/// waits for or why it holds) as an Event on its StatefulSet when it differs from the last one
/// published: Warning when a pod holds it, Normal otherwise.
async fn publish_delayed_decisions(
    ctx: &Arc<Context>,
    observed: &Observed,
    plan: &Plan,
    published: &mut HashMap<String, String>,
) {
    // A StatefulSet no longer downscaling forgets its last decision, so the next downscale's
    // is published even if it reads the same.
    for sts in &observed.stateful_sets {
        let key = sts_key(sts);
        if !plan
            .delayed_downscales
            .iter()
            .any(|d| d.stateful_set == key)
        {
            published.remove(&key);
        }
    }
    for decision in &plan.delayed_downscales {
        if published.get(&decision.stateful_set) == Some(&decision.decision) {
            continue;
        }
        let Some(sts) = observed
            .stateful_sets
            .iter()
            .find(|s| sts_key(s) == decision.stateful_set)
        else {
            continue;
        };
        // Held exactly when a pod going away gave no time.
        let severity = if decision.pods.iter().any(|p| p.problem.is_some()) {
            Severity::Warning
        } else {
            Severity::Normal
        };
        let pods: Vec<String> = decision
            .pods
            .iter()
            .map(|p| match (&p.prepared_at, &p.problem) {
                (Some(at), _) => format!("{} prepared at {at}", p.pod),
                (None, Some(problem)) => format!("{}: {problem}", p.pod),
                (None, None) => p.pod.clone(),
            })
            .collect();
        let note = format!(
            "delayed downscale {} -> {} (delay {}): {} [{}]",
            decision.from,
            decision.desired,
            decision.delay,
            decision.decision,
            pods.join(", ")
        );
        tracing::info!(statefulset = %decision.stateful_set, "{note}");
        if ctx
            .events
            .publish(&reference(sts), severity, "DelayedDownscale", "Scale", note)
            .await
            .is_ok()
        {
            published.insert(decision.stateful_set.clone(), decision.decision.clone());
        }
    }
}

/// Reads the `scale` of every reference resource the group mirrors from.
async fn read_references(
    ctx: &Arc<Context>,
    namespace: &str,
    members: &[StatefulSet],
) -> Vec<Value> {
    let mut references = Vec::new();
    for sts in members {
        let Some(reference) = Reference::of(ctx, namespace, sts).await else {
            continue;
        };
        let (api, name, kind, api_version) = (
            &reference.api,
            reference.name,
            reference.kind,
            reference.api_version,
        );
        match api.get_scale(name).await {
            Ok(scale) => references.push(json!({
                "apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": scale.spec.and_then(|s| s.replicas)},
                "status": {"replicas": scale.status.map(|s| s.replicas)},
            })),
            Err(e) => tracing::warn!(reference = %format!("{kind}/{name}"), error = %e, "reading scale failed"),
        }
    }
    references
}

/// The resource a StatefulSet mirrors its replicas from, resolved through discovery.
struct Reference<'a> {
    api: Api<DynamicObject>,
    name: &'a str,
    kind: &'a str,
    api_version: &'a str,
}

impl<'a> Reference<'a> {
    async fn of(
        ctx: &Arc<Context>,
        namespace: &str,
        sts: &'a StatefulSet,
    ) -> Option<Reference<'a>> {
        let name = annotation(sts, keys::MIRROR_NAME)?;
        let kind = annotation(sts, keys::MIRROR_KIND)?;
        let api_version = annotation(sts, keys::MIRROR_API_VERSION).unwrap_or("v1");
        let (group, version) = core_k8s::apply::parse_api_version(api_version)?;
        let resolved = ctx
            .applier
            .discovery()
            .resolve(&GroupVersionKind::gvk(group, version, kind))
            .await
            .ok()?;
        let api = Api::namespaced_with(ctx.client.clone(), namespace, &resolved.resource);
        Some(Reference {
            api,
            name,
            kind,
            api_version,
        })
    }
}

fn reference(sts: &StatefulSet) -> ObjectReference {
    sts.object_ref(&())
}

async fn execute(
    ctx: &Arc<Context>,
    metrics: &Metrics,
    namespace: &str,
    observed: &Observed,
    plan: &Plan,
    recent: &mut RecentlyDeleted,
) -> Result<(), core_k8s::Error> {
    let params = PatchParams::default();
    let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let find = |key: &str| {
        let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
        observed
            .stateful_sets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    };
    for change in &plan.replica_changes {
        let Some(sts) = find(&change.stateful_set) else {
            continue;
        };
        // A merge patch of spec.replicas, as the anchor does: users' own apply flows keep
        // owning the rest of the StatefulSet. A zone's downscale records its time with it.
        sts_api
            .patch(
                &sts.name_any(),
                &params,
                &Patch::Merge(replica_patch(sts, change, jiff::Timestamp::now())),
            )
            .await
            .map_err(|e| core_k8s::Error::api(format!("scale {}", change.stateful_set), e))?;
        tracing::info!(statefulset = %change.stateful_set, from = change.from, to = change.to, "changed replicas");
        let note = format!("replicas {} -> {}", change.from, change.to);
        let _ = ctx
            .events
            .publish(
                &reference(sts),
                Severity::Normal,
                "ReplicasChanged",
                "Scale",
                note,
            )
            .await;
        write_back(ctx, namespace, sts, change.to).await;
    }
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    for key in &plan.delete_pods {
        let name = key.rsplit_once('/').map_or(key.as_str(), |(_, n)| n);
        let seen = observed
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(|p| &p.metadata);
        let uid = seen.and_then(|m| m.uid.clone());
        let mut claimed = None;
        if let Some(override_max) = plan.budget_overrides.get(key) {
            // The plan judged the budget on cached state; the claim judges it again against
            // every eviction recorded meanwhile (drains, other replicas) and records this one.
            match evictions::claim(
                &ctx.client,
                namespace,
                name,
                observed.clone(),
                Some(*override_max),
                &[],
            )
            .await
            {
                Ok((claim, _)) => {
                    metrics.zpdb.observe_eviction(claim.allowed.reason(), 200);
                    claimed = claim.record;
                }
                Err(refusal) => {
                    let denial = refusal.into_denial();
                    metrics.zpdb.observe_eviction(denial.reason, denial.code);
                    tracing::info!(pod = %key, reason = denial.reason, message = %denial.message, "deletion deferred: the zone-aware budget is in use");
                    continue;
                }
            }
        }
        // Only the pod the plan saw: same incarnation, unchanged since (409 otherwise, and
        // the next reconcile decides again on fresh state).
        let resource_version = seen.and_then(|m| m.resource_version.clone());
        let params = core_k8s::leader::conditional_delete(uid.clone(), resource_version, None);
        let deleted = pod_api
            .delete(name, &params)
            .instrument(tracing::info_span!("rollout.delete_pod", pod = %key, budget_claimed = claimed.is_some()))
            .await;
        if let (Err(e), Some(record)) = (&deleted, &claimed)
            && !matches!(e, kube::Error::Api(status) if status.code == 404)
        {
            // Not deleted after all: the pod must not count against its budget as evicted.
            if let Err(reason) = evictions::release(&ctx.client, namespace, record).await {
                tracing::warn!(pod = %key, %reason, "the eviction record stays until it expires");
            }
        }
        match deleted {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!(pod = %key, "pod changed since the plan read it; deciding again");
                continue;
            }
            Err(e) => return Err(core_k8s::Error::api(format!("delete pod {key}"), e)),
        }
        recent.remember(key.clone(), uid);
        metrics.pods_deleted.inc();
        tracing::info!(pod = %key, "deleted outdated pod");
    }
    for key in &plan.status_updates {
        let Some(sts) = find(key) else { continue };
        let update = sts
            .status
            .as_ref()
            .and_then(|s| s.update_revision.clone())
            .unwrap_or_default();
        // An update of the status subresource (verb `update`, all the anchor's Role grants),
        // guarded by the cached resourceVersion: unlike the anchor's unguarded UpdateStatus
        // a status another writer changed meanwhile is never overwritten with
        // stale data — the update is refused with 409 and the next reconcile tries again.
        // The body is the object as stored now, not the slimmed cache entry: a status update
        // may carry metadata, and the cache dropped some (last-applied annotation).
        let mut updated = match sts_api.get(&sts.name_any()).await {
            Ok(fresh) => fresh,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(e) => return Err(core_k8s::Error::api(format!("read {key}"), e)),
        };
        if updated
            .status
            .as_ref()
            .and_then(|s| s.update_revision.as_deref())
            != Some(&update)
        {
            continue; // a newer revision started meanwhile: the next reconcile decides again
        }
        updated.metadata.managed_fields = None;
        if let Some(status) = updated.status.as_mut() {
            status.current_revision = Some(update.clone());
        }
        match sts_api
            .replace_status(&sts.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(statefulset = %key, "status changed meanwhile; the next reconcile retries");
                continue;
            }
            Err(e) => return Err(core_k8s::Error::api(format!("update status of {key}"), e)),
        }
        let _ = ctx
            .events
            .publish(
                &reference(sts),
                Severity::Normal,
                "RolloutComplete",
                "Rollout",
                format!("all pods at revision {update}"),
            )
            .await;
    }
    Ok(())
}

/// Writes the StatefulSet's replicas back to the reference resource's status (for an HPA on
/// a ReplicaTemplate), unless the StatefulSet opts out.
async fn write_back(ctx: &Arc<Context>, namespace: &str, sts: &StatefulSet, replicas: i32) {
    if annotation(sts, keys::MIRROR_WRITE_BACK).is_some_and(|v| go_parse_bool(v) != Some(true)) {
        return;
    }
    let Some(Reference {
        api, name, kind, ..
    }) = Reference::of(ctx, namespace, sts).await
    else {
        return;
    };
    if let Err(e) = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": replicas}})),
        )
        .await
    {
        tracing::warn!(reference = %format!("{kind}/{name}"), error = %e, "writing replicas back failed");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::observed::running_and_ready;

    fn pod(ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "ingester-zone-a-0", "namespace": "mimir",
                "labels": {"name": "ingester-zone-a", "controller-revision-hash": "ingester-zone-a-1"},
                "annotations": {LAST_APPLIED: "{}", "keep": "me"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ingester-zone-a", "uid": "u"}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
            },
            "spec": {"containers": [{"name": "ingester", "image": "mimir:1"}]},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1", "hostIP": "10.0.1.1",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": [{"name": "ingester", "image": "mimir:1", "imageID": "", "restartCount": 0,
                    "ready": ready, "state": {"running": {}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn slimming_keeps_everything_the_planner_reads() {
        for ready in [true, false] {
            let full = pod(ready);
            let mut slim = full.clone();
            slim_pod(&mut slim);
            assert_eq!(slim.spec, None);
            assert_eq!(slim.metadata.managed_fields, None);
            let annotations = slim.metadata.annotations.clone().unwrap();
            assert!(!annotations.contains_key(LAST_APPLIED));
            assert_eq!(annotations.get("keep").map(String::as_str), Some("me"));
            assert_eq!(slim.metadata.labels, full.metadata.labels);
            assert_eq!(
                slim.metadata.owner_references,
                full.metadata.owner_references
            );
            let status = slim.status.clone().unwrap();
            assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
            assert_eq!(status.host_ip, None);
            assert_eq!(status.conditions, full.status.clone().unwrap().conditions);
            assert_eq!(running_and_ready(&slim), ready);
            assert_eq!(running_and_ready(&slim), running_and_ready(&full));
        }
    }

    #[test]
    fn booleans_parse_as_go_does() {
        for yes in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(go_parse_bool(yes), Some(true), "{yes}");
        }
        for no in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(go_parse_bool(no), Some(false), "{no}");
        }
        for bad in ["", "yes", "tRUE", " true"] {
            assert_eq!(go_parse_bool(bad), None, "{bad:?}");
        }
    }
}
