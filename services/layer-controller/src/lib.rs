//! layer-controller: ordered, dependency-aware layers of addons (`AddonsLayer`).
//!
//! `plan` holds every decision (pure, table-tested), `source` (from `core-layers`) reads Flux
//! artifacts and ConfigMaps, `reconcile` is the thin shell that applies with server-side apply, prunes and
//! writes status. `graph` renders the layer DAG for `strata layers graph`.

pub mod deps;
pub mod flux_import;
pub mod graph;
pub mod kraan;
pub mod metrics;
pub mod plan;
pub mod prereqs;
pub mod reconcile;
pub mod stale;

// The API, sources and manifests live in `core-layers`, shared with the drift-observer.
pub use core_layers::{crd, error, keys, read, source, source_cache};

use prometheus_client::registry::Registry;

pub use reconcile::LayerArgs;

/// Locks a mutex whose data stays usable after a panic elsewhere (caches and counters).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The service name: Lease `layer-controller-leader`, metrics `layer_controller_*`, field
/// manager `strata-layer-controller`.
pub const SERVICE: &str = "layer-controller";

pub async fn run(common: core_k8s::CommonArgs, args: LayerArgs) -> core_k8s::Result<()> {
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    core_k8s::runtime::run_service(SERVICE, common, registry, move |ctx| {
        reconcile::run(ctx, args, metrics)
    })
    .await
}
