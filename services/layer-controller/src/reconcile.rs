//! The async shell: reads the layer set, the source and the live objects, asks [`crate::plan`]
//! what to do, applies with server-side apply, prunes, and writes the layer's status.
//!
//! Triggers (no polling per hop): the layer itself; any change of a layer wakes the layers
//! that depend on it (and, while it is being deleted, the layers it depends on); a change of a
//! Flux source or a labelled ConfigMap wakes the layers reading it. A layer that is applying
//! re-checks its objects when one of them changes (`health_watch`), or every `--health-poll`
//! where a kind cannot be watched; every layer is re-applied every `interval`.
//!
//! Split by concern: `triggers` (what wakes a layer), `pass` (one reconcile: read, gate,
//! dispatch), `apply` (apply in stages and judge the result), `prune` (objects that left a
//! layer, and the teardown of a deleted one) and `status` (status writes, finalizer, Events).
//! This file holds the flags, the state shared by reconciles, whom a layer acts as, and [`run`].

mod apply;
mod first_report;
mod fresh;
mod gates;
mod health_watch;
mod index;
mod pass;
mod prune;
mod rollback;
mod status;
mod triggers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use core_k8s::Context;
use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef as LayerKey, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use crate::crd::AddonsLayer;
use crate::error::Result;
use crate::keys::SHARD_LABEL;
use crate::lock;
use crate::metrics::Metrics;
use crate::read::Reader;
use crate::source::Limits;
use core_k8s::labels::LabelSelector;
use core_layers::objects::ActingAccount;

use self::first_report::FirstReports;
use self::fresh::UnseenWrites;
use self::health_watch::HealthWakeups;
use self::index::LayerIndex;
use self::pass::reconcile;
use self::triggers::{
    gate_relevant_change, layer_intent, spawn_source_watchers, wake_on_layer_change,
};

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
    /// Only manage layers matching this label selector: one shard of the fleet, e.g.
    /// `sharding.fluxcd.io/key=a`, or `!sharding.fluxcd.io/key` for the default shard (Flux's
    /// `--watch-label-selector`). A layer whose dependency this replica does not manage
    /// stalls, naming both shards: a dependency chain cannot cross shards.
    #[arg(long, value_parser = core_k8s::labels::parse_flag)]
    pub layer_selector: Option<LabelSelector>,
    /// The label that names a layer's shard in messages and graphs.
    #[arg(long, default_value = SHARD_LABEL)]
    pub shard_key: String,
    /// How often a layer that is applying re-checks its objects' status when it cannot learn
    /// of their changes from a watch (a kind it may not list, a strict layer judging pods).
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub health_poll: Duration,
    /// Longest a new layer (one with no state yet) goes without a status once its objects are
    /// applied: its first report waits this long for the first attempt to settle, so that a
    /// layer deployed at once reports `Deployed` alone, not `Applying` first. 0 reports every
    /// state as it happens.
    #[arg(long, default_value = "3s", value_parser = duration)]
    pub first_report_grace: Duration,
    /// ServiceAccount (in the namespace of each layer's source) that layers without
    /// `spec.serviceAccountName` act as; unset: they act as the controller itself. Setting it
    /// locks multi-tenant clusters down (Flux's `--default-service-account`).
    #[arg(long)]
    pub default_service_account: Option<String>,
    /// The Prometheus that layers' metric gates (`spec.health.gates`) query, unless a layer
    /// names its own (`spec.health.prometheus`): its HTTP API's base URL.
    #[arg(long)]
    pub prometheus_url: Option<String>,
    /// A CA file (PEM) to trust for `--prometheus-url`, besides the system roots.
    #[arg(long, requires = "prometheus_url")]
    pub prometheus_ca_file: Option<std::path::PathBuf>,
    /// A file holding the bearer token sent to `--prometheus-url` (read at start).
    #[arg(long, requires = "prometheus_url")]
    pub prometheus_token_file: Option<std::path::PathBuf>,
    /// How often the gates of a layer are read while it waits on them, and while a Deployed
    /// layer is within a gate's `watch`.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub gate_poll: Duration,
}

/// Who a layer acts as toward the API server when it applies, reads and prunes its objects:
/// the controller itself, or a ServiceAccount it impersonates.
#[derive(Clone)]
struct Access {
    client: kube::Client,
    applier: core_k8s::apply::Applier,
    /// The impersonated user; `None` for the controller's own identity.
    user: Option<String>,
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
            user: None,
        });
    };
    let client = ctx.impersonating_client(&user)?;
    Ok(Access {
        applier: ctx.applier.with_client(client.clone()),
        client,
        user: Some(user),
    })
}

fn duration(value: &str) -> std::result::Result<Duration, String> {
    core_k8s::args::parse_duration(value).map_err(|e| e.to_string())
}

/// An attempt: the source revision and the layer's generation.
type Attempt = (String, Option<i64>);

/// What one process remembers between reconciles (nothing here is needed for correctness
/// after a restart; it only saves work and measures waits).
#[derive(Debug, Default)]
struct Memory {
    /// The attempt (revision, generation) last fully applied, and when.
    applied: Option<((String, Option<i64>), Instant)>,
    /// When an apply last sent every object of the layer, none left out as unchanged: a
    /// sync-period re-apply within the layer's interval since then sends only what changed
    /// (see `plan::resync_sends_only_changed`).
    all_sent: Option<Instant>,
    blocked_since: Option<Instant>,
    attempt_started: Option<Instant>,
    /// The attempt whose manifests were last kept for rollback, and what the Secret held
    /// then (packed: a few hundred bytes a revision), so the next attempt adds to it without
    /// reading it back.
    kept: Option<(Attempt, Vec<crate::rollback::Packed>)>,
}

/// State shared by all reconciles.
pub struct Shared {
    args: LayerArgs,
    metrics: Metrics,
    layers: Store<AddonsLayer>,
    reader: Reader,
    memory: Mutex<HashMap<String, Memory>>,
    cluster_version: Mutex<Option<(String, Instant)>>,
    health: Arc<HealthWakeups>,
    /// Our writes of each layer the watch has not shown yet (see `fresh`).
    writes: Arc<UnseenWrites>,
    /// Owners, dependents and readers of the cached layers (see `index`).
    index: Arc<LayerIndex>,
    /// New layers' first reports, held back while their first attempt settles.
    first_reports: FirstReports,
    /// `--prometheus-url`'s server, for layers' metric gates.
    prometheus: Option<layer_reader::prometheus::Prometheus>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("args", &self.args).finish()
    }
}

/// Runs the controller until shutdown.
pub async fn run(ctx: Arc<Context>, args: LayerArgs, metrics: Metrics) {
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let layer_config = core_k8s::labels::watcher_config(args.layer_selector.as_ref());
    // A layer is reconciled when what its owner controls changes: spec (generation), labels,
    // annotations (a reconcile request), finalizers or deletion, as Flux's controllers filter
    // theirs; never for a change of its status alone, which is this controller's own write.
    // Otherwise every status write of a blocked layer queued a reconcile of that layer, and
    // the wake-up from its dependency turning Deployed waited behind it: right after a new
    // revision, while all layers re-check at once, the first hops of a chain took 0.3–0.9 s.
    let (reader, writer) = kube::runtime::reflector::store();
    let (tx, rx) = mpsc::channel::<LayerKey<AddonsLayer>>(1024);
    let health = Arc::new(HealthWakeups::new(
        ctx.client.clone(),
        tx.clone(),
        ctx.shutdown.clone(),
    ));
    let writes = Arc::new(UnseenWrites::default());
    let index = Arc::new(LayerIndex::new(&args.default_source_namespace));
    let (departed, gone, seen) = (metrics.clone(), health.clone(), writes.clone());
    let indexed = index.clone();
    // A change of a layer wakes the layers that depend on it, from this same watch and only
    // once the cache holds the change: the dependent then judges its dependency from the
    // cache, never from a copy older than the change that woke it. (A second watch of the
    // layers used to carry these wake-ups, so each reconcile re-read its dependencies with a
    // GET in case the cache lagged that other watch.)
    let (dependents_tx, dependents_rx) = mpsc::unbounded_channel::<LayerKey<AddonsLayer>>();
    let (by_dependency, relisted) = (index.clone(), reader.clone());
    let intents = watcher(api.clone(), layer_config.clone())
        .default_backoff()
        // Nothing here reads a layer's managed fields, often its largest part: the cache of
        // a thousand layers keeps them out.
        .modify(|layer| layer.metadata.managed_fields = None)
        .reflect(writer)
        // A layer leaves this replica's watch when it is deleted or relabelled into another
        // shard: its series go with it, so exactly one shard reports each layer.
        .inspect({
            let gate_seen: Mutex<HashMap<String, (u64, u64)>> = Mutex::default();
            let wake_dependents = move |changed: &AddonsLayer| {
                if gate_relevant_change(changed, &gate_seen) {
                    for dependent in wake_on_layer_change(changed, &by_dependency) {
                        let _ = dependents_tx.send(dependent);
                    }
                }
            };
            move |event| match event {
                Ok(watcher::Event::Delete(layer)) => {
                    departed.forget(&layer.name_any());
                    gone.forget(&layer.name_any());
                    seen.forget(&layer.name_any());
                    indexed.remove(&layer.name_any());
                    wake_dependents(layer);
                }
                // Now in the cache: a reconcile may decide from it (see `fresh`).
                Ok(watcher::Event::Apply(layer)) => {
                    seen.seen(
                        &layer.name_any(),
                        layer.metadata.resource_version.as_deref(),
                    );
                    indexed.record(layer);
                    wake_dependents(layer);
                }
                // A relist's objects reach the cache together, when it is done: the cache
                // then holds exactly what was listed.
                Ok(watcher::Event::InitDone) => {
                    let layers = relisted.state();
                    indexed.rebuild(layers.iter().map(|l| l.as_ref()));
                    for layer in layers {
                        seen.seen(
                            &layer.name_any(),
                            layer.metadata.resource_version.as_deref(),
                        );
                        wake_dependents(&layer);
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) | Err(_) => {}
            }
        })
        .applied_objects()
        .predicate_filter(layer_intent, Default::default());
    let controller = Controller::for_stream(intents, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrent));
    let store = controller.store();
    let controller = controller
        .reconcile_on(futures::stream::unfold(
            dependents_rx,
            |mut rx| async move { rx.recv().await.map(|key| (key, rx)) },
        ))
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
    let prometheus = gates::default_prometheus(
        args.prometheus_url.as_deref(),
        args.prometheus_ca_file.as_deref(),
        args.prometheus_token_file.as_deref(),
    )
    .unwrap_or_else(|e| {
        // Gates then read as unknown, naming this: the layers wait rather than pass.
        tracing::error!("metric gates cannot read Prometheus: {e}");
        None
    });
    let shared = Arc::new(Shared {
        prometheus,
        first_reports: FirstReports::new(args.first_report_grace),
        args,
        metrics,
        layers: store,
        reader,
        memory: Mutex::default(),
        cluster_version: Mutex::default(),
        health,
        writes,
        index,
    });
    spawn_source_watchers(&ctx, shared.clone(), tx);
    core_k8s::controller::run_controller(ctx, "addonslayers", controller, move |layer, ctx| {
        reconcile(layer, ctx, shared.clone())
    })
    .await;
}

impl Shared {
    /// This replica's shard, when it reconciles a subset of the layers.
    fn shard(&self) -> Option<crate::plan::ShardScope<'_>> {
        let selector = self
            .args
            .layer_selector
            .as_ref()
            .filter(|s| !s.is_empty())?;
        Some(crate::plan::ShardScope {
            key: &self.args.shard_key,
            selector,
        })
    }

    /// Whether this replica still reconciles `layer` (it may have been relabelled into
    /// another shard since the reconcile was queued).
    fn owns(&self, layer: &AddonsLayer) -> bool {
        self.shard().is_none_or(|scope| scope.owns(layer))
    }

    /// Whether the layer is still in this replica's cache. A layer relabelled into another
    /// shard leaves it at once: a reconcile that was already running stops before its next
    /// apply or status write, so the new shard's first apply is the only one.
    fn still_watched(&self, name: &str) -> bool {
        self.shard().is_none() || self.layers.get(&LayerKey::new(name)).is_some()
    }

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
