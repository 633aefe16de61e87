//! rollout-operator: zone-by-zone rollouts of StatefulSet groups and replica coordination.
//!
//! This crate owns the rollout decisions: [`plan`] is the pure planner (also behind
//! `strata rollout plan`), [`zpdb`] the zone-aware disruption budget shared with the
//! admission webhook, [`reconcile`] the event-driven shell that executes plans.

pub mod crd;
pub mod flags;
pub mod keys;
pub mod metrics;
pub mod observed;
pub mod plan;
pub mod reconcile;
pub mod zpdb;

use prometheus_client::registry::Registry;

/// The service name: Lease `rollout-operator-leader`, metrics `rollout_operator_*`.
pub const SERVICE: &str = "rollout-operator";

pub async fn run(args: core_k8s::CommonArgs) -> core_k8s::Result<()> {
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    core_k8s::runtime::run_service(SERVICE, args, registry, |ctx| reconcile::run(ctx, metrics))
        .await
}
