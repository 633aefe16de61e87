//! The async shell: reads the layer set, the source and the live objects, asks [`crate::plan`]
//! what to do, applies with server-side apply, prunes, and writes the layer's status.
//!
//! Triggers (no polling per hop): the layer itself; any change of a layer wakes the layers
//! that depend on it (and, while it is being deleted, the layers it depends on); a change of a
//! Flux source or a labelled ConfigMap wakes the layers reading it. A layer that is applying
//! re-checks its objects every `--health-poll`; every layer is re-applied every `interval`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use core_k8s::Context;
use core_k8s::apply::ResolvedKind;
use core_k8s::events::Severity;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef as LayerKey, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::crd::{AddonsLayer, AddonsLayerStatus, Blocker, HistoryEntry, InventoryEntry, LayerSet};
use crate::error::{LayerError, Result};
use crate::keys::{
    FINALIZER, LAYER_LABEL, ORPHANED_LABEL, ORPHANED_STATUS, RECONCILE_REQUESTED_AT, SOURCE_LABEL,
    blocker, condition, reason, state,
};
use crate::lock;
use crate::metrics::Metrics;
use crate::plan::{
    self, Gate, GateInputs, ObjectRef, Outcome, SourceRef, SourceState, Stage, StaleObject,
};
use crate::read::Reader;
use crate::source::{self, CONFIGMAP_KIND, FLUX_KINDS, Files, Limits, Manifest};
use core_layers::objects::ActingAccount;

/// Flags of the layer-controller on top of the common ones.
#[derive(Clone, Debug, clap::Args)]
pub struct LayerArgs {
    /// Namespace of a layer's source when `spec.source.namespace` is empty (Kraan: the
    /// controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "strata-system")]
    pub default_source_namespace: String,
    /// How long an object that left every layer stays, labelled orphaned, before it is
    /// deleted; another layer that takes it in the meantime keeps it (same uid). Default: the
    /// `interval` of the layer it left, as Kraan.
    #[arg(long, value_parser = duration)]
    pub orphan_grace: Option<Duration>,
    /// Every layer is re-applied at least this often, whatever its `interval` (Kraan's
    /// `syncPeriod`).
    #[arg(long, default_value = "1m", value_parser = duration)]
    pub sync_period: Duration,
    /// Most layers reconciled at once (Flux's `--concurrent`); the others wait their turn. A
    /// reconcile holds the layer's manifests and a view of every layer while it runs, so this
    /// bounds the controller's memory whatever the number of layers. At least 1.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent: u16,
    /// Largest artifact download, in bytes.
    #[arg(long, default_value_t = 50 << 20)]
    pub max_artifact_bytes: u64,
    /// How long an artifact download may take.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub artifact_timeout: Duration,
    /// Only manage layers matching this label selector (shards; every layer a shard's
    /// layers depend on must be in the same shard).
    #[arg(long)]
    pub layer_selector: Option<String>,
    /// How often a layer that is applying re-checks its objects' status.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub health_poll: Duration,
    /// ServiceAccount (in the namespace of each layer's source) that layers without
    /// `spec.serviceAccountName` act as; unset: they act as the controller itself. Setting it
    /// locks multi-tenant clusters down (Flux's `--default-service-account`).
    #[arg(long)]
    pub default_service_account: Option<String>,
}

/// Who a layer acts as toward the API server when it applies, reads and prunes its objects:
/// the controller itself, or a ServiceAccount it impersonates.
#[derive(Clone)]
struct Access {
    client: kube::Client,
    applier: core_k8s::apply::Applier,
}

/// The user a layer acts as (see [`ActingAccount`]); `None` for the controller's own identity.
fn acting_user(layer: &AddonsLayer, args: &LayerArgs) -> Option<String> {
    ActingAccount::of(
        layer,
        &args.default_source_namespace,
        args.default_service_account.as_deref(),
    )
    .map(|account| account.user())
}

/// The access of a layer: the controller's own, or that of the account it acts as (the
/// impersonating client is built once per user by the context).
fn access(ctx: &Context, shared: &Shared, layer: &AddonsLayer) -> Result<Access> {
    let Some(user) = acting_user(layer, &shared.args) else {
        return Ok(Access {
            client: ctx.client.clone(),
            applier: ctx.applier.clone(),
        });
    };
    let client = ctx.impersonating_client(&user)?;
    Ok(Access {
        applier: ctx.applier.with_client(client.clone()),
        client,
    })
}

/// How often a layer blocked by `spec.prereqs.objects` looks at them again.
const OBJECT_PREREQ_POLL: Duration = Duration::from_secs(5);

fn duration(value: &str) -> std::result::Result<Duration, String> {
    core_k8s::args::parse_duration(value).map_err(|e| e.to_string())
}

/// What one process remembers between reconciles (nothing here is needed for correctness
/// after a restart; it only saves work and measures waits).
#[derive(Debug, Default)]
struct Memory {
    /// The attempt (revision, generation) last fully applied, and when.
    applied: Option<((String, Option<i64>), Instant)>,
    blocked_since: Option<Instant>,
    attempt_started: Option<Instant>,
}

/// State shared by all reconciles.
pub struct Shared {
    args: LayerArgs,
    metrics: Metrics,
    layers: Store<AddonsLayer>,
    reader: Reader,
    memory: Mutex<HashMap<String, Memory>>,
    cluster_version: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("args", &self.args).finish()
    }
}

/// Runs the controller until shutdown.
pub async fn run(ctx: Arc<Context>, args: LayerArgs, metrics: Metrics) {
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let layer_config = match &args.layer_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    // A layer is reconciled when what its owner controls changes: spec (generation), labels,
    // annotations (a reconcile request), finalizers or deletion, as Flux's controllers filter
    // theirs; never for a change of its status alone, which is this controller's own write.
    // Otherwise every status write of a blocked layer queued a reconcile of that layer, and
    // the wake-up from its dependency turning Deployed waited behind it: right after a new
    // revision, while all layers re-check at once, the first hops of a chain took 0.3–0.9 s.
    let (reader, writer) = kube::runtime::reflector::store();
    let intents = watcher(api.clone(), layer_config.clone())
        .default_backoff()
        // Nothing here reads a layer's managed fields, often its largest part: the cache of
        // a thousand layers keeps them out.
        .modify(|layer| layer.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(layer_intent, Default::default());
    let controller = Controller::for_stream(intents, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrent));
    let store = controller.store();
    let (tx, rx) = mpsc::channel::<LayerKey<AddonsLayer>>(1024);
    let index = store.clone();
    let controller = controller
        .watches(api, layer_config, {
            let seen: Mutex<HashMap<String, String>> = Mutex::default();
            move |changed| {
                if !gate_relevant_change(&changed, &seen) {
                    return Vec::new();
                }
                wake_on_layer_change(&changed, &index)
            }
        })
        .reconcile_on(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|key| (key, rx))
        }));
    let limits = Limits {
        max_artifact_bytes: args.max_artifact_bytes,
        max_unpacked_bytes: args.max_artifact_bytes.saturating_mul(4),
        download_timeout: args.artifact_timeout,
    };
    let reader = Reader::new(
        ctx.client.clone(),
        ctx.applier.clone(),
        limits,
        args.default_source_namespace.clone(),
    );
    let shared = Arc::new(Shared {
        args,
        metrics,
        layers: store,
        reader,
        memory: Mutex::default(),
        cluster_version: Mutex::default(),
    });
    spawn_source_watchers(&ctx, shared.clone(), tx);
    core_k8s::controller::run_controller(ctx, "addonslayers", controller, move |layer, ctx| {
        reconcile(layer, ctx, shared.clone())
    })
    .await;
}

/// A hash of what a layer's owner controls (see [`run`]): everything but its status.
fn layer_intent(layer: &AddonsLayer) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    layer.metadata.generation.hash(&mut hasher);
    layer.labels().hash(&mut hasher);
    layer.annotations().hash(&mut hasher);
    layer.finalizers().hash(&mut hasher);
    layer
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Whether a layer changed in a way its dependents' gates can see: spec, state, deployed
/// revision, version, generations, deletion, or its first blocker. Message-only status
/// updates do not wake dependents: otherwise every status write would ripple down the whole
/// chain (each dependent's message quotes its dependency's), O(n²) reconciles for a chain of n.
fn gate_relevant_change(changed: &AddonsLayer, seen: &Mutex<HashMap<String, String>>) -> bool {
    let empty = AddonsLayerStatus::default();
    let status = changed.status.as_ref().unwrap_or(&empty);
    let key = serde_json::json!([
        changed.metadata.generation,
        changed.metadata.deletion_timestamp.is_some(),
        changed.spec,
        status.state,
        status.revision,
        status.version,
        status.observed_generation,
        status.blocked_by.first().map(|b| (&b.name, &b.reason)),
        status
            .inventory
            .iter()
            .filter(|e| e.status != "Current")
            .count(),
    ])
    .to_string();
    let previous = lock(seen).insert(changed.name_any(), key.clone());
    previous.as_ref() != Some(&key) || changed.metadata.deletion_timestamp.is_some()
}

/// The dependents index: a change of `changed` wakes every layer that depends on it, and,
/// while `changed` is being deleted, the layers it depends on (their teardown waits for it).
fn wake_on_layer_change(
    changed: &AddonsLayer,
    store: &Store<AddonsLayer>,
) -> Vec<LayerKey<AddonsLayer>> {
    let name = changed.name_any();
    let all = store.state();
    let mut wake: Vec<LayerKey<AddonsLayer>> =
        plan::dependents(&name, all.iter().map(|l| l.as_ref()))
            .iter()
            .map(|n| LayerKey::new(n))
            .collect();
    if changed.metadata.deletion_timestamp.is_some() {
        wake.extend(
            plan::dependencies_of(changed)
                .iter()
                .map(|d| LayerKey::new(d)),
        );
    }
    wake
}

/// Layers that read `source`.
fn readers(store: &Store<AddonsLayer>, source: &SourceRef, default_ns: &str) -> Vec<String> {
    store
        .state()
        .iter()
        .filter(|l| SourceRef::of(l, default_ns) == *source)
        .map(|l| l.name_any())
        .collect()
}

/// Where source changes are sent: the layers reading a changed source are reconciled.
#[derive(Clone)]
struct SourceWakeups {
    store: Store<AddonsLayer>,
    tx: mpsc::Sender<LayerKey<AddonsLayer>>,
    default_ns: String,
}

impl SourceWakeups {
    /// Forwards every touched object of a source kind until shutdown.
    async fn forward<K, S>(
        self,
        kind: &'static str,
        events: S,
        shutdown: tokio_util::sync::CancellationToken,
    ) where
        K: Resource,
        S: futures::Stream<Item = std::result::Result<K, watcher::Error>>,
    {
        let forward = events.for_each(|event| {
            let this = self.clone();
            async move {
                let Ok(object) = event else { return };
                let source = SourceRef {
                    kind: kind.into(),
                    namespace: object.meta().namespace.clone().unwrap_or_default(),
                    name: object.meta().name.clone().unwrap_or_default(),
                };
                for layer in readers(&this.store, &source, &this.default_ns) {
                    let _ = this.tx.send(LayerKey::new(&layer)).await;
                }
            }
        });
        tokio::select! {
            () = forward => {}
            () = shutdown.cancelled() => {}
        }
    }
}

fn spawn_source_watchers(
    ctx: &Arc<Context>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<LayerKey<AddonsLayer>>,
) {
    let wakeups = SourceWakeups {
        store: shared.layers.clone(),
        tx,
        default_ns: shared.args.default_source_namespace.clone(),
    };
    // ConfigMap sources: only labelled ones are watched (watching every ConfigMap of a
    // cluster would cost more than the feature is worth).
    let api: Api<ConfigMap> = Api::all(ctx.client.clone());
    let events = core_k8s::controller::watch_backoff(watcher(
        api,
        watcher::Config::default().labels(SOURCE_LABEL),
    ))
    .touched_objects();
    tokio::spawn(
        wakeups
            .clone()
            .forward(CONFIGMAP_KIND, events, ctx.shutdown.clone()),
    );
    for kind in FLUX_KINDS {
        let ctx = ctx.clone();
        let wakeups = wakeups.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            // Flux may be installed after us: look for the kind until it is served.
            let resolved = loop {
                if let Some(resolved) = shared.reader.resolve_flux_kind(kind).await {
                    break resolved;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(15)) => {}
                    () = ctx.shutdown.cancelled() => return,
                }
            };
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resolved.resource);
            let events =
                core_k8s::controller::watch_backoff(watcher(api, watcher::Config::default()))
                    .touched_objects();
            wakeups.forward(kind, events, ctx.shutdown.clone()).await;
        });
    }
}

impl Shared {
    /// The API server version, re-read at most once a minute.
    async fn cluster_version(&self, ctx: &Context) -> Option<String> {
        if let Some((version, at)) = lock(&self.cluster_version).as_ref()
            && at.elapsed() < Duration::from_secs(60)
        {
            return Some(version.clone());
        }
        match ctx.client.apiserver_version().await {
            Ok(info) => {
                *lock(&self.cluster_version) = Some((info.git_version.clone(), Instant::now()));
                Some(info.git_version)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the API server version");
                lock(&self.cluster_version).as_ref().map(|(v, _)| v.clone())
            }
        }
    }
}

/// What a reconcile reports into the layer's status.
#[derive(Debug)]
struct Report {
    state: &'static str,
    reason: String,
    message: String,
    blockers: Vec<Blocker>,
    /// `None` keeps the previous inventory.
    inventory: Option<Vec<InventoryEntry>>,
    /// Set when this revision is now deployed.
    deployed_revision: Option<String>,
    attempted_revision: Option<String>,
}

impl Report {
    fn new(state: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            state,
            reason: reason.to_string(),
            message: message.into(),
            blockers: Vec::new(),
            inventory: None,
            deployed_revision: None,
            attempted_revision: None,
        }
    }
}

fn layers_map(store: &Store<AddonsLayer>) -> LayerSet {
    store
        .state()
        .into_iter()
        .map(|l| (l.name_any(), l))
        .collect()
}

/// Re-reads the layer's dependencies from the API server. The wake-up comes from a watch
/// event that the cache may not hold yet; judging a dependency from a lagging cache would
/// miss the moment it turned Deployed and leave the dependent waiting for the resync.
async fn fresh_dependencies(ctx: &Context, layer: &AddonsLayer, all: &mut LayerSet) -> Result<()> {
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    for dep in &plan::dependencies_of(layer) {
        match api
            .get_opt(dep)
            .await
            .map_err(|e| LayerError::api(format!("reading layer {dep}"), e))?
        {
            Some(fresh) => {
                all.insert(dep.clone(), Arc::new(fresh));
            }
            None => {
                all.remove(dep);
            }
        }
    }
    Ok(())
}

async fn reconcile(
    layer: Arc<AddonsLayer>,
    ctx: Arc<Context>,
    shared: Arc<Shared>,
) -> Result<Action> {
    let name = layer.name_any();
    // Our own last status write may not be in the cache yet: decide from the latest copy.
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let Some(layer) = api
        .get_opt(&name)
        .await
        .map_err(|e| LayerError::api(format!("reading layer {name}"), e))?
    else {
        return Ok(Action::await_change());
    };
    if layer.metadata.deletion_timestamp.is_some() {
        return teardown(&layer, &ctx, &shared).await;
    }
    if !layer.finalizers().iter().any(|f| f == FINALIZER) {
        set_finalizer(&ctx, &layer, true).await?;
    }
    let (interval, timeout) = plan::timing_or_default(&layer);
    let interval = plan::effective_interval(interval, shared.args.sync_period);
    let mut all = layers_map(&shared.layers);
    fresh_dependencies(&ctx, &layer, &mut all).await?;
    let source_ref = SourceRef::of(&layer, &shared.args.default_source_namespace);
    let fetched = if layer.spec.hold || !plan::spec_errors(&layer).is_empty() {
        source::Fetched {
            state: SourceState::NotReady {
                message: "not read".into(),
            },
            files: None,
        }
    } else {
        match shared.reader.fetch(&source_ref).await {
            Ok(fetched) => fetched,
            Err(e @ LayerError::Artifact(_)) => {
                let report = Report::new(
                    state::FAILED,
                    reason::ARTIFACT_FAILED,
                    format!("{source_ref}: {e}"),
                );
                write_status(&ctx, &shared, &layer, report).await?;
                return Ok(Action::requeue(interval.min(Duration::from_secs(60))));
            }
            Err(e) => return Err(e),
        }
    };
    let cluster_version = shared.cluster_version(&ctx).await;
    let objects = crate::prereqs::read(&shared.reader, &layer).await;
    let inputs = GateInputs {
        source: &fetched.state,
        cluster_version: cluster_version.as_deref(),
        default_source_namespace: &shared.args.default_source_namespace,
        objects: &objects,
    };
    match plan::gate(&layer, &all, &inputs) {
        Gate::Hold => {
            let report = Report::new(
                state::HOLD,
                state::HOLD,
                "the layer is on hold: nothing is applied or pruned until spec.hold is false",
            );
            write_status(&ctx, &shared, &layer, report).await?;
            Ok(Action::await_change())
        }
        Gate::Invalid(message) => {
            let report = Report::new(state::FAILED, reason::INVALID_SPEC, message);
            write_status(&ctx, &shared, &layer, report).await?;
            Ok(Action::await_change())
        }
        Gate::Cycle(cycle) => {
            let mut report = Report::new(
                state::FAILED,
                reason::DEPENDENCY_CYCLE,
                format!("dependency cycle: {}", cycle.join(" -> ")),
            );
            let members: BTreeSet<&String> = cycle.iter().filter(|m| **m != name).collect();
            report.blockers = members
                .into_iter()
                .map(|m| Blocker {
                    name: m.clone(),
                    reason: blocker::CYCLE.into(),
                    message: format!("dependency cycle: {}", cycle.join(" -> ")),
                })
                .collect();
            write_status(&ctx, &shared, &layer, report).await?;
            Ok(Action::requeue(interval))
        }
        Gate::Blocked { state, blockers } => {
            lock(&shared.memory)
                .entry(name.clone())
                .or_default()
                .blocked_since
                .get_or_insert_with(Instant::now);
            let first = &blockers[0];
            let more = match blockers.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let mut report = Report::new(
                state,
                state,
                format!("waiting for {}: {}{more}", first.name, first.message),
            );
            // Prerequisite objects of any kind are not watched: look again soon.
            let waits_for_objects = blockers.iter().any(|b| {
                layer
                    .spec
                    .prereqs
                    .objects
                    .iter()
                    .any(|o| o.to_string() == b.name)
            });
            report.blockers = blockers;
            write_status(&ctx, &shared, &layer, report).await?;
            Ok(Action::requeue(if waits_for_objects {
                interval.min(OBJECT_PREREQ_POLL)
            } else {
                interval
            }))
        }
        Gate::Proceed => {
            if let Some(since) = lock(&shared.memory)
                .entry(name.clone())
                .or_default()
                .blocked_since
                .take()
            {
                shared
                    .metrics
                    .dependency_wait_seconds
                    .observe(since.elapsed().as_secs_f64());
            }
            let SourceState::Ready { revision } = fetched.state else {
                return Ok(Action::requeue(interval));
            };
            let files = fetched.files.unwrap_or_default();
            apply_layer(
                &layer, &ctx, &shared, &all, revision, &files, interval, timeout,
            )
            .await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn apply_layer(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    all: &LayerSet,
    revision: String,
    files: &Files,
    interval: Duration,
    timeout: Duration,
) -> Result<Action> {
    let name = layer.name_any();
    let access = access(ctx, shared, layer)?;
    let previous = layer.status.clone().unwrap_or_default();
    let attempt_key = (revision.clone(), layer.metadata.generation);
    let same_attempt = previous.last_attempted_revision.as_deref() == Some(revision.as_str())
        && previous.observed_generation == layer.metadata.generation;
    let previous_state = previous.state.as_deref().unwrap_or_default();
    // How long ago this very attempt was fully applied, if within the interval.
    let applied_ago = lock(&shared.memory)
        .get(&name)
        .and_then(|m| m.applied.as_ref())
        .filter(|(key, _)| *key == attempt_key)
        .map(|(_, at)| at.elapsed())
        .filter(|ago| *ago < interval);
    let prune_pending = previous
        .inventory
        .iter()
        .any(|e| e.status == ORPHANED_STATUS);
    // A reconcile request (the drift-observer's heal, or a user's) re-applies at once.
    let requested = reconcile_requested_at(layer)
        .is_some_and(|at| previous.last_handled_reconcile_at.as_deref() != Some(at.as_str()));
    if let Some(ago) = applied_ago.filter(|_| same_attempt && !prune_pending && !requested) {
        if previous_state == state::DEPLOYED {
            return Ok(Action::requeue(
                interval.saturating_sub(ago).max(Duration::from_secs(1)),
            ));
        }
        if (previous_state == state::APPLYING || previous_state == state::FAILED)
            && let Some(inventory) = recheck(&shared.reader, &previous.inventory).await?
        {
            let attempt = Attempt {
                revision,
                same: same_attempt,
                interval,
                timeout,
                prune_wait: None,
            };
            return judge(layer, ctx, shared, attempt, inventory).await;
        }
    }

    // Variables are read as the layer acts (its ServiceAccount's rights), then substituted
    // into every manifest; any failure fails this layer alone, with nothing applied.
    let manifests = match core_layers::substitute::layer_variables(
        &access.client,
        layer,
        &shared.args.default_source_namespace,
    )
    .await
    .and_then(|vars| source::layer_manifests_with(files, &layer.spec.source.path, &vars))
    {
        Ok(manifests) => manifests,
        Err(e @ (LayerError::Api { .. } | LayerError::Kube(_))) => return Err(e),
        Err(e) => {
            let why = match e {
                LayerError::Substitution(_) => reason::SUBSTITUTION_FAILED,
                _ => reason::INVALID_MANIFEST,
            };
            let mut report = Report::new(state::FAILED, why, e.to_string());
            report.attempted_revision = Some(revision);
            write_status(ctx, shared, layer, report).await?;
            return Ok(Action::requeue(interval));
        }
    };

    // A new attempt starts the timeout clock.
    if !same_attempt || previous_state != state::APPLYING {
        lock(&shared.memory)
            .entry(name.clone())
            .or_default()
            .attempt_started = Some(Instant::now());
    }

    // Ownership: never take an object another layer owns and still wants.
    let mut desired = Vec::with_capacity(manifests.len());
    for manifest in &manifests {
        desired.push(shared.reader.identity(manifest).await);
    }
    // Only the owners of objects this layer wants: a map of every layer's inventory, built by
    // each reconcile, grew with the fleet in every reconcile in flight.
    let wanted: BTreeSet<&ObjectRef> = desired.iter().collect();
    let owners: BTreeMap<ObjectRef, String> = all
        .iter()
        .filter(|(other, l)| **other != name && l.metadata.deletion_timestamp.is_none())
        .flat_map(|(other, l)| {
            l.status
                .iter()
                .flat_map(|s| s.inventory.iter())
                .filter(|e| e.status != ORPHANED_STATUS)
                .map(move |e| (ObjectRef::of_entry(e), other))
        })
        .filter(|(object, _)| wanted.contains(object))
        .map(|(object, other)| (object, other.clone()))
        .collect();
    let contested = desired.iter().any(|o| owners.contains_key(o));
    // The global desired state costs reading every other layer's source: only when an
    // object is contested or something left this layer.
    let leaving = previous
        .inventory
        .iter()
        .any(|e| !desired.contains(&ObjectRef::of_entry(e)));
    let wanted_by = if contested || leaving {
        shared.reader.wanted_by(&name, all).await
    } else {
        BTreeMap::new()
    };
    let conflicts = plan::ownership_conflicts(&name, &desired, &owners, &wanted_by);
    if !conflicts.is_empty() {
        let message = conflicts
            .iter()
            .map(|(object, owner)| {
                format!("{object} is also in layer {owner}, which applied it first")
            })
            .collect::<Vec<_>>()
            .join("; ");
        let mut report = Report::new(state::FAILED, reason::OWNERSHIP_CONFLICT, message);
        report.attempted_revision = Some(revision);
        write_status(ctx, shared, layer, report).await?;
        return Ok(Action::requeue(interval));
    }

    // Stage 1: CRDs and Namespaces, waited on before anything that may need them.
    let version = layer.spec.version.clone();
    let prepared: Vec<(usize, Value)> = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| (i, plan::prepare_manifest(&m.value, &name, &version)))
        .collect();
    let (mut definitions, rest): (Vec<_>, Vec<_>) = prepared.into_iter().partition(|(i, _)| {
        plan::is_definition(&manifests[*i].api_version, &manifests[*i].object.kind)
    });
    let mut inventory = Vec::new();
    let mut failures = Vec::new();
    definitions.sort_by_key(|(i, _)| plan::apply_key(&desired[*i], Stage::Definitions));
    apply_all(
        &access,
        shared,
        &name,
        &manifests,
        &definitions,
        &mut inventory,
        &mut failures,
    )
    .await;
    if failures.is_empty() && !definitions.is_empty() {
        wait_established(
            &shared.reader,
            &mut inventory,
            timeout.min(Duration::from_secs(60)),
        )
        .await?;
    }

    // Then cluster-scoped objects, then namespaced ones, each in kind order.
    if failures.is_empty() {
        let mut ordered = Vec::new();
        for (i, value) in rest {
            let m = &manifests[i];
            match shared.reader.resolve(&m.api_version, &m.object.kind).await {
                Ok(resolved) => {
                    let stage = plan::stage_of(&m.api_version, &m.object.kind, resolved.namespaced);
                    ordered.push((plan::apply_key(&desired[i], stage), i, value));
                }
                Err(e) => failures.push(format!("{}: {}: {e}", m.origin, m.object)),
            }
        }
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        if failures.is_empty() {
            let ordered: Vec<(usize, Value)> =
                ordered.into_iter().map(|(_, i, v)| (i, v)).collect();
            apply_all(
                &access,
                shared,
                &name,
                &manifests,
                &ordered,
                &mut inventory,
                &mut failures,
            )
            .await;
        }
    }
    if !failures.is_empty() {
        // Nothing is pruned after a failed apply; the inventory keeps everything we own.
        let owned: BTreeSet<ObjectRef> =
            previous.inventory.iter().map(ObjectRef::of_entry).collect();
        let mut kept = previous.inventory.clone();
        kept.extend(
            inventory
                .iter()
                .filter(|e| !owned.contains(&ObjectRef::of_entry(e)))
                .cloned(),
        );
        let message = plan::summarize(&failures, 3, "; ");
        let mut report = Report::new(state::FAILED, reason::APPLY_FAILED, message);
        report.inventory = Some(kept);
        report.attempted_revision = Some(revision);
        write_status(ctx, shared, layer, report).await?;
        return Ok(Action::requeue(interval.min(Duration::from_secs(30))));
    }
    lock(&shared.memory)
        .entry(name.clone())
        .or_default()
        .applied = Some((attempt_key, Instant::now()));

    // Prune what left the layer, now that the whole desired set is applied.
    let applied: BTreeSet<ObjectRef> = inventory.iter().map(ObjectRef::of_entry).collect();
    let stale_entries: Vec<&InventoryEntry> = previous
        .inventory
        .iter()
        .filter(|e| !applied.contains(&ObjectRef::of_entry(e)))
        .collect();
    let mut prune_wait = None;
    if !stale_entries.is_empty() {
        let grace = plan::orphan_grace(shared.args.orphan_grace, interval);
        let pending = prune(
            ctx,
            &access,
            shared,
            layer,
            &stale_entries,
            &wanted_by,
            grace,
        )
        .await?;
        if let Some((entries, wait)) = pending {
            prune_wait = Some(wait);
            inventory.extend(entries);
        }
    }
    let attempt = Attempt {
        revision,
        same: same_attempt,
        interval,
        timeout,
        prune_wait,
    };
    judge(layer, ctx, shared, attempt, inventory).await
}

/// Applies manifests in the given order, four at a time, recording inventory entries and
/// failures (`file: document N: object: error`).
async fn apply_all(
    access: &Access,
    shared: &Shared,
    layer: &str,
    manifests: &[Manifest],
    ordered: &[(usize, Value)],
    inventory: &mut Vec<InventoryEntry>,
    failures: &mut Vec<String>,
) {
    let now = Timestamp::now();
    // Collected first: a lazily mapped iterator held across the await trips the compiler's
    // higher-ranked Send check.
    let applies: Vec<_> = ordered
        .iter()
        .map(|(i, value)| {
            let m = &manifests[*i];
            async move {
                (
                    m,
                    access.applier.apply_dynamic(value, Some("default")).await,
                )
            }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(applies).buffered(4).collect().await;
    for (m, applied) in results {
        match applied {
            Ok(object) => {
                shared.metrics.count_applied(layer);
                if object.labels().contains_key(ORPHANED_LABEL) {
                    // Taken back within the grace window: it is ours again.
                    let _ = remove_orphaned_label(&shared.reader, access, &m.api_version, &object)
                        .await;
                }
                let value = with_type(
                    serde_json::to_value(&object).unwrap_or_default(),
                    &m.api_version,
                    &m.object.kind,
                );
                let (status, reason) = plan::inventory_health(&value, now);
                inventory.push(InventoryEntry {
                    api_version: m.api_version.clone(),
                    kind: m.object.kind.clone(),
                    namespace: object.namespace(),
                    name: object.name_any(),
                    status: status.to_string(),
                    reason,
                });
            }
            Err(e) => failures.push(format!("{}: {}: {e}", m.origin, m.object)),
        }
    }
}

fn with_type(mut value: Value, api_version: &str, kind: &str) -> Value {
    if let Some(obj) = value.as_object_mut() {
        obj.insert("apiVersion".into(), api_version.into());
        obj.insert("kind".into(), kind.into());
    }
    value
}

async fn remove_orphaned_label(
    reader: &Reader,
    access: &Access,
    api_version: &str,
    object: &DynamicObject,
) -> Result<()> {
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let resolved = reader.resolve(api_version, &kind).await?;
    let api = resolved.api(&access.client, object.namespace().as_deref());
    let patch = json!({"metadata": {"labels": {ORPHANED_LABEL: null}}});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| LayerError::api(format!("adopting {kind} {}", object.name_any()), e))?;
    Ok(())
}

/// Polls the definitions of the first stage until they are Current (CRDs Established,
/// Namespaces Active), refreshing their inventory status.
async fn wait_established(
    reader: &Reader,
    inventory: &mut [InventoryEntry],
    limit: Duration,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Some(fresh) = recheck(reader, inventory).await? {
            inventory.clone_from_slice(&fresh);
        }
        if inventory
            .iter()
            .all(|e| e.status == core_status::Status::Current.to_string())
            || started.elapsed() >= limit
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Re-reads the inventory's objects. `None` when one is missing (it must be re-applied).
async fn recheck(
    reader: &Reader,
    inventory: &[InventoryEntry],
) -> Result<Option<Vec<InventoryEntry>>> {
    let now = Timestamp::now();
    let mut out = Vec::with_capacity(inventory.len());
    for entry in inventory {
        if entry.status == ORPHANED_STATUS {
            out.push(entry.clone());
            continue;
        }
        let resolved = reader.resolve(&entry.api_version, &entry.kind).await?;
        let Some(value) = reader
            .get_value(&resolved, entry.namespace.as_deref(), &entry.name)
            .await?
        else {
            return Ok(None);
        };
        let (status, reason) = plan::inventory_health(&value, now);
        out.push(InventoryEntry {
            status: status.to_string(),
            reason,
            ..entry.clone()
        });
    }
    Ok(Some(out))
}

/// The uid and resourceVersion a stale object was read with.
type ReadAs = (Option<String>, Option<String>);

/// Executes the prune plan. Returns the entries still waiting (kept in the inventory) and
/// when to look again.
async fn prune(
    ctx: &Context,
    access: &Access,
    shared: &Shared,
    layer: &AddonsLayer,
    stale_entries: &[&InventoryEntry],
    wanted_by: &BTreeMap<ObjectRef, BTreeSet<String>>,
    grace: Duration,
) -> Result<Option<(Vec<InventoryEntry>, Duration)>> {
    let name = layer.name_any();
    let now = Timestamp::now();
    let read = crate::stale::read_stale(&shared.reader, &access.client, stale_entries).await?;
    let stale: Vec<StaleObject> = read.iter().map(|r| r.stale.clone()).collect();
    let by_ref: BTreeMap<ObjectRef, (&InventoryEntry, ResolvedKind, ReadAs)> = read
        .into_iter()
        .filter_map(|r| Some((r.stale.object, (r.entry, r.resolved?, r.read_as))))
        .collect();
    let plan = plan::prune_plan(&name, &stale, wanted_by, grace, now);
    let orphaned_value = plan::orphaned_label_value(now);
    // Fencing: only the replica the Lease names labels or deletes anything.
    let acts = !plan.orphan.is_empty() || !plan.delete.is_empty();
    if acts && !ctx.leadership.confirm().await {
        // Not confirmed: everything stays in the inventory, to be looked at again.
        let kept = stale_entries.iter().map(|e| (*e).clone()).collect();
        return Ok(Some((kept, Duration::from_secs(5))));
    }
    for object in &plan.orphan {
        if let Some((entry, resolved, _)) = by_ref.get(object) {
            let api = resolved.api(&access.client, entry.namespace.as_deref());
            let patch = json!({"metadata": {"labels": {ORPHANED_LABEL: orphaned_value}}});
            api.patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| LayerError::api(format!("labelling {object} orphaned"), e))?;
        }
    }
    let mut deleted = Vec::new();
    for object in &plan.delete {
        if let Some((entry, resolved, (uid, resource_version))) = by_ref.get(object) {
            let api = resolved.api(&access.client, entry.namespace.as_deref());
            // Only the object as it was read (not one taken over or recreated meanwhile).
            let params = core_k8s::leader::conditional_delete(
                uid.clone(),
                resource_version.clone(),
                Some(PropagationPolicy::Background),
            );
            match api.delete(&entry.name, &params).await {
                Ok(_) => deleted.push(object.to_string()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::info!(object = %object, "changed since it was read; pruning decided again next time");
                }
                Err(e) => return Err(LayerError::api(format!("pruning {object}"), e)),
            }
        }
    }
    if !deleted.is_empty() {
        shared.metrics.count_pruned(&name, deleted.len() as u64);
        let note = format!("pruned {}", deleted.join(", "));
        publish_event(ctx, layer, Severity::Normal, reason::PRUNED, "Prune", note).await;
    }
    if !plan.hand_over.is_empty() {
        let moved: Vec<String> = plan
            .hand_over
            .iter()
            .map(|(o, to)| format!("{o} to layer {to}"))
            .collect();
        let note = format!("handed over {}", moved.join(", "));
        publish_event(
            ctx,
            layer,
            Severity::Normal,
            reason::HANDED_OVER,
            "Prune",
            note,
        )
        .await;
    }
    if plan.orphan.is_empty() && plan.waiting.is_empty() {
        return Ok(None);
    }
    let pending: Vec<InventoryEntry> = plan
        .orphan
        .iter()
        .chain(plan.waiting.iter().map(|(o, _)| o))
        .filter_map(|o| by_ref.get(o))
        .map(|(entry, _, _)| InventoryEntry {
            status: ORPHANED_STATUS.into(),
            ..(*entry).clone()
        })
        .collect();
    let wait = plan
        .waiting
        .iter()
        .map(|(_, d)| *d)
        .chain(plan.orphan.iter().map(|_| grace))
        .min()
        .unwrap_or(grace);
    Ok(Some((pending, wait + Duration::from_millis(100))))
}

/// The apply attempt being judged.
#[derive(Debug)]
struct Attempt {
    revision: String,
    /// Same revision and generation as the previous pass.
    same: bool,
    interval: Duration,
    timeout: Duration,
    /// When the next orphaned object's grace window ends.
    prune_wait: Option<Duration>,
}

/// Turns the inventory into the layer's state: Deployed, still Applying, or Failed.
async fn judge(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    attempt: Attempt,
    inventory: Vec<InventoryEntry>,
) -> Result<Action> {
    let Attempt {
        revision,
        same: same_attempt,
        interval,
        timeout,
        prune_wait,
    } = attempt;
    let name = layer.name_any();
    let previous = layer.status.clone().unwrap_or_default();
    let previous_state = previous.state.as_deref().unwrap_or_default();
    let desired: Vec<InventoryEntry> = inventory
        .iter()
        .filter(|e| e.status != ORPHANED_STATUS)
        .cloned()
        .collect();
    let pending_prune = inventory.len() - desired.len();
    let elapsed = if same_attempt && previous_state == state::APPLYING {
        plan::state_since(layer, state::APPLYING)
            .map(|since| Timestamp::now().duration_since(since).unsigned_abs())
            .unwrap_or_default()
    } else {
        Duration::ZERO
    };
    let (report, action) = match plan::outcome(&desired, elapsed, timeout) {
        Outcome::Deployed => {
            let started = lock(&shared.memory)
                .get_mut(&name)
                .and_then(|m| m.attempt_started.take());
            if let Some(started) = started {
                shared
                    .metrics
                    .rollout_seconds
                    .observe(started.elapsed().as_secs_f64());
            }
            let mut message = format!(
                "layer version {} deployed: {} objects Current at revision {revision}",
                layer.spec.version,
                desired.len()
            );
            // Objects that left the layer wait out the orphan grace window before they are
            // pruned: Kraan's `Pruning` state until they are gone (dependents wait for
            // Deployed, which now means applied, healthy and pruned).
            let (layer_state, why) = if pending_prune > 0 {
                message.push_str(&format!(
                    "; pruning {pending_prune} orphaned objects after the grace window"
                ));
                (state::PRUNING, state::PRUNING)
            } else {
                (state::DEPLOYED, reason::SUCCEEDED)
            };
            let mut report = Report::new(layer_state, why, message);
            report.deployed_revision = Some(revision.clone());
            let next = prune_wait.map_or(interval, |wait| wait.min(interval));
            (report, Action::requeue(next))
        }
        Outcome::Waiting(message) if same_attempt && previous_state == state::FAILED => (
            Report::new(
                state::FAILED,
                reason::HEALTH_CHECK_FAILED,
                format!("still not ready: {message}"),
            ),
            Action::requeue(interval.min(Duration::from_secs(30))),
        ),
        Outcome::Waiting(message) => (
            Report::new(
                state::APPLYING,
                reason::PROGRESSING,
                format!("waiting for {message}"),
            ),
            Action::requeue(shared.args.health_poll),
        ),
        Outcome::Failed(message) => (
            Report::new(state::FAILED, reason::HEALTH_CHECK_FAILED, message),
            Action::requeue(interval.min(Duration::from_secs(30))),
        ),
    };
    let report = Report {
        inventory: Some(inventory),
        attempted_revision: Some(revision),
        ..report
    };
    write_status(ctx, shared, layer, report).await?;
    Ok(action)
}

/// Writes the status when it changed; publishes an Event when the state changed.
async fn write_status(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    report: Report,
) -> Result<()> {
    let name = layer.name_any();
    let previous = layer.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let mut history = previous.history.clone();
    let mut revision = previous.revision.clone();
    if let Some(deployed) = &report.deployed_revision {
        revision = Some(deployed.clone());
        let already = history
            .first()
            .is_some_and(|h| h.revision == *deployed && h.version == layer.spec.version);
        if !already {
            history.insert(
                0,
                HistoryEntry {
                    revision: deployed.clone(),
                    version: layer.spec.version.clone(),
                    deployed_at: core_status::augment::format_time(now),
                },
            );
            history.truncate(plan::HISTORY_LIMIT);
        }
    }
    let status = AddonsLayerStatus {
        state: Some(report.state.to_string()),
        conditions: plan::conditions(
            report.state,
            &report.reason,
            &report.message,
            layer.metadata.generation,
            &previous.conditions,
            now,
        ),
        revision,
        last_attempted_revision: report
            .attempted_revision
            .or(previous.last_attempted_revision.clone()),
        version: Some(layer.spec.version.clone()),
        observed_generation: layer.metadata.generation,
        inventory: report.inventory.unwrap_or(previous.inventory.clone()),
        resources: Vec::new(),
        blocked_by: report.blockers,
        history,
        last_handled_reconcile_at: reconcile_requested_at(layer)
            .or(previous.last_handled_reconcile_at.clone()),
        // The drift-observer's fields: never part of our apply (SSA would take them over).
        drift: Vec::new(),
    };
    let status = AddonsLayerStatus {
        resources: plan::kraan_resources(&status.inventory, &previous.resources, now),
        ..status
    };
    shared.metrics.set_state(&name, report.state);
    let mut ours = previous.clone();
    ours.drift.clear();
    ours.conditions
        .retain(|c| !condition::DRIFT_OBSERVER.contains(&c.type_.as_str()));
    if status == ours {
        return Ok(());
    }
    let value = serde_json::to_value(&status).map_err(|e| LayerError::Source(e.to_string()))?;
    ctx.applier.apply_status(layer, value).await?;
    if previous.state.as_deref() != Some(report.state) {
        let severity = if report.state == state::FAILED {
            Severity::Warning
        } else {
            Severity::Normal
        };
        let event_reason = if report.state == state::FAILED {
            report.reason.as_str()
        } else {
            report.state
        };
        let note = report.message.clone();
        publish_event(ctx, layer, severity, event_reason, "Reconcile", note).await;
        tracing::info!(layer = %name, state = report.state, message = %report.message, "layer state changed");
    }
    Ok(())
}

/// The layer's `strata.dev/reconcile-requested-at` annotation, if set.
fn reconcile_requested_at(layer: &AddonsLayer) -> Option<String> {
    layer
        .annotations()
        .get(RECONCILE_REQUESTED_AT)
        .filter(|v| !v.is_empty())
        .cloned()
}

/// Adds or removes our finalizer. `layer` must be the copy just read from the API server
/// (not the cache, which may be older than our own status write and would make the
/// compare-and-swap fail every time).
async fn set_finalizer(ctx: &Context, layer: &AddonsLayer, present: bool) -> Result<()> {
    let name = layer.name_any();
    let mut finalizers: Vec<String> = layer
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(FINALIZER.into());
    }
    if finalizers.as_slice() == layer.finalizers() {
        return Ok(());
    }
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    // resourceVersion makes this a compare-and-swap: a concurrent finalizer edit is retried.
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": layer.resource_version()}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| LayerError::api(format!("finalizer of layer {name}"), e))?;
    Ok(())
}

/// Publishes an Event about a layer; a failure to publish is logged, never fatal.
async fn publish_event(
    ctx: &Context,
    layer: &AddonsLayer,
    severity: Severity,
    reason: &str,
    action: &str,
    note: String,
) {
    if let Err(e) = ctx
        .events
        .publish(&layer.object_ref(&()), severity, reason, action, note)
        .await
    {
        tracing::debug!(layer = %layer.name_any(), error = %e, "publishing an event");
    }
}

/// Deleting a layer: its dependents go first, then its objects in reverse apply order; the
/// finalizer is released when they are gone, or after `timeout` with a Warning naming what
/// is still there (never a stuck layer, unlike kraan#212).
async fn teardown(layer: &AddonsLayer, ctx: &Context, shared: &Shared) -> Result<Action> {
    if !layer.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = layer.name_any();
    let all = shared.layers.state();
    let dependents = plan::dependents(&name, all.iter().map(|l| l.as_ref()));
    if !dependents.is_empty() {
        let mut report = Report::new(
            state::DELETING,
            state::DELETING,
            format!(
                "waiting for dependent layers to be deleted first: {}",
                dependents.join(", ")
            ),
        );
        report.blockers = dependents
            .iter()
            .map(|d| Blocker {
                name: d.clone(),
                reason: blocker::DEPENDENT.into(),
                message: format!("layer {d} depends on {name} and is torn down first"),
            })
            .collect();
        write_status(ctx, shared, layer, report).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    let access = access(ctx, shared, layer)?;
    let previous = layer.status.clone().unwrap_or_default();
    let mut entries: Vec<(_, &InventoryEntry)> = previous
        .inventory
        .iter()
        .map(|e| {
            let stage = plan::stage_of(&e.api_version, &e.kind, e.namespace.is_some());
            (plan::apply_key(&ObjectRef::of_entry(e), stage), e)
        })
        .collect();
    entries.sort_by(|a, b| b.0.cmp(&a.0));
    let mut remaining = Vec::new();
    for (_, entry) in entries {
        let object = ObjectRef::of_entry(entry);
        let Ok(resolved) = shared.reader.resolve(&entry.api_version, &entry.kind).await else {
            continue;
        };
        let api = resolved.api(&access.client, entry.namespace.as_deref());
        let Some(live) = api
            .get_opt(&entry.name)
            .await
            .map_err(|e| LayerError::api(format!("reading {object}"), e))?
        else {
            continue;
        };
        if live.labels().get(LAYER_LABEL) != Some(&name) {
            continue; // handed over to another layer
        }
        if live.metadata.deletion_timestamp.is_none() {
            // Fencing: confirmed right before, and only the object as just read.
            if !ctx.leadership.confirm().await {
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
            let params = core_k8s::leader::conditional_delete(
                live.metadata.uid.clone(),
                live.metadata.resource_version.clone(),
                Some(PropagationPolicy::Background),
            );
            match api.delete(&entry.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                // Changed since just now: it stays in `remaining`, tried again next time.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(LayerError::api(format!("deleting {object}"), e)),
            }
        }
        remaining.push(object.to_string());
    }
    let (_, timeout) = plan::timing_or_default(layer);
    let deleting_for = layer
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).unsigned_abs())
        .unwrap_or_default();
    if remaining.is_empty() || deleting_for >= timeout {
        if !remaining.is_empty() {
            let note = format!(
                "released after {}s with objects still terminating: {}",
                timeout.as_secs(),
                remaining.join(", ")
            );
            publish_event(
                ctx,
                layer,
                Severity::Warning,
                reason::TEARDOWN_TIMED_OUT,
                "Delete",
                note,
            )
            .await;
        }
        set_finalizer(ctx, layer, false).await?;
        shared.metrics.forget(&name);
        lock(&shared.memory).remove(&name);
        return Ok(Action::await_change());
    }
    let report = Report::new(
        state::DELETING,
        state::DELETING,
        format!(
            "waiting for {} objects to be deleted: {}",
            remaining.len(),
            plan::summarize(&remaining, 5, ", ")
        ),
    );
    write_status(ctx, shared, layer, report).await?;
    Ok(Action::requeue(Duration::from_secs(2)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn layer() -> AddonsLayer {
        serde_json::from_value(json!({
            "apiVersion": "strata.dev/v1alpha1",
            "kind": "AddonsLayer",
            "metadata": {"name": "apps", "generation": 3, "labels": {"a": "b"}},
            "spec": {"version": "1.0.0", "source": {"name": "repo", "path": "./apps"}},
            "status": {"state": "Deployed"},
        }))
        .unwrap()
    }

    #[test]
    fn only_what_the_owner_controls_wakes_a_layer() {
        let base = layer_intent(&layer());
        // Our own status writes do not.
        let mut status_only = layer();
        status_only.status = Some(AddonsLayerStatus {
            state: Some("Applying".into()),
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("99".into());
        assert_eq!(layer_intent(&status_only), base);
        // Spec, labels, a reconcile request, finalizers and deletion do.
        let mut changes: Vec<AddonsLayer> = Vec::new();
        let mut spec = layer();
        spec.metadata.generation = Some(4);
        changes.push(spec);
        let mut labels = layer();
        labels.labels_mut().insert("c".into(), "d".into());
        changes.push(labels);
        let mut requested = layer();
        requested
            .annotations_mut()
            .insert(RECONCILE_REQUESTED_AT.into(), "now".into());
        changes.push(requested);
        let mut finalized = layer();
        finalized.finalizers_mut().push(FINALIZER.into());
        changes.push(finalized);
        let mut deleted = layer();
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        changes.push(deleted);
        for changed in &changes {
            assert_ne!(layer_intent(changed), base, "{:?}", changed.metadata);
        }
    }
}
