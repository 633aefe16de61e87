//! The async shell: learns what each layer applied (from the layer's source at the revision
//! it deployed), runs one shared watch per kind of applied object, checks each change of an
//! applied object, and writes drift into the layer's status and asks for heals.
//!
//! Cost per edit: a watch event; no request at all when the live object still matches the
//! manifest at every observed field; otherwise one server-side apply dry run (under the
//! layer-controller's field manager, so defaults, admission mutations and other managers'
//! fields are never drift), one status write, one Event, and in Heal mode one annotation
//! patch on the layer. Nothing is polled.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use core_k8s::Context;
use core_k8s::apply::{Applier, ResolvedKind};
use core_k8s::events::Severity;
use core_layers::crd::{AddonsLayer, DriftSpec};
use core_layers::keys::{
    LAYER_LABEL, RECONCILE_REQUESTED_AT, RECONCILE_TRACEPARENT, condition, state as layer_state,
};
use core_layers::objects::ActingAccount;
use core_layers::objects::{ObjectRef, SourceRef, SourceState};
use core_layers::source::{self, Limits};
use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use layer_reader::read::Reader;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use core_drift::check::drift_of;

use crate::compare;
use crate::error::{DriftError, Result};
use crate::metrics::Metrics;
use crate::rules::{self, Fight, ObjectMode, ObjectRules};
use crate::state::{self, LayerMemory};

/// Checks running at once (each is at most one dry run).
const WORKERS: usize = 8;
/// Live copies waiting for a worker at most (the watches wait beyond that).
const QUEUED_OBJECTS: usize = 256;
/// Status writes of one burst are coalesced for this long.
const COALESCE: Duration = Duration::from_millis(10);

/// Flags of the drift-observer on top of the common ones.
#[derive(Clone, Debug, clap::Args)]
pub struct DriftArgs {
    /// Namespace of a layer's source when `spec.source.namespace` is empty (the same default
    /// as the layer-controller's).
    #[arg(long, env = "POD_NAMESPACE", default_value = "strata-system")]
    pub default_source_namespace: String,
    /// Field manager the layer-controller applies with: the dry run uses it, and drift is
    /// attributed to any other manager.
    #[arg(long, default_value = "strata-layer-controller")]
    pub layer_field_manager: String,
    /// Largest artifact download, in bytes.
    #[arg(long, default_value_t = 50 << 20)]
    pub max_artifact_bytes: u64,
    /// Only observe layers matching this label selector: the same shard as the
    /// layer-controller beside it (e.g. `sharding.fluxcd.io/key=a`, or
    /// `!sharding.fluxcd.io/key` for the default shard).
    #[arg(long, value_parser = core_k8s::labels::parse_flag)]
    pub layer_selector: Option<core_k8s::labels::LabelSelector>,
    /// The user the layer-controller applies as (e.g.
    /// `system:serviceaccount:strata-system:layer-controller`): dry runs of layers that name
    /// no ServiceAccount are made as it, through impersonation, so the API server authorizes
    /// them exactly as the real apply — and the observer itself needs no write access.
    /// Unset: the observer dry-runs as itself (it then needs `patch` on what layers apply).
    #[arg(long)]
    pub apply_as: Option<String>,
    /// The layer-controller's `--default-service-account`: layers without
    /// `spec.serviceAccountName` apply as this account of their source's namespace, and are
    /// dry-run as it.
    #[arg(long)]
    pub default_service_account: Option<String>,
    /// Most layers whose view is (re)built at once; the others wait their turn. Building a
    /// view holds the layer's manifests and a dry run per object, so this bounds memory and
    /// API load at start-up whatever the number of layers. At least 1.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent: u16,
}

/// One object a layer applied, as the layer-controller applies it.
#[derive(Debug)]
struct Desired {
    layer: String,
    /// The ServiceAccount user the layer applies as, if any (its dry runs are made as it).
    acting_as: Option<String>,
    /// The layer's variable values read from Secrets: masked wherever a finding shows them.
    secrets: Arc<state::SecretValues>,
    api_version: String,
    resolved: ResolvedKind,
    /// The prepared manifest as compact JSON, parsed again for each check: as a tree it took
    /// ~5 KiB per object (a map node per small map), a third of the observer's heap at 4,000
    /// objects; checks are few and small next to that.
    manifest: Box<[u8]>,
    rules: ObjectRules,
}

impl Desired {
    fn manifest(&self) -> Result<Value> {
        serde_json::from_slice(&self.manifest).map_err(|e| {
            DriftError::Manifest(format!(
                "the prepared manifest of layer {}: {e}",
                self.layer
            ))
        })
    }
}

/// What a layer's view was built from: deployed revision, generation, `spec.drift` and the
/// layer's variables (`spec.postBuild`).
type BuiltFrom = (
    String,
    Option<i64>,
    Option<DriftSpec>,
    BTreeMap<String, String>,
);

#[derive(Debug, Default)]
struct LayerView {
    /// (revision, generation, drift spec) the objects were built from.
    built_from: Option<BuiltFrom>,
    spec_errors: Vec<String>,
    fight: Option<Fight>,
    objects: BTreeMap<ObjectRef, Arc<Desired>>,
    memory: LayerMemory,
    /// The heal request we sent last (annotation value).
    heal_sent: Option<String>,
    /// Oldest watch event whose effect is not in the status yet.
    pending_since: Option<Instant>,
    /// Objects drifted when the last heal request went out.
    healing: BTreeSet<ObjectRef>,
    seeded: bool,
    /// The layer-controller is rolling out a new revision or generation: what it applies is
    /// not drift, so checks wait until the new revision is deployed and rebuilt.
    paused: bool,
    /// Objects not compared since they were (re)learned: `Drifted` is written only once
    /// every object has been, so `False` always means "compared, and clean".
    unchecked: HashSet<ObjectRef>,
}

#[derive(Debug)]
enum Live {
    /// Read it (the desired state changed; no event brought the object).
    Fetch,
    Present(Value),
    Deleted,
}

#[derive(Debug)]
struct Work {
    live: Live,
    seq: u64,
    received: Instant,
    /// Held while a live copy waits (see [`QUEUED_OBJECTS`]).
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// State shared by the layer reconciles, the kind watches, the workers and the writer.
pub struct Observer {
    ctx: Arc<Context>,
    args: DriftArgs,
    metrics: Metrics,
    reader: Reader,
    /// Dry runs as the layer-controller: as this process, or (see [`Observer::dry_run_applier`])
    /// through impersonation of the user the layer applies as.
    layer_applier: Applier,
    layers: Mutex<HashMap<String, LayerView>>,
    index: Mutex<HashMap<ObjectRef, Arc<Desired>>>,
    watches: Mutex<HashMap<GroupVersionKind, CancellationToken>>,
    pending: Mutex<HashMap<ObjectRef, Work>>,
    queue: mpsc::UnboundedSender<ObjectRef>,
    /// Last recorded check per object (a newer event recorded first wins).
    recorded: Mutex<HashMap<ObjectRef, u64>>,
    seq: AtomicU64,
    queued: Arc<tokio::sync::Semaphore>,
    dirty: Mutex<BTreeSet<String>>,
    wake_writer: Notify,
    store: Store<AddonsLayer>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("args", &self.args)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the observer until shutdown.
pub async fn run(ctx: Arc<Context>, args: DriftArgs, metrics: Metrics) {
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let config = core_k8s::labels::watcher_config(args.layer_selector.as_ref());
    // Nothing here reads a layer's managed fields: the cache of a thousand layers keeps
    // them out.
    let (reader, writer) = kube::runtime::reflector::store();
    // A layer leaves the watch when it is deleted or relabelled into another shard; its view
    // (and the watches of kinds only it used) go with it, so exactly one observer watches
    // each layer's objects and writes its drift.
    let (departed, mut departures) = mpsc::unbounded_channel::<String>();
    let layers = watcher(api, config)
        .default_backoff()
        .modify(|layer| layer.metadata.managed_fields = None)
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(layer)) = event {
                let _ = departed.send(layer.name_any());
            }
        })
        .applied_objects();
    let controller = Controller::for_stream(layers, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrent));
    let store = controller.store();
    let (tx, rx) = mpsc::unbounded_channel();
    let limits = Limits {
        max_artifact_bytes: args.max_artifact_bytes,
        max_unpacked_bytes: args.max_artifact_bytes.saturating_mul(4),
        ..Limits::default()
    };
    let reader = Reader::new(
        ctx.client.clone(),
        ctx.applier.clone(),
        limits,
        args.default_source_namespace.clone(),
    );
    let observer = Arc::new(Observer {
        layer_applier: Applier::new(ctx.client.clone(), args.layer_field_manager.clone()),
        ctx: ctx.clone(),
        args,
        metrics,
        reader,
        layers: Mutex::default(),
        index: Mutex::default(),
        watches: Mutex::default(),
        pending: Mutex::default(),
        queue: tx,
        recorded: Mutex::default(),
        seq: AtomicU64::new(0),
        queued: Arc::new(tokio::sync::Semaphore::new(QUEUED_OBJECTS)),
        dirty: Mutex::default(),
        wake_writer: Notify::new(),
        store,
    });
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..WORKERS {
        tokio::spawn(observer.clone().work(rx.clone()));
    }
    tokio::spawn(observer.clone().write_loop());
    let dropping = observer.clone();
    tokio::spawn(async move {
        while let Some(name) = departures.recv().await {
            dropping.drop_layer(&name);
        }
    });
    let shared = observer.clone();
    core_k8s::controller::run_controller(ctx, "addonslayers", controller, move |layer, _ctx| {
        shared.clone().sync_layer(layer)
    })
    .await;
    for token in lock(&observer.watches).values() {
        token.cancel();
    }
}

impl Observer {
    /// Learns what a layer applied: its manifests at the deployed revision, prepared exactly
    /// as the layer-controller prepares them.
    async fn sync_layer(self: Arc<Self>, layer: Arc<AddonsLayer>) -> Result<Action> {
        let name = layer.name_any();
        if layer.metadata.deletion_timestamp.is_some() {
            self.drop_layer(&name);
            return Ok(Action::await_change());
        }
        let status = layer.status.clone().unwrap_or_default();
        let spec = layer.spec.drift.clone();
        let spec_errors = spec.as_ref().map(rules::spec_errors).unwrap_or_default();
        let fight = rules::fight_policy(spec.as_ref());
        {
            let mut layers = lock(&self.layers);
            let view = layers.entry(name.clone()).or_default();
            if view.spec_errors != spec_errors || view.fight != Some(fight) {
                view.spec_errors = spec_errors;
                view.fight = Some(fight);
                self.mark_dirty(&name);
            }
        }
        {
            // A new revision or generation on its way: pause until it is deployed (a heal's
            // re-apply of the same revision keeps being observed).
            let mut layers = lock(&self.layers);
            if let Some(view) = layers.get_mut(&name)
                && let Some((built_revision, built_generation, _, _)) = &view.built_from
            {
                let attempted = status
                    .last_attempted_revision
                    .as_ref()
                    .or(status.revision.as_ref());
                view.paused = attempted.is_some_and(|r| r != built_revision)
                    || layer.metadata.generation != *built_generation;
            }
        }
        // Only a deployed revision is compared: while the layer-controller applies, what
        // it applies is not drift.
        let Some(revision) = status
            .revision
            .clone()
            .filter(|_| status.state.as_deref() == Some(layer_state::DEPLOYED))
        else {
            return Ok(Action::await_change());
        };
        // The layer's variables are part of what it applies: a changed value (same revision,
        // same generation) is re-applied by the layer-controller, so the view is rebuilt too,
        // or the new value would look like drift.
        // Read as the layer-controller reads them: as the account the layer acts as (its
        // own, or the dry-run identity holding the controller's rights), so the observer
        // never learns a value the layer itself may not read.
        let acting_as = ActingAccount::of(
            &layer,
            &self.args.default_source_namespace,
            self.args.default_service_account.as_deref(),
        )
        .map(|account| account.user());
        let vars = layer_reader::variables::read_variables(
            &self.client_acting_as(acting_as.as_deref())?,
            &layer,
            &self.args.default_source_namespace,
        )
        .await?;
        let secrets = Arc::new(state::SecretValues::new(&vars.secret_values()));
        let key = (
            revision.clone(),
            layer.metadata.generation,
            spec.clone(),
            vars.values.clone(),
        );
        if lock(&self.layers)
            .get(&name)
            .and_then(|v| v.built_from.as_ref())
            == Some(&key)
        {
            self.wake_writer.notify_one();
            return Ok(Action::await_change());
        }
        let source_ref = SourceRef::of(&layer, &self.args.default_source_namespace);
        let fetched = self.reader.fetch(&source_ref).await?;
        let (SourceState::Ready { revision: current }, Some(files)) =
            (&fetched.state, &fetched.files)
        else {
            return Ok(Action::requeue(Duration::from_secs(30)));
        };
        if *current != revision {
            // The source moved on; the layer-controller will deploy it and wake us.
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        let manifests = source::layer_manifests_with(files, &layer.spec.source.path, &vars.values)?;
        let version = status
            .version
            .clone()
            .unwrap_or_else(|| layer.spec.version.clone());
        let mut objects = BTreeMap::new();
        for manifest in &manifests {
            let object = self.reader.identity(manifest).await;
            let resolved = match self
                .reader
                .resolve(&manifest.api_version, &object.kind)
                .await
            {
                Ok(resolved) => resolved,
                Err(e) => {
                    tracing::warn!(layer = %name, %object, error = %e, "kind not served: not observed");
                    continue;
                }
            };
            let mut prepared =
                core_layers::manifest::prepare_manifest(&manifest.value, &name, &version);
            compare::fold_string_data(&mut prepared);
            if let (true, Some(ns)) = (resolved.namespaced, &object.namespace)
                && let Some(meta) = prepared.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.insert("namespace".into(), ns.clone().into());
            }
            let rules = rules::object_rules(spec.as_ref(), &object, &prepared);
            if rules.mode == ObjectMode::Ignore {
                continue;
            }
            objects.insert(
                object,
                Arc::new(Desired {
                    layer: name.clone(),
                    acting_as: acting_as.clone(),
                    secrets: secrets.clone(),
                    api_version: manifest.api_version.clone(),
                    resolved,
                    manifest: serde_json::to_vec(&prepared)
                        .unwrap_or_default()
                        .into_boxed_slice(),
                    rules,
                }),
            );
        }
        self.install_layer(&name, key, objects, &status.drift);
        self.ensure_watches();
        Ok(Action::await_change())
    }

    /// Swaps in a layer's desired objects; objects new or changed are checked at once.
    fn install_layer(
        &self,
        name: &str,
        key: BuiltFrom,
        objects: BTreeMap<ObjectRef, Arc<Desired>>,
        status_drift: &[core_layers::crd::DriftEntry],
    ) {
        let mut recheck = Vec::new();
        {
            let mut layers = lock(&self.layers);
            let mut index = lock(&self.index);
            let view = layers.entry(name.to_string()).or_default();
            if !view.seeded {
                let by_name: BTreeMap<String, ObjectRef> =
                    objects.keys().map(|o| (o.to_string(), o.clone())).collect();
                view.memory = LayerMemory::from_status(status_drift, &by_name);
                view.seeded = true;
            }
            if view.paused {
                // Edits made while paused were not judged: look at everything once.
                recheck.extend(objects.keys().cloned());
                view.paused = false;
            }
            for (object, old) in &view.objects {
                if !objects.contains_key(object) {
                    index.remove(object);
                    view.memory.forget(object);
                } else if objects
                    .get(object)
                    .is_some_and(|new| new.manifest != old.manifest || new.rules != old.rules)
                {
                    recheck.push(object.clone());
                }
            }
            for (object, desired) in &objects {
                if !view.objects.contains_key(object) {
                    recheck.push(object.clone());
                }
                index.insert(object.clone(), desired.clone());
            }
            view.unchecked.retain(|o| objects.contains_key(o));
            view.unchecked.extend(recheck.iter().cloned());
            view.objects = objects;
            view.built_from = Some(key);
            self.metrics
                .objects_observed
                .set(i64::try_from(index.len()).unwrap_or(i64::MAX));
        }
        self.mark_dirty(name);
        // Objects of a kind whose watch is not running yet come with its initial list (and
        // its sweep finds the missing ones); only the others are read.
        let watched: HashSet<(String, String)> = lock(&self.watches)
            .keys()
            .map(|gvk| (gvk.group.clone(), gvk.kind.clone()))
            .collect();
        for object in recheck {
            if watched.contains(&(object.group.clone(), object.kind.clone())) {
                self.enqueue(object, Live::Fetch, Instant::now(), None);
            }
        }
    }

    fn drop_layer(self: &Arc<Self>, name: &str) {
        if let Some(view) = lock(&self.layers).remove(name) {
            let mut index = lock(&self.index);
            for object in view.objects.keys() {
                index.remove(object);
            }
            self.metrics
                .objects_observed
                .set(i64::try_from(index.len()).unwrap_or(i64::MAX));
        }
        self.metrics.forget(name);
        self.ensure_watches();
    }

    /// One watch per kind some layer applied; watches of kinds no layer uses any more stop.
    fn ensure_watches(self: &Arc<Self>) {
        let wanted: HashMap<GroupVersionKind, ResolvedKind> = lock(&self.index)
            .values()
            .map(|d| {
                let r = &d.resolved.resource;
                (
                    GroupVersionKind::gvk(&r.group, &r.version, &r.kind),
                    d.resolved.clone(),
                )
            })
            .collect();
        let mut watches = lock(&self.watches);
        watches.retain(|gvk, token| {
            let keep = wanted.contains_key(gvk);
            if !keep {
                tracing::info!(kind = %gvk.kind, "no layer applies this kind any more: watch stopped");
                token.cancel();
            }
            keep
        });
        for (gvk, resolved) in wanted {
            if watches.contains_key(&gvk) {
                continue;
            }
            let token = self.ctx.shutdown.child_token();
            watches.insert(gvk.clone(), token.clone());
            tracing::info!(kind = %gvk.kind, group = %gvk.group, "watching applied objects of this kind");
            tokio::spawn(self.clone().watch_kind(resolved, token));
        }
        self.metrics
            .watched_kinds
            .set(i64::try_from(watches.len()).unwrap_or(i64::MAX));
    }

    /// Follows every object of one kind that carries the layer label. Objects are not kept:
    /// each event is checked and dropped. A (re-)list ends with a sweep: observed objects of
    /// this kind the list did not return are gone (deleted while nobody watched).
    async fn watch_kind(self: Arc<Self>, resolved: ResolvedKind, stop: CancellationToken) {
        let api: Api<DynamicObject> = Api::all_with(self.ctx.client.clone(), &resolved.resource);
        let config = watcher::Config::default().labels(LAYER_LABEL);
        let group = resolved.resource.group.clone();
        let kind = resolved.resource.kind.clone();
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        let mut listed: Option<HashSet<ObjectRef>> = None;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = stop.cancelled() => return,
            };
            let Some(event) = event else { return };
            let received = Instant::now();
            let (object, live) = match event {
                Ok(watcher::Event::Init) => {
                    listed = Some(HashSet::new());
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    let listed = listed.take().unwrap_or_default();
                    let gone: Vec<ObjectRef> = lock(&self.index)
                        .keys()
                        .filter(|o| o.group == group && o.kind == kind && !listed.contains(*o))
                        .cloned()
                        .collect();
                    for object in gone {
                        self.enqueue(object, Live::Fetch, received, None);
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let deleting = o.metadata.deletion_timestamp.is_some();
                    (o, !deleting)
                }
                Ok(watcher::Event::Delete(o)) => (o, false),
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "watch error (retrying)");
                    continue;
                }
            };
            let key = ObjectRef {
                group: group.clone(),
                kind: kind.clone(),
                namespace: object.metadata.namespace.clone(),
                name: object.name_any(),
            };
            if let Some(listed) = listed.as_mut() {
                listed.insert(key.clone());
            }
            if !self.ctx.leadership.is_leader() || !lock(&self.index).contains_key(&key) {
                continue;
            }
            // Back-pressure: at most QUEUED_OBJECTS live copies wait for a worker, so a
            // (re-)list of thousands of objects never sits in memory at once.
            let Ok(permit) = self.queued.clone().acquire_owned().await else {
                return;
            };
            let live = if live {
                Live::Present(serde_json::to_value(&object).unwrap_or_default())
            } else {
                Live::Deleted
            };
            self.enqueue(key, live, received, Some(permit));
        }
    }

    /// Queues a check; a newer event for the same object replaces a queued one.
    fn enqueue(
        &self,
        object: ObjectRef,
        live: Live,
        received: Instant,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        if !self.ctx.leadership.is_leader() || !lock(&self.index).contains_key(&object) {
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut pending = lock(&self.pending);
        let queued = pending.contains_key(&object);
        match pending.get_mut(&object) {
            // A concrete live copy is never replaced by "read it".
            Some(work) if matches!(live, Live::Fetch) => work.seq = seq,
            Some(work) => {
                work.live = live;
                work.seq = seq;
                if work.permit.is_none() {
                    work.permit = permit;
                }
            }
            None => {
                pending.insert(
                    object.clone(),
                    Work {
                        live,
                        seq,
                        received,
                        permit,
                    },
                );
            }
        }
        if !queued {
            let _ = self.queue.send(object);
        }
    }

    async fn work(
        self: Arc<Self>,
        rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ObjectRef>>>,
    ) {
        loop {
            let next = tokio::select! {
                next = async { rx.lock().await.recv().await } => next,
                () = self.ctx.shutdown.cancelled() => return,
            };
            let Some(object) = next else { return };
            let Some(work) = lock(&self.pending).remove(&object) else {
                continue;
            };
            if let Err(e) = self.check(&object, work).await {
                self.ctx.metrics.observe_error(e.category());
                tracing::warn!(%object, error = %e, "drift check failed");
            }
        }
    }

    /// A client acting as a layer: as the user it applies as (`acting_as`, else
    /// `--apply-as`), impersonated, or as this process when neither is known. Its dry runs and
    /// its reads of the layer's variables go through it.
    fn client_acting_as(&self, acting_as: Option<&str>) -> Result<kube::Client> {
        Ok(match acting_as.or(self.args.apply_as.as_deref()) {
            Some(user) => self.ctx.impersonating_client(user)?,
            None => self.ctx.client.clone(),
        })
    }

    /// The applier a layer's dry runs go through ([`Observer::client_acting_as`]).
    fn dry_run_applier(&self, acting_as: Option<&str>) -> Result<Applier> {
        Ok(self
            .layer_applier
            .with_client(self.client_acting_as(acting_as)?))
    }

    /// Compares one object with what its layer applies and records the result.
    #[tracing::instrument(
        name = "drift.check",
        skip_all,
        fields(
            object = %object,
            layer = tracing::field::Empty,
            outcome = tracing::field::Empty,
            drifted_fields = tracing::field::Empty,
        )
    )]
    async fn check(&self, object: &ObjectRef, work: Work) -> Result<()> {
        let Some(desired) = lock(&self.index).get(object).cloned() else {
            return Ok(());
        };
        let span = tracing::Span::current();
        span.record("layer", desired.layer.as_str());
        if lock(&self.layers)
            .get(&desired.layer)
            .is_none_or(|view| view.paused)
        {
            return Ok(());
        }
        let started = Instant::now();
        self.ctx.metrics.reconcile_total.inc();
        let live = match work.live {
            Live::Present(value) => Some(value),
            Live::Deleted => None,
            Live::Fetch => {
                let api = self
                    .reader
                    .api(&desired.resolved, object.namespace.as_deref());
                api.get_opt(&object.name)
                    .await
                    .map_err(|e| core_k8s::Error::api(format!("reading {object}"), e))?
                    .filter(|o| o.metadata.deletion_timestamp.is_none())
                    .map(|o| serde_json::to_value(o).unwrap_or_default())
            }
        };
        let applier = self.dry_run_applier(desired.acting_as.as_deref())?;
        let manifest = desired.manifest()?;
        let (mut found, outcome) = drift_of(
            &applier,
            &object.kind,
            &manifest,
            live.as_ref(),
            &desired.rules,
        )
        .await?;
        desired.secrets.mask(&mut found);
        span.record("outcome", outcome);
        span.record("drifted_fields", found.len());
        self.metrics.count_check(outcome);
        self.ctx
            .metrics
            .reconcile_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        {
            let mut recorded = lock(&self.recorded);
            if recorded.get(object).is_some_and(|last| *last > work.seq) {
                return Ok(()); // a newer event of this object was recorded already
            }
            recorded.insert(object.clone(), work.seq);
        }
        self.record(object, &desired, found, work.received);
        Ok(())
    }

    fn record(
        &self,
        object: &ObjectRef,
        desired: &Desired,
        found: Vec<state::Finding>,
        received: Instant,
    ) {
        let layer = &desired.layer;
        let now = Timestamp::now();
        let mut layers = lock(&self.layers);
        let Some(view) = layers.get_mut(layer) else {
            return;
        };
        let fight = view.fight.unwrap_or(rules::fight_policy(None));
        let first_full_pass = view.unchecked.remove(object) && view.unchecked.is_empty();
        let recorded = view.memory.record(
            object,
            &desired.api_version,
            desired.rules.mode,
            found,
            fight,
            now,
        );
        let labels = Metrics::layer_kind(layer, &object.kind);
        for _ in &recorded.appeared {
            self.metrics.drift_detected.get_or_create(&labels).inc();
        }
        if recorded.new_fight {
            self.metrics.fights.get_or_create(&labels).inc();
        }
        if recorded.cleared && view.healing.remove(object) {
            self.metrics.drift_healed.get_or_create(&labels).inc();
        }
        if !recorded.appeared.is_empty() {
            let note = recorded
                .appeared
                .iter()
                .map(|f| {
                    let by = f
                        .manager
                        .as_deref()
                        .map(|m| format!(" (changed by {m})"))
                        .unwrap_or_default();
                    if f.path.is_empty() && f.actual == "(absent)" {
                        format!("deleted, the layer applies it{by}")
                    } else if f.path.is_empty() {
                        f.actual.clone()
                    } else {
                        format!(
                            "{}: expected {}, found {}{by}",
                            f.path, f.expected, f.actual
                        )
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            self.publish_on_object(object, desired, note);
        }
        if recorded.changed {
            view.pending_since.get_or_insert(received);
        }
        if recorded.changed || first_full_pass {
            drop(layers);
            self.mark_dirty(layer);
        }
    }

    fn publish_on_object(&self, object: &ObjectRef, desired: &Desired, note: String) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(desired.api_version.clone()),
            kind: Some(object.kind.clone()),
            namespace: object.namespace.clone(),
            name: Some(object.name.clone()),
            ..Default::default()
        };
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = ctx
                .events
                .publish(
                    &reference,
                    Severity::Warning,
                    state::reason::DRIFT_DETECTED,
                    "Observe",
                    note,
                )
                .await
            {
                tracing::debug!(error = %e, "drift event not published");
            }
        });
    }

    fn mark_dirty(&self, layer: &str) {
        lock(&self.dirty).insert(layer.to_string());
        self.wake_writer.notify_one();
    }

    /// Writes the status of layers whose drift changed and sends heal requests when due.
    async fn write_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.wake_writer.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = self.ctx.shutdown.cancelled() => return,
            }
            if !self.ctx.leadership.is_leader() {
                continue;
            }
            tokio::time::sleep(COALESCE).await;
            let now = Timestamp::now();
            let mut names: BTreeSet<String> = std::mem::take(&mut *lock(&self.dirty));
            {
                let mut layers = lock(&self.layers);
                for (name, view) in layers.iter_mut() {
                    if let Some(fight) = view.fight {
                        let before = view.memory.fights().count();
                        view.memory.expire_fights(fight, now);
                        if view.memory.fights().count() != before {
                            names.insert(name.clone());
                        }
                    }
                    if view.memory.heal_due(now) {
                        names.insert(name.clone());
                    }
                }
            }
            for name in names {
                if let Err(e) = self.write_layer(&name, now).await {
                    self.ctx.metrics.observe_error(e.category());
                    tracing::warn!(layer = %name, error = %e, "writing drift status");
                    lock(&self.dirty).insert(name);
                }
            }
        }
    }

    async fn write_layer(&self, name: &str, now: Timestamp) -> Result<()> {
        let Some(layer) = self
            .store
            .get(&kube::runtime::reflector::ObjectRef::new(name))
        else {
            return Ok(());
        };
        let status = layer.status.clone().unwrap_or_default();
        let (body, pending_since, heal) = {
            let mut layers = lock(&self.layers);
            let Some(view) = layers.get_mut(name) else {
                return Ok(());
            };
            // Nothing to say until every object was compared (a bad spec is said at once).
            if view.spec_errors.is_empty()
                && (view.built_from.is_none() || !view.unchecked.is_empty())
            {
                return Ok(());
            }
            let fight = view.fight.unwrap_or(rules::fight_policy(None));
            let outstanding = view
                .heal_sent
                .as_ref()
                .is_some_and(|sent| status.last_handled_reconcile_at.as_ref() != Some(sent));
            let heal = (!outstanding && view.memory.heal_due(now)).then(|| {
                view.memory.heal_requested(now);
                view.healing = view.objects.keys().cloned().collect();
                let value = now.to_string();
                view.heal_sent = Some(value.clone());
                value
            });
            let conditions = view.memory.conditions(
                view.objects.len(),
                &view.spec_errors,
                fight,
                layer.metadata.generation,
                &status.conditions,
                now,
            );
            let drift = view.memory.entries();
            self.metrics
                .drifted_objects
                .get_or_create(&Metrics::layer(name))
                .set(i64::try_from(view.memory.drifted_objects()).unwrap_or(i64::MAX));
            let mut status_body = json!({ "conditions": conditions });
            if !drift.is_empty() {
                status_body["drift"] = serde_json::to_value(&drift).unwrap_or_default();
            }
            (status_body, view.pending_since.take(), heal)
        };
        let current_ours = json!({
            "conditions": status
                .conditions
                .iter()
                .filter(|c| condition::DRIFT_OBSERVER.contains(&c.type_.as_str()))
                .collect::<Vec<_>>(),
            "drift": status.drift,
        });
        let unchanged = current_ours["conditions"] == body["conditions"]
            && current_ours["drift"] == *body.get("drift").unwrap_or(&json!([]));
        if !unchanged {
            self.ctx.applier.apply_status(layer.as_ref(), body).await?;
        }
        if let Some(since) = pending_since {
            self.metrics
                .detection_seconds
                .observe(since.elapsed().as_secs_f64());
        }
        if let Some(value) = heal
            && let Err(e) = self.request_heal(&layer, &value).await
        {
            // Not sent: forget it, or it would count as outstanding forever and no heal
            // would ever be asked again.
            if let Some(view) = lock(&self.layers).get_mut(name)
                && view.heal_sent.as_deref() == Some(value.as_str())
            {
                view.heal_sent = None;
            }
            return Err(e);
        }
        Ok(())
    }

    /// Asks the layer-controller to re-apply the layer now (Flux's requestedAt convention),
    /// with this span's trace context so the re-apply joins the trace.
    #[tracing::instrument(name = "drift.heal_request", skip_all, fields(layer = %layer.name_any(), requested_at = %value))]
    async fn request_heal(&self, layer: &AddonsLayer, value: &str) -> Result<()> {
        let name = layer.name_any();
        let api: Api<AddonsLayer> = Api::all(self.ctx.client.clone());
        // null removes a traceparent left by an earlier request when traces are off now.
        let traceparent = core_k8s::telemetry::traceparent();
        let patch = json!({ "metadata": { "annotations": {
            RECONCILE_REQUESTED_AT: value,
            RECONCILE_TRACEPARENT: traceparent,
        } } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| core_k8s::Error::api(format!("requesting a heal of layer {name}"), e))?;
        self.metrics
            .heal_requests
            .get_or_create(&Metrics::layer(&name))
            .inc();
        tracing::info!(layer = %name, requested_at = %value, "heal requested");
        let reference = layer.object_ref(&());
        if let Err(e) = self
            .ctx
            .events
            .publish(
                &reference,
                Severity::Normal,
                state::reason::HEAL_REQUESTED,
                "Heal",
                "drift found: asked the layer-controller to re-apply the layer",
            )
            .await
        {
            tracing::debug!(error = %e, "heal event not published");
        }
        Ok(())
    }
}
