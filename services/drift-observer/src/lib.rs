//! drift-observer: detects drift between what the layers applied and what runs, reports it
//! field by field in the layer's status, and asks the layer-controller to heal it.
//!
//! `fields` and `compare` are the pure comparison (paths with merge-key selectors, Krake's
//! observer schema, managedFields attribution, masking); `rules` resolves a layer's
//! `spec.drift` for one object; `state` remembers drift, fights and back-off per layer;
//! `observe` is the async shell (watches, dry runs, status, heal requests).

pub mod compare;
pub mod error;
pub mod fields;
pub mod metrics;
pub mod observe;
pub mod rules;
pub mod state;

use prometheus_client::registry::Registry;

pub use observe::DriftArgs;

/// The service name: Lease `drift-observer-leader`, metrics `drift_observer_*`, field manager
/// `strata-drift-observer`.
pub const SERVICE: &str = "drift-observer";

pub async fn run(common: core_k8s::CommonArgs, args: DriftArgs) -> core_k8s::Result<()> {
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    core_k8s::runtime::run_service(SERVICE, common, registry, move |ctx| {
        observe::run(ctx, args, metrics)
    })
    .await
}
