//! layer-controller: ordered, dependency-aware layers of addons (`AddonsLayer`).
//!
//! The decisions (`plan`, pure and table-tested) and the reading of sources live in
//! `core-layers`; `reconcile` is the shell that applies with server-side apply, prunes and
//! writes status.

pub mod metrics;
pub mod reconcile;

// The API, sources, manifests and every decision live in `core-layers`, shared with the
// drift-observer, the admission-webhook and the CLI; this crate is the shell that acts on them.
pub use core_layers::{crd, deps, error, keys, plan, rollback, source};
pub use layer_reader::{read, source_cache, stale};

use prometheus_client::registry::Registry;

pub use reconcile::LayerArgs;

/// Locks a mutex whose data stays usable after a panic elsewhere (caches and counters).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The service name: Lease `layer-controller-leader`, metrics `layer_controller_*`, field
/// manager `strata-layer-controller`.
pub const SERVICE: &str = core_layers::keys::LAYER_CONTROLLER;

pub async fn run(common: core_k8s::CommonArgs, args: LayerArgs) -> core_k8s::Result<()> {
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    core_k8s::runtime::run_service(SERVICE, common, registry, move |ctx| {
        reconcile::run(ctx, args, metrics)
    })
    .await
}
