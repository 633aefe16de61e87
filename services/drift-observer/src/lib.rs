//! drift-observer: detects drift between what the layers applied and what runs, reports it
//! field by field in the layer's status, and asks the layer-controller to heal it.
//!
//! The decisions — the comparison, a layer's drift rules, the drift state per layer — live in
//! `core-drift`; `observe` is the async shell (watches, dry runs, status, heal requests).

pub mod metrics;
pub mod observe;

// The decisions (comparison, rules, drift state) live in `core-drift`, shared with the
// admission-webhook and the CLI; this crate is the shell that watches and reports.
pub use core_drift::{compare, error, fields, rules, state};

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
